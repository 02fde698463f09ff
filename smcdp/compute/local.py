"""The default engine: blocks read in the party process, crypto on a pool of its own processes.

Plaintext passes read one canonical block at a time per thread (``workers`` threads; numpy releases the
GIL in BLAS), run the kernel with one BLAS thread and feed a streaming tree sum, so the process holds at
most ``workers`` blocks and the k × b partial sums, never the matrix.  Crypto batches of at least
:data:`POOL_MIN_BATCH` integers go to a :class:`~smcdp.crypto.parallel.CryptoPool` (spawned processes
that receive the key over their pipe in the initializer), smaller ones are done in the party process,
where starting processes would cost more than it saves.
"""

from __future__ import annotations

import asyncio
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import AsyncIterator, Callable, Sequence

import numpy as np

from smcdp.compute.base import ComputeEngine, ComputeSession
from smcdp.compute.kernels import (
    TreeSum,
    apply_block,
    clipped_gram_block,
    frobenius_block,
    gram_block,
    init_block,
    one_blas_thread,
    project_block,
)
from smcdp.compute.sources import Block, MatrixSource
from smcdp.crypto.paillier import PrivateKey
from smcdp.crypto.parallel import CryptoPool

#: crypto batches smaller than this are done in the party process
POOL_MIN_BATCH = 16


class LocalEngine(ComputeEngine):
    """Threads over blocks and a crypto process pool, all on the party's host."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self._workers = max(1, int(workers or os.cpu_count() or 1))
        self._threads: ThreadPoolExecutor | None = None

    @property
    def workers(self) -> int:
        return self._workers

    def threads(self) -> ThreadPoolExecutor:
        """The block threads (kept for the process's life: each keeps its block buffer)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self._workers, thread_name_prefix="smcdp-block")
        return self._threads

    async def aclose(self) -> None:
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)

    def session(self, source: MatrixSource, private_key: PrivateKey, *, label: str = "session") -> "LocalSession":
        return LocalSession(self, source, private_key, label)


class LocalSession(ComputeSession):
    engine: LocalEngine

    def __init__(self, *args) -> None:
        super().__init__(*args)
        self._pool: CryptoPool | None = None

    # ------------------------------------------------------------------ key
    async def bind_key(self) -> None:
        pass  # the key stays in this process; the pool gets it when a batch first needs the pool

    async def forget_key(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await asyncio.to_thread(pool.close)

    # ------------------------------------------------------------------ passes
    def _pass(self, kernel: Callable, *args, index_arg: bool = False):
        """Run ``kernel`` on every block on the engine's block threads and tree-sum the results in block
        order.  Blocks are loaded only on those threads, so at most ``workers`` block buffers exist."""
        src = self.source
        acc = TreeSum()
        # one BLAS thread from the first pass on, for good (kernels.one_blas_thread says why)
        with one_blas_thread:
            for out in self.engine.threads().map(
                    lambda blk: apply_block(src, blk, kernel, *args, index_arg=index_arg), src.blocks):
                acc.push(out)
        src.verify()
        return acc.result()

    async def _run(self, what: str, kernel: Callable, *args, index_arg: bool = False):
        t0 = time.perf_counter()
        try:
            return await asyncio.to_thread(self._pass, kernel, *args, index_arg=index_arg)
        finally:
            self._timed(what, t0)

    async def frobenius_sq(self) -> float:
        return float((await self._run("frobenius", frobenius_block))[0])

    async def initial_product(self, stream_key: bytes, b: int) -> tuple[np.ndarray, np.ndarray]:
        return await self._run("initial", init_block, bytes(stream_key), int(b), index_arg=True)

    async def gram_pass(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return await self._run("gram", gram_block, np.ascontiguousarray(Q, dtype=np.float64))

    async def clipped_gram_pass(self, Q: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
        Z, over = await self._run("gram", clipped_gram_block, np.ascontiguousarray(Q, dtype=np.float64), float(clip))
        return Z, int(over[0])

    async def project(self, U: np.ndarray) -> AsyncIterator[tuple[Block, np.ndarray]]:
        U = np.ascontiguousarray(U, dtype=np.float64)
        loop = asyncio.get_running_loop()
        for blk in self.source.blocks:
            t0 = time.perf_counter()
            out = await loop.run_in_executor(self.engine.threads(), apply_block, self.source, blk, project_block, U)
            self._timed("project", t0)
            yield blk, out
        self.source.verify()

    # ------------------------------------------------------------------ crypto
    def _use_pool(self, n: int) -> CryptoPool | None:
        if self.engine.workers < 2 or n < POOL_MIN_BATCH:
            return None
        if self._pool is None:
            sk = self.private_key
            self._pool = CryptoPool(sk.public_key, sk, workers=self.engine.workers)
        return self._pool

    async def encrypt(self, plaintexts: Sequence[int]) -> list[int]:
        t0 = time.perf_counter()
        try:
            pool = self._use_pool(len(plaintexts))
            if pool is not None:
                return await pool.aencrypt(plaintexts, use_private=True)
            sk = self.private_key
            return await asyncio.to_thread(lambda: [int(sk.raw_encrypt(m)) for m in plaintexts])
        finally:
            self._timed("encrypt", t0)

    async def decrypt(self, ciphertexts: Sequence[int]) -> list[int]:
        t0 = time.perf_counter()
        try:
            pool = self._use_pool(len(ciphertexts))
            if pool is not None:
                return await pool.adecrypt(ciphertexts)
            sk = self.private_key
            return await asyncio.to_thread(lambda: [sk.raw_decrypt_signed(c) for c in ciphertexts])
        finally:
            self._timed("decrypt", t0)
