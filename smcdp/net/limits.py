"""What one peer may cost this party: the ``[limits]`` section, traffic envelopes, inbound budgets.

A party is exposed to other organisations.  Everything a peer can make it hold
-- session slots, threads, buffered bytes, per-tag bookkeeping, gRPC streams --
has a limit here, checked *before* the resource is spent, and a refusal names
the rule that failed (``RESOURCE_EXHAUSTED`` for a limit, ``INVALID_ARGUMENT``
for a malformed request) without describing the party's data.

* :class:`Limits` -- the ``[limits]`` table of the party's TOML, validated like
  every other section (unknown keys are errors, every error names the key).
  docs/security.md gives the reasoning behind each default.
* :class:`TrafficEnvelope` -- what one role of one session may receive at most
  (largest message, total bytes, distinct (sender, tag) pairs), which a
  protocol's plug-in derives from the session's validated parameters
  (:meth:`smcdp.plugins.base.ProtocolPlugin.traffic_envelope`);
  :meth:`Limits.envelope` caps it with the configured ceilings.
* :class:`InboundBudget` -- one session's receive budget, charged by the server
  thread from a message's *first* envelope (its declared total size), before a
  byte of it is buffered.
* :func:`bounded_json_object` -- JSON parsing with a size and a nesting bound
  checked before the parser runs (``params_json`` nested 200,000 deep used to
  crash the handler with ``RecursionError``).

This module is transport-free (no grpc), so plug-ins and protocols may use the
envelope type.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, NoReturn, TypeVar

from smcdp.errors import InvalidMessage, ResourceExhausted

#: the key of a count in CallQuotas: a peer, or a (peer, session id) pair
_K = TypeVar("_K")

MIB = 1024 * 1024

#: JSON parameters of one session: bytes and nesting depth (protocol parameters are flat)
MAX_PARAMS_JSON_BYTES = 64 * 1024
MAX_JSON_DEPTH = 32


#: what a message costs the party besides its bytes, charged to the party-wide ledgers (:class:`InboundLedger`) with
#: them: its (sender, tag) bookkeeping for the session's life -- the de-duplication digest, the budget's and the
#: mailbox's entries --, its type name (at most 256 characters) and its journal record's header; the tag's own
#: length is added (:func:`message_cost`).  An empty message under a 250-character tag holds ~1.2 KB of the party's
#: memory and ~0.4 KB of its journal (measured) and was charged nothing: 3,000 of them passed every byte ledger
MESSAGE_OVERHEAD = 2048


def message_cost(tag: str, nbytes: int) -> int:
    """What a message of ``nbytes`` under ``tag`` costs the party-wide ledgers: its bytes and
    :data:`MESSAGE_OVERHEAD` plus its tag's length."""
    return nbytes + MESSAGE_OVERHEAD + len(tag.encode("utf-8", "surrogatepass"))


class ConfigValueError(InvalidMessage):
    """A [limits] value is out of range (re-raised as ConfigError by the config reader)."""


def finite_number(v: Any) -> bool:
    """A TOML number (an int or a float, not a bool) that a float holds: finite, an integer below 2^1024 (a
    configured 10^400 made math.isfinite raise OverflowError before any range check; found by a file fuzz)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return False
    try:
        return math.isfinite(v)
    except OverflowError:
        return False


@dataclass(frozen=True)
class Limits:
    """The ``[limits]`` section.  Defaults: docs/security.md, "Limits and their defaults"."""

    #: proposals (accepted, not yet begun) from one initiating party at a time
    pending_per_peer: int = 4
    #: proposals not yet begun, from all initiators together
    pending_total: int = 16
    #: running sessions that one party initiated
    running_per_peer: int = 8
    #: sessions held at once (pending + running, every initiator)
    sessions_total: int = 64
    #: a proposal not begun within this many seconds expires and frees its slot
    proposal_grace_seconds: float = 120.0
    #: longest session timeout a peer may propose
    max_session_seconds: float = 24 * 3600.0
    #: ceiling on one inbound message (the protocol's own envelope is usually far lower)
    max_message_mib: int = 256
    #: ceiling on everything one session may receive
    max_session_mib: int = 2048
    #: ceiling on distinct (sender, tag) messages one session may receive
    max_tags_per_session: int = 200_000
    #: gRPC: concurrent streams per connection
    max_concurrent_streams: int = 128
    #: concurrent calls from all peers together (the operator's own calls are not counted: they have
    #: ``operator_calls``; nor are the calls of running sessions, see CallQuotas).  gRPC itself caps nothing:
    #: every call is counted here from its first moment (smcdp.net.server), and a cap that does not tell
    #: callers apart would let one member's calls refuse everyone's
    max_concurrent_rpcs: int = 512
    #: concurrent calls from one peer (every Mailbox method and health check)
    calls_per_peer: int = 128
    #: concurrent Deliver/Stream calls of one peer that carry messages of one session
    calls_per_session: int = 32
    #: Deliver/Stream calls of one peer that have not yet named a live session of theirs; such a call
    #: is ended after ``call_idle_seconds``
    idle_calls_per_peer: int = 16
    call_idle_seconds: float = 10.0
    #: grpc.health.v1 Health.Watch streams of one peer, and of all peers: a Watch never ends by itself, so
    #: without its own bound a few members holding Watch streams filled max_concurrent_rpcs and switched
    #: the party off for everyone (a peer needs one to follow this party's health; Check needs none)
    watch_calls_per_peer: int = 2
    watch_calls_total: int = 32
    #: calls reserved for this party's own operator (its own certificate): StartSession waits for its
    #: session, so each session the operator runs holds one
    operator_calls: int = 128
    #: bytes the sessions that live here hold from one peer, and from all peers (in memory until the role
    #: reads them, in the sessions' journals on disk until they end)
    inbound_mib_per_peer: int = 4096
    inbound_mib_total: int = 16384
    #: ended sessions whose de-duplication digests stay in memory (late retries are acknowledged)
    keep_ended_sessions: int = 64
    # --- governance (docs/governance.md): approvals, resumes, what ended sessions leave on disk
    #: how long a proposal waits for an operator's approval: at the approving party, and at the
    #: initiator and the parties that accepted while the initiator reports the wait
    approval_timeout_seconds: float = 24 * 3600.0
    #: proposals waiting for this party's operator (pending or approved, not yet started), per peer / in all
    pending_approvals_per_peer: int = 8
    pending_approvals_total: int = 64
    #: how often one session may be restarted here (restored after a crash or resumed)
    max_restarts: int = 3
    #: checkpoints and journals of sessions that failed (resumably or not) are deleted this long after
    failed_retention_seconds: float = 24 * 3600.0

    # ------------------------------------------------------------------ derived
    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mib * MIB

    @property
    def max_session_bytes(self) -> int:
        return self.max_session_mib * MIB

    @property
    def held_per_peer(self) -> int:
        """Sessions of one peer this party holds at once in any state, winding down too: what its pending
        and running slots allow (a session whose end is decided frees its slot but not its memory)."""
        return self.pending_per_peer + self.running_per_peer

    def envelope(self, derived: TrafficEnvelope | None) -> TrafficEnvelope:
        """A protocol's envelope, capped by the configured ceilings (the ceilings alone if none)."""
        ceiling = TrafficEnvelope(
            self.max_message_bytes, self.max_session_bytes, self.max_tags_per_session, source="the party's [limits]"
        )
        if derived is None:
            return ceiling
        return TrafficEnvelope(
            min(derived.message_bytes, ceiling.message_bytes),
            min(derived.session_bytes, ceiling.session_bytes),
            min(derived.tags, ceiling.tags),
            source=derived.source,
        )

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


_INT_RANGES: dict[str, tuple[int, int]] = {
    "pending_per_peer": (1, 10_000),
    "pending_total": (1, 10_000),
    "running_per_peer": (1, 10_000),
    "sessions_total": (1, 10_000),
    "max_message_mib": (1, 16_384),
    "max_session_mib": (1, 1 << 20),
    "max_tags_per_session": (16, 100_000_000),
    "max_concurrent_streams": (4, 100_000),
    "max_concurrent_rpcs": (8, 1_000_000),
    "calls_per_peer": (4, 1_000_000),
    "calls_per_session": (2, 1_000_000),
    "idle_calls_per_peer": (1, 1_000_000),
    "watch_calls_per_peer": (0, 1_000_000),
    "watch_calls_total": (0, 1_000_000),
    "operator_calls": (4, 1_000_000),
    "inbound_mib_per_peer": (1, 1 << 24),
    "inbound_mib_total": (1, 1 << 24),
    "keep_ended_sessions": (0, 100_000),
    "pending_approvals_per_peer": (1, 10_000),
    "pending_approvals_total": (1, 100_000),
    "max_restarts": (0, 1_000),
}
_SECONDS_RANGES: dict[str, tuple[float, float]] = {
    "proposal_grace_seconds": (1.0, 24 * 3600.0),
    "max_session_seconds": (1.0, 7 * 24 * 3600.0),
    "call_idle_seconds": (0.5, 3600.0),
    "approval_timeout_seconds": (1.0, 30 * 24 * 3600.0),
    "failed_retention_seconds": (1.0, 365 * 24 * 3600.0),
}


def parse_limits(table: Mapping[str, Any], legacy_max_message_mib: int | None = None) -> Limits:
    """Validate the ``[limits]`` table; every error names the key and its allowed range."""
    allowed = set(_INT_RANGES) | set(_SECONDS_RANGES)
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise ConfigValueError(
            f"unknown key(s) in [limits]: {', '.join(unknown)} (allowed: {', '.join(sorted(allowed))})"
        )
    values: dict[str, Any] = {}
    for key, (lo, hi) in _INT_RANGES.items():
        if key in table:
            v = table[key]
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ConfigValueError(f"limits.{key} must be an integer in [{lo}, {hi}], got {v!r}")
            values[key] = v
    for key, (low, high) in _SECONDS_RANGES.items():  # float bounds (lo, hi above are ints)
        if key in table:
            v = table[key]
            if not finite_number(v) or not low <= v <= high:
                raise ConfigValueError(f"limits.{key} must be a number of seconds in [{low:g}, {high:g}], got {v!r}")
            values[key] = float(v)
    if legacy_max_message_mib is not None:
        if "max_message_mib" in values:
            raise ConfigValueError(
                "party.max_message_mib and limits.max_message_mib are both set; keep limits.max_message_mib only"
            )
        values["max_message_mib"] = legacy_max_message_mib
    limits = Limits(**values)
    if limits.pending_per_peer > limits.pending_total:
        raise ConfigValueError(
            f"limits.pending_per_peer ({limits.pending_per_peer}) cannot exceed "
            f"limits.pending_total ({limits.pending_total})"
        )
    if limits.pending_total > limits.sessions_total or limits.running_per_peer > limits.sessions_total:
        raise ConfigValueError("limits.pending_total and limits.running_per_peer cannot exceed limits.sessions_total")
    if (
        not limits.calls_per_session <= limits.calls_per_peer <= limits.max_concurrent_rpcs
        or limits.idle_calls_per_peer > limits.calls_per_peer
    ):
        raise ConfigValueError(
            f"limits: a peer's calls are bounded in all by max_concurrent_rpcs ({limits.max_concurrent_rpcs}), "
            f"per peer by calls_per_peer ({limits.calls_per_peer}), of which per session calls_per_session "
            f"({limits.calls_per_session}) and before naming a session idle_calls_per_peer "
            f"({limits.idle_calls_per_peer}): each must be at most the one before it"
        )
    if (
        not limits.watch_calls_per_peer <= limits.watch_calls_total <= limits.max_concurrent_rpcs // 2
        or limits.watch_calls_per_peer > limits.calls_per_peer
    ):
        raise ConfigValueError(
            f"limits: Health.Watch streams are bounded per peer by watch_calls_per_peer "
            f"({limits.watch_calls_per_peer}, at most calls_per_peer = {limits.calls_per_peer}) and in all by "
            f"watch_calls_total ({limits.watch_calls_total}), which may take at most half of max_concurrent_rpcs "
            f"({limits.max_concurrent_rpcs})"
        )
    if limits.inbound_mib_per_peer > limits.inbound_mib_total:
        raise ConfigValueError(
            f"limits.inbound_mib_per_peer ({limits.inbound_mib_per_peer}) cannot exceed "
            f"limits.inbound_mib_total ({limits.inbound_mib_total})"
        )
    if limits.pending_approvals_per_peer > limits.pending_approvals_total:
        raise ConfigValueError(
            f"limits.pending_approvals_per_peer ({limits.pending_approvals_per_peer}) cannot "
            f"exceed limits.pending_approvals_total ({limits.pending_approvals_total})"
        )
    if limits.max_message_mib > limits.max_session_mib:
        raise ConfigValueError(
            f"limits.max_message_mib ({limits.max_message_mib}) cannot exceed "
            f"limits.max_session_mib ({limits.max_session_mib})"
        )
    return limits


# ---------------------------------------------------------------------- traffic envelopes
@dataclass(frozen=True)
class TrafficEnvelope:
    """The most one role of one session may receive: one message, all messages, distinct tags."""

    message_bytes: int
    session_bytes: int
    tags: int
    #: what the numbers were derived from (named in refusals)
    source: str = "the protocol's parameters"

    def __post_init__(self) -> None:
        if self.message_bytes < 1 or self.session_bytes < self.message_bytes or self.tags < 1:
            raise ValueError(f"inconsistent traffic envelope {self}")

    @classmethod
    def from_messages(
        cls, messages: Sequence[tuple[int, ...]], source: str, slack: float = 1.25, floor: int = 4096
    ) -> TrafficEnvelope:
        """From ``(count, largest size in bytes)`` per kind of message a role receives, or
        ``(count, largest, total bytes)`` where the messages of a kind differ in size.

        ``slack`` covers protobuf framing the estimates leave out; ``floor`` keeps
        tiny control messages from being refused over a few bytes of framing.
        """
        largest = max(max(m[1] for m in messages), 1)
        total = sum(m[2] if len(m) > 2 else m[0] * m[1] for m in messages)
        tags = sum(m[0] for m in messages)
        msg = max(floor, math.ceil(largest * slack))
        return cls(msg, max(msg, math.ceil(total * slack) + floor), max(1, tags), source)

    def widest(self, other: TrafficEnvelope) -> TrafficEnvelope:
        """The envelope that admits what either admits (e.g. over the choices a peer makes)."""
        return TrafficEnvelope(
            max(self.message_bytes, other.message_bytes),
            max(self.session_bytes, other.session_bytes),
            max(self.tags, other.tags),
            self.source,
        )


def public_key_bytes(modulus_bits: int) -> int:
    """Serialised size bound of a ``PaillierPublicKey`` with an n of ``modulus_bits``: n, and room for a
    subgroup key's base (mod n²) and its bits (docs/crypto.md, "Subgroup keys"), plus framing."""
    return modulus_bits // 8 + (2 * modulus_bits + 7) // 8 + 48


def ciphertext_vector_bytes(count: int, modulus_bits: int) -> int:
    """Serialised size bound of a ``CiphertextVector`` of ``count`` ciphertexts mod n² (n of ``modulus_bits``)."""
    ct = (2 * modulus_bits + 7) // 8
    return count * (ct + 4) + 64


class InboundLedger:
    """What the live sessions of this party hold from each peer, and from all peers together (bytes).

    Each session's :class:`InboundBudget` charges it alongside its own envelope, so that a peer's
    messages across every session it takes part in -- memory until the role reads them, journal on disk
    until the session ends -- stay within ``limits.inbound_mib_per_peer``, and everyone's within
    ``limits.inbound_mib_total``.  A session gives its bytes back when it ends (:meth:`InboundBudget.close`).
    """

    def __init__(self, limits: Limits, me: str) -> None:
        self.per_peer = limits.inbound_mib_per_peer * MIB
        self.total = limits.inbound_mib_total * MIB
        self.me = me
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        self._sum = 0

    def held(self, peer: str | None = None) -> int:
        return self._sum if peer is None else self._held.get(peer, 0)

    def charge(self, peer: str, nbytes: int) -> None:
        """Hold ``nbytes`` more from ``peer``; refused (ResourceExhausted) past either bound."""
        with self._lock:
            mine = self._held.get(peer, 0)
            if mine + nbytes > self.per_peer:
                raise ResourceExhausted(
                    f"the sessions at party {self.me!r} hold {mine} bytes from party {peer!r}; {nbytes} more would "
                    f"pass limits.inbound_mib_per_peer = {self.per_peer // MIB}"
                )
            if self._sum + nbytes > self.total:
                raise ResourceExhausted(
                    f"the sessions at party {self.me!r} hold {self._sum} bytes from their peers; {nbytes} more would "
                    f"pass limits.inbound_mib_total = {self.total // MIB}"
                )
            self._held[peer] = mine + nbytes
            self._sum += nbytes

    def release(self, peer: str, nbytes: int) -> None:
        with self._lock:
            left = self._held.get(peer, 0) - nbytes
            if left > 0:
                self._held[peer] = left
            else:
                self._held.pop(peer, None)
            self._sum -= nbytes


class InboundBudget:
    """One session's receive budget, shared by the server threads that deliver into it.

    :meth:`admit` runs when a message's first envelope arrives, with the total
    size the sender declares: it refuses (``RESOURCE_EXHAUSTED``) a message
    larger than the envelope allows, one that would take the session past its
    byte budget, or a new (sender, tag) past the tag budget, and otherwise
    reserves the bytes.  :meth:`settle` keeps the charge of a message that
    arrived whole and fresh, and returns it for a duplicate or a stream that
    failed, so a retry is not charged twice.  The party-wide ledger is charged
    :func:`message_cost` -- the bytes, and the bookkeeping every message costs,
    an empty one too -- where the session's own byte budget counts the bytes
    only (a protocol's envelope is derived from its messages' sizes).

    A (sender, tag) already received is not charged again by :meth:`admit` (it
    is a duplicate, or a rewrite the mailbox refuses): the server judges such a
    copy by its digest as it arrives, without holding it, except where only its
    bytes can tell (a resend that may differ in fresh randomness only), and
    then holds it charged to the ledger until it is judged
    (:meth:`admit_copy`, :meth:`settle_copy`).
    """

    def __init__(
        self,
        envelope: TrafficEnvelope,
        session_id: str,
        ledger: InboundLedger | None = None,
        parties: Mapping[str, str] | None = None,
    ) -> None:
        self.envelope = envelope
        self.session_id = session_id
        #: the party-wide ledger charged alongside, by sender party (``parties``: role -> party)
        self.ledger = ledger
        self.parties = dict(parties or {})
        self._lock = threading.Lock()
        self._bytes = 0
        self._received: set[tuple[str, str]] = set()
        self._inflight: dict[tuple[str, str], int] = {}  # key -> number of streams carrying it
        self._by_sender: dict[str, int] = {}  # sender role -> bytes charged to the ledger
        self._closed = False
        self.refused = 0

    @property
    def bytes_charged(self) -> int:
        return self._bytes

    def admit(self, sender_role: str, tag: str, total_size: int) -> int | None:
        """Reserve room for one message; returns the bytes charged (possibly 0: an empty
        message still takes a tag), or None for a key already received (nothing reserved)."""
        env = self.envelope
        key = (sender_role, tag)
        with self._lock:
            if total_size > env.message_bytes:
                self.refused += 1
                raise ResourceExhausted(
                    f"message {tag!r} from {sender_role} declares {total_size} bytes; session "
                    f"{self.session_id} accepts at most {env.message_bytes} bytes per message "
                    f"(limit derived from {env.source})"
                )
            if key in self._received:
                return None
            if key not in self._inflight and len(self._received) + len(self._inflight) >= env.tags:
                self.refused += 1
                raise ResourceExhausted(
                    f"session {self.session_id} has reached its limit of {env.tags} distinct messages "
                    f"(derived from {env.source}); message {tag!r} from {sender_role} refused"
                )
            if self._bytes + total_size > env.session_bytes:
                self.refused += 1
                raise ResourceExhausted(
                    f"message {tag!r} from {sender_role} ({total_size} bytes) would take session "
                    f"{self.session_id} past its budget of {env.session_bytes} received bytes "
                    f"(derived from {env.source})"
                )
            if self.ledger is not None and not self._closed:
                cost = self._charge_ledger(sender_role, tag, total_size)
                self._by_sender[sender_role] = self._by_sender.get(sender_role, 0) + cost
            self._bytes += total_size
            self._inflight[key] = self._inflight.get(key, 0) + 1
            return total_size

    def _charge_ledger(self, sender_role: str, tag: str, total_size: int) -> int:
        """Charge the party-wide ledger (held: ``self.ledger`` set) for one message; counted as refused past it."""
        assert self.ledger is not None
        cost = message_cost(tag, total_size)
        try:
            self.ledger.charge(self.parties.get(sender_role, sender_role), cost)
        except ResourceExhausted:
            self.refused += 1
            raise
        return cost

    def settle(self, sender_role: str, tag: str, charged: int | None, stored: bool) -> None:
        """End of one stream: ``stored`` if its message entered the mailbox as new."""
        key = (sender_role, tag)
        with self._lock:
            if charged is not None:  # this stream reserved the key (charged may be 0 bytes)
                left = self._inflight.get(key, 0) - 1
                if left > 0:
                    self._inflight[key] = left
                else:
                    self._inflight.pop(key, None)
            if stored:
                self._received.add(key)
            elif charged is not None:
                self._bytes -= charged
                self._give_back(sender_role, message_cost(tag, charged))

    def admit_copy(self, sender_role: str, tag: str, total_size: int) -> int:
        """Charge the ledger for a copy of a message already received that the server must hold whole to
        judge it (:meth:`settle_copy` gives the charge back once it has); refused (ResourceExhausted) past
        the ledger's bounds.  Returns the bytes charged (0 without a ledger)."""
        with self._lock:
            if total_size > self.envelope.message_bytes:  # its first copy could not have been larger
                self.refused += 1
                raise ResourceExhausted(
                    f"message {tag!r} from {sender_role} declares {total_size} bytes; session "
                    f"{self.session_id} accepts at most {self.envelope.message_bytes} bytes per message "
                    f"(limit derived from {self.envelope.source})"
                )
            if self.ledger is None:
                return 0
            cost = self._charge_ledger(sender_role, tag, total_size)
            return cost

    def settle_copy(self, sender_role: str, charged: int) -> None:
        """A copy charged by :meth:`admit_copy` was judged (or its call failed): its charge goes back."""
        if self.ledger is not None and charged > 0:
            self.ledger.release(self.parties.get(sender_role, sender_role), charged)

    def close(self) -> None:
        """The session ended here: what it held from its peers leaves the party-wide ledger."""
        with self._lock:
            self._closed = True
            for sender_role, nbytes in list(self._by_sender.items()):
                self._give_back(sender_role, nbytes)

    def _give_back(self, sender_role: str, nbytes: int) -> None:
        held = self._by_sender.get(sender_role, 0)
        nbytes = min(nbytes, held)
        if self.ledger is None or nbytes <= 0:
            return
        self.ledger.release(self.parties.get(sender_role, sender_role), nbytes)
        if held - nbytes:
            self._by_sender[sender_role] = held - nbytes
        else:
            del self._by_sender[sender_role]


# ---------------------------------------------------------------------- concurrent calls
class CallQuotas:
    """Concurrent calls held at this party's server, per peer and in all (docs/security.md).

    * every call of a peer counts against ``calls_per_peer`` and, with every other peer's, against
      ``max_concurrent_rpcs``; the party's own operator (its own certificate) has a pool of its own,
      ``operator_calls``, that no peer can take;
    * a Deliver/Stream call is *idle* until its first envelope names a session the peer holds a role
      in (``idle_calls_per_peer``; the server ends it after ``call_idle_seconds``), and is then
      *bound* to that session (``calls_per_session`` per peer and session);
    * the calls of a *running* session -- message calls bound to it, its heartbeats and aborts -- are
      *reserved*: they count against their peer's ``calls_per_peer`` but not against
      ``max_concurrent_rpcs``, so calls that no running session needs (idle or stalled streams, Watch,
      proposals, calls of sessions not yet begun) cannot take the capacity a running session needs, however
      many members send them.  In all they are bounded by the peers' own quotas (every participant of a
      session is in ``[peers]``).

    The server counts a call here the moment its handler starts, before it has read a request (every method
    is served as a client-streaming one: smcdp.net.server), and sets no gRPC-level cap: nothing but these
    quotas decides whether a call is served, so no call that they do not see can take a slot another
    caller needs.  Every refusal is ResourceExhausted naming the rule, and happens before the call holds
    anything.
    Used from the server's event loop only (a lock keeps it safe if that ever changes).
    """

    def __init__(self, limits: Limits, me: str) -> None:
        self.limits = limits
        self.me = me
        self._lock = threading.Lock()
        self._calls: dict[str, int] = {}
        self._peer_total = 0
        self._idle: dict[str, int] = {}
        self._bound: dict[tuple[str, str], int] = {}
        self._watches: dict[str, int] = {}
        self._watch_total = 0
        self._reserved = 0  # peers' calls of running sessions (outside max_concurrent_rpcs)
        #: the most calls each peer had in progress at once (reported when the server stops)
        self.peak: dict[str, int] = {}

    def calls(self, peer: str) -> int:
        return self._calls.get(peer, 0)

    @property
    def peer_calls(self) -> int:
        return self._peer_total

    @property
    def reserved_calls(self) -> int:
        """Peers' calls of running sessions in progress (not counted against ``max_concurrent_rpcs``)."""
        return self._reserved

    def enter(self, peer: str, reserved: bool = False) -> None:
        """A call of ``peer`` starts (refused if it would pass a quota).  ``reserved``: a call of a running
        session ``peer`` takes part in, bounded by the peer's own quota only."""
        lim = self.limits
        with self._lock:
            mine = self._calls.get(peer, 0)
            if peer == self.me:
                if mine >= lim.operator_calls:
                    raise ResourceExhausted(
                        f"party {self.me!r}'s operator already has {mine} calls in progress "
                        f"(limits.operator_calls = {lim.operator_calls})"
                    )
            else:
                if mine >= lim.calls_per_peer:
                    raise ResourceExhausted(
                        f"party {peer!r} already has {mine} calls in progress at party {self.me!r} "
                        f"(limits.calls_per_peer = {lim.calls_per_peer})"
                    )
                if reserved:
                    self._reserved += 1
                else:
                    self._check_shared()
                    self._peer_total += 1
            self._calls[peer] = mine + 1
            if mine + 1 > self.peak.get(peer, 0):
                self.peak[peer] = mine + 1

    def _check_shared(self) -> None:
        if self._peer_total >= self.limits.max_concurrent_rpcs:
            raise ResourceExhausted(
                f"party {self.me!r} is serving {self._peer_total} calls from its peers "
                f"(limits.max_concurrent_rpcs; running sessions' calls have capacity of their own); try again shortly"
            )

    def reserve(self, peer: str) -> None:
        """A call of ``peer`` counted in the shared pool turns out to carry a running session: it moves to the
        reserved calls and frees its place in ``max_concurrent_rpcs``."""
        with self._lock:
            if peer != self.me:
                self._peer_total -= 1
                self._reserved += 1

    def unreserve(self, peer: str) -> None:
        """A call admitted as reserved carries no running session after all: it moves to the shared pool,
        refused if that is full (the caller then ends it with :meth:`leave`, reserved)."""
        with self._lock:
            if peer != self.me:
                self._check_shared()
                self._reserved -= 1
                self._peer_total += 1

    def enter_watch(self, peer: str) -> None:
        """A Health.Watch stream of ``peer`` starts (on top of :meth:`enter`): refused past
        ``watch_calls_per_peer`` or ``watch_calls_total``.  The party's own operator is not bounded here."""
        lim = self.limits
        with self._lock:
            if peer == self.me:
                return
            mine = self._watches.get(peer, 0)
            if mine >= lim.watch_calls_per_peer:
                raise ResourceExhausted(
                    f"party {peer!r} already watches the health of party {self.me!r} with {mine} streams "
                    f"(limits.watch_calls_per_peer = {lim.watch_calls_per_peer})"
                )
            if self._watch_total >= lim.watch_calls_total:
                raise ResourceExhausted(
                    f"party {self.me!r} already serves {self._watch_total} health Watch streams "
                    f"(limits.watch_calls_total = {lim.watch_calls_total}); use Check"
                )
            self._watches[peer] = mine + 1
            self._watch_total += 1

    def leave_watch(self, peer: str) -> None:
        with self._lock:
            if peer == self.me:
                return
            left = self._watches.get(peer, 0) - 1
            if left > 0:
                self._watches[peer] = left
            else:
                self._watches.pop(peer, None)
            self._watch_total -= 1

    def leave(self, peer: str, reserved: bool = False) -> None:
        with self._lock:
            left = self._calls.get(peer, 0) - 1
            if left > 0:
                self._calls[peer] = left
            else:
                self._calls.pop(peer, None)
            if peer != self.me:
                if reserved:
                    self._reserved -= 1
                else:
                    self._peer_total -= 1

    def enter_idle(self, peer: str) -> None:
        """A Deliver/Stream call of ``peer`` starts, not yet bound to a session."""
        with self._lock:
            n = self._idle.get(peer, 0)
            if n >= self.limits.idle_calls_per_peer:
                raise ResourceExhausted(
                    f"party {peer!r} already has {n} message calls at party {self.me!r} that name no session "
                    f"yet (limits.idle_calls_per_peer = {self.limits.idle_calls_per_peer})"
                )
            self._idle[peer] = n + 1

    def bind(self, peer: str, session_id: str) -> None:
        """The idle call now carries ``session_id`` (a live session in which ``peer`` holds a role)."""
        key = (peer, session_id)
        with self._lock:
            n = self._bound.get(key, 0)
            if n >= self.limits.calls_per_session:
                raise ResourceExhausted(
                    f"party {peer!r} already has {n} message calls for session {session_id} at party "
                    f"{self.me!r} (limits.calls_per_session = {self.limits.calls_per_session})"
                )
            self._bound[key] = n + 1
            self._drop(self._idle, peer)

    def leave_message_call(self, peer: str, session_id: str | None) -> None:
        """A Deliver/Stream call ends: idle (``session_id`` None) or bound to ``session_id``."""
        with self._lock:
            if session_id is None:
                self._drop(self._idle, peer)
            else:
                self._drop(self._bound, (peer, session_id))

    @staticmethod
    def _drop(counts: dict[_K, int], key: _K) -> None:
        left = counts.get(key, 0) - 1
        if left > 0:
            counts[key] = left
        else:
            counts.pop(key, None)


# ---------------------------------------------------------------------- bounded JSON
def json_depth_exceeds(text: str, max_depth: int) -> bool:
    """True if ``text`` nests arrays/objects deeper than ``max_depth`` (strings are skipped)."""
    depth = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            if depth > max_depth:
                return True
        elif ch in "]}":
            depth -= 1
    return False


def bounded_json_object(
    text: str, what: str = "params_json", max_bytes: int = MAX_PARAMS_JSON_BYTES, max_depth: int = MAX_JSON_DEPTH
) -> dict[str, Any]:
    """Parse a JSON object whose size and nesting are checked before the parser sees it."""
    if not text:
        return {}
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise InvalidMessage(f"{what} is {size} bytes; at most {max_bytes} are accepted")
    if json_depth_exceeds(text, max_depth):
        raise InvalidMessage(f"{what} nests arrays/objects deeper than {max_depth} levels")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:
        raise InvalidMessage(f"{what} is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidMessage(f"{what} must be a JSON object")
    where = _beyond_float(value)
    if where is not None:  # 1e400 parses to inf, where the literals NaN and Infinity are refused
        raise InvalidMessage(f"{what}: {where} is a number beyond the range of a float")
    return value


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON number")


def _beyond_float(value: Any, path: str = "") -> str | None:
    """The first place (``key``, ``key[2].inner``) in a parsed JSON value holding a non-finite float, or None."""
    if isinstance(value, float):
        return (path or "the value") if not math.isfinite(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        found = _beyond_float(v, f"{path}[{k}]" if isinstance(k, int) else f"{path}.{k}" if path else str(k))
        if found is not None:
            return found
    return None
