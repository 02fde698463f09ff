import math
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression as SkLR

from smcdp.dp import LogisticRegression, PrivacyLeakWarning, logistic_sensitivity
from smcdp.dp.learners.logistic import fit_logistic_objective
from smcdp.dp.validation import InvalidParameter
from smcdp.errors import InvalidMessage

INF = float("inf")


def _data(n=300, d=5, seed=0, norm=1.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    X *= norm / np.linalg.norm(X, axis=1).max()
    y = (X[:, 0] + 0.3 * X[:, 1] + 0.2 * rng.normal(size=n) * norm > 0).astype(int)
    return X, y


@pytest.mark.parametrize("lam", [0.001, 0.01, 0.3])
def test_nonprivate_matches_sklearn_without_intercept(lam):
    X, y = _data()
    ours = LogisticRegression(epsilon=INF, lam=lam).fit(X, y)
    ref = SkLR(C=1 / (2 * len(X) * lam), fit_intercept=False, tol=1e-12, max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-6, atol=1e-8)
    assert ours.intercept_.tolist() == [0.0]
    assert ours.epsilon_spent_ == INF and ours.delta_spent_ == 0.0
    assert ours.optimality_ <= 1e-8
    np.testing.assert_allclose(ours.predict_proba(X), ref.predict_proba(X), atol=1e-7)


def test_nonprivate_with_intercept_matches_liblinear():
    X, y = _data(seed=1)
    lam = 0.01
    ours = LogisticRegression(epsilon=INF, lam=lam, fit_intercept=True, intercept_scaling=1.5).fit(X, y + 5)
    ref = SkLR(C=1 / (2 * len(X) * lam), solver="liblinear", intercept_scaling=1.5, tol=1e-12, max_iter=100_000).fit(
        X, y + 5
    )
    np.testing.assert_allclose(ours.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(ours.intercept_, ref.intercept_, rtol=1e-5, atol=1e-7)
    assert list(ours.classes_) == [5, 6]


def test_labels_pm1_and_01_give_same_model():
    X, y = _data()
    a = LogisticRegression(epsilon=INF).fit(X, y)
    b = LogisticRegression(epsilon=INF).fit(X, 2 * y - 1)
    np.testing.assert_allclose(a.coef_, b.coef_)
    assert set(b.predict(X)) <= {-1, 1}


def test_sensitivity_attribute_and_function():
    X, y = _data(n=250)
    m = LogisticRegression(epsilon=INF, lam=0.05).fit(X, y)
    assert m.n_samples_seen_ == 250
    assert m.sensitivity_ == pytest.approx(1 / (250 * 0.05))
    assert logistic_sensitivity(250, 0.05) == pytest.approx(1 / (250 * 0.05))
    assert logistic_sensitivity(250, 0.05, data_norm=3.0) == pytest.approx(3 / (250 * 0.05))
    m2 = LogisticRegression(epsilon=INF, lam=0.05, data_norm=2.0, fit_intercept=True, intercept_scaling=1.0).fit(X, y)
    assert m2.sensitivity_ == pytest.approx(math.hypot(2.0, 1.0) / (250 * 0.05))
    with pytest.raises(InvalidMessage):
        logistic_sensitivity(0, 0.1)
    with pytest.raises(InvalidMessage):
        logistic_sensitivity(10, -1.0)


@pytest.mark.parametrize("data_norm", [1.0, 4.0])
def test_empirical_sensitivity_on_neighbouring_datasets(data_norm):
    """||w(D) - w(D')|| <= R/(n lam) on many neighbour pairs, including adversarial replacements."""
    rng = np.random.default_rng(7)
    n, d, lam = 60, 4, 0.05
    bound = logistic_sensitivity(n, lam, data_norm)
    worst = 0.0
    for trial in range(60):
        X, y = _data(n=n, d=d, seed=100 + trial, norm=data_norm)
        Xp, yp = X.copy(), y.copy()
        i = rng.integers(n)
        # replacement row on the sphere of radius R, label flipped half of the time
        v = rng.normal(size=d)
        Xp[i] = data_norm * v / np.linalg.norm(v)
        if trial % 2:
            yp[i] = 1 - yp[i]
        w = LogisticRegression(epsilon=INF, lam=lam, data_norm=data_norm).fit(X, y).coef_[0]
        wp = LogisticRegression(epsilon=INF, lam=lam, data_norm=data_norm).fit(Xp, yp).coef_[0]
        gap = np.linalg.norm(w - wp)
        worst = max(worst, gap)
        assert gap <= bound * (1 + 1e-6), (gap, bound)
    # the bound is not vacuous: the worst observed change is a sizeable fraction of it
    assert worst > 0.05 * bound


def test_clipping_and_reject():
    X, y = _data()
    Xbig = X * 10
    m = LogisticRegression(epsilon=INF, data_norm=1.0).fit(Xbig, y)
    Xclip = Xbig / np.maximum(np.linalg.norm(Xbig, axis=1), 1.0)[:, None]
    ref = LogisticRegression(epsilon=INF, data_norm=1.0).fit(Xclip, y)
    np.testing.assert_allclose(m.coef_, ref.coef_)
    with pytest.raises(InvalidParameter, match="data_norm"):
        LogisticRegression(epsilon=INF, out_of_bounds="raise").fit(Xbig, y)


def test_inferring_norm_warns_when_private():
    X, y = _data()
    with pytest.warns(PrivacyLeakWarning, match="data_norm=None"):
        LogisticRegression(epsilon=1.0, data_norm=None, random_state=0).fit(X * 3, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        LogisticRegression(epsilon=INF, data_norm=None).fit(X * 3, y)


@pytest.mark.parametrize(
    "kw",
    [
        {"epsilon": 0},
        {"epsilon": -1},
        {"epsilon": "1"},
        {"lam": 0},
        {"mechanism": "laplace"},
        {"data_norm": -2},
        {"out_of_bounds": "drop"},
        {"epsilon": float("nan")},
        {"fit_intercept": "yes"},
        {"keep_diagnostics": 1},
    ],
)
def test_invalid_parameters(kw):
    X, y = _data()
    with pytest.raises(InvalidParameter):
        LogisticRegression(**kw).fit(X, y)


@pytest.mark.parametrize("mechanism", ["objective", "output"])
def test_a_private_fit_keeps_no_solver_diagnostics_unless_asked_and_warned(mechanism):
    """n_iter_ and optimality_ are the solver's, computed from the data and the noise, not from the released
    coefficients (docs/dp-learners.md, review finding 3): a private fit's estimator does not carry them unless
    keep_diagnostics=True, which warns; a non-private fit keeps them."""
    X, y = _data()
    kw = dict(mechanism=mechanism, random_state=3, classes=[0, 1])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        m = LogisticRegression(epsilon=1.0, **kw).fit(X, y)
        assert not hasattr(m, "n_iter_") and not hasattr(m, "optimality_")
        plain = LogisticRegression(epsilon=INF, **kw).fit(X, y)
        assert plain.n_iter_ >= 1 and plain.optimality_ <= 1e-8
    kept = LogisticRegression(epsilon=1.0, keep_diagnostics=True, **kw)
    with pytest.warns(PrivacyLeakWarning, match="keeps n_iter_, optimality_ on a private fit"):
        kept.fit(X, y)
    assert kept.n_iter_ >= 1 and kept.optimality_ <= 1e-8
    np.testing.assert_array_equal(kept.coef_, m.coef_)  # the same release
    kept.set_params(keep_diagnostics=False).fit(X, y)
    assert not hasattr(kept, "n_iter_") and not hasattr(kept, "optimality_")


class _Recorder:
    """Records, while active, the b each objective-perturbation fit drew and the centre its output stage
    randomised (the projected solve), and can hand a fit a chosen b instead of a drawn one."""

    def __init__(self, monkeypatch, give_b=None):
        from smcdp.dp.mechanisms import VectorMechanism

        self.bs, self.centres = [], []
        real_sample, real_randomise = VectorMechanism.sample_dithered, VectorMechanism.randomise

        def sample(mech, shape):
            b = real_sample(mech, shape) if give_b is None else np.asarray(give_b.pop(0), float)
            self.bs.append(np.asarray(b, float).reshape(-1))
            return b

        def randomise(mech, value):
            self.centres.append(np.asarray(value, float).reshape(-1).copy())
            return real_randomise(mech, value)

        monkeypatch.setattr(VectorMechanism, "sample_dithered", sample)
        monkeypatch.setattr(VectorMechanism, "randomise", randomise)


def _exact_minimiser(m, X, y, lam, b=None):
    """The (perturbed) objective's minimiser a fit ``m`` solved for, to 1e-13, in the fit's own coordinates (the
    rows scaled into the unit ball: data_norm = 1 here, no intercept); ``b``: the one the fit drew."""
    ys = np.where(y == m.classes_[1], 1.0, -1.0)
    lin = None if b is None else b / len(y)
    w, _, g = fit_logistic_objective(X, ys, lam, linear=lin, ridge=m.extra_ridge_, tol=1e-13)
    assert g <= 1e-13
    return w


@pytest.mark.parametrize("mechanism", ["objective", "output"])
def test_a_private_fit_newton_did_not_finish_is_completed_not_refused(mechanism, monkeypatch):
    """Both mechanisms' proofs are for the (perturbed) objective's minimiser, and refusing a fit the solver did not
    finish would answer a question about the data for free (docs/dp-learners.md, finding 3): a private fit whose
    damped Newton stops short (one iteration here, the floor CERTAIN_NEWTON patched away) goes on by gradient
    descent, whose step count is proven from public quantities, and releases a point within its certified
    tolerance -- the same release, to that tolerance, as the fit Newton finished (the same seed, the same noise).
    Without the patch, max_iter=1 still gets CERTAIN_NEWTON iterations: the very release of the default."""
    from smcdp.dp.learners import logistic_objective

    X, y = _data()
    kw = {"epsilon": 1.0, "mechanism": mechanism, "random_state": 0, "classes": [0, 1], "tol": 1e-9}
    rec = _Recorder(monkeypatch)
    full = LogisticRegression(**kw).fit(X, y)
    np.testing.assert_array_equal(LogisticRegression(max_iter=1, **kw).fit(X, y).coef_, full.coef_)
    descents = []
    real = logistic_objective._descend

    def spy(*args):
        descents.append(real(*args))
        return descents[-1]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(logistic_objective, "_descend", spy)
        mp.setattr(logistic_objective, "CERTAIN_NEWTON", 0)
        short = LogisticRegression(max_iter=1, **kw).fit(X, y)
    assert len(descents) == 1 and descents[0][1] > 0  # the descent ran, and took steps
    assert not hasattr(short, "optimality_")  # the fit's diagnostics are still not kept
    if mechanism == "output":  # the same noise on two points each within 1e-9 / (2 lam) of the minimiser
        assert 0 < np.linalg.norm(short.coef_ - full.coef_) <= 1e-9 / 0.01
    else:  # the same b: both centres are the perturbed objective's minimiser, to the tolerance
        assert len(rec.bs) == 3 and all(np.array_equal(b, rec.bs[0]) for b in rec.bs)
        exact = _exact_minimiser(full, X, y, 0.01, rec.bs[0])
        for centre in (rec.centres[0], rec.centres[2]):
            assert np.linalg.norm(centre - exact) <= 1e-9 / 0.02 * 1.01
        assert 0 < np.linalg.norm(short.coef_ - full.coef_) <= 1e-9 / 0.02 * 2.02  # the same output noise
    LogisticRegression(epsilon=INF, max_iter=1, classes=[0, 1]).fit(X, y)  # a non-private fit: its own business


@pytest.mark.parametrize("mechanism", ["objective", "output"])
def test_a_tolerance_below_float64s_reach_is_raised_to_a_public_floor_not_refused(mechanism, monkeypatch):
    """tol = 1e-300 cannot be reached in float64: the fit solves to certified_tolerance -- from n, d and lam (and,
    for objective perturbation, the noise's norm, here recomputed from the release) -- is not refused, and output
    perturbation calibrates its noise to it, the same on two neighbouring data sets."""
    import smcdp.dp.learners.logistic as logistic
    from smcdp.dp.learners.logistic_bounds import certified_slack, certified_tolerance

    solved = []
    real = logistic.fit_logistic_objective

    def spy(*args, **kw):
        solved.append(kw["tol"])
        return real(*args, **kw)

    monkeypatch.setattr(logistic, "fit_logistic_objective", spy)
    rec = _Recorder(monkeypatch)
    X, y = _data(n=400)
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = -X[0], 1 - y[0]
    kw = {"epsilon": 1.0, "mechanism": mechanism, "tol": 1e-300, "classes": [0, 1], "random_state": 1}
    fits = [LogisticRegression(**kw).fit(a, b) for a, b in ((X, y), (X2, y2))]
    if mechanism == "output":
        floor = certified_tolerance(1e-300, 400, 5, 2 * 0.01)
        assert solved == [floor, floor] and 1e-300 < floor < 1e-10
        expected = 1.0 / (400 * 0.01) + certified_slack(floor, 400, 5, 2 * 0.01) / 0.01
        assert fits[0].noise_sensitivity_ == fits[1].noise_sensitivity_ == pytest.approx(expected, rel=1e-15)
    else:
        b = rec.bs[0]
        mu = 2 * 0.01 + fits[0].extra_ridge_
        assert solved[0] == pytest.approx(certified_tolerance(1e-300, 400, 5, mu, np.linalg.norm(b) / 400), rel=1e-6)
        assert 1e-300 < solved[0] < 1e-10


@pytest.mark.parametrize(("n", "d", "mu"), [(50, 3, 0.02), (3000, 20, 2e-3), (20000, 5, 2e-4)])
def test_the_gradients_error_bound_covers_its_computation_in_float64(n, d, mu):
    """gradient_error_bound against the gradient computed in extended precision (np.longdouble, 64-bit
    significand) at points across the ball the descent stays in, on random rows and on identical rows whose
    margins cancel near 0 (where expit's slope is largest and the rows' errors add up coherently): the solver's
    float64 gradient is within the bound everywhere.  (A validity check, not a tight one: the bound is Higham's
    worst case, and the observed error stays below a few percent of it.)"""
    from smcdp.dp.learners.logistic_bounds import gradient_error_bound, solve_constants
    from smcdp.dp.learners.logistic_objective import objective

    if np.finfo(np.longdouble).eps >= 1e-17:
        pytest.skip("np.longdouble is float64 on this platform")
    rng = np.random.default_rng(n)
    X = rng.normal(size=(n, d))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    X *= rng.uniform(0.5, 1.0, size=(n, 1))
    ys = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    lin = rng.normal(size=d) * 0.1
    V = solve_constants(mu, float(np.linalg.norm(lin)))[3]
    points = []
    for scale in (0.0, 1.0, 10.0, 0.01 * V, V):
        v = rng.normal(size=d)
        points.append(v * scale / np.linalg.norm(v))
    cases = [(X, ys, lin, v) for v in points]
    x = np.zeros(d)
    x[:2] = np.array([1.0, -1.0]) / np.sqrt(2) * (1 - 1e-15)  # identical rows, margin ≈ 0 by cancellation
    V0 = solve_constants(mu, 0.0)[3]
    v = np.zeros(d)
    v[:2] = np.array([1.0, 1.0 - 1e-9]) * V0 / np.sqrt(2)
    cases.append((np.tile(x, (n, 1)), np.ones(n), np.zeros(d), v))
    for Xc, yc, linc, v in cases:
        eps = gradient_error_bound(n, d, mu, float(np.linalg.norm(linc)))[0]
        Xl, yl, vl = Xc.astype(np.longdouble), yc.astype(np.longdouble), v.astype(np.longdouble)
        m = yl * (Xl @ vl)
        exact = Xl.T @ (-yl / (1 + np.exp(m)) / n) + np.longdouble(mu) * vl + linc.astype(np.longdouble)
        err = float(np.linalg.norm((objective(Xc, yc, mu, linc)(v)[1] - exact).astype(np.float64)))
        assert err <= eps, (err, eps)


def test_the_descent_reaches_the_tolerance_within_its_proven_steps_and_the_bound_is_not_loose():
    """κ ≈ 126 (μ = 2e-3), the data along e1 and the linear term along e2, where F is the quadratic
    (μ/2)v₂² + ℓv₂ that gradient descent contracts at exactly (1 − μ/L) a step: from 0 it needs κ·ln(ℓ/tol)
    steps, and the proven bound κ·ln(8LΔ₀/tol²) is within a factor 3 of that -- a bound several times too small
    would end in _descend's AssertionError, one far too large fails the ratio.  The point is the minimiser
    Newton finds, to the tolerance."""
    from smcdp.dp.learners.logistic_bounds import certain_steps
    from smcdp.dp.learners.logistic_objective import _descend, objective

    rng = np.random.default_rng(2)
    X = np.zeros((200, 2))
    X[:, 0] = rng.uniform(-1, 1, 200)
    ys = np.where(X[:, 0] + 0.3 * rng.normal(size=200) > 0, 1.0, -1.0)
    lin = np.array([0.0, 1.0])
    mu, tol = 2e-3, 1e-8
    bound = certain_steps(tol, mu, 1.0)
    w, steps, g = _descend(objective(X, ys, mu, lin), np.zeros(2), math.log(2.0) + 1.0 / (2 * mu), mu, 1.0, tol)
    assert g <= tol and bound / 3 <= steps <= bound
    newton, _, _ = fit_logistic_objective(X, ys, mu / 2, linear=lin, tol=1e-13)
    assert np.linalg.norm(w - newton) <= tol / mu


def test_rejects_multiclass_and_single_class():
    X, y = _data()
    with pytest.raises(InvalidParameter, match="Only binary"):
        LogisticRegression().fit(X, np.arange(len(y)) % 3)
    with pytest.raises(InvalidParameter, match="1 class"):
        LogisticRegression().fit(X, np.zeros(len(y)))


def test_objective_perturbation_constants():
    from smcdp.dp.learners.logistic_bounds import approximate_minimiser_bound

    X, y = _data(n=400)
    m = LogisticRegression(epsilon=1.0, lam=0.01, random_state=3).fit(X, y)
    Lam = 2 * 0.01
    # the objective's share of epsilon is 99 %, the output stage's 1 % (the approximate minimiser)
    expected = 0.99 - math.log1p(2 * 0.25 / (400 * Lam) + 0.25**2 / (400 * Lam) ** 2)
    assert m.epsilon_noise_ == pytest.approx(expected, rel=1e-12)
    assert m.epsilon_output_ == pytest.approx(0.01, rel=1e-12)
    assert m.extra_ridge_ == 0.0
    assert m.epsilon_spent_ == 1.0 and m.delta_spent_ == 0.0
    # small n * lam: eps' would be negative -> extra ridge and eps/2 (of the objective's share)
    m = LogisticRegression(epsilon=0.1, lam=0.001, random_state=3).fit(X[:50], y[:50])
    assert m.epsilon_noise_ == pytest.approx(0.099 / 2, rel=1e-12)
    assert m.extra_ridge_ == pytest.approx(0.25 / (50 * math.expm1(0.099 / 4)) - 2 * 0.001, rel=1e-12)
    assert m.epsilon_spent_ == 0.1 and m.epsilon_output_ == pytest.approx(0.001, rel=1e-12)
    # the output stage's bound is for the objective's strong convexity, the extra ridge included
    mu = 2 * 0.001 + m.extra_ridge_
    assert m.noise_sensitivity_ == 2 * approximate_minimiser_bound(1e-8, 50, 5, mu)[1]
    assert m.noise_sensitivity_ != 2 * approximate_minimiser_bound(1e-8, 50, 5, 2 * 0.001)[1]


def test_objective_perturbations_b_has_density_proportional_to_exp_minus_eps_norm_over_two(monkeypatch):
    """CMS Algorithm 2: b with density ∝ exp(−ε′‖b‖/2), i.e. the L2 mechanism at ε′ with sensitivity 2 (a review
    drew it at sensitivity 1 -- half the noise -- and no test noticed); and output perturbation's mechanism at ε
    with the sensitivity the fit reports (R/(nλ) plus the solver's slack)."""
    import smcdp.dp.learners.logistic as logistic

    made = []
    real = logistic.VectorMechanism

    def spy(epsilon, sensitivity, **kw):
        made.append((epsilon, sensitivity))
        return real(epsilon, sensitivity, **kw)

    monkeypatch.setattr(logistic, "VectorMechanism", spy)
    X, y = _data(n=400)
    m = LogisticRegression(epsilon=1.0, lam=0.01).fit(X, y)
    # b at eps' and sensitivity 2, then the output stage at 1 % of eps and 2r/R
    assert made == [(pytest.approx(m.epsilon_noise_), 2.0), (pytest.approx(0.01), m.noise_sensitivity_)]
    assert 0 < m.noise_sensitivity_ < 1e-5
    made.clear()
    m = LogisticRegression(epsilon=1.0, lam=0.01, mechanism="output").fit(X, y)
    assert made == [(1.0, pytest.approx(m.noise_sensitivity_))]
    assert m.noise_sensitivity_ >= m.sensitivity_ == pytest.approx(1.0 / (400 * 0.01))


def test_objective_perturbation_solves_perturbed_problem():
    """The released w minimises J(w) + b.w/n (+ ridge): check stationarity with the b recovered
    from the optimality condition is consistent with an independent solve."""
    X, y = _data(n=200)
    ys = 2.0 * y - 1
    b = np.array([0.5, -1.0, 2.0, 0.0, 0.3])
    w, _, g = fit_logistic_objective(X, ys, 0.01, linear=b / 200, tol=1e-12)
    assert g <= 1e-10
    m = ys * (X @ w)
    grad = X.T @ (-ys / (1 + np.exp(m))) / 200 + 0.02 * w + b / 200
    assert np.linalg.norm(grad) <= 1e-9


def test_private_fits_are_seeded_and_noisy():
    X, y = _data(n=500)
    for mech in ("objective", "output"):
        a = LogisticRegression(epsilon=0.5, mechanism=mech, random_state=11).fit(X, y).coef_
        b = LogisticRegression(epsilon=0.5, mechanism=mech, random_state=11).fit(X, y).coef_
        c = LogisticRegression(epsilon=0.5, mechanism=mech, random_state=12).fit(X, y).coef_
        clean = LogisticRegression(epsilon=INF).fit(X, y).coef_
        np.testing.assert_array_equal(a, b)
        assert not np.allclose(a, c)
        assert not np.allclose(a, clean)


def test_output_noise_norm_matches_gamma_law():
    """Output perturbation: ||w_priv - w*|| ~ Gamma(d, Delta/eps) (mean d Delta / eps)."""
    X, y = _data(n=200, d=3)
    eps, lam = 2.0, 0.05
    clean = LogisticRegression(epsilon=INF, lam=lam).fit(X, y).coef_[0]
    gen = np.random.default_rng(5)
    norms = [
        np.linalg.norm(
            LogisticRegression(epsilon=eps, lam=lam, mechanism="output", random_state=gen).fit(X, y).coef_[0] - clean
        )
        for _ in range(400)
    ]
    scale = logistic_sensitivity(200, lam) / eps
    assert np.mean(norms) == pytest.approx(3 * scale, rel=0.1)


def test_default_uses_secure_randomness():
    X, y = _data(n=300)
    a = LogisticRegression(epsilon=1.0).fit(X, y).coef_
    b = LogisticRegression(epsilon=1.0).fit(X, y).coef_
    assert not np.allclose(a, b)


def test_rows_are_clipped_onto_the_ball_exactly():
    """The sensitivities assume ‖x‖ ≤ data_norm: every row beyond it is scaled inside, also one beyond by a
    rounding error only (up to data_norm·(1 + 10⁻¹²) rows were left as they were, a review); "raise" tolerates such
    rounding errors and refuses rows clearly beyond."""
    from smcdp.dp.validation import clip_rows_to_norm

    rng = np.random.default_rng(0)
    X = rng.normal(size=(20000, 7)) * 3
    for R in (1.0, 2.5, 1e-3, 7.3):
        assert np.all(np.linalg.norm(clip_rows_to_norm(X, R), axis=1) <= R)
    just_over = X / np.linalg.norm(X, axis=1, keepdims=True) * 2.0 * (1 + 1e-13)
    for mode in ("clip", "raise"):
        assert np.all(np.linalg.norm(clip_rows_to_norm(just_over, 2.0, mode), axis=1) <= 2.0)
    with pytest.raises(InvalidParameter, match="20000 row"):
        clip_rows_to_norm(X, 1.0, "raise")
    inside = X / np.linalg.norm(X, axis=1, keepdims=True) * 0.5
    assert clip_rows_to_norm(inside, 1.0) is inside


def test_the_set_of_classes_is_public_when_stated_and_a_warned_leak_when_read():
    """A review: the classes were read from the labels, so replacing the only row of a class changed the fit -- a
    refusal for logistic regression, another classes_ (and C, hence the noise) for the Gaussian classifiers.  With
    classes= stated, a data set missing a class is fitted like any other and classes_ is the stated set; read from
    the labels in a private fit, it warns (PrivacyLeakWarning), as data_norm=None does."""
    from smcdp.dp import GaussianBayesClassifier, LargeMarginGaussianClassifier

    X, y = _data(n=200)
    only_one = np.ones_like(y)
    m = LogisticRegression(epsilon=1.0, classes=[0, 1]).fit(X, only_one)
    assert m.classes_.tolist() == [0, 1]
    with pytest.warns(PrivacyLeakWarning, match="classes=None"):
        LogisticRegression(epsilon=1.0).fit(X, y)
    with pytest.raises(InvalidParameter, match="not one of the stated classes"):
        LogisticRegression(epsilon=1.0, classes=[0, 1]).fit(X, y + 5)
    with pytest.raises(InvalidParameter, match="at least two distinct labels"):
        LogisticRegression(epsilon=1.0, classes=[1, 1]).fit(X, y)
    for make in (
        lambda: GaussianBayesClassifier(epsilon=1.0, bounds=(-1, 1), classes=[0, 1, 2]),
        lambda: LargeMarginGaussianClassifier(epsilon=1.0, data_norm=1.0, classes=[0, 1, 2]),
    ):
        with warnings.catch_warnings():
            warnings.simplefilter("error", PrivacyLeakWarning)
            fitted = make().fit(X, y)  # class 2 has no row: fitted, no warning
        assert fitted.classes_.tolist() == [0, 1, 2]
    with pytest.warns(PrivacyLeakWarning, match="classes=None"):
        GaussianBayesClassifier(epsilon=1.0, bounds=(-1, 1)).fit(X, y)


def _recomputed_b(m, X, y, lam):
    """The linear term the released minimiser implies, b = −n(∇ mean loss(v) + (2λ + ridge)v), from the model and
    the data (rows in the unit ball, no intercept: v = w) -- what an adversary who knows the data recomputes."""
    from scipy.special import expit

    ys = np.where(y == m.classes_[1], 1.0, -1.0)
    v = m.coef_[0]
    grad = X.T @ (-ys * expit(-ys * (X @ v))) / len(y) + (2 * lam + m.extra_ridge_) * v
    return -len(y) * grad


def test_objective_perturbations_minimiser_does_not_tell_the_data_set_by_a_lattice(monkeypatch):
    """A review's attack: b was drawn on the mechanism's lattice 2^e, so b recomputed from the released minimiser
    and the data lay on the lattice under the true data set and off it under a neighbour (13 of 20 fits against
    0 of 20, d = 4, n = 50, tol 1e-12).  b is now dithered within its cell (a density, as the proof needs): the
    recomputed b lies on the lattice under neither."""
    from smcdp.dp.mechanisms import VectorMechanism

    X, y = _data(n=50, d=4, seed=5)
    lam = 0.05
    on_lattice = 0
    rec = _Recorder(monkeypatch)  # the attack on the minimiser itself, before the output stage's noise
    for seed in range(20):
        fit = LogisticRegression(epsilon=1.0, lam=lam, data_norm=1.0, tol=1e-12, classes=[0, 1], random_state=seed)
        m = fit.fit(X, y)
        m.coef_ = rec.centres[-1].reshape(1, -1)
        steps = _recomputed_b(m, X, y, lam) / 2.0 ** VectorMechanism(m.epsilon_noise_, 2.0).grid_exponent(4)
        on_lattice += bool(np.all(np.abs(steps - np.rint(steps)) < 1e-3))
    assert on_lattice == 0, on_lattice


def _b_for(v, X, ys, mu):
    """The b under which ``v`` is the exact minimiser of J(v) + bᵀv/n on (X, ys): b = −n(∇ mean loss(v) + μv)."""
    from scipy.special import expit

    return -len(ys) * (X.T @ (-ys * expit(-ys * (X @ v))) / len(ys) + mu * v)


def test_objective_perturbations_two_neighbours_centres_lie_within_the_output_stages_sensitivity(monkeypatch):
    """The proof of the approximate minimiser's output stage (logistic.py's docstring): fix the exact minimiser v*;
    each data set's b is then determined, b_D = −n(∇loss_D(v*) + μv*), and the solve of each stops somewhere near
    v*.  The two released centres must lie within the output stage's sensitivity 2r/R of each other -- each within
    r/R of v*.  The solves are made to stop as late as their proof allows (no Newton: the certified descent stops at
    the first point within tol = 1e-4), so the distances come close to the bound: the test fails on an r half as
    large."""
    from smcdp.dp.learners import logistic_objective
    from smcdp.dp.learners.logistic_bounds import approximate_minimiser_bound

    X, y = _data(n=200, d=5, seed=11)
    X2, y2 = X.copy(), y.copy()
    X2[0], y2[0] = -X[0] / 2, 1 - y[0]
    lam, tol = 0.01, 1e-4
    mu = 2 * lam
    rng = np.random.default_rng(4)
    stars = [rng.normal(size=5) * s for s in (0.5, 2.0, 8.0) for _ in range(4)]
    gives = []
    for v in stars:
        for A, B in ((X, y), (X2, y2)):
            gives.append(_b_for(v, A, np.where(B == 1, 1.0, -1.0), mu))
    monkeypatch.setattr(logistic_objective, "CERTAIN_NEWTON", 0)
    rec = _Recorder(monkeypatch, give_b=gives)
    worst = 0.0
    for v in stars:
        fits = [
            LogisticRegression(epsilon=1.0, lam=lam, tol=tol, max_iter=1, classes=[0, 1], random_state=1).fit(A, B)
            for A, B in ((X, y), (X2, y2))
        ]
        c, c2 = rec.centres[-2:]
        sens = fits[0].noise_sensitivity_
        assert sens == fits[1].noise_sensitivity_ == 2 * approximate_minimiser_bound(tol, 200, 5, mu)[1]
        assert np.linalg.norm(c - c2) <= sens
        worst = max(worst, np.linalg.norm(c - v), np.linalg.norm(c2 - v))
    assert worst <= sens / 2
    assert worst >= sens / 2 / 2, (worst, sens / 2)  # the bound is not loose by 2x here (0.94 of it, seen)


def test_a_noise_beyond_release_lin_bound_projects_the_release_and_keeps_its_direction(monkeypatch):
    """A b/n far beyond RELEASE_LIN_BOUND (a minimiser of norm 40·ρ_B; drawn at small n·ε): the release's
    centre is the projection of the minimiser onto the public ball -- within r of it, as the proof says -- and
    points the same way, so the classifier's decisions are those of the minimiser."""
    from smcdp.dp.learners.logistic_bounds import approximate_minimiser_bound

    X, y = _data(n=100, d=4, seed=2)
    ys = np.where(y == 1, 1.0, -1.0)
    lam, tol = 0.01, 1e-8
    radius, r = approximate_minimiser_bound(tol, 100, 4, 2 * lam)
    direction = np.array([0.6, -0.48, 0.0, 0.64])
    v = direction * 40 * radius
    rec = _Recorder(monkeypatch, give_b=[_b_for(v, X, ys, 2 * lam)])
    m = LogisticRegression(epsilon=1.0, lam=lam, tol=tol, classes=[0, 1], random_state=0).fit(X, y)
    centre = rec.centres[0]
    assert np.linalg.norm(centre) == pytest.approx(radius, rel=1e-12)
    assert np.linalg.norm(centre - direction * radius) <= r
    np.testing.assert_array_equal(m.predict(X), (X @ direction > 0).astype(int))


@pytest.mark.parametrize(("tol", "n", "d", "mu"), [(1e-8, 300, 5, 0.02), (1e-300, 10**6, 50, 2e-4), (1e-3, 20, 2, 2.0)])
def test_the_approximate_minimisers_bound_covers_every_noise_norm(tol, n, d, mu):
    """approximate_minimiser_bound's argument, checked on its own functions: δ(ℓ) = s(ℓ)/μ does not decrease in the
    noise's norm ℓ up to ℓ₀ = ρ + 2μρ_B, and is ≤ r there; beyond, the projected distance 2ρ_Bμδ(ℓ)/(ℓ − ρ) is ≤ r
    and the proviso δ(ℓ) < (ℓ − ρ)/(2μ) holds -- on a grid of ℓ from 0 to 10³⁰."""
    from smcdp.dp.learners.logistic_bounds import approximate_minimiser_bound, certified_slack, certified_tolerance

    radius, r = approximate_minimiser_bound(tol, n, d, mu)
    rho = 1.0 + 2.0**-40

    def delta(lin):
        return certified_slack(certified_tolerance(tol, n, d, mu, lin), n, d, mu, lin) / mu

    lin0 = rho + 2 * mu * radius
    below = [lin0 * k / 200 for k in range(201)]
    values = [delta(lin) for lin in below]
    assert all(a <= b for a, b in zip(values, values[1:]))
    assert values[-1] <= r
    for lin in np.geomspace(lin0, 1e30, 400):
        assert 2 * radius * mu * delta(lin) / (lin - rho) <= r
        assert delta(lin) < (lin - rho) / (2 * mu)
    # and not far above what an unprojected fit needs: twice, or 10⁻⁷ of the minimisers' scale 1/μ (the gradient's
    # rounding at ℓ₀ ≈ 2·RELEASE_LIN_BOUND: 55× at μ = 2·10⁻⁴, tol = 10⁻³⁰⁰, d = 50, n = 10⁶)
    assert r <= max(2.0 * delta(0.0), 1e-7 / mu)


def test_a_seeded_objective_fit_draws_b_and_its_output_noise_from_one_stream(monkeypatch):
    """A seed gives one stream for the fit's two draws: the output stage's noise continues it, it does not
    restart it (two Generators from the same seed would make b and the output noise the same draws)."""
    from smcdp.dp.mechanisms import VectorMechanism

    streams = []
    real = VectorMechanism.__init__

    def init(mech, *args, random_state=None, **kw):
        streams.append(random_state)
        real(mech, *args, random_state=random_state, **kw)

    monkeypatch.setattr(VectorMechanism, "__init__", init)
    X, y = _data(n=200)
    LogisticRegression(epsilon=1.0, classes=[0, 1], random_state=7).fit(X, y)
    assert len(streams) == 2 and streams[0] is streams[1] and streams[0] is not None
    streams.clear()
    LogisticRegression(epsilon=1.0, classes=[0, 1]).fit(X, y)
    assert streams == [None, None]  # the secure source, for both


def test_objective_perturbations_two_shares_sum_to_at_most_epsilon_exactly():
    """b's share and the output stage's, as fractions, add up to at most the epsilon charged: eps − eps_out alone
    rounds up by half a unit for some epsilons (a review) -- found among these, and corrected."""
    from fractions import Fraction

    from smcdp.dp.learners.logistic import objective_shares

    rng = np.random.default_rng(0)
    naive_over = 0
    for eps in np.concatenate([rng.uniform(1e-3, 10, 2000), [1.0, 0.1, 0.3, 0.7, 3.3]]):
        eps = float(eps)
        eps_obj, eps_out = objective_shares(eps)
        assert Fraction(eps_obj) + Fraction(eps_out) <= Fraction(eps)
        assert eps_out == eps * 0.01 and 0 <= eps - eps_out - eps_obj <= 2 * math.ulp(eps)
        naive_over += Fraction(eps - eps * 0.01) + Fraction(eps * 0.01) > Fraction(eps)
    assert naive_over > 0  # the naive split does overspend somewhere: the test is not vacuous
