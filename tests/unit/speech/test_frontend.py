"""The streaming front end gives the batch front end's frames, frame for frame, and releases them early."""

from __future__ import annotations

from math import gcd

import numpy as np
import pytest

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")
import python_speech_features as psf
from scipy.io import wavfile
from scipy.signal import resample_poly

from smcdp.errors import InvalidMessage
from smcdp.speech import features as F
from smcdp.speech import frontend as FE

RATES = (8000, 11025, 16000, 22050, 44100, 48000)


def _speechlike(n, rate, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / rate
    x = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((140, 280, 700, 1200, 2500), 1))
    return 0.2 * x * (0.2 + np.sin(np.pi * t / t[-1]) ** 2) + 0.005 * rng.standard_normal(n)


def _reference(x, rate):
    """resample_poly + python_speech_features, the libraries the front end reproduces (no CMN)."""
    if rate != 16000:
        g = gcd(rate, 16000)
        x = resample_poly(x, 16000 // g, rate // g)
    s = psf.mfcc(
        x,
        samplerate=16000,
        winlen=0.025,
        winstep=0.01,
        numcep=13,
        nfilt=26,
        nfft=512,
        lowfreq=0,
        highfreq=None,
        preemph=0.97,
        ceplifter=22,
        appendEnergy=True,
        winfunc=np.hamming,
    )
    d1 = psf.delta(s, 2)
    return s, d1, psf.delta(d1, 2)


@pytest.mark.parametrize("rate", RATES)
@pytest.mark.parametrize("cmn", FE.CMN_MODES)
def test_stream_in_10ms_hops_equals_batch(rate, cmn):
    x = _speechlike(int(0.43 * rate) + 7, rate, seed=rate)
    batch = FE.features(x, rate, cmn)
    stream = np.array(list(FE.stream_frames(FE.hops_of(x, rate), rate, cmn)))
    assert stream.shape == batch.shape == (FE.frames_for_samples(x.size, rate), 39)
    np.testing.assert_allclose(stream, batch, rtol=0, atol=1e-12)


@pytest.mark.parametrize("seed", range(6))
def test_stream_any_hop_sizes_equals_batch(seed):
    rng = np.random.default_rng(seed)
    rate = int(rng.choice(RATES))
    x = _speechlike(int(rng.integers(300, 12000)), rate, seed)
    if FE.frames_for_samples(x.size, rate) < 1 or x.size * 16000 < 400 * rate:
        x = np.concatenate([x, x, x, x])
    cuts = np.sort(rng.integers(0, x.size, size=int(rng.integers(1, 40))))
    hops = np.split(x, cuts)  # includes empty hops
    cmn = str(rng.choice(["causal", "none"]))
    stream = np.array(list(FE.stream_frames(hops, rate, cmn)))
    np.testing.assert_allclose(stream, FE.features(x, rate, cmn), rtol=0, atol=1e-12)


@pytest.mark.parametrize("rate", RATES)
def test_batch_equals_resample_poly_and_python_speech_features(rate):
    x = _speechlike(int(0.5 * rate), rate, seed=3)
    s, d1, d2 = _reference(x, rate)
    np.testing.assert_allclose(FE.features(x, rate, "none"), np.hstack([s, d1, d2]), rtol=0, atol=1e-9)
    utt = FE.features(x, rate, "utterance")
    np.testing.assert_allclose(utt, np.hstack([s - s.mean(axis=0), d1, d2]), rtol=0, atol=1e-9)


def test_causal_cmn_is_the_prefix_mean():
    x = _speechlike(9000, 16000, seed=8)
    s, d1, d2 = _reference(x, 16000)
    causal = FE.features(x, 16000, "causal")
    prefix_mean = np.cumsum(s, axis=0) / np.arange(1, s.shape[0] + 1)[:, None]
    np.testing.assert_allclose(causal[:, :13], s - prefix_mean, rtol=0, atol=1e-9)
    np.testing.assert_allclose(causal[0, :13], 0.0, atol=1e-12)  # the first frame's statics are 0
    np.testing.assert_allclose(causal[:, 13:], np.hstack([d1, d2]), rtol=0, atol=1e-9)
    # gain invariance holds for causal CMN too (a constant log-energy offset is removed from frame 0 on)
    np.testing.assert_allclose(FE.features(0.1 * x, 16000, "causal")[:, :13], causal[:, :13], atol=1e-8)


def test_frames_are_released_four_frames_after_their_window():
    """Frame t is final once 16 kHz sample 160 (t + 4) + 400 exists: Δ of Δ looks 4 frames ahead."""
    x = _speechlike(16000, 16000, seed=2)
    fe = FE.Frontend(16000, "causal")
    released = 0
    for n in range(0, x.size, 160):
        released += len(fe.push(x[n : n + 160]))
        have = n + 160
        complete = 0 if have < 400 else 1 + (have - 400) // 160  # whole windows so far
        assert released == max(0, complete - FE.LOOKAHEAD_FRAMES)
    assert released + len(fe.finish()) == FE.num_frames(x.size)


def test_utterance_cmn_releases_everything_at_the_end():
    x = _speechlike(8000, 16000)
    fe = FE.Frontend(16000, "utterance")
    assert sum(len(fe.push(h)) for h in FE.hops_of(x, 16000)) == 0
    assert len(fe.finish()) == FE.num_frames(x.size)


def test_stream_wav_equals_wav_features(tmp_path):
    x = (_speechlike(int(0.6 * 22050), 22050) * 2**15).astype(np.int16)
    stereo = np.stack([x, x // 2], axis=1)
    path = tmp_path / "s.wav"
    wavfile.write(path, 22050, stereo)
    frames = list(FE.stream_wav(path, cmn="causal"))
    assert all(f.shape == (39,) for f in frames)
    np.testing.assert_allclose(np.array(frames), F.wav_features(path, cmn="causal"), rtol=0, atol=1e-12)
    np.testing.assert_allclose(
        F.wav_features(path), FE.features((stereo / 32768.0).mean(axis=1), 22050), rtol=0, atol=1e-12
    )


def test_paced_hops_wait_for_the_audio():
    now = [0.0]
    sleeps = []

    def sleep(d):
        sleeps.append(d)
        now[0] += d

    hops = list(FE.paced(FE.hops_of(np.zeros(1600), 16000), 16000, clock=lambda: now[0], sleep=sleep))
    assert len(hops) == 10
    np.testing.assert_allclose(sleeps, [0.01] * 9)


def test_frontend_refuses_bad_input():
    with pytest.raises(InvalidMessage, match="one of"):
        FE.Frontend(16000, "sideways")
    fe = FE.Frontend(16000, "none")
    with pytest.raises(InvalidMessage, match="NaN"):
        fe.push(np.array([0.0, np.nan]))
    fe = FE.Frontend(16000, "none")
    fe.push(np.zeros(100))
    with pytest.raises(InvalidMessage, match="shorter than one 25 ms"):
        fe.finish()
