"""Errors shared by every layer.

Each error carries the gRPC status code name that the transport reports when
the error crosses a process boundary, so that a peer that sends a bad message
sees INVALID_ARGUMENT, a peer outside a session sees PERMISSION_DENIED, and so
on.  The module imports nothing from grpc so that ``smcdp.dp`` and
``smcdp.crypto`` stay transport-free.
"""

from __future__ import annotations

import contextlib
import errno as _errno
import os
from collections.abc import Iterator


class SmcdpError(Exception):
    """Base class.  ``code`` is the name of a grpc.StatusCode member; ``origin``, where known, the party
    where the failure started (set by the subclasses that take it, or by the transport on the way).

    A failure this party learned from a peer -- its Abort, its answer to a heartbeat, its refusal -- is that
    peer's word: ``reported_by`` is the peer (authenticated by its certificate) and ``origin`` that peer too,
    unless it named itself.  A culprit it named other than itself is only its claim, ``reported_culprit``,
    until this party confirms it (:func:`smcdp.runtime.liveness.weigh_claim`)."""

    code = "INTERNAL"
    origin: str | None = None
    #: the peer whose word this failure is (None: seen or raised here)
    reported_by: str | None = None
    #: the party that peer named as where the failure started, if not itself: its claim, not the origin
    reported_culprit: str | None = None


class InvalidMessage(SmcdpError):
    """A peer's message, a file or an argument failed validation."""

    code = "INVALID_ARGUMENT"


class InputRejected(InvalidMessage):
    """This party's own input breaks a rule of the session.

    ``str(exc)`` (the local log and record) has the detail; ``public_message``
    -- what the other participants are told when the session is aborted --
    names the rule only, never a path, a count or a value of the data.
    """

    def __init__(self, rule: str, detail: str = "") -> None:
        super().__init__(f"{rule} ({detail})" if detail else rule)
        self.public_message = rule
        self.detail = detail

    def __reduce__(self):
        # rebuilt from (rule, detail), so a copy that crossed a process boundary (a Dask worker's
        # kernel) still tells peers the rule only
        return type(self), (self.public_message, self.detail)


def public_message(exc: BaseException) -> str:
    """What may be told to other parties about ``exc`` (``public_message`` if it has one)."""
    return getattr(exc, "public_message", None) or str(exc) or type(exc).__name__


class PreconditionFailed(SmcdpError):
    """The request is well formed but the state does not allow it."""

    code = "FAILED_PRECONDITION"


class AlreadySucceeded(PreconditionFailed):
    """A message for a session that already succeeded at its receiver: nothing is missing there (the
    receiver vouches that every participant held its output), so its sender takes it as delivered."""


class PermissionDenied(SmcdpError):
    """The authenticated peer holds no role that allows this."""

    code = "PERMISSION_DENIED"


class Unauthenticated(SmcdpError):
    """No verified identity for the peer."""

    code = "UNAUTHENTICATED"


class DeadlineExceeded(SmcdpError):
    """A call or a session ran past its deadline."""

    code = "DEADLINE_EXCEEDED"


class Unavailable(SmcdpError):
    """A peer could not be reached."""

    code = "UNAVAILABLE"


class NoSpace(Unavailable):
    """A local resource of this party ran out (disk full, quota, file descriptors, memory).

    Reported as UNAVAILABLE: like a party that is down, the condition is transient, so the
    session fails resumably everywhere and continues with ``smcdp session resume`` once the
    resource is back (docs/fault-tolerance.md).  ``origin`` is the party that ran out.
    """

    def __init__(self, message: str, origin: str | None = None) -> None:
        super().__init__(message)
        self.origin = origin


class NotAdmittedNow(Unavailable):
    """A session continued from its checkpoint (a restart or a resume) that this party's policy does not
    admit today (a rule changed since it was proposed).

    Reported as UNAVAILABLE: like a party that is down, it is this party's present state, not the
    session's, so the session fails resumably everywhere, keeps its checkpoints, and continues with
    ``smcdp session resume`` once the policy admits it again.  ``origin`` is the refusing party.
    """

    def __init__(self, message: str, origin: str | None = None) -> None:
        super().__init__(message)
        self.origin = origin


class DataLoss(SmcdpError):
    """A party's own durable state (a checkpoint, a journal record) is damaged or missing.

    ``origin`` is the party whose state failed.  DATA_LOSS is resumable where the
    peers still hold what is needed (docs/fault-tolerance.md).
    """

    code = "DATA_LOSS"

    def __init__(self, message: str, origin: str | None = None) -> None:
        super().__init__(message)
        self.origin = origin


#: errno values of a local resource running out (NoSpace), with the words an operator reads
RESOURCE_ERRNOS = {
    _errno.ENOSPC: "no space left",
    _errno.EDQUOT: "no space left (disk quota exceeded)",
    _errno.ENFILE: "no file descriptors left (system table full)",
    _errno.EMFILE: "no file descriptors left (process limit)",
    _errno.ENOMEM: "no memory left",
    _errno.EIO: "an input/output error on its disk",
}


def local_failure(exc: BaseException) -> bool:
    """An error of this party's machine (descriptors, memory, disk), not of its data: a reader of input files
    passes it on as it is, so that the session fails resumably naming it (:func:`resource_failure`), never as
    a rejected input nobody can repair by resuming."""
    return isinstance(exc, MemoryError) or (isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS)


def resource_failure(exc: BaseException, party: str, what: str) -> NoSpace | None:
    """``exc`` as :class:`NoSpace` ("no space left at PARTY: WHAT: ...") if it is a local resource
    running out (an OSError with one of ``RESOURCE_ERRNOS``, or MemoryError), else None."""
    if isinstance(exc, NoSpace):
        return exc
    if isinstance(exc, MemoryError):
        words = RESOURCE_ERRNOS[_errno.ENOMEM]
    elif isinstance(exc, OSError) and exc.errno in RESOURCE_ERRNOS:
        words = RESOURCE_ERRNOS[exc.errno]
    else:
        return None
    return NoSpace(f"{words} at {party}: {what}: {exc}", party)


class ResourceExhausted(SmcdpError):
    """A limit of this party (sessions, bytes, messages) would be exceeded."""

    code = "RESOURCE_EXHAUSTED"


class SessionAborted(SmcdpError):
    """Another participant ended the session with an error."""

    def __init__(
        self,
        message: str,
        code: str = "ABORTED",
        origin: str | None = None,
        link: str | None = None,
        *,
        reported_by: str | None = None,
        reported_culprit: str | None = None,
    ):
        super().__init__(message)
        self.code = code
        self.origin = origin
        #: "A→B" when the session ended because A's link to B carried nothing (runtime.liveness.LinkLost)
        self.link = link
        self.reported_by = reported_by
        self.reported_culprit = reported_culprit if reported_culprit != origin else None


def reported(message: str, code: str, peer: str, culprit: str | None = None, link: str | None = None) -> SessionAborted:
    """A failure peer ``peer`` reported (an Abort, a heartbeat's answer, a refusal): its origin is ``peer``, the
    party that said so; a ``culprit`` it named other than itself is kept as its claim (``reported_culprit``),
    never as the origin -- nor as this party's own failure if it names this party."""
    return SessionAborted(message, code, peer, link, reported_by=peer, reported_culprit=culprit or None)


class InsecureParameters(SmcdpError):
    """A caller asked for parameters below the security floor without opting in."""

    code = "INVALID_ARGUMENT"


class CryptoOverflow(SmcdpError, OverflowError):
    """A homomorphic result would leave the representable range (never wrap)."""

    code = "OUT_OF_RANGE"


__all__ = [
    "CryptoOverflow",
    "DataLoss",
    "DeadlineExceeded",
    "InputRejected",
    "InsecureParameters",
    "InvalidMessage",
    "NoSpace",
    "PermissionDenied",
    "PreconditionFailed",
    "ResourceExhausted",
    "SessionAborted",
    "SmcdpError",
    "Unauthenticated",
    "Unavailable",
    "public_message",
    "reported",
    "resource_failure",
]


@contextlib.contextmanager
def naming_file(path: str | os.PathLike[str]) -> Iterator[None]:
    """An :class:`InvalidMessage` raised while a file's content is parsed names the file (a key file's parser
    knows the fields, not where they came from); OverflowError from a number out of range is one too."""
    try:
        yield
    except InvalidMessage as exc:
        if str(path) not in str(exc):
            exc.args = (f"{path}: {exc}", *exc.args[1:])  # the error's class (InsecureParameters, ...) kept
        raise
    except OverflowError as exc:
        raise InvalidMessage(f"{path}: a number is out of range ({exc})") from None
