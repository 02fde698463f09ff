from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("python_speech_features", reason="python_speech_features is not installed")
import python_speech_features as psf
from scipy.io import wavfile

from smcdp.errors import InvalidMessage
from smcdp.speech import features as F


def _signal(n=16000, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n) / 16000.0
    # A vowel-like harmonic complex with a slow amplitude envelope, plus noise.
    x = sum(np.sin(2 * np.pi * f * t) / k for k, f in enumerate((150, 300, 450, 900, 2400), 1))
    x = x * (0.3 + 0.7 * np.sin(np.pi * t / t[-1]))
    return 0.3 * x + 0.01 * rng.standard_normal(n)


def test_shape_and_frame_count():
    x = _signal(16000)
    f = F.mfcc39(x, 16000)
    assert f.shape == (F.num_frames(16000), 39) == (99, 39)
    assert np.all(np.isfinite(f))
    n98 = F.samples_for_frames(98)
    assert n98 == 15920
    assert F.mfcc39(_signal(n98), 16000).shape == (98, 39)
    assert F.mfcc39(_signal(n98 - 159), 16000).shape == (98, 39)
    assert F.mfcc39(_signal(n98 - 160), 16000).shape == (97, 39)
    assert F.num_frames(n98 + 1) == 99
    assert F.num_frames(400) == 1 and F.mfcc39(_signal(400), 16000).shape == (1, 39)


def test_matches_python_speech_features_directly():
    x = _signal(12345, seed=3)
    ref = psf.mfcc(
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
    d1 = psf.delta(ref, 2)
    d2 = psf.delta(d1, 2)
    raw = F.mfcc39(x, 16000, mean_normalise=False)
    np.testing.assert_allclose(raw, np.hstack([ref, d1, d2]), rtol=0, atol=1e-12)
    cmn = F.mfcc39(x, 16000)
    np.testing.assert_allclose(cmn[:, :13], ref - ref.mean(axis=0), rtol=0, atol=1e-12)
    np.testing.assert_allclose(cmn[:, 13:], raw[:, 13:], rtol=0, atol=0)
    np.testing.assert_allclose(cmn[:, :13].mean(axis=0), 0.0, atol=1e-10)
    # Coefficient 0 is the log frame energy, not the DCT c0.
    frames = psf.sigproc.framesig(psf.sigproc.preemphasis(x, 0.97), 400, 160, np.hamming)
    energy = np.sum(psf.sigproc.powspec(frames, 512), axis=1)
    np.testing.assert_allclose(raw[:, 0], np.log(energy), rtol=1e-12)


def test_mean_normalisation_makes_features_gain_invariant():
    x = _signal(9000, seed=5)
    np.testing.assert_allclose(F.mfcc39(0.1 * x, 16000), F.mfcc39(x, 16000), atol=1e-9)
    raw_a = F.mfcc39(0.1 * x, 16000, mean_normalise=False)
    raw_b = F.mfcc39(x, 16000, mean_normalise=False)
    assert np.max(np.abs(raw_a[:, 0] - raw_b[:, 0])) > 1.0  # without CMN log-energy moves


def test_integer_pcm_and_column_vector_accepted():
    x = _signal(4000)
    pcm = np.round(x * 20000).astype(np.int16)
    assert F.mfcc39(pcm, 16000).shape == F.mfcc39(pcm[:, None], 16000).shape == (24, 39)


@pytest.mark.parametrize(
    "signal, rate, match",
    [
        (np.zeros(16000), 8000, "sample rate"),
        (np.zeros(16000), 16000.0, "integer"),
        (np.zeros((16000, 2)), 16000, "mono"),
        (np.zeros(399), 16000, "too short"),
        (np.array([np.nan] * 1000), 16000, "NaN"),
        (np.array(["a"] * 1000), 16000, "numeric"),
        (np.zeros(F.MAX_SAMPLES + 1, dtype=np.int8), 16000, "too long"),
    ],
)
def test_signal_validation(signal, rate, match):
    with pytest.raises(InvalidMessage, match=match):
        F.mfcc39(signal, rate)


def test_wav_loader(tmp_path):
    x = _signal(8000)
    pcm = np.round(x * 20000).astype(np.int16)
    p = tmp_path / "a.wav"
    wavfile.write(p, 16000, pcm)
    y, rate = F.load_wav(p)
    assert rate == 16000 and y.dtype == np.float64
    np.testing.assert_allclose(y, pcm / 32768.0)
    np.testing.assert_allclose(F.wav_features(p), F.mfcc39(pcm, 16000), atol=1e-9)

    f32 = tmp_path / "f.wav"
    wavfile.write(f32, 16000, x.astype(np.float32))
    assert F.load_wav(f32)[0].shape == (8000,)

    stereo = tmp_path / "s.wav"
    wavfile.write(stereo, 16000, np.stack([pcm, np.zeros_like(pcm)], axis=1))
    np.testing.assert_allclose(F.load_wav(stereo)[0], pcm / 65536.0)  # channels averaged
    low = tmp_path / "l.wav"
    wavfile.write(low, 8000, pcm)
    assert F.wav_features(low).shape == (F.num_frames(16000), 39)  # resampled to 16 kHz
    short = tmp_path / "short.wav"
    wavfile.write(short, 16000, pcm[:100])
    with pytest.raises(InvalidMessage, match="shorter than one 25 ms"):
        F.load_wav(short)
    junk = tmp_path / "junk.wav"
    junk.write_bytes(b"this is not a wave file at all")
    with pytest.raises(InvalidMessage, match="not a WAV"):
        F.load_wav(junk)
    with pytest.raises(InvalidMessage, match="not found"):
        F.load_wav(tmp_path / "missing.wav")


def test_feature_file_loader(tmp_path):
    good = tmp_path / "u.npy"
    np.save(good, np.ones((5, 39)))
    assert F.load_features(good).shape == (5, 39)
    cases = {
        "wrongdim.npy": (np.ones((5, 13)), "39 columns"),
        "vector.npy": (np.ones(39), "T x d"),
        "nan.npy": (np.full((3, 39), np.nan), "NaN"),
        "empty.npy": (np.ones((0, 39)), "no frames"),
    }
    for name, (arr, match) in cases.items():
        np.save(tmp_path / name, arr)
        with pytest.raises(InvalidMessage, match=match):
            F.load_features(tmp_path / name)
    obj = tmp_path / "obj.npy"
    np.save(obj, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(InvalidMessage, match="cannot read"):
        F.load_features(obj)
    npz = tmp_path / "x.npz"
    np.savez(npz, a=np.ones((2, 39)))
    with pytest.raises(InvalidMessage, match="npz"):
        F.load_features(npz)
    with pytest.raises(InvalidMessage, match="not found"):
        F.load_features(tmp_path / "nope.npy")


def test_fixture_utterances_are_valid_features(test_utterances, fixture_dir):
    assert 10 <= len(test_utterances) <= 20
    for x, _, meta in test_utterances:
        assert x.shape == (meta["frames"], 39) and x.dtype == np.float64
        np.testing.assert_allclose(x[:, :13].mean(axis=0), 0.0, atol=1e-9)  # CMN applied
    u98 = F.load_features(fixture_dir / "utterance_98.npy")
    assert u98.shape == (98, 39)


def test_vector_quantise():
    cb = np.array([[0.0, 0.0], [10.0, 0.0], [0.0, 10.0]])
    x = np.array([[1.0, 1.0], [9.0, -1.0], [0.5, 7.0], [5.0, 0.0]])
    np.testing.assert_array_equal(F.vector_quantise(x, cb), [0, 1, 2, 0])  # tie -> lower index
    with pytest.raises(InvalidMessage, match="2 columns"):
        F.vector_quantise(np.ones((3, 3)), cb)
    with pytest.raises(InvalidMessage, match="codebook"):
        F.vector_quantise(x, np.ones(2))
    with pytest.raises(InvalidMessage, match="codebook"):
        F.vector_quantise(x, np.array([[np.nan, 0.0]]))
