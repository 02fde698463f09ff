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
* INVALID_ARGUMENT    -- malformed envelope / spec / parameters (including bytes
  that do not decode as the request type, and JSON past its size or depth
  bound), an abort code that is not a failure code, or a second different
  message under the same tag
* RESOURCE_EXHAUSTED  -- a limit of :mod:`smcdp.net.limits` (session slots,
  bytes or messages of a session), checked before anything is buffered
* ALREADY_EXISTS, NOT_FOUND -- session ids
* UNAVAILABLE         -- the party is shutting down
* PERMISSION_DENIED / FAILED_PRECONDITION / RESOURCE_EXHAUSTED / DEADLINE_EXCEEDED on
  Propose also carry the party's governance refusals (policy, bounds, budget, approval
  expired; docs/governance.md)

Requests are decoded by this module, not by gRPC: a request that does not
parse reaches its handler as :class:`Undecodable` and is refused with
INVALID_ARGUMENT (gRPC's own decoding would answer INTERNAL or UNKNOWN).
Peer-supplied text that this party logs or records (abort messages) goes
through :func:`smcdp._text.printable` first.
"""

from __future__ import annotations

import abc
import asyncio
import datetime as _dt
import json
import logging
import re
import secrets
from dataclasses import dataclass
from typing import Any, Mapping, Protocol

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1._async import HealthServicer as AsyncHealthServicer

from smcdp._text import printable
from smcdp.errors import InvalidMessage, PermissionDenied, ResourceExhausted, SmcdpError, Unauthenticated
from smcdp.net.config import NetConfig
from smcdp.net.grpc_channel import (
    CLIENT_KEEPALIVE_MS,
    MAX_GRPC_MESSAGE,
    ORIGIN_METADATA,
    status_code_of,
)
from smcdp.net.limits import Limits, bounded_json_object
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
    """Where a verified message for one session goes (a ``GrpcChannel``).

    ``budget`` (an :class:`smcdp.net.limits.InboundBudget`, or None for no
    per-session budget) is charged from a message's first envelope, before the
    rest of it is read.
    """

    budget: Any

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
MAX_ROLES = 128
#: codes an Abort may carry: every gRPC status except OK (a failure must say it failed)
ABORT_CODES = frozenset(c.name for c in grpc.StatusCode if c is not grpc.StatusCode.OK)


def parse_roles(roles: Mapping[str, str]) -> dict[str, str]:
    if not roles:
        raise InvalidMessage("a session needs at least one role")
    if len(roles) > MAX_ROLES:
        raise InvalidMessage(f"a session has at most {MAX_ROLES} roles, got {len(roles)}")
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
    """A session's parameters: a JSON object of bounded size and depth (checked before parsing)."""
    return bounded_json_object(text, "params_json")


def parse_timeout(value: float, default: float | None = None) -> float:
    if value == 0 and default is not None:
        return default
    if not (0 < value <= MAX_TIMEOUT):  # also refuses NaN
        raise InvalidMessage(f"timeout_seconds must be in (0, {MAX_TIMEOUT:.0f}], got {value}")
    return float(value)


def parse_abort_code(code: str) -> str:
    if code not in ABORT_CODES:
        raise InvalidMessage(f"abort code {printable(code, 40)!r} is not a failure status; use one of "
                             f"the gRPC status names other than OK (e.g. ABORTED, INVALID_ARGUMENT)")
    return code


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes did not parse as its type (decoded here, refused by the handler)."""

    type_name: str
    reason: str


def checked(request: Any) -> Any:
    if isinstance(request, Undecodable):
        raise InvalidMessage(f"the request is not a valid {request.type_name}: {request.reason}")
    return request


def _tolerant_deserializer(cls):
    def deserialize(data: bytes):
        msg = cls()
        try:
            msg.ParseFromString(data)
        except (DecodeError, RecursionError, ValueError) as exc:
            return Undecodable(cls.DESCRIPTOR.full_name, printable(str(exc) or type(exc).__name__, 200))
        return msg
    return deserialize


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

    async def waiting(self, peer: str, session_id: str, party: str) -> None:
        """The initiator ``peer`` says ``session_id`` waits for ``party``'s operator (issue 24)."""
        raise _unimplemented("Waiting")

    async def witness(self, peer: str, statement: bytes, signature: bytes, certificate: bytes
                      ) -> tuple[bytes, bytes, bytes] | None:
        """Keep ``peer``'s signed audit head; return this party's own (issue 24)."""
        raise _unimplemented("Witness")

    async def witnessed(self, peer: str) -> list[tuple[bytes, bytes, bytes]]:
        """The signed audit heads this party holds about ``peer``."""
        raise _unimplemented("GetWitnessed")

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

    # observation (issue 18: console and metrics); the transport reports, the host keeps counts
    def inbound_delivered(self, peer: str, nbytes: int, duplicate: bool) -> None:
        """A message of ``nbytes`` from ``peer`` was accepted (``duplicate``: already held)."""

    def inbound_refused(self, peer: str | None, code: str) -> None:
        """A message was refused with status ``code`` (``peer`` None if not even identified)."""


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
        msg = f"internal error in {what}: {type(exc).__name__}"
    else:
        msg = str(exc)
    await context.abort(code, printable(msg))


class MailboxServicer(tgrpc.MailboxServicer):
    def __init__(self, host: SessionHost, max_message_bytes: int) -> None:
        self.host = host
        self.max_message_bytes = max_message_bytes

    async def Deliver(self, request_iterator, context):
        failure = peer = first = None
        try:
            peer = peer_identity(context)
            it = request_iterator.__aiter__()
            try:
                first = checked(await it.__anext__())
            except StopAsyncIteration:
                raise InvalidMessage("empty Deliver stream: at least one envelope is needed") from None
            return await self._receive(peer, first, it, last=True)
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            failure = exc
        first = None  # noqa: F841 - not kept alive by the abort (see _receive)
        await self._refuse(context, peer, failure, "Deliver")

    async def Stream(self, request_iterator, context):
        """Deliver for many messages on one call: an Ack per message, in order; the first refusal ends the call."""
        failure = peer = first = None
        try:
            peer = peer_identity(context)
            it = request_iterator.__aiter__()
            while True:
                try:
                    first = checked(await it.__anext__())
                except StopAsyncIteration:
                    return
                yield await self._receive(peer, first, it)
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            failure = exc
        first = None  # noqa: F841 - not kept alive by the abort (see _receive)
        await self._refuse(context, peer, failure, "Stream")

    async def _receive(self, peer: str, first: tpb.Envelope, it, last: bool = False) -> tpb.Ack:
        """One message whose first chunk is ``first`` (the rest come from ``it``): checked, charged to the
        session's budget before a byte is buffered, delivered; the Ack.  ``last``: the call holds nothing
        else (Deliver), which is checked before the message is delivered."""
        budget = charge = None
        stored = False
        self._check_header(first)
        target, sender_role = self.host.inbound_target(peer, first.session_id)
        try:
            # charge the session's budget from the declared size, before buffering a byte
            budget = getattr(target, "budget", None)
            if budget is not None:
                charge = budget.admit(sender_role, first.tag, first.total_size)
            buf = bytearray()
            env = first
            for expect in range(first.chunk_count):
                if expect:
                    try:
                        env = checked(await it.__anext__())
                    except StopAsyncIteration:
                        raise InvalidMessage(
                            f"message {first.tag!r} incomplete: {expect}/{first.chunk_count} chunks, "
                            f"{len(buf)}/{first.total_size} bytes") from None
                    if (env.session_id, env.tag, env.type_name, env.chunk_count, env.total_size) != (
                            first.session_id, first.tag, first.type_name, first.chunk_count,
                            first.total_size):
                        raise InvalidMessage(f"chunk {env.chunk_index} of message {first.tag!r} has a "
                                             "header that differs from chunk 0")
                if env.chunk_index != expect:
                    raise InvalidMessage(f"message {first.tag!r}: expected chunk {expect}, "
                                         f"got {env.chunk_index}")
                if len(env.data) > MAX_CHUNK:
                    raise InvalidMessage(f"chunk larger than {MAX_CHUNK} bytes")
                if len(buf) + len(env.data) > first.total_size:
                    raise InvalidMessage(f"message {first.tag!r} is longer than its total_size "
                                         f"{first.total_size}")
                buf += env.data
            if len(buf) != first.total_size:
                raise InvalidMessage(
                    f"message {first.tag!r} incomplete: {first.chunk_count}/{first.chunk_count} chunks, "
                    f"{len(buf)}/{first.total_size} bytes")
            if last:
                async for extra in it:
                    checked(extra)
                    raise InvalidMessage(f"message {first.tag!r}: more chunks than its chunk_count "
                                         f"{first.chunk_count}")
            # off the server's loop: the journal's write and fsync must not hold up other calls (heartbeats
            # of other sessions time out behind a disk busy with twenty sessions' journals)
            fresh = await asyncio.to_thread(target.deliver_threadsafe, sender_role, first.tag, first.type_name,
                                            bytes(buf))
            stored = fresh
            self._observe(self.host.inbound_delivered, peer, len(buf), not fresh)
            return tpb.Ack(duplicate=not fresh, bytes=len(buf))
        finally:
            # Drop the message's bytes before any refusal is answered: the abort's exception keeps the
            # frames (and so their locals) alive until the cyclic garbage collector runs, which counts
            # objects, not bytes -- a stream of refused 1 MiB messages would otherwise pile up in memory.
            buf = env = None  # noqa: F841
            if budget is not None and charge is not None:
                budget.settle(sender_role, first.tag, charge, stored)

    async def _refuse(self, context, peer: str | None, failure: BaseException, what: str) -> None:
        failure.__traceback__ = None
        self._observe(self.host.inbound_refused, peer, status_code_of(failure).name)
        await _fail(context, failure, what)

    @staticmethod
    def _observe(fn, *args) -> None:
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - observation never changes what the peer is answered
            log.exception("observing a delivery failed")

    def _check_header(self, env: tpb.Envelope) -> None:
        validate_session_id(env.session_id)
        if not env.tag or len(env.tag) > TAG_MAX:
            raise InvalidMessage(f"tag must be 1..{TAG_MAX} characters")
        if not TYPE_NAME_RE.match(env.type_name) or len(env.type_name) > 256:
            raise InvalidMessage(f"type_name {env.type_name!r} is not a protobuf message name")
        if env.chunk_count < 1:
            raise InvalidMessage("chunk_count must be at least 1")
        if env.total_size > self.max_message_bytes:
            raise ResourceExhausted(f"message of {env.total_size} bytes exceeds this party's limit of "
                                    f"{self.max_message_bytes} bytes (limits.max_message_mib)")
        if env.chunk_count > max(1, env.total_size):
            raise InvalidMessage(f"chunk_count {env.chunk_count} is larger than total_size "
                                 f"{env.total_size} allows")

    async def Propose(self, request, context):
        try:
            peer = peer_identity(context)
            spec = spec_from_message(checked(request))
            answer = await self.host.propose(peer, spec)
            if isinstance(answer, PendingApproval):
                return tpb.ProposeReply(pending=True, detail=answer.detail)
            return tpb.ProposeReply(role=answer)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Propose")

    async def Begin(self, request, context):
        try:
            peer = peer_identity(context)
            await self.host.begin(peer, validate_session_id(checked(request).session_id))
            return tpb.BeginReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Begin")

    async def Abort(self, request, context):
        try:
            peer = peer_identity(context)
            request = checked(request)
            sid = validate_session_id(request.session_id)
            code = parse_abort_code(request.code)
            culprit = request.culprit or None
            if culprit is not None and not PARTY_NAME_RE.match(culprit):
                raise InvalidMessage("Abort names a culprit that is not a valid party name")
            await self.host.abort(peer, sid, code, printable(request.message), culprit)
            return tpb.AbortReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Abort")

    async def Heartbeat(self, request, context):
        try:
            peer = peer_identity(context)
            view = await self.host.heartbeat(peer, validate_session_id(checked(request).session_id),
                                             checked(request).incarnation[:64], int(checked(request).round))
            return tpb.HeartbeatReply(**view)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Heartbeat")

    async def Resume(self, request, context):
        try:
            peer = peer_identity(context)
            role = await self.host.resume(peer, validate_session_id(checked(request).session_id))
            return tpb.ResumeReply(role=role)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Resume")

    async def Waiting(self, request, context):
        try:
            peer = peer_identity(context)
            request = checked(request)
            if not PARTY_NAME_RE.match(request.party):
                raise InvalidMessage("Waiting names a party that is not a valid party name")
            await self.host.waiting(peer, validate_session_id(request.session_id), request.party)
            return tpb.WaitingReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Waiting")

    async def Witness(self, request, context):
        try:
            peer = peer_identity(context)
            request = checked(request)
            mine = await self.host.witness(peer, request.statement, request.signature, request.certificate)
            return tpb.SignedAuditHead() if mine is None else tpb.SignedAuditHead(
                statement=mine[0], signature=mine[1], certificate=mine[2])
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Witness")

    async def GetWitnessed(self, request, context):
        try:
            peer = peer_identity(context)
            checked(request)
            heads = await self.host.witnessed(peer)
            return tpb.WitnessedHeads(heads=[tpb.SignedAuditHead(statement=a, signature=b, certificate=c)
                                             for a, b, c in heads])
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetWitnessed")


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
            request = checked(request)
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
                grpc.StatusCode[code] if code in ABORT_CODES else grpc.StatusCode.INTERNAL,
                printable(f"session {record['session_id']} failed: {err.get('message', '')}"))
        return _record_message(record)

    async def GetResult(self, request, context):
        try:
            self._operator(context)
            record = await self.host.get_result(validate_session_id(checked(request).session_id))
            return _record_message(record)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetResult")

    async def GetStatus(self, request, context):
        try:
            self._operator(context)
            status = await self.host.get_status(validate_session_id(checked(request).session_id))
            return tpb.SessionStatus(session_id=status["session_id"], state=status["state"],
                                     status_json=json.dumps(status, sort_keys=True))
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetStatus")

    async def ResumeSession(self, request, context):
        try:
            self._operator(context)
            record = await self.host.resume_session(validate_session_id(checked(request).session_id))
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
            items = await self.host.list_sessions(bool(checked(request).pending_only))
            return tpb.SessionList(sessions=[_info_message(i) for i in items])
        return await self._governance(context, "ListSessions", call)

    async def ShowSession(self, request, context):
        async def call():
            return _info_message(await self.host.show_session(validate_session_id(checked(request).session_id)))
        return await self._governance(context, "ShowSession", call)

    async def ApproveSession(self, request, context):
        async def call():
            return _info_message(await self.host.decide(validate_session_id(checked(request).session_id), True, ""))
        return await self._governance(context, "ApproveSession", call)

    async def RejectSession(self, request, context):
        async def call():
            return _info_message(await self.host.decide(validate_session_id(checked(request).session_id), False,
                                                        checked(request).reason))
        return await self._governance(context, "RejectSession", call)


#: the server's HTTP/2 keepalive policy.  Clients (channel_options) ping every
#: CLIENT_KEEPALIVE_MS, also without calls; the server must accept pings that often, or
#: it counts "strikes" and ends the connection with GOAWAY "too_many_pings" (gRPC's
#: default minimum is 5 minutes).  It accepts one every half client interval (jitter),
#: and pings idle clients itself to notice dead ones.
SERVER_MIN_PING_INTERVAL_MS = CLIENT_KEEPALIVE_MS // 2
SERVER_KEEPALIVE_MS = 60_000
SERVER_KEEPALIVE_TIMEOUT_MS = 20_000
#: largest header block (metadata) a client may send
MAX_METADATA_BYTES = 16 * 1024


def server_options(limits: Limits) -> list[tuple[str, int]]:
    """The gRPC server's own limits, set deliberately (docs/security.md)."""
    return [
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", SERVER_MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_time_ms", SERVER_KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", SERVER_KEEPALIVE_TIMEOUT_MS),
    ]


def _generic_handler(service: str, servicer: Any) -> grpc.GenericRpcHandler:
    """The service's handlers with this module's decoding (see :class:`Undecodable`)."""
    desc = tpb.DESCRIPTOR.services_by_name[service.rsplit(".", 1)[1]]
    handlers = {}
    for m in desc.methods:
        req_cls = getattr(tpb, m.input_type.name)
        resp_cls = getattr(tpb, m.output_type.name)
        make = {(True, True): grpc.stream_stream_rpc_method_handler,
                (True, False): grpc.stream_unary_rpc_method_handler,
                (False, False): grpc.unary_unary_rpc_method_handler}[(m.client_streaming, m.server_streaming)]
        handlers[m.name] = make(getattr(servicer, m.name), request_deserializer=_tolerant_deserializer(req_cls),
                                response_serializer=resp_cls.SerializeToString)
    return grpc.method_handlers_generic_handler(service, handlers)


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
        limits = self.config.limits
        server = grpc.aio.server(options=server_options(limits),
                                 maximum_concurrent_rpcs=limits.max_concurrent_rpcs)
        server.add_generic_rpc_handlers((
            _generic_handler("smcdp.v1.Mailbox", MailboxServicer(self.host, self.config.max_message_bytes)),
            _generic_handler("smcdp.v1.Control", ControlServicer(self.host)),
        ))
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
