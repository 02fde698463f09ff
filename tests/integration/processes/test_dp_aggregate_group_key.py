"""dp-aggregate under a group key between real party processes: charlie, dave and three data parties (alice,
bob, carol) whose key stores hold dealt shares of one (1, 3) key (the ceremony is tested on its own).  A session
naming the group succeeds and charges each party once; the single-key shared noise is refused by the parties'
default key rule (they hold a group of exactly these data parties); a charlie relaying one party's release in
place of the others' is refused before anything is decrypted, and every data party's audit trail names him."""

from __future__ import annotations

from smcdp.dp.ledger import Ledger
from smcdp.runtime.governance.audit import read_entries
from smcdp.runtime.governance.charges import DEFAULT_LEDGER, BudgetConfig
from smcdp.runtime.governance.policy import Policy, ProtocolRules
from tests.support.culprits import own_refusals
from tests.support.dpa_data import GROUP, SHARED_NOISE_PARAMS, dpa_parties
from tests.support.group_keys import cluster_class, store_dealt_shares

ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob", "party3": "carol"}
DATA = ("alice", "bob", "carol")
PARAMS = SHARED_NOISE_PARAMS


def _cluster(tmp, evil: bool):
    parties = dpa_parties(tmp)
    # min_threshold = 1: each data party states the coalition its data must withstand (charlie and one data
    # party), which admits h = K − t = 2; the smallest size level goes to the other data parties
    rules = ProtocolRules(
        roles=("party*",),
        initiators=("charlie",),
        coordinators=("charlie", "dave"),
        release_to=("dave", *DATA),
        allow_non_dp=True,
        min_threshold=1,
    )
    coord = ProtocolRules(roles=("charlie", "dave"), initiators=("charlie",))
    policies = {
        "charlie": Policy(protocols={"dp-aggregate": coord}),
        "dave": Policy(protocols={"dp-aggregate": coord}),
        **{p: Policy(protocols={"dp-aggregate": rules}) for p in DATA},
    }
    budgets = {p: BudgetConfig(dataset=p, epsilon=10.0, delta=1e-3) for p in DATA}
    cls = cluster_class("charlie", "tests.support.malicious_dpa_group" if evil else None)
    return cls(parties, allow_insecure_keys=True, workdir=tmp / "run", policies=policies, budgets=budgets)


def test_a_group_key_session_succeeds_and_the_single_key_shared_noise_is_refused_by_default(tmp_path):
    with _cluster(tmp_path, evil=False) as cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("dp-aggregate", ROLES, {**PARAMS, **GROUP}, initiator="charlie", timeout=240)
        assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
        sid = recs["charlie"]["session_id"]
        levels = {recs[p]["result"]["size_level"]["selected"] for p in DATA}
        assert len(levels) == 1  # every data party learnt the same smallest level
        for p in DATA:
            assert recs[p]["result"]["key"]["kind"] == "threshold"
            charges = [c for c in Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).history(p) if c.key == sid]
            assert [(c.state, float(c.epsilon)) for c in charges] == [("charged", 1.0)]
        assert len(recs["dave"]["result"]["weights"]) == 3
        recs = cluster.run("dp-aggregate", ROLES, PARAMS, initiator="charlie", timeout=120)
        err = recs["charlie"].get("error") or {}
        assert recs["charlie"]["state"] == "failed" and "policy.dp-aggregate.key" in err.get("message", ""), err
        assert "propose key_group" in err.get("message", ""), err


def test_a_charlie_relaying_one_release_for_all_is_named_in_every_data_partys_audit_trail(tmp_path):
    with _cluster(tmp_path, evil=True) as cluster:
        store_dealt_shares(cluster, DATA)
        recs = cluster.run("dp-aggregate", ROLES, {**PARAMS, **GROUP}, initiator="charlie", timeout=240)
        sid = recs["charlie"]["session_id"]
        for p in DATA:
            assert recs[p]["state"] == "failed", recs[p]
        for p in own_refusals(recs, DATA, "refuses to decrypt", "charlie"):
            ends = [
                e
                for _, e, _ in read_entries(cluster.data_dir(p))
                if e is not None and e.get("event") == "session-end" and e.get("session") == sid
            ]
            assert ends and ends[-1]["origin"] == "charlie" and "refuses to decrypt" in ends[-1]["message"], ends
        for p in DATA:  # nothing was released, nothing charged
            charged = [c for c in Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).history(p) if c.key == sid]
            assert all(c.state != "charged" for c in charged), charged
