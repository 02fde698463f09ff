"""Power iteration's DP covariance mode under a group key between real party processes: trent and three data
parties (alice, bob, carol) whose key stores hold dealt shares of one (1, 3) key (the ceremony is tested on
its own).  A session naming the group succeeds and charges each party once; a single-key proposal is refused
by the parties' default key rule (they hold a group of exactly these data parties); a trent delivering one
party's release in place of the others' is refused, and every data party's audit trail names trent; a trent
relaying different digests to different parties gets no release at all."""

from __future__ import annotations

import numpy as np

from smcdp.dp.ledger import Ledger
from smcdp.runtime.governance.audit import read_entries
from smcdp.runtime.governance.charges import DEFAULT_LEDGER, BudgetConfig
from smcdp.runtime.governance.policy import Policy, ProtocolRules
from tests.support.culprits import own_refusals
from tests.support.group_keys import cluster_class, store_dealt_shares

K = 4
ROLES = {"trent": "trent", "party1": "alice", "party2": "bob", "party3": "carol"}
DATA = ("alice", "bob", "carol")
PARAMS = {
    "n_parties": 3,
    "key_bits": 512,
    "epsilon": 1.0,
    "delta": 1e-6,
    "dp_method": "covariance",
    "rows": K,
    "max_samples": 20,
}
GROUP = {"key_group": "lab", "key_threshold": 1}


def _cluster(tmp, evil: bool | str):
    rng = np.random.default_rng(36)
    parties: dict = {"trent": {}}
    for name in DATA:
        np.save(tmp / f"{name}.npy", rng.normal(size=(K, 20)) * 0.3)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    # min_threshold = 1: each data party states the coalition its data must withstand (trent and one data
    # party), which admits the group key's noise share h = n − t = 2
    rules = ProtocolRules(
        roles=("party*",),
        initiators=("trent",),
        coordinators=("trent",),
        release_to=DATA,
        min_threshold=1,
        data_bounds=(("samples", 20),),  # what each states of its data: the sessions' max_samples
    )
    policies = {
        "trent": Policy(protocols={"power-iteration": ProtocolRules(roles=("trent",), initiators=("trent",))}),
        **{p: Policy(protocols={"power-iteration": rules}) for p in DATA},
    }
    budgets = {p: BudgetConfig(dataset=p, epsilon=10.0, delta=1e-3) for p in DATA}
    module = evil if isinstance(evil, str) else "tests.support.malicious_pi_group" if evil else None
    cls = cluster_class("trent", module)
    return cls(parties, allow_insecure_keys=True, workdir=tmp / "run", policies=policies, budgets=budgets)


def test_a_group_key_session_succeeds_and_a_single_key_one_is_refused_by_default(tmp_path):
    with _cluster(tmp_path, evil=False) as cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("power-iteration", ROLES, {**PARAMS, **GROUP}, initiator="trent", timeout=240)
        assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
        sid = recs["trent"]["session_id"]
        us = [recs[p]["result"]["u"] for p in DATA]
        assert us[0] == us[1] == us[2]
        for p in DATA:
            key = recs[p]["result"]["dp"]["key"]
            assert key["kind"] == "threshold" and key["parties"] == ["party1", "party2", "party3"]
            charges = [c for c in Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).history(p) if c.key == sid]
            assert [(c.state, float(c.epsilon)) for c in charges] == [("charged", 1.0)]
        # the same session with party1's key pair: every data party holds group 'lab' of exactly these
        # parties, so its default key rule refuses it
        recs = cluster.run("power-iteration", ROLES, PARAMS, initiator="trent", timeout=120)
        err = recs["trent"].get("error") or {}
        assert recs["trent"]["state"] == "failed" and "policy.power-iteration.key" in err.get("message", ""), err
        assert err.get("origin") in DATA, err


def test_a_trent_relaying_one_release_for_all_is_named_in_every_data_partys_audit_trail(tmp_path):
    with _cluster(tmp_path, evil=True) as cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("power-iteration", ROLES, {**PARAMS, **GROUP}, initiator="trent", timeout=240)
        sid = recs["trent"]["session_id"]
        for p in DATA:
            assert recs[p]["state"] == "failed", recs[p]
        for p in own_refusals(recs, DATA, "refuses to decrypt", "trent"):
            ends = [
                e
                for _, e, _ in read_entries(cluster.data_dir(p))
                if e is not None and e.get("event") == "session-end" and e.get("session") == sid
            ]
            assert ends and ends[-1]["origin"] == "trent" and "refuses to decrypt" in ends[-1]["message"], ends


def test_a_trent_relaying_different_digests_to_different_parties_stops_every_release(tmp_path):
    """Trent relays party1 (alice) a set of digests in which party3's is another, and the true set to the others:
    the data parties' echoes differ, so none of them releases anything -- no budget is charged -- and the session
    fails at every party.  Whoever notices first ends it: a data party ("releases nothing") or, his own check of
    the echoes being honest code, trent ("relays nothing")."""
    with _cluster(tmp_path, evil="tests.support.malicious_pi_digests") as cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("power-iteration", ROLES, {**PARAMS, **GROUP}, initiator="trent", timeout=240)
        sid = recs["trent"]["session_id"]
        assert {recs[p]["state"] for p in ROLES.values()} == {"failed"}, recs
        for p in DATA:
            message = (recs[p].get("error") or {}).get("message", "")
            assert "releases nothing" in message or "trent relays nothing" in message, (p, recs[p].get("error"))
            assert "echo/cov differs" in message, (p, message)
        for p in DATA:
            charges = [c for c in Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).history(p) if c.key == sid]
            assert all(c.state != "charged" for c in charges), (p, charges)


# ------------------------------------------------------------------ the exact mode under the group key
EXACT = {"n_parties": 3, "key_bits": 512, "rows": K, "max_samples": 20, "p": 0.8, "tol": 1e-10}


def _exact_cluster(tmp, evil: bool):
    """The same parties for the exact mode: each data party's policy admits it (allow_non_dp) and releases x to
    trent; no budget is involved."""
    rng = np.random.default_rng(37)
    parties: dict = {"trent": {}}
    blocks = []
    v = rng.normal(size=K)
    for name in DATA:
        A = 3 * np.outer(v, rng.normal(size=20)) + rng.normal(size=(K, 20))
        blocks.append(A)
        np.save(tmp / f"{name}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    rules = ProtocolRules(
        roles=("party*",),
        initiators=("trent",),
        coordinators=("trent",),
        release_to=(*DATA, "trent"),
        allow_non_dp=True,
        data_bounds=(("samples", 20),),
    )
    policies = {
        "trent": Policy(protocols={"power-iteration": ProtocolRules(roles=("trent",), initiators=("trent",))}),
        **{p: Policy(protocols={"power-iteration": rules}) for p in DATA},
    }
    cls = cluster_class("trent", "tests.support.malicious_pi_group" if evil else None)
    return cls(parties, allow_insecure_keys=True, workdir=tmp / "run", policies=policies), blocks


def test_an_exact_mode_session_under_the_group_key_computes_numpys_components(tmp_path):
    """Across processes: u at every data party and x at trent are numpy's; every party's record names the key."""
    from smcdp.protocols.power_iteration import plaintext_reference

    cluster, blocks = _exact_cluster(tmp_path, evil=False)
    with cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("power-iteration", ROLES, {**EXACT, **GROUP}, initiator="trent", timeout=240)
        assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    u_ref, x_ref = plaintext_reference(blocks)
    assert np.allclose(recs["trent"]["result"]["x"], x_ref, atol=1e-6)
    for p in DATA:
        assert np.allclose(recs[p]["result"]["u"], u_ref, atol=1e-6)
        key = recs[p]["result"]["stats"]["key"]
        assert key["kind"] == "threshold" and key["threshold"] == 1


def test_an_exact_mode_trent_sending_one_contribution_as_a_block_is_named_in_every_audit_trail(tmp_path):
    """trent sends party3's start contribution as the first block: every data party refuses it before it sends a
    partial decryption or anything in clear and fails naming trent (or, when another party's abort reached it first,
    that party, with trent the claimed culprit), and its audit trail's session-end says so."""
    cluster, _ = _exact_cluster(tmp_path, evil=True)
    with cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("power-iteration", ROLES, {**EXACT, **GROUP}, initiator="trent", timeout=240)
        sid = recs["trent"]["session_id"]
        for p in DATA:
            assert recs[p]["state"] == "failed", recs[p]
        # every data party refuses (a party another's abort reached first says so, and keeps trent as the culprit)
        assert {p for p in DATA if "refuses to decrypt v/0" in recs[p]["error"]["message"]} == set(DATA), recs
        for p in own_refusals(recs, DATA, "refuses to decrypt v/0", "trent"):
            ends = [
                e
                for _, e, _ in read_entries(cluster.data_dir(p))
                if e is not None and e.get("event") == "session-end" and e.get("session") == sid
            ]
            assert ends and ends[-1]["origin"] == "trent" and "refuses to decrypt" in ends[-1]["message"], ends
