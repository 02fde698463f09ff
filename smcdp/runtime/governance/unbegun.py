"""Proposals accepted automatically that have not begun yet: their audit lines wait for Begin.

A proposal admitted with nothing reserved or counted (no budget, no exact release, no operator
approval) that is aborted or expires before its Begin computed nothing from this party's data.
One peer proposing and aborting hundreds of them used to add five fsync-ed audit lines each
(proposal, accepted, abort, session-end).  :class:`Unbegun` keeps such a proposal's lines back:
at Begin (or when the party stops, or the proposal is abandoned) they are written in full, before
the session computes anything; at an end before Begin they are written in full only for the first
few of the peer's window (:class:`~smcdp.runtime.governance.audit.RefusalThrottle`), and the others
are counted in one ``unbegun-summarised`` line per peer and window.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from smcdp.runtime.governance.audit import AuditLog, RefusalThrottle

#: the rule an early end is counted under (summaries drop it: there is only one)
ENDED_BEFORE_BEGIN = "ended-before-begin"


class Unbegun:
    """The kept-back audit lines of one party's automatically accepted, not yet begun proposals."""

    def __init__(self, audit: AuditLog, lock: threading.RLock, throttle: RefusalThrottle | None = None) -> None:
        self.audit = audit
        self._lock = lock
        #: session -> its audit lines (event, fields), in order
        self._lines: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        #: early ends per peer and window: the first few in full, then a count
        self.throttle = throttle or RefusalThrottle()

    def keep(self, session_id: str, lines: list[tuple[str, dict[str, Any]]]) -> None:
        with self._lock:
            self._lines[session_id] = list(lines)

    def holds(self, session_id: str) -> bool:
        with self._lock:
            return session_id in self._lines

    def add(self, session_id: str, event: str, fields: Mapping[str, Any]) -> bool:
        """Keep one more line of a not yet begun proposal; False if ``session_id`` is not one."""
        with self._lock:
            lines = self._lines.get(session_id)
            if lines is None:
                return False
            lines.append((event, dict(fields)))
            return True

    def write(self, session_id: str) -> None:
        """Write a proposal's kept lines now (it began, is recorded in full, or the party stops)."""
        with self._lock:
            for event, fields in self._lines.pop(session_id, ()):
                self.audit.append(event, **fields)

    def ended(self, session_id: str, initiator: str, began: bool) -> bool:
        """The session ended: whether its end is to be audited in full (True also for any session whose
        lines were not kept).  One that ended before Begin is written in full within its initiator's
        allowance, else counted and its lines dropped."""
        with self._lock:
            if session_id not in self._lines:
                return True
            if began:  # (Begin writes them first; this is only a safety net)
                self.write(session_id)
                return True
            summaries, in_full = self.throttle.refused(initiator, ENDED_BEFORE_BEGIN, session_id)
            self.summarise(summaries)
            if not in_full:
                del self._lines[session_id]
                return False
            self.write(session_id)
            return True

    def summarise(self, summaries: list[dict[str, Any]]) -> None:
        for summary in summaries:
            fields = {k: v for k, v in summary.items() if k not in ("refused", "rules")}
            self.audit.append("unbegun-summarised", ended_before_begin=summary["refused"], **fields)

    def due(self) -> None:
        """Summarise the windows that have ended (periodic)."""
        self.summarise(self.throttle.due())

    def stop(self) -> None:
        """The party stops: every window summarised; proposals not yet begun written in full (their
        checkpoints may continue after a restart)."""
        self.summarise(self.throttle.flush())
        with self._lock:
            for sid in list(self._lines):
                self.write(sid)


__all__ = ["ENDED_BEFORE_BEGIN", "Unbegun"]
