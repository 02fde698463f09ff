"""One session at one party: its thread, event loop, channel, checkpoint, liveness and record.

Each role runs in **its own thread with its own event loop**, so a role that
computes (Paillier arithmetic) never starves the party's server: health
checks, heartbeats and deliveries are answered from the server's loop
meanwhile.

* **Checkpoint** (:mod:`smcdp.runtime.durability.checkpoint`): every session has one from
  the moment it is proposed -- the randomness root, the journal of messages --
  so that a restarted party replays the role to where it stopped.
* **Liveness** (:mod:`smcdp.runtime.liveness`): while the role runs, a watcher probes
  its ring neighbours; one silent past ``[timeouts] peer_grace_seconds`` ends the
  session with UNAVAILABLE naming it (the *culprit*).  Such a failure keeps the
  checkpoint: ``smcdp session resume ID`` continues the session later.
* **Record** (:mod:`smcdp.runtime.records`): every participant writes
  ``data_dir/sessions/<id>.json`` (result or error, traffic, restarts) atomically.
* **Phase** (:mod:`smcdp.runtime.states`): PREPARED, BEGUN, RUNNING, ENDING, SUCCEEDED or
  FAILED, moved only along the state machine's legal moves.

See :mod:`smcdp.runtime.party` for the life cycle and docs/fault-tolerance.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import json
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from smcdp._text import printable
from smcdp.compute.memory import peak_rss, reset_peak_rss
from smcdp.errors import (
    DeadlineExceeded,
    NoSpace,
    SessionAborted,
    SmcdpError,
    public_message,
    resource_failure,
)
from smcdp.net.grpc_channel import (
    GrpcChannel,
    PeerConnector,
    status_code_of,
)
from smcdp.net.limits import InboundLedger
from smcdp.net.server import (
    SessionSpec,
)
from smcdp.net.tls import TlsMaterial
from smcdp.plugins.base import ProtocolPlugin, SessionContext
from smcdp.runtime import failpoints
from smcdp.runtime.begin import BeginWait
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.durability.checkpoint import Checkpoint
from smcdp.runtime.ending import Ending, finished_roles
from smcdp.runtime.limits import charge_journal, session_budget
from smcdp.runtime.liveness import PeerLost, Watcher, weigh_claim
from smcdp.runtime.logs import private_dir
from smcdp.runtime.records import SessionRecord, SessionRecords
from smcdp.runtime.states import Lifecycle, Phase
from smcdp.states import SessionState

#: failures after which a session can be continued (``smcdp session resume``): a participant
#: was unreachable past its grace, shut down, or ran out of a local resource such as disk space
#: (UNAVAILABLE); a participant's journal was damaged where the peers still hold what it lost
#: (DATA_LOSS)
RESUMABLE_CODES = frozenset({"UNAVAILABLE", "DATA_LOSS"})


class SessionOwner(Protocol):
    """What a session needs of the party that runs it (:class:`smcdp.runtime.core.PartyCore`)."""

    name: str
    config: PartyConfig
    tls: TlsMaterial

    incarnation: str
    #: what the live sessions hold from each peer
    inbound: InboundLedger

    #: the records of the sessions that ended here (the one reader and writer of their files)
    records: SessionRecords


log = logging.getLogger("smcdp.session")

#: a role still running this long after its deadline is cancelled (DEADLINE_EXCEEDED)
ROLE_GRACE = 0.5


def _utc_now() -> str:
    return _dt.datetime.now(_dt.UTC).isoformat(timespec="milliseconds")


def error_dict(exc: BaseException, me: str) -> dict:
    """A failure as a record's ``error``: code, one-line message, origin (the party where it started;
    ``me`` unless the error names another).  A failure a peer reported naming another party also says so:
    ``reported_by`` (that peer, also the origin) and ``reported_culprit`` -- its claim, until the session
    confirms it (:func:`smcdp.runtime.liveness.weigh_claim`, which adds ``corroborated``)."""
    code = status_code_of(exc).name
    origin = getattr(exc, "origin", None) or me
    msg = str(exc) or type(exc).__name__
    if code == "INTERNAL" and not isinstance(exc, SmcdpError):
        msg = f"{type(exc).__name__}: {msg}"
    # may quote a peer (an abort message, a refusal's details): one printable line
    error = {"code": code, "message": printable(msg), "origin": printable(origin, 63)}
    link = getattr(exc, "link", None)
    if link:  # the session ended because this link carried nothing (runtime.liveness.LinkLost)
        error["link"] = printable(link, 130)
    by, claimed = getattr(exc, "reported_by", None), getattr(exc, "reported_culprit", None)
    if by and claimed and claimed != origin:  # a peer's word naming another party (a peer naming itself: origin)
        error["reported_by"] = printable(by, 63)
        error["reported_culprit"] = printable(claimed, 63)
    return error


class Session:
    """One session at this party: its thread, event loop, channel and checkpoint.

    Its phase (:class:`~smcdp.runtime.states.Lifecycle`) moves PREPARED → BEGUN (a Begin was admitted)
    → RUNNING (its role started here) → SUCCEEDED, or to ENDING as soon as its end is decided and to
    FAILED once its record is written.  The server's loop calls the ``*_threadsafe`` methods; the
    session's own thread runs :meth:`_main`: wait for Begin, run the role, fail, finish.
    """

    def __init__(
        self,
        party: SessionOwner,
        spec: SessionSpec,
        role: str,
        plugin: ProtocolPlugin,
        initiator: str,
        checkpoint: Checkpoint,
        *,
        begun: bool = False,
        resumed: bool = False,
    ) -> None:
        self.party = party
        self.spec = spec
        self.role = role
        self.plugin = plugin
        self.initiator = initiator
        self.checkpoint = checkpoint
        self.restarts = int(checkpoint.meta.get("restarts", 0))
        # the wall-clock deadline is in the checkpoint, so a restarted party keeps it
        self.deadline = time.monotonic() + (float(checkpoint.meta["deadline_epoch"]) - time.time())
        #: since when it waits for Begin, for whose approval, until when
        self.begin_wait = BeginWait(spec.session_id, initiator, initiator == party.name, party.config.limits)
        self.started_at = _utc_now()
        #: ``begun``: the role began in an earlier incarnation of this party (restored mid-role)
        self.lifecycle = Lifecycle(began_before=begun)
        self.record: SessionRecord | None = None
        #: called with the final record before anyone can see it (GetResult, GetStatus, ``done``): the party's
        #: governance settles the session and writes its ``session-end`` audit line there, so that a session seen
        #: ended has its reservation settled and its end in the audit trail (set by the party; never raises).
        #: False: an end before Begin that the governance counted rather than audited -- nothing of the session
        #: stays on disk (:meth:`_finish`)
        self.on_end: Callable[[SessionRecord], bool] | None = None
        #: what ended the session's thread before its channel was made (a Propose answers with it)
        self.thread_error: BaseException | None = None
        self.channel: GrpcChannel | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        #: reopened by `session resume`: the replay sends again what peers acknowledged before, so that a
        #: participant whose journal lost a received message gets it back (docs/fault-tolerance.md)
        self.resumed = resumed
        self._begin: asyncio.Event | None = None
        self._early_failure: BaseException | None = None
        self.watcher = Watcher(
            party.name,
            party.incarnation,
            spec.session_id,
            spec.roles,
            party.config.timeouts.peer_grace_seconds,
            self._lose,
        )
        #: the final acknowledgement round: succeeded only once every participant holds its output
        self.ending = Ending(poll=min(1.0, self.watcher.interval))
        self._t0 = time.monotonic()  # when the role started (the record's seconds)
        self._rss_reset = False  # the peak RSS was reset when it started (the record's peak)
        self.ready = threading.Event()
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._thread_main, daemon=True, name=f"session-{spec.session_id}")

    @property
    def state(self) -> SessionState:
        """The state this party reports for the session."""
        return self.lifecycle.reported

    @property
    def has_run(self) -> bool:
        """Did the role ever start here (Begin came; a restored or resumed session's did before)?  A session
        that ends without it computed nothing from this party's data (max_exact_sessions)."""
        return self.lifecycle.has_run

    # -------------------------------------------------- called from the server loop
    def start_thread(self) -> None:
        self.thread.start()

    def admit_begin(self) -> None:
        """A Begin was admitted: the session counts as running from now on (before its thread says so)."""
        self.lifecycle.advance(Phase.BEGUN)

    def begin_threadsafe(self) -> None:
        if self.loop is not None and not self.done.done():
            assert self._begin is not None  # _main makes the event before it publishes its loop
            try:
                self.loop.call_soon_threadsafe(self._begin.set)
            except RuntimeError:
                pass

    @property
    def early_failure(self) -> BaseException | None:
        """The failure that decided this session's end before its thread ran it, if any."""
        return self._early_failure

    def fail_threadsafe(self, exc: BaseException) -> None:
        """End the session with ``exc`` (wakes the begin wait and every recv and send).  Called before
        the session's thread runs, the failure waits for it: the thread starts, finds it and ends."""
        if self.done.done():
            return
        if self._early_failure is None:
            self._early_failure = exc
        self.lifecycle.end_decided()  # after the failure is kept: a thread that sees its end finds it
        loop = self.loop  # read after _early_failure is set: _main sets the loop, then reads it

        def fail() -> None:
            # runs on the session's loop, so after _main made the event and (without an await between) the channel
            assert self._begin is not None
            self._begin.set()
            assert self.channel is not None
            self.channel.abort_local(exc)

        if loop is not None:
            try:
                loop.call_soon_threadsafe(fail)
            except RuntimeError:
                pass

    def await_approval(self, party: str) -> None:
        """``party``'s operator decides on the session: keep it prepared meanwhile (:meth:`BeginWait.notice`)."""
        until = self.begin_wait.notice(party)
        if self.begin_wait.own:  # the initiator's calls (Propose repeats, Begin) may take that long too
            self.deadline = max(self.deadline, until)

    @property
    def waiting_for(self) -> str | None:
        """The participants whose operators decide on the session (comma-separated; None: nobody)."""
        return self.begin_wait.waiting_for

    def snapshot(self) -> SessionRecord:
        if self.record is not None:
            return self.record
        return self._record(self.state)  # "prepared" or "running"; the record is set at the end

    def status(self) -> dict:
        """How the session stands right now (for GetStatus and heartbeats)."""
        return session_status(self)

    # ------------------------------------------------------ the session thread
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - never leave `done` unset
            log.exception("session %s: thread failed", self.spec.session_id)
            self.thread_error = exc
            if not self.done.done():
                record = self._record(SessionState.FAILED, error=error_dict(exc, self.party.name))
                self._settle(record)
                self.lifecycle.advance(Phase.FAILED)
                self.record = record
                self.done.set_result(record)
        finally:
            self.ready.set()

    async def _main(self) -> None:
        cfg = self.party.config
        self._begin = asyncio.Event()
        self.loop = asyncio.get_running_loop()  # from now on fail_threadsafe wakes this loop; before, it
        if self.lifecycle.has_run or self._early_failure is not None:  # left its failure for this check
            self._begin.set()
        ch = self._open_channel()
        self.ready.set()
        result = None
        error: dict | None = None
        told = ""
        warm = asyncio.ensure_future(ch.connect(cfg.timeouts.connect_seconds))  # handshakes before Begin
        try:
            if self.restarts:  # what the journal holds counts against the envelope
                assert ch.budget is not None  # _open_channel gave the channel its budget
                charge_journal(ch.budget, self.checkpoint.journal.inbound_sizes())
            await self._wait_for_begin()
            result = await self._run(ch)
        except BaseException as exc:  # noqa: BLE001
            error, told = await self._fail(ch, exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            warm.cancel()
            ch.mark_closed(None if error is None else (error["code"], told, error["origin"]), succeeded=error is None)
            await ch.close()
        self._finish(ch, result, error)

    def _open_channel(self) -> GrpcChannel:
        """The session's channel: its journal, its byte budget (party-wide too), its chaos hook."""
        cfg = self.party.config
        connector = PeerConnector(cfg, self.party.tls)
        ch = GrpcChannel(
            self.spec.session_id,
            self.role,
            self.spec.roles,
            self.deadline,
            connector,
            rpc_timeout=cfg.timeouts.rpc_seconds,
            journal=self.checkpoint.journal,
        )
        ch.budget = session_budget(self.plugin, self.spec, self.role, cfg.limits, self.party.inbound)
        ch.resend_delivered = self.resumed
        ch.on_progress = failpoints.hook(self.spec.session_id)  # a loopback cluster's chaos tests only
        self.channel = ch
        return ch

    async def _wait_for_begin(self) -> None:
        """Until Begin (:meth:`BeginWait.wait`), then the failure that came meanwhile, if one did."""
        assert self._begin is not None  # _main made it before it waits here
        await self.begin_wait.wait(self._begin, lambda: self.deadline)
        if self._early_failure is not None:
            raise self._early_failure

    async def _run(self, ch: GrpcChannel) -> Any:
        """Run the role (replaying its journal after a restart) under the session's deadline and watcher."""
        cfg = self.party.config
        began_before = self.lifecycle.has_run
        if not (self.lifecycle.advance(Phase.BEGUN) and self.lifecycle.advance(Phase.RUNNING)):
            assert self._early_failure is not None  # kept before its end was decided
            raise self._early_failure
        meta = self.checkpoint.meta
        began: dict[str, float] = {}
        if not began_before and "began_epoch" not in meta:
            # the timeout counts from the session's first Begin (an approval may take hours); once begun,
            # a restored or resumed session keeps the deadline it has
            self.deadline = ch.deadline = time.monotonic() + self.spec.timeout_seconds
            began = {"began_epoch": time.time(), "deadline_epoch": time.time() + self.spec.timeout_seconds}
        self._t0 = time.monotonic()
        self._rss_reset = reset_peak_rss()  # the record reports this session's peak RSS
        out_dir = private_dir(cfg.data_dir / "outputs" / self.spec.session_id, cfg.data_dir)
        inputs = {k: str(v) for k, v in cfg.inputs.get(self.spec.protocol, {}).items()}
        self.checkpoint.begin(inputs, **began)  # fingerprints the inputs, or checks them in a replay
        ctx = SessionContext(
            session_id=self.spec.session_id,
            protocol=self.spec.protocol,
            roles=dict(self.spec.roles),
            params=dict(self.spec.params),
            inputs=inputs,
            output_dir=out_dir,
            allow_insecure_keys=cfg.allow_insecure_keys,
            seed=self.checkpoint.randomness(),
            compute=cfg.compute,
            keys_dir=cfg.data_dir / "keys",
        )
        log.info(
            "session %s: %s runs role %s of %s%s",
            self.spec.session_id,
            self.party.name,
            self.role,
            self.spec.protocol,
            f" (replay after restart {self.restarts})" if self.restarts else "",
        )
        watcher = asyncio.ensure_future(self.watcher.watch(ch))
        try:
            # a recv that waits past the deadline raises its own, more precise error ("no message 'y'
            # from b"); this catches roles that compute on
            result = await asyncio.wait_for(
                self._run_role(ch, ctx), max(0.0, self.deadline + ROLE_GRACE - time.monotonic())
            )
        except TimeoutError:
            raise _deadline_error(self) from None
        finally:
            watcher.cancel()
        return result

    async def _run_role(self, ch: GrpcChannel, ctx: SessionContext) -> Any:
        if self.resumed:  # brought to the end after others succeeded: they need nothing sent again
            ch.finished = await finished_roles(ch, self._peer_state, self.party.config.timeouts.connect_seconds)
        result = await self.plugin.run_role(self.role, ch, ctx)
        try:  # checked before this party confirms it holds its output: nothing fails here after that
            json.dumps(result)
        except (TypeError, ValueError) as exc:
            raise SmcdpError(
                f"protocol {self.spec.protocol!r} returned a result that is not JSON-serialisable: {exc}"
            ) from None
        await ch.flush()  # done only once every message it sent is acknowledged (sends are pipelined)
        await self.ending.run(ch, self._peer_state)
        return result

    async def _peer_state(self, role: str) -> str:
        """How the session stands at the participant holding ``role`` (one heartbeat)."""
        assert self.channel is not None  # the ending runs on the session's channel
        reply = await self.channel.heartbeat(self.spec.roles[role], self.party.incarnation, self.ending.poll)
        return str(reply.state)

    async def _fail(self, ch: GrpcChannel, exc: BaseException) -> tuple[dict, str]:
        """The session failed here with ``exc``: its error, and what the peers are told (an Abort, unless
        the failure came from a peer's)."""
        cfg = self.party.config
        self.lifecycle.end_decided()  # its slot is free while the abort goes out (limits._counts)
        # a disk, quota or memory that ran out here: "no space left at <this party>", resumable
        exc = resource_failure(exc, self.party.name, f"session {self.spec.session_id}") or exc
        if isinstance(exc, NoSpace):
            self.checkpoint.release_reserve()  # room to record how it failed
        error = await self._weigh(ch, error_dict(exc, self.party.name))
        culprit, missing = error["origin"], self.ending.unconfirmed(ch)
        if missing:  # its role ended here: say whose output is not known to have arrived
            error["message"] += f" (the role ended here, but not confirmed to hold their outputs: {', '.join(missing)})"
        if error["code"] == "INTERNAL":
            # peers hear only "internal error": the operator needs the whole story (CI, 2026-11-26: a
            # role's INTERNAL failure under load left nothing to tell what it was)
            log.error(
                "session %s: role %s failed with an internal error", self.spec.session_id, self.role, exc_info=exc
            )
        # peers learn the rule that failed, never this party's data (InputRejected)
        told = printable(public_message(exc)) if error["code"] != "INTERNAL" else "internal error"
        # seen here: never a failure only a peer said happened, whomever it named (liveness.weigh_claim)
        detected_here = (
            isinstance(exc, PeerLost)
            or not isinstance(exc, SessionAborted)
            or (error["origin"] == self.party.name and getattr(exc, "reported_by", None) is None)
        )
        if detected_here:
            outcome = await ch.send_abort(
                error["code"],
                f"role {self.role} ({self.party.name}) failed: {told}",
                timeout=min(5.0, cfg.timeouts.connect_seconds, max(1.0, self.deadline - time.monotonic())),
                culprit=culprit if culprit != self.party.name else None,
                link=error.get("link"),
            )
            log.warning(
                "session %s failed here (%s: %s); abort sent: %s",
                self.spec.session_id,
                error["code"],
                error["message"],
                outcome,
            )
        else:
            log.warning("session %s aborted (culprit %s): %s", self.spec.session_id, error["origin"], error["message"])
        return error, told

    async def _weigh(self, ch: GrpcChannel, error: dict) -> dict:
        """``error`` as this party can vouch for it: a culprit a peer named is the origin only where this party
        confirms it (:func:`~smcdp.runtime.liveness.weigh_claim`; one heartbeat to the party it names)."""
        cfg = self.party.config
        timeout = min(5.0, cfg.timeouts.connect_seconds, max(1.0, 2 * self.watcher.interval))

        def probe(party: str) -> Any:
            return ch.heartbeat(party, self.party.incarnation, timeout)

        try:
            return await weigh_claim(
                error,
                me=self.party.name,
                participants=set(self.spec.roles.values()),
                watcher=self.watcher,
                last_heard=ch.last_heard,
                probe=probe,
                timeout=timeout + 1.0,
                # a named party that failed itself tells the others (its Aborts: up to this long) before its
                # record -- what its heartbeats answer -- says so
                settle=min(5.0, cfg.timeouts.connect_seconds) + 1.0,
                until=self.deadline,  # a silent party's wait ends with the session's time at the latest
            )
        except Exception:  # noqa: BLE001 - never lose the failure itself: the reporter stays its origin
            log.exception("session %s: weighing the culprit a peer named failed", self.spec.session_id)
            return error

    def _finish(self, ch: GrpcChannel, result: Any, error: dict | None) -> None:
        """The record (written, or kept in memory), the checkpoint (kept if resumable), then ``done``."""
        stats = dict(
            ch.stats.as_dict(),
            inbound_duplicates=ch.inbound_duplicates,
            replayed_sends=ch.replayed_sends,
            checkpoint=self.checkpoint.journal.stats(),
        )
        # this process's peak resident memory (VmHWM) since the session began
        stats["peak_rss_bytes"], stats["peak_rss_scope"] = peak_rss(self._rss_reset)
        state = SessionState.FAILED if error is not None else SessionState.SUCCEEDED
        resumable = error is not None and error["code"] in RESUMABLE_CODES
        record = self._record(
            state, result=result, error=error, stats=stats, seconds=time.monotonic() - self._t0, resumable=resumable
        )
        record["unconfirmed"] = self.ending.unconfirmed(ch)  # whose outputs are not known to have arrived
        record = self.party.records.write(self.spec.session_id, record)
        try:
            if resumable:
                self.checkpoint.set_state(
                    SessionState.FAILED.value, resumable=True, error=error, failed_epoch=time.time()
                )
                self.checkpoint.close()
            else:
                self.checkpoint.remove()  # nothing to continue: the root key and journal go too
        except OSError as exc:
            log.error("session %s: cannot update its checkpoint: %s", self.spec.session_id, exc)
        if not self._settle(record):
            record = self._forget_unbegun(record)
        self.record = record
        self.lifecycle.advance(Phase.FAILED if error is not None else Phase.SUCCEEDED)
        self.done.set_result(record)
        log.info("session %s %s%s", self.spec.session_id, state.value, " (resumable)" if resumable else "")

    def _settle(self, record: SessionRecord) -> bool:
        """The party's governance settles the end (:attr:`on_end`); False if nothing of it is to stay on disk."""
        if self.on_end is not None:
            try:
                return self.on_end(record) is not False
            except Exception:  # noqa: BLE001 - the record is written: the session still ends
                log.exception("session %s: settling its end failed", self.spec.session_id)
        return True

    def _forget_unbegun(self, record: SessionRecord) -> SessionRecord:
        """A session that ended before it began here, past its initiator's allowance of such ends (counted in
        the audit trail, not written there): its record is served from memory only.  A resumable one (an end
        UNAVAILABLE or DATA_LOSS: a stopped initiator, a participant that failed first) keeps its checkpoint and
        its record file, marked ``counted``, so that ``session resume`` continues it; the retention sweep removes
        that record with the checkpoint (:meth:`~smcdp.runtime.recovery.Recovery.sweep`).  A member proposing
        and aborting as fast as the party answers left a record file each, for ever (docs/security.md)."""
        if record.get("resumable"):
            return self.party.records.write(self.spec.session_id, {**record, "ended_before_begin": "counted"})
        self.party.records.transient(self.spec.session_id, record)
        return record

    def _lose(self, exc: BaseException, culprit: str | None) -> None:
        """The watcher found the session lost: end it with ``exc``."""
        log.warning("session %s: %s", self.spec.session_id, exc)
        if self._early_failure is None:
            self._early_failure = exc
        self.lifecycle.end_decided()
        if self.channel is not None:
            self.channel.abort_local(exc)

    def _record(
        self,
        state: SessionState,
        result: Any = None,
        error: dict | None = None,
        stats: dict | None = None,
        seconds: float | None = None,
        resumable: bool = False,
    ) -> SessionRecord:
        return session_record(
            session_id=self.spec.session_id,
            protocol=self.spec.protocol,
            party=self.party.name,
            role=self.role,
            roles=self.spec.roles,
            initiator=self.initiator,
            params=self.spec.params,
            seed=self.spec.seed,
            timeout_seconds=self.spec.timeout_seconds,
            state=state,
            result=result,
            error=error,
            stats=stats,
            started_at=self.started_at,
            seconds=seconds,
            restarts=self.restarts,
            resumable=resumable,
            # the last round the role reported: what an ended session's status shows
            round=None if self.channel is None else max(0, self.channel.round),
        )


def session_status(s: Session) -> dict:
    """How the session stands right now (for GetStatus and heartbeats)."""
    now = time.monotonic()
    ch = s.channel
    peers = {}
    for role, party in s.spec.roles.items():
        if party == s.party.name:
            continue
        seen = s.watcher.peer_seen.get(party)
        peers[party] = {
            "role": role,
            "last_answer_seconds_ago": None if seen is None else round(now - seen[0], 1),
            "incarnation": None if seen is None else seen[1],
        }
    return {
        "session_id": s.spec.session_id,
        "protocol": s.spec.protocol,
        "party": s.party.name,
        "role": s.role,
        "state": s.state.value,
        "round": 0 if ch is None else ch.round,
        "step": "" if ch is None else ch.step,
        "restarts": s.restarts,
        "incarnation": s.party.incarnation,
        "seconds_left": round(s.deadline - now, 1),
        "peers": peers,
        "error": (s.record or {}).get("error"),
        "resumable": bool((s.record or {}).get("resumable")),
        "waiting_for": s.waiting_for if s.state is SessionState.PREPARED else None,
    }


def session_record(
    *,
    session_id: str,
    protocol: str | None,
    party: str,
    role: str | None,
    roles: Mapping[str, str],
    initiator: str | None,
    params: Mapping[str, Any],
    seed: int | None,
    timeout_seconds: float | None,
    state: SessionState,
    result: Any = None,
    error: dict | None = None,
    stats: dict | None = None,
    started_at: str | None = None,
    seconds: float | None = None,
    restarts: int = 0,
    resumable: bool = False,
    round: int | None = None,
) -> SessionRecord:
    """A session's record (``data_dir/sessions/<id>.json``, what GetResult and the console show)."""
    return {
        "session_id": session_id,
        "protocol": protocol,
        "party": party,
        "role": role,
        "roles": dict(roles),
        "initiator": initiator,
        "params": dict(params),
        "seed": seed,
        "timeout_seconds": timeout_seconds,
        "state": SessionState(state).value,
        "result": result,
        "error": error,
        "stats": stats,
        "started_at": started_at,
        "finished_at": _utc_now() if SessionState(state).ended else None,
        "seconds": seconds,
        "restarts": restarts,
        "resumable": resumable,
        "round": round,
    }


def _deadline_error(s: Session) -> SmcdpError:
    return DeadlineExceeded(
        f"session {s.spec.session_id}: role {s.role} did not finish within the "
        f"session deadline of {s.spec.timeout_seconds:g} s"
    )
