"""The operator's client: talk to one's own party with one's own certificate.

``StartSession`` / ``GetResult`` are operator calls: the party accepts them
only from a caller holding the party's own certificate (docs/transport.md).
The ``smcdp session …`` and ``smcdp health`` commands are thin layers over
these functions.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any, Mapping

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp.errors import (
    SmcdpError,
    Unavailable,
)
from smcdp.net.grpc_channel import (
    NotFound,
    channel_options,
    error_for_code,
    error_from_rpc,
)
from smcdp.net.server import (
    SESSION_FAILED_METADATA,
    namespaced,
    new_session_id,
)
from smcdp.net.tls import TlsMaterial
from smcdp.runtime.config import PartyConfig, load_config
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc


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

    If the connection to the party is lost while the session runs (the party
    process restarted: it resumes the session from its checkpoint), this
    waits for the party to come back and follows the session to its end.
    """
    return begin_session(config, protocol, roles, params, session_id=session_id, timeout=timeout,
                         seed=seed).result()


class StartCall:
    """A ``StartSession`` call in flight: the party runs the session while the call is open.

    :meth:`result` waits for the session's record (what :func:`start_session`
    returns, with the same errors) and closes the call's channel; :meth:`close`
    without waiting cancels the call, which cancels the session too if the
    participants have not all agreed to it yet (once it has begun, it runs on).
    """

    def __init__(self, cfg: PartyConfig, request: tpb.StartSessionRequest, end: float) -> None:
        self.config = cfg
        self.session_id = request.session_id
        self._end = end
        self._channel = _operator_channel(cfg)
        self._future = tgrpc.ControlStub(self._channel).StartSession.future(
            request, timeout=max(1.0, end - time.monotonic()))
        self._outcome: tuple[dict | None, SmcdpError | None] | None = None

    def done(self) -> bool:
        """True once the call has returned (the session ended, or the call failed)."""
        return self._outcome is not None or self._future.done()

    def result(self) -> dict:
        if self._outcome is None:
            self._outcome = self._settle()
        record, err = self._outcome
        if err is not None:
            raise err
        assert record is not None
        return record

    def _settle(self) -> tuple[dict | None, SmcdpError | None]:
        try:
            try:
                reply = self._future.result()
                return json.loads(reply.record_json), None
            except grpc.RpcError as exc:
                err = _client_error(exc, self.config, "StartSession")
                if not isinstance(err, Unavailable):
                    return None, err
            finally:
                self.close()
            return follow_session(self.config, self.session_id, self._end - time.monotonic(), lost=err), None
        except SmcdpError as exc:
            return None, exc

    def close(self) -> None:
        self._channel.close()


def begin_session(config: str | os.PathLike | PartyConfig, protocol: str, roles: Mapping[str, str],
                  params: Mapping[str, Any] | None = None, *, session_id: str | None = None,
                  timeout: float | None = None, seed: int | None = None) -> StartCall:
    """Start a session with this party as initiator without waiting; ``.result()`` waits (see :class:`StartCall`)."""
    cfg = _as_config(config)
    # known here, so the session can be followed: in this party's namespace, as the party names it (issue 24)
    sid = namespaced(cfg.name, session_id or new_session_id(protocol))
    req = tpb.StartSessionRequest(protocol=protocol, roles=dict(roles),
                                  params_json=json.dumps(dict(params or {})),
                                  session_id=sid, timeout_seconds=timeout or 0)
    if seed is not None:
        req.seed = seed
    session_seconds = timeout or cfg.timeouts.session_seconds
    end = time.monotonic() + session_seconds + cfg.timeouts.connect_seconds + 30.0
    return StartCall(cfg, req, end)


def follow_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float,
                   lost: SmcdpError | None = None, poll: float = 0.5) -> dict:
    """Wait until ``session_id`` ends at this party (coming back after a restart); return its record.

    Raises the record's error if it failed, ``lost`` if the party never heard of the
    session, and Unavailable if the party stays unreachable past ``timeout``.
    """
    cfg = _as_config(config)
    end = time.monotonic() + max(0.0, timeout)
    last: SmcdpError | None = lost
    while time.monotonic() < end:
        try:
            rec = get_result(cfg, session_id, timeout=min(10.0, max(1.0, end - time.monotonic())))
        except NotFound:
            if lost is not None:
                raise lost from None
            raise
        except Unavailable as exc:
            last = exc
            time.sleep(poll)
            continue
        if rec.get("state") == "succeeded":
            return rec
        if rec.get("state") == "failed":
            e = rec.get("error") or {}
            raise error_for_code(e.get("code", "INTERNAL"), f"session {session_id} failed: {e.get('message', '')}",
                                 e.get("origin"))
        time.sleep(poll)
    raise Unavailable(f"session {session_id} at party {cfg.name!r} did not end within the wait"
                      + (f" (last error: {last})" if last is not None else ""))


def get_status(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 10.0) -> dict:
    """How ``session_id`` stands at this party now: state, round, step, restarts, peers' liveness."""
    cfg = _as_config(config)
    with _operator_channel(cfg) as ch:
        try:
            reply = tgrpc.ControlStub(ch).GetStatus(tpb.SessionRef(session_id=session_id), timeout=timeout)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, "GetStatus") from None
    return json.loads(reply.status_json)


def resume_session(config: str | os.PathLike | PartyConfig, session_id: str,
                   timeout: float | None = None) -> dict:
    """Continue a session this party initiated that failed resumably; return its record when it ends."""
    cfg = _as_config(config)
    wait = (timeout or cfg.timeouts.session_seconds) + cfg.timeouts.connect_seconds + 30.0
    with _operator_channel(cfg) as ch:
        try:
            reply = tgrpc.ControlStub(ch).ResumeSession(tpb.SessionRef(session_id=session_id), timeout=wait)
        except grpc.RpcError as exc:
            err = _client_error(exc, cfg, "ResumeSession")
            if not isinstance(err, Unavailable):
                raise err from None
            return follow_session(cfg, session_id, wait, lost=err)
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


def _control(cfg: PartyConfig, method: str, request, timeout: float):
    with _operator_channel(cfg) as ch:
        try:
            return getattr(tgrpc.ControlStub(ch), method)(request, timeout=timeout)
        except grpc.RpcError as exc:
            raise _client_error(exc, cfg, method) from None


def list_sessions(config: str | os.PathLike | PartyConfig, pending_only: bool = False,
                  timeout: float = 30.0) -> list[dict]:
    """Proposals (pending and decided) and sessions at this party, as dicts (docs/governance.md)."""
    cfg = _as_config(config)
    reply = _control(cfg, "ListSessions", tpb.ListSessionsRequest(pending_only=pending_only), timeout)
    return [json.loads(i.info_json) for i in reply.sessions]


def show_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 30.0) -> dict:
    """What a proposal asks of this party (protocol, roles, parameters, initiator, epsilon) and its state."""
    cfg = _as_config(config)
    return json.loads(_control(cfg, "ShowSession", tpb.SessionRef(session_id=session_id), timeout).info_json)


def approve_session(config: str | os.PathLike | PartyConfig, session_id: str, timeout: float = 60.0) -> dict:
    """Approve a pending proposal (its privacy cost is reserved now; RESOURCE_EXHAUSTED if it does not fit)."""
    cfg = _as_config(config)
    req = tpb.DecisionRequest(session_id=session_id)
    return json.loads(_control(cfg, "ApproveSession", req, timeout).info_json)


def reject_session(config: str | os.PathLike | PartyConfig, session_id: str, reason: str,
                   timeout: float = 60.0) -> dict:
    """Reject a pending (or approved, not yet started) proposal; the initiator is told ``reason``."""
    cfg = _as_config(config)
    req = tpb.DecisionRequest(session_id=session_id, reason=reason)
    return json.loads(_control(cfg, "RejectSession", req, timeout).info_json)


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


