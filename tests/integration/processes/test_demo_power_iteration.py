"""The contract of ``smcdp demo power-iteration`` (checks outside the test suite rely on it)."""

import json
import subprocess
import sys

import numpy as np
import pytest

from smcdp.protocols.power_iteration import plaintext_components
from tests.support.paths import REPO
from tests.unit.protocols.test_power_iteration_topr import spectrum_data

pytest.importorskip("distributed", reason="the Dask engine needs the optional extra smcdp[dask]")


def demo(*args):
    out = subprocess.run(
        [sys.executable, "-m", "smcdp", "demo", "power-iteration", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


@pytest.mark.slow
def test_demo_components_dask_and_shard_folders(tmp_path):
    blocks = spectrum_data(np.random.default_rng(23), 9, (40, 60), [7.0, 4.0, 2.0, 0.7])
    np.save(tmp_path / "a.npy", blocks[0])
    (tmp_path / "b").mkdir()
    np.save(tmp_path / "b" / "part-0.npy", blocks[1][:, :25])
    np.save(tmp_path / "b" / "part-1.npy", blocks[1][:, 25:])
    common = [
        "--data",
        str(tmp_path / "a.npy"),
        "--data",
        str(tmp_path / "b"),
        "--key-bits",
        "512",
        "--components",
        "2",
        "--seed",
        "5",
        "--block-values",
        "1024",
    ]
    dask = demo(*common, "--compute", "dask", "--dask-workers", "1")
    local = demo(*common)
    _, U, X = plaintext_components(blocks, 2)
    for out in (dask, local):
        assert len(out["components"]) == 2
        assert out["u"] == out["components"][0]["u"] and out["x"] == out["components"][0]["x"]
        for j in range(2):
            assert np.allclose(out["components"][j]["u"], U[:, j], atol=1e-5)
            assert np.allclose(out["components"][j]["x"], X[:, j], atol=1e-5)
        assert set(out["peak_rss_bytes"]) == {"trent", "alice", "bob"} and all(out["peak_rss_bytes"].values())
        assert out["data_bytes"] == {"alice": blocks[0].nbytes, "bob": blocks[1].nbytes}
        assert out["params"]["components"] == 2 and out["converged"]
        for key in ("iterations", "real_iterations", "decoys", "seconds", "bytes_sent", "roles", "session_id"):
            assert key in out
    assert dask["compute"]["engine"] == "dask" and dask["compute"]["workers"] == 1
    assert dask["compute"]["tasks"] == sum(p["tasks"] for p in dask["compute"]["per_party"].values()) > 0
    assert local["compute"] == dict(local["compute"], engine="local", tasks=0)
    # same data, same seeds: the Dask engine changes nothing in the results
    assert dask["components"] == local["components"]
    assert dask["iterations"] == local["iterations"]
