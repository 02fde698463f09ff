"""39-dimensional MFCC features for keyword recognition.

The front end follows the usual speech-recognition recipe (and the setting of
seed 003, §4.2.1): 16 kHz mono audio, 25 ms Hamming windows every 10 ms,
13 cepstra plus first (Δ) and second (ΔΔ) differences, 39 numbers per frame.
The cepstra are ``python_speech_features``' (computed frame by frame by the
streaming front end, :mod:`smcdp.speech.frontend`, which equals it to 1e-12)
with its defaults except the window function:

* 26 mel filters from 0 Hz to 8 kHz, 512-point FFT, pre-emphasis 0.97,
  cepstral lifter 22, Hamming window;
* coefficient 0 is the **log frame energy** (``appendEnergy=True``), not the
  zeroth DCT coefficient;
* Δ and ΔΔ use the regression formula over ±2 frames (``delta(feat, 2)``; ΔΔ
  is Δ applied to Δ).

Column layout: ``[logE, c1..c12, ΔlogE, Δc1..Δc12, ΔΔlogE, ΔΔc1..ΔΔc12]``.

Per-utterance mean normalisation (cepstral mean normalisation, CMN) of the 13
static coefficients is on by default.  It removes a constant channel/gain
offset -- in particular it makes the features invariant to the amplitude
scaling of the waveform, which would otherwise shift log-energy -- and is what
the models in ``tests/data/keyword`` were trained with.  Δ and ΔΔ are computed
from the static coefficients before normalisation; a constant offset does not
change them, so normalising them too would only remove their (near zero) mean.
Models and utterances must use the same setting.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes
from smcdp.errors import InvalidMessage, local_failure, naming_file
from smcdp.speech.audio import read_wav
from smcdp.speech.frontend import (
    CEPLIFTER,
    DELTA_N,
    FRAME_LEN,
    FRAME_STEP,
    MAX_SAMPLES,
    MIN_SAMPLES,
    N_FEATURES,
    NFFT,
    NFILT,
    NUMCEP,
    PREEMPH,
    SAMPLE_RATE,
    WINLEN,
    WINSTEP,
    features,
    num_frames,
)

__all__ = [
    "CEPLIFTER",
    "DELTA_N",
    "FRAME_LEN",
    "FRAME_STEP",
    "MAX_SAMPLES",
    "MIN_SAMPLES",
    "NFFT",
    "NFILT",
    "NUMCEP",
    "N_FEATURES",
    "PREEMPH",
    "SAMPLE_RATE",
    "WINLEN",
    "WINSTEP",
    "load_features",
    "load_wav",
    "mfcc39",
    "num_frames",
    "samples_for_frames",
    "validate_features",
    "vector_quantise",
    "wav_features",
]


def samples_for_frames(n_frames: int) -> int:
    """Signal length (samples) that ``n_frames`` windows cover exactly, with no zero padding.

    ``400 + (n_frames - 1) * 160``.  (Shorter signals down to 159 samples less
    still give ``n_frames`` frames, the last one zero padded.)  For the
    benchmark utterance of seed 003 (98 frames) this is 15 920 samples,
    0.995 s: 98 hops of 10 ms (0.98 s) plus the tail of the last window.
    """
    if not isinstance(n_frames, (int, np.integer)) or n_frames < 1:
        raise InvalidMessage(f"n_frames must be a positive integer, got {n_frames!r}")
    return FRAME_LEN + (int(n_frames) - 1) * FRAME_STEP


def _as_signal(signal: Any, samplerate: int) -> np.ndarray:
    if not isinstance(samplerate, (int, np.integer)) or isinstance(samplerate, bool):
        raise InvalidMessage(f"sample rate must be an integer, got {samplerate!r}")
    if int(samplerate) != SAMPLE_RATE:
        raise InvalidMessage(f"sample rate must be {SAMPLE_RATE} Hz, got {samplerate} Hz (resample first)")
    x = np.asarray(signal)
    if x.ndim == 2 and x.shape[1] == 1:
        x = x[:, 0]
    if x.ndim != 1:
        raise InvalidMessage(f"signal must be mono (1-D), got shape {x.shape}")
    if x.dtype.kind not in "iuf":
        raise InvalidMessage(f"signal must be numeric, got dtype {x.dtype}")
    if x.size < MIN_SAMPLES:
        raise InvalidMessage(f"signal too short: {x.size} samples, need at least {MIN_SAMPLES} (one 25 ms window)")
    if x.size > MAX_SAMPLES:
        raise InvalidMessage(f"signal too long: {x.size} samples, limit {MAX_SAMPLES}")
    x = x.astype(np.float64)
    if not np.all(np.isfinite(x)):
        raise InvalidMessage("signal contains NaN or infinite samples")
    return x


def mfcc39(signal: Any, samplerate: int = SAMPLE_RATE, *, mean_normalise: bool = True) -> np.ndarray:
    """Return the (T, 39) feature matrix of a 16 kHz mono signal.

    ``signal`` may be integer PCM or float samples; the scale does not matter
    when ``mean_normalise`` is true (see the module docstring).  The frames are
    those of :func:`smcdp.speech.frontend.features` (the streaming front end fed
    everything at once), which equal python_speech_features' to 1e-12.
    """
    x = _as_signal(signal, samplerate)
    return features(x, SAMPLE_RATE, "utterance" if mean_normalise else "none")


def load_wav(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """Read a WAV file and return ``(mono samples as float64 in [-1, 1], sample rate)``.

    Any rate, several channels (averaged), 8-bit to 32-bit integer or float
    PCM; a clear error for anything else (:func:`smcdp.speech.audio.read_wav`).
    """
    a = read_wav(path)
    return a.samples, a.rate


def wav_features(path: str | os.PathLike, *, mean_normalise: bool = True, cmn: str | None = None) -> np.ndarray:
    """(T, 39) features of a WAV file at any rate (resampled to 16 kHz by the front end).

    ``cmn`` (``utterance``, ``causal`` or ``none``) overrides ``mean_normalise``.
    """
    a = read_wav(path)
    X = features(a.samples, a.rate, cmn or ("utterance" if mean_normalise else "none"))
    if not np.all(np.isfinite(X)):  # a float WAV whose samples lie far outside [-1, 1] (1e300 gave NaN frames)
        raise InvalidMessage(f"{path}: the audio gives non-finite features (samples out of any audio range)")
    return X


def validate_features(X: Any, n_features: int | None = N_FEATURES, *, max_frames: int = 100_000) -> np.ndarray:
    """Check a feature matrix (T × d, finite floats, T ≥ 1) and return it as float64."""
    try:
        arr = np.asarray(X)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise InvalidMessage(f"features are not an array: {exc}") from exc
    if arr.dtype.kind not in "iuf":
        raise InvalidMessage(f"features must be numeric, got dtype {arr.dtype}")
    if arr.ndim != 2:
        raise InvalidMessage(f"features must be a T x d matrix, got shape {arr.shape}")
    if arr.shape[0] < 1:
        raise InvalidMessage("features have no frames")
    if arr.shape[0] > max_frames:
        raise InvalidMessage(f"too many frames: {arr.shape[0]} > {max_frames}")
    if n_features is not None and arr.shape[1] != n_features:
        raise InvalidMessage(f"features must have {n_features} columns, got {arr.shape[1]}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise InvalidMessage("features contain NaN or infinite values")
    return arr


def load_features(path: str | os.PathLike, n_features: int | None = N_FEATURES) -> np.ndarray:
    """Load a ``.npy`` feature matrix (T × d) safely (``allow_pickle=False``)."""
    try:
        check_array_sizes(path)
        with NUMPY_HEADERS:
            arr = np.load(os.fspath(path), allow_pickle=False)
    except FileNotFoundError as exc:
        raise InvalidMessage(f"feature file not found: {path}") from exc
    except ARRAY_ERRORS as exc:
        if local_failure(exc):
            raise
        raise InvalidMessage(f"cannot read feature file {path}: {exc}") from exc
    if not isinstance(arr, np.ndarray):
        arr.close()
        raise InvalidMessage(f"{path}: expected a .npy array, got an .npz archive")
    with naming_file(path):
        return validate_features(arr, n_features)


def vector_quantise(X: Any, codebook: Any) -> np.ndarray:
    """Index of the nearest codeword (Euclidean) for each frame: (T, d), (M, d) → (T,) int64.

    Turns feature matrices into the symbol sequences that discrete-emission
    HMMs (``emissionprob``) consume; ties go to the lower index.
    """
    cb = np.asarray(codebook)
    if cb.ndim != 2 or cb.shape[0] < 1 or cb.dtype.kind not in "iuf":
        raise InvalidMessage(f"codebook must be a non-empty M x d real matrix, got {cb.dtype} {cb.shape}")
    cb = cb.astype(np.float64)
    if not np.all(np.isfinite(cb)):
        raise InvalidMessage("codebook contains NaN or infinite values")
    x = validate_features(X, cb.shape[1])
    d2 = ((x[:, None, :] - cb[None, :, :]) ** 2).sum(axis=2)
    return np.argmin(d2, axis=1).astype(np.int64)
