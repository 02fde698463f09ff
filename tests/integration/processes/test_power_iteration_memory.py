"""A data party whose shard folder is larger than the memory it is given completes, with its peak
resident memory (VmHWM, reset at session start, reported in its session record) below its data size.

The party processes are real (LocalCluster, gRPC + mutual TLS).  Where the cgroup-v1 memory controller
is writable (root, as in CI), the local-engine party additionally runs inside a memory cgroup whose
limit is below the data size: a party that loaded its matrix would be killed.  The page cache of the
shards is dropped first, so that the party's own reads are charged to it.
"""

import os
from pathlib import Path

import numpy as np
import pytest

from smcdp.compute import ComputeConfig
from smcdp.runtime.local import LocalCluster

K, N_BIG = 400, 250_000  # 400 MB of float32 shards for alice
CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def _spiked_shards(folder: Path, k: int, n: int, shard_cols: int, seed: int) -> int:
    """Gaussian noise plus a rank-one spike, written shard by shard (never all in memory)."""
    folder.mkdir()
    rng = np.random.default_rng(seed)
    u = rng.normal(size=(k, 1)).astype(np.float32)
    for i, c0 in enumerate(range(0, n, shard_cols)):
        w = min(shard_cols, n - c0)
        block = rng.standard_normal((k, w), dtype=np.float32)
        block += 0.2 * u * rng.standard_normal((1, w), dtype=np.float32)
        np.save(folder / f"part-{i:04d}.npy", block)
    return k * n * 4


def _drop_page_cache(folder: Path) -> None:
    for f in folder.iterdir():
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class MemoryCgroup:
    """A cgroup-v1 memory group with a hard limit (None if this machine does not allow one)."""

    def __init__(self, name: str, limit: int) -> None:
        self.path = CGROUP_V1 / name
        self.path.mkdir(exist_ok=True)
        try:
            # charge the party's existing pages to the group too (not every kernel allows it; without
            # it the limit covers what the party allocates and reads after joining: the session)
            (self.path / "memory.move_charge_at_immigrate").write_text("3")
        except OSError:
            pass
        (self.path / "memory.limit_in_bytes").write_text(str(limit))
        self.limit = limit

    @classmethod
    def create(cls, name: str, limit: int):
        if not (CGROUP_V1 / "cgroup.procs").exists() or not os.access(CGROUP_V1, os.W_OK):
            return None
        try:
            return cls(name, limit)
        except OSError:
            return None

    def add(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def max_usage(self) -> int:
        return int((self.path / "memory.max_usage_in_bytes").read_text())

    def remove(self) -> None:
        for pid in (self.path / "cgroup.procs").read_text().split():
            try:
                (CGROUP_V1 / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        try:
            self.path.rmdir()
        except OSError:
            pass


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["local", "dask"])
def test_party_with_more_data_than_memory_keeps_its_peak_rss_below_its_data(tmp_path, engine):
    if engine == "dask":
        pytest.importorskip("distributed", reason="the Dask engine needs the optional extra smcdp[dask]")
    data_bytes = _spiked_shards(tmp_path / "alice", K, N_BIG, 25_000, seed=1)
    rng = np.random.default_rng(2)
    np.save(tmp_path / "bob.npy", rng.normal(size=(K, 300)))
    _drop_page_cache(tmp_path / "alice")
    # local: one block thread and no crypto pool, so that the cgroup holds the party process alone
    compute = (
        ComputeConfig(workers=1)
        if engine == "local"
        else ComputeConfig(engine="dask", workers=2, memory_limit="700MiB")
    )
    parties = {
        "trent": {},
        "alice": {"power-iteration": {"data": tmp_path / "alice"}},
        "bob": {"power-iteration": {"data": tmp_path / "bob.npy"}},
    }
    roles = {"trent": "trent", "party1": "alice", "party2": "bob"}
    group = None
    with LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp_path / "run",
        open_policy=True,
        compute={"alice": compute, "bob": ComputeConfig(workers=1)},
    ) as cluster:
        if engine == "local":
            # three quarters of the data: the matrix cannot be held, even as float32
            group = MemoryCgroup.create(f"smcdp-test-{os.getpid()}", data_bytes * 3 // 4)
            if group is not None:
                group.add(cluster.procs["alice"].pid)
        try:
            recs = cluster.run(
                "power-iteration",
                roles,
                {"n_parties": 2, "key_bits": 512, "p": 1.0, "max_iterations": 3, "tol": 1e-12},
                initiator="trent",
                timeout=300,
            )
            max_usage = group.max_usage() if group is not None else None
            tr = recs["trent"]["result"] or {}
            x = np.load(tr["x_file"]) if tr.get("x_file") else None
        finally:
            if group is not None:
                group.remove()
    assert all(r["state"] == "succeeded" for r in recs.values()), {p: r.get("error") for p, r in recs.items()}
    alice = recs["alice"]
    assert alice["result"]["data_bytes"] == data_bytes
    peak = alice["stats"]["peak_rss_bytes"]
    assert alice["stats"]["peak_rss_scope"] == "since-reset"
    print(
        f"{engine}: peak RSS {peak / 2**20:.0f} MiB, data {data_bytes / 2**20:.0f} MiB, cgroup max usage "
        f"{None if max_usage is None else round(max_usage / 2**20)} MiB"
    )
    assert 0 < peak < data_bytes, (peak, data_bytes)
    if max_usage is not None:
        assert max_usage <= data_bytes * 3 // 4
    assert tr["x"] is None and x.shape == (N_BIG + 300, 1)  # too large for the record: in Trent's file
    assert abs(np.linalg.norm(x) - 1) < 1e-9
    if engine == "dask":
        assert alice["result"]["stats"]["compute"]["tasks"] > 0
