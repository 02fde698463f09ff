"""Conversions between privacy notions, and Gaussian calibration.

What both the mechanisms and the accountants need, so that neither imports the
other:

* the privacy profile of the Gaussian mechanism (Balle & Wang 2018), as an upper
  bound that holds in floating point: :func:`gaussian_delta`, :func:`gaussian_epsilon`, and the two calibrations
  :func:`classic_gaussian_sigma` (Dwork-Roth Thm A.1) and
  :func:`analytic_gaussian_sigma` (smallest sigma meeting Balle-Wang);
* Renyi-DP curves (DP-EM eqs. (19)-(20)) and the RDP -> (epsilon, delta)
  conversion minimised over real orders (:func:`rdp_to_epsilon`);
* zCDP -> (epsilon, delta): Bun-Steinke's classic bound and the tighter
  Canonne-Kamath-Steinke one, their inverses (:func:`zcdp_rho_classic`,
  :func:`rho_capacity`, :func:`zcdp_delta_cks`);
* advanced composition (Dwork-Roth Thm 3.20).

scipy is imported inside the functions that use it, not at module level: every party process and
every ``smcdp`` command imports this module at start-up (through the budget ledger), and importing
scipy.optimize there costs about a second of CPU, mostly in processes that never calibrate anything.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from smcdp.dp.validation import MAGNITUDE_BITS, InvalidParameter, check_delta, check_magnitude, check_positive

__all__ = [
    "ORDER_GRID",
    "advanced_composition",
    "analytic_gaussian_sigma",
    "classic_gaussian_sigma",
    "distributed_gaussian_tau",
    "gaussian_composition_epsilon",
    "gaussian_composition_multiplier",
    "gaussian_delta",
    "gaussian_epsilon",
    "gaussian_rdp",
    "laplace_rdp",
    "pure_dp_rdp",
    "rdp_to_epsilon",
    "rho_capacity",
    "step_until",
    "zcdp_delta_cks",
    "zcdp_epsilon_cks",
    "zcdp_epsilon_classic",
    "zcdp_rho_classic",
]


# ---------------------------------------------------------------------------
# the Gaussian mechanism's privacy profile and calibration
# ---------------------------------------------------------------------------


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """sigma = sqrt(2 ln(1.25/delta)) * Delta / epsilon (Dwork-Roth Thm A.1; needs epsilon < 1)."""
    epsilon = check_magnitude(epsilon, "epsilon")
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_magnitude(sensitivity, "sensitivity")
    if epsilon >= 1:
        raise InvalidParameter(
            f"the classic Gaussian calibration is only proved for epsilon < 1 (got {epsilon}); "
            "use analytic=True (Balle-Wang) for larger epsilon"
        )
    return math.sqrt(2.0 * (math.log(1.25) - math.log(delta))) * sensitivity / epsilon


def _log_delta_terms(epsilon: float, mu: float) -> tuple[float, float]:
    from scipy import special  # lazily: the module docstring says why

    a = special.log_ndtr(mu / 2.0 - epsilon / mu)
    b = epsilon + special.log_ndtr(-mu / 2.0 - epsilon / mu)
    return float(a), float(b)


#: the error of scipy's log_ndtr(x) counted for :func:`gaussian_delta`, in units of float64's roundoff times the
#: magnitude of the logarithm: for x <= 0 and for x > 0 (measured against mpmath at 40 digits over x in
#: [-1e150, 38]: at most 4.7 and 2,070 units; doubled and more), plus 1e-300 absolute (near log 1 = 0)
LOG_NDTR_ULPS = (16.0, 4096.0)
_UNIT = 2.0**-53
_TINIEST = math.ulp(0.0)


def _log_ndtr_error(x: float, value: float) -> float:
    return LOG_NDTR_ULPS[x > 0.0] * _UNIT * abs(value) + 1e-300


def gaussian_delta(epsilon: float, noise_multiplier: float) -> float:
    """delta(epsilon) of the Gaussian mechanism with sigma/Delta = noise_multiplier, as an upper bound that holds
    in floating point.

    Balle & Wang (2018), Thm. 8: delta = Phi(A) - e^eps Phi(B), A = mu/2 - eps/mu, B = A - mu, mu = Delta/sigma.
    Computed as e^a (1 - e^(b - a)) from a = log Phi(A) and b = eps + log Phi(B); where the two terms nearly
    cancel (tiny eps against mu, or both deep in the tail) their difference a - b is the difference of two
    rounded logarithms and can be wrong in every digit -- a review found delta understated 2,000x at eps = delta
    = 1e-20 and 7.6e7x at eps = 1e-10, delta = 1e-300, and returned as 0 when rounding put b above a.  So a - b
    is taken at its largest within the logarithms' error (``LOG_NDTR_ULPS``), and the result is also bounded by
    Phi(A) - Phi(B) <= mu * max(phi on [B, A]), which has no cancellation; the smaller of the two bounds is
    returned, the second alone when the first is not resolved; never 0 (delta > 0 for every finite multiplier).
    Where the terms do not cancel, within 1e-10 (relative) of the exact value for delta >= 1e-30, 1e-8 down to
    1e-300 (the logarithms' error counted in full: ``test_the_gaussian_profile_is_an_upper_bound_even_where_its_terms_cancel``).
    """
    if epsilon < 0:
        raise InvalidParameter("epsilon must be >= 0")
    mu = 1.0 / noise_multiplier
    a, b = _log_delta_terms(epsilon, mu)
    A = mu / 2.0 - epsilon / mu
    B = A - mu
    nearest = 0.0 if B <= 0.0 <= A else min(abs(A), abs(B))
    # each bound is one exp of a logarithm, so that below 2.2e-308 (subnormal results, whose error is absolute)
    # one rounding, within a subnormal unit, is all there is; one unit is added for it (a review: at delta =
    # 1e-323 the products lost up to 14 % to the subnormal range).  delta = 5e-324 stays certifiable (an exp
    # that underflows to 0)
    log_coarse = math.log(mu) - nearest * nearest / 2.0 - 0.5 * math.log(2.0 * math.pi) + 1e-12
    bound = math.exp(log_coarse)
    err_a = _log_ndtr_error(A, a)
    err = err_a + _log_ndtr_error(B, b - epsilon) + 4.0 * _UNIT * (abs(a) + abs(b) + epsilon)  # of a - b, rounded
    if math.isfinite(a) and a - b > err:
        # the log of e^a(1 − e^-(a − b)), each term at its largest, plus 8u for exp, expm1 and log's roundings
        log_direct = a + err_a + math.log(-math.expm1(-(a - b + err)))
        bound = min(bound, math.exp(log_direct + 8.0 * _UNIT * (1.0 + abs(log_direct))))
    return min(1.0, bound + _TINIEST)  # delta > 0 for every finite multiplier: never rounded to 0


def step_until(holds: Callable[[float], bool], x: float, *, up: bool, first: float = 1e-12) -> float:
    """``x`` moved by relative steps that double (``first``, then twice that, …) -- up, or down towards 0 -- until
    ``holds(x)``: how every numerical calibration here turns a root that may lie on the wrong side of its
    bound into one that certainly holds.  Doubling keeps it within about twice the root's error and bounds the
    evaluations (about 50 from 1e-12 to a factor 2; fixed steps of 1e-12 needed millions where the root
    was coarse, e.g. at delta = 5e-324).  Raises InvalidParameter when no finite, positive ``x`` holds."""
    step = first
    for _ in range(2200):  # enough doublings to reach 0 or overflow from any double
        if holds(x):
            return x
        x = x * (1.0 + step) + 1e-300 if up else x * (1.0 - step)
        step = 2.0 * step if up else min(2.0 * step, 0.5)
        if not (math.isfinite(x) and x > 0):
            break
    raise InvalidParameter("no finite value satisfies the calibration's bound (the parameters are too extreme)")


def gaussian_epsilon(delta: float, noise_multiplier: float) -> float:
    """Smallest epsilon with gaussian_delta(epsilon, noise_multiplier) <= delta."""
    delta = check_delta(delta, allow_zero=False)
    noise_multiplier = check_magnitude(noise_multiplier, "noise multiplier")
    if gaussian_delta(0.0, noise_multiplier) <= delta:
        return 0.0
    hi = 1.0
    while gaussian_delta(hi, noise_multiplier) > delta:
        hi *= 2.0
        if hi > 1e12:
            raise InvalidParameter("no finite epsilon for this delta / noise")
    from scipy import optimize  # lazily: the module docstring says why

    eps = optimize.brentq(
        lambda e: gaussian_delta(e, noise_multiplier) - delta,
        0.0,
        hi,
        xtol=1e-15,
        rtol=1e-14,
    )
    # move up until the guarantee certainly holds
    return step_until(lambda e: gaussian_delta(e, noise_multiplier) <= delta, eps, up=True)


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest sigma (to 1e-12 relative) with Balle-Wang delta(epsilon) <= delta."""
    epsilon = check_magnitude(epsilon, "epsilon")
    delta = check_delta(delta, allow_zero=False)
    sensitivity = check_magnitude(sensitivity, "sensitivity")

    def f(log_m: float) -> float:
        return gaussian_delta(epsilon, math.exp(log_m)) - delta

    lo, hi = -10.0, 10.0
    while f(lo) <= 0:
        lo -= 10.0
    while f(hi) > 0:
        hi += 10.0
        if hi > 200:
            raise InvalidParameter("cannot calibrate the analytic Gaussian for these parameters")
    from scipy import optimize  # lazily: the module docstring says why

    log_m = optimize.brentq(f, lo, hi, xtol=1e-14, rtol=1e-14)
    m = step_until(lambda m: gaussian_delta(epsilon, m) <= delta, math.exp(log_m), up=True)
    return m * sensitivity


def gaussian_composition_epsilon(delta: float, noise_multiplier: float, count: int) -> float:
    """Epsilon at ``delta`` of ``count`` adaptively composed Gaussian mechanisms (by an upper bound of the exact
    profile: :func:`gaussian_delta`), each with
    sigma/Delta = ``noise_multiplier``: their privacy-loss distribution (PLD).

    The privacy loss of one Gaussian mechanism is Gaussian, N(mu**2/2, mu**2) with mu = 1/noise_multiplier,
    and privacy losses add under (adaptive) composition, so ``count`` of them have the PLD of a single
    Gaussian mechanism with mu = sqrt(count)/noise_multiplier (Dong, Roth & Su 2019, Gaussian DP, Cor. 3.3):
    the profile is Balle-Wang's at noise_multiplier/sqrt(count).  This is what a PLD accountant (Google's
    dp-accounting, ``pld.PLDAccountant``) computes for these events, without its discretisation."""
    count = check_positive(count, "count", integer=True)
    return gaussian_epsilon(delta, check_magnitude(noise_multiplier, "noise multiplier") / math.sqrt(count))


@functools.lru_cache(maxsize=256)
def gaussian_composition_multiplier(epsilon: float, delta: float, count: int) -> float:
    """Smallest noise multiplier (sigma/Delta, to 1e-12 relative) for which ``count`` composed Gaussian
    mechanisms are (epsilon, delta)-DP by their exact PLD (:func:`gaussian_composition_epsilon`).  A pure
    function of public numbers, searched numerically: memoised (a session's plug-in asks several times)."""
    count = check_positive(count, "count", integer=True)
    m = analytic_gaussian_sigma(epsilon, delta, 1.0) * math.sqrt(count)
    # delta(epsilon) = e^a - e^b is computed as a difference: when the two terms agree to within 1e-9 the
    # result is rounding noise (epsilon = delta = 5e-233, say, "solves" to a finite sigma); refuse then
    a, b = _log_delta_terms(epsilon, math.sqrt(count) / m)
    if b >= a or not -math.expm1(b - a) >= 1e-9:  # b >= a first: expm1 of a huge b - a overflows
        raise InvalidParameter(
            f"the exact Gaussian profile cannot resolve delta={delta!r} at epsilon={epsilon!r} in floating point"
        )
    # move up until the composition's epsilon (computed as the accountant computes it) is certainly within
    return step_until(lambda m: gaussian_composition_epsilon(delta, m, count) <= epsilon, m, up=True)


# ---------------------------------------------------------------------------
# Renyi DP and zCDP
# ---------------------------------------------------------------------------


def laplace_rdp(orders: Any, epsilon: float) -> np.ndarray:
    """RDP of the epsilon-DP Laplace mechanism at real orders alpha > 1.

    DP-EM eq. (19) gives the log-moment ``a(lambda) = log[(lambda+1)/(2 lambda+1)
    e^{lambda eps} + lambda/(2 lambda+1) e^{-eps(lambda+1)}]``; the RDP is
    ``a(alpha-1)/(alpha-1)``.  Evaluated as ``eps + log1p(-lambda (1 - e^{-eps(2 lambda+1)})
    / (2 lambda+1)) / lambda`` to stay finite for large orders.
    """
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise InvalidParameter("RDP orders must exceed 1")
    lam = a - 1.0
    inner = -lam * (-np.expm1(-epsilon * (2.0 * lam + 1.0))) / (2.0 * lam + 1.0)
    return epsilon + np.log1p(inner) / lam


def gaussian_rdp(orders: Any, noise_multiplier: float) -> np.ndarray:
    """RDP of the Gaussian mechanism: alpha / (2 s**2) (DP-EM eq. (20) / lambda)."""
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise InvalidParameter("RDP orders must exceed 1")
    return a / noise_multiplier / (2.0 * noise_multiplier)  # not s**2: it overflowed (OverflowError) for s ~ 1e154


def pure_dp_rdp(orders: Any, epsilon: float) -> np.ndarray:
    """An RDP bound for any epsilon-DP mechanism: min(eps, alpha eps**2 / 2)."""
    a = np.asarray(orders, dtype=np.float64)
    return np.minimum(epsilon, a * epsilon**2 / 2.0)


ORDER_GRID = 1.0 + np.logspace(-3, 8, 1800)


def _conversion_eps(orders: np.ndarray, rdp: np.ndarray, delta: float, conversion: str) -> np.ndarray:
    lam = orders - 1.0
    if conversion == "cks":
        return rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / lam
    if conversion == "classic":
        return rdp - math.log(delta) / lam
    raise InvalidParameter(f"conversion must be 'cks' or 'classic', got {conversion!r}")


def rdp_to_epsilon(
    rdp_fn: Callable[[np.ndarray], np.ndarray],
    delta: float,
    *,
    conversion: str = "cks",
    orders: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(epsilon, optimal order) for an RDP curve ``rdp_fn`` and target delta.

    Without ``orders`` the minimum is taken over all real orders: a dense grid
    locates the basin and ``scipy.optimize.minimize_scalar`` refines it.  The
    returned epsilon is the value of the conversion at a real order, so it is
    a valid bound whatever the optimiser's accuracy.
    """
    delta = check_delta(delta, allow_zero=False)
    grid = np.asarray(orders if orders is not None else ORDER_GRID, dtype=np.float64)
    rdp = np.asarray(rdp_fn(grid), dtype=np.float64)
    # (0, delta)-DP when total variation <= sqrt(1 - e^-KL) <= delta (as dp-accounting)
    if np.any(delta**2 + np.expm1(-rdp) > 0):
        return 0.0, float(grid[int(np.argmax(delta**2 + np.expm1(-rdp) > 0))])
    eps = _conversion_eps(grid, rdp, delta, conversion)
    eps = np.where(np.isfinite(eps), eps, np.inf)
    i = int(np.argmin(eps))
    best_a, best_e = float(grid[i]), float(eps[i])
    if orders is None:
        lo = float(grid[max(i - 1, 0)])
        hi = float(grid[min(i + 1, grid.size - 1)])
        if hi > lo:

            def f(a: float) -> float:
                v = _conversion_eps(np.array([a]), np.asarray(rdp_fn(np.array([a]))), delta, conversion)[0]
                return float(v) if math.isfinite(v) else math.inf

            from scipy import optimize  # lazily: the module docstring says why

            res = optimize.minimize_scalar(f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10 * hi})
            if res.success and res.fun < best_e:
                best_a, best_e = float(res.x), float(res.fun)
    return max(best_e, 0.0), best_a


def zcdp_epsilon_classic(rho: float, delta: float) -> float:
    """Bun-Steinke Prop. 1.3: rho-zCDP => (rho + 2 sqrt(rho ln(1/delta)), delta)-DP (inf beyond rho = 2^200, where
    the sum overflowed)."""
    delta = check_delta(delta, allow_zero=False)
    rho = check_positive(rho, "rho", allow_zero=True)
    if rho > 2.0**MAGNITUDE_BITS:
        return math.inf
    return rho + 2.0 * math.sqrt(rho * -math.log(delta))  # -log δ: 1/δ overflows for a subnormal δ


def zcdp_epsilon_cks(rho: float, delta: float) -> float:
    """Canonne-Kamath-Steinke Prop. 12 conversion of rho-zCDP, minimised over real alpha > 1 -- and never above the
    classic bound, which CKS's is below at every order: for rho below about ln(1/delta)·1e-16 the best order lies
    beyond the searched grid (1 + 1e8), where the grid's value exceeded it.  inf beyond rho = 2^200."""
    delta = check_delta(delta, allow_zero=False)
    if check_positive(rho, "rho", allow_zero=True) == 0:
        return 0.0
    if rho > 2.0**MAGNITUDE_BITS:
        return math.inf
    eps, _ = rdp_to_epsilon(lambda a: a * rho, delta, conversion="cks")
    return min(eps, zcdp_epsilon_classic(rho, delta))


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) of rho-zCDP by CKS Prop. 12: inf_alpha e^{(a-1)(a rho - eps)} (1-1/a)^a / (a-1)."""
    rho = check_positive(rho, "rho", allow_zero=True)
    epsilon = check_positive(epsilon, "epsilon", allow_zero=True)

    def logd(a: np.ndarray) -> np.ndarray:
        return (a - 1) * (a * rho - epsilon) + a * np.log1p(-1.0 / a) - np.log(a - 1)

    grid = ORDER_GRID
    v = logd(grid)
    i = int(np.argmin(v))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
    from scipy import optimize  # lazily: the module docstring says why

    res = optimize.minimize_scalar(lambda a: float(logd(np.array([a]))[0]), bounds=(lo, hi), method="bounded")
    best = min(float(v[i]), float(res.fun))
    return 1.0 if best >= 0 else math.exp(best)  # exp of a large rho's exponent overflowed


def advanced_composition(
    epsilons: Sequence[float], delta_prime: float, *, counts: Sequence[int] | None = None
) -> float:
    """Dwork-Roth Thm 3.20 (heterogeneous form): epsilon of the composition.

    ``sqrt(2 ln(1/delta') sum eps_i**2) + sum eps_i (exp(eps_i) - 1)``, where
    ``epsilons[j]`` occurs ``counts[j]`` times (once without ``counts``); the
    composition's delta is ``delta' + sum delta_i`` (added by the caller).
    For k equal epsilons this is exactly the theorem's
    ``sqrt(2k ln(1/delta')) eps + k eps (e**eps - 1)``.
    """
    delta_prime = check_delta(delta_prime, "delta'", allow_zero=False)
    e = np.asarray(list(epsilons), dtype=np.float64)
    c = np.ones_like(e) if counts is None else np.asarray(list(counts), dtype=np.float64)
    if e.size == 0:
        return 0.0
    return float(
        math.sqrt(2.0 * -math.log(delta_prime) * float(np.sum(c * e * e))) + float(np.sum(c * e * np.expm1(e)))
    )


def distributed_gaussian_tau(grid_sigma: float, honest: int) -> float:
    """τ of Kairouz, Liu & Steinke 2021 (Thm. 1) for the sum of ``honest`` discrete Gaussians of parameter
    ``grid_sigma`` (in grid steps): τ = 10·Σ_{k=1}^{m−1} exp(−2π²σ²·k/(k+1)).  The sum is ½ε²-zCDP with
    ε = Δ/(√m·σ) + τ√d (d coordinates) instead of the Δ/(√m·σ) of one discrete Gaussian of variance mσ²."""
    return 10.0 * sum(math.exp(-2.0 * math.pi**2 * grid_sigma**2 * k / (k + 1)) for k in range(1, honest))


def rho_capacity(epsilon: float, delta: float) -> float:
    """Largest rho whose CKS conversion at delta stays <= epsilon.

    The root of the (increasing) conversion is found to a *relative* tolerance, then stepped down
    (:func:`step_until`) until the conversion is within epsilon: a bounded number of evaluations (about 60)
    whatever the scale of rho -- for epsilon = delta = 6e-8, rho is about 1e-14, where an absolute tolerance
    of 1e-15 and fixed 1e-12 relative steps needed millions of them.  0 when no rho > 0 is within epsilon."""

    def f(r: float) -> float:
        return zcdp_epsilon_cks(r, delta) - epsilon

    epsilon = check_magnitude(epsilon, "epsilon")
    hi = max(epsilon, 1e-12)
    while f(hi) < 0:
        hi *= 2
    lo = min(zcdp_rho_classic(epsilon, delta), hi)  # within epsilon by the classic bound, which CKS's is below
    while not lo > 0 or f(lo) >= 0:  # a bracket in log space: the root's scale may be anything from 1e-300 up
        lo /= 2**16
        if lo < 1e-290:
            return 0.0  # no rho > 0 the conversion can resolve stays within epsilon
    from scipy import optimize  # lazily: the module docstring says why

    ulo, uhi = math.log(lo), math.log(hi)
    flo, fhi = f(math.exp(ulo)), f(math.exp(uhi))  # exp(log x) may round past x: lo can sit at the root itself
    if flo >= 0 or fhi <= 0:
        return math.exp(uhi) if fhi <= 0 else lo  # an end is (within rounding) the root; f(lo) < 0 was checked
    u = optimize.brentq(lambda u: f(math.exp(u)), ulo, uhi, xtol=1e-14, rtol=1e-14, maxiter=500)
    try:  # brentq's root may lie on either side; f(lo) < 0
        return step_until(lambda r: f(r) <= 0, math.exp(u), up=False, first=1e-13)
    except InvalidParameter:
        return lo


def zcdp_rho_classic(epsilon: float, delta: float) -> float:
    """Largest rho with ``zcdp_epsilon_classic(rho, delta) <= epsilon`` (closed form):
    rho + 2 sqrt(rho L) = epsilon with L = ln(1/delta) gives rho = (sqrt(L + epsilon) - sqrt(L))**2."""
    epsilon = check_magnitude(epsilon, "epsilon")
    L = -math.log(check_delta(delta, allow_zero=False))
    # (√(L+ε) − √L)² written without the difference, which lost digits when the roots were close (ε = 1e-8 at
    # δ = 1e-9: 3e-7 above the bound); then stepped down until the bound certainly holds
    rho = epsilon**2 / (math.sqrt(L + epsilon) + math.sqrt(L)) ** 2
    return step_until(lambda r: zcdp_epsilon_classic(r, delta) <= epsilon, rho, up=False, first=1e-15)
