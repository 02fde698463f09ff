"""Differentially private large-margin Gaussian (mixture) classifier
(Pathak & Raj, IEEE TDSC 2012 -- seed 000; single-Gaussian version in 001).

Model.  Each class c has K ellipsoids Phi_cm, (d+1)x(d+1) PSD matrices acting
on z = [x; 1]; the decision rule is ``argmin_c min_m z^T Phi_cm z``.

Objective (000, eq. 11 plus the perturbation of eq. 14)::

    J_p(Phi) = (1/n) sum_i sum_{c != y_i} l_h(1 + z_i^T Phi_{y_i m_i} z_i
                                             + log sum_m exp(-z_i^T Phi_cm z_i))
               + gamma sum_cm tr(I_Phi Phi_cm I_Phi) + lam sum_cm ||Phi_cm||_F^2
               + sum_cm <b_cm, Phi_cm>_F

minimised over Phi_cm >= 0 (PSD), with the Huber-smoothed hinge
``l_h(v) = 0 (v < -h), (v + h)^2 / (4h) (|v| <= h), v (v > h)``.

Privacy, as implemented (see docs/dp-learners.md for the full derivation):

* b = (b_cm) is drawn in the space of symmetric matrices (only the symmetric
  part of b enters the objective, and the map b -> Phi^p must be a bijection)
  with density proportional to exp(-epsilon ||b||_F / Delta).
* Delta bounds the Frobenius change of the loss gradient between neighbours.
  With ||x|| <= R, ||z||^2 <= R^2 + 1 =: s and the per-row gradient has norm at
  most G = s sqrt(C (C - 1)) (l' in [0, 1], softmax weights sum to one), so
  replacing one row moves (1/n) sum grad by at most 2G/n.  ``noise_sensitivity=None``
  uses Delta = 2G/n; the paper bounds it by 1 (valid once n >= 2G), which
  ``noise_sensitivity=1.0`` reproduces.
* The Jacobian factor.  The per-row Hessian has rank r <= (C - 1) K and trace
  at most T = (C - 1) s^2 (1/h + 1 - 1/K); the objective is 2 lam-strongly
  convex, so the ratio of Jacobian determinants is at most
  (1 + T / (2 lam n r))^r, i.e. k = r log(1 + T / (2 n lam r)).
  ``epsilon_spent_ = epsilon + k``.  The paper states k = log(1 + 1/(n lam))
  (which ignores h and C); it is reported as ``epsilon_paper_``.
* With n_components > 1 the component labels m_i come from a per-class mixture
  fit.  ``component_labels="private"`` uses the DP-EM GaussianMixture with
  (label_epsilon, label_delta) per class; a replaced row can change two classes,
  so this adds 2 label_epsilon and 2 label_delta.  ``"nonprivate"`` uses
  scikit-learn's GaussianMixture, warns, and sets ``epsilon_spent_ = inf``.

Caveat.  The privacy argument of 000 is for an unconstrained minimiser; with the
PSD constraints the minimiser satisfies a KKT condition instead of a stationarity
condition.  Objective perturbation over closed convex domains is treated by
Kifer, Smith & Thakurta (COLT 2012); we rely on that extension and say so.

Solver: accelerated projected gradient (FISTA with backtracking and adaptive
restart) over the product of PSD cones, stopped when the projected-gradient
residual is below ``tol``; ``optimality_`` reports the KKT residuals.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.special import logsumexp, softmax
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.mixture import GaussianMixture as SkGaussianMixture
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import NON_PRIVATE, PrivacyCost, charged_fit, check_budget
from smcdp.dp.learners.mixture import GaussianMixture
from smcdp.dp.mechanisms import VectorMechanism
from smcdp.dp.samplers import noise_rng
from smcdp.dp.validation import (
    InvalidParameter,
    PrivacyLeakWarning,
    check_count,
    check_delta,
    check_epsilon,
    check_magnitude,
    check_out_of_bounds,
    check_positive,
    clip_rows_to_norm,
    is_private,
    project_psd,
    refuse_short_of_tol,
    resolve_classes,
    resolve_data_norm,
    set_solver_diagnostics,
)

__all__ = ["LargeMarginGaussianClassifier", "large_margin_jacobian_term", "large_margin_sensitivity"]


def large_margin_sensitivity(n, n_classes, data_norm=1.0):
    """2G/n with G = (R^2 + 1) sqrt(C (C - 1)): Frobenius sensitivity of the mean loss gradient."""
    s = data_norm**2 + 1.0
    return 2.0 * s * math.sqrt(n_classes * (n_classes - 1)) / n


def large_margin_jacobian_term(n, lam, h, n_classes, n_components=1, data_norm=1.0):
    """k = r log(1 + T / (2 n lam r)) with r = (C-1) K and T = (C-1) s^2 (1/h + 1 - 1/K)."""
    s = data_norm**2 + 1.0
    C, K = n_classes, n_components
    r = (C - 1) * K
    T = (C - 1) * s * s * (1.0 / h + 1.0 - 1.0 / K)
    return r * math.log1p(T / (2.0 * n * lam * r))


def _huber(v, h):
    loss = np.where(v > h, v, np.where(v < -h, 0.0, (v + h) ** 2 / (4 * h)))
    dl = np.where(v > h, 1.0, np.where(v < -h, 0.0, (v + h) / (2 * h)))
    return loss, dl


class _Objective:
    """Value and gradient of J_p for fixed data; Phi has shape (C, K, D, D)."""

    def __init__(self, Z, yi, mi, C, K, lam, gamma, h, b):
        self.Z, self.yi, self.mi, self.C, self.K = Z, yi, mi, C, K
        self.lam, self.gamma, self.h, self.b = lam, gamma, h, b
        n, D = Z.shape
        self.n, self.D = n, D
        self.Itr = np.eye(D)
        self.Itr[-1, -1] = 0.0
        self.other = np.ones((n, C), bool)
        self.other[np.arange(n), yi] = False

    def value_grad(self, P, need_grad=True):
        Z, n = self.Z, self.n
        q = np.einsum("id,ckde,ie->ick", Z, P, Z)  # (n, C, K)
        own = q[np.arange(n), self.yi, self.mi]  # (n,)
        lse = logsumexp(-q, axis=2)  # (n, C)
        v = 1.0 + own[:, None] + lse
        loss, dl = _huber(v, self.h)
        loss = np.where(self.other, loss, 0.0)
        dl = np.where(self.other, dl, 0.0)
        f = loss.sum() / n
        f += self.gamma * np.einsum("ckdd,d->", P, np.diag(self.Itr))
        f += self.lam * np.sum(P * P)
        if self.b is not None:
            f += np.sum(self.b * P)
        if not need_grad:
            return f, None
        pi = softmax(-q, axis=2)  # (n, C, K)
        W = -dl[:, :, None] * pi  # d v_ic / d q_icm = -pi
        W[np.arange(n), self.yi, self.mi] += dl.sum(axis=1)
        G = np.einsum("ick,id,ie->ckde", W, Z, Z) / n
        G += self.gamma * self.Itr + 2.0 * self.lam * P
        if self.b is not None:
            G += self.b
        return f, G


#: step halvings a FISTA iteration may try: a Lipschitz estimate 2^200 times the last one means the objective's
#: arithmetic has broken down (an overflowed value makes every comparison false, and doubling L never ended)
_MAX_BACKTRACKS = 200


def _solve(obj, P0, tol, max_iter):
    """FISTA with backtracking and gradient-based restart on the PSD product cone."""
    P = project_psd(P0)
    Y = P.copy()
    t = 1.0
    L = 2.0 * obj.lam + 1.0
    fY, gY = obj.value_grad(Y)
    it = 0
    resid = math.inf
    # no tolerance below what the arithmetic resolves: a gradient carrying the perturbation b is exact only to about
    # 2^-52·|b| (epsilon = 1e-12 made |b| ~ 1e12: an absolute 1e-7 was out of reach and the solver ran all 20,000
    # iterations, 26 s on 60 samples); for ordinary epsilons this is far below tol and changes nothing
    if obj.b is not None:
        tol = max(tol, 2.0**-46 * float(np.max(np.abs(obj.b))))
    for it in range(1, max_iter + 1):  # noqa: B007 - the count is read after the loop (n_iter_)
        for _ in range(_MAX_BACKTRACKS):
            Pn = project_psd(Y - gY / L)
            fn, _ = obj.value_grad(Pn, need_grad=False)
            diff = Pn - Y
            if fn <= fY + np.sum(gY * diff) + 0.5 * L * np.sum(diff * diff) + 1e-15 * abs(fY):
                break
            L *= 2.0
        else:  # no step decreases the objective as it must: it is not finite, or beyond float64's reach here
            return P, it, math.inf  # reported as not converged (converged_ = False, with its warning)
        # projected-gradient residual at Y (scaled by the step)
        resid = L * math.sqrt(np.sum(diff * diff))
        if resid <= tol:
            P = Pn
            break
        tn = (1 + math.sqrt(1 + 4 * t * t)) / 2
        Yn = Pn + ((t - 1) / tn) * (Pn - P)
        if np.sum((Y - Pn) * (Pn - P)) > 0:  # adaptive restart (O'Donoghue & Candes)
            Yn, tn = Pn.copy(), 1.0
        P, Y, t = Pn, Yn, tn
        fY, gY = obj.value_grad(Y)
        L = max(L / 1.5, 2.0 * obj.lam)
    return P, it, resid


def kkt_residuals(obj, P):
    """(min eigenvalue of Phi, min eigenvalue of grad, |<Phi, grad>|, projected-gradient norm)."""
    _, G = obj.value_grad(P)
    Gs = (G + np.swapaxes(G, -1, -2)) / 2
    min_phi = float(np.linalg.eigvalsh((P + np.swapaxes(P, -1, -2)) / 2).min())
    min_g = float(np.linalg.eigvalsh(Gs).min())
    comp = float(abs(np.sum(P * Gs)))
    pg = float(math.sqrt(np.sum((P - project_psd(P - Gs)) ** 2)))
    return {"min_eig_phi": min_phi, "min_eig_grad": min_g, "complementarity": comp, "projected_grad": pg}


class LargeMarginGaussianClassifier(ClassifierMixin, BaseEstimator):
    """Large-margin Gaussian (mixture) classifier trained by objective perturbation.

    Parameters
    ----------
    epsilon : float, default=1.0      (``inf``: non-private large-margin fit)
    lam : float, default=0.01         weight of sum ||Phi_cm||_F^2 (strong convexity)
    gamma : float, default=0.01       weight of the trace regulariser
    h : float, default=0.5            Huber parameter
    n_components : int, default=1     ellipsoids per class
    data_norm : float or None, default=1.0   public row-norm bound (rows clipped)
    noise_sensitivity : float or None   Delta of the perturbation density (None: 2G/n)
    component_labels : {"private", "nonprivate"}, default="private"
    label_epsilon, label_delta : budget of the per-class DP mixture fit (n_components > 1)
    tol : float, default=1e-7         projected-gradient tolerance
    max_iter : int, default=20000
    random_state : None, int or Generator (experiments only)
    classes : the public set of labels; None reads it from y and warns when private (PrivacyLeakWarning)
    accountant : PrivacyBudget or None   charged with the fit's cost (checked before X is read)
    keep_diagnostics : bool, default=False   keep optimality_, n_iter_ and converged_ on a private fit too
        (warned, PrivacyLeakWarning: computed from the data, not the release; not DP); non-private fits keep them

    Attributes
    ----------
    classes_, phi_ (n_classes, n_components, d+1, d+1), epsilon_spent_, delta_spent_,
    rho_spent_ (``epsilon'**2/2`` for the objective perturbation plus twice the label mixture's rho),
    epsilon_paper_, noise_sensitivity_; optimality_ (KKT residuals), n_iter_, converged_ (non-private fits,
    or ``keep_diagnostics=True``)
    """

    def __init__(
        self,
        epsilon=1.0,
        *,
        lam=0.01,
        gamma=0.01,
        h=0.5,
        n_components=1,
        data_norm=1.0,
        noise_sensitivity=None,
        component_labels="private",
        label_epsilon=1.0,
        label_delta=1e-5,
        out_of_bounds="clip",
        tol=1e-7,
        max_iter=20000,
        random_state=None,
        accountant=None,
        classes=None,
        keep_diagnostics=False,
    ):
        self.epsilon = epsilon
        self.keep_diagnostics = keep_diagnostics
        self.classes = classes
        self.lam = lam
        self.gamma = gamma
        self.h = h
        self.n_components = n_components
        self.data_norm = data_norm
        self.noise_sensitivity = noise_sensitivity
        self.component_labels = component_labels
        self.label_epsilon = label_epsilon
        self.label_delta = label_delta
        self.out_of_bounds = out_of_bounds
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.accountant = accountant

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True
        return tags

    def _augment(self, X):
        X = X / self.data_norm_
        return np.hstack([X, np.ones((X.shape[0], 1))])

    def _labels_cost(self, K, private):
        """Cost of the per-class DP mixture fits that label the components (K > 1):
        a replaced row can change two classes, so twice one fit's cost."""
        if K == 1 or not private:
            return PrivacyCost(0.0, 0.0, 0.0)
        if self.component_labels == "nonprivate":
            return NON_PRIVATE
        one, _ = self._label_mixture(K, private).privacy_cost()
        return PrivacyCost(2.0 * one.epsilon, 2.0 * one.delta, 2.0 * one.rho)

    def _label_mixture(self, K, private, random_state=None):
        le = check_epsilon(self.label_epsilon, "label_epsilon") if private else math.inf
        ld = check_delta(self.label_delta, "label_delta", allow_zero=False) if private else 0.0
        return GaussianMixture(K, epsilon=le, delta=ld, data_norm=1.0, random_state=random_state)

    def fit(self, X, y):
        """Fit the large-margin Gaussian models to ``X``, ``y`` (charging ``accountant``)."""
        eps = check_epsilon(self.epsilon)
        lam = check_magnitude(self.lam, "lam")
        gamma = check_positive(self.gamma, "gamma", allow_zero=True)
        if gamma:  # 0 turns the trace regulariser off; otherwise as lam (1e308 made the objective infinite)
            gamma = check_magnitude(gamma, "gamma")
        h = check_magnitude(self.h, "h")
        K = check_count(self.n_components, "n_components")
        tol = check_positive(self.tol, "tol")
        max_iter = check_positive(self.max_iter, "max_iter", integer=True)
        check_out_of_bounds(self.out_of_bounds)
        if self.component_labels not in ("private", "nonprivate"):
            raise InvalidParameter("component_labels must be 'private' or 'nonprivate'")
        if not isinstance(self.keep_diagnostics, (bool, np.bool_)):
            raise InvalidParameter(f"keep_diagnostics must be True or False, got {self.keep_diagnostics!r}")
        private = is_private(eps)
        cost = NON_PRIVATE
        if private:
            # the cost depends only on public facts: n, the set of classes (taken from the
            # labels, as scikit-learn does) and the parameters -- X is not read before the charge
            if y is None:
                raise InvalidParameter(
                    f"This {type(self).__name__} estimator requires y to be passed, but the target y is None."
                )
            labels = np.asarray(y)
            stated = None if self.classes is None else np.unique(np.asarray(self.classes))
            n = int(labels.shape[0]) if labels.ndim else 0
            C = int(np.unique(labels).size) if stated is None else int(stated.size)
            if C < 2:
                raise InvalidParameter("LargeMarginGaussianClassifier needs at least 2 classes, got 1 class")
            eps_obj = eps + large_margin_jacobian_term(n, lam, h, C, K, 1.0)
            extra = self._labels_cost(K, private)
            cost = PrivacyCost(eps_obj + extra.epsilon, extra.delta, eps_obj**2 / 2.0 + extra.rho)
            if math.isinf(extra.epsilon):
                cost = NON_PRIVATE
        with charged_fit(self, check_budget(self.accountant), cost, note="LargeMarginGaussianClassifier.fit"):
            self._fit(X, y, eps, lam, gamma, h, K, tol, max_iter, private)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X, y, eps, lam, gamma, h, K, tol, max_iter, private):
        X, y = validate_data(self, X, y, dtype=np.float64)
        check_classification_targets(y)
        self.classes_, yi = resolve_classes(self.classes, y, private=private, who="LargeMarginGaussianClassifier")
        C = self.classes_.size
        if C < 2:
            raise InvalidParameter("LargeMarginGaussianClassifier needs at least 2 classes, got 1 class")
        n, d = X.shape
        R = resolve_data_norm(self.data_norm, X, private=private, who="LargeMarginGaussianClassifier")
        if self.data_norm is not None:
            X = clip_rows_to_norm(X, R, self.out_of_bounds)
        # work in units of the norm bound: rows in the unit ball, z = [x/R; 1], ||z||^2 <= 2
        self.data_norm_ = R
        Z = self._augment(X)
        D = d + 1

        # one stream for every draw of the fit: the classes' label mixtures and b (a seed made each its own
        # default_rng(seed), so every class's mixture drew the same noise and their difference was exact)
        gen = noise_rng(self.random_state)
        mi = np.zeros(n, dtype=int)
        if K > 1:
            mi = self._component_labels(X, yi, C, K, private, gen)

        b = None
        G = 2.0 * math.sqrt(C * (C - 1))  # s = 2 in unit-norm coordinates
        delta_tight = 2.0 * G / n
        if private:
            if self.noise_sensitivity is None:
                sens = delta_tight
            else:
                sens = check_positive(self.noise_sensitivity, "noise_sensitivity")
                if sens < delta_tight:
                    raise InvalidParameter(
                        f"noise_sensitivity={sens:g} is below the gradient sensitivity 2G/n={delta_tight:g}"
                    )
            tri = D * (D + 1) // 2
            # a density for b, as objective perturbation's proof needs (VectorMechanism.sample_dithered)
            u = np.asarray(VectorMechanism(eps, sens, random_state=gen).sample_dithered((C * K * tri,)), float)
            u = u.reshape(C, K, tri)
            iu = np.triu_indices(D)
            off = iu[0] != iu[1]
            b = np.zeros((C, K, D, D))
            vals = np.where(off, u / math.sqrt(2.0), u)  # isometry: ||b||_F = ||u||_2
            b[:, :, iu[0], iu[1]] = vals
            b[:, :, iu[1], iu[0]] = vals
            self.noise_sensitivity_ = sens
            self.epsilon_paper_ = eps + math.log1p(1.0 / (n * lam))
        else:
            self.noise_sensitivity_ = None
            self.epsilon_paper_ = math.inf

        obj = _Objective(Z, yi, mi, C, K, lam, gamma, h, b)
        P, it, resid = _solve(obj, np.zeros((C, K, D, D)), tol, max_iter)
        if private:
            refuse_short_of_tol(resid, tol, "LargeMarginGaussianClassifier")
        self.phi_ = P
        diagnostics = {"n_iter_": it, "optimality_": kkt_residuals(obj, P), "converged_": resid <= tol}
        set_solver_diagnostics(
            self, diagnostics, private=private, keep=self.keep_diagnostics, who="LargeMarginGaussianClassifier"
        )
        if not diagnostics["converged_"]:
            warnings.warn(
                f"LargeMarginGaussianClassifier: solver stopped at residual {resid:.3g} > tol={tol:g}",
                RuntimeWarning,
                stacklevel=3,
            )
        # the objective is not kept: it holds the scaled training rows, their labels and the perturbation b (a
        # fitted -- pickled, shared -- model carried them; a review recovered every row)

    def _component_labels(self, X, yi, C, K, private, gen):
        Xu = X / self.data_norm_
        mi = np.zeros(X.shape[0], dtype=int)
        if self.component_labels == "nonprivate":
            if private:
                warnings.warn(
                    "component_labels='nonprivate' fits the per-class mixtures without privacy: "
                    "the classifier is not differentially private (epsilon_spent_ = inf)",
                    PrivacyLeakWarning,
                    stacklevel=4,
                )
            for c in range(C):
                rows = yi == c
                if rows.sum() >= K:
                    gm = SkGaussianMixture(K, random_state=0).fit(Xu[rows])
                    mi[rows] = gm.predict(Xu[rows])
            return mi
        for c in range(C):
            rows = yi == c
            gm = self._label_mixture(K, private, gen).fit(Xu[rows])
            mi[rows] = gm.predict(Xu[rows])
        return mi

    def decision_function(self, X):
        """Negative distance min_m z^T Phi_cm z per class (larger is more likely)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        Z = self._augment(X)
        q = np.einsum("id,ckde,ie->ick", Z, self.phi_, Z)
        dist = q.min(axis=2)
        if self.classes_.size == 2:
            return dist[:, 0] - dist[:, 1]
        return -dist

    def predict(self, X):
        """The class of every row of ``X`` (the largest discriminant)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        Z = self._augment(X)
        q = np.einsum("id,ckde,ie->ick", Z, self.phi_, Z)
        return self.classes_[np.argmin(q.min(axis=2), axis=1)]
