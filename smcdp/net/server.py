"""The gRPC server of one party: mailbox, session control, operator control, health.

This module is transport only.  What a session *is* (which protocol, which
thread runs it) belongs to the party runner (``smcdp.runtime``), which the servicers below
call with the caller's verified identity through two interfaces: :class:`PeerHost` (what a
peer may ask: the Mailbox service) and :class:`OperatorHost` (what the party's own operator
may ask: the Control service).  Identity is the common name of the client certificate
that gRPC verified against the deployment CA (``require_client_auth=True``);
no request field can change it.

Status codes (see docs/transport.md):

* UNAUTHENTICATED     -- no verified client certificate name (cannot normally
  happen: the TLS handshake already refuses clients without a valid certificate)
* PERMISSION_DENIED   -- the caller holds no role in the session, or calls an
  operator method without this party's own certificate
* FAILED_PRECONDITION -- unknown or ended session, or a session in the wrong state;
  a call whose request, or whose end, did not come within ``limits.call_idle_seconds``
* INVALID_ARGUMENT    -- malformed envelope / spec / parameters (including bytes
  that do not decode as the request type, and JSON past its size or depth
  bound), an abort code that is not a failure code, a second different
  message under the same tag, or a call of a method with one request that
  sent none or two
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

Every method is registered as a client-streaming one (the same on the wire: a
unary client is served as before), so that gRPC calls the handler when a call's
headers arrive and the party counts the call at once
(:class:`smcdp.net.limits.CallQuotas`); a method with one request reads it
within ``limits.call_idle_seconds`` and then the end of the call
(:func:`_single_request`).  gRPC itself caps no calls.
Peer-supplied text that this party logs or records (abort messages) goes
through :func:`smcdp._text.printable` first.
"""

from __future__ import annotations

import abc
import asyncio
import concurrent.futures
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import resource
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NoReturn, ParamSpec, Protocol, TypeAlias, TypeVar, overload

import grpc
from google.protobuf.descriptor import ServiceDescriptor
from google.protobuf.message import DecodeError, Message
from grpc_health.v1 import health_pb2
from grpc_health.v1._async import HealthServicer as AsyncHealthServicer

from smcdp._text import printable
from smcdp.errors import (
    AlreadySucceeded,
    InvalidMessage,
    PermissionDenied,
    PreconditionFailed,
    ResourceExhausted,
    SmcdpError,
    Unauthenticated,
)
from smcdp.net.config import NetConfig
from smcdp.net.grpc_channel import (
    CLIENT_KEEPALIVE_MS,
    ENDED_METADATA,
    MAX_GRPC_MESSAGE,
    ORIGIN_METADATA,
    PEER_INTERNAL,
    status_code_of,
)
from smcdp.net.limits import CallQuotas, InboundBudget, Limits, bounded_json_object
from smcdp.net.tls import PARTY_NAME_RE, TlsMaterial
from smcdp.states import SessionState
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc

log = logging.getLogger("smcdp.net.server")

#: messages a Stream call reads, stores and hands on ahead of their (durable) Acks
STREAM_READ_AHEAD = 64
#: a message up to this size is journaled on the server's loop (one page-cache write, no fsync); a larger
#: one on a worker thread (docs/transport.md, "What one message costs")
INLINE_ACCEPT_BYTES = 256 * 1024
SESSION_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,191}\Z")
#: a session's name before its initiator's prefix (:func:`namespaced`)
SESSION_NAME_MAX = 128
TAG_MAX = 256
TYPE_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\Z")
MAX_CHUNK = 4 * 1024 * 1024
SERVICE_NAMES = ("smcdp.v1.Mailbox", "smcdp.v1.Control")
#: trailing metadata of a StartSession that ran and failed (value: the session id)
SESSION_FAILED_METADATA = "smcdp-session-failed"

#: the context of a call this module serves.  Its handlers never read or write messages through it (only
#: the caller's identity, trailing metadata and abort), and the requests they receive are decoded here
#: (:class:`Undecodable`), so its request and response type parameters say nothing about them.
_Context: TypeAlias = grpc.aio.ServicerContext[Any, Any]
#: a handler as gRPC calls it: ``(request or request iterator, context)``, a coroutine (unary response)
#: or an async generator (streamed response); picked by name from a service descriptor at run time
_Behaviour: TypeAlias = Callable[[Any, _Context], Any]
_M = TypeVar("_M", bound=Message)
_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")


def validate_session_id(session_id: Any) -> str:
    if not isinstance(session_id, str) or not SESSION_ID_RE.match(session_id):
        raise InvalidMessage(
            f"session id {printable(str(session_id), 200)!r} is not valid: 1-192 characters from letters, "
            "digits, '.', '_' and '-', starting with a letter or digit"
        )
    return session_id


def namespaced(initiator: str, name: str) -> str:
    """The id of the session ``initiator`` starts under ``name``: ``<initiator>.<name>``.

    A party accepts a proposal only under its proposer's prefix (:func:`check_namespace`), so no member
    can take -- or block for ever -- the id another party's sessions use.  Party names never contain a
    '.', so the initiator is what precedes the first one.  A name already in the initiator's namespace
    is kept as it is."""
    if name.startswith(initiator + "."):
        return validate_session_id(name)
    if len(name) > SESSION_NAME_MAX:
        raise InvalidMessage(f"session name {name[:40]!r}... is longer than {SESSION_NAME_MAX} characters")
    return validate_session_id(f"{initiator}.{validate_session_id(name)}")


def initiator_of(session_id: str) -> str | None:
    """The party whose namespace ``session_id`` is in (None: an id from before ids were namespaced, or no party)."""
    head, sep, _ = session_id.partition(".")
    return head if sep and PARTY_NAME_RE.match(head) else None


def check_namespace(proposer: str, session_id: str) -> None:
    """A proposal's id must be in its proposer's namespace (:func:`namespaced`)."""
    if initiator_of(session_id) != proposer:
        raise InvalidMessage(
            f"session id {session_id!r} is not in the namespace of its proposer {proposer!r}: "
            f"the sessions {proposer!r} proposes are named '{proposer}.<name>'"
        )


def new_session_id(protocol: str) -> str:
    """A fresh, valid session id: the protocol's name, the UTC time and 32 random bits."""
    stem = re.sub(r"[^A-Za-z0-9._-]", "-", protocol)[:60].strip("-.") or "session"
    return f"{stem}-{_dt.datetime.now(_dt.UTC):%Y%m%dT%H%M%S}-{secrets.token_hex(4)}"


def peer_identity(context: _Context) -> str:
    """The party name of the caller: the CN of its verified client certificate."""
    auth = context.auth_context() or {}
    cns = list(auth.get("x509_common_name") or [])
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

    budget: InboundBudget | None

    def accept_threadsafe(self, sender_role: str, tag: str, type_url: str, data: bytes) -> bool:
        """Store the message and hand it on; False for a duplicate of one already held."""

    def holds(self, sender_role: str, tag: str) -> bool:
        """True if a message under this (sender, tag) was accepted already (a resend: its check may read the
        journal, so it is not accepted on the server's loop)."""

    def copy_needs_bytes(self, sender_role: str, tag: str, type_url: str) -> bool:
        """Can a copy of the message held under (sender, tag) be judged only from its bytes (one that may
        differ from it in fresh randomness only)?  Any other copy is judged by its SHA-256 alone, and the
        server does not hold it."""

    def accept_copy_threadsafe(
        self, sender_role: str, tag: str, type_url: str, digest: bytes, data: bytes | None = None
    ) -> bool | None:
        """Judge a copy of the message held under (sender, tag) from its SHA-256 (and its bytes where
        :meth:`copy_needs_bytes`): False for a duplicate; InvalidMessage for a different message; None if
        ``data`` is None and only the bytes could tell."""

    def durable_future(self) -> concurrent.futures.Future[None]:
        """A future done once every message accepted so far is durable (then it may be acknowledged)."""


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


ROLE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}\Z")
MAX_TIMEOUT = 7 * 24 * 3600.0
MAX_ROLES = 128
#: the most participants one Heartbeat may ask about (HeartbeatRequest.about)
MAX_ABOUT = 16
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
        raise InvalidMessage(f"a party holds at most one role per session; {', '.join(dup)} would hold several")
    return out


def parse_params_json(text: str) -> dict[str, Any]:
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
        raise InvalidMessage(
            f"abort code {printable(code, 40)!r} is not a failure status; use one of "
            f"the gRPC status names other than OK (e.g. ABORTED, INVALID_ARGUMENT)"
        )
    return code


@dataclass(frozen=True)
class Undecodable:
    """A request whose bytes did not parse as its type (decoded here, refused by the handler)."""

    type_name: str
    reason: str


def checked(request: _T | Undecodable) -> _T:
    """``request`` itself once it decoded; InvalidMessage (INVALID_ARGUMENT) if it did not."""
    if isinstance(request, Undecodable):
        raise InvalidMessage(f"the request is not a valid {request.type_name}: {request.reason}")
    return request


def _tolerant_deserializer(cls: type[_M]) -> Callable[[bytes], _M | Undecodable]:
    def deserialize(data: bytes) -> _M | Undecodable:
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


def parse_link(text: str) -> tuple[str, str] | None:
    """(A, B) of a link "A→B" -- the whole text two distinct valid party names joined by '→' -- else None.
    Which parties may name it is the session's to say (smcdp.runtime.liveness.checked_link)."""
    sender, sep, receiver = text.partition("→")
    if sep and sender != receiver and PARTY_NAME_RE.fullmatch(sender) and PARTY_NAME_RE.fullmatch(receiver):
        return sender, receiver
    return None


def _link(text: str) -> str | None:
    """An Abort's ``link`` ("A→B", two party names), None if empty; InvalidMessage if it is anything else."""
    if not text:
        return None
    if parse_link(text) is None:
        raise InvalidMessage("Abort names a link that is not two distinct valid party names joined by '→'")
    return text


class PeerHost(abc.ABC):
    """What the Mailbox servicer needs of the party runner: the calls a *peer* may make.

    Every method receives ``peer``, the caller's verified party name, and raises :mod:`smcdp.errors`
    exceptions (mapped to status codes).
    """

    name: str

    @abc.abstractmethod
    def inbound_target(self, peer: str, session_id: str) -> tuple[InboundTarget, str]:
        """(target, sender role) for a message from ``peer`` in ``session_id``."""

    def inbound_open(self, peer: str, session_id: str) -> None:
        """Raise (as :meth:`inbound_target` would for a new message) once ``session_id``, whose messages
        ``peer`` is streaming, no longer takes new ones here; the server then ends the idle call."""

    def running_with(self, peer: str, session_id: str | None = None) -> bool:
        """Does ``peer`` hold a role in the running (begun) session ``session_id`` here -- in any running
        session if None?  Such calls use the capacity running sessions have of their own
        (:class:`smcdp.net.limits.CallQuotas`).  Called on the server's loop: cheap, no I/O."""
        return False

    @abc.abstractmethod
    async def propose(self, peer: str, spec: SessionSpec) -> str | PendingApproval:
        """Register a session proposed by ``peer``; return this party's role (or that it waits)."""

    @abc.abstractmethod
    async def begin(self, peer: str, session_id: str) -> None: ...

    @abc.abstractmethod
    async def abort(
        self, peer: str, session_id: str, code: str, message: str, culprit: str | None = None, link: str | None = None
    ) -> None: ...

    @abc.abstractmethod
    async def heartbeat(
        self, peer: str, session_id: str, incarnation: str, round: int, about: Sequence[str] = ()
    ) -> dict[str, Any]:
        """This party's view of ``session_id`` for a participant's liveness probe:
        ``{"state", "incarnation", "round", "code", "culprit"}`` and, for a session failed by a link that
        carried nothing, ``"link"`` (state "unknown" if it has none); for the participants named in
        ``about`` (valid party names, at most :data:`MAX_ABOUT`), ``"about_heard_seconds"``: how long ago this
        party last heard from each, -1 where it has not or has no view."""

    @abc.abstractmethod
    async def resume(self, peer: str, session_id: str) -> str:
        """Reopen a resumably failed session from its checkpoint at the initiator's request; return the role."""

    async def waiting(self, peer: str, session_id: str, party: str) -> None:
        """The initiator ``peer`` says ``session_id`` waits for ``party``'s operator."""
        raise _unimplemented("Waiting")

    async def witness(
        self, peer: str, statement: bytes, signature: bytes, certificate: bytes
    ) -> tuple[bytes, bytes, bytes] | None:
        """Keep ``peer``'s signed audit head; return this party's own."""
        raise _unimplemented("Witness")

    async def witnessed(self, peer: str) -> list[tuple[bytes, bytes, bytes]]:
        """The signed audit heads this party holds about ``peer``."""
        raise _unimplemented("GetWitnessed")

    # observation (console and metrics); the transport reports, the host keeps counts
    def inbound_delivered(self, peer: str, nbytes: int, duplicate: bool) -> None:
        """A message of ``nbytes`` from ``peer`` was accepted (``duplicate``: already held)."""

    def inbound_refused(self, peer: str | None, code: str) -> None:
        """A message was refused with status ``code`` (``peer`` None if not even identified)."""


class OperatorHost(abc.ABC):
    """What the Control servicer needs of the party runner: the calls of the party's own *operator*
    (the servicer has checked the caller's certificate is the party's own)."""

    name: str

    def resolve_session_id(self, session_id: str, exact: bool = False) -> str:
        """The session an operator names (a full id, or a name without its initiator's prefix; ``exact``:
        for a decision, only a full id or a name in this party's own namespace)."""
        return session_id

    @abc.abstractmethod
    async def get_status(self, session_id: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def resume_session(self, session_id: str) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def start_session(
        self,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any],
        session_id: str | None,
        timeout: float | None,
        seed: int | None,
    ) -> dict[str, Any]: ...

    @abc.abstractmethod
    async def get_result(self, session_id: str) -> dict[str, Any]: ...

    # -- governance (docs/governance.md).  A host without it answers UNIMPLEMENTED.
    async def list_sessions(self, pending_only: bool) -> list[dict[str, Any]]:
        raise _unimplemented("ListSessions")

    async def show_session(self, session_id: str) -> dict[str, Any]:
        raise _unimplemented("ShowSession")

    async def decide(self, session_id: str, approve: bool, reason: str) -> dict[str, Any]:
        raise _unimplemented("ApproveSession/RejectSession")


def _unimplemented(what: str) -> SmcdpError:
    exc = SmcdpError(f"{what} is not supported by this party")
    exc.code = "UNIMPLEMENTED"
    return exc


async def _fail(context: _Context, exc: BaseException, what: str) -> NoReturn:
    code = status_code_of(exc)
    origin = getattr(exc, "origin", None)
    if isinstance(exc, AlreadySucceeded):  # its session succeeded here: the sender may take it as delivered
        context.set_trailing_metadata(((ENDED_METADATA, "succeeded"),))
    elif isinstance(origin, str) and PARTY_NAME_RE.match(origin):
        context.set_trailing_metadata(((ORIGIN_METADATA, origin),))
    if code == grpc.StatusCode.INTERNAL:
        log.exception("internal error in %s", what)
        msg = f"{PEER_INTERNAL}{what}: {type(exc).__name__}"
    else:
        msg = str(exc)
    await context.abort(code, printable(msg))


#: how often a message call bound to a session checks, while it waits for its next envelope, that the
#: session still lives here (an idle stream of an ended session is closed within this)
LIVENESS_POLL_SECONDS = 2.0


#: what the reader of a Stream call queues for its sender, in order: a message's Ack (done once the message
#: is durable), the refusal that ends the call, or None where the peer half-closed it
_AckItem: TypeAlias = asyncio.Future[tpb.Ack] | Exception | None


class _MessageCall:
    """One Deliver or Stream call of ``peer``: *idle* until its first envelope names a session the peer
    holds a role in, then *bound* to that session (:class:`smcdp.net.limits.CallQuotas`).

    While idle, a read waits at most ``limits.call_idle_seconds``; once bound, a watchdog checks every
    LIVENESS_POLL_SECONDS that the session still takes messages here and, when it no longer does, ends a
    read that waits (the session's own status).  So a call that names no session, or whose session ended,
    is ended by the server (without it, 520 idle Stream calls of one member took every call slot of
    the party).  Reads themselves stay plain awaits: the watchdog costs one timer per call, not per message."""

    def __init__(
        self, servicer: MailboxServicer, peer: str, request_iterator: AsyncIterable[tpb.Envelope | Undecodable]
    ) -> None:
        self.servicer = servicer
        self.peer = peer
        self.it = request_iterator.__aiter__()
        quotas = servicer.quotas
        # counted in the shared pool, or -- when that is full and the peer takes part in a running session
        # here -- as a call of a running session, which bind() confirms (or moves it back, or refuses it)
        self.reserved = False
        try:
            quotas.enter(peer)
        except ResourceExhausted:
            if not servicer.host.running_with(peer):
                raise
            quotas.enter(peer, reserved=True)
            self.reserved = True
        try:
            quotas.enter_idle(peer)
        except BaseException:
            quotas.leave(peer, self.reserved)
            raise
        self.session_id: str | None = None
        self.closed = False
        self.ended: BaseException | None = None  # why the bound session takes no more messages
        self._waiting = False
        self._reader: asyncio.Task[Any] | None = None
        self._watchdog: asyncio.Task[None] | None = None

    async def _read(self) -> tpb.Envelope | Undecodable | None:
        """The next request, or None at the end of the call."""
        try:
            return await self.it.__anext__()
        except StopAsyncIteration:
            return None

    async def next(self, closing: str | None = None) -> tpb.Envelope | None:
        """The next envelope (checked: not undecodable), or None at the end of the call.  ``closing``: the
        call must end now (a Deliver after its message, which names ``closing``): the end is awaited
        ``limits.call_idle_seconds`` at most, as the first envelope is."""
        seconds = self.servicer.idle_seconds
        if self.session_id is None:
            try:
                item = await asyncio.wait_for(self._read(), seconds)
            except TimeoutError:
                raise PreconditionFailed(
                    f"the call named no session within {seconds:g} s (limits.call_idle_seconds)"
                ) from None
        else:
            if self.ended is not None:
                raise self.ended
            self._waiting = True
            try:
                item = await (self._read() if closing is None else asyncio.wait_for(self._read(), seconds))
            except TimeoutError:
                raise PreconditionFailed(
                    f"message {closing!r}: the call was not closed within {seconds:g} s of its last chunk "
                    "(limits.call_idle_seconds)"
                ) from None
            except asyncio.CancelledError:
                if self.ended is None:
                    raise
                raise self.ended from None
            finally:
                self._waiting = False
        return None if item is None else checked(item)

    async def _watch(self) -> None:
        session_id = self.session_id
        assert session_id is not None  # bind() names the session before it starts this watchdog
        while self.ended is None:
            await asyncio.sleep(LIVENESS_POLL_SECONDS)
            try:
                self.servicer.host.inbound_open(self.peer, session_id)  # raises once it ended
            except Exception as exc:  # noqa: BLE001 - the session's status, told to the sender
                self.ended = exc
                if self._waiting and self._reader is not None:
                    self._reader.cancel()

    def bind(self, session_id: str) -> None:
        if self.session_id is None:
            quotas = self.servicer.quotas
            running = self.servicer.host.running_with(self.peer, session_id)
            if self.reserved and not running:
                quotas.unreserve(self.peer)  # raises if the shared pool is full: the call ends
                self.reserved = False
            quotas.bind(self.peer, session_id)
            if running and not self.reserved:
                quotas.reserve(self.peer)
                self.reserved = True
            self.session_id = session_id
            self._reader = asyncio.current_task()
            self._watchdog = asyncio.ensure_future(self._watch())
        elif session_id != self.session_id:
            raise InvalidMessage(
                f"a message call carries the messages of one session ({self.session_id}); "
                f"open another call for session {session_id}"
            )

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            if self._watchdog is not None:
                self._watchdog.cancel()
            self.servicer.quotas.leave_message_call(self.peer, self.session_id)
            self.servicer.quotas.leave(self.peer, self.reserved)


class MailboxServicer(tgrpc.MailboxServicer):
    def __init__(
        self,
        host: PeerHost,
        max_message_bytes: int,
        quotas: CallQuotas | None = None,
        idle_seconds: float | None = None,
    ) -> None:
        self.host = host
        self.max_message_bytes = max_message_bytes
        self.quotas = quotas if quotas is not None else CallQuotas(Limits(), host.name)
        self.idle_seconds = idle_seconds if idle_seconds is not None else self.quotas.limits.call_idle_seconds

    async def Deliver(self, request_iterator: AsyncIterable[tpb.Envelope | Undecodable], context: _Context) -> tpb.Ack:
        failure: Exception | None = None
        peer: str | None = None
        call: _MessageCall | None = None
        try:
            peer = peer_identity(context)
            call = _MessageCall(self, peer, request_iterator)
            ack = await self._receive(call, last=True)
            if ack is None:
                raise InvalidMessage("empty Deliver stream: at least one envelope is needed")
            return ack
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            failure = exc
        finally:
            if call is not None:
                call.close()
        assert failure is not None  # the call returned unless it failed
        await self._refuse(context, peer, failure, "Deliver")

    async def Stream(
        self, request_iterator: AsyncIterable[tpb.Envelope | Undecodable], context: _Context
    ) -> AsyncIterator[tpb.Ack]:
        """Deliver for many messages of one session on one call: an Ack per message, in order; the first
        refusal ends the call, and so does the end of the session.

        Pipelined: the next message is read, checked and handed to its role while the journal syncs the
        ones before it (their syncs share one fsync); each Ack waits for its message to be durable."""
        failure: Exception | None = None
        peer: str | None = None
        call: _MessageCall | None = None
        acks: asyncio.Queue[_AckItem] = asyncio.Queue()
        window = asyncio.Semaphore(STREAM_READ_AHEAD)
        reader: asyncio.Task[None] | None = None
        try:
            peer = peer_identity(context)
            call = _MessageCall(self, peer, request_iterator)
            reader = asyncio.ensure_future(self._read_stream(call, acks, window))
            while True:
                item = await acks.get()
                if item is None:  # the sender half-closed the call
                    return
                if isinstance(item, BaseException):
                    raise item
                ack = await item
                window.release()
                yield ack
        except Exception as exc:  # noqa: BLE001 - report, never crash the server
            failure = exc
        finally:
            if reader is not None and not reader.done():
                reader.cancel()
            while not acks.empty():  # Acks nobody will send now
                item = acks.get_nowait()
                if isinstance(item, asyncio.Future):
                    item.cancel()
            if call is not None:
                call.close()
        assert failure is not None  # the call returned unless it failed
        await self._refuse(context, peer, failure, "Stream")

    async def _read_stream(self, call: _MessageCall, acks: asyncio.Queue[_AckItem], window: asyncio.Semaphore) -> None:
        """The messages of a Stream call, one after the other, each stored at once; its Ack (a task that
        waits for durability) or the refusal goes into ``acks`` in order.  At most STREAM_READ_AHEAD
        messages are read ahead of their Acks: a sender that never reads its Acks holds nothing more."""
        try:
            while True:
                await window.acquire()
                ack = await self._receive(call, durable=False)
                if ack is None:
                    acks.put_nowait(None)
                    return
                acks.put_nowait(asyncio.ensure_future(ack))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - the refusal ends the call after the Acks before it
            exc.__traceback__ = None
            acks.put_nowait(exc)

    @overload
    async def _receive(self, call: _MessageCall, last: bool = ..., durable: Literal[True] = ...) -> tpb.Ack | None: ...

    @overload
    async def _receive(
        self, call: _MessageCall, last: bool = ..., *, durable: Literal[False]
    ) -> Coroutine[Any, Any, tpb.Ack] | None: ...

    async def _receive(
        self, call: _MessageCall, last: bool = False, durable: bool = True
    ) -> tpb.Ack | Coroutine[Any, Any, tpb.Ack] | None:
        """The next message of ``call`` (None at the end of the call): checked, charged to the session's
        budget before a byte is buffered, delivered; the Ack.  ``last``: the call holds nothing else
        (Deliver), which is checked before the message is delivered.  ``durable`` False: the message is
        stored and handed to its role, and what is returned is a coroutine giving its Ack once the journal
        made it durable.

        A copy of a message already held (a retry; or a rewrite, refused) is hashed as it arrives and judged
        by its digest, not held (``InboundTarget.accept_copy_threadsafe``): a resend costs no memory however
        large, and needs no charge.  Only where the bytes alone can tell (a resend that may differ in fresh
        randomness only, ``InboundTarget.copy_needs_bytes``) is it held whole, charged to the party's ledger
        until it is judged.  Chunks are dropped as soon as they are read (this method owns them: its callers
        keep no reference), so a call waiting for its next chunk or its end holds none."""
        env = await call.next()
        if env is None:
            return None
        budget: InboundBudget | None = None
        charge: int | None = None
        copy_charge = 0
        stored = False
        peer = call.peer
        self._check_header(env)
        sid, tag, type_name, count, total = env.session_id, env.tag, env.type_name, env.chunk_count, env.total_size
        target, sender_role = self.host.inbound_target(peer, sid)
        call.bind(sid)
        buf: bytearray | None = None
        data: bytes | None = None
        hasher: Any = None  # hashlib's sha256 object, for a copy
        limited: ResourceExhausted | None = None  # why a copy that needed its bytes was not held
        try:
            budget = getattr(target, "budget", None)
            # a target that cannot judge a copy by its digest (a test's) is given its bytes, charged
            judge: Callable[..., bool | None] | None = getattr(target, "accept_copy_threadsafe", None)
            needs_bytes: Callable[[str, str, str], bool] | None = getattr(target, "copy_needs_bytes", None)
            copy = target.holds(sender_role, tag)
            if not copy and budget is not None:
                # charge the session's budget from the declared size, before buffering a byte
                charge = budget.admit(sender_role, tag, total)
                copy = charge is None  # received meanwhile
            if not copy:
                buf = bytearray()
            else:
                hasher = hashlib.sha256()
                if judge is None or needs_bytes is None or needs_bytes(sender_role, tag, type_name):
                    try:
                        if budget is not None:
                            copy_charge = budget.admit_copy(sender_role, tag, total)
                        buf = bytearray()
                    except ResourceExhausted as exc:
                        if judge is None:
                            raise
                        limited = exc  # judged by its digest alone; refused if that cannot tell
            received = 0
            for expect in range(count):
                if expect:
                    env = await call.next()
                    if env is None:
                        raise InvalidMessage(
                            f"message {tag!r} incomplete: {expect}/{count} chunks, {received}/{total} bytes"
                        )
                    if (env.session_id, env.tag, env.type_name, env.chunk_count, env.total_size) != (
                        sid,
                        tag,
                        type_name,
                        count,
                        total,
                    ):
                        raise InvalidMessage(
                            f"chunk {env.chunk_index} of message {tag!r} has a header that differs from chunk 0"
                        )
                assert env is not None  # the first was read above, every other in this loop
                if env.chunk_index != expect:
                    raise InvalidMessage(f"message {tag!r}: expected chunk {expect}, got {env.chunk_index}")
                data = env.data
                env = None  # the chunk's envelope (and its bytes) goes now, not at the next one
                if len(data) > MAX_CHUNK:
                    raise InvalidMessage(f"chunk larger than {MAX_CHUNK} bytes")
                if received + len(data) > total:
                    raise InvalidMessage(f"message {tag!r} is longer than its total_size {total}")
                received += len(data)
                if hasher is not None:
                    hasher.update(data)
                if buf is not None:
                    buf += data
                data = None
            if received != total:
                raise InvalidMessage(f"message {tag!r} incomplete: {count}/{count} chunks, {received}/{total} bytes")
            if last and await call.next(closing=tag) is not None:
                raise InvalidMessage(f"message {tag!r}: more chunks than its chunk_count {count}")
            if copy and judge is not None:
                digest = hasher.digest()
                if buf is None:  # a dictionary look-up: on the server's loop
                    fresh = judge(sender_role, tag, type_name, digest)
                else:  # its check may read the earlier message back from the journal: a worker thread's
                    fresh = await asyncio.to_thread(judge, sender_role, tag, type_name, digest, bytes(buf))
                if fresh is None:  # only its bytes could tell, and the ledger had no room for them
                    assert limited is not None
                    raise limited
            elif received <= INLINE_ACCEPT_BYTES and not target.holds(sender_role, tag):
                # a small new message's journal record is one write to the page cache (no fsync: the Ack
                # waits for the journal's group commit below): on this loop, without a thread's round trip
                # (a resend's check may read the earlier message back from the journal: a worker thread's)
                assert buf is not None
                fresh = target.accept_threadsafe(sender_role, tag, type_name, bytes(buf))
            else:
                # a large one off the server's loop: its write must not hold up other calls (heartbeats of
                # other sessions time out behind a disk busy with twenty sessions' journals)
                assert buf is not None
                fresh = await asyncio.to_thread(target.accept_threadsafe, sender_role, tag, type_name, bytes(buf))
            stored = bool(fresh)
            self._observe(self.host.inbound_delivered, peer, received, not fresh)
            ack = self._ack(target, received, not fresh)
            return await ack if durable else ack
        finally:
            # Drop the message's bytes before any refusal is answered: the abort's exception keeps the
            # frames (and so their locals) alive until the cyclic garbage collector runs, which counts
            # objects, not bytes -- a stream of refused 1 MiB messages would otherwise pile up in memory.
            buf = env = data = None  # noqa: F841
            if budget is not None:
                if charge is not None:
                    budget.settle(sender_role, tag, charge, stored)
                if copy_charge:
                    budget.settle_copy(sender_role, copy_charge)

    @staticmethod
    async def _ack(target: InboundTarget, nbytes: int, duplicate: bool) -> tpb.Ack:
        """The Ack of a stored message once it is durable (a duplicate too: its first copy may still be
        waiting for the journal's sync)."""
        # shielded: a cancelled Ack (the call ended) must not cancel the journal's shared sync future
        await asyncio.shield(asyncio.wrap_future(target.durable_future()))
        return tpb.Ack(duplicate=duplicate, bytes=nbytes)

    async def _refuse(self, context: _Context, peer: str | None, failure: BaseException, what: str) -> NoReturn:
        failure.__traceback__ = None
        self._observe(self.host.inbound_refused, peer, status_code_of(failure).name)
        await _fail(context, failure, what)

    @staticmethod
    def _observe(fn: Callable[_P, object], *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            fn(*args, **kwargs)
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
            raise ResourceExhausted(
                f"message of {env.total_size} bytes exceeds this party's limit of "
                f"{self.max_message_bytes} bytes (limits.max_message_mib)"
            )
        if env.chunk_count > max(1, env.total_size):
            raise InvalidMessage(f"chunk_count {env.chunk_count} is larger than total_size {env.total_size} allows")

    async def Propose(self, request: tpb.SessionSpec | Undecodable, context: _Context) -> tpb.ProposeReply:
        try:
            peer = peer_identity(context)
            spec = spec_from_message(checked(request))
            answer = await self.host.propose(peer, spec)
            if isinstance(answer, PendingApproval):
                return tpb.ProposeReply(pending=True, detail=answer.detail)
            return tpb.ProposeReply(role=answer)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Propose")

    async def Begin(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.BeginReply:
        try:
            peer = peer_identity(context)
            await self.host.begin(peer, validate_session_id(checked(request).session_id))
            return tpb.BeginReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Begin")

    async def Abort(self, request: tpb.AbortRequest | Undecodable, context: _Context) -> tpb.AbortReply:
        try:
            peer = peer_identity(context)
            request = checked(request)
            sid = validate_session_id(request.session_id)
            code = parse_abort_code(request.code)
            culprit = request.culprit or None
            if culprit is not None and not PARTY_NAME_RE.fullmatch(culprit):
                raise InvalidMessage("Abort names a culprit that is not a valid party name")
            await self.host.abort(peer, sid, code, printable(request.message), culprit, _link(request.link))
            return tpb.AbortReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Abort")

    async def Heartbeat(self, request: tpb.HeartbeatRequest | Undecodable, context: _Context) -> tpb.HeartbeatReply:
        try:
            peer = peer_identity(context)
            about = list(checked(request).about)
            if len(about) > MAX_ABOUT or not all(PARTY_NAME_RE.fullmatch(a) for a in about):
                raise InvalidMessage(f"Heartbeat asks about more than {MAX_ABOUT} parties or an invalid party name")
            view = await self.host.heartbeat(
                peer,
                validate_session_id(checked(request).session_id),
                checked(request).incarnation[:64],
                int(checked(request).round),
                about,
            )
            return tpb.HeartbeatReply(**view)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Heartbeat")

    async def Resume(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.ResumeReply:
        try:
            peer = peer_identity(context)
            role = await self.host.resume(peer, validate_session_id(checked(request).session_id))
            return tpb.ResumeReply(role=role)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Resume")

    async def Waiting(self, request: tpb.WaitingNotice | Undecodable, context: _Context) -> tpb.WaitingReply:
        try:
            peer = peer_identity(context)
            request = checked(request)
            if not PARTY_NAME_RE.match(request.party):
                raise InvalidMessage("Waiting names a party that is not a valid party name")
            await self.host.waiting(peer, validate_session_id(request.session_id), request.party)
            return tpb.WaitingReply()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Waiting")

    async def Witness(self, request: tpb.SignedAuditHead | Undecodable, context: _Context) -> tpb.SignedAuditHead:
        try:
            peer = peer_identity(context)
            request = checked(request)
            mine = await self.host.witness(peer, request.statement, request.signature, request.certificate)
            return (
                tpb.SignedAuditHead()
                if mine is None
                else tpb.SignedAuditHead(statement=mine[0], signature=mine[1], certificate=mine[2])
            )
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "Witness")

    async def GetWitnessed(self, request: tpb.WitnessQuery | Undecodable, context: _Context) -> tpb.WitnessedHeads:
        try:
            peer = peer_identity(context)
            checked(request)
            heads = await self.host.witnessed(peer)
            return tpb.WitnessedHeads(
                heads=[tpb.SignedAuditHead(statement=a, signature=b, certificate=c) for a, b, c in heads]
            )
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetWitnessed")


def _info_message(info: Mapping[str, Any]) -> tpb.SessionInfo:
    return tpb.SessionInfo(
        session_id=str(info.get("session_id", "")),
        state=str(info.get("state", "")),
        info_json=json.dumps(info, sort_keys=True),
    )


def _record_message(record: Mapping[str, Any]) -> tpb.SessionRecord:
    return tpb.SessionRecord(
        session_id=record["session_id"], state=record["state"], record_json=json.dumps(record, sort_keys=True)
    )


class _NamesSession(Protocol):
    """A request that names a session (``SessionRef``, ``DecisionRequest``)."""

    session_id: str


class ControlServicer(tgrpc.ControlServicer):
    """Operator calls: only a caller holding this party's own certificate."""

    def __init__(self, host: OperatorHost) -> None:
        self.host = host

    def _operator(self, context: _Context) -> None:
        peer = peer_identity(context)
        if peer != self.host.name:
            raise PermissionDenied(
                f"only this party's operator (certificate {self.host.name!r}) may control its "
                f"sessions; the caller is {peer!r}"
            )

    def _session_id(self, request: _NamesSession | Undecodable, exact: bool = False) -> str:
        """The session an operator's request names, resolved by the host (a name without its prefix);
        ``exact``: a decision (approve, reject), which a short name must not reach across namespaces."""
        return self.host.resolve_session_id(validate_session_id(checked(request).session_id), exact=exact)

    async def StartSession(
        self, request: tpb.StartSessionRequest | Undecodable, context: _Context
    ) -> tpb.SessionRecord:
        try:
            self._operator(context)
            request = checked(request)
            record = await self.host.start_session(
                _nonempty(request.protocol, "protocol"),
                parse_roles(request.roles),
                parse_params_json(request.params_json),
                validate_session_id(request.session_id) if request.session_id else None,
                parse_timeout(request.timeout_seconds) if request.timeout_seconds else None,
                request.seed if request.HasField("seed") else None,
            )
            return await self._finish(context, record)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "StartSession")

    async def _finish(self, context: _Context, record: Mapping[str, Any]) -> tpb.SessionRecord:
        """A session's record as the reply, or -- if it failed -- its status code with the culprit."""
        if record["state"] == SessionState.FAILED:
            err = record.get("error") or {}
            code = err.get("code", "INTERNAL")
            origin = err.get("origin")
            meta = [(SESSION_FAILED_METADATA, record["session_id"])]
            if origin and origin != self.host.name and PARTY_NAME_RE.match(origin):
                meta.append((ORIGIN_METADATA, origin))
            context.set_trailing_metadata(tuple(meta))
            await context.abort(
                grpc.StatusCode[code] if code in ABORT_CODES else grpc.StatusCode.INTERNAL,
                printable(f"session {record['session_id']} failed: {err.get('message', '')}"),
            )
        return _record_message(record)

    async def GetResult(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.SessionRecord:
        try:
            self._operator(context)
            record = await self.host.get_result(self._session_id(request))
            return _record_message(record)
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetResult")

    async def GetStatus(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.SessionStatus:
        try:
            self._operator(context)
            status = await self.host.get_status(self._session_id(request))
            return tpb.SessionStatus(
                session_id=status["session_id"], state=status["state"], status_json=json.dumps(status, sort_keys=True)
            )
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "GetStatus")

    async def ResumeSession(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.SessionRecord:
        try:
            self._operator(context)
            record = await self.host.resume_session(self._session_id(request))
            return await self._finish(context, record)
        except grpc.aio.AbortError:
            raise
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, "ResumeSession")

    # -- governance
    async def _governance(self, context: _Context, what: str, call: Callable[[], Awaitable[_R]]) -> _R:
        try:
            self._operator(context)
            return await call()
        except Exception as exc:  # noqa: BLE001
            await _fail(context, exc, what)

    async def ListSessions(self, request: tpb.ListSessionsRequest | Undecodable, context: _Context) -> tpb.SessionList:
        async def call() -> tpb.SessionList:
            items = await self.host.list_sessions(bool(checked(request).pending_only))
            return tpb.SessionList(sessions=[_info_message(i) for i in items])

        return await self._governance(context, "ListSessions", call)

    async def ShowSession(self, request: tpb.SessionRef | Undecodable, context: _Context) -> tpb.SessionInfo:
        async def call() -> tpb.SessionInfo:
            return _info_message(await self.host.show_session(self._session_id(request)))

        return await self._governance(context, "ShowSession", call)

    async def ApproveSession(self, request: tpb.DecisionRequest | Undecodable, context: _Context) -> tpb.SessionInfo:
        async def call() -> tpb.SessionInfo:
            return _info_message(await self.host.decide(self._session_id(request, exact=True), True, ""))

        return await self._governance(context, "ApproveSession", call)

    async def RejectSession(self, request: tpb.DecisionRequest | Undecodable, context: _Context) -> tpb.SessionInfo:
        async def call() -> tpb.SessionInfo:
            return _info_message(
                await self.host.decide(self._session_id(request, exact=True), False, checked(request).reason)
            )

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


#: how long a new connection may take to complete its TLS handshake and HTTP/2 settings, from its accept
#: (gRPC's default: 120 s).  Anyone who can reach the port can open connections -- no certificate is needed
#: to start a handshake -- and one that never sent a byte held a file descriptor for two minutes.  As long as
#: an operator's connection attempt (``smcdp.runtime.client.OPERATOR_CONNECT_MS``); a peer's gives up after
#: ``PEER_CONNECT_MS`` (5 s).
HANDSHAKE_TIMEOUT_MS = 20_000
#: the most connections the server holds at once, whatever the open-file limit allows: a TLS handshake in
#: progress costs ~20-25 KB, so the cap bounds a flood's memory too (8,192: ~200 MB).  An honest deployment
#: needs about one connection per peer and per session it shares with that peer.
MAX_CONNECTIONS = 8192


def connection_cap(open_files: int | None = None) -> int:
    """The most connections the server holds at once (per listening address): what the process's open-file
    limit (``open_files``, default: its soft RLIMIT_NOFILE) leaves after a reserve of a quarter (at least
    256) for this party's own files -- journals, records, the audit log -- and its channels to its peers, and
    at most :data:`MAX_CONNECTIONS`.  A flood of connections then fills the cap and is refused there, and
    never takes the descriptors the party's files need (it did: 1,500 idle connections from anyone made
    every file operation of the party fail with EMFILE)."""
    if open_files is None:
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if open_files == resource.RLIM_INFINITY or open_files > 1 << 20:
        open_files = 1 << 20
    return min(MAX_CONNECTIONS, max(64, open_files - max(256, open_files // 4)))


def server_options(limits: Limits) -> list[tuple[str, int]]:
    """The gRPC server's own limits, set deliberately (docs/security.md)."""
    return [
        ("grpc.server_handshake_timeout_ms", HANDSHAKE_TIMEOUT_MS),
        ("grpc.max_allowed_incoming_connections", connection_cap()),
        ("grpc.max_send_message_length", MAX_GRPC_MESSAGE),
        ("grpc.max_receive_message_length", MAX_GRPC_MESSAGE),
        ("grpc.max_concurrent_streams", limits.max_concurrent_streams),
        ("grpc.max_metadata_size", MAX_METADATA_BYTES),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", SERVER_MIN_PING_INTERVAL_MS),
        ("grpc.http2.max_ping_strikes", 2),
        ("grpc.keepalive_time_ms", SERVER_KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", SERVER_KEEPALIVE_TIMEOUT_MS),
        # gRPC sets SO_REUSEPORT by default on Linux: a second server -- another party, or any process --
        # could then bind this party's port too and the kernel would share the connections between them
        # (a test suite's port race showed it as TLS hostname failures).  The port is this party's alone:
        # a second bind fails ("cannot listen on …").
        ("grpc.so_reuseport", 0),
    ]


#: how a call of a method with one request is counted before that request is read (:func:`_single_request`):
#: in the shared pool; as a running session's call -- a Health.Check ("always", answered at once), or a
#: Heartbeat or an Abort ("running") once its request names a running session the caller takes part in
_Reserve: TypeAlias = Literal["always", "running"] | None


async def _next_request(it: AsyncIterator[Any]) -> tuple[bool, Any]:
    """(True, the next request) or (False, None) at the end of the call."""
    try:
        return True, await it.__anext__()
    except StopAsyncIteration:
        return False, None


async def _one_request(request_iterator: AsyncIterable[Any], seconds: float, what: str) -> Any:
    """The one request of a call, read within ``seconds`` (``limits.call_idle_seconds``), and then the end of the
    call within ``seconds`` again: a call with no request is INVALID_ARGUMENT, and so is one with two (it is
    not served at all); one that sends neither in time is FAILED_PRECONDITION."""
    it = request_iterator.__aiter__()
    try:
        more, request = await asyncio.wait_for(_next_request(it), seconds)
    except TimeoutError:
        raise PreconditionFailed(
            f"{what}: the call sent no request within {seconds:g} s (limits.call_idle_seconds)"
        ) from None
    if not more:
        raise InvalidMessage(f"{what}: the call ended without its request")
    try:
        more, _ = await asyncio.wait_for(_next_request(it), seconds)
    except TimeoutError:
        raise PreconditionFailed(
            f"{what}: the call was not closed within {seconds:g} s of its request (limits.call_idle_seconds)"
        ) from None
    if more:
        raise InvalidMessage(f"{what} takes one request; the call sent more")
    return request


def _single_request(
    fn: _Behaviour,
    quotas: CallQuotas,
    what: str,
    reserve: _Reserve = None,
    host: PeerHost | None = None,
    watch: bool = False,
) -> _Behaviour:
    """``fn``, a handler of a method with one request (``fn(request, context)``), served as a client-streaming
    handler (``(request_iterator, context)``; the same on the wire): gRPC calls it as soon as a call's headers
    arrive, before any request, so the call is counted against the caller's quota
    (:class:`smcdp.net.limits.CallQuotas`) from its first moment and refused at once past it.  Served as a
    unary handler, gRPC read the request first and counted the call in its own ``maximum_concurrent_rpcs``
    meanwhile, where the party never saw it: a member opening calls that sent no request filled that cap and
    locked out every caller -- other members, health checks, the party's own operator -- and a call closed
    without a request was never answered.  The request is read within ``limits.call_idle_seconds``, and the
    call must end after it (:func:`_one_request`).

    ``reserve``: which calls belong to the capacity of running sessions rather than the shared pool
    (:data:`_Reserve`; ``host`` tells which sessions run).  ``watch``: a Health.Watch, bounded by the Watch
    quotas (:meth:`CallQuotas.enter_watch`) *before* it counts against the caller's calls: a Watch never ends by
    itself, and members reopening refused ones must not hold the slots every other call needs, even for the
    moment of a refusal."""
    seconds = quotas.limits.call_idle_seconds

    def running(peer: str, request: Any) -> bool:
        try:
            return (
                host is not None
                and not isinstance(request, Undecodable)
                and bool(request.session_id)
                and host.running_with(peer, request.session_id)
            )
        except Exception:  # noqa: BLE001 - a request that names nothing usable: the shared pool
            return False

    async def serve(request_iterator: AsyncIterable[Any], context: _Context) -> Any:
        try:
            peer = peer_identity(context)
        except Unauthenticated:
            peer = ""  # cannot happen behind mutual TLS; counted as one anonymous peer all the same
        if watch:
            try:
                quotas.enter_watch(peer)
            except ResourceExhausted as exc:
                await _fail(context, exc, what)
        try:
            own = reserve == "always"
            try:
                try:
                    quotas.enter(peer, own)
                except ResourceExhausted:
                    # the shared pool is full: a peer in a running session here may still send that session's
                    # heartbeats and aborts, which its request confirms (or the call moves back, or is refused)
                    if reserve != "running" or host is None or not host.running_with(peer):
                        raise
                    quotas.enter(peer, reserved=True)
                    own = True
            except ResourceExhausted as exc:
                await _fail(context, exc, what)
            try:
                try:
                    request = await _one_request(request_iterator, seconds, what)
                    if reserve == "running":
                        mine = running(peer, request)
                        if mine and not own:
                            quotas.reserve(peer)
                            own = True
                        elif own and not mine:
                            quotas.unreserve(peer)  # raises if the shared pool is full: the call ends
                            own = False
                except SmcdpError as exc:
                    await _fail(context, exc, what)
                return await fn(request, context)
            finally:
                quotas.leave(peer, own)
        finally:
            if watch:
                quotas.leave_watch(peer)

    return serve


def _reserve_of(service: str, method: str) -> _Reserve:
    """Which calls of ``service.method`` use the capacity of running sessions rather than the shared pool:
    a heartbeat or an abort of a running session the caller takes part in, and a health Check (answered at
    once: it cannot be held past its request, so it needs no shared slot and a flood of other calls cannot
    refuse it)."""
    if service == "grpc.health.v1.Health" and method == "Check":
        return "always"
    if service == "smcdp.v1.Mailbox" and method in ("Heartbeat", "Abort"):
        return "running"
    return None


def _generic_handler(
    service_desc: ServiceDescriptor,
    servicer: object,
    quotas: CallQuotas,
    messages: ModuleType,
    host: PeerHost | None = None,
) -> grpc.GenericRpcHandler[Any, Any]:
    """The service's handlers with this module's decoding (see :class:`Undecodable`), each call counted
    against the caller's quota (:class:`smcdp.net.limits.CallQuotas`) as soon as it starts.  Every method is
    served as a client-streaming one (:func:`_single_request` for those with one request).  ``messages``: the
    module holding the service's request and response classes; ``host``: tells which calls are a running
    session's."""
    handlers: dict[str, grpc.RpcMethodHandler[Any, Any]] = {}
    for m in service_desc.methods:
        if not hasattr(servicer, m.name):
            continue  # not served (grpc.health.v1's List): UNIMPLEMENTED
        req_cls = getattr(messages, m.input_type.name)
        resp_cls = getattr(messages, m.output_type.name)
        fn = getattr(servicer, m.name)
        if not m.client_streaming:
            fn = _single_request(
                fn,
                quotas,
                f"{service_desc.name}.{m.name}",
                _reserve_of(service_desc.full_name, m.name),
                host,
                watch=service_desc.full_name == "grpc.health.v1.Health" and m.name == "Watch",
            )
        # else Deliver and Stream: counted by the call itself (_MessageCall): idle, then bound
        make = grpc.stream_stream_rpc_method_handler if m.server_streaming else grpc.stream_unary_rpc_method_handler
        handlers[m.name] = make(
            fn, request_deserializer=_tolerant_deserializer(req_cls), response_serializer=resp_cls.SerializeToString
        )
    return grpc.method_handlers_generic_handler(service_desc.full_name, handlers)


class _HealthServicer:
    """grpc.health.v1 with this module's decoding: bytes that are no HealthCheckRequest are
    INVALID_ARGUMENT (the stock servicer's deserializer answered UNKNOWN)."""

    def __init__(self, health: AsyncHealthServicer) -> None:
        self.health = health

    async def Check(self, request: health_pb2.HealthCheckRequest | Undecodable, context: _Context) -> Any:
        try:
            request = checked(request)
        except InvalidMessage as exc:
            await _fail(context, exc, "Health.Check")
        return await self.health.Check(request, context)

    async def Watch(self, request: health_pb2.HealthCheckRequest | Undecodable, context: _Context) -> None:
        try:
            request = checked(request)
        except InvalidMessage as exc:
            await _fail(context, exc, "Health.Watch")
        await self.health.Watch(request, context)


class PartyServer:
    """``grpc.aio`` server with mutual TLS, the servicers above and grpc.health.v1."""

    def __init__(
        self,
        config: NetConfig,
        tls: TlsMaterial,
        peers: PeerHost,
        operator: OperatorHost,
        unix_socket: Path | None = None,
    ) -> None:
        self.config = config
        self.tls = tls
        self.peers = peers
        self.operator = operator
        self.health = AsyncHealthServicer()
        #: concurrent calls per peer, of all peers, and the operator's reserve: no peer takes every slot
        self.quotas = CallQuotas(config.limits, config.name)
        self._server: grpc.aio.Server | None = None
        self.port: int | None = None
        #: a second listener, a unix socket (the operator's: ``smcdp.runtime.config.operator_socket``), with a
        #: connection cap of its own; None: the TCP address only
        self.unix_socket = unix_socket
        self._unix_inode: tuple[int, int] | None = None  # (device, inode) of the socket file it made

    async def start(self) -> int:
        limits = self.config.limits
        cap = connection_cap()
        if cap < 4 * max(1, len(self.config.peers)):
            log.warning(
                "party %s holds at most %d connections (its open-file limit %d, less a reserve) for %d peers: "
                "a session per peer needs one; raise the limit (ulimit -n, LimitNOFILE=)",
                self.config.name,
                cap,
                resource.getrlimit(resource.RLIMIT_NOFILE)[0],
                len(self.config.peers),
            )
        # no maximum_concurrent_rpcs: gRPC's cap refuses every caller alike, so one member's calls would refuse
        # everyone's.  Every call is counted by this party's own accounting (per peer, all peers, the operator's
        # reserve, running sessions) from the moment its handler starts (_generic_handler), which refuses the
        # one over its quota; a call is one HTTP/2 stream, bounded per connection (max_concurrent_streams)
        server = grpc.aio.server(options=server_options(limits))
        services = tpb.DESCRIPTOR.services_by_name
        server.add_generic_rpc_handlers(
            (
                _generic_handler(
                    services["Mailbox"],
                    MailboxServicer(self.peers, self.config.max_message_bytes, self.quotas),
                    self.quotas,
                    tpb,
                    self.peers,
                ),
                _generic_handler(services["Control"], ControlServicer(self.operator), self.quotas, tpb),
                _generic_handler(
                    health_pb2.DESCRIPTOR.services_by_name["Health"],
                    _HealthServicer(self.health),
                    self.quotas,
                    health_pb2,
                ),
            )
        )
        creds = grpc.ssl_server_credentials(
            [(self.tls.key_pem, self.tls.cert_pem)], root_certificates=self.tls.ca_pem, require_client_auth=True
        )
        try:
            port = server.add_secure_port(self.config.listen, creds)
        except RuntimeError as exc:
            raise SmcdpError(f"cannot listen on {self.config.listen}: {exc}") from None
        if port == 0:
            raise SmcdpError(f"cannot listen on {self.config.listen} (address in use or invalid)")
        self._listen_unix(server, creds)
        await server.start()
        if self.unix_socket is not None:  # bound by start(): the file this server made (_remove_unix_socket)
            try:
                st = os.stat(self.unix_socket)
                self._unix_inode = (st.st_dev, st.st_ino)
            except OSError:
                self._unix_inode = None
        self._server = server
        self.port = port
        for svc in ("",) + SERVICE_NAMES:
            await self.health.set(svc, health_pb2.HealthCheckResponse.SERVING)
        return port

    async def set_not_serving(self) -> None:
        await self.health.enter_graceful_shutdown()

    def _listen_unix(self, server: grpc.aio.Server, creds: grpc.ServerCredentials) -> None:
        """The unix-socket listener, after the TCP port is this process's (a second process of the same party
        fails there first): a socket file left by a killed process is replaced."""
        path = self.unix_socket
        if path is None:
            return
        try:
            path.unlink(missing_ok=True)
            if server.add_secure_port(f"unix:{path}", creds) == 0:
                raise RuntimeError("refused")
        except (OSError, RuntimeError) as exc:
            log.warning("cannot listen on %s (%s): the operator uses %s", path, exc, self.config.listen)
            self.unix_socket = None

    def _remove_unix_socket(self) -> None:
        """Delete the socket file this server made -- not one a successor process (the port is free during
        ``stop``'s grace) has bound at the same path since."""
        path, made = self.unix_socket, self._unix_inode
        if path is None or made is None:
            return
        try:
            st = os.stat(path)
            if (st.st_dev, st.st_ino) == made:
                path.unlink()
        except OSError:
            pass

    async def stop(self, grace: float = 2.0) -> None:
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
            self._remove_unix_socket()
            peak = self.quotas.peak
            if peak:  # what each peer held at most: its quota (limits.calls_per_peer) bounds it
                log.info(
                    "calls in progress at their peak, per peer: %s",
                    ", ".join(f"{p} {n}" for p, n in sorted(peak.items())),
                )

    async def wait_for_termination(self) -> None:
        if self._server is not None:
            await self._server.wait_for_termination()
