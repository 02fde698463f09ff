"""DP factor analysis (004 section 6)."""

import math

import numpy as np
import pytest
from sklearn.decomposition import FactorAnalysis as SkFA

from smcdp.dp import FactorAnalysis

INF = float("inf")


def _fa_data(n=2000, seed=0):
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(6, 2))
    X = rng.normal(size=(n, 2)) @ W.T + 0.3 * rng.normal(size=(n, 6))
    X -= X.mean(0)
    return X


def test_fa_nonprivate_matches_sklearn_on_centred_data():
    X = _fa_data(n=500)
    ours = FactorAnalysis(2, epsilon=INF, data_norm=None, max_iter=20_000, tol=1e-10).fit(X)
    ref = SkFA(2, tol=1e-12, max_iter=10_000, svd_method="lapack").fit(X)
    np.testing.assert_allclose(ours.get_covariance(), ref.get_covariance(), atol=1e-5)
    assert ours.score(X) == pytest.approx(ref.score(X), abs=1e-6)


def test_fa_second_moment_sensitivity():
    rng = np.random.default_rng(1)
    N, d = 10, 5
    for _ in range(500):
        X = rng.normal(size=(N, d))
        X /= np.maximum(np.linalg.norm(X, axis=1), 1)[:, None]
        Xp = X.copy()
        v = rng.normal(size=d)
        Xp[0] = v / np.linalg.norm(v) * rng.uniform(0.5, 1)
        D = (X.T @ X - Xp.T @ Xp) / N
        assert np.linalg.norm(D[np.triu_indices(d)]) <= np.linalg.norm(D) <= math.sqrt(2) / N + 1e-12


def test_fa_private_fit_close_at_large_n():
    X = _fa_data(n=50_000)
    R = np.linalg.norm(X, axis=1).max()
    clean = FactorAnalysis(2, epsilon=INF, data_norm=R, random_state=0).fit(X)
    priv = FactorAnalysis(2, epsilon=1.0, delta=1e-5, data_norm=R, random_state=0).fit(X)
    assert priv.epsilon_spent_ == 1.0 and priv.delta_spent_ == 1e-5
    assert np.all(priv.noise_variance_ > 0)
    assert priv.score(X) > clean.score(X) - 0.1
    assert priv.noise_sigma_ > 0
    Z = priv.transform(X[:5])
    assert Z.shape == (5, 2)


def test_the_second_moments_noise_is_the_analytic_gaussian_at_root_two_over_n(monkeypatch):
    """The one Gaussian mechanism FactorAnalysis makes, spied on: replace-one (n fixed), rows in the unit ball, so
    the upper triangle of XᵀX/n moves by at most √2/n in L2 (x = e₁ replaced by e₂ reaches it); its σ is the
    analytic Gaussian's for (ε, δ) at that sensitivity, one draw, and the ρ reported is that draw's Δ²/(2σ²)."""
    import smcdp.dp.learners.factor_analysis as fa
    from smcdp.dp.conversions import analytic_gaussian_sigma

    made = []
    real = fa.GaussianMechanism

    def spy(epsilon, delta, sensitivity, **kw):
        mech = real(epsilon, delta, sensitivity, **kw)
        made.append((epsilon, delta, sensitivity, kw.get("analytic"), mech.sigma))
        return mech

    monkeypatch.setattr(fa, "GaussianMechanism", spy)
    X = _fa_data(n=500)
    n = X.shape[0]
    m = FactorAnalysis(2, epsilon=1.0, delta=1e-5, data_norm=10.0).fit(X)
    assert len(made) == 1
    eps, delta, sens, analytic, sigma = made[0]
    assert (eps, delta, analytic) == (1.0, 1e-5, True) and sens == pytest.approx(math.sqrt(2.0) / n)
    assert sigma == pytest.approx(analytic_gaussian_sigma(1.0, 1e-5) * sens) == pytest.approx(m.noise_sigma_)
    assert m.rho_spent_ == pytest.approx(sens**2 / (2 * sigma**2))
