"""What a peer's messages cost the receiving party is charged before it is held: copies of a message already
received (retries, rewrites) are judged by their digest as they arrive and not held -- or, where only their bytes
can tell, held charged to the party's ledger --, a Deliver must end within ``call_idle_seconds`` of its message,
and every message, an empty one too, costs the ledgers its bookkeeping.

The server's Mailbox servicer is driven in-process with a real :class:`GrpcChannel` as the session's target;
every wait is on a condition (a request iterator that reports when the server asks for what follows the last
chunk), never on a sleep."""

from __future__ import annotations

import asyncio
import re
import time
import tracemalloc
from types import SimpleNamespace

import grpc
import pytest

from smcdp.errors import ResourceExhausted
from smcdp.net.grpc_channel import GrpcChannel
from smcdp.net.limits import MIB, CallQuotas, InboundBudget, InboundLedger, Limits, TrafficEnvelope, message_cost
from smcdp.net.server import MailboxServicer
from smcdp.runtime.durability.journal import FileJournal
from smcdp.v1 import messages_pb2 as pb
from smcdp.v1 import transport_pb2 as tpb

SID = "alice.s"
ROLES = {"alice": "alice", "bob": "bob"}  # role -> party: alice sends, bob (the server) receives
INTS = pb.Ints.DESCRIPTOR.full_name
BLOBS = pb.Blobs.DESCRIPTOR.full_name
CHUNK = 256 * 1024


class Aborted(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{code.name}: {details}")
        self.code, self.details = code, details


class Context:
    """A call's context as the servicer uses it: alice's verified certificate, and abort."""

    def auth_context(self):
        return {"x509_common_name": [b"alice"]}

    def set_trailing_metadata(self, metadata):
        pass

    async def abort(self, code, details=""):
        raise Aborted(code, details)


class Host:
    name = "bob"

    def __init__(self, channel: GrpcChannel) -> None:
        self.channel = channel

    def inbound_target(self, peer, session_id):
        return self.channel, "alice"

    def inbound_open(self, peer, session_id):
        pass

    def running_with(self, peer, session_id=None):
        return False

    def inbound_delivered(self, peer, nbytes, duplicate):
        pass

    def inbound_refused(self, peer, code):
        pass


def setup(ledger_mib: int = 64, journal=None, idle_seconds: float = 30.0):
    """A channel of session SID at bob with its budget on a ledger of ``ledger_mib`` per peer; the servicer."""
    connector = SimpleNamespace(config=SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=5.0)))
    ch = GrpcChannel(SID, "bob", ROLES, None, connector, journal=journal)
    ledger = InboundLedger(Limits(inbound_mib_per_peer=ledger_mib, inbound_mib_total=4 * ledger_mib), "bob")
    ch.budget = InboundBudget(TrafficEnvelope(16 * MIB, 256 * MIB, 1000), SID, ledger, ROLES)
    servicer = MailboxServicer(Host(ch), 16 * MIB, CallQuotas(Limits(), "bob"), idle_seconds=idle_seconds)
    return ch, ledger, servicer


def envelopes(tag: str, data: bytes, type_name: str = INTS) -> list[tpb.Envelope]:
    n = max(1, -(-len(data) // CHUNK))
    return [
        tpb.Envelope(
            session_id=SID,
            tag=tag,
            type_name=type_name,
            chunk_index=i,
            chunk_count=n,
            total_size=len(data),
            data=data[i * CHUNK : (i + 1) * CHUNK],
        )
        for i in range(n)
    ]


class Sender:
    """The request iterator of one Deliver call: its message, then -- once the server asks for more, i.e. it
    has read the whole message -- ``asked`` is set and the call stays open until ``release`` (end of call)."""

    def __init__(self, envs: list[tpb.Envelope]) -> None:
        self.envs = envs
        self.asked = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self):
        for env in self.envs:
            yield env
        self.asked.set()
        await self.release.wait()


async def deliver(servicer: MailboxServicer, envs: list[tpb.Envelope]) -> tpb.Ack:
    async def gen():
        for env in envs:
            yield env

    return await asyncio.wait_for(servicer.Deliver(gen(), Context()), 30)


async def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        await asyncio.sleep(0.005)


def held_by_server(snapshot: tracemalloc.Snapshot) -> int:
    """Bytes allocated by smcdp/net/server.py and still held."""
    return sum(
        s.size
        for s in snapshot.filter_traces([tracemalloc.Filter(True, "*smcdp/net/server.py")]).statistics("filename")
    )


def test_copies_of_a_received_message_are_judged_by_their_digest_and_not_held():
    """Eight copies of a 1 MiB message already received, each left open after its last chunk: the server held
    each in full, charged nothing, and waited for ever for the calls to end (the review's 16 copies: 64 MiB
    against an 8 MiB ledger).  Now each is hashed as it arrives, nothing of it is held, the ledger is
    unchanged, and each is acknowledged as a duplicate once its call ends."""
    data = pb.Ints(values=[1 << 40] * 200_000).SerializeToString()  # 1.2 MB
    assert len(data) > 4 * CHUNK  # several chunks

    async def main():
        ch, ledger, servicer = setup()
        first = await deliver(servicer, envelopes("m", data))
        assert not first.duplicate and first.bytes == len(data)
        held = ledger.held("alice")
        senders = [Sender(envelopes("m", data)) for _ in range(8)]
        tracemalloc.start()
        try:
            calls = [asyncio.ensure_future(servicer.Deliver(s(), Context())) for s in senders]
            await until(lambda: all(s.asked.is_set() for s in senders), "every copy read whole")
            in_server = held_by_server(tracemalloc.take_snapshot())
        finally:
            tracemalloc.stop()
        assert in_server < len(data), f"the server holds {in_server} bytes for 8 copies of {len(data)}"
        assert ledger.held("alice") == held
        for s in senders:
            s.release.set()
        acks = await asyncio.wait_for(asyncio.gather(*calls), 30)
        assert all(a.duplicate and a.bytes == len(data) for a in acks)
        assert ledger.held("alice") == held == message_cost("m", len(data)) and ch.inbound_duplicates == 8
        # a different message under the same tag is still refused, by its digest
        with pytest.raises(Aborted) as ei:
            await deliver(servicer, envelopes("m", pb.Ints(values=[1]).SerializeToString()))
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT and "second, different message" in ei.value.details

    asyncio.run(main())


def test_a_deliver_left_open_after_its_message_is_ended_after_call_idle_seconds():
    """A Deliver bound to a live session waited without a bound for its sender to close it after the message
    (the copy, its buffer and its call slot held as long as the sender liked).  Now it is ended
    (FAILED_PRECONDITION naming limits.call_idle_seconds); a new message's charge goes back, nothing is stored."""
    data = pb.Ints(values=[7] * 10).SerializeToString()

    async def main():
        ch, ledger, servicer = setup(idle_seconds=0.5)
        await deliver(servicer, envelopes("m", data))
        held = ledger.held("alice")
        for tag in ("m", "n"):  # a copy of a received message; a new one
            sender = Sender(envelopes(tag, data))
            with pytest.raises(Aborted) as ei:
                await asyncio.wait_for(servicer.Deliver(sender(), Context()), 30)
            assert ei.value.code == grpc.StatusCode.FAILED_PRECONDITION, ei.value
            assert "limits.call_idle_seconds" in ei.value.details and sender.asked.is_set()
            assert ledger.held("alice") == held
        assert not ch.holds("alice", "n") and servicer.quotas.calls("alice") == 0

    asyncio.run(main())


def test_a_copy_that_only_its_bytes_can_judge_is_held_charged_or_judged_by_its_digest(tmp_path):
    """A resend of a type with fresh randomness (Blobs) in a session with a journal may differ from the held
    message in that randomness only, which only its bytes tell: it is held whole -- charged to the sender's
    ledger while it is, the charge given back once it is judged.  When the ledger has no room it is judged by
    its digest alone: an identical copy is still a duplicate; one that differs is refused RESOURCE_EXHAUSTED
    (the party cannot compare it now), never taken for a rewrite."""

    def blobs(*values: bytes) -> bytes:
        return pb.Blobs(values=list(values)).SerializeToString()

    data = blobs(b"a" * 600_000, b"b" * 600_000)
    other_randomness = blobs(b"c" * 600_000, b"d" * 600_000)  # the same but for the fresh field's values
    cost = message_cost("m", len(data))

    async def main():
        ch, ledger, servicer = setup(ledger_mib=4, journal=FileJournal(tmp_path / "journal.log"))
        await deliver(servicer, envelopes("m", data, BLOBS))
        assert ledger.held("alice") == cost
        sender = Sender(envelopes("m", data, BLOBS))
        call = asyncio.ensure_future(servicer.Deliver(sender(), Context()))
        await until(sender.asked.is_set, "the copy read whole")
        assert ledger.held("alice") == 2 * cost  # held, and charged while it is
        sender.release.set()
        assert (await asyncio.wait_for(call, 30)).duplicate
        assert ledger.held("alice") == cost
        ack = await deliver(servicer, envelopes("m", other_randomness, BLOBS))
        assert ack.duplicate and ledger.held("alice") == cost  # fresh randomness only: a duplicate
        with pytest.raises(Aborted) as ei:
            await deliver(servicer, envelopes("m", blobs(b"a" * 600_000), BLOBS))  # says something else
        assert ei.value.code == grpc.StatusCode.INVALID_ARGUMENT
        # fill alice's ledger: a copy that needs its bytes finds no room for them
        ledger.charge("alice", ledger.per_peer - ledger.held("alice"))
        full = ledger.held("alice")
        ack = await deliver(servicer, envelopes("m", data, BLOBS))
        assert ack.duplicate and ledger.held("alice") == full  # identical: its digest says so
        with pytest.raises(Aborted) as ei:
            await deliver(servicer, envelopes("m", other_randomness, BLOBS))
        assert ei.value.code == grpc.StatusCode.RESOURCE_EXHAUSTED, ei.value
        assert "limits.inbound_mib_per_peer" in ei.value.details and ledger.held("alice") == full
        assert ch.holds("alice", "m") and servicer.quotas.calls("alice") == 0

    asyncio.run(main())


def test_empty_messages_are_charged_their_bookkeeping():
    """3,000 empty messages under 250-character tags were charged 0 bytes (the ledgers saw nothing; the party held
    ~1.2 KB of memory and ~0.4 KB of journal for each).  Each now costs message_cost: a ledger of 1 MiB refuses
    them after a few hundred, naming limits.inbound_mib_per_peer; the session's own byte budget counts bytes."""
    ledger = InboundLedger(Limits(inbound_mib_per_peer=1, inbound_mib_total=4), "bob")
    budget = InboundBudget(TrafficEnvelope(MIB, 8 * MIB, 10_000), SID, ledger, ROLES)
    admitted = 0
    with pytest.raises(ResourceExhausted, match=re.escape("limits.inbound_mib_per_peer")):
        for i in range(3000):
            tag = f"t{i:06d}-" + "x" * 240
            budget.settle("alice", tag, budget.admit("alice", tag, 0), stored=True)
            admitted += 1
    tag_cost = message_cost("t000000-" + "x" * 240, 0)
    assert admitted == MIB // tag_cost and ledger.held("alice") == admitted * tag_cost
    assert tag_cost > 1500 and budget.bytes_charged == 0
    budget.close()
    assert ledger.held() == 0


def test_an_empty_message_through_the_server_is_charged():
    async def main():
        _, ledger, servicer = setup()
        ack = await deliver(servicer, envelopes("stop", b"", pb.Flag.DESCRIPTOR.full_name))
        assert not ack.duplicate and ack.bytes == 0
        assert ledger.held("alice") == message_cost("stop", 0) > 0

    asyncio.run(main())
