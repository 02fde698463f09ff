"""``smcdp speech train`` on synthesised "words" (chirps with jitter and noise, written as assorted WAVs)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")
pytest.importorskip("hmmlearn", reason="hmmlearn is not installed")
from scipy.io import wavfile

from smcdp.cli.app import main
from smcdp.speech import frontend as FE
from smcdp.speech.features import wav_features
from smcdp.speech.forward import recognise
from smcdp.speech.models import KeywordModels

# each "word": a sequence of (start Hz, end Hz) glides, one per syllable
WORDS = {"rise": [(300, 1400), (900, 2000)], "fall": [(2000, 600), (1200, 300)], "flat": [(700, 700), (1600, 1600)]}


def _utterance(word, rng, rate):
    parts = []
    for f0, f1 in WORDS[word]:
        dur = rng.uniform(0.15, 0.22)
        t = np.arange(int(dur * rate)) / rate
        f = f0 + (f1 - f0) * t / t[-1]
        phase = 2 * np.pi * np.cumsum(f) / rate
        parts.append(np.sin(phase) * np.hanning(t.size) * rng.uniform(0.3, 0.8))
    x = np.concatenate([np.zeros(int(rng.uniform(0.02, 0.08) * rate)), *parts, np.zeros(int(0.05 * rate))])
    return x + rng.normal(0, 0.003, x.size)


def _write(path, x, rate, k):
    """Rotate through formats: 16-bit mono, float32 stereo, 32-bit int mono."""
    if k % 3 == 0:
        wavfile.write(path, rate, (x * 2**15).astype(np.int16))
    elif k % 3 == 1:
        wavfile.write(path, rate, np.stack([x, x], axis=1).astype(np.float32))
    else:
        wavfile.write(path, rate, (x * 2**31 * 0.9).astype(np.int32))


def make_folders(root, per_word, seed=0):
    rng = np.random.default_rng(seed)
    specs = []
    for w in WORDS:
        d = root / w
        d.mkdir(parents=True)
        for k in range(per_word):
            rate = (16000, 22050, 8000)[k % 3]
            _write(d / f"{w}_{k}.WAV" if k == 0 else d / f"{w}_{k}.wav", _utterance(w, rng, rate), rate, k)
        (d / "notes.txt").write_text("not audio, ignored")
        specs += ["--word", f"{w}={d}"]
    return specs


def test_train_writes_models_the_protocol_reads_and_reports(tmp_path, capsys):
    specs = make_folders(tmp_path / "data", per_word=6)
    out = tmp_path / "m.npz"
    report = tmp_path / "r.json"
    assert (
        main(["speech", "train", *specs, "--states", "4", "--iter", "8", "--out", str(out), "--report", str(report)])
        == 0
    )
    text = capsys.readouterr().out
    models = KeywordModels.load(out)
    assert list(models.words) == list(WORDS) and models.kind == "diag" and models.n_states == 4
    assert models.n_features == 39
    r = json.loads(report.read_text())
    for w, line in zip(r["per_word"], [ln for ln in text.splitlines() if "training log-likelihood" in ln]):
        assert w["files"] == 6 and line.strip().startswith(w["word"] + ":")
        assert f"{w['loglik_per_frame']:.3f} per frame" in line
        np.testing.assert_allclose(w["loglik_per_frame"] * w["frames"], w["loglik_total"], rtol=1e-12)
    h = r["heldout"]
    assert h["computed"] and h["n"] == 3 * 2 and h["n_train"] == 3 * 4  # ceil(0.25 * 6) = 2 held out per word
    assert sum(map(sum, h["confusion"])) == h["n"] and h["correct"] == np.trace(h["confusion"])
    assert f"held-out accuracy: {h['accuracy']:.3f}" in text
    assert h["accuracy"] >= 5 / 6  # the glides are easy to tell apart
    # the written models were retrained on all files: they score each word's own files best
    rng = np.random.default_rng(99)
    for w in WORDS:
        fresh = tmp_path / f"fresh_{w}.wav"
        wavfile.write(fresh, 16000, (_utterance(w, rng, 16000) * 2**15).astype(np.int16))
        assert recognise(models, wav_features(fresh))[1] == w


def test_training_is_deterministic_and_kinds_follow_the_options(tmp_path, capsys):
    specs = make_folders(tmp_path / "data", per_word=3)
    arrays = []
    for name in ("a", "b"):
        assert (
            main(["speech", "train", *specs, "--states", "3", "--iter", "4", "--out", str(tmp_path / f"{name}.npz")])
            == 0
        )
        arrays.append(KeywordModels.load(tmp_path / f"{name}.npz").to_arrays())
    for k in arrays[0]:
        np.testing.assert_array_equal(arrays[0][k], arrays[1][k])
    text = capsys.readouterr().out
    assert "held-out accuracy: not computed (need at least 5 files per word, the smallest folder has 3)" in text
    assert (
        main(
            [
                "speech",
                "train",
                *specs,
                "--states",
                "2",
                "--mixtures",
                "2",
                "--iter",
                "2",
                "--out",
                str(tmp_path / "g.npz"),
            ]
        )
        == 0
    )
    g = KeywordModels.load(tmp_path / "g.npz")
    assert g.kind == "gmm-diag" and g.n_mix == 2
    assert (
        main(
            [
                "speech",
                "train",
                *specs,
                "--states",
                "2",
                "--covariance",
                "full",
                "--iter",
                "2",
                "--cmn",
                "causal",
                "--out",
                str(tmp_path / "f.npz"),
            ]
        )
        == 0
    )
    f = KeywordModels.load(tmp_path / "f.npz")
    assert f.kind == "full" and f.cmn == "causal"  # the file records the front end
    assert "trained with --cmn causal" in capsys.readouterr().out
    assert g.cmn == "utterance"


def test_cmn_choice_changes_the_features_trained_on(tmp_path):
    specs = make_folders(tmp_path / "data", per_word=3)
    for cmn in ("utterance", "causal"):
        assert (
            main(
                [
                    "speech",
                    "train",
                    *specs,
                    "--states",
                    "3",
                    "--iter",
                    "0",
                    "--cmn",
                    cmn,
                    "--out",
                    str(tmp_path / f"{cmn}.npz"),
                ]
            )
            == 0
        )
    a = KeywordModels.load(tmp_path / "utterance.npz").means
    b = KeywordModels.load(tmp_path / "causal.npz").means
    assert not np.allclose(a, b)
    np.testing.assert_allclose(a[:, :, 13:], b[:, :, 13:])  # only the statics are normalised


@pytest.mark.parametrize(
    "case",
    ["bad file", "short file", "missing folder", "empty folder", "one word", "same word twice", "no =", "bad out"],
)
def test_errors_are_one_clear_line(tmp_path, capsys, case):
    specs = make_folders(tmp_path / "data", per_word=2)
    out = ["--out", str(tmp_path / "m.npz")]
    rise = tmp_path / "data" / "rise"
    if case == "bad file":
        (rise / "broken.wav").write_bytes(b"RIFF\x24\0\0\0WAVEfmt ")
        args, msg = specs, "broken.wav: unreadable WAV"
    elif case == "short file":
        wavfile.write(rise / "tiny.wav", 16000, np.zeros(600, np.int16))  # 3 frames < 5 states
        args, msg = specs, "tiny.wav: 3 frames, fewer than the 5 states"
    elif case == "missing folder":
        args, msg = [*specs, "--word", f"gone={tmp_path / 'nowhere'}"], "folder not found"
    elif case == "empty folder":
        (tmp_path / "void").mkdir()
        args, msg = [*specs, "--word", f"void={tmp_path / 'void'}"], "no .wav files"
    elif case == "one word":
        args, msg = specs[:2], "at least two words"
    elif case == "same word twice":
        args, msg = [*specs, "--word", f"rise={rise}"], "repeated: \\['rise'\\]"
    elif case == "no =":
        args, msg = [*specs, "--word", "rise"], "expects WORD=DIR"
    else:
        args, msg, out = specs, "must name a .npz", ["--out", str(tmp_path / "m.bin")]
    assert main(["speech", "train", *args, *out]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("smcdp speech: error")
    assert re.search(msg, err[0]), err[0]
    assert not (tmp_path / "m.npz").exists()


def test_frames_of_a_training_file_match_the_front_end(tmp_path):
    make_folders(tmp_path / "data", per_word=2)
    from smcdp.speech.training import file_features

    f = tmp_path / "data" / "fall" / "fall_1.wav"  # float32 stereo at 22.05 kHz
    rate, data = wavfile.read(f)
    np.testing.assert_array_equal(
        file_features(f, "utterance"), FE.features(data.astype(float).mean(axis=1), rate, "utterance")
    )


def test_the_models_file_records_cmn_and_the_demo_follows_it(tmp_path):
    """A models file says which CMN it was trained with; the demo uses it and refuses another for a WAV."""
    from smcdp.cli.demo.keyword import resolve_cmn
    from smcdp.errors import InvalidMessage

    specs = make_folders(tmp_path / "data", per_word=3)
    assert (
        main(
            [
                "speech",
                "train",
                *specs,
                "--states",
                "3",
                "--iter",
                "0",
                "--cmn",
                "causal",
                "--out",
                str(tmp_path / "c.npz"),
            ]
        )
        == 0
    )
    m = KeywordModels.load(tmp_path / "c.npz")
    assert m.cmn == "causal"
    assert resolve_cmn(None, m.cmn, "c.npz", wav=True) == "causal"
    assert resolve_cmn("causal", m.cmn, "c.npz", wav=True) == "causal"
    with pytest.raises(InvalidMessage, match="trained with --cmn causal"):
        resolve_cmn("utterance", m.cmn, "c.npz", wav=True)
    assert resolve_cmn("utterance", m.cmn, "c.npz", wav=False) == "utterance"  # features: no front end runs
    assert resolve_cmn(None, None, "old.npz", wav=True) == "utterance"  # files without the record
    # the record survives a save/load round trip, is optional, and is validated
    m.save(tmp_path / "again.npz")
    assert KeywordModels.load(tmp_path / "again.npz").cmn == "causal"
    arrays = m.to_arrays()
    arrays.pop("cmn")
    assert KeywordModels.from_arrays(arrays).cmn is None
    with pytest.raises(InvalidMessage, match="cmn"):
        KeywordModels.from_arrays({**arrays, "cmn": np.array("loud")})
    with pytest.raises(InvalidMessage, match="single string"):
        KeywordModels.from_arrays({**arrays, "cmn": np.array([1, 2])})
