"""The states a party reports: of a session (a record's, a status's and a heartbeat's ``state``) and of a
proposal waiting for its operator.  Plain strings on the wire and in files; these enums everywhere in the
code (a ``str`` enum compares equal to its string).  What a live session is doing inside a party, and
which state follows which, is :mod:`smcdp.runtime.states`.
"""

from __future__ import annotations

from enum import Enum


class SessionState(str, Enum):
    """Where a session stands at one party (its record's ``state``)."""

    PENDING = "pending"  #: waiting for this party's operator to approve it (status only)
    PREPARED = "prepared"  #: admitted here, waiting for every participant to begin (``waiting_for``:
    #: the participant whose operator decides, if any)
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"  #: the record's ``error`` says why and who (``resumable``: may continue)
    UNKNOWN = "unknown"  #: the party cannot tell (e.g. an unreadable record), or a state this client does not know

    @classmethod
    def _missing_(cls, value: object) -> SessionState:
        return cls.UNKNOWN

    @property
    def ended(self) -> bool:
        """Whether the state is final (succeeded or failed)."""
        return self in (SessionState.SUCCEEDED, SessionState.FAILED)

    @property
    def live(self) -> bool:
        """A checkpoint in this state is continued by a restarted party (a failed one waits for a resume)."""
        return self in (SessionState.PREPARED, SessionState.RUNNING)


class ProposalState(str, Enum):
    """Where a proposal to this party stands (docs/governance.md)."""

    PENDING = "pending"  #: waiting for this operator (approve() or reject())
    APPROVED = "approved"  #: approved (privacy cost reserved), not started yet
    STARTED = "started"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"

    @property
    def open(self) -> bool:
        """Still to be decided or started (it holds its reservation)."""
        return self in (ProposalState.PENDING, ProposalState.APPROVED)


#: the console's state for a proposal that waits for this party's operator (beside the session states)
PENDING_APPROVAL = "pending approval"

__all__ = ["PENDING_APPROVAL", "ProposalState", "SessionState"]
