"""The analysis settings of the MFCC front end and its framing rule (shared by the WAV reader and the
front end; no dependencies beyond the standard library)."""

from __future__ import annotations

from math import gcd

# The analysis of seed 003 §4.2.1 (docs/speech.md): 16 kHz, 25 ms Hamming windows every 10 ms, 26 mel
# filters, 512-point FFT, pre-emphasis 0.97, lifter 22, 13 cepstra with log energy, Δ and ΔΔ over ±2.
SAMPLE_RATE = 16000
WINLEN = 0.025
WINSTEP = 0.01
NUMCEP = 13
NFILT = 26
NFFT = 512
PREEMPH = 0.97
CEPLIFTER = 22
DELTA_N = 2
N_FEATURES = 3 * NUMCEP  # 39
FRAME_LEN = int(round(WINLEN * SAMPLE_RATE))  # 400 samples
FRAME_STEP = int(round(WINSTEP * SAMPLE_RATE))  # 160 samples
#: Shortest and longest signal accepted (16 kHz samples): one window is the minimum that yields a
#: frame of real data; the maximum (10 minutes) is a sanity bound against accidental huge inputs.
MIN_SAMPLES = FRAME_LEN
MAX_SAMPLES = 600 * SAMPLE_RATE


def num_frames(n_samples: int) -> int:
    """Frames of ``n_samples`` 16 kHz samples: python_speech_features' framing rule (the last partial
    window zero-padded), ``1 + ceil((n − 400) / 160)`` for ``n > 400``, else 1."""
    if n_samples <= FRAME_LEN:
        return 1
    return 1 + -(-(n_samples - FRAME_LEN) // FRAME_STEP)


def frames_for_samples(n_samples: int, rate: int) -> int:
    """How many frames ``n_samples`` at ``rate`` give (after resampling to 16 kHz)."""
    g = gcd(int(rate), SAMPLE_RATE)
    up, down = SAMPLE_RATE // g, int(rate) // g
    return num_frames(-(-int(n_samples) * up // down))
