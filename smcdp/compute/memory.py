"""Peak resident memory of this process (Linux ``VmHWM``), resettable per session.

A party reports its peak RSS in each session record.  :func:`reset_peak_rss` writes "5" to
``/proc/self/clear_refs``, which resets the kernel's high-water mark to the current RSS, so the peak read
by :func:`peak_rss` at the end belongs to this session (scope ``"since-reset"``; sessions that run at the
same time share one process and so one peak).  Where that is not possible the fallback is
``getrusage``'s lifetime maximum (scope ``"process"``).
"""

from __future__ import annotations

import resource
import sys


def _vmhwm() -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's high-water mark to its current RSS; False where the OS does not allow it."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss(was_reset: bool = True) -> tuple[int, str]:
    """(peak resident bytes, scope): ``"since-reset"`` after a successful reset, else ``"process"``."""
    hwm = _vmhwm()
    if hwm is not None:
        return hwm, "since-reset" if was_reset else "process"
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(maxrss if sys.platform == "darwin" else maxrss * 1024), "process"
