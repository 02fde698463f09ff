"""Matrix sources, the canonical block grid, the tree sum, the local engine and [compute] parsing."""

import asyncio
import os
import re
import time

import numpy as np
import pytest

from smcdp.compute import ComputeConfig, LocalEngine, open_matrix
from smcdp.compute.kernels import TreeSum, keyed_gaussian, tree_sum
from smcdp.compute.sources import ArraySource, DataChanged, NpySource, ShardSource, ZarrSource
from smcdp.errors import InvalidMessage
from smcdp.net.config import ConfigError
from smcdp.runtime.config import config_to_dict, dump_config, load_config
from smcdp.runtime.local import write_local_deployment


def write_shards(folder, A, cuts):
    folder.mkdir()
    for i, (a, b) in enumerate(zip([0, *cuts], [*cuts, A.shape[1]])):
        np.save(folder / f"part-{i:03d}.npy", A[:, a:b])
    return folder


@pytest.fixture
def matrix(tmp_path):
    rng = np.random.default_rng(0)
    return rng.normal(size=(20, 900)).astype(np.float32)


def passes(source, sk, Q, workers=2):
    async def go():
        async with LocalEngine(workers).session(source, sk) as cs:
            return (
                await cs.frobenius_sq(),
                await cs.initial_product(b"s" * 32, 2),
                await cs.gram_pass(Q),
                np.concatenate([o async for _, o in cs.project(Q[:, :1])]),
                await cs.clipped_gram_pass(Q, 5.0),
            )

    return asyncio.run(go())


def same(a, b):
    if isinstance(a, tuple):
        return all(same(x, y) for x, y in zip(a, b, strict=True))
    return np.array_equal(a, b)


def test_npy_shards_zarr_and_memory_give_identical_blocks_and_results(tmp_path, matrix, keypair512):
    zarr = pytest.importorskip("zarr")
    _, sk = keypair512
    A = matrix
    np.save(tmp_path / "a.npy", A)
    np.save(tmp_path / "f.npy", np.asfortranarray(A))
    write_shards(tmp_path / "sh", A, [300, 600])
    z = zarr.open_array(str(tmp_path / "z.zarr"), mode="w", shape=A.shape, chunks=(20, 100), dtype="f4")
    z[:] = A
    bv = 20 * 100  # 100 columns per block: the same grid for every layout
    sources = [
        open_matrix(tmp_path / "a.npy", block_values=bv),
        open_matrix(tmp_path / "f.npy", block_values=bv),
        open_matrix(tmp_path / "sh", block_values=bv),
        open_matrix(tmp_path / "z.zarr", block_values=bv),
        ArraySource(A, block_values=bv),
    ]
    assert [type(s) for s in sources[:4]] == [NpySource, NpySource, ShardSource, ZarrSource]
    for s in sources:
        assert s.shape == (20, 900) and s.nbytes == A.nbytes and len(s.blocks) == 9
        assert [(b.col0, b.col1) for b in s.blocks] == [(c, c + 100) for c in range(0, 900, 100)]
        assert np.array_equal(s.load(s.blocks[4]), A[:, 400:500].astype(np.float64))
    Q = np.linalg.qr(np.random.default_rng(1).normal(size=(20, 2)))[0]
    ref = passes(sources[0], sk, Q, workers=1)
    A64 = A.astype(np.float64)
    assert np.isclose(ref[0], np.sum(A64**2))
    assert np.allclose(ref[2][0], A64 @ A64.T @ Q) and np.allclose(ref[2][1], (A64.T @ Q).T @ (A64.T @ Q))
    assert np.allclose(ref[3][:, 0], A64.T @ Q[:, 0])
    for s in sources:
        assert same(passes(s, sk, Q, workers=2), ref), s


def test_shards_are_concatenated_in_name_order(tmp_path):
    d = tmp_path / "sh"
    d.mkdir()
    np.save(d / "b.npy", np.full((2, 3), 2.0))
    np.save(d / "a.npy", np.full((2, 1), 1.0))
    np.save(d / "c.npy", np.full((2, 2), 3.0))
    (d / "README.txt").write_text("not a shard")
    s = open_matrix(d)
    assert s.shape == (2, 6)
    got = np.concatenate([s.load(b) for b in s.blocks], axis=1)
    assert got[0].tolist() == [1, 2, 2, 2, 3, 3]


@pytest.mark.parametrize(
    "make,match",
    [
        (
            lambda d: (np.save(d / "a.npy", np.ones((2, 3))), np.save(d / "b.npy", np.ones((3, 3)))),
            "different numbers of rows",
        ),
        (
            lambda d: (np.save(d / "a.npy", np.ones((2, 3))), np.save(d / "b.npy", np.ones((2, 3), np.float32))),
            "different dtypes",
        ),
        (lambda d: np.save(d / "a.npy", np.array([[object()]], dtype=object), allow_pickle=True), "not a valid .npy"),
        (lambda d: np.save(d / "a.npy", np.array([["x"]])), "numeric"),
        (lambda d: np.save(d / "a.npy", np.ones(3)), "2-D"),
        (lambda d: None, "no .npy shards"),
    ],
)
def test_bad_shard_folders_are_refused(tmp_path, make, match):
    d = tmp_path / "sh"
    d.mkdir()
    make(d)
    with pytest.raises(InvalidMessage, match=match):
        open_matrix(d)


def test_missing_file_and_bad_block_size(tmp_path):
    with pytest.raises(InvalidMessage, match="does not exist"):
        open_matrix(tmp_path / "nope.npy")
    np.save(tmp_path / "a.npy", np.ones((2, 2)))
    with pytest.raises(InvalidMessage, match="block_values"):
        open_matrix(tmp_path / "a.npy", block_values=10)


def test_nan_is_refused_by_the_first_pass(tmp_path, keypair512):
    A = np.ones((4, 50))
    A[2, 33] = np.nan
    np.save(tmp_path / "a.npy", A)
    with pytest.raises(InvalidMessage, match=r"columns .* NaN"):
        passes(open_matrix(tmp_path / "a.npy", block_values=1024), keypair512[1], np.eye(4)[:, :2])


def test_data_changed_during_a_session_fails_it(tmp_path, keypair512):
    A = np.random.default_rng(2).normal(size=(4, 3000))
    d = write_shards(tmp_path / "sh", A, [1000, 2000])
    src = open_matrix(d, block_values=1024)

    async def go():
        async with LocalEngine(1).session(src, keypair512[1]) as cs:
            await cs.frobenius_sq()
            time.sleep(0.01)
            np.save(d / "part-001.npy", A[:, 1000:2000] * 2)  # same size, new modification time
            os.utime(d / "part-001.npy", ns=(time.time_ns(), time.time_ns() + 10**9))
            await cs.gram_pass(np.eye(4)[:, :1])

    with pytest.raises(DataChanged, match="changed during the session") as info:
        asyncio.run(go())
    assert info.value.code == "FAILED_PRECONDITION"


def test_tree_sum_streaming_equals_batch_and_fixed_order():
    rng = np.random.default_rng(3)
    parts = [rng.normal(size=4) * 10.0 ** rng.integers(-8, 8) for _ in range(130)]
    for n in (1, 2, 7, 8, 9, 63, 64, 65, 130):
        acc = TreeSum()
        for p in parts[:n]:
            acc.push(p)
        assert np.array_equal(acc.result(), tree_sum(parts[:n])), n
    # the order is the tree's, not left to right (so it is a real, checked choice)
    assert not all(np.array_equal(tree_sum(parts[:n]), sum(parts[1:n], parts[0])) for n in (65, 130))


def test_keyed_gaussian_is_reproducible_blockwise_and_normal():
    key = bytes(range(32))
    a = keyed_gaussian(key, 3, (500, 4))
    assert np.array_equal(a, keyed_gaussian(key, 3, (500, 4)))
    assert not np.array_equal(a, keyed_gaussian(key, 4, (500, 4)))
    assert not np.array_equal(a, keyed_gaussian(bytes(32), 3, (500, 4)))
    big = keyed_gaussian(key, 0, (100_000, 1))
    assert abs(big.mean()) < 0.02 and abs(big.std() - 1) < 0.02


# ----------------------------------------------------------------------------------------- [compute]
def _write(tmp_path, compute: str):
    """alice's configuration from a loopback deployment, with ``compute`` appended."""
    cfg = tmp_path / "config" / "alice.toml"
    if not cfg.exists():
        write_local_deployment(tmp_path, ["alice", "bob"])
    base = cfg.read_text().split("\n[compute]")[0]
    cfg.write_text(base + compute)
    return cfg


def test_compute_section_round_trips_and_resolves_paths(tmp_path):
    p = _write(
        tmp_path,
        '\n[compute]\nengine = "dask"\nscheduler = "tls://sched.example:8786"\n'
        'tls_ca = "dask/ca.pem"\ntls_cert = "dask/c.pem"\ntls_key = "dask/k.pem"\nblock_values = 65536\n',
    )
    cfg = load_config(p)
    assert cfg.compute.engine == "dask" and cfg.compute.tls_ca == tmp_path / "config" / "dask" / "ca.pem"
    out = dump_config(cfg, tmp_path / "config" / "again.toml")
    assert load_config(out).compute == cfg.compute
    assert config_to_dict(cfg, tmp_path / "config")["compute"]["tls_ca"] == "dask/ca.pem"
    assert "compute" not in config_to_dict(load_config(_write(tmp_path, "")))  # the default is not written


@pytest.mark.parametrize(
    "section,match",
    [
        ('engine = "spark"', "engine must be one of"),
        ("bogus = 1", "unknown key"),
        ('engine = "dask"\nscheduler = "tcp://10.1.2.3:8786"', "plain TCP to another host"),
        ('engine = "dask"\nscheduler = "tls://h:8786"', "tls_ca, tls_cert and tls_key are all required"),
        (
            'engine = "dask"\nscheduler = "tls://h:8786"\nworkers = 2\ntls_ca="a"\ntls_cert="b"\ntls_key="c"',
            "existing cluster",
        ),
        ("workers = 0", "workers must be"),
        ('engine = "dask"\nmemory_limit = "lots"', "memory_limit"),
        ('memory_limit = "1GiB"', "dask"),
        ("block_values = 5", "block_values"),
    ],
)
def test_bad_compute_sections_are_refused(tmp_path, section, match):
    with pytest.raises(ConfigError, match=match):
        load_config(_write(tmp_path, f"\n[compute]\n{section}\n"))


def test_plain_tcp_is_accepted_on_loopback_or_with_an_explicit_opt_in():
    assert not ComputeConfig.from_mapping({"engine": "dask", "scheduler": "tcp://127.0.0.1:8786"}).plaintext_scheduler
    cfg = ComputeConfig.from_mapping({"engine": "dask", "scheduler": "tcp://10.0.0.5:8786", "allow_plaintext": True})
    assert cfg.plaintext_scheduler


@pytest.mark.parametrize("errno_", [__import__("errno").EMFILE, __import__("errno").ENOMEM, __import__("errno").EIO])
def test_a_machine_that_runs_out_is_not_a_bad_input(tmp_path, monkeypatch, errno_):
    """Too few file descriptors, no memory or a disk error while reading the data said "the data file is not a
    valid .npy array" (InputRejected, not resumable).  They are this party's machine, not its data: passed on,
    so the session fails UNAVAILABLE naming the party and the cause, resumably."""
    from smcdp.compute import sources
    from smcdp.errors import NoSpace, resource_failure

    path = tmp_path / "a.npy"
    np.save(path, np.ones((3, 2)))

    def broken(*a, **kw):
        raise OSError(errno_, os.strerror(errno_))

    monkeypatch.setattr(sources.np, "load", broken)
    with pytest.raises(OSError) as info:
        _ = open_matrix(path).shape
    failure = resource_failure(info.value, "alice", "session s")
    assert isinstance(failure, NoSpace) and failure.code == "UNAVAILABLE" and failure.origin == "alice"
    assert os.strerror(errno_) in str(failure)
    # a file that is not an array at all is still the data's fault
    monkeypatch.undo()
    (tmp_path / "b.npy").write_bytes(b"not an array")
    with pytest.raises(InvalidMessage, match=re.escape("not a valid .npy array")):
        _ = open_matrix(tmp_path / "b.npy").shape


def test_npy_files_are_opened_one_at_a_time(tmp_path, monkeypatch):
    """np.load parses a .npy header with ast.literal_eval, and CPython 3.11's AST constructor is not thread-safe
    ("SystemError: AST constructor recursion depth mismatch" in a .ci/run's twenty concurrent sessions): blocks
    loaded by many threads open their files one at a time; their columns are copied concurrently."""
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import smcdp.compute.sources as sources

    np.save(tmp_path / "m.npy", np.arange(256 * 40, dtype=np.float64).reshape(256, 40))
    src = sources.open_matrix(tmp_path / "m.npy", block_values=256 * 4)
    inside, most = [0], [0]
    guard = threading.Lock()
    real = np.load

    def slow_load(*args, **kwargs):
        with guard:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # the window two threads' header parses would overlap in
        try:
            return real(*args, **kwargs)
        finally:
            with guard:
                inside[0] -= 1

    monkeypatch.setattr(sources.np, "load", slow_load)
    with ThreadPoolExecutor(8) as pool:
        blocks = list(pool.map(lambda b: src.load(b).copy(), src.blocks * 4))
    assert len(src.blocks) >= 8 and most[0] == 1
    whole = np.load(tmp_path / "m.npy")
    for b, got in zip(src.blocks * 4, blocks):
        assert np.array_equal(got, whole[:, b.col0 : b.col1])
