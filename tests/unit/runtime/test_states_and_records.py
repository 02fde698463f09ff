"""The session state machine (smcdp.runtime.states) and the one store of session records
(smcdp.runtime.records): legal moves only, the slot each phase holds, what a party reports, and one
behaviour for a missing and for a damaged record wherever it is read."""

from __future__ import annotations

import json
import os
import stat
import threading

import pytest

from smcdp.runtime.records import RecordDamaged, SessionRecords
from smcdp.runtime.states import MOVES, IllegalMove, Lifecycle, Phase, ProposalState, SessionState, Slot


def test_every_phase_is_in_the_state_machine_and_the_ends_are_final():
    assert set(MOVES) == set(Phase)
    assert MOVES[Phase.SUCCEEDED] == MOVES[Phase.FAILED] == frozenset()
    for phase, after in MOVES.items():
        assert phase not in after


def test_a_session_moves_forward_only():
    life = Lifecycle()
    assert life.phase is Phase.PREPARED and life.awaiting_begin and not life.has_run
    assert life.reported is SessionState.PREPARED
    assert life.advance(Phase.BEGUN) and life.reported is SessionState.PREPARED  # not running here yet
    assert life.advance(Phase.RUNNING) and life.has_run and life.reported is SessionState.RUNNING
    with pytest.raises(IllegalMove, match="from running to prepared"):
        life.advance(Phase.PREPARED)
    assert life.advance(Phase.SUCCEEDED) and life.reported is SessionState.SUCCEEDED
    assert not life.advance(Phase.ENDING)  # an abort after the end changes nothing
    assert life.phase is Phase.SUCCEEDED


def test_an_end_decided_frees_the_slot_but_keeps_what_is_reported():
    life = Lifecycle()
    assert life.phase.slot is Slot.PENDING
    life.end_decided()
    assert life.phase is Phase.ENDING and life.phase.slot is None
    assert life.reported is SessionState.PREPARED  # what it was while it winds down
    assert not life.advance(Phase.BEGUN)  # a Begin that crossed the abort: refused quietly
    assert not life.advance(Phase.RUNNING)
    assert life.advance(Phase.FAILED) and life.reported is SessionState.FAILED
    running = Lifecycle()
    running.advance(Phase.BEGUN)
    assert running.phase.slot is Slot.RUNNING  # a Begin admitted counts as running at once
    running.advance(Phase.RUNNING)
    running.end_decided()
    assert running.reported is SessionState.RUNNING and running.has_run


def test_a_session_restored_mid_role_has_run_and_waits_for_no_begin():
    life = Lifecycle(began_before=True)
    assert life.phase is Phase.BEGUN and life.has_run and not life.awaiting_begin
    assert life.reported is SessionState.PREPARED  # until its role replays in this process
    with pytest.raises(IllegalMove):
        life.advance(Phase.PREPARED)


def test_concurrent_moves_leave_one_consistent_phase():
    """The server's loop (an Abort) and the session's thread (its role starting) race: either the role
    starts and the end is decided after, or the end wins and the role never starts -- never both."""
    for _ in range(200):
        life = Lifecycle()
        started = []
        t = threading.Thread(
            target=lambda life=life, started=started: started.append(
                life.advance(Phase.BEGUN) and life.advance(Phase.RUNNING)
            )
        )
        t.start()
        life.end_decided()
        t.join()
        assert life.phase is Phase.ENDING
        assert life.has_run == started[0]


def test_states_read_from_peers_and_files():
    assert SessionState("succeeded").ended and not SessionState("running").ended
    assert SessionState("from-a-newer-version") is SessionState.UNKNOWN
    assert SessionState("running").live and not SessionState("failed").live
    assert ProposalState("approved").open and not ProposalState("expired").open
    assert SessionState.FAILED == "failed"  # records keep plain strings


def _records(tmp_path):
    d = tmp_path / "sessions"
    d.mkdir()
    return SessionRecords(d, "alice")


def test_a_missing_record_is_none_everywhere(tmp_path):
    r = _records(tmp_path)
    assert r.load("bob.s-1") is None and r.peek("bob.s-1") is None and not r.exists("bob.s-1")
    assert r.recent(10) == []


@pytest.mark.parametrize("content", [b"{not json", b"[1, 2]", b"\xff\xfe"])
def test_a_damaged_record_is_named_to_the_operator_and_missing_to_a_peer(tmp_path, content):
    r = _records(tmp_path)
    r.path("bob.s-1").write_bytes(content)
    with pytest.raises(RecordDamaged, match=r"record of session 'bob.s-1' .*bob.s-1.json") as info:
        r.load("bob.s-1")
    assert info.value.code == "DATA_LOSS" and info.value.origin == "alice"
    assert r.peek("bob.s-1") is None
    assert r.recent(10) == []  # listed nowhere, named in the log


def test_records_are_written_owner_only_newest_first(tmp_path):
    r = _records(tmp_path)
    for i in range(3):
        r.write(f"bob.s-{i}", {"session_id": f"bob.s-{i}", "state": "succeeded"})
        os.utime(r.path(f"bob.s-{i}"), (1000 + i, 1000 + i))
    assert stat.S_IMODE(os.stat(r.path("bob.s-0")).st_mode) == 0o600
    assert [x["session_id"] for x in r.recent(2)] == ["bob.s-2", "bob.s-1"]
    assert r.ids_named("s-1") == {"bob.s-1"}
    r.write("bob.s-1", {"session_id": "bob.s-1", "state": "failed"}, overwrite=False)
    assert r.load("bob.s-1")["state"] == "succeeded"  # a published record is never overwritten


def test_a_record_the_disk_refuses_is_kept_in_memory(tmp_path):
    r = _records(tmp_path)
    r.path("bob.s-9").mkdir()  # the write fails as a full or broken disk would: OSError
    kept = r.write("bob.s-9", {"session_id": "bob.s-9", "state": "succeeded"})
    assert "record_write_error" in kept
    assert r.exists("bob.s-9") and r.load("bob.s-9") == kept and "bob.s-9" in r.unwritten
    assert json.loads(json.dumps(kept))["state"] == "succeeded"


def test_a_record_kept_in_memory_only_leaves_no_file_and_the_oldest_goes_first(tmp_path, monkeypatch):
    """A session that ended before it began, counted rather than audited in full (docs/security.md): its record
    is served from memory, its file removed, and at most TRANSIENT_RECORDS of them are held."""
    from smcdp.runtime import records as records_mod

    monkeypatch.setattr(records_mod, "TRANSIENT_RECORDS", 3)
    r = _records(tmp_path)
    for i in range(5):
        sid = f"bob.gone-{i}"
        rec = r.write(sid, {"session_id": sid, "state": "failed"})
        r.transient(sid, rec)
        assert not r.path(sid).exists() and r.load(sid) == rec and r.exists(sid)
    assert not list((tmp_path / "sessions").iterdir())
    assert [i for i in range(5) if r.exists(f"bob.gone-{i}")] == [2, 3, 4]  # the oldest two forgotten
    assert r.load("bob.gone-0") is None and r.ids_named("gone-4") == {"bob.gone-4"} and r.ids_named("gone-0") == set()
    assert r.recent(10) == []  # the newest on disk only: nothing of these
