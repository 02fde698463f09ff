"""The certified logistic solve's bounds, in plain floating-point arithmetic (no numpy, no scipy).

:mod:`smcdp.dp.learners.logistic_objective` solves with them and its docstring has the proof; they live apart so that
a party process can compute a certified sensitivity (``smcdp.protocols.dp_aggregate.fit_sensitivity``) when it
checks a session's parameters without importing the solver's scipy.
"""

from __future__ import annotations

import math

from smcdp.dp.validation import InvalidParameter

__all__ = [
    "CERTAIN_NEWTON",
    "OUTPUT_SHARE",
    "RELEASE_LIN_BOUND",
    "SUM_BLOCK",
    "approximate_minimiser_bound",
    "certain_steps",
    "certified_slack",
    "certified_tolerance",
    "gamma",
    "gradient_error_bound",
    "solve_constants",
    "sum_additions",
    "tree_depth",
]

#: rows per matrix–vector product in the gradient's sum over rows (:func:`~smcdp.dp.learners.logistic_objective.row_sum`)
SUM_BLOCK = 1024


def tree_depth(parts: int) -> int:
    """The levels of a pairwise sum of ``parts`` terms."""
    return max(0, (parts - 1).bit_length())  # ⌈log2(parts)⌉ levels of pairwise additions


_U = 2.0**-53  # the unit roundoff of float64
#: damped Newton's iterations a certain solve runs at least, whatever ``max_iter`` says: Newton finishes in tens,
#: while the descent that would otherwise finish the job takes up to κ·ln(8LΔ₀/tol²) steps (minutes at λ = 1e-6)
CERTAIN_NEWTON = 200
#: rows are scaled into the unit ball before the fit; a norm a few roundings above 1 is counted as this
_ROW_NORM = 1.0 + 2.0**-40


def gamma(k: int) -> float:
    """Higham's γ_k = ku/(1 − ku): the relative error bound of a sum or dot product of k terms."""
    return k * _U / (1.0 - k * _U)


def solve_constants(mu: float, lin_norm: float) -> tuple[float, float, float, float]:
    """(L, κ, Δ₀, V): the smoothness, the condition number, F(0) − F* and a bound on ‖v‖ along the descent (any v
    with F(v) − F* ≤ 2Δ₀: ‖v*‖ ≤ (ρ + ‖lin‖)/μ since μv* = −∇loss(v*) − lin, and ‖v − v*‖ ≤ √(2·2Δ₀/μ))."""
    rho = _ROW_NORM
    L = rho * rho / 4.0 + mu
    delta0 = math.log(2.0) + lin_norm * lin_norm / (2.0 * mu)
    V = (rho + lin_norm) / mu + math.sqrt(4.0 * delta0 / mu)
    return L, L / mu, delta0, V


def gradient_error_bound(n: int, d: int, mu: float, lin_norm: float = 0.0) -> tuple[float, float]:
    """``(eps, E)``: eps bounds the floating-point error of the objective's computed gradient at any v with
    ‖v‖ ≤ V (:func:`~smcdp.dp.learners.logistic_bounds.solve_constants`), E that plus the rounding of a gradient step v − g/L, counted as gradient error.

    The gradient is ``Xs.T @ (−y·expit(−m)/n) + μv + lin`` with m = y·(Xs @ v): each m_i is a dot product of d
    terms (error ≤ γ_d‖x_i‖‖v‖), expit is 1/4-Lipschitz and accurate to a few ulps, the sum over rows
    (:func:`~smcdp.dp.learners.logistic_objective.row_sum`) puts each product through at most k = :func:`~smcdp.dp.learners.logistic_bounds.sum_additions` additions (error ≤ γ_{k+1}
    Σ_i ‖x_i‖·abs(c_i) ≤ γ_{k+1} ρ, as abs(c_i) ≤ 1/n), and two additions round the three terms.  Each
    bound is doubled: a margin for what the ulp counts leave out (a BLAS's FMA and order are covered by γ)."""
    L, _, delta0, V = solve_constants(mu, lin_norm)
    rho = _ROW_NORM
    coef = (gamma(d) * rho * V / 4.0 + 6.0 * _U) / n  # each computed −y·expit(−m)/n against the exact one
    eps = (
        gamma(sum_additions(n) + 1) * rho * (1.0 + 6.0 * _U)
        + n * rho * coef
        + _U * mu * V
        + 2.0 * _U * (rho + mu * V + lin_norm)
    )
    eps *= 2.0
    g_max = L * math.sqrt(4.0 * delta0 / mu) + eps  # ‖computed gradient‖ along the descent
    E = eps + 2.0 * _U * (L * V + 2.0 * g_max)
    return eps, E


def certified_tolerance(tol: float, n: int, d: int, mu: float, lin_norm: float = 0.0) -> float:
    """The tolerance a certain solve uses: ``tol``, or the floor below which float64 cannot be sure to reach,
    2(1 + γ_{d+2})(√κ·E + ε), if that is larger (:mod:`smcdp.dp.learners.logistic_objective`'s docstring).  Public: n, d, μ and ‖lin‖ only."""
    _, kappa, delta0, _ = solve_constants(mu, lin_norm)
    eps, E = gradient_error_bound(n, d, mu, lin_norm)
    # the descent could leave the ball its error bound assumes.  Decided at ‖lin‖ = 0 (public), and checked at
    # ‖lin‖ too: the condition relaxes as ‖lin‖ grows (E grows like γ·‖lin‖/μ, Δ₀ like ‖lin‖²/μ) except in a thin
    # band of μ just above the ‖lin‖ = 0 threshold (a review: relative 1e-4), where a tiny ‖lin‖ can still raise --
    # a refusal decided by objective perturbation's b, which is drawn independently of the data
    E0 = gradient_error_bound(n, d, mu, 0.0)[1]
    if not (E0 * E0 / (2.0 * mu) <= solve_constants(mu, 0.0)[2] and E * E / (2.0 * mu) <= delta0):
        raise InvalidParameter(
            f"float64 cannot certify a logistic solve with strong convexity {mu:g} for {n} rows of {d} features"
        )
    return max(float(tol), 2.0 * (1.0 + gamma(d + 2)) * (math.sqrt(kappa) * E + eps))


def certified_slack(tol: float, n: int, d: int, mu: float, lin_norm: float = 0.0) -> float:
    """A bound on the true gradient norm at a point a certain solve returned with computed norm ≤ ``tol``: the
    norm's own rounding (1 + γ_{d+2}) and the gradient's error ε; the point is within this / μ of the minimiser."""
    return float(tol) * (1.0 + gamma(d + 2)) + gradient_error_bound(n, d, mu, lin_norm)[0]


#: the share of a private objective-perturbation fit's ε that its output stage takes
#: (:func:`~smcdp.dp.learners.logistic_bounds.approximate_minimiser_bound`); the rest goes to the objective's b
OUTPUT_SHARE = 0.01
#: the norm of the linear term b/n up to which the release is never projected: the ball's radius is
#: ρ_B = (ρ + RELEASE_LIN_BOUND)/μ, above any minimiser's norm (ρ + ‖b/n‖)/μ while ‖b/n‖ stays below it
RELEASE_LIN_BOUND = 10.0


def approximate_minimiser_bound(tol: float, n: int, d: int, mu: float) -> tuple[float, float]:
    """``(radius, r)``: the ball's radius ρ_B an objective-perturbation release is projected onto, and a bound r on
    ‖P(v̂) − P(v*)‖ -- v̂ the certain solve's point, v* the perturbed objective's exact minimiser, P the projection
    onto the ball of radius ρ_B, the computed projection's rounding included -- that holds for *every* linear term
    b/n, so it is public (n, d, μ and ``tol``; not the noise).

    Why: the solve certifies ‖∇J(v̂)‖ ≤ s(ℓ) = certified_slack(certified_tolerance(tol, …, ℓ), …, ℓ) for ℓ = ‖b/n‖,
    so ‖v̂ − v*‖ ≤ δ(ℓ) = s(ℓ)/μ; δ grows with ℓ without bound (the gradient's rounding scales with ‖v‖ ≈ ℓ/μ).
    Let ℓ₀ = ρ + 2μρ_B.  For ℓ ≤ ℓ₀ the projection is 1-Lipschitz and δ is non-decreasing: ≤ δ(ℓ₀).  For ℓ > ℓ₀,
    ‖v*‖ ≥ (ℓ − ρ)/μ > 2ρ_B (μv* = −∇loss(v*) − b/n, ‖∇loss‖ ≤ ρ) and, as long as δ(ℓ) < ‖v*‖/2, v̂ lies outside
    the ball too, where ‖x/‖x‖ − y/‖y‖‖ ≤ 2‖x − y‖/max(‖x‖, ‖y‖) gives ‖P(v̂) − P(v*)‖ ≤ 2ρ_B·μ·δ(ℓ)/(ℓ − ρ).
    Every term of δ(ℓ) (gradient_error_bound, certified_tolerance, certified_slack) is a non-negative combination
    of 1, ℓ and √(α + βℓ²), or a maximum of such with a constant, and for each of these f(ℓ)/(ℓ − ρ) does not
    increase for ℓ > ρ: so the bound above is largest at ℓ₀, where it equals δ(ℓ₀), and δ(ℓ)/(ℓ − ρ) ≤
    δ(ℓ₀)/(ℓ₀ − ρ) < 1/(2μ) -- the proviso -- once δ(ℓ₀) < ρ_B (checked here).  Hence r = δ(ℓ₀)(1 + 10⁻⁶) plus
    4γ_{d+4}·ρ_B for the computed projection (its norm, the scale and the decision whether to scale; the division
    by R as well).  (The tests check the monotonicity on a grid of ℓ.)"""
    radius = (_ROW_NORM + RELEASE_LIN_BOUND) / mu
    lin0 = _ROW_NORM + 2.0 * mu * radius
    delta0 = certified_slack(certified_tolerance(tol, n, d, mu, lin0), n, d, mu, lin0) / mu
    if not delta0 < radius:
        raise InvalidParameter(f"float64 cannot bound an approximate minimiser of strong convexity {mu:g} for {n} rows")
    return radius, delta0 * (1.0 + 1e-6) + 4.0 * gamma(d + 4) * radius


def certain_steps(tol: float, mu: float, lin_norm: float, gap: float | None = None) -> int:
    """k* = ⌈κ·ln(8L·gap/tol²)⌉ + 1 gradient steps from a point with F − F* ≤ gap (Δ₀, from 0, by default;
    :mod:`smcdp.dp.learners.logistic_objective`'s docstring)."""
    L, kappa, delta0, _ = solve_constants(mu, lin_norm)
    gap = delta0 if gap is None else gap
    return math.ceil(kappa * max(0.0, math.log(8.0 * L * gap / (tol * tol)))) + 1


def sum_additions(n: int) -> int:
    """The most additions one product meets in :func:`~smcdp.dp.learners.logistic_objective.row_sum` over ``n`` rows."""
    if n <= SUM_BLOCK:
        return max(0, n - 1)
    return SUM_BLOCK - 1 + tree_depth(-(-n // SUM_BLOCK))
