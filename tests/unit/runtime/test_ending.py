"""The final acknowledgement round (smcdp.runtime.ending): nobody's wait ends until every participant
confirmed holding its output, or one of them reports that the session succeeded there."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import AlreadySucceeded, PreconditionFailed, SessionAborted
from smcdp.net.channel import Channel, InMemoryNetwork
from smcdp.net.grpc_channel import GrpcChannel, error_from_rpc
from smcdp.net.server import _fail as server_fail
from smcdp.runtime.ending import CONFIRM_TAG, Ending, finished_roles
from smcdp.runtime.peers import PeerDesk
from smcdp.v1 import messages_pb2 as pb

ROLES = {"a": "alice", "b": "bob", "c": "carol"}


def test_every_participant_ends_once_all_confirmed():
    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)
        endings = {r: Ending(poll=0.05) for r in ROLES}
        await asyncio.gather(*(endings[r].run(net.channel(r), None) for r in ROLES))
        return net, endings

    net, endings = asyncio.run(main())
    for r, e in endings.items():
        assert e.reached and e.confirmed == set(ROLES) - {r}
        assert e.unconfirmed(net.channel(r)) == []
    # one confirmation from every participant to every other one, under its own tag
    assert sorted((s, d) for s, d, tag, _, _ in net.transcript if tag == CONFIRM_TAG) == sorted(
        (s, d) for s in ROLES for d in ROLES if s != d
    )


def test_a_participant_that_never_confirms_holds_everyone_back():
    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)
        endings = {r: Ending(poll=0.05) for r in ("a", "b")}  # c's role never ends
        tasks = [asyncio.ensure_future(endings[r].run(net.channel(r), None)) for r in endings]
        done, _ = await asyncio.wait(tasks, timeout=0.5)
        assert not done  # nobody ends while c has not confirmed
        net.abort(SessionAborted("c is gone", "UNAVAILABLE", "carol"))  # what the liveness watcher does
        results = await asyncio.gather(*tasks, return_exceptions=True)
        return net, endings, results

    net, endings, results = asyncio.run(main())
    assert all(isinstance(r, SessionAborted) for r in results), results
    assert endings["a"].unconfirmed(net.channel("a")) == ["carol"]
    assert endings["b"].unconfirmed(net.channel("b")) == ["carol"]


def test_a_participant_that_never_reached_the_round_names_nobody():
    net = InMemoryNetwork(ROLES)
    assert Ending(poll=0.05).unconfirmed(net.channel("a")) is None


@pytest.mark.parametrize("succeeded_at", ["b", "c"])
def test_a_participant_that_succeeded_vouches_for_everyone(succeeded_at):
    """A participant that reports "succeeded" had every confirmation: one still waiting (a confirmation was
    lost with a killed party, or it is the killed party, restarted) may end too."""

    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)
        asked = []

        async def probe(role: str) -> str:
            asked.append(role)
            return "succeeded" if role == succeeded_at else "running"

        ending = Ending(poll=0.05)
        await asyncio.wait_for(ending.run(net.channel("a"), probe), 5)  # nobody else ever confirms
        return net, ending, asked

    net, ending, asked = asyncio.run(main())
    assert ending.vouched_by == ROLES[succeeded_at]
    assert ending.unconfirmed(net.channel("a")) == []
    assert succeeded_at in asked


def test_a_probe_that_fails_is_no_answer():
    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)

        async def probe(role: str) -> str:
            raise ConnectionError("no route")

        ending = Ending(poll=0.02)
        task = asyncio.ensure_future(ending.run(net.channel("a"), probe))
        await asyncio.sleep(0.2)
        assert not task.done()
        for r in ("b", "c"):  # the confirmations arrive after all
            await net.channel(r).send("a", CONFIRM_TAG, pb.Flag())
        await asyncio.wait_for(task, 5)
        return ending

    ending = asyncio.run(main())
    assert ending.confirmed == {"b", "c"} and ending.vouched_by is None


def test_an_abort_after_a_participant_succeeded_is_a_success_here():
    """Every participant had confirmed (one reports "succeeded"), then an abort or a silent peer ends the
    wait here: the session succeeded here too, rather than failing here and not there."""

    async def main(answer: str):
        net = InMemoryNetwork(ROLES, timeout=10)

        async def probe(role: str) -> str:
            return answer if role == "b" else "running"

        ending = Ending(poll=30.0)  # no periodic asking within the test: only the one after the abort
        task = asyncio.ensure_future(ending.run(net.channel("a"), probe))
        await asyncio.sleep(0.05)
        net.channel("a").abort_local(SessionAborted("c is gone", "UNAVAILABLE", "carol"))
        try:
            await asyncio.wait_for(task, 5)
        except SessionAborted:
            return None
        return ending.vouched_by

    assert asyncio.run(main("succeeded")) == "bob"
    assert asyncio.run(main("running")) is None  # nobody succeeded: the failure stands


def test_a_confirmation_refused_after_every_one_arrived_does_not_undo_the_success():
    """Every participant confirmed to ``a``; then ``a``'s own confirmation to ``c`` is refused (``c``
    succeeded meanwhile, vouched for by another participant, and takes no new messages): ``a`` succeeded."""

    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)
        a = net.channel("a")
        a.pipelined = True  # as the gRPC channel: a delivery fails after send() returned
        transmit = a._transmit

        async def refusing(to_role, tag, type_url, data):
            if to_role == "c":
                await asyncio.sleep(0.1)
                raise PreconditionFailed("session local has already ended here")
            await transmit(to_role, tag, type_url, data)

        a._transmit = refusing  # type: ignore[method-assign]
        ending = Ending(poll=1.0)
        others = [asyncio.ensure_future(Ending(poll=1.0).run(net.channel(r), None)) for r in ("b", "c")]
        await asyncio.wait_for(ending.run(a, None), 5)
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return ending

    ending = asyncio.run(main())
    assert ending.confirmed == {"b", "c"}


@pytest.mark.parametrize("elsewhere", ["failed", "succeeded"])
def test_a_confirmation_refused_because_the_session_failed_there_fails_it_here_too(elsewhere):
    """Every other participant confirmed to ``a`` (their confirmations were in ``a``'s journal when it came
    back), but ``c`` gave up waiting for ``a``'s: it refuses ``a``'s confirmation, its session failed naming
    ``a``.  ``a`` does not report "succeeded" while ``c`` failed: it fails as ``c`` did -- unless another
    participant succeeded (then ``c`` is the late participant that a resume brings to the end)."""

    async def main():
        net = InMemoryNetwork(ROLES, timeout=10)
        a = net.channel("a")
        a.pipelined = True
        transmit = a._transmit

        async def refusing(to_role, tag, type_url, data):
            if to_role == "c":
                await asyncio.sleep(0.1)  # the refusal comes back over the network
                raise SessionAborted("session s already ended at carol: alice has not answered", "UNAVAILABLE", "alice")
            await transmit(to_role, tag, type_url, data)

        a._transmit = refusing  # type: ignore[method-assign]

        async def probe(role: str) -> str:
            return elsewhere if role == "b" else "failed"

        ending = Ending(poll=30.0)  # only the asking after the refusal
        others = [asyncio.ensure_future(Ending(poll=1.0).run(net.channel(r), None)) for r in ("b", "c")]
        await asyncio.sleep(0.05)  # their confirmations are in before a's round starts
        try:
            await asyncio.wait_for(ending.run(a, probe), 5)
            outcome = "succeeded"
        except SessionAborted as exc:
            outcome = f"failed {exc.code} {exc.origin}"
        for t in others:
            t.cancel()
        await asyncio.gather(*others, return_exceptions=True)
        return ending, outcome

    ending, outcome = asyncio.run(main())
    assert ending.confirmed == {"b", "c"}
    assert outcome == ("failed UNAVAILABLE alice" if elsewhere == "failed" else "succeeded")


class _Journal:
    """What a resumed late participant's journal holds: a confirmation to b and one to c, neither marked
    delivered (their acknowledgements were cut)."""

    def __init__(self) -> None:
        self.out = {(r, CONFIRM_TAG): ("smcdp.v1.Flag", pb.Flag(value=True).SerializeToString()) for r in "bc"}
        self.acked: set[tuple[str, str]] = set()

    def inbound(self):
        return []

    def outbound(self, to_role, tag):
        return self.out.get((to_role, tag))

    def record_outbound(self, to_role, tag, type_name, data, durable=True):
        self.out[(to_role, tag)] = (type_name, data)

    def delivered(self, to_role, tag):
        return (to_role, tag) in self.acked

    def mark_delivered(self, to_role, tag):
        self.acked.add((to_role, tag))

    def sync(self):
        pass


class _Refused(Channel):
    """A channel whose receivers' sessions succeeded: each refuses what it is sent with AlreadySucceeded."""

    def __init__(self, journal) -> None:
        super().__init__("s", "a", ROLES, journal=journal)
        self.transmitted: list[tuple[str, str]] = []

    async def _transmit(self, to_role, tag, type_url, data):
        self.transmitted.append((to_role, tag))
        raise AlreadySucceeded(f"session s already succeeded at {ROLES[to_role]}")


def test_a_replay_sends_nothing_journaled_to_a_finished_participant_and_a_succeeded_refusal_is_delivery():
    async def main():
        ch = _Refused(_Journal())
        ch.resend_delivered = True  # a resumed session
        ch.finished = {"b"}
        await ch.send_many(["b", "c"], CONFIRM_TAG, pb.Flag(value=True))
        await ch.send("b", "fresh", pb.Flag(value=True))  # journaled by nobody yet: it goes, and is refused
        await ch.flush()
        return ch

    ch = asyncio.run(main())
    # the confirmation to b, journaled but never acknowledged, is not sent again (b finished); c's is, and
    # c's refusal "succeeded here" counts as its delivery: c joins the finished, nothing failed
    assert ch.transmitted == [("c", CONFIRM_TAG), ("b", "fresh")]
    assert ch.finished == {"b", "c"} and ch.journal.acked == {("c", CONFIRM_TAG), ("b", "fresh")}


def test_finished_roles_asks_a_participant_that_does_not_answer_again_within_the_connect_timeout():
    asked: dict[str, int] = {}

    async def probe(role: str) -> str:
        asked[role] = asked.get(role, 0) + 1
        if role == "b" and asked[role] < 3:
            raise ConnectionError("unreachable for a moment")
        if role == "c":
            raise ConnectionError("never reachable")
        return "succeeded"

    net = InMemoryNetwork(ROLES)
    finished = asyncio.run(finished_roles(net.channel("a"), probe, within=1.0, retry=0.05))
    assert finished == {"b"} and asked["b"] == 3 and asked["c"] > 3


def test_a_refusal_succeeded_here_crosses_the_wire_as_such():
    """The receiver's AlreadySucceeded leaves its server as FAILED_PRECONDITION with ``smcdp-ended:
    succeeded`` (even when it names an origin), and the sender's channel reads it back as AlreadySucceeded;
    an ordinary "already ended" stays a PreconditionFailed."""

    class _Context:
        def __init__(self) -> None:
            self.trailing: tuple = ()

        def set_trailing_metadata(self, md) -> None:
            self.trailing = tuple(md)

        async def abort(self, code, details):
            raise grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(*self.trailing), details, None)

    async def refused(exc: BaseException) -> BaseException:
        ctx = _Context()
        try:
            await server_fail(ctx, exc, "Deliver")
        except grpc.aio.AioRpcError as rpc:
            return error_from_rpc(rpc, "message 'x' to role b", "bob")
        raise AssertionError("not refused")

    done = AlreadySucceeded("session s already succeeded at bob")
    done.origin = "bob"
    assert isinstance(asyncio.run(refused(done)), AlreadySucceeded)
    ended = asyncio.run(refused(PreconditionFailed("session s has already ended at bob")))
    assert isinstance(ended, PreconditionFailed) and not isinstance(ended, AlreadySucceeded)


def test_a_channel_whose_session_succeeded_refuses_new_messages_as_succeeded_and_others_as_ended():
    connector = SimpleNamespace(config=SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=5.0)))
    data = pb.Flag(value=True).SerializeToString()

    async def refusal(succeeded: bool) -> BaseException:
        ch = GrpcChannel("s", "b", ROLES, None, connector)
        ch.mark_closed(None, succeeded=succeeded)
        with pytest.raises(PreconditionFailed) as info:
            ch.accept_threadsafe("a", CONFIRM_TAG, "smcdp.v1.Flag", data)
        return info.value

    assert isinstance(asyncio.run(refusal(True)), AlreadySucceeded)
    assert not isinstance(asyncio.run(refusal(False)), AlreadySucceeded)  # cancelled, shut down: not known


def test_a_party_restarted_after_its_session_succeeded_refuses_its_messages_as_succeeded():
    records = {
        "s-ok": {"state": "succeeded", "roles": {"a": "alice", "b": "bob"}},
        "s-old": {"state": "failed", "roles": {"a": "alice", "b": "bob"}},  # no error code recorded
    }
    core = SimpleNamespace(name="bob", records=SimpleNamespace(peek=records.get))
    desk = PeerDesk(core, None, None, None)  # type: ignore[arg-type]
    with pytest.raises(AlreadySucceeded):
        desk._refuse_ended("alice", "s-ok")
    with pytest.raises(PreconditionFailed) as info:
        desk._refuse_ended("alice", "s-old")
    assert not isinstance(info.value, AlreadySucceeded)
    desk._refuse_ended("carol", "s-ok")  # not a participant: learns nothing here (the caller says "no session")
