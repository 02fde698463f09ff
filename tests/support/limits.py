"""A wall-clock limit on one call inside a test (SIGALRM, main thread): a hang becomes a failure that names the call.
pytest-timeout's own alarm (its signal method) is saved and re-armed with what remained of it."""

from __future__ import annotations

import math
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def time_limit(seconds: int, what: str) -> Iterator[None]:
    def alarm(signum, frame):
        raise AssertionError(f"{what} took more than {seconds} s")

    outer = signal.alarm(0)  # pytest-timeout's pending alarm, if any (seconds left)
    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds if not outer else min(seconds, outer))
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
        if outer:
            signal.alarm(max(1, math.ceil(outer - (time.monotonic() - start))))
