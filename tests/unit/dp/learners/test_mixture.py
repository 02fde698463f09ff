"""DP-EM Gaussian mixture."""

import math
import warnings

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture as SkGMM

from smcdp.dp import GaussianMixture, PrivacyLeakWarning
from smcdp.dp.learners.dpem_budget import solve_dpem_budget
from smcdp.dp.validation import InvalidParameter

from .data import gmm_data as _gmm_data

INF = float("inf")


def test_gmm_nonprivate_equals_sklearn_em_from_same_start():
    X = _gmm_data()
    m0 = np.array([[0.1, 0.1, 0.0], [-0.1, 0.0, 0.1], [0.0, -0.1, 0.0]])
    c0 = np.tile(np.eye(3) * 0.05, (3, 1, 1))
    w0 = np.full(3, 1 / 3)
    ours = GaussianMixture(
        3, epsilon=INF, n_iter=12, means_init=m0, covariances_init=c0, weights_init=w0, min_eigenvalue=1e-12
    ).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = SkGMM(
            3, max_iter=12, tol=0, reg_covar=0, means_init=m0, weights_init=w0, precisions_init=np.linalg.inv(c0)
        ).fit(X)
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
    m = GaussianMixture(
        3, epsilon=1.0, delta=1e-4, n_iter=5, scenario=scenario, composition=composition, random_state=0
    ).fit(X)
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
        return np.array(
            [GaussianMixture(3, epsilon=eps, delta=1e-4, n_iter=10, random_state=s).fit(X).score(Xt) for s in range(4)]
        )

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
    shrunk = GaussianMixture(
        2, epsilon=INF, n_iter=1, estimator="map", kappa0=1e6, nu0=5, psi0=0.1, random_state=0
    ).fit(X)
    assert np.abs(shrunk.means_).max() < 1e-2


@pytest.mark.parametrize(
    "bad",
    [
        {"scenario": "LGG"},
        {"composition": "rdp2"},
        {"estimator": "mode"},
        {"n_iter": 0},
        {"delta": 0.0},
        {"alpha": 0.5},
        {"means_init": np.zeros((5, 3))},
    ],
)
def test_gmm_invalid(bad):
    X = _gmm_data(n=100)
    with pytest.raises(InvalidParameter):
        GaussianMixture(2, **bad).fit(X)


def test_gmm_warns_on_inferred_norm():
    X = _gmm_data(n=300) * 5
    with pytest.warns(PrivacyLeakWarning):
        GaussianMixture(2, data_norm=None, random_state=0).fit(X)


# ----------------------------------------------------------------------------- the noise the fit really adds
@pytest.mark.parametrize("scenario", ["GGG", "LLG"])
def test_the_noise_each_iteration_adds_is_the_budgets_at_the_derived_sensitivities(monkeypatch, scenario):
    """Every mechanism the fit makes, spied on, and every draw from it counted: replace-one neighbours (N fixed),
    rows in the unit ball, so the weights' counts move by 2/N (L1; their L2 is below), the responsibility-weighted
    sums by 2 in L2 and 2√d in L1, the second moments by 2 in Frobenius norm -- jointly over the K components.
    Each Gaussian release's σ is the budget's noise multiplier times that sensitivity (a review halved the means'
    and covariances' noise and no test noticed), each Laplace release spends the per-iteration ε, each mechanism
    draws once an iteration, and what the draws cost together is within the ρ the fit reports."""
    import smcdp.dp.learners.mixture as mixture

    from .spy import rho_of, spy_mechanisms

    made = spy_mechanisms(monkeypatch, mixture)
    X = _gmm_data(n=400)
    N, d = X.shape
    K, J = 2, 3
    m = GaussianMixture(K, epsilon=1.0, delta=1e-5, n_iter=J, data_norm=4.0, scenario=scenario).fit(X)
    b = m.budget_
    assert len(made) == 3 and all(draws == J for *_, draws in made)
    (kw_, aw, dw, _), (km, am, dm, _), (kc, ac, dc, _) = made
    assert dw == pytest.approx(2.0 / N) and kc == "gauss" and dc == 2.0
    assert ac == pytest.approx(b.sigma_covariances * dc)
    if scenario == "GGG":
        assert kw_ == km == "gauss" and dm == 2.0
        assert aw == pytest.approx(b.sigma_weights * dw) and am == pytest.approx(b.sigma_means * dm)
    else:
        assert kw_ == km == "laplace" and dm == pytest.approx(2.0 * math.sqrt(d))
        assert aw == am == pytest.approx(b.eps_per_iter)
    assert rho_of(made) <= m.rho_spent_ * (1 + 1e-12)
