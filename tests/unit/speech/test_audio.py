"""The WAV reader: every rate, channel count and sample format it accepts, and every bad file it refuses."""

from __future__ import annotations

import subprocess
import sys
import wave
from math import gcd

import numpy as np
import pytest
from scipy.io import wavfile
from scipy.signal import resample_poly

from smcdp.errors import InvalidMessage
from smcdp.speech import audio as A
from smcdp.speech import frontend as FE
from tests.support.paths import REPO

MODELS = REPO / "tests" / "data" / "keyword" / "models.npz"


def _tone(n, rate, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    return 0.5 * np.sin(2 * np.pi * 440 * t) + 0.05 * rng.standard_normal(n)


def _write_int24(path, rate, x):
    """24-bit PCM through the standard library (scipy cannot write it)."""
    x2 = x if x.ndim == 2 else x[:, None]
    q = np.clip(np.round(x2 * 2**23), -(2**23), 2**23 - 1).astype(np.int32)
    raw = q.astype("<i4").view(np.uint8).reshape(-1, 4)[:, :3].tobytes()
    with wave.open(str(path), "wb") as w:
        w.setnchannels(x2.shape[1])
        w.setsampwidth(3)
        w.setframerate(rate)
        w.writeframes(raw)
    return q / 2**23


def _write(path, rate, x, fmt):
    """Write float samples ``x`` (n,) or (n, ch) in ``fmt``; returns what a perfect reader gives back."""
    if fmt == "int24":
        return _write_int24(path, rate, x)
    if fmt == "uint8":
        q = np.clip(np.round(x * 128 + 128), 0, 255).astype(np.uint8)
        wavfile.write(path, rate, q)
        return (q.astype(float) - 128) / 128
    if fmt in ("int16", "int32"):
        bits = 16 if fmt == "int16" else 32
        q = np.clip(np.round(x * 2.0 ** (bits - 1)), -(2.0 ** (bits - 1)), 2.0 ** (bits - 1) - 1).astype(fmt)
        wavfile.write(path, rate, q)
        return q / 2.0 ** (bits - 1)
    arr = x.astype(fmt)
    wavfile.write(path, rate, arr)
    return arr.astype(float)


FORMATS = ("uint8", "int16", "int24", "int32", "float32", "float64")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("channels", (1, 2))
@pytest.mark.parametrize("rate", (8000, 16000, 44100))
def test_read_wav_formats_rates_channels(tmp_path, fmt, channels, rate):
    n = int(0.1 * rate)
    x = _tone(n, rate)
    if channels == 2:
        x = np.stack([x, 0.5 * _tone(n, rate, seed=1)], axis=1)
    path = tmp_path / f"{fmt}.wav"
    expected = _write(path, rate, x, fmt)
    a = A.read_wav(path)
    assert a.rate == rate and a.samples.dtype == np.float64 and a.samples.ndim == 1
    want = expected.mean(axis=1) if expected.ndim == 2 else expected
    np.testing.assert_allclose(a.samples, want, rtol=0, atol=1e-12)  # the exact scaled samples, downmixed
    assert a.frames == FE.num_frames(int(np.ceil(n * 16000 / rate)))


@pytest.mark.parametrize("rate", (8000, 22050, 48000))
def test_load_audio_resamples_like_resample_poly(tmp_path, rate):
    x = _tone(int(0.2 * rate), rate).astype(np.float32)
    path = tmp_path / "a.wav"
    wavfile.write(path, rate, x)
    g = gcd(rate, 16000)
    np.testing.assert_allclose(
        FE.load_audio(path), resample_poly(x.astype(float), 16000 // g, rate // g), rtol=0, atol=1e-12
    )


def test_load_audio_at_16k_is_the_samples(tmp_path):
    x = (_tone(4000, 16000) * 3e4).astype(np.int16)
    path = tmp_path / "a.wav"
    wavfile.write(path, 16000, x)
    np.testing.assert_array_equal(FE.load_audio(path), x / 32768.0)


def _bad_files(d):
    """(name, path, message regex) for every kind of bad audio the reader must refuse."""
    out = []
    p = d / "empty.wav"
    p.write_bytes(b"")
    out.append(("empty", p, "the file is empty"))
    p = d / "text.wav"
    p.write_bytes(b"this is not a wave file at all")
    out.append(("not a WAV", p, "not a WAV file"))
    p = d / "truncated.wav"
    p.write_bytes(b"RIFF\x24\0\0\0WAVEfmt ")
    out.append(("truncated header", p, "unreadable WAV"))
    p = d / "nosamples.wav"
    wavfile.write(p, 16000, np.zeros(0, dtype=np.int16))
    out.append(("no samples", p, "holds no samples"))
    p = d / "short.wav"
    wavfile.write(p, 16000, np.zeros(399, dtype=np.int16))  # one sample short of a 25 ms window
    out.append(("too short at 16 kHz", p, "shorter than one 25 ms analysis window"))
    p = d / "short44.wav"
    wavfile.write(p, 44100, np.zeros(1000, dtype=np.float32))  # 22.7 ms
    out.append(("too short at 44.1 kHz", p, "shorter than one 25 ms analysis window"))
    for name, val in (("nan", np.nan), ("inf", np.inf), ("-inf", -np.inf)):
        x = _tone(1600, 16000).astype(np.float32)
        x[700] = val
        p = d / f"{name}.wav"
        wavfile.write(p, 16000, x)
        out.append((name, p, "NaN or infinite"))
    p = d / "rate.wav"
    wavfile.write(p, 1000, np.zeros(100, dtype=np.int16))
    out.append(("rate 1 kHz", p, "sample rate 1000 Hz outside"))
    out.append(("missing", d / "missing.wav", "not found"))
    out.append(("a folder", d, "is a directory"))
    return out


def test_every_bad_file_is_refused_with_its_reason(tmp_path):
    cases = _bad_files(tmp_path)
    assert len(cases) == 12
    for name, path, msg in cases:
        with pytest.raises(InvalidMessage, match=msg):
            A.read_wav(path)
        assert A.is_wav(path) == (name not in ("empty", "not a WAV", "missing", "a folder"))


def test_ok_at_exactly_one_window(tmp_path):
    p = tmp_path / "one.wav"
    wavfile.write(p, 16000, (_tone(400, 16000) * 1e4).astype(np.int16))
    assert A.read_wav(p).frames == 1
    assert FE.features(A.read_wav(p).samples, 16000).shape == (1, 39)


@pytest.mark.slow  # runs the smcdp command (not in make test-quick)
@pytest.mark.parametrize("case", ["empty", "not a WAV", "too short at 16 kHz", "nan"])
def test_demo_keyword_wav_bad_audio_is_one_readable_line(tmp_path, case):
    path = {name: p for name, p, _ in _bad_files(tmp_path)}[case]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "smcdp",
            "demo",
            "keyword",
            "--wav",
            str(path),
            "--models",
            str(MODELS),
            "--key-bits",
            "512",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 2
    lines = [ln for ln in res.stderr.splitlines() if ln.strip() and "warning" not in ln.lower()]
    assert len(lines) == 1, res.stderr
    assert "Traceback" not in res.stderr and str(path.name) in lines[0]
    assert lines[0].startswith("smcdp demo: error")


@pytest.mark.slow  # runs the smcdp command (not in make test-quick)
def test_demo_keyword_wav_refuses_a_feature_file(tmp_path):
    npy = tmp_path / "features.npy"
    np.save(npy, np.zeros((10, 39)))
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "smcdp",
            "demo",
            "keyword",
            "--wav",
            str(npy),
            "--models",
            str(MODELS),
            "--key-bits",
            "512",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "not a WAV file" in res.stderr and "use --utterance" in res.stderr


def test_a_data_chunk_declaring_more_than_the_file_holds_is_read_as_what_is_there(tmp_path):
    """scipy allocates what a WAV's data chunk declares before reading: a 32 kB file declaring 4 GiB of samples asked
    for 4 GiB (a MemoryError when memory was short; found by tests/unit/test_file_fuzz.py).  The declared size is cut
    to the bytes there (a streamed WAV whose writer never filled it in still reads), and nothing large is allocated."""
    import io

    from scipy.io import wavfile

    from smcdp.speech.audio import _within_file, read_wav

    p = tmp_path / "u.wav"
    wavfile.write(p, 16000, (np.sin(np.arange(16000) / 10) * 3000).astype(np.int16))
    assert _within_file(str(p)) == str(p)  # a sound file is read as it is
    raw = bytearray(p.read_bytes())
    at = raw.find(b"data")
    raw[at + 4 : at + 8] = (0xFFFFFFF0).to_bytes(4, "little")
    (tmp_path / "h.wav").write_bytes(raw)
    fixed = _within_file(str(tmp_path / "h.wav"))
    assert isinstance(fixed, io.BytesIO)
    assert int.from_bytes(fixed.getvalue()[at + 4 : at + 8], "little") == len(raw) - at - 8 == 32000
    np.testing.assert_array_equal(read_wav(tmp_path / "h.wav").samples, read_wav(p).samples)
