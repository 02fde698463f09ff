"""Checkpoints and journals (smcdp.runtime.durability.checkpoint) and replay through a journaled Channel."""

from __future__ import annotations

import asyncio
import os
import stat

import pytest

from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives.rng import Randomness
from smcdp.runtime.chaos import ChaosAction
from smcdp.runtime.durability.checkpoint import Checkpoint, CheckpointError
from smcdp.runtime.durability.journal import FileJournal
from smcdp.v1 import messages_pb2 as pb


def _create(tmp_path, **kw):
    args = dict(session_id="s-1", protocol="p", roles={"a": "alice", "b": "bob"}, params={"x": 1},
                timeout_seconds=60.0, seed=None, initiator="alice", role="a", randomness=Randomness.fresh(),
                inputs={})
    args.update(kw)
    return Checkpoint.create(tmp_path, **args)


def test_checkpoint_files_are_private_and_round_trip(tmp_path):
    root = Randomness.fresh()
    data = tmp_path / "A.npy"
    data.write_bytes(b"x" * 10)
    cp = _create(tmp_path, randomness=root, inputs={"data": str(data)})
    assert stat.S_IMODE(os.stat(cp.dir).st_mode) == 0o700
    for name in ("checkpoint.json", "root.key"):
        assert stat.S_IMODE(os.stat(cp.dir / name).st_mode) == 0o600
    cp.journal.record_inbound("b", "t1", "smcdp.v1.Ints", b"\x01")
    assert stat.S_IMODE(os.stat(cp.dir / "journal.log").st_mode) == 0o600
    cp.set_state("running")
    cp.close()
    again = Checkpoint.load(cp.dir)
    assert again.meta["state"] == "running" and again.meta["role"] == "a"
    assert again.randomness().key == root.key and not again.randomness().seeded
    again.check_inputs({"data": str(data)})
    data.write_bytes(b"y" * 11)
    with pytest.raises(CheckpointError, match="inputs changed"):
        again.check_inputs({"data": str(data)})
    assert [c.session_id for c in Checkpoint.scan(tmp_path)] == ["s-1"]
    again.remove()
    assert not cp.dir.exists() and Checkpoint.scan(tmp_path) == []


def test_checkpoint_refuses_duplicates_damage_and_unreplayable_roots(tmp_path):
    _create(tmp_path)
    with pytest.raises(CheckpointError, match="already"):
        _create(tmp_path)
    with pytest.raises(ValueError):
        _create(tmp_path, session_id="s-2", randomness=Randomness.system())
    (tmp_path / "s-1.d" / "checkpoint.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        Checkpoint.load(tmp_path / "s-1.d")
    (tmp_path / "s-1.d" / "checkpoint.json").write_text('{"kind": "other"}')
    with pytest.raises(CheckpointError, match="not a version"):
        Checkpoint.load(tmp_path / "s-1.d")


def test_journal_survives_reopening_and_drops_a_torn_tail(tmp_path):
    path = tmp_path / "journal.log"
    j = FileJournal(path)
    j.record_inbound("b", "x/0", "smcdp.v1.Ints", b"in0")
    j.record_outbound("b", "y/0", "smcdp.v1.Ints", b"out0")
    j.mark_delivered("b", "y/0")
    j.record_outbound("b", "y/1", "smcdp.v1.Ints", b"out1")
    j.close()
    good = path.stat().st_size
    with open(path, "ab") as f:                   # a crash in the middle of the next record
        f.write(b"\x01\x00\x00\x00\x20\x00\x00")
    j2 = FileJournal(path)
    assert path.stat().st_size == good            # the torn tail is cut off
    assert list(j2.inbound()) == [("b", "x/0", "smcdp.v1.Ints", b"in0")]
    assert j2.outbound("b", "y/0") == ("smcdp.v1.Ints", b"out0") and j2.delivered("b", "y/0")
    assert j2.outbound("b", "y/1") == ("smcdp.v1.Ints", b"out1") and not j2.delivered("b", "y/1")
    assert j2.outbound("b", "nope") is None
    # a flipped byte in a message is detected as the end of the good journal, never replayed
    j2.close()
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    path.write_bytes(bytes(raw))
    j3 = FileJournal(path)
    assert j3.outbound("b", "y/1") is None and j3.delivered("b", "y/0")


async def _ping_pong(ch, value: int, sends: list):
    if ch.role == "a":
        await ch.send("b", "ping", pb.Ints(values=[value]))
        sends.append("ping")
        got = await ch.recv("b", "pong", pb.Ints)
        return list(got.values)
    got = await ch.recv("a", "ping", pb.Ints)
    await ch.send("a", "pong", pb.Ints(values=[v + 1 for v in got.values]))
    return list(got.values)


def test_a_journaled_channel_replays_what_it_sent_and_received(tmp_path):
    """A replayed role gets its received messages from the journal and re-sends the old bytes, not new ones."""
    roles = {"a": "alice", "b": "bob"}
    net = InMemoryNetwork(roles, journals={"a": FileJournal(tmp_path / "a.log"), "b": FileJournal(tmp_path / "b.log")})
    out = asyncio.run(net.run({"a": lambda ch: _ping_pong(ch, 41, []), "b": lambda ch: _ping_pong(ch, 0, [])}))
    assert out == {"a": [42], "b": [41]}

    # replay a alone, asked to send a *different* value: the journal wins and nothing leaves
    replay = InMemoryNetwork(roles, journals={"a": FileJournal(tmp_path / "a.log")})
    ch = replay.channels["a"]
    assert asyncio.run(_ping_pong(ch, 99, [])) == [42]
    assert replay.transcript == [] and ch.replayed_sends == 1

    # a journal whose ping was recorded but never acknowledged sends the *old* bytes again
    j = FileJournal(tmp_path / "c.log")
    j.record_outbound("b", "ping", "smcdp.v1.Ints", pb.Ints(values=[7]).SerializeToString())
    again = InMemoryNetwork(roles, journals={"a": j})
    got = asyncio.run(again.run({"a": lambda ch: _ping_pong(ch, 8, []), "b": lambda ch: _ping_pong(ch, 0, [])}))
    assert got == {"a": [8], "b": [7]}


def test_replay_refuses_a_diverging_message_type(tmp_path):
    j = FileJournal(tmp_path / "j.log")
    j.record_outbound("b", "t", "smcdp.v1.Flag", b"\x08\x01")
    net = InMemoryNetwork({"a": "alice", "b": "bob"})
    ch = net.channels["a"]
    ch.journal = j
    with pytest.raises(InvalidMessage, match="diverged"):
        asyncio.run(ch.send("b", "t", pb.Ints(values=[1])))


def test_chaos_action_syntax():
    a = ChaosAction.parse("kill:trent:round=3")
    assert (a.action, a.party, a.round, a.after, a.restart) == ("kill", "trent", 3, None, True)
    b = ChaosAction.parse("kill:bob:after=2.5,restart=no")
    assert (b.after, b.restart) == (2.5, False)
    c = ChaosAction.parse("stop:alice:round=1,for=20")
    assert (c.action, c.duration) == ("stop", 20.0)
    for bad in ("kill:trent", "boom:trent:round=1", "kill:trent:round=1.5", "kill:trent:when=3",
                "stop:bob:round=1,restart=no", "kill:bob:round=1,colour=red", "stop:bob:round=1,for=0"):
        with pytest.raises(InvalidMessage):
            ChaosAction.parse(bad)
