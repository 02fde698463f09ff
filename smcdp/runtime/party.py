"""The party process: one gRPC server, sessions, protocol plug-ins.

``smcdp party --config FILE`` (or ``python parties/<name>.py --config FILE``) runs
:func:`smcdp.runtime.process.serve` until SIGTERM/SIGINT.  :class:`Party` holds the process's
lifecycle and wires its rooms together (docs/architecture.md):

* :mod:`~smcdp.runtime.core` -- what they share: identity, configuration, live sessions, records;
* :mod:`~smcdp.runtime.recovery` -- sessions continued from checkpoints, the retention;
* :mod:`~smcdp.runtime.admission` -- what peers propose;
* :mod:`~smcdp.runtime.peers` -- the peers' calls (:class:`~smcdp.net.server.PeerHost`);
* :mod:`~smcdp.runtime.operator` -- the operator's calls (:class:`~smcdp.net.server.OperatorHost`);
* :mod:`~smcdp.runtime.initiator` -- the sessions this party starts or resumes.

Session life cycle (see docs/transport.md):

1. The operator of the initiating party calls ``Control.StartSession`` on its
   own server (certificate = the party's own).
2. The initiator registers the session locally, then sends ``Propose`` to every
   other participant.  Each checks that it holds a role, knows every
   participant's address, knows the protocol and that the protocol's
   ``validate_params`` accepts the parameters; it then prepares the session
   (mailbox ready, role not started) and writes the session's checkpoint
   (:mod:`smcdp.runtime.durability.checkpoint`: its randomness root, then the journal).
3. When every participant has accepted, the initiator sends ``Begin`` to each
   and starts its own role.  Because every mailbox exists before any role
   runs, a message never arrives for a session its receiver does not know.
4. Each role runs in **its own thread with its own event loop**, so a role
   that computes (Paillier arithmetic) never starves the server: health
   checks and deliveries are answered from the server's loop meanwhile.
5. A participant that fails sends ``Abort`` to the others; their pending
   ``recv`` calls raise :class:`~smcdp.errors.SessionAborted` (status code and
   origin party), so every participant ends with a clear error within its
   deadline.  Every participant writes ``data_dir/sessions/<id>.json``
   (result or error, traffic stats) atomically.
6. Faults (docs/fault-tolerance.md): while a role runs, its session probes
   the other participants; one silent for longer than ``peer_grace_seconds``
   ends the session everywhere with UNAVAILABLE naming it, keeping the
   checkpoints (``smcdp session resume ID`` continues it).  A party restarted
   from its configuration reopens every session it was running from its
   checkpoint *before* it serves, and replays the role to where it stopped;
   its peers see its new incarnation in the heartbeats and carry on.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

# numpy imports numpy.ma lazily, on first use (np.unique, scipy.stats), and that import parses builtin
# signatures with ast; in a session thread it would race with another thread's array header parse (CPython
# 3.11's AST constructor is not thread-safe, python/cpython#106905; smcdp._files.NUMPY_HEADERS).  A party
# imports it here, before any session thread runs (6 ms).
import numpy.ma  # noqa: F401

from smcdp.compute import close_engines
from smcdp.crypto.prepared import SHELF
from smcdp.errors import SessionAborted
from smcdp.net.config import ConfigError
from smcdp.net.grpc_channel import PeerConnector
from smcdp.net.server import PartyServer
from smcdp.net.tls import TlsMaterial
from smcdp.plugins.base import registered
from smcdp.plugins.registry import load_plugin_modules
from smcdp.primitives.rng import Randomness
from smcdp.runtime.admission import Admission
from smcdp.runtime.config import PartyConfig, operator_socket, require_optional_parts
from smcdp.runtime.console.readmodel import Observatory
from smcdp.runtime.core import PartyCore
from smcdp.runtime.governance.gate import Governor
from smcdp.runtime.governance.witness import SignedHead
from smcdp.runtime.initiator import Initiator
from smcdp.runtime.logs import private_dir
from smcdp.runtime.offline import NextRoot
from smcdp.runtime.operator import OperatorDesk
from smcdp.runtime.peers import PeerDesk
from smcdp.runtime.recovery import Recovery
from smcdp.runtime.session import Session
from smcdp.v1 import transport_pb2 as tpb

if TYPE_CHECKING:
    from smcdp.runtime.console.server import Console  # imported at start() only where a console runs (aiohttp)

log = logging.getLogger("smcdp.party")

#: how long shutdown waits for aborted sessions to write their records
SHUTDOWN_GRACE = 10.0


class Party:
    """A party process: its server, its rooms, and what happens when a session ends."""

    def __init__(self, config: PartyConfig, tls: TlsMaterial | None = None) -> None:
        tls = tls or TlsMaterial.load(config.tls.ca, config.tls.cert, config.tls.key)
        if tls.name != config.name:
            raise ConfigError(
                f"party.name is {config.name!r} but the certificate {config.tls.cert} is for {tls.name!r}"
            )
        self.config, self.name, self.tls = config, config.name, tls
        self.governor = Governor(config, self.name, tls)  # governance: docs/governance.md
        #: offline work for the next session, done while the party is idle
        self.next_root = NextRoot(self._prepare_next, self._busy)
        self.core = PartyCore(config, tls, self.governor, self.next_root, self._track)
        self.observatory = Observatory(self)  # what the console and metrics read
        self.recovery = Recovery(self.core)
        self.admission = admission = Admission(self.core)
        self.peers = PeerDesk(self.core, admission, self.recovery, self.observatory)
        self.initiator = Initiator(self.core, admission, self.recovery)
        self.operator = OperatorDesk(self.core, self.initiator)
        self.server = PartyServer(config, tls, self.peers, self.operator, operator_socket(config))
        self._exchanges: set[asyncio.Task] = set()  # audit heads sent at sessions' ends
        self._expiry: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None
        self.console: Console | None = None  # [console], started by start()
        self.port: int | None = None

    # what the console, metrics and tests read of the party
    @property
    def sessions(self):
        return self.core.sessions

    @property
    def ended(self):
        return self.core.ended

    @property
    def records(self):
        return self.core.records

    @property
    def inbound(self):
        return self.core.inbound

    @property
    def incarnation(self) -> str:
        return self.core.incarnation

    @property
    def sessions_dir(self):
        return self.core.sessions_dir

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        require_optional_parts(self.config)  # a missing extra, named up front
        load_plugin_modules(self.config.plugins)
        private_dir(self.sessions_dir, self.config.data_dir)  # 0700
        loop = asyncio.get_running_loop()
        # governance first (audit, ledger, proposals): restored sessions keep their reservations
        self.governor.start(live=self.recovery.checkpointed_sessions())
        self._expiry = loop.create_task(self.governor.expiry_loop())
        await self.recovery.restore()
        await loop.run_in_executor(None, self.recovery.sweep, self.core.live())
        self._sweeper = loop.create_task(self.recovery.sweep_loop())
        self.port = await self.server.start()
        self.core.connector = PeerConnector(self.config, self.tls)
        self.recovery.tell_failures()
        for s in self.recovery.initiated_unbegun:  # proposed before the process died, never begun
            self.initiator.continue_restored(s)
        self.recovery.initiated_unbegun.clear()
        # a test deployment (small keys allowed) runs key sizes only its first session tells: nothing is
        # made for that one; a real deployment's first session finds the protocols' default keys made
        self.next_root.start(prepare_first=not self.config.allow_insecure_keys)
        log.info("party %s listening on %s (port %d)", self.name, self.config.listen, self.port)
        if self.config.console.enabled:
            from smcdp.runtime.console.server import Console  # aiohttp only where a console runs

            self.console = Console(self, self.observatory)
            try:
                await self.console.start()
            except BaseException:
                await self.server.stop(grace=0)
                raise
        return self.port

    async def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Refuse new sessions, abort running ones (telling their peers), stop the server."""
        self.core.shutting_down = True
        await self.server.set_not_serving()
        if self.console is not None:
            await self.console.stop()
        running = [s for s in self.sessions.values() if not s.done.done()]
        for s in running:
            s.fail_threadsafe(SessionAborted(f"party {self.name} is shutting down", "UNAVAILABLE", self.name))
        if running:
            await asyncio.wait([asyncio.wrap_future(s.done) for s in running], timeout=grace)
        await self.server.stop(grace=1.0)
        await self.admission.settle(timeout=5.0)  # proposals whose governance is under way end before it closes
        if self._exchanges:  # audit heads being exchanged
            await asyncio.wait(list(self._exchanges), timeout=2.0)
        if self.core.connector is not None:
            await self.core.connector.close()
        for s in running:
            s.thread.join(timeout=1.0)
        for task in (self._expiry, self._sweeper):  # governance, retention
            if task is not None:
                task.cancel()
        self.recovery.stop()
        self.governor.stop()
        await close_engines()  # the compute engines (process pools, a Dask LocalCluster)
        self.next_root.close()  # keys prepared for sessions that will not come
        SHELF.clear()
        log.info("party %s stopped", self.name)

    def _busy(self) -> bool:
        """A session of this party is running (its offline work for the next one waits)."""
        return any(not s.done.done() for s in list(self.sessions.values()))

    def _prepare_next(self, root: Randomness) -> None:
        """Every plug-in's offline work for a session with ``root`` (smcdp.runtime.offline)."""
        for name, plugin in sorted(registered().items()):
            try:
                # the plug-ins take their inputs as strings, as a session passes them (Session._run)
                inputs = {k: str(v) for k, v in self.config.inputs.get(name, {}).items()}
                plugin.prepare_next(root, inputs, self.config.allow_insecure_keys)
            except Exception:  # noqa: BLE001 - the session does the work itself
                log.exception("protocol %s could not prepare the next session's offline work", name)

    # ------------------------------------------------------------ a session's end
    def _track(self, s: Session) -> None:
        """When ``s`` ends: settle its governance (before its end can be seen: :attr:`Session.on_end`), then drop
        it from memory."""
        loop = asyncio.get_running_loop()
        # (``s`` is this call's own parameter, never rebound: the lambdas close over it as it is)
        s.on_end = lambda record: self.governor.session_done(s.spec.session_id, record, began=s.has_run)
        s.done.add_done_callback(lambda _f: self._ended_threadsafe(loop, s))
        s.done.add_done_callback(lambda _f: self.next_root.poke())  # idle again: prepare the next

    def _ended_threadsafe(self, loop: asyncio.AbstractEventLoop, s: Session) -> None:
        try:
            loop.call_soon_threadsafe(self._ended, s)
        except RuntimeError:  # the server's loop is gone (shutdown)
            pass

    def _ended(self, s: Session) -> None:
        """Drop an ended session from memory: its buffers are freed, its record is written (or kept)."""
        if self.sessions.get(s.spec.session_id) is s:
            del self.sessions[s.spec.session_id]
            if getattr(s.channel, "budget", None) is not None:
                s.channel.budget.close()  # what it held leaves the party-wide ledger
            if s.channel is not None:
                self.ended.add(s.spec.session_id, s.channel)
            if s.record is not None:
                self.observatory.session_ended(s.record)
            if not self.core.shutting_down and self.core.connector is not None:  # witnessed audit heads
                task = asyncio.get_running_loop().create_task(self._exchange_heads(s))
                self._exchanges.add(task)
                task.add_done_callback(self._exchanges.discard)

    async def _exchange_heads(self, s: Session) -> None:
        """Send this party's signed audit head to every other participant; keep theirs (best effort)."""
        sid, loop, connector = s.spec.session_id, asyncio.get_running_loop(), self.core.connector
        assert connector is not None

        async def one(peer: str) -> None:
            try:
                mine = await loop.run_in_executor(None, self.governor.witnessing.signed_head, peer, sid)
                if mine is None:
                    return
                reply = await connector.mailbox(peer).Witness(
                    tpb.SignedAuditHead(
                        statement=mine.statement, signature=mine.signature, certificate=mine.certificate
                    ),
                    timeout=self.config.timeouts.connect_seconds,
                )
                if reply.statement:
                    theirs = SignedHead(reply.statement, reply.signature, reply.certificate)
                    await loop.run_in_executor(None, self.governor.witnessing.keep_witnessed, peer, theirs, sid)
            except Exception as exc:  # noqa: BLE001 - a witness is best effort; the next session tries again
                log.info("session %s: audit heads not exchanged with %s: %s", sid, peer, exc)

        await asyncio.gather(*(one(p) for p in sorted(set(s.spec.roles.values()) - {self.name})))
