"""One front end for batch and streaming: audio at any sample rate -> 39-d MFCC frames.

:class:`Frontend` takes samples as they arrive (``push``) and returns every
frame that can no longer change; ``finish`` returns the rest.  The batch
function :func:`features` is the same object fed everything at once, so a
stream and a file give the same frames, bit for bit, whatever the hop size.

Inside, in order:

* :class:`StreamingResampler` -- to 16 kHz with exactly the filter of
  ``scipy.signal.resample_poly`` (Kaiser β = 5 FIR of 20·max(up, down) + 1
  taps, the same zero padding and trimming), evaluated per output sample as
  soon as the inputs it touches exist (look-ahead 10·max(up, down)/up input
  samples, ≈ 0.6 ms at 22.05 kHz);
* framing, pre-emphasis, Hamming window, power spectrum, mel filter bank,
  DCT, lifter and log energy exactly as ``python_speech_features.mfcc`` with
  the settings of :mod:`smcdp.speech.features` (25 ms windows every 10 ms; the
  last window zero-padded, T = 1 + ⌈(n − 400)/160⌉ frames);
* Δ and ΔΔ with python_speech_features' regression over ±2 frames and edge
  padding: frame t needs static frames up to t + 4, so it is final 40 ms
  after its window ends -- or at the end of the stream;
* cepstral mean normalisation of the 13 static coefficients (Δ and ΔΔ are
  computed before it, as in :func:`smcdp.speech.features.mfcc39`):

  - ``utterance``: minus the mean over the whole utterance.  It needs the
    last frame before it can release the first, so it cannot stream;
  - ``causal``: minus the mean of frames 0..t (the first frame's statics
    become 0) -- streams, and recognises as well (docs/speech.md);
  - ``none``.

The models file does not (yet) record which CMN its models were trained
with: the session parameter ``cmn`` of the keyword protocol (``smcdp demo
keyword --cmn``) must name the one ``smcdp speech train --cmn`` used.

For a consumer of frames (a streaming protocol), :func:`stream_wav` reads a
WAV file in 10 ms hops, like a microphone would deliver it, and yields each
39-d frame as soon as it is final; :func:`stream_frames` does the same for
samples already in memory.  Both give exactly the frames of :func:`features`.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from math import gcd

import numpy as np

from smcdp._optional import require
from smcdp.errors import InvalidMessage
from smcdp.speech.audio import read_wav
from smcdp.speech.framing import (  # noqa: F401  (re-exported: the front end's settings)
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
    frames_for_samples,
    num_frames,
)

CMN_MODES = ("utterance", "causal", "none")
_DELTA_W = np.arange(-DELTA_N, DELTA_N + 1)
_DELTA_DEN = 2 * sum(i * i for i in range(1, DELTA_N + 1))
#: frames of look-ahead before a frame is final (Δ of Δ over ±DELTA_N)
LOOKAHEAD_FRAMES = 2 * DELTA_N
_CHUNK = 256


# =============================================================================== resampling
class StreamingResampler:
    """``scipy.signal.resample_poly(x, up, down)`` to 16 kHz, computed as the input arrives."""

    def __init__(self, rate_in: int, rate_out: int = SAMPLE_RATE) -> None:
        from scipy.signal import firwin  # deferred: scipy.signal is needed only when resampling

        if not isinstance(rate_in, (int, np.integer)) or rate_in <= 0:
            raise InvalidMessage(f"sample rate must be a positive integer, got {rate_in!r}")
        g = gcd(int(rate_in), int(rate_out))
        self.up, self.down = int(rate_out) // g, int(rate_in) // g
        self.identity = self.up == self.down == 1
        self.n_in = 0
        if self.identity:
            return
        max_rate = max(self.up, self.down)
        half_len = 10 * max_rate
        h = firwin(2 * half_len + 1, 1.0 / max_rate, window=("kaiser", 5.0)) * self.up
        n_pre_pad = self.down - half_len % self.down
        self.h = np.concatenate([np.zeros(n_pre_pad), h])
        self.pre_remove = (half_len + n_pre_pad) // self.down
        self.ntaps = -(-self.h.size // self.up) + 1
        self.x = np.zeros(0)
        self.base = 0  # input index of self.x[0]
        self.k = 0  # next output index

    def _outputs(self, k_end: int) -> np.ndarray:
        if k_end <= self.k:
            return np.zeros(0)
        parts = []
        for k0 in range(self.k, k_end, 4096):
            ks = np.arange(k0, min(k_end, k0 + 4096))
            pos = (ks + self.pre_remove) * self.down
            i = (pos // self.up)[:, None] - np.arange(self.ntaps)[None, :]
            j = pos[:, None] - i * self.up
            valid = (i >= 0) & (i < self.n_in) & (j >= 0) & (j < self.h.size)
            xi = np.clip(i - self.base, 0, max(0, self.x.size - 1))
            vals = np.where(valid, self.x[xi] * self.h[np.clip(j, 0, self.h.size - 1)], 0.0)
            parts.append(vals.sum(axis=1))
        self.k = k_end
        # inputs before the first one the next output touches are no longer needed
        first = max(0, ((self.k + self.pre_remove) * self.down - self.h.size + 1) // self.up)
        if first - self.base > 65536:
            self.x = self.x[first - self.base :]
            self.base = first
        return np.concatenate(parts)

    def push(self, chunk: np.ndarray) -> np.ndarray:
        chunk = np.asarray(chunk, dtype=np.float64)
        self.n_in += chunk.size
        if self.identity:
            return chunk
        self.x = np.concatenate([self.x, chunk])
        # output k is final once every input it touches exists: (k + pre_remove)·down // up ≤ n_in − 1
        k_end = ((self.n_in - 1) * self.up) // self.down - self.pre_remove + 1 if self.n_in else 0
        return self._outputs(max(self.k, k_end))

    def finish(self) -> np.ndarray:
        if self.identity:
            return np.zeros(0)
        return self._outputs(-(-self.n_in * self.up // self.down))


# =============================================================================== MFCC
class _MFCC:
    """39-d frames from 16 kHz samples, each released once final (module docstring)."""

    def __init__(self, cmn: str) -> None:
        require("speech-features", "a WAV utterance")
        from python_speech_features import get_filterbanks  # deferred: only feature extraction needs it

        if cmn not in CMN_MODES:
            raise InvalidMessage(f"cepstral mean normalisation must be one of {CMN_MODES}, got {cmn!r}")
        self.cmn = cmn
        self.pre = np.zeros(0)  # pre-emphasised samples not yet framed out (from sample self.pre0)
        self.pre0 = 0
        self.n = 0  # 16 kHz samples so far
        self.last = None  # last raw sample (pre-emphasis)
        self.static: list[np.ndarray] = []
        self.d1: list[np.ndarray] = []
        self.out = 0  # frames released
        self.sum = np.zeros(NUMCEP)
        self.win = np.hamming(FRAME_LEN)
        self.fb = get_filterbanks(NFILT, NFFT, SAMPLE_RATE, 0, SAMPLE_RATE / 2)
        n = np.arange(NUMCEP)
        self.lift = 1 + (CEPLIFTER / 2.0) * np.sin(np.pi * n / CEPLIFTER)
        self.held: list[np.ndarray] = []

    def _statics(self, count: int) -> None:
        """Static cepstra of the next ``count`` frames (their samples exist, zero padding at the end)."""
        from scipy.fftpack import dct  # deferred: as python_speech_features does

        t0 = len(self.static)
        for c0 in range(0, count, _CHUNK):
            k = min(_CHUNK, count - c0)
            lo = (t0 + c0) * FRAME_STEP - self.pre0
            need = lo + (k - 1) * FRAME_STEP + FRAME_LEN
            sig = self.pre[lo:need]
            if sig.size < need - lo:
                sig = np.concatenate([sig, np.zeros(need - lo - sig.size)])
            idx = np.arange(FRAME_LEN)[None, :] + FRAME_STEP * np.arange(k)[:, None]
            frames = sig[idx] * self.win
            pspec = 1.0 / NFFT * np.square(np.absolute(np.fft.rfft(frames, NFFT)))
            energy = np.sum(pspec, 1)
            energy = np.where(energy == 0, np.finfo(float).eps, energy)
            feat = (pspec[:, None, :] * self.fb[None, :, :]).sum(axis=2)  # row by row: chunking-independent
            feat = np.where(feat == 0, np.finfo(float).eps, feat)
            c = dct(np.log(feat), type=2, axis=1, norm="ortho")[:, :NUMCEP] * self.lift
            c[:, 0] = np.log(energy)
            self.static.extend(c)
        drop = len(self.static) * FRAME_STEP - self.pre0
        if drop > 4 * FRAME_LEN:
            self.pre = self.pre[drop:]
            self.pre0 += drop

    @staticmethod
    def _delta(seq: list[np.ndarray], t: int, end: int) -> np.ndarray:
        rows = np.stack([seq[min(max(t + n, 0), end - 1)] for n in range(-DELTA_N, DELTA_N + 1)])
        return np.dot(_DELTA_W, rows) / _DELTA_DEN

    def _release(self, total: int | None) -> list[np.ndarray]:
        """Frames whose statics up to t + 4 exist (or all of them once ``total`` is known)."""
        out = []
        have = len(self.static)
        while True:
            t = self.out
            if total is None and t + LOOKAHEAD_FRAMES >= have:
                break
            if total is not None and t >= total:
                break
            end = total if total is not None else have + 10**9  # no edge before the end of the stream
            while len(self.d1) < min(t + DELTA_N + 1, end):
                self.d1.append(self._delta(self.static, len(self.d1), min(end, have)))
            d2 = self._delta(self.d1, t, end if total is not None else 10**9)
            s = self.static[t]
            self.sum = self.sum + s
            if self.cmn == "causal":
                s = s - self.sum / (t + 1)
            out.append(np.concatenate([s, self.d1[t], d2]))
            self.out += 1
        return out

    def push(self, x16: np.ndarray) -> list[np.ndarray]:
        x16 = np.asarray(x16, dtype=np.float64)
        if x16.size:
            prev = x16[0] if self.last is None else self.last
            pre = np.empty_like(x16)
            pre[0] = x16[0] if self.last is None else x16[0] - PREEMPH * prev
            pre[1:] = x16[1:] - PREEMPH * x16[:-1]
            self.last = x16[-1]
            self.pre = np.concatenate([self.pre, pre])
            self.n += x16.size
        complete = 0 if self.n < FRAME_LEN else 1 + (self.n - FRAME_LEN) // FRAME_STEP
        if complete > len(self.static):
            self._statics(complete - len(self.static))
        frames = self._release(None)
        if self.cmn == "utterance":  # nothing is final before the end
            self.held.extend(frames)
            return []
        return frames

    def finish(self) -> list[np.ndarray]:
        total = num_frames(self.n)
        if self.n < MIN_SAMPLES:
            raise InvalidMessage(
                f"{self.n / SAMPLE_RATE * 1000:.1f} ms of audio, shorter than one "
                f"{WINLEN * 1000:.0f} ms analysis window"
            )
        if total > len(self.static):
            self._statics(total - len(self.static))
        frames = self._release(total)
        if self.cmn == "utterance":
            allf = np.array(self.held + frames)
            mean = np.array(self.static).mean(axis=0)
            allf[:, :NUMCEP] = np.array(self.static) - mean
            return list(allf)
        return frames


class Frontend:
    """Samples at ``rate`` (mono floats) in, 39-d frames out as soon as they are final."""

    def __init__(self, rate: int, cmn: str = "causal") -> None:
        self.rate = int(rate)
        self.resampler = StreamingResampler(self.rate)
        self.mfcc = _MFCC(cmn)
        self.frames = 0

    def push(self, samples) -> np.ndarray:
        x = np.asarray(samples, dtype=np.float64)
        if x.ndim != 1:
            raise InvalidMessage(f"push mono samples (1-D), got shape {x.shape}")
        if not np.all(np.isfinite(x)):
            raise InvalidMessage("audio contains NaN or infinite samples")
        out = self.mfcc.push(self.resampler.push(x))
        if self.mfcc.n > MAX_SAMPLES:
            raise InvalidMessage(f"audio longer than {MAX_SAMPLES // SAMPLE_RATE} s")
        self.frames += len(out)
        return np.array(out).reshape(len(out), N_FEATURES)

    def finish(self) -> np.ndarray:
        out = self.mfcc.push(self.resampler.finish()) + self.mfcc.finish()
        self.frames += len(out)
        return np.array(out).reshape(len(out), N_FEATURES)


def features(samples, rate: int = SAMPLE_RATE, cmn: str = "utterance") -> np.ndarray:
    """The (T, 39) frames of a whole signal: :class:`Frontend` fed everything at once."""
    fe = Frontend(rate, cmn)
    first = fe.push(samples)
    rest = fe.finish()
    return np.concatenate([first, rest]) if len(first) else rest


def stream_frames(hops: Iterable, rate: int, cmn: str = "causal") -> Iterator[np.ndarray]:
    """Each 39-d frame (a 1-D float64 array) as soon as it is final, from an iterable of sample hops.

    ``hops``: 1-D float sample chunks at ``rate`` Hz, e.g. 10 ms of audio each.  With
    ``cmn="utterance"`` nothing is final before the end of the audio (every frame comes after the
    last hop); ``causal`` and ``none`` stream with a delay of 4 frames (40 ms) plus the window.
    """
    fe = Frontend(rate, cmn)
    for hop in hops:
        yield from fe.push(hop)
    yield from fe.finish()


def hops_of(samples, rate: int, hop_seconds: float = WINSTEP) -> Iterator[np.ndarray]:
    """``samples`` cut into consecutive hops of ``hop_seconds`` (the last one may be shorter)."""
    x = np.asarray(samples, dtype=np.float64)
    step = max(1, int(round(int(rate) * hop_seconds)))
    for s in range(0, x.size, step):
        yield x[s : s + step]


def paced(hops: Iterable, rate: int, clock=time.monotonic, sleep=time.sleep) -> Iterator[np.ndarray]:
    """``hops`` handed out no faster than real time: hop k not before the first hop's time plus the
    duration of the audio before it (a microphone's pace, for measuring streaming latency)."""
    t0 = None
    done = 0
    for hop in hops:
        if t0 is None:
            t0 = clock()
        else:
            delay = t0 + done / rate - clock()
            if delay > 0:
                sleep(delay)
        done += len(hop)
        yield hop


def stream_wav(path, cmn: str = "causal", hop_seconds: float = WINSTEP, realtime: bool = False) -> Iterator[np.ndarray]:
    """The frames of a WAV file (any format :func:`smcdp.speech.audio.read_wav` accepts), read in hops
    of ``hop_seconds`` (default 10 ms) and yielded one by one as soon as each is final; with
    ``realtime`` the hops arrive at the pace of the audio, as from a microphone."""
    a = read_wav(path)
    hops = hops_of(a.samples, a.rate, hop_seconds)
    yield from stream_frames(paced(hops, a.rate) if realtime else hops, a.rate, cmn)


def load_audio(path) -> np.ndarray:
    """A WAV file as float64 mono samples at 16 kHz (the front end's resampler, batch)."""
    a = read_wav(path)
    rs = StreamingResampler(a.rate)
    return np.concatenate([rs.push(a.samples), rs.finish()])
