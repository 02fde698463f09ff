"""The contract of ``smcdp demo … --threshold T`` (checks outside the test suite rely on it): power iteration
and dp-aggregate run the key ceremony among their data parties, then a session under the group key.  512-bit
keys: the demos' insecure test size."""

import json
import subprocess
import sys

import numpy as np

from smcdp.cli import main as cli_main
from smcdp.plugins.keystore import KeyStore
from tests.support.paths import REPO

NAMES = ["alice", "bob", "carol"]


def _blocks(rng, k=6, sizes=(50, 60, 70)):
    """Three parties' columns along one strong direction, every column of norm <= 1 (nothing is clipped)."""
    v = rng.normal(size=k)
    v /= np.linalg.norm(v)
    out = []
    for n in sizes:
        A = np.outer(v, rng.uniform(0.5, 1.0, size=n)) + 0.05 * rng.normal(size=(k, n))
        out.append(A / np.maximum(1.0, np.linalg.norm(A, axis=0)))
    return out


def test_demo_power_iteration_threshold_runs_the_ceremony_then_the_session_under_the_group_key(tmp_path):
    blocks = _blocks(np.random.default_rng(36))
    data = []
    for name, A in zip(NAMES, blocks):
        np.save(tmp_path / f"{name}.npy", A)
        data += ["--data", str(tmp_path / f"{name}.npy")]
    keep = tmp_path / "keep"
    args = ["--threshold", "1", "--key-bits", "512", "--epsilon", "10", "--delta", "1e-6", "--keep-dir", str(keep)]
    run = subprocess.run(
        [sys.executable, "-m", "smcdp", "demo", "power-iteration", *data, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "candidate moduli expected" in run.stderr  # the ceremony's estimate, as `smcdp keys generate` says it
    out = json.loads(run.stdout)
    key = out["key"]
    assert key["kind"] == "threshold" and key["threshold"] == 1 and key["parties"] == NAMES
    assert key["generation_seconds"] > 0 and key["key_bits"] == 512 and key["group"] == "demo"
    assert key["noise_share"] == 2  # h = n − t: each party adds sigma^2/2
    # every data party's key store holds the group, its own share of the same key
    for i, name in enumerate(NAMES, 1):
        g = KeyStore(keep / name / "keys").load("demo", allow_insecure=True).summary()
        assert g["fingerprint"] == key["fingerprint"] and g["index"] == i and g["parties"] == NAMES
    # the fields the demo has without --threshold are all there
    for field in ("u", "x", "components", "epsilon", "delta", "budgets", "dp_method", "dp", "bytes_sent", "seconds"):
        assert field in out, field
    assert out["x"] is None and out["epsilon"] == 10 and out["dp_method"] == "covariance"
    assert set(out["budgets"]) == set(NAMES)
    # u is numpy's leading eigenvector of M Mᵀ up to the (small, at epsilon = 10) noise
    M = np.hstack(blocks)
    top = np.linalg.eigh(M @ M.T)[1][:, -1]
    assert abs(float(np.dot(out["u"], top))) / np.linalg.norm(out["u"]) > 0.999


def test_demo_power_iteration_threshold_without_epsilon_runs_the_exact_mode_under_the_group_key(tmp_path):
    """Without --epsilon the demo runs the exact mode under the group key (docs/protocols/power-iteration.md,
    "The exact mode with a group key"): u and x are numpy's, the JSON keeps its exact-mode fields and gains
    the key block (no noise share: the exact mode adds no noise)."""
    blocks = _blocks(np.random.default_rng(37))
    data = []
    for name, A in zip(NAMES, blocks):
        np.save(tmp_path / f"{name}.npy", A)
        data += ["--data", str(tmp_path / f"{name}.npy")]
    run = subprocess.run(
        [sys.executable, "-m", "smcdp", "demo", "power-iteration", *data, "--threshold", "1", "--key-bits", "512"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout)
    key = out["key"]
    assert key["kind"] == "threshold" and key["threshold"] == 1 and key["parties"] == NAMES
    assert key["generation_seconds"] > 0 and "noise_share" not in key
    for field in ("u", "x", "components", "iterations", "decoys", "converged", "bytes_sent", "seconds"):
        assert field in out, field
    assert out["converged"] and "epsilon" not in out
    M = np.hstack(blocks)
    _, V = np.linalg.eigh(M @ M.T)
    u = V[:, -1] * np.sign(V[np.argmax(np.abs(V[:, -1])), -1])
    x = M.T @ u
    x /= np.linalg.norm(x)
    assert np.allclose(np.abs(np.dot(out["u"], u)), 1, atol=1e-9)
    assert np.allclose(np.abs(np.dot(out["x"], x)), 1, atol=1e-9)


def test_demo_power_iteration_threshold_needs_the_local_engine_and_no_seed(capsys):
    dp = ["--threshold", "1", "--key-bits", "512", "--epsilon", "1", "--delta", "1e-6"]
    assert cli_main(["demo", "power-iteration", *dp, "--compute", "dask"]) == 2
    assert "--threshold needs --compute local" in capsys.readouterr().err
    # refused before the key ceremony (it used to run the ceremony and then fail the session)
    assert cli_main(["demo", "power-iteration", "--threshold", "1", "--key-bits", "512", "--seed", "3"]) == 2
    err = capsys.readouterr().err
    assert "--threshold cannot run with --seed" in err and "key ceremony" not in err


def test_demo_dp_aggregate_threshold_runs_the_ceremony_then_the_session_under_the_group_key(tmp_path):
    """dp-aggregate under a group key (docs/protocols/dp-aggregate.md, "Under a group key"): the ceremony, then
    a shared-noise session whose noise shares are drawn for the smallest party's size level; the JSON keeps its
    fields and gains key (h = K − t by default) and size_level."""
    import math

    from smcdp.plugins.dp_aggregate import load_dataset
    from smcdp.protocols.dp_aggregate import DPAggregateParams, selected_sensitivity, sensitivity_key, train_local
    from smcdp.protocols.dp_aggregate_threshold import level_of

    rng = np.random.default_rng(7)
    w_true = rng.normal(size=4)
    paths = []
    for name, n in zip(NAMES, (150, 60, 90)):
        X = rng.normal(size=(n, 4))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.0001
        y = np.where(X @ w_true + 0.3 * rng.normal(size=n) > 0, 1, 0)
        np.savez(tmp_path / f"{name}.npz", X=X, y=y)
        paths.append(str(tmp_path / f"{name}.npz"))
    keep = tmp_path / "keep"
    lam = 0.05
    args = ["--threshold", "1", "--key-bits", "512", "--epsilon", "30", "--lam", str(lam), "--keep-dir", str(keep)]
    run = subprocess.run(
        [sys.executable, "-m", "smcdp", "demo", "dp-aggregate", *[a for p in paths for a in ("--data", p)], *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "candidate moduli expected" in run.stderr
    out = json.loads(run.stdout)
    key = out["key"]
    assert key["kind"] == "threshold" and key["threshold"] == 1 and key["parties"] == NAMES
    assert key["generation_seconds"] > 0 and key["key_bits"] == 512 and key["group"] == "demo"
    assert key["noise_share"] == 2 and key["honest_noise_sigma2"] == 1.0  # h = K − t: σ² survives t parties
    for i, name in enumerate(NAMES, 1):
        g = KeyStore(keep / name / "keys").load("demo", allow_insecure=True).summary()
        assert g["fingerprint"] == key["fingerprint"] and g["index"] == i
    for field in (
        "weights",
        "shares",
        "shares_mod",
        "epsilon",
        "delta",
        "budgets",
        "sessions",
        "seconds",
        "bytes_sent",
    ):
        assert field in out, field
    assert out["calibration"] == "gaussian" and out["delta"] == 1e-6 and out["noise_parties"] == 2
    assert [o["status"] for o in out["sessions"]] == ["released"]
    assert {b["spent_epsilon"] for b in out["budgets"].values()} == {"30"}
    # the noise shares were drawn for the smallest party's level; the release is the average of the local
    # models plus that noise (within 6 of its standard deviations)
    fits = [train_local(*load_dataset(p), lam) for p in paths]
    params = DPAggregateParams(
        n_parties=3,
        dim=4,
        epsilon=30.0,
        lam=lam,
        calibration="gaussian",
        delta=1e-6,
        noise_parties=2,
        key_group="demo",
        key_threshold=1,
    )
    table = params.level_keys
    smallest = min(level_of(sensitivity_key(s)[0], table) for _, s in fits)
    assert out["size_level"]["selected"] == smallest
    t, q = params.share_parameters(selected_sensitivity(table[smallest]))
    sd = math.sqrt(3 * t * q) * 2.0**-params.frac_bits / 3
    assert np.max(np.abs(np.array(out["weights"]) - np.mean([w for w, _ in fits], axis=0))) < 6 * sd + 1e-9


def test_demo_dp_aggregate_threshold_needs_the_shared_noise_and_no_seed(tmp_path, capsys):
    args = ["--data", "a.npz", "--data", "b.npz", "--epsilon", "1", "--lam", "0.1", "--key-bits", "512"]
    keep = ["--keep-dir", str(tmp_path / "k")]
    assert cli_main(["demo", "dp-aggregate", *args, "--threshold", "1", "--calibration", "exact", *keep]) == 2
    assert "--threshold needs --calibration gaussian" in capsys.readouterr().err
    assert cli_main(["demo", "dp-aggregate", *args, "--threshold", "1", "--seed", "3", *keep]) == 2
    assert "--threshold cannot run with --seed" in capsys.readouterr().err
    for t in ("0", "2"):  # two data parties: t = 1 only (before, t = 2 was reported as noise_parties = 0)
        assert cli_main(["demo", "dp-aggregate", *args, "--threshold", t, *keep]) == 2
        assert "--threshold must lie in [1, 1]" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()  # refused before any party process started


def test_demo_dp_aggregate_shared_noise_flags_are_checked_before_any_process(tmp_path, capsys):
    """--delta and --noise-parties belong to --calibration gaussian, which needs --delta: each misuse exits 2
    naming the flag, before any party process starts."""
    args = ["--data", "a.npz", "--data", "b.npz", "--epsilon", "1", "--lam", "0.1", "--key-bits", "512"]
    keep = ["--keep-dir", str(tmp_path / "k")]
    assert cli_main(["demo", "dp-aggregate", *args, "--delta", "1e-6", *keep]) == 2
    assert "--delta and --noise-parties belong to --calibration gaussian" in capsys.readouterr().err
    assert cli_main(["demo", "dp-aggregate", *args, "--noise-parties", "2", *keep]) == 2
    assert "--delta and --noise-parties belong to --calibration gaussian" in capsys.readouterr().err
    assert cli_main(["demo", "dp-aggregate", *args, "--calibration", "gaussian", *keep]) == 2
    assert "--calibration gaussian needs --delta" in capsys.readouterr().err
    assert not (tmp_path / "k").exists()
