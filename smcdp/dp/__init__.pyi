# Type stub of smcdp/dp/__init__.py: what type checkers see of the names it exports lazily (PEP 562).
# A stub rather than `if TYPE_CHECKING:` imports, which would make the package and its modules import each other.
from smcdp.dp.accountants import PrivacyAccountant as PrivacyAccountant
from smcdp.dp.budget import BudgetAccountant as BudgetAccountant
from smcdp.dp.budget import BudgetExceeded as BudgetExceeded
from smcdp.dp.budget import BudgetStatus as BudgetStatus
from smcdp.dp.budget import Charge as Charge
from smcdp.dp.budget import PrivacyBudget as PrivacyBudget
from smcdp.dp.budget import PrivacyCost as PrivacyCost
from smcdp.dp.learners.bayes import GaussianBayesClassifier as GaussianBayesClassifier
from smcdp.dp.learners.bayes import bhattacharyya_bound as bhattacharyya_bound
from smcdp.dp.learners.dpem_budget import solve_dpem_budget as solve_dpem_budget
from smcdp.dp.learners.factor_analysis import FactorAnalysis as FactorAnalysis
from smcdp.dp.learners.kmeans import KMeans as KMeans
from smcdp.dp.learners.large_margin import LargeMarginGaussianClassifier as LargeMarginGaussianClassifier
from smcdp.dp.learners.logistic import LogisticRegression as LogisticRegression
from smcdp.dp.learners.logistic import logistic_sensitivity as logistic_sensitivity
from smcdp.dp.learners.mixture import GaussianMixture as GaussianMixture
from smcdp.dp.ledger import Ledger as Ledger
from smcdp.dp.ledger import LedgerBudget as LedgerBudget
from smcdp.dp.mechanisms import GaussianMechanism as GaussianMechanism
from smcdp.dp.mechanisms import LaplaceMechanism as LaplaceMechanism
from smcdp.dp.mechanisms import VectorMechanism as VectorMechanism
from smcdp.dp.validation import InvalidParameter as InvalidParameter
from smcdp.dp.validation import PrivacyLeakWarning as PrivacyLeakWarning

__all__ = [
    "BudgetAccountant",
    "BudgetExceeded",
    "BudgetStatus",
    "Charge",
    "FactorAnalysis",
    "GaussianBayesClassifier",
    "GaussianMechanism",
    "GaussianMixture",
    "InvalidParameter",
    "KMeans",
    "LaplaceMechanism",
    "LargeMarginGaussianClassifier",
    "Ledger",
    "LedgerBudget",
    "LogisticRegression",
    "PrivacyAccountant",
    "PrivacyBudget",
    "PrivacyCost",
    "PrivacyLeakWarning",
    "VectorMechanism",
    "bhattacharyya_bound",
    "logistic_sensitivity",
    "solve_dpem_budget",
]
