"""GMM-UBM speaker models (issue 37): likelihoods against scikit-learn, MAP adaptation (Reynolds et al.
2000) against its formula, files, and the UBM trainers (EM, DP-EM)."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.mixture import GaussianMixture

from smcdp.cli.speaker import train_ubm
from smcdp.errors import InvalidMessage
from smcdp.speech.speaker import UBM, DiagGMM, SpeakerModels, llr_score, map_adapt_means


def _fitted(seed=0, C=3, d=4):
    rng = np.random.default_rng(seed)
    X = np.concatenate([rng.normal(loc=3 * k, size=(200, d)) for k in range(C)])
    g = GaussianMixture(C, covariance_type="diag", random_state=0).fit(X)
    return g, DiagGMM(g.weights_ / g.weights_.sum(), g.means_, g.covariances_), X


def test_frame_logliks_equal_scikit_learn():
    g, gmm, X = _fitted()
    np.testing.assert_allclose(gmm.frame_logliks(X), g.score_samples(X), rtol=1e-10)


def test_map_adaptation_follows_reynolds():
    g, gmm, _X = _fitted()
    Y = np.random.default_rng(1).normal(loc=1.0, size=(50, 4))
    r = 16.0
    post = g.predict_proba(Y)
    n = post.sum(0)
    E = post.T @ Y / n[:, None]
    a = (n / (n + r))[:, None]
    np.testing.assert_allclose(map_adapt_means(gmm, Y, r), a * E + (1 - a) * gmm.means, rtol=1e-9, atol=1e-12)
    # more data pulls the means further from the UBM's
    far = np.abs(map_adapt_means(gmm, np.tile(Y, (20, 1)), r) - gmm.means).sum()
    assert far > np.abs(map_adapt_means(gmm, Y, r) - gmm.means).sum()


def test_a_speakers_own_frames_score_higher_than_anothers():
    _, gmm, _ = _fitted()
    rng = np.random.default_rng(2)
    A, B = rng.normal(loc=0.5, size=(300, 4)), rng.normal(loc=5.5, size=(300, 4))
    ma, mb = map_adapt_means(gmm, A[:200]), map_adapt_means(gmm, B[:200])
    assert llr_score(gmm, ma, A[200:]) > llr_score(gmm, mb, A[200:])
    assert llr_score(gmm, mb, B[200:]) > llr_score(gmm, ma, B[200:])


def test_files_round_trip_and_refuse_nonsense(tmp_path):
    _, gmm, X = _fitted()
    UBM(gmm, "utterance", 3.0, 1e-5).save(tmp_path / "u.npz")
    u = UBM.load(tmp_path / "u.npz")
    assert u.epsilon == 3.0 and u.cmn == "utterance"
    np.testing.assert_array_equal(u.gmm.means, gmm.means)
    m = SpeakerModels(gmm, ["a", "b"], np.stack([gmm.means, gmm.means + 1]), threshold=0.25)
    m.save(tmp_path / "s.npz")
    m2 = SpeakerModels.load(tmp_path / "s.npz")
    assert m2.names == ("a", "b") and m2.threshold == 0.25
    np.testing.assert_allclose(m2.scores(X[:20]), m.scores(X[:20]))
    with pytest.raises(InvalidMessage, match="'speakers' file, expected 'ubm'"):
        UBM.load(tmp_path / "s.npz")
    with pytest.raises(InvalidMessage, match="unique"):
        SpeakerModels(gmm, ["a", "a"], np.stack([gmm.means] * 2))
    with pytest.raises(InvalidMessage, match="variances"):
        DiagGMM(gmm.weights, gmm.means, -gmm.covars)
    with pytest.raises(InvalidMessage, match="sum to 1"):
        DiagGMM(gmm.weights * 2, gmm.means, gmm.covars)
    np.savez(tmp_path / "bad.npz", kind=np.array("ubm"), format_version=np.int64(1), weights=gmm.weights,
             means=gmm.means, covars=gmm.covars, cmn=np.array("utterance"), extra=np.zeros(1))
    with pytest.raises(InvalidMessage, match="unknown keys"):
        UBM.load(tmp_path / "bad.npz")


def test_ubm_trainers_em_and_dp_em():
    _, _, X = _fitted()
    gmm, info = train_ubm(X, 3, n_iter=50)
    assert info["trainer"] == "em" and gmm.n_components == 3
    dp, info = train_ubm(X, 3, epsilon=10.0, delta=1e-5, data_norm=12.0, seed=1)
    assert info["trainer"] == "dp-em" and info["rho"] > 0
    assert np.all(dp.covars >= 1e-3) and abs(dp.weights.sum() - 1) < 1e-9
    with pytest.raises(InvalidMessage, match="data-norm"):
        train_ubm(X, 3, epsilon=1.0, data_norm=None)
