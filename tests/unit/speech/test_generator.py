"""End-to-end run of examples/make_keyword_data.py on a tiny setting (needs espeak-ng)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")
pytest.importorskip("hmmlearn", reason="hmmlearn is not installed")
pytest.importorskip("sklearn", reason="sklearn is not installed")

from smcdp.speech.features import load_features
from smcdp.speech.models import KeywordModels
from tests.support.paths import REPO as _REPO

ROOT = _REPO
SCRIPT = ROOT / "examples" / "make_keyword_data.py"
BASE = ["--words", "one,two,three", "--per-word", "4", "--states", "3", "--n-iter", "3", "--save-test-per-word", "1"]
TINY = [*BASE, "--extras", "--extras-words", "2", "--codebook", "4"]

pytestmark = pytest.mark.slow  # runs the generator script (espeak-ng, training) in a subprocess

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="espeak-ng not installed (apt-get install espeak-ng)"
)


def _run(args, timeout=120):
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args], capture_output=True, text=True, check=False, timeout=timeout, cwd=ROOT
    )


@needs_espeak
def test_generator_end_to_end_and_deterministic(tmp_path):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        res = _run(["--out", str(out), "--seed", "5", *TINY])
        assert res.returncode == 0, res.stderr
        assert "plaintext test accuracy" in res.stdout
        outs.append(out)
    a, b = outs
    summary = json.loads((a / "summary.json").read_text())
    assert summary["n_test"] == 3 and summary["n_train"] == 9
    assert 0.0 <= summary["test_accuracy"] <= 1.0
    labels = json.loads((a / "labels.json").read_text())
    assert [u["word"] for u in labels["utterances"]] == ["one", "two", "three"]
    for u in labels["utterances"]:
        x = load_features(a / u["file"])
        assert x.shape == (u["frames"], 39)
        np.testing.assert_array_equal(x, np.load(b / u["file"]))  # same seed, same features
    for name, kind in (
        ("models.npz", "diag"),
        ("models_full.npz", "full"),
        ("models_gmm.npz", "gmm-diag"),
        ("models_discrete.npz", "discrete"),
    ):
        ma, mb = KeywordModels.load(a / name), KeywordModels.load(b / name)
        assert ma.kind == kind and ma.n_states == 3
        for key, val in ma.to_arrays().items():
            np.testing.assert_array_equal(val, mb.to_arrays()[key])
    assert load_features(a / "utterance_98.npy").shape == (98, 39)

    # A different seed gives different data.
    c = tmp_path / "c"
    assert _run(["--out", str(c), "--seed", "6", *BASE]).returncode == 0
    assert not np.array_equal(KeywordModels.load(c / "models.npz").means, KeywordModels.load(a / "models.npz").means)


@pytest.mark.parametrize(
    "args, msg",
    [
        (["--per-word", "1"], "--per-word"),
        (["--test-fraction", "1.5"], "--test-fraction"),
        (["--words", "one"], "two distinct"),
        (["--snr-min", "30", "--snr-max", "10"], "exceeds"),
        (["--pitch-max", "120"], "pitch"),
    ],
)
def test_generator_rejects_bad_arguments(tmp_path, args, msg):
    res = _run(["--out", str(tmp_path / "x"), *args], timeout=60)
    assert res.returncode == 2 and msg in res.stderr


def test_generator_reports_missing_espeak(tmp_path):
    res = _run(["--out", str(tmp_path / "x"), "--espeak", str(tmp_path / "no-such-espeak")], timeout=60)
    assert res.returncode == 2 and "espeak-ng not found" in res.stderr
