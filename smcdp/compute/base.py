"""The compute-engine interface: what a data party's protocol role asks of the machines behind it.

A party process has **one** :class:`ComputeEngine` (from ``[compute]`` in its configuration), started on
first use and closed when the process stops.  Each protocol session opens a :class:`ComputeSession` on it
for its matrix and its session key::

    async with engine.session(source, private_key, label=session_id) as cs:
        Z, H = await cs.gram_pass(Q)             # one pass over the party's column blocks
        cts = await cs.encrypt(packed_ints)      # CRT encryption with the bound key
        ...

Plaintext passes run the kernels of :mod:`smcdp.compute.kernels` on the canonical block grid of the
source and sum their results with the fixed tree, so every engine returns bit-identical floats for the
same source.  Crypto methods take and return Python integers (packed plaintexts, ciphertexts); packing,
fixed point and validation stay in the protocol process (:mod:`smcdp.crypto.vector`).

The key is bound when the session opens and forgotten when it closes.  The session checks the data's
fingerprint when it opens, after every pass and when it closes: data that changes mid-session fails the
session with FAILED_PRECONDITION.
"""

from __future__ import annotations

import abc
import time
from collections.abc import AsyncIterator, Sequence

import numpy as np

from smcdp.compute.sources import Block, MatrixSource
from smcdp.crypto.paillier import PrivateKey
from smcdp.errors import InvalidMessage


class ComputeSession(abc.ABC):
    """One session's view of an engine: one source and one bound private key."""

    def __init__(self, engine: ComputeEngine, source: MatrixSource, private_key: PrivateKey | None, label: str) -> None:
        self.engine = engine
        self.source = source
        self.private_key = private_key
        self.label = label
        self.fingerprint = source.fingerprint()
        self.tasks = 0  # engine tasks submitted and completed (Dask); 0 for local
        self.key_rebinds = 0
        self.seconds: dict[str, float] = {}

    async def __aenter__(self) -> ComputeSession:
        await self.engine.start()
        self.source.verify()
        await self.bind_key()
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await self.forget_key()
        finally:
            if exc[0] is None:
                self.source.verify()

    def _timed(self, what: str, t0: float) -> None:
        self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0

    # ------------------------------------------------------------------ key
    @abc.abstractmethod
    async def bind_key(self) -> None:
        """Make the session key available to the engine's crypto workers (and only to them)."""

    @abc.abstractmethod
    async def forget_key(self) -> None:
        """Drop every copy of the session key the engine made."""

    # ------------------------------------------------------------------ plaintext passes
    @abc.abstractmethod
    async def frobenius_sq(self) -> float:
        """‖A‖_F² (raises InputRejected if A holds NaN or infinite values)."""

    @abc.abstractmethod
    async def initial_product(self, stream_key: bytes, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(A X₀, squared column norms of X₀) for the keyed Gaussian X₀ (n × b)."""

    @abc.abstractmethod
    async def gram_pass(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(A Aᵀ Q, (Aᵀ Q)ᵀ (Aᵀ Q)) in one pass over the blocks."""

    @abc.abstractmethod
    async def clipped_gram_pass(self, Q: np.ndarray, clip: float) -> tuple[np.ndarray, int]:
        """(Ã Ãᵀ Q, how many columns were clipped), Ã = A with every column scaled to norm ≤ ``clip``."""

    @abc.abstractmethod
    def project(self, U: np.ndarray) -> AsyncIterator[tuple[Block, np.ndarray]]:
        """(block, A_bᵀ U) for every block, in block order."""

    # ------------------------------------------------------------------ crypto
    @abc.abstractmethod
    async def encrypt(self, plaintexts: Sequence[int]) -> list[int]:
        """CRT encryptions of signed plaintext integers, in order."""

    @abc.abstractmethod
    async def decrypt(self, ciphertexts: Sequence[int]) -> list[int]:
        """Signed decryptions, in order."""

    def key(self) -> PrivateKey:
        """The bound private key; a session without one (a group key) refuses batch crypto."""
        if self.private_key is None:
            raise InvalidMessage(f"{self.label}: this compute session holds no private key (a group key session)")
        return self.private_key

    async def astats(self) -> dict:
        """:meth:`stats` plus what needs a round trip to the workers (their peak memory)."""
        return self.stats()

    def stats(self) -> dict:
        return {
            "engine": self.engine.name,
            "workers": self.engine.workers,
            "tasks": self.tasks,
            "key_rebinds": self.key_rebinds,
            "blocks": len(self.source.blocks),
            "data_bytes": self.source.nbytes,
            "seconds": {k: round(v, 6) for k, v in self.seconds.items()},
        }


class ComputeEngine(abc.ABC):
    """A party process's compute resources (a process pool, a Dask cluster)."""

    name = "abstract"

    @property
    @abc.abstractmethod
    def workers(self) -> int:
        """How many workers compute in parallel (pool processes or Dask workers)."""

    async def start(self) -> None:
        """Start the engine's resources (idempotent; sessions call it)."""

    async def aclose(self) -> None:
        """Release every resource (the party process calls it when it stops)."""

    @abc.abstractmethod
    def session(
        self, source: MatrixSource, private_key: PrivateKey | None, *, label: str = "session"
    ) -> ComputeSession:
        """A session on ``source`` with ``private_key`` bound (use as ``async with``); None: no private key
        (a group key's share holder: the data passes only, no encryption or decryption through the engine)."""

    def stats(self) -> dict:
        return {"engine": self.name, "workers": self.workers}
