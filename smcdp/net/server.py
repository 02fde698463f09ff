"""The gRPC server of one party: mailbox, session control, operator control, health.

This module is transport only.  What a session *is* (which protocol, which
thread runs it) belongs to a :class:`SessionHost` -- implemented by the party
runner (``smcdp.runtime.party``) -- which the servicers below call with the caller's
verified identity.  Identity is the common name of the client certificate
that gRPC verified against the deployment CA (``require_client_auth=True``);
no request field can change it.

Status codes (see docs/transport.md):

* UNAUTHENTICATED     -- no verified client certificate name (cannot normally
  happen: the TLS handshake already refuses clients without a valid certificate)
* PERMISSION_DENIED   -- the caller holds no role in the session, or calls an
  operator method without this party's own certificate
* FAILED_PRECONDITION -- unknown or ended session, or a session in the wrong state
* INVALID_ARGUMENT    -- malformed envelope / spec / parameters, or a second
  different message under the same tag
* ALREADY_EXISTS, NOT_FOUND -- session ids
* UNAVAILABLE         -- the party is shutting down
* PERMISSION_DENIED / FAILED_PRECONDITION / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED on
  Propose also carry the party's governance refusals (policy, bounds, budget, approval
  expired; docs/governance.md)
"""

from __future__ import annotations

import abc
import datetime as _dt
import json
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer as AsyncHealthServicer

from smcdp.errors import InvalidMessage, PermissionDenied, SmcdpError, Unauthenticated
from smcdp.net.config import NetConfig
from smcdp.net.grpc_channel import (
    MAX_GRPC_MESSAGE,
    ORIGIN_METADATA,
    server_options,
    status_code_of,
)
from smcdp.net.tls import PARTY_NAME_RE, TlsMaterial
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc

log = logging.getLogger("smcdp.net.server")

SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
TAG_MAX = 256
TYPE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
MAX_CHUNK = 4 * 1024 * 1024
SERVICE_NAMES = ("smcdp.v1.Mailbox", "smcdp.v1.Control")
#: trailing metadata of a StartSession that ran and failed (value: the session id)
SESSION_FAILED_METADATA = "smcdp-session-failed"


def validate_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise InvalidMessage(
            f"session id {session_id!r} is not valid: 1-128 characters from letters, digits, "
            "'.', '_' and '-', starting with a letter or digit")
    return session_id


def new_session_id(protocol: str) -> str:
    """A fresh, valid session id: the protocol's name, the UTC time and 32 random bits."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", protocol)[:60].strip("-.") or "session"
    return f"{stem}-{_dt.datetime.now(_dt.timezone.utc):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def peer_identity(context: grpc.aio.ServicerContext) -> str:
    """The party name of the caller: the CN of its verified client certificate."""
    auth = context.auth_context() or {}
    cns = auth.get("x509_common_name") or []
    if len(cns) != 1:
        raise Unauthenticated("the caller presented no verified client certificate")
    name = cns[0].decode("utf-8", "replace") if isinstance(cns[0], bytes) else str(cns[0])
    if not PARTY_NAME_RE.match(name):
        raise Unauthenticated(f"client certificate name {name!r} is not a valid party name")
    return name


class InboundTarget(Protocol):
    """Where a verified message for one session goes (a ``GrpcChannel``)."""

    def deliver_threadsafe(self, sender_role: str, tag: str, type_url: str, data: bytes) -> bool: ...


@dataclass(frozen=True)
class PendingApproval:
    """A proposal this party accepts only once its operator approves (``ProposeReply.pending``)."""

    detail: str


@dataclass(frozen=True)
class SessionSpec:
    """A validated ``SessionSpec`` message."""

    session_id: str
    protocol: str
    roles: Mapping[str, str]
    params: Mapping[str, Any]
    timeout_seconds: float
    seed: int | None = None


ROLE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_TIMEOUT = 7 * 24 * 3600.0


def parse_roles(roles: Mapping[str, str]) -> dict[str, str]:
    if not roles:
        raise InvalidMessage("a session needs at least one role")
    out = {}
    for role, party in roles.items():
        if not ROLE_RE.match(role):
            raise InvalidMessage(f"role name {role!r} is not valid (letters, digits, '_', '.', '-')")
        if not PARTY_NAME_RE.match(party):
            raise InvalidMessage(f"role {role!r} names an invalid party {party!r}")
        out[role] = party
    parties = list(out.values())
    dup = sorted({p for p in parties if parties.count(p) > 1})
    if dup:
        raise InvalidMessage(f"a party holds at most one role per session; {', '.join(dup)} "
                             "would hold several")
    return out


def parse_params_json(text: str) -> dict:
    if not text:
        return {}
    try:
        params = json.loads(text)
    except ValueError as exc:
        raise InvalidMessage(f"params are not valid JSON: {exc}") from None
    if not isinstance(params, dict):
        raise InvalidMessage("params must be a JSON object")
    return params


def parse_timeout(value: float, default: float | None = None) -> float:
    if value == 0 and default is not None:
        return default
    if not (0 < value <= MAX_TIMEOUT):
        raise InvalidMessage(f"timeout_seconds must be in (0, {MAX_TIMEOUT:.0f}], got {value}")
    return float(value)


def spec_from_message(msg: tpb.SessionSpec) -> SessionSpec:
    return SessionSpec(
        session_id=validate_session_id(msg.session_id),
        protocol=_nonempty(msg.protocol, "protocol"),
        roles=parse_roles(msg.roles),
        params=parse_params_json(msg.params_json),
        timeout_seconds=parse_timeout(msg.timeout_seconds),
        seed=msg.seed if msg.HasField("seed") else None,
    )


def _nonempty(v: str, what: str) -> str:
    if not v or len(v) > 128:
        raise InvalidMessage(f"{what} must be a non-empty string of at most 128 characters")
    return v


class SessionHost(abc.ABC):
    """What the servicers need from the party runner.

    Every method receives ``peer``, the caller's verified party name, and
    raises :mod:`smcdp.errors` exceptions (mapped to status codes).
    """

    name: str

    @abc.abstractmethod
    def inbound_target(self, peer: str, session_id: str) -> tuple[InboundTarget, str]:
        """(target, sender role) for a message from ``peer`` in ``session_id``."""

    @abc.abstractmethod
    async def propose(self, peer: str, spec: SessionSpec) -> str | PendingApproval:
        """Register a session proposed by ``peer``; return this party's role (or that it waits)."""

    @abc.abstractmethod
    async def begin(self, peer: str, session_id: str) -> None: ...

    @abc.abstractmethod
    async def abort(self, peer: str, session_id: str, code: str, message: str,
                    culprit: str | None = None) -> None: ...

    @abc.abstractmethod
    async def heartbeat(self, peer: str, session_id: str, incarnation: str, round: int) -> dict:
        """This party's view of ``session_id`` for a participant's liveness probe:
        ``{"state", "incarnation", "round", "code", "culprit"}`` (state "unknown" if it has none)."""

    @abc.abstractmethod
    async def resume(self, peer: str, session_id: str) -> str:
        """Reopen a resumably failed session from its checkpoint at the initiator's request; return the role."""

    @abc.abstractmethod
    async def get_status(self, session_id: str) -> dict: ...

    @abc.abstractmethod
    async def resume_session(self, session_id: str) -> dict: ...

    @abc.abstractmethod
    async def start_session(self, protocol: str, roles: Mapping[str, str], params: Mapping[str, Any],
                            session_id: str | None, timeout: float | None,
                            seed: int | None) -> dict: ...

    @abc.abstractmethod
    async def get_result(self, session_id: str) -> dict: ...

    # -- governance (operator only; docs/governance.md).  A host without it answers UNIMPLEMENTED.
    async def list_sessions(self, pending_only: bool) -> list[dict]:
        raise _unimplemented("ListSessions")

    async def show_session(self, session_id: str) -> dict:
        raise _unimplemented("ShowSession")

    async def decide(self, session_id: str, approve: bool, reason: str) -> dict:
        raise _unimplemented("ApproveSession/RejectSession")


def _unimplemented(what: str) -> SmcdpError:
    exc = SmcdpError(f"{what} is not supported by this party")
    exc.code = "UNIMPLEMENTED"
    return exc


async def _fail(context: grpc.aio.ServicerContext, exc: BaseException, what: str):
    code = status_code_of(exc)
    origin = getattr(exc, "origin", None)
    if isinstance(origin, str) and PARTY_NAME_RE.match(origin):
        context.set_trailing_metadata(((ORIGIN_METADATA, origin),))
    if code == grpc.StatusCode.INTERNAL:
        log.exception("internal error in %s", what)
        msg = f"internal error in {what}: {type(exc).__name__}: {exc}"
    else:
        msg = str(exc)
    await context.abort(code, msg)


class MailboxServicer(tgrpc.MailboxServicer):
    def __init__(self, host: SessionHost, max_message_bytes: int) -> None:
        self.host = host
        self.max_message_bytes = max_message_bytes

    async def Deliver(self, request_iterator, context):
        try:
            peer = peer_identity(context)
            target = sender_role = None
            first: tpb.Envelope | None = None
            buf = bytearray()
            expect = 0
            async for env in request_iterator:
                if first is None:
                    first = env
                    self._check_header(env)
                    target, sender_role = self.host.inbound_target(peer, env.session_id)
                elif (env.session_id, env.tag, env.type_name, env.chunk_count, env.total_size) != (
                        first.session_id, first.tag, first.type_name, first.chunk_count,
                        first.total_size):
                    raise InvalidMessage(f"chunk {env.chunk_index} of message {first.tag!r} has a "
                                         "header that differs from chunk 0")
                if env.chunk_index != expect:
                    raise InvalidMessage(f"message {first.tag!r}: expected chunk {expect}, "
                                         f"got {env.chunk_index}")
                if len(env.data) > MAX_CHUNK:
                    raise InvalidMessage(f"chunk larger than {MAX_CHUNK} bytes")
                buf += env.data
                if len(buf) > first.total_size:
                    raise InvalidMessage(f"message {first.tag!r} is longer than its total_size "
                                         f"{first.total_size}")
                expect += 1
            if first is None:
                raise InvalidMessage("empty Deliver stream: at least one envelope is needed")
            if expect != first.chunk_count or len(buf) != first.total_size:
                raise InvalidMessage(
                    f"message {first.tag!r} incomplete: {expect}/{first.chunk_count} chunks, "
                    f"{len(buf)}/{first.total_size} bytes")
            fresh = target.deliver_threadsafe(sender_role, first.tag, first.type_name, bytes(buf))
            return tpb.Ack(duplicate=not fresh, bytes=len(buf))
        except SmcdpError as exc:
            await _fail(context, exc, "Deliver")
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            await _fail(context, exc, "Deliver")

    def _check_header(self, env: tpb.Envelope) -> None:
        validate_session_id(env.session_id)
        if not env.tag or len(env.tag) > TAG_MAX:
            raise InvalidMessage(f"tag must be 1..{TAG_MAX} characters")
        if not TYPE_NAME_RE.match(env.type_name) or len(env.type_name) > 256:
            raise InvalidMessage(f"type_name {env.type_name!r} is not a protobuf message name")
        if env.chunk_count < 1:
            raise InvalidMessage("chunk_count must be at least 1")
        if env.total_size > self.max_message_bytes:
            raise InvalidMessage(f"message of {env.total_size} bytes exceeds this party's limit of "
                                 f"{self.max_message_bytes} bytes (party.max_message_mib)")
        if env.chunk_count > max(1, env.total_size):
            raise InvalidMessage(f"chunk_count {env.chunk_count} is larger than total_size "
                                 f"{env.total_size} allows")

    async def Propose(self, request, context):
        try:
            peer = peer_identity(context)
            spec = spec_from_message(request)
            answer = await self.host.propose(peer, spec)
            if isinstance(answer, PendingApproval):
                return tpb.ProposeReply(pending=True, detail=answer.detail)
            return tpb.ProposeReply(role=answer)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Propose")

    async def Begin(self, request, context):
        try:
            peer = peer_identity(context)
            await self.host.begin(peer, validate_session_id(request.session_id))
            return tpb.BeginReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Begin")

    async def Abort(self, request, context):
        try:
            peer = peer_identity(context)
            code = request.code if request.code in grpc.StatusCode.__members__ else "ABORTED"
            culprit = request.culprit or None
            if culprit is not None and not PARTY_NAME_RE.match(culprit):
                raise InvalidMessage("Abort names a culprit that is not a valid party name")
            await self.host.abort(peer, validate_session_id(request.session_id), code,
                                  request.message[:4000], culprit)
            return tpb.AbortReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Abort")

    async def Heartbeat(self, request, context):
        try:
            peer = peer_identity(context)
            view = await self.host.heartbeat(peer, validate_session_id(request.session_id),
                                             request.incarnation[:64], int(request.round))
            return tpb.HeartbeatReply(**view)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Heartbeat")

    async def Resume(self, request, context):
        try:
            peer = peer_identity(context)
            role = await self.host.resume(peer, validate_session_id(request.session_id))
            return tpb.ResumeReply(role=role)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Resume")


def _info_message(info: dict) -> tpb.SessionInfo:
    return tpb.SessionInfo(session_id=str(info.get("session_id", "")), state=str(info.get("state", "")),
                           info_json=json.dumps(info, sort_keys=True))


def _record_message(record: dict) -> tpb.SessionRecord:
    return tpb.SessionRecord(session_id=record["session_id"], state=record["state"],
                             record_json=json.dumps(record, sort_keys=True))


class ControlServicer(tgrpc.ControlServicer):
    """Operator calls: only a caller holding this party's own certificate."""

    def __init__(self, host: SessionHost) -> None:
        self.host = host

    def _operator(self, context) -> None:
        peer = peer_identity(context)
        if peer != self.host.name:
            raise PermissionDenied(
                f"only this party's operator (certificate {self.host.name!r}) may control its "
                f"sessions; the caller is {peer!r}")

    async def StartSession(self, request, context):
        try:
            self._operator(context)
            record = await self.host.start_session(
                _nonempty(request.protocol, "protocol"), parse_roles(request.roles),
                parse_params_json(request.params_json),
                validate_session_id(request.session_id) if request.session_id else None,
                parse_timeout(request.timeout_seconds) if request.timeout_seconds else None,
                request.seed if request.HasField("seed") else None)
            return await self._finish(context, record)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "StartSession")

    async def _finish(self, context, record: dict) -> tpb.SessionRecord:
        """A session's record as the reply, or -- if it failed -- its status code with the culprit."""
        if record["state"] == "failed":
            err = record.get("error") or {}
            code = err.get("code", "INTERNAL")
            origin = err.get("origin")
            meta = [(SESSION_FAILED_METADATA, record["session_id"])]
            if origin and origin != self.host.name and PARTY_NAME_RE.match(origin):
                meta.append((ORIGIN_METADATA, origin))
            context.set_trailing_metadata(tuple(meta))
            await context.abort(
                grpc.StatusCode[code] if code in grpc.StatusCode.__members__ else grpc.StatusCode.INTERNAL,
                f"session {record['session_id']} failed: {err.get('message', '')}")
        return _record_message(record)

    async def GetResult(self, request, context):
        try:
            self._operator(context)
            record = await self.host.get_result(validate_session_id(request.session_id))
            return _record_message(record)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetResult")

    async def GetStatus(self, request, context):
        try:
            self._operator(context)
            status = await self.host.get_status(validate_session_id(request.session_id))
            return tpb.SessionStatus(session_id=status["session_id"], state=status["state"],
                                     status_json=json.dumps(status, sort_keys=True))
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetStatus")

    async def ResumeSession(self, request, context):
        try:
            self._operator(context)
            record = await self.host.resume_session(validate_session_id(request.session_id))
            return await self._finish(context, record)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "ResumeSession")
    # -- governance
    async def _governance(self, context, what: str, call):
        try:
            self._operator(context)
            return await call()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, what)

    async def ListSessions(self, request, context):
        async def call():
            items = await self.host.list_sessions(bool(request.pending_only))
            return tpb.SessionList(sessions=[_info_message(i) for i in items])
        return await self._governance(context, "ListSessions", call)

    async def ShowSession(self, request, context):
        async def call():
            return _info_message(await self.host.show_session(validate_session_id(request.session_id)))
        return await self._governance(context, "ShowSession", call)

    async def ApproveSession(self, request, context):
        async def call():
            return _info_message(await self.host.decide(validate_session_id(request.session_id), True, ""))
        return await self._governance(context, "ApproveSession", call)

    async def RejectSession(self, request, context):
        async def call():
            return _info_message(await self.host.decide(validate_session_id(request.session_id), False,
                                                        request.reason))
        return await self._governance(context, "RejectSession", call)


class PartyServer:
    """``grpc.aio`` server with mutual TLS, the servicers above and grpc.health.v1."""

    def __init__(self, config: NetConfig, tls: TlsMaterial, host: SessionHost) -> None:
        self.config = config
        self.tls = tls
        self.host = host
        self.health = AsyncHealthServicer()
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None

    async def start(self) -> int:
        server = grpc.aio.server(options=server_options(MAX_GRPC_MESSAGE))
        tgrpc.add_MailboxServicer_to_server(
            MailboxServicer(self.host, self.config.max_message_bytes), server)
        tgrpc.add_ControlServicer_to_server(ControlServicer(self.host), server)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        creds = grpc.ssl_server_credentials(
            [(self.tls.key_pem, self.tls.cert_pem)], root_certificates=self.tls.ca_pem,
            require_client_auth=True)
        try:
            port = server.add_secure_port(self.config.listen, creds)
        except RuntimeError as exc:
            raise SmcdpError(f"cannot listen on {self.config.listen}: {exc}") from None
        if port == 0:
            raise SmcdpError(f"cannot listen on {self.config.listen} (address in use or invalid)")
        await server.start()
        self._server = server
        self.port = port
        for svc in ("",) + SERVICE_NAMES:
            await self.health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        return port

    async def set_not_serving(self) -> None:
        await self.health.enter_graceful_shutdown()

    async def stop(self, grace: float = 2.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
