"""Admission of sessions and the bookkeeping of ended ones (docs/security.md, 'Limits and their defaults').

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
* :func:`session_budget` -- one session's inbound budget: the protocol's own
  traffic envelope (from its validated parameters) capped by ``[limits]``.
* :func:`check_resume` and :func:`charge_journal` -- a session continued from its
  checkpoint is admitted again, so a resume is no way around the limits: slots,
  ``max_restarts``, its unrenewed deadline, and what its journal already holds counted
  against its envelope.
* :class:`EndedSessions` -- what stays in memory after a session ends: its
  closed channel (de-duplication digests and failure, no buffers), for the
  last ``limits.keep_ended_sessions`` sessions only; everything else about an
  ended session is its record on disk.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, NamedTuple, Protocol

from smcdp.errors import DeadlineExceeded, ResourceExhausted, SmcdpError
from smcdp.net.limits import InboundBudget, InboundLedger, Limits
from smcdp.net.server import SessionSpec, parse_link
from smcdp.plugins.base import ProtocolPlugin
from smcdp.runtime.states import Phase, Slot
from smcdp.states import SessionState

#: what one confirmation of the final acknowledgement round may take of the envelope (smcdp.runtime.ending;
#: its bytes are a few, its framing under the envelope's floor)
CONFIRMATION_BYTES = 64


class _Lifecycle(Protocol):
    @property
    def phase(self) -> Phase: ...


class _Live(Protocol):
    # read-only members: a protocol's plain attributes are invariant, so a Session (whose lifecycle is a
    # Lifecycle, not a _Lifecycle) would not match them
    @property
    def initiator(self) -> str: ...
    @property
    def lifecycle(self) -> _Lifecycle: ...


class _Counts(NamedTuple):
    mine_pending: int  # the initiator's sessions waiting for Begin (and its admissions in flight)
    mine_running: int  # the initiator's sessions begun
    mine_held: int  # the initiator's sessions in any state, winding down too
    pending: int  # sessions waiting for Begin, of every initiator
    total: int  # sessions held, of every initiator


def _counts(sessions: Iterable[_Live], initiator: str, in_flight: Mapping[str, int] | None = None) -> _Counts:
    """How many sessions hold which slots.

    A session whose end is decided (its Abort was accepted, it failed or it ended) holds neither a
    pending nor a running slot: a peer that aborts a proposal may propose the next one at once, however
    long the aborted one takes to wind down.  It still counts in ``mine_held`` and ``total``: a peer
    cannot make the party hold more than ``limits.held_per_peer`` of its sessions at once, winding down or
    not (:func:`_check_slots`).

    ``in_flight``: initiator -> proposals (or resumes) being admitted right now, which hold no session
    yet; they count as pending (else concurrent Proposes all pass the check before any is
    registered)."""
    flying = dict(in_flight or {})
    mine_p = mine_h = flying.get(initiator, 0)
    mine_r = 0
    pending = total = sum(flying.values())
    for s in sessions:
        total += 1
        mine_h += s.initiator == initiator
        slot = s.lifecycle.phase.slot
        if slot is None:
            continue  # aborted, failed or ended, winding down: it holds memory, not a slot
        if slot is Slot.PENDING:
            pending += 1
            mine_p += s.initiator == initiator
        else:  # begun (Begin admitted, the thread not yet running its role) or running
            mine_r += s.initiator == initiator
    return _Counts(mine_p, mine_r, mine_h, pending, total)


def fair_share(per_peer: int, total: int, proposers: int) -> int:
    """What one peer may hold of a queue shared by ``proposers`` peers (those the policy may admit): its
    per-peer limit, but never more than an equal part of the total -- so that any k of them, hostile or
    not, hold at most k parts and every other admitted peer still finds its own.  At least one (start-up
    refuses a total smaller than the number of such peers: smcdp.runtime.config)."""
    return max(1, min(per_peer, total // max(1, proposers)))


def check_proposal(
    sessions: Iterable[_Live],
    initiator: str,
    spec: SessionSpec,
    limits: Limits,
    me: str,
    in_flight: Mapping[str, int] | None = None,
    proposers: int = 1,
) -> None:
    """Refuse a proposal that this party's limits do not admit (before any validation work).

    (Seeds are the governor's rule, ``[policy] allow_seeded``: see docs/governance.md.)"""
    if spec.timeout_seconds > limits.max_session_seconds:
        raise ResourceExhausted(
            f"session timeout {spec.timeout_seconds:g} s exceeds party {me!r}'s limit of "
            f"{limits.max_session_seconds:g} s (limits.max_session_seconds)"
        )
    _check_slots(sessions, initiator, limits, me, in_flight, proposers)


def _check_slots(
    sessions: Iterable[_Live],
    initiator: str,
    limits: Limits,
    me: str,
    in_flight: Mapping[str, int] | None,
    proposers: int = 1,
) -> None:
    mine_p, mine_r, mine_h, pending, total = _counts(sessions, initiator, in_flight)
    share = fair_share(limits.pending_per_peer, limits.pending_total, proposers)
    if initiator == me:
        pass  # the party's own operator: no peer's quota applies to it, only the party's total below
    elif mine_h >= limits.held_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already holds {mine_h} sessions at party {me!r}, some still winding down "
            f"(limits.pending_per_peer + running_per_peer = {limits.held_per_peer}); try again shortly"
        )
    elif mine_p >= share:
        raise ResourceExhausted(
            f"party {initiator!r} already has {mine_p} proposed sessions not yet begun at party {me!r} "
            f"(limits.pending_per_peer = {limits.pending_per_peer}, and its share of limits.pending_total = "
            f"{limits.pending_total} among the {proposers} peers the policy admits: {share}); begin or abort "
            f"them first, or wait {limits.proposal_grace_seconds:g} s for them to expire"
        )
    elif mine_r >= limits.running_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already runs {mine_r} sessions at party {me!r} "
            f"(limits.running_per_peer = {limits.running_per_peer}); try again when one has ended"
        )
    elif pending >= limits.pending_total:
        raise ResourceExhausted(
            f"party {me!r} holds {pending} proposed sessions not yet begun (limits.pending_total); try again shortly"
        )
    if total >= limits.sessions_total:
        raise ResourceExhausted(f"party {me!r} already holds {total} sessions (limits.sessions_total); try again later")


def check_begin(sessions: Iterable[_Live], initiator: str, limits: Limits, me: str) -> None:
    mine_r = _counts(sessions, initiator).mine_running
    if mine_r >= limits.running_per_peer:
        raise ResourceExhausted(
            f"party {initiator!r} already runs {mine_r} sessions at party {me!r} "
            f"(limits.running_per_peer = {limits.running_per_peer}); try again when one has ended"
        )


#: a participant told that the session waits for an operator keeps it prepared at least this long
#: after each notice (the initiator repeats the notice with every poll, at most 5 s apart)
WAITING_NOTICE_GRACE = 15.0


def begin_by(deadline: float, received: float, limits: Limits, own: bool, extended: float | None = None) -> float:
    """When (``time.monotonic()``) a prepared session stops waiting for Begin.

    A peer's proposal waits the proposal grace from its receipt, never past the deadline;
    ``extended`` (:func:`approval_wait_until`) lets it wait longer while an operator
    decides.  The initiator's own session is begun or failed by the initiator itself
    (which reports the precise cause at the deadline, extended while it waits for an
    approval); it waits until the deadline plus a margin that only guards against a bug.
    """
    if own:
        return deadline + 30.0
    base = min(deadline, received + limits.proposal_grace_seconds)
    return base if extended is None else max(base, extended)


def begin_wait_seconds(deadline: float, limits: Limits, own: bool, now: float | None = None) -> float:
    """How long a prepared session received ``now`` waits for Begin (:func:`begin_by`)."""
    now = time.monotonic() if now is None else now
    return max(0.0, begin_by(deadline, now, limits, own) - now)


def approval_wait_until(received: float, limits: Limits, own: bool, now: float | None = None) -> float:
    """How long a prepared session waits while a participant's operator decides.

    Never past ``limits.approval_timeout_seconds`` from its receipt here.  A participant
    other than the initiator waits ``WAITING_NOTICE_GRACE`` (or the proposal grace, if
    longer) past each notice, so an initiator that dies while it waits frees the slot soon.
    """
    now = time.monotonic() if now is None else now
    cap = received + limits.approval_timeout_seconds
    if own:
        return cap
    return min(cap, now + max(limits.proposal_grace_seconds, WAITING_NOTICE_GRACE))


def session_budget(
    plugin: ProtocolPlugin, spec: SessionSpec, role: str, limits: Limits, ledger: InboundLedger | None = None
) -> InboundBudget:
    """The session's inbound budget: the plug-in's envelope for ``role``, capped by ``[limits]``.
    ``ledger``: the party's bytes held per peer and in all, charged alongside, so a peer's messages
    across all its sessions stay within ``limits.inbound_mib_per_peer``."""
    derived = plugin.traffic_envelope(dict(spec.params), dict(spec.roles), role)
    if derived is not None:  # and the final acknowledgement round: a confirmation from every other role
        others = len(spec.roles) - 1
        derived = replace(
            derived, session_bytes=derived.session_bytes + others * CONFIRMATION_BYTES, tags=derived.tags + others
        )
    return InboundBudget(limits.envelope(derived), spec.session_id, ledger, spec.roles)


def charge_journal(budget: InboundBudget, received: Iterable[tuple[str, str, int]]) -> int:
    """Charge what a session's journal already holds to its inbound budget.

    A restored or resumed session reloads its journal: those bytes count against the
    envelope as if they had just arrived, so no incarnation gets a fresh envelope (five
    abort/resume cycles used to let a peer park five envelopes' worth of junk).  Raises
    ResourceExhausted, naming the envelope, when the journal holds more than it allows.
    Returns the bytes charged."""
    total = 0
    for role, tag, nbytes in received:
        charged = budget.admit(role, tag, nbytes)
        budget.settle(role, tag, charged, stored=True)
        total += charged or 0
    return total


def _limit(cls: type[SmcdpError], rule: str, message: str) -> SmcdpError:
    exc = cls(f"{message} (rule {rule})")
    exc.rule = rule  # type: ignore[attr-defined]   # for the audit trail, like a policy refusal
    return exc


def check_resume(
    sessions: Iterable[_Live] | None,
    initiator: str,
    meta: Mapping[str, Any],
    limits: Limits,
    me: str,
    now: float | None = None,
    in_flight: Mapping[str, int] | None = None,
    proposers: int = 1,
) -> None:
    """Refuse to continue a session from its checkpoint beyond this party's limits.

    A resume is admission again: it takes a slot like a proposal (``pending_per_peer``,
    ``pending_total``, ``sessions_total``; ``sessions`` None skips them -- a restore at
    start-up), one session is restarted at most ``limits.max_restarts`` times for the failures of
    one party, and as many for those of one link (:func:`restart_culprit`: a participant's Abort
    UNAVAILABLE, repeated, or its silence towards a party it keeps probing, must not use up the
    restarts an honest party's crash needs), and its wall-clock limit is not renewed: the
    deadline of a session that began; for one that never began (its timeout starts at its first
    Begin) its creation + the longest approval wait + its timeout.  Past it, DEADLINE_EXCEEDED."""
    now = time.time() if now is None else now
    sid = meta.get("session_id")
    culprit = restart_culprit(meta, me)
    by = meta.get("restarts_by")
    # a checkpoint from before restarts were counted per party: its total, the stricter reading
    restarts = int(by.get(culprit, 0)) if isinstance(by, Mapping) else int(meta.get("restarts", 0))
    if restarts >= limits.max_restarts:
        raise _limit(
            ResourceExhausted,
            "limits.max_restarts",
            f"session {sid!r} was restarted {restarts} times at party {me!r} after failures of "
            f"{_whose(culprit)} (limits.max_restarts = {limits.max_restarts}); it is not continued again",
        )
    deadline = float(meta.get("deadline_epoch", 0.0))
    if "began_epoch" not in meta:
        timeout = float(meta.get("timeout_seconds", 0.0))
        deadline = float(meta.get("created", deadline - timeout)) + limits.approval_timeout_seconds + timeout
    if now >= deadline:
        raise _limit(
            DeadlineExceeded,
            "deadline",
            f"session {sid!r} passed its deadline at party {me!r} {now - deadline:.0f} s ago; continuing "
            "it does not renew the deadline",
        )
    if sessions is None:
        return
    mine_p, _mine_r, mine_h, pending, total = _counts(sessions, initiator, in_flight)
    if (
        mine_p >= fair_share(limits.pending_per_peer, limits.pending_total, proposers)
        or pending >= limits.pending_total
        or total >= limits.sessions_total
        or mine_h >= limits.held_per_peer
    ):
        raise _limit(
            ResourceExhausted,
            "limits.pending",
            f"party {me!r} cannot reopen session {sid!r} now: {mine_p} sessions of {initiator!r} and "
            f"{pending} in all wait for Begin, {total} are held, {mine_h} of them {initiator!r}'s "
            "(limits.pending_per_peer, pending_total, sessions_total, pending_per_peer + running_per_peer); "
            "try again shortly",
        )


#: how the restart bucket of a culprit a peer named, unconfirmed, reads: ``"bob (reported by alice)"``
_REPORTED = " (reported by "


def restart_culprit(meta: Mapping[str, Any], me: str) -> str:
    """Whose failure a restart of this checkpointed session answers -- the key of its ``restarts_by`` count:
    the origin of the failure it is resumed from, or this party itself when it is restored after its own
    process ended.  A failed link ("A→B", runtime.liveness.LinkLost) is charged to the link, never to either
    of its ends: its origin A is only where the failure was seen, and a hostile B that probes A but answers
    none of A's heartbeats would otherwise use up the restarts A's own crashes need (a link whose sending end
    is not the origin is nobody's observation here: the origin is charged).

    A culprit a peer named that this party did not confirm (the record's ``reported_culprit``, its origin the
    reporting peer: runtime.liveness.weigh_claim) is charged to neither: to the claim, ``"C (reported by P)"``.
    Not to C, whom P's word alone must not make pay (P aborting "C failed" again and again used up C's
    restarts); nor to P, who may only pass on what it was told (C telling P "P failed" and denying it to this
    party would use up P's)."""
    error = meta.get("error")
    if meta.get("state") == SessionState.FAILED and isinstance(error, Mapping):
        origin = error.get("origin")
        link = error.get("link")
        ends = parse_link(link) if isinstance(link, str) else None
        if ends is not None and ends[0] == origin:
            return str(link)
        claimed, by = error.get("reported_culprit"), error.get("reported_by") or origin
        if isinstance(claimed, str) and claimed and claimed != origin and isinstance(by, str):
            return f"{claimed}{_REPORTED}{by})"
        if isinstance(origin, str):
            return origin
    return me


def _whose(culprit: str) -> str:
    """A restart bucket as the refusal names it: a party, a link, or a culprit a peer named."""
    if culprit.endswith(")") and _REPORTED in culprit:
        claimed, by = culprit[:-1].split(_REPORTED, 1)
        return f"{claimed!r} as reported by {by!r} (not confirmed here)"
    return f"the link {culprit!r}" if "→" in culprit else repr(culprit)


def check_journal(budget: InboundBudget, received: Iterable[tuple[str, str, int]]) -> None:
    """:func:`charge_journal` as an admission check: the refusal names the rule (``envelope``)."""
    try:
        charge_journal(budget, received)
    except ResourceExhausted as exc:
        raise _limit(
            ResourceExhausted,
            "envelope",
            f"what the journal of session {budget.session_id!r} already holds is more than the "
            f"session may receive: {exc}",
        ) from None


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
