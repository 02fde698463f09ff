"""DPLloyd k-means (Blum, Dwork, McSherry & Nissim 2005, as summarised by Su et
al. 2016), the baseline of DP-EM's Section 7 (seed 004), with linear or zCDP
composition across iterations.

Each of the J Lloyd iterations assigns the rows to the nearest centre and
releases, per cluster, the count and the coordinate sums with Laplace noise;
the new centre is noisy sum / noisy count, clipped to the public box.

Sensitivity.  Rows are clipped to the public box ``bounds=(lower, upper)`` and
shifted by its centre (public), so every coordinate lies in [-w_j/2, w_j/2]
with w = upper - lower.  Replacing one row moves it between at most two
clusters: the counts change by at most 2 in L1 and the sums by at most
sum_j w_j, so the L1 sensitivity of one iteration's release is
``2 + sum_j w_j`` (the paper's "d + 1" is for add/remove neighbours on [0, 1]^d).

Composition.  ``"linear"``: each iteration spends epsilon / J.  ``"zcdp"``:
an epsilon_i-DP Laplace release is epsilon_i^2/2-zCDP (Bun & Steinke Prop. 1.4),
J of them are J epsilon_i^2 / 2-zCDP, which is (rho + 2 sqrt(rho log(1/delta)),
delta)-DP (Prop. 1.3); we solve for the largest epsilon_i meeting (epsilon, delta).
Either way the fit is J epsilon_i^2/2-zCDP, its ``rho_spent_``.
"""

from __future__ import annotations

import math

import numpy as np
from sklearn.base import BaseEstimator, ClusterMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import NON_PRIVATE, PrivacyCost, charged_fit, check_budget
from smcdp.dp.conversions import zcdp_rho_classic
from smcdp.dp.mechanisms import LaplaceMechanism
from smcdp.dp.samplers import aux_rng, noise_rng
from smcdp.dp.validation import (
    InvalidParameter,
    check_count,
    check_delta,
    check_epsilon,
    check_out_of_bounds,
    check_positive,
    clip_to_bounds,
    is_private,
    resolve_bounds,
)

__all__ = ["KMeans", "zcdp_per_step_epsilon"]


def zcdp_per_step_epsilon(epsilon, delta, steps):
    """Largest eps_i such that ``steps`` eps_i-DP releases are (epsilon, delta)-DP via zCDP
    (classic conversion rho + 2 sqrt(rho log(1/delta)) = epsilon)."""
    return math.sqrt(2.0 * zcdp_rho_classic(epsilon, delta) / steps)


class KMeans(ClusterMixin, TransformerMixin, BaseEstimator):
    """Differentially private Lloyd's algorithm (DPLloyd).

    Parameters
    ----------
    n_clusters : int, default=8
    epsilon : float, default=1.0 (``inf``: plain Lloyd from the same initial centres)
    delta : float, default=1e-5 (used by ``composition="zcdp"``)
    n_iter : int, default=5 (J, fixed: the number of releases must be public)
    composition : {"linear", "zcdp"}, default="zcdp"
    bounds : (lower, upper) or None   public box (None: read from data, with a warning)
    init : None or array (n_clusters, d)  initial centres; default uniform in the box (public)
    random_state : None, int or Generator
    accountant : PrivacyBudget or None   charged with the fit's cost (checked before the data are read)

    Attributes
    ----------
    cluster_centers_, epsilon_spent_, delta_spent_, rho_spent_, epsilon_per_iter_; labels_ and inertia_ (of
    the training rows: no DP release) only for a non-private fit (epsilon = inf)
    """

    def __init__(
        self,
        n_clusters=8,
        *,
        epsilon=1.0,
        delta=1e-5,
        n_iter=5,
        composition="zcdp",
        bounds=None,
        init=None,
        out_of_bounds="clip",
        random_state=None,
        accountant=None,
    ):
        self.n_clusters = n_clusters
        self.epsilon = epsilon
        self.delta = delta
        self.n_iter = n_iter
        self.composition = composition
        self.bounds = bounds
        self.init = init
        self.out_of_bounds = out_of_bounds
        self.random_state = random_state
        self.accountant = accountant

    def fit(self, X, y=None):
        """Run DP Lloyd iterations on ``X`` (charging ``accountant``); ``y`` is ignored."""
        eps = check_epsilon(self.epsilon)
        private = is_private(eps)
        k = check_count(self.n_clusters, "n_clusters")
        J = check_positive(self.n_iter, "n_iter", integer=True)
        if self.composition not in ("linear", "zcdp"):
            raise InvalidParameter("composition must be 'linear' or 'zcdp'")
        delta = check_delta(self.delta, allow_zero=self.composition == "linear" or not private)
        check_out_of_bounds(self.out_of_bounds)
        if not private:
            eps_i, cost = math.inf, NON_PRIVATE
        elif self.composition == "linear":
            eps_i = eps / J
            cost = PrivacyCost(eps, 0.0, J * eps_i**2 / 2.0)
        else:
            eps_i = zcdp_per_step_epsilon(eps, delta, J)
            cost = PrivacyCost(eps, delta, J * eps_i**2 / 2.0)
        with charged_fit(self, check_budget(self.accountant), cost, note="KMeans.fit"):
            self._fit(X, k, J, eps_i, private)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X, k, J, eps_i, private):
        X = validate_data(self, X, dtype=np.float64)
        n, d = X.shape
        if n < k and not private:
            raise InvalidParameter(f"n_samples={n} should be >= n_clusters={k}")
        lower, upper = resolve_bounds(self.bounds, X, private=private, who="KMeans")
        if self.bounds is not None:
            X = clip_to_bounds(X, lower, upper, self.out_of_bounds)
        if self.init is None:
            C = aux_rng(self.random_state).uniform(lower, upper, size=(k, d))
        else:
            C = np.array(self.init, dtype=float)
            if C.shape != (k, d) or not np.all(np.isfinite(C)):
                raise InvalidParameter(f"init must be a finite array of shape ({k}, {d})")
        centre = (lower + upper) / 2
        sens = 2.0 + float(np.sum(upper - lower))
        if private:
            mech = LaplaceMechanism(eps_i, sens, random_state=noise_rng(self.random_state))
        self.epsilon_per_iter_ = eps_i
        Xc = X - centre
        for _ in range(J):
            lab = self._assign(X, C)
            counts = np.bincount(lab, minlength=k).astype(float)
            sums = np.zeros((k, d))
            np.add.at(sums, lab, Xc)
            if private:
                rel = np.asarray(mech.randomise(np.column_stack([counts, sums])), float)
                counts, sums = rel[:, 0], rel[:, 1:]
                newC = centre + sums / np.maximum(counts, 1.0)[:, None]
                C = np.clip(newC, lower, upper)
            else:
                nonempty = counts > 0
                C = C.copy()
                C[nonempty] = centre + sums[nonempty] / counts[nonempty, None]
        self.cluster_centers_ = C
        if not private:
            # the training rows' clusters and their exact sum of squared distances are no DP release: a private fit
            # does not set them (a review read one row's squared distance to its centre to 15 digits from inertia_);
            # predict(X) gives the labels from the released centres where the caller holds the rows
            self.labels_ = self._assign(X, C)
            self.inertia_ = float(((X - C[self.labels_]) ** 2).sum())
        self.bounds_ = (lower, upper)
        self.n_iter_ = J

    @staticmethod
    def _assign(X, C):
        d2 = (X * X).sum(1)[:, None] - 2 * X @ C.T + (C * C).sum(1)[None, :]
        return np.argmin(d2, axis=1)

    def fit_predict(self, X, y=None):
        """Fit, then the nearest released centre of every row of ``X`` (for the caller, who holds ``X``; a private fit
        keeps no ``labels_`` on the estimator)."""
        return self.fit(X).predict(X)

    def predict(self, X):
        """The index of the nearest centre for every row of ``X``."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return self._assign(X, self.cluster_centers_)

    def transform(self, X):
        """Distances from every row of ``X`` to every centre."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return np.sqrt(np.maximum(((X[:, None, :] - self.cluster_centers_[None]) ** 2).sum(-1), 0))

    def score(self, X, y=None):
        """Negative inertia on X (scikit-learn's convention)."""
        D = self.transform(X)
        return -float((D.min(axis=1) ** 2).sum())

    def normalised_intra_cluster_variance(self, X):
        """NICV = (1/N) sum_i min_k ||x_i - c_k||^2, the paper's Fig. 4 metric."""
        return -self.score(X) / len(X)
