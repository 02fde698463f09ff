"""The Governor without a network: admission, approval, expiry, budget settlement, restarts."""

from __future__ import annotations

import asyncio
import json
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path

import pytest

from smcdp.dp.ledger import Ledger
from smcdp.errors import SmcdpError
from smcdp.net.config import TlsConfig
from smcdp.net.limits import Limits
from smcdp.net.server import PendingApproval, SessionSpec
from smcdp.plugins.base import OutputFlow, ProtocolPlugin, SessionSummary
from smcdp.runtime.config import PartyConfig
from smcdp.runtime.governance.audit import read_entries, verify_log
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.governance.gate import Governor
from smcdp.runtime.governance.policy import Policy, ProtocolRules
from smcdp.runtime.governance.views import iso as _iso

ROLES = {"curator": "charlie", "data": "alice"}


class CostPlugin(ProtocolPlugin):
    """role "data" reads alice's inputs; the release to "curator" costs params["epsilon"]."""

    name = "cost"
    coordinating_roles = ("curator",)

    def validate_params(self, params, roles):
        return dict(params)

    def summary(self, params, roles):
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": 2048},
            data_roles=("data",),
            coordinator_roles=("curator",),
            outputs=(OutputFlow("model", ("curator",), ("data",), dp=True),),
            epsilon=params["epsilon"],
            delta=0.0,
        )

    async def run_role(self, role, ch, ctx):
        if ctx.params.get("release"):
            ctx.on_release()
        if ctx.params.get("fail"):
            raise SmcdpError("role failed")
        return {}


RULES = ProtocolRules(
    roles=("data",), initiators=("charlie",), coordinators=("charlie",), release_to=("charlie",), max_epsilon=5.0
)


def _config(tmp_path, approval="auto", total=3.0, **policy) -> PartyConfig:
    return PartyConfig(
        name="alice",
        listen="127.0.0.1:1",
        data_dir=tmp_path / "alice",
        tls=TlsConfig(Path("ca"), Path("c"), Path("k")),
        peers={"charlie": "127.0.0.1:2"},
        policy=Policy(approval=approval, protocols={"cost": replace(RULES, **policy)}),
        budget=BudgetConfig(dataset="alice", epsilon=total),
    )


def _gov(cfg) -> Governor:
    g = Governor(cfg, "alice")
    # this file's plug-ins are not registered: an approval admits a proposal again with them (after a restart too)
    g.plugin_for = lambda name: {"cost": CostPlugin, "exact": ExactPlugin, "free": FreePlugin}[name]()
    g.start()
    return g


def _spec(sid, epsilon=1.0, timeout=60.0, **extra):
    return SessionSpec(sid, "cost", ROLES, {"epsilon": epsilon, **extra}, timeout)


def _ledger(tmp_path):
    return Ledger(tmp_path / "alice" / "ledger.sqlite")


def _events(tmp_path):
    return [e for _, e, _ in read_entries(tmp_path / "alice")]


def test_auto_admission_reserves_and_the_release_point_charges(tmp_path):
    g = _gov(_config(tmp_path))
    spec = _spec("s1", release=True)
    assert g.admit("charlie", spec, CostPlugin(), "data") == spec
    assert _ledger(tmp_path).reservation("alice", "s1").state == "reserved"
    plugin = g.wrap(CostPlugin(), "s1")
    from smcdp.plugins.base import SessionContext

    ctx = SessionContext(session_id="s1", protocol="cost", roles=ROLES, params=spec.params)
    asyncio.run(plugin.run_role("data", None, ctx))
    assert _ledger(tmp_path).reservation("alice", "s1").state == "charged"
    g.session_done("s1", {"state": "succeeded"})
    names = [e["event"] for e in _events(tmp_path)]
    assert names == ["start", "budget-set", "proposal", "reserved", "accepted", "charged", "session-end"]
    charged = _events(tmp_path)[5]
    assert charged["why"].startswith("release point")
    g.stop()
    assert verify_log(tmp_path / "alice").ok


@pytest.mark.parametrize(
    "release, fail, final", [(True, True, "charged"), (False, True, "released"), (False, False, "charged")]
)
def test_after_the_release_point_a_failure_stays_charged(tmp_path, release, fail, final):
    from smcdp.plugins.base import SessionContext

    g = _gov(_config(tmp_path))
    spec = _spec("s1", release=release, fail=fail)
    g.admit("charlie", spec, CostPlugin(), "data")
    ctx = SessionContext(session_id="s1", protocol="cost", roles=ROLES, params=spec.params)
    try:
        asyncio.run(g.wrap(CostPlugin(), "s1").run_role("data", None, ctx))
    except SmcdpError:
        pass
    g.session_done("s1", {"state": "failed" if fail else "succeeded", "error": {"message": "x"}})
    assert _ledger(tmp_path).reservation("alice", "s1").state == final
    g.stop()


def test_the_budget_refuses_with_resource_exhausted_without_saying_what_is_left(tmp_path):
    g = _gov(_config(tmp_path, total=2.5))
    for sid in ("s1", "s2"):
        g.admit("charlie", _spec(sid), CostPlugin(), "data")
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _spec("s3"), CostPlugin(), "data")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "budget"
    assert "party 'alice' refuses session 's3'" in str(ei.value) and "budget" in str(ei.value)
    assert "0.5" not in str(ei.value)  # the remaining budget stays private
    refused = [e for e in _events(tmp_path) if e["event"] == "refused"]
    assert refused[0]["rule"] == "budget" and refused[0]["code"] == "RESOURCE_EXHAUSTED"
    g.stop()


def test_concurrent_admissions_never_overspend(tmp_path):
    g = _gov(_config(tmp_path, total=3.5))
    admitted, refused = [], []

    def go(i):
        try:
            g.admit("charlie", _spec(f"s{i}"), CostPlugin(), "data")
            admitted.append(i)
        except SmcdpError as exc:
            refused.append(exc.code)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(admitted) == 3 and refused == ["RESOURCE_EXHAUSTED"] * 5
    assert str(_ledger(tmp_path).status("alice").reserved_epsilon) == "3"
    g.stop()


def test_operator_approval_waits_durably_then_admits_with_its_whole_timeout(tmp_path):
    cfg = _config(tmp_path, approval="operator")
    g = _gov(cfg)
    spec = _spec("s1", timeout=30.0)
    assert isinstance(g.admit("charlie", spec, CostPlugin(), "data"), PendingApproval)
    assert isinstance(g.admit("charlie", spec, CostPlugin(), "data"), PendingApproval)  # repeated: still waits
    path = tmp_path / "alice" / "proposals" / "s1.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert _ledger(tmp_path).reservation("alice", "s1") is None  # nothing held while waiting
    info = g.show("s1", None)
    assert (info["state"], info["protocol"], info["initiator"], info["role"], info["epsilon"]) == (
        "pending",
        "cost",
        "charlie",
        "data",
        1.0,
    )
    g.stop()
    g = _gov(cfg)  # restart: still pending
    assert [i["session_id"] for i in g.list_sessions(True, {})] == ["s1"]
    assert g.approve("s1")["state"] == "approved"
    assert _ledger(tmp_path).reservation("alice", "s1").state == "reserved"
    g.stop()
    g = _gov(cfg)  # approved survives a restart too
    assert _ledger(tmp_path).reservation("alice", "s1").state == "reserved"
    time.sleep(0.05)
    admitted = g.admit("charlie", spec, CostPlugin(), "data")
    # the session's timeout counts from Begin: the approval's hours are not taken from it (issue 24)
    assert isinstance(admitted, SessionSpec) and admitted.timeout_seconds == 30.0
    assert json.loads(path.read_text())["state"] == "started"
    names = [e["event"] for e in _events(tmp_path)]
    assert names.count("pending") == 1 and "approved" in names and names[-1] == "accepted"
    g.stop()


def test_rejection_expiry_and_withdrawal(tmp_path):
    g = _gov(_config(tmp_path, approval="operator"))
    for sid in ("r", "w"):
        g.admit("charlie", _spec(sid, timeout=3600), CostPlugin(), "data")
    g.approve("r")
    g.reject("r", "not this quarter")
    assert _ledger(tmp_path).reservation("alice", "r").state == "released"
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _spec("r", timeout=3600), CostPlugin(), "data")
    assert ei.value.code == "PERMISSION_DENIED" and "rejected the session: not this quarter" in str(ei.value)
    assert g.withdraw("charlie", "w", "another party refused") is True
    assert g.show("w", None)["state"] == "withdrawn"
    # a proposal expires limits.approval_timeout_seconds after it arrived, whatever the session's timeout
    short = _gov(replace(_config(tmp_path / "short", approval="operator"), limits=Limits(approval_timeout_seconds=1.0)))
    t0 = time.time()
    short.admit("charlie", _spec("e", timeout=3600), CostPlugin(), "data")
    assert short.show("e", None)["expires_at"] <= _iso(t0 + 2.0)
    time.sleep(1.1)
    short.expire()
    with pytest.raises(SmcdpError) as ei:
        short.admit("charlie", _spec("e", timeout=3600), CostPlugin(), "data")
    assert ei.value.code == "DEADLINE_EXCEEDED" and "did not approve" in str(ei.value)
    assert "approval_timeout_seconds" in str(ei.value)
    assert "expired" in [e["event"] for e in _events(tmp_path / "short")]
    short.stop()
    with pytest.raises(SmcdpError, match="only a pending one"):
        g.approve("w")
    with pytest.raises(SmcdpError) as ei:
        g.reject("nope", "x")
    assert ei.value.code == "NOT_FOUND"
    with pytest.raises(SmcdpError) as ei:
        g.reject("e", "")
    assert ei.value.code == "INVALID_ARGUMENT"
    # another proposal under a used id is not the same proposal
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _spec("w", epsilon=2.0, timeout=3600), CostPlugin(), "data")
    assert ei.value.code == "ALREADY_EXISTS"
    events = [e["event"] for e in _events(tmp_path)]
    for name in ("rejected", "released", "withdrawn"):
        assert name in events
    g.stop()


def test_approval_that_does_not_fit_the_budget_is_refused_to_the_operator(tmp_path):
    g = _gov(_config(tmp_path, approval="operator", total=1.5))
    g.admit("charlie", _spec("a"), CostPlugin(), "data")
    g.admit("charlie", _spec("b"), CostPlugin(), "data")
    g.approve("a")
    with pytest.raises(SmcdpError) as ei:
        g.approve("b")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and "remaining budget is epsilon=0.5" in str(ei.value)
    assert g.show("b", None)["state"] == "pending"
    g.stop()


def test_a_restart_releases_reservations_of_sessions_that_no_longer_run(tmp_path):
    cfg = _config(tmp_path)
    g = _gov(cfg)
    g.admit("charlie", _spec("gone"), CostPlugin(), "data")
    g.admit("charlie", _spec("done", release=True), CostPlugin(), "data")
    g.release_point("done")
    _ledger(tmp_path).budget("alice").reserve("operator-hold", 0.5, note="held by hand")
    g.audit.close()  # the process dies: no stop event
    g = _gov(cfg)
    led = _ledger(tmp_path)
    assert led.reservation("alice", "gone").state == "released"
    assert "party restarted" in led.reservation("alice", "gone").reason
    assert led.reservation("alice", "done").state == "charged"  # a charge is never given back
    assert led.reservation("alice", "operator-hold").state == "reserved"  # not this party's to release
    released = [e for e in _events(tmp_path) if e["event"] == "released"]
    assert [e["session"] for e in released] == ["gone"]
    g.stop()


def test_refusals_and_seeds_are_audited_with_their_rule(tmp_path):
    g = _gov(_config(tmp_path))
    spec = replace(_spec("seeded"), seed=7)
    with pytest.raises(SmcdpError):
        g.admit("charlie", spec, CostPlugin(), "data")
    with pytest.raises(SmcdpError):
        g.admit("charlie", _spec("big", epsilon=9.0), CostPlugin(), "data")
    refused = {e["session"]: e["rule"] for e in _events(tmp_path) if e["event"] == "refused"}
    assert refused == {"seeded": "policy.allow_seeded", "big": "policy.cost.max_epsilon"}
    g.stop()


class GroupKeyCostPlugin(CostPlugin):
    """The same session, encrypted under a group (threshold) key."""

    def summary(self, params, roles):
        return replace(super().summary(params, roles), key="threshold", threshold=1)


def test_a_seeded_proposal_under_a_group_key_is_refused_before_anything_is_reserved(tmp_path):
    """Even where seeds are allowed (tests, experiments): a group key's encryption randomness comes from the
    parties' roots, which a known seed makes public; refused at admission, naming the rule, with no
    reservation left behind."""
    cfg = _config(tmp_path)
    g = _gov(replace(cfg, policy=replace(cfg.policy, allow_seeded=True)))
    with pytest.raises(SmcdpError, match="group key cannot be seeded"):
        g.admit("charlie", replace(_spec("grouped"), seed=7), GroupKeyCostPlugin(), "data")
    refused = {e["session"]: e["rule"] for e in _events(tmp_path) if e["event"] == "refused"}
    assert refused == {"grouped": "policy.allow_seeded"}
    assert Ledger(cfg.data_dir / "ledger.sqlite").reservation("alice", "grouped") is None
    g.admit("charlie", replace(_spec("plain"), seed=7), CostPlugin(), "data")  # a single key may be seeded
    g.stop()


def _queue_governor(tmp_path, per_peer: int, total: int):
    cfg = replace(
        _config(tmp_path, approval="operator"),
        peers={"charlie": "127.0.0.1:2", "dave": "127.0.0.1:3"},
        limits=Limits(pending_approvals_per_peer=per_peer, pending_approvals_total=total),
    )
    cfg = replace(
        cfg,
        policy=Policy(
            approval="operator",
            protocols={
                "cost": replace(
                    RULES,
                    initiators=("charlie", "dave"),
                    coordinators=("charlie", "dave"),
                    release_to=("charlie", "dave"),
                )
            },
        ),
    )
    g = _gov(cfg)

    def propose(peer, sid):
        return g.admit(
            peer,
            SessionSpec(sid, "cost", {"curator": peer, "data": "alice"}, {"epsilon": 0.1}, 60.0),
            CostPlugin(),
            "data",
        )

    return g, propose


def test_the_approval_queue_is_bounded_per_peer_and_in_all(tmp_path):
    """300 proposals from one peer waited for the operator; now limits.pending_approvals_*: a peer's
    per-peer limit, when the total leaves every peer the policy admits that much."""
    g, propose = _queue_governor(tmp_path, per_peer=3, total=6)
    for i in range(3):
        assert isinstance(propose("charlie", f"c{i}"), PendingApproval)
    with pytest.raises(SmcdpError) as ei:
        propose("charlie", "c3")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "limits.pending_approvals_per_peer"
    g.reject("c0", "no")  # a decided proposal frees its place
    assert isinstance(propose("charlie", "c3"), PendingApproval)
    assert isinstance(propose("charlie", "c1"), PendingApproval)  # a repeat of a waiting one is not new
    g.stop()


def test_the_approval_queue_is_shared_fairly_among_the_peers_the_policy_admits(tmp_path):
    """Members at their per-peer limit filled the whole queue (4 x 4 of 16) and the next admitted peer found
    none.  A peer's place is its per-peer limit but at most an equal share of the total: with a total of 5
    and two admitted peers each holds at most 2, so charlie at its share leaves dave his."""
    g, propose = _queue_governor(tmp_path, per_peer=3, total=5)
    for i in range(2):
        assert isinstance(propose("charlie", f"c{i}"), PendingApproval)
    with pytest.raises(SmcdpError) as ei:
        propose("charlie", "c2")  # below its per-peer limit of 3, at its share
    assert ei.value.rule == "limits.pending_approvals_per_peer" and "share" in str(ei.value)
    for i in range(2):
        assert isinstance(propose("dave", f"d{i}"), PendingApproval)
    with pytest.raises(SmcdpError):
        propose("dave", "d2")
    g.stop()


# ------------------------------------------------------------------ issue 25: exact sessions per period
class ExactPlugin(CostPlugin):
    """Like CostPlugin, but the output to "curator" is exact unless params say epsilon (then DP)."""

    name = "exact"

    def summary(self, params, roles):
        eps = params.get("epsilon")
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": 2048},
            data_roles=("data",),
            coordinator_roles=("curator",),
            outputs=(OutputFlow("u", ("curator",), ("data",), dp=eps is not None),),
            epsilon=eps,
            delta=0.0,
        )


def _exact_config(tmp_path, approval="auto", **rules) -> PartyConfig:
    r = ProtocolRules(
        roles=("data",),
        initiators=("charlie",),
        coordinators=("charlie",),
        release_to=("charlie",),
        allow_non_dp=True,
        **rules,
    )
    return replace(_config(tmp_path), policy=Policy(approval=approval, protocols={"exact": r}))


def _exact_spec(sid, **params):
    return SessionSpec(sid, "exact", ROLES, params, 60.0)


def test_max_exact_sessions_per_period_counts_from_the_audit_trail_across_restarts(tmp_path):
    """Two exact sessions per day: the third is refused (RESOURCE_EXHAUSTED, naming the rule), DP sessions
    of the same protocol do not count, and a restarted party still counts the two from its audit trail."""
    cfg = _exact_config(tmp_path, max_exact_sessions=2, period_days=1.0)
    g = _gov(cfg)
    for sid in ("e1", "e2"):
        g.admit("charlie", _exact_spec(sid), ExactPlugin(), "data")
    g.admit("charlie", _exact_spec("d1", epsilon=0.5), ExactPlugin(), "data")  # DP: not counted
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _exact_spec("e3"), ExactPlugin(), "data")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "policy.exact.max_exact_sessions"
    assert "at most 2" in str(ei.value) and "last 1 days" in str(ei.value)
    g.stop()
    accepted = [e for e in _events(tmp_path) if e["event"] == "accepted"]
    assert [e.get("exact") for e in accepted] == [True, True, None]
    g = _gov(cfg)  # a restart
    with pytest.raises(SmcdpError, match="max_exact_sessions"):
        g.admit("charlie", _exact_spec("e4"), ExactPlugin(), "data")
    g.stop()
    # a longer window elsewhere, a shorter one here: sessions older than the window no longer count
    old = _gov(
        replace(cfg, policy=Policy(protocols={"exact": replace(cfg.policy.protocols["exact"], period_days=1e-9)}))
    )
    old.admit("charlie", _exact_spec("e5"), ExactPlugin(), "data")
    old.stop()


def test_an_exact_session_that_never_began_gives_its_place_back(tmp_path):
    """Issue 26: a session aborted (or expired) between Propose and Begin computed nothing from the party's
    data, so its place in max_exact_sessions comes back -- also across a restart, from the audit trail.
    Without it, proposals made at once of which one is refused spent every other party's allowance, and any
    initiator could spend it by proposing and aborting.  A session whose role began keeps its place."""
    cfg = _exact_config(tmp_path, max_exact_sessions=1, period_days=1.0)
    g = _gov(cfg)
    g.admit("charlie", _exact_spec("e1"), ExactPlugin(), "data")
    g.session_done("e1", {"state": "failed", "error": {"message": "aborted by charlie"}}, began=False)
    g.admit("charlie", _exact_spec("e2"), ExactPlugin(), "data")  # e1's place
    g.session_done("e2", {"state": "failed", "error": {"message": "a peer failed"}}, began=True)
    with pytest.raises(SmcdpError, match="max_exact_sessions"):
        g.admit("charlie", _exact_spec("e3"), ExactPlugin(), "data")
    g.stop()
    assert [e["session"] for e in _events(tmp_path) if e["event"] == "exact-returned"] == ["e1"]
    # a restart, with two a day: e2 still counts and e1 still does not, so one more is admitted
    g = _gov(
        replace(cfg, policy=Policy(protocols={"exact": replace(cfg.policy.protocols["exact"], max_exact_sessions=2)}))
    )
    g.admit("charlie", _exact_spec("e4"), ExactPlugin(), "data")
    with pytest.raises(SmcdpError, match="max_exact_sessions"):
        g.admit("charlie", _exact_spec("e5"), ExactPlugin(), "data")
    g.stop()


def test_an_approved_exact_session_is_refused_at_start_when_another_took_the_last_slot(tmp_path):
    g = _gov(_exact_config(tmp_path, approval="operator", max_exact_sessions=1))
    assert isinstance(g.admit("charlie", _exact_spec("a"), ExactPlugin(), "data"), PendingApproval)
    assert isinstance(g.admit("charlie", _exact_spec("b"), ExactPlugin(), "data"), PendingApproval)
    g.approve("a")
    g.approve("b")
    assert g.admit("charlie", _exact_spec("a"), ExactPlugin(), "data").session_id == "a"  # started
    with pytest.raises(SmcdpError) as ei:
        g.admit("charlie", _exact_spec("b"), ExactPlugin(), "data")
    assert ei.value.code == "RESOURCE_EXHAUSTED" and ei.value.rule == "policy.exact.max_exact_sessions"
    assert g.proposals.get("b").state == "rejected"
    g.stop()


class FreePlugin(ProtocolPlugin):
    """A protocol that costs nothing and releases nothing exact: admitted without a reservation."""

    name = "free"

    def validate_params(self, params, roles):
        return dict(params)

    async def run_role(self, role, ch, ctx):
        return {}


def test_proposals_aborted_before_begin_are_summarised_per_peer_and_window(tmp_path):
    """Issue 40: 300 accepted-then-aborted proposals of one peer wrote 1,500 fsync-ed audit lines.  A proposal
    accepted with nothing reserved or counted keeps its lines back until Begin: one that ends before it
    (computing nothing from this party's data) is written in full only among the first few of its peer's
    window; the rest are counted in one 'unbegun-summarised' line.  A session that begins is recorded in full,
    its proposal before anything it computes; the chain verifies."""
    cfg = replace(_config(tmp_path), policy=Policy(open=True), budget=None)
    g = _gov(cfg)
    in_full = g.unbegun.throttle.in_full
    aborted = [f"charlie.s{i}" for i in range(in_full + 25)]
    for sid in aborted:
        spec = SessionSpec(sid, "free", ROLES, {}, 60.0)
        assert g.admit("charlie", spec, FreePlugin(), "data") == spec
        g.aborted("charlie", sid, "ABORTED", "never mind")
        g.session_done(sid, {"state": "failed", "initiator": "charlie", "error": {"code": "ABORTED"}}, began=False)
    ran = SessionSpec("charlie.ran", "free", ROLES, {}, 60.0)
    g.admit("charlie", ran, FreePlugin(), "data")
    assert not any(e.get("session") == "charlie.ran" for e in _events(tmp_path))  # kept back until Begin
    g.unbegun.write("charlie.ran")
    assert [e["event"] for e in _events(tmp_path) if e.get("session") == "charlie.ran"] == ["proposal", "accepted"]
    g.session_done("charlie.ran", {"state": "succeeded", "initiator": "charlie"}, began=True)
    g.stop()
    events = _events(tmp_path)
    written = {e["session"] for e in events if e.get("event") == "proposal"}
    assert written == set(aborted[:in_full]) | {"charlie.ran"}
    assert sum(e.get("event") == "abort" for e in events) == in_full
    assert sum(e.get("event") == "session-end" for e in events) == in_full + 1
    (summary,) = [e for e in events if e.get("event") == "unbegun-summarised"]
    assert summary["peer"] == "charlie" and summary["ended_before_begin"] == 25
    assert summary["recorded_in_full"] == in_full and aborted[-1] in summary["sessions"]
    assert verify_log(tmp_path / "alice").ok


def test_a_session_restored_before_begin_is_in_the_audit_trail_with_what_it_is(tmp_path):
    """A proposal accepted with nothing reserved keeps its audit lines back until Begin; a crash before Begin
    lost them, and the restored session then ran with no line saying what it was.  Admitted again at the
    restart, its 'readmitted' line carries the proposal's fields (peer, protocol, roles, parameters)."""
    cfg = replace(_config(tmp_path), policy=Policy(open=True), budget=None)
    g = _gov(cfg)
    spec = SessionSpec("charlie.kept", "free", ROLES, {"n": 3}, 60.0)
    assert g.admit("charlie", spec, FreePlugin(), "data") == spec
    assert not any(e.get("session") == "charlie.kept" for e in _events(tmp_path))  # kept back, then the crash
    again = _gov(cfg)  # the restarted party (the first governor never stopped)
    again.readmit("charlie", spec, FreePlugin(), "data", "restore")
    (line,) = [e for e in _events(tmp_path) if e.get("session") == "charlie.kept"]
    assert line["event"] == "readmitted" and line["how"] == "restore", line
    assert line["peer"] == "charlie" and line["protocol"] == "free" and line["params"] == {"n": 3}, line
    again.stop()


@pytest.mark.parametrize("damage", ["deleted", "emptied", "replaced"])
def test_a_lost_ledger_is_refused_at_start_not_made_anew_with_the_whole_budget(tmp_path, damage):
    """A ledger deleted, emptied or swapped for a fresh one while the audit trail shows charges against it: made anew
    at start (as before, found by a file fuzz), the party had its whole budget again.  The start is refused; the
    operator restores the ledger, or starts a new audit trail explicitly (then the ledger may start anew too)."""
    from smcdp.errors import PreconditionFailed
    from smcdp.runtime.governance.audit import start_new_log

    g = _gov(_config(tmp_path, total=3.0))
    spec = _spec("s1", epsilon=1.0, release=True)
    assert g.admit("charlie", spec, CostPlugin(), "data") == spec
    g.stop()
    path = tmp_path / "alice" / "ledger.sqlite"
    if damage == "deleted":
        path.unlink()
    elif damage == "emptied":
        path.write_bytes(b"")
    else:
        path.unlink()
        Ledger(path).set_budget("bob", 1.0)  # a ledger, but not the one that held alice's dataset
    before = path.read_bytes() if path.exists() else None
    with pytest.raises(PreconditionFailed, match=r"audit line .*not made anew silently"):
        Governor(_config(tmp_path, total=3.0), "alice").start()
    assert (path.read_bytes() if path.exists() else None) == before  # nothing made or changed in its place
    # an explicit new audit trail is the operator's decision to start the budget's history anew
    (tmp_path / "alice" / "audit.jsonl").rename(tmp_path / "alice-audit.jsonl.kept")  # the old trail, put aside
    start_new_log(tmp_path / "alice", "alice", reason="the ledger was lost; the budget starts anew", by="test")
    g = _gov(_config(tmp_path, total=3.0))
    assert _ledger(tmp_path).status("alice").spent_epsilon == 0
    g.stop()


@pytest.mark.parametrize("day2", ["budget", "max_epsilon"])
def test_a_proposal_queued_before_a_restart_is_admitted_again_by_todays_policy_when_approved(tmp_path, day2):
    """Day 1: an open policy with operator approval and no [budget] (releases not charged: the start-up warning
    says so); charlie's proposal of epsilon 4 waits.  Day 2 the operator adds a budget of 3 -- or a policy with
    max_epsilon 2 -- and restarts.  A fresh identical proposal was refused, the queued one approved under day 1's
    decision: it ran and released with no charge (a review).  Now approving re-runs today's checks: the budget
    refuses the reservation (the proposal waits, nothing runs), the policy rejects the proposal with the reason
    its proposer is told."""
    from smcdp.dp.budget import BudgetExceeded
    from smcdp.runtime.governance.policy import OutOfBounds

    base = _config(tmp_path, approval="operator")
    g = _gov(replace(base, budget=None, policy=Policy(approval="operator", open=True)))
    spec = _spec("charlie.s1", epsilon=4.0, release=True)
    assert isinstance(g.admit("charlie", spec, CostPlugin(), "data"), PendingApproval)
    g.stop()
    if day2 == "budget":
        g = _gov(
            replace(
                base, budget=BudgetConfig(dataset="alice", epsilon=3.0), policy=Policy(approval="operator", open=True)
            )
        )
        with pytest.raises(BudgetExceeded):
            g.approve("charlie.s1")
        assert g.show("charlie.s1", None)["state"] == "pending"
        assert isinstance(g.admit("charlie", spec, CostPlugin(), "data"), PendingApproval)  # nothing runs
    else:
        g = _gov(
            replace(
                base,
                budget=None,
                policy=Policy(approval="operator", protocols={"cost": replace(RULES, max_epsilon=2.0)}),
            )
        )
        with pytest.raises(OutOfBounds, match="maximum"):
            g.approve("charlie.s1")
        assert g.show("charlie.s1", None)["state"] == "rejected"
        (line,) = [e for e in _events(tmp_path) if e.get("event") == "rejected" and e.get("session") == "charlie.s1"]
        assert line["by"] == "policy" and "no longer admitted" in line["reason"]
        with pytest.raises(SmcdpError, match="no longer admitted here"):
            g.admit("charlie", spec, CostPlugin(), "data")
    g.stop()


def test_approval_reserves_todays_cost_not_the_one_stored_when_queued(tmp_path):
    """The re-check at approval computed today's cost and then reserved the one stored with the proposal: a
    plug-in whose cost changed across a restart (an upgrade) passed max_epsilon on the new cost while the ledger
    held the old one (a review)."""

    class Doubled(CostPlugin):
        def summary(self, params, roles):
            return replace(super().summary(params, roles), epsilon=2 * params["epsilon"])

    cfg = _config(tmp_path, approval="operator")
    g = _gov(cfg)
    assert isinstance(g.admit("charlie", _spec("charlie.s1", epsilon=1.0), CostPlugin(), "data"), PendingApproval)
    g.stop()
    g = Governor(cfg, "alice")
    g.plugin_for = lambda name: Doubled()  # the upgraded plug-in
    g.start()
    assert g.approve("charlie.s1")["state"] == "approved"
    assert float(_ledger(tmp_path).reservation("alice", "charlie.s1").epsilon) == 2.0
    g.stop()
