"""Recovery: sessions continued from their checkpoints, and what ended sessions leave on disk.

* At start-up, before the party serves, :meth:`Recovery.restore` reopens every session the process was
  in when it died (docs/fault-tolerance.md); one whose checkpoint or journal does not verify fails on
  its own, naming the file, and its peers are told once the server runs.
* ``smcdp session resume`` reopens a session that failed resumably (:meth:`Recovery.resume_locally`),
  admitted again like a new proposal: today's policy and budget, a slot, its journal against its
  envelope, its restarts and its (never renewed) deadline.
* The retention deletes what sessions that ended long ago left (:meth:`Recovery.sweep_loop`).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Mapping

import grpc

from smcdp.errors import InvalidMessage, NotAdmittedNow, PreconditionFailed, SmcdpError, Unavailable
from smcdp.net.grpc_channel import AlreadyExists
from smcdp.net.server import SessionSpec, validate_session_id
from smcdp.plugins.registry import get_plugin
from smcdp.runtime.core import PartyCore
from smcdp.runtime.durability.checkpoint import Checkpoint, CheckpointError
from smcdp.runtime.durability.retention import sweep as retention_sweep
from smcdp.runtime.durability.retention import sweep_period
from smcdp.runtime.governance.policy import OutOfBounds, PolicyDenied
from smcdp.runtime.limits import check_journal, check_resume, restart_culprit, session_budget
from smcdp.runtime.session import RESUMABLE_CODES, Session, error_dict, session_record
from smcdp.states import SessionState
from smcdp.v1 import transport_pb2 as tpb

log = logging.getLogger("smcdp.party")


def spec_of(cp: Checkpoint) -> SessionSpec:
    m = cp.meta
    return SessionSpec(
        m["session_id"], m["protocol"], dict(m["roles"]), dict(m["params"]), float(m["timeout_seconds"]), m.get("seed")
    )


class Recovery:
    """Reopening checkpointed sessions at a party (``core``) and deleting what ended ones left."""

    def __init__(self, core: PartyCore) -> None:
        self.core = core
        #: sessions that failed at start-up (a damaged checkpoint or journal): their peers are told
        self._failures: list[tuple[str, dict, dict]] = []
        self._tell: asyncio.Task | None = None
        #: restored sessions this party initiated that had not begun: its initiator continues them (Party.start)
        self.initiated_unbegun: list[Session] = []
        #: sessions being resumed (``resume_locally``), and the lock under which the sweep (a worker thread)
        #: decides to delete a checkpoint: a resume and the retention never act on one checkpoint at once
        self._resuming: set[str] = set()
        self._sweep_lock = threading.Lock()

    # ------------------------------------------------------------ start-up
    def checkpointed_sessions(self) -> set[str]:
        """Sessions this party restores from a checkpoint now (a resumable one is admitted again when it
        is resumed)."""
        checkpoints = Checkpoint.scan(self.core.sessions_dir, self.core.name)  # damaged ones: restore()
        return {cp.session_id for cp in checkpoints if SessionState(cp.meta["state"]).live}

    async def restore(self) -> None:
        """Reopen every session this party was in when its process died (before serving).

        A session whose checkpoint or journal does not verify fails on its own (its record says which
        file, the peers are told once the server runs: :meth:`tell_failures`); the party starts and
        serves the rest.
        """
        core = self.core
        damaged: list[tuple[str, CheckpointError]] = []
        checkpoints = Checkpoint.scan(core.sessions_dir, core.name, damaged)
        for sid, exc in damaged:
            self._fail_restored(sid, exc, None)
        for cp in checkpoints:
            state = SessionState(cp.meta["state"])
            if not state.live:
                continue  # failed resumably: waits for `smcdp session resume`
            if self._ended_here(cp):
                continue
            try:
                refused = None
                try:  # today's policy and budget, its restarts and deadline
                    self.readmit(cp, "restore")
                except SmcdpError as exc:
                    refused = exc
                s = self.reopen(cp, begun=state is SessionState.RUNNING and refused is None)
            except SmcdpError as exc:
                self._fail_restored(cp.session_id, exc, cp)
                continue
            if refused is not None:  # it ends at once, telling its peers why; its role never runs
                await core.wait_ready(s)
                s.fail_threadsafe(refused)
                log.warning("session %s not restored: %s", cp.session_id, refused)
                continue
            if state is SessionState.PREPARED and cp.meta["initiator"] == core.name:
                # the operator call that would have begun it died with the process: the initiator
                # proposes it again and begins it once the party serves (Party.start)
                self.initiated_unbegun.append(s)
            log.warning(
                "session %s restored from its checkpoint (restart %d); %s",
                cp.session_id,
                cp.meta["restarts"],
                "replaying its role" if state is SessionState.RUNNING else "waiting for Begin",
            )
        for s in list(core.sessions.values()):
            await core.wait_ready(s)

    def _ended_here(self, cp: Checkpoint) -> bool:
        """The session of a live checkpoint had ended here for good -- its record says succeeded, or failed
        and not resumable: the process died after writing the record, before removing the checkpoint (a session
        that ended cannot be resumed, so no later run made the checkpoint live again).  The checkpoint is
        removed, not replayed: a replay would run a session its peers have ended, and its end would overwrite
        the record the peers and the audit trail know."""
        record = self.core.records.peek(cp.session_id)
        if record is None or record.get("resumable"):
            return False
        if record.get("state") not in (SessionState.SUCCEEDED, SessionState.FAILED):
            return False
        log.warning(
            "session %s had %s here before the process stopped (its record says so); its checkpoint is removed, "
            "not replayed",
            cp.session_id,
            record["state"],
        )
        try:
            cp.remove()
        except OSError as exc:
            log.error("session %s: cannot remove its checkpoint: %s", cp.session_id, exc)
        return True

    def _fail_restored(self, session_id: str, exc: SmcdpError, cp: Checkpoint | None) -> None:
        """A checkpointed session that cannot be reopened here: record its failure (``session status``,
        the console and the peers' heartbeats see it); resumable if its code is (a damaged journal)."""
        core = self.core
        if cp is None:
            try:
                validate_session_id(session_id)
            except InvalidMessage:  # not a checkpoint this party made (a copy, a stray folder): no session to fail
                self._set_aside(session_id, exc)
                return
        error = error_dict(exc, core.name)
        resumable = cp is not None and error["code"] in RESUMABLE_CODES
        log.error(
            "session %s cannot be restored at %s%s: %s",
            session_id,
            core.name,
            " (resumable: 'smcdp session resume' at its initiator)" if resumable else "",
            error["message"],
        )
        m = cp.meta if cp is not None else (getattr(exc, "meta", None) or {})
        try:
            if cp is None:  # keep what is left for the operator to inspect, out of the way of the next start
                d = Checkpoint.directory(core.sessions_dir, session_id)
                d.rename(d.with_name(f"{session_id}.damaged"))
            elif resumable:
                cp.set_state(SessionState.FAILED.value, resumable=True, error=error, failed_epoch=time.time())
                cp.close()
            else:
                cp.remove()
        except (OSError, SmcdpError) as err:
            log.error("session %s: cannot update its checkpoint: %s", session_id, err)
        record = session_record(
            session_id=session_id,
            protocol=m.get("protocol"),
            party=core.name,
            role=m.get("role"),
            roles=m.get("roles") or {},
            initiator=m.get("initiator"),
            params=m.get("params") or {},
            seed=m.get("seed"),
            timeout_seconds=m.get("timeout_seconds"),
            state=SessionState.FAILED,
            error=error,
            restarts=int(m.get("restarts", 0)),
            resumable=resumable,
        )
        record["damaged"] = cp is None and not m
        record = core.records.write(session_id, record, overwrite=False)  # a published record stays
        if m.get("roles"):
            self._failures.append((session_id, dict(m["roles"]), error))
        core.governor.session_done(session_id, record)

    def _set_aside(self, name: str, exc: SmcdpError) -> None:
        """A ``<name>.d`` directory in sessions/ whose name is no session id: renamed ``<name>.damaged`` for the
        operator (so that the next start does not meet it again), no record written (a record needs a session
        id, and no session had it), the party starts."""
        d = Checkpoint.directory(self.core.sessions_dir, name)
        log.error("%s is not a session's checkpoint (its name is no session id), set aside: %s", d, exc)
        try:
            d.rename(d.with_name(f"{name}.damaged"))
        except OSError as err:
            log.error("cannot set aside %s: %s", d, err)

    def tell_failures(self) -> None:
        """Once the server runs: tell the other participants of the sessions that failed at start-up."""
        if self._failures:
            self._tell = asyncio.get_running_loop().create_task(self._tell_failures())

    async def _tell_failures(self) -> None:
        """Best effort, once: an Abort naming the failure to every other participant."""
        failures, self._failures = self._failures, []
        core, t = self.core, self.core.config.timeouts.connect_seconds
        connector = core.connector
        assert connector is not None

        async def one(sid: str, party: str, error: dict) -> None:
            try:
                await connector.mailbox(party).Abort(
                    tpb.AbortRequest(session_id=sid, code=error["code"], message=error["message"][:4000]), timeout=t
                )
            except grpc.RpcError as exc:
                log.info("session %s: %s was not told of its failure here: %s", sid, party, exc.code().name)

        await asyncio.gather(
            *(one(sid, p, error) for sid, roles, error in failures for p in roles.values() if p != core.name)
        )

    # ------------------------------------------------------------ reopening
    def readmit(self, cp: Checkpoint, how: str, in_flight: Mapping[str, int] | None = None) -> None:
        """A session continued from its checkpoint is admitted again -- its restarts and unrenewed
        deadline, a slot and its journal against its envelope (a resume), today's policy and budget.
        Blocking (files, ledger): at start-up or in an executor.  ``in_flight``: the proposals and resumes
        admitted meanwhile (they hold slots too)."""
        core, m = self.core, cp.meta
        spec, plugin = spec_of(cp), get_plugin(m["protocol"])

        def limits() -> None:
            check_resume(
                core.sessions.values() if how == "resume" else None,
                m["initiator"],
                m,
                core.config.limits,
                core.name,
                in_flight=in_flight,
                proposers=len(core.config.proposers),
            )
            if how == "resume":
                check_journal(session_budget(plugin, spec, m["role"], core.config.limits), cp.journal.inbound_sizes())

        try:
            core.governor.readmit(m["initiator"], spec, plugin, m["role"], how, precheck=limits)
        except (PolicyDenied, OutOfBounds) as exc:  # today's policy: the session waits (resumably) until it
            # admits it again
            raise NotAdmittedNow(
                f"{exc}; the session stays resumable: 'smcdp session resume {m['session_id']}' once party "
                f"{core.name!r}'s policy admits it again",
                core.name,
            ) from None

    def reopen(self, cp: Checkpoint, *, begun: bool, resumed: bool = False) -> Session:
        """A session from its checkpoint (a restart: ``begun`` as it was; a resume: its journal repaired if
        damaged, and what it sent before sent again); its deadline is the one it has (never renewed)."""
        core, m = self.core, cp.meta
        plugin = core.governor.wrap(get_plugin(m["protocol"]), m["session_id"])  # its reservation, if any
        cp.repair_journal = resumed
        cp.journal  # noqa: B018 - a damaged journal is named before it runs
        culprit = restart_culprit(m, core.name)
        by = dict(m.get("restarts_by") or {})
        by[culprit] = int(by.get(culprit, 0)) + 1
        fields = {"restarts": int(m.get("restarts", 0)) + 1, "restarts_by": by}
        if resumed:
            fields["resumes"] = int(m.get("resumes", 0)) + 1
            cp.ensure_reserve()
        cp.set_state((SessionState.RUNNING if begun else SessionState.PREPARED).value, resumable=False, **fields)
        s = Session(core, spec_of(cp), m["role"], plugin, m["initiator"], cp, begun=begun, resumed=resumed)
        core.register(s)
        return s

    def resumable_checkpoint(self, session_id: str, peer: str | None = None) -> Checkpoint:
        """The checkpoint of a session that failed resumably.  ``peer``: the party asking (None: this party's
        operator); a peer that holds no role in the session hears what it would of a missing one."""
        core = self.core
        missing = PreconditionFailed(
            f"party {core.name!r} has no checkpoint of session {session_id!r} "
            "(it never ran here, or it ended in a way that cannot be continued)"
        )
        d = Checkpoint.directory(core.sessions_dir, session_id)
        if not d.is_dir():
            rec = core.records.load(session_id) if peer is None else core.records.peek(session_id)
            if (
                rec is not None
                and rec.get("state") == SessionState.SUCCEEDED
                and (peer is None or peer in (rec.get("roles") or {}).values())
            ):
                raise AlreadyExists(f"session {session_id!r} already succeeded at party {core.name!r}")
            raise missing
        cp = Checkpoint.load(d)
        if peer is not None and peer not in cp.meta["roles"].values():
            raise missing
        if cp.meta["state"] != SessionState.FAILED or not cp.meta.get("resumable"):
            raise PreconditionFailed(
                f"session {session_id!r} is {cp.meta['state']} at party {core.name!r}, not failed resumably"
            )
        return cp

    async def resume_locally(self, cp: Checkpoint) -> Session:
        """Admit a resumably failed session again and reopen it, waiting for Begin."""
        core, sid = self.core, cp.session_id
        if sid in core.reopening:
            raise Unavailable(f"session {sid!r} is being resumed at party {core.name!r}; try again shortly")
        core.reopening.add(sid)
        try:
            # from here the retention's sweep leaves its checkpoint alone (is_dir below); cancelled while waiting
            # for the lock, nothing is marked
            await self._under_sweep_lock(lambda: self._resuming.add(sid), lambda: self._resuming.discard(sid))
        except BaseException:
            core.reopening.discard(sid)
            raise
        before = dict(core.admitting)  # admissions that started earlier: this one counts them
        registered = core.admission(cp.meta["initiator"])  # and later ones count it
        try:
            cp.repair_journal = True  # a damaged journal is rewritten with its intact records
            await asyncio.get_running_loop().run_in_executor(None, self.readmit, cp, "resume", before)
            if not cp.dir.is_dir():  # the retention removed it meanwhile
                raise PreconditionFailed(f"party {core.name!r} no longer has a checkpoint of session {sid!r}")
            s = self.reopen(cp, begun=False, resumed=True)
        finally:
            core.reopening.discard(sid)
            try:
                await self._under_sweep_lock(lambda: self._resuming.discard(sid))
            finally:
                registered()
        await core.wait_ready(s)
        return s

    async def _under_sweep_lock(self, fn: Callable[[], None], if_cancelled: Callable[[], None] | None = None) -> None:
        """``fn()`` under the retention sweep's lock, taken off the event loop.  The sweep holds the lock in its
        worker thread while it reads a checkpoint again and removes it (disk work: a large journal's folder takes a
        while); a resume that took the lock on the event loop stalled every session of the party meanwhile.
        Cancelled while it waits, the lock is still taken when the wait ends and ``if_cancelled`` (default ``fn``)
        runs under it: exactly one of the two runs, under the lock, whatever happens."""
        lock = self._sweep_lock

        def then(acquired: asyncio.Future[bool], what: Callable[[], None]) -> None:
            if acquired.cancelled():  # pragma: no cover - never started (the loop closing): take it here
                with lock:
                    what()
                return
            try:
                what()
            finally:
                lock.release()

        if lock.acquire(blocking=False):  # the usual case: no sweep is deciding right now
            try:
                fn()
            finally:
                lock.release()
            return
        acquired = asyncio.get_running_loop().run_in_executor(None, lock.acquire)
        try:
            await asyncio.shield(acquired)
        except asyncio.CancelledError:
            acquired.add_done_callback(lambda f: then(f, if_cancelled or fn))
            raise
        then(acquired, fn)

    # ------------------------------------------------------------ retention
    def sweep(self, live: set[str]) -> None:
        """Delete what sessions that ended here long ago left on disk (blocking)."""
        core = self.core
        retention = core.config.limits.failed_retention_seconds
        resuming = self._resuming

        def in_use() -> set[str]:  # asked under the lock, checkpoint by checkpoint
            return live | resuming

        for gone in retention_sweep(core.sessions_dir, retention, in_use, lock=self._sweep_lock):
            core.governor.checkpoint_deleted(gone.as_dict(), retention)
            record = core.records.peek(gone.session_id)
            if (
                record is not None
                and record.get("ended_before_begin") == "counted"
                and gone.session_id not in core.live()  # (being resumed since the sweep began: its record stays)
            ):
                # it never began here and was counted, not audited in full: with its checkpoint gone its
                # record stays in memory only (Session._forget_unbegun)
                core.records.transient(gone.session_id, record)
        core.governor.prune(retention)

    async def sweep_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(sweep_period(self.core.config.limits.failed_retention_seconds))
            try:
                await loop.run_in_executor(None, self.sweep, self.core.live())
            except (SmcdpError, OSError) as exc:  # logged; the next round tries again
                log.error("deleting ended sessions' checkpoints: %s", exc)

    def stop(self) -> None:
        if self._tell is not None:
            self._tell.cancel()
