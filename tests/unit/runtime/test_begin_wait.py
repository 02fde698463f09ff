"""A prepared session's wait for Begin (runtime.begin), tested without a Session."""

import asyncio
import time

import pytest

from smcdp.errors import PreconditionFailed
from smcdp.net.limits import Limits
from smcdp.runtime.begin import BeginWait


def test_a_peers_proposal_expires_after_the_proposal_grace_naming_it():
    w = BeginWait("s1", "alice", own=False, limits=Limits(proposal_grace_seconds=0.2))
    t0 = time.monotonic()

    async def main():
        with pytest.raises(PreconditionFailed, match="proposal grace"):
            await w.wait(asyncio.Event(), lambda: time.monotonic() + 3600)

    asyncio.run(main())
    assert 0.15 < time.monotonic() - t0 < 5


def test_a_notice_names_the_deciding_operators_and_stretches_the_wait_to_the_approval_timeout():
    lim = Limits(proposal_grace_seconds=1.0, approval_timeout_seconds=3600.0)
    w = BeginWait("s1", "alice", own=False, limits=lim)
    deadline = time.monotonic() + 7200
    assert w.by(deadline) <= w.received + 1.0 + 1e-6
    w.notice("carol")
    w.notice("bob")
    assert w.waiting_for == "bob, carol"
    # a participant other than the initiator waits a notice grace past each notice, never past the timeout
    assert w.received + 1.0 < w.by(deadline) <= w.received + 3600.0
    # the initiator's own session keeps waiting up to its approval timeout from its receipt
    own = BeginWait("s2", "alice", own=True, limits=lim)
    assert own.notice("bob") == pytest.approx(own.received + 3600.0)


def test_a_begin_ends_the_wait_and_the_error_after_a_notice_names_the_operator():
    w = BeginWait("s1", "alice", own=False, limits=Limits(proposal_grace_seconds=1.0))

    async def begun():
        ev = asyncio.Event()
        asyncio.get_running_loop().call_later(0.05, ev.set)
        await w.wait(ev, lambda: time.monotonic() + 3600)

    asyncio.run(begun())
    w.approval_until = time.monotonic() + 0.1  # as a notice would, with a short approval timeout
    w.waiting_for = "carol"
    w.received -= 10  # the proposal grace is over

    async def main():
        with pytest.raises(PreconditionFailed, match="approval at carol"):
            await w.wait(asyncio.Event(), lambda: time.monotonic() + 3600)

    asyncio.run(main())
