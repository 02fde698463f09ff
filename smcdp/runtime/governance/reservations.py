"""The privacy budget's side of governance: a session's cost reserved when it is admitted, charged at its
release point, released if it fails before (docs/governance.md §3).

:class:`Reservations` keeps which live session holds which ledger entry and writes every move of the
budget to the audit trail.  The governor (:mod:`smcdp.runtime.governance.gate`) decides *whether* a
session may reserve; this module does the bookkeeping.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from smcdp.dp.budget import BudgetExceeded, fmt_amount
from smcdp.errors import PreconditionFailed, SmcdpError
from smcdp.plugins.base import SessionSummary
from smcdp.runtime.governance.audit import AuditLog
from smcdp.runtime.governance.charges import RESUME_KEY, SessionCharges
from smcdp.runtime.governance.policy import OutOfBounds, Refusal, refusal


class BudgetRefused(SmcdpError, Refusal):
    """The privacy budget does not admit the session's cost (RESOURCE_EXHAUSTED)."""

    code = "RESOURCE_EXHAUSTED"


#: ledger states (smcdp.dp.ledger) this module reads
RESERVED, CHARGED, RELEASED = "reserved", "charged", "released"


class Reservations:
    """Which session holds which budget entry at party ``name`` (``charges`` None: no ``[budget]``).

    ``lock``: the governor's, held by every method that changes what is held."""

    def __init__(self, charges: SessionCharges | None, audit: AuditLog, name: str, lock: threading.RLock) -> None:
        self.charges = charges
        self.audit = audit
        self.name = name
        self._lock = lock
        #: sessions admitted here whose cost is reserved (commit or release pending) -> ledger key
        self.held: dict[str, str] = {}

    def open_reservation(self, session_id: str):
        """The session's entry still reserved in the ledger, if any."""
        assert self.charges is not None
        return next((c for c in reversed(self.charges.entries(session_id)) if c.state == RESERVED), None)

    def was_charged(self, session_id: str) -> bool:
        assert self.charges is not None
        return any(c.state == CHARGED for c in self.charges.entries(session_id))

    def charged(self, session_id: str) -> tuple[str | None, str | None]:
        """(epsilon, ledger state) of the session's last entry not released, for the operator's views."""
        if self.charges is None:
            return None, None
        c = next((c for c in reversed(self.charges.entries(session_id)) if c.state != RELEASED), None)
        if c is None:
            return None, None
        return fmt_amount(c.epsilon), c.state

    def audit_amount(self, event: str, c, **fields) -> None:
        assert self.charges is not None
        self.audit.append(
            event,
            dataset=self.charges.dataset,
            epsilon=fmt_amount(c.epsilon),
            delta=fmt_amount(c.delta),
            **({"key": c.key} if RESUME_KEY in (c.key or "") else {}),
            **fields,
        )

    def reconcile(self, keep_sessions: Iterable[str]) -> None:
        """After a restart: release the open reservations of sessions that no longer run here.

        The release gate commits *before* the release message is sent, so a reservation still open means
        no noisy output left this party; ``keep_sessions`` (approved proposals not yet picked up, sessions
        continued from their checkpoints) keep theirs.  A session that failed resumably does not: a resume
        is admitted again and reserves anew.  A replayed session that reaches its release point again
        re-sends the same output (its randomness is restored from the checkpoint), so committing again is
        a no-op, not a second charge."""
        if self.charges is None:
            return
        keep: dict[str, str] = {}
        for sid in set(keep_sessions):
            c = self.open_reservation(sid)
            if c is not None:
                keep[sid] = c.key
        for c in self.charges.orphans(keep.values()):
            assert c.key is not None  # a reservation is always made under its key
            reason = (
                "party restarted: the session does not continue here now and had not reached its "
                "release point (a resume reserves again)"
            )
            if self.charges.release(c.key, reason) is not None:
                self.audit_amount("released", c, session=c.key.split(RESUME_KEY)[0], reason=reason)
        self.held = keep

    def reserve(self, sid: str, summary: SessionSummary, initiator: str, *, refuse: bool):
        """Reserve the session's cost (its first key, or the next resume's); the caller audits it.
        ``refuse``: a budget that does not admit it is a refusal the initiator hears (without the amount
        left); otherwise the ledger's own words (the operator's approval)."""
        assert self.charges is not None
        key = self.charges.next_key(sid)
        try:
            c = self.charges.reserve(key, summary, initiator)
        except BudgetExceeded as exc:
            if not refuse:
                raise
            raise refusal(
                BudgetRefused,
                self.name,
                sid,
                "budget",
                f"the privacy budget of its dataset does not admit epsilon={summary.epsilon!r}, "
                f"delta={summary.delta!r} more (the session's whole cost)",
            ) from exc
        except PreconditionFailed as exc:
            raise refusal(
                OutOfBounds, self.name, sid, "budget", f"this session id already had a budget reservation here ({exc})"
            ) from None
        self.held[sid] = key
        return c

    def keep(self, sid: str, key: str) -> None:
        self.held[sid] = key

    def give_back(self, session_id: str, reason: str) -> None:
        """Release what ``session_id`` holds (nothing if it holds nothing)."""
        key = self.held.pop(session_id, None) if self.charges is not None else None
        if key is None:
            return
        assert self.charges is not None  # a key is held only with charges
        c = self.charges.release(key, reason)
        if c is not None:
            self.audit_amount("released", c, session=session_id, reason=reason)

    def release_point(self, session_id: str) -> None:
        """The session's output may leave this party from now on: the reservation becomes a charge."""
        key = self.held.get(session_id)
        c = None if key is None or self.charges is None else self.charges.commit(key)
        if c is not None:
            self.audit_amount(
                "charged", c, session=session_id, why="release point reached: output may leave the party from here on"
            )

    def settle(self, session_id: str, succeeded: bool, reason: str) -> None:
        """At the end of a session: commit what is still reserved on success, release it on failure."""
        with self._lock:
            if session_id not in self.held:
                return
            if succeeded:
                assert self.charges is not None
                c = self.charges.commit(self.held.pop(session_id))
                if c is not None:
                    self.audit_amount("charged", c, session=session_id, why="the session succeeded")
            else:
                self.give_back(session_id, f"the session failed before its release point: {reason}"[:1000])
