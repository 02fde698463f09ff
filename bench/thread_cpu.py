"""Thread CPU of wrapped steps, summed over every thread that runs them: the profiles of a group-key session in one
process (``aggregate_group_profile.py``, ``group_key_profile.py``) wrap a protocol's steps with :func:`timed`."""

from __future__ import annotations

import collections
import threading
import time
from collections.abc import Callable
from typing import Any

CPU: collections.defaultdict[str, float] = collections.defaultdict(float)
CALLS: collections.Counter[str] = collections.Counter()
_LOCK = threading.Lock()


def timed(f: Callable[..., Any], label: str) -> Callable[..., Any]:
    """``f``, adding the calling thread's CPU time of each call to ``CPU[label]``."""

    def g(*a: Any, **k: Any) -> Any:
        t = time.thread_time()
        try:
            return f(*a, **k)
        finally:
            with _LOCK:
                CPU[label] += time.thread_time() - t
                CALLS[label] += 1

    return g


def reset() -> None:
    CPU.clear()
    CALLS.clear()


def report(width: int = 40) -> None:
    """Every step, the most expensive first: calls and CPU seconds."""
    for label, v in sorted(CPU.items(), key=lambda x: -x[1]):
        print(f"  {label:{width}s} {CALLS[label]:5d} calls {v:7.2f} s")
