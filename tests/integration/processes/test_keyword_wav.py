"""From sound to answer over real processes (the contract of issue 16): espeak-ng words -> ``smcdp speech
train`` -> ``smcdp demo keyword --wav`` (Alice and Bob as separate processes, gRPC + mutual TLS) -> the right
keyword, the plaintext argmax of the same models on the same audio."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")
pytest.importorskip("hmmlearn", reason="hmmlearn is not installed")
from scipy.io import wavfile
from scipy.signal import resample_poly

from smcdp.speech.features import wav_features
from smcdp.speech.forward import score_models
from smcdp.speech.models import KeywordModels
from tests.support.paths import REPO

ESPEAK = shutil.which("espeak-ng")
pytestmark = pytest.mark.skipif(ESPEAK is None, reason="espeak-ng not installed (apt-get install espeak-ng)")
WORDS = ("one", "two", "three")


def _generator():
    """The fixture generator's voices and variants (examples/make_keyword_data.py)."""
    spec = importlib.util.spec_from_file_location("make_keyword_data", REPO / "examples" / "make_keyword_data.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _speak(path, word, voice, variant, speed, pitch):
    """espeak-ng's own WAV (22.05 kHz, 16-bit mono), untouched: the front end resamples it."""
    v = voice + (f"+{variant}" if variant else "")
    subprocess.run(
        [ESPEAK, "-v", v, "-s", str(speed), "-p", str(pitch), "-w", str(path), "--", word],
        check=True,
        capture_output=True,
        timeout=60,
    )


def _smcdp(*args, timeout=600):
    return subprocess.run(
        [sys.executable, "-m", "smcdp", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.slow
def test_wav_round_trip_train_then_recognise_over_processes(tmp_path):
    gen = _generator()
    rng = np.random.default_rng(16)
    specs = []
    for w in WORDS:
        d = tmp_path / "train" / w
        d.mkdir(parents=True)
        for k in range(6):
            _speak(
                d / f"{k}.wav",
                w,
                str(rng.choice(gen.VOICES)),
                str(rng.choice(gen.VARIANTS)),
                int(rng.integers(130, 200)),
                int(rng.integers(30, 70)),
            )
        specs += ["--word", f"{w}={d}"]
    models_path = tmp_path / "models.npz"
    res = _smcdp("speech", "train", *specs, "--states", "4", "--iter", "10", "--out", str(models_path))
    assert res.returncode == 0, res.stderr[-3000:]
    for w in WORDS:
        assert re.search(
            rf"^  {w}: 6 files, \d+ frames, training log-likelihood -?\d+\.\d+ per frame", res.stdout, re.M
        ), res.stdout
    assert re.search(r"^held-out accuracy: [01]\.\d{3} \(\d/6 files", res.stdout, re.M), res.stdout
    models = KeywordModels.load(models_path)
    assert tuple(models.words) == WORDS and models.kind == "diag"

    # Alice's audio: a voice not in training, as a stereo float32 WAV at 44.1 kHz (one process run keeps
    # the test short; the other formats are covered by tests/unit/speech)
    for w in WORDS[1:2]:
        raw = tmp_path / f"raw_{w}.wav"
        _speak(raw, w, "en-gb", "f2", 165, 50)
        rate, x = wavfile.read(raw)
        utt = tmp_path / f"alice_{w}.wav"
        y = resample_poly(x / 32768.0, 2, 1)
        wavfile.write(utt, 2 * rate, np.stack([y, 0.8 * y], axis=1).astype(np.float32))
        plain = score_models(models, wav_features(utt))
        res = _smcdp(
            "demo", "keyword", "--wav", str(utt), "--models", str(models_path), "--key-bits", "512", "--debug-reveal"
        )
        assert res.returncode == 0, res.stderr[-3000:]
        out = json.loads(res.stdout)
        assert out["keyword"] == w
        assert out["index"] == int(np.argmax(plain)) == WORDS.index(w)
        assert out["frames"] == wav_features(utt).shape[0] and out["n_models"] == 3
        np.testing.assert_allclose(out["log_likelihoods"], plain, rtol=1e-6)
        for key in ("seconds", "bytes_sent", "key_bits", "timings", "session_id"):
            assert key in out
