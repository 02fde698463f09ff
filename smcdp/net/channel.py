"""The ``Channel`` interface that every protocol role talks through.

A protocol role is an ``async def`` that receives a :class:`Channel` and its
private inputs.  It names its peers by *role* (``"trent"``, ``"party1"``,
``"charlie"`` ...), never by host or party name; the channel maps roles to
the party names of the session, and the transport maps party names to
addresses and certificates.  The same role code runs on
:class:`InMemoryNetwork` (tests, one process) and on the gRPC transport
(``smcdp.net.grpc_channel``), and both share :class:`Mailbox`, so message
semantics -- one message per (sender, tag), duplicates harmless, abort wakes
every waiter, deadlines -- are identical.

Messages are protobuf messages.  The in-memory network serialises and parses
every message exactly like the gRPC transport does, so a protocol that passes
its in-memory tests does not depend on object identity.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Awaitable, Callable, Iterable, Mapping, Protocol, TypeVar

from google.protobuf.message import DecodeError, Message

from smcdp.errors import DeadlineExceeded, InvalidMessage, SessionAborted

M = TypeVar("M", bound=Message)

#: Default deadline for one ``recv`` when the session sets none (seconds).
DEFAULT_RECV_TIMEOUT = 600.0


def type_name(msg_or_type: Message | type[Message]) -> str:
    """Full protobuf name, e.g. ``smcdp.v1.CiphertextVector``."""
    return msg_or_type.DESCRIPTOR.full_name


@dataclass
class TrafficStats:
    """Bytes and messages this party sent and received in one session."""

    bytes_sent: int = 0
    bytes_received: int = 0
    messages_sent: int = 0
    messages_received: int = 0
    per_peer_sent: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    per_peer_received: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def as_dict(self) -> dict:
        return {
            "bytes_sent": self.bytes_sent,
            "bytes_received": self.bytes_received,
            "messages_sent": self.messages_sent,
            "messages_received": self.messages_received,
            "per_peer_sent": dict(self.per_peer_sent),
            "per_peer_received": dict(self.per_peer_received),
        }


class Journal(Protocol):
    """The durable record of one party's traffic in one session (docs/fault-tolerance.md).

    Implemented by the party runtime's checkpoint; a channel without one keeps
    nothing.  With a journal a role can be *replayed* after its process died:
    its channel starts with every message it had received, and every message it
    sends is looked up first -- one it sent before goes out again with the same
    bytes (or not at all if the peer acknowledged it), so a replayed role never
    says anything new under an old tag.
    """

    def inbound(self) -> Iterable[tuple[str, str, str, bytes]]:
        """(sender role, tag, type name, bytes) of every message received so far, in order."""

    def record_inbound(self, sender_role: str, tag: str, type_name: str, data: bytes, durable: bool = True) -> None:
        """Store a received message (called before the delivery is acknowledged); with ``durable`` False
        it is written but made durable only by the next :meth:`sync`, which must run before the ack."""

    def sync(self) -> None:
        """Make everything recorded so far durable."""

    def outbound(self, to_role: str, tag: str) -> tuple[str, bytes] | None:
        """(type name, bytes) of the message sent earlier to ``to_role`` under ``tag``, if any."""

    def record_outbound(self, to_role: str, tag: str, type_name: str, data: bytes) -> None:
        """Store an outgoing message durably (called before its first delivery attempt)."""

    def mark_delivered(self, to_role: str, tag: str) -> None:
        """The receiver acknowledged the message."""

    def delivered(self, to_role: str, tag: str) -> bool:
        """True if the receiver acknowledged the message in an earlier incarnation."""


class Mailbox:
    """Inbound messages of one party in one session, keyed by (sender role, tag).

    * The first delivery of a key is kept; a later delivery with the same
      bytes is a harmless duplicate (retries); a later one with *different*
      bytes is refused with :class:`InvalidMessage` (a peer may not rewrite
      what it said).
    * ``abort`` fails every pending and future ``get``.
    """

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], tuple[str, bytes]] = {}
        #: (type, SHA-256) of messages already handed to the role: their bytes are freed at once
        self._taken: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future] = {}
        self._aborted: BaseException | None = None
        self._abort_event: asyncio.Event | None = None
        self.duplicates = 0

    @property
    def aborted(self) -> BaseException | None:
        return self._aborted

    def put(self, sender_role: str, tag: str, type_url: str, data: bytes) -> bool:
        """Store a message.  Returns False for a harmless duplicate."""
        key = (sender_role, tag)
        if key in self._items or key in self._taken:
            if self._items.get(key) == (type_url, data) or \
                    self._taken.get(key) == (type_url, hashlib.sha256(data).digest()):
                self.duplicates += 1
                return False
            raise InvalidMessage(
                f"{sender_role} sent a second, different message with tag {tag!r}"
            )
        self._items[key] = (type_url, data)
        waiter = self._waiters.pop(key, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        return True

    def abort(self, exc: BaseException) -> None:
        if self._aborted is None:
            self._aborted = exc
        for waiter in self._waiters.values():
            if not waiter.done():
                waiter.set_exception(exc)
        self._waiters.clear()
        if self._abort_event is not None:
            self._abort_event.set()

    async def wait_aborted(self) -> BaseException:
        """Return the abort's exception once the session is aborted (for senders that retry)."""
        if self._aborted is None:
            if self._abort_event is None:
                self._abort_event = asyncio.Event()
            await self._abort_event.wait()
        return self._aborted

    async def get(self, sender_role: str, tag: str, timeout: float) -> tuple[str, bytes]:
        key = (sender_role, tag)
        if self._aborted is not None:
            raise self._aborted
        if key not in self._items:
            loop = asyncio.get_running_loop()
            waiter = self._waiters.get(key)
            if waiter is None or waiter.done():
                waiter = loop.create_future()
                self._waiters[key] = waiter
            try:
                await asyncio.wait_for(asyncio.shield(waiter), timeout)
            except asyncio.TimeoutError:
                raise DeadlineExceeded(
                    f"no message {tag!r} from {sender_role} within {timeout:.1f} s"
                ) from None
        if self._aborted is not None and key not in self._items:
            raise self._aborted
        if key in self._taken:
            raise InvalidMessage(f"message {tag!r} from {sender_role} was already received once")
        type_url, data = self._items.pop(key)
        self._taken[key] = (type_url, hashlib.sha256(data).digest())
        return type_url, data

    def clear(self) -> None:
        """Free every buffered message and digest (the session ended; a GrpcChannel keeps its own
        digests to acknowledge late retries)."""
        self._items.clear()
        self._taken.clear()


class Channel(abc.ABC):
    """One party's endpoint in one protocol session.

    Attributes
    ----------
    session_id: the session's identifier.
    role: this party's role in the session.
    roles: mapping role -> party name for every participant.
    deadline: absolute ``time.monotonic()`` deadline of the session, or None.
    """

    def __init__(self, session_id: str, role: str, roles: Mapping[str, str],
                 deadline: float | None = None, journal: Journal | None = None) -> None:
        if role not in roles:
            raise ValueError(f"role {role!r} is not in the session's roles {sorted(roles)}")
        self.session_id = session_id
        self.role = role
        self.roles = dict(roles)
        self.deadline = deadline
        self.mailbox = Mailbox()
        self.stats = TrafficStats()
        self.journal = journal
        #: messages this incarnation did not transmit because an earlier one already had
        self.replayed_sends = 0
        #: progress the role reports (for status and chaos tests): its current round and step
        self.round = 0
        self.step = ""
        self._sent_tags: set[tuple[str, str]] = set()
        if journal is not None:
            for sender_role, tag, type_url, data in journal.inbound():
                self.mailbox.put(sender_role, tag, type_url, data)

    # ----------------------------------------------------------- interface
    @abc.abstractmethod
    async def _transmit(self, to_role: str, tag: str, type_url: str, data: bytes) -> None:
        """Deliver serialised bytes to the peer holding ``to_role``."""

    async def close(self) -> None:  # pragma: no cover - trivial default
        return None

    # ------------------------------------------------------------- helpers
    @property
    def me(self) -> str:
        return self.roles[self.role]

    def peers(self, prefix: str | None = None) -> list[str]:
        """Roles other than mine (optionally those starting with ``prefix``), sorted."""
        return sorted(r for r in self.roles if r != self.role and (prefix is None or r.startswith(prefix)))

    def remaining(self) -> float:
        if self.deadline is None:
            return DEFAULT_RECV_TIMEOUT
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceeded(f"session {self.session_id} passed its deadline")
        return left

    def progress(self, round: int | None = None, step: str | None = None) -> None:
        """Report the role's progress (a round number, a step name); shown by the party's status."""
        if round is not None:
            self.round = int(round)
        if step is not None:
            self.step = str(step)[:64]

    def _check_role(self, role: str) -> None:
        if role not in self.roles:
            raise ValueError(f"no role {role!r} in session {self.session_id} (roles: {sorted(self.roles)})")
        if role == self.role:
            raise ValueError("a role cannot send to or receive from itself")

    async def send(self, to: str, tag: str, msg: Message) -> bytes:
        """Send ``msg`` to the party holding role ``to`` under ``tag``; returns the bytes sent.

        Tags must be unique per (receiver, tag) within a session.  A replayed role
        (docs/fault-tolerance.md) sends what it sent before, which may differ from ``msg``
        in encryption randomness: a role that goes on to use what it sent (a proof about
        its ciphertexts, say) must use the returned bytes.
        """
        self._check_role(to)
        if self.mailbox.aborted is not None:
            raise self.mailbox.aborted
        if (to, tag) in self._sent_tags:
            raise ValueError(f"tag {tag!r} already used for a message to {to}")
        self._sent_tags.add((to, tag))
        type_url, data = type_name(msg), msg.SerializeToString()
        if self.journal is not None:
            earlier = self.journal.outbound(to, tag)
            if earlier is not None:
                # a replayed role: what it sent before stands (its ciphertexts carry other
                # randomness now, but the peer may hold the old bytes already)
                if earlier[0] != type_url:
                    raise InvalidMessage(f"replay of session {self.session_id} diverged: message {tag!r} to {to} "
                                         f"was a {earlier[0]}, now a {type_url}")
                type_url, data = earlier
                if self.journal.delivered(to, tag):
                    self.replayed_sends += 1
                    return data
            else:
                self.journal.record_outbound(to, tag, type_url, data)
        await self._transmit(to, tag, type_url, data)
        if self.journal is not None:
            self.journal.mark_delivered(to, tag)
        self.stats.bytes_sent += len(data)
        self.stats.messages_sent += 1
        self.stats.per_peer_sent[to] += len(data)
        return data

    async def send_many(self, to: Iterable[str], tag: str, msg: Message) -> bytes:
        """Send the same message to several roles concurrently; returns the bytes sent.

        Every receiver gets the same bytes, also in a replay: if any of them was sent this
        message before, that earlier version goes to all."""
        to = list(to)
        if self.journal is not None:
            earlier = next((e for e in (self.journal.outbound(r, tag) for r in to) if e is not None), None)
            if earlier is not None and earlier[0] == type_name(msg):
                msg = type(msg).FromString(earlier[1])
        sent = await asyncio.gather(*(self.send(r, tag, msg) for r in to))
        return sent[0] if sent else msg.SerializeToString()

    async def recv(self, frm: str, tag: str, msg_type: type[M], timeout: float | None = None) -> M:
        """Wait for the message ``tag`` from role ``frm`` and parse it as ``msg_type``.

        Raises :class:`InvalidMessage` if the bytes are not a ``msg_type``,
        :class:`DeadlineExceeded` on timeout and :class:`SessionAborted` if
        any participant aborted the session.
        """
        self._check_role(frm)
        wait = self.remaining() if timeout is None else min(timeout, self.remaining())
        try:
            type_url, data = await self.mailbox.get(frm, tag, wait)
        except DeadlineExceeded as exc:
            raise DeadlineExceeded(f"{exc} (party {self.roles[frm]!r})") from None
        expected = msg_type.DESCRIPTOR.full_name
        if type_url != expected:
            raise InvalidMessage(f"message {tag!r} from {frm} is a {type_url}, expected {expected}")
        msg = msg_type()
        try:
            msg.ParseFromString(data)
        except DecodeError as exc:
            raise InvalidMessage(f"message {tag!r} from {frm} does not parse as {expected}: {exc}") from None
        self.stats.bytes_received += len(data)
        self.stats.messages_received += 1
        self.stats.per_peer_received[frm] += len(data)
        return msg

    async def recv_all(self, frm: Iterable[str], tag: str, msg_type: type[M]) -> dict[str, M]:
        """Receive ``tag`` from several roles; returns role -> message."""
        frm = list(frm)
        msgs = await asyncio.gather(*(self.recv(r, tag, msg_type) for r in frm))
        return dict(zip(frm, msgs))

    def abort_local(self, exc: BaseException) -> None:
        """Fail every pending ``recv`` of this channel."""
        self.mailbox.abort(exc)


class InMemoryNetwork:
    """All roles of one session in one process.

    >>> net = InMemoryNetwork({"trent": "trent", "party1": "alice", "party2": "bob"})
    >>> ch = net.channel("trent")
    """

    def __init__(self, roles: Mapping[str, str], session_id: str = "local",
                 timeout: float | None = None, journals: Mapping[str, Journal] | None = None) -> None:
        self.roles = dict(roles)
        self.session_id = session_id
        deadline = None if timeout is None else time.monotonic() + timeout
        journals = dict(journals or {})
        self.channels = {r: InMemoryChannel(self, r, deadline, journals.get(r)) for r in self.roles}
        #: every (sender role, receiver role, tag, type name, bytes) in send order,
        #: for tests that inspect what a role saw.
        self.transcript: list[tuple[str, str, str, str, bytes]] = []

    def channel(self, role: str) -> "InMemoryChannel":
        return self.channels[role]

    def abort(self, exc: BaseException) -> None:
        for ch in self.channels.values():
            ch.abort_local(exc)

    def received_by(self, role: str) -> list[tuple[str, str, str, bytes]]:
        """(sender, tag, type name, bytes) of every message sent to ``role``."""
        return [(s, t, tn, d) for (s, r, t, tn, d) in self.transcript if r == role]

    async def run(self, roles: Mapping[str, Callable[["InMemoryChannel"], Awaitable]]) -> dict:
        """Run one coroutine per role; if one fails, abort the others.

        ``roles`` maps role -> ``async fn(channel)``.  Returns role -> result.
        Re-raises the first failure.
        """

        async def guarded(role: str, fn):
            try:
                return await fn(self.channels[role])
            except BaseException as exc:  # propagate the abort to everyone
                self.abort(SessionAborted(f"{role} failed: {exc}", getattr(exc, "code", "ABORTED"), role))
                raise

        tasks = {r: asyncio.ensure_future(guarded(r, fn)) for r, fn in roles.items()}
        try:
            await asyncio.wait(tasks.values(), return_when=asyncio.FIRST_EXCEPTION)
            first_exc = None
            for r, t in tasks.items():
                if t.done() and t.exception() is not None and not isinstance(t.exception(), SessionAborted):
                    first_exc = t.exception()
                    break
            if first_exc is None:
                for t in tasks.values():
                    if t.done() and t.exception() is not None:
                        first_exc = t.exception()
                        break
            if first_exc is not None:
                await asyncio.gather(*tasks.values(), return_exceptions=True)
                raise first_exc
            return {r: t.result() for r, t in tasks.items()}
        finally:
            for t in tasks.values():
                if not t.done():
                    t.cancel()


class InMemoryChannel(Channel):
    def __init__(self, network: InMemoryNetwork, role: str, deadline: float | None,
                 journal: Journal | None = None) -> None:
        super().__init__(network.session_id, role, network.roles, deadline, journal=journal)
        self.network = network

    async def _transmit(self, to_role: str, tag: str, type_url: str, data: bytes) -> None:
        self.network.transcript.append((self.role, to_role, tag, type_url, data))
        receiver = self.network.channels[to_role]
        if receiver.journal is not None:  # as the gRPC channel does before it acknowledges
            receiver.journal.record_inbound(self.role, tag, type_url, data)
        receiver.mailbox.put(self.role, tag, type_url, data)
        await asyncio.sleep(0)  # let receivers run, as a real transport would
