"""What a party's own operator may ask of it (the Control service): :class:`OperatorDesk`.

Only the holder of the party's own certificate (or the console's token, through the console) reaches
these: starting and resuming sessions, their status and results, and the governance queue (list,
show, approve, reject).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from smcdp.errors import InvalidMessage
from smcdp.net.grpc_channel import NotFound
from smcdp.net.server import SESSION_ID_RE, OperatorHost, initiator_of
from smcdp.runtime.core import PartyCore
from smcdp.runtime.durability.checkpoint import SUFFIX as CHECKPOINT_SUFFIX
from smcdp.runtime.initiator import Initiator


class OperatorDesk(OperatorHost):
    """The operator's calls at a party (``core``)."""

    def __init__(self, core: PartyCore, initiator: Initiator) -> None:
        self.core = core
        self.name = core.name
        self._initiator = initiator

    # ------------------------------------------------------------ sessions
    async def start_session(
        self,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        session_id: str | None = None,
        timeout: float | None = None,
        seed: int | None = None,
    ) -> dict:
        return await self._initiator.detached(self._initiator.start(protocol, roles, params, session_id, timeout, seed))

    async def resume_session(self, session_id: str) -> dict:
        return await self._initiator.detached(self._initiator.resume(session_id))

    async def get_result(self, session_id: str) -> dict:
        s = self.core.sessions.get(session_id)
        if s is not None:
            return dict(s.snapshot())  # a plain dict, as a stored record is returned below
        record = await self.core.records.aload(session_id)
        if record is None:
            raise NotFound(f"party {self.name!r} has no session {session_id!r}")
        return dict(record)

    async def get_status(self, session_id: str) -> dict:
        core = self.core
        s = core.sessions.get(session_id)
        if s is not None:
            return s.status()
        waiting = core.governor.waiting_status(session_id)  # waits for this operator
        if waiting is not None:
            return dict(waiting, incarnation=core.incarnation)
        rec = await self.get_result(session_id)
        return {
            "session_id": session_id,
            "protocol": rec.get("protocol"),
            "party": self.name,
            "role": rec.get("role"),
            "state": rec.get("state"),
            "round": rec.get("round"),
            "step": "",
            "restarts": rec.get("restarts", 0),
            "incarnation": core.incarnation,
            "peers": {},
            "error": rec.get("error"),
            "resumable": bool(rec.get("resumable")),
        }

    def resolve_session_id(self, session_id: str, exact: bool = False) -> str:
        """The session an operator names: its full id, or a name without the initiator's prefix -- this
        party's own session of that name first, else the one session of that name.

        ``exact`` (approve, reject): a decision is never taken on a session the operator did not name
        whole -- ``monthly-report`` approved ``dave.monthly-report`` when that was the only one -- so a
        short name that is not this party's own is refused, naming the candidates."""
        core = self.core
        if core.holds(session_id):
            return session_id
        own = f"{self.name}.{session_id}"  # a valid id the prefix makes too long names no session of this party's
        if initiator_of(session_id) != self.name and SESSION_ID_RE.match(own) and core.holds(own):
            return own
        found = sorted(self._named(session_id))
        if exact and found:
            raise InvalidMessage(
                f"party {self.name!r} approves or rejects a session by its full id only: "
                f"{session_id!r} could be {', '.join(found)}"
            )
        if len(found) > 1:
            raise InvalidMessage(
                f"party {self.name!r} holds several sessions named {session_id!r} "
                f"({', '.join(found)}): give the full id"
            )
        return found[0] if found else session_id

    def _named(self, name: str) -> set[str]:
        """Ids ``<party>.<name>`` of the sessions and proposals this party holds."""
        core = self.core
        ids = set(core.sessions) | {p.session_id for p in core.governor.proposals.all()}
        ids |= core.records.ids_named(name)
        ids |= {p.name[: -len(CHECKPOINT_SUFFIX)] for p in core.sessions_dir.glob(f"*.{name}{CHECKPOINT_SUFFIX}")}
        return {i for i in ids if initiator_of(i) is not None and i.partition(".")[2] == name}

    # ------------------------------------------------------------ governance (docs/governance.md)
    async def list_sessions(self, pending_only: bool) -> list[dict]:
        live = {sid: s.snapshot() for sid, s in list(self.core.sessions.items())}
        return await asyncio.get_running_loop().run_in_executor(
            None, self.core.governor.list_sessions, pending_only, live, self.core.records.recent
        )

    async def show_session(self, session_id: str) -> dict:
        try:
            record = await self.get_result(session_id)
        except NotFound:
            record = None
        return await asyncio.get_running_loop().run_in_executor(None, self.core.governor.show, session_id, record)

    async def decide(self, session_id: str, approve: bool, reason: str) -> dict:
        loop = asyncio.get_running_loop()
        if approve:
            return await loop.run_in_executor(None, self.core.governor.approve, session_id)
        return await loop.run_in_executor(None, self.core.governor.reject, session_id, reason)
