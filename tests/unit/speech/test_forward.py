from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("hmmlearn", reason="hmmlearn is not installed")
from scipy.stats import multivariate_normal

from smcdp.errors import InvalidMessage
from smcdp.speech.forward import (
    augment,
    forward_log_alpha,
    log_emissions,
    log_emissions_quadratic,
    log_likelihood,
    product_index_pairs,
    products,
    quadratic_coefficients,
    quadratic_form,
    quadratic_forms,
    recognise,
    score_models,
)
from smcdp.speech.models import HMM, KeywordModels, to_hmmlearn

RTOL = 1e-9


def _rel(a, b):
    return abs(a - b) / max(abs(b), 1e-300)


def _random_hmm(kind: str, rng, N=4, d=5, C=3, M=7, dense=True) -> HMM:
    """A random HMM with dense (ergodic) transitions, to exercise every logsumexp term."""

    def stoch(*shape):
        a = rng.uniform(0.05, 1.0, shape)
        return a / a.sum(axis=-1, keepdims=True)

    def spd(*lead):
        B = rng.standard_normal((*lead, d, d))
        return B @ np.swapaxes(B, -1, -2) / d + 0.2 * np.eye(d)

    sp, A = stoch(N), stoch(N, N)
    if kind == "discrete":
        return HMM(sp, A, emissionprob=stoch(N, M))
    if kind == "diag":
        return HMM(sp, A, means=rng.normal(0, 2, (N, d)), covars=rng.uniform(0.3, 3, (N, d)))
    if kind == "full":
        return HMM(sp, A, means=rng.normal(0, 2, (N, d)), covars=spd(N))
    if kind == "gmm-diag":
        return HMM(sp, A, means=rng.normal(0, 2, (N, C, d)), covars=rng.uniform(0.3, 3, (N, C, d)), weights=stoch(N, C))
    return HMM(sp, A, means=rng.normal(0, 2, (N, C, d)), covars=spd(N, C), weights=stoch(N, C))


KINDS = ["discrete", "diag", "full", "gmm-diag", "gmm-full"]


@pytest.mark.parametrize("kind", KINDS)
def test_forward_equals_hmmlearn_random_models(kind):
    rng = np.random.default_rng(KINDS.index(kind))
    for trial in range(5):
        h = _random_hmm(kind, rng)
        ref = to_hmmlearn(h)
        for T in (1, 2, 17, 300):
            if kind == "discrete":
                x = rng.integers(0, h.n_symbols, T)
                expected = ref.score(x.reshape(-1, 1))
            else:
                x = rng.normal(0, 2, (T, h.n_features))
                expected = ref.score(x)
            got = log_likelihood(h, x)
            assert _rel(got, expected) <= RTOL, (kind, trial, T, got, expected)


def test_forward_equals_hmmlearn_on_fixture(fixture_dir, test_utterances, discrete_test):
    for name in ("models.npz", "models_full.npz", "models_gmm.npz"):
        m = KeywordModels.load(fixture_dir / name)
        for i in range(m.n_words):
            h = m.hmm(i)
            ref = to_hmmlearn(h)
            for x, _, _ in test_utterances:
                assert _rel(log_likelihood(h, x), ref.score(x)) <= RTOL, name
    m = KeywordModels.load(fixture_dir / "models_discrete.npz")
    seqs, _, _ = discrete_test
    for i in range(m.n_words):
        ref = to_hmmlearn(m.hmm(i))
        for s in seqs:
            assert _rel(log_likelihood(m.hmm(i), s), ref.score(s.reshape(-1, 1))) <= RTOL


def test_forward_matches_brute_force_path_sum():
    """Independent check: sum P(path, x) over every state path of a tiny HMM."""
    rng = np.random.default_rng(11)
    for kind in KINDS:
        h = _random_hmm(kind, rng, N=3, d=2, C=2, M=4)
        T = 5
        x = rng.integers(0, 4, T) if kind == "discrete" else rng.normal(0, 1, (T, 2))
        logb = log_emissions(h, x)
        total = 0.0
        for path in itertools.product(range(3), repeat=T):
            p = h.startprob[path[0]] * np.exp(logb[0, path[0]])
            for t in range(1, T):
                p *= h.transmat[path[t - 1], path[t]] * np.exp(logb[t, path[t]])
            total += p
        assert _rel(log_likelihood(h, x), np.log(total)) <= 1e-12
        # log alpha at T sums to the same
        la = forward_log_alpha(h, x)
        assert la.shape == (T, 3)


def test_log_emissions_against_scipy():
    rng = np.random.default_rng(5)
    x = rng.normal(0, 2, (30, 5))
    for kind in ("diag", "full", "gmm-diag", "gmm-full"):
        h = _random_hmm(kind, rng)
        got = log_emissions(h, x)
        for j in range(h.n_states):
            if kind in ("diag", "full"):
                cov = np.diag(h.covars[j]) if kind == "diag" else h.covars[j]
                ref = multivariate_normal(h.means[j], cov).logpdf(x)
            else:
                comps = [
                    np.log(h.weights[j, c])
                    + multivariate_normal(
                        h.means[j, c], np.diag(h.covars[j, c]) if kind == "gmm-diag" else h.covars[j, c]
                    ).logpdf(x)
                    for c in range(h.n_mix)
                ]
                ref = np.logaddexp.reduce(np.stack(comps), axis=0)
            np.testing.assert_allclose(got[:, j], ref, rtol=1e-10)
    hd = _random_hmm("discrete", rng)
    s = rng.integers(0, hd.n_symbols, 9)
    np.testing.assert_array_equal(log_emissions(hd, s), np.log(hd.emissionprob[:, s].T))


def test_long_utterance_does_not_underflow(fixture_dir, test_utterances):
    m = KeywordModels.load(fixture_dir / "models.npz")
    x = np.concatenate([u for u, _, _ in test_utterances])  # ~1800 frames
    h = m.hmm(0)
    ll = log_likelihood(h, x)
    assert np.isfinite(ll) and ll < -1e4
    assert _rel(ll, to_hmmlearn(h).score(x)) <= RTOL


def test_structural_zeros_and_impossible_sequences():
    # Left-to-right, 2 states, discrete: state 0 emits only symbol 0, state 1 only symbol 1.
    h = HMM([1.0, 0.0], [[0.5, 0.5], [0.0, 1.0]], emissionprob=[[1.0, 0.0], [0.0, 1.0]])
    assert log_likelihood(h, np.array([0, 0, 1])) == pytest.approx(np.log(0.5 * 0.5))
    assert log_likelihood(h, np.array([1, 0])) == -np.inf
    assert log_likelihood(h, np.array([0, 1, 0])) == -np.inf


def test_recognise_and_score_models(fixture_dir, test_utterances):
    m = KeywordModels.load(fixture_dir / "models.npz")
    x = test_utterances[0][0]
    k, word, scores = recognise(m, x)
    assert scores.shape == (10,) and word == m.words[k] and k == int(np.argmax(scores))
    np.testing.assert_array_equal(scores, score_models(m, x))
    for i in range(10):
        assert scores[i] == log_likelihood(m.hmm(i), x)


@pytest.mark.parametrize(
    "obs, kind, match",
    [
        (np.zeros((5, 4)), "diag", "model expects 5"),
        (np.zeros((0, 5)), "diag", "empty"),
        (np.full((3, 5), np.nan), "diag", "NaN"),
        (np.zeros(5), "diag", "T x d"),
        (np.array([0, 7]), "discrete", "outside"),
        (np.array([0.0, 1.0]), "discrete", "integer"),
        (np.zeros(0, int), "discrete", "empty"),
    ],
)
def test_observation_validation(obs, kind, match):
    h = _random_hmm(kind, np.random.default_rng(0))
    with pytest.raises(InvalidMessage, match=match):
        log_likelihood(h, obs)


# ----------------------------------------------------------------- quadratic form


@pytest.mark.parametrize("cov_type", ["diag", "full"])
def test_quadratic_form_equals_gaussian_log_density(cov_type):
    rng = np.random.default_rng(3)
    for d in (1, 2, 13, 39):
        mu = rng.normal(0, 3, d)
        if cov_type == "diag":
            cov = rng.uniform(0.05, 5, d)
            dense = np.diag(cov)
        else:
            B = rng.standard_normal((d, d))
            cov = dense = B @ B.T / d + 0.1 * np.eye(d)
        W = quadratic_form(mu, cov)
        assert W.shape == (d + 1, d + 1)
        np.testing.assert_array_equal(W, W.T)
        X = rng.normal(mu, 2, (50, d))
        Z = augment(X)
        q = np.einsum("ti,ij,tj->t", Z, W, Z)
        ref = multivariate_normal(mu, dense).logpdf(X)
        np.testing.assert_allclose(q, ref, rtol=1e-9)
        # Distinct-product form: the secure protocol's linear function of z_i z_j.
        coeff = quadratic_coefficients(W, cov_type)
        P = products(X, cov_type)
        assert coeff.shape == (P.shape[1],)
        assert P.shape[1] == ((d + 1) * (d + 2) // 2 if cov_type == "full" else 2 * d + 1)
        np.testing.assert_allclose(P @ coeff, ref, rtol=1e-9)


def test_quadratic_form_seed_layout_and_sign_correction():
    """The seed's block form (C^-1 mu top right, 0 bottom left) gives the same z'Wz,
    with the corrected constant w = -1/2 mu'C^-1 mu - 1/2 ln|C| - d/2 ln 2 pi."""
    rng = np.random.default_rng(9)
    d = 4
    mu = rng.normal(size=d)
    B = rng.standard_normal((d, d))
    C = B @ B.T + np.eye(d)
    Ci = np.linalg.inv(C)
    w = -0.5 * mu @ Ci @ mu - 0.5 * np.linalg.slogdet(C)[1] - 0.5 * d * np.log(2 * np.pi)
    seed = np.zeros((d + 1, d + 1))
    seed[:d, :d] = -0.5 * Ci
    seed[:d, d] = Ci @ mu
    seed[d, d] = w
    ours = quadratic_form(mu, C)
    np.testing.assert_allclose(quadratic_coefficients(seed), quadratic_coefficients(ours), rtol=1e-12, atol=1e-12)
    # The constant as printed in the seed (signs of the first two terms flipped) is wrong.
    seed_printed = w + mu @ Ci @ mu + np.linalg.slogdet(C)[1]
    x = rng.normal(size=d)
    assert abs(augment(x) @ ours @ augment(x) - multivariate_normal(mu, C).logpdf(x)) < 1e-12
    assert abs(seed_printed - w) > 1e-3


@pytest.mark.parametrize("kind", ["diag", "full", "gmm-diag", "gmm-full"])
def test_quadratic_emissions_equal_direct_emissions(kind):
    rng = np.random.default_rng(21)
    h = _random_hmm(kind, rng, d=6)
    x = rng.normal(0, 2, (40, 6))
    np.testing.assert_allclose(log_emissions_quadratic(h, x), log_emissions(h, x), rtol=1e-9)
    Ws = quadratic_forms(h)
    if kind.startswith("gmm"):
        assert Ws.shape == (h.n_states, h.n_mix, 7, 7)
        # Without the log weights, each component form is that component's own density.
        Wn = quadratic_forms(h, include_log_weight=False)
        z = augment(x[0])
        cov = h.covars[1, 0] if kind == "gmm-full" else np.diag(h.covars[1, 0])
        assert z @ Wn[1, 0] @ z == pytest.approx(multivariate_normal(h.means[1, 0], cov).logpdf(x[0]), rel=1e-9)
    else:
        assert Ws.shape == (h.n_states, 7, 7)
        ct = h.covariance_type
        coeffs = quadratic_coefficients(Ws, ct)
        np.testing.assert_allclose(products(x, ct) @ coeffs.T, log_emissions(h, x), rtol=1e-9)


def test_quadratic_form_on_fixture_models(fixture_dir, test_utterances):
    for name in ("models.npz", "models_full.npz", "models_gmm.npz"):
        m = KeywordModels.load(fixture_dir / name)
        for i in range(m.n_words):
            h = m.hmm(i)
            for x, _, _ in test_utterances[:6]:
                np.testing.assert_allclose(log_emissions_quadratic(h, x), log_emissions(h, x), rtol=1e-9)


def test_product_helpers_and_errors():
    I, J = product_index_pairs(3, "diag")
    assert list(zip(I.tolist(), J.tolist())) == [(0, 0), (0, 3), (1, 1), (1, 3), (2, 2), (2, 3), (3, 3)]
    assert len(product_index_pairs(39, "full")[0]) == 820
    assert len(product_index_pairs(39, "diag")[0]) == 79
    with pytest.raises(InvalidMessage, match="covariance_type"):
        product_index_pairs(3, "tied")
    with pytest.raises(InvalidMessage, match="positive integer"):
        product_index_pairs(0)
    W = quadratic_form(np.zeros(2), np.eye(2) + 0.5)
    with pytest.raises(InvalidMessage, match="off-diagonal"):
        quadratic_coefficients(W, "diag")
    with pytest.raises(InvalidMessage, match="positive definite"):
        quadratic_form(np.zeros(2), np.array([[1.0, 2.0], [2.0, 1.0]]))
    with pytest.raises(InvalidMessage, match="positive"):
        quadratic_form(np.zeros(2), np.array([1.0, 0.0]))
    with pytest.raises(InvalidMessage, match="shape"):
        quadratic_form(np.zeros(2), np.ones(3))
    with pytest.raises(InvalidMessage, match="Gaussian"):
        quadratic_forms(_random_hmm("discrete", np.random.default_rng(0)))


def test_linear_products_are_the_features_and_one_and_refuse_a_form_with_squares():
    """``linear``: z_i·1 for every feature and 1·1 (d + 1 products); the coefficients of a form without
    second-degree terms reproduce zᵀWz exactly there, and a form with a square is refused."""
    from smcdp.speech.forward import product_index_pairs, products, quadratic_coefficients

    rng = np.random.default_rng(4)
    d = 5
    I, J = product_index_pairs(d, "linear")
    assert list(I) == list(range(d + 1)) and set(J) == {d}
    W = np.zeros((d + 1, d + 1))
    W[:d, d] = rng.normal(size=d)
    W[d, d] = rng.normal()
    X = rng.normal(size=(7, d))
    Z = np.hstack([X, np.ones((7, 1))])
    assert np.allclose(products(X, "linear") @ quadratic_coefficients(W, "linear"), np.einsum("ti,ij,tj->t", Z, W, Z))
    W[2, 2] = 0.5
    with pytest.raises(InvalidMessage, match="second-degree"):
        quadratic_coefficients(W, "linear")
    with pytest.raises(InvalidMessage, match="covariance_type"):
        product_index_pairs(d, "spherical")
