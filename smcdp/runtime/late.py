"""``smcdp session resume`` at an initiator whose session succeeded: bring the participants that failed after
it to the same end (docs/fault-tolerance.md, "How a session ends").

A participant that confirmed holding its output and then failed on its own -- cut off from everyone before
it heard that the others succeeded -- keeps a resumable checkpoint while the others, who had every
confirmation, succeeded and deleted theirs.  Before, a resume at the succeeded initiator was refused with
ALREADY_EXISTS and nothing could end that split.  Now the initiator asks every other participant to resume:
one that succeeded answers ALREADY_EXISTS and is left alone; one that failed resumably reopens its session
and, on ``Begin``, replays its role from its own journal (it needs nothing from the finished ones: a
participant's "succeeded" vouches that every participant held its output), sends nothing again to the
participants that succeeded (:attr:`smcdp.net.channel.Channel.finished`), and in its final round learns from
them that the session succeeded.  The initiator waits until each one ended and returns its own record with
``brought_to_end`` (party -> how it ended); a participant that could not be brought to the end fails the
call, naming it.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from smcdp.errors import PermissionDenied
from smcdp.net.grpc_channel import AlreadyExists, call_with_retry, error_for_code, with_origin
from smcdp.runtime.core import PartyCore
from smcdp.states import SessionState
from smcdp.v1 import transport_pb2 as tpb

#: how often the initiator asks a resumed participant whether its session ended
POLL_SECONDS = 1.0


async def bring_to_end(core: PartyCore, session_id: str) -> dict:
    """Resume, at every other participant that failed resumably, the session that succeeded here."""
    record = await core.records.aload(session_id)
    if record is None or record.get("state") != SessionState.SUCCEEDED:
        raise AlreadyExists(f"session {session_id!r} already exists at party {core.name!r}")
    if record.get("initiator") != core.name:
        raise PermissionDenied(
            f"session {session_id!r} was initiated by {record.get('initiator')!r}; only its operator can resume it"
        )
    others = [p for p in dict.fromkeys(record["roles"].values()) if p != core.name]
    calls = time.monotonic() + max(10.0, 3 * core.config.timeouts.connect_seconds)
    ref = tpb.SessionRef(session_id=session_id)
    outcomes = await asyncio.gather(*(_call(core, p, "Resume", ref, calls) for p in others), return_exceptions=True)
    late = [p for p, o in zip(others, outcomes, strict=True) if not isinstance(o, BaseException)]
    refused = [(p, o) for p, o in zip(others, outcomes, strict=True) if isinstance(o, BaseException) and not _done(o)]
    begun = await asyncio.gather(*(_call(core, p, "Begin", ref, calls) for p in late), return_exceptions=True)
    refused += [(p, o) for p, o in zip(late, begun, strict=True) if isinstance(o, BaseException)]
    late = [p for p, o in zip(late, begun, strict=True) if not isinstance(o, BaseException)]
    deadline = time.monotonic() + float(record.get("timeout_seconds") or core.config.timeouts.session_seconds)
    ends = await asyncio.gather(*(_ended(core, p, session_id, deadline) for p in late))
    failed = [(p, reply) for p, reply in zip(late, ends, strict=True) if reply.state != SessionState.SUCCEEDED]
    if refused or failed:
        what = [f"{p}: {e}" for p, e in refused] + [
            f"{p} resumed and then {r.state or 'did not end'} ({r.code or 'no code'}, culprit {r.culprit or p})"
            for p, r in failed
        ]
        origin = (refused or failed)[0][0]
        # FAILED_PRECONDITION whatever the participant's own code: the operator's client takes an UNAVAILABLE
        # answer for a lost call and would report this party's "succeeded" record instead
        raise with_origin(
            error_for_code(
                "FAILED_PRECONDITION",
                f"session {session_id} succeeded at {core.name}, but not every participant could be brought to "
                f"the same end: {'; '.join(what)}",
                origin,
            ),
            origin,
        )
    return {**record, "brought_to_end": {p: SessionState.SUCCEEDED.value for p in late}}


def _done(exc: BaseException) -> bool:
    """A participant's answer to Resume that its session already succeeded there."""
    return isinstance(exc, AlreadyExists)


async def _call(core: PartyCore, party: str, method: str, request: Any, deadline: float) -> Any:
    assert core.connector is not None  # the party serves: its connector exists
    stub = core.connector.mailbox(party)
    return await call_with_retry(
        f"{method} of session {request.session_id}",
        party,
        core.config.address_of(party),
        deadline,
        lambda t: getattr(stub, method)(request, timeout=t),
        core.config.timeouts.connect_seconds,
    )


async def _ended(core: PartyCore, party: str, session_id: str, deadline: float) -> tpb.HeartbeatReply:
    """Ask ``party`` every :data:`POLL_SECONDS` until its session ended there (or ``deadline``)."""
    assert core.connector is not None
    stub = core.connector.mailbox(party)
    request = tpb.HeartbeatRequest(session_id=session_id, incarnation=core.incarnation, round=0)
    reply = tpb.HeartbeatReply()
    while time.monotonic() < deadline:
        try:
            reply = await stub.Heartbeat(request, timeout=POLL_SECONDS * 5)
        except Exception:  # noqa: BLE001 - unreachable for a moment: ask again
            reply = tpb.HeartbeatReply()
        else:
            if reply.state in (SessionState.SUCCEEDED.value, SessionState.FAILED.value):
                return reply
        await asyncio.sleep(POLL_SECONDS)
    return reply
