"""The operator's Python client: one's own party, with one's own certificate, as typed objects.

::

    from smcdp.client import PartyClient, SessionState

    trent = PartyClient.from_config("trent.toml")
    res = trent.start_session("power-iteration", {"trent": "trent", "data1": "alice", "data2": "bob"},
                              {"iterations": 20})
    assert res.state is SessionState.SUCCEEDED
    print(res.result, res.seconds)

    alice = PartyClient.from_config("alice.toml")
    for p in alice.sessions(pending_only=True):          # proposals waiting for this operator
        alice.approve(p.session_id) if p.protocol == "power-iteration" else alice.reject(p.session_id, "no")

Every call is an operator call on the party's own ``Control`` service (the party
accepts it only from the holder of the party's own certificate, read from the
configuration's ``[tls]``).  Answers are frozen dataclasses (:class:`SessionResult`,
:class:`SessionStatus`, :class:`SessionInfo`) with states as enums
(:class:`SessionState`, :class:`ProposalState`); ``as_dict()`` gives the party's
JSON exactly as sent.  Failures raise the typed exceptions of
:mod:`smcdp.errors` (``Unavailable``, ``PermissionDenied``, ``ResourceExhausted``,
``NotFound``, ``SessionAborted``, …) naming the party and what failed.

The ``smcdp session …`` commands are a thin layer over this class; the gRPC
calls themselves live in :mod:`smcdp.runtime.client`.
"""

from __future__ import annotations

import copy
import datetime as _dt
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from smcdp.errors import DeadlineExceeded, InvalidMessage, SmcdpError
from smcdp.net.grpc_channel import NotFound, error_for_code  # noqa: F401 - NotFound: re-exported for callers
from smcdp.net.server import new_session_id
from smcdp.runtime import client as _rpc
from smcdp.runtime.config import PartyConfig, load_config
from smcdp.states import ProposalState, SessionState


def _frozen_map(m: Mapping | None) -> Mapping:
    return MappingProxyType(dict(m or {}))


def _time(v: Any) -> _dt.datetime | None:
    if not v:
        return None
    try:
        return _dt.datetime.fromisoformat(str(v))
    except ValueError:
        raise InvalidMessage(f"the party sent an unreadable timestamp {v!r}") from None


def _amount(v: Any) -> float | None:
    if v is None or v == "-":
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        raise InvalidMessage(f"the party sent an unreadable privacy amount {v!r}") from None


def _int_or_none(v: Any) -> int | None:
    return None if v is None else int(v)


def _str_or_none(v: Any) -> str | None:
    return None if v is None else str(v)


@dataclass(frozen=True)
class SessionError:
    """Why a session failed: the status code, the message, and the party that caused it."""

    code: str
    message: str
    origin: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> SessionError | None:
        """The error of a session record (``None`` for a record without one)."""
        if not d:
            return None
        return cls(str(d.get("code") or "INTERNAL"), str(d.get("message") or ""), d.get("origin"))

    def exception(self, session_id: str) -> SmcdpError:
        """The typed exception for this failure (what ``start_session`` raises)."""
        return error_for_code(self.code, f"session {session_id} failed: {self.message}", self.origin)


@dataclass(frozen=True)
class SessionResult:
    """A session's durable record at this party (``result(id)``, ``start_session(...)``)."""

    session_id: str
    protocol: str
    party: str
    role: str | None
    roles: Mapping[str, str]
    initiator: str | None
    state: SessionState
    result: Any
    error: SessionError | None
    params: Mapping[str, Any]
    seed: int | None
    timeout_seconds: float | None
    stats: Mapping[str, Any] | None
    started_at: _dt.datetime | None
    finished_at: _dt.datetime | None
    seconds: float | None
    restarts: int
    resumable: bool
    record: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_record(cls, r: Mapping[str, Any]) -> SessionResult:
        """Parse a session record as the party sends it; a record without a ``session_id`` raises :class:`~smcdp.errors.InvalidMessage`."""
        try:
            return cls(
                session_id=str(r["session_id"]),
                protocol=str(r.get("protocol")),
                party=str(r.get("party")),
                role=r.get("role"),
                roles=_frozen_map(r.get("roles")),
                initiator=r.get("initiator"),
                state=SessionState(r.get("state")),
                result=r.get("result"),
                error=SessionError.from_dict(r.get("error")),
                params=_frozen_map(r.get("params")),
                seed=r.get("seed"),
                timeout_seconds=r.get("timeout_seconds"),
                stats=None if r.get("stats") is None else _frozen_map(r["stats"]),
                started_at=_time(r.get("started_at")),
                finished_at=_time(r.get("finished_at")),
                seconds=r.get("seconds"),
                restarts=int(r.get("restarts") or 0),
                resumable=bool(r.get("resumable")),
                record=MappingProxyType(copy.deepcopy(dict(r))),
            )
        except KeyError as exc:
            raise InvalidMessage(f"the party's session record lacks {exc}") from None

    @property
    def succeeded(self) -> bool:
        """Whether the session succeeded at this party."""
        return self.state is SessionState.SUCCEEDED

    def raise_for_state(self) -> SessionResult:
        """Raise the failure as a typed exception if the session failed; else return self."""
        if self.state is SessionState.FAILED:
            raise (self.error or SessionError("INTERNAL", "no reason recorded")).exception(self.session_id)
        return self

    def as_dict(self) -> dict:
        """The record as the party sent it (a copy)."""
        return copy.deepcopy(dict(self.record))


@dataclass(frozen=True)
class PeerLiveness:
    """When another participant last answered this party in a session."""

    party: str
    role: str | None
    last_answer_seconds_ago: float | None
    incarnation: str | None  #: which run of its process answered (changes when it restarts)


@dataclass(frozen=True)
class SessionStatus:
    """How a session stands now at this party (``status(id)``): round, step, restarts, peers."""

    session_id: str
    protocol: str | None
    party: str | None
    role: str | None
    state: SessionState
    round: int | None
    step: str
    restarts: int
    incarnation: str | None
    seconds_left: float | None
    peers: Mapping[str, PeerLiveness]
    error: SessionError | None
    resumable: bool
    raw: Mapping[str, Any] = field(repr=False, compare=False)
    #: the participant whose operator is deciding on the session ("waiting for approval at X"), or None
    waiting_for: str | None = None

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionStatus:
        """Parse a status answer as the party sends it."""
        peers = {
            p: PeerLiveness(p, v.get("role"), v.get("last_answer_seconds_ago"), _str_or_none(v.get("incarnation")))
            for p, v in (d.get("peers") or {}).items()
        }
        return cls(
            session_id=str(d.get("session_id")),
            protocol=d.get("protocol"),
            party=d.get("party"),
            role=d.get("role"),
            state=SessionState(d.get("state")),
            round=_int_or_none(d.get("round")),
            step=str(d.get("step") or ""),
            restarts=int(d.get("restarts") or 0),
            incarnation=_str_or_none(d.get("incarnation")),
            seconds_left=d.get("seconds_left"),
            peers=MappingProxyType(peers),
            error=SessionError.from_dict(d.get("error")),
            resumable=bool(d.get("resumable")),
            raw=MappingProxyType(copy.deepcopy(dict(d))),
            waiting_for=_str_or_none(d.get("waiting_for")),
        )

    def as_dict(self) -> dict:
        """The party's JSON for this status, exactly as sent (a copy)."""
        return copy.deepcopy(dict(self.raw))


@dataclass(frozen=True)
class SessionInfo:
    """A proposal to this party or a session at it, as the operator sees it (``sessions()``, ``show()``,
    ``approve()``, ``reject()``).  ``kind`` is ``"proposal"`` (``state`` a :class:`ProposalState`) or
    ``"session"`` (a :class:`SessionState`).  ``epsilon``/``delta``: what the session charges to this
    party's budget (None: nothing)."""

    session_id: str
    kind: str
    state: ProposalState | SessionState
    protocol: str | None
    initiator: str | None
    role: str | None
    roles: Mapping[str, str]
    params: Mapping[str, Any]
    seeded: bool
    epsilon: float | None
    delta: float | None
    budget_state: str | None
    summary: Mapping[str, Any] | None
    received_at: _dt.datetime | None
    expires_at: _dt.datetime | None
    decided_at: _dt.datetime | None
    reason: str | None
    started_at: _dt.datetime | None
    finished_at: _dt.datetime | None
    error: SessionError | None
    raw: Mapping[str, Any] = field(repr=False, compare=False)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> SessionInfo:
        """Parse one entry of the party's session list (a session or a proposal)."""
        kind = str(d.get("kind") or "session")
        if kind == "proposal":
            try:
                state: ProposalState | SessionState = ProposalState(d.get("state"))
            except ValueError:
                raise InvalidMessage(f"the party sent an unknown proposal state {d.get('state')!r}") from None
        else:
            state = SessionState(d.get("state"))
        return cls(
            session_id=str(d.get("session_id")),
            kind=kind,
            state=state,
            protocol=d.get("protocol"),
            initiator=d.get("initiator"),
            role=d.get("role"),
            roles=_frozen_map(d.get("roles")),
            params=_frozen_map(d.get("params")),
            seeded=bool(d.get("seeded")),
            epsilon=_amount(d.get("epsilon")),
            delta=_amount(d.get("delta")),
            budget_state=d.get("budget_state"),
            summary=None if not d.get("summary") else _frozen_map(d["summary"]),
            received_at=_time(d.get("received_at")),
            expires_at=_time(d.get("expires_at")),
            decided_at=_time(d.get("decided_at")),
            reason=d.get("reason"),
            started_at=_time(d.get("started_at")),
            finished_at=_time(d.get("finished_at")),
            error=SessionError.from_dict(d.get("error")) if isinstance(d.get("error"), Mapping) else None,
            raw=MappingProxyType(copy.deepcopy(dict(d))),
        )

    @property
    def pending(self) -> bool:
        """Whether this is a proposal waiting for this party's operator."""
        return self.state is ProposalState.PENDING

    def as_dict(self) -> dict:
        """The party's JSON for this entry, exactly as sent (a copy)."""
        return copy.deepcopy(dict(self.raw))


StatusCallback = Callable[[SessionStatus], None]


class SessionHandle:
    """A session this client started with ``wait=False``: it runs while the client waits on it.

    Keep the handle (and call :meth:`wait`) until the session ends: dropping the
    client's call before every participant has agreed to the session cancels it.
    """

    def __init__(self, client: PartyClient, call: _rpc.StartCall) -> None:
        self._client = client
        self._call = call
        self.session_id = call.session_id

    def __repr__(self) -> str:
        return f"SessionHandle({self.session_id!r}, done={self.done()})"

    def done(self) -> bool:
        """Whether the session has ended (the start call returned)."""
        return self._call.done()

    def status(self) -> SessionStatus:
        """The session's current :class:`SessionStatus` at this party."""
        return self._client.status(self.session_id)

    def wait(
        self, timeout: float | None = None, *, on_status: StatusCallback | None = None, poll: float = 1.0
    ) -> SessionResult:
        """Wait for the session's record; raise its failure as a typed exception.

        The party is probed every ``poll`` seconds (``on_status`` sees its
        :class:`SessionStatus` each time: a progress display); if it does not answer
        for ``peer_grace_seconds`` this raises Unavailable naming it.  ``timeout``
        raises DeadlineExceeded (the session runs on) if it has not ended by then.
        """
        cb = None if on_status is None else (lambda d: on_status(SessionStatus.from_dict(d)))
        return SessionResult.from_record(self._call.wait(timeout, on_status=cb, poll=poll))

    @property
    def bound(self) -> str:
        """What this wait is bounded by, for a user who watches it."""
        cfg = self._client.config
        return (
            f"waits at most {self._call.seconds_left:.0f} s (the session's deadline); gives up if party "
            f"{cfg.name!r} does not answer for {cfg.timeouts.peer_grace_seconds:g} s (peer_grace_seconds)"
        )


class PartyClient:
    """Operator calls on one party (this process holds the party's own certificate)."""

    def __init__(self, config: PartyConfig) -> None:
        if not isinstance(config, PartyConfig):
            raise InvalidMessage("PartyClient needs a PartyConfig; use PartyClient.from_config(path)")
        self.config = config

    @classmethod
    def from_config(cls, path: str | os.PathLike | PartyConfig) -> PartyClient:
        """The client of the party configured in ``path`` (its TOML: address, [tls] certificate and key)."""
        return cls(path if isinstance(path, PartyConfig) else load_config(path))

    @property
    def name(self) -> str:
        """The party's name, from its configuration."""
        return self.config.name

    def __repr__(self) -> str:
        return f"PartyClient({self.name!r} at {self.config.address_of(self.name)})"

    # ------------------------------------------------------------------ sessions
    def start_session(
        self,
        protocol: str,
        roles: Mapping[str, str],
        params: Mapping[str, Any] | None = None,
        *,
        wait: bool = True,
        session_id: str | None = None,
        timeout: float | None = None,
        seed: int | None = None,
        on_status: StatusCallback | None = None,
        poll: float = 1.0,
    ) -> SessionResult | SessionHandle:
        """Run ``protocol`` with this party as initiator and ``roles`` (role -> party name).

        ``wait=True`` (default): return the :class:`SessionResult` when it ends, or raise
        its failure as a typed exception (the record stays available through
        :meth:`result`); ``on_status`` sees its :class:`SessionStatus` every ``poll``
        seconds meanwhile.  ``wait=False``: return a :class:`SessionHandle` at once.
        Other participants may hold the session for their operator's approval.
        ``timeout``: the session's deadline (default: the party's); ``seed``: experiments only.
        """
        if not isinstance(roles, Mapping) or not roles:
            raise InvalidMessage("roles must be a non-empty mapping of role -> party")
        sid = session_id or new_session_id(protocol)
        call = _rpc.begin_session(self.config, protocol, roles, params, session_id=sid, timeout=timeout, seed=seed)
        handle = SessionHandle(self, call)
        if not wait:
            return handle
        return handle.wait(on_status=on_status, poll=poll)

    def result(self, session_id: str, timeout: float = 30.0) -> SessionResult:
        """The record of ``session_id`` at this party (running, succeeded or failed; NotFound if unknown)."""
        return SessionResult.from_record(_rpc.get_result(self.config, session_id, timeout=timeout))

    def status(self, session_id: str, timeout: float = 10.0) -> SessionStatus:
        """How ``session_id`` stands now: state, round, step, restarts, peers' liveness."""
        return SessionStatus.from_dict(_rpc.get_status(self.config, session_id, timeout=timeout))

    def wait(self, session_id: str, timeout: float | None = None) -> SessionResult:
        """Follow a session (started anywhere, e.g. by a peer) until it ends here; raise its failure."""
        t = timeout if timeout is not None else self.config.timeouts.session_seconds
        return SessionResult.from_record(_rpc.follow_session(self.config, session_id, t))

    def resume(
        self,
        session_id: str,
        timeout: float | None = None,
        *,
        wait: bool = True,
        on_status: StatusCallback | None = None,
        poll: float = 1.0,
    ) -> SessionResult | SessionHandle:
        """Continue a session this party initiated that failed resumably; its record when it ends
        (``wait=False``: a :class:`SessionHandle` at once)."""
        handle = SessionHandle(self, _rpc.begin_resume(self.config, session_id, timeout))
        if not wait:
            return handle
        return handle.wait(on_status=on_status, poll=poll)

    # ---------------------------------------------------------------- governance
    def sessions(self, pending_only: bool = False) -> list[SessionInfo]:
        """Proposals (pending and decided) and recent sessions at this party."""
        return [SessionInfo.from_dict(i) for i in _rpc.list_sessions(self.config, pending_only=pending_only)]

    def show(self, session_id: str) -> SessionInfo:
        """What a proposal asks of this party (protocol, roles, parameters, initiator, epsilon) and its state."""
        return SessionInfo.from_dict(_rpc.show_session(self.config, session_id))

    def approve(self, session_id: str) -> SessionInfo:
        """Approve a pending proposal; its privacy cost is reserved now (ResourceExhausted if it does not fit)."""
        return SessionInfo.from_dict(_rpc.approve_session(self.config, session_id))

    def reject(self, session_id: str, reason: str) -> SessionInfo:
        """Reject a pending (or approved, not started) proposal; the initiator is told ``reason``."""
        return SessionInfo.from_dict(_rpc.reject_session(self.config, session_id, reason))

    def wait_for_proposal(self, session_id: str | None = None, timeout: float = 30.0, poll: float = 0.2) -> SessionInfo:
        """Block until a proposal (``session_id``, or any) is pending here; DeadlineExceeded after ``timeout``."""
        end = time.monotonic() + timeout
        while True:
            for info in self.sessions(pending_only=True):
                if session_id is None or info.session_id == session_id:
                    return info
            if time.monotonic() >= end:
                what = f"proposal {session_id!r}" if session_id else "a proposal"
                raise DeadlineExceeded(f"{what} did not reach party {self.name!r} within {timeout:g} s")
            time.sleep(poll)

    # -------------------------------------------------------------------- health
    def health(self, peer: str | None = None, timeout: float = 5.0) -> str:
        """grpc.health.v1 status of this party (or of ``peer``), e.g. ``"SERVING"``."""
        return _rpc.check_health(self.config, peer, timeout=timeout)

    def wait_healthy(self, peer: str | None = None, timeout: float = 30.0) -> None:
        """Block until the party (or ``peer``) answers SERVING; Unavailable after ``timeout``."""
        _rpc.wait_healthy(self.config, peer, timeout=timeout)


__all__ = [
    "NotFound",
    "PartyClient",
    "PeerLiveness",
    "ProposalState",
    "SessionError",
    "SessionHandle",
    "SessionInfo",
    "SessionResult",
    "SessionState",
    "SessionStatus",
]
