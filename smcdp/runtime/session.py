"""One session at one party: its thread, event loop, channel, checkpoint, liveness and record.

Each role runs in **its own thread with its own event loop**, so a role that
computes (Paillier arithmetic) never starves the party's server: health
checks, heartbeats and deliveries are answered from the server's loop
meanwhile.

* **Checkpoint** (:mod:`smcdp.runtime.durability.checkpoint`): every session has one from
  the moment it is proposed -- the randomness root, the journal of messages --
  so that a restarted party replays the role to where it stopped.
* **Liveness**: while the role runs, a watcher probes every other participant
  (``Heartbeat``) every few seconds.  A participant that has not answered for
  ``[timeouts] peer_grace_seconds`` ends the session with UNAVAILABLE naming it
  (the *culprit*); the party that detects it first tells the others, whose
  records adopt the same culprit.  Such a failure keeps the checkpoint:
  ``smcdp session resume ID`` continues the session later.
* **Record**: every participant writes ``data_dir/sessions/<id>.json`` (result
  or error, traffic, restarts) atomically.

See :mod:`smcdp.runtime.party` for the life cycle and docs/fault-tolerance.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import json
import logging
import math
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Protocol

import grpc

from smcdp._files import atomic_write_json
from smcdp._text import printable
from smcdp.compute.memory import peak_rss, reset_peak_rss
from smcdp.errors import (
    DeadlineExceeded,
    NoSpace,
    PreconditionFailed,
    SessionAborted,
    SmcdpError,
    Unavailable,
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
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.durability.checkpoint import Checkpoint
from smcdp.runtime.limits import (  # issues 19, 24
    WAITING_NOTICE_GRACE,
    approval_wait_until,
    begin_by,
    charge_journal,
    session_budget,
)
from smcdp.runtime.logs import private_dir

#: failures after which a session can be continued (``smcdp session resume``): a participant
#: was unreachable past its grace, shut down, or ran out of a local resource such as disk space
#: (UNAVAILABLE); a participant's journal was damaged where the peers still hold what it lost
#: (DATA_LOSS)
RESUMABLE_CODES = frozenset({"UNAVAILABLE", "DATA_LOSS"})


class PeerLost(Unavailable):
    """A participant stopped answering for longer than the grace: this party detected it."""

    def __init__(self, message: str, culprit: str) -> None:
        super().__init__(message)
        self.culprit = culprit
        self.origin = culprit


class SessionOwner(Protocol):
    """What a session needs of the party that runs it (:class:`smcdp.runtime.party.Party`)."""

    name: str
    config: PartyConfig
    tls: TlsMaterial

    incarnation: str
    #: what the live sessions hold from each peer (issue 24)
    inbound: InboundLedger

    def record_path(self, session_id: str) -> Path: ...

log = logging.getLogger("smcdp.session")

#: a role still running this long after its deadline is cancelled (DEADLINE_EXCEEDED)
ROLE_GRACE = 0.5


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def write_json_atomic(path: Path, obj: Any) -> None:
    """Session records and ready files: durable, owner-only (they may hold protocol outputs)."""
    atomic_write_json(path, obj, 0o600, sort_keys=True)

def error_dict(exc: BaseException, me: str) -> dict:
    """A failure as a record's ``error``: code, one-line message, origin (the party where it started;
    ``me`` unless the error names another)."""
    code = status_code_of(exc).name
    origin = getattr(exc, "origin", None) or me
    msg = str(exc) or type(exc).__name__
    if code == "INTERNAL" and not isinstance(exc, SmcdpError):
        msg = f"{type(exc).__name__}: {msg}"
    # may quote a peer (an abort message, a refusal's details): one printable line (issue 19)
    return {"code": code, "message": printable(msg), "origin": printable(origin, 63)}


class Session:
    """One session at this party: its thread, event loop, channel and checkpoint."""

    def __init__(self, party: SessionOwner, spec: SessionSpec, role: str, plugin: ProtocolPlugin,
                 initiator: str, checkpoint: Checkpoint, *, begun: bool = False, resumed: bool = False) -> None:
        self.party = party
        self.spec = spec
        self.role = role
        self.plugin = plugin
        self.initiator = initiator
        self.checkpoint = checkpoint
        self.restarts = int(checkpoint.meta.get("restarts", 0))
        # the wall-clock deadline is in the checkpoint, so a restarted party keeps it
        self.deadline = time.monotonic() + (float(checkpoint.meta["deadline_epoch"]) - time.time())
        self.received = time.monotonic()
        #: issue 24: the participant whose operator is deciding (None: nobody), and how long this
        #: party keeps the session prepared meanwhile (monotonic)
        self.waiting_for: str | None = None      # the parties whose operators decide, comma-separated
        self._noticed: dict[str, float] = {}    # party -> when we last heard the session waits for it
        self._approval_until: float | None = None
        self.started_at = _utc_now()
        self.state = "prepared"
        #: a peer's Begin was admitted (the session counts as running before its thread says so)
        self.begun = False
        self.ran = False    # the role started in this process (see has_run)
        #: its end is decided (an Abort, a failure): it no longer holds a pending or running slot while
        #: it winds down (limits._counts)
        self.ending = False
        self.record: dict | None = None
        self.channel: GrpcChannel | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._begun_already = begun
        #: reopened by `session resume`: the replay sends again what peers acknowledged before, so that a
        #: participant whose journal lost a received message gets it back (docs/fault-tolerance.md)
        self.resumed = resumed
        self._begin: asyncio.Event | None = None
        self._early_failure: BaseException | None = None
        #: party -> (monotonic time of its last answer, its incarnation), kept by the watcher
        self.peer_seen: dict[str, tuple[float, str]] = {}
        self.ready = threading.Event()
        self.done: concurrent.futures.Future = concurrent.futures.Future()
        self.thread = threading.Thread(target=self._thread_main, daemon=True,
                                       name=f"session-{spec.session_id}")

    # -------------------------------------------------- called from the server loop
    def start_thread(self) -> None:
        self.thread.start()

    def begin_threadsafe(self) -> None:
        if self.loop is not None and not self.done.done():
            try:
                self.loop.call_soon_threadsafe(self._begin.set)
            except RuntimeError:
                pass

    def fail_threadsafe(self, exc: BaseException) -> None:
        """End the session with ``exc`` (wakes the begin wait and every recv and send).  Called before
        the session's thread runs, the failure waits for it: the thread starts, finds it and ends."""
        if self.done.done():
            return
        self.ending = True
        if self._early_failure is None:
            self._early_failure = exc
        loop = self.loop     # read after _early_failure is set: _main sets the loop, then reads it

        def fail() -> None:
            self._begin.set()
            self.channel.abort_local(exc)

        if loop is not None:
            try:
                loop.call_soon_threadsafe(fail)
            except RuntimeError:
                pass

    def await_approval(self, party: str) -> None:
        """``party``'s operator decides on the session (issue 24): keep it prepared meanwhile,
        up to ``limits.approval_timeout_seconds`` from its receipt, not the proposal grace."""
        own = self.initiator == self.party.name
        until = approval_wait_until(self.received, self.party.config.limits, own)
        # proposals made at once (issue 26) may wait for several operators: each is named while its
        # notices keep coming
        now = time.monotonic()
        self._noticed[party] = now
        self.waiting_for = ", ".join(sorted(p for p, t in self._noticed.items() if now - t < WAITING_NOTICE_GRACE))
        self._approval_until = max(self._approval_until or until, until)
        if own:   # the initiator's calls (Propose repeats, Begin) may take that long too
            self.deadline = max(self.deadline, until)

    def snapshot(self) -> dict:
        if self.record is not None:
            return self.record
        return self._record(self.state)  # "prepared" or "running"; the record is set at the end

    def status(self) -> dict:
        """How the session stands right now (for GetStatus and heartbeats)."""
        now = time.monotonic()
        ch = self.channel
        peers = {}
        for role, party in self.spec.roles.items():
            if party == self.party.name:
                continue
            seen = self.peer_seen.get(party)
            peers[party] = {"role": role, "last_answer_seconds_ago": None if seen is None else round(now - seen[0], 1),
                            "incarnation": None if seen is None else seen[1]}
        return {
            "session_id": self.spec.session_id, "protocol": self.spec.protocol, "party": self.party.name,
            "role": self.role, "state": self.state, "round": 0 if ch is None else ch.round,
            "step": "" if ch is None else ch.step, "restarts": self.restarts,
            "incarnation": self.party.incarnation, "seconds_left": round(self.deadline - now, 1),
            "peers": peers, "error": (self.record or {}).get("error"),
            "resumable": bool((self.record or {}).get("resumable")),
            "waiting_for": self.waiting_for if self.state == "prepared" else None,
        }

    # ------------------------------------------------------ the session thread
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - never leave `done` unset
            log.exception("session %s: thread failed", self.spec.session_id)
            if not self.done.done():
                self.record = self._record("failed", error=error_dict(exc, self.party.name))
                self.done.set_result(self.record)
        finally:
            self.ready.set()

    @property
    def has_run(self) -> bool:
        """Did the role ever start here (Begin came; a restored or resumed session's did before)?  A session
        that ends without it computed nothing from this party's data (max_exact_sessions, issue 26)."""
        return self.ran or self._begun_already

    async def _main(self) -> None:
        cfg = self.party.config
        self._begin = asyncio.Event()
        self.loop = asyncio.get_running_loop()   # from now on fail_threadsafe wakes this loop; before, it
        if self._begun_already or self._early_failure is not None:    # left its failure for this check
            self._begin.set()
        connector = PeerConnector(cfg, self.party.tls)
        ch = GrpcChannel(self.spec.session_id, self.role, self.spec.roles, self.deadline, connector,
                         rpc_timeout=cfg.timeouts.rpc_seconds, journal=self.checkpoint.journal)
        ch.budget = session_budget(self.plugin, self.spec, self.role, cfg.limits,   # issue 19, and the
                                   self.party.inbound)                            # party-wide ledger (24)
        ch.resend_delivered = self.resumed
        ch.on_progress = failpoints.hook(self.spec.session_id)   # a loopback cluster's chaos tests only
        self.channel = ch
        self.ready.set()
        result = None
        error: dict | None = None
        culprit: str | None = None
        told = ""
        t0 = time.monotonic()
        rss_reset = False
        warm = asyncio.ensure_future(ch.connect(cfg.timeouts.connect_seconds))   # handshakes before Begin
        try:
            if self.restarts:   # issue 24: what the journal holds counts against the envelope
                charge_journal(ch.budget, self.checkpoint.journal.inbound_sizes())
            # A peer's proposal that is not begun within the grace expires (issue 19); the
            # initiator's own session is begun or failed by start_session, which reports the
            # precise cause (e.g. an unreachable party) at the deadline.
            own = self.initiator == self.party.name
            while not self._begin.is_set():   # a notice that an operator decides extends the wait
                left = begin_by(self.deadline, self.received, cfg.limits, own, self._approval_until) \
                    - time.monotonic()
                try:
                    await asyncio.wait_for(self._begin.wait(), max(0.0, left))
                except asyncio.TimeoutError:
                    if begin_by(self.deadline, self.received, cfg.limits, own, self._approval_until) \
                            > time.monotonic():
                        continue
                    raise PreconditionFailed(
                        f"session {self.spec.session_id} never began: the initiator "
                        f"{self.initiator!r} did not confirm it within "
                        + ("the deadline" if own else
                           f"the approval timeout (limits.approval_timeout_seconds) while waiting for "
                           f"approval at {self.waiting_for}" if self.waiting_for else
                           "the proposal grace (limits.proposal_grace_seconds)")) from None
            if self._early_failure is not None:
                raise self._early_failure
            self.state = "running"
            self.ran = True
            meta = self.checkpoint.meta
            began: dict[str, float] = {}
            if not self._begun_already and "began_epoch" not in meta:
                # issue 24: the timeout counts from the session's first Begin (an approval may take
                # hours); once begun, a restored or resumed session keeps the deadline it has
                self.deadline = ch.deadline = time.monotonic() + self.spec.timeout_seconds
                began = {"began_epoch": time.time(), "deadline_epoch": time.time() + self.spec.timeout_seconds}
            t0 = time.monotonic()
            rss_reset = reset_peak_rss()   # issue 17: the record reports this session's peak RSS
            out_dir = private_dir(cfg.data_dir / "outputs" / self.spec.session_id, cfg.data_dir)
            inputs = {k: str(v) for k, v in cfg.inputs.get(self.spec.protocol, {}).items()}
            self.checkpoint.begin(inputs, **began)   # fingerprints the inputs, or checks them in a replay
            ctx = SessionContext(
                session_id=self.spec.session_id, protocol=self.spec.protocol,
                roles=dict(self.spec.roles), params=dict(self.spec.params), inputs=inputs,
                output_dir=out_dir, allow_insecure_keys=cfg.allow_insecure_keys,
                seed=self.checkpoint.randomness(), compute=cfg.compute)
            log.info("session %s: %s runs role %s of %s%s", self.spec.session_id, self.party.name,
                     self.role, self.spec.protocol,
                     f" (replay after restart {self.restarts})" if self.restarts else "")
            watcher = asyncio.ensure_future(self._watch(ch))
            try:
                # a recv that waits past the deadline raises its own, more precise
                # error ("no message 'y' from b"); this catches roles that compute on
                result = await asyncio.wait_for(self._run_role(ch, ctx),
                                                max(0.0, self.deadline + ROLE_GRACE - time.monotonic()))
            except asyncio.TimeoutError:
                raise _deadline_error(self) from None
            finally:
                watcher.cancel()
            try:
                json.dumps(result)
            except (TypeError, ValueError) as exc:
                raise SmcdpError(f"protocol {self.spec.protocol!r} returned a result that is not "
                                 f"JSON-serialisable: {exc}") from None
        except BaseException as exc:  # noqa: BLE001
            self.ending = True     # decided: its slot is free while the abort goes out (limits._counts)
            # a disk, quota or memory that ran out here: "no space left at <this party>", resumable
            exc = resource_failure(exc, self.party.name, f"session {self.spec.session_id}") or exc
            if isinstance(exc, NoSpace):
                self.checkpoint.release_reserve()    # room to record how it failed
            error = error_dict(exc, self.party.name)
            culprit = error["origin"]
            if error["code"] == "INTERNAL":
                # peers hear only "internal error": the operator needs the whole story (CI, 2026-11-26:
                # a role's INTERNAL failure under load left nothing to tell what it was)
                log.error("session %s: role %s failed with an internal error", self.spec.session_id, self.role,
                          exc_info=exc)
            # peers learn the rule that failed, never this party's data (InputRejected; issue 19)
            told = printable(public_message(exc)) if error["code"] != "INTERNAL" else "internal error"
            detected_here = isinstance(exc, PeerLost) or not isinstance(exc, SessionAborted) \
                or error["origin"] == self.party.name
            if detected_here:
                outcome = await ch.send_abort(
                    error["code"], f"role {self.role} ({self.party.name}) failed: {told}",
                    timeout=min(5.0, cfg.timeouts.connect_seconds,
                                max(1.0, self.deadline - time.monotonic())),
                    culprit=culprit if culprit != self.party.name else None)
                log.warning("session %s failed here (%s: %s); abort sent: %s", self.spec.session_id,
                            error["code"], error["message"], outcome)
            else:
                log.warning("session %s aborted (culprit %s): %s", self.spec.session_id, error["origin"],
                            error["message"])
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            warm.cancel()
            ch.mark_closed(None if error is None else
                           (error["code"], told, error["origin"]))
            await ch.close()
        stats = dict(ch.stats.as_dict(), inbound_duplicates=ch.inbound_duplicates,
                     replayed_sends=ch.replayed_sends, checkpoint=self.checkpoint.journal.stats())
        # issue 17: this process's peak resident memory (VmHWM) since the session began
        stats["peak_rss_bytes"], stats["peak_rss_scope"] = peak_rss(rss_reset)
        state = "failed" if error is not None else "succeeded"
        resumable = error is not None and error["code"] in RESUMABLE_CODES
        record = self._record(state, result=result, error=error, stats=stats,
                              seconds=time.monotonic() - t0, resumable=resumable)
        try:
            write_json_atomic(self.party.record_path(self.spec.session_id), record)
        except OSError as exc:
            log.error("session %s: cannot write its record: %s", self.spec.session_id, exc)
            record = dict(record, record_write_error=str(exc))
        try:
            if resumable:
                self.checkpoint.set_state("failed", resumable=True, error=error, failed_epoch=time.time())
                self.checkpoint.close()
            else:
                self.checkpoint.remove()  # nothing to continue: the root key and journal go too
        except OSError as exc:
            log.error("session %s: cannot update its checkpoint: %s", self.spec.session_id, exc)
        self.record = record
        self.state = state
        self.done.set_result(record)
        log.info("session %s %s%s", self.spec.session_id, state, " (resumable)" if resumable else "")

    async def _run_role(self, ch: GrpcChannel, ctx: SessionContext) -> Any:
        result = await self.plugin.run_role(self.role, ch, ctx)
        await ch.flush()     # done only once every message it sent is acknowledged (sends are pipelined)
        return result

    # ------------------------------------------------------------------ liveness
    async def _watch(self, ch: GrpcChannel) -> None:
        """Probe this party's nearest participants until the role ends; abort the session on a silent one.

        The participants form a ring in name order and each probes its nearest predecessor and
        successor that have not finished (issue 28: every participant probing every other one was
        N(N−1) heartbeats per interval, and as many TLS connections per session).  Every running
        participant is still probed by two running ones, and one cut off from the rest sees both
        of its neighbours fall silent."""
        grace = float(self.party.config.timeouts.peer_grace_seconds)
        interval = max(0.2, min(5.0, grace / 6))
        peers = {party: role for role, party in self.spec.roles.items() if party != self.party.name}
        ring = sorted({*peers, self.party.name})
        finished: set[str] = set()
        unknown: dict[str, int] = {}
        start = time.monotonic()
        last_tick = start
        paused = max(3 * interval, grace / 2)   # a gap this long in the watcher: this party did not run

        def forgive(now: float) -> None:
            """This party itself was paused (SIGSTOP, a starved host): its peers' silence over the pause is
            its own; start counting again rather than blame them."""
            for p, (_, inc) in self.peer_seen.items():
                self.peer_seen[p] = (now, inc)

        async def probe(party: str):
            try:
                return await ch.heartbeat(party, self.party.incarnation, timeout=interval)
            except grpc.RpcError as exc:
                return exc
            except SmcdpError as exc:
                return exc

        first = True
        probed_at = start
        while True:
            # one probe round per interval (a silent peer's probe takes up to `interval` itself: sleeping a
            # whole interval after it made the rounds 2 intervals apart, and detection up to grace + 2
            # intervals late)
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - probed_at)))
            probed_at = now = time.monotonic()
            if now - last_tick > paused:
                forgive(now)
            last_tick = now
            todo = ring_neighbours(ring, self.party.name, finished)
            for p in todo:   # a peer counts from the start of the role; one probed later (a neighbour finished) from now
                self.peer_seen.setdefault(p, (start if first else now, ""))
            first = False
            replies = await asyncio.gather(*(probe(p) for p in todo))
            if time.monotonic() - probed_at > paused:
                # the probes, each bounded by `interval`, took far longer: this party was paused while
                # they ran (its peers had no way to answer it), so the pause is forgiven here too -- a
                # party stalled for 25 s blamed both peers for its own silence the moment it resumed
                forgive(time.monotonic())
            for party, reply in zip(todo, replies):
                if isinstance(reply, BaseException):
                    if isinstance(reply, grpc.RpcError) and reply.code() == grpc.StatusCode.PERMISSION_DENIED:
                        self._lose(ch, PreconditionFailed(f"party {party!r} refuses heartbeats of session "
                                                          f"{self.spec.session_id}: {reply.details()}"), party)
                        return
                    continue
                at, inc = self.peer_seen.get(party, (0.0, ""))
                if inc and reply.incarnation and reply.incarnation != inc:
                    log.info("session %s: party %s restarted (incarnation %s) and is back", self.spec.session_id,
                             party, reply.incarnation)
                self.peer_seen[party] = (time.monotonic(), reply.incarnation)
                if reply.state == "succeeded":
                    finished.add(party)
                elif reply.state == "failed":
                    # its abort did not reach us (or crossed ours): adopt its outcome and culprit
                    self._lose(ch, SessionAborted(f"session {self.spec.session_id} failed at {party} "
                                                  f"(culprit {reply.culprit or party})",
                                                  reply.code or "ABORTED", reply.culprit or party), None)
                    return
                elif reply.state == "unknown":
                    unknown[party] = unknown.get(party, 0) + 1
                    if unknown[party] >= 2:
                        self._lose(ch, PeerLost(f"party {party!r} (role {peers[party]}) no longer knows session "
                                                f"{self.spec.session_id} (restarted without its checkpoint?)",
                                                party), party)
                        return
                else:
                    unknown.pop(party, None)
            now = time.monotonic()
            unanswered = {p: now - self.peer_seen[p][0] for p in todo}        # heartbeats' silence
            quiet = {p: now - ch.last_heard.get(peers[p], -math.inf) for p in todo}   # its messages' silence
            resume_hint = f"the session can be resumed with 'smcdp session resume {self.spec.session_id}'"
            # a peer whose messages arrive is alive, even if its heartbeat answers are late (a party busy
            # with twenty sessions on two cores answered no heartbeat for 30 s while its rounds went on);
            # but the heartbeats alone say when this party is the one cut off: they all stop at the same
            # moment, whereas the last message from each peer came whenever the protocol sent one
            silent = {p: unanswered[p] for p in todo if unanswered[p] > grace and quiet[p] > grace}
            if len(todo) >= 2 and all(unanswered[p] > grace and quiet[p] > grace / 2 for p in todo):
                # every other participant went silent at once: this party is the one cut off,
                # which is also what they all conclude -- so every record names the same culprit
                me = self.party.name
                self._lose(ch, PeerLost(
                    f"party {me!r} lost contact with every other participant ({', '.join(sorted(peers))}) "
                    f"for over {grace:g} s (peer_grace_seconds): its own network is the likely cause; "
                    f"{resume_hint} once it is connected again", me), me)
                return
            if silent:
                party = max(silent, key=silent.get)
                self._lose(ch, PeerLost(
                    f"party {party!r} (role {peers[party]}) has not answered for {silent[party]:.0f} s "
                    f"(peer_grace_seconds = {grace:g}); {resume_hint} once it is back", party), party)
                return

    def _lose(self, ch: GrpcChannel, exc: BaseException, culprit: str | None) -> None:
        log.warning("session %s: %s", self.spec.session_id, exc)
        self.ending = True
        if self._early_failure is None:
            self._early_failure = exc
        ch.abort_local(exc)

    def _record(self, state: str, result: Any = None, error: dict | None = None,
                stats: dict | None = None, seconds: float | None = None, resumable: bool = False) -> dict:
        return session_record(
            session_id=self.spec.session_id, protocol=self.spec.protocol, party=self.party.name, role=self.role,
            roles=self.spec.roles, initiator=self.initiator, params=self.spec.params, seed=self.spec.seed,
            timeout_seconds=self.spec.timeout_seconds, state=state, result=result, error=error, stats=stats,
            started_at=self.started_at, seconds=seconds, restarts=self.restarts, resumable=resumable,
            # the last round the role reported: what an ended session's status shows (issue 27)
            round=None if self.channel is None else max(0, self.channel.round))


def session_record(*, session_id: str, protocol: str | None, party: str, role: str | None,
                   roles: Mapping[str, str], initiator: str | None, params: Mapping[str, Any], seed: int | None,
                   timeout_seconds: float | None, state: str, result: Any = None, error: dict | None = None,
                   stats: dict | None = None, started_at: str | None = None, seconds: float | None = None,
                   restarts: int = 0, resumable: bool = False, round: int | None = None) -> dict:
    """A session's record (``data_dir/sessions/<id>.json``, what GetResult and the console show)."""
    return {
        "session_id": session_id, "protocol": protocol, "party": party, "role": role, "roles": dict(roles),
        "initiator": initiator, "params": dict(params), "seed": seed, "timeout_seconds": timeout_seconds,
        "state": state, "result": result, "error": error, "stats": stats, "started_at": started_at,
        "finished_at": _utc_now() if state in ("succeeded", "failed") else None,
        "seconds": seconds, "restarts": restarts, "resumable": resumable, "round": round,
    }


def ring_neighbours(ring: list[str], me: str, finished: set[str]) -> list[str]:
    """The nearest participants before and after ``me`` in ``ring`` that are not ``finished`` (one if
    they are the same, none if every other one finished)."""
    i, n = ring.index(me), len(ring)
    after = next((ring[(i + k) % n] for k in range(1, n) if ring[(i + k) % n] not in finished), None)
    before = next((ring[(i - k) % n] for k in range(1, n) if ring[(i - k) % n] not in finished), None)
    return list(dict.fromkeys(p for p in (after, before) if p is not None))


def _deadline_error(s: Session) -> SmcdpError:
    return DeadlineExceeded(f"session {s.spec.session_id}: role {s.role} did not finish within the "
                            f"session deadline of {s.spec.timeout_seconds:g} s")


