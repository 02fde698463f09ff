"""One session at one party: its thread, its event loop, its channel and its durable record.

Each role runs in **its own thread with its own event loop**, so a role that
computes (Paillier arithmetic) never starves the party's server: health
checks and deliveries are answered from the server's loop meanwhile.  A
failing role sends ``Abort`` to the other participants; every participant
writes ``data_dir/sessions/<id>.json`` (result or error, traffic stats)
atomically.  See :mod:`smcdp.runtime.party` for the life cycle.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime as _dt
import json
import logging
import re
import secrets
import threading
import time
from pathlib import Path
from typing import Any, Protocol

from smcdp._files import atomic_write_json
from smcdp.compute.memory import peak_rss, reset_peak_rss
from smcdp.errors import (
    DeadlineExceeded,
    PreconditionFailed,
    SessionAborted,
    SmcdpError,
)
from smcdp.net.grpc_channel import (
    GrpcChannel,
    PeerConnector,
    status_code_of,
)
from smcdp.net.server import (
    SessionSpec,
)
from smcdp.net.tls import TlsMaterial
from smcdp.plugins.base import ProtocolPlugin, SessionContext
from smcdp.runtime.config import PartyConfig


class SessionOwner(Protocol):
    """What a session needs of the party that runs it (:class:`smcdp.runtime.party.Party`)."""

    name: str
    config: PartyConfig
    tls: TlsMaterial

    def record_path(self, session_id: str) -> Path: ...

log = logging.getLogger("smcdp.session")

#: a role still running this long after its deadline is cancelled (DEADLINE_EXCEEDED)
ROLE_GRACE = 0.5


def _utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")


def new_session_id(protocol: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", protocol)[:60].strip("-.") or "session"
    return f"{stem}-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def write_json_atomic(path: Path, obj: Any) -> None:
    """Session records and ready files: durable, owner-only (they may hold protocol outputs)."""
    atomic_write_json(path, obj, 0o600, sort_keys=True)

def _error_dict(exc: BaseException, me: str) -> dict:
    code = status_code_of(exc).name
    origin = getattr(exc, "origin", None) or me
    msg = str(exc) or type(exc).__name__
    if code == "INTERNAL" and not isinstance(exc, SmcdpError):
        msg = f"{type(exc).__name__}: {msg}"
    return {"code": code, "message": msg, "origin": origin}


class Session:
    """One session at this party: its thread, event loop and channel."""

    def __init__(self, party: SessionOwner, spec: SessionSpec, role: str, plugin: ProtocolPlugin,
                 initiator: str) -> None:
        self.party = party
        self.spec = spec
        self.role = role
        self.plugin = plugin
        self.initiator = initiator
        self.deadline = time.monotonic() + spec.timeout_seconds
        self.started_at = _utc_now()
        self.state = "prepared"
        self.record: dict | None = None
        self.channel: GrpcChannel | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._begin: asyncio.Event | None = None
        self._early_failure: BaseException | None = None
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
        """End the session with ``exc`` (wakes the begin wait and every recv)."""
        if self.done.done() or self.loop is None:
            return

        def fail() -> None:
            if self._early_failure is None:
                self._early_failure = exc
            self._begin.set()
            self.channel.abort_local(exc)

        try:
            self.loop.call_soon_threadsafe(fail)
        except RuntimeError:
            pass

    def snapshot(self) -> dict:
        if self.record is not None:
            return self.record
        return self._record(self.state)  # "prepared" or "running"; the record is set at the end

    # ------------------------------------------------------ the session thread
    def _thread_main(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as exc:  # noqa: BLE001 - never leave `done` unset
            log.exception("session %s: thread failed", self.spec.session_id)
            if not self.done.done():
                self.record = self._record("failed", error=_error_dict(exc, self.party.name))
                self.done.set_result(self.record)
        finally:
            self.ready.set()

    async def _main(self) -> None:
        cfg = self.party.config
        self.loop = asyncio.get_running_loop()
        self._begin = asyncio.Event()
        connector = PeerConnector(cfg, self.party.tls)
        ch = GrpcChannel(self.spec.session_id, self.role, self.spec.roles, self.deadline, connector,
                         rpc_timeout=cfg.timeouts.rpc_seconds)
        self.channel = ch
        self.ready.set()
        result = None
        error: dict | None = None
        t0 = time.monotonic()
        rss_reset = False
        try:
            # The initiator's own session is begun or failed by start_session, which
            # reports the precise cause (e.g. an unreachable party) at the deadline;
            # the margin only guards against a bug leaving it waiting for ever.
            margin = 30.0 if self.initiator == self.party.name else 0.0
            try:
                await asyncio.wait_for(self._begin.wait(),
                                       max(0.0, self.deadline + margin - time.monotonic()))
            except asyncio.TimeoutError:
                raise PreconditionFailed(
                    f"session {self.spec.session_id} never began: the initiator "
                    f"{self.initiator!r} did not confirm it before the deadline") from None
            if self._early_failure is not None:
                raise self._early_failure
            self.state = "running"
            t0 = time.monotonic()
            rss_reset = reset_peak_rss()   # issue 17: the record reports this session's peak RSS
            out_dir = cfg.data_dir / "outputs" / self.spec.session_id
            out_dir.mkdir(parents=True, exist_ok=True)
            ctx = SessionContext(
                session_id=self.spec.session_id, protocol=self.spec.protocol,
                roles=dict(self.spec.roles), params=dict(self.spec.params),
                inputs={k: str(v) for k, v in cfg.inputs.get(self.spec.protocol, {}).items()},
                output_dir=out_dir, allow_insecure_keys=cfg.allow_insecure_keys,
                seed=self.spec.seed, compute=cfg.compute)
            log.info("session %s: %s runs role %s of %s", self.spec.session_id, self.party.name,
                     self.role, self.spec.protocol)
            try:
                # a recv that waits past the deadline raises its own, more precise
                # error ("no message 'y' from b"); this catches roles that compute on
                result = await asyncio.wait_for(self.plugin.run_role(self.role, ch, ctx),
                                                max(0.0, self.deadline + ROLE_GRACE - time.monotonic()))
            except asyncio.TimeoutError:
                raise _deadline_error(self) from None
            try:
                json.dumps(result)
            except (TypeError, ValueError) as exc:
                raise SmcdpError(f"protocol {self.spec.protocol!r} returned a result that is not "
                                 f"JSON-serialisable: {exc}") from None
        except BaseException as exc:  # noqa: BLE001
            error = _error_dict(exc, self.party.name)
            if not isinstance(exc, SessionAborted) or error["origin"] == self.party.name:
                outcome = await ch.send_abort(
                    error["code"], f"role {self.role} ({self.party.name}) failed: {error['message']}",
                    timeout=min(5.0, cfg.timeouts.connect_seconds,
                                max(1.0, self.deadline - time.monotonic())))
                log.warning("session %s failed here (%s: %s); abort sent: %s", self.spec.session_id,
                            error["code"], error["message"], outcome)
            else:
                log.warning("session %s aborted by %s: %s", self.spec.session_id, error["origin"],
                            error["message"])
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            ch.mark_closed(None if error is None else
                           (error["code"], error["message"], error["origin"]))
            await ch.close()
        stats = dict(ch.stats.as_dict(), inbound_duplicates=ch.inbound_duplicates)
        # issue 17: this process's peak resident memory (VmHWM) since the session began
        stats["peak_rss_bytes"], stats["peak_rss_scope"] = peak_rss(rss_reset)
        state = "failed" if error is not None else "succeeded"
        record = self._record(state, result=result, error=error, stats=stats,
                              seconds=time.monotonic() - t0)
        try:
            write_json_atomic(self.party.record_path(self.spec.session_id), record)
        except OSError as exc:
            log.error("session %s: cannot write its record: %s", self.spec.session_id, exc)
            record = dict(record, record_write_error=str(exc))
        self.record = record
        self.state = state
        self.done.set_result(record)
        log.info("session %s %s", self.spec.session_id, state)

    def _record(self, state: str, result: Any = None, error: dict | None = None,
                stats: dict | None = None, seconds: float | None = None) -> dict:
        return {
            "session_id": self.spec.session_id, "protocol": self.spec.protocol,
            "party": self.party.name, "role": self.role, "roles": dict(self.spec.roles),
            "initiator": self.initiator, "params": dict(self.spec.params), "seed": self.spec.seed,
            "timeout_seconds": self.spec.timeout_seconds, "state": state, "result": result,
            "error": error, "stats": stats, "started_at": self.started_at,
            "finished_at": _utc_now() if state in ("succeeded", "failed") else None,
            "seconds": seconds,
        }


def _deadline_error(s: Session) -> SmcdpError:
    return DeadlineExceeded(f"session {s.spec.session_id}: role {s.role} did not finish within the "
                            f"session deadline of {s.spec.timeout_seconds:g} s")


