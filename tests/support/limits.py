"""Limits on one call inside a test, so that a hang or a runaway allocation becomes a failure naming the call.

``time_limit``: a wall-clock limit (SIGALRM, main thread); pytest-timeout's own alarm (its signal method) is saved
and re-armed with what remained of it.  ``memory_cap``: the address space the process may grow by
(RLIMIT_AS), so an allocation beyond it is a MemoryError rather than a swapping machine."""

from __future__ import annotations

import math
import resource
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


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


def _vm_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmSize:"):
            return int(line.split()[1]) * 1024
    return 0


@contextmanager
def memory_cap(margin: int) -> Iterator[None]:
    """Let the process map at most ``margin`` bytes beyond what it has mapped now (within the hard limit)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    cap = _vm_bytes() + margin
    if hard != resource.RLIM_INFINITY:
        cap = min(cap, hard)
    resource.setrlimit(resource.RLIMIT_AS, (cap, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
