"""The numeric arguments of smcdp.dp's mechanisms, calibrations, accountants and budgets, fuzzed: every call either
returns finite numbers or raises InvalidParameter -- never another exception, never a hang (each call gets a few
seconds; the calibrations' last steps once looped for hours at delta = 5e-324 and at rho near 1e-14).

The protocols' parameters have their own fuzzing (tests/unit/protocols/test_params_numbers.py); this is the library
a party's own code calls with its own numbers."""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import partial

import numpy as np
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from smcdp.dp import conversions as cv
from smcdp.dp.budget import BudgetAccountant, BudgetExceeded
from smcdp.dp.learners.dpem_budget import solve_dpem_budget
from smcdp.dp.mechanisms import GaussianMechanism, LaplaceMechanism, VectorMechanism
from smcdp.dp.validation import InvalidParameter
from tests.support.limits import time_limit

#: seconds any one call may take (the slowest legitimate calls here take well under one)
LIMIT = 10

NUMBERS = st.one_of(
    st.sampled_from(
        [0.0, -0.0, 1.0, -1.0, 0.5, 1e-6, 1e-300, 5e-324, 2.0**-24, 1e-12, 1e308, math.inf, -math.inf, math.nan, 100.0]
    ),
    st.floats(allow_nan=True, allow_infinity=True),
    st.floats(min_value=1e-320, max_value=1e6),
    st.integers(-5, 10**6),
)
DELTAS = st.one_of(NUMBERS, st.floats(min_value=5e-324, max_value=0.5))
COUNTS = st.one_of(st.integers(-3, 10**7), st.sampled_from([0, 1, 2, 10, 2**63, True]), st.floats(0.5, 20))


def finite(x) -> bool:
    arr = np.asarray(x, dtype=object).reshape(-1)
    return all(isinstance(v, (int, np.integer)) or math.isfinite(float(v)) for v in arr)


def accepted_or_refused(fn: Callable[[], object], what: str, *, numbers: bool = True):
    """fn()'s result (finite, where ``numbers``), or None where it refused with InvalidParameter."""
    with time_limit(LIMIT, what):
        try:
            out = fn()
        except InvalidParameter:
            return None
    if numbers:
        assert finite(out), f"{what} returned {out!r}"
    return out


SETTINGS = settings(max_examples=150, deadline=None, database=None, suppress_health_check=list(HealthCheck))


@SETTINGS
@given(NUMBERS, NUMBERS, NUMBERS)
def test_laplace_and_vector_mechanisms(epsilon, sensitivity, value):
    for cls in (LaplaceMechanism, VectorMechanism):
        mech = accepted_or_refused(partial(cls, epsilon, sensitivity, random_state=1), cls.__name__, numbers=False)
        if mech is not None:
            shape = (3,) if cls is VectorMechanism else ()
            accepted_or_refused(partial(mech.randomise, np.full(shape, value)), f"{cls.__name__}.randomise({value!r})")


@SETTINGS
@given(NUMBERS, DELTAS, NUMBERS, st.booleans())
def test_gaussian_mechanism(epsilon, delta, sensitivity, analytic):
    mech = accepted_or_refused(
        lambda: GaussianMechanism(epsilon, delta, sensitivity, analytic=analytic, random_state=1),
        "GaussianMechanism",
        numbers=False,
    )
    if mech is not None:
        assert mech.sigma > 0
        accepted_or_refused(lambda: mech.randomise(np.zeros(2)), "GaussianMechanism.randomise")


@SETTINGS
@given(NUMBERS, NUMBERS, st.one_of(st.just(0.0), DELTAS))
def test_gaussian_mechanism_from_sigma(sigma, sensitivity, delta):
    mech = accepted_or_refused(
        lambda: GaussianMechanism.from_sigma(sigma, sensitivity, delta=delta, random_state=1),
        "GaussianMechanism.from_sigma",
        numbers=False,
    )
    if mech is not None:
        assert mech.sigma > 0 and mech.rho > 0 and math.isfinite(mech.rho)
        accepted_or_refused(lambda: mech.randomise(np.zeros(2)), "from_sigma(...).randomise")


@SETTINGS
@given(NUMBERS, DELTAS, COUNTS)
# explore seed 148: the composition multiplier's resolution check overflowed (math.expm1 of a huge b - a)
@example(epsilon=8.531378642023366e25, delta=0.5, count=1)
def test_gaussian_calibrations(epsilon, delta, count):
    accepted_or_refused(lambda: cv.classic_gaussian_sigma(epsilon, delta), "classic_gaussian_sigma")
    accepted_or_refused(lambda: cv.analytic_gaussian_sigma(epsilon, delta), "analytic_gaussian_sigma")
    accepted_or_refused(lambda: cv.gaussian_epsilon(delta, epsilon), "gaussian_epsilon")
    accepted_or_refused(lambda: cv.gaussian_composition_multiplier(epsilon, delta, count), "composition_multiplier")
    accepted_or_refused(lambda: cv.gaussian_composition_epsilon(delta, epsilon, count), "composition_epsilon")


@SETTINGS
@given(NUMBERS, DELTAS)
def test_zcdp_conversions(x, delta):
    rho = accepted_or_refused(lambda: cv.rho_capacity(x, delta), "rho_capacity")
    if rho is not None and rho > 0:
        eps = accepted_or_refused(lambda: cv.zcdp_epsilon_cks(rho, delta), "zcdp_epsilon_cks")
        assert eps is None or eps <= x
    for conversion in (cv.zcdp_epsilon_cks, cv.zcdp_epsilon_classic):  # inf for a rho beyond 2^200: an honest bound
        eps = accepted_or_refused(partial(conversion, x, delta), conversion.__name__, numbers=False)
        assert eps is None or eps >= 0, (conversion.__name__, x, delta, eps)
    accepted_or_refused(lambda: cv.zcdp_rho_classic(x, delta), "zcdp_rho_classic")
    accepted_or_refused(lambda: cv.zcdp_delta_cks(x, delta), "zcdp_delta_cks")


@SETTINGS
@given(
    NUMBERS,
    DELTAS,
    COUNTS,
    st.integers(-1, 70),
    st.sampled_from(["LLG", "GGG"]),
    st.sampled_from(["linear", "advanced", "zcdp", "moments"]),
)
def test_dpem_budget(epsilon, delta, iterations, components, scenario, method):
    accepted_or_refused(
        lambda: solve_dpem_budget(epsilon, delta, iterations, components, scenario, method),
        "solve_dpem_budget",
        numbers=False,
    )


@SETTINGS
@given(
    NUMBERS,
    st.one_of(st.just(0.0), DELTAS),
    NUMBERS,
    st.one_of(st.just(0.0), DELTAS),
    st.sampled_from(["linear", "zcdp"]),
)
def test_budget_accountant(epsilon, delta, spend_eps, spend_delta, rule):
    acc = accepted_or_refused(lambda: BudgetAccountant(epsilon, delta, rule=rule), "BudgetAccountant", numbers=False)
    if acc is None:
        return
    with time_limit(LIMIT, "BudgetAccountant.spend"):
        try:
            acc.spend(spend_eps, spend_delta)
        except (InvalidParameter, BudgetExceeded):
            pass  # a refused or an over-budget charge
    with time_limit(LIMIT, "BudgetAccountant.status"):
        acc.status()


def test_dpem_budget_at_a_tiny_epsilon_and_delta_does_not_overflow():
    # found by the fuzzing in CI (2026-12-04): the moments solver's bracket reached a noise multiplier of 2.5e154,
    # whose square overflowed (OverflowError) in the Gaussian RDP
    accepted_or_refused(
        partial(solve_dpem_budget, 5.960464477539063e-08, 4.46343350363728e-195, 1, 1, "GGG", "moments"),
        "solve_dpem_budget",
        numbers=False,
    )
