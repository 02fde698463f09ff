"""A silent participant that still probes this party is alive: its link from this party failed
(liveness.LinkLost, "the link A→B"), not the participant -- and without its probes it is a dead peer."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import SmcdpError
from smcdp.net.limits import Limits
from smcdp.runtime.limits import check_resume, restart_culprit
from smcdp.runtime.liveness import LinkLost, PeerLost, Watcher, checked_link

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

    async def heartbeat(self, party, incarnation, timeout, about=()):
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


def test_a_link_a_peer_names_is_two_distinct_participants_and_for_an_abort_starts_at_its_sender():
    members = {"trent", "alice", "bob"}
    assert checked_link("alice→bob", members) == "alice→bob"
    assert checked_link("alice→bob", members, {"alice"}) == "alice→bob"
    for bad in ("alice→alice", "alice\n→bob\n", "alice→mallory", "alice->bob", "→bob", "alice→bob→trent"):
        assert checked_link(bad, members) is None, bad
    assert checked_link("alice→bob", members, {"trent"}) is None  # trent's Abort cannot speak for alice's link


class _FailedElsewhere:
    """Bob's session failed; his answer names a culprit and link as given."""

    last_heard: dict[str, float] = {}

    def __init__(self, culprit: str, link: str) -> None:
        self.culprit, self.link = culprit, link

    async def heartbeat(self, party, incarnation, timeout, about=()):
        return SimpleNamespace(
            state="failed", incarnation="b1", code="UNAVAILABLE", culprit=self.culprit, link=self.link
        )


def _adopted(culprit: str, link: str) -> BaseException:
    lost: list[BaseException] = []
    w = Watcher("trent", "t1", SESSION, {"trent": "trent", "party1": "bob"}, GRACE, lambda e, c: lost.append(e))
    asyncio.run(asyncio.wait_for(w.watch(_FailedElsewhere(culprit, link)), 4 * GRACE))
    [exc] = lost
    return exc


def test_a_failure_adopted_from_a_heartbeat_answer_keeps_only_a_culprit_and_link_inside_the_session(caplog):
    exc = _adopted("trent", "trent→bob")
    # bob's word that trent -- this party -- failed: bob is the origin and trent its claim, which the session
    # weighs (liveness.weigh_claim: trent takes the blame only on its own watcher's evidence)
    assert (exc.origin, exc.reported_by, exc.reported_culprit, exc.link) == ("bob", "bob", "trent", "trent→bob")
    exc = _adopted("bob", "bob→trent")  # bob names itself: its own failure, and its own link
    assert (exc.origin, exc.reported_culprit, exc.link) == ("bob", None, "bob→trent")
    forged = _adopted("mallory\nINFO forged", "alice\n→bob\n")
    assert (forged.origin, forged.link) == ("bob", None)  # the answering party, and no link
    assert "forged" not in str(forged)
    assert "outside the session" in caplog.text


def test_a_failed_link_uses_up_the_restarts_of_the_link_not_those_of_the_party_that_saw_it():
    """Hostile alice probes trent but answers none of his heartbeats: each session fails at trent with the
    link trent→alice, origin trent.  Those restarts are the link's; trent's own crash still has his."""
    lim = Limits(max_restarts=2)
    meta = {"session_id": "s", "deadline_epoch": 1000.0, "began_epoch": 900.0, "state": "failed"}
    link_failed = dict(meta, error={"code": "UNAVAILABLE", "origin": "trent", "link": "trent→alice"})
    assert restart_culprit(link_failed, "bob") == "trent→alice"
    by = {"trent→alice": 2}
    with pytest.raises(SmcdpError, match="after failures of the link 'trent→alice'"):
        check_resume([], "trent", dict(link_failed, restarts=2, restarts_by=by), lim, "bob", now=999.0)
    crashed = dict(meta, error={"code": "UNAVAILABLE", "origin": "trent"}, restarts=2, restarts_by=by)
    check_resume([], "trent", crashed, lim, "bob", now=999.0)  # trent's own failures: none counted yet
    # a link that is not two party names (an old or damaged record) charges its origin, as before
    odd = dict(meta, error={"code": "UNAVAILABLE", "origin": "trent", "link": "trent\n→alice"})
    assert restart_culprit(odd, "bob") == "trent"


def _watch_as_bob(ch) -> list[tuple[BaseException, str | None]]:
    """Bob's watch in a four-party session over ``ch``, until it names a culprit (or 4 graces pass): what it lost."""
    roles = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
    lost: list[tuple[BaseException, str | None]] = []
    w = Watcher("bob", "b1", SESSION, roles, GRACE, lambda exc, culprit: lost.append((exc, culprit)))

    async def main():
        task = asyncio.ensure_future(w.watch(ch))
        end = time.monotonic() + 4 * GRACE
        while not task.done() and time.monotonic() < end:
            await asyncio.sleep(0.05)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(main())
    return lost


class _Awaiting:
    """Bob's channel in a four-party session: his neighbours alice and charlie answer, and a message to dave
    -- no neighbour of his, so not probed by him -- has waited for its acknowledgement since the start: the
    link carries nothing, and dave sends bob nothing (he would not know either)."""

    def __init__(self, waits: bool) -> None:
        self.last_heard: dict[str, float] = {}
        self.awaiting = {"dave": time.monotonic()} if waits else {}
        self.probed: set[str] = set()

    async def heartbeat(self, party, incarnation, timeout, about=()):
        self.probed.add(party)
        if party == "dave":
            await asyncio.sleep(timeout)
            raise _Deadline()
        return SimpleNamespace(state="running", incarnation=f"{party}1", code="", culprit="")


@pytest.mark.parametrize("waits", [True, False])
def test_a_participant_a_message_waits_on_is_probed_too_and_named_once_silent(waits):
    """Before, only the ring's neighbours were probed: a message to any other participant over a link that
    carried nothing was retried until the session's deadline, and nobody noticed."""
    ch = _Awaiting(waits)
    lost = _watch_as_bob(ch)
    if not waits:  # nothing waits on dave: he is no neighbour of bob's, and bob leaves him to them
        assert lost == [] and ch.probed == {"alice", "charlie"}
        return
    [(exc, culprit)] = lost
    assert isinstance(exc, PeerLost) and culprit == "dave" and "'dave'" in str(exc)
    assert ch.probed == {"alice", "charlie", "dave"}


class _CutOff:
    """Bob's channel when bob himself is cut off, a second after the role began: no heartbeat is answered and
    nothing arrives from anyone -- and a message of his to dave (no neighbour of his) has waited since the cut."""

    def __init__(self) -> None:
        self.cut = time.monotonic() + 1.0
        self.last_heard: dict[str, float] = {}
        self.awaiting: dict[str, float] = {}

    async def heartbeat(self, party, incarnation, timeout, about=()):
        if time.monotonic() < self.cut:
            return SimpleNamespace(state="running", incarnation=f"{party}1", code="", culprit="")
        self.awaiting.setdefault("dave", self.cut)
        await asyncio.sleep(timeout)
        raise _Deadline()


def test_a_party_cut_off_from_everyone_names_itself_though_it_probes_a_participant_its_message_waits_on():
    """Its neighbours went silent at once: it is the one cut off.  The participant probed besides them since its
    message began to wait is silent for less time (its silence counts from then), and before, that hid the
    moment of the cut: bob named a neighbour (the multi-host cable-cut test, 2 of 2 fresh-clone runs)."""
    lost = _watch_as_bob(_CutOff())
    [(exc, culprit)] = lost
    assert isinstance(exc, PeerLost) and culprit == "bob" and "lost contact with every other participant" in str(exc)


class _Vouching:
    """Bob's channel in a four-party session: a message to dave waits, and dave answers nothing and never probes
    bob -- the link is cut both ways.  Dave's own ring neighbours (charlie, alice) answer bob's questions about
    him: ``ago`` seconds since they last heard from dave (-1: never), or nothing at all (a party of an earlier
    version: ``ago`` None)."""

    def __init__(self, ago: float | None) -> None:
        self.ago = ago
        self.last_heard: dict[str, float] = {}
        self.awaiting = {"dave": time.monotonic()}
        self.asked: dict[str, set[str]] = {}

    async def heartbeat(self, party, incarnation, timeout, about=()):
        if party == "dave":
            await asyncio.sleep(timeout)
            raise _Deadline()
        self.asked.setdefault(party, set()).update(about)
        reply = SimpleNamespace(state="running", incarnation=f"{party}1", code="", culprit="")
        if self.ago is not None:
            reply.about_heard_seconds = [self.ago for _ in about]
        return reply


def test_a_silent_participant_another_one_hears_is_alive_and_the_link_is_named():
    """Dave does not probe bob (no neighbours), so bob had no evidence that dave is alive and named him dead
    although charlie and alice heard from him all along.  Bob now asks dave's ring neighbours about him."""
    ch = _Vouching(ago=0.2)
    [(exc, culprit)] = _watch_as_bob(ch)
    assert isinstance(exc, LinkLost) and exc.link == "bob→dave" and culprit == "bob"
    assert "was heard from by 'alice'" in str(exc) or "was heard from by 'charlie'" in str(exc)
    assert ch.asked == {"alice": {"dave"}, "charlie": {"dave"}}  # dave's neighbours, asked about him only


@pytest.mark.parametrize("ago", [-1.0, 5 * GRACE, None])
def test_a_silent_participant_nobody_hears_is_named_as_before(ago):
    """Nobody heard from dave (never, long ago, or parties that do not answer the question): dave is lost."""
    [(exc, culprit)] = _watch_as_bob(_Vouching(ago=ago))
    assert isinstance(exc, PeerLost) and not isinstance(exc, LinkLost) and culprit == "dave"


def test_only_a_participant_silent_for_half_the_grace_is_asked_about_and_the_answer_is_from_here():
    """The answer side (``Watcher.heard_ago``): evidence of life is an answer, a heartbeat or a message; a party
    outside the session, the asker itself and a participant never heard from get -1."""
    roles = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
    w = Watcher("charlie", "c1", SESSION, roles, GRACE, lambda exc, culprit: None)
    assert w.heard_ago("dave", {}, asker="bob") == -1.0  # never heard
    w.probed_by("dave")
    assert w.heard_ago("dave", {}, asker="bob") in (0.0, 1.0)  # whole seconds, rounded up
    assert w.heard_ago("dave", {}, asker="dave") == -1.0  # nobody vouches for the asker to itself
    assert w.heard_ago("mallory", {}, asker="bob") == -1.0
    assert w.heard_ago("alice", {"party1": time.monotonic() - 1.2}, asker="bob") == 2.0
    # a participant silent for less than half the grace is not asked about (the answers cost a probe each)
    ch = _Vouching(ago=0.2)
    ch.awaiting = {"dave": time.monotonic() + 10 * GRACE}  # nothing waits on him: not probed by bob
    assert _watch_as_bob(ch) == [] and ch.asked == {"alice": set(), "charlie": set()}


def test_a_participant_heard_from_only_before_it_died_is_not_called_reachable():
    """The link to dave is cut and dave dies soon after: charlie's last word of him grows old, and once it is
    older than half the grace when bob's grace runs out, bob names dave, not the link.  (Had dave died within
    the last half grace, the link is named -- it did carry nothing while dave lived -- and the record says
    when dave was last heard from, not that he "is alive".)"""
    ch = _Vouching(ago=0.2)
    died = time.monotonic() + 0.5

    async def heartbeat(party, incarnation, timeout, about=()):
        reply = await _Vouching.heartbeat(ch, party, incarnation, timeout, about)
        if about:
            reply.about_heard_seconds = [max(0.2, time.monotonic() - died) for _ in about]
        return reply

    ch.heartbeat = heartbeat
    [(exc, culprit)] = _watch_as_bob(ch)
    assert isinstance(exc, PeerLost) and not isinstance(exc, LinkLost) and culprit == "dave"
