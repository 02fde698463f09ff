"""Issue 24 without a network: resume limits, journals against envelopes, retention, the
refusal throttle, the approval wait, and a resumed session's budget."""

from __future__ import annotations

import os
import time
from types import SimpleNamespace

import pytest

from smcdp.errors import SmcdpError
from smcdp.net.limits import InboundBudget, Limits, TrafficEnvelope
from smcdp.primitives.rng import Randomness
from smcdp.runtime.durability.checkpoint import Checkpoint
from smcdp.runtime.durability.retention import sweep
from smcdp.runtime.governance.audit import RefusalThrottle
from smcdp.runtime.limits import approval_wait_until, begin_by, charge_journal, check_journal, check_resume
from smcdp.runtime.states import Phase


class _S:
    """A live session as the limits see it: its initiator and its phase."""

    def __init__(self, initiator, phase=Phase.PREPARED):
        self.initiator, self.lifecycle = initiator, SimpleNamespace(phase=phase)


def _meta(**kw):
    m = {"session_id": "s", "restarts": 0, "deadline_epoch": 1000.0, "began_epoch": 900.0}
    m.update(kw)
    return m


def test_restarts_count_against_the_party_that_caused_them():
    """A participant whose Abort UNAVAILABLE fails the session again and again used up the restarts of every
    party: now each party's failures have their own max_restarts, and the refusal names whose they were."""
    lim = Limits(max_restarts=2)
    failed_by = lambda who, **kw: _meta(state="failed", error={"code": "UNAVAILABLE", "origin": who}, **kw)  # noqa: E731
    by = {"mallory": 2, "bob": 1}
    check_resume([], "alice", failed_by("carol", restarts=3, restarts_by=by), lim, "bob", now=999.0)
    with pytest.raises(SmcdpError, match="after failures of 'mallory'") as ei:
        check_resume([], "alice", failed_by("mallory", restarts=3, restarts_by=by), lim, "bob", now=999.0)
    assert ei.value.rule == "limits.max_restarts"
    # a restore after this party's own process ended counts against this party
    check_resume(None, "alice", _meta(state="running", restarts=3, restarts_by=by), lim, "bob", now=999.0)
    with pytest.raises(SmcdpError, match="after failures of 'bob'"):
        check_resume(
            None, "alice", _meta(state="running", restarts=3, restarts_by=dict(by, bob=2)), lim, "bob", now=999.0
        )


def test_check_resume_counts_restarts_the_deadline_and_slots():
    lim = Limits(pending_per_peer=2, pending_total=3, max_restarts=2)
    check_resume([], "alice", _meta(), lim, "bob", now=999.0)
    with pytest.raises(SmcdpError) as ei:
        check_resume([], "alice", _meta(restarts=2), lim, "bob", now=999.0)
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "limits.max_restarts"
    with pytest.raises(SmcdpError) as ei:
        check_resume([], "alice", _meta(), lim, "bob", now=1000.0)
    assert ei.value.code == "DEADLINE_EXCEEDED" and ei.value.rule == "deadline" and "not renew" in str(ei.value)
    never_began = _meta(created=0.0, timeout_seconds=100.0)
    del never_began["began_epoch"]  # its timeout starts at its first Begin: created + approval wait + timeout
    lim = Limits(pending_per_peer=2, pending_total=3, max_restarts=2, approval_timeout_seconds=5000.0)
    check_resume([], "alice", never_began, lim, "bob", now=5099.0)
    with pytest.raises(SmcdpError) as ei:
        check_resume([], "alice", never_began, lim, "bob", now=5100.0)
    assert ei.value.rule == "deadline"
    for live in ([_S("alice"), _S("alice")], [_S("carol"), _S("dave"), _S("erin")]):
        with pytest.raises(SmcdpError) as ei:
            check_resume(live, "alice", _meta(), lim, "bob", now=999.0)
        assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "limits.pending"
    check_resume([_S("alice"), _S("alice", Phase.RUNNING)], "alice", _meta(), lim, "bob", now=999.0)
    check_resume(None, "alice", _meta(), lim, "bob", now=999.0)  # a restore takes no new slot


def test_a_journal_counts_against_the_envelope():
    env = TrafficEnvelope(message_bytes=100, session_bytes=250, tags=3)
    budget = InboundBudget(env, "s")
    assert charge_journal(budget, [("a", "t1", 100), ("a", "t2", 100)]) == 200
    with pytest.raises(SmcdpError) as ei:  # 60 more would pass 250
        budget.admit("a", "t3", 60)
    assert ei.value.code == "RESOURCE_EXHAUSTED"
    assert budget.admit("a", "t1", 100) is None  # a journaled message is a duplicate, not a new charge
    with pytest.raises(SmcdpError) as ei:
        check_journal(InboundBudget(env, "s"), [("a", "t1", 100), ("a", "t2", 100), ("a", "t3", 100)])
    assert ei.value.rule == "envelope" and "already holds" in str(ei.value)


def test_begin_waits_the_grace_or_while_an_operator_decides():
    lim = Limits(proposal_grace_seconds=120.0, approval_timeout_seconds=3600.0)
    assert begin_by(10_000.0, 0.0, lim, own=False) == 120.0
    assert begin_by(60.0, 0.0, lim, own=False) == 60.0  # never past the deadline alone
    until = approval_wait_until(0.0, lim, own=False, now=500.0)
    assert until == 500.0 + 120.0  # a notice keeps it a grace longer
    assert begin_by(60.0, 0.0, lim, own=False, extended=until) == until
    assert approval_wait_until(0.0, lim, own=False, now=3590.0) == 3600.0  # capped by the approval timeout
    assert approval_wait_until(0.0, lim, own=True, now=5.0) == 3600.0
    assert begin_by(100.0, 0.0, lim, own=True) == 130.0


def _checkpoint(d, sid, state, **fields):
    cp = Checkpoint.create(
        d,
        session_id=sid,
        protocol="p",
        roles={"a": "alice", "b": "bob"},
        params={},
        timeout_seconds=60.0,
        seed=None,
        initiator="alice",
        role="b",
        randomness=Randomness.fresh(),
        inputs={},
    )
    cp.journal.record_inbound("a", "t", "smcdp.v1.Blobs", b"x" * 1000)
    cp.set_state(state, **fields)
    cp.close()
    return cp


def test_retention_deletes_ended_sessions_checkpoints_only(tmp_path):
    now = time.time()
    _checkpoint(tmp_path, "old-resumable", "failed", resumable=True, failed_epoch=now - 100)
    _checkpoint(tmp_path, "new-resumable", "failed", resumable=True, failed_epoch=now - 5)
    _checkpoint(tmp_path, "old-live", "running")
    stale = _checkpoint(tmp_path, "orphan", "prepared")  # left by a restore that did not happen
    old = now - 100
    for name in ("old-live", "orphan"):
        os.utime(tmp_path / f"{name}.d" / "checkpoint.json", (old, old))
    gone = sweep(tmp_path, 50.0, live={"old-live"}, now=now)
    assert sorted(g.session_id for g in gone) == ["old-resumable", "orphan"]
    assert all(g.bytes > 1000 for g in gone)
    assert not (tmp_path / "old-resumable.d").exists() and not stale.dir.exists()
    assert (tmp_path / "new-resumable.d").is_dir() and (tmp_path / "old-live.d").is_dir()
    (tmp_path / "broken.d").mkdir()  # unreadable: left to whoever repairs it
    assert sweep(tmp_path, 1.0, live={"old-live"}, now=now + 1000)[0].session_id == "new-resumable"
    assert (tmp_path / "broken.d").is_dir()


def test_the_sweep_takes_a_counted_unbegun_sessions_record_with_its_checkpoint(tmp_path):
    """A resumable session that ended before it began, counted rather than audited in full, keeps its checkpoint
    and record (marked "counted") for a resume; when the retention deletes the checkpoint the record goes from
    disk too (served from memory), while a record audited in full stays."""
    from types import SimpleNamespace

    from smcdp.runtime.records import SessionRecords
    from smcdp.runtime.recovery import Recovery

    now = time.time()
    for sid in ("alice.counted", "alice.in-full"):
        _checkpoint(tmp_path, sid, "failed", resumable=True, failed_epoch=now - 100)
    records = SessionRecords(tmp_path, "bob")
    records.write("alice.counted", {"session_id": "alice.counted", "state": "failed", "ended_before_begin": "counted"})
    records.write("alice.in-full", {"session_id": "alice.in-full", "state": "failed"})
    deleted = []
    core = SimpleNamespace(
        sessions_dir=tmp_path,
        records=records,
        live=set,
        config=SimpleNamespace(limits=SimpleNamespace(failed_retention_seconds=50.0)),
        governor=SimpleNamespace(
            checkpoint_deleted=lambda info, _r: deleted.append(info["session"]), prune=lambda _r: None
        ),
    )
    recovery = Recovery(core)  # type: ignore[arg-type]
    recovery.sweep(live=set())
    assert sorted(deleted) == ["alice.counted", "alice.in-full"]
    assert not records.path("alice.counted").exists() and records.load("alice.counted")["state"] == "failed"
    assert records.path("alice.in-full").exists()
    # resumed later and ended: the new record is what every reader gets, not the one kept in memory
    records.write("alice.counted", {"session_id": "alice.counted", "state": "succeeded"})
    assert records.load("alice.counted")["state"] == "succeeded"


def test_refusals_of_one_peer_are_counted_after_the_first_few():
    t = RefusalThrottle(in_full=3, window=60.0)
    full = [t.refused("eve", "policy", f"s{i}", now=float(i))[1] for i in range(10)]
    assert full == [True] * 3 + [False] * 7
    assert t.refused("bob", "policy", "b1", now=5.0) == ([], True)  # another peer has its own allowance
    assert t.due(now=59.0) == []
    ended, in_full = t.refused("eve", "budget", "s10", now=61.0)  # a new window: the old one's count
    assert in_full is True
    [summary] = ended
    assert summary["peer"] == "eve" and summary["refused"] == 7 and summary["recorded_in_full"] == 3
    assert summary["rules"] == {"policy": 7} and summary["sessions"][0] == "s3" and summary["sessions"][-1] == "s9"
    assert len(summary["sessions"]) <= 5
    for i in range(5):
        t.refused("eve", "policy", f"x{i}", now=62.0 + i)
    [later] = t.flush()
    assert later["refused"] == 3 and t.flush() == []


def test_console_pages_say_whose_approval_a_session_waits_for_and_warn():
    from smcdp.runtime.console import pages

    view = {
        "session_id": "s<1>",
        "protocol": "p",
        "roles": {"a": "alice"},
        "initiator": "trent",
        "state": "prepared",
        "waiting_for": "bob<script>",
        "traffic": {},
    }
    body = pages.sessions_body([view])
    assert "waiting for approval at bob&lt;script&gt;" in body and "<script>" not in body
    assert "waiting for approval" not in pages.sessions_body([dict(view, state="running", waiting_for=None)])
    html = pages.page("Sessions", "alice", "/", body, 0, "now", ["party alice has [policy] open = true: ANY peer"])
    assert '<p class="warn">!!! party alice has [policy] open = true: ANY peer</p>' in html
