"""``max_exact_sessions`` per ``period_days``: how many sessions releasing *exact* (not differentially
private) outputs from this party's data it joins in a window (docs/governance.md).

The count comes from the audit trail's ``accepted`` events with ``exact`` -- so it survives restarts --
less those the trail records as ``exact-returned``: sessions that ended before their role began here
computed nothing from this party's data, and give their place back.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time

from smcdp.errors import ResourceExhausted
from smcdp.runtime.governance.audit import AuditLog, read_entries
from smcdp.runtime.governance.policy import DEFAULT_PERIOD_DAYS, Policy, Refusal, refusal


class QuotaRefused(ResourceExhausted, Refusal):
    """A per-period session limit (max_exact_sessions) does not admit the session (RESOURCE_EXHAUSTED)."""


def _epoch(iso: str) -> float:
    return _dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class ExactSessions:
    """The exact-output sessions admitted at party ``name``, per protocol, against its ``policy``."""

    def __init__(self, policy: Policy | None, audit: AuditLog, name: str, lock: threading.RLock) -> None:
        self.policy = policy
        self.audit = audit
        self.name = name
        self._lock = lock
        #: protocol -> (admitted at, epoch seconds; session) of the sessions counted
        self._admitted: dict[str, list[tuple[float, str]]] = {}

    def load(self, data_dir) -> None:
        """From the audit trail (at start-up)."""
        out: dict[str, list[tuple[float, str]]] = {}
        returned: set[str] = set()
        for _, entry, _ in read_entries(data_dir):
            if entry is None:
                continue
            if entry.get("event") == "exact-returned" and isinstance(entry.get("session"), str):
                returned.add(entry["session"])
            elif (
                entry.get("event") == "accepted"
                and entry.get("exact") is True
                and isinstance(entry.get("protocol"), str)
                and isinstance(entry.get("time"), str)
            ):
                try:
                    out.setdefault(entry["protocol"], []).append((_epoch(entry["time"]), str(entry.get("session"))))
                except ValueError:
                    continue
        self._admitted = {p: [a for a in admitted if a[1] not in returned] for p, admitted in out.items()}

    def check(self, sid: str, protocol: str, exact: bool) -> None:
        """Refuse (QuotaRefused) an exact session past the window's quota."""
        rules = self.policy.protocols.get(protocol) if self.policy is not None else None
        if not exact or rules is None or rules.max_exact_sessions is None:
            return
        days = rules.period_days if rules.period_days is not None else DEFAULT_PERIOD_DAYS
        since = time.time() - days * 86400.0
        used = sum(1 for t, _ in self._admitted.get(protocol, ()) if t > since)
        if used >= rules.max_exact_sessions:
            raise refusal(
                QuotaRefused,
                self.name,
                sid,
                f"policy.{protocol}.max_exact_sessions",
                f"it already joined {used} {protocol} session(s) releasing exact outputs from its data "
                f"in the last {days:g} days (at most {rules.max_exact_sessions})",
            )

    def accepted(self, sid: str, role: str, how: str, protocol: str, exact: bool) -> None:
        """Admitted: on the audit trail (exact: counted, also after a restart)."""
        entry = self.audit.append(
            "accepted", session=sid, role=role, approval=how, **({"protocol": protocol, "exact": True} if exact else {})
        )
        if exact:
            self._admitted.setdefault(protocol, []).append((_epoch(entry["time"]), sid))

    def give_back(self, session_id: str) -> None:
        """The session ended before its role began here: its place counts no more."""
        with self._lock:
            for protocol, admitted in self._admitted.items():
                kept = [a for a in admitted if a[1] != session_id]
                if len(kept) != len(admitted):
                    self._admitted[protocol] = kept
                    self.audit.append(
                        "exact-returned",
                        session=session_id,
                        protocol=protocol,
                        why="the session ended before its role began here",
                    )
                    return
