"""Differentially private factor analysis (Park, Foulds, Chaudhuri & Welling,
DP-EM, AISTATS 2017 -- seed 004, Section 6).

Model: x = W z + noise, z ~ N(0, I_k), noise ~ N(0, Psi) with Psi diagonal, so
x ~ N(0, W W^T + Psi).  The model has zero mean: centre the data with a
*public* mean before fitting (the paper does the same).

Every EM update depends on the data only through the second-moment matrix
Lambda = (1/N) sum x x^T, so Lambda is released once with the Gaussian
mechanism (Analyze Gauss, Dwork et al. STOC 2014: symmetric noise on the upper
triangle) and all EM iterations are post-processing.

Sensitivity (rows scaled into the unit ball by the public ``data_norm``;
neighbours replace one row): ||x x^T - y y^T||_F^2 = ||x||^4 + ||y||^4 -
2 (x.y)^2 <= 2, so the Frobenius sensitivity of Lambda is sqrt(2)/N, and the
upper-triangle vector (which the noise is added to) moves by no more than the
Frobenius norm.  The paper uses 2/N; ours is tighter and still a bound.
The noisy Lambda is projected onto the PSD cone before EM (post-processing).
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from sklearn.base import BaseEstimator, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import NON_PRIVATE, PrivacyCost, charged_fit, check_budget
from smcdp.dp.conversions import analytic_gaussian_sigma
from smcdp.dp.mechanisms import GaussianMechanism
from smcdp.dp.samplers import aux_rng, noise_rng
from smcdp.dp.validation import (
    check_count,
    check_delta,
    check_epsilon,
    check_magnitude,
    check_out_of_bounds,
    check_positive,
    clip_rows_to_norm,
    is_private,
    project_psd,
    resolve_data_norm,
)

__all__ = ["FactorAnalysis", "fa_em"]


def fa_em(Lam, n_components, *, max_iter=1000, tol=1e-8, min_psi=1e-6, rng=None, W0=None, psi0=None):
    """EM for factor analysis from a second-moment matrix (004 §6 updates).

    Returns (W (d, k), psi (d,), n_iter).  ``min_psi`` is raised to what float64 resolves beside W W^T (bounded by
    Lam's trace): below it W W^T + Psi need not be positive definite once formed (epsilon = 1e-45's noise)."""
    d = Lam.shape[0]
    min_psi = max(min_psi, 64 * d * float(np.finfo(float).eps) * float(np.abs(np.diag(Lam)).sum()))
    if W0 is None:
        # start at the probabilistic-PCA solution of Lam (Tipping & Bishop): a function of the
        # already released matrix only, so it is post-processing; EM then converges in far fewer steps
        w, V = np.linalg.eigh((Lam + Lam.T) / 2)
        w, V = w[::-1], V[:, ::-1]
        k = min(n_components, d)
        s2 = max(float(w[k:].mean()) if k < d else 0.0, min_psi)
        W = np.zeros((d, n_components))
        W[:, :k] = V[:, :k] * np.sqrt(np.maximum(w[:k] - s2, 0.0))
        if n_components > k or not np.any(W):
            rng = np.random.default_rng(0) if rng is None else rng
            W += 1e-3 * math.sqrt(max(np.trace(Lam) / d, 1e-12)) * rng.normal(size=W.shape)
    else:
        W = W0.copy()
    psi = np.maximum(np.diag(Lam - W @ W.T), min_psi) if psi0 is None else psi0.copy()
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is read after the loop (n_iter_)
        WtPinv = W.T / psi  # W^T Psi^-1 (k, d)
        G = np.linalg.inv(np.eye(n_components) + WtPinv @ W)  # posterior covariance of z
        B = Lam @ WtPinv.T @ G.T  # Lam Psi^-1 W G^T   (d, k)
        Ezz = G + G @ WtPinv @ B  # G + G W^T Psi^-1 Lam Psi^-1 W G^T
        W_new = B @ np.linalg.inv(Ezz)
        psi_new = np.maximum(np.diag(Lam - W_new @ G @ WtPinv @ Lam), min_psi)
        change = max(np.abs(W_new - W).max(), np.abs(psi_new - psi).max())
        W, psi = W_new, psi_new
        if change < tol:
            break
    return W, psi, it


class FactorAnalysis(TransformerMixin, BaseEstimator):
    """Factor analysis with a once-perturbed second-moment matrix.

    Parameters
    ----------
    n_components : int, default=2
    epsilon, delta : float, default 1.0 and 1e-5  (``epsilon=inf``: non-private)
    data_norm : float or None, default=1.0   public row-norm bound (rows clipped)
    max_iter, tol : EM stopping rule (post-processing)
    min_noise_variance : float, default=1e-6 (floor on Psi, in unit-ball units)
    random_state : None, int or Generator (experiments only)
    accountant : PrivacyBudget or None   charged with the fit's cost (checked before the data are read)

    Attributes
    ----------
    components_ (k, d) = W^T, noise_variance_ (d,), second_moment_ (the released Lambda),
    epsilon_spent_, delta_spent_, rho_spent_ (one analytic Gaussian release: rho = 1/(2 s**2)
    for its noise multiplier s, whatever n), n_iter_
    """

    def __init__(
        self,
        n_components=2,
        *,
        epsilon=1.0,
        delta=1e-5,
        data_norm=1.0,
        max_iter=5000,
        tol=1e-7,
        min_noise_variance=1e-6,
        out_of_bounds="clip",
        random_state=None,
        accountant=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.data_norm = data_norm
        self.max_iter = max_iter
        self.tol = tol
        self.min_noise_variance = min_noise_variance
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state
        self.accountant = accountant

    def fit(self, X, y=None):
        """Fit the loadings and noise variances to ``X`` (charging ``accountant``); ``y`` is ignored."""
        eps = check_epsilon(self.epsilon)
        private = is_private(eps)
        delta = check_delta(self.delta, allow_zero=not private) if private else check_delta(self.delta)
        k = check_count(self.n_components, "n_components")
        max_iter = check_positive(self.max_iter, "max_iter", integer=True)
        tol = check_positive(self.tol, "tol")
        floor = check_magnitude(self.min_noise_variance, "min_noise_variance")
        check_out_of_bounds(self.out_of_bounds)
        if private:
            # the analytic sigma is proportional to the sensitivity, so rho does not depend on n
            cost = PrivacyCost(eps, delta, 1.0 / (2.0 * analytic_gaussian_sigma(eps, delta) ** 2))
        else:
            cost = NON_PRIVATE
        with charged_fit(self, check_budget(self.accountant), cost, note="FactorAnalysis.fit"):
            self._fit(X, eps, delta, k, max_iter, tol, floor, private)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X, eps, delta, k, max_iter, tol, floor, private):
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        n, d = X.shape
        R = resolve_data_norm(self.data_norm, X, private=private, who="FactorAnalysis")
        if self.data_norm is not None:
            X = clip_rows_to_norm(X, R, self.out_of_bounds)
        Xu = X / R
        Lam = Xu.T @ Xu / n
        if private:
            iu = np.triu_indices(d)
            mech = GaussianMechanism(
                eps, delta, math.sqrt(2.0) / n, analytic=True, random_state=noise_rng(self.random_state)
            )
            rel = np.asarray(mech.randomise(Lam[iu]), float)  # Analyze Gauss on the upper triangle
            Lt = np.zeros((d, d))
            Lt[iu] = rel
            Lam = project_psd(Lt + np.triu(Lt, 1).T)
            self.noise_sigma_ = float(mech.sigma)
        else:
            self.noise_sigma_ = 0.0
        W, psi, it = fa_em(Lam, k, max_iter=max_iter, tol=tol, min_psi=floor, rng=aux_rng(self.random_state))
        if it == max_iter:
            warnings.warn("FactorAnalysis: EM reached max_iter before tol", RuntimeWarning, stacklevel=3)
        self.data_norm_ = R
        self.second_moment_ = Lam * R * R
        self.components_ = (W * R).T
        self.noise_variance_ = psi * R * R
        self.n_iter_ = it
        self.n_samples_seen_ = n

    def get_covariance(self):
        """The model's covariance ``components_.T @ components_ + diag(noise_variance_)``."""
        check_is_fitted(self)
        return self.components_.T @ self.components_ + np.diag(self.noise_variance_)

    def transform(self, X):
        """Posterior mean E[z | x] = G W^T Psi^-1 x."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        W = self.components_.T
        WtPinv = W.T / self.noise_variance_
        G = np.linalg.inv(np.eye(W.shape[1]) + WtPinv @ W)
        return X @ (G @ WtPinv).T

    def score_samples(self, X):
        """Log-likelihood of every row of ``X`` under the fitted model."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        S = self.get_covariance()
        L = np.linalg.cholesky(S)
        z = np.linalg.solve(L, X.T)
        d = X.shape[1]
        return -0.5 * (z * z).sum(axis=0) - np.log(np.diag(L)).sum() - 0.5 * d * math.log(2 * math.pi)

    def score(self, X, y=None):
        """Mean log-likelihood per row."""
        return float(np.mean(self.score_samples(X)))
