"""scikit-learn's estimator checks for every learner.

Each estimator is checked twice: with its private defaults (finite epsilon, a seeded
``random_state`` -- the checks set ``random_state`` themselves where a parameter of
that name exists) and with ``epsilon=inf``.  Checks that cannot apply to a
randomised estimator are listed in EXPECTED_FAILURES with the reason; everything
else must pass.
"""

import re
import warnings

import pytest
from sklearn.utils.estimator_checks import estimator_checks_generator

from smcdp.dp import (
    FactorAnalysis,
    GaussianBayesClassifier,
    GaussianMixture,
    KMeans,
    LargeMarginGaussianClassifier,
    LogisticRegression,
)

INF = float("inf")

ESTIMATORS = [
    LogisticRegression(random_state=0),
    LogisticRegression(epsilon=INF, data_norm=None),
    LogisticRegression(mechanism="output", random_state=0),
    GaussianBayesClassifier(bounds=(-10, 10), random_state=0),
    GaussianBayesClassifier(epsilon=INF),
    GaussianBayesClassifier(bounds=(-10, 10), covariance="diag", query="mean", random_state=0),
    LargeMarginGaussianClassifier(data_norm=20.0, random_state=0),
    LargeMarginGaussianClassifier(epsilon=INF, data_norm=None),
    GaussianMixture(n_components=2, data_norm=20.0, random_state=0),
    GaussianMixture(n_components=2, epsilon=INF, data_norm=None, random_state=0),
    FactorAnalysis(data_norm=20.0, max_iter=300, random_state=0),
    FactorAnalysis(epsilon=INF, data_norm=None, max_iter=300, random_state=0),
    KMeans(3, bounds=(-10, 10), random_state=0),
    KMeans(3, epsilon=INF, random_state=0),
]

_REASON_UNDERFLOW = (
    "with epsilon=1 on the checks' 100-300 rows the noisy covariances make the model extremely "
    "over-confident (log-probabilities below -700); predict_proba = exp(predict_log_proba) underflows "
    "to 0, so log(predict_proba) is -inf where predict_log_proba is finite.  The check compares the two "
    "with rtol only and cannot accept that; the non-private instance passes it."
)

_REASON_DPLLOYD = (
    "check_clustering asks for an adjusted Rand index > 0.4 on 150 rows.  DPLloyd with epsilon=1, zCDP "
    "over 5 iterations and public bounds +-10 adds Laplace noise of scale ~(2 + 40)/0.09 ~ 460 to every "
    "cluster sum of ~50 rows, so the centres are essentially random; no honest DP k-means reaches that "
    "accuracy there.  The non-private instance passes."
)

_REASON_N_ITER = (
    "check_non_transformer_estimators_n_iter asks an estimator with max_iter to report n_iter_ >= 1.  A private "
    "fit keeps no n_iter_: the solver's iteration count is computed from the data and the noise, not from the "
    "released coefficients, and is not differentially private (docs/dp-learners.md); keep_diagnostics=True keeps "
    "it with a PrivacyLeakWarning, and the non-private instance passes."
)

EXPECTED_FAILURES = {
    ("GaussianBayesClassifier", True): {"check_classifiers_train": _REASON_UNDERFLOW},
    ("KMeans", True): {"check_clustering": _REASON_DPLLOYD},
    ("LogisticRegression", True): {"check_non_transformer_estimators_n_iter": _REASON_N_ITER},
    ("LargeMarginGaussianClassifier", True): {"check_non_transformer_estimators_n_iter": _REASON_N_ITER},
}


def _expected(est):
    private = est.get_params().get("epsilon", 1.0) != INF
    return EXPECTED_FAILURES.get((type(est).__name__, private), {})


def _check_id(x) -> str:
    """An estimator by its repr (the parameters it was given), a check by its name and bound arguments."""
    if hasattr(x, "get_params"):
        return re.sub(r"\s", "", repr(x))
    func = getattr(x, "func", x)
    kwargs = getattr(x, "keywords", {})
    return func.__name__ + (f"({','.join(f'{k}={v}' for k, v in kwargs.items())})" if kwargs else "")


#: what parametrize_with_checks makes, as a list: it hands pytest a generator, which pytest 10 will refuse
CASES = [
    case
    for est in ESTIMATORS
    for case in estimator_checks_generator(est, legacy=True, expected_failed_checks=_expected(est), mark="xfail")
]


@pytest.mark.parametrize("estimator, check", CASES, ids=_check_id)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        # data_norm=None / bounds=None on private instances warn by design; the checks
        # fit on data whose bounds are unknown to us.
        warnings.simplefilter("ignore")
        check(estimator)
