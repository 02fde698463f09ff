"""The party process: one gRPC server, sessions, protocol plug-ins.

``smcdp party --config FILE`` (or ``python parties/<name>.py --config FILE``)
runs :func:`serve` until SIGTERM/SIGINT.

Session life cycle (see docs/transport.md):

1. The operator of the initiating party calls ``Control.StartSession`` on its
   own server (certificate = the party's own).
2. The initiator registers the session locally, then sends ``Propose`` to every
   other participant.  Each checks that it holds a role, knows every
   participant's address, knows the protocol and that the protocol's
   ``validate_params`` accepts the parameters; it then prepares the session
   (mailbox ready, role not started).
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
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import datetime as _dt
import importlib
import json
import logging
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp._files import atomic_write_json
from smcdp.errors import (
    InvalidMessage,
    PermissionDenied,
    PreconditionFailed,
    SessionAborted,
    SmcdpError,
    Unavailable,
)
from smcdp.net.config import ConfigError, PartyConfig, Timeouts, load_config
from smcdp.net.grpc_channel import (
    AlreadyExists,
    GrpcChannel,
    NotFound,
    PeerConnector,
    call_with_retry,
    channel_options,
    error_for_code,
    error_from_rpc,
    status_code_of,
)
from smcdp.net.server import (
    SESSION_FAILED_METADATA,
    PartyServer,
    SessionHost,
    SessionSpec,
    parse_roles,
    validate_session_id,
)
from smcdp.net.tls import TlsMaterial
from smcdp.protocols.base import ProtocolPlugin, SessionContext, get_plugin
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc

log = logging.getLogger("smcdp.party")

#: ended sessions kept in memory (for late duplicate deliveries and quick GetResult)
KEEP_ENDED_SESSIONS = 1000
#: sessions (threads) one party runs at once; further proposals get RESOURCE_EXHAUSTED
MAX_ACTIVE_SESSIONS = 64
#: a role still running this long after its deadline is cancelled (DEADLINE_EXCEEDED)
ROLE_GRACE = 0.5
#: how long shutdown waits for aborted sessions to write their records
SHUTDOWN_GRACE = 10.0


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


class _Session:
    """One session at this party: its thread, event loop and channel."""

    def __init__(self, party: "Party", spec: SessionSpec, role: str, plugin: ProtocolPlugin,
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
            out_dir = cfg.data_dir / "outputs" / self.spec.session_id
            out_dir.mkdir(parents=True, exist_ok=True)
            ctx = SessionContext(
                session_id=self.spec.session_id, protocol=self.spec.protocol,
                roles=dict(self.spec.roles), params=dict(self.spec.params),
                inputs={k: str(v) for k, v in cfg.inputs.get(self.spec.protocol, {}).items()},
                output_dir=out_dir, allow_insecure_keys=cfg.allow_insecure_keys,
                seed=self.spec.seed)
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


def _deadline_error(s: _Session) -> SmcdpError:
    from smcdp.errors import DeadlineExceeded

    return DeadlineExceeded(f"session {s.spec.session_id}: role {s.role} did not finish within the "
                            f"session deadline of {s.spec.timeout_seconds:g} s")


def load_plugin_modules(modules: Sequence[str]) -> None:
    """Import the built-in protocols and the configured extra plug-in modules."""
    for m in ("smcdp.protocols.registry", *modules):
        try:
            importlib.import_module(m)
        except Exception as exc:  # noqa: BLE001
            raise ConfigError(f"cannot import protocol module {m!r}: {type(exc).__name__}: {exc}") from exc


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
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        self._connector: PeerConnector | None = None
        self._shutting_down = False
        self.port: int | None = None

    # ------------------------------------------------------------ lifecycle
    async def start(self) -> int:
        load_plugin_modules(self.config.plugins)
        (self.config.data_dir / "sessions").mkdir(parents=True, exist_ok=True)
        self.port = await self.server.start()
        self._connector = PeerConnector(self.config, self.tls)
        log.info("party %s listening on %s (port %d)", self.name, self.config.listen, self.port)
        return self.port

    async def stop(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Refuse new sessions, abort running ones (telling their peers), stop the server."""
        self._shutting_down = True
        await self.server.set_not_serving()
        running = [s for s in self.sessions.values() if not s.done.done()]
        for s in running:
            s.fail_threadsafe(SessionAborted(f"party {self.name} is shutting down", "UNAVAILABLE",
                                             self.name))
        if running:
            await asyncio.wait([asyncio.wrap_future(s.done) for s in running], timeout=grace)
        await self.server.stop(grace=1.0)
        if self._connector is not None:
            await self._connector.close()
        for s in running:
            s.thread.join(timeout=1.0)
        log.info("party %s stopped", self.name)

    def record_path(self, session_id: str) -> Path:
        return self.config.data_dir / "sessions" / f"{validate_session_id(session_id)}.json"

    # ---------------------------------------------------------- SessionHost
    def inbound_target(self, peer: str, session_id: str):
        s = self.sessions.get(session_id)
        if s is None or s.channel is None:
            raise PreconditionFailed(
                f"party {self.name!r} has no session {session_id!r} (never proposed here, or "
                "this party restarted since)")
        role = s.channel.role_of(peer)
        if role is None:
            raise PermissionDenied(f"party {peer!r} holds no role in session {session_id!r}")
        if role == s.role:
            raise PermissionDenied("a party cannot deliver messages to itself")
        return s.channel, role

    async def propose(self, peer: str, spec: SessionSpec) -> str:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
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
        active = sum(1 for x in self.sessions.values() if not x.done.done())
        if active >= MAX_ACTIVE_SESSIONS:
            exc = SmcdpError(f"party {self.name!r} already runs {active} sessions (the limit); "
                             "try again later")
            exc.code = "RESOURCE_EXHAUSTED"
            raise exc
        plugin = get_plugin(spec.protocol)
        try:
            params = plugin.validate_params(dict(spec.params), dict(roles))
        except SmcdpError:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            raise InvalidMessage(f"invalid parameters for {spec.protocol!r}: {exc}") from None
        existing = self.sessions.get(spec.session_id)
        if existing is not None and existing.initiator == peer and existing.spec.protocol == spec.protocol \
                and dict(existing.spec.roles) == dict(roles) and dict(existing.spec.params) == params \
                and existing.spec.seed == spec.seed and not existing.done.done():
            # A retried Propose (the first reply was lost or late): the same proposal is accepted again.
            log.info("session %s: repeated proposal from %s accepted again", spec.session_id, peer)
            return existing.role
        if existing is not None or self.record_path(spec.session_id).exists():
            raise AlreadyExists(f"session {spec.session_id!r} already exists at party {self.name!r}")
        try:
            json.dumps(params)
        except (TypeError, ValueError) as exc:
            raise SmcdpError(f"plugin {spec.protocol!r} normalised params to non-JSON: {exc}") from None
        spec = SessionSpec(spec.session_id, spec.protocol, roles, params, spec.timeout_seconds,
                           spec.seed)
        s = _Session(self, spec, mine[0], plugin, initiator=peer)
        self.sessions[spec.session_id] = s
        self._evict()
        s.start_thread()
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 10.0)
        if s.channel is None:
            raise SmcdpError(f"session {spec.session_id}: its thread did not start")
        log.info("session %s (%s) proposed by %s; %s plays %s", spec.session_id, spec.protocol,
                 peer, self.name, mine[0])
        return mine[0]

    def _evict(self) -> None:
        ended = [k for k, s in self.sessions.items() if s.done.done()]
        for k in ended[: max(0, len(ended) - KEEP_ENDED_SESSIONS)]:
            del self.sessions[k]

    def _session_for(self, peer: str, session_id: str) -> _Session:
        s = self.sessions.get(session_id)
        if s is None:
            raise PreconditionFailed(f"party {self.name!r} has no session {session_id!r}")
        if peer not in s.spec.roles.values():
            raise PermissionDenied(f"party {peer!r} holds no role in session {session_id!r}")
        return s

    async def begin(self, peer: str, session_id: str) -> None:
        s = self._session_for(peer, session_id)
        if peer != s.initiator:
            raise PermissionDenied(f"only the initiator {s.initiator!r} may begin session {session_id!r}")
        if s.done.done():
            raise PreconditionFailed(f"session {session_id!r} has already ended at {self.name!r}: "
                                     f"{(s.record or {}).get('error')}")
        s.begin_threadsafe()

    async def abort(self, peer: str, session_id: str, code: str, message: str) -> None:
        s = self._session_for(peer, session_id)
        role = next(r for r, p in s.spec.roles.items() if p == peer)
        s.fail_threadsafe(SessionAborted(
            f"session {session_id} aborted by {peer} (role {role}): {message}", code, peer))

    async def start_session(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any],
                            session_id: str | None = None, timeout: float | None = None,
                            seed: int | None = None) -> dict:
        if self._shutting_down:
            raise Unavailable(f"party {self.name} is shutting down")
        roles = parse_roles(roles)
        if self.name not in roles.values():
            raise InvalidMessage(f"the initiating party {self.name!r} must hold a role in the session "
                                 f"(roles: {roles})")
        sid = validate_session_id(session_id) if session_id else new_session_id(protocol)
        spec = SessionSpec(sid, protocol, roles, dict(params), timeout or
                           self.config.timeouts.session_seconds, seed)
        await self.propose(self.name, spec)
        s = self.sessions[sid]
        msg = tpb.SessionSpec(session_id=sid, protocol=protocol, roles=roles,
                              params_json=json.dumps(s.spec.params), timeout_seconds=spec.timeout_seconds)
        if seed is not None:
            msg.seed = seed
        others = [p for p in roles.values() if p != self.name]
        connect = self.config.timeouts.connect_seconds

        async def rpc(party: str, method: str, request) -> None:
            stub = self._connector.mailbox(party)
            await call_with_retry(f"{method} of session {sid}", party, self.config.address_of(party),
                                  s.deadline, lambda t: getattr(stub, method)(request, timeout=t),
                                  connect)

        for phase, request in (("Propose", msg), ("Begin", tpb.SessionRef(session_id=sid))):
            outcomes = await asyncio.gather(*(rpc(p, phase, request) for p in others),
                                            return_exceptions=True)
            failures = [(p, e) for p, e in zip(others, outcomes, strict=True) if isinstance(e, BaseException)]
            if failures:
                first = failures[0][1]
                text = "; ".join(str(e) for _, e in failures)
                exc = error_for_code(status_code_of(first).name, f"{phase} failed: {text}")
                s.fail_threadsafe(exc)
                s.begin_threadsafe()
                break
        else:
            s.begin_threadsafe()
        return await asyncio.wrap_future(s.done)

    async def get_result(self, session_id: str) -> dict:
        s = self.sessions.get(session_id)
        if s is not None:
            return s.snapshot()
        path = self.record_path(session_id)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise NotFound(f"party {self.name!r} has no session {session_id!r}") from None
        except (OSError, ValueError) as exc:
            raise SmcdpError(f"cannot read the record of session {session_id!r}: {exc}") from None


# ---------------------------------------------------------------- process
async def _serve(config: PartyConfig, ready_file: Path | None = None) -> int:
    party = Party(config)
    await party.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    if ready_file is not None:
        write_json_atomic(ready_file, {"party": party.name, "port": party.port, "pid": os.getpid()})
    print(f"party {party.name} serving on {config.listen} (port {party.port}); "
          "stop with SIGTERM or Ctrl-C", file=sys.stderr, flush=True)
    await stop.wait()
    print(f"party {party.name}: shutting down", file=sys.stderr, flush=True)
    await party.stop()
    return 0


def serve(config_path: str | os.PathLike, expect_name: str | None = None,
          ready_file: str | os.PathLike | None = None) -> int:
    """Run a party process until SIGTERM/SIGINT.  Returns the exit status."""
    config = load_config(config_path)
    if expect_name is not None and config.name != expect_name:
        raise ConfigError(f"{config_path} configures party {config.name!r}, but this launcher "
                          f"runs {expect_name!r}")
    return asyncio.run(_serve(config, Path(ready_file) if ready_file else None))


def main(argv: Sequence[str] | None = None, expect_name: str | None = None) -> int:
    """Entry point of ``parties/<name>.py`` and ``python -m smcdp.party``."""
    ap = argparse.ArgumentParser(
        prog=f"parties/{expect_name}.py" if expect_name else "smcdp-party",
        description="Run a smcdp party process until SIGTERM/SIGINT.")
    ap.add_argument("--config", required=True, help="the party's TOML configuration")
    ap.add_argument("--ready-file", help="write {party, port, pid} JSON here once serving")
    ap.add_argument("--log-level", default="INFO")
    args = ap.parse_args(argv)
    setup_logging(args.log_level)
    try:
        return serve(args.config, expect_name, args.ready_file)
    except SmcdpError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


def setup_logging(level: str = "INFO") -> None:
    logging.basicConfig(level=getattr(logging, str(level).upper(), logging.INFO),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s", stream=sys.stderr)


# ---------------------------------------------------------------- client API
def _operator_channel(config: PartyConfig, party: str | None = None) -> grpc.Channel:
    """A blocking channel to ``party`` (default: this party) with this party's certificate."""
    tls = TlsMaterial.load(config.tls.ca, config.tls.cert, config.tls.key)
    target = party or config.name
    creds = grpc.ssl_channel_credentials(tls.ca_pem, tls.key_pem, tls.cert_pem)
    return grpc.secure_channel(config.address_of(target), creds,
                               options=channel_options() + [("grpc.ssl_target_name_override", target)])


def _as_config(config: str | os.PathLike | PartyConfig) -> PartyConfig:
    return config if isinstance(config, PartyConfig) else load_config(config)


def start_session(config: str | os.PathLike | PartyConfig, protocol: str, roles: Mapping[str, str],
                  params: Mapping[str, Any] | None = None, *, session_id: str | None = None,
                  timeout: float | None = None, seed: int | None = None) -> dict:
    """Run a session with this party as initiator; return its durable record.

    Connects to the party's own server (address from its config) with the
    party's own certificate, so only its operator can do this.  Raises an
    :mod:`smcdp.errors` exception (code and message of the failure, e.g.
    :class:`~smcdp.errors.Unavailable` naming an unreachable party) if the
    session fails; the record stays available through :func:`get_result`.
    """
    cfg = _as_config(config)
    req = tpb.StartSessionRequest(protocol=protocol, roles=dict(roles),
                                  params_json=json.dumps(dict(params or {})),
                                  session_id=session_id or "", timeout_seconds=timeout or 0)
    if seed is not None:
        req.seed = seed
    wait = (timeout or cfg.timeouts.session_seconds) + cfg.timeouts.connect_seconds + 30.0
    with _operator_channel(cfg) as ch:
        try:
            reply = tgrpc.ControlStub(ch).StartSession(req, timeout=wait)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, "StartSession") from None
    return json.loads(reply.record_json)


def get_result(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 30.0) -> dict:
    """The record of ``session_id`` at this party (running, succeeded or failed)."""
    cfg = _as_config(config)
    with _operator_channel(cfg) as ch:
        try:
            reply = tgrpc.ControlStub(ch).GetResult(tpb.SessionRef(session_id=session_id),
                                                    timeout=timeout)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, "GetResult") from None
    return json.loads(reply.record_json)


def _client_error(exc: grpc.RpcError, cfg: PartyConfig, what: str) -> SmcdpError:
    try:
        session_failed = any(k == SESSION_FAILED_METADATA for k, _ in exc.trailing_metadata() or ())
    except Exception:  # noqa: BLE001 - errors raised before any response carry no metadata
        session_failed = False
    if exc.code() == grpc.StatusCode.UNAVAILABLE and not session_failed:
        return Unavailable(f"{what}: party {cfg.name!r} is not reachable at "
                           f"{cfg.address_of(cfg.name)}: {exc.details()}")
    return error_from_rpc(exc, f"{what} at party {cfg.name!r}")


def check_health(config: str | os.PathLike | PartyConfig, peer: str | None = None,
                 timeout: float = 5.0, service: str = "") -> str:
    """grpc.health.v1 status of this party's server (or of ``peer``), e.g. ``"SERVING"``."""
    cfg = _as_config(config)
    with _operator_channel(cfg, peer) as ch:
        try:
            resp = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=timeout)
        except grpc.RpcError as exc:
            raise error_from_rpc(exc, f"health check of {peer or cfg.name!r}") from None
    return health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status)


def wait_healthy(config: str | os.PathLike | PartyConfig, peer: str | None = None,
                 timeout: float = 30.0) -> None:
    """Block until the party (or ``peer``) answers SERVING; raise Unavailable after ``timeout``."""
    cfg = _as_config(config)
    end = time.monotonic() + timeout
    last = "no answer"
    while True:
        try:
            status = check_health(cfg, peer, timeout=max(0.5, min(5.0, end - time.monotonic())))
            if status == "SERVING":
                return
            last = status
        except SmcdpError as exc:
            last = str(exc)
        if time.monotonic() >= end:
            raise Unavailable(f"party {peer or cfg.name!r} not healthy within {timeout:g} s: {last}")
        time.sleep(0.2)


# ------------------------------------------------- local deployments (demo, tests)
def free_tcp_port(host: str = "127.0.0.1") -> int:
    """A port that was free a moment ago (the OS picks it; a race is possible but rare)."""
    import socket

    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def write_local_deployment(root: str | os.PathLike, parties: Sequence[str], *,
                           inputs: Mapping[str, Mapping[str, Mapping[str, str | os.PathLike]]] | None = None,
                           plugins: Sequence[str] = (), allow_insecure_keys: bool = False,
                           timeouts: Timeouts | None = None, host: str = "127.0.0.1",
                           ports: Mapping[str, int] | None = None) -> dict[str, Path]:
    """Certificates (``root/certs``) and one config per party (``root/config/<name>.toml``)
    for parties on one host; returns party -> config path.

    ``inputs`` is party -> protocol -> input name -> path; ports are picked with
    :func:`free_tcp_port` unless given; state goes to ``root/state/<name>``.
    """
    from smcdp.net.config import TlsConfig, dump_config
    from smcdp.net.tls import generate_deployment

    root = Path(root)
    certs = root / "certs"
    generate_deployment(certs, parties)
    ports = dict(ports or {})
    for p in parties:
        ports.setdefault(p, free_tcp_port(host))
    fmt = (lambda p: f"[{host}]:{ports[p]}") if ":" in host else (lambda p: f"{host}:{ports[p]}")
    paths = {}
    for p in parties:
        cfg = PartyConfig(
            name=p, listen=fmt(p), data_dir=root / "state" / p,
            tls=TlsConfig(certs / "ca.crt", certs / f"{p}.crt", certs / f"{p}.key"),
            peers={q: fmt(q) for q in parties if q != p},
            inputs={proto: {k: Path(v).resolve() for k, v in table.items()}
                    for proto, table in (inputs or {}).get(p, {}).items()},
            plugins=tuple(plugins), allow_insecure_keys=allow_insecure_keys,
            timeouts=timeouts or Timeouts())
        paths[p] = dump_config(cfg, root / "config" / f"{p}.toml")
    return paths


def spawn_party(config_path: str | os.PathLike, *, log_file=None,
                extra_env: Mapping[str, str] | None = None):
    """Start ``python -m smcdp.party --config FILE`` as a separate OS process.

    ``log_file``: an open binary file for its stdout/stderr (default: inherit).
    Returns the ``subprocess.Popen``; stop it with :func:`stop_party`.
    """
    import subprocess

    import smcdp

    src = str(Path(smcdp.__file__).resolve().parents[1])
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return subprocess.Popen([sys.executable, "-m", "smcdp.party", "--config", str(config_path)],
                            env=env, stdout=log_file, stderr=subprocess.STDOUT if log_file else None)


def stop_party(proc, timeout: float = 20.0) -> int:
    """SIGTERM, wait up to ``timeout`` for the clean shutdown, SIGKILL if it does not come."""
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
        log.error("party process %d did not stop within %.0f s and was killed", proc.pid, timeout)
        return proc.returncode


if __name__ == "__main__":  # python -m smcdp.party --config FILE
    sys.exit(main())
