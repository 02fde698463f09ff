"""DP-EM Gaussian mixture, DP factor analysis and DPLloyd k-means."""

import math
import warnings

import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans
from sklearn.decomposition import FactorAnalysis as SkFA
from sklearn.mixture import GaussianMixture as SkGMM

from smcdp.dp import FactorAnalysis, GaussianMixture, KMeans, PrivacyLeakWarning
from smcdp.dp._validation import InvalidParameter
from smcdp.dp.accounting import solve_dpem_budget
from smcdp.dp.kmeans import zcdp_per_step_epsilon

INF = float("inf")


def _gmm_data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[0.4, 0.0, 0.0], [-0.4, 0.1, 0.0], [0.0, -0.4, 0.2]])
    y = rng.integers(0, 3, size=n)
    X = centres[y] + 0.08 * rng.normal(size=(n, 3))
    X /= max(1.0, np.linalg.norm(X, axis=1).max())
    return X


# ---------------------------------------------------------------- mixture

def test_gmm_nonprivate_equals_sklearn_em_from_same_start():
    X = _gmm_data()
    m0 = np.array([[0.1, 0.1, 0.0], [-0.1, 0.0, 0.1], [0.0, -0.1, 0.0]])
    c0 = np.tile(np.eye(3) * 0.05, (3, 1, 1))
    w0 = np.full(3, 1 / 3)
    ours = GaussianMixture(3, epsilon=INF, n_iter=12, means_init=m0, covariances_init=c0, weights_init=w0,
                           min_eigenvalue=1e-12).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkGMM(3, max_iter=12, tol=0, reg_covar=0, means_init=m0, weights_init=w0,
                    precisions_init=np.linalg.inv(c0)).fit(X)
    np.testing.assert_allclose(ours.means_, ref.means_, atol=1e-10)
    np.testing.assert_allclose(ours.covariances_, ref.covariances_, atol=1e-10)
    np.testing.assert_allclose(ours.weights_, ref.weights_, atol=1e-12)
    assert ours.score(X) == pytest.approx(ref.score(X), rel=1e-10)
    assert ours.epsilon_spent_ == INF


def test_gmm_statistics_sensitivity_on_neighbours():
    """The joint releases (all K components at once) move by <= the sensitivities used:
    weights 2/N (L1 and L2), sums 2 (L2) and 2 sqrt(d) (L1), second moments 2 (Frobenius)."""
    rng = np.random.default_rng(0)
    N, d, K = 25, 4, 3
    for _ in range(300):
        X = rng.normal(size=(N, d))
        X /= np.maximum(np.linalg.norm(X, axis=1), 1)[:, None]
        R = rng.dirichlet(np.ones(K) * rng.uniform(0.05, 2), size=N)
        Xp, Rp = X.copy(), R.copy()
        v = rng.normal(size=d)
        Xp[0] = v / np.linalg.norm(v)
        Rp[0] = rng.dirichlet(np.ones(K) * 0.1)
        pi, pip = R.sum(0) / N, Rp.sum(0) / N
        s, sp = R.T @ X, Rp.T @ Xp
        q = np.einsum("ik,id,ie->kde", R, X, X)
        qp = np.einsum("ik,id,ie->kde", Rp, Xp, Xp)
        iu = np.triu_indices(d)
        assert np.abs(pi - pip).sum() <= 2 / N + 1e-12
        assert np.linalg.norm(s - sp) <= 2 + 1e-12
        assert np.abs(s - sp).sum() <= 2 * math.sqrt(d) + 1e-12
        assert np.linalg.norm((q - qp)[:, iu[0], iu[1]]) <= 2 + 1e-12


@pytest.mark.parametrize("scenario", ["GGG", "LLG"])
@pytest.mark.parametrize("composition", ["zcdp", "moments", "advanced", "linear"])
def test_gmm_private_fit_is_valid(scenario, composition):
    X = _gmm_data(n=2000)
    m = GaussianMixture(3, epsilon=1.0, delta=1e-4, n_iter=5, scenario=scenario, composition=composition,
                        random_state=0).fit(X)
    assert m.weights_.min() >= 0 and m.weights_.sum() == pytest.approx(1.0)
    for S in m.covariances_:
        assert np.allclose(S, S.T) and np.linalg.eigvalsh(S).min() > 0
    assert m.epsilon_spent_ == 1.0 and m.delta_spent_ == 1e-4
    ref = solve_dpem_budget(1.0, 1e-4, 5, 3, scenario=scenario, method=composition)
    assert m.budget_.eps_per_iter == pytest.approx(ref.eps_per_iter)
    assert np.isfinite(m.score(X))


def test_gmm_utility_improves_with_budget():
    X = _gmm_data(n=20000)
    Xt = _gmm_data(n=3000, seed=1)

    def scores(eps):
        return np.array([GaussianMixture(3, epsilon=eps, delta=1e-4, n_iter=10, random_state=s).fit(X).score(Xt)
                         for s in range(4)])

    nonpriv, lo, mid, hi = scores(INF), scores(0.1), scores(20.0), scores(1000.0)
    assert lo.mean() < mid.mean()
    # same seed -> same (data-independent) start; with little noise DP-EM tracks plain EM
    np.testing.assert_allclose(hi, nonpriv, atol=0.05)


def test_gmm_map_updates():
    X = _gmm_data(n=500)
    mle = GaussianMixture(2, epsilon=INF, n_iter=1, random_state=0).fit(X)
    flat = GaussianMixture(2, epsilon=INF, n_iter=1, estimator="map", random_state=0).fit(X)
    # one M-step from the same start: equal means and weights; NIW mode divides by N_k + nu0 + d + 2
    np.testing.assert_allclose(mle.means_, flat.means_, atol=1e-12)
    np.testing.assert_allclose(mle.weights_, flat.weights_, atol=1e-12)
    Nk = mle.weights_ * len(X)
    ratio = flat.covariances_[:, 0, 0] / mle.covariances_[:, 0, 0]
    np.testing.assert_allclose(ratio, Nk / (Nk + 3 + 2), rtol=1e-8)
    # a strong prior at 0 pulls the means towards 0 (MAP mean = s / (N_k + kappa0))
    shrunk = GaussianMixture(2, epsilon=INF, n_iter=1, estimator="map", kappa0=1e6, nu0=5, psi0=0.1,
                             random_state=0).fit(X)
    assert np.abs(shrunk.means_).max() < 1e-2


@pytest.mark.parametrize("bad", [{"scenario": "LGG"}, {"composition": "rdp2"}, {"estimator": "mode"},
                                 {"n_iter": 0}, {"delta": 0.0}, {"alpha": 0.5},
                                 {"means_init": np.zeros((5, 3))}])
def test_gmm_invalid(bad):
    X = _gmm_data(n=100)
    with pytest.raises(InvalidParameter):
        GaussianMixture(2, **bad).fit(X)


def test_gmm_warns_on_inferred_norm():
    X = _gmm_data(n=300) * 5
    with pytest.warns(PrivacyLeakWarning):
        GaussianMixture(2, data_norm=None, random_state=0).fit(X)


# ---------------------------------------------------------------- factor analysis

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


# ---------------------------------------------------------------- k-means

def test_kmeans_nonprivate_equals_lloyd():
    X = _gmm_data(n=600)
    init = np.array([[0.2, 0, 0], [-0.2, 0, 0], [0, -0.2, 0]])
    ours = KMeans(3, epsilon=INF, n_iter=6, init=init).fit(X)
    ref = SkKMeans(3, init=init, n_init=1, max_iter=6, tol=0, algorithm="lloyd").fit(X)
    np.testing.assert_allclose(ours.cluster_centers_, ref.cluster_centers_, atol=1e-12)
    assert ours.inertia_ == pytest.approx(ref.inertia_)


def test_zcdp_per_step_epsilon_composes_to_budget():
    for eps, delta, J in [(1.0, 1e-5, 5), (0.1, 1e-6, 20), (3.0, 1e-4, 1)]:
        e = zcdp_per_step_epsilon(eps, delta, J)
        rho = J * e * e / 2
        assert rho + 2 * math.sqrt(rho * math.log(1 / delta)) == pytest.approx(eps)


def test_kmeans_release_sensitivity():
    """L1 change of (counts, centred sums) per iteration <= 2 + sum(upper - lower)."""
    rng = np.random.default_rng(2)
    lower, upper = np.array([-1.0, 0.0, 2.0]), np.array([1.0, 3.0, 2.5])
    centre = (lower + upper) / 2
    C = rng.uniform(lower, upper, size=(4, 3))
    bound = 2 + np.sum(upper - lower)
    for _ in range(300):
        X = rng.uniform(lower, upper, size=(15, 3))
        Xp = X.copy()
        Xp[0] = np.where(rng.uniform(size=3) > 0.5, lower, upper)
        stats = []
        for Z in (X, Xp):
            lab = KMeans._assign(Z, C)
            counts = np.bincount(lab, minlength=4)
            sums = np.zeros((4, 3))
            np.add.at(sums, lab, Z - centre)
            stats.append(np.column_stack([counts, sums]))
        assert np.abs(stats[0] - stats[1]).sum() <= bound + 1e-12


@pytest.mark.parametrize("composition", ["linear", "zcdp"])
def test_kmeans_private(composition):
    X = _gmm_data(n=20000)
    # a public initial guess (the paper's DPLloyd also starts from public centres); with centres drawn
    # uniformly in the box, empty clusters get pure-noise centres, for the private and the plain fit alike
    init = np.array([[0.3, 0.2, 0.0], [-0.3, -0.1, 0.1], [0.1, -0.3, 0.0]])
    m = KMeans(3, epsilon=1.0, delta=1e-5, composition=composition, bounds=(-1, 1), n_iter=5, init=init,
               random_state=0).fit(X)
    assert np.all(m.cluster_centers_ >= -1) and np.all(m.cluster_centers_ <= 1)
    assert m.epsilon_spent_ == 1.0
    expected = 1.0 / 5 if composition == "linear" else zcdp_per_step_epsilon(1.0, 1e-5, 5)
    assert m.epsilon_per_iter_ == pytest.approx(expected)
    clean = KMeans(3, epsilon=INF, bounds=(-1, 1), n_iter=5, init=init).fit(X)
    assert m.normalised_intra_cluster_variance(X) < 1.5 * clean.normalised_intra_cluster_variance(X)
