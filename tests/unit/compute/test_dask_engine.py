"""The Dask engine against the local engine (bit-identical), the key's path, and workers killed mid-round."""

import asyncio
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

pytest.importorskip("distributed", reason="the Dask engine needs the optional extra smcdp[dask]")
pytestmark = pytest.mark.slow  # starts Dask clusters (not in make test-quick)

from distributed.diagnostics.plugin import SchedulerPlugin  # noqa: E402

from smcdp.compute import ComputeConfig, LocalEngine, kernels, make_engine, open_matrix  # noqa: E402
from smcdp.errors import Unavailable  # noqa: E402
from smcdp.net.channel import InMemoryNetwork  # noqa: E402
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent  # noqa: E402
from tests.unit.compute.test_sources import passes, same, write_shards  # noqa: E402
from tests.unit.protocols.test_power_iteration_topr import check_components, spectrum_data  # noqa: E402


def dask_engine(workers=2):
    return make_engine(ComputeConfig(engine="dask", workers=workers, memory_limit="1GiB"))


@pytest.fixture(scope="module")
def engine():
    eng = dask_engine()
    yield eng
    eng.close()


def dask_passes(engine, source, sk, Q):
    async def go():
        async with engine.session(source, sk) as cs:
            out = (
                await cs.frobenius_sq(),
                await cs.initial_product(b"s" * 32, 2),
                await cs.gram_pass(Q),
                np.concatenate([o async for _, o in cs.project(Q[:, :1])]),
                await cs.clipped_gram_pass(Q, 5.0),
            )
            ints = list(range(-40, 40)) + [2**200, -(2**190)]
            assert await cs.decrypt(await cs.encrypt(ints)) == ints
            return out, await cs.astats()

    return asyncio.run(go())


def test_dask_and_local_engines_are_bit_identical_on_every_source(tmp_path, engine, keypair512):
    zarr = pytest.importorskip("zarr")
    _, sk = keypair512
    A = np.random.default_rng(0).normal(size=(30, 1200)).astype(np.float32)
    np.save(tmp_path / "a.npy", A)
    write_shards(tmp_path / "sh", A, [400, 800])
    z = zarr.open_array(str(tmp_path / "z.zarr"), mode="w", shape=A.shape, chunks=(30, 100), dtype="f4")
    z[:] = A
    Q = np.linalg.qr(np.random.default_rng(1).normal(size=(30, 3)))[0]
    for name in ("a.npy", "sh", "z.zarr"):
        src = open_matrix(tmp_path / name, block_values=30 * 100)
        assert len(src.blocks) == 12
        ref = passes(src, sk, Q, workers=2)
        got, stats = dask_passes(engine, src, sk, Q)
        assert same(got, ref), name
        assert stats["engine"] == "dask" and stats["tasks"] > 4 * 12 and stats["deterministic"] is True
        assert stats["worker_peak_rss_bytes"] and all(v > 0 for v in stats["worker_peak_rss_bytes"].values())


def run_protocol(blocks_or_sources, params, seed, engines):
    roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(len(blocks_or_sources))}}
    net = InMemoryNetwork(roles, timeout=600)
    coros = {"trent": lambda ch: trent(ch, params, seed=seed, allow_insecure_keys=True)}
    for i, data in enumerate(blocks_or_sources):
        coros[f"party{i + 1}"] = lambda ch, data=data, i=i: data_party(
            ch, data, params, engine=engines[i], seed=seed + i + 1, allow_insecure_keys=True
        )
    return asyncio.run(net.run(coros))


def test_the_protocol_on_dask_equals_the_protocol_on_the_local_engine(tmp_path, engine):
    blocks = spectrum_data(np.random.default_rng(8), 12, (700, 500), [9.0, 5.0, 2.5, 1.0])
    sources = []
    for i, A in enumerate(blocks):
        write_shards(tmp_path / f"p{i}", A, [A.shape[1] // 3, A.shape[1] // 2])
        sources.append(open_matrix(tmp_path / f"p{i}", block_values=12 * 100))
    params = PowerIterationParams(n_parties=2, key_bits=512, p=0.8, tol=1e-10, components=3)
    local = run_protocol(sources, params, 21, [LocalEngine(2), LocalEngine(1)])
    dask = run_protocol(sources, params, 21, [engine, engine])
    assert check_components(blocks, local, 3) == 3
    assert dask["trent"].components == local["trent"].components
    assert dask["trent"].rounds == local["trent"].rounds and dask["trent"].decoys == local["trent"].decoys
    for role in ("party1", "party2"):
        assert dask[role].components == local[role].components
        assert dask[role].alpha == local[role].alpha
        assert dask[role].stats["compute"]["tasks"] > 0 and local[role].stats["compute"]["tasks"] == 0


def test_the_key_reaches_the_workers_only(tmp_path, keypair512):
    _, sk = keypair512
    eng = make_engine(ComputeConfig(engine="dask", workers=2, memory_limit="1GiB"))
    try:
        src = open_matrix(_small(tmp_path), block_values=1024)

        async def go():
            async with eng.session(src, sk) as cs:
                # every task's spec as the scheduler held it when the task went to a worker (a task
                # that finished is forgotten: the scheduler's tasks afterwards may hold none)
                sched = eng.cluster.scheduler
                recorder = _SpecRecorder(sched)
                sched.add_plugin(recorder)
                await cs.decrypt(await cs.encrypt([1, 2, 3] * 20))
                key_state = sched.tasks[cs._key.key]
                p_bytes = int(sk.p).to_bytes((int(sk.p).bit_length() + 7) // 8, "big")
                specs = list(recorder.specs)
                name = cs._key.key
                held = eng.client.run(lambda dask_worker: name in dask_worker.data)
                # the workers hold it (``held``); the scheduler hears of each replica a moment later
                # (under load, after the decryption returned): wait for that, bounded
                until = time.monotonic() + 20.0
                while len(key_state.who_has) < len(held) and time.monotonic() < until:
                    await asyncio.sleep(0.05)
                return key_state.run_spec, specs, p_bytes, held, len(key_state.who_has)

        run_spec, specs, p_bytes, held, holders = asyncio.run(go())
        assert run_spec is None  # scattered data: the scheduler has no copy
        assert specs and not any(p_bytes in s or str(int(sk.p)).encode() in s for s in specs)
        assert all(held.values()) and holders == 2  # every worker holds it (broadcast)
        # and keeps it: the active memory manager (on by default, it drops "excess" replicas every
        # 2 s) is off, so a slow pass cannot find its worker's copy gone
        assert eng.client.amm.running() is False
        # after the session: every worker has forgotten it, and spilling to disk is off
        assert eng.client.run(lambda: len(kernels._KEYS)) == {a: 0 for a in held}
        cfg = eng.client.run(lambda: __import__("dask").config.get("distributed.worker.memory.spill"))
        assert set(cfg.values()) == {False}
        assert eng.cluster.scheduler.address.startswith("tls://")
    finally:
        eng.close()


class _SpecRecorder(SchedulerPlugin):
    """Keeps the pickled run_spec of every task the scheduler sends to a worker."""

    name = "smcdp-test-spec-recorder"

    def __init__(self, scheduler) -> None:
        self.scheduler = scheduler
        self.specs: list[bytes] = []

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if finish == "processing":
            ts = self.scheduler.tasks.get(key)
            if ts is not None and ts.run_spec is not None:
                self.specs.append(pickle.dumps(ts.run_spec))


def _small(tmp_path):
    np.save(tmp_path / "small.npy", np.random.default_rng(3).normal(size=(8, 400)))
    return tmp_path / "small.npy"


def _kill_when_busy(engine, marker, stop, how_many=1):
    """SIGKILL ``how_many`` workers as soon as one of them runs a task whose key holds ``marker``
    (that one first): the batch is then surely under way and unfinished, however fast it runs.  The
    thread's ``killed_at`` says when, ``victims`` which processes; ``stop`` ends the watch unkilled."""
    pids = engine.client.run(os.getpid)

    def watch():
        while not stop.is_set():
            for addr, keys in engine.client.processing().items():
                if addr in pids and any(marker in str(k) for k in keys):
                    others = [p for a, p in sorted(pids.items()) if a != addr]
                    thread.victims = [pids[addr], *others][:how_many]
                    for v in thread.victims:
                        os.kill(v, signal.SIGKILL)
                    thread.killed_at = time.perf_counter()
                    return
            stop.wait(0.005)

    thread = threading.Thread(target=watch, daemon=True)
    thread.killed_at, thread.victims = None, []
    thread.start()
    return thread


def test_a_worker_killed_mid_round_is_retried_without_corrupting_it(tmp_path, keypair512):
    A = np.random.default_rng(4).normal(size=(400, 60_000))
    write_shards(tmp_path / "sh", A, list(range(5000, 60_000, 5000)))
    src = open_matrix(tmp_path / "sh", block_values=400 * 1250)  # 48 blocks
    Q = np.linalg.qr(np.random.default_rng(5).normal(size=(400, 2)))[0]
    _, sk = keypair512
    ref = passes(src, sk, Q, workers=1)[2]
    eng = dask_engine()
    stop = threading.Event()
    try:

        async def gram():
            async with eng.session(src, sk) as cs:
                clean = await cs.gram_pass(Q)
                await asyncio.to_thread(eng.client.wait_for_workers, 2)
                watcher = _kill_when_busy(eng, "-gram-b", stop)
                started = time.perf_counter()
                killed = await cs.gram_pass(Q)
                done = time.perf_counter()
                stop.set()
                watcher.join()
                assert watcher.killed_at is not None and started < watcher.killed_at < done  # mid-round
                return clean, killed, watcher.victims

        clean, killed, victims = asyncio.run(gram())
        assert same(clean, ref) and same(killed, ref)
        assert victims[0] not in eng.client.run(os.getpid).values()  # it really died
    finally:
        stop.set()
        eng.close()


class _Answers:
    """A Dask client stand-in whose ``run`` answers with fixed per-worker results."""

    def __init__(self, answers) -> None:
        self.answers, self.calls = answers, []

    def run(self, function, *args, on_error="raise"):
        self.calls.append((function, args, on_error))
        return dict(self.answers)


def test_forgetting_the_key_tolerates_a_worker_that_died_but_not_a_live_one_that_failed(caplog):
    """A worker killed as the session ended cannot be reached to forget the key (its memory, and the
    key with it, are gone): that is logged, not raised, so the session's end does not fail.  Any
    other error from a worker means a live process may still hold the key, and is raised."""
    from types import SimpleNamespace

    from distributed.comm.core import CommClosedError

    from smcdp.compute.dask_engine import DaskSession

    gone = _Answers({"tls://w1": True, "tls://w2": CommClosedError("in <TLS (closed)>: Stream is closed")})
    with caplog.at_level("WARNING", logger="smcdp.compute.dask"):
        DaskSession._forget_everywhere(SimpleNamespace(client=gone, _kid="k1"))
    assert gone.calls == [(kernels.forget_key, ("k1",), "return")]
    assert "tls://w2 could not be reached" in caplog.text
    failed = _Answers({"tls://w1": True, "tls://w2": RuntimeError("boom")})
    with pytest.raises(RuntimeError, match="boom"):
        DaskSession._forget_everywhere(SimpleNamespace(client=failed, _kid="k1"))


@pytest.mark.parametrize("kill_all", [False, True])
def test_a_worker_killed_mid_decryption_gives_the_right_plaintexts(tmp_path, keypair2048, kill_all):
    _, sk = keypair2048
    src = open_matrix(_small(tmp_path), block_values=1024)
    ints = [int(v) for v in np.random.default_rng(6).integers(-(2**62), 2**62, size=300)]
    eng = dask_engine()
    stop = threading.Event()
    try:

        async def go():
            async with eng.session(src, sk) as cs:
                cts = await cs.encrypt(ints)
                watcher = _kill_when_busy(eng, "-decrypt-", stop, how_many=2 if kill_all else 1)
                try:
                    started = time.perf_counter()
                    out = await cs.decrypt(cts)
                    done = time.perf_counter()
                    stop.set()
                    watcher.join()
                    assert watcher.killed_at is not None and started < watcher.killed_at < done
                    return out, cs.key_rebinds
                finally:
                    stop.set()
                    watcher.join()

        try:
            got, rebinds = asyncio.run(go())
        except Unavailable as exc:  # every key holder died more often than the retries allow
            assert kill_all and "Dask workers" in str(exc)
            return
        assert got == ints
        if kill_all:
            assert rebinds >= 1  # the key was lost with its holders and scattered again
    finally:
        eng.close()


def test_an_existing_cluster_on_loopback_tcp(tmp_path, keypair512):
    """``scheduler = "tcp://127.0.0.1:…"``: the party joins a cluster it did not start (plain TCP is
    accepted on loopback only); the results equal the local engine's."""
    import dask
    import distributed

    _, sk = keypair512
    A = np.random.default_rng(7).normal(size=(16, 2000))
    np.save(tmp_path / "a.npy", A)
    src = open_matrix(tmp_path / "a.npy", block_values=16 * 200)
    Q = np.linalg.qr(np.random.default_rng(8).normal(size=(16, 2)))[0]
    # the cluster stands for one the party did not start: it must not inherit the process-wide Dask
    # settings an earlier DaskEngine in this test process left (require-encryption)
    with (
        dask.config.set({"distributed.comm.require-encryption": False}),
        distributed.LocalCluster(
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            protocol="tcp://",
            host="127.0.0.1",
            dashboard_address=None,
            memory_limit="1GiB",
        ) as cluster,
    ):
        eng = make_engine(ComputeConfig(engine="dask", scheduler=cluster.scheduler_address))
        try:
            got, stats = dask_passes(eng, src, sk, Q)
        finally:
            eng.close()
    assert same(got, passes(src, sk, Q, workers=1))
    assert stats["scheduler"] == cluster.scheduler_address and stats["workers"] == 1 and stats["tasks"] > 0


def test_a_subgroup_key_is_refused_rather_than_downgraded(tmp_path, engine):
    """The workers rebuild a key from (n, p, q): for a subgroup key (docs/crypto.md) they would encrypt with
    their own bases, which the owner's key then refuses -- the engine says so before any work."""
    from smcdp.crypto.paillier import generate_keypair
    from smcdp.errors import InvalidMessage

    _, sk = generate_keypair(512, allow_insecure=True, subgroup=True)
    src = open_matrix(_small(tmp_path), block_values=1024)

    async def go():
        async with engine.session(src, sk):
            pass

    with pytest.raises(InvalidMessage, match="subgroup key"):
        asyncio.run(go())
