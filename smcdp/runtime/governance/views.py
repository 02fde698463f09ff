"""What the operator sees of governance: proposals, sessions and what they cost (``smcdp session list``,
``show``, the status of a proposal waiting for approval).  Read-only: nothing here decides."""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from smcdp.runtime.governance.approvals import Proposal
from smcdp.runtime.governance.reservations import Reservations
from smcdp.states import SessionState

#: session records listed by `smcdp session list` (newest first)
LIST_RECORDS = 500


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return _dt.datetime.fromtimestamp(t, _dt.UTC).isoformat(timespec="seconds")


def waiting_status(p: Proposal, me: str) -> dict:
    """GetStatus of a proposal that waits for this party's (``me``) operator."""
    return {
        "session_id": p.session_id,
        "protocol": p.protocol,
        "party": me,
        "role": p.role,
        "state": SessionState.PENDING.value,
        "round": None,
        "step": "",
        "restarts": 0,
        "peers": {},
        "error": None,
        "resumable": False,
        "waiting_for": me,
        "expires_at": iso(p.expires_at),
    }


def describe(p: Proposal) -> dict:
    s = p.summary or {}
    return {
        "session_id": p.session_id,
        "state": p.state,
        "protocol": p.protocol,
        "initiator": p.initiator,
        "role": p.role,
        "roles": dict(p.roles),
        "params": dict(p.params),
        "seeded": p.seed is not None,
        "epsilon": s.get("epsilon") if p.charges_budget else None,
        "delta": s.get("delta") if p.charges_budget else None,
        "summary": s or None,
        "received_at": iso(p.received_at),
        "expires_at": iso(p.expires_at),
        "decided_at": iso(p.decided_at),
        "reason": p.reason or None,
        "kind": "proposal",
    }


def describe_record(r: Mapping[str, Any], reservations: Reservations) -> dict:
    eps, how = reservations.charged(str(r.get("session_id")))
    return {
        "session_id": r.get("session_id"),
        "state": r.get("state"),
        "protocol": r.get("protocol"),
        "initiator": r.get("initiator"),
        "role": r.get("role"),
        "roles": r.get("roles"),
        "params": r.get("params"),
        "seeded": r.get("seed") is not None,
        "epsilon": eps,
        "budget_state": how,
        "started_at": r.get("started_at"),
        "finished_at": r.get("finished_at"),
        "error": r.get("error"),
        "kind": "session",
    }


def session_list(
    proposals: Iterable[Proposal],
    live: Mapping[str, Mapping[str, Any]],
    recorded: Callable[[int], Iterable[Mapping[str, Any]]],
    reservations: Reservations,
) -> list[dict]:
    """The proposals, the live sessions and the ``LIST_RECORDS`` newest ended ones (``recorded(limit)``:
    records, newest first); a proposal that became a session carries it as ``session``."""
    items = [describe(p) for p in proposals]
    seen = {i["session_id"] for i in items}
    records = dict(live)
    for r in recorded(LIST_RECORDS):
        records.setdefault(str(r.get("session_id")), r)
    for sid, r in records.items():
        if sid in seen:
            items = [dict(i, session=describe_record(r, reservations)) if i["session_id"] == sid else i for i in items]
        else:
            items.append(describe_record(r, reservations))
    return items
