"""The logistic objective's solver and sensitivity, without scikit-learn.

:class:`smcdp.dp.learners.logistic.LogisticRegression` (a scikit-learn estimator) fits with these, and so does
dp-aggregate's local training (:func:`smcdp.protocols.dp_aggregate.train_local`) in a party process, which
would otherwise import scikit-learn (and scipy.optimize) for its first session: more than a CPU-second in
every data party.  scipy.optimize is imported only for problems with more than 500 features.

**A solver that always arrives** (:func:`certified_tolerance`, ``certain=True``).  A private fit must release a
point within its tolerance of the minimiser, and refusing one the solver did not finish would answer a question
about the data for free (docs/dp-learners.md, finding 3).  Damped Newton converges in practice in tens of
iterations, but its worst-case count for this objective is astronomically loose, so with ``certain=True`` a run it
did not finish (within ``max_iter``, at least :data:`CERTAIN_NEWTON`) is followed by gradient descent with step
1/L, whose count *is* bounded
by public quantities: for F(v) = (1/n) Σ log(1 + exp(−y v·x)) + (μ/2)‖v‖² + lin·v with rows in the unit ball,
F is μ-strongly convex and L-smooth (L = 1/4 + μ), F(0) − F* ≤ Δ₀ = log 2 + ‖lin‖²/(2μ), and with every gradient
computed to within E (its floating-point error, plus the update's rounding counted as gradient error)

    F(v_k) − F* ≤ (1 − 1/κ)^k Δ₀ + E²/(2μ),   ‖∇F(v_k)‖ ≤ √(2L(1 − 1/κ)^k Δ₀) + √κ·E,   κ = L/μ,

so the computed gradient norm (≤ ‖∇F‖ + ε, ε the gradient's error) falls below any tolerance
tol ≥ 2(1 + γ)(√κ·E + ε) within k* = ⌈κ·ln(8LΔ₀/tol²)⌉ + 1 steps (from Newton's point instead of 0 when its
F − F* ≤ (‖g‖ + ε)²/(2μ) is below Δ₀: the same bound with that gap, usually a few steps).  E and ε are bounded from n, d, μ and
‖lin‖ alone by Higham's γ_k = ku/(1 − ku) (:func:`gradient_error_bound`): the tolerance a private fit uses,
``max(tol, 2(1 + γ)(√κ·E + ε))``, and the bound on the steps are public (given the noise, for objective
perturbation), so whether the solver arrives no longer depends on the data, and a returned point's true gradient
norm is at most that tolerance plus ε.  *Where* it stops, within that tolerance of the minimiser, does depend on
the data (and on Newton's path): output perturbation's noise covers that distance (its sensitivity adds it);
objective perturbation's proof is for the exact minimiser and does not (docs/dp-learners.md, finding 3).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from smcdp.dp.validation import InvalidParameter, check_positive

__all__ = [
    "CERTAIN_NEWTON",
    "SUM_BLOCK",
    "certified_slack",
    "certified_tolerance",
    "fit_logistic_objective",
    "gradient_error_bound",
    "logistic_sensitivity",
    "objective",
    "row_sum",
    "sum_additions",
]

_U = 2.0**-53  # the unit roundoff of float64
#: damped Newton's iterations a certain solve runs at least, whatever ``max_iter`` says: Newton finishes in tens,
#: while the descent that would otherwise finish the job takes up to κ·ln(8LΔ₀/tol²) steps (minutes at λ = 1e-6)
CERTAIN_NEWTON = 200
#: rows are scaled into the unit ball before the fit; a norm a few roundings above 1 is counted as this
_ROW_NORM = 1.0 + 2.0**-40


def _gamma(k: int) -> float:
    """Higham's γ_k = ku/(1 − ku): the relative error bound of a sum or dot product of k terms."""
    return k * _U / (1.0 - k * _U)


def _constants(mu: float, lin_norm: float) -> tuple[float, float, float, float]:
    """(L, κ, Δ₀, V): the smoothness, the condition number, F(0) − F* and a bound on ‖v‖ along the descent (any v
    with F(v) − F* ≤ 2Δ₀: ‖v*‖ ≤ (ρ + ‖lin‖)/μ since μv* = −∇loss(v*) − lin, and ‖v − v*‖ ≤ √(2·2Δ₀/μ))."""
    rho = _ROW_NORM
    L = rho * rho / 4.0 + mu
    delta0 = math.log(2.0) + lin_norm * lin_norm / (2.0 * mu)
    V = (rho + lin_norm) / mu + math.sqrt(4.0 * delta0 / mu)
    return L, L / mu, delta0, V


def gradient_error_bound(n: int, d: int, mu: float, lin_norm: float = 0.0) -> tuple[float, float]:
    """``(eps, E)``: eps bounds the floating-point error of the objective's computed gradient at any v with
    ‖v‖ ≤ V (:func:`_constants`), E that plus the rounding of a gradient step v − g/L, counted as gradient error.

    The gradient is ``Xs.T @ (−y·expit(−m)/n) + μv + lin`` with m = y·(Xs @ v): each m_i is a dot product of d
    terms (error ≤ γ_d‖x_i‖‖v‖), expit is 1/4-Lipschitz and accurate to a few ulps, the sum over rows
    (:func:`row_sum`) puts each product through at most k = :func:`sum_additions` additions (error ≤ γ_{k+1}
    Σ_i ‖x_i‖·abs(c_i) ≤ γ_{k+1} ρ, as abs(c_i) ≤ 1/n), and two additions round the three terms.  Each
    bound is doubled: a margin for what the ulp counts leave out (a BLAS's FMA and order are covered by γ)."""
    L, _, delta0, V = _constants(mu, lin_norm)
    rho = _ROW_NORM
    coef = (_gamma(d) * rho * V / 4.0 + 6.0 * _U) / n  # each computed −y·expit(−m)/n against the exact one
    eps = (
        _gamma(sum_additions(n) + 1) * rho * (1.0 + 6.0 * _U)
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
    2(1 + γ_{d+2})(√κ·E + ε), if that is larger (module docstring).  Public: n, d, μ and ‖lin‖ only."""
    kappa = _constants(mu, lin_norm)[1]
    eps, E = gradient_error_bound(n, d, mu, lin_norm)
    # the descent could leave the ball its error bound assumes.  Decided at ‖lin‖ = 0 (public: objective
    # perturbation's noise must not decide a refusal); the condition only relaxes as ‖lin‖ grows (E grows like
    # γ·‖lin‖/μ, Δ₀ like ‖lin‖²/μ), and is checked at ‖lin‖ too, as an invariant
    for norm in (0.0, lin_norm):
        E0 = gradient_error_bound(n, d, mu, norm)[1]
        if not E0 * E0 / (2.0 * mu) <= _constants(mu, norm)[2]:
            raise InvalidParameter(f"float64 cannot certify a logistic solve with strong convexity {mu:g} and n={n}")
    return max(float(tol), 2.0 * (1.0 + _gamma(d + 2)) * (math.sqrt(kappa) * E + eps))


def certified_slack(tol: float, n: int, d: int, mu: float, lin_norm: float = 0.0) -> float:
    """A bound on the true gradient norm at a point a certain solve returned with computed norm ≤ ``tol``: the
    norm's own rounding (1 + γ_{d+2}) and the gradient's error ε; the point is within this / μ of the minimiser."""
    return float(tol) * (1.0 + _gamma(d + 2)) + gradient_error_bound(n, d, mu, lin_norm)[0]


def _certain_steps(tol: float, mu: float, lin_norm: float, gap: float | None = None) -> int:
    """k* = ⌈κ·ln(8L·gap/tol²)⌉ + 1 gradient steps from a point with F − F* ≤ gap (Δ₀, from 0, by default; module
    docstring)."""
    L, kappa, delta0, _ = _constants(mu, lin_norm)
    gap = delta0 if gap is None else gap
    return math.ceil(kappa * max(0.0, math.log(8.0 * L * gap / (tol * tol)))) + 1


def logistic_sensitivity(n: int, lam: float, data_norm: float = 1.0) -> float:
    """L2 sensitivity of the minimiser of J(w) = (1/n) sum log(1+exp(-y w.x)) + lam ||w||^2
    over data sets of ``n`` rows with ``||x|| <= data_norm`` that differ in one row:
    ``data_norm / (n * lam)`` (the derivation: :mod:`smcdp.dp.learners.logistic`'s docstring)."""
    n = check_positive(n, "n", integer=True)
    lam = check_positive(lam, "lam")
    data_norm = check_positive(data_norm, "data_norm")
    return data_norm / (n * lam)


#: rows per matrix–vector product in the gradient's sum over rows (:func:`row_sum`)
SUM_BLOCK = 1024


def _tree_depth(parts: int) -> int:
    return max(0, (parts - 1).bit_length())  # ⌈log2(parts)⌉ levels of pairwise additions


def row_sum(Xs: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``Xs.T @ coef``, at most :data:`SUM_BLOCK` rows a product and the products summed pairwise, so that every
    component goes through at most SUM_BLOCK − 1 + ⌈log2(blocks)⌉ additions (:func:`sum_additions`) instead of
    n − 1: the gradient's error bound, and so the tolerance a private fit can certify, then hardly grows with n
    (at 10⁷ rows γ_n would be 10⁴ times larger).  ``smcdp.compute.kernels.chunked_product`` does the same for
    the power iteration; this package does not import the compute engines, and these are ten lines."""
    n = Xs.shape[0]
    if n <= SUM_BLOCK:
        return Xs.T @ coef
    parts = [Xs[i : i + SUM_BLOCK].T @ coef[i : i + SUM_BLOCK] for i in range(0, n, SUM_BLOCK)]
    while len(parts) > 1:
        paired = [a + b for a, b in zip(parts[0::2], parts[1::2], strict=False)]
        parts = paired + parts[len(paired) * 2 :]
    return parts[0]


def sum_additions(n: int) -> int:
    """The most additions one product meets in :func:`row_sum` over ``n`` rows."""
    if n <= SUM_BLOCK:
        return max(0, n - 1)
    return SUM_BLOCK - 1 + _tree_depth(-(-n // SUM_BLOCK))


def objective(
    Xs: np.ndarray, ys: np.ndarray, mu: float, lin: np.ndarray
) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """``fg(v) -> (F(v), ∇F(v))`` for F(v) = (1/n) Σ log(1 + exp(−y v·x)) + (μ/2)‖v‖² + lin·v, computed as the
    solver computes it (the expression :func:`gradient_error_bound` bounds the error of)."""
    n = Xs.shape[0]

    def fg(w: np.ndarray) -> tuple[float, np.ndarray]:
        m = ys * (Xs @ w)
        loss = np.logaddexp(0.0, -m).mean()
        coef = -ys * expit(-m) / n
        f = loss + 0.5 * mu * (w @ w) + lin @ w
        g = row_sum(Xs, coef) + mu * w + lin
        return f, g

    return fg


def fit_logistic_objective(
    Xs: np.ndarray,
    ys: np.ndarray,
    lam: float,
    *,
    linear: ArrayLike | None = None,
    ridge: float = 0.0,
    tol: float = 1e-10,
    max_iter: int = 10_000,
    w0: ArrayLike | None = None,
    certain: bool = False,
) -> tuple[np.ndarray, int, float]:
    """Minimise (1/n) sum log(1+exp(-y x.w)) + lam||w||^2 + linear.w + (ridge/2)||w||^2.

    ``ys`` in {-1, +1}.  Returns ``(w, n_iter, grad_norm)``.  Damped Newton (after
    L-BFGS when d > 500) on a smooth, strongly convex objective; ``grad_norm`` is the gradient norm at the returned
    point (the optimality certificate: ||w - w*|| <= grad_norm / (2 lam + ridge)).

    ``certain=True`` (private fits; rows of ``Xs`` in the unit ball, no ``w0``): ``tol`` must be at least
    :func:`~smcdp.dp.learners.logistic_objective.certified_tolerance`, Newton runs at least
    :data:`~smcdp.dp.learners.logistic_objective.CERTAIN_NEWTON` iterations, and a run that did not
    reach ``tol`` is followed by gradient descent -- from Newton's point when it qualifies, else from 0 -- that
    provably does (module docstring), so the returned ``grad_norm`` is ≤ ``tol``.
    """
    n, d = Xs.shape
    lin = np.zeros(d) if linear is None else np.asarray(linear, dtype=float)
    mu = 2.0 * lam + ridge
    if certain:
        lin_norm = float(np.linalg.norm(lin))
        if w0 is not None or not tol >= certified_tolerance(0.0, n, d, mu, lin_norm):
            raise ValueError("a certain solve starts at 0 and needs tol >= certified_tolerance(...)")

    fg = objective(Xs, ys, mu, lin)

    w = np.zeros(d) if w0 is None else np.asarray(w0, float)
    nit = 0
    if d > 500:
        from scipy.optimize import minimize  # lazily: only wide problems need it (the module docstring says why)

        res = minimize(
            fg, w, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0, "maxcor": 30}
        )
        w, nit = res.x, int(res.nit)
    # damped Newton (exact Hessian; d is small): quadratic convergence to the stated tolerance.  A certain solve
    # gives it at least CERTAIN_NEWTON iterations: the descent that certifies the rest can take κ·40 steps
    f, g = fg(w)
    for _ in range(max(max_iter, CERTAIN_NEWTON) if certain else max_iter):
        if np.linalg.norm(g) <= tol:
            break
        nit += 1
        m = ys * (Xs @ w)
        s = expit(m) * expit(-m) / n
        H = (Xs.T * s) @ Xs + mu * np.eye(d)
        step = np.linalg.solve(H, g)
        t = 1.0
        while True:
            wn = w - t * step
            fn, gn = fg(wn)
            if fn <= f - 1e-4 * t * (g @ step) or t < 1e-12:
                break
            t *= 0.5
        stalled = np.linalg.norm(wn - w) <= 1e-15 * (1.0 + np.linalg.norm(w))
        w, f, g = wn, fn, gn
        if stalled:  # floating-point floor reached; optimality_ reports the attained gradient
            break
    gnorm = float(np.linalg.norm(fg(w)[1]))
    # Newton's point is kept if it is within tol and inside the ball the error bound holds on
    if certain:
        _, _, delta0, V = _constants(mu, lin_norm)
        inside = float(np.linalg.norm(w)) <= V
        if not (gnorm <= tol and inside):
            eps = gradient_error_bound(n, d, mu, lin_norm)[0]
            # F(w) − F* ≤ ‖∇F(w)‖²/(2μ), ‖∇F(w)‖ ≤ gnorm·(1 + γ) + ε (the norm's rounding, the gradient's error)
            gap = (gnorm * (1.0 + _gamma(d + 2)) + eps) ** 2 / (2.0 * mu)
            start, gap = (w, gap) if inside and gap <= delta0 else (np.zeros(d), delta0)
            w, steps, gnorm = _descend(fg, start, gap, mu, lin_norm, tol)
            nit += steps
    return w, nit, gnorm


def _descend(fg, w: np.ndarray, gap: float, mu: float, lin_norm: float, tol: float) -> tuple[np.ndarray, int, float]:
    """Gradient descent with step 1/L from ``w``, whose F(w) − F* is at most ``gap`` (≤ Δ₀: the descent stays in
    the ball the error bound holds on), until the computed gradient norm is ≤ ``tol``: within
    :func:`_certain_steps` steps (module docstring), so the bound's running out is a broken invariant, not data.
    Starting at Newton's point when it qualifies only shortens the descent; where it stops is certified alike."""
    L = _constants(mu, lin_norm)[0]
    g = fg(w)[1]
    bound = _certain_steps(tol, mu, lin_norm, gap)
    for k in range(bound + 1):
        gnorm = float(np.linalg.norm(g))
        if gnorm <= tol:
            return w, k, gnorm
        w = w - g / L
        g = fg(w)[1]
    raise AssertionError(f"gradient descent did not reach tol={tol:g} within its proven {bound} steps")
