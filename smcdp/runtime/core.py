"""What every part of a party process shares: who it is, its configuration, its live sessions.

The party process (:mod:`smcdp.runtime.party`) is a few rooms around this one -- recovery (sessions
continued from their checkpoints), admission (what peers propose), the peers' and the operator's calls,
the initiator (sessions this party starts) -- and each reads and changes the party's sessions through a
:class:`PartyCore`, never through another room.
"""

from __future__ import annotations

import asyncio
import secrets
from collections import OrderedDict
from collections.abc import Callable

from smcdp.errors import PreconditionFailed, Unavailable
from smcdp.net.grpc_channel import PeerConnector
from smcdp.net.limits import InboundLedger
from smcdp.net.tls import TlsMaterial
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.durability.checkpoint import Checkpoint
from smcdp.runtime.governance.gate import Governor
from smcdp.runtime.limits import EndedSessions
from smcdp.runtime.offline import NextRoot
from smcdp.runtime.records import SessionRecords
from smcdp.runtime.session import Session

#: how long a party waits for a new session's thread to make its loop and channel
READY_SECONDS = 10.0


class PartyCore:
    """A party's identity, configuration and sessions (live, ended, recorded), shared by its rooms.

    ``track``: what the party does with a session from its registration to its end (its governance,
    metrics, the audit heads' exchange); called once per registered session.
    """

    def __init__(
        self,
        config: PartyConfig,
        tls: TlsMaterial,
        governor: Governor,
        next_root: NextRoot,
        track: Callable[[Session], None],
    ) -> None:
        self.config = config
        self.name = config.name
        self.tls = tls
        self.governor = governor
        self.next_root = next_root
        self._track = track
        #: live sessions only (prepared or running); an ended one leaves a closed channel in
        #: ``ended`` (late duplicates) and its record (``records``)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.ended = EndedSessions(config.limits.keep_ended_sessions)
        self.records = SessionRecords(config.data_dir / "sessions", config.name)
        #: bytes the live sessions hold from each peer and in all
        self.inbound = InboundLedger(config.limits, self.name)
        #: initiator -> its proposals and resumes being admitted now (no session yet): they hold a
        #: pending slot each (smcdp.runtime.limits)
        self.admitting: dict[str, int] = {}
        #: sessions being reopened for a resume (their checkpoints are in use)
        self.reopening: set[str] = set()
        #: this process's incarnation: peers see it change when the party restarted
        self.incarnation = secrets.token_hex(6)
        #: connections to the peers' servers (made when the party starts serving)
        self.connector: PeerConnector | None = None
        self.shutting_down = False

    @property
    def sessions_dir(self):
        return self.records.directory

    def register(self, s: Session) -> None:
        """A new or reopened session: live from now on, its thread started."""
        self.sessions[s.spec.session_id] = s
        self._track(s)
        s.start_thread()

    def live(self) -> set[str]:
        """Sessions whose checkpoints are in use (on the server's loop)."""
        return set(self.sessions) | self.reopening

    def refuse_when_shutting_down(self) -> None:
        if self.shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")

    def admission(self, initiator: str) -> Callable[[], None]:
        """Count an admission of ``initiator`` as pending (``admitting``) until the returned function is
        called -- when its session is registered, or the admission ends without one (idempotent)."""
        self.admitting[initiator] = self.admitting.get(initiator, 0) + 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self.admitting[initiator] -= 1
                if not self.admitting[initiator]:
                    del self.admitting[initiator]

        return release

    def no_session(self, peer: str, session_id: str) -> PreconditionFailed:
        """What ``peer`` hears of a session it holds no role in: the same words whether the id exists here
        or not (a non-participant must not tell existing ids from missing ones)."""
        return PreconditionFailed(
            f"party {self.name!r} has no session {session_id!r} in which {peer!r} "
            "holds a role (never proposed here, or this party restarted since)"
        )

    def session_for(self, peer: str, session_id: str) -> Session | None:
        """The live session, or None if it ended here (after checking the peer held a role)."""
        s = self.sessions.get(session_id)
        roles = s.spec.roles if s is not None else getattr(self.ended.get(session_id), "roles", None)
        if roles is None or peer not in roles.values():
            raise self.no_session(peer, session_id)
        return s

    def holds(self, session_id: str) -> bool:
        """This party holds ``session_id``: live, recorded, checkpointed or proposed."""
        return (
            session_id in self.sessions
            or self.records.exists(session_id)
            or Checkpoint.directory(self.sessions_dir, session_id).is_dir()
            or self.governor.proposals.get(session_id) is not None
        )

    async def wait_ready(self, s: Session) -> None:
        """Until ``s``'s thread has made its loop and channel (at most :data:`READY_SECONDS`)."""
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, READY_SECONDS)
