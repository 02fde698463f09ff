"""Every DP learner's numeric hyperparameters, fuzzed (NaN, ±inf, 1e308, subnormals, zero, negatives, huge integers,
wrong types): ``fit`` on a small data set either succeeds -- and then ``predict`` / ``transform`` / ``score_samples``
give finite numbers -- or raises InvalidParameter (or, for a private large-margin fit whose solver did not reach its
tolerance within ``max_iter``, PreconditionFailed saying nothing was released and which knob to turn: a private
logistic fit always reaches its certified tolerance), never another exception,
and within seconds.  The hyperparameters
are read from each estimator's signature, so one added later is fuzzed without touching this file."""

from __future__ import annotations

import inspect
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import smcdp.dp as dp
from smcdp.dp.validation import InvalidParameter
from smcdp.errors import PreconditionFailed
from tests.support.limits import time_limit

LEARNERS = [
    "LogisticRegression",
    "LargeMarginGaussianClassifier",
    "GaussianBayesClassifier",
    "GaussianMixture",
    "FactorAnalysis",
    "KMeans",
]
#: loop counts: fuzzed over small values only (a legitimate 10^6 iterations takes its time; it is no bug)
LOOPS = {"max_iter", "n_iter"}
#: seconds one fit and its outputs may take
LIMIT = 20

VALUES = st.one_of(
    st.sampled_from(
        [0, 0.0, -0.0, -1, 1, 2, 0.5, 1e-6, 1e-300, 5e-324, 1e308, math.inf, -math.inf, math.nan, True, 2**64, "1"]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**70), 2**70),
    st.floats(min_value=1e-12, max_value=1e6),
)
LOOP_VALUES = st.one_of(st.integers(-2, 30), st.sampled_from([0, 1.5, math.nan, True, "3"]))
#: component counts: small ones fitted, huge ones refused before anything is allocated (MAX_COMPONENTS)
COUNTS = {"n_components", "n_clusters"}
COUNT_VALUES = st.one_of(st.integers(-2, 8), st.sampled_from([0, 1.5, math.nan, True, "3", 10**6, 2**70]))


def _numeric(cls) -> list[str]:
    sig = inspect.signature(cls.__init__)
    return [
        p.name
        for p in sig.parameters.values()
        if p.name not in ("self", "random_state")
        and isinstance(p.default, (int, float))
        and not isinstance(p.default, bool)
    ]


def _data():
    rng = np.random.default_rng(3)
    X = np.vstack([rng.normal(-1.0, 0.5, (30, 2)), rng.normal(1.0, 0.5, (30, 2))])
    X /= max(1.0, float(np.linalg.norm(X, axis=1).max()))  # inside every default data_norm / bounds
    y = np.repeat([0, 1], 30)
    return X, y


X, Y = _data()


def _fit_and_use(cls, params):
    # a solver's iterations bounded unless fuzzed: this checks validation and finite outputs, not how fast a
    # fit converges (lam = 1e-12 is legitimately ill-conditioned: 20,000 iterations at the default max_iter)
    bounded = {"max_iter": 300} if "max_iter" in _numeric(cls) else {}
    est = cls(**{**bounded, **params}, random_state=5)
    est.fit(X, Y)
    for name in ("predict", "predict_proba", "transform", "score_samples"):
        if hasattr(est, name):
            out = np.asarray(getattr(est, name)(X), dtype=np.float64)
            assert np.all(np.isfinite(out)), f"{cls.__name__}({params}).{name} is not finite"


@pytest.mark.parametrize(
    ("name", "params"),
    [
        # explore seed 134: the eigenvalue floor far below float64's resolution of the covariances made a matrix
        # Cholesky refused (numpy.linalg.LinAlgError escaped from fit)
        ("GaussianMixture", {"epsilon": 1.0, "min_eigenvalue": 5.3940046904923256e-39}),
        # explore seeds 222 and 260: noise at epsilon = 1e-45 made W W^T so large that the floor on Psi vanished
        # beside it, and score_samples' Cholesky refused the covariance (LinAlgError)
        ("FactorAnalysis", {"epsilon": 1.401298464324817e-45, "delta": 1e-300}),
    ],
)
def test_what_explore_seeds_found_stays_fixed(name, params):
    with time_limit(LIMIT, f"{name}({params}).fit"):
        _fit_and_use(getattr(dp, name), params)


def test_every_learner_has_numeric_hyperparameters():
    for name in LEARNERS:
        assert len(_numeric(getattr(dp, name))) >= 2, name


@pytest.mark.parametrize("name", LEARNERS)
def test_hyperparameters_are_accepted_or_invalid_parameter(name):
    cls = getattr(dp, name)
    fields = _numeric(cls)

    @settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(st.data())
    def one(data):
        chosen = data.draw(st.lists(st.sampled_from(fields), min_size=1, max_size=2, unique=True))
        params = {
            f: data.draw(LOOP_VALUES if f in LOOPS else COUNT_VALUES if f in COUNTS else VALUES, label=f)
            for f in chosen
        }
        with time_limit(LIMIT, f"{name}({params}).fit"):
            try:
                _fit_and_use(cls, params)
            except InvalidParameter:
                pass
            except PreconditionFailed as exc:  # a private fit refuses a point short of the minimiser
                assert "nothing was released (raise max_iter" in str(exc), exc

    one()


def test_the_limit_catches_a_slow_fit():
    # a Python loop: the alarm's handler runs between bytecodes (a call that stays in C, sum(iter(int, 1)) say,
    # would not be interrupted -- neither by this limit nor by pytest-timeout's signal)
    with pytest.raises(AssertionError, match="took more than"), time_limit(1, "a slow fit"):
        while True:
            pass
