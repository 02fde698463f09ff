"""Differential privacy: mechanisms, accountants, budgets and learners.

Layers (each module imports only from those above it; nothing here imports
``smcdp.net``, ``smcdp.protocols``, the party runtime or any CLI):

    validation    argument checks, public bounds, PSD repair
    conversions   Gaussian profile and calibration, RDP / zCDP -> (epsilon, delta)
    samplers      exact discrete samplers, secure / seeded randomness sources
    mechanisms    Laplace, Gaussian, vector mechanisms on a power-of-two grid
    events        privacy events
    accountants   one accountant per composition method
    budget        the PrivacyBudget interface, the in-memory BudgetAccountant
    ledger        the SQLite ledger and LedgerBudget (same interface)
    learners/     scikit-learn estimators taking ``accountant=``
    cli           ``smcdp account`` / ``smcdp budget``

The public names below are exported lazily (PEP 562 ``__getattr__``):
``import smcdp.dp.mechanisms`` does not import scikit-learn; the first access
to e.g. ``smcdp.dp.LogisticRegression`` does.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "LogisticRegression": "learners.logistic",
    "logistic_sensitivity": "learners.logistic",
    "LargeMarginGaussianClassifier": "learners.large_margin",
    "GaussianBayesClassifier": "learners.bayes",
    "bhattacharyya_bound": "learners.bayes",
    "GaussianMixture": "learners.mixture",
    "FactorAnalysis": "learners.factor_analysis",
    "KMeans": "learners.kmeans",
    "solve_dpem_budget": "learners.dpem_budget",
    "PrivacyLeakWarning": "validation",
    "InvalidParameter": "validation",
    "LaplaceMechanism": "mechanisms",
    "GaussianMechanism": "mechanisms",
    "VectorMechanism": "mechanisms",
    "PrivacyAccountant": "accountants",
    "PrivacyBudget": "budget",
    "PrivacyCost": "budget",
    "BudgetAccountant": "budget",
    "BudgetExceeded": "budget",
    "BudgetStatus": "budget",
    "Charge": "budget",
    "Ledger": "ledger",
    "LedgerBudget": "ledger",
}

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
assert sorted(__all__) == sorted(_LAZY)


def __getattr__(name: str) -> Any:
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'smcdp.dp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
