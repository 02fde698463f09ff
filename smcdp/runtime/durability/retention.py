"""How long what an ended session leaves on disk stays there.

A session that fails *resumably* keeps its checkpoint -- randomness root and journal --
so that ``smcdp session resume`` can continue it (docs/fault-tolerance.md).  Nothing
bounded how long: a peer that made sessions fail resumably (an ``Abort`` with
UNAVAILABLE) left their journals on disk for ever (1.5 GB when one peer tried).  Now a
checkpoint of a session that no longer runs here is deleted ``limits.failed_retention_seconds``
after the session failed (``failed_epoch`` in its checkpoint; the checkpoint file's
modification time for one written before that field existed, or left in a live state by a
restore that did not happen).  The party sweeps periodically and records each deletion
in its audit trail.

Only the checkpoint's public interface is used (:class:`Checkpoint.load`, ``meta``,
``remove``); a checkpoint that cannot be read is left alone (damaged files are the
checkpoint's own business).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from smcdp.runtime.durability.checkpoint import META, SUFFIX, Checkpoint, CheckpointError
from smcdp.states import SessionState

#: how often the party sweeps, at most (and at least every quarter of the retention)
SWEEP_PERIOD = 60.0


@dataclass(frozen=True)
class Deleted:
    """A checkpoint the sweep removed."""

    session_id: str
    state: str  # "failed" (resumable or not), or a live state nobody continued
    resumable: bool
    ended_seconds_ago: float
    bytes: int  # the checkpoint directory's size (journal, root key, metadata)

    def as_dict(self) -> dict:
        return {
            "session": self.session_id,
            "state": self.state,
            "resumable": self.resumable,
            "ended_seconds_ago": round(self.ended_seconds_ago, 1),
            "bytes": self.bytes,
        }


def sweep_period(retention: float) -> float:
    return max(1.0, min(SWEEP_PERIOD, retention / 4))


def _size(directory: Path) -> int:
    total = 0
    for p in directory.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def sweep(
    sessions_dir: Path,
    retention: float,
    live: Iterable[str] | Callable[[], Iterable[str]],
    now: float | None = None,
    lock: AbstractContextManager | None = None,
) -> list[Deleted]:
    """Delete the checkpoints of sessions not in ``live`` that ended ``retention`` seconds ago or more.

    ``live`` may be a function, asked again for each checkpoint, under ``lock`` if given, just before the
    decision to delete it: a session that a resume takes up while the sweep runs (the resume marks it under
    the same lock before it checks its checkpoint is still there) is never deleted under it."""
    now = time.time() if now is None else now
    if callable(live):
        current = live
    else:
        fixed = frozenset(live)

        def current() -> Iterable[str]:
            return fixed

    guard = lock if lock is not None else nullcontext()
    out: list[Deleted] = []
    if not sessions_dir.is_dir():
        return out

    def expired(d: Path) -> tuple[Checkpoint, float] | None:
        """The checkpoint in ``d`` and how long ago its session ended, if that is the retention or more."""
        try:
            cp = Checkpoint.load(d)
            mtime = (d / META).stat().st_mtime
        except (CheckpointError, OSError):
            return None
        m = cp.meta
        ended = m.get("failed_epoch") if m["state"] == SessionState.FAILED else None
        since = float(ended) if isinstance(ended, (int, float)) else mtime
        return (cp, since) if now - since >= retention else None

    for d in sorted(sessions_dir.glob(f"*{SUFFIX}")):
        if not d.is_dir() or expired(d) is None:
            continue
        with guard:
            # read again under the lock: a resume that took the checkpoint up and finished meanwhile (so it is in
            # neither ``live``'s snapshot nor being resumed now) wrote its new state into it
            found = expired(d)
            if found is None:
                continue
            cp, since = found
            if cp.session_id in set(current()):
                continue
            size = _size(d)
            cp.remove()
        m = cp.meta
        out.append(Deleted(cp.session_id, m["state"], bool(m.get("resumable")), now - since, size))
    return out


__all__ = ["SWEEP_PERIOD", "Deleted", "sweep", "sweep_period"]
