"""A silent participant that still probes this party is alive: its link from this party failed
(liveness.LinkLost, "the link A→B"), not the participant -- and without its probes it is a dead peer."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc

from smcdp.runtime.liveness import LinkLost, PeerLost, Watcher

GRACE = 1.5
SESSION = "trent.power-iteration-20261202T000000-00000000"
ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}


class _Deadline(grpc.RpcError):
    def code(self):
        return grpc.StatusCode.DEADLINE_EXCEEDED

    def details(self):
        return "Deadline Exceeded"


class _Channel:
    """Bob answers every heartbeat; alice none, and none of her messages arrive."""

    last_heard: dict[str, float] = {}

    async def heartbeat(self, party, incarnation, timeout):
        if party == "alice":
            await asyncio.sleep(timeout)
            raise _Deadline()
        return SimpleNamespace(state="running", incarnation="b1", code="", culprit="")


def _lost(alice_probes: bool) -> list[tuple[BaseException, str | None]]:
    lost: list[tuple[BaseException, str | None]] = []
    w = Watcher("trent", "t1", SESSION, ROLES, GRACE, lambda exc, culprit: lost.append((exc, culprit)))

    async def main():
        task = asyncio.ensure_future(w.watch(_Channel()))
        end = time.monotonic() + 4 * GRACE
        while not task.done() and time.monotonic() < end:
            if alice_probes:
                w.probed_by("alice")  # her heartbeats reach trent (what the server's Heartbeat handler calls)
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return lost


def test_a_silent_peer_that_probes_us_is_a_failed_link():
    [(exc, culprit)] = _lost(alice_probes=True)
    assert isinstance(exc, LinkLost) and exc.link == "trent→alice"
    assert culprit == "trent" and exc.origin == "trent"  # seen here; alice is not blamed
    assert "the link trent→alice" in str(exc) and "is alive" in str(exc)


def test_a_silent_peer_that_does_not_probe_us_is_lost():
    [(exc, culprit)] = _lost(alice_probes=False)
    assert isinstance(exc, PeerLost) and not isinstance(exc, LinkLost)
    assert culprit == "alice" and "has not answered" in str(exc)


def test_probes_from_a_party_outside_the_session_are_ignored():
    w = Watcher("trent", "t1", SESSION, ROLES, GRACE, lambda exc, culprit: None)
    w.probed_by("mallory")
    assert w.probed_at == {}
