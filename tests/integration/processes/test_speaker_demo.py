"""Speaker verification and identification across real party processes (issue 37's contract): ``smcdp
speech ubm`` -> ``smcdp demo speaker-verify`` (the command, as a user runs it) and ``demo speaker-identify``
-> the same decision and speaker as the plaintext GMM-UBM.  Synthetic voices (tones and noise per speaker)
keep it short; small keys are a test-only opt-in (--key-bits 512)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from scipy.io import wavfile

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")

from tests.support.paths import REPO

RATE = 16000
SPEAKERS = {"ann": (220.0, 660.0), "bo": (140.0, 1100.0), "cy": (300.0, 450.0)}
pytestmark = pytest.mark.slow


def _voice(path, f0, f1, rng, seconds=0.45):
    t = np.arange(int(seconds * RATE)) / RATE
    wobble = 1 + 0.03 * rng.standard_normal()
    x = (
        np.sin(2 * np.pi * f0 * wobble * t)
        + 0.5 * np.sin(2 * np.pi * f1 * wobble * t)
        + 0.3 * np.sin(2 * np.pi * 2 * f0 * wobble * t)
        + 0.05 * rng.standard_normal(t.size)
    )
    wavfile.write(path, RATE, (0.3 * x / np.abs(x).max() * 32767).astype(np.int16))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("speakers")
    rng = np.random.default_rng(7)
    for name, (f0, f1) in SPEAKERS.items():
        for part, n in (("enroll", 4), ("test", 1)):
            d = root / name / part
            d.mkdir(parents=True)
            for i in range(n):
                _voice(d / f"u{i}.wav", f0, f1, rng)
    ubm = root / "ubm.npz"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "smcdp",
            "speech",
            "ubm",
            "--out",
            str(ubm),
            "--mixtures",
            "4",
            *[str(root / n / "enroll") for n in SPEAKERS],
        ],
        check=True,
        cwd=REPO,
        capture_output=True,
    )
    return root, ubm


@pytest.mark.parametrize("share", [[], ["--share-ubm"]], ids=["private-ubm", "shared-ubm"])
def test_speaker_verify_command_matches_plaintext(corpus, tmp_path, share):
    """The contract command; with --share-ubm bob shows alice his UBM (the demo's generated policy allows it,
    as bob's allow_reveal = ["ubm"] would) and the encrypted part runs on the speaker model alone."""
    root, ubm = corpus
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "smcdp",
        "demo",
        "speaker-verify",
        "--ubm",
        str(ubm),
        *[a for n in SPEAKERS for a in ("--enroll", f"{n}={root / n / 'enroll'}")],
        "--claim",
        "bo",
        "--wav",
        str(root / "bo" / "test" / "u0.wav"),
        "--out",
        str(out),
        "--key-bits",
        "512",
        *share,
    ]
    subprocess.run(cmd, check=True, cwd=REPO, capture_output=True, timeout=900)
    r = json.loads(out.read_text())
    assert r["ubm"] == ("shared" if share else "private")
    assert r["decision"] in ("accept", "reject")
    assert r["decision"] == r["plaintext_decision"]
    assert r["seconds"] > 0 and 0 < r["online_seconds"] <= r["seconds"] and r["bytes"] > 0


def test_speaker_identify_demo_matches_plaintext(corpus):
    from smcdp.cli.demo.speaker import demo_speaker_identify

    root, ubm = corpus
    r = demo_speaker_identify(
        str(ubm),
        [f"{n}={root / n / 'enroll'}" for n in SPEAKERS],
        str(root / "cy" / "test" / "u0.wav"),
        max_speakers=4,
        key_bits=512,
    )
    assert r["speaker"] == r["plaintext_speaker"]
    assert r["seconds"] > 0 and r["online_seconds"] > 0 and r["bytes"] > 0
    json.dumps(r)
