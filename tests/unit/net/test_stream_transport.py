"""The session's messages to a peer share one pipelined Mailbox.Stream call (large ones go as Deliver
calls); refusals on the stream are final like Deliver's and name the refuser; broken streams are
retried (fake stubs)."""

import asyncio
import concurrent.futures
import threading
import time
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import InvalidMessage, Unavailable
from smcdp.net import server as server_mod
from smcdp.net.grpc_channel import GrpcChannel, RetryPolicy
from smcdp.net.server import STREAM_READ_AHEAD, MailboxServicer
from smcdp.v1 import messages_pb2 as pb
from smcdp.v1 import transport_pb2 as tpb


def rpc_error(code, details="x"):
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeStreamCall:
    """Acks each complete message after ``delay`` s (and, if the stub has a ``hold`` event, not before it
    is set), in order, or fails as the stub's script says."""

    def __init__(self, stub):
        self.stub, self.cancelled, self.done = stub, False, False
        self.writing: list = []
        self.messages: asyncio.Queue = asyncio.Queue()
        self.failed = None

    async def write(self, env):
        if self.failed is not None or self.cancelled:
            raise asyncio.InvalidStateError("the call is done")
        if env.tag in self.stub.stall_writes:
            # gRPC's write on a call cancelled locally while it waits: CancelledError (grpc.aio's
            # _raise_for_status), although the task that writes was not cancelled
            self.stub.stall_writes.discard(env.tag)
            while not self.cancelled:
                await asyncio.sleep(0.01)
            raise asyncio.CancelledError()
        self.writing.append(env)
        if env.chunk_index == env.chunk_count - 1:
            self.messages.put_nowait(self.writing)
            self.writing = []
            self.stub.unacked += 1
            self.stub.max_unacked = max(self.stub.max_unacked, self.stub.unacked)

    async def read(self):
        if self.failed is not None:
            raise self.failed
        envs = await self.messages.get()
        fail = self.stub.script.pop(0) if self.stub.script else None
        if fail == "hang":
            await asyncio.sleep(3600)
        if self.stub.hold is not None:
            await self.stub.hold.wait()
        await asyncio.sleep(self.stub.delay)
        if fail is not None:
            self.failed = rpc_error(fail)
            raise self.failed
        self.stub.unacked -= 1
        self.stub.received.append(("stream", envs[0].tag))
        return tpb.Ack(bytes=sum(len(e.data) for e in envs))

    async def code(self):
        return self.failed.code() if self.failed is not None else grpc.StatusCode.CANCELLED

    async def details(self):
        return self.failed.details() if self.failed is not None else "cancelled"

    async def trailing_metadata(self):
        return grpc.aio.Metadata()

    async def done_writing(self):
        self.done = True

    def cancel(self):
        self.cancelled = True


class FakeStub:
    def __init__(self, delay=0.0, script=()):
        self.delay, self.script = delay, list(script)
        self.calls: list[FakeStreamCall] = []
        self.received: list[tuple[str, str]] = []
        self.unacked = 0  # complete messages written on a call and not acknowledged yet
        self.max_unacked = 0
        self.hold: asyncio.Event | None = None  # set: no Ack goes out before the test sets it
        self.stall_writes: set[str] = set()

    def Stream(self):
        self.calls.append(FakeStreamCall(self))
        return self.calls[-1]

    async def Deliver(self, gen, timeout=None):
        envs = [e async for e in gen]
        self.received.append(("deliver", envs[0].tag))
        return tpb.Ack(bytes=sum(len(e.data) for e in envs))


def channel(stub, deadline_s=30.0, rpc_seconds=1.0):
    cfg = SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=rpc_seconds), address_of=lambda p: f"{p}:1")
    conn = SimpleNamespace(config=cfg, mailbox=lambda party: stub)

    async def close():
        pass

    conn.close = close
    return GrpcChannel(
        "s-1",
        "a",
        {"a": "alice", "b": "bob"},
        time.monotonic() + deadline_s,
        conn,
        retry=RetryPolicy(initial_backoff=0.01, max_backoff=0.02),
    )


def msg(i):
    return pb.Ints(values=[i])


async def wait_until(condition, what, timeout=10.0):
    """Poll ``condition`` (letting the loop run) until it holds; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.005)


def test_messages_are_pipelined_on_one_stream_call_and_it_is_closed_cleanly():
    """send returns before the Ack: five messages are under way at once on one call; flush waits for them.

    The stub sends no Ack before the test says so: every send returning meanwhile shows that nobody
    waited for one, and the stub seeing the messages written unacknowledged shows they travel at once."""
    stub = FakeStub()

    async def main():
        stub.hold = asyncio.Event()
        ch = channel(stub, rpc_seconds=60.0)  # held Acks must not look like a silent stream (retried)
        for i in range(5):
            await asyncio.wait_for(ch.send("b", f"t/{i}", msg(i)), 30)  # would wait forever for an Ack
        await wait_until(lambda: stub.unacked == 5, "the five messages written on the stream")
        assert stub.received == [] and ch.stats.messages_sent == 0  # nothing acknowledged yet
        assert stub.max_unacked >= 4  # several unacknowledged messages under way at once
        stub.hold.set()
        await asyncio.wait_for(ch.flush(), 30)
        assert ch.stats.messages_sent == 5
        await ch.close()

    asyncio.run(main())
    assert stub.received == [("stream", f"t/{i}") for i in range(5)]
    assert stub.max_unacked >= 4
    assert len(stub.calls) == 1 and stub.calls[0].done and stub.calls[0].cancelled


def test_a_message_larger_than_a_chunk_goes_as_its_own_deliver_call():
    stub = FakeStub()

    async def main():
        ch = channel(stub)
        ch.chunk_size = 64
        await ch.send("b", "small", msg(1))
        await ch.send("b", "large", pb.Ints(values=list(range(100))))
        await ch.flush()

    asyncio.run(main())
    assert sorted(stub.received) == [("deliver", "large"), ("stream", "small")]


def test_a_refusal_on_the_stream_is_final_names_the_refuser_and_ends_the_role():
    stub = FakeStub(script=[grpc.StatusCode.INVALID_ARGUMENT])

    async def main():
        ch = channel(stub)
        await ch.send("b", "bad", msg(1))  # returns at once: the refusal comes later
        with pytest.raises(InvalidMessage) as err:
            await ch.recv("b", "reply", pb.Ints)  # the role hears it where it waits
        assert err.value.origin == "bob"  # the party that refused, not the sender
        with pytest.raises(InvalidMessage):
            await ch.flush()
        with pytest.raises(InvalidMessage):
            await ch.send("b", "next", msg(2))

    asyncio.run(main())
    assert stub.received == []
    assert stub.calls[0].cancelled


def test_messages_behind_a_failed_one_are_retried_on_a_new_stream():
    stub = FakeStub(delay=0.02, script=[None, grpc.StatusCode.UNAVAILABLE])

    async def main():
        ch = channel(stub)
        for i in range(4):
            await ch.send("b", f"t/{i}", msg(i))
        await ch.flush()

    asyncio.run(main())
    assert sorted(tag for _, tag in stub.received) == [f"t/{i}" for i in range(4)]
    assert len(stub.calls) == 2


@pytest.mark.parametrize("failure", [grpc.StatusCode.UNAVAILABLE, "hang"])
def test_a_broken_or_silent_stream_is_retried_on_a_new_one(failure):
    """UNAVAILABLE (peer restarting) or no Ack within the attempt's deadline: the message is sent again
    (the receiver de-duplicates), on a new stream."""
    stub = FakeStub(script=[failure])

    async def main():
        ch = channel(stub)
        await ch.send("b", "t", msg(1))
        await ch.flush()

    asyncio.run(main())
    assert stub.received == [("stream", "t")]
    assert len(stub.calls) == 2 and stub.calls[0].cancelled


def test_a_message_whose_stream_is_closed_while_it_is_written_is_sent_again_not_lost():
    """The first message is never acknowledged: its sender closes the stream, which cancels the call while
    the second message is being written on it.  gRPC then raises CancelledError in the second's writer
    although nobody cancelled that delivery; it must be sent again on a new stream, not dropped (a
    delivery task that ends "cancelled" counts as no failure, so the message was silently lost)."""
    stub = FakeStub(script=["hang"])
    stub.stall_writes.add("t/1")

    async def main():
        ch = channel(stub)
        await ch.send("b", "t/0", msg(0))
        await asyncio.sleep(0.5)  # t/1 is being written when t/0's attempt (1 s) gives up
        await ch.send("b", "t/1", msg(1))
        await ch.flush()

    asyncio.run(main())
    assert sorted(tag for _, tag in stub.received) == ["t/0", "t/1"]
    assert len(stub.calls) >= 2 and stub.calls[0].cancelled


def test_a_delivery_cancelled_by_anything_but_close_is_a_failure_not_silence():
    """Only the channel's close() cancels deliveries.  One that ended cancelled otherwise was never
    acknowledged: the role hears UNAVAILABLE (resumable) instead of its peer waiting for the message
    until the deadline."""
    stub = FakeStub(script=["hang"])

    async def main():
        ch = channel(stub)
        await ch.send("b", "t/0", msg(0))
        await asyncio.sleep(0.05)
        for task in list(ch._in_flight):
            task.cancel()
        with pytest.raises(Unavailable, match="cancelled before its receiver acknowledged it"):
            await ch.flush()
        with pytest.raises(Unavailable):
            await ch.recv("b", "reply", pb.Ints)

    asyncio.run(main())


def test_close_cancels_what_is_under_way_without_a_failure():
    stub = FakeStub(script=["hang"])

    async def main():
        ch = channel(stub)
        await ch.send("b", "t/0", msg(0))
        await asyncio.sleep(0.05)
        await ch.close()
        assert ch._delivery_failure is None

    asyncio.run(main())


# ------------------------------------------------------------------ the receiving side of a pipelined stream
class CountingTarget:
    """An inbound target that counts what it accepted; its syncs complete when the test says."""

    budget = None

    def __init__(self):
        self.accepted = []
        self.synced = concurrent.futures.Future()

    def accept_threadsafe(self, sender_role, tag, type_url, data):
        self.accepted.append(tag)
        return True

    def holds(self, sender_role, tag):
        return tag in self.accepted

    def durable_future(self):
        return self.synced


class OnePeerHost:
    name = "bob"

    def __init__(self, target):
        self.target = target

    def inbound_target(self, peer, session_id):
        return self.target, "a"

    def inbound_open(self, peer, session_id):
        """The session stays open: the server's watchdog asks every LIVENESS_POLL_SECONDS (2 s), so a
        test slower than that on a loaded machine reaches it (without it, the stream ended there)."""

    def running_with(self, peer, session_id=None):
        """No session runs here (the server asks, to count a message call in the right pool)."""
        return False

    def inbound_delivered(self, peer, nbytes, duplicate):
        pass

    def inbound_refused(self, peer, code):
        pass


class PeerContext:
    def auth_context(self):
        return {"x509_common_name": [b"alice"]}


def test_a_stream_reads_ahead_of_its_acks_only_so_far_and_acks_once_durable(monkeypatch):
    """The receiver stores the next messages while the journal syncs (pipelining), but a sender that
    never gets (or reads) its Acks makes it hold at most STREAM_READ_AHEAD of them; every Ack waits
    for durability.  The server's watchdog polls often here, so its checks of an open session run
    during the test however fast the machine is (and must not end the call)."""
    monkeypatch.setattr(server_mod, "LIVENESS_POLL_SECONDS", 0.01)
    target = CountingTarget()
    servicer = MailboxServicer(OnePeerHost(target), max_message_bytes=1 << 20)

    async def envelopes():
        for i in range(500):
            yield tpb.Envelope(
                session_id="s-1",
                tag=f"t/{i}",
                type_name="smcdp.v1.Ints",
                chunk_index=0,
                chunk_count=1,
                total_size=1,
                data=b"\x01",
            )

    async def main():
        acks = servicer.Stream(envelopes(), PeerContext())
        first = asyncio.ensure_future(acks.__anext__())
        await wait_until(lambda: len(target.accepted) >= STREAM_READ_AHEAD, "the receiver reading ahead")
        for _ in range(200):  # give a reader that did not hold a chance to read on
            await asyncio.sleep(0)
        await asyncio.sleep(0.1)
        assert not first.done()  # not durable yet: no Ack
        assert STREAM_READ_AHEAD <= len(target.accepted) <= STREAM_READ_AHEAD + 1
        target.synced.set_result(None)
        assert (await asyncio.wait_for(first, 5)).bytes == 1
        got = 1
        async for _ in acks:
            got += 1
        assert got == 500 and len(target.accepted) == 500

    asyncio.run(main())


def test_small_new_messages_are_stored_on_the_servers_loop_large_ones_and_resends_off_it(monkeypatch):
    """A small new message's journal write (page cache, no fsync) runs on the server's loop; a large one, or a
    resend of a tag already held (whose check may read the earlier message back from the journal), goes to a
    worker thread, so that neither holds the loop that answers every other call."""
    monkeypatch.setattr(server_mod, "LIVENESS_POLL_SECONDS", 0.01)
    monkeypatch.setattr(server_mod, "INLINE_ACCEPT_BYTES", 8)
    loop_thread = []

    class WhereTarget(CountingTarget):
        def accept_threadsafe(self, sender_role, tag, type_url, data):
            self.where = getattr(self, "where", [])
            self.where.append((tag, len(data), threading.get_ident() == loop_thread[0]))
            return super().accept_threadsafe(sender_role, tag, type_url, data)

    target = WhereTarget()
    target.synced.set_result(None)
    servicer = MailboxServicer(OnePeerHost(target), max_message_bytes=1 << 20)
    sent = [("t/0", b"\x01"), ("t/1", b"\x01" * 9), ("t/0", b"\x01")]  # small, large, a resend of t/0

    async def envelopes():
        for tag, data in sent:
            yield tpb.Envelope(
                session_id="s-1",
                tag=tag,
                type_name="smcdp.v1.Ints",
                chunk_index=0,
                chunk_count=1,
                total_size=len(data),
                data=data,
            )

    async def main():
        loop_thread.append(threading.get_ident())
        acks = [ack async for ack in servicer.Stream(envelopes(), PeerContext())]
        assert len(acks) == 3

    asyncio.run(main())
    assert target.where == [("t/0", 1, True), ("t/1", 9, False), ("t/0", 1, False)]
