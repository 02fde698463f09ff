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
import concurrent.futures
import hashlib
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor
from google.protobuf.message import DecodeError, Message

from smcdp._aio import all_or_first_failure
from smcdp.errors import AlreadySucceeded, DeadlineExceeded, InvalidMessage, SessionAborted, Unavailable
from smcdp.v1 import messages_pb2  # noqa: F401  (registers the types replay_view looks up by name)

M = TypeVar("M", bound=Message)
T = TypeVar("T")

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

    def as_dict(self) -> dict[str, object]:
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

    def record_inbound(
        self, sender_role: str, tag: str, type_name: str, data: bytes, durable: bool = True, digest: bytes | None = None
    ) -> None:
        """Store a received message (called before the delivery is acknowledged); with ``durable`` False
        it is written but made durable only by the next :meth:`sync`, which must run before the ack.
        ``digest``: the bytes' SHA-256 if the caller has it already (the receiver does: no second hash)."""

    def sync(self) -> None:
        """Make everything recorded so far durable."""

    def durable_future(self) -> concurrent.futures.Future[None]:
        """A future done once everything recorded so far is durable (no thread need wait for it)."""

    def received(self, sender_role: str, tag: str) -> tuple[str, bytes] | None:
        """(type name, bytes) of the message received earlier from ``sender_role`` under ``tag``, if any."""

    def outbound(self, to_role: str, tag: str) -> tuple[str, bytes] | None:
        """(type name, bytes) of the message sent earlier to ``to_role`` under ``tag``, if any."""

    def record_outbound(self, to_role: str, tag: str, type_name: str, data: bytes, durable: bool = True) -> None:
        """Store an outgoing message (called before its first delivery attempt); with ``durable`` False it
        is written (a killed process keeps it) and made durable by the next :meth:`sync`."""

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
        self._items: dict[tuple[str, str], tuple[str, bytes, bytes | None]] = {}  # (type, bytes, SHA-256)
        #: (type, SHA-256) of messages already handed to the role: their bytes are freed at once
        self._taken: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._waiters: dict[tuple[str, str], asyncio.Future[None]] = {}
        self._aborted: BaseException | None = None
        #: called with the abort's exception when the session is aborted (senders that retry)
        self._abort_callbacks: list[Callable[[BaseException], None]] = []
        self.duplicates = 0

    @property
    def aborted(self) -> BaseException | None:
        return self._aborted

    def put(self, sender_role: str, tag: str, type_url: str, data: bytes, digest: bytes | None = None) -> bool:
        """Store a message (``digest``: its SHA-256, if the caller has it).  Returns False for a harmless
        duplicate."""
        key = (sender_role, tag)
        if key in self._items or key in self._taken:
            held = self._items.get(key)
            if (held is not None and held[:2] == (type_url, data)) or self._taken.get(key) == (
                type_url,
                hashlib.sha256(data).digest(),
            ):
                self.duplicates += 1
                return False
            raise InvalidMessage(f"{sender_role} sent a second, different message with tag {tag!r}")
        self._items[key] = (type_url, data, digest)
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
                waiter.exception()  # a get that waits hears it through its shield; one that timed out, never
        self._waiters.clear()
        callbacks, self._abort_callbacks = self._abort_callbacks, []
        for fn in callbacks:
            fn(self._aborted)

    async def abortable(self, coro: Awaitable[T]) -> T:
        """``await coro`` in the calling task, unless the session is aborted first: then ``coro`` is
        cancelled and the abort's exception raised (for senders that retry).  No task of its own: a
        callback cancels the caller's task at the abort (called on this loop, while the task waits)."""
        if self._aborted is not None:
            coro.close()  # type: ignore[attr-defined]  # a coroutine object: nothing of it ran
            raise self._aborted
        task = asyncio.current_task()
        assert task is not None  # called from a coroutine running in a task
        fired: list[BaseException] = []

        def on_abort(exc: BaseException) -> None:
            fired.append(exc)
            task.cancel()

        self._abort_callbacks.append(on_abort)
        try:
            return await coro
        except BaseException:
            if not fired:
                raise
        finally:
            if fired:
                task.uncancel()  # the abort's own cancellation, answered by its error (or moot)
            else:
                self._abort_callbacks.remove(on_abort)
        raise fired[0]  # whatever the cancelled call raised: the abort is the answer

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
                async with asyncio.timeout(timeout):  # one timer (wait_for's cost a task besides)
                    await asyncio.shield(waiter)  # shared by any other get of the key
            except TimeoutError:
                raise DeadlineExceeded(f"no message {tag!r} from {sender_role} within {timeout:.1f} s") from None
        if self._aborted is not None and key not in self._items:
            raise self._aborted
        if key in self._taken:
            raise InvalidMessage(f"message {tag!r} from {sender_role} was already received once")
        type_url, data, digest = self._items.pop(key)
        self._taken[key] = (type_url, digest if digest is not None else hashlib.sha256(data).digest())
        return type_url, data

    async def first_of(self, sender_role: str, tags: Sequence[str], timeout: float) -> str:
        """The first of ``tags`` from ``sender_role`` that is here (or arrives), without taking it: a role that
        expects one message but would otherwise wait for ever if the sender went another way (its next step's
        message instead) looks at which one came.  The earliest in ``tags`` wins among those already here."""
        loop = asyncio.get_running_loop()
        waits: list[asyncio.Future[None]] = []
        try:
            async with asyncio.timeout(timeout):
                while True:
                    if self._aborted is not None:
                        raise self._aborted
                    for tag in tags:
                        if (sender_role, tag) in self._items or (sender_role, tag) in self._taken:
                            return tag
                    waits = []
                    for tag in tags:
                        waiter = self._waiters.get((sender_role, tag))
                        if waiter is None or waiter.done():
                            waiter = self._waiters[(sender_role, tag)] = loop.create_future()
                        waits.append(asyncio.shield(waiter))  # shared with any get of the key
                    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                    for w in waits:
                        if w.done() and not w.cancelled():
                            w.exception()  # an abort: raised above on the next pass
        except TimeoutError:
            raise DeadlineExceeded(f"none of {list(tags)} from {sender_role} within {timeout:.1f} s") from None
        finally:
            for w in waits:
                w.cancel()  # the shields only: the waiters stay for the gets

    def clear(self) -> None:
        """Free every buffered message and digest (the session ended; a GrpcChannel keeps its own
        digests to acknowledge late retries)."""
        self._items.clear()
        self._taken.clear()


#: a pipelined channel's window: messages (and their bytes) sent but not yet acknowledged
MAX_IN_FLIGHT = 64
MAX_IN_FLIGHT_BYTES = 64 * 1024 * 1024

#: message types whose bytes a replay does not reproduce, and the field that differs: Paillier and DGK
#: ciphertexts carry fresh encryption randomness, blobs may carry a proof's fresh commitments
#: (docs/fault-tolerance.md).  Everything else in them, and every other type, must come out byte for byte;
#: a type that holds one of these (a power-iteration round holds two ciphertext vectors) is compared the
#: same way, field by field.
FRESH_FIELDS = {"smcdp.v1.CiphertextVector": "ciphertexts", "smcdp.v1.Blobs": "values"}


_FRESH_CLASSES: dict[str, type[Message] | None] = {}


def _fresh_class(type_url: str) -> type[Message] | None:
    """The message class of ``type_url`` if it holds a fresh field at any depth, else None (a type not
    registered yet is looked up again next time: a plug-in's module may register it later)."""
    if type_url in _FRESH_CLASSES:
        return _FRESH_CLASSES[type_url]
    try:
        desc = descriptor_pool.Default().FindMessageTypeByName(type_url)
    except KeyError:
        return None

    def holds(d: Descriptor, seen: frozenset[str]) -> bool:
        return d.full_name in FRESH_FIELDS or any(
            f.message_type is not None
            and f.message_type.full_name not in seen
            and holds(f.message_type, seen | {d.full_name})
            for f in d.fields
        )

    cls = message_factory.GetMessageClass(desc) if holds(desc, frozenset()) else None
    if len(_FRESH_CLASSES) < 256:
        _FRESH_CLASSES[type_url] = cls
    return cls


def holds_fresh(type_url: str) -> bool:
    """Does a message of this type carry fresh randomness (so that a replay may differ in it)?"""
    return _fresh_class(type_url) is not None


def _clear_fresh(msg: Message, counts: list[int]) -> None:
    name = FRESH_FIELDS.get(msg.DESCRIPTOR.full_name)
    if name is not None:
        counts.append(len(getattr(msg, name)))
        msg.ClearField(name)
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        subs: Iterable[Message]
        if fd.message_type.GetOptions().map_entry:  # a map: its message values, in key order
            if fd.message_type.fields_by_name["value"].message_type is None:
                continue
            subs = [value[k] for k in sorted(value)]
        else:
            subs = value if fd.is_repeated else (value,)
        for sub in subs:
            _clear_fresh(sub, counts)


def replay_view(type_url: str, data: bytes) -> bytes:
    """What a replay of a message must reproduce exactly: its bytes, or -- for a type with fresh
    encryption randomness, at any depth -- everything but those fields, and how many values each holds."""
    cls = _fresh_class(type_url)
    if cls is None:
        return data
    msg = cls()
    try:
        msg.ParseFromString(data)
    except DecodeError:
        return data
    counts: list[int] = []
    _clear_fresh(msg, counts)
    return msg.SerializeToString(deterministic=True) + b"#" + b",".join(b"%d" % c for c in counts)


class ReplayDiverged(InvalidMessage):
    """A replayed role would send something other than what its journal says it sent."""

    def __init__(self, message: str, origin: str) -> None:
        super().__init__(message)
        self.origin = origin


class Channel(abc.ABC):
    """One party's endpoint in one protocol session.

    Attributes
    ----------
    session_id: the session's identifier.
    role: this party's role in the session.
    roles: mapping role -> party name for every participant.
    deadline: absolute ``time.monotonic()`` deadline of the session, or None.
    """

    #: sends return before the acknowledgement (see :meth:`send`); the in-memory network delivers at once
    pipelined = False

    def __init__(
        self,
        session_id: str,
        role: str,
        roles: Mapping[str, str],
        deadline: float | None = None,
        journal: Journal | None = None,
    ) -> None:
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
        #: called with the round and step at each report (the runtime's failpoints, smcdp.runtime.failpoints)
        self.on_progress: Callable[[int, str], None] | None = None
        self._sent_tags: set[tuple[str, str]] = set()
        #: a resumed session: send again what an earlier incarnation had delivered (a peer whose journal
        #: was damaged gets back what it lost; the others acknowledge duplicates)
        self.resend_delivered = False
        #: roles whose session already succeeded: nothing journaled for them is sent again, delivered or not
        #: (they vouched that every participant held its output; their session no longer takes messages);
        #: a receiver that refuses a message with AlreadySucceeded joins them
        self.finished: set[str] = set()
        self._in_flight: dict[asyncio.Task[None], int] = {}  # deliveries under way -> their bytes
        #: role -> monotonic start times of the deliveries to it not yet acknowledged (:attr:`awaiting`)
        self._unacknowledged: defaultdict[str, list[float]] = defaultdict(list)
        self._delivery_failure: BaseException | None = None
        self._closing_deliveries = False  # set when the channel cancels what is under way
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
        if self.on_progress is not None and (round is not None or step is not None):
            self.on_progress(self.round, self.step)

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
        its ciphertexts, say) must use the returned bytes.  A replay whose message differs
        in anything else (a changed randomness root or input) raises :class:`ReplayDiverged`.

        A pipelined channel (:attr:`pipelined`) returns once the message is handed to the
        transport: the role computes on while it travels and is acknowledged, several
        messages can be under way at once, and a delivery that fails ends the session's
        pending and later ``recv`` and ``send`` calls with its error.  :meth:`flush` waits
        for every acknowledgement.
        """
        self._check_role(to)
        if self.mailbox.aborted is not None:
            raise self.mailbox.aborted
        if (to, tag) in self._sent_tags:
            raise ValueError(f"tag {tag!r} already used for a message to {to}")
        self._sent_tags.add((to, tag))
        type_url, data = type_name(msg), msg.SerializeToString()
        fresh = False
        if self.journal is not None:
            earlier = self.journal.outbound(to, tag)
            if earlier is not None:
                # a replayed role: what it sent before stands (its ciphertexts carry other
                # randomness now, but the peer may hold the old bytes already)
                self._check_replay(to, tag, earlier, type_url, data)
                type_url, data = earlier
                # nothing journaled goes again to a participant that succeeded, delivered or not: it holds
                # every message it needs (an acknowledgement cut by a partition left one unmarked)
                if to in self.finished or (self.journal.delivered(to, tag) and not self.resend_delivered):
                    self.replayed_sends += 1
                    return data
            else:
                lost = getattr(self.journal, "lost_outbound", {}).get((to, tag))
                if lost is not None:
                    self._check_lost(to, tag, lost, type_url, data)
                self.journal.record_outbound(to, tag, type_url, data, durable=False)
                fresh = True
        if not self.pipelined:
            await self._deliver(to, tag, type_url, data, fresh)
            return data
        await self._make_room(len(data))
        task = asyncio.ensure_future(self._deliver(to, tag, type_url, data, fresh))
        self._in_flight[task] = len(data)
        task.add_done_callback(self._delivery_done)
        return data

    def _check_replay(self, to: str, tag: str, earlier: tuple[str, bytes], type_url: str, data: bytes) -> None:
        """A replayed send must say what the journal says it said (up to fresh encryption randomness)."""
        what = f"replay of session {self.session_id} diverged at {self.me}: message {tag!r} to {to}"
        if earlier[0] != type_url:
            raise ReplayDiverged(f"{what} was a {earlier[0]}, now a {type_url}", self.me)
        if earlier[1] != data and replay_view(type_url, earlier[1]) != replay_view(type_url, data):
            raise ReplayDiverged(
                f"{what} differs from what was sent before (SHA-256 "
                f"{hashlib.sha256(earlier[1]).hexdigest()[:16]}… then, "
                f"{hashlib.sha256(data).hexdigest()[:16]}… now): this party's randomness root "
                "or inputs changed since the session started",
                self.me,
            )

    def _check_lost(self, to: str, tag: str, lost: tuple[str, str], type_url: str, data: bytes) -> None:
        """A message whose journal record was lost to damage: one without fresh randomness must come out
        exactly as its recorded digest says (one with fresh randomness goes out anew; a receiver that
        holds the old bytes keeps them and takes the new ones for a duplicate if they differ in that
        randomness only, and refuses them, naming this party, otherwise)."""
        if holds_fresh(type_url) and lost[0] == type_url:
            return
        if (lost[0], lost[1]) != (type_url, hashlib.sha256(data).hexdigest()):
            raise ReplayDiverged(
                f"replay of session {self.session_id} diverged at {self.me}: message {tag!r} to "
                f"{to}, lost from the damaged journal, does not come out as it was recorded",
                self.me,
            )

    async def _deliver(self, to: str, tag: str, type_url: str, data: bytes, sync: bool) -> None:
        """Transmit one message and wait for its acknowledgement.  ``sync``: its journal record (written
        already, so a killed process keeps it) is made durable meanwhile -- on a worker thread, by a
        sync that concurrent ones share (group commit) -- and the delivery fails if that sync does; a
        pipelined channel does not hold the message back for it (docs/fault-tolerance.md, "Fsync off
        the critical path"), the in-memory one syncs first."""
        syncing = None
        if sync:
            assert self.journal is not None  # send() asks for a sync only of a record it journalled
            if self.pipelined:
                syncing = self.journal.durable_future()
            else:
                self.journal.sync()
        started = time.monotonic()
        self._unacknowledged[to].append(started)
        try:
            await self._transmit(to, tag, type_url, data)
        except AlreadySucceeded:
            # its session succeeded there: it needs nothing more from this party (and says so), so the
            # message counts as delivered and the receiver as finished -- not as a failed delivery
            self.finished.add(to)
        finally:
            self._unacknowledged[to].remove(started)
            if syncing is not None:
                # by the time the Ack is in, the group commit has nearly always covered the record: then
                # no event-loop wake-up is asked of the syncer thread (one per sent message otherwise)
                if syncing.done():
                    syncing.result()  # its error, if the sync failed
                else:
                    await asyncio.wrap_future(syncing)
        if self.journal is not None:
            self.journal.mark_delivered(to, tag)
        self.stats.bytes_sent += len(data)
        self.stats.messages_sent += 1
        self.stats.per_peer_sent[to] += len(data)

    async def _make_room(self, nbytes: int) -> None:
        """Wait while the window of unacknowledged messages is full; raise an earlier delivery's failure."""
        while self._in_flight and (
            len(self._in_flight) >= MAX_IN_FLIGHT or sum(self._in_flight.values()) + nbytes > MAX_IN_FLIGHT_BYTES
        ):
            await asyncio.wait(list(self._in_flight), return_when=asyncio.FIRST_COMPLETED)
        if self._delivery_failure is not None:
            raise self._delivery_failure

    @property
    def awaiting(self) -> dict[str, float]:
        """role -> since when (monotonic) a message to it has waited for its acknowledgement: the oldest
        delivery under way to each role that has one (the liveness watch probes such a peer too)."""
        return {role: min(times) for role, times in self._unacknowledged.items() if times}

    def _delivery_done(self, task: asyncio.Task[None]) -> None:
        self._in_flight.pop(task, None)
        if task.cancelled():
            if self._closing_deliveries:
                return
            # nobody but close() cancels a delivery: one that ended so anyway was not acknowledged, and
            # its receiver would wait for it until the deadline -- a loud, resumable failure instead
            exc: BaseException | None = Unavailable(
                f"a message of session {self.session_id} from {self.role} was cancelled before its receiver "
                "acknowledged it"
            )
        else:
            exc = task.exception()
        if exc is not None and self._delivery_failure is None:
            self._delivery_failure = exc
            self.abort_local(exc)  # the role hears it at its next recv or send

    async def flush(self) -> None:
        """Wait until every message sent so far is acknowledged; raise the first delivery's failure."""
        while self._in_flight:
            await asyncio.wait(list(self._in_flight))
        if self._delivery_failure is not None:
            raise self._delivery_failure

    async def _cancel_deliveries(self) -> None:
        self._closing_deliveries = True
        tasks = list(self._in_flight)
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks)

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

    async def recv_unless(self, frm: str, tag: str, msg_type: type[M], instead: str, why: str) -> M:
        """:meth:`recv` of ``tag``, unless ``frm``'s message ``instead`` comes first: then :class:`InvalidMessage`
        (``why`` says what that means) rather than waiting until the deadline for a message that will not come."""
        self._check_role(frm)
        if await self.mailbox.first_of(frm, [tag, instead], self.remaining()) == instead:
            raise InvalidMessage(f"{frm} sent {instead!r} where {tag!r} was due: {why}")
        return await self.recv(frm, tag, msg_type)

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

    def __init__(
        self,
        roles: Mapping[str, str],
        session_id: str = "local",
        timeout: float | None = None,
        journals: Mapping[str, Journal] | None = None,
    ) -> None:
        self.roles = dict(roles)
        self.session_id = session_id
        deadline = None if timeout is None else time.monotonic() + timeout
        journals = dict(journals or {})
        self.channels = {r: InMemoryChannel(self, r, deadline, journals.get(r)) for r in self.roles}
        #: every (sender role, receiver role, tag, type name, bytes) in send order,
        #: for tests that inspect what a role saw.
        self.transcript: list[tuple[str, str, str, str, bytes]] = []

    def channel(self, role: str) -> InMemoryChannel:
        return self.channels[role]

    def abort(self, exc: BaseException) -> None:
        for ch in self.channels.values():
            ch.abort_local(exc)

    def received_by(self, role: str) -> list[tuple[str, str, str, bytes]]:
        """(sender, tag, type name, bytes) of every message sent to ``role``."""
        return [(s, t, tn, d) for (s, r, t, tn, d) in self.transcript if r == role]

    async def run(self, roles: Mapping[str, Callable[[InMemoryChannel], Awaitable[object]]]) -> dict[str, Any]:
        """Run one coroutine per role; if one fails, abort the others.

        ``roles`` maps role -> ``async fn(channel)``.  Returns role -> result.
        Re-raises the first failure as it is; the other roles are cancelled and awaited.
        """

        async def guarded(role: str, fn: Callable[[InMemoryChannel], Awaitable[object]]) -> object:
            try:
                return await fn(self.channels[role])
            except BaseException as exc:  # propagate the abort to everyone
                self.abort(SessionAborted(f"{role} failed: {exc}", getattr(exc, "code", "ABORTED"), role))
                raise

        results = await all_or_first_failure(*(guarded(r, fn) for r, fn in roles.items()))
        return dict(zip(roles, results))


class InMemoryChannel(Channel):
    def __init__(
        self, network: InMemoryNetwork, role: str, deadline: float | None, journal: Journal | None = None
    ) -> None:
        super().__init__(network.session_id, role, network.roles, deadline, journal=journal)
        self.network = network

    async def _transmit(self, to_role: str, tag: str, type_url: str, data: bytes) -> None:
        self.network.transcript.append((self.role, to_role, tag, type_url, data))
        receiver = self.network.channels[to_role]
        if receiver.journal is not None:  # as the gRPC channel does before it acknowledges
            receiver.journal.record_inbound(self.role, tag, type_url, data)
        receiver.mailbox.put(self.role, tag, type_url, data)
        await asyncio.sleep(0)  # let receivers run, as a real transport would
