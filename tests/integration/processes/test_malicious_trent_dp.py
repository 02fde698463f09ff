"""The issue-25 attack between real party processes: an *allowed* trent running a modified plug-in
(tests/support/malicious_pi.py) against honest alice and bob, who run with [policy] and [budget]; bob
colludes by handing trent the session's key pair.

Exact mode: trent's x_j are the rows of [A_alice A_bob], |cos| = 1, and nothing is charged (the issue's
finding, still true of the exact mode: the reason for allow_non_dp, max_exact_sessions and the DP mode).
DP mode, same attacker: everything trent can decrypt of alice's (even alone: her individual noisy
contributions) is ÃÃᵀQ_t plus noise at full scale; her single sample is not recovered any closer than that
noise allows, and her ledger is charged (epsilon, delta) once.  The one-release covariance mode (issue 38),
same attacker: one release, the same full-scale noise, one charge.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from smcdp.crypto.codec import keypair_from_proto
from smcdp.crypto.encoding import decode_fixed
from smcdp.crypto.vector import EncryptedVector
from smcdp.dp.ledger import Ledger
from smcdp.protocols.power_iteration import PowerIterationParams, dp_calibration
from smcdp.runtime.config import dump_config, load_config
from smcdp.runtime.governance.charges import DEFAULT_LEDGER, BudgetConfig
from smcdp.runtime.governance.policy import Policy, ProtocolRules
from smcdp.runtime.local import LocalCluster
from smcdp.v1 import messages_pb2 as pb

K = 12
ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
MODULE = "tests.support.malicious_pi"


class _Cluster(LocalCluster):
    """trent and bob load the modified plug-in; alice runs the real one."""

    def write_configs(self) -> None:
        super().write_configs()
        for party in ("trent", "bob"):
            cfg = load_config(self.configs[party])
            dump_config(replace(cfg, plugins=(MODULE,)), self.configs[party])


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("evil")
    rng = np.random.default_rng(25)
    alice = rng.normal(size=(K, 1))
    alice /= 1.25 * np.linalg.norm(alice)  # one sample, norm 0.8: the whole data set
    bob = rng.normal(size=(K, 5)) * 0.2
    np.save(tmp / "alice.npy", alice)
    np.save(tmp / "bob.npy", bob)
    parties = {
        "trent": {},
        "alice": {"power-iteration": {"data": tmp / "alice.npy"}},
        "bob": {"power-iteration": {"data": tmp / "bob.npy"}},
    }
    # alice and bob allow trent to coordinate (and, for the exact mode's sake, exact outputs to him)
    data_rules = ProtocolRules(
        roles=("party*",),
        initiators=("trent",),
        coordinators=("trent",),
        release_to=("alice", "bob", "trent"),
        allow_non_dp=True,
    )
    policies = {
        "trent": Policy(protocols={"power-iteration": ProtocolRules(roles=("trent",), initiators=("trent",))}),
        "alice": Policy(protocols={"power-iteration": data_rules}),
        "bob": Policy(protocols={"power-iteration": data_rules}),
    }
    budgets = {p: BudgetConfig(dataset=p, epsilon=10.0, delta=1e-3) for p in ("alice", "bob")}
    with _Cluster(parties, allow_insecure_keys=True, workdir=tmp / "run", policies=policies, budgets=budgets) as c:
        yield c, alice, bob


def _outputs(cluster, party, sid):
    return cluster.data_dir(party) / "outputs" / sid


def test_exact_mode_trent_gets_every_row_and_nothing_is_charged(attacked):
    cluster, alice, bob = attacked
    params = {"n_parties": 2, "key_bits": 512, "p": 1.0, "max_iterations": 30, "components": K}
    recs = cluster.run("power-iteration", ROLES, params, initiator="trent", timeout=240)
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    M = np.concatenate([alice, bob], axis=1)
    xs = recs["trent"]["result"]["components"]
    for j in range(K):
        x = np.asarray(xs[j]["x"])
        assert abs(np.dot(x, M[j]) / np.linalg.norm(M[j])) == pytest.approx(1.0, abs=1e-9)
    for p in ("alice", "bob"):
        assert Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).status(p).n_charges == 0


def test_dp_mode_the_same_trent_and_key_holder_get_only_noise_at_full_scale(attacked):
    cluster, alice, _ = attacked
    T = 10
    params = {"n_parties": 2, "key_bits": 512, "epsilon": 1.0, "delta": 1e-6, "iterations": T, "components": K}
    recs = cluster.run("power-iteration", ROLES, params, initiator="trent", timeout=240)
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    sid = recs["trent"]["session_id"]
    p = PowerIterationParams.from_mapping(params)
    cal = dp_calibration(p)
    sk = keypair_from_proto(
        pb.PaillierKeyPair.FromString((_outputs(cluster, "bob", sid) / "keypair.bin").read_bytes()), allow_insecure=True
    )
    releases = []
    for t in range(T):
        msg = pb.CiphertextVector.FromString((_outputs(cluster, "trent", sid) / f"party1-noisy-{t}.bin").read_bytes())
        vec = EncryptedVector.from_proto(msg, sk.public_key, packing=p.packing(sk.public_key))
        releases.append(decode_fixed(vec.decrypt_ints(sk), vec.exponent).reshape((K, K), order="F"))
    # Trent's unit vectors make Q_t = I: each release is alice's Gram ã ãᵀ plus the round's noise
    G = alice @ alice.T
    G_hat = np.mean(releases, axis=0)
    expected = cal.party_sigma * K / math.sqrt(T)  # E‖mean noise‖_F for K² entries of std sigma/√T
    assert 0.8 < np.linalg.norm(G_hat - G) / expected < 1.2
    # the attacker's best guess of her sample (the top eigenvector of the averaged releases) is no closer
    # to it than a direction drawn at random in R^K (exact mode: |cos| = 1 for her rows)
    guess = np.linalg.eigh((G_hat + G_hat.T) / 2)[1][:, -1]
    assert abs(np.dot(guess, alice[:, 0]) / np.linalg.norm(alice)) < 0.9
    for q in ("alice", "bob"):
        charges = [c for c in Ledger(cluster.data_dir(q) / DEFAULT_LEDGER).history(q) if c.key == sid]
        assert [(c.state, float(c.epsilon), float(c.delta)) for c in charges] == [("charged", 1.0, 1e-6)]


def test_trent_cannot_choose_to_share_a_data_partys_noise(attacked):
    """noise_parties = 2 would have each party add half the noise's variance, so that bob, colluding
    with trent, removes his half from alice's releases (1/√2 of the calibrated noise left) while her
    ledger is charged the whole epsilon.  Whatever weakens her guarantee is her policy's decision: her
    rules do not raise max_noise_parties (default 1), so the proposal is refused before anything runs,
    PERMISSION_DENIED naming the rule, and nobody is charged."""
    cluster, _, _ = attacked
    before = {p: Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).status(p).n_charges for p in ("alice", "bob")}
    params = {"n_parties": 2, "key_bits": 512, "epsilon": 1.0, "delta": 1e-6, "components": 1, "noise_parties": 2}
    recs = cluster.run("power-iteration", ROLES, params, initiator="trent", timeout=120)
    err = recs["trent"].get("error") or {}
    assert recs["trent"]["state"] == "failed" and err.get("code") == "PERMISSION_DENIED", recs["trent"]
    assert "policy.power-iteration.max_noise_parties" in err.get("message", "") and err.get("origin") == "alice", err
    for p in ("alice", "bob"):
        assert Ledger(cluster.data_dir(p) / DEFAULT_LEDGER).status(p).n_charges == before[p]


def test_covariance_mode_the_same_trent_and_key_holder_get_one_release_at_full_noise(attacked):
    """Issue 38, same attacker, the one-release mode: Trent has no block to choose (he sends nothing before
    the releases), so his rewriting finds nothing to rewrite; decrypting alice's single release gives the
    isometric upper triangle of ã ãᵀ plus noise at party_sigma, her sample is not recovered better than a
    random direction, and she is charged once."""
    from smcdp.protocols.power_iteration import COV_TAG, covariance_pack, covariance_unpack

    cluster, alice, _ = attacked
    params = {"n_parties": 2, "key_bits": 512, "epsilon": 1.0, "delta": 1e-6, "rows": K, "dp_method": "covariance"}
    recs = cluster.run("power-iteration", ROLES, params, initiator="trent", timeout=240)
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert recs["alice"]["result"]["dp"]["dp_method"] == "covariance"
    sid = recs["trent"]["session_id"]
    p = PowerIterationParams.from_mapping(params)
    cal = dp_calibration(p)
    sk = keypair_from_proto(
        pb.PaillierKeyPair.FromString((_outputs(cluster, "bob", sid) / "keypair.bin").read_bytes()), allow_insecure=True
    )
    saved = sorted(f.name for f in _outputs(cluster, "trent", sid).iterdir() if f.name.startswith("party1-"))
    assert saved == [f"party1-{COV_TAG.replace('/', '-')}.bin"]  # one release, nothing else
    msg = pb.CiphertextVector.FromString((_outputs(cluster, "trent", sid) / saved[0]).read_bytes())
    vec = EncryptedVector.from_proto(msg, sk.public_key, packing=p.packing(sk.public_key))
    W = np.asarray(decode_fixed(vec.decrypt_ints(sk), vec.exponent), dtype=np.float64)
    noise = W - covariance_pack(alice @ alice.T)
    assert 0.6 < noise.std() / cal.party_sigma < 1.35  # 78 values: ±4 standard deviations of chi²(78)
    guess = np.linalg.eigh(covariance_unpack(W, K))[1][:, -1]
    assert abs(np.dot(guess, alice[:, 0]) / np.linalg.norm(alice)) < 0.9
    for q in ("alice", "bob"):
        charges = [c for c in Ledger(cluster.data_dir(q) / DEFAULT_LEDGER).history(q) if c.key == sid]
        assert [(c.state, float(c.epsilon), float(c.delta)) for c in charges] == [("charged", 1.0, 1e-6)]
