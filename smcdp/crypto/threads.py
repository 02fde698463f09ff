"""Threads for big-integer work that runs without the GIL, at two priorities.

gmpy2 releases the GIL inside ``powmod`` and its kin when the calling thread's
context allows it (``allow_release_gil``, off by default); the native engine
(``smcdp.crypto.native``) always releases it.  So one thread per core runs Paillier
decryptions and multi-exponentiations truly in parallel inside the party's own
process: no worker processes to start (a spawned process needs seconds to import
smcdp), no private key over a pipe, no pickling of ciphertexts.

``CryptoThreads(priority="urgent")`` is for the work a peer is waiting on (a round
of an interactive protocol).  ``priority="background"`` threads run at the lowest
scheduling priority (nice 19, Linux sets it per thread): work that only has to be
done before it is needed (the secure forward algorithm's emission blocks) then takes
only the cores that nothing urgent wants -- in this process or in another party's on
the same host -- instead of slowing the round everybody waits for.  Where the
priority cannot be set (another OS, a container that forbids it) the threads run
at normal priority: slower under contention, never wrong.

Why not ``concurrent.futures.ThreadPoolExecutor`` alone: it is what runs the work;
this class adds the per-thread gmpy2 context and priority, the CRT split of a
decryption into its two independent halves, and an async ``map``.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.ints import as_int
from smcdp.crypto.paillier import PrivateKey

PRIORITIES = {"urgent": 0, "background": 19}


def _init_thread(nice: int) -> None:
    gmpy2.set_context(gmpy2.context(allow_release_gil=True))
    if nice:
        lower_priority(nice)


def lower_priority(nice: int = PRIORITIES["background"]) -> None:
    """Run the calling thread -- and the threads it starts from now on, which inherit it -- at ``nice``
    (Linux sets it per thread; elsewhere, or where it is not allowed, nothing changes: slower under
    contention, never wrong).  Only ever lowers: raising it again needs privileges."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (AttributeError, OSError):  # not Linux, or not allowed: normal priority
        pass


class CryptoThreads:
    """A pool of ``workers`` threads (default: one per core) at ``priority`` "urgent" or "background"."""

    def __init__(self, workers: int | None = None, *, priority: str = "urgent", name: str = "smcdp-crypto") -> None:
        if priority not in PRIORITIES:
            raise ValueError(f"priority must be one of {sorted(PRIORITIES)}")
        if workers is None:
            self.workers = os.cpu_count() or 1
        else:
            self.workers = as_int(workers)  # 2.5, inf, "2" refused; 0 and negative counts below
            if self.workers < 1:
                raise ValueError(f"workers is at least 1 (None: one per core), got {workers!r}")
        self.priority = priority
        self._ex = ThreadPoolExecutor(
            self.workers,
            thread_name_prefix=f"{name}-{priority}",
            initializer=_init_thread,
            initargs=(PRIORITIES[priority],),
        )

    def __enter__(self) -> CryptoThreads:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def executor(self) -> Executor:
        """The threads as a :class:`concurrent.futures.Executor`, for code that takes one (the DGK
        comparison's chunks: each thread runs gmpy2 with the interpreter lock released)."""
        return self._ex

    def close(self) -> None:
        """Wait for running jobs, cancel queued ones and stop the threads."""
        self._ex.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ mapping
    def map(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """``[fn(x) for x in items]`` on the threads; order kept; the first error is raised."""
        return list(self._ex.map(fn, items))

    async def arun(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(*args)`` on one of the threads, for async code."""
        return await asyncio.get_running_loop().run_in_executor(self._ex, fn, *args)

    async def amap(self, fn: Callable[[Any], Any], items: Iterable[Any]) -> list[Any]:
        """:meth:`map` for async code: the event loop keeps running while the threads work."""
        loop = asyncio.get_running_loop()
        futs = [loop.run_in_executor(self._ex, fn, x) for x in items]
        return list(await asyncio.gather(*futs))

    # ------------------------------------------------------------------ decryption
    def decrypt_signed(self, sk: PrivateKey, cts: Sequence[int]) -> list[int]:
        """``sk.raw_decrypt_signed`` of every ciphertext: one job per ciphertext whose two CRT halves the
        engine interleaves (:meth:`~smcdp.crypto.paillier.PrivateKey.decrypt_halves`) when there are several, else one job per half
        (a single ciphertext's halves on two cores end sooner than interleaved on one)."""
        if _paired(sk, cts):
            return _combine_pairs(sk, self.map(_both, [(sk, c) for c in cts]))
        return _combine(sk, self.map(_half, _half_jobs(sk, cts)))

    async def adecrypt_signed(self, sk: PrivateKey, cts: Sequence[int]) -> list[int]:
        """:meth:`decrypt_signed` for async code: the event loop keeps running while the threads decrypt."""
        if _paired(sk, cts):
            return _combine_pairs(sk, await self.amap(_both, [(sk, c) for c in cts]))
        return _combine(sk, await self.amap(_half, _half_jobs(sk, cts)))


def _paired(sk: PrivateKey, cts: Sequence[int]) -> bool:
    if not isinstance(sk, PrivateKey):
        raise TypeError(f"decryption needs a PrivateKey, got {type(sk).__name__}")
    return len(cts) >= 2 and sk.interleaved_halves


def _both(job: tuple[PrivateKey, int]) -> tuple[mpz, mpz]:
    sk, c = job
    return sk.decrypt_halves(c)


def _combine_pairs(sk: PrivateKey, pairs: list[tuple[mpz, mpz]]) -> list[int]:
    return [sk.decode_signed(sk.combine_halves(mp, mq)) for mp, mq in pairs]


def _half_jobs(sk: PrivateKey, cts: Sequence[int]) -> list[tuple[PrivateKey, int, int]]:
    return [(sk, c, which) for c in cts for which in (0, 1)]


def _half(job: tuple[PrivateKey, int, int]) -> mpz:
    sk, c, which = job
    return sk.decrypt_half(c, which)


def _combine(sk: PrivateKey, halves: list[mpz]) -> list[int]:
    return [sk.decode_signed(sk.combine_halves(halves[i], halves[i + 1])) for i in range(0, len(halves), 2)]
