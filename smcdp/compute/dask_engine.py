"""The Dask engine: a data party's blocks and crypto as tasks on the party's own Dask cluster.

``scheduler = "local"`` starts a ``distributed.LocalCluster`` inside the party process: single-threaded
worker processes (spawned, never forked) on loopback with TLS (``security=True``: temporary
self-signed credentials held in memory).  ``scheduler = "tls://host:port"`` joins an existing cluster
with the party's client certificate for that cluster's own CA; plain ``tcp://`` is refused off loopback
unless the configuration opts in (:mod:`smcdp.compute.config`).

How a session uses the cluster:

* **Key.** The private key (n, p, q) is scattered with ``direct=True, broadcast=True``: it goes from
  the party process straight to the workers, and the scheduler records only who holds it.  Crypto
  tasks take the future as an argument, so no task specification, worker plugin or log carries key
  bytes.  Each worker builds its CRT tables once (a warm-up task per worker).  At the end of the session
  the future is released and every worker drops its cached key (:func:`kernels.forget_key`).
* **Data.** The source object (paths and grid only) and the k × b matrix Q are scattered once per pass;
  each block task reads its own columns on its worker.  The k × b partial results are summed by tree
  tasks of fan-in 8 in block order (the same tree as the local engine), and the party gathers only the
  final k × b and b × b results, directly from the worker that holds them.
* **Faults.** Every task is a pure function of immutable, fingerprinted inputs (decryption is
  deterministic; a re-run encryption is another valid ciphertext of the same plaintext and only one
  result per task reaches the party), so Dask may re-run the tasks of a worker that died.  Scattered
  data cannot be recomputed: if every worker holding the key, the source or Q dies, the batch fails with
  "lost dependencies"; the engine then scatters them again and resubmits the batch (twice at most).
* **No spilling, no replica reduction.** Worker spilling to disk is switched off for clusters this
  engine starts, so key material and plaintexts never reach the workers' disks; so is the active
  memory manager, whose ReduceReplicas policy would undo the broadcast of the key.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import time
import warnings
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import numpy as np

from smcdp.compute import kernels
from smcdp.compute.base import ComputeEngine, ComputeSession
from smcdp.compute.config import ComputeConfig
from smcdp.compute.memory import peak_rss
from smcdp.compute.sources import Block, MatrixSource
from smcdp.crypto.paillier import PrivateKey
from smcdp.errors import InvalidMessage, SmcdpError, Unavailable

log = logging.getLogger("smcdp.compute.dask")

#: integers per crypto task (encryption is ~8× cheaper per item than decryption)
ENCRYPT_CHUNK = 32
DECRYPT_CHUNK = 8
#: resubmissions of a batch whose scattered inputs were lost with their workers
RESUBMITS = 2

#: Dask configuration for clusters this engine starts (and for its client)
CLUSTER_CONFIG = {
    "distributed.worker.memory.spill": False,  # key material and plaintexts never reach disk
    "distributed.worker.memory.target": False,
    "distributed.scheduler.allowed-failures": 3,  # re-run the tasks of a killed worker
    # the key and each pass's inputs are broadcast on purpose: every worker decrypts with its own
    # copy.  The active memory manager's ReduceReplicas (on by default, every 2 s) would drop all
    # but one replica, and the key would then travel worker to worker in the middle of a pass.
    "distributed.scheduler.active-memory-manager.start": False,
    "distributed.comm.require-encryption": True,
    # the scheduler and workers always run an HTTP server: serve the health check only (no task,
    # worker or metrics pages, no dashboard), and it binds to the cluster's own address (loopback)
    "distributed.scheduler.http.routes": ["distributed.http.health"],
    "distributed.worker.http.routes": ["distributed.http.health"],
}


def _distributed():
    import distributed  # deferred: Dask is an optional extra (pip install 'smcdp[dask]')

    return distributed


def runtime_info() -> dict:
    """What decides bit-for-bit reproducibility of the kernels on one process: numpy and *its* BLAS.

    Other BLAS libraries a process happens to have loaded do not count: the party process imports
    SciPy (governance's privacy accounting), which brings its own OpenBLAS that the kernels never call,
    while the workers import the kernels only."""
    from threadpoolctl import threadpool_info  # deferred: only needed to compare workers with the party

    blas = [i for i in threadpool_info() if i.get("user_api") == "blas"]
    here = os.path.dirname(os.path.realpath(np.__file__))
    numpy_own = [i for i in blas if os.path.realpath(i.get("filepath") or "").startswith(here)]
    return {
        "numpy": np.__version__,
        "blas": sorted((i.get("internal_api"), i.get("version")) for i in (numpy_own or blas)),
    }


class DaskEngine(ComputeEngine):
    """Blocks and crypto as tasks on the party's own Dask cluster."""

    name = "dask"

    def __init__(self, config: ComputeConfig) -> None:
        if config.engine != "dask":
            raise ValueError('DaskEngine needs a [compute] with engine = "dask"')
        self.config = config
        self.cluster: Any = None  # distributed.LocalCluster / Client (dask ships no type stubs)
        self.client: Any = None
        self.deterministic: bool | None = None
        self._lock = threading.Lock()  # sessions run on their own threads and event loops
        self._counter = itertools.count()

    @property
    def workers(self) -> int:
        if self.client is None:
            return (self.config.workers or 2) if self.config.scheduler == "local" else 0
        if self.cluster is not None:  # our own LocalCluster: the workers it manages -- one that missed a heartbeat on
            return len(self.cluster.workers)  # a loaded host drops out of the scheduler's list for a while (CI: 0)
        return len(self.client.scheduler_info(n_workers=-1)["workers"])

    @property
    def scheduler_address(self) -> str:
        return "local" if self.config.scheduler == "local" else self.config.scheduler

    def next_id(self) -> int:
        return next(self._counter)

    # ------------------------------------------------------------------ life cycle
    async def start(self) -> None:
        await asyncio.to_thread(self._start_once)

    def _start_once(self) -> None:
        with self._lock:
            if self.client is None:
                try:
                    self._start()
                except BaseException:
                    _close(self.client, self.cluster)
                    self.client = self.cluster = None
                    raise

    def _start(self) -> None:
        distributed = _distributed()
        import dask  # deferred with distributed (optional extra)

        cfg = self.config
        dask.config.set(CLUSTER_CONFIG)
        if cfg.plaintext_scheduler:
            warnings.warn(
                f"[compute] scheduler {cfg.scheduler} is plain TCP to another host: the session key "
                "and data cross the network unencrypted",
                stacklevel=2,
            )
            dask.config.set({"distributed.comm.require-encryption": False})
        if cfg.scheduler == "local":
            kwargs = {}
            if cfg.local_directory is not None:
                kwargs["local_directory"] = str(cfg.local_directory)
            self.cluster = distributed.LocalCluster(
                n_workers=cfg.workers or 2,
                threads_per_worker=cfg.threads_per_worker,
                memory_limit=cfg.memory_limit,
                processes=True,
                security=True,
                dashboard_address=None,
                host="127.0.0.1",
                silence_logs=logging.WARNING,
                **kwargs,
            )
            self.client = distributed.Client(self.cluster, security=self.cluster.security, direct_to_workers=True)
        else:
            scheme = cfg.scheduler.split("://", 1)[0]
            if scheme == "tls":
                security = distributed.Security(
                    tls_ca_file=str(cfg.tls_ca),
                    tls_client_cert=str(cfg.tls_cert),
                    tls_client_key=str(cfg.tls_key),
                    require_encryption=True,
                )
            else:
                dask.config.set({"distributed.comm.require-encryption": False})
                security = None
            self.client = distributed.Client(cfg.scheduler, security=security, direct_to_workers=True, timeout=60)
        self.client.wait_for_workers(1, timeout=120)
        mine = runtime_info()
        theirs = self.client.run(runtime_info)
        self.deterministic = all(v == mine for v in theirs.values())
        if not self.deterministic:
            log.warning(
                "Dask workers run another numpy or BLAS than the party process: results agree to "
                "about 1e-15, not bit for bit (%s vs %s)",
                mine,
                theirs,
            )

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def close(self) -> None:
        with self._lock:
            client, cluster, self.client, self.cluster = self.client, self.cluster, None, None
        _close(client, cluster)

    def session(self, source: MatrixSource, private_key: PrivateKey | None, *, label: str = "session") -> DaskSession:
        return DaskSession(self, source, private_key, label)

    def stats(self) -> dict:
        return {
            "engine": self.name,
            "workers": self.workers,
            "scheduler": self.scheduler_address,
            "deterministic": self.deterministic,
        }


def _close(client, cluster) -> None:
    try:
        if client is not None:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()


class DaskSession(ComputeSession):
    engine: DaskEngine

    def __init__(self, *args) -> None:
        super().__init__(*args)
        if self.private_key is None:
            raise InvalidMessage(
                "the Dask engine needs the session's private key on its workers; a group (threshold) key session "
                "runs on the local engine"
            )
        if self.private_key.orders is not None:
            raise InvalidMessage(
                "the Dask engine's workers rebuild a standard key from (n, p, q); a subgroup key "
                "(docs/crypto.md, 'Subgroup keys') runs on the local engine"
            )
        self._material = (int(self.private_key.public_key.n), int(self.private_key.p), int(self.private_key.q))
        self._kid = kernels.key_id(self._material[0])
        self._key = None
        self._tag = f"smcdp-{self.engine.next_id()}-{self._kid[:8]}"
        self._n = itertools.count()

    @property
    def client(self):
        return self.engine.client

    def _key_name(self, stage: str) -> str:
        return f"{self._tag}-{stage}-{next(self._n)}"

    # ------------------------------------------------------------------ key
    async def bind_key(self) -> None:
        await asyncio.to_thread(self._scatter_key)

    def _scatter_key(self) -> None:
        self._key = self.client.scatter([self._material], broadcast=True, direct=True, hash=False)[0]
        # build each worker's CRT tables once (pinned to that worker)
        workers = list(self.client.scheduler_info(n_workers=-1)["workers"])
        futs = [
            self.client.submit(
                kernels.encrypt_chunk,
                self._key,
                [0],
                workers=[w],
                allow_other_workers=False,
                pure=False,
                key=self._key_name("warm"),
            )
            for w in workers
        ]
        self.client.gather(futs)
        self.tasks += len(futs)

    async def forget_key(self) -> None:
        key, self._key = self._key, None
        if key is None or self.client is None:
            return

        def forget():
            try:
                key.release()
            finally:
                self._forget_everywhere()

        await asyncio.to_thread(forget)

    def _forget_everywhere(self) -> None:
        """Drop the key's cached tables on every worker.  A worker that died or left meanwhile took
        them with its memory: the broadcast's connection error for it is not a failure.  Any other
        error means a live worker may still hold the key, and is raised."""
        answers = self.client.run(kernels.forget_key, self._kid, on_error="return")
        for worker, answer in answers.items():
            if isinstance(answer, OSError):  # distributed's CommClosedError is one
                log.warning(
                    "Dask worker %s could not be reached to forget the session key (%s): it died or "
                    "left, and its memory with it",
                    worker,
                    answer,
                )
            elif isinstance(answer, BaseException):
                raise answer

    def _rebind_key(self) -> None:
        self.key_rebinds += 1
        log.warning("Dask workers lost the session key; scattering it again (rebind %d)", self.key_rebinds)
        self.client.wait_for_workers(1, timeout=120)
        old, self._key = self._key, None
        if old is not None:
            old.release()
        self._scatter_key()

    # ------------------------------------------------------------------ batches with recovery
    def _batch(
        self,
        what: str,
        submit: Callable[[], tuple[list, list]],
        collect: Callable[[list], object],
        rebind_key: bool = False,
    ):
        """``submit()`` scatters its inputs and submits tasks: it returns (tasks, scattered futures);
        ``collect(tasks)`` waits for the result.  If scattered inputs were lost with their workers,
        scatter again and resubmit the batch."""
        distributed = _distributed()
        lost = (distributed.CancelledError, distributed.client.FutureCancelledError, distributed.KilledWorker)
        for attempt in range(RESUBMITS + 1):
            tasks, scattered = submit()
            try:
                out = collect(tasks)
                self.tasks += len(tasks)
                return out
            except lost as exc:
                self.tasks += sum(f.status == "finished" for f in tasks)
                if attempt == RESUBMITS:
                    raise Unavailable(f"Dask workers kept failing during {what}: {exc}") from None
                log.warning("%s: %s; resubmitting the batch", what, exc)
                if rebind_key:
                    self._rebind_key()
                else:
                    self.client.wait_for_workers(1, timeout=120)
            finally:
                for f in (*tasks, *scattered):
                    f.release()
        raise AssertionError("unreachable")

    def _tree(self, kernel: Callable, args: tuple, index_arg: bool, stage: str):
        """One task per block, then the fixed reduction tree as tasks; returns the root's result."""
        client = self.client

        def submit():
            scattered = client.scatter([self.source, *args], broadcast=True, direct=True, hash=False)
            src_f, *arg_f = scattered
            level = [
                client.submit(
                    kernels.apply_block,
                    src_f,
                    blk,
                    kernel,
                    *arg_f,
                    index_arg=index_arg,
                    key=self._key_name(f"{stage}-b{blk.index}"),
                    pure=False,
                )
                for blk in self.source.blocks
            ]
            tasks = list(level)
            while len(level) > 1:
                level = [
                    client.submit(
                        kernels.sum_group, *level[i : i + kernels.FANIN], key=self._key_name(f"{stage}-sum"), pure=False
                    )
                    for i in range(0, len(level), kernels.FANIN)
                ]
                tasks.extend(level)
            return tasks, scattered

        t0 = time.perf_counter()
        try:
            out = self._batch(stage, submit, lambda tasks: tasks[-1].result())
        finally:
            self._timed(stage, t0)
        self.source.verify()
        return out

    async def frobenius_sq(self) -> float:
        return float((await asyncio.to_thread(self._tree, kernels.frobenius_block, (), False, "frobenius"))[0])

    async def initial_product(self, stream_key: bytes, b: int) -> tuple[np.ndarray, np.ndarray]:
        # stream key and b are small: they travel as task arguments (the stream key is party-internal
        # randomness, like the data the cluster already holds)
        return await asyncio.to_thread(self._tree, kernels.init_block, (bytes(stream_key), int(b)), True, "initial")

    async def gram_pass(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q = np.ascontiguousarray(Q, dtype=np.float64)
        return await asyncio.to_thread(self._tree, kernels.gram_block, (Q,), False, "gram")

    async def clipped_gram_pass(self, Q: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
        Q = np.ascontiguousarray(Q, dtype=np.float64)
        Z, over = await asyncio.to_thread(self._tree, kernels.clipped_gram_block, (Q, float(clip)), False, "gram")
        return Z, int(over[0])

    async def project(self, U: np.ndarray) -> AsyncIterator[tuple[Block, np.ndarray]]:
        U = np.ascontiguousarray(U, dtype=np.float64)
        client = self.client
        blocks = self.source.blocks
        # one batch per group of blocks, so a long output stream does not hold every result on the workers
        group = max(1, 4 * max(1, self.engine.workers))
        for g0 in range(0, len(blocks), group):
            part = blocks[g0 : g0 + group]

            def submit(part=part):
                scattered = client.scatter([self.source, U], broadcast=True, direct=True, hash=False)
                return [
                    client.submit(
                        kernels.apply_block,
                        scattered[0],
                        blk,
                        kernels.project_block,
                        scattered[1],
                        key=self._key_name(f"project-b{blk.index}"),
                        pure=False,
                    )
                    for blk in part
                ], scattered

            t0 = time.perf_counter()
            outs = await asyncio.to_thread(
                self._batch, "project", submit, lambda tasks: client.gather(tasks, direct=True)
            )
            self._timed("project", t0)
            for blk, out in zip(part, outs):
                yield blk, out
        self.source.verify()

    # ------------------------------------------------------------------ crypto
    def _crypto(self, kernel: Callable, items: Sequence[int], chunk: int, stage: str) -> list[int]:
        if not items:
            return []
        workers = max(1, self.engine.workers)
        size = max(1, min(chunk, -(-len(items) // workers)))
        parts = kernels.chunks([int(v) for v in items], size)

        def submit():
            return [
                self.client.submit(kernel, self._key, part, key=self._key_name(stage), pure=False) for part in parts
            ], []

        def collect(futs):
            return [x for part in self.client.gather(futs, direct=True) for x in part]

        t0 = time.perf_counter()
        try:
            return self._batch(stage, submit, collect, rebind_key=True)
        finally:
            self._timed(stage, t0)

    async def encrypt(self, plaintexts: Sequence[int]) -> list[int]:
        return await asyncio.to_thread(self._crypto, kernels.encrypt_chunk, plaintexts, ENCRYPT_CHUNK, "encrypt")

    async def decrypt(self, ciphertexts: Sequence[int]) -> list[int]:
        return await asyncio.to_thread(self._crypto, kernels.decrypt_chunk, ciphertexts, DECRYPT_CHUNK, "decrypt")

    async def astats(self) -> dict:
        out = self.stats()
        out["scheduler"] = self.engine.scheduler_address
        out["deterministic"] = self.engine.deterministic
        try:
            peaks = await asyncio.to_thread(self.client.run, peak_rss)
            out["worker_peak_rss_bytes"] = {addr: v[0] for addr, v in peaks.items()}
        except (OSError, SmcdpError, TimeoutError) as exc:  # a stats failure must not fail the session
            out["worker_peak_rss_bytes"] = {"error": str(exc)}
        return out
