"""``Mailbox.first_of`` and ``Channel.recv_unless``: a role expecting one message learns at once when the sender went
another way (its next step's message came instead), rather than both waiting for each other until the deadline."""

import asyncio

import pytest

from smcdp.errors import DeadlineExceeded, InvalidMessage, SessionAborted
from smcdp.net.channel import InMemoryNetwork, Mailbox
from smcdp.v1 import messages_pb2 as pb


def test_first_of_returns_the_tag_that_came_without_taking_it():
    async def main():
        mb = Mailbox()
        waiting = asyncio.ensure_future(mb.first_of("bob", ["final", "round/7"], 10))
        await asyncio.sleep(0.01)
        assert not waiting.done()
        mb.put("bob", "round/7", "t", b"x")
        assert await waiting == "round/7"
        assert await mb.get("bob", "round/7", 1) == ("t", b"x")  # still there for whoever takes it
        # both already here: the earlier in the list wins; one taken before counts as here
        mb.put("bob", "a", "t", b"1")
        mb.put("bob", "b", "t", b"2")
        assert await mb.first_of("bob", ["b", "a"], 1) == "b"
        assert await mb.first_of("bob", ["x", "round/7"], 1) == "round/7"
        # a get of the same key waiting beside it is not disturbed
        got = asyncio.ensure_future(mb.get("bob", "c", 10))
        seen = asyncio.ensure_future(mb.first_of("bob", ["c", "d"], 10))
        await asyncio.sleep(0.01)
        mb.put("bob", "c", "t", b"3")
        assert await seen == "c" and await got == ("t", b"3")
        with pytest.raises(DeadlineExceeded, match="none of"):
            await mb.first_of("bob", ["e", "f"], 0.05)
        late = asyncio.ensure_future(mb.first_of("bob", ["g"], 10))
        await asyncio.sleep(0.01)
        mb.abort(SessionAborted("aborted by carol", "ABORTED"))
        with pytest.raises(SessionAborted, match="carol"):
            await late

    asyncio.run(main())


def test_recv_unless_refuses_the_other_message_and_takes_the_expected_one():
    async def main():
        net = InMemoryNetwork({"trent": "trent", "party1": "alice"}, timeout=30)
        trent, party = net.channel("trent"), net.channel("party1")
        await party.send("trent", "round/7", pb.Flag(value=True))
        with pytest.raises(InvalidMessage, match="party1 sent 'round/7' where 'final/cols' was due: it began"):
            await trent.recv_unless("party1", "final/cols", pb.Ints, "round/7", "it began another round")
        await party.send("trent", "final/cols", pb.Ints(values=[3, 1]))
        got = await trent.recv_unless("party1", "final/cols", pb.Ints, "round/8", "never")
        assert list(got.values) == [3, 1]

    asyncio.run(main())
