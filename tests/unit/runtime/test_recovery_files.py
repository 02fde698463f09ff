"""What a party's start-up and retention do with the files of sessions: directories that are no checkpoint,
checkpoints of sessions that had ended, a retention sweep racing a resume, and a checkpoint created twice."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from types import SimpleNamespace

import pytest

import smcdp.runtime.durability.checkpoint as checkpoint_module
from smcdp.errors import DataLoss
from smcdp.primitives.rng import Randomness
from smcdp.runtime.durability.checkpoint import Checkpoint, CheckpointError
from smcdp.runtime.durability.retention import sweep
from smcdp.runtime.records import SessionRecords
from smcdp.runtime.recovery import Recovery

ROLES = {"a": "alice", "b": "bob"}


def _create(sessions, session_id="alice.s-1"):
    return Checkpoint.create(
        sessions,
        session_id=session_id,
        protocol="p",
        roles=ROLES,
        params={},
        timeout_seconds=60.0,
        seed=None,
        initiator="alice",
        role="a",
        randomness=Randomness.fresh(),
    )


class _Recovery(Recovery):
    """Recovery whose admission and reopening are only recorded (what restore decides is under test)."""

    def __init__(self, core):
        super().__init__(core)
        self.reopened: list[str] = []

    def readmit(self, cp, how, before=None):
        pass

    def reopen(self, cp, begun=False, resumed=False):
        self.reopened.append(cp.session_id)
        return SimpleNamespace()


def _core(tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir(mode=0o700)
    done: list[str] = []

    async def wait_ready(s):
        return None

    return SimpleNamespace(
        name="alice",
        sessions_dir=sessions,
        records=SessionRecords(tmp_path / "records", "alice"),
        sessions={},
        wait_ready=wait_ready,
        governor=SimpleNamespace(session_done=lambda sid, record: done.append(sid)),
        done=done,
    )


def test_a_folder_whose_name_is_no_session_id_is_set_aside_and_the_party_starts(tmp_path):
    """An operator's copy of a checkpoint ("alice.s-1 (copy).d") is damaged (its name is not its session's);
    failing "its session" wrote a record under an id no session can have, which raised InvalidMessage out of
    the start-up: the party did not start (once: the folder had been renamed first)."""
    core = _core(tmp_path)
    stray = core.sessions_dir / "alice.s-1 (copy).d"
    stray.mkdir()
    recovery = _Recovery(core)
    asyncio.run(recovery.restore())
    assert not stray.exists() and (core.sessions_dir / "alice.s-1 (copy).damaged").is_dir()
    assert core.done == [] and recovery._failures == []  # no session failed, no peer told
    assert not core.records.directory.exists() or not any(core.records.directory.iterdir())  # no record


@pytest.mark.parametrize("state", ["succeeded", "failed"])
def test_a_checkpoint_of_a_session_that_had_ended_here_is_removed_not_replayed(tmp_path, state):
    """The process died after the session's record was written and before its checkpoint was removed: the
    restart replayed a session its peers had ended, and its end could overwrite the published record."""
    core = _core(tmp_path)
    cp = _create(core.sessions_dir)
    cp.begin({})
    cp.close()
    record = {"session_id": cp.session_id, "state": state, "roles": ROLES, "params": {}, "error": None}
    core.records.write(cp.session_id, record)
    kept = _create(core.sessions_dir, "alice.s-2")  # one that had not ended is restored as before
    kept.begin({})
    kept.close()
    recovery = _Recovery(core)
    asyncio.run(recovery.restore())
    assert recovery.reopened == ["alice.s-2"]
    assert not cp.dir.exists() and kept.dir.exists()
    assert core.records.load(cp.session_id)["state"] == state  # the record stays as published


def test_a_resumably_failed_record_does_not_stop_the_restore_of_a_resumed_session(tmp_path):
    """A resumed session's checkpoint runs again while the record of its earlier failure (resumable) is on
    disk until it ends: that checkpoint is replayed, not removed."""
    core = _core(tmp_path)
    cp = _create(core.sessions_dir)
    cp.begin({})
    cp.close()
    core.records.write(
        cp.session_id,
        {"session_id": cp.session_id, "state": "failed", "resumable": True, "roles": ROLES, "params": {}},
    )
    recovery = _Recovery(core)
    asyncio.run(recovery.restore())
    assert recovery.reopened == [cp.session_id] and cp.dir.exists()


def test_the_sweep_asks_who_is_live_under_the_lock_checkpoint_by_checkpoint(tmp_path):
    """The sweep took the live sessions once, when it was scheduled, then deleted in a worker thread: a resume
    that took a checkpoint up meanwhile had it deleted under it (and its next write re-made the directory
    alone, 0755, without root.key).  Now it asks, under the lock a resume marks its session under, just
    before deleting each checkpoint."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    for sid in ("alice.s-1", "alice.s-2"):
        _create(sessions, sid).close()
    lock = threading.Lock()
    asked: list[bool] = []

    def live():
        asked.append(lock.locked())
        return {"alice.s-2"} if len(asked) > 1 else set()  # s-2 taken up after the sweep began

    gone = sweep(sessions, retention=0.0, live=live, now=1e12, lock=lock)
    assert [g.session_id for g in gone] == ["alice.s-1"] and asked == [True, True]
    assert (sessions / "alice.s-2.d").is_dir()


def test_recovery_sweep_leaves_a_session_being_resumed(tmp_path):
    core = _core(tmp_path)
    core.config = SimpleNamespace(limits=SimpleNamespace(failed_retention_seconds=0.0))
    core.governor = SimpleNamespace(checkpoint_deleted=lambda *a: None, prune=lambda *a: None)
    core.live = lambda: set()
    cp = _create(core.sessions_dir)
    cp.set_state("failed", resumable=True, failed_epoch=0.0)
    cp.close()
    recovery = Recovery(core)
    recovery._resuming.add(cp.session_id)  # what resume_locally marks, under the lock, before its checks
    recovery.sweep(set())
    assert cp.dir.is_dir()
    recovery._resuming.clear()
    recovery.sweep(set())
    assert not cp.dir.exists()


def test_a_checkpoint_whose_directory_was_deleted_is_not_made_again_alone(tmp_path):
    cp = _create(tmp_path)
    cp.remove()
    with pytest.raises(DataLoss, match="cannot update the checkpoint"):
        cp.set_state("running")
    assert not cp.dir.exists()


def test_a_checkpoint_created_meanwhile_by_another_creator_is_left_whole(tmp_path, monkeypatch):
    """Between the existence check and mkdir another creator made the directory: mkdir's FileExistsError was
    handled as a failure of this creation, which removed the directory -- the other's root key and synced
    journal."""
    real = checkpoint_module.durability_key
    winner: list[Checkpoint] = []

    def racing(sessions_dir, owner):
        monkeypatch.setattr(checkpoint_module, "durability_key", real)
        w = _create(tmp_path)
        w.journal.record_inbound("b", "t0", "smcdp.v1.Ints", b"acknowledged")
        w.journal.sync()
        winner.append(w)
        return real(sessions_dir, owner)

    monkeypatch.setattr(checkpoint_module, "durability_key", racing)
    with pytest.raises(CheckpointError, match="already has a checkpoint"):
        _create(tmp_path)
    assert {"checkpoint.json", "journal.log", "root.key"} <= set(os.listdir(winner[0].dir))
    assert Checkpoint.load(winner[0].dir).journal.inbound_sizes()  # its acknowledged record is there
    winner[0].close()


def test_a_resume_that_finished_while_the_sweep_ran_keeps_its_checkpoint(tmp_path):
    """The sweep read a checkpoint's state, then a whole resume ran (marked, reopened, unmarked) before the
    sweep's locked check: the session was in neither the sweep's snapshot of live sessions nor being resumed,
    and its checkpoint was deleted (a review of this change).  The state is read again under the lock."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    cp = _create(sessions)
    cp.set_state("failed", resumable=True, failed_epoch=0.0)
    cp.close()
    resumed: list[bool] = []

    def live():
        if not resumed:  # the resume ran between the sweep's first read and its decision
            again = Checkpoint.load(cp.dir)
            again.set_state("running", resumable=False)
            again.close()
            resumed.append(True)
        return set()

    lock = threading.Lock()

    class Racing:
        def __enter__(self):
            live()  # the resume finished just before the sweep took the lock
            return lock.__enter__()

        def __exit__(self, *exc):
            return lock.__exit__(*exc)

    gone = sweep(sessions, retention=0.0, live=set(), now=time.time() - 1.0, lock=Racing())
    assert gone == [] and cp.dir.is_dir()


def _resumable(tmp_path):
    """A core that admits a resume, a resumably failed checkpoint in it, and a recording Recovery."""
    core = _core(tmp_path)
    core.reopening, core.admitting = set(), {}
    core.admission = lambda initiator: lambda: None
    cp = _create(core.sessions_dir)
    cp.set_state("failed", resumable=True, failed_epoch=0.0)
    cp.close()
    return core, cp, _Recovery(core)


def test_a_resume_waits_for_the_sweeps_lock_off_the_event_loop(tmp_path):
    """The retention sweep holds its lock in a worker thread while it reads a checkpoint again and removes it; a
    resume took the same lock on the event loop, so every session of the party stalled while a sweep removed a
    large folder.  Here another thread holds the lock until the event loop has shown that it runs (a ticker
    advanced five times) -- or for 10 s, if it never does: the resume must wait off the loop, then go on."""
    core, cp, recovery = _resumable(tmp_path)
    ticked, seen = threading.Event(), []

    def hold():
        ticked.wait(10)
        seen.append(ticked.is_set())
        recovery._sweep_lock.release()

    async def main():
        async def ticker():
            for _ in range(5):
                await asyncio.sleep(0.01)
            ticked.set()

        task = asyncio.ensure_future(ticker())
        await recovery.resume_locally(cp)
        await task

    recovery._sweep_lock.acquire()
    holder = threading.Thread(target=hold)
    holder.start()
    asyncio.run(main())
    holder.join()
    assert seen == [True], "the event loop stood still while the resume waited for the sweep's lock"
    assert recovery.reopened == [cp.session_id] and not recovery._resuming and not core.reopening


def test_a_resume_cancelled_while_it_waits_for_the_sweeps_lock_leaves_nothing_marked(tmp_path):
    """Cancelled while the sweep holds the lock, the resume marks nothing once the lock comes free (a session left in
    the resuming set would keep its checkpoint from the retention for ever), and the lock is released again."""
    core, cp, recovery = _resumable(tmp_path)
    ops: list[str] = []

    class Marks(set):
        def add(self, x):
            ops.append("add")
            super().add(x)

        def discard(self, x):
            ops.append("discard")
            super().discard(x)

    recovery._resuming = Marks()
    held, release_now = threading.Event(), threading.Event()

    def hold():
        with recovery._sweep_lock:
            held.set()
            release_now.wait(10)

    async def main():
        task = asyncio.ensure_future(recovery.resume_locally(cp))
        while not core.reopening:  # its first step runs to the wait for the lock without yielding
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        release_now.set()
        for _ in range(1000):  # the deferred step: the lock taken, the marking undone under it, the lock released
            if ops:
                break
            await asyncio.sleep(0.01)

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait(10)
    asyncio.run(main())
    holder.join()
    assert ops == ["discard"] and not recovery._resuming and not core.reopening and recovery.reopened == []
    assert recovery._sweep_lock.acquire(timeout=10)
