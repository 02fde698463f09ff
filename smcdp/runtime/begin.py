"""How long a prepared session waits for its Begin: the proposal grace, or an operator's approval.

:class:`BeginWait` keeps what a :class:`~smcdp.runtime.session.Session` needs for that wait -- when the
proposal arrived, which participants' operators decide on it and until when -- and waits; the rules
for how long are :func:`smcdp.runtime.limits.begin_by` and :func:`~smcdp.runtime.limits.approval_wait_until`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from smcdp.errors import PreconditionFailed
from smcdp.net.limits import Limits
from smcdp.runtime.limits import WAITING_NOTICE_GRACE, approval_wait_until, begin_by


class BeginWait:
    """One prepared session's wait for Begin: since when, for whose approval, until when."""

    def __init__(self, session_id: str, initiator: str, own: bool, limits: Limits) -> None:
        self.session_id = session_id
        self.initiator = initiator
        #: this party started the session (its own start call begins or fails it)
        self.own = own
        self.limits = limits
        self.received = time.monotonic()
        #: the participants whose operators decide (comma-separated; None: nobody)
        self.waiting_for: str | None = None
        self._noticed: dict[str, float] = {}  # party -> when we last heard the session waits for it
        #: how long this party keeps the session prepared while they decide (monotonic; None: no approval)
        self.approval_until: float | None = None
        #: party -> when it last confirmed (a Heartbeat answering "pending") that the session waits for its operator
        self.confirmed: dict[str, float] = {}

    def notice(self, party: str) -> float:
        """``party``'s operator decides on the session: keep it prepared meanwhile, up to
        ``limits.approval_timeout_seconds`` from its receipt, not the proposal grace.  Returns
        that time (the initiator's own calls may take that long too)."""
        until = approval_wait_until(self.received, self.limits, self.own)
        # proposals made at once may wait for several operators: each is named while its notices keep coming
        now = time.monotonic()
        self._noticed[party] = now
        self.waiting_for = ", ".join(sorted(p for p, t in self._noticed.items() if now - t < WAITING_NOTICE_GRACE))
        self.approval_until = max(self.approval_until or until, until)
        return until

    def by(self, deadline: float) -> float:
        """When (``time.monotonic()``) the session stops waiting, its deadline being ``deadline``."""
        return begin_by(deadline, self.received, self.limits, self.own, self.approval_until)

    async def wait(self, begin: asyncio.Event, deadline: Callable[[], float]) -> None:
        """Until ``begin`` is set.  A peer's proposal that is not begun within the grace expires; the
        initiator's own session is begun or failed by its start call, which reports the precise cause
        (e.g. an unreachable party) at the deadline.  A notice that an operator decides extends the wait
        (``deadline()`` is read again after each)."""
        while not begin.is_set():
            try:
                await asyncio.wait_for(begin.wait(), max(0.0, self.by(deadline()) - time.monotonic()))
            except TimeoutError:
                if self.by(deadline()) > time.monotonic():
                    continue
                raise PreconditionFailed(
                    f"session {self.session_id} never began: the initiator "
                    f"{self.initiator!r} did not confirm it within "
                    + (
                        "the deadline"
                        if self.own
                        else f"the approval timeout (limits.approval_timeout_seconds) while waiting for "
                        f"approval at {self.waiting_for}"
                        if self.waiting_for
                        else "the proposal grace (limits.proposal_grace_seconds)"
                    )
                ) from None


__all__ = ["BeginWait"]
