"""Power iteration between separate OS processes over gRPC with mutual TLS."""

import numpy as np
import pytest

from smcdp.protocols.power_iteration import plaintext_components, plaintext_reference
from smcdp.runtime.local import LocalCluster
from tests.unit.protocols.test_power_iteration import blocks_with_gap


def _cluster(tmp_path, blocks, extra=None):
    names = ["alice", "bob", "carol"][: len(blocks)]
    parties = {"trent": {}}
    for name, A in zip(names, blocks):
        np.save(tmp_path / f"{name}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp_path / f"{name}.npy"}}
    parties.update(extra or {})
    roles = {"trent": "trent", **{f"party{i + 1}": n for i, n in enumerate(names)}}
    return LocalCluster(parties, allow_insecure_keys=True, workdir=tmp_path / "run", open_policy=True), roles


@pytest.mark.parametrize("k,ns", [(6, (4, 5)), (10, (3, 8, 4))])
def test_power_iteration_across_processes(tmp_path, k, ns):
    blocks = blocks_with_gap(np.random.default_rng(k), k, ns)
    cluster, roles = _cluster(tmp_path, blocks)
    with cluster:
        recs = cluster.run(
            "power-iteration", roles, {"n_parties": len(ns), "key_bits": 512, "p": 0.8}, initiator="trent", timeout=120
        )
    assert all(r["state"] == "succeeded" for r in recs.values()), recs
    u_ref, x_ref = plaintext_reference(blocks)
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999
    for name in set(roles.values()) - {"trent"}:
        assert abs(np.dot(recs[name]["result"]["u"], u_ref)) >= 0.9999
        assert recs[name]["stats"]["bytes_sent"] > 0


def test_bad_input_fails_cleanly_everywhere_and_the_processes_survive(tmp_path):
    rng = np.random.default_rng(1)
    good = blocks_with_gap(rng, 5, (3, 4))
    cluster, roles = _cluster(tmp_path, [good[0], rng.normal(size=(6, 4))])  # bob has 6 rows, alice 5
    with cluster:
        recs = cluster.run("power-iteration", roles, {"n_parties": 2, "key_bits": 512}, initiator="trent", timeout=60)
        assert {r["state"] for r in recs.values()} == {"failed"}
        assert recs["trent"]["error"]["code"] == "INVALID_ARGUMENT"
        assert "mismatched dimensions" in recs["trent"]["error"]["message"]
        for name in ("alice", "bob"):
            assert recs[name]["error"]["code"] in ("INVALID_ARGUMENT", "ABORTED")
        # nothing crashed: every process still runs and serves the next (valid) session
        assert all(p.poll() is None for p in cluster.procs.values())
        np.save(tmp_path / "bob.npy", good[1])
        recs = cluster.run("power-iteration", roles, {"n_parties": 2, "key_bits": 512}, initiator="trent", timeout=60)
        assert recs["trent"]["state"] == "succeeded"
        _, x_ref = plaintext_reference(good)
        assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999


def test_insecure_key_refused_unless_the_deployment_opts_in(tmp_path):
    blocks = blocks_with_gap(np.random.default_rng(2), 4, (3, 3))
    cluster, roles = _cluster(tmp_path, blocks)
    cluster.allow_insecure_keys = False
    with cluster:
        recs = cluster.run("power-iteration", roles, {"n_parties": 2, "key_bits": 512}, initiator="trent", timeout=60)
    assert recs["trent"]["state"] == "failed"
    assert "2048" in recs["trent"]["error"]["message"]


def test_top_three_components_across_processes(tmp_path):
    """N = 3 data parties, r = 3, across OS processes: every component against numpy's eigh."""
    from tests.unit.protocols.test_power_iteration_topr import spectrum_data

    blocks = spectrum_data(np.random.default_rng(17), 10, (6, 9, 7), [8.0, 5.0, 3.0, 1.0])
    cluster, roles = _cluster(tmp_path, blocks)
    with cluster:
        recs = cluster.run(
            "power-iteration",
            roles,
            {"n_parties": 3, "key_bits": 512, "p": 0.8, "components": 3},
            initiator="trent",
            timeout=180,
        )
    assert all(r["state"] == "succeeded" for r in recs.values()), recs
    _, U, X = plaintext_components(blocks, 3)
    tr = recs["trent"]["result"]
    assert tr["converged"] and len(tr["components"]) == 3
    for j in range(3):
        assert abs(np.dot(tr["components"][j]["x"], X[:, j])) >= 0.999
        assert np.allclose(tr["components"][j]["x"], X[:, j], atol=1e-5)
        for name in ("alice", "bob", "carol"):
            assert np.allclose(recs[name]["result"]["components"][j]["u"], U[:, j], atol=1e-5)
    for _name, rec in recs.items():
        assert rec["stats"]["peak_rss_bytes"] > 0
