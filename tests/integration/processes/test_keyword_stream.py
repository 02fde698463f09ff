"""Issue 16 ``--stream`` over real processes: espeak-ng words -> ``smcdp speech train --cmn causal`` ->
``smcdp demo keyword --wav U.wav --stream`` (Alice reads the WAV in 10 ms hops and feeds each frame into
the protocol as the front end releases it) -> the plaintext argmax, the same scores as batch, and the
latency after the last frame in the JSON."""

from __future__ import annotations

import json

import numpy as np
import pytest

from smcdp.speech.features import wav_features
from smcdp.speech.forward import score_models
from smcdp.speech.models import KeywordModels
from tests.integration.processes.test_keyword_wav import ESPEAK, WORDS, _generator, _smcdp, _speak

pytestmark = pytest.mark.skipif(ESPEAK is None, reason="espeak-ng not installed (apt-get install espeak-ng)")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """Models trained once (``smcdp speech train --cmn causal`` on espeak-ng words) for both paces: the two
    tests only read them, and the training (15 synthesised WAVs, 8 EM iterations) is what they had in common."""
    tmp = tmp_path_factory.mktemp("stream_models")
    gen = _generator()
    rng = np.random.default_rng(61)
    specs = []
    for w in WORDS:
        d = tmp / "train" / w
        d.mkdir(parents=True)
        for k in range(5):
            _speak(
                d / f"{k}.wav",
                w,
                str(rng.choice(gen.VOICES)),
                str(rng.choice(gen.VARIANTS)),
                int(rng.integers(130, 200)),
                int(rng.integers(30, 70)),
            )
        specs += ["--word", f"{w}={d}"]
    models_path = tmp / "models.npz"
    res = _smcdp(
        "speech", "train", *specs, "--states", "4", "--iter", "8", "--cmn", "causal", "--out", str(models_path)
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return models_path


@pytest.mark.slow
@pytest.mark.parametrize("pace", ["fast", "realtime"])
def test_stream_recognises_a_wav_fed_in_10ms_hops(tmp_path, trained, pace):
    models_path = trained
    models = KeywordModels.load(models_path)

    utt = tmp_path / "alice.wav"
    _speak(utt, WORDS[2], "en-gb", "f2", 165, 50)
    X = wav_features(utt, cmn="causal")
    plain = score_models(models, X)
    res = _smcdp(
        "demo",
        "keyword",
        "--wav",
        str(utt),
        "--models",
        str(models_path),
        "--cmn",
        "causal",
        "--stream",
        "--stream-pace",
        pace,
        "--key-bits",
        "512",
        "--debug-reveal",
    )
    assert res.returncode == 0, res.stderr[-3000:]
    out = json.loads(res.stdout)
    assert out["index"] == int(np.argmax(plain)) and out["keyword"] == WORDS[out["index"]]
    np.testing.assert_allclose(out["log_likelihoods"], plain, rtol=1e-6)
    st = out["stream"]
    assert st["frames"] == X.shape[0] == out["frames"]
    assert st["audio_seconds"] > 0.2 and st["pace"] == pace
    assert 0 < st["latency_after_last_frame"] < st["keyword_at"]
    if pace == "realtime":  # the last frame cannot exist before the audio has played
        assert st["last_frame_at"] >= 0.9 * st["audio_seconds"] - 0.05
    for key in ("offline_seconds", "online_seconds"):
        assert out[key] > 0


def test_stream_refuses_a_feature_file_and_per_utterance_cmn(tmp_path):
    npy = tmp_path / "u.npy"
    np.save(npy, np.zeros((10, 39)))
    res = _smcdp(
        "demo",
        "keyword",
        "--utterance",
        str(npy),
        "--models",
        "tests/data/keyword/models.npz",
        "--stream",
        "--key-bits",
        "512",
    )
    assert res.returncode != 0 and "--stream needs --wav" in res.stderr
