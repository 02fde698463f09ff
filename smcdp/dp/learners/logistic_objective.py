"""The logistic objective's solver and sensitivity, without scikit-learn.

:class:`smcdp.dp.learners.logistic.LogisticRegression` (a scikit-learn estimator) fits with these, and so does
dp-aggregate's local training (:func:`smcdp.protocols.dp_aggregate.train_local`) in a party process, which
would otherwise import scikit-learn (and scipy.optimize) for its first session: more than a CPU-second in
every data party.  scipy.optimize is imported only for problems with more than 500 features.

**A solver that always arrives** (:func:`~smcdp.dp.learners.logistic_bounds.certified_tolerance`, ``certain=True``).  A private fit must release a
point within its tolerance of the minimiser, and refusing one the solver did not finish would answer a question
about the data for free (docs/dp-learners.md, finding 3).  Damped Newton converges in practice in tens of
iterations, but its worst-case count for this objective is astronomically loose, so with ``certain=True`` a run it
did not finish (within ``max_iter``, at least :data:`~smcdp.dp.learners.logistic_bounds.CERTAIN_NEWTON`) is followed by gradient descent with step
1/L, whose count *is* bounded
by public quantities: for F(v) = (1/n) Σ log(1 + exp(−y v·x)) + (μ/2)‖v‖² + lin·v with rows in the unit ball,
F is μ-strongly convex and L-smooth (L = 1/4 + μ), F(0) − F* ≤ Δ₀ = log 2 + ‖lin‖²/(2μ), and with every gradient
computed to within E (its floating-point error, plus the update's rounding counted as gradient error)

    F(v_k) − F* ≤ (1 − 1/κ)^k Δ₀ + E²/(2μ),   ‖∇F(v_k)‖ ≤ √(2L(1 − 1/κ)^k Δ₀) + √κ·E,   κ = L/μ,

so the computed gradient norm (≤ ‖∇F‖ + ε, ε the gradient's error) falls below any tolerance
tol ≥ 2(1 + γ)(√κ·E + ε) within k* = ⌈κ·ln(8LΔ₀/tol²)⌉ + 1 steps (from Newton's point instead of 0 when its
F − F* ≤ (‖g‖ + ε)²/(2μ) is below Δ₀: the same bound with that gap, usually a few steps).  E and ε are bounded from n, d, μ and
‖lin‖ alone by Higham's γ_k = ku/(1 − ku) (:func:`~smcdp.dp.learners.logistic_bounds.gradient_error_bound`): the tolerance a private fit uses,
``max(tol, 2(1 + γ)(√κ·E + ε))``, and the bound on the steps are public (given the noise, for objective
perturbation), so whether the solver arrives no longer depends on the data, and a returned point's true gradient
norm is at most that tolerance plus ε.  *Where* it stops, within that tolerance of the minimiser, does depend on
the data (and on Newton's path): output perturbation's noise covers that distance (its sensitivity adds it);
objective perturbation's proof is for the exact minimiser and does not (docs/dp-learners.md, finding 3).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from smcdp.dp.learners.logistic_bounds import (
    CERTAIN_NEWTON,
    SUM_BLOCK,
    certain_steps,
    certified_tolerance,
    gamma,
    gradient_error_bound,
    solve_constants,
)
from smcdp.dp.validation import check_positive

__all__ = ["fit_logistic_objective", "logistic_sensitivity", "objective", "row_sum"]


def logistic_sensitivity(n: int, lam: float, data_norm: float = 1.0) -> float:
    """L2 sensitivity of the minimiser of J(w) = (1/n) sum log(1+exp(-y w.x)) + lam ||w||^2
    over data sets of ``n`` rows with ``||x|| <= data_norm`` that differ in one row:
    ``data_norm / (n * lam)`` (the derivation: :mod:`smcdp.dp.learners.logistic`'s docstring)."""
    n = check_positive(n, "n", integer=True)
    lam = check_positive(lam, "lam")
    data_norm = check_positive(data_norm, "data_norm")
    return data_norm / (n * lam)


def row_sum(Xs: np.ndarray, coef: np.ndarray) -> np.ndarray:
    """``Xs.T @ coef``, at most :data:`~smcdp.dp.learners.logistic_bounds.SUM_BLOCK` rows a product and the products summed pairwise, so that every
    component goes through at most SUM_BLOCK − 1 + ⌈log2(blocks)⌉ additions (:func:`~smcdp.dp.learners.logistic_bounds.sum_additions`) instead of
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


def objective(
    Xs: np.ndarray, ys: np.ndarray, mu: float, lin: np.ndarray
) -> Callable[[np.ndarray], tuple[float, np.ndarray]]:
    """``fg(v) -> (F(v), ∇F(v))`` for F(v) = (1/n) Σ log(1 + exp(−y v·x)) + (μ/2)‖v‖² + lin·v, computed as the
    solver computes it (the expression :func:`~smcdp.dp.learners.logistic_bounds.gradient_error_bound` bounds the error of)."""
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
    :func:`~smcdp.dp.learners.logistic_bounds.certified_tolerance`, Newton runs at least
    :data:`~smcdp.dp.learners.logistic_bounds.CERTAIN_NEWTON` iterations, and a run that did not
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
        _, _, delta0, V = solve_constants(mu, lin_norm)
        inside = float(np.linalg.norm(w)) <= V
        if not (gnorm <= tol and inside):
            eps = gradient_error_bound(n, d, mu, lin_norm)[0]
            # F(w) − F* ≤ ‖∇F(w)‖²/(2μ), ‖∇F(w)‖ ≤ gnorm·(1 + γ) + ε (the norm's rounding, the gradient's error)
            gap = (gnorm * (1.0 + gamma(d + 2)) + eps) ** 2 / (2.0 * mu)
            start, gap = (w, gap) if inside and gap <= delta0 else (np.zeros(d), delta0)
            w, steps, gnorm = _descend(fg, start, gap, mu, lin_norm, tol)
            nit += steps
    return w, nit, gnorm


def _descend(fg, w: np.ndarray, gap: float, mu: float, lin_norm: float, tol: float) -> tuple[np.ndarray, int, float]:
    """Gradient descent with step 1/L from ``w``, whose F(w) − F* is at most ``gap`` (≤ Δ₀: the descent stays in
    the ball the error bound holds on), until the computed gradient norm is ≤ ``tol``: within
    ``certain_steps`` steps (module docstring), so the bound's running out is a broken invariant, not data.
    Starting at Newton's point when it qualifies only shortens the descent; where it stops is certified alike."""
    L = solve_constants(mu, lin_norm)[0]
    g = fg(w)[1]
    bound = certain_steps(tol, mu, lin_norm, gap)
    for k in range(bound + 1):
        gnorm = float(np.linalg.norm(g))
        if gnorm <= tol:
            return w, k, gnorm
        w = w - g / L
        g = fg(w)[1]
    raise AssertionError(f"gradient descent did not reach tol={tol:g} within its proven {bound} steps")
