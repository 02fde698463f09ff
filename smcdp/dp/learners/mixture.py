"""DP-EM for Gaussian mixtures (Park, Foulds, Chaudhuri & Welling, AISTATS 2017
-- seed 004, Sections 4-5).

Every EM iteration perturbs the M-step statistics:

* mixing weights pi = N_k / N (N public) with sensitivity 2/N (eq. 12), then
  clipped to [0, 1] and renormalised (footnote 5);
* the responsibility-weighted sums s_k = sum_i gamma_ik x_i (L2 sensitivity 2,
  L1 2 sqrt(d), rows in the unit ball), released and divided by the noisy
  N~_k = N pi~_k -- this is the paper's noise level 2/N~_k on the mean (eq. 14-15)
  but with the noise calibrated to a data-independent sensitivity (the paper's
  2/N~_k bound is stated for the exact N_k);
* the weighted second moments sum_i gamma_ik x_i x_i^T (Frobenius sensitivity 2,
  eq. 17; ||x x^T|| <= 1) with Analyze Gauss (symmetric noise on the upper
  triangle), then Sigma_k = S~_k / N~_k - mu_k mu_k^T and negative eigenvalues
  are projected to ``min_eigenvalue`` (Sec. 4.2).

Scenarios: "LLG" (Laplace for pi and means, Gaussian for covariances) and "GGG"
(Gaussian for all).  The per-iteration budget for the J(2K+1) releases is solved
from the total (epsilon, delta) by :func:`smcdp.dp.learners.dpem_budget.solve_dpem_budget`
with composition "linear", "advanced", "zcdp" or "moments".

The initial parameters are data-independent (means uniform in the unit ball
from ``random_state``, identity-scaled covariances, uniform weights) or given by
the caller (``means_init`` ...), so initialisation spends no budget.

Rows are scaled by the public ``data_norm`` into the unit ball (clipped if
longer); the fitted parameters are reported in the original units.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, DensityMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import NON_PRIVATE, PrivacyCost, charged_fit, check_budget
from smcdp.dp.learners.dpem_budget import solve_dpem_budget
from smcdp.dp.mechanisms import GaussianMechanism, LaplaceMechanism
from smcdp.dp.samplers import aux_rng, noise_rng
from smcdp.dp.validation import (
    InvalidParameter,
    check_count,
    check_delta,
    check_epsilon,
    check_magnitude,
    check_out_of_bounds,
    check_positive,
    clip_rows_to_norm,
    is_private,
    repair_nearest,
    resolve_data_norm,
)

__all__ = ["GaussianMixture", "gaussian_log_density"]


def gaussian_log_density(X, means, covariances):
    """log N(x | mu_k, Sigma_k) for every row and component: (n, K)."""
    n, d = X.shape
    K = means.shape[0]
    out = np.empty((n, K))
    for k in range(K):
        L = np.linalg.cholesky(covariances[k])
        z = np.linalg.solve(L, (X - means[k]).T)
        out[:, k] = -0.5 * (z * z).sum(0) - np.log(np.diag(L)).sum() - 0.5 * d * math.log(2 * math.pi)
    return out


def data_independent_means(K: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """The start the fit takes without ``means_init``: K points uniform in the ball of radius 1/2 (unit-ball units,
    from ``rng`` alone, never from the data).  A caller that wants a seeded start with the *noise* from the secure
    source passes these, times its ``data_norm``, as ``means_init`` and leaves ``random_state`` None."""
    g = rng.normal(size=(K, d))
    g /= np.linalg.norm(g, axis=1, keepdims=True)
    return g * rng.uniform(size=(K, 1)) ** (1.0 / d) * 0.5


class GaussianMixture(DensityMixin, BaseEstimator):
    """Gaussian mixture fitted by DP-EM.

    Parameters
    ----------
    n_components : int, default=1
    epsilon, delta : total budget (``epsilon=inf``: plain EM from the same start)
    n_iter : int, default=10        J (fixed: the number of releases is public)
    scenario : {"GGG", "LLG"}, default="GGG"
    composition : {"zcdp", "moments", "advanced", "linear"}, default="zcdp"
    estimator : {"mle", "map"}, default="mle"
    alpha, kappa0, nu0, psi0 : MAP prior (Dirichlet(alpha), NIW(m0=0, kappa0, nu0, psi0 * I))
    data_norm : float or None, default=1.0
    min_eigenvalue : float, default=1e-4  (eigenvalue floor, unit-ball units)
    means_init, weights_init, covariances_init : optional public initial values (original units)
    random_state : None, int or Generator (experiments only)
    accountant : PrivacyBudget or None   charged with the fit's cost (checked before the data are read)

    Attributes
    ----------
    weights_, means_, covariances_, epsilon_spent_, delta_spent_, rho_spent_ (the zCDP cost of
    all releases, ``budget_.rho``), budget_ (the solved per-iteration budget), n_iter_
    """

    def __init__(
        self,
        n_components=1,
        *,
        epsilon=1.0,
        delta=1e-4,
        n_iter=10,
        scenario="GGG",
        composition="zcdp",
        estimator="mle",
        alpha=1.0,
        kappa0=0.0,
        nu0=0.0,
        psi0=0.0,
        data_norm=1.0,
        min_eigenvalue=1e-4,
        means_init=None,
        weights_init=None,
        covariances_init=None,
        out_of_bounds="clip",
        random_state=None,
        accountant=None,
    ):
        self.n_components = n_components
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.scenario = scenario
        self.composition = composition
        self.estimator = estimator
        self.alpha = alpha
        self.kappa0 = kappa0
        self.nu0 = nu0
        self.psi0 = psi0
        self.data_norm = data_norm
        self.min_eigenvalue = min_eigenvalue
        self.means_init = means_init
        self.weights_init = weights_init
        self.covariances_init = covariances_init
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state
        self.accountant = accountant

    # ------------------------------------------------------------------
    def _check(self):
        eps = check_epsilon(self.epsilon)
        private = is_private(eps)
        delta = check_delta(self.delta, allow_zero=not private)
        K = check_count(self.n_components, "n_components")
        J = check_positive(self.n_iter, "n_iter", integer=True)
        if self.scenario not in ("GGG", "LLG"):
            raise InvalidParameter("scenario must be 'GGG' or 'LLG'")
        if self.composition not in ("zcdp", "moments", "advanced", "linear"):
            raise InvalidParameter("composition must be 'zcdp', 'moments', 'advanced' or 'linear'")
        if self.estimator not in ("mle", "map"):
            raise InvalidParameter("estimator must be 'mle' or 'map'")
        alpha = check_positive(self.alpha, "alpha")
        if alpha < 1:
            raise InvalidParameter("alpha must be >= 1 (the MAP weights need a mode)")
        kappa0 = check_positive(self.kappa0, "kappa0", allow_zero=True)
        nu0 = check_positive(self.nu0, "nu0", allow_zero=True)
        psi0 = check_positive(self.psi0, "psi0", allow_zero=True)
        floor = check_magnitude(self.min_eigenvalue, "min_eigenvalue")
        check_out_of_bounds(self.out_of_bounds)
        return eps, delta, K, J, alpha, kappa0, nu0, psi0, floor, private

    def _init_params(self, K, d, R):
        rng = aux_rng(self.random_state)
        if self.means_init is None:
            means = data_independent_means(K, d, rng)
        else:
            means = np.asarray(self.means_init, float) / R
            if means.shape != (K, d):
                raise InvalidParameter(f"means_init must have shape ({K}, {d})")
        if self.weights_init is None:
            weights = np.full(K, 1.0 / K)
        else:
            weights = np.asarray(self.weights_init, float)
            if weights.shape != (K,) or np.any(weights < 0) or not np.isclose(weights.sum(), 1.0):
                raise InvalidParameter("weights_init must be K non-negative weights summing to 1")
        if self.covariances_init is None:
            covs = np.tile(np.eye(d) * (0.25 / d), (K, 1, 1))
        else:
            covs = np.asarray(self.covariances_init, float) / R**2
            if covs.shape != (K, d, d):
                raise InvalidParameter(f"covariances_init must have shape ({K}, {d}, {d})")
            for c in covs:
                if not np.allclose(c, c.T) or np.linalg.eigvalsh(c).min() <= 0:
                    raise InvalidParameter("covariances_init must be symmetric positive definite")
        return weights, means, covs

    def privacy_cost(self):
        """What a fit with these parameters spends (independent of the data):
        ``(PrivacyCost, DPEMBudget or None)``; validates the parameters."""
        eps, delta, K, J, *_, private = self._check()
        if not private:
            return NON_PRIVATE, None
        budget = solve_dpem_budget(eps, delta, J, K, scenario=self.scenario, method=self.composition)
        return PrivacyCost(eps, delta, budget.rho), budget

    def _mechanisms(self, budget, N, d, gen):
        """The three per-iteration releases.  Each call releases all K components at
        once; the joint sensitivities equal the per-component ones of the paper
        (sum_k (gamma_k + gamma'_k)^2 <= 4), so one joint release costs no more than
        the single per-component release the solver accounts for K times."""
        pi_m: LaplaceMechanism | GaussianMechanism
        mu_m: LaplaceMechanism | GaussianMechanism
        if self.scenario == "LLG":
            pi_m = LaplaceMechanism(budget.eps_per_iter, 2.0 / N, random_state=gen)
            mu_m = LaplaceMechanism(budget.eps_per_iter, 2.0 * math.sqrt(d), random_state=gen)
        else:
            pi_m = GaussianMechanism.from_sigma(budget.sigma_weights * 2.0 / N, 2.0 / N, random_state=gen)
            mu_m = GaussianMechanism.from_sigma(budget.sigma_means * 2.0, 2.0, random_state=gen)
        cov_m = GaussianMechanism.from_sigma(budget.sigma_covariances * 2.0, 2.0, random_state=gen)
        return pi_m, mu_m, cov_m

    def fit(self, X, y=None):
        """Run DP-EM on ``X`` (charging ``accountant`` once for all iterations); ``y`` is ignored."""
        cost, budget = self.privacy_cost()
        with charged_fit(self, check_budget(self.accountant), cost, note="GaussianMixture.fit"):
            self.budget_ = budget
            self._fit(X)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X):
        _eps, _delta, K, J, alpha, kappa0, nu0, psi0, floor, private = self._check()
        mle = self.estimator == "mle"
        X = validate_data(self, X, dtype=np.float64, ensure_min_samples=2)
        N, d = X.shape
        R = resolve_data_norm(self.data_norm, X, private=private, who="GaussianMixture")
        if self.data_norm is not None:
            X = clip_rows_to_norm(X, R, self.out_of_bounds)
        Xu = X / R
        weights, means, covs = self._init_params(K, d, R)
        iu = np.triu_indices(d)
        if private:
            pi_m, mu_m, cov_m = self._mechanisms(self.budget_, N, d, noise_rng(self.random_state))
        for _ in range(J):
            # E-step with the previous (released) parameters
            logp = gaussian_log_density(Xu, means, covs) + np.log(np.maximum(weights, 1e-300))
            resp = np.exp(logp - logsumexp(logp, axis=1, keepdims=True))
            Nk = resp.sum(axis=0)
            sums = resp.T @ Xu  # (K, d)
            second = np.einsum("ik,id,ie->kde", resp, Xu, Xu)  # (K, d, d)
            pi = Nk / N
            if private:
                pi = np.asarray(pi_m.randomise(pi), float)
                pi = np.clip(pi, 0.0, 1.0)
                if pi.sum() <= 0:
                    pi = np.full(K, 1.0 / K)
                pi = pi / pi.sum()
                Ntil = N * pi
                sums = np.asarray(mu_m.randomise(sums), float).reshape(K, d)
                tri = np.asarray(cov_m.randomise(second[:, iu[0], iu[1]]), float).reshape(K, -1)
                second = np.zeros((K, d, d))
                second[:, iu[0], iu[1]] = tri
                second[:, iu[1], iu[0]] = tri
            else:
                Ntil = Nk
            Neff = np.maximum(Ntil, 1e-12 if not private else 1.0)
            if mle:
                weights = pi
                means = sums / Neff[:, None]
                covs = second / Neff[:, None, None] - np.einsum("kd,ke->kde", means, means)
            else:
                w = np.maximum(Ntil + alpha - 1.0, 0.0)
                weights = w / w.sum() if w.sum() > 0 else np.full(K, 1.0 / K)
                means = sums / (Neff + kappa0)[:, None]
                covs = (
                    second + psi0 * np.eye(d) - (Neff + kappa0)[:, None, None] * np.einsum("kd,ke->kde", means, means)
                )
                covs = covs / (Neff + nu0 + d + 2)[:, None, None]
            covs = repair_nearest(covs, floor)
        self.weights_ = weights
        self.means_ = means * R
        self.covariances_ = covs * R**2
        self.data_norm_ = R
        self.n_iter_ = J
        self.converged_ = True

    # ------------------------------------------------------------------
    def score_samples(self, X):
        """Log-density of every row of ``X`` under the fitted mixture."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        logp = gaussian_log_density(X, self.means_, self.covariances_) + np.log(np.maximum(self.weights_, 1e-300))
        return logsumexp(logp, axis=1)

    def score(self, X, y=None):
        """Mean log-likelihood per row."""
        return float(np.mean(self.score_samples(X)))

    def predict_proba(self, X):
        """Posterior probability of every component for every row of ``X``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        logp = gaussian_log_density(X, self.means_, self.covariances_) + np.log(np.maximum(self.weights_, 1e-300))
        return np.exp(logp - logsumexp(logp, axis=1, keepdims=True))

    def predict(self, X):
        """The most probable component of every row of ``X``."""
        return np.argmax(self.predict_proba(X), axis=1)
