"""Checkpoints and journals (smcdp.runtime.durability.checkpoint) and replay through a journaled Channel."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import hmac
import json
import os
import pickle
import stat
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smcdp.errors import InvalidMessage, NoSpace
from smcdp.net.channel import InMemoryNetwork, ReplayDiverged
from smcdp.primitives.rng import Randomness
from smcdp.runtime.chaos import ChaosAction
from smcdp.runtime.durability import journal
from smcdp.runtime.durability.checkpoint import VERSION, Checkpoint, CheckpointDamaged, CheckpointError
from smcdp.runtime.durability.integrity import KEY_FILE, Mac
from smcdp.runtime.durability.journal import FileJournal, JournalDamaged
from smcdp.v1 import messages_pb2 as pb


def _create(tmp_path, **kw):
    args = dict(
        session_id="s-1",
        protocol="p",
        roles={"a": "alice", "b": "bob"},
        params={"x": 1},
        timeout_seconds=60.0,
        seed=None,
        initiator="alice",
        role="a",
        randomness=Randomness.fresh(),
    )
    args.update(kw)
    return Checkpoint.create(tmp_path, **args)


def test_checkpoint_files_are_private_and_round_trip(tmp_path):
    root = Randomness.fresh()
    data = tmp_path / "A.npy"
    data.write_bytes(b"x" * 10)
    cp = _create(tmp_path, randomness=root)
    assert stat.S_IMODE(os.stat(cp.dir).st_mode) == 0o700
    for name in ("checkpoint.json", "root.key", "reserve"):
        assert stat.S_IMODE(os.stat(cp.dir / name).st_mode) == 0o600
    cp.journal.record_inbound("b", "t1", "smcdp.v1.Ints", b"\x01")
    assert stat.S_IMODE(os.stat(cp.dir / "journal.log").st_mode) == 0o600
    cp.begin({"data": str(data)})  # the role runs: its inputs are fingerprinted now
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
    meta = tmp_path / "s-1.d" / "checkpoint.json"
    good = meta.read_bytes()
    for bad, why in (
        (b"{not json", "not JSON"),
        (b'{"kind": "other"}', "not an smcdp session checkpoint"),
        (good.replace(b'"state": "prepared"', b'"state": "running"'), "MAC does not verify"),
        (  # the last version's: refused
            good.replace(f'"version": {VERSION}'.encode(), f'"version": {VERSION - 1}'.encode()),
            f"not a version-{VERSION}",
        ),
    ):
        meta.write_bytes(bad)
        with pytest.raises(CheckpointDamaged, match=why) as err:
            Checkpoint.load(tmp_path / "s-1.d", owner="alice")
        assert "alice" in str(err.value) and str(meta) in str(err.value) and err.value.origin == "alice"
    meta.write_bytes(good)
    Checkpoint.load(tmp_path / "s-1.d")


def test_a_damaged_checkpoint_is_reported_by_the_scan_and_the_others_load(tmp_path):
    for sid in ("s-1", "s-2", "s-3"):
        _create(tmp_path, session_id=sid)
    (tmp_path / "s-2.d" / "checkpoint.json").write_text("{}")
    key = tmp_path / "s-3.d" / "root.key"
    raw = bytearray(key.read_bytes())
    raw[7] ^= 0x10  # one flipped bit in the randomness root
    key.write_bytes(bytes(raw))
    damaged: list = []
    assert [c.session_id for c in Checkpoint.scan(tmp_path, "alice", damaged)] == ["s-1"]
    assert [sid for sid, _ in damaged] == ["s-2", "s-3"]
    assert "checkpoint.json of party alice is damaged" in str(damaged[0][1])
    assert "randomness root" in str(damaged[1][1]) and "alice" in str(damaged[1][1])
    assert all(isinstance(e, CheckpointDamaged) for _, e in damaged)


def test_a_replaced_durability_key_fails_every_checkpoint(tmp_path):
    _create(tmp_path)
    (tmp_path / KEY_FILE).unlink()
    with pytest.raises(CheckpointDamaged, match="MAC does not verify"):
        Checkpoint.load(tmp_path / "s-1.d")
    assert stat.S_IMODE(os.stat(tmp_path / KEY_FILE).st_mode) == 0o600  # a new one, private


def test_inputs_are_fingerprinted_by_content(tmp_path):
    data = tmp_path / "A.npy"
    data.write_bytes(b"x" * 10)
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    cp = _create(tmp_path)
    cp.begin({"data": str(data), "pipe": str(fifo)})  # a pipe is never opened (it would block)
    cp.begin({"data": str(data), "pipe": str(fifo)})  # a replay: unchanged
    st = data.stat()
    data.write_bytes(b"y" * 10)  # same size ...
    os.utime(data, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the same modification time
    with pytest.raises(CheckpointError, match="inputs changed at party alice"):
        cp.check_inputs({"data": str(data)})


# ------------------------------------------------------------------------- journal
def _sample_journal(path) -> list[tuple]:
    """A journal with each kind of record; returns what was written, in order."""
    j = FileJournal(path)
    written = [
        ("in", "b", "x/0", "smcdp.v1.Ints", b"in0"),
        ("out", "b", "y/0", "smcdp.v1.Ints", b"out0"),
        ("ack", "b", "y/0", "", b""),
        ("out", "b", "y/1", "smcdp.v1.Floats", b"\x00" * 40),
        ("in", "b", "x/1", "smcdp.v1.Flag", b"\x08\x01"),
    ]
    for kind, role, tag, type_name, data in written:
        if kind == "in":
            j.record_inbound(role, tag, type_name, data)
        elif kind == "out":
            j.record_outbound(role, tag, type_name, data)
        else:
            j.mark_delivered(role, tag)
    j.sync()
    j.close()
    return written


def _contents(j: FileJournal) -> set[tuple]:
    out = {("in", *r) for r in j.inbound()}
    for (role, tag), (_type_name, _, _) in j._outbound.items():
        out.add(("out", role, tag, *j.outbound(role, tag)))
    out |= {("ack", role, tag, "", b"") for role, tag in j._delivered}
    return out


def test_journal_survives_reopening_and_drops_a_torn_tail_at_any_cut(tmp_path):
    path = tmp_path / "journal.log"
    written = _sample_journal(path)
    full = path.read_bytes()
    j = FileJournal(path)
    assert _contents(j) == set(written)
    assert j.outbound("b", "y/0") == ("smcdp.v1.Ints", b"out0") and j.delivered("b", "y/0")
    assert j.outbound("b", "y/1") == ("smcdp.v1.Floats", b"\x00" * 40) and not j.delivered("b", "y/1")
    assert j.outbound("b", "nope") is None
    j.close()
    ends = [len(journal.FILE_MAGIC)] + [r.offset + r.length for r in journal.scan(full, j._mac).records]
    for cut in range(len(full)):  # a crash in the middle of any record
        path.write_bytes(full[:cut])
        j = FileJournal(path)
        kept = max(e for e in ends if e <= cut) if cut >= ends[0] else 0
        assert path.stat().st_size == max(kept, len(journal.FILE_MAGIC)), cut
        assert _contents(j) == set(written[: ends.index(kept)] if kept else []), cut
        j.close()
    path.write_bytes(full + bytes(300))  # a zero-filled tail (power cut)
    assert _contents(FileJournal(path)) == set(written) and path.stat().st_size == len(full)


def test_every_flipped_bit_of_a_journal_is_named_damage(tmp_path):
    path = tmp_path / "journal.log"
    written = _sample_journal(path)
    full = path.read_bytes()
    mac = FileJournal(path)._mac
    for pos in range(len(full)):
        for bit in (0x01, 0x80):
            raw = bytearray(full)
            raw[pos] ^= bit
            found = journal.scan(bytes(raw), mac)
            assert found.damage, (pos, bit)  # never silently intact, never dropped as a torn tail
            accepted = {
                (journal.KIND_NAMES[r.kind], r.role, r.tag, r.type_name, bytes(raw[r.offset : r.offset + r.length]))
                for r in found.records
            }
            originals = {
                (journal.KIND_NAMES[k], role, tag, t, d)
                for k, role, tag, t, d in [({"in": 1, "out": 2, "ack": 3}[w[0]], *w[1:]) for w in written]
            }
            assert accepted <= originals, (pos, bit)  # never a record read as another
            assert len(found.records) >= len(written) - 2, (pos, bit)  # damage stays local (resync)
    raw = bytearray(full)
    raw[-1] ^= 0x04
    path.write_bytes(bytes(raw))
    with pytest.raises(JournalDamaged, match=r"record 4 \(a message received from role b, tag 'x/1'\): its data") as e:
        FileJournal(path, owner="alice")
    assert "alice" in str(e.value) and str(path) in str(e.value) and e.value.code == "DATA_LOSS"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    edits=st.lists(st.tuples(st.integers(0, 10_000), st.integers(1, 255)), max_size=4),
    cut=st.one_of(st.none(), st.integers(0, 10_000)),
    extra=st.binary(max_size=40),
)
def test_fuzzed_journals_are_intact_or_named_damage(tmp_path, edits, cut, extra):
    path, orig = tmp_path / "fuzz.log", tmp_path / "fuzz.orig"
    if not orig.exists():  # the fixture's directory is shared by the examples
        written = _sample_journal(path)
        orig.write_bytes(path.read_bytes())
        (tmp_path / "written.pickle").write_bytes(pickle.dumps(written))
    written = pickle.loads((tmp_path / "written.pickle").read_bytes())
    raw = bytearray(orig.read_bytes())
    for pos, x in edits:
        raw[pos % len(raw)] ^= x
    if cut is not None:
        raw = raw[: cut % (len(raw) + 1)]
    raw += extra
    path.write_bytes(bytes(raw))
    try:
        j = FileJournal(path)
    except JournalDamaged as exc:  # a named error: which file, what is damaged
        assert exc.damage and str(path) in str(exc)
        return
    assert _contents(j) <= set(written)  # intact: only what was written, as it was written
    j.close()


def test_a_record_from_another_session_does_not_verify(tmp_path):
    a = FileJournal(tmp_path / "a.log", Mac(bytes(range(32)), "journal", "session-a"))
    a.record_inbound("b", "x", "smcdp.v1.Ints", b"1")
    a.close()
    (tmp_path / "b.log").write_bytes((tmp_path / "a.log").read_bytes())
    with pytest.raises(JournalDamaged):
        FileJournal(tmp_path / "b.log", Mac(bytes(range(32)), "journal", "session-b"))


def test_repair_keeps_the_intact_records_and_names_what_was_lost(tmp_path):
    path = tmp_path / "journal.log"
    _sample_journal(path)
    raw = bytearray(path.read_bytes())
    j = FileJournal(path)
    recs = journal.scan(bytes(raw), j._mac).records
    j.close()
    out1 = next(r for r in recs if r.tag == "y/1")
    raw[out1.offset + 3] ^= 0xFF  # the data of a sent message
    path.write_bytes(bytes(raw))
    j = FileJournal(path, repair=True)
    assert [d.tag for d in j.repaired] == ["y/1"]
    assert j.lost_outbound == {("b", "y/1"): ("smcdp.v1.Floats", hashlib.sha256(b"\x00" * 40).hexdigest())}
    assert j.outbound("b", "y/1") is None and j.outbound("b", "y/0") == ("smcdp.v1.Ints", b"out0")
    j.record_inbound("b", "x/2", "smcdp.v1.Ints", b"new")
    j.close()
    again = FileJournal(path)  # the rewritten file is intact
    assert ("in", "b", "x/2", "smcdp.v1.Ints", b"new") in _contents(again)


def test_a_full_disk_fails_the_write_cleanly_and_names_the_party(tmp_path, monkeypatch):
    path = tmp_path / "journal.log"
    j = FileJournal(path, owner="trent")
    j.record_inbound("b", "x/0", "smcdp.v1.Ints", b"in0")
    size = path.stat().st_size
    real = os.pwritev

    def full(fd, parts, offset):
        real(fd, [parts[0][:5]], offset)  # part of the record reaches the file
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwritev", full)
    with pytest.raises(NoSpace, match="no space left at trent") as err:
        j.record_outbound("b", "y/0", "smcdp.v1.Ints", b"out0")
    assert err.value.code == "UNAVAILABLE" and err.value.origin == "trent"
    assert path.stat().st_size == size  # nothing half-written stays behind
    monkeypatch.setattr(os, "pwritev", real)
    j.record_outbound("b", "y/0", "smcdp.v1.Ints", b"out0")  # space is back
    j.close()
    assert _contents(FileJournal(path)) == {
        ("in", "b", "x/0", "smcdp.v1.Ints", b"in0"),
        ("out", "b", "y/0", "smcdp.v1.Ints", b"out0"),
    }


def test_concurrent_syncs_share_one_fsync(tmp_path, monkeypatch):
    j = FileJournal(tmp_path / "journal.log")
    real, calls, entered = os.fsync, [], threading.Event()
    release = threading.Event()

    def slow(fd):
        calls.append(fd)
        entered.set()
        assert release.wait(10)
        real(fd)

    monkeypatch.setattr(os, "fsync", slow)
    j.record_inbound("b", "t/0", "smcdp.v1.Ints", b"0", durable=False)
    first = threading.Thread(target=j.sync)
    first.start()
    assert entered.wait(10)  # a sync is under way ...
    for i in range(1, 6):  # ... while five more records arrive
        j.record_inbound("b", f"t/{i}", "smcdp.v1.Ints", b"x", durable=False)
    waiters = [threading.Thread(target=j.sync) for _ in range(5)]
    for t in waiters:
        t.start()
    release.set()
    for t in [first, *waiters]:
        t.join(10)
    assert len(calls) == 2  # the first sync, then one for all five
    assert j.stats()["journal_syncs"] == 2


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

    # replay a alone: the journal answers its recv and nothing leaves
    replay = InMemoryNetwork(roles, journals={"a": FileJournal(tmp_path / "a.log")})
    ch = replay.channels["a"]
    assert asyncio.run(_ping_pong(ch, 41, [])) == [42]
    assert replay.transcript == [] and ch.replayed_sends == 1

    # a replay asked to send a *different* value (its root or input changed) is refused, naming the party
    replay = InMemoryNetwork(roles, journals={"a": FileJournal(tmp_path / "a.log")})
    with pytest.raises(ReplayDiverged, match="diverged at alice: message 'ping' to b differs") as err:
        asyncio.run(_ping_pong(replay.channels["a"], 99, []))
    assert err.value.origin == "alice" and replay.transcript == []

    # a journal whose ping was recorded but never acknowledged sends it again
    j = FileJournal(tmp_path / "c.log")
    j.record_outbound("b", "ping", "smcdp.v1.Ints", pb.Ints(values=[7]).SerializeToString())
    again = InMemoryNetwork(roles, journals={"a": j})
    got = asyncio.run(again.run({"a": lambda ch: _ping_pong(ch, 7, []), "b": lambda ch: _ping_pong(ch, 0, [])}))
    assert got == {"a": [8], "b": [7]}


def test_a_replay_may_differ_in_encryption_randomness_only(tmp_path):
    """Ciphertexts (fresh obfuscators) may come out differently; their exponent, length, slots and key,
    and every other message type, must not."""
    vec = pb.CiphertextVector(ciphertexts=[b"\x05", b"\x07"], exponent=-8, length=2, key_fingerprint=b"k")
    j = FileJournal(tmp_path / "j.log")
    j.record_outbound("b", "v", "smcdp.v1.CiphertextVector", vec.SerializeToString())
    j.mark_delivered("b", "v")
    ch = InMemoryNetwork({"a": "alice", "b": "bob"}, journals={"a": j}).channels["a"]
    other_randomness = pb.CiphertextVector(ciphertexts=[b"\x09", b"\x0b"], exponent=-8, length=2, key_fingerprint=b"k")
    assert asyncio.run(ch.send("b", "v", other_randomness)) == vec.SerializeToString()  # the journaled bytes
    for changed in (
        pb.CiphertextVector(ciphertexts=[b"\x09", b"\x0b"], exponent=-7, length=2, key_fingerprint=b"k"),
        pb.CiphertextVector(ciphertexts=[b"\x09"], exponent=-8, length=2, key_fingerprint=b"k"),
    ):
        ch = InMemoryNetwork({"a": "alice", "b": "bob"}, journals={"a": j}).channels["a"]
        with pytest.raises(ReplayDiverged):
            asyncio.run(ch.send("b", "v", changed))


def test_a_replay_may_differ_in_nested_encryption_randomness_only(tmp_path):
    """A message that holds ciphertext vectors (a power-iteration round: a Gram, a flag, a contribution) is
    compared field by field: its ciphertexts may come out differently, its flag, exponents, lengths and the
    number of ciphertexts in each vector may not."""

    def round_(g, c, converged=True, exponent=-8):
        return pb.PowerIterationRound(
            gram=pb.CiphertextVector(ciphertexts=g, exponent=exponent, length=2, key_fingerprint=b"k"),
            converged=converged,
            contribution=pb.CiphertextVector(ciphertexts=c, exponent=-8, length=3, key_fingerprint=b"k"),
        )

    sent = round_([b"\x05", b"\x07"], [b"\x03"])
    j = FileJournal(tmp_path / "j.log")
    j.record_outbound("b", "round/0", "smcdp.v1.PowerIterationRound", sent.SerializeToString())
    j.mark_delivered("b", "round/0")

    def replay(msg):
        ch = InMemoryNetwork({"a": "alice", "b": "bob"}, journals={"a": j}).channels["a"]
        return asyncio.run(ch.send("b", "round/0", msg))

    assert replay(round_([b"\x09", b"\x0b"], [b"\x0d"])) == sent.SerializeToString()  # the journaled bytes
    for changed in (
        round_([b"\x05", b"\x07"], [b"\x03"], converged=False),
        round_([b"\x05", b"\x07"], [b"\x03"], exponent=-9),
        round_([b"\x05"], [b"\x03", b"\x07"]),  # one ciphertext moved between the vectors
        round_([b"\x05", b"\x07"], []),
    ):
        with pytest.raises(ReplayDiverged):
            replay(changed)


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
    for bad in (
        "kill:trent",
        "boom:trent:round=1",
        "kill:trent:round=1.5",
        "kill:trent:when=3",
        "stop:bob:round=1,restart=no",
        "kill:bob:round=1,colour=red",
        "stop:bob:round=1,for=0",
    ):
        with pytest.raises(InvalidMessage):
            ChaosAction.parse(bad)


def test_a_burst_of_waiters_shares_one_fsync_and_a_blocking_sync_does_not_linger(tmp_path):
    """Group commit: the syncer lingers COMMIT_DELAY for the rest of a burst, so the records a round writes
    within it are made durable by one fsync (Trent's rounds cost one fsync per message before), and every
    waiter is told only once its record is durable.  A thread that blocks in sync() is not kept waiting."""
    j = FileJournal(tmp_path / "journal.log")
    j.COMMIT_DELAY = 3.0
    try:
        futs = []
        for i in range(6):
            j.record_inbound("b", f"x/{i}", "smcdp.v1.Ints", b"\x00" * 1000, durable=False)
            futs.append(j.durable_future())
        time.sleep(0.3)
        assert not any(f.done() for f in futs)  # lingering: nobody hears "durable" before the fsync
        for f in futs:
            f.result(timeout=30)
        assert j.syncs == 1 and j._synced == j._end
        j.record_inbound("b", "x/6", "smcdp.v1.Ints", b"\x01", durable=False)
        lingering = j.durable_future()
        t0 = time.monotonic()
        j.sync()  # urgent: the syncer stops lingering
        assert time.monotonic() - t0 < j.COMMIT_DELAY and lingering.done() and j.syncs == 2
    finally:
        j.close()


def test_a_cancelled_sync_waiter_does_not_stop_the_journals_syncs(tmp_path, monkeypatch):
    """A Stream call that ends with Acks pending cancels their futures.  Completing a cancelled future
    raised in the syncer thread and killed it, so every later sync of that journal waited for ever (CI: a
    session hung after a peer was killed mid-stream).  The syncer skips cancelled waiters."""
    import smcdp.runtime.durability.journal as journal_module

    real_fsync = os.fsync
    monkeypatch.setattr(journal_module.os, "fsync", lambda fd: (time.sleep(0.2), real_fsync(fd)))
    j = FileJournal(tmp_path / "journal.log")
    try:
        for i in range(3):
            j.record_inbound("b", f"x/{i}", "smcdp.v1.Ints", b"\x00" * 1000, durable=False)
            gone = j.durable_future()
            assert gone.cancel()  # its waiter went away before the sync ended
        j.record_inbound("b", "x/last", "smcdp.v1.Ints", b"\x01", durable=False)
        j.durable_future().result(timeout=10)  # still served
        j.sync()
    finally:
        j.close()


def test_replay_view_reads_ciphertexts_in_a_map_in_key_order():
    """A (plug-in's) message type with a map of ciphertext vectors: its ciphertexts may differ in a replay,
    its keys and the other fields may not, whatever order the map is built in."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from smcdp.net.channel import replay_view

    f = descriptor_pb2.FileDescriptorProto(
        name="test_replay_map.proto", package="smcdp.test", dependency=["smcdp/v1/messages.proto"], syntax="proto3"
    )
    m = f.message_type.add(name="Keyed")
    entry = m.nested_type.add(name="VecsEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=9, label=1)
    entry.field.add(name="value", number=2, type=11, label=1, type_name=".smcdp.v1.CiphertextVector")
    m.field.add(name="vecs", number=1, type=11, label=3, type_name=".smcdp.test.Keyed.VecsEntry")
    m.field.add(name="note", number=2, type=9, label=1)
    descriptor_pool.Default().Add(f)
    cls = message_factory.GetMessageClass(descriptor_pool.Default().FindMessageTypeByName("smcdp.test.Keyed"))

    def keyed(order, cts, note="n"):
        msg = cls(note=note)
        for k in order:
            msg.vecs[k].CopyFrom(pb.CiphertextVector(ciphertexts=cts[k], length=len(cts[k])))
        return replay_view("smcdp.test.Keyed", msg.SerializeToString())

    first = keyed("ab", {"a": [b"\x01"], "b": [b"\x02", b"\x03"]})
    assert keyed("ba", {"a": [b"\x07"], "b": [b"\x08", b"\x09"]}) == first
    assert keyed("ab", {"a": [b"\x01", b"\x02"], "b": [b"\x03"]}) != first  # counts moved between keys
    assert keyed("ab", {"a": [b"\x01"], "b": [b"\x02", b"\x03"]}, note="m") != first


@given(st.text(), st.text(), st.text(), st.one_of(st.none(), st.text(alphabet="0123456789abcdef", max_size=64)))
def test_a_record_header_is_the_json_the_scan_reads(role, tag, type_name, digest):
    """The header is built without json.dumps, byte for byte what json.dumps gave (journals written before
    read the same), and the scan's json.loads reads it back."""
    head = {"r": role, "t": tag, "y": type_name}
    if digest is not None:
        head["h"] = digest
    raw = journal._header_bytes(role, tag, type_name, digest)
    assert raw == json.dumps(head, separators=(",", ":")).encode()
    assert json.loads(raw) == head


@given(st.lists(st.binary(max_size=100), min_size=1, max_size=4))
def test_a_mac_is_hmac_sha256_of_its_parts_truncated(parts):
    key = b"k" * 32
    mac = Mac(key, "journal", "s-1")
    h = hmac.new(hmac.digest(key, b"smcdp/durability/v2/journal/s-1", "sha256"), digestmod=hashlib.sha256)
    for p in parts:
        h.update(p)
    assert mac.tag(*parts) == h.digest()[:16]
    assert mac.verify(h.digest()[:16], b"".join(parts))


def _count_fsyncs(monkeypatch):
    """Count os.fsync calls on directories and on files."""
    real, calls = os.fsync, {"dir": 0, "file": 0}

    def counting(fd):
        calls["dir" if stat.S_ISDIR(os.fstat(fd).st_mode) else "file"] += 1
        real(fd)

    monkeypatch.setattr(os, "fsync", counting)
    return calls


def test_a_new_journal_syncs_its_head_and_directory_and_a_power_cut_then_is_no_damage(tmp_path, monkeypatch):
    """Creating a journal syncs the head's first content, (0, 0), and the directory (the names of the journal
    and its head) -- never an empty head after a power cut, which would not verify; the journal's file header
    is synced with its first records.  A power cut that lost the header is a journal cut short while being
    created, not damage: the head says nothing was made durable."""
    mac = Mac(b"k" * 32, "journal", "s-1")
    calls = _count_fsyncs(monkeypatch)
    counting = os.fsync
    synced: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), counting(fd)))
    j = FileJournal(tmp_path / "journal.log", mac, head=True)
    assert calls == {"dir": 1, "file": 1}
    assert synced == [str(tmp_path / "journal.log.head"), str(tmp_path)]  # the head's content before the names
    assert j.head is not None and j.head.read() == (0, 0)
    j.close(discard=True)  # (no sync: the state a power cut right after creation may leave)
    # the header lost: the file's length without its data (zeros, on a file system that extends a file
    # before writing it), or nothing at all
    for lost in (bytes(len(journal.FILE_MAGIC)), b""):
        (tmp_path / "journal.log").write_bytes(lost)
        again = FileJournal(tmp_path / "journal.log", mac, head=True)
        assert again.repaired == [] and again.stats()["received"] == 0
        again.record_inbound("b", "t/0", "smcdp.v1.Ints", b"\x01")  # synced: the header with it
        assert again.head is not None and again.head.read() == (1, os.path.getsize(tmp_path / "journal.log"))
        again.close()
        reopened = FileJournal(tmp_path / "journal.log", mac, head=True)
        assert [t for _r, t, _y, _d in reopened.inbound()] == ["t/0"]
        reopened.close()
        os.unlink(tmp_path / "journal.log")
        (tmp_path / "journal.log.head").unlink(missing_ok=True)
        FileJournal(tmp_path / "journal.log", mac, head=True).close(discard=True)


def test_a_journal_about_to_be_deleted_is_closed_without_a_sync(tmp_path, monkeypatch):
    """Checkpoint.remove (the session ended for good) closes the journal without syncing it or its head; a
    checkpoint kept for a resume is synced when it closes."""
    kept, gone = _create(tmp_path, session_id="s-kept"), _create(tmp_path, session_id="s-gone")
    for cp in (kept, gone):
        cp.journal.record_inbound("b", "t/0", "smcdp.v1.Ints", b"\x01", durable=False)
    calls = _count_fsyncs(monkeypatch)
    gone.remove()
    assert calls == {"dir": 0, "file": 0} and not gone.dir.exists()
    kept.close()
    assert calls["file"] == 2  # the journal, then its head
    again = Checkpoint.load(kept.dir)
    assert [t for _r, t, _y, _d in again.journal.inbound()] == ["t/0"]
    again.close()


def test_a_failed_fsync_breaks_the_journal_for_good(tmp_path, monkeypatch):
    """Linux may report a lost write-back to one fsync and let the next succeed: a head written after it would
    vouch for records that never reached the disk.  After a failed fsync nothing more is written or synced,
    and the head still says what the last good sync covered."""
    mac = Mac(b"k" * 32, "journal", "s-1")
    j = FileJournal(tmp_path / "journal.log", mac, head=True)
    j.record_inbound("b", "t/0", "smcdp.v1.Ints", b"\x01")
    assert j.head is not None
    good = j.head.read()
    real, failures = os.fsync, [0]

    def once(fd):
        if not failures[0] and not stat.S_ISDIR(os.fstat(fd).st_mode):
            failures[0] += 1
            raise OSError(5, "Input/output error")
        real(fd)

    monkeypatch.setattr(os, "fsync", once)
    with pytest.raises(Exception, match="cannot sync its journal") as first:
        j.record_inbound("b", "t/1", "smcdp.v1.Ints", b"\x02")
    with pytest.raises(type(first.value)):  # the next fsync would succeed: it is not asked
        j.record_inbound("b", "t/2", "smcdp.v1.Ints", b"\x03")
    with pytest.raises(type(first.value)):
        j.sync()
    assert j.head.read() == good
    j.close()
    assert j.head.read() == good


def test_a_head_grown_by_damage_is_whole_again_after_a_repair(tmp_path):
    """Bytes appended to the head: damage, and a repair rewrites the head at its size (it was overwritten in
    place, so the extra bytes stayed and every later open called the repaired journal damaged)."""
    path = tmp_path / "journal.log"
    j = FileJournal(path, head=True)
    j.record_inbound("b", "t/0", "smcdp.v1.Ints", b"\x01")
    j.close()
    head = path.with_name("journal.log.head")
    head.write_bytes(head.read_bytes() + bytes(8))
    with pytest.raises(JournalDamaged, match="does not verify"):
        FileJournal(path, head=True)
    repaired = FileJournal(path, head=True, repair=True)
    assert [d.what for d in repaired.repaired] == ["its head journal.log.head does not verify"]
    repaired.close()
    again = FileJournal(path, head=True)
    assert [t for _r, t, _y, _d in again.inbound()] == ["t/0"] and again.repaired == []
    again.close()


def test_a_new_checkpoint_directory_is_made_durable_in_sessions(tmp_path, monkeypatch):
    """The root key and checkpoint.json are synced, then the new directory (their names) and sessions/ (the
    directory's own name): before, sessions/ was never synced, and a power cut could lose the whole
    directory -- journal records synced in it and acknowledged to the peers included."""
    _create(tmp_path, session_id="s-0").close()  # the party's durability key exists from here on
    real = os.fsync
    synced: list[str] = []
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(os.readlink(f"/proc/self/fd/{fd}")), real(fd)))
    cp = _create(tmp_path, session_id="s-1")
    d = str(cp.dir)
    assert [p.startswith(d + "/") for p in synced[:2]] == [True, True], synced  # the root key, checkpoint.json
    assert synced[-2:] == [d, str(tmp_path)], synced  # then the directory, then sessions/
    assert len(synced) == 4, synced  # no more fsyncs than before: the two files' directory syncs became one
    cp.close()


@pytest.mark.parametrize("cut", ["emptied", "file header only", "zeroed"])
def test_a_head_deleted_and_its_journal_cut_after_the_session_began_is_damage_not_an_empty_journal(tmp_path, cut):
    """journal.log.head deleted and journal.log emptied, cut to its file header or overwritten with zeros: the
    scan finds no record, and a missing head beside an empty journal is what a crash before the first sync
    leaves -- but not after Begin, since the head is made (and its name synced) before a session begins.  The
    three acknowledged records were lost silently (the zeroed file even logged them as a torn tail, "never
    acknowledged"); now it is damage, as when both files are gone."""
    cp = _create(tmp_path)
    for i in range(3):
        cp.journal.record_inbound("b", f"t{i}", "smcdp.v1.Ints", b"secret%d" % i)
    cp.journal.sync()
    cp.begin({})
    cp.close()
    journal = cp.dir / "journal.log"
    size = journal.stat().st_size
    (cp.dir / "journal.log.head").unlink()
    if cut == "emptied":
        os.truncate(journal, 0)
    elif cut == "file header only":
        os.truncate(journal, 16)
    else:
        journal.write_bytes(bytes(size))
    again = Checkpoint.load(cp.dir, owner="alice")
    with pytest.raises(JournalDamaged, match=r"head journal\.log\.head is missing and the journal holds no record"):
        _ = again.journal
    again.repair_journal = True
    assert again.journal.repaired and "holds no record" in again.journal.repaired[0].what
    again.close()
    # before Begin the same files are a journal created just before a crash: not damage
    fresh = _create(tmp_path, session_id="s-2")
    fresh.journal.sync()
    fresh.close()
    (fresh.dir / "journal.log.head").unlink()
    os.truncate(fresh.dir / "journal.log", 0)
    assert Checkpoint.load(fresh.dir).journal.repaired == []


def test_a_journal_deleted_with_its_head_after_the_session_began_is_damage_not_a_new_journal(tmp_path):
    """journal.log and journal.log.head both deleted: the head could not tell (it is gone too) and the journal
    was recreated empty -- the records the peers had been told were durable silently lost.  Both are made
    before a session begins (the channel opens them before Begin), so a checkpoint that says it began names
    their absence as damage; a resume repairs it (the peers send again what it lost).  Before Begin the
    checkpoint cannot tell deletion from a journal not yet made, and a new one is made."""
    cp = _create(tmp_path)
    cp.journal.record_inbound("b", "t1", "smcdp.v1.Ints", b"\x01")
    cp.journal.sync()
    cp.begin({})
    cp.close()
    for name in ("journal.log", "journal.log.head"):
        (cp.dir / name).unlink()
    again = Checkpoint.load(cp.dir, owner="alice")
    with pytest.raises(JournalDamaged, match="both missing although the session had begun") as info:
        _ = again.journal
    assert "alice" in str(info.value) and str(cp.dir / "journal.log") in str(info.value)
    assert not (cp.dir / "journal.log").exists()  # not recreated empty
    again.repair_journal = True
    assert again.journal.repaired and "both missing" in again.journal.repaired[0].what
    again.close()
    # a session that never began: nothing says a journal existed
    fresh = _create(tmp_path, session_id="s-2")
    fresh.close()
    assert not (fresh.dir / "journal.log").exists()
    assert Checkpoint.load(fresh.dir).journal.repaired == []
