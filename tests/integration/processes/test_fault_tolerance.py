"""Sessions that survive faults, between real party processes (docs/fault-tolerance.md).

Each protocol has one loopback cluster (small, explicitly insecure keys; grace
30 s).  Every role is killed once early, in the middle and late, restarted from
its configuration after 1 s, and the session must end with the undisturbed
result: plaintext eigenvectors for power iteration, the *same* released model
for DP aggregation (a seeded run draws the same noise whether or not it was
interrupted) and the same keyword and log-likelihoods for keyword recognition.
Then pauses shorter and longer than the grace, resume, SIGTERM, a lost
operator and concurrency.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from datetime import datetime

import numpy as np
import pytest

from smcdp.dp.ledger import Ledger
from smcdp.net.grpc_channel import NotFound
from smcdp.net.limits import Limits
from smcdp.net.server import new_session_id
from smcdp.plugins.registry import get_plugin
from smcdp.protocols.power_iteration import plaintext_reference
from smcdp.runtime import client
from smcdp.runtime.chaos import Chaos, ChaosAction
from smcdp.runtime.governance.charges import DEFAULT_LEDGER, BudgetConfig
from smcdp.runtime.local import LocalCluster
from tests.support.dpa_data import GROUP, SHARED_NOISE_PARAMS, dpa_parties
from tests.support.paths import KEYWORD_DATA
from tests.support.pi_data import PI_PARAMS, PI_ROLES, pi_parties

# A killed party is back (restarted after 1 s) well within this: its process needs ~2 CPU-s of imports
# before it answers, which on two cores busy with `make test`'s parallel workers (and more on a shared
# host) took longer than the 10 s this used to be.  Only the pause-longer-than-the-grace test waits it out.
GRACE = 30.0
KW_FRAMES = 32  # the keyword sessions' frames (one induction round each)


def run_with(cluster: LocalCluster, protocol, roles, params, initiator, actions, *, seed=None, timeout=240):
    sid = new_session_id(protocol)
    parsed = [a if isinstance(a, ChaosAction) else ChaosAction.parse(a) for a in actions]
    chaos = Chaos(cluster, parsed, sid).start() if actions else None
    try:
        records = cluster.run(protocol, roles, params, initiator=initiator, seed=seed, timeout=timeout, session_id=sid)
    finally:
        if chaos is not None:
            chaos.finish()
    if chaos is not None:
        assert chaos.error is None, chaos.error
        assert all(e["done"] for e in chaos.events), f"a fault did not happen: {chaos.events}"
    return records, chaos


# ----------------------------------------------------------------- power iteration
@contextlib.contextmanager
def _pi_cluster(tmp, grace: float):
    parties, blocks = pi_parties(tmp)  # 20-odd rounds, so that round 18 is late
    # trent initiates 20 sessions at once in test_twenty_concurrent_sessions_on_one_trent: the data
    # parties' [limits] must admit that many from one peer (the defaults admit 4 pending, 8 running); a peer's
    # pending slots are at most an equal share of pending_total among the peers each party's policy admits (2)
    limits = Limits(pending_per_peer=20, pending_total=40, running_per_peer=20)
    with LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=grace,
        limits=limits,
        open_policy=True,
    ) as c:
        yield c, blocks


@pytest.fixture(scope="module")
def pi_cluster(tmp_path_factory):
    with _pi_cluster(tmp_path_factory.mktemp("pi"), GRACE) as c:
        yield c


def test_undisturbed_power_iteration_is_long_enough_for_late_faults(pi_cluster):
    cluster, _blocks = pi_cluster
    recs, _ = run_with(cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", [])
    assert recs["trent"]["state"] == "succeeded" and recs["trent"]["result"]["rounds"] >= 20


@pytest.mark.parametrize("party", ["trent", "alice", "bob"])
@pytest.mark.parametrize("at_round", [1, 9, 18])
def test_power_iteration_survives_a_killed_party(pi_cluster, party, at_round):
    cluster, blocks = pi_cluster
    recs, chaos = run_with(cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", [f"kill:{party}:round={at_round}"])
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs[party]["restarts"] == 1  # the killed party replayed its role
    u_ref, x_ref = plaintext_reference(blocks)
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999
    for name in ("alice", "bob"):
        assert abs(np.dot(recs[name]["result"]["u"], u_ref)) >= 0.9999
    # its checkpoint (root key included) is gone once the session succeeded
    for name in ("trent", "alice", "bob"):
        assert not list((cluster.workdir / "state" / name / "sessions").glob("*.d"))


@pytest.fixture(scope="module")
def pi_group_cluster(tmp_path_factory, pi_cluster):
    """pi_cluster's parties and data, a key ceremony between the data parties (t = 1, 512 bits), and the exact
    mode under that group key (docs/protocols/power-iteration.md, "The exact mode with a group key").  No seed:
    a group key refuses one."""
    base, blocks = pi_cluster
    tmp = tmp_path_factory.mktemp("pi_group")
    data = {p: dict(base.parties[p]) for p in base.parties}
    with LocalCluster(
        data, allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=GRACE, open_policy=True
    ) as c:
        ceremony = {"party1": "alice", "party2": "bob"}
        keys, _ = run_with(
            c, "key-ceremony", ceremony, {"group": "lab", "parties": 2, "threshold": 1, "key_bits": 512}, "alice", []
        )
        assert keys["alice"]["state"] == "succeeded", keys["alice"].get("error")
        yield c, blocks, {**PI_PARAMS, "key_group": "lab", "key_threshold": 1}


@pytest.mark.parametrize("fault", ["kill:trent:round=1", "kill:alice:round=9", "kill:bob:round=5"])
def test_power_iteration_exact_mode_under_a_group_key_survives_a_killed_party(pi_group_cluster, fault):
    """A killed data party re-sends its commitments, releases, proofs and partial decryptions bit for bit from its
    checkpointed root, a killed Trent his proven blocks and Grams (else the commitments, or the proofs the
    parties checked, would not match and the session would fail naming it): the plaintext eigenvectors."""
    cluster, blocks, params = pi_group_cluster
    recs, chaos = run_with(cluster, "power-iteration", PI_ROLES, params, "trent", [fault])
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    u_ref, x_ref = plaintext_reference(blocks)
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999
    for name in ("alice", "bob"):
        assert abs(np.dot(recs[name]["result"]["u"], u_ref)) >= 0.9999
        assert recs[name]["result"]["stats"]["key"]["kind"] == "threshold"


# ----------------------------------------------------------------- dp aggregation
@pytest.fixture(scope="module")
def dpa_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("dpa")
    parties = dpa_parties(tmp)
    roles = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob", "party3": "carol"}
    params = {"n_parties": 3, "dim": 3, "epsilon": 1.0, "lam": 0.05, "key_bits": 768, "dgk_bits": 512, "dgk_t": 64}
    with LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        allow_seeded=True,
        open_policy=True,
    ) as c:  # the seed makes "the same release" checkable
        undisturbed, _ = run_with(c, "dp-aggregate", roles, params, "charlie", [], seed=5)
        assert undisturbed["dave"]["state"] == "succeeded"
        yield c, roles, params, undisturbed["dave"]["result"]["weights"]


@pytest.mark.parametrize(
    "fault",
    [
        "kill:charlie:round=1",
        "kill:charlie:round=2",
        "kill:charlie:round=3",
        "kill:alice:round=1",
        "kill:bob:round=2",
        "kill:carol:round=2",
        "kill:dave:round=1",
    ],
)
def test_dp_aggregate_survives_a_killed_party_with_the_same_release(dpa_cluster, fault):
    cluster, roles, params, weights = dpa_cluster
    recs, chaos = run_with(cluster, "dp-aggregate", roles, params, "charlie", [fault], seed=5)
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    # the same seed, the same noise: an interrupted session releases exactly the undisturbed model
    assert recs["dave"]["result"]["weights"] == weights


@pytest.fixture(scope="module")
def dpa_group_cluster(tmp_path_factory, dpa_cluster):
    """dpa_cluster's parties and data, a key ceremony among the data parties (t = 1, 512 bits), and the shared
    noise under that group key (docs/protocols/dp-aggregate.md, "Under a group key").  No seed: a group key
    refuses one."""
    base, roles, _, _ = dpa_cluster
    tmp = tmp_path_factory.mktemp("dpa_group")
    data = {p: dict(base.parties[p]) for p in base.parties}
    params = {**SHARED_NOISE_PARAMS, **GROUP}
    with LocalCluster(
        data, allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=GRACE, open_policy=True
    ) as c:
        ceremony = {"party1": "alice", "party2": "bob", "party3": "carol"}
        keys, _ = run_with(
            c, "key-ceremony", ceremony, {"group": "lab", "parties": 3, "threshold": 1, "key_bits": 512}, "alice", []
        )
        assert keys["alice"]["state"] == "succeeded", keys["alice"].get("error")
        yield c, roles, params


@pytest.mark.parametrize(
    "fault", ["kill:alice:round=1", "kill:bob:round=2", "kill:charlie:round=2", "kill:carol:round=3"]
)
def test_dp_aggregate_under_a_group_key_survives_a_killed_party(dpa_group_cluster, fault):
    """A data party killed between its commitments and its releases re-sends them bit for bit from its
    checkpointed root (else the digests the others hold would not match and the session would fail naming it);
    Charlie, killed, replays his relays."""
    cluster, roles, params = dpa_group_cluster
    recs, chaos = run_with(cluster, "dp-aggregate", roles, params, "charlie", [fault])
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs["alice"]["result"]["key"]["kind"] == "threshold"


@pytest.fixture(scope="module")
def dpa_budget_cluster(tmp_path_factory, dpa_cluster):
    """dpa_cluster's parties and data with a budget at each data party: one cluster for the three replayed-release
    tests (each checks what its own session charged: the ledger's counts before and after it)."""
    base, roles, params, _ = dpa_cluster
    tmp = tmp_path_factory.mktemp("dpa_budget")
    data = {p: dict(base.parties[p]) for p in base.parties}
    budgets = {p: BudgetConfig(dataset=p, epsilon=10.0, delta=1e-9) for p in ("alice", "bob", "carol")}
    with LocalCluster(
        data,
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        budgets=budgets,
        open_policy=True,
    ) as c:
        yield c, roles, params


@pytest.mark.parametrize("fault", ["kill:alice:round=1", "kill:bob:round=2", "kill:carol:round=3"])
def test_a_replayed_release_is_charged_exactly_once(dpa_budget_cluster, fault):
    """Governance and replay together (docs/governance.md, docs/fault-tolerance.md): a data party
    killed and restarted keeps its budget reservation, and the replayed release -- the same noisy
    output, from the checkpointed randomness -- commits it once, not twice."""
    c, roles, params = dpa_budget_cluster
    cost = get_plugin("dp-aggregate").summary(params, roles).epsilon
    ledgers = {p: Ledger(c.data_dir(p) / DEFAULT_LEDGER) for p in ("alice", "bob", "carol")}
    before = {p: ledger.status(p) for p, ledger in ledgers.items()}
    recs, chaos = run_with(c, "dp-aggregate", roles, params, "charlie", [fault])
    assert chaos.restarts == 1
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    for p, ledger in ledgers.items():
        st, was = ledger.status(p), before[p]
        assert st.n_charges == was.n_charges + 1 and float(st.reserved_epsilon) == 0.0, (p, was, st)
        assert float(st.spent_epsilon) - float(was.spent_epsilon) == pytest.approx(cost), (p, was, st)


# ----------------------------------------------------------------- keyword
@pytest.fixture(scope="module")
def kw_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("kw")
    # the first KW_FRAMES frames of the fixture utterance: a kill early, mid-way and two rounds before the end
    # shows the same as on all 98 frames, at a third of the sessions' cost (seven sessions in this module)
    np.save(tmp / "utterance.npy", np.load(KEYWORD_DATA / "utterance_98.npy")[:KW_FRAMES])
    parties = {
        "alice": {"keyword": {"utterance": tmp / "utterance.npy"}},
        "bob": {"keyword": {"models": KEYWORD_DATA / "models.npz"}},
    }
    params = {"key_bits": 768, "debug_reveal": True}
    with LocalCluster(
        parties, allow_insecure_keys=True, workdir=tmp / "run", peer_grace_seconds=GRACE, open_policy=True
    ) as c:
        base, _ = run_with(c, "keyword", {"alice": "alice", "bob": "bob"}, params, "alice", [])
        assert base["alice"]["state"] == "succeeded"
        yield c, params, base["alice"]["result"]


@pytest.mark.parametrize("party", ["alice", "bob"])
@pytest.mark.parametrize("at_round", [2, KW_FRAMES // 2, KW_FRAMES - 3])
def test_keyword_survives_a_killed_party(kw_cluster, party, at_round):
    cluster, params, base = kw_cluster
    recs, chaos = run_with(
        cluster, "keyword", {"alice": "alice", "bob": "bob"}, params, "alice", [f"kill:{party}:round={at_round}"]
    )
    assert chaos.restarts == 1 and recs[party]["restarts"] == 1
    res = recs["alice"]["result"]
    assert res["keyword"] == base["keyword"]
    np.testing.assert_allclose(res["log_likelihoods"], base["log_likelihoods"], rtol=1e-9)


# ----------------------------------------------------------------- pauses, resume, shutdown
def test_a_pause_shorter_than_the_grace_does_not_disturb_the_session(pi_cluster):
    cluster, _blocks = pi_cluster
    recs, _ = run_with(cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", ["stop:bob:round=3,for=5"])
    assert {r["state"] for r in recs.values()} == {"succeeded"}
    assert recs["bob"]["restarts"] == 0


def test_a_pause_longer_than_the_grace_fails_cleanly_and_resume_completes(pi_cluster):
    cluster, blocks = pi_cluster
    t0 = time.monotonic()
    recs, _ = run_with(
        cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", [f"stop:alice:round=3,for={GRACE + 8}"]
    )
    elapsed = time.monotonic() - t0
    # every participant failed with UNAVAILABLE and names the same culprit, and each kept its checkpoint
    assert {r["state"] for r in recs.values()} == {"failed"}, recs
    for name, r in recs.items():
        assert r["error"]["code"] == "UNAVAILABLE", (name, r["error"])
        assert r["error"]["origin"] == "alice", (name, r["error"])
        assert r["resumable"] is True
    assert elapsed < GRACE + 8 + 30
    sid = recs["trent"]["session_id"]
    st = client.get_status(cluster.configs["trent"], sid)
    assert st["state"] == "failed" and st["resumable"]
    rec = client.resume_session(cluster.configs["trent"], sid, timeout=120)
    assert rec["state"] == "succeeded" and rec["restarts"] == 1
    _, x_ref = plaintext_reference(blocks)
    assert abs(np.dot(rec["result"]["x"], x_ref)) >= 0.9999
    for name in ("alice", "bob"):
        r = cluster._record(name, sid, time.monotonic() + 60)
        assert r["state"] == "succeeded"


def test_sigterm_of_trent_ends_the_session_at_once_at_every_party(pi_cluster, tmp_path):
    """A role retrying a send hears the abort too (it used to wait for its deadline)."""
    cluster, _ = pi_cluster
    sid = new_session_id("power-iteration")
    params = dict(PI_PARAMS, max_iterations=100000, tol=1e-15)  # never converges on its own
    th = threading.Thread(
        target=lambda: cluster.run("power-iteration", PI_ROLES, params, initiator="trent", timeout=300, session_id=sid),
        daemon=True,
    )
    th.start()
    deadline = time.monotonic() + 120
    st: dict = {}
    while st.get("round", 0) < 3:  # the session runs at alice, a few rounds in
        assert time.monotonic() < deadline, f"the session never reached round 3 at alice: {st}"
        assert st.get("state") in (None, "prepared", "running"), st
        try:
            st = client.get_status(cluster.configs["alice"], sid)
        except Exception:  # noqa: BLE001 - not proposed yet
            pass
        time.sleep(0.1)
    sigterm = time.time()  # (the records' finished_at is wall-clock time)
    cluster.procs["trent"].send_signal(signal.SIGTERM)
    assert cluster.procs["trent"].wait(30) == 0
    cluster.down.add("trent")
    for name in ("alice", "bob"):
        r = cluster._record(name, sid, time.monotonic() + 30)
        assert r["state"] == "failed" and r["error"]["origin"] == "trent", r["error"]
        # ended by trent's abort, at the SIGTERM: not the deadline (300 s), not even the grace (GRACE
        # after trent's last answer, which came as the SIGTERM was sent)
        ended = datetime.fromisoformat(r["finished_at"]).timestamp() - sigterm
        assert ended < GRACE / 2, (name, ended)
    cluster.restart("trent")
    th.join(30)


def test_an_operator_that_goes_away_does_not_cancel_the_session(pi_cluster):
    cluster, blocks = pi_cluster
    cfg = cluster.configs["trent"]
    sid = new_session_id("power-iteration")
    # the operator's call reaches trent, which registers the session; then the operator hangs up
    call = client.begin_session(cfg, "power-iteration", PI_ROLES, PI_PARAMS, session_id=sid, timeout=120)
    sid = call.session_id
    end = time.monotonic() + 60
    while True:
        try:
            client.get_status(cfg, sid)
            break
        except NotFound:
            assert time.monotonic() < end, "the session never reached trent"
            time.sleep(0.05)
    assert not call.done()  # the session runs: hanging up now cuts its call short
    call.close()
    rec = client.follow_session(cfg, sid, 120)
    assert rec["state"] == "succeeded"
    _, x_ref = plaintext_reference(blocks)
    assert abs(np.dot(rec["result"]["x"], x_ref)) >= 0.9999


@pytest.fixture(scope="module")
def twenty_cluster(tmp_path_factory):
    """The cluster of pi_cluster with a peer grace of TWENTY_GRACE: what the twenty sessions test is about is their
    correctness side by side, and on CI's fivefold-oversubscribed host trent accepts new calls at about 0.7 a second,
    so the sessions proposed last heard nothing on their own links for 30 s (CI of 445dcf2 with work beside it, and
    of 7ce0030 alone) -- the open item of docs/testing.md, "Twenty concurrent sessions on a fivefold-oversubscribed
    host", which this test does not measure."""
    with _pi_cluster(tmp_path_factory.mktemp("pi20"), TWENTY_GRACE) as c:
        yield c


#: long enough for trent's queue of new calls (≈ 40 at ≈ 0.7 accepts a second under CI's load) to clear
TWENTY_GRACE = 120


def test_twenty_concurrent_sessions_on_one_trent(twenty_cluster):
    cluster, blocks = twenty_cluster
    params = dict(PI_PARAMS, tol=1e-8)
    results: dict[int, dict] = {}

    def one(i):
        results[i] = cluster.run("power-iteration", PI_ROLES, params, initiator="trent", timeout=300)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(results) == 20
    failed = {i: recs for i, recs in results.items() if {r["state"] for r in recs.values()} != {"succeeded"}}
    if failed:
        # every party's own account, and what each party logged about those sessions (pytest's
        # assertion repr cut the one CI failure of this test short of the party that failed)
        sids = {r["session_id"] for recs in failed.values() for r in recs.values() if r.get("session_id")}
        report = [
            f"session {i} at {p}: {r['state']} {r.get('error')}" for i, recs in failed.items() for p, r in recs.items()
        ]
        for p in cluster.configs:
            lines, keep = [], False
            for line in (cluster.workdir / f"{p}.log").read_text(errors="replace").splitlines():
                if line[:4].isdigit():  # a record's first line (its traceback, if any, follows)
                    keep = any(sid in line for sid in sids) and (" WARNING " in line or " ERROR " in line)
                if keep:
                    lines.append(f"{p}.log: {line}")
            report += lines[:60]
        pytest.fail("\n".join(report), pytrace=False)
    _, x_ref = plaintext_reference(blocks)
    for recs in results.values():
        assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999
