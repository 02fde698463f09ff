"""The party process: one gRPC server, sessions, protocol plug-ins.

``smcdp party --config FILE`` (or ``python parties/<name>.py --config FILE``,
``python -m smcdp.runtime.party``) runs :func:`serve` until SIGTERM/SIGINT.

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

import argparse
import asyncio
import json
import logging
import os
import secrets
import signal
import sys
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import grpc

from smcdp.compute import close_engines
from smcdp.crypto.prepared import SHELF
from smcdp.errors import (
    InvalidMessage,
    PermissionDenied,
    PreconditionFailed,
    SessionAborted,
    SmcdpError,
    Unavailable,
)
from smcdp.net.config import ConfigError
from smcdp.net.grpc_channel import (
    AlreadyExists,
    NotFound,
    PeerConnector,
    call_with_retry,
    error_for_code,
    status_code_of,
    with_origin,
)
from smcdp.net.limits import InboundLedger
from smcdp.net.server import (
    PartyServer,
    PendingApproval,
    SessionHost,
    SessionSpec,
    check_namespace,
    initiator_of,
    namespaced,
    new_session_id,
    parse_roles,
    validate_session_id,
)
from smcdp.net.tls import TlsMaterial
from smcdp.plugins.base import registered
from smcdp.plugins.registry import get_plugin, load_plugin_modules
from smcdp.primitives.rng import Randomness
from smcdp.runtime.config import PartyConfig, load_config, require_optional_parts
from smcdp.runtime.console.readmodel import Observatory  # issue 18: console and metrics
from smcdp.runtime.durability.checkpoint import SUFFIX as CHECKPOINT_SUFFIX
from smcdp.runtime.durability.checkpoint import Checkpoint, CheckpointError
from smcdp.runtime.durability.retention import sweep as retention_sweep
from smcdp.runtime.durability.retention import sweep_period
from smcdp.runtime.governance.approvals import propose_until_decided
from smcdp.runtime.governance.gate import Governor
from smcdp.runtime.governance.witness import SignedHead
from smcdp.runtime.limits import (  # issue 19: limits; issue 24: resume is admission again
    EndedSessions,
    check_begin,
    check_journal,
    check_proposal,
    check_resume,
    session_budget,
)
from smcdp.runtime.logs import configure_logging, private_dir
from smcdp.runtime.offline import NextRoot
from smcdp.runtime.session import RESUMABLE_CODES, Session, error_dict, session_record, write_json_atomic
from smcdp.v1 import transport_pb2 as tpb

log = logging.getLogger("smcdp.party")

#: how long shutdown waits for aborted sessions to write their records
SHUTDOWN_GRACE = 10.0



class Party(SessionHost):
    """A party process's state: server, sessions, control-plane connections."""

    def __init__(self, config: PartyConfig, tls: TlsMaterial | None = None) -> None:
        self.config = config
        self.name = config.name
        self.tls = tls or TlsMaterial.load(config.tls.ca, config.tls.cert, config.tls.key)
        if self.tls.name != config.name:
            raise ConfigError(f"party.name is {config.name!r} but the certificate {config.tls.cert} "
                              f"is for {self.tls.name!r}")
        self.server = PartyServer(config, self.tls, self)
        #: live sessions only (prepared or running); an ended one leaves a closed channel in
        #: self.ended (late duplicates) and its record on disk (issue 19)
        self.sessions: OrderedDict[str, Session] = OrderedDict()
        self.ended = EndedSessions(config.limits.keep_ended_sessions)
        self._unwritten: dict[str, dict] = {}
        #: initiator -> its proposals and resumes being admitted now (no session yet): pending (issue 24)
        self._admitting: dict[str, int] = {}
        #: bytes the live sessions hold from each peer and in all (issue 24)
        self.inbound = InboundLedger(config.limits, self.name)
        #: sessions that failed at start-up (a damaged checkpoint or journal): their peers are told
        self._restored_failures: list[tuple[str, dict, dict]] = []
        self._tell: asyncio.Task | None = None
        self._connector: PeerConnector | None = None
        self._shutting_down = False
        self.port: int | None = None
        #: this process's incarnation: peers see it change when the party restarted
        self.incarnation = secrets.token_hex(6)
        self.governor = Governor(config, self.name, self.tls)   # governance (issue 14; witnesses: 24)
        self._exchanges: set[asyncio.Task] = set()            # audit heads sent at sessions' ends
        self._expiry: asyncio.Task | None = None
        self._sweeper: asyncio.Task | None = None
        self.observatory = Observatory(self)                  # issue 18: what the console reads
        self._reopening: set[str] = set()                     # sessions being resumed (issue 24)
        self._operator_tasks: set[asyncio.Task] = set()       # operators' start/resume calls, run detached
        self.console = None                                   # [console], started by start()
        self.next_root = NextRoot(self._prepare_next, self._busy)   # issue 27: offline work done while idle

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        require_optional_parts(self.config)                  # issue 29: a missing extra, named up front
        load_plugin_modules(self.config.plugins)
        private_dir(self.sessions_dir, self.config.data_dir)  # 0700 (issue 19)
        # governance first (audit, ledger, proposals): restored sessions keep their reservations
        self.governor.start(live=self._checkpointed_sessions())
        self._expiry = asyncio.get_running_loop().create_task(self.governor.expiry_loop())
        await self._restore_sessions()
        await asyncio.get_running_loop().run_in_executor(None, self._sweep, self._live())   # issue 24
        self._sweeper = asyncio.get_running_loop().create_task(self._sweep_loop())
        self.port = await self.server.start()
        self._connector = PeerConnector(self.config, self.tls)
        if self._restored_failures:
            self._tell = asyncio.get_running_loop().create_task(self._tell_restored_failures())
        # a test deployment (small keys allowed) runs key sizes only its first session tells: nothing is
        # made for that one; a real deployment's first session finds the protocols' default keys made
        self.next_root.start(prepare_first=not self.config.allow_insecure_keys)
        log.info("party %s listening on %s (port %d)", self.name, self.config.listen, self.port)
        if self.config.console.enabled:                        # issue 18
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
        self._shutting_down = True
        await self.server.set_not_serving()
        if self.console is not None:                           # issue 18
            await self.console.stop()
        running = [s for s in self.sessions.values() if not s.done.done()]
        for s in running:
            s.fail_threadsafe(SessionAborted(f"party {self.name} is shutting down", "UNAVAILABLE",
                                             self.name))
        if running:
            await asyncio.wait([asyncio.wrap_future(s.done) for s in running], timeout=grace)
        await self.server.stop(grace=1.0)
        if self._exchanges:                                   # issue 24: heads being exchanged
            await asyncio.wait(list(self._exchanges), timeout=2.0)
        if self._connector is not None:
            await self._connector.close()
        for s in running:
            s.thread.join(timeout=1.0)
        for task in (self._expiry, self._sweeper, self._tell):  # governance, retention, restored failures
            if task is not None:
                task.cancel()
        self.governor.stop()
        await close_engines()   # issue 17: the compute engines (process pools, a Dask LocalCluster)
        self.next_root.close()  # issue 27: keys prepared for sessions that will not come
        SHELF.clear()
        log.info("party %s stopped", self.name)

    def _busy(self) -> bool:
        """A session of this party is running (its offline work for the next one waits)."""
        return any(not s.done.done() for s in list(self.sessions.values()))

    def _prepare_next(self, root: Randomness) -> None:
        """Every plug-in's offline work for a session with ``root`` (issue 27, smcdp.runtime.offline)."""
        for name, plugin in sorted(registered().items()):
            try:
                plugin.prepare_next(root, self.config.inputs.get(name, {}), self.config.allow_insecure_keys)
            except Exception:   # noqa: BLE001 - the session does the work itself
                log.exception("protocol %s could not prepare the next session's offline work", name)

    @property
    def sessions_dir(self) -> Path:
        return self.config.data_dir / "sessions"

    def record_path(self, session_id: str) -> Path:
        return self.sessions_dir / f"{validate_session_id(session_id)}.json"

    # ------------------------------------------------------------ checkpoints
    async def _restore_sessions(self) -> None:
        """Reopen every session this party was in when its process died (before serving).

        A session whose checkpoint or journal does not verify fails on its own (its record says
        which file, the peers are told once the server runs); the party starts and serves the rest.
        """
        damaged: list[tuple[str, CheckpointError]] = []
        checkpoints = Checkpoint.scan(self.sessions_dir, self.name, damaged)
        for sid, exc in damaged:
            self._fail_restored(sid, exc, None)
        for cp in checkpoints:
            state = cp.meta["state"]
            if state not in ("prepared", "running"):
                continue  # failed resumably: waits for `smcdp session resume`
            try:
                refused = None
                try:   # issue 24: today's policy and budget, its restarts and deadline
                    self._readmit(cp, "restore")
                except SmcdpError as exc:
                    refused = exc
                s = self._reopen(cp, begun=state == "running" and refused is None)
            except SmcdpError as exc:
                self._fail_restored(cp.session_id, exc, cp)
                continue
            if refused is not None:   # it ends at once, telling its peers why; its role never runs
                await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)
                s.fail_threadsafe(refused)
                log.warning("session %s not restored: %s", cp.session_id, refused)
                continue
            if state == "prepared" and cp.meta["initiator"] == self.name:
                # the operator call that would have begun it died with the process
                await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)
                s.fail_threadsafe(SessionAborted(
                    f"the initiator {self.name} restarted before session {cp.session_id} began; "
                    f"continue it with 'smcdp session resume {cp.session_id}'", "UNAVAILABLE", self.name))
            log.warning("session %s restored from its checkpoint (restart %d); %s", cp.session_id,
                        cp.meta["restarts"], "replaying its role" if state == "running" else "waiting for Begin")
        for s in list(self.sessions.values()):
            await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)

    def _fail_restored(self, session_id: str, exc: SmcdpError, cp: Checkpoint | None) -> None:
        """A checkpointed session that cannot be reopened here: record its failure (``session status``,
        the console and the peers' heartbeats see it); resumable if its code is (a damaged journal)."""
        error = error_dict(exc, self.name)
        resumable = cp is not None and error["code"] in RESUMABLE_CODES
        log.error("session %s cannot be restored at %s%s: %s", session_id, self.name,
                  " (resumable: 'smcdp session resume' at its initiator)" if resumable else "", error["message"])
        m = cp.meta if cp is not None else (getattr(exc, "meta", None) or {})
        try:
            if cp is None:   # keep what is left for the operator to inspect, out of the way of the next start
                d = Checkpoint.directory(self.sessions_dir, session_id)
                d.rename(d.with_name(f"{session_id}.damaged"))
            elif resumable:
                cp.set_state("failed", resumable=True, error=error, failed_epoch=time.time())
                cp.close()
            else:
                cp.remove()
        except (OSError, SmcdpError) as err:
            log.error("session %s: cannot update its checkpoint: %s", session_id, err)
        record = dict(session_record(
            session_id=session_id, protocol=m.get("protocol"), party=self.name, role=m.get("role"),
            roles=m.get("roles") or {}, initiator=m.get("initiator"), params=m.get("params") or {},
            seed=m.get("seed"), timeout_seconds=m.get("timeout_seconds"), state="failed", error=error,
            restarts=int(m.get("restarts", 0)), resumable=resumable), damaged=cp is None and not m)
        if not self.record_path(session_id).exists():     # a published record is never overwritten
            try:
                write_json_atomic(self.record_path(session_id), record)
            except OSError as err:
                log.error("session %s: cannot write its record: %s", session_id, err)
                self._unwritten[session_id] = record
        if m.get("roles"):
            self._restored_failures.append((session_id, dict(m["roles"]), error))
        self.governor.session_done(session_id, record)

    async def _tell_restored_failures(self) -> None:
        """Tell the other participants of the sessions that failed at start-up (best effort, once)."""
        failures, self._restored_failures = self._restored_failures, []
        t = self.config.timeouts.connect_seconds

        async def one(sid: str, party: str, error: dict) -> None:
            try:
                await self._connector.mailbox(party).Abort(tpb.AbortRequest(
                    session_id=sid, code=error["code"], message=error["message"][:4000]), timeout=t)
            except grpc.RpcError as exc:
                log.info("session %s: %s was not told of its failure here: %s", sid, party, exc.code().name)

        await asyncio.gather(*(one(sid, p, error) for sid, roles, error in failures
                               for p in roles.values() if p != self.name))

    def _live(self) -> set[str]:
        """Sessions whose checkpoints are in use (on the server's loop)."""
        return set(self.sessions) | self._reopening

    def _sweep(self, live: set[str]) -> None:
        """Delete what sessions that ended here long ago left on disk (blocking; issue 24)."""
        retention = self.config.limits.failed_retention_seconds
        for gone in retention_sweep(self.sessions_dir, retention, live):
            self.governor.checkpoint_deleted(gone.as_dict(), retention)
        self.governor.prune(retention)

    async def _sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(sweep_period(self.config.limits.failed_retention_seconds))
            try:
                await loop.run_in_executor(None, self._sweep, self._live())
            except (SmcdpError, OSError) as exc:  # logged; the next round tries again
                log.error("deleting ended sessions' checkpoints: %s", exc)

    def _checkpointed_sessions(self) -> set[str]:
        """Sessions this party restores from a checkpoint now (a resumable one is admitted again
        when it is resumed: issue 24)."""
        checkpoints = Checkpoint.scan(self.sessions_dir, self.name)    # damaged ones: _restore_sessions
        return {cp.session_id for cp in checkpoints if cp.meta["state"] in ("prepared", "running")}

    @staticmethod
    def _spec_of(cp: Checkpoint) -> SessionSpec:
        m = cp.meta
        return SessionSpec(m["session_id"], m["protocol"], dict(m["roles"]), dict(m["params"]),
                           float(m["timeout_seconds"]), m.get("seed"))

    def _readmit(self, cp: Checkpoint, how: str, in_flight: Mapping[str, int] | None = None) -> None:
        """Issue 24: a session continued from its checkpoint is admitted again -- its restarts and
        unrenewed deadline, a slot and its journal against its envelope (a resume), today's policy
        and budget.  Blocking (files, ledger): at start-up or in an executor.  ``in_flight``: the
        proposals and resumes admitted meanwhile (they hold slots too)."""
        m = cp.meta
        spec, plugin = self._spec_of(cp), get_plugin(m["protocol"])

        def limits() -> None:
            check_resume(self.sessions.values() if how == "resume" else None, m["initiator"], m,
                         self.config.limits, self.name, in_flight=in_flight)
            if how == "resume":
                check_journal(session_budget(plugin, spec, m["role"], self.config.limits),
                              cp.journal.inbound_sizes())
        self.governor.readmit(m["initiator"], spec, plugin, m["role"], how, precheck=limits)

    def _reopen(self, cp: Checkpoint, *, begun: bool, resumed: bool = False) -> Session:
        """A session from its checkpoint (a restart: ``begun`` as it was; a resume: its journal repaired
        if damaged, and what it sent before sent again); its deadline is the one it has (issue 24: never
        renewed)."""
        m = cp.meta
        plugin = self.governor.wrap(get_plugin(m["protocol"]), m["session_id"])   # its reservation, if any
        cp.repair_journal = resumed
        cp.journal                                   # noqa: B018 - a damaged journal is named before it runs
        fields = {"restarts": int(m.get("restarts", 0)) + 1}
        if resumed:
            fields["resumes"] = int(m.get("resumes", 0)) + 1
            cp.ensure_reserve()
        cp.set_state("running" if begun else "prepared", resumable=False, **fields)
        spec = self._spec_of(cp)
        s = Session(self, spec, m["role"], plugin, m["initiator"], cp, begun=begun, resumed=resumed)
        self.sessions[spec.session_id] = s
        self._track(s)
        s.start_thread()
        return s

    # ---------------------------------------------------------- SessionHost
    def inbound_target(self, peer: str, session_id: str):
        s = self.sessions.get(session_id)
        channel = s.channel if s is not None else self.ended.get(session_id)
        if channel is None:
            self._refuse_ended(peer, session_id)
            raise self._no_session(peer, session_id)
        role = channel.role_of(peer)
        if role is None:
            raise self._no_session(peer, session_id)
        if role == channel.role:
            raise PermissionDenied("a party cannot deliver messages to itself")
        return channel, role

    def _no_session(self, peer: str, session_id: str) -> PreconditionFailed:
        """What ``peer`` hears of a session it holds no role in: the same words whether the id exists here
        or not (issue 24: a non-participant's Heartbeat, Deliver, Begin or Abort told the two apart)."""
        return PreconditionFailed(f"party {self.name!r} has no session {session_id!r} in which {peer!r} "
                                  "holds a role (never proposed here, or this party restarted since)")

    def inbound_open(self, peer: str, session_id: str) -> None:   # issue 24: streams of ended sessions end
        s = self.sessions.get(session_id)
        channel = s.channel if s is not None else self.ended.get(session_id)
        if channel is None:
            self.inbound_target(peer, session_id)   # raises: the session is gone
        else:
            channel.check_open()

    def inbound_delivered(self, peer: str, nbytes: int, duplicate: bool) -> None:   # issue 18
        self.observatory.inbound_delivered(peer, nbytes, duplicate)

    def inbound_refused(self, peer: str | None, code: str) -> None:                 # issue 18
        self.observatory.inbound_refused(peer, code)

    def _refuse_ended(self, peer: str, session_id: str) -> None:
        """A message for a session that ended here long ago: its record on disk says how (to a
        participant of that session only; anyone else learns nothing about it)."""
        try:
            record = json.loads(self.record_path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return
        if not isinstance(record, dict) or peer not in (record.get("roles") or {}).values():
            return
        err = record.get("error")
        if isinstance(err, dict) and err.get("code"):
            raise SessionAborted(f"session {session_id} already ended at {self.name}: {err.get('message', '')}",
                                 str(err["code"]), str(err.get("origin") or self.name))
        raise PreconditionFailed(f"session {session_id} has already ended at {self.name}")

    async def propose(self, peer: str, spec: SessionSpec) -> str:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
        check_namespace(peer, spec.session_id)   # issue 24: no member can take another's session ids
        roles = parse_roles(spec.roles)
        if peer not in roles.values():
            raise PermissionDenied(f"party {peer!r} proposed session {spec.session_id!r} but holds "
                                   "no role in it")
        mine = [r for r, p in roles.items() if p == self.name]
        if not mine:
            raise InvalidMessage(f"party {self.name!r} holds no role in the proposed session "
                                 f"{spec.session_id!r} (roles: {roles})")
        unknown = sorted(p for p in roles.values() if p != self.name and p not in self.config.peers)
        if unknown:
            raise PreconditionFailed(
                f"party {self.name!r} has no address for {', '.join(unknown)} "
                f"(add them to [peers] in {self.config.source or 'its configuration'})")
        existing = self.sessions.get(spec.session_id)
        if existing is None:  # issue 19: slots, timeout and seed rules before any validation work
            check_proposal(self.sessions.values(), peer, spec, self.config.limits, self.name, self._admitting)
        # issue 24: a proposal being admitted holds a pending slot of its initiator until its session exists
        registered = self._admission(peer)
        try:
            return await self._admit(peer, spec, roles, mine, registered)
        finally:
            registered()

    def _admission(self, initiator: str) -> Callable[[], None]:
        """Count an admission of ``initiator`` as pending (``self._admitting``) until the returned function is
        called -- when its session is registered, or the admission ends without one (idempotent)."""
        self._admitting[initiator] = self._admitting.get(initiator, 0) + 1
        done = False

        def release() -> None:
            nonlocal done
            if not done:
                done = True
                self._admitting[initiator] -= 1
                if not self._admitting[initiator]:
                    del self._admitting[initiator]
        return release

    async def _admit(self, peer: str, spec: SessionSpec, roles: dict[str, str], mine: list[str],
                     registered: Callable[[], None]) -> str | PendingApproval:
        plugin = get_plugin(spec.protocol)
        try:
            params = plugin.validate_params(dict(spec.params), dict(roles))
            # issue 24: the session's byte envelope must follow from the parameters, now rather than in
            # the session's thread
            plugin.traffic_envelope(params, dict(roles), mine[0])
        except SmcdpError:
            raise
        except (ValueError, TypeError, KeyError, ArithmeticError) as exc:   # a plug-in's gap: still the
            raise InvalidMessage(f"invalid parameters for {spec.protocol!r}: "  # caller's parameters
                                 f"{type(exc).__name__}: {exc}") from None
        repeated = self._repeated(peer, spec, roles, params)
        if repeated is not None:
            return repeated
        if spec.session_id in self.sessions or self.record_path(spec.session_id).exists() \
                or Checkpoint.directory(self.sessions_dir, spec.session_id).exists():
            raise AlreadyExists(f"session {spec.session_id!r} already exists at party {self.name!r}")
        try:
            json.dumps(params)
        except (TypeError, ValueError) as exc:
            raise SmcdpError(f"plugin {spec.protocol!r} normalised params to non-JSON: {exc}") from None
        spec = SessionSpec(spec.session_id, spec.protocol, roles, params, spec.timeout_seconds,
                           spec.seed)
        # --- governance (issue 14): seed rule, policy, approval, budget reservation, audit.
        # Refuses before any input is read; may answer "pending" (operator approval).
        admitted = await asyncio.get_running_loop().run_in_executor(
            None, self.governor.admit, peer, spec, plugin, mine[0])
        if isinstance(admitted, PendingApproval):
            return admitted
        repeated = self._repeated(peer, spec, roles, params)   # admitted twice concurrently
        if repeated is not None:
            return repeated
        if spec.session_id in self.sessions:   # another proposal took this id meanwhile (its reservation)
            raise AlreadyExists(f"session {spec.session_id!r} already exists at party {self.name!r}")
        spec, plugin = admitted, self.governor.wrap(plugin, spec.session_id)
        # --- end governance
        # the role's randomness root: this party's own secret, or -- only where its policy allows
        # seeded sessions (the governor refused a seed otherwise) -- the experiment seed
        randomness = (await asyncio.get_running_loop().run_in_executor(None, self.next_root.take)
                      if spec.seed is None else Randomness.from_seed(spec.seed))
        cp = Checkpoint.create(
            self.sessions_dir, session_id=spec.session_id, protocol=spec.protocol, roles=roles, params=params,
            timeout_seconds=spec.timeout_seconds, seed=spec.seed, initiator=peer, role=mine[0],
            randomness=randomness)
        s = Session(self, spec, mine[0], plugin, peer, cp)
        self.sessions[spec.session_id] = s
        registered()                  # it holds its slot as a session from now on, not twice
        self._track(s)
        s.start_thread()
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)
        if s.channel is None:
            self.governor.abandon(spec.session_id, "its thread did not start")
            raise SmcdpError(f"session {spec.session_id}: its thread did not start")
        log.info("session %s (%s) proposed by %s; %s plays %s", spec.session_id, spec.protocol,
                 peer, self.name, mine[0])
        return mine[0]

    def _repeated(self, peer: str, spec: SessionSpec, roles: Mapping[str, str], params: Mapping[str, Any]
                  ) -> str | None:
        """The role of a live session this very proposal already created (a retried Propose)."""
        existing = self.sessions.get(spec.session_id)
        if existing is not None and existing.initiator == peer and existing.spec.protocol == spec.protocol \
                and dict(existing.spec.roles) == dict(roles) and dict(existing.spec.params) == params \
                and existing.spec.seed == spec.seed and not existing.done.done():
            # A retried Propose (the first reply was lost or late): the same proposal is accepted again.
            log.info("session %s: repeated proposal from %s accepted again", spec.session_id, peer)
            return existing.role
        return None

    def _track(self, s: Session) -> None:
        """When ``s`` ends: settle its governance, then drop it from memory (issue 19)."""
        loop = asyncio.get_running_loop()
        s.done.add_done_callback(lambda f, s=s: self.governor.session_done(s.spec.session_id, f.result(),
                                                                           began=s.has_run))
        s.done.add_done_callback(lambda _f, s=s: self._ended_threadsafe(loop, s))
        s.done.add_done_callback(lambda _f: self.next_root.poke())   # idle again: prepare the next (issue 27)

    def _ended_threadsafe(self, loop: asyncio.AbstractEventLoop, s: Session) -> None:
        try:
            loop.call_soon_threadsafe(self._ended, s)
        except RuntimeError:  # the server's loop is gone (shutdown)
            pass

    def _ended(self, s: Session) -> None:
        """Drop an ended session from memory: its buffers are freed, its record is on disk."""
        if self.sessions.get(s.spec.session_id) is s:
            del self.sessions[s.spec.session_id]
            if getattr(s.channel, "budget", None) is not None:
                s.channel.budget.close()       # what it held leaves the party-wide ledger (issue 24)
            if s.channel is not None:
                self.ended.add(s.spec.session_id, s.channel)
            if (s.record or {}).get("record_write_error"):  # keep what could not be written
                self._unwritten[s.spec.session_id] = s.record
            if s.record is not None:
                self.observatory.session_ended(s.record)       # issue 18: metrics
            if not self._shutting_down and self._connector is not None:   # issue 24: witnessed heads
                task = asyncio.get_running_loop().create_task(self._exchange_heads(s))
                self._exchanges.add(task)
                task.add_done_callback(self._exchanges.discard)

    async def _exchange_heads(self, s: Session) -> None:
        """Send this party's signed audit head to every other participant; keep theirs (best effort)."""
        sid, loop = s.spec.session_id, asyncio.get_running_loop()

        async def one(peer: str) -> None:
            try:
                mine = await loop.run_in_executor(None, self.governor.signed_head, peer, sid)
                if mine is None:
                    return
                reply = await self._connector.mailbox(peer).Witness(
                    tpb.SignedAuditHead(statement=mine.statement, signature=mine.signature,
                                        certificate=mine.certificate), timeout=self.config.timeouts.connect_seconds)
                if reply.statement:
                    theirs = SignedHead(reply.statement, reply.signature, reply.certificate)
                    await loop.run_in_executor(None, self.governor.keep_witnessed, peer, theirs, sid)
            except Exception as exc:  # noqa: BLE001 - a witness is best effort; the next session tries again
                log.info("session %s: audit heads not exchanged with %s: %s", sid, peer, exc)
        await asyncio.gather(*(one(p) for p in sorted(set(s.spec.roles.values()) - {self.name})))

    async def witness(self, peer: str, statement: bytes, signature: bytes, certificate: bytes
                      ) -> tuple[bytes, bytes, bytes] | None:
        head = SignedHead(statement, signature, certificate)
        sid = validate_session_id(head.claims()["session"])
        took_part = await self._took_part(peer, sid)
        mine = await asyncio.get_running_loop().run_in_executor(None, self.governor.witness, peer, head, took_part)
        return None if mine is None else (mine.statement, mine.signature, mine.certificate)

    async def witnessed(self, peer: str) -> list[tuple[bytes, bytes, bytes]]:
        heads = await asyncio.get_running_loop().run_in_executor(None, self.governor.witnesses.held_for, peer)
        return [(h.statement, h.signature, h.certificate) for h in heads]

    async def _took_part(self, peer: str, session_id: str) -> bool:
        s = self.sessions.get(session_id)
        roles = s.spec.roles if s is not None else getattr(self.ended.get(session_id), "roles", None)
        if roles is None:
            try:
                rec = json.loads(await asyncio.get_running_loop().run_in_executor(
                    None, self.record_path(session_id).read_text))
                roles = rec.get("roles") if isinstance(rec, dict) else None
            except (OSError, ValueError):
                roles = None
        return isinstance(roles, dict) and peer in roles.values()

    def _session_for(self, peer: str, session_id: str) -> Session | None:
        """The live session, or None if it ended here (after checking the peer held a role)."""
        s = self.sessions.get(session_id)
        roles = s.spec.roles if s is not None else getattr(self.ended.get(session_id), "roles", None)
        if roles is None or peer not in roles.values():
            raise self._no_session(peer, session_id)
        return s

    async def begin(self, peer: str, session_id: str) -> None:
        s = self._session_for(peer, session_id)
        if s is None or s.done.done():
            raise PreconditionFailed(f"session {session_id!r} has already ended at {self.name!r}")
        if peer != s.initiator:
            raise PermissionDenied(f"only the initiator {s.initiator!r} may begin session {session_id!r}")
        if s.state == "prepared" and not s.begun:
            try:
                check_begin(self.sessions.values(), s.initiator, self.config.limits, self.name)
            except SmcdpError as exc:
                s.fail_threadsafe(exc)
                s.begin_threadsafe()
                raise
            s.begun = True    # counts as running from now on (issue 24: concurrent Begins all passed)
        s.begin_threadsafe()

    async def abort(self, peer: str, session_id: str, code: str, message: str,
                    culprit: str | None = None) -> None:
        loop = asyncio.get_running_loop()
        if session_id not in self.sessions and await loop.run_in_executor(   # governance: a waiting
                None, self.governor.withdraw, peer, session_id, message):      # proposal is withdrawn
            return
        s = self._session_for(peer, session_id)
        if s is None:  # ended here already: nothing to abort
            return
        role = next(r for r, p in s.spec.roles.items() if p == peer)
        if culprit is not None and culprit not in s.spec.roles.values():
            raise InvalidMessage(f"Abort of session {session_id!r} names {culprit!r}, who holds no role in it")
        await loop.run_in_executor(None, self.governor.aborted, peer, session_id, code, message)
        s.fail_threadsafe(SessionAborted(
            f"session {session_id} aborted by {peer} (role {role}): {message}", code, culprit or peer))

    async def heartbeat(self, peer: str, session_id: str, incarnation: str, round: int) -> dict:
        unknown = {"state": "unknown", "incarnation": self.incarnation, "round": 0, "code": "", "culprit": ""}
        s = self.sessions.get(session_id)
        if s is not None:
            if peer not in s.spec.roles.values():
                return unknown         # as for an id that does not exist here (issue 24)
            err = (s.record or {}).get("error") or {}
            return {"state": s.state, "incarnation": self.incarnation, "round": 0 if s.channel is None else
                    max(0, s.channel.round), "code": err.get("code", ""), "culprit": err.get("origin", "")}
        try:
            rec = json.loads(self.record_path(session_id).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return unknown
        if not isinstance(rec, dict):
            return unknown
        if not (rec.get("damaged") and not rec.get("roles")) and peer not in (rec.get("roles") or {}).values():
            # the same answer as for an id that does not exist here (issue 24).  A session whose
            # checkpoint was damaged here has no trustworthy roles: any party asking about it learns that
            # it failed here, nothing more
            return unknown
        err = rec.get("error") or {}
        return {"state": rec.get("state", "unknown"), "incarnation": self.incarnation, "round": 0,
                "code": err.get("code", ""), "culprit": err.get("origin", "")}

    async def get_status(self, session_id: str) -> dict:
        s = self.sessions.get(session_id)
        if s is not None:
            return s.status()
        waiting = self.governor.waiting_status(session_id)   # issue 24: waits for this operator
        if waiting is not None:
            return dict(waiting, incarnation=self.incarnation)
        rec = await self.get_result(session_id)
        return {"session_id": session_id, "protocol": rec.get("protocol"), "party": self.name,
                "role": rec.get("role"), "state": rec.get("state"), "round": rec.get("round"), "step": "",
                "restarts": rec.get("restarts", 0), "incarnation": self.incarnation, "peers": {},
                "error": rec.get("error"), "resumable": bool(rec.get("resumable"))}

    def _resumable_checkpoint(self, session_id: str, peer: str | None = None) -> Checkpoint:
        """The checkpoint of a session that failed resumably.  ``peer``: the party asking (None: this party's
        operator); a peer that holds no role in the session hears what it would of a missing one."""
        missing = PreconditionFailed(f"party {self.name!r} has no checkpoint of session {session_id!r} "
                                     "(it never ran here, or it ended in a way that cannot be continued)")
        d = Checkpoint.directory(self.sessions_dir, session_id)
        if not d.is_dir():
            if self.record_path(session_id).exists():
                rec = json.loads(self.record_path(session_id).read_text(encoding="utf-8"))
                if rec.get("state") == "succeeded" and (peer is None or peer in (rec.get("roles") or {}).values()):
                    raise AlreadyExists(f"session {session_id!r} already succeeded at party {self.name!r}")
            raise missing
        cp = Checkpoint.load(d)
        if peer is not None and peer not in cp.meta["roles"].values():
            raise missing
        if cp.meta["state"] != "failed" or not cp.meta.get("resumable"):
            raise PreconditionFailed(f"session {session_id!r} is {cp.meta['state']} at party {self.name!r}, "
                                     "not failed resumably")
        return cp

    async def resume(self, peer: str, session_id: str) -> str:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
        s = self.sessions.get(session_id)
        if s is not None and not s.done.done() and peer in s.spec.roles.values():
            if peer != s.initiator:
                raise PermissionDenied(f"only the initiator {s.initiator!r} may resume session {session_id!r}")
            return s.role  # a repeated Resume
        cp = self._resumable_checkpoint(session_id, peer)
        if peer != cp.meta["initiator"]:
            raise PermissionDenied(f"only the initiator {cp.meta['initiator']!r} may resume session "
                                   f"{session_id!r}")
        s = await self._resume_locally(cp)
        log.warning("session %s reopened from its checkpoint at %s's request", session_id, peer)
        return s.role

    async def _resume_locally(self, cp: Checkpoint) -> Session:
        """Admit a resumably failed session again (issue 24) and reopen it, waiting for Begin."""
        sid = cp.session_id
        if sid in self._reopening:
            raise Unavailable(f"session {sid!r} is being resumed at party {self.name!r}; try again shortly")
        self._reopening.add(sid)
        before = dict(self._admitting)     # admissions that started earlier: this one counts them
        registered = self._admission(cp.meta["initiator"])    # and later ones count it
        try:
            cp.repair_journal = True   # a damaged journal is rewritten with its intact records (issue 26)
            await asyncio.get_running_loop().run_in_executor(None, self._readmit, cp, "resume", before)
            if not cp.dir.is_dir():   # the retention removed it meanwhile
                raise PreconditionFailed(f"party {self.name!r} no longer has a checkpoint of session {sid!r}")
            s = self._reopen(cp, begun=False, resumed=True)
        finally:
            self._reopening.discard(sid)
            registered()
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)
        return s

    async def resume_session(self, session_id: str) -> dict:
        """Operator: continue a resumably failed session this party initiated (every participant replays)."""
        return await self._detached(self._resume_session(session_id))

    async def _resume_session(self, session_id: str) -> dict:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
        cp = self._resumable_checkpoint(session_id)
        if cp.meta["initiator"] != self.name:
            raise PermissionDenied(f"session {session_id!r} was initiated by {cp.meta['initiator']!r}; "
                                   "only its operator can resume it")
        s = await self._resume_locally(cp)
        others = [p for p in s.spec.roles.values() if p != self.name]
        outcomes = await asyncio.gather(*(self._call(p, "Resume", tpb.SessionRef(session_id=session_id), s)
                                          for p in others), return_exceptions=True)
        done_already = {p for p, e in zip(others, outcomes) if isinstance(e, AlreadyExists)}
        failures = [(p, e) for p, e in zip(others, outcomes)
                    if isinstance(e, BaseException) and p not in done_already]
        if failures:
            failure = _failure_of("Resume", failures)
            if status_code_of(failure).name == "RESOURCE_EXHAUSTED":
                # issue 24: no slot or budget there now: the session stays resumable
                origin = getattr(failure, "origin", None)
                failure = with_origin(error_for_code(
                    "UNAVAILABLE", f"{failure} (RESOURCE_EXHAUSTED; the session stays resumable)", origin), origin)
            s.fail_threadsafe(failure)
            s.begin_threadsafe()
        else:
            await self._begin_all(s, [p for p in others if p not in done_already])
        return await asyncio.wrap_future(s.done)

    async def _call(self, party: str, method: str, request, s: Session):
        stub = self._connector.mailbox(party)
        return await call_with_retry(f"{method} of session {s.spec.session_id}", party, self.config.address_of(party),
                              s.deadline, lambda t: getattr(stub, method)(request, timeout=t),
                              self.config.timeouts.connect_seconds)

    async def _begin_all(self, s: Session, parties: Sequence[str]) -> None:
        ref = tpb.SessionRef(session_id=s.spec.session_id)
        outcomes = await asyncio.gather(*(self._call(p, "Begin", ref, s) for p in parties), return_exceptions=True)
        failures = [(p, e) for p, e in zip(parties, outcomes, strict=True) if isinstance(e, BaseException)]
        if failures:
            s.fail_threadsafe(_failure_of("Begin", failures))
        s.begin_threadsafe()

    async def _detached(self, coro) -> Any:
        """Run an operator's ``coro`` (start or resume a session) as a task of the party's own.

        gRPC cancels a handler whose caller went away (a closed CLI, a short deadline).  A session must
        not depend on that: cancelled between its proposals and its Begins it would hang at every
        participant until its deadline.  The task holds a reference here until it ends; the handler
        only waits for it, shielded.
        """
        task = asyncio.get_running_loop().create_task(coro)
        self._operator_tasks.add(task)

        def settled(t: asyncio.Task) -> None:
            self._operator_tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:   # retrieved: the caller may be gone
                log.debug("operator call ended with %s", t.exception())
        task.add_done_callback(settled)
        return await asyncio.shield(task)

    async def start_session(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any],
                            session_id: str | None = None, timeout: float | None = None,
                            seed: int | None = None) -> dict:
        return await self._detached(self._start_session(protocol, roles, params, session_id, timeout, seed))

    async def _start_session(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any],
                             session_id: str | None, timeout: float | None, seed: int | None) -> dict:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
        roles = parse_roles(roles)
        if self.name not in roles.values():
            raise InvalidMessage(f"the initiating party {self.name!r} must hold a role in the session "
                                 f"(roles: {roles})")
        sid = namespaced(self.name, session_id or new_session_id(protocol))      # issue 24
        spec = SessionSpec(sid, protocol, roles, dict(params), timeout or
                           self.config.timeouts.session_seconds, seed)
        await self.propose(self.name, spec)
        s = self.sessions[sid]
        msg = tpb.SessionSpec(session_id=sid, protocol=protocol, roles=roles,
                              params_json=json.dumps(s.spec.params), timeout_seconds=spec.timeout_seconds)
        if seed is not None:
            msg.seed = seed
        others = sorted(p for p in roles.values() if p != self.name)
        if self._reserves_budget(s):
            failures = await self._propose_in_order(s, msg, others)
        else:
            failures = await self._propose_at_once(s, msg, others)
        if failures:
            s.fail_threadsafe(_failure_of("Propose", failures))
            s.begin_threadsafe()
        else:
            await self._begin_all(s, others)
        return await asyncio.wrap_future(s.done)

    @staticmethod
    def _reserves_budget(s: Session) -> bool:
        """Does the session reserve privacy budget at its data parties (a DP release)?  A plug-in that
        does not describe its sessions is taken to (its proposals then go in order)."""
        try:
            summary = get_plugin(s.spec.protocol).summary(s.spec.params, s.spec.roles)
        except Exception:  # noqa: BLE001 - a plug-in's summary failing: the order that is safe for budgets
            return True
        return summary is None or summary.epsilon is not None

    async def _propose_in_order(self, s: Session, msg: tpb.SessionSpec, others: Sequence[str]
                                ) -> list[tuple[str, BaseException]]:
        """One participant at a time, in name order (docs/governance.md §4): concurrent sessions then
        contend for budgets in the same order, so a session refused at one party never holds another
        party's budget that a later session needed.  A Propose is repeated while the party's operator
        decides.  Returns the refusal, if any."""
        for i, p in enumerate(others):
            try:
                await propose_until_decided(lambda p=p: self._call(p, "Propose", msg, s), p, s.spec.session_id,
                                            lambda: s.deadline,
                                            lambda p=p, i=i: self._waiting_for(s, p, others[:i]))
            except Exception as exc:  # noqa: BLE001 - reported by the caller, naming the party
                return [(p, exc)]
        return []

    async def _propose_at_once(self, s: Session, msg: tpb.SessionSpec, others: Sequence[str]
                               ) -> list[tuple[str, BaseException]]:
        """Every participant at once (issue 26): a session that reserves no budget gives concurrent
        sessions no budget to contend for in an order, and its set-up then costs one round trip instead
        of one per participant.  After a refusal, proposals that wait for an operator are not repeated,
        calls under way get ``timeouts.connect_seconds`` to finish (so that the abort which follows finds
        the sessions they prepare), and calls still going then -- retrying a party that cannot be reached
        -- are stopped: the refusal is reported within seconds, not at the session's deadline.  Returns
        the refusals, in name order."""
        given_up = asyncio.Event()
        accepted: list[str] = []

        async def one(p: str) -> None:
            try:
                if await propose_until_decided(lambda: self._call(p, "Propose", msg, s), p, s.spec.session_id,
                                               lambda: s.deadline,
                                               lambda: self._waiting_for(s, p, [q for q in others if q in accepted]),
                                               given_up) is not None:
                    accepted.append(p)
            except Exception:
                given_up.set()
                raise

        if not others:            # the initiator holds every role
            return []
        tasks = [asyncio.ensure_future(one(p)) for p in others]
        stop = asyncio.ensure_future(given_up.wait())
        try:
            while not given_up.is_set() and not all(t.done() for t in tasks):
                await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait(tasks, timeout=self.config.timeouts.connect_seconds)
        finally:
            stop.cancel()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        # a call stopped because another party refused is no refusal of its own
        return [(p, t.exception()) for p, t in zip(others, tasks, strict=True)
                if not t.cancelled() and t.exception() is not None]

    def resolve_session_id(self, session_id: str) -> str:
        """The session an operator names: its full id, or a name without the initiator's prefix -- this
        party's own session of that name first, else the one session of that name (issue 24)."""
        if self._holds(session_id):
            return session_id
        own = f"{self.name}.{session_id}"
        if initiator_of(session_id) != self.name and self._holds(own):
            return own
        found = sorted(self._named(session_id))
        if len(found) > 1:
            raise InvalidMessage(f"party {self.name!r} holds several sessions named {session_id!r} "
                                 f"({', '.join(found)}): give the full id")
        return found[0] if found else session_id

    def _holds(self, session_id: str) -> bool:
        return (session_id in self.sessions or session_id in self._unwritten
                or self.record_path(session_id).exists()
                or Checkpoint.directory(self.sessions_dir, session_id).is_dir()
                or self.governor.proposals.get(session_id) is not None)

    def _named(self, name: str) -> set[str]:
        """Ids ``<party>.<name>`` of the sessions and proposals this party holds."""
        ids = set(self.sessions) | set(self._unwritten) | {p.session_id for p in self.governor.proposals.all()}
        for suffix in (".json", CHECKPOINT_SUFFIX):     # records, checkpoints
            ids |= {p.name[:-len(suffix)] for p in self.sessions_dir.glob(f"*.{name}{suffix}")}
        return {i for i in ids if initiator_of(i) is not None and i.partition(".")[2] == name}

    async def _waiting_for(self, s: Session, party: str, accepted: Sequence[str]) -> None:
        """``party``'s operator decides (issue 24): this party and those that accepted keep waiting."""
        s.await_approval(party)
        ref = tpb.WaitingNotice(session_id=s.spec.session_id, party=party)

        async def tell(p: str) -> None:
            try:
                await self._connector.mailbox(p).Waiting(ref, timeout=self.config.timeouts.connect_seconds)
            except Exception as exc:  # noqa: BLE001 - best effort: it repeats with the next poll
                log.info("session %s: could not tell %s that it waits for %s: %s", s.spec.session_id, p,
                         party, exc)
        await asyncio.gather(*(tell(p) for p in accepted))

    async def waiting(self, peer: str, session_id: str, party: str) -> None:
        s = self._session_for(peer, session_id)
        if s is None or s.done.done():
            raise PreconditionFailed(f"session {session_id!r} has already ended at {self.name!r}")
        if peer != s.initiator:
            raise PermissionDenied(f"only the initiator {s.initiator!r} may say what session {session_id!r} "
                                   "waits for")
        if party not in s.spec.roles.values() or party in (peer, self.name):
            raise InvalidMessage(f"session {session_id!r} cannot wait for {party!r}: not another participant")
        if s.state == "prepared":
            s.await_approval(party)

    async def get_result(self, session_id: str) -> dict:
        s = self.sessions.get(session_id)
        if s is not None:
            return s.snapshot()
        if session_id in self._unwritten:
            return self._unwritten[session_id]
        path = self.record_path(session_id)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound(f"party {self.name!r} has no session {session_id!r}") from None
        except (OSError, ValueError) as exc:
            raise SmcdpError(f"cannot read the record of session {session_id!r}: {exc}") from None

    # ------------------------------------------------------- governance (operator)
    async def list_sessions(self, pending_only: bool) -> list[dict]:
        live = {sid: s.snapshot() for sid, s in list(self.sessions.items())}
        return await asyncio.get_running_loop().run_in_executor(
            None, self.governor.list_sessions, pending_only, live)

    async def show_session(self, session_id: str) -> dict:
        try:
            record = await self.get_result(session_id)
        except NotFound:
            record = None
        return await asyncio.get_running_loop().run_in_executor(None, self.governor.show, session_id, record)

    async def decide(self, session_id: str, approve: bool, reason: str) -> dict:
        loop = asyncio.get_running_loop()
        if approve:
            return await loop.run_in_executor(None, self.governor.approve, session_id)
        return await loop.run_in_executor(None, self.governor.reject, session_id, reason)


def _failure_of(call: str, failures: Sequence[tuple[str, BaseException]]) -> SmcdpError:
    """The failure of a call to several participants, with the first one's code and origin: the party that
    refused or could not be reached (or the party its error names), not the caller."""
    party, first = failures[0]
    origin = getattr(first, "origin", None) or party
    text = "; ".join(f"{p}: {e}" for p, e in failures)
    return with_origin(error_for_code(status_code_of(first).name, f"{call} failed: {text}", origin), origin)


# ---------------------------------------------------------------- process
async def _serve(config: PartyConfig, ready_file: Path | None = None) -> int:
    party = Party(config)
    await party.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        write_json_atomic(ready_file, {"party": party.name, "port": party.port, "pid": os.getpid(),
                                       "console": party.console.url if party.console is not None else None})
    # through the log, so that [logging] format = "json" gives nothing but JSON lines
    log.info("party %s serving on %s (port %d); stop with SIGTERM or Ctrl-C", party.name, config.listen,
             party.port)
    await stop.wait()
    log.info("party %s: shutting down", party.name)
    await party.stop()
    return 0


def serve(config_path: str | os.PathLike, expect_name: str | None = None,
          ready_file: str | os.PathLike | None = None, log_level: str | None = None) -> int:
    """Run a party process until SIGTERM/SIGINT.  Returns the exit status.

    Logging follows the config's ``[logging]`` (``log_level`` from the command line wins).
    """
    config = load_config(config_path)
    if expect_name is not None and config.name != expect_name:
        raise ConfigError(f"{config_path} configures party {config.name!r}, but this launcher "
                          f"runs {expect_name!r}")
    configure_logging(config.logging.format, log_level or config.logging.level)
    os.umask(0o077)  # issue 19: whatever this process creates is its own unless it says otherwise
    return asyncio.run(_serve(config, Path(ready_file) if ready_file else None))


def main(argv: Sequence[str] | None = None, expect_name: str | None = None) -> int:
    """Entry point of ``parties/<name>.py`` and ``python -m smcdp.runtime.party``."""
    ap = argparse.ArgumentParser(
        prog=f"parties/{expect_name}.py" if expect_name else "smcdp-party",
        description="Run a smcdp party process until SIGTERM/SIGINT.")
    ap.add_argument("--config", required=True, help="the party's TOML configuration")
    ap.add_argument("--ready-file", help="write {party, port, pid} JSON here once serving")
    ap.add_argument("--log-level", default=None, help="overrides [logging] level")
    args = ap.parse_args(argv)
    setup_logging(args.log_level or "INFO")
    try:
        return serve(args.config, expect_name, args.ready_file, args.log_level)
    except SmcdpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def setup_logging(level: str = "INFO") -> None:
    configure_logging("text", level)



if __name__ == "__main__":  # python -m smcdp.runtime.party --config FILE
    sys.exit(main())
