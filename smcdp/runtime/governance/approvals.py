"""Proposals that wait for this party's operator (``[policy] approval = "operator"``).

Each proposal is one file, ``data_dir/proposals/<session id>.json`` (mode 0600, written
atomically), so a waiting proposal survives a restart of the party.  States::

    pending --approve--> approved --Propose again--> started
       |                    |
       +--reject------------+--> rejected
       +--timeout-----------+--> expired      (received + limits.approval_timeout_seconds)
       +--initiator aborts--+--> withdrawn

The initiator learns the outcome by repeating its (idempotent) ``Propose``: while the
proposal waits the answer is ``pending``; once approved the repeat is accepted and the
session is prepared, its timeout counting from Begin; a rejected or expired proposal is
refused (PERMISSION_DENIED naming the operator's reason; DEADLINE_EXCEEDED).
:func:`propose_until_decided` is the initiator's loop; meanwhile the initiator and every
participant that already accepted keep the session prepared for up to their own
``limits.approval_timeout_seconds`` (the initiator tells them who is deciding: ``Waiting``).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from smcdp._files import atomic_write_json, json_loads
from smcdp.errors import DeadlineExceeded
from smcdp.net.server import SessionSpec, validate_session_id
from smcdp.states import ProposalState

STATES = tuple(s.value for s in ProposalState)
#: the initiator's polling interval while a participant's operator decides
POLL_FIRST, POLL_MAX = 0.5, 5.0
MAX_REASON = 1000


@dataclass(frozen=True)
class Proposal:
    """A proposal as this party received it, and what became of it."""

    session_id: str
    protocol: str
    roles: Mapping[str, str]
    params: Mapping[str, Any]
    seed: int | None
    timeout_seconds: float
    initiator: str
    role: str
    summary: Mapping[str, Any] | None  # SessionSummary.as_dict(), what the operator is shown
    charges_budget: bool  # approving reserves summary["epsilon"] in [budget]
    received_at: float  # wall clock (time.time()), survives restarts
    expires_at: float
    state: str = ProposalState.PENDING.value
    reason: str = ""
    decided_at: float | None = None

    def same_request(self, initiator: str, spec: SessionSpec) -> bool:
        return (
            self.initiator == initiator
            and self.protocol == spec.protocol
            and dict(self.roles) == dict(spec.roles)
            and dict(self.params) == dict(spec.params)
            and self.seed == spec.seed
        )

    def spec(self) -> SessionSpec:
        """The session to prepare: its timeout counts from Begin, not from the proposal (the
        operator's decision may take hours, ``limits.approval_timeout_seconds``)."""
        return SessionSpec(
            self.session_id, self.protocol, dict(self.roles), dict(self.params), self.timeout_seconds, self.seed
        )

    def as_dict(self) -> dict:
        d = asdict(self)
        d["roles"], d["params"] = dict(self.roles), dict(self.params)
        return d


def check_reason(reason: Any) -> str:
    if not isinstance(reason, str) or not reason.strip() or len(reason) > MAX_REASON or not reason.isprintable():
        raise ValueError(f"a reason must be 1-{MAX_REASON} printable characters")
    return reason.strip()


def _check_fields(p: Proposal) -> None:
    """Every field of a proposal read back has the type it was written with (a damaged file must not load and then
    fail in ``expire`` or the console with a raw TypeError, nor a NaN deadline expire at once)."""

    def number(name: str, value: Any, *, optional: bool = False, positive: bool = False) -> None:
        if value is None and optional:
            return
        try:
            finite = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
        except OverflowError:  # an int beyond float range
            finite = False
        if not finite:
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        if positive and value <= 0:
            raise ValueError(f"{name} must be > 0, got {value!r}")

    for name in ("session_id", "protocol", "initiator", "role", "state", "reason"):
        if not isinstance(getattr(p, name), str):
            raise ValueError(f"{name} must be a string, got {getattr(p, name)!r}")
    if not isinstance(p.roles, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in p.roles.items()):
        raise ValueError(f"roles must be an object of party names, got {p.roles!r}")
    for name in ("params", "summary"):
        value = getattr(p, name)
        if not isinstance(value, dict) and not (name == "summary" and value is None):
            raise ValueError(f"{name} must be an object, got {value!r}")
    if p.seed is not None and (isinstance(p.seed, bool) or not isinstance(p.seed, int)):
        raise ValueError(f"seed must be an integer, got {p.seed!r}")
    if not isinstance(p.charges_budget, bool):
        raise ValueError(f"charges_budget must be true or false, got {p.charges_budget!r}")
    number("timeout_seconds", p.timeout_seconds, positive=True)
    number("received_at", p.received_at)
    number("expires_at", p.expires_at)
    number("decided_at", p.decided_at, optional=True)


@dataclass
class ProposalStore:
    """The proposals directory of one party (every call is synchronous file I/O)."""

    directory: Path
    _cache: dict[str, Proposal] = field(default_factory=dict)

    def load(self) -> list[Proposal]:
        """Read every proposal file (at start-up); unreadable files are skipped and returned as errors."""
        self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._cache.clear()
        for path in sorted(self.directory.glob("*.json")):
            try:
                raw = json_loads(path.read_text(encoding="utf-8"))
                if not isinstance(raw, dict):
                    raise ValueError("not a JSON object")
                p = Proposal(**raw)
                _check_fields(p)
                validate_session_id(p.session_id)
                if p.state not in STATES or path.stem != p.session_id:
                    raise ValueError("inconsistent")
            except (OSError, ValueError, TypeError) as exc:
                raise ValueError(f"proposal file {path} is unreadable: {exc}") from None
            self._cache[p.session_id] = p
        return list(self._cache.values())

    def get(self, session_id: str) -> Proposal | None:
        return self._cache.get(session_id)

    def all(self) -> list[Proposal]:
        return sorted(self._cache.values(), key=lambda p: p.received_at)

    def save(self, p: Proposal) -> Proposal:
        atomic_write_json(
            self.directory / f"{validate_session_id(p.session_id)}.json", p.as_dict(), 0o600, sort_keys=True
        )
        self._cache[p.session_id] = p
        return p

    def prune(self, decided_before: float) -> list[str]:
        """Delete proposals decided (started, rejected, expired, withdrawn) before ``decided_before``."""
        gone = []
        for p in list(self._cache.values()):
            if not ProposalState(p.state).open and (p.decided_at or p.received_at) < decided_before:
                (self.directory / f"{p.session_id}.json").unlink(missing_ok=True)
                del self._cache[p.session_id]
                gone.append(p.session_id)
        return sorted(gone)

    def decide(self, p: Proposal, state: str, reason: str = "") -> Proposal:
        assert state in STATES
        return self.save(replace(p, state=state, reason=reason, decided_at=time.time()))


async def propose_until_decided(
    send: Callable[[], Awaitable[Any]],
    party: str,
    session_id: str,
    deadline: Callable[[], float],
    on_pending: Callable[[], Awaitable[None]] | None = None,
    given_up: asyncio.Event | None = None,
) -> Any:
    """Repeat ``send()`` (one Propose, retried inside) while ``party`` answers *pending*.

    ``deadline()`` is a ``time.monotonic()`` value, read after every reply: ``on_pending()``
    (called on each pending reply) may extend it to the initiator's approval timeout.  Past
    it, a still-pending proposal fails with DEADLINE_EXCEEDED naming the party.  ``given_up``:
    set when the session failed elsewhere (proposals made at once, one refused): a pending
    proposal is not repeated any more, and None is returned.
    """
    delay = POLL_FIRST
    while True:
        reply = await send()
        if not getattr(reply, "pending", False):
            return reply
        if on_pending is not None:
            await on_pending()
        if given_up is not None and given_up.is_set():
            return None
        left = deadline() - time.monotonic()
        if left <= delay:
            raise DeadlineExceeded(
                f"party {party!r} did not approve session {session_id!r} within the initiator's approval "
                f"timeout (limits.approval_timeout_seconds) ({reply.detail or 'its operator was asked'})"
            )
        if given_up is None:
            await asyncio.sleep(delay)
        else:
            try:
                await asyncio.wait_for(given_up.wait(), delay)
                return None
            except TimeoutError:
                pass
        delay = min(delay * 1.5, POLL_MAX)


def remaining_seconds(p: Proposal) -> float:
    return p.expires_at - time.time()


def proposals_dir(data_dir: Path) -> Path:
    return Path(data_dir) / "proposals"


__all__ = [
    "STATES",
    "Proposal",
    "ProposalStore",
    "check_reason",
    "proposals_dir",
    "propose_until_decided",
    "remaining_seconds",
]
