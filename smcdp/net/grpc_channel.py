"""The gRPC implementation of :class:`~smcdp.net.channel.Channel`.

Outbound: a message is sent in chunks (1 MiB by default) with a per-attempt
deadline, on the session's ``Mailbox.Stream`` call to that peer (one long-lived
call carries the session's messages, each answered by an Ack: no call set-up
per message, which for the keyword protocol's ~200 small round trips was most
of the transport's time).  Sends are *pipelined*: ``send`` returns once the
message is journaled and handed to the stream, messages follow each other on
the stream without waiting for the Acks before them, and the role computes on
while they travel -- so a protocol round costs one network round trip, not one
per message (docs/transport.md).  A message larger than a chunk goes as its own
``Mailbox.Deliver`` call, so that small ones never queue behind its transfer.
A failed attempt with UNAVAILABLE or
DEADLINE_EXCEEDED is retried with exponential backoff until the session
deadline (delivery is idempotent: the receiver de-duplicates by (session,
sender, tag)); then the send fails with :class:`~smcdp.errors.Unavailable`
naming the party, its role and address.  Any other status is final and raised
as the matching :mod:`smcdp.errors` class.

Inbound: the party's server (another thread, another event loop) calls
:meth:`GrpcChannel.accept_threadsafe`, which de-duplicates under a lock, journals
the message and hands it to the channel's own loop, where it enters the shared
:class:`~smcdp.net.channel.Mailbox` -- so semantics are those of the in-memory
network, and a role busy computing never delays a delivery's acknowledgement.
The Ack waits for :meth:`GrpcChannel.durable_future` (the journal's group
commit), while the next message on the stream is already being read.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hashlib
import random
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import grpc

from smcdp import errors
from smcdp._text import printable
from smcdp.errors import PreconditionFailed, SmcdpError, Unavailable
from smcdp.net.channel import Channel, Journal, Mailbox, holds_fresh, replay_view
from smcdp.net.config import NetConfig
from smcdp.net.limits import InboundBudget
from smcdp.net.tls import IDENTITY_DOMAIN, PARTY_NAME_RE, TlsMaterial, party_identity_name
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc

CHUNK_SIZE = 1024 * 1024
#: gRPC message limit for one envelope (a chunk plus header), both directions.
MAX_GRPC_MESSAGE = 4 * CHUNK_SIZE + 64 * 1024

#: clients ping every this many ms, also without calls (the server's policy matches it:
#: smcdp.net.server.SERVER_MIN_PING_INTERVAL_MS)
CLIENT_KEEPALIVE_MS = 10_000

RETRYABLE = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})
#: how a party's own INTERNAL answer begins (smcdp.net.server._fail): a bug there, not worth a retry
PEER_INTERNAL = "internal error in "
#: how gRPC's client library begins the INTERNAL status of its own, deterministic failures
_LOCAL_INTERNAL = ("Exception serializing", "Exception deserializing", "Exception iterating")
#: how gRPC's server library begins the UNKNOWN status of a handler that raised (a bug at the peer)
_PEER_UNKNOWN = ("Unexpected <class", "Exception calling application", "Unexpected error")


def retryable(exc: grpc.RpcError) -> bool:
    """A failed call worth another attempt: the peer unreachable or late, or the transport broke under the
    call -- never an answer from the peer (a party's refusals carry their origin).

    gRPC core reports a call whose HTTP/2 stream or connection broke under it (a reset stream, a
    connection torn down by a keepalive that a stalled peer did not answer) with status INTERNAL and
    details such as "Internal error from Core" or "Received RST_STREAM with error code 2", and bytes lost
    or damaged inside the TLS stream with status UNKNOWN ("TSI_DATA_CORRUPTED").  Those are the
    transport's failures: messages are de-duplicated by their receiver, so they are sent again.  A
    peer's own INTERNAL answer (a bug there), a handler that raised there (UNKNOWN "Unexpected ...") and
    the library's failure to (de)serialize are not."""
    if _origin_of(exc) is not None:
        return False
    if exc.code() in RETRYABLE:
        return True
    details = exc.details() or ""
    if exc.code() == grpc.StatusCode.UNKNOWN:
        return not details.startswith(_PEER_UNKNOWN)
    return exc.code() == grpc.StatusCode.INTERNAL and not details.startswith((PEER_INTERNAL, *_LOCAL_INTERNAL))


class AlreadyExists(SmcdpError):
    code = "ALREADY_EXISTS"


class NotFound(SmcdpError):
    """The party knows no such session, proposal or object."""

    code = "NOT_FOUND"


_CODE_CLASSES: dict[str, type[SmcdpError]] = {
    "INVALID_ARGUMENT": errors.InvalidMessage,
    "FAILED_PRECONDITION": errors.PreconditionFailed,
    "PERMISSION_DENIED": errors.PermissionDenied,
    "UNAUTHENTICATED": errors.Unauthenticated,
    "DEADLINE_EXCEEDED": errors.DeadlineExceeded,
    "UNAVAILABLE": errors.Unavailable,
    "ALREADY_EXISTS": AlreadyExists,
    "NOT_FOUND": NotFound,
    "OUT_OF_RANGE": errors.CryptoOverflow,
    "RESOURCE_EXHAUSTED": errors.ResourceExhausted,
    "DATA_LOSS": errors.DataLoss,
}


def error_for_code(code: str, message: str, origin: str | None = None) -> SmcdpError:
    """An :mod:`smcdp.errors` exception for a status code name."""
    if code in ("ABORTED", "CANCELLED"):
        return errors.SessionAborted(message, code, origin)
    cls = _CODE_CLASSES.get(code)
    if cls is None:
        exc = SmcdpError(message)
        exc.code = code if code in grpc.StatusCode.__members__ else "INTERNAL"
        return exc
    return cls(message)


#: trailing-metadata key naming the party where a session failure started
ORIGIN_METADATA = "smcdp-origin"
#: trailing-metadata key of a refusal whose session already succeeded at the refusing party
#: (:class:`~smcdp.errors.AlreadySucceeded`; its value is "succeeded")
ENDED_METADATA = "smcdp-ended"


def _succeeded_there(exc: grpc.RpcError) -> bool:
    """A FAILED_PRECONDITION refusal that says the session already succeeded at the refusing party."""
    try:
        if exc.code() != grpc.StatusCode.FAILED_PRECONDITION:
            return False
        pairs = cast(Iterable[tuple[str, str | bytes]], exc.trailing_metadata() or ())
        return any(key == ENDED_METADATA and value in ("succeeded", b"succeeded") for key, value in pairs)
    except Exception:  # noqa: BLE001 - some RpcErrors carry no metadata
        return False


def _origin_of(exc: grpc.RpcError) -> str | None:
    """The party a failed call's ``smcdp-origin`` trailing metadata names, if any."""
    try:
        # grpc-stubs type RpcError.trailing_metadata() as _Metadatum objects; grpc returns (key, value) pairs
        pairs = cast(Iterable[tuple[str, str | bytes]], exc.trailing_metadata() or ())
        for key, value in pairs:
            if key == ORIGIN_METADATA:
                value = value if isinstance(value, str) else value.decode("utf-8", "replace")
                return value if PARTY_NAME_RE.match(value) else None
    except Exception:  # noqa: BLE001 - some RpcErrors carry no metadata
        return None
    return None


#: how gRPC's client reports a server certificate that does not carry the name it was checked against
_NAME_MISMATCH = "Hostname Verification Check failed"


def identity_hint(details: str | None, party: str | None = None) -> str:
    """What to add to a failure whose ``details`` say the server's certificate did not name the party dialed
    (``""`` for any other failure): gRPC's own words name neither the party nor the likely cause."""
    if not details or _NAME_MISMATCH not in details:
        return ""
    name = party_identity_name(party) if party and PARTY_NAME_RE.match(party) else f"<party>.{IDENTITY_DOMAIN}"
    return (
        f" (the server there presented no certificate with the party identity name {name}: another party "
        "listens at that address, or its certificate was made by an earlier smcdp and must be re-issued: "
        "docs/security.md, 'Party identity')"
    )


def error_from_rpc(exc: grpc.RpcError, what: str, party: str | None, *, dialed: str | None = None) -> SmcdpError:
    """Translate a failed call into an :mod:`smcdp.errors` exception.

    A status that carries ``smcdp-origin`` trailing metadata reports a session
    failure that started at that party: it becomes a
    :class:`~smcdp.errors.SessionAborted` with the original code and origin --
    and an instance of that code's class too (:func:`remote_failure`).

    ``party``: the peer that answered (authenticated by its certificate); None only for this party's own
    answer to its operator, whose records name origins this party already weighed.
    Its ``smcdp-origin`` naming another party is its claim: the failure's origin is ``party``, and the party
    it named is ``reported_culprit`` (:func:`smcdp.runtime.liveness.weigh_claim` decides what becomes of it).
    ``dialed``: the party dialed, if other than ``party`` (named in the hint a failed certificate check
    gets: :func:`identity_hint`).
    """
    code = exc.code() if hasattr(exc, "code") else grpc.StatusCode.UNKNOWN
    # the peer wrote these: one printable line each before they reach a log or a record
    details = printable(exc.details() if hasattr(exc, "details") else str(exc))
    details += identity_hint(details, dialed or party)
    name = code.name if code is not None else "UNKNOWN"
    origin = _origin_of(exc)
    if origin is not None:
        if party is None:
            return remote_failure(name, f"{what}: {name}: {details}", origin)
        return remote_failure(name, f"{what}: {name}: {details}", party, reported_by=party, reported_culprit=origin)
    if _succeeded_there(exc):
        return errors.AlreadySucceeded(f"{what}: {name}: {details}")
    return error_for_code(name, f"{what}: {name}: {details}")


_REMOTE: dict[type, type] = {}


def remote_failure(
    code: str, message: str, origin: str, *, reported_by: str | None = None, reported_culprit: str | None = None
) -> errors.SessionAborted:
    """A session failure that started at party ``origin``: a :class:`~smcdp.errors.SessionAborted` that is
    also an instance of ``code``'s class (``PermissionDenied``, ``Unavailable``, …), so that a caller can
    catch it either way.  ``reported_by``/``reported_culprit``: a peer's word (:class:`~smcdp.errors.SmcdpError`)."""
    claim = {"reported_by": reported_by, "reported_culprit": reported_culprit}
    cls = _CODE_CLASSES.get(code)
    if cls is None:
        return errors.SessionAborted(message, code, origin, **claim)
    both = _REMOTE.get(cls)
    if both is None:
        both = _REMOTE[cls] = type(
            cls.__name__, (errors.SessionAborted, cls), {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
        )
    return both(message, code, origin, **claim)


def status_code_of(exc: BaseException) -> grpc.StatusCode:
    """The gRPC status code to report for ``exc``."""
    name = getattr(exc, "code", None)
    if isinstance(name, str) and name in grpc.StatusCode.__members__:
        return grpc.StatusCode[name]
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return grpc.StatusCode.DEADLINE_EXCEEDED
    if isinstance(exc, asyncio.CancelledError):
        return grpc.StatusCode.CANCELLED
    return grpc.StatusCode.INTERNAL


#: how long one connection attempt to a peer may take: TCP, the TLS handshake with both certificates and
#: HTTP/2's settings, about three round trips plus the handshake's CPU.  gRPC takes it from
#: ``grpc.min_reconnect_backoff_ms`` (the deadline of an attempt is the larger of it and the backoff).  It
#: was 200 ms, growing with the backoff to 2 s: between parties more than ~0.8 s of round trip apart (a
#: satellite link), or with a party busy on a loaded host, no handshake ever completed and the session
#: failed naming a live peer.  5 s covers round trips of about 1.2 s.  The cost: the first call on a channel
#: not yet connected to a black-holed peer fails after up to 5 s instead of 0.2-2 s (an Abort told to it,
#: bounded by its own 5-s timeout, ends the session that much later), and a cut link heals up to ~1 s later
#: (an attempt to a black hole sends SYNs at 0, 1 and 3 s, then the next attempt begins at 5 s).
PEER_CONNECT_MS = 5_000


def channel_options(max_message: int = MAX_GRPC_MESSAGE) -> list[tuple[str, int]]:
    return [
        ("grpc.max_send_message_length", max_message),
        ("grpc.max_receive_message_length", max_message),
        # notice a peer that comes back quickly (gRPC's default backoff grows to 120 s)
        ("grpc.initial_reconnect_backoff_ms", 200),
        ("grpc.min_reconnect_backoff_ms", PEER_CONNECT_MS),
        ("grpc.max_reconnect_backoff_ms", 2000),
        # a dead link shows at the HTTP/2 level within ~15 s; the server's policy permits these
        # pings (smcdp.net.server.server_options)
        ("grpc.keepalive_time_ms", CLIENT_KEEPALIVE_MS),
        ("grpc.keepalive_timeout_ms", 5000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
    ]


@dataclass(frozen=True)
class RetryPolicy:
    initial_backoff: float = 0.2
    max_backoff: float = 3.0
    multiplier: float = 2.0

    def delays(self) -> Iterator[float]:
        d = self.initial_backoff
        while True:
            # full jitter in [d/2, d]: peers that failed together do not retry in lockstep
            yield d * (0.5 + 0.5 * random.random())
            d = min(self.max_backoff, d * self.multiplier)


class PeerConnector:
    """Secure channels from this party to others, created lazily and reused.

    A grpc.aio channel belongs to the event loop it was created in: make one
    connector per loop and close it when the loop is done with it.  The server
    certificate is checked against the party's *identity name* (``ssl_target_name_override`` =
    :func:`~smcdp.net.tls.party_identity_name`, ``<party>.party.smcdp.invalid``, which no host name can be),
    so a peer is authenticated as the party we meant whatever address it has.
    """

    def __init__(self, config: NetConfig, tls: TlsMaterial) -> None:
        self.config = config
        self.tls = tls
        self._creds = grpc.ssl_channel_credentials(
            root_certificates=tls.ca_pem, private_key=tls.key_pem, certificate_chain=tls.cert_pem
        )
        self._channels: dict[str, grpc.aio.Channel] = {}
        #: party -> its Mailbox stub: a stub builds a callable for every method of the service (a tenth of
        #: a session loop's CPU in a run of small messages when made per message)
        self._mailboxes: dict[str, tgrpc.MailboxStub] = {}

    def channel(self, party: str) -> grpc.aio.Channel:
        ch = self._channels.get(party)
        if ch is None:
            address = self.config.address_of(party)
            ch = grpc.aio.secure_channel(
                address,
                self._creds,
                options=channel_options() + [("grpc.ssl_target_name_override", party_identity_name(party))],
            )
            self._channels[party] = ch
        return ch

    def mailbox(self, party: str) -> tgrpc.MailboxStub:
        stub = self._mailboxes.get(party)
        if stub is None:
            stub = self._mailboxes[party] = tgrpc.MailboxStub(self.channel(party))
        return stub

    def control(self, party: str) -> tgrpc.ControlStub:
        return tgrpc.ControlStub(self.channel(party))

    async def close(self) -> None:
        chans, self._channels = list(self._channels.values()), {}
        self._mailboxes = {}
        for ch in chans:
            await ch.close(grace=None)


async def call_with_retry(
    what: str,
    party: str,
    address: str,
    deadline: float,
    attempt: Callable[[float], Awaitable[Any]],
    rpc_timeout: float,
    policy: RetryPolicy = RetryPolicy(),
    abort: Mailbox | None = None,
) -> Any:
    """Run ``attempt(timeout)`` until it succeeds, a final error, an abort, or ``deadline``.

    ``deadline`` is a ``time.monotonic()`` value.  UNAVAILABLE and
    DEADLINE_EXCEEDED are retried; at the deadline the error names ``party``.
    With ``abort`` (the session's mailbox) an abort of the session ends the
    call at once -- an attempt in flight is cancelled -- and raises the abort's
    error: a role stuck sending to a dead peer hears about the end of its
    session like a role stuck receiving.
    """
    attempts = 0
    started = time.monotonic()
    last: grpc.RpcError | None = None
    delays = policy.delays()

    async def race(coro: Awaitable[Any]) -> Any:
        """``await coro``, unless the session is aborted first (then its error)."""
        return await coro if abort is None else await abort.abortable(coro)

    while True:
        if abort is not None and abort.aborted is not None:
            raise abort.aborted
        left = deadline - time.monotonic()
        if left <= 0:
            break
        attempts += 1
        try:
            return await race(attempt(min(rpc_timeout, left)))
        except grpc.RpcError as exc:
            if not retryable(exc):
                # a refusal, or a session that already ended there (whatever its code):
                # retrying cannot help; the culprit is the origin it names, else the refuser
                raise with_origin(
                    error_from_rpc(exc, f"{what} refused by party {party!r} ({address})", party), party
                ) from None
            last = exc
        left = deadline - time.monotonic()
        if left <= 0:
            break
        await race(asyncio.sleep(min(next(delays), left)))
    detail = (
        f"; last error {last.code().name}: {printable(last.details(), 400)}{identity_hint(last.details(), party)}"
        if last is not None
        else "; no time left to try"
    )
    raise with_origin(
        Unavailable(
            f"could not reach party {party!r} at {address} for {what} within the deadline "
            f"({attempts} attempt(s) over {time.monotonic() - started:.1f} s){detail}"
        ),
        party,
    )


def with_origin(exc: SmcdpError, party: str | None) -> SmcdpError:
    """``exc`` naming ``party`` as where it started, unless it names a party already."""
    if getattr(exc, "origin", None) is None:
        exc.origin = party
    return exc


def with_claim(exc: SmcdpError, source: BaseException) -> SmcdpError:
    """``exc`` (made from ``source``) keeping whose word ``source`` was and whom that word named
    (:class:`~smcdp.errors.SmcdpError`'s ``reported_by`` and ``reported_culprit``)."""
    by = getattr(source, "reported_by", None)
    if by is not None:
        exc.reported_by = by
        exc.reported_culprit = getattr(source, "reported_culprit", None)
    return exc


def _done_future() -> concurrent.futures.Future[None]:
    fut: concurrent.futures.Future[None] = concurrent.futures.Future()
    fut.set_result(None)
    return fut


def _rpc_error(code: grpc.StatusCode, details: str, trailing: grpc.aio.Metadata | None = None) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), trailing or grpc.aio.Metadata(), details, None)


class _PeerStream:
    """The session's ``Mailbox.Stream`` call to one peer, pipelined: messages are written back to back
    without waiting, and the receiver's Acks (in order) are matched to them as they come.

    Any failure (a refusal, a broken connection, an Ack missing past its deadline) ends the call: the
    message it concerns gets the call's status, the ones written after it a retryable UNAVAILABLE, and
    their senders try again (on a new stream; the receiver de-duplicates).
    """

    def __init__(self, stub: tgrpc.MailboxStub) -> None:
        self.call = stub.Stream()
        self.broken = False
        self._write = asyncio.Lock()  # one message's envelopes stay together
        self._pending: deque[asyncio.Future[Any]] = deque()  # unacknowledged messages, in the order written
        self._reader = asyncio.ensure_future(self._read_acks())

    @property
    def idle(self) -> bool:
        return not self._pending

    async def send(self, envelopes: list[tpb.Envelope], timeout: float) -> tpb.Ack:
        fut = asyncio.get_running_loop().create_future()
        try:
            # one timer for the writes and the Ack (a wait_for each cost a task, a timer and a shield)
            async with asyncio.timeout(timeout):
                async with self._write:
                    if self.broken:
                        raise _rpc_error(grpc.StatusCode.UNAVAILABLE, "the message stream had ended")
                    self._pending.append(fut)
                    for env in envelopes:
                        await self.call.write(env)
                # shielded: the Ack's future stays in the stream's queue whatever becomes of this wait
                return await asyncio.shield(fut)
        except TimeoutError:
            self.close(_rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"no acknowledgement within {timeout:.1f} s"))
            raise _rpc_error(grpc.StatusCode.DEADLINE_EXCEEDED, f"no acknowledgement within {timeout:.1f} s") from None
        except asyncio.InvalidStateError:
            # the call had already ended (the peer refused an earlier message or went away): its status
            self.close()
            raise await self._status() from None
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.broken and task is not None and not task.cancelling():
                # the stream was closed under this message (another one on it failed): gRPC raises
                # CancelledError in a write on a locally cancelled call, but nobody cancelled this
                # delivery -- a delivery that ends "cancelled" is no failure, and the message was lost
                raise _rpc_error(
                    grpc.StatusCode.UNAVAILABLE, "the message stream was closed under this message"
                ) from None
            self.close()
            raise
        except BaseException:
            self.close()
            raise

    async def _read_acks(self) -> None:
        error: BaseException
        try:
            while True:
                ack = await self.call.read()
                if ack is grpc.aio.EOF:  # type: ignore[attr-defined]  # grpc-stubs do not declare grpc.aio.EOF
                    # the server ended the call: its status concerns the next message
                    error = await self._status()
                    break
                if not self._pending:
                    error = _rpc_error(grpc.StatusCode.UNAVAILABLE, "an acknowledgement for no message")
                    break
                fut = self._pending.popleft()
                if not fut.done():
                    fut.set_result(ack)
        except grpc.RpcError as exc:
            error = exc
        except asyncio.CancelledError:
            error = _rpc_error(grpc.StatusCode.UNAVAILABLE, "the message stream was closed")
        self._fail_pending(error)

    async def _status(self) -> grpc.aio.AioRpcError:
        code = await self.call.code()
        return _rpc_error(
            grpc.StatusCode.UNAVAILABLE if code in (grpc.StatusCode.OK, grpc.StatusCode.CANCELLED) else code,
            await self.call.details() or "the message stream had ended",
            await self.call.trailing_metadata() or grpc.aio.Metadata(),
        )

    def _fail_pending(self, error: BaseException) -> None:
        """The first unacknowledged message gets ``error``; those behind it were not refused: retryable."""
        self.broken = True
        first = True
        while self._pending:
            fut = self._pending.popleft()
            if not fut.done():
                fut.set_exception(
                    error
                    if first
                    else _rpc_error(
                        grpc.StatusCode.UNAVAILABLE, "the message stream ended before this message was acknowledged"
                    )
                )
                fut.exception()  # retrieved by its sender, or moot
            first = False

    def close(self, error: BaseException | None = None) -> None:
        if error is not None:
            self._fail_pending(error)
        self.broken = True
        self.call.cancel()
        self._reader.cancel()


class GrpcChannel(Channel):
    """A session endpoint that talks to the other parties over gRPC (pipelined: see :meth:`Channel.send`).

    Create it inside the event loop that will run the role (``bind_loop`` is
    called from the constructor when a loop is running).  ``budget`` (an
    :class:`smcdp.net.limits.InboundBudget`) is what the server charges inbound
    messages to before buffering them; None means no per-session budget.
    """

    budget: InboundBudget | None = None
    pipelined = True

    def __init__(
        self,
        session_id: str,
        role: str,
        roles: Mapping[str, str],
        deadline: float | None,
        connector: PeerConnector,
        *,
        chunk_size: int = CHUNK_SIZE,
        rpc_timeout: float | None = None,
        retry: RetryPolicy = RetryPolicy(),
        journal: Journal | None = None,
    ) -> None:
        super().__init__(session_id, role, roles, deadline, journal=journal)
        if not 1 <= chunk_size <= 4 * CHUNK_SIZE:
            raise ValueError(f"chunk_size must be 1..{4 * CHUNK_SIZE} bytes")
        self.connector = connector
        self.chunk_size = chunk_size
        self.rpc_timeout = rpc_timeout or connector.config.timeouts.rpc_seconds
        #: sender role -> when its last message arrived (time.monotonic): liveness counts it like an answer
        self.last_heard: dict[str, float] = {}
        self.retry = retry
        self._lock = threading.Lock()
        self._seen: dict[tuple[str, str], tuple[str, bytes]] = {}  # (role, tag) -> (type, sha256)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False
        self._failure: tuple[str, str, str] | None = None
        self._succeeded = False
        self.inbound_duplicates = 0
        self._party_role = {party: r for r, party in self.roles.items()}
        self._streams: dict[str, _PeerStream] = {}
        if journal is not None:  # a replayed role: re-deliveries of what it holds are duplicates
            for sender_role, tag, type_url, data in journal.inbound():
                self._seen[(sender_role, tag)] = (type_url, hashlib.sha256(data).digest())
        try:
            self.bind_loop(asyncio.get_running_loop())
        except RuntimeError:
            pass

    def bind_loop(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def role_of(self, party: str) -> str | None:
        return self._party_role.get(party)

    # ---------------------------------------------------------------- outbound
    def _envelopes(self, tag: str, type_url: str, data: bytes) -> list[tpb.Envelope]:
        n = max(1, -(-len(data) // self.chunk_size))
        return [
            tpb.Envelope(
                session_id=self.session_id,
                tag=tag,
                type_name=type_url,
                chunk_index=i,
                chunk_count=n,
                total_size=len(data),
                data=data[i * self.chunk_size : (i + 1) * self.chunk_size],
            )
            for i in range(n)
        ]

    async def _transmit(self, to_role: str, tag: str, type_url: str, data: bytes) -> None:
        party = self.roles[to_role]
        address = self.connector.config.address_of(party)
        stub = self.connector.mailbox(party)
        envelopes = self._envelopes(tag, type_url, data)

        async def gen() -> AsyncIterator[tpb.Envelope]:
            for env in envelopes:
                yield env

        async def attempt(timeout: float) -> Any:
            if len(data) > self.chunk_size:
                # a large message is its own Deliver call: small ones do not queue behind its transfer
                return await stub.Deliver(gen(), timeout=timeout)
            st = self._streams.get(party)
            if st is None or st.broken:
                st = self._streams[party] = _PeerStream(stub)
            return await st.send(envelopes, timeout)

        deadline = self.deadline if self.deadline is not None else time.monotonic() + self.rpc_timeout
        await call_with_retry(
            f"message {tag!r} to role {to_role} in session {self.session_id}",
            party,
            address,
            deadline,
            attempt,
            self.rpc_timeout,
            self.retry,
            abort=self.mailbox,
        )

    async def send_abort(
        self, code: str, message: str, timeout: float = 5.0, culprit: str | None = None, link: str | None = None
    ) -> dict[str, str]:
        """Tell every other participant that this session failed (best effort, one try each).

        ``culprit``: the party whose failure ended the session (default: this party); ``link``: "A→B" if
        A's link to B is what failed.
        Returns party -> outcome ("ok" or the error), for the log.
        """

        async def one(party: str) -> tuple[str, str]:
            try:
                await self.connector.mailbox(party).Abort(
                    tpb.AbortRequest(
                        session_id=self.session_id,
                        code=code,
                        message=message[:4000],
                        culprit=culprit or "",
                        link=link or "",
                    ),
                    timeout=timeout,
                )
                return party, "ok"
            except grpc.RpcError as exc:
                return party, f"{exc.code().name}: {printable(exc.details(), 400)}"
            except SmcdpError as exc:
                return party, str(exc)

        others = [p for r, p in self.roles.items() if r != self.role and p != culprit]
        return dict(await asyncio.gather(*(one(p) for p in others)))

    async def connect(self, timeout: float) -> None:
        """Open the connections to the other participants now (TCP and TLS handshakes: two or three round
        trips each), while the session waits to begin, rather than at its first message."""
        others = [p for r, p in self.roles.items() if r != self.role]
        await asyncio.gather(
            *(asyncio.wait_for(self.connector.channel(p).channel_ready(), timeout) for p in others),
            return_exceptions=True,
        )

    async def heartbeat(
        self, party: str, incarnation: str, timeout: float, about: Sequence[str] = ()
    ) -> tpb.HeartbeatReply:
        """Probe ``party``'s view of this session (one attempt; raises grpc.RpcError on failure), and ask how
        long ago it last heard from the participants in ``about``."""
        return await self.connector.mailbox(party).Heartbeat(
            tpb.HeartbeatRequest(
                session_id=self.session_id, incarnation=incarnation, round=max(0, self.round), about=about
            ),
            timeout=timeout,
        )

    async def close(self) -> None:
        await self._cancel_deliveries()
        streams, self._streams = list(self._streams.values()), {}
        for st in streams:
            if not st.broken and st.idle:
                try:
                    await asyncio.wait_for(st.call.done_writing(), 1.0)
                except (TimeoutError, grpc.RpcError):
                    pass
            st.close()
        await self.connector.close()

    # ----------------------------------------------------------------- inbound
    def deliver_threadsafe(self, sender_role: str, tag: str, type_url: str, data: bytes) -> bool:
        """Accept a message from any thread and make it durable.  Returns False for a harmless duplicate
        (see :meth:`accept_threadsafe` and :meth:`durable_future`)."""
        fresh = self.accept_threadsafe(sender_role, tag, type_url, data)
        self.durable_future().result()
        return fresh

    def holds(self, sender_role: str, tag: str) -> bool:
        """True if a message under (sender, tag) was accepted already (:class:`~smcdp.net.server.InboundTarget`)."""
        with self._lock:
            return (sender_role, tag) in self._seen

    def accept_threadsafe(self, sender_role: str, tag: str, type_url: str, data: bytes) -> bool:
        """Store a message (not yet durable) and hand it to the role.  Returns False for a harmless duplicate.

        Raises :class:`InvalidMessage` for a second, different message under the same (sender, tag)
        and :class:`PreconditionFailed` if the session ended (a duplicate of a message already
        received is still acknowledged).  The sender may be told "delivered" only after
        :meth:`durable_future`.
        """
        self.last_heard[sender_role] = time.monotonic()  # any message is a sign of life (liveness)
        digest = hashlib.sha256(data).digest()
        key = (sender_role, tag)
        failed: SmcdpError | None = None
        with self._lock:
            prev = self._seen.get(key)
            if prev is not None:
                if prev == (type_url, digest) or self._same_but_randomness(key, type_url, data):
                    self.inbound_duplicates += 1
                    return False
                raise self._rewrite(sender_role, tag)
            self._check_open()
            try:
                if self.journal is not None:
                    # written before the role can see it (a killed process loses nothing the kernel holds)
                    self.journal.record_inbound(sender_role, tag, type_url, data, durable=False, digest=digest)
            except SmcdpError as exc:  # this party's disk: its session fails, the sender is told why
                failed = exc
            else:
                assert self._loop is not None  # _check_open() above raised otherwise (bound once, never unset)
                try:
                    self._loop.call_soon_threadsafe(self._put, sender_role, tag, type_url, data, digest)
                except RuntimeError:  # the loop closed under us
                    raise PreconditionFailed(f"session {self.session_id} has already ended here") from None
                self._seen[key] = (type_url, digest)
        if failed is not None:
            self.abort_threadsafe(failed)
            raise failed
        return True

    def copy_needs_bytes(self, sender_role: str, tag: str, type_url: str) -> bool:
        """Can a copy of the message held under (sender, tag) be judged only from its bytes?  Only one that may
        differ from it in fresh randomness alone (:meth:`_same_but_randomness`: a type that carries fresh
        randomness, of the held one's type, in a session with a journal); any other is judged by its SHA-256
        (:meth:`accept_copy_threadsafe`), and the server does not hold it."""
        with self._lock:
            return self._needs_bytes(self._seen.get((sender_role, tag)), type_url)

    def _needs_bytes(self, prev: tuple[str, bytes] | None, type_url: str) -> bool:
        return self.journal is not None and holds_fresh(type_url) and (prev is None or prev[0] == type_url)

    def accept_copy_threadsafe(
        self, sender_role: str, tag: str, type_url: str, digest: bytes, data: bytes | None = None
    ) -> bool | None:
        """Judge a copy of the message held under (sender, tag) from its SHA-256 ``digest`` -- and from its
        bytes, ``data``, where :meth:`copy_needs_bytes` says only they can tell: False for a harmless
        duplicate, :class:`InvalidMessage` (its sender the origin) for a different message, and None if
        ``data`` is None and only the bytes could tell.  A key not held (cannot happen: the server asks for
        keys held) is accepted from ``data`` as a new message."""
        self.last_heard[sender_role] = time.monotonic()  # any message is a sign of life (liveness)
        key = (sender_role, tag)
        with self._lock:
            prev = self._seen.get(key)
            if prev is not None:
                if prev == (type_url, digest):
                    self.inbound_duplicates += 1
                    return False
                if self._needs_bytes(prev, type_url):
                    if data is None:
                        return None
                    if self._same_but_randomness(key, type_url, data):
                        self.inbound_duplicates += 1
                        return False
                raise self._rewrite(sender_role, tag)
        if data is None:
            raise PreconditionFailed(f"message {tag!r} from {sender_role} is not held here")
        return self.accept_threadsafe(sender_role, tag, type_url, data)

    def _rewrite(self, sender_role: str, tag: str) -> SmcdpError:
        # the sender's state is what failed (a replay that diverged): it is the origin
        return with_origin(
            errors.InvalidMessage(
                f"{sender_role} ({self.roles[sender_role]}) sent a second, different message with tag "
                f"{tag!r} in session {self.session_id}"
            ),
            self.roles[sender_role],
        )

    def _same_but_randomness(self, key: tuple[str, str], type_url: str, data: bytes) -> bool:
        """A resend that differs from the message received under ``key`` in fresh encryption randomness
        only: what a sender whose journal lost the record of its message computes again in a resumed
        session (its replay cannot reproduce the randomness).  It says the same thing, so it is taken for a
        duplicate and the first copy kept.  Read from the journal, on this rare path only."""
        if self.journal is None or not holds_fresh(type_url):
            return False
        earlier = self.journal.received(*key)
        return (
            earlier is not None
            and earlier[0] == type_url
            and replay_view(type_url, earlier[1]) == replay_view(type_url, data)
        )

    def check_open(self) -> None:
        """Raise what a new message would hear once the session no longer takes messages here."""
        with self._lock:
            self._check_open()

    def _check_open(self) -> None:
        if self._closed or self._loop is None or self._loop.is_closed():
            if self._failure is not None:
                code, message, origin = self._failure
                raise errors.SessionAborted(
                    f"session {self.session_id} already ended at {self.me}: {message}", code, origin
                )
            if self._succeeded:
                raise errors.AlreadySucceeded(f"session {self.session_id} already succeeded at {self.me}")
            raise PreconditionFailed(f"session {self.session_id} has already ended here")

    def durable_future(self) -> concurrent.futures.Future[None]:
        """A future done once every message accepted so far is durable (the journal's group commit; no
        thread waits for it): then their senders may hear "delivered".  The role works on the messages
        meanwhile; whatever it sends is journaled after them.  A failed sync fails this party's session
        too, with its error."""
        fut = _done_future() if self.journal is None else self.journal.durable_future()
        fut.add_done_callback(self._sync_failed)
        return fut

    def _sync_failed(self, fut: concurrent.futures.Future[None]) -> None:
        if fut.cancelled():  # its waiter gave up (a Stream call ended): not a failed sync
            return
        exc = fut.exception()
        if exc is not None:
            self.abort_threadsafe(exc)

    def _put(self, sender_role: str, tag: str, type_url: str, data: bytes, digest: bytes | None = None) -> None:
        try:
            self.mailbox.put(sender_role, tag, type_url, data, digest)
        except SmcdpError as exc:  # cannot happen after the digest check; fail loudly if it does
            self.mailbox.abort(exc)

    def abort_threadsafe(self, exc: BaseException) -> None:
        """Fail every pending and future ``recv`` (from any thread)."""
        with self._lock:
            loop = self._loop
            if loop is not None and not loop.is_closed() and not self._closed:
                try:
                    loop.call_soon_threadsafe(self.abort_local, exc)
                except RuntimeError:
                    pass

    def mark_closed(self, failure: tuple[str, str, str] | None = None, succeeded: bool = False) -> None:
        """No new messages from now on; duplicates of received ones are still acknowledged.

        ``failure`` = (code, message, origin party) if the session failed here:
        later deliveries are then refused with that code and origin, so a sender
        learns the real cause rather than "session ended".  ``succeeded``: it
        succeeded here; later deliveries are refused with
        :class:`~smcdp.errors.AlreadySucceeded` (the sender takes them as delivered).
        """
        with self._lock:
            self._closed = True
            self._failure = failure
            self._succeeded = succeeded and failure is None
        self.mailbox.clear()
