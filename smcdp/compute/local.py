"""The default engine: blocks read in the party process, crypto on the party process's own crypto threads.

Plaintext passes read one canonical block at a time per thread (``workers`` threads; numpy releases the
GIL in BLAS), run the kernel with one BLAS thread and feed a streaming tree sum, so the process holds at
most ``workers`` blocks and the k × b partial sums, never the matrix.

Crypto runs on ``workers`` :class:`~smcdp.crypto.threads.CryptoThreads` that the engine starts
once and keeps for the party process's life: the native engine's fixed-base loop and gmpy2's ``powmod``
release the GIL, so the threads use every core, and the session key never leaves the party process.
Each key's CRT tables are built once, in this process, sized for the session's encryptions
(:meth:`~smcdp.crypto.paillier.PrivateKey.prepare`, both primes' tables on two threads).  A process
pool per session instead has every worker import smcdp and build its own tables (1.3 s each at
2048 bits, six processes on two cores): 10 s of a 2 s session.  Batches smaller than
:data:`POOL_MIN_BATCH` are done on one thread.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

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
from smcdp.crypto.threads import CryptoThreads

#: crypto batches smaller than this are done on one thread
POOL_MIN_BATCH = 16
#: a key's tables are sized for this many batches like the session's first one (power iteration: one
#: contribution per round; rounds beyond it still encrypt, with a table a little smaller than ideal)
TABLE_BATCHES = 32


class LocalEngine(ComputeEngine):
    """Threads over blocks and crypto threads, all in the party's process, started once for its life."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self._workers = max(1, int(workers or os.cpu_count() or 1))
        self._threads: ThreadPoolExecutor | None = None
        self._crypto: CryptoThreads | None = None

    @property
    def workers(self) -> int:
        return self._workers

    def threads(self) -> ThreadPoolExecutor:
        """The block threads (kept for the process's life: each keeps its block buffer)."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self._workers, thread_name_prefix="smcdp-block")
        return self._threads

    def crypto(self) -> CryptoThreads:
        """The crypto threads (started at the first batch that needs them, kept for the process's life)."""
        if self._crypto is None:
            self._crypto = CryptoThreads(self._workers, priority="urgent", name="smcdp-compute")
        return self._crypto

    async def aclose(self) -> None:
        threads, self._threads = self._threads, None
        if threads is not None:
            threads.shutdown(wait=False, cancel_futures=True)
        crypto, self._crypto = self._crypto, None
        if crypto is not None:
            await asyncio.to_thread(crypto.close)

    def session(self, source: MatrixSource, private_key: PrivateKey | None, *, label: str = "session") -> LocalSession:
        return LocalSession(self, source, private_key, label)


class LocalSession(ComputeSession):
    engine: LocalEngine

    # ------------------------------------------------------------------ key
    async def bind_key(self) -> None:
        pass  # the key stays in this process: the crypto threads use the session's own key object

    async def forget_key(self) -> None:
        pass  # nothing was copied; the key object (and its tables) go with the session

    # ------------------------------------------------------------------ passes
    def _pass(self, kernel: Callable, *args, index_arg: bool = False):
        """Run ``kernel`` on every block on the engine's block threads and tree-sum the results in block
        order.  Blocks are loaded only on those threads, so at most ``workers`` block buffers exist."""
        src = self.source
        acc = TreeSum()
        # one BLAS thread from the first pass on, for good (kernels.one_blas_thread says why)
        with one_blas_thread:
            for out in self.engine.threads().map(
                lambda blk: apply_block(src, blk, kernel, *args, index_arg=index_arg), src.blocks
            ):
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
    def _parts(self, n: int) -> int:
        """How many threads a batch of ``n`` is spread over."""
        return 1 if n < POOL_MIN_BATCH else min(self.engine.workers, n)

    async def encrypt(self, plaintexts: Sequence[int]) -> list[int]:
        t0 = time.perf_counter()
        try:
            sk = self.key()
            ints = [int(m) for m in plaintexts]
            for m in ints:  # a bad value fails here, before any thread starts on the batch
                sk.public_key.raw_plain(m)
            threads = self.engine.crypto()
            if not sk.tables_ready:  # the key's tables, once per key: sized for TABLE_BATCHES batches
                await asyncio.to_thread(sk.prepare, TABLE_BATCHES * max(1, len(ints)))  # like this one
            chunks = _chunks(ints, self._parts(len(ints)))
            parts = await threads.amap(lambda chunk: [int(sk.raw_encrypt(m)) for m in chunk], chunks)
            return [c for part in parts for c in part]
        finally:
            self._timed("encrypt", t0)

    async def decrypt(self, ciphertexts: Sequence[int]) -> list[int]:
        t0 = time.perf_counter()
        try:
            sk = self.key()
            cts = [int(c) for c in ciphertexts]
            if self._parts(len(cts)) == 1:
                return await self.engine.crypto().arun(lambda: [sk.raw_decrypt_signed(c) for c in cts])
            return await self.engine.crypto().adecrypt_signed(
                sk, cts
            )  # whole ciphertexts (halves interleaved) or halves, on the threads
        finally:
            self._timed("decrypt", t0)


def _chunks(seq: Sequence, n: int) -> list[list]:
    size = max(1, -(-len(seq) // max(1, n)))
    return [list(seq[i : i + size]) for i in range(0, len(seq), size)]
