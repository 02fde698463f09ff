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
import json
import logging
import os
import signal
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Any, Mapping, Sequence

from smcdp.compute import close_engines
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
)
from smcdp.net.server import (
    PartyServer,
    SessionHost,
    SessionSpec,
    parse_roles,
    validate_session_id,
)
from smcdp.net.tls import TlsMaterial
from smcdp.plugins.registry import get_plugin, load_plugin_modules
from smcdp.runtime.config import PartyConfig, load_config
from smcdp.runtime.session import Session, new_session_id, write_json_atomic
from smcdp.v1 import transport_pb2 as tpb

log = logging.getLogger("smcdp.party")

#: ended sessions kept in memory (for late duplicate deliveries and quick GetResult)
KEEP_ENDED_SESSIONS = 1000
#: sessions (threads) one party runs at once; further proposals get RESOURCE_EXHAUSTED
MAX_ACTIVE_SESSIONS = 64
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
        self.sessions: OrderedDict[str, Session] = OrderedDict()
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
        await close_engines()   # issue 17: the compute engines (process pools, a Dask LocalCluster)
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
        s = Session(self, spec, mine[0], plugin, initiator=peer)
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

    def _session_for(self, peer: str, session_id: str) -> Session:
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
    """Entry point of ``parties/<name>.py`` and ``python -m smcdp.runtime.party``."""
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



if __name__ == "__main__":  # python -m smcdp.runtime.party --config FILE
    sys.exit(main())
