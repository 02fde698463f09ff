"""The session's messages to a peer share one Mailbox.Stream call; a busy or broken stream falls back to
Deliver; refusals on the stream are final like Deliver's; broken streams are retried (fake stubs)."""

import asyncio
import time
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import InvalidMessage
from smcdp.net.grpc_channel import GrpcChannel, RetryPolicy
from smcdp.v1 import messages_pb2 as pb
from smcdp.v1 import transport_pb2 as tpb


def rpc_error(code, details="x"):
    return grpc.aio.AioRpcError(code, grpc.aio.Metadata(), grpc.aio.Metadata(), details)


class FakeStreamCall:
    """Acks each message after ``delay`` s, or fails as told by the stub's script."""

    def __init__(self, stub):
        self.stub, self.pending, self.cancelled, self.done = stub, [], False, False

    async def write(self, env):
        self.pending.append(env)

    async def read(self):
        envs, self.pending = self.pending, []
        fail = self.stub.script.pop(0) if self.stub.script else None
        if fail == "hang":
            await asyncio.sleep(3600)
        await asyncio.sleep(self.stub.delay)
        if fail is not None:
            raise rpc_error(fail)
        self.stub.received.append(("stream", envs[0].tag))
        return tpb.Ack(bytes=sum(len(e.data) for e in envs))

    async def done_writing(self):
        self.done = True

    def cancel(self):
        self.cancelled = True


class FakeStub:
    def __init__(self, delay=0.0, script=()):
        self.delay, self.script = delay, list(script)
        self.calls: list[FakeStreamCall] = []
        self.received: list[tuple[str, str]] = []

    def Stream(self):
        self.calls.append(FakeStreamCall(self))
        return self.calls[-1]

    async def Deliver(self, gen, timeout=None):
        envs = [e async for e in gen]
        self.received.append(("deliver", envs[0].tag))
        return tpb.Ack(bytes=sum(len(e.data) for e in envs))


def channel(stub, deadline_s=30.0):
    cfg = SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=1.0), address_of=lambda p: f"{p}:1")
    conn = SimpleNamespace(config=cfg, mailbox=lambda party: stub)

    async def close():
        pass

    conn.close = close
    return GrpcChannel("s-1", "a", {"a": "alice", "b": "bob"}, time.monotonic() + deadline_s, conn,
                       retry=RetryPolicy(initial_backoff=0.01, max_backoff=0.02))


def msg(i):
    return pb.Ints(values=[i])


def test_a_sessions_messages_share_one_stream_call_and_it_is_closed_cleanly():
    stub = FakeStub()

    async def main():
        ch = channel(stub)
        for i in range(5):
            await ch.send("b", f"t/{i}", msg(i))
        await ch.close()

    asyncio.run(main())
    assert stub.received == [("stream", f"t/{i}") for i in range(5)]
    assert len(stub.calls) == 1 and stub.calls[0].done and stub.calls[0].cancelled


def test_a_message_finding_the_stream_busy_goes_as_its_own_deliver_call():
    stub = FakeStub(delay=0.05)

    async def main():
        ch = channel(stub)
        await asyncio.gather(ch.send("b", "first", msg(1)), ch.send("b", "second", msg(2)))

    asyncio.run(main())
    assert sorted(stub.received) == [("deliver", "second"), ("stream", "first")]
    assert len(stub.calls) == 1


def test_a_refusal_on_the_stream_is_final_and_the_next_message_opens_a_new_stream():
    stub = FakeStub(script=[grpc.StatusCode.INVALID_ARGUMENT])

    async def main():
        ch = channel(stub)
        with pytest.raises(InvalidMessage):
            await ch.send("b", "bad", msg(1))
        await ch.send("b", "good", msg(2))

    asyncio.run(main())
    assert stub.received == [("stream", "good")]
    assert len(stub.calls) == 2 and stub.calls[0].cancelled


@pytest.mark.parametrize("failure", [grpc.StatusCode.UNAVAILABLE, "hang"])
def test_a_broken_or_silent_stream_is_retried_on_a_new_one(failure):
    """UNAVAILABLE (peer restarting) or no Ack within the attempt's deadline: the message is sent again
    (the receiver de-duplicates), on a new stream."""
    stub = FakeStub(script=[failure])

    async def main():
        ch = channel(stub)
        await ch.send("b", "t", msg(1))

    asyncio.run(main())
    assert stub.received == [("stream", "t")]
    assert len(stub.calls) == 2 and stub.calls[0].cancelled
