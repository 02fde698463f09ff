"""Per-period session counts (docs/governance.md): ``max_exact_sessions`` -- sessions releasing *exact* (not
differentially private) outputs from this party's data -- and ``max_bound_tests`` -- sessions testing its data
against a bound the proposer chose and its policy did not declare (``data_bounds``), each a bit of the data --
in any window of ``period_days``.

The counts come from the audit trail's ``accepted`` events with ``exact`` or ``bound_tests`` -- so they survive
restarts -- less those the trail records as ``exact-returned`` or ``bound-test-returned``: sessions that ended
before their role began here computed nothing from this party's data, nor tested it, and give their place back.
"""

from __future__ import annotations

import datetime as _dt
import threading
import time

from smcdp.errors import ResourceExhausted
from smcdp.runtime.governance.audit import AuditLog, read_entries
from smcdp.runtime.governance.policy import DEFAULT_PERIOD_DAYS, Policy, Refusal, refusal


class QuotaRefused(ResourceExhausted, Refusal):
    """A per-period session limit (max_exact_sessions, max_bound_tests) does not admit the session
    (RESOURCE_EXHAUSTED)."""


#: the counted kinds: (the rule, the audit event that gives a place back)
_EXACT = "exact"
_TESTS = "bound_tests"
_RETURNED = {_EXACT: "exact-returned", _TESTS: "bound-test-returned"}


def _epoch(iso: str) -> float:
    return _dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


class ExactSessions:
    """The exact-output and bound-testing sessions admitted at party ``name``, per protocol, against its
    ``policy``."""

    def __init__(self, policy: Policy | None, audit: AuditLog, name: str, lock: threading.RLock) -> None:
        self.policy = policy
        self.audit = audit
        self.name = name
        self._lock = lock
        #: kind -> protocol -> (admitted at, epoch seconds; session) of the sessions counted
        self._admitted: dict[str, dict[str, list[tuple[float, str]]]] = {_EXACT: {}, _TESTS: {}}

    def load(self, data_dir) -> None:
        """From the audit trail (at start-up)."""
        out: dict[str, dict[str, list[tuple[float, str]]]] = {_EXACT: {}, _TESTS: {}}
        returned: dict[str, set[str]] = {_EXACT: set(), _TESTS: set()}
        events = {event: kind for kind, event in _RETURNED.items()}
        for _, entry, _ in read_entries(data_dir):
            if entry is None:
                continue
            if entry.get("event") in events and isinstance(entry.get("session"), str):
                returned[events[entry["event"]]].add(entry["session"])
            elif (
                entry.get("event") == "accepted"
                and isinstance(entry.get("protocol"), str)
                and isinstance(entry.get("time"), str)
            ):
                try:
                    at = (_epoch(entry["time"]), str(entry.get("session")))
                except ValueError:
                    continue
                if entry.get(_EXACT) is True:
                    out[_EXACT].setdefault(entry["protocol"], []).append(at)
                if isinstance(entry.get(_TESTS), list) and entry[_TESTS]:
                    out[_TESTS].setdefault(entry["protocol"], []).append(at)
        self._admitted = {
            kind: {p: [a for a in admitted if a[1] not in returned[kind]] for p, admitted in by.items()}
            for kind, by in out.items()
        }

    def check(self, sid: str, protocol: str, exact: bool, tests: tuple[str, ...] = ()) -> None:
        """Refuse (QuotaRefused) an exact session, or one testing its data against bounds ``tests`` it did not
        declare, past the window's quota."""
        rules = self.policy.protocols.get(protocol) if self.policy is not None else None
        if rules is None:
            return
        days = rules.period_days if rules.period_days is not None else DEFAULT_PERIOD_DAYS
        since = time.time() - days * 86400.0
        if exact and rules.max_exact_sessions is not None:
            used = sum(1 for t, _ in self._admitted[_EXACT].get(protocol, ()) if t > since)
            if used >= rules.max_exact_sessions:
                raise refusal(
                    QuotaRefused,
                    self.name,
                    sid,
                    f"policy.{protocol}.max_exact_sessions",
                    f"it already joined {used} {protocol} session(s) releasing exact outputs from its data "
                    f"in the last {days:g} days (at most {rules.max_exact_sessions})",
                )
        if tests:
            most = rules.max_bound_tests or 0
            used = sum(1 for t, _ in self._admitted[_TESTS].get(protocol, ()) if t > since)
            if used >= most:
                raise refusal(
                    QuotaRefused,
                    self.name,
                    sid,
                    f"policy.{protocol}.max_bound_tests",
                    f"the session tests its data against {', '.join(tests)} bound(s) its policy does not declare, "
                    f"and it already joined {used} such {protocol} session(s) in the last {days:g} days "
                    f"(at most {most}; data_bounds in its policy states what it answers without a test)",
                )

    def accepted(
        self,
        sid: str,
        role: str,
        how: str,
        protocol: str,
        exact: bool,
        tests: tuple[str, ...] = (),
        noted: tuple[str, ...] = (),
    ) -> None:
        """Admitted: on the audit trail (exact, or testing bounds ``tests``: counted, also after a restart;
        ``noted``: bounds its own operator's session tests, named and not counted)."""
        counted: dict[str, object] = {}
        if exact:
            counted[_EXACT] = True
        if tests:
            counted[_TESTS] = list(tests)
        extra: dict[str, object] = {"bound_tests_own": list(noted)} if noted else {}
        entry = self.audit.append(
            "accepted",
            session=sid,
            role=role,
            approval=how,
            **({"protocol": protocol, **counted} if counted else {}),
            **extra,
        )
        for kind in counted:
            self._admitted[kind].setdefault(protocol, []).append((_epoch(entry["time"]), sid))

    def give_back(self, session_id: str) -> None:
        """The session ended before its role began here: its places count no more."""
        with self._lock:
            for kind, by in self._admitted.items():
                for protocol, admitted in by.items():
                    kept = [a for a in admitted if a[1] != session_id]
                    if len(kept) != len(admitted):
                        by[protocol] = kept
                        self.audit.append(
                            _RETURNED[kind],
                            session=session_id,
                            protocol=protocol,
                            why="the session ended before its role began here",
                        )
                        break
