"""What a party's peers may ask of it (the Mailbox service): :class:`PeerDesk`.

Every call names the caller by its verified certificate (``peer``), and a peer learns about a session
only if it holds a role in it: for any other id it hears exactly what it would of a missing one.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence

from smcdp.errors import (
    AlreadySucceeded,
    InvalidMessage,
    PermissionDenied,
    PreconditionFailed,
    SessionAborted,
    SmcdpError,
    reported,
)
from smcdp.net.server import PeerHost, PendingApproval, SessionSpec, validate_session_id
from smcdp.runtime.admission import Admission
from smcdp.runtime.console.readmodel import Observatory
from smcdp.runtime.core import PartyCore
from smcdp.runtime.governance.witness import SignedHead
from smcdp.runtime.limits import WAITING_NOTICE_GRACE, check_begin
from smcdp.runtime.liveness import checked_link
from smcdp.runtime.recovery import Recovery
from smcdp.runtime.states import Slot
from smcdp.states import SessionState

log = logging.getLogger("smcdp.party")


class PeerDesk(PeerHost):
    """The peers' calls at a party (``core``): messages, proposals, begin, abort, liveness, witnesses."""

    def __init__(self, core: PartyCore, admission: Admission, recovery: Recovery, observatory: Observatory) -> None:
        self.core = core
        self.name = core.name
        self._admission = admission
        self._recovery = recovery
        self._observatory = observatory

    # ------------------------------------------------------------ messages
    def inbound_target(self, peer: str, session_id: str):
        core = self.core
        s = core.sessions.get(session_id)
        channel = s.channel if s is not None else core.ended.get(session_id)
        if channel is None:
            self._refuse_ended(peer, session_id)
            raise core.no_session(peer, session_id)
        role = channel.role_of(peer)
        if role is None:
            raise core.no_session(peer, session_id)
        if role == channel.role:
            raise PermissionDenied("a party cannot deliver messages to itself")
        return channel, role

    def inbound_open(self, peer: str, session_id: str) -> None:  # streams of ended sessions end
        s = self.core.sessions.get(session_id)
        channel = s.channel if s is not None else self.core.ended.get(session_id)
        if channel is None:
            self.inbound_target(peer, session_id)  # raises: the session is gone
        else:
            channel.check_open()

    def running_with(self, peer: str, session_id: str | None = None) -> bool:
        """``peer`` holds a role in the begun, not yet ended session ``session_id`` (any, if None) here."""
        sessions = self.core.sessions
        if session_id is not None:
            s = sessions.get(session_id)
            return s is not None and _running_with(s, peer)
        return any(_running_with(s, peer) for s in list(sessions.values()))

    def inbound_delivered(self, peer: str, nbytes: int, duplicate: bool) -> None:
        self._observatory.inbound_delivered(peer, nbytes, duplicate)

    def inbound_refused(self, peer: str | None, code: str) -> None:
        self._observatory.inbound_refused(peer, code)

    def _refuse_ended(self, peer: str, session_id: str) -> None:
        """A message for a session that ended here long ago: its record says how (to a participant of that
        session only; anyone else learns nothing about it)."""
        record = self.core.records.peek(session_id)
        if record is None or peer not in (record.get("roles") or {}).values():
            return
        err = record.get("error")
        if isinstance(err, dict) and err.get("code"):
            raise SessionAborted(
                f"session {session_id} already ended at {self.name}: {err.get('message', '')}",
                str(err["code"]),
                str(err.get("origin") or self.name),
            )
        if record.get("state") == SessionState.SUCCEEDED:
            raise AlreadySucceeded(f"session {session_id} already succeeded at {self.name}")
        raise PreconditionFailed(f"session {session_id} has already ended at {self.name}")

    # ------------------------------------------------------------ a session's course
    async def propose(self, peer: str, spec: SessionSpec) -> str | PendingApproval:
        return await self._admission.propose(peer, spec)

    async def begin(self, peer: str, session_id: str) -> None:
        core = self.core
        s = core.session_for(peer, session_id)
        if s is None or s.done.done():
            raise PreconditionFailed(f"session {session_id!r} has already ended at {self.name!r}")
        if peer != s.initiator:
            raise PermissionDenied(f"only the initiator {s.initiator!r} may begin session {session_id!r}")
        if s.lifecycle.awaiting_begin:
            try:
                check_begin(core.sessions.values(), s.initiator, core.config.limits, self.name)
            except SmcdpError as exc:
                s.fail_threadsafe(exc)
                s.begin_threadsafe()
                raise
            s.admit_begin()  # counts as running from now on (concurrent Begins must not all pass)
            # the proposal's audit lines, kept back while it might end before Begin, before it computes
            await asyncio.get_running_loop().run_in_executor(None, core.governor.unbegun.write, session_id)
        s.begin_threadsafe()

    async def abort(
        self, peer: str, session_id: str, code: str, message: str, culprit: str | None = None, link: str | None = None
    ) -> None:
        core, loop = self.core, asyncio.get_running_loop()
        if session_id not in core.sessions and await loop.run_in_executor(  # governance: a waiting
            None, core.governor.withdraw, peer, session_id, message
        ):  # proposal is withdrawn
            return
        s = core.session_for(peer, session_id)
        if s is None:  # ended here already: nothing to abort
            return
        role = next(r for r, p in s.spec.roles.items() if p == peer)
        if culprit is not None and culprit not in s.spec.roles.values():
            raise InvalidMessage(f"Abort of session {session_id!r} names {culprit!r}, who holds no role in it")
        if link is not None and checked_link(link, s.spec.roles.values(), {peer, culprit or peer}) is None:
            raise InvalidMessage(
                f"Abort of session {session_id!r} names the link {link!r}: not from {peer!r} (or the culprit it "
                "names) to another participant of the session"
            )
        await loop.run_in_executor(None, core.governor.aborted, peer, session_id, code, message)
        # the aborting peer's word: its origin is that peer (its certificate says who it is); a culprit it names
        # is its claim, which this party's session weighs before any record names it (liveness.weigh_claim)
        s.fail_threadsafe(
            reported(f"session {session_id} aborted by {peer} (role {role}): {message}", code, peer, culprit, link)
        )

    async def resume(self, peer: str, session_id: str) -> str:
        core = self.core
        core.refuse_when_shutting_down()
        s = core.sessions.get(session_id)
        if s is not None and not s.done.done() and peer in s.spec.roles.values():
            if peer != s.initiator:
                raise PermissionDenied(f"only the initiator {s.initiator!r} may resume session {session_id!r}")
            return s.role  # a repeated Resume
        cp = self._recovery.resumable_checkpoint(session_id, peer)
        if peer != cp.meta["initiator"]:
            raise PermissionDenied(f"only the initiator {cp.meta['initiator']!r} may resume session {session_id!r}")
        s = await self._recovery.resume_locally(cp)
        log.warning("session %s reopened from its checkpoint at %s's request", session_id, peer)
        return s.role

    async def waiting(self, peer: str, session_id: str, party: str) -> None:
        s = self.core.session_for(peer, session_id)
        if s is None or s.done.done():
            raise PreconditionFailed(f"session {session_id!r} has already ended at {self.name!r}")
        if peer != s.initiator:
            raise PermissionDenied(f"only the initiator {s.initiator!r} may say what session {session_id!r} waits for")
        if party not in s.spec.roles.values() or party in (peer, self.name):
            raise InvalidMessage(f"session {session_id!r} cannot wait for {party!r}: not another participant")
        if s.state is SessionState.PREPARED:
            # only while the party it names confirms the wait: else an initiator's notices naming a party
            # never asked kept a proposal -- and its slot -- prepared for approval_timeout_seconds
            if not await self._confirms_waiting(s, party):
                raise PreconditionFailed(
                    f"party {party!r} does not confirm that session {session_id!r} waits for its operator: the "
                    f"proposal keeps its grace (limits.proposal_grace_seconds) at {self.name!r}"
                )
            s.await_approval(party)

    async def _confirms_waiting(self, s, party: str) -> bool:
        """Ask ``party`` (a Heartbeat on the session) whether the session waits for its operator there; a
        confirmation holds WAITING_NOTICE_GRACE seconds, so repeated notices do not make this party ask
        again each time."""
        now = time.monotonic()
        if now - s.begin_wait.confirmed.get(party, -math.inf) < WAITING_NOTICE_GRACE:
            return True
        channel, loop = s.channel, s.loop
        if channel is None or loop is None:
            return False
        timeout = min(5.0, self.core.config.timeouts.connect_seconds, self.core.config.timeouts.rpc_seconds)
        # the session's channel lives on the session's own loop (its thread), not on the server's
        probe = None
        try:
            probe = asyncio.run_coroutine_threadsafe(channel.heartbeat(party, self.core.incarnation, timeout), loop)
            reply = await asyncio.wait_for(asyncio.wrap_future(probe), timeout + 1.0)
        except Exception:  # noqa: BLE001 - unreachable, refused or the session ended: nothing confirmed
            if probe is not None:
                probe.cancel()
            return False
        if reply.state != SessionState.PENDING.value:
            return False
        s.begin_wait.confirmed[party] = time.monotonic()
        return True

    # ------------------------------------------------------------ liveness
    async def heartbeat(
        self, peer: str, session_id: str, incarnation: str, round: int, about: Sequence[str] = ()
    ) -> dict:
        core = self.core
        unknown = {
            "state": SessionState.UNKNOWN.value,
            "incarnation": core.incarnation,
            "round": 0,
            "code": "",
            "culprit": "",
        }
        s = core.sessions.get(session_id)
        if s is None and core.governor.decisions.waiting_for_operator(session_id, peer):
            # a proposal that waits for this party's operator: a participant asks whether the initiator's
            # Waiting notices naming this party are true (PeerDesk.waiting)
            return dict(unknown, state=SessionState.PENDING.value)
        if s is not None:
            if peer not in s.spec.roles.values():
                return unknown  # as for an id that does not exist here
            s.watcher.probed_by(peer)  # alive, and its link to this party carries (liveness.LinkLost)
            err = (s.record or {}).get("error") or {}
            heard = {} if s.channel is None else s.channel.last_heard
            return {
                "state": s.state.value,
                "incarnation": core.incarnation,
                "round": 0 if s.channel is None else max(0, s.channel.round),
                "code": err.get("code", ""),
                "culprit": err.get("origin", ""),
                "link": err.get("link", ""),
                # a third party's view of participants the prober cannot hear from (liveness.Watcher.vouched)
                "about_heard_seconds": [s.watcher.heard_ago(a, heard, asker=peer) for a in about],
            }
        rec = await core.records.apeek(session_id)
        if rec is None:
            return unknown
        if not (rec.get("damaged") and not rec.get("roles")) and peer not in (rec.get("roles") or {}).values():
            # the same answer as for an id that does not exist here.  A session whose checkpoint was
            # damaged here has no trustworthy roles: any party asking about it learns that it failed
            # here, nothing more
            return unknown
        err = rec.get("error") or {}
        return {
            "state": rec.get("state", SessionState.UNKNOWN.value),
            "incarnation": core.incarnation,
            "round": 0,
            "code": err.get("code", ""),
            "culprit": err.get("origin", ""),
            "link": err.get("link", ""),
        }

    # ------------------------------------------------------------ witnesses (docs/governance.md)
    async def witness(
        self, peer: str, statement: bytes, signature: bytes, certificate: bytes
    ) -> tuple[bytes, bytes, bytes] | None:
        head = SignedHead(statement, signature, certificate)
        sid = validate_session_id(head.claims()["session"])
        took_part = await self._took_part(peer, sid)
        mine = await asyncio.get_running_loop().run_in_executor(
            None, self.core.governor.witnessing.witness, peer, head, took_part
        )
        return None if mine is None else (mine.statement, mine.signature, mine.certificate)

    async def witnessed(self, peer: str) -> list[tuple[bytes, bytes, bytes]]:
        heads = await asyncio.get_running_loop().run_in_executor(None, self.core.governor.witnesses.held_for, peer)
        return [(h.statement, h.signature, h.certificate) for h in heads]

    async def _took_part(self, peer: str, session_id: str) -> bool:
        core = self.core
        s = core.sessions.get(session_id)
        roles = s.spec.roles if s is not None else getattr(core.ended.get(session_id), "roles", None)
        if roles is None:
            rec = await core.records.apeek(session_id)
            roles = None if rec is None else rec.get("roles")
        return isinstance(roles, dict) and peer in roles.values()


def _running_with(s, peer: str) -> bool:
    """A running session's calls have capacity of their own: begun (its slot is a running one, so it is not
    a stalled proposal) and ``peer`` one of its participants."""
    return s.lifecycle.phase.slot is Slot.RUNNING and peer in s.spec.roles.values()
