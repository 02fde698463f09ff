"""A live session's phases at this party, with their legal moves (the states a party *reports* are
:mod:`smcdp.states`, re-exported here).

:class:`SessionState` is what a party reports (a record's and a status's ``state``; the operator's
client, the console and the peers' heartbeats read it).  :class:`Phase` is finer: what a live
session at this party is doing, which slot of the limits it holds (``smcdp.runtime.limits``), and
which phase may follow which (:data:`MOVES`, the one place the state machine is written).

::

    PREPARED ──Begin admitted──▶ BEGUN ──role starts──▶ RUNNING ──role ends──▶ SUCCEEDED
        │                          │                       │                      ▲
        └──────────── its end decided (abort, failure) ────┴──▶ ENDING ───────────┤
                                                                                  ▼
                                                                    record written: FAILED

A session restored after a restart in the middle of its role starts at BEGUN; every phase but the
two ends may go to ENDING (an abort that arrives after the role finished still lets it succeed), and a
failure recorded before the session's thread ran may go straight to FAILED.  The server's loop and the
session's thread both move a session, so a move is atomic (:meth:`Lifecycle.advance`).
"""

from __future__ import annotations

import threading
from enum import Enum

from smcdp.errors import SmcdpError
from smcdp.states import ProposalState, SessionState


class Slot(str, Enum):
    """Which of the party's session slots a live session holds (``smcdp.runtime.limits``)."""

    PENDING = "pending"
    RUNNING = "running"


class Phase(Enum):
    """What a live session at this party is doing; ``reported`` is the state the party reports for it."""

    PREPARED = "prepared"  #: admitted, waiting for Begin
    BEGUN = "begun"  #: Begin admitted; the session's thread has not started the role yet
    RUNNING = "running"  #: the role runs in this process
    ENDING = "ending"  #: its end is decided (an Abort, a failure): it winds down
    SUCCEEDED = "succeeded"
    FAILED = "failed"

    @property
    def slot(self) -> Slot | None:
        """The slot it holds: none once its end is decided (it holds memory, not a slot, while it winds
        down: a peer that aborts a proposal may propose the next one at once)."""
        if self is Phase.PREPARED:
            return Slot.PENDING
        if self in (Phase.BEGUN, Phase.RUNNING):
            return Slot.RUNNING
        return None

    @property
    def ended(self) -> bool:
        return self in (Phase.SUCCEEDED, Phase.FAILED)


#: the legal moves: phase -> the phases that may follow it
MOVES: dict[Phase, frozenset[Phase]] = {
    Phase.PREPARED: frozenset({Phase.BEGUN, Phase.ENDING, Phase.FAILED}),
    Phase.BEGUN: frozenset({Phase.RUNNING, Phase.ENDING, Phase.FAILED}),
    Phase.RUNNING: frozenset({Phase.SUCCEEDED, Phase.ENDING, Phase.FAILED}),
    Phase.ENDING: frozenset({Phase.SUCCEEDED, Phase.FAILED}),
    Phase.SUCCEEDED: frozenset(),
    Phase.FAILED: frozenset(),
}


class IllegalMove(SmcdpError):
    """A session was asked to move between phases the state machine does not connect (a bug here)."""


class Lifecycle:
    """A live session's phase, moved only along :data:`MOVES`.

    ``began_before``: the role started in an earlier incarnation of this party (a session restored in
    the middle of its role); it starts at BEGUN and counts as having run here.
    """

    def __init__(self, began_before: bool = False) -> None:
        self.phase = Phase.BEGUN if began_before else Phase.PREPARED
        self._began_before = began_before
        self._ran = False
        self._lock = threading.Lock()

    def advance(self, to: Phase) -> bool:
        """Move to ``to``; False (and no move) if the session's end was decided meanwhile and ``to`` does
        not follow from there.  Any other illegal move is a bug: :class:`IllegalMove`."""
        with self._lock:
            if to is self.phase:
                return True
            if to not in MOVES[self.phase]:
                if self.phase is Phase.ENDING or self.phase.ended:
                    return False
                raise IllegalMove(f"a session cannot move from {self.phase.value} to {to.value}")
            self.phase = to
            self._ran |= to is Phase.RUNNING
            return True

    def end_decided(self) -> None:
        """An abort or failure decided its end (no-op once it ended or was already ending)."""
        self.advance(Phase.ENDING)

    @property
    def has_run(self) -> bool:
        """Did the role ever start here (or in an earlier incarnation)?  A session that ends without it
        computed nothing from this party's data (``max_exact_sessions``)."""
        return self._ran or self._began_before

    @property
    def awaiting_begin(self) -> bool:
        """Still waiting for the initiator's Begin (no Begin admitted yet)."""
        return self.phase is Phase.PREPARED

    @property
    def reported(self) -> SessionState:
        """The state the party reports: a session is "running" from the moment its role starts, and keeps
        reporting what it was while its end is decided and it winds down."""
        if self.phase is Phase.SUCCEEDED:
            return SessionState.SUCCEEDED
        if self.phase is Phase.FAILED:
            return SessionState.FAILED
        return SessionState.RUNNING if self._ran else SessionState.PREPARED


__all__ = ["MOVES", "IllegalMove", "Lifecycle", "Phase", "ProposalState", "SessionState", "Slot"]
