"""Audio in: any WAV file to samples, with an error that says what is wrong.

:func:`read_wav` accepts what a user is likely to have: any sample rate from 4
to 192 kHz, mono or several channels (averaged), 8-bit unsigned, 16-, 24- or
32-bit integer and 32- or 64-bit float PCM.  It refuses, naming the file and
the reason: a missing or empty file, a file that is not a WAV (no RIFF/WAVE
header), a truncated or unreadable one, no samples, NaN or infinite samples,
less than one 25 ms analysis window, more than 10 minutes.

Why ``scipy.io.wavfile`` and not the standard library's ``wave``: ``wave``
reads integer PCM only (no IEEE-float WAVs, format 3, which many tools write),
while scipy -- already a dependency -- reads integer, 24-bit and float PCM
including WAVE_FORMAT_EXTENSIBLE headers.  The front end
(:mod:`smcdp.speech.frontend`) turns these samples into frames, resampling to
16 kHz itself (:func:`smcdp.speech.frontend.load_audio`).
"""

from __future__ import annotations

import io
import os
from dataclasses import dataclass

import numpy as np

from smcdp.errors import InvalidMessage, local_failure
from smcdp.speech.framing import MAX_SAMPLES, MIN_SAMPLES, SAMPLE_RATE, WINLEN, frames_for_samples

MIN_RATE, MAX_RATE = 4000, 192000
WAV_MAGIC = (b"RIFF", b"RIFX", b"RF64")


def is_wav_header(head: bytes) -> bool:
    """True if ``head`` (a file's first 12 bytes) starts like a WAV (RIFF/RIFX/RF64 … WAVE)."""
    return head[:4] in WAV_MAGIC and head[8:12] == b"WAVE"


def is_wav(path: str | os.PathLike) -> bool:
    """True if the file starts like a WAV (RIFF/RIFX/RF64 … WAVE)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return is_wav_header(head)


@dataclass(frozen=True)
class Audio:
    """Mono samples (float64, nominally in [−1, 1]) at ``rate`` Hz."""

    samples: np.ndarray
    rate: int
    path: str = ""

    @property
    def seconds(self) -> float:
        return self.samples.size / self.rate

    @property
    def frames(self) -> int:
        """The number of 39-d frames this audio gives."""
        return frames_for_samples(self.samples.size, self.rate)


#: a WAV whose data chunk declares more than the file holds is read from memory, up to this size
_MAX_OVERRUN_FILE = 256 << 20


def _within_file(p: str) -> str | io.BytesIO:
    """``p``, or its bytes with the data chunk's declared size cut to what the file holds: scipy allocates what the
    chunk declares before reading (a 2 kB file declaring 4 GiB of samples asked for 4 GiB; found by
    tests/unit/test_file_fuzz.py), while a streamed WAV whose writer never filled the size in is still read."""
    size = os.path.getsize(p)
    with open(p, "rb") as f:
        pos = 12
        while pos + 8 <= size:
            f.seek(pos)
            head = f.read(8)
            n = int.from_bytes(head[4:8], "little")
            if head[:4] == b"data":
                have = size - pos - 8
                if n <= have:
                    return p
                if size > _MAX_OVERRUN_FILE:
                    raise InvalidMessage(f"{p}: its data chunk declares {n} bytes, the file holds {have}")
                f.seek(0)
                raw = bytearray(f.read())
                raw[pos + 4 : pos + 8] = have.to_bytes(4, "little")
                return io.BytesIO(bytes(raw))
            pos += 8 + n + (n & 1)
    return p


def read_wav(path: str | os.PathLike) -> Audio:
    """A WAV file as mono float samples at its own rate (see the module docstring for what is accepted)."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as f:
            head = f.read(12)
    except FileNotFoundError:
        raise InvalidMessage(f"audio file not found: {p}") from None
    except IsADirectoryError:
        raise InvalidMessage(f"{p}: is a directory, not a WAV file") from None
    except OSError as exc:
        if local_failure(exc):
            raise
        raise InvalidMessage(f"{p}: cannot read: {exc}") from None
    if not head:
        raise InvalidMessage(f"{p}: the file is empty")
    if not is_wav_header(head):
        raise InvalidMessage(f"{p}: not a WAV file (no RIFF/WAVE header)")
    try:
        from scipy.io import wavfile  # lazily: scipy's import is a party's start-up cost

        rate, data = wavfile.read(_within_file(p))
    except Exception as exc:  # scipy raises several unrelated types for a malformed file (ValueError,
        # EOFError, struct.error; UnboundLocalError for a RIFF/WAVE header without a fmt chunk)
        if local_failure(exc):
            raise
        raise InvalidMessage(f"{p}: unreadable WAV ({type(exc).__name__}: {exc})") from None
    if data.size == 0:
        raise InvalidMessage(f"{p}: the WAV holds no samples")
    if data.dtype == np.int16:
        x = data / 32768.0
    elif data.dtype == np.int32:  # 32-bit PCM, and 24-bit (scipy left-justifies it)
        x = data / 2147483648.0
    elif data.dtype == np.uint8:
        x = (data.astype(np.float64) - 128.0) / 128.0
    elif data.dtype.kind == "f":
        x = data.astype(np.float64)
        if not np.all(np.isfinite(x)):
            raise InvalidMessage(f"{p}: the WAV contains NaN or infinite samples")
    else:
        raise InvalidMessage(f"{p}: unsupported sample type {data.dtype}")
    if x.ndim == 2:
        x = x.mean(axis=1)  # downmix
    if not MIN_RATE <= rate <= MAX_RATE:
        raise InvalidMessage(f"{p}: sample rate {rate} Hz outside {MIN_RATE // 1000}–{MAX_RATE // 1000} kHz")
    audio = Audio(np.ascontiguousarray(x, dtype=np.float64), int(rate), p)
    n16 = -(-x.shape[0] * SAMPLE_RATE // int(rate))
    if n16 < MIN_SAMPLES:
        raise InvalidMessage(
            f"{p}: {audio.seconds * 1000:.1f} ms of audio, shorter than one {WINLEN * 1000:.0f} ms analysis window"
        )
    if n16 > MAX_SAMPLES:
        raise InvalidMessage(
            f"{p}: {audio.seconds:.0f} s of audio, longer than the limit of {MAX_SAMPLES // SAMPLE_RATE} s"
        )
    return audio
