"""Admission of sessions and the bookkeeping of ended ones (issue 19).

The party runner (:mod:`smcdp.runtime.party`) calls these at its boundary:

* :func:`check_proposal` before it validates a proposal's parameters (cheap
  refusals first): per-initiator and total slots for pending (proposed, not
  begun) and running sessions, the longest timeout a peer may ask for, and
  whether seeded sessions are accepted.  A proposal that is not begun within
  ``limits.proposal_grace_seconds`` ends there and frees its slot (the session
  thread enforces it: :func:`begin_wait_seconds`), so no peer can hold slots
  with proposals it never begins, and one peer's flood never takes the slots
  another peer's sessions need.
* :func:`check_begin` caps the running sessions of one initiator.
* :func:`check_resume` -- a resumed session is admitted like a proposal: slots, and its journal within
  the session's byte envelope (issue 24).
* :func:`session_budget` -- one session's inbound budget: the protocol's own
  traffic envelope (from its validated parameters) capped by ``[limits]``.
* :class:`EndedSessions` -- what stays in memory after a session ends: its
  closed channel (de-duplication digests and failure, no buffers), for the
  last ``limits.keep_ended_sessions`` sessions only; everything else about an
  ended session is its record on disk.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Iterable, Mapping, Protocol

from smcdp.errors import ResourceExhausted
from smcdp.net.limits import InboundBudget, InboundLedger, Limits, TrafficEnvelope
from smcdp.net.server import SessionSpec
from smcdp.plugins.base import ProtocolPlugin


class _Live(Protocol):
    initiator: str
    state: str          # "prepared" or "running"


def _counts(sessions: Iterable[_Live], initiator: str, in_flight: Mapping[str, int] | None = None
            ) -> tuple[int, int, int, int]:
    """(pending by initiator, running by initiator, pending in all, sessions in all).

    ``in_flight``: initiator -> proposals (or resumes) being admitted right now, which hold no session
    yet; they count as pending (issue 24: concurrent Proposes all passed the check before any was
    registered)."""
    flying = dict(in_flight or {})
    mine_p = flying.get(initiator, 0)
    mine_r = 0
    pending = total = sum(flying.values())
    for s in sessions:
        total += 1
        if s.state == "prepared" and not getattr(s, "begun", False):   # begun: Begin admitted, thread not yet
            pending += 1
            mine_p += s.initiator == initiator
        else:
            mine_r += s.initiator == initiator
    return mine_p, mine_r, pending, total


def check_proposal(sessions: Iterable[_Live], initiator: str, spec: SessionSpec, limits: Limits,
                   me: str, in_flight: Mapping[str, int] | None = None) -> None:
    """Refuse a proposal that this party's limits do not admit (before any validation work).

    (Seeds are the governor's rule, ``[policy] allow_seeded``: see docs/governance.md.)"""
    if spec.timeout_seconds > limits.max_session_seconds:
        raise ResourceExhausted(
            f"session timeout {spec.timeout_seconds:g} s exceeds party {me!r}'s limit of "
            f"{limits.max_session_seconds:g} s (limits.max_session_seconds)")
    _check_slots(sessions, initiator, limits, me, in_flight)


def check_resume(sessions: Iterable[_Live], initiator: str, limits: Limits, me: str,
                 in_flight: Mapping[str, int] | None = None, journaled: Iterable[tuple[str, str, int]] = (),
                 envelope: TrafficEnvelope | None = None, session_id: str = "") -> None:
    """Refuse to reopen a session (``smcdp session resume``) that this party's limits do not admit: a
    resumed session holds a slot like a proposal (the initiator's pending and running sessions, the
    totals), and what its journal already holds must fit the session's byte envelope -- a resume reloads
    the journal into memory (issue 24: 24 resumes went past pending_total; one reloaded 383 MB).

    ``journaled``: (sender role, tag, bytes) of every message in the session's journal; ``envelope``:
    the session's envelope (:meth:`Limits.envelope` of the plug-in's)."""
    _check_slots(sessions, initiator, limits, me, in_flight)
    if envelope is not None:
        keys, nbytes = set(), 0
        for sender_role, tag, size in journaled:
            keys.add((sender_role, tag))
            nbytes += size
        if nbytes > envelope.session_bytes or len(keys) > envelope.tags:
            raise ResourceExhausted(
                f"session {session_id} cannot be resumed at party {me!r}: its journal holds {nbytes} bytes in "
                f"{len(keys)} messages, past the session's envelope of {envelope.session_bytes} bytes and "
                f"{envelope.tags} messages (derived from {envelope.source})")


def _check_slots(sessions: Iterable[_Live], initiator: str, limits: Limits, me: str,
                 in_flight: Mapping[str, int] | None) -> None:
    mine_p, mine_r, pending, total = _counts(sessions, initiator, in_flight)
    if initiator == me:
        pass   # the party's own operator: no peer's quota applies to it, only the party's total below
    elif mine_p >= limits.pending_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already has {mine_p} proposed sessions not yet begun at party {me!r} "
            f"(limits.pending_per_peer = {limits.pending_per_peer}); begin or abort them first, or wait "
            f"{limits.proposal_grace_seconds:g} s for them to expire")
    elif mine_r >= limits.running_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already runs {mine_r} sessions at party {me!r} "
            f"(limits.running_per_peer = {limits.running_per_peer}); try again when one has ended")
    elif pending >= limits.pending_total:
        raise ResourceExhausted(
            f"party {me!r} holds {pending} proposed sessions not yet begun (limits.pending_total); "
            "try again shortly")
    if total >= limits.sessions_total:
        raise ResourceExhausted(
            f"party {me!r} already holds {total} sessions (limits.sessions_total); try again later")


def check_begin(sessions: Iterable[_Live], initiator: str, limits: Limits, me: str) -> None:
    _, mine_r, _, _ = _counts(sessions, initiator)
    if mine_r >= limits.running_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already runs {mine_r} sessions at party {me!r} "
            f"(limits.running_per_peer = {limits.running_per_peer}); try again when one has ended")


def begin_wait_seconds(deadline: float, limits: Limits, own: bool, now: float | None = None) -> float:
    """How long a prepared session waits for Begin: the proposal grace, never past the deadline.

    The initiator's own session is begun or failed by the initiator itself (which
    reports the precise cause at the deadline); it waits until the deadline plus
    a margin that only guards against a bug.
    """
    now = time.monotonic() if now is None else now
    if own:
        return max(0.0, deadline + 30.0 - now)
    return max(0.0, min(deadline - now, limits.proposal_grace_seconds))


def session_envelope(plugin: ProtocolPlugin, spec: SessionSpec, role: str, limits: Limits) -> TrafficEnvelope:
    """What ``role`` may receive in the session: the plug-in's envelope, capped by ``[limits]``."""
    return limits.envelope(plugin.traffic_envelope(dict(spec.params), dict(spec.roles), role))


def session_budget(plugin: ProtocolPlugin, spec: SessionSpec, role: str, limits: Limits,
                   journaled: Iterable[tuple[str, str, int]] = (), ledger: InboundLedger | None = None
                   ) -> InboundBudget:
    """The session's inbound budget: the plug-in's envelope for ``role``, capped by ``[limits]``, already
    charged with what the session's journal holds (``journaled``: (sender role, tag, bytes) of each
    message), so that a restarted or resumed session does not receive its envelope a second time.
    ``ledger``: the party's bytes held per peer and in all, charged alongside (issue 24)."""
    budget = InboundBudget(session_envelope(plugin, spec, role, limits), spec.session_id, ledger, spec.roles)
    budget.preload(journaled)
    return budget


class EndedSessions:
    """The closed channels of the most recently ended sessions (an LRU of ``capacity``)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[str, object] = OrderedDict()

    def add(self, session_id: str, channel: object) -> None:
        if self.capacity <= 0:
            return
        self._items[session_id] = channel
        self._items.move_to_end(session_id)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def get(self, session_id: str):
        return self._items.get(session_id)

    def __len__(self) -> int:
        return len(self._items)
