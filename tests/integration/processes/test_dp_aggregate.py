"""DP aggregation between separate OS processes over gRPC with mutual TLS (small keys, opt-in)."""

import json
import math

import numpy as np
import pytest

from smcdp.cli import main as cli_main
from smcdp.cli.demo.dp_aggregate import demo_dp_aggregate
from smcdp.errors import InvalidMessage
from smcdp.plugins.dp_aggregate import load_dataset
from smcdp.protocols.dp_aggregate import DPAggregateParams, selected_sensitivity, sensitivity_key, train_local


def _write_parties(tmp_path, sizes, d=4, seed=0):
    rng = np.random.default_rng(seed)
    w_true = rng.normal(size=d)
    paths = []
    for j, n in enumerate(sizes):
        X = rng.normal(size=(n, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.0001
        y = np.where(X @ w_true + 0.3 * rng.normal(size=n) > 0, 1, 0)
        path = tmp_path / f"P{j + 1}.npz"
        np.savez(path, X=X, y=y)
        paths.append(str(path))
    return paths


def test_demo_across_processes_matches_the_average_of_local_models(tmp_path):
    paths = _write_parties(tmp_path, [150, 60, 90])
    lam = 0.05
    argv = [
        "demo",
        "dp-aggregate",
        *[a for p in paths for a in ("--data", p)],
        "--epsilon",
        "1e9",
        "--lam",
        str(lam),
        "--key-bits",
        "512",
        "--keep-dir",
        str(tmp_path / "run"),
        "--out",
        str(tmp_path / "model.json"),
    ]
    assert cli_main(argv) == 0  # the CLI contract, in this process; parties are processes
    out = json.loads((tmp_path / "model.json").read_text())
    local = [train_local(*load_dataset(p), lam)[0] for p in paths]
    assert np.max(np.abs(np.array(out["weights"]) - np.mean(local, axis=0))) < 1e-6
    K = len(paths)
    shares = np.array(out["shares"])
    assert shares.shape == (K + 1, 4)
    assert np.allclose(shares.sum(axis=0) / K, out["weights"], rtol=0, atol=1e-9)
    assert set(out["bytes_sent"]) == {"charlie", "dave", "alice", "bob", "carol"}
    assert all(out["bytes_sent"][p] > 0 for p in ("charlie", "alice", "bob", "carol"))
    assert out["seconds"] > 0
    json.dumps(out)
    # every publisher wrote its share durably, and Dave the model (party P's data directory: KEEP_DIR/P)
    run = tmp_path / "run"
    share_files = sorted(run.glob("*/outputs/*/dp-aggregate-share-*.json"))
    assert len(share_files) == K + 1
    published = {json.loads(f.read_text())["publisher"]: json.loads(f.read_text())["share"] for f in share_files}
    assert [published[r] for r in ["charlie", "party1", "party2", "party3"]] == out["shares_mod"]
    model = json.loads(next(run.glob("dave/outputs/*/dp-aggregate-model.json")).read_text())
    assert model["weights"] == out["weights"]


def test_demo_with_shared_noise_across_processes(tmp_path):
    """--calibration gaussian: every data party adds its share of (ε, δ) Gaussian noise for the selected
    sensitivity (docs/protocols/dp-aggregate.md, "Shared noise").  The release is the average of the local models
    plus that noise (within 6 of its standard deviations); every ledger is charged the session's ε and δ plus
    the aborts' e^ε·K·2^-64; the JSON states δ and h.  (ε = 30: the aborts' term makes δ vacuous from ε ≈ 44 on,
    and the demo refuses such an ε; the protocol's exactness at a huge ε is a unit test's.)"""
    paths = _write_parties(tmp_path, [150, 60, 90], seed=4)
    lam = 0.05
    out = demo_dp_aggregate(
        paths,
        30.0,
        lam,
        key_bits=512,
        calibration="gaussian",
        delta=1e-6,
        noise_parties=2,
        keep_dir=str(tmp_path / "r"),
    )
    fits = [train_local(*load_dataset(p), lam) for p in paths]
    # the noise on the average: K shares of σ_p² = t·q grid steps² each, for the largest sensitivity, over K
    params = DPAggregateParams(
        n_parties=3, dim=4, epsilon=30.0, lam=lam, calibration="gaussian", delta=1e-6, noise_parties=2
    )
    t, q = params.share_parameters(selected_sensitivity(min(sensitivity_key(s)[0] for _, s in fits)))
    sd = math.sqrt(3 * t * q) * 2.0**-params.frac_bits / 3
    assert np.max(np.abs(np.array(out["weights"]) - np.mean([w for w, _ in fits], axis=0))) < 6 * sd + 1e-9
    assert out["calibration"] == "gaussian" and out["delta"] == 1e-6 and out["noise_parties"] == 2
    assert [o["status"] for o in out["sessions"]] == ["released"]
    assert {b["spent_epsilon"] for b in out["budgets"].values()} == {"30"}
    with pytest.raises(InvalidMessage, match="delta must be set"):
        demo_dp_aggregate(paths, 1.0, lam, key_bits=512, calibration="gaussian")
    with pytest.raises(InvalidMessage, match="no ledger holds it"):  # before any party process starts
        demo_dp_aggregate(paths, 1e9, lam, key_bits=512, calibration="gaussian", delta=1e-6)


def test_demo_refuses_mismatched_files(tmp_path):
    paths = _write_parties(tmp_path, [20, 20])
    np.savez(tmp_path / "odd.npz", X=np.zeros((5, 3)), y=np.array([0, 1, 0, 1, 1]))
    with pytest.raises(InvalidMessage, match="same number of features"):
        demo_dp_aggregate([paths[0], str(tmp_path / "odd.npz")], epsilon=1.0, lam=0.1, key_bits=512)
    with pytest.raises(InvalidMessage, match="at least two"):
        demo_dp_aggregate([paths[0]], epsilon=1.0, lam=0.1, key_bits=512)
    assert (
        cli_main(
            [
                "demo",
                "dp-aggregate",
                "--data",
                paths[0],
                "--data",
                paths[1],
                "--epsilon",
                "-1",
                "--lam",
                "0.1",
                "--key-bits",
                "512",
            ]
        )
        == 2
    )  # refused with a clear error, no crash


def test_a_malicious_charlie_selecting_the_largest_party_is_refused_and_nobody_is_charged(tmp_path):
    """Issue 25: an allowed Charlie running a modified plug-in selects the party with the most records
    (the least noise; the seed's guarantee would degrade to ε·n_max/n_min).  The parties whose data need
    more noise than the selected one refuse in the selection check, no share is published, and every
    ledger ends with its reservation released and nothing spent."""
    from smcdp.dp.ledger import Ledger
    from smcdp.plugins.registry import get_plugin
    from smcdp.runtime.governance.charges import DEFAULT_LEDGER, BudgetConfig
    from smcdp.runtime.local import LocalCluster

    paths = _write_parties(tmp_path, [60, 45, 80])  # bob has the fewest records, carol the most
    names = ["alice", "bob", "carol"]
    parties = {"charlie": {}, "dave": {}, **{n: {"dp-aggregate": {"data": p}} for n, p in zip(names, paths)}}
    roles = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob", "party3": "carol"}
    params = {"n_parties": 3, "dim": 4, "epsilon": 1.0, "lam": 0.05, "key_bits": 768, "dgk_bits": 512, "dgk_t": 64}
    cost = get_plugin("dp-aggregate").summary(params, roles).epsilon
    budgets = {n: BudgetConfig(dataset=n, epsilon=10 * cost, delta=1e-9) for n in names}
    with LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp_path / "run",
        budgets=budgets,
        plugins=("tests.support.evil_charlie_plugin",),
        open_policy=True,
    ) as c:
        recs = c.run("dp-aggregate", roles, params, initiator="charlie")
        ledgers = {n: Ledger(c.data_dir(n) / DEFAULT_LEDGER).status(n) for n in names}
    assert recs["dave"]["state"] != "succeeded"
    refusals = {n: str((recs[n].get("error") or {}).get("message", "")) for n in names}
    for n in ("alice", "bob"):  # both need more noise than carol's
        assert recs[n]["state"] == "failed", (n, recs[n])
    assert any("calibrated for a smaller sensitivity" in m for m in refusals.values()), refusals
    for n, st in ledgers.items():
        assert float(st.spent_epsilon) == 0.0 and float(st.reserved_epsilon) == 0.0, (n, st)
    assert not list((tmp_path / "run").glob("*/outputs/*/dp-aggregate-share-*.json"))
