"""Differentially private L2-regularised binary logistic regression.

Objective (labels y in {-1, +1}, rows x with ``||x||_2 <= R``)::

    J(w) = (1/n) sum_i log(1 + exp(-y_i w.x_i)) + lam ||w||^2

Two mechanisms (Chaudhuri, Monteleoni & Sarwate, JMLR 12, 2011):

``mechanism="output"`` (sensitivity method, their Algorithm 1)
    Release ``w* + eta`` with eta of density proportional to
    ``exp(-epsilon ||eta||_2 / Delta_2)``.  Derivation of Delta_2: let D, D'
    differ in one row (replace (x_n, y_n) by (x'_n, y'_n)).  J_D is
    2*lam-strongly convex, and ``g = J_D' - J_D = (1/n)(l(w; x'_n) - l(w; x_n))``
    has ``||grad g|| <= 2R/n`` because ``|l'(z)| <= 1`` for the logistic loss.
    At the minimisers, 0 = grad J_D(w) = grad J_D'(w') so
    ``2 lam ||w - w'||^2 <= <grad J_D(w') - grad J_D(w), w' - w>
    = <-grad g(w'), w' - w> <= (2R/n) ||w - w'||``, hence
    ``Delta_2 = ||w - w'|| <= R / (n lam)`` (= 1/(n lam) for R = 1; the
    factor 2 of the seed holds for a lam/2 regulariser).  This is
    :func:`logistic_sensitivity`.

``mechanism="objective"`` (objective perturbation, their Algorithm 2)
    With the data rescaled to the unit ball (v = R w, x/R), the regulariser is
    ``(Lambda/2)||v||^2`` with ``Lambda = 2 lam / R^2`` and the loss has
    ``c = 1/4`` (bound on l'').  Then
    ``eps' = eps - log(1 + 2c/(n Lambda) + c^2/(n^2 Lambda^2))``; if eps' <= 0
    an extra ridge ``Delta = c/(n(exp(eps/4) - 1)) - Lambda`` is added and
    ``eps' = eps/2``.  b has density proportional to ``exp(-eps' ||b|| / 2)``
    and the *exact* minimiser of
    ``J(v) + (1/n) b.v + (Delta/2)||v||^2`` is ``eps``-DP.

    A solver returns an approximate minimiser, and where it stops depends on the
    data; so (like the approximate minima perturbation of Iyengar et al., 2019,
    but pure) the fit spends ``eps_obj = (1 - OUTPUT_SHARE) eps`` on b as above
    and ``eps_out = OUTPUT_SHARE eps`` on an output stage: the certified solve's
    point v^ is projected onto a public ball of radius rho_B (never reached
    while ``||b/n|| <= RELEASE_LIN_BOUND``; the direction is kept) and released
    with the vector mechanism at ``eps_out`` and sensitivity ``2r/R`` (in w =
    v/R), r a public bound on ``||P(v^) - P(v*)||`` for every b
    (:func:`~smcdp.dp.learners.logistic_bounds.approximate_minimiser_bound`).
    Proof: fix the exact minimiser v*; b is a function of (D, v*), the solve a
    function of (D, b), so the released centre is ``c_D(v*)`` with
    ``||c_D(v*) - c_D'(v*)|| <= 2r``, and the output stage gives
    ``g_D(v*) = P[release in S | v*] <= e^eps_out g_D'(v*)``; v* is
    ``eps_obj``-DP (objective perturbation) and g_D' a function of v* with
    values in [0, 1], so ``E_D[g_D'] <= e^eps_obj E_D'[g_D']``: the release is
    ``eps``-DP -- pure in the sense of the vector mechanism's own guarantee
    (:mod:`smcdp.dp.mechanisms`: exact arithmetic, its sampler's tail).
    ``epsilon_spent_`` is the input ``epsilon``; ``epsilon_noise_`` is eps',
    ``epsilon_output_`` eps_out, ``noise_sensitivity_`` 2r/R and
    ``extra_ridge_`` Delta.

``epsilon=float('inf')`` gives the plain (non-private) regularised fit, which
equals scikit-learn's ``LogisticRegression(C=1/(2 n lam))`` without intercept,
or liblinear with ``intercept_scaling`` when ``fit_intercept=True`` (the
intercept is a regularised weight on a constant feature, so that strong
convexity -- which the privacy proofs need -- also covers it).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from smcdp.dp.budget import PrivacyCost, charged_fit, check_budget
from smcdp.dp.learners.logistic_bounds import (
    OUTPUT_SHARE,
    approximate_minimiser_bound,
    certified_slack,
    certified_tolerance,
)
from smcdp.dp.learners.logistic_objective import fit_logistic_objective, logistic_sensitivity
from smcdp.dp.mechanisms import VectorMechanism
from smcdp.dp.samplers import noise_rng
from smcdp.dp.validation import (
    InvalidParameter,
    check_epsilon,
    check_magnitude,
    check_out_of_bounds,
    check_positive,
    clip_rows_to_norm,
    is_private,
    resolve_classes,
    resolve_data_norm,
    set_solver_diagnostics,
)

__all__ = ["LogisticRegression", "fit_logistic_objective", "logistic_sensitivity"]

#: bound on the second derivative of log(1 + exp(-z))
_C_LOGISTIC = 0.25


def objective_shares(eps: float) -> tuple[float, float]:
    """(eps_obj, eps_out): objective perturbation's share of ``eps`` for b and its output stage's
    (``OUTPUT_SHARE``), their exact sum at most ``eps`` (eps − eps_out alone can round up by half a unit)."""
    eps_out = eps * OUTPUT_SHARE
    eps_obj = eps - eps_out
    while Fraction(eps_obj) + Fraction(eps_out) > Fraction(eps):
        eps_obj = math.nextafter(eps_obj, 0.0)
    return eps_obj, eps_out


class LogisticRegression(ClassifierMixin, BaseEstimator):
    """Binary L2-regularised logistic regression with differential privacy.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy budget; ``float('inf')`` fits without noise.
    lam : float, default=0.01
        Regularisation strength lambda of ``J(w) = (1/n) sum log(1+exp(-y w.x)) + lam ||w||^2``.
    data_norm : float or None, default=1.0
        Public bound R on the L2 norm of each row.  Longer rows are scaled back
        onto the ball (``out_of_bounds="clip"``) or rejected (``"raise"``).
        ``None`` reads the bound from the data and warns (:class:`~smcdp.dp.validation.PrivacyLeakWarning`)
        when ``epsilon`` is finite.
    mechanism : {"objective", "output"}, default="objective"
    fit_intercept : bool, default=False
        If True a constant feature ``intercept_scaling`` is appended and its
        (regularised) weight gives ``intercept_``; the norm bound becomes
        ``sqrt(data_norm**2 + intercept_scaling**2)``.
    intercept_scaling : float, default=1.0
    out_of_bounds : {"clip", "raise"}, default="clip"
    tol : float, default=1e-8
        Gradient-norm tolerance of the solver (``optimality_`` reports the attained value).  A private fit
        always reaches it: where float64 cannot be sure to (a tolerance below
        :func:`~smcdp.dp.learners.logistic_bounds.certified_tolerance`, which depends on n, the number of
        features, ``lam`` and, for objective perturbation, the noise) that floor is used instead.
    max_iter : int, default=10000
        Damped Newton's iterations.  A private fit that Newton did not finish within them goes on by gradient
        descent for as many steps as its convergence proof needs (public; docs/dp-learners.md, finding 3), so no
        private fit is refused for stopping short -- a refusal would be a bit about the data.
    keep_diagnostics : bool, default=False
        Keep ``n_iter_`` and ``optimality_`` on a private fit too (with a
        :class:`~smcdp.dp.validation.PrivacyLeakWarning`): they are computed from the data, not from the
        release, and are not differentially private (docs/dp-learners.md).  A non-private fit keeps them always.
    random_state : None, int or numpy Generator
        ``None`` (default) draws privacy noise from the secure source; a seed is
        for reproducible experiments only.
    classes : array-like of two labels or None, default=None
        The public set of labels.  ``None`` reads it from ``y`` and warns when ``epsilon`` is finite
        (:class:`~smcdp.dp.validation.PrivacyLeakWarning`: replacing the only row of a class changed the fit into a
        refusal); stated, a data set with one of them only is fitted like any other.
    accountant : PrivacyBudget or None, default=None
        Budget charged with the fit's cost (checked before the data are read,
        spent when the fit succeeds); ``None``: no accounting.

    Attributes
    ----------
    coef_ : ndarray of shape (1, n_features)
    intercept_ : ndarray of shape (1,)
    classes_ : ndarray of shape (2,)   (classes_[1] is the +1 label)
    n_samples_seen_ : int
    sensitivity_ : float
        L2 sensitivity ``R/(n lam)`` of the non-private minimiser (in the
        coordinates of ``[coef_, intercept_/intercept_scaling]``).
    epsilon_spent_, delta_spent_, rho_spent_ : float
        The guarantee of the fit (pure epsilon-DP, rho = epsilon**2/2), exactly
        what ``accountant`` was charged; ``inf`` for a non-private fit.
    epsilon_noise_, extra_ridge_ : float   (objective perturbation only)
    epsilon_output_ : float or None
        Objective perturbation: the share of ``epsilon`` its output stage spends (``OUTPUT_SHARE``, 1 %).
    noise_sensitivity_ : float or None
        Output perturbation: the sensitivity the noise is calibrated to,
        ``sensitivity_ + s * R / lam``, s the solver's certified bound on the true gradient norm at the returned
        point (its tolerance plus the gradient's floating-point error: ``certified_slack``).  Objective
        perturbation: its output stage's, ``2r/R`` with r from
        :func:`~smcdp.dp.learners.logistic_bounds.approximate_minimiser_bound` (about 2·tol/(μR)).
    n_iter_ : int
        The solver's iterations (non-private fits, or ``keep_diagnostics=True``).
    optimality_ : float
        Gradient norm of the (perturbed) objective at the returned point (non-private fits, or
        ``keep_diagnostics=True``).
    """

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        lam: float = 0.01,
        data_norm: float = 1.0,
        mechanism: str = "objective",
        fit_intercept: bool = False,
        intercept_scaling: float = 1.0,
        out_of_bounds: str = "clip",
        tol: float = 1e-8,
        max_iter: int = 10_000,
        random_state: Any = None,
        accountant: Any = None,
        classes: Any = None,
        keep_diagnostics: bool = False,
    ) -> None:
        self.epsilon = epsilon
        self.keep_diagnostics = keep_diagnostics
        self.classes = classes
        self.lam = lam
        self.data_norm = data_norm
        self.mechanism = mechanism
        self.fit_intercept = fit_intercept
        self.intercept_scaling = intercept_scaling
        self.out_of_bounds = out_of_bounds
        self.tol = tol
        self.max_iter = max_iter
        self.random_state = random_state
        self.accountant = accountant

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.multi_class = False
        # With finite epsilon the noise is calibrated to the worst case, so on the
        # tiny data sets of the common checks the accuracy can fall below 0.83.
        tags.classifier_tags.poor_score = (
            is_private(float(self.epsilon)) if isinstance(self.epsilon, (int, float)) else True
        )
        return tags

    # ------------------------------------------------------------------
    def _check_params(self):
        eps = check_epsilon(self.epsilon)
        lam = check_magnitude(self.lam, "lam")
        if self.mechanism not in ("objective", "output"):
            raise InvalidParameter(f"mechanism must be 'objective' or 'output', got {self.mechanism!r}")
        if not isinstance(self.fit_intercept, (bool, np.bool_)):
            raise InvalidParameter("fit_intercept must be a bool")
        if not isinstance(self.keep_diagnostics, (bool, np.bool_)):
            raise InvalidParameter(f"keep_diagnostics must be True or False, got {self.keep_diagnostics!r}")
        scaling = check_magnitude(self.intercept_scaling, "intercept_scaling")
        check_out_of_bounds(self.out_of_bounds)
        tol = check_positive(self.tol, "tol")
        check_positive(self.max_iter, "max_iter", integer=True)
        return eps, lam, scaling, tol

    def fit(self, X: Any, y: Any) -> LogisticRegression:
        """Fit to ``X``, ``y`` (two classes; charging ``accountant`` once the fit succeeds)."""
        eps, lam, scaling, tol = self._check_params()
        cost = PrivacyCost.pure(eps)
        with charged_fit(self, check_budget(self.accountant), cost, note="LogisticRegression.fit"):
            self._fit(X, y, eps, lam, scaling, tol)
            self.epsilon_spent_, self.delta_spent_, self.rho_spent_ = cost.epsilon, cost.delta, cost.rho
        return self

    def _fit(self, X, y, eps, lam, scaling, tol):
        X, y = validate_data(self, X, y, dtype=np.float64, y_numeric=False)
        check_classification_targets(y)
        private = is_private(eps)
        classes, _ = resolve_classes(self.classes, y, private=private, who="LogisticRegression")
        if classes.size > 2:
            raise InvalidParameter(
                "Only binary classification is supported: LogisticRegression is a binary classifier, "
                f"got {classes.size} classes"
            )
        if classes.size < 2:
            raise InvalidParameter(f"LogisticRegression needs 2 classes, got 1 class ({classes[0]!r})")
        self.classes_ = classes
        ys = np.where(y == classes[1], 1.0, -1.0)
        n = X.shape[0]

        data_norm = resolve_data_norm(self.data_norm, X, private=private, who="LogisticRegression")
        if self.data_norm is not None:
            X = clip_rows_to_norm(X, data_norm, self.out_of_bounds)
        if self.fit_intercept:
            Xa = np.hstack([X, np.full((n, 1), scaling)])
            R = math.hypot(data_norm, scaling)
        else:
            Xa = X
            R = data_norm
        Xs = Xa / R  # rows in the unit ball
        lam_u = lam / R**2  # lam ||w||^2 = lam/R^2 ||v||^2 with v = R w
        self.sensitivity_ = R / (n * lam)
        self.n_samples_seen_ = n
        self.data_norm_ = data_norm
        self.epsilon_noise_ = eps
        self.epsilon_output_ = None
        self.extra_ridge_ = 0.0
        self.noise_sensitivity_ = None

        if not private:
            v, nit, gnorm = fit_logistic_objective(Xs, ys, lam_u, tol=tol, max_iter=self.max_iter)
            w = v / R
        elif self.mechanism == "output":
            # the solver certainly reaches a tolerance that depends on public quantities only (n, d, lam, R):
            # no refusal on the data (logistic_objective's docstring)
            tol_c = certified_tolerance(tol, n, Xs.shape[1], 2.0 * lam_u)
            v, nit, gnorm = fit_logistic_objective(Xs, ys, lam_u, tol=tol_c, max_iter=self.max_iter, certain=True)
            w = v / R
            # the returned point's true gradient is at most `slack`, so it lies within slack/(2 lam_u) of the
            # minimiser (v coordinates), and two neighbouring releases differ by at most R/(n lam) + slack R / lam
            slack = certified_slack(tol_c, n, Xs.shape[1], 2.0 * lam_u)
            self.noise_sensitivity_ = self.sensitivity_ + slack * R / lam
            mech = VectorMechanism(eps, self.noise_sensitivity_, random_state=noise_rng(self.random_state))
            w = np.asarray(mech.randomise(w), float).reshape(-1)  # exact on the grid (no float channel)
        else:
            # the objective's share of eps, and the output stage's (docstring: the approximate minimiser)
            eps_obj, eps_out = objective_shares(eps)
            Lam = 2.0 * lam_u  # CMS regulariser Lambda * ||v||^2 / 2
            c = _C_LOGISTIC
            eps_p = eps_obj - math.log1p(2 * c / (n * Lam) + c**2 / (n * Lam) ** 2)
            ridge = 0.0
            if eps_p <= 0:
                ridge = c / (n * math.expm1(eps_obj / 4)) - Lam
                eps_p = eps_obj / 2
            # b with density ∝ exp(-eps_p ||b|| / 2): the L2 mechanism with sensitivity 2, dithered within its
            # grid cell -- the proof needs a density for b (a lattice b is recomputed from the minimiser and the
            # data, on the lattice under the true data only: VectorMechanism.sample_dithered)
            rng = noise_rng(self.random_state)  # one stream for b and the output stage (a seed: independent draws)
            b = np.asarray(VectorMechanism(eps_p, 2.0, random_state=rng).sample_dithered(Xa.shape[1]), float).reshape(
                -1
            )
            # the tolerance depends on n, d, the regularisers and the noise's norm, not on the data
            lin = b / n
            mu = 2.0 * lam_u + ridge
            # public: the ball and the bound on how far the projected solve lies from the projected minimiser
            radius, r = approximate_minimiser_bound(tol, n, Xs.shape[1], mu)
            tol_c = certified_tolerance(tol, n, Xs.shape[1], mu, float(np.linalg.norm(lin)))
            if not math.isfinite(tol_c):  # a b/n beyond ~1e150 (epsilon ~1e-140): decided by b, not by the data
                raise InvalidParameter("the objective's noise is too large for float64 to bound its solve")
            v, nit, gnorm = fit_logistic_objective(
                Xs, ys, lam_u, linear=lin, ridge=ridge, tol=tol_c, max_iter=self.max_iter, certain=True
            )
            norm = float(np.linalg.norm(v))
            if norm > radius:  # only when the noise's b/n is beyond RELEASE_LIN_BOUND: the direction is kept
                v = v * (radius / norm)
            w = v / R
            # the exact minimiser v* is eps_obj-DP; given v*, two data sets' centres lie within r/R of P(v*) each
            self.noise_sensitivity_ = 2.0 * r / R
            mech = VectorMechanism(eps_out, self.noise_sensitivity_, random_state=rng)
            w = np.asarray(mech.randomise(w), float).reshape(-1)
            self.epsilon_noise_ = eps_p
            self.epsilon_output_ = eps_out
            self.extra_ridge_ = ridge

        set_solver_diagnostics(
            self,
            {"n_iter_": nit, "optimality_": gnorm},
            private=private,
            keep=self.keep_diagnostics,
            who="LogisticRegression",
        )
        if self.fit_intercept:
            self.coef_ = w[:-1].reshape(1, -1)
            self.intercept_ = np.array([w[-1] * scaling])
        else:
            self.coef_ = w.reshape(1, -1)
            self.intercept_ = np.zeros(1)

    # ------------------------------------------------------------------
    def decision_function(self, X):
        """The score ``X @ coef_.T + intercept_`` of every row (positive: ``classes_[1]``)."""
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_[0] + self.intercept_[0]

    def predict_proba(self, X):
        """Probabilities of the two classes (columns in ``classes_`` order) for every row of ``X``."""
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    def predict_log_proba(self, X):
        """Log-probabilities of the two classes for every row of ``X``."""
        return np.log(self.predict_proba(X))

    def predict(self, X):
        """The class of every row of ``X``."""
        check_is_fitted(self)
        return self.classes_[(self.decision_function(X) > 0).astype(int)]
