"""Governance across OS processes: budgets under concurrency and kill -9, operator approval through
the CLI (durable across restarts, expiring at the deadline), the demo's contract, start-up warnings."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace

import numpy as np
import pytest

from smcdp.cli import main as cli_main
from smcdp.cli.demo.common import governed
from smcdp.cli.demo.dp_aggregate import demo_dp_aggregate
from smcdp.dp.ledger import Ledger
from smcdp.errors import SmcdpError, Unavailable
from smcdp.net.limits import Limits
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.runtime.governance.audit import read_entries, verify_log
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.local import LocalCluster, spawn_party, stop_party, write_local_deployment

ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
PARAMS = {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.1, "key_bits": 512, "dgk_bits": 512, "dgk_t": 96}


def _data(tmp_path, names=("alice", "bob")):
    rng = np.random.default_rng(5)
    paths = []
    for name, n in zip(names, (50, 70)):
        X = rng.normal(size=(n, 3))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.001
        np.savez(tmp_path / f"{name}.npz", X=X, y=np.where(X @ np.array([1.0, -1.0, 2.0]) > 0, 1, 0))
        paths.append(str(tmp_path / f"{name}.npz"))
    return paths


def _cluster(
    tmp_path,
    *,
    approval: dict | None = None,
    budget=2.0,
    session_seconds=120.0,
    limits: Limits | None = None,
    data_bounds: tuple[tuple[str, int], ...] | None = None,
) -> LocalCluster:
    paths = _data(tmp_path)
    parties = {
        "charlie": {},
        "dave": {},
        "alice": {"dp-aggregate": {"data": paths[0]}},
        "bob": {"dp-aggregate": {"data": paths[1]}},
    }
    options, _ = governed("dp-aggregate", ROLES, PARAMS, initiator="charlie", seed=None)
    for party, how in (approval or {}).items():
        options["policies"][party] = replace(options["policies"][party], approval=how)
    if data_bounds is not None:  # what alice and bob state of their data (docs/governance.md)
        for party in ("alice", "bob"):
            pol = options["policies"][party]
            rules = replace(pol.protocols["dp-aggregate"], data_bounds=data_bounds)
            options["policies"][party] = replace(pol, protocols={"dp-aggregate": rules})
    budgets = {p: BudgetConfig(dataset=p, epsilon=budget, delta=1e-9) for p in ("alice", "bob")}
    return LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp_path / "run",
        data_root=tmp_path / "run",
        session_seconds=session_seconds,
        budgets=budgets,
        limits=limits,
        **options,
    )


def _ledger(cluster, party):
    return Ledger(cluster.data_dir(party) / "ledger.sqlite")


def _start(cluster, sid, timeout=120.0):
    """StartSession at charlie in a thread; returns (thread, outcome dict)."""
    out = {}

    def run():
        try:
            out["record"] = client.start_session(
                cluster.configs["charlie"], "dp-aggregate", ROLES, PARAMS, session_id=sid, timeout=timeout
            )
        except SmcdpError as exc:
            out["error"] = exc

    th = threading.Thread(target=run)
    th.start()
    return th, out


def _wait_pending(cluster, party, sid, timeout=60.0):
    end = time.monotonic() + timeout
    while True:
        if any(i["session_id"] == sid for i in client.list_sessions(cluster.configs[party], pending_only=True)):
            return
        assert time.monotonic() < end, f"{sid} never became pending at {party}"
        time.sleep(0.2)


def _wait_decided(cluster, party, sid, timeout=60.0) -> str:
    """The state of ``sid`` at ``party`` once it is no longer pending (polled, up to ``timeout``)."""
    end = time.monotonic() + timeout
    state = "unknown"
    while True:
        try:
            state = client.show_session(cluster.configs[party], sid)["state"]
        except Unavailable:  # one call lost on a loaded machine: ask again (the party is checked after)
            pass
        if state not in ("pending", "unknown") or time.monotonic() > end:
            return state
        time.sleep(0.2)


def _restart(cluster, party, *, kill: bool):
    proc = cluster.procs[party]
    if kill:
        proc.kill()
        proc.wait(10)
    else:
        assert stop_party(proc) == 0
    log = open(cluster.workdir / f"{party}.log", "ab")  # noqa: SIM115 -- the party process writes to it for its lifetime
    cluster.procs[party] = spawn_party(cluster.configs[party], log_file=log)
    client.wait_healthy(cluster.configs[party], timeout=60)


# ------------------------------------------------------------------ the demo's contract
def test_demo_contract_four_concurrent_sessions_against_two_and_a_half_epsilon(tmp_path):
    paths = _data(tmp_path)
    keep = tmp_path / "keep"
    argv = [
        "demo",
        "dp-aggregate",
        "--data",
        paths[0],
        "--data",
        paths[1],
        "--epsilon",
        "1",
        "--lam",
        "0.1",
        "--key-bits",
        "512",
        "--budget",
        "2.5",
        "--sessions",
        "4",
        "--concurrent",
        "--keep-dir",
        str(keep),
        "--out",
        str(tmp_path / "out.json"),
    ]
    assert cli_main(argv) == 0
    out = json.loads((tmp_path / "out.json").read_text())
    statuses = sorted(s["status"] for s in out["sessions"])
    assert statuses == ["refused", "refused", "released", "released"]
    for s in out["sessions"]:
        assert s["epsilon"] == 1.0
        if s["status"] == "released":
            assert len(s["weights"]) == 3
        else:
            assert "budget" in s["reason"] and "weights" not in s
    first = next(s for s in out["sessions"] if s["status"] == "released")
    assert out["weights"] == first["weights"] and out["session_id"] == first["session_id"]
    for key in ("shares", "shares_mod", "share_modulus", "frac_bits", "bytes_sent", "epsilon", "roles"):
        assert key in out
    for party in ("alice", "bob"):
        assert (keep / party / "audit.jsonl").is_file() and verify_log(keep / party).ok
        st = Ledger(keep / party / "ledger.sqlite").status(party)
        assert (str(st.spent_epsilon), str(st.reserved_epsilon)) == ("2", "0")
        assert out["budgets"][party]["spent_epsilon"] == "2"
    for party in ("charlie", "dave"):
        assert verify_log(keep / party).ok


def test_eight_concurrent_sessions_against_a_budget_for_three(tmp_path):
    paths = _data(tmp_path)
    out = demo_dp_aggregate(
        paths,
        epsilon=1.0,
        lam=0.1,
        key_bits=512,
        budget=3.5,
        sessions=8,
        concurrent=True,
        keep_dir=str(tmp_path / "keep"),
    )
    released = [s for s in out["sessions"] if s["status"] == "released"]
    refused = [s for s in out["sessions"] if s["status"] == "refused"]
    assert len(released) == 3 and len(refused) == 5
    assert all("RESOURCE_EXHAUSTED" in s["reason"] and "budget" in s["reason"] for s in refused)
    for party in ("alice", "bob"):
        st = Ledger(tmp_path / "keep" / party / "ledger.sqlite").status(party)
        assert (str(st.spent_epsilon), str(st.reserved_epsilon), st.n_charges) == ("3", "0", 3)


# ------------------------------------------------------------------ kill -9
def test_kill_minus_nine_between_reservation_and_charge_loses_nothing_and_overspends_nothing(tmp_path):
    # dave approves by hand, and proposals go out in name order (alice, bob, dave): while dave's operator
    # decides, alice and bob hold their reservations and no output can have left them.
    with _cluster(tmp_path, approval={"dave": "operator"}, budget=2.0) as cluster:
        th, out = _start(cluster, "charlie.k-1")
        _wait_pending(cluster, "dave", "charlie.k-1")
        assert _ledger(cluster, "alice").reservation("alice", "charlie.k-1").state == "reserved"
        cluster.procs["alice"].kill()
        cluster.procs["alice"].wait(10)
        assert _ledger(cluster, "alice").reservation("alice", "charlie.k-1").state == "reserved"  # nothing lost
        _restart_after_kill(cluster)
        # alice restored the prepared session from its checkpoint (docs/fault-tolerance.md): it can
        # still begin, so its reservation stays -- released, a release would go unbudgeted
        assert _ledger(cluster, "alice").reservation("alice", "charlie.k-1").state == "reserved"
        assert verify_log(cluster.data_dir("alice")).ok
        assert (
            cli_main(
                ["session", "reject", "charlie.k-1", "--config", str(cluster.configs["dave"]), "--reason", "superseded"]
            )
            == 0
        )
        th.join(60)
        assert out["error"].code == "PERMISSION_DENIED"
        assert "party 'dave'" in str(out["error"]) and "superseded" in str(out["error"])
        # the initiator's abort reaches the restored session: both reservations go back
        for party in ("alice", "bob"):
            end = time.monotonic() + 30
            while (
                _ledger(cluster, party).reservation(party, "charlie.k-1").state == "reserved" and time.monotonic() < end
            ):
                time.sleep(0.2)
            entry = _ledger(cluster, party).reservation(party, "charlie.k-1")
            assert entry.state == "released" and "failed before its release point" in entry.reason, (party, entry)

        # from now on dave's operator approves everything: the budget of 2 admits exactly 2 more
        stop = threading.Event()

        def approver():
            while not stop.is_set():
                try:
                    for item in client.list_sessions(cluster.configs["dave"], pending_only=True):
                        client.approve_session(cluster.configs["dave"], item["session_id"])
                except SmcdpError:
                    pass
                time.sleep(0.2)

        ap = threading.Thread(target=approver, daemon=True)
        ap.start()
        try:
            outcomes = []
            for i in range(3):
                th, out = _start(cluster, f"charlie.k-{i + 2}")
                th.join(120)
                outcomes.append(out)
        finally:
            stop.set()
            ap.join(5)
        assert [("record" in o) for o in outcomes] == [True, True, False]
        assert outcomes[2]["error"].code == "RESOURCE_EXHAUSTED" and "party 'alice'" in str(outcomes[2]["error"])
        st = _ledger(cluster, "alice").status("alice")
        assert (str(st.spent_epsilon), str(st.reserved_epsilon)) == ("2", "0")
        # a charge survives kill -9 too
        cluster.procs["alice"].kill()
        cluster.procs["alice"].wait(10)
        _restart_after_kill(cluster)
        st = _ledger(cluster, "alice").status("alice")
        assert (str(st.spent_epsilon), str(st.reserved_epsilon), st.n_charges) == ("2", "0", 2)
        assert verify_log(cluster.data_dir("alice")).ok


def _restart_after_kill(cluster):
    log = open(cluster.workdir / "alice.log", "ab")  # noqa: SIM115 -- the party process writes to it for its lifetime
    cluster.procs["alice"] = spawn_party(cluster.configs["alice"], log_file=log)
    client.wait_healthy(cluster.configs["alice"], timeout=60)


# ------------------------------------------------------------------ operator approval through the CLI
def test_approve_reject_list_show_through_the_cli_durably_and_expiring(tmp_path, capsys):
    # an approval waits limits.approval_timeout_seconds (a day by default), at the initiator and at alice
    with _cluster(
        tmp_path, approval={"alice": "operator"}, budget=5.0, limits=Limits(approval_timeout_seconds=20.0)
    ) as cluster:
        alice = str(cluster.configs["alice"])
        th, out = _start(cluster, "charlie.a-1")
        _wait_pending(cluster, "alice", "charlie.a-1")
        capsys.readouterr()
        assert cli_main(["session", "list", "--config", alice, "--pending", "--json"]) == 0
        [item] = json.loads(capsys.readouterr().out)
        assert (
            item["session_id"],
            item["state"],
            item["protocol"],
            item["initiator"],
            item["role"],
            item["epsilon"],
        ) == ("charlie.a-1", "pending", "dp-aggregate", "charlie", "party1", 1.0)
        assert item["roles"] == ROLES and item["params"]["epsilon"] == 1.0
        assert cli_main(["session", "show", "charlie.a-1", "--config", alice]) == 0
        shown = capsys.readouterr().out
        for text in (
            "protocol   dp-aggregate",
            "initiator  charlie",
            "this party party1",
            "epsilon    1  delta 1.0842e-19",
            '"key_bits": 512',
            "output     model -> roles dave (differentially private)",
        ):
            assert text in shown, shown
        # a restart of alice keeps the proposal waiting; the initiator keeps asking
        _restart(cluster, "alice", kill=False)
        assert cli_main(["session", "list", "--config", alice, "--pending"]) == 0
        assert "charlie.a-1" in capsys.readouterr().out
        assert cli_main(["session", "approve", "charlie.a-1", "--config", alice]) == 0
        assert "approved (epsilon 1 reserved)" in capsys.readouterr().out
        th.join(120)
        assert out["record"]["state"] == "succeeded"
        assert _ledger(cluster, "alice").reservation("alice", "charlie.a-1").state == "charged"

        th, out = _start(cluster, "charlie.a-2")
        _wait_pending(cluster, "alice", "charlie.a-2")
        assert cli_main(["session", "reject", "charlie.a-2", "--config", alice, "--reason", "not this quarter"]) == 0
        th.join(60)
        assert out["error"].code == "PERMISSION_DENIED"
        assert "party 'alice'" in str(out["error"]) and "not this quarter" in str(out["error"])
        assert cli_main(["session", "approve", "charlie.a-2", "--config", alice]) == 1  # it is rejected now

        th, out = _start(cluster, "charlie.a-3", timeout=6.0)  # never approved (the timeout counts from Begin)
        th.join(90)
        assert out["error"].code == "DEADLINE_EXCEEDED"
        assert "party 'alice' did not approve session 'charlie.a-3' within the initiator's approval timeout" in str(
            out["error"]
        )
        _wait_decided(cluster, "alice", "charlie.a-3", timeout=30)
        capsys.readouterr()
        assert cli_main(["session", "show", "charlie.a-3", "--config", alice, "--json"]) == 0
        # the initiator's abort at its approval timeout (withdrawn) or alice's own (expired) ends it
        assert json.loads(capsys.readouterr().out)["state"] in ("withdrawn", "expired")

        # the initiator dies: nobody withdraws it.  (Its operator's call is dropped with it: a
        # start_session would go on asking the dead charlie for the record for ~40 s.)
        call = client.begin_session(
            cluster.configs["charlie"], "dp-aggregate", ROLES, PARAMS, session_id="charlie.a-4", timeout=8.0
        )
        _wait_pending(cluster, "alice", "charlie.a-4")
        cluster.procs["charlie"].kill()
        cluster.procs["charlie"].wait(10)
        call.close()
        # alice's approval timeout (20 s) expires it
        assert _wait_decided(cluster, "alice", "charlie.a-4", timeout=60) == "expired"
        capsys.readouterr()
        assert cli_main(["session", "show", "charlie.a-4", "--config", alice, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["state"] == "expired"
        assert cli_main(["session", "list", "--config", alice, "--pending"]) == 0
        assert "no pending proposals" in capsys.readouterr().out
        events = [(e["event"], e.get("session")) for _, e, _ in read_entries(cluster.data_dir("alice"))]
        for ev in (
            ("pending", "charlie.a-1"),
            ("approved", "charlie.a-1"),
            ("charged", "charlie.a-1"),
            ("rejected", "charlie.a-2"),
            ("expired", "charlie.a-4"),
        ):
            assert ev in events, ev
        assert verify_log(cluster.data_dir("alice")).ok
        assert [cluster.procs[p].poll() for p in ("alice", "bob", "dave")] == [None] * 3
        # only alice's own certificate decides for alice
        as_bob = replace(load_config(alice), tls=load_config(cluster.configs["bob"]).tls)
        for call in (lambda: client.approve_session(as_bob, "charlie.a-1"), lambda: client.list_sessions(as_bob)):
            with pytest.raises(SmcdpError) as ei:
                call()
            assert ei.value.code == "PERMISSION_DENIED"


def test_an_operator_that_hangs_up_while_a_party_decides_does_not_strand_the_session(tmp_path):
    # The initiator's operator closes its call while alice's operator still decides.  gRPC cancels the
    # StartSession handler then; the session must go on (proposals, Begin) without it -- it used to stop
    # between its proposals and its Begins and hang at every participant until its deadline.
    with _cluster(tmp_path, approval={"alice": "operator"}, budget=5.0) as cluster:
        call = client.begin_session(
            cluster.configs["charlie"], "dp-aggregate", ROLES, PARAMS, session_id="charlie.gone-1", timeout=120.0
        )
        _wait_pending(cluster, "alice", "charlie.gone-1")
        call.close()
        time.sleep(1.0)  # the cancellation reaches charlie's handler
        client.approve_session(cluster.configs["alice"], "charlie.gone-1")
        record = client.follow_session(cluster.configs["charlie"], "charlie.gone-1", 90)
        assert record["state"] == "succeeded"
        assert _ledger(cluster, "alice").reservation("alice", "charlie.gone-1").state == "charged"


def _continued_everywhere(cluster, sid, charged) -> None:
    """The restarted charlie's session ended succeeded at him (one restart) and at every participant, and the
    budgets of ``charged`` were charged once."""
    record = client.follow_session(cluster.configs["charlie"], sid, 180)
    assert record["state"] == "succeeded", record
    assert record["restarts"] == 1
    for party in ("alice", "bob", "dave"):  # each party's own record of the session
        assert cluster._record(party, sid, time.monotonic() + 60)["state"] == "succeeded", party
    for party in charged:
        assert _ledger(cluster, party).reservation(party, sid).state == "charged"


def test_an_initiator_killed_between_its_proposals_and_begin_continues_the_session(tmp_path):
    # charlie proposed; alice's operator still decides when charlie is killed (SIGKILL) and restarted.  The
    # restarted charlie used to fail the session ("continue it with 'smcdp session resume'") and every
    # party with it; now it proposes again (alice's pending proposal and the others' prepared sessions
    # answer as before) and, once alice's operator approves, begins it: the session succeeds, charged once.
    with _cluster(tmp_path, approval={"alice": "operator"}, budget=5.0) as cluster:
        sid = "charlie.restarted-1"
        call = client.begin_session(
            cluster.configs["charlie"], "dp-aggregate", ROLES, PARAMS, session_id=sid, timeout=300.0
        )
        _wait_pending(cluster, "alice", sid)
        _restart(cluster, "charlie", kill=True)
        call.close()
        client.approve_session(cluster.configs["alice"], sid)
        _continued_everywhere(cluster, sid, charged=("alice",))


def _state(cluster, party, sid) -> str | None:
    """The session's state at ``party`` now, None while it has none (an approved proposal becomes a session
    a moment later)."""
    try:
        return client.get_status(cluster.configs[party], sid)["state"]
    except SmcdpError:
        return None


def test_an_initiator_killed_while_its_begin_is_under_way_continues_the_session(tmp_path):
    # another instant of the initiator's start: its Begin has reached some participants and not the others.
    # dave's operator decides, and dave is proposed to last (after the data parties); once alice and bob have
    # accepted, bob is paused (SIGSTOP) and dave's operator approves, so charlie's Begin reaches alice and dave
    # (their roles run) and hangs at bob; charlie is killed then and restarted, and bob continues (SIGCONT).
    # The restarted charlie continues the session: it succeeds everywhere, charged once.
    import signal

    with _cluster(tmp_path, approval={"dave": "operator"}, budget=5.0) as cluster:
        sid = "charlie.begin-cut-1"
        call = client.begin_session(
            cluster.configs["charlie"], "dp-aggregate", ROLES, PARAMS, session_id=sid, timeout=300.0
        )
        _wait_pending(cluster, "dave", sid)
        assert _state(cluster, "alice", sid) == _state(cluster, "bob", sid) == "prepared"
        bob = cluster.procs["bob"]
        bob.send_signal(signal.SIGSTOP)
        try:
            client.approve_session(cluster.configs["dave"], sid)
            end = time.monotonic() + 60
            for party in ("alice", "dave"):  # Begin reached them: their roles run
                while _state(cluster, party, sid) != "running":
                    assert time.monotonic() < end, f"{party} never began"
                    time.sleep(0.1)
            assert _state(cluster, "charlie", sid) != "running"  # its Begin waits for bob
            _restart(cluster, "charlie", kill=True)
        finally:
            bob.send_signal(signal.SIGCONT)
        call.close()
        _continued_everywhere(cluster, sid, charged=("alice", "bob"))


def test_start_up_warnings_are_loud(tmp_path):
    cfgs = write_local_deployment(
        tmp_path,
        ["solo", "other"],
        allow_seeded=True,
        open_policy=True,
        inputs={"solo": {"dp-aggregate": {"data": _data(tmp_path)[0]}}},
    )
    with open(tmp_path / "solo.log", "wb") as log:
        proc = spawn_party(cfgs["solo"], log_file=log)
        try:
            client.wait_healthy(cfgs["solo"], timeout=60)
        finally:
            assert stop_party(proc) == 0
    text = (tmp_path / "solo.log").read_text()
    assert "[policy] open = true: ANY peer" in text
    assert "UNSAFE: party solo has [policy] allow_seeded = true" in text
    assert "has inputs but no [budget]" in text


def test_a_seeded_demo_configures_allow_seeded_and_an_unseeded_one_does_not(tmp_path):
    from smcdp.cli.demo.power_iteration import demo_power_iteration

    rng = np.random.default_rng(4)
    paths = []
    for name, n in (("a", 4), ("b", 5)):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(5, n)))
        paths.append(str(tmp_path / f"{name}.npy"))
    for seed, keep in ((11, tmp_path / "seeded"), (None, tmp_path / "plain")):
        out = demo_power_iteration(paths, key_bits=512, seed=seed, keep_dir=str(keep))
        assert out["converged"]
        for party in ("trent", "alice", "bob"):
            cfg = load_config(keep / "config" / f"{party}.toml")
            assert cfg.policy.allow_seeded is (seed is not None) and not cfg.policy.open
            assert (keep / party / "audit.jsonl").is_file()
        assert ("UNSAFE" in (keep / "alice.log").read_text()) is (seed is not None)
