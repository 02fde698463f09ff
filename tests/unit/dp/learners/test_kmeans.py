"""DPLloyd k-means."""

import math

import numpy as np
import pytest
from sklearn.cluster import KMeans as SkKMeans

from smcdp.dp import KMeans
from smcdp.dp.learners.kmeans import zcdp_per_step_epsilon

from .data import gmm_data as _gmm_data

INF = float("inf")


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
    m = KMeans(
        3, epsilon=1.0, delta=1e-5, composition=composition, bounds=(-1, 1), n_iter=5, init=init, random_state=0
    ).fit(X)
    assert np.all(m.cluster_centers_ >= -1) and np.all(m.cluster_centers_ <= 1)
    assert m.epsilon_spent_ == 1.0
    expected = 1.0 / 5 if composition == "linear" else zcdp_per_step_epsilon(1.0, 1e-5, 5)
    assert m.epsilon_per_iter_ == pytest.approx(expected)
    clean = KMeans(3, epsilon=INF, bounds=(-1, 1), n_iter=5, init=init).fit(X)
    assert m.normalised_intra_cluster_variance(X) < 1.5 * clean.normalised_intra_cluster_variance(X)


def test_a_private_fit_keeps_no_exact_statistic_of_its_rows():
    """labels_ (each training row's cluster) and inertia_ (their exact sum of squared distances) are no DP release: a
    review read one row's squared distance to its centre to 15 digits from inertia_.  A private fit sets neither;
    predict gives the labels from the released centres."""
    X = _gmm_data(n=300)
    m = KMeans(3, epsilon=1.0, n_iter=4, bounds=(-1.0, 1.0), random_state=0).fit(X)
    assert not hasattr(m, "inertia_") and not hasattr(m, "labels_")
    assert m.predict(X).shape == (len(X),)


def test_each_iteration_spends_its_epsilon_at_the_replace_one_sensitivity(monkeypatch):
    """The one Laplace mechanism DPLloyd makes, spied on: its L1 sensitivity is 2 (a row moves between two
    clusters' counts) plus Σ(upper − lower) (the centred row leaves one cluster's sum and another's enters, each at
    most half the box's width in L1) -- a review's mutation to the add/remove value 1 + Σw/2 passed every test --,
    its ε the per-iteration share, one draw an iteration, ε in all under linear composition."""
    import smcdp.dp.learners.kmeans as kmeans

    from .spy import spy_mechanisms

    made = spy_mechanisms(monkeypatch, kmeans)
    X = _gmm_data(n=300)
    lower, upper = np.full(X.shape[1], -2.0), np.full(X.shape[1], 3.0)
    J = 4
    m = KMeans(3, epsilon=1.0, n_iter=J, bounds=(lower, upper), composition="linear").fit(X)
    assert len(made) == 1
    kind, eps_i, sens, draws = made[0]
    assert kind == "laplace" and draws == J
    assert sens == pytest.approx(2.0 + float(np.sum(upper - lower)))
    assert eps_i == pytest.approx(m.epsilon_per_iter_) and J * eps_i == pytest.approx(1.0)
