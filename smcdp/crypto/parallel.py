"""Batch encryption and decryption on a process pool that uses every core.

``CryptoPool(public_key, private_key=None, workers=None)`` starts worker
processes with the *spawn* start method: the pool never forks a process that
runs gRPC threads. Each worker receives the key once, in its initializer.
The public key is public. The private key, when given, travels only over the
OS pipe to this party's own child processes: it is never written to disk,
never sent to another host and never handed to code outside smcdp. Workers
build their own fixed-base tables once and then serve any number of batches.

The pool's calls are blocking (they wait for the workers). From async
protocol code use ``await pool.aencrypt(...)`` / ``await pool.adecrypt(...)``,
which wait in a thread, so the event loop and its gRPC server keep
answering.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any

from smcdp.crypto.counters import count_many
from smcdp.crypto.paillier import PrivateKey, PublicKey

_WORKER_PK: PublicKey | None = None
_WORKER_SK: PrivateKey | None = None


def _init_worker(public: dict[str, Any], private: dict[str, Any] | None) -> None:
    """The worker's keys from their JSON forms (a subgroup key keeps its base and orders; the parent
    checked the factors already, so they are not tested for primality again)."""
    global _WORKER_PK, _WORKER_SK
    _WORKER_PK = PublicKey.from_json(public)
    if private is None:
        _WORKER_SK = None
        return
    orders = (int(private["alpha_p"], 16), int(private["alpha_q"], 16)) if "alpha_p" in private else None
    _WORKER_SK = PrivateKey(_WORKER_PK, int(private["p"], 16), int(private["q"], 16), orders)


def _encrypt_chunk(ints: list[int], use_private: bool) -> list[int]:
    if use_private:
        if _WORKER_SK is None:
            raise RuntimeError("this pool holds no private key")
        return [int(_WORKER_SK.raw_encrypt(m)) for m in ints]
    if _WORKER_PK is None:
        raise RuntimeError("this pool was not initialised with a public key")
    return [int(_WORKER_PK.raw_encrypt(m)) for m in ints]


def _decrypt_chunk(cts: list[int]) -> list[int]:
    if _WORKER_SK is None:
        raise RuntimeError("this pool holds no private key")
    return [_WORKER_SK.raw_decrypt_signed(c) for c in cts]


def _cpu_seconds() -> float:
    return time.process_time()


def _chunks(seq: Sequence[int], n: int) -> list[list[int]]:
    size = max(1, -(-len(seq) // n))
    return [list(seq[i : i + size]) for i in range(0, len(seq), size)]


class CryptoPool:
    """A pool of worker processes bound to one Paillier key."""

    def __init__(
        self, public_key: PublicKey, private_key: PrivateKey | None = None, workers: int | None = None
    ) -> None:
        if private_key is not None and private_key.public_key != public_key:
            raise ValueError("private key does not belong to the public key")
        self.public_key = public_key
        self.has_private_key = private_key is not None
        self.workers = workers or os.cpu_count() or 1
        self._pool = ProcessPoolExecutor(
            max_workers=self.workers,
            mp_context=mp.get_context("spawn"),
            initializer=_init_worker,
            initargs=(public_key.to_json(), None if private_key is None else private_key.to_json()),
        )

    def __enter__(self) -> CryptoPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def encrypt(self, ints: Sequence[int], *, use_private: bool = False) -> list[int]:
        """Encrypt signed integers (|m| <= n/3) across the workers; order is kept."""
        if use_private and not self.has_private_key:
            raise ValueError("this pool holds no private key")
        ints = [int(m) for m in ints]
        for m in ints:  # validate here so a bad value fails fast with the usual error
            self.public_key.raw_plain(m)
        count_many("encrypt", len(ints))  # done in the workers: counted here, in this process
        out: list[int] = []
        for part in self._pool.map(_encrypt_chunk, _chunks(ints, self.workers), [use_private] * self.workers):
            out.extend(part)
        return out

    def decrypt(self, cts: Sequence[int]) -> list[int]:
        """Decrypt to signed integers across the workers; order is kept."""
        if not self.has_private_key:
            raise ValueError("this pool holds no private key")
        cts = [int(c) for c in cts]
        count_many("decrypt", len(cts))  # done in the workers: counted here, in this process
        out: list[int] = []
        for part in self._pool.map(_decrypt_chunk, _chunks(cts, self.workers)):
            out.extend(part)
        return out

    def worker_cpu_seconds(self) -> float:
        """CPU seconds the worker process has used so far (meaningful with ``workers=1``: with more,
        whichever worker answers)."""
        return float(self._pool.submit(_cpu_seconds).result())

    async def aencrypt(self, ints: Sequence[int], *, use_private: bool = False) -> list[int]:
        return await asyncio.to_thread(self.encrypt, ints, use_private=use_private)

    async def adecrypt(self, cts: Sequence[int]) -> list[int]:
        return await asyncio.to_thread(self.decrypt, cts)
