"""Differentially private Gaussian Bayes classifier (Xi, Kantarcioglu & Inan,
CODASPY 2011 -- seed 002) and the 1-D Bhattacharyya bound of its Theorem 4.1.

The attributes are mapped to the unit cube with the *public* ``bounds``
(u = (x - lower) / (upper - lower)); every query is answered there with the
Laplace mechanism and the noisy statistics are mapped back (post-processing).

Query styles (``query=``):

``"sum"`` (default; class labels and class sizes private)
    Per class c: the count n_c, the sum s_c = sum u and the upper triangle of
    the second-moment sum Q_c = sum u u^T.  Neighbouring data sets replace one
    labelled row, which may move it between classes, so over all classes the
    L1 sensitivities are 2 (counts), 2d (sums; Thm 3.2/3.4 give d inside one
    class, a row leaving one class and entering another doubles it) and
    d(d+1) (second moments: d(d+1)/2 entries in [0, 1], twice).  Then
    mu_c = s_c / n_c and Sigma_c = Q_c / n_c - mu_c mu_c^T.
``"mean"`` (the paper's direct queries; class sizes public)
    Per class: the mean with L1 sensitivity d / n_c (Thm 3.1) and the
    covariance upper triangle with the upper bound (3/n_c - 3/n_c^2) d(d+1)/2
    (Thm 3.7).  These sensitivities hold for neighbours of the *same* class
    size, i.e. they treat every n_c as public, as the paper does ("the number
    of records ... sensitivity 0"); the class counts are therefore used
    exactly and a :class:`~smcdp.dp.validation.PrivacyLeakWarning` says so.  Classes are disjoint,
    so the per-class releases compose in parallel.

PSD repair of the noisy covariance (``repair=``): ``"eigen"`` is the paper's
heuristic (negative eigenvalues replaced by the smallest positive one),
``"nearest"`` the nearest matrix with eigenvalues >= ``min_eigenvalue`` in
Frobenius norm (Higham).
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import NamedTuple

import numpy as np
from scipy import stats
from scipy.special import logsumexp
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import NON_PRIVATE, PrivacyCost, charged_fit, check_budget
from smcdp.dp.mechanisms import LaplaceMechanism
from smcdp.dp.samplers import noise_rng
from smcdp.dp.validation import (
    InvalidParameter,
    PrivacyLeakWarning,
    check_epsilon,
    check_magnitude,
    check_out_of_bounds,
    clip_to_bounds,
    is_private,
    repair_eigen,
    repair_nearest,
    resolve_bounds,
    resolve_classes,
)

__all__ = [
    "BhattacharyyaBound",
    "GaussianBayesClassifier",
    "bhattacharyya_bound",
    "covariance_sensitivity",
    "mean_sensitivity",
    "sum_statistics",
    "variance_sensitivity",
]


def mean_sensitivity(n: int, d: int) -> float:
    """Thm 3.1: L1 sensitivity d/n of the d attribute means (attributes in [0, 1])."""
    return d / n


def covariance_sensitivity(n: int, d: int) -> float:
    """Thm 3.7 upper bound (3/n - 3/n^2) d(d+1)/2 on the L1 sensitivity of the
    covariance upper triangle (1/n normalisation, attributes in [0, 1], n >= 2)."""
    return (3.0 / n - 3.0 / n**2) * d * (d + 1) / 2.0


def _upper(M, diag=False):
    if diag:
        return np.diag(M).copy()
    iu = np.triu_indices(M.shape[0])
    return M[iu]


def _from_upper(v, d, diag=False):
    if diag:
        return np.diag(np.asarray(v, float))
    M = np.zeros((d, d))
    iu = np.triu_indices(d)
    M[iu] = v
    return M + np.triu(M, 1).T


def variance_sensitivity(n: int, d: int) -> float:
    """Thm 3.5 upper bound d (3/n - 3/n^2) on the L1 sensitivity of the d attribute variances."""
    return (3.0 / n - 3.0 / n**2) * d


def sum_statistics(U, yi, n_classes, diag=False):
    """Per-class counts (C,), sums (C, d) and second-moment upper triangles (C, d(d+1)/2), or their
    diagonals (C, d) with ``diag=True`` -- the queries of ``query="sum"``; total L1 sensitivities 2, 2d
    and d(d+1) (2d for the diagonal) for rows in [0, 1]^d."""
    d = U.shape[1]
    n_all = np.array([np.sum(yi == c) for c in range(n_classes)], dtype=float)
    s_all = np.array([U[yi == c].sum(axis=0) for c in range(n_classes)]).reshape(n_classes, d)
    q_all = np.array([_upper(U[yi == c].T @ U[yi == c], diag) for c in range(n_classes)]).reshape(n_classes, -1)
    return n_all, s_all, q_all


class GaussianBayesClassifier(ClassifierMixin, BaseEstimator):
    """Gaussian (quadratic) Bayes classifier from Laplace-noised class statistics.

    Parameters
    ----------
    epsilon : float, default=1.0
        Total budget (``float('inf')``: exact MLE statistics).
    bounds : (lower, upper) or None
        Public per-attribute bounds (scalars or arrays).  ``None`` reads them from
        the data and warns when the fit is private.
    query : {"sum", "mean"}, default="sum"
    covariance : {"full", "diag"}, default="full"
        ``"diag"`` releases only the d variances (naive Bayes; Thm 3.5 for ``query="mean"``,
        L1 sensitivity 2d for the squared sums of ``query="sum"``).
    repair : {"eigen", "nearest"}, default="eigen"
    budget_split : tuple of floats or None
        Fractions of epsilon for (counts, sums, second moments) with
        ``query="sum"`` (default (0.1, 0.3, 0.6)), or (means, covariances) with
        ``query="mean"`` (default (0.5, 0.5)).
    min_eigenvalue : float, default=1e-6
        Eigenvalue floor of the repaired covariance in unit-cube coordinates.
    out_of_bounds : {"clip", "raise"}
    random_state : None, int or Generator (experiments only)
    classes : the public set of labels; None reads it from y and warns when private (PrivacyLeakWarning)
    accountant : PrivacyBudget or None   charged with the fit's cost (checked before the data are read)

    Attributes
    ----------
    classes_, class_count_ (noisy), class_prior_, theta_ (means), covariance_ (n_classes, d, d),
    epsilon_spent_, delta_spent_, rho_spent_ (sum of e_i**2/2 over the sequential Laplace
    releases of epsilon shares e_i), bounds_
    """

    def __init__(
        self,
        epsilon=1.0,
        *,
        bounds=None,
        query="sum",
        covariance="full",
        repair="eigen",
        budget_split=None,
        min_eigenvalue=1e-6,
        out_of_bounds="clip",
        random_state=None,
        accountant=None,
        classes=None,
    ):
        self.epsilon = epsilon
        self.classes = classes
        self.covariance = covariance
        self.bounds = bounds
        self.query = query
        self.repair = repair
        self.budget_split = budget_split
        self.min_eigenvalue = min_eigenvalue
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state
        self.accountant = accountant

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True  # noise calibrated to worst case; tiny check data sets
        return tags

    def _split(self):
        default = (0.1, 0.3, 0.6) if self.query == "sum" else (0.5, 0.5)
        split = default if self.budget_split is None else tuple(self.budget_split)
        if len(split) != len(default) or any((not isinstance(s, (int, float))) or s <= 0 for s in split):
            raise InvalidParameter(f"budget_split must be {len(default)} positive fractions for query={self.query!r}")
        if abs(sum(split) - 1.0) > 1e-9:
            raise InvalidParameter("budget_split must sum to 1")
        return split

    @staticmethod
    def _epsilons(eps, split):
        """The shares of ``eps`` the statistics spend: the split normalised, and nudged down until their sum is at
        most ``eps`` in floating point -- what the fit is charged (a split summing to 1 + 9e-10, which the check
        admits, spent eps(1 + 9e-10) against a charge of eps)."""
        if not is_private(eps):
            return tuple(eps for _ in split)
        total = math.fsum(split)
        parts = [eps * (s / total) for s in split]
        while sum(map(Fraction, parts)) > Fraction(eps):  # exactly: fsum's own rounding could hide half a unit
            parts = [p * (1.0 - 2.0**-52) for p in parts]
        return tuple(parts)

    def fit(self, X, y):
        """Fit the per-class means, variances and priors to ``X``, ``y`` (charging ``accountant``)."""
        eps = check_epsilon(self.epsilon)
        if self.query not in ("sum", "mean"):
            raise InvalidParameter(f"query must be 'sum' or 'mean', got {self.query!r}")
        if self.covariance not in ("full", "diag"):
            raise InvalidParameter(f"covariance must be 'full' or 'diag', got {self.covariance!r}")
        diag = self.covariance == "diag"
        if self.repair not in ("eigen", "nearest"):
            raise InvalidParameter(f"repair must be 'eigen' or 'nearest', got {self.repair!r}")
        floor = check_magnitude(self.min_eigenvalue, "min_eigenvalue")
        check_out_of_bounds(self.out_of_bounds)
        parts = self._epsilons(eps, self._split())
        # the shares of epsilon are released one after the other (the classes of one query in parallel)
        cost = PrivacyCost(eps, 0.0, sum(p**2 for p in parts) / 2.0) if is_private(eps) else NON_PRIVATE
        with charged_fit(self, check_budget(self.accountant), cost, note="GaussianBayesClassifier.fit"):
            self._fit(X, y, eps, diag, floor, parts)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X, y, eps, diag, floor, parts):
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        private = is_private(eps)
        d = X.shape[1]
        lower, upper = resolve_bounds(self.bounds, X, private=private, who="GaussianBayesClassifier")
        if self.bounds is not None:
            X = clip_to_bounds(X, lower, upper, self.out_of_bounds)
        width = upper - lower
        U = (X - lower) / width
        self.bounds_ = (lower, upper)
        self.classes_, yi = resolve_classes(self.classes, y, private=private, who="GaussianBayesClassifier")
        C = self.classes_.size
        # one stream for all draws: None stays the secure source
        gen = noise_rng(self.random_state) if private else None
        mus, covs, counts = [], [], []

        if self.query == "sum":
            if private:
                e_n, e_s, e_q = parts
                lap_n = LaplaceMechanism(e_n, 2.0, random_state=gen)
                lap_s = LaplaceMechanism(e_s, 2.0 * d, random_state=gen)
                lap_q = LaplaceMechanism(e_q, float(2 * d if diag else d * (d + 1)), random_state=gen)
            n_all, s_all, q_all = sum_statistics(U, yi, C, diag)
            if private:
                # each release computed exactly on the mechanism's grid (randomise, not value + sample)
                n_all = np.asarray(lap_n.randomise(n_all), float)
                s_all = np.asarray(lap_s.randomise(s_all), float)
                q_all = np.asarray(lap_q.randomise(q_all), float)
            for c in range(C):
                nc, sc, Qc = n_all[c], s_all[c], q_all[c]
                nc_eff = max(nc, 1.0)
                mu = sc / nc_eff
                S = _from_upper(Qc, d, diag) / nc_eff - (np.diag(mu * mu) if diag else np.outer(mu, mu))
                counts.append(nc)
                mus.append(mu)
                covs.append(S)
        else:
            if private:
                warnings.warn(
                    "GaussianBayesClassifier(query='mean') uses the paper's sensitivities, which treat the "
                    "class sizes as public: the class counts are used without noise.",
                    PrivacyLeakWarning,
                    stacklevel=3,
                )
                e_m, e_c = parts
            for c in range(C):
                Uc = U[yi == c]
                nc = Uc.shape[0]
                mu = Uc.mean(axis=0)
                S = (Uc - mu).T @ (Uc - mu) / nc
                if diag:
                    S = np.diag(np.diag(S))
                if private:
                    if nc < 2:
                        raise InvalidParameter(
                            f"query='mean' needs at least 2 rows per class (Thm 3.5-3.7 assume "
                            f"n >= 2), got n_samples={nc} in class {self.classes_[c]!r}"
                        )
                    mu = np.asarray(
                        LaplaceMechanism(e_m, mean_sensitivity(nc, d), random_state=gen).randomise(mu), float
                    )
                    sens_c = variance_sensitivity(nc, d) if diag else covariance_sensitivity(nc, d)
                    tri_vals = np.asarray(
                        LaplaceMechanism(e_c, sens_c, random_state=gen).randomise(_upper(S, diag)), float
                    )
                    S = _from_upper(tri_vals, d, diag)
                counts.append(float(nc))
                mus.append(mu)
                covs.append(S)

        repair = repair_eigen if self.repair == "eigen" else repair_nearest
        self.covariance_ = np.empty((C, d, d))
        self.theta_ = np.empty((C, d))
        for c in range(C):
            S = covs[c]
            if private or np.linalg.eigvalsh((S + S.T) / 2).min() < floor:
                S = repair(S, floor)
            self.covariance_[c] = S * np.outer(width, width)
            self.theta_[c] = lower + width * mus[c]
        self.class_count_ = np.asarray(counts)
        pri = np.maximum(self.class_count_, 1.0)
        self.class_prior_ = pri / pri.sum()
        self._prec_chol = []
        self._logdet = np.empty(C)
        for c in range(C):
            L = np.linalg.cholesky(self.covariance_[c])
            self._prec_chol.append(np.linalg.inv(L))
            self._logdet[c] = 2 * np.log(np.diag(L)).sum()

    def _joint_log_likelihood(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        d = X.shape[1]
        out = np.empty((X.shape[0], self.classes_.size))
        for c in range(self.classes_.size):
            z = (X - self.theta_[c]) @ self._prec_chol[c].T
            out[:, c] = (
                np.log(self.class_prior_[c])
                - 0.5 * (z * z).sum(axis=1)
                - 0.5 * self._logdet[c]
                - 0.5 * d * math.log(2 * math.pi)
            )
        return out

    def predict_log_proba(self, X):
        """Log-probabilities of the classes (columns in ``classes_`` order) for every row of ``X``."""
        jll = self._joint_log_likelihood(X)
        return jll - logsumexp(jll, axis=1, keepdims=True)

    def predict_proba(self, X):
        """Probabilities of the classes (columns in ``classes_`` order) for every row of ``X``."""
        return np.exp(self.predict_log_proba(X))

    def predict(self, X):
        """The most probable class of every row of ``X``."""
        check_is_fitted(self)
        return self.classes_[np.argmax(self._joint_log_likelihood(X), axis=1)]


# --------------------------------------------------------------------------
# Theorem 4.1: 1-D Bhattacharyya bound under Laplace noise
# --------------------------------------------------------------------------


class BhattacharyyaBound(NamedTuple):
    """(k_lower, k_upper, error_bound, probability)."""

    k_lower: float
    k_upper: float
    error_bound: float
    probability: float


def bhattacharyya_k(mu1, mu2, var1, var2):
    """K of the 1-D Bhattacharyya bound: (mu1-mu2)^2 / (4(v1+v2)) + 1/2 log((v1+v2) / (2 sqrt(v1 v2)))."""
    s = var1 + var2
    return (mu1 - mu2) ** 2 / (4 * s) + 0.5 * math.log(s / (2 * math.sqrt(var1 * var2)))


def bhattacharyya_bound(mu, var, n, noise_scales, p=0.95, priors=None):
    """Interval for the Bhattacharyya exponent K computed from Laplace-noised
    1-D class statistics, after Xi et al. (002) Theorem 4.1.

    Setting: class i ~ N(mu[i], var[i]) with n[i] rows; the released statistics
    are mu_hat_i = xbar_i + r_i and var_hat_i = S_i^2 + r_{i+2} with independent
    r_j ~ Laplace(0, noise_scales[j]) (S^2 with 1/n normalisation).  With
    probability at least ``p**8`` each of the eight independent quantities
    (two sample means, two sample variances, four noises) lies in its central
    p-interval, and then K(mu_hat, var_hat) lies in ``[k_lower, k_upper]``, so
    the Bhattacharyya bound sqrt(P1 P2) exp(-K) of the released model is at most
    ``error_bound = sqrt(P1 P2) exp(-k_lower)``.

    Differences from the paper's statement, which we believe are typos: the
    central p-interval of a distribution runs between its (1-p)/2 and (1+p)/2
    quantiles (the paper writes p/2 and 1-p/2, which is the central (1-p)
    interval), the Laplace(0, b) central p-interval is +-b log(1/(1-p)), and
    instead of bounding the terms of the expanded square separately we take
    the two terms of K separately over the box of admissible values (the
    first is monotone in ``|mu_hat_1 - mu_hat_2|`` and in v1 + v2, the second
    depends only on the ratio v1/v2), which gives a valid enclosure.  If the box admits a non-positive variance, k_lower = 0 and
    k_upper = inf (no information).
    """
    mu = np.asarray(mu, float)
    var = np.asarray(var, float)
    n = np.asarray(n, float)
    lam = np.asarray(noise_scales, float)
    if mu.shape != (2,) or var.shape != (2,) or n.shape != (2,) or lam.shape != (4,):
        raise InvalidParameter("mu, var, n need 2 entries and noise_scales 4 (mean1, mean2, var1, var2)")
    if np.any(var <= 0) or np.any(n < 2) or np.any(lam < 0) or not (0 < p < 1):
        raise InvalidParameter("need var > 0, n >= 2, noise_scales >= 0 and 0 < p < 1")
    if priors is None:
        priors = n / n.sum()
    priors = np.asarray(priors, float)
    z = stats.norm.ppf((1 + p) / 2)
    lap = lam * math.log(1 / (1 - p))
    mean_half = np.sqrt(var / n) * z + lap[:2]
    chi_lo = stats.chi2.ppf((1 - p) / 2, n - 1)
    chi_hi = stats.chi2.ppf((1 + p) / 2, n - 1)
    v_lo = var / n * chi_lo - lap[2:]
    v_hi = var / n * chi_hi + lap[2:]
    prob = p**8
    coeff = math.sqrt(priors[0] * priors[1])
    if np.any(v_lo <= 0):
        return BhattacharyyaBound(0.0, math.inf, coeff, prob)
    # difference of means interval
    d_lo = (mu[0] - mean_half[0]) - (mu[1] + mean_half[1])
    d_hi = (mu[0] + mean_half[0]) - (mu[1] - mean_half[1])
    dmin = 0.0 if d_lo <= 0 <= d_hi else min(abs(d_lo), abs(d_hi))
    dmax = max(abs(d_lo), abs(d_hi))
    # second term depends on the ratio r = v1/v2 only: g(r) = 1/2 log((1+r)/(2 sqrt r)), minimal at r = 1
    r_lo, r_hi = v_lo[0] / v_hi[1], v_hi[0] / v_lo[1]

    def g(r):
        return 0.5 * math.log((1 + r) / (2 * math.sqrt(r)))

    g_min = 0.0 if r_lo <= 1 <= r_hi else min(g(r_lo), g(r_hi))
    g_max = max(g(r_lo), g(r_hi))
    k_lower = dmin**2 / (4 * (v_hi[0] + v_hi[1])) + g_min
    k_upper = dmax**2 / (4 * (v_lo[0] + v_lo[1])) + g_max
    return BhattacharyyaBound(k_lower, k_upper, coeff * math.exp(-k_lower), prob)
