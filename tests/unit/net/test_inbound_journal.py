"""A received message is journaled before the role sees it and durable before it is acknowledged,
but the role does not wait for the disk: it works on the message while the journal syncs."""

import asyncio
import concurrent.futures
import threading
from types import SimpleNamespace

import pytest

from smcdp.errors import InvalidMessage
from smcdp.net.grpc_channel import GrpcChannel
from smcdp.runtime.durability.journal import FileJournal
from smcdp.v1 import messages_pb2 as pb


class SlowJournal:
    """Records the order of calls; ``sync`` blocks until the test releases it."""

    def __init__(self) -> None:
        self.events: list[tuple] = []
        self.release = threading.Event()

    def inbound(self):
        return []

    def record_inbound(self, sender_role, tag, type_name, data, durable=True, digest=None):
        self.events.append(("record", tag, durable))

    def sync(self):
        self.events.append(("sync-start",))
        assert self.release.wait(10)
        self.events.append(("sync-done",))

    def durable_future(self):
        fut = concurrent.futures.Future()
        threading.Thread(target=lambda: (self.sync(), fut.set_result(None))).start()
        return fut


def test_the_role_gets_the_message_while_the_journal_syncs_and_the_ack_waits_for_it():
    journal = SlowJournal()
    connector = SimpleNamespace(config=SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=5.0)))

    async def main():
        ch = GrpcChannel("s-1", "bob", {"alice": "party-a", "bob": "party-b"}, None, connector, journal=journal)
        data = pb.Ints(values=[7]).SerializeToString()
        acked = asyncio.ensure_future(
            asyncio.to_thread(ch.deliver_threadsafe, "alice", "t/0", pb.Ints.DESCRIPTOR.full_name, data)
        )
        msg = await asyncio.wait_for(ch.recv("alice", "t/0", pb.Ints), 5)  # the sync cannot have finished
        assert list(msg.values) == [7]
        assert journal.events[0] == ("record", "t/0", False) and ("sync-done",) not in journal.events
        for _ in range(500):  # the delivering thread reaches the (blocked) sync
            if ("sync-start",) in journal.events:
                break
            await asyncio.sleep(0.01)
        assert journal.events == [("record", "t/0", False), ("sync-start",)]
        assert not acked.done()  # no ack before it is durable
        journal.release.set()
        assert await asyncio.wait_for(acked, 5) is True
        assert journal.events[-1] == ("sync-done",)
        # a duplicate is acknowledged at once (it is already durable) and not recorded again
        assert ch.deliver_threadsafe("alice", "t/0", pb.Ints.DESCRIPTOR.full_name, data) is False
        assert [e for e in journal.events if e[0] == "record"] == [("record", "t/0", False)]

    asyncio.run(main())


def test_a_resend_differing_in_encryption_randomness_only_is_a_duplicate(tmp_path):
    """A sender whose journal lost the record of a message it sent recomputes it in a resumed session with
    new encryption randomness.  The receiver keeps the copy it holds and takes the resend for a duplicate;
    a resend that says something else (another exponent, another plaintext type) is still refused."""
    journal = FileJournal(tmp_path / "journal.log")
    connector = SimpleNamespace(config=SimpleNamespace(timeouts=SimpleNamespace(rpc_seconds=5.0)))
    ct = pb.CiphertextVector.DESCRIPTOR.full_name

    def vector(cts: list[bytes], exponent: int = -8) -> bytes:
        return pb.CiphertextVector(ciphertexts=cts, exponent=exponent, length=2).SerializeToString()

    async def main():
        ch = GrpcChannel("s-1", "bob", {"alice": "party-a", "bob": "party-b"}, None, connector, journal=journal)
        assert ch.deliver_threadsafe("alice", "round/0", ct, vector([b"\x01" * 32, b"\x02" * 32])) is True
        again = vector([b"\x03" * 32, b"\x04" * 32])  # the same vector, encrypted afresh
        assert ch.deliver_threadsafe("alice", "round/0", ct, again) is False
        assert ch.inbound_duplicates == 1
        msg = await asyncio.wait_for(ch.recv("alice", "round/0", pb.CiphertextVector), 5)
        assert list(msg.ciphertexts) == [b"\x01" * 32, b"\x02" * 32]  # the first copy kept
        with pytest.raises(InvalidMessage, match="second, different message"):
            ch.deliver_threadsafe("alice", "round/0", ct, vector([b"\x03" * 32, b"\x04" * 32], exponent=-9))
        with pytest.raises(InvalidMessage, match="second, different message"):
            ch.deliver_threadsafe("alice", "round/0", ct, vector([b"\x03" * 32]))  # fewer values
        data = pb.Ints(values=[7]).SerializeToString()
        assert ch.deliver_threadsafe("alice", "t/0", pb.Ints.DESCRIPTOR.full_name, data) is True
        with pytest.raises(InvalidMessage, match="second, different message"):
            ch.deliver_threadsafe("alice", "t/0", pb.Ints.DESCRIPTOR.full_name, pb.Ints(values=[8]).SerializeToString())

    asyncio.run(main())
    journal.close()
