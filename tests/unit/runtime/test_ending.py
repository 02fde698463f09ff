"""The final acknowledgement round (smcdp.runtime.ending): nobody's wait ends until every participant
confirmed holding its output, or one of them reports that the session succeeded there."""

from __future__ import annotations

import asyncio

import pytest

from smcdp.errors import PreconditionFailed, SessionAborted
from smcdp.net.channel import InMemoryNetwork
from smcdp.runtime.ending import CONFIRM_TAG, Ending
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
