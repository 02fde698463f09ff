"""The logistic objective's solver and sensitivity, without scikit-learn.

:class:`smcdp.dp.learners.logistic.LogisticRegression` (a scikit-learn estimator) fits with these, and so does
dp-aggregate's local training (:func:`smcdp.protocols.dp_aggregate.train_local`) in a party process, which
would otherwise import scikit-learn (and scipy.optimize) for its first session: more than a CPU-second in
every data party.  scipy.optimize is imported only for problems with more than 500 features.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import expit

from smcdp.dp.validation import check_positive

__all__ = ["fit_logistic_objective", "logistic_sensitivity"]


def logistic_sensitivity(n: int, lam: float, data_norm: float = 1.0) -> float:
    """L2 sensitivity of the minimiser of J(w) = (1/n) sum log(1+exp(-y w.x)) + lam ||w||^2
    over data sets of ``n`` rows with ``||x|| <= data_norm`` that differ in one row:
    ``data_norm / (n * lam)`` (the derivation: :mod:`smcdp.dp.learners.logistic`'s docstring)."""
    n = check_positive(n, "n", integer=True)
    lam = check_positive(lam, "lam")
    data_norm = check_positive(data_norm, "data_norm")
    return data_norm / (n * lam)


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
) -> tuple[np.ndarray, int, float]:
    """Minimise (1/n) sum log(1+exp(-y x.w)) + lam||w||^2 + linear.w + (ridge/2)||w||^2.

    ``ys`` in {-1, +1}.  Returns ``(w, n_iter, grad_norm)``.  Damped Newton (after
    L-BFGS when d > 500) on a smooth, strongly convex objective; ``grad_norm`` is the gradient norm at the returned
    point (the optimality certificate: ||w - w*|| <= grad_norm / (2 lam + ridge)).
    """
    n, d = Xs.shape
    lin = np.zeros(d) if linear is None else np.asarray(linear, dtype=float)
    mu = 2.0 * lam + ridge

    def fg(w: np.ndarray) -> tuple[float, np.ndarray]:
        m = ys * (Xs @ w)
        loss = np.logaddexp(0.0, -m).mean()
        coef = -ys * expit(-m) / n
        f = loss + 0.5 * mu * (w @ w) + lin @ w
        g = Xs.T @ coef + mu * w + lin
        return f, g

    w = np.zeros(d) if w0 is None else np.asarray(w0, float)
    nit = 0
    if d > 500:
        from scipy.optimize import minimize  # lazily: only wide problems need it (the module docstring says why)

        res = minimize(
            fg, w, jac=True, method="L-BFGS-B", options={"maxiter": max_iter, "gtol": tol, "ftol": 0.0, "maxcor": 30}
        )
        w, nit = res.x, int(res.nit)
    # damped Newton (exact Hessian; d is small): quadratic convergence to the stated tolerance
    f, g = fg(w)
    for _ in range(max_iter):
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
    return w, nit, gnorm
