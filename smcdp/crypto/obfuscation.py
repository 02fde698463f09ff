"""Paillier obfuscators (random n-th residues) made ahead of use.

Encryption and re-randomisation both multiply by a fresh obfuscator
(:meth:`PublicKey.obfuscator <smcdp.crypto.paillier.PublicKey.obfuscator>`,
CRT-accelerated in :meth:`PrivateKey.raw_encrypt
<smcdp.crypto.paillier.PrivateKey.raw_encrypt>`).  Their cost does not depend
on the plaintext, so a party can make them while it waits for a peer: that is
this module's :class:`ObfuscatorPool`.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Self

from gmpy2 import mpz

from smcdp.crypto.paillier import PrivateKey, PublicKey


class ObfuscatorPool:
    """Paillier obfuscators (random n-th residues) precomputed in a background thread.

    ``fn`` makes one obfuscator: ``private_key.raw_encrypt(0)`` (CRT + fixed
    base, for the key owner) or ``public_key.raw_encrypt(0)`` (fixed base).
    Both equal ``h_s^a mod n²`` for a fresh ``a``, so ``(1 + n·m) · obf`` is an
    ordinary Paillier encryption of ``m``.  The pool is bounded: the thread
    fills it while the party waits for its peer and sleeps once it is full, so
    it does not compete for the interpreter while the role computes.
    """

    def __init__(self, public_key: PublicKey, fn: Callable[[], mpz], capacity: int = 128,
                 background: bool = True) -> None:
        self.pk = public_key
        self.fn = fn
        self._q: queue.Queue = queue.Queue(maxsize=max(1, capacity))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if background:
            self._thread = threading.Thread(target=self._fill, name="smcdp-obfuscators", daemon=True)
            self._thread.start()

    @classmethod
    def for_private_key(cls, sk: PrivateKey, capacity: int = 128, background: bool = True) -> ObfuscatorPool:
        return cls(sk.public_key, lambda: sk.raw_encrypt(0), capacity, background)

    @classmethod
    def for_public_key(cls, pk: PublicKey, capacity: int = 128, background: bool = True) -> ObfuscatorPool:
        return cls(pk, lambda: pk.raw_encrypt(0), capacity, background)

    def _fill(self) -> None:
        while not self._stop.is_set():
            obf = self.fn()
            while not self._stop.is_set():
                try:
                    self._q.put(obf, timeout=0.2)
                    break
                except queue.Full:
                    continue

    def get(self) -> mpz:
        try:
            return self._q.get_nowait()
        except queue.Empty:
            return self.fn()

    def encrypt(self, m: int) -> mpz:
        pk = self.pk
        return (1 + pk.n * pk.raw_plain(m)) * self.get() % pk.nsquare

    def rerandomize(self, c: mpz) -> mpz:
        return c * self.get() % self.pk.nsquare

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
