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
    "SUM_BLOCK",
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
    # the descent could leave the ball its error bound assumes.  Decided at ‖lin‖ = 0 (public: objective
    # perturbation's noise must not decide a refusal); the condition only relaxes as ‖lin‖ grows (E grows like
    # γ·‖lin‖/μ, Δ₀ like ‖lin‖²/μ), and is checked at ‖lin‖ too, as an invariant
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
