"""Process-wide counts of Paillier operations, for the party's metrics.

``smcdp_paillier_operations_total{op}`` on the console's ``/metrics`` reads :func:`snapshot`.
Counting is one integer addition per call under the GIL, next to operations that cost from
tens of microseconds (a ciphertext addition) to milliseconds (an encryption): not measurable.
Counts are kept per process: work done in a process pool is counted where the batch is
dispatched (:class:`smcdp.crypto.parallel.CryptoPool`); work done by a Dask cluster's
workers is counted by those workers' processes, not by the party.

Operations: ``encrypt``, ``decrypt``, ``add`` (ciphertext · ciphertext), ``mul`` (ciphertext ^
plaintext, including each term of a multi-exponentiation), ``rerandomize``, ``keygen``.
"""

from __future__ import annotations

import itertools
import threading

OPS = ("encrypt", "decrypt", "add", "mul", "rerandomize", "keygen")

# one scalar operation: ``next()`` of an itertools.count is a single C call, atomic under the GIL
# (no lock: session threads count concurrently); a batch adds its length under the lock
_ones = {op: itertools.count() for op in OPS}
_batches: dict[str, int] = dict.fromkeys(OPS, 0)
_lock = threading.Lock()


def count(op: str) -> None:
    """One operation of kind ``op`` (one of :data:`OPS`)."""
    next(_ones[op])


def count_many(op: str, n: int) -> None:
    """``n`` operations of kind ``op`` done as one batch (a vector, a pool's map)."""
    if n:
        with _lock:
            _batches[op] += int(n)


def _value(c: itertools.count[int]) -> int:
    return int(c.__reduce__()[1][0])  # the next value, i.e. how many times next() was called


def snapshot() -> dict[str, int]:
    """Every operation's count so far in this process."""
    with _lock:
        return {op: _value(_ones[op]) + _batches[op] for op in OPS}
