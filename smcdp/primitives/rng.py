"""Protocol randomness: the one place where a role's random draws come from.

Every mask, permutation, scaling factor, decoy choice, key, oblivious-transfer
secret and DP noise draw of a protocol role comes from here.  Paillier and DGK
*encryption* randomness mostly does not: an obfuscator is never part of a role's
state, so it comes straight from the OS CSPRNG (:mod:`smcdp.crypto.paillier`).
One exception is replayable on purpose: a data party's release under a group key
(:mod:`smcdp.protocols.power_iteration_threshold`) draws its Paillier randomness
from a stream of the party's root, so that a party replayed after a crash re-sends
bit for bit the ciphertext whose digest it committed to.  That is safe because the
root is the party's own secret (never sent; kept only in its 0600 checkpoint), and
because a group-key session refuses a seeded root, whose streams anyone knowing the
seed could recompute.

A role's randomness has one root, a :class:`Randomness`:

* **a secret key** (the default in a party process): 32 bytes from the OS
  CSPRNG, drawn by the party itself for the session (ahead of it, so that work
  derived from it can be done while the party is idle: smcdp.runtime.offline)
  and kept in the session's checkpoint (mode 0600), never sent anywhere.  Each labelled
  stream is ChaCha20 keyed with HMAC-SHA256(root key, labels) -- a
  cryptographically secure generator, and a *deterministic* one: a role
  replayed after a crash (docs/fault-tolerance.md) draws exactly the same
  masks, keys and noise, so it re-sends exactly what it sent before and
  learns nothing new, and its peers learn nothing new either;
* **an experiment seed** (an integer, ``smcdp demo --seed``, tests): the root
  key is SHA-256 of the seed, so runs are reproducible -- and predictable by
  anyone who knows the seed, which is why a party accepts a peer's session
  seed only if its own policy allows seeded sessions;
* **nothing** (``None``), for library callers of a role outside a party
  process: every stream is the OS CSPRNG (not replayable).

Streams are named by labels -- protocol, role, purpose -- so that two roles
given the same seed never draw the same values, and two purposes within a role
never share a stream; a stream's values do not depend on which other streams
were used or in which order.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
from typing import Any

from cryptography.hazmat.primitives.ciphers import Cipher, algorithms

from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, check_key_bits, generate_keypair
from smcdp.crypto.prepared import SHELF
from smcdp.dp.samplers import RandomSource, SecureSource, StreamSource
from smcdp.errors import InvalidMessage

__all__ = [
    "Drbg",
    "DrbgRandom",
    "Randomness",
    "SeedLike",
    "as_randomness",
    "derive_seed",
    "noise_generator",
    "noise_source",
    "prepare_session_keypair",
    "protocol_rng",
    "session_keypair",
    "stream_key",
]

KEY_BYTES = 32
_BLOCK = 4096


class Drbg:
    """A deterministic CSPRNG: the ChaCha20 keystream of a 256-bit key (nonce 0).

    Reads are served from a buffer; one key gives 2^64 blocks, far beyond any
    session.  Not thread-safe: give each thread its own stream.
    """

    __slots__ = ("_buf", "_enc", "_pos")

    def __init__(self, key: bytes) -> None:
        if not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES:
            raise ValueError("a DRBG key is exactly 32 bytes")
        self._enc = Cipher(algorithms.ChaCha20(bytes(key), b"\x00" * 16), mode=None).encryptor()
        self._buf = b""
        self._pos = 0

    def read(self, n: int) -> bytes:
        if n < 0:
            raise ValueError("cannot read a negative number of bytes")
        out = bytearray()
        while n:
            if self._pos == len(self._buf):
                self._buf = self._enc.update(b"\x00" * max(_BLOCK, n))
                self._pos = 0
            take = min(n, len(self._buf) - self._pos)
            out += self._buf[self._pos : self._pos + take]
            self._pos += take
            n -= take
        return bytes(out)


class DrbgRandom(random.Random):
    """``random.Random`` over a :class:`Drbg` (as ``SystemRandom`` is over ``os.urandom``).

    Every method of ``random.Random`` (``randrange``, ``shuffle``, ``uniform``,
    ``gauss`` …) then draws from the keyed stream.
    """

    def __init__(self, drbg: Drbg) -> None:
        self._drbg = drbg
        super().__init__()

    def seed(self, *args: object, **kwargs: object) -> None:  # noqa: D401 - the key is the seed
        """Ignored: a keyed stream cannot be reseeded."""
        return None

    def getrandbits(self, k: int) -> int:
        if k < 0:
            raise ValueError("number of bits must be non-negative")
        if k == 0:
            return 0
        nbytes = (k + 7) // 8
        return int.from_bytes(self._drbg.read(nbytes), "little") >> (nbytes * 8 - k)

    def random(self) -> float:
        return self.getrandbits(53) * 2.0**-53

    def randbytes(self, n: int) -> bytes:
        return self._drbg.read(n)

    def getstate(self) -> tuple[Any, ...]:  # pragma: no cover - deliberately unsupported
        raise NotImplementedError("a keyed stream has no state to save; keep its key instead")

    def setstate(self, state: object) -> None:  # pragma: no cover - deliberately unsupported
        raise NotImplementedError("a keyed stream has no state to restore")


class Randomness:
    """The root of one role's randomness in one session (see the module docstring)."""

    __slots__ = ("_key", "seeded")

    def __init__(self, key: bytes | None, *, seeded: bool = False) -> None:
        if key is not None and (not isinstance(key, (bytes, bytearray)) or len(key) != KEY_BYTES):
            raise ValueError("a randomness root is 32 bytes (or None for the OS CSPRNG)")
        self._key = None if key is None else bytes(key)
        #: True if the root came from an experiment seed (reproducible, predictable)
        self.seeded = seeded

    @classmethod
    def fresh(cls) -> Randomness:
        """A new secret root from the OS CSPRNG (what a party draws for each session)."""
        return cls(os.urandom(KEY_BYTES))

    @classmethod
    def from_seed(cls, seed: int) -> Randomness:
        """The root of an experiment seed: reproducible and predictable by whoever knows the seed."""
        return cls(hashlib.sha256(f"smcdp/experiment-seed/{int(seed)}".encode()).digest(), seeded=True)

    @classmethod
    def system(cls) -> Randomness:
        """No root: every stream is the OS CSPRNG (not replayable)."""
        return cls(None)

    @property
    def key(self) -> bytes | None:
        """The root key, for the session's checkpoint (None for the OS CSPRNG)."""
        return self._key

    @property
    def replayable(self) -> bool:
        return self._key is not None

    def __repr__(self) -> str:  # never show the key
        kind = "seeded" if self.seeded else ("keyed" if self._key is not None else "system")
        return f"Randomness({kind})"

    def stream_key(self, *labels: str) -> bytes:
        """32 bytes for the stream ``labels``: HMAC-SHA256(root, labels); fresh CSPRNG bytes without a root."""
        if self._key is None:
            return os.urandom(KEY_BYTES)
        msg = "\x1f".join(("smcdp/v1", *(str(x) for x in labels))).encode()
        return hmac.new(self._key, msg, hashlib.sha256).digest()

    def rng(self, *labels: str) -> random.Random:
        """A ``random.Random`` for masks, permutations, scalings, keys (``SystemRandom`` without a root)."""
        if self._key is None:
            return random.SystemRandom()
        return DrbgRandom(Drbg(self.stream_key(*labels)))

    def noise(self, *labels: str) -> RandomSource:
        """A DP noise source for :mod:`smcdp.dp.mechanisms` (``random_state=``); secure in every case
        but the seeded one, where it is as predictable as the seed."""
        if self._key is None:
            return SecureSource()
        return StreamSource(Drbg(self.stream_key(*labels)).read)


#: what a role accepts as the root of its randomness
SeedLike = Randomness | int | None


def as_randomness(seed: SeedLike) -> Randomness:
    """``Randomness`` as is; an int is an experiment seed; None is the OS CSPRNG."""
    if isinstance(seed, Randomness):
        return seed
    if seed is None:
        return Randomness.system()
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"a seed is a Randomness, an int or None, not {type(seed).__name__}")
    return Randomness.from_seed(seed)


def protocol_rng(seed: SeedLike, *labels: str) -> random.Random:
    """The stream ``labels`` of the root ``seed`` (see :meth:`Randomness.rng`)."""
    return as_randomness(seed).rng(*labels)


def noise_source(seed: SeedLike, *labels: str) -> RandomSource:
    """DP noise for the stream ``labels`` of the root ``seed`` (see :meth:`Randomness.noise`)."""
    return as_randomness(seed).noise(*labels)


def noise_generator(seed: SeedLike, *labels: str) -> RandomSource:
    """An older name of :func:`noise_source`, kept for callers that still use it: the same DP noise stream of the root
    ``seed`` (a :class:`Randomness`, an experiment seed or None), so that a replayed role draws the
    same noise."""
    return noise_source(seed, *labels)


def stream_key(seed: SeedLike, *labels: str) -> bytes:
    """32 key bytes for the stream ``labels`` of the root ``seed`` (e.g. to key SHAKE-256 or ChaCha20)."""
    return as_randomness(seed).stream_key(*labels)


def derive_seed(seed: SeedLike, *labels: str) -> int | None:
    """An integer seed for a library that takes one (e.g. numpy), or None without a root."""
    r = as_randomness(seed)
    if not r.replayable:
        return None
    return int.from_bytes(r.stream_key(*labels), "big")


# ------------------------------------------------------------------ a role's session key pair
def _key_labels(protocol: str, role: str, subgroup: bool) -> tuple[str, ...]:
    """The stream of the root a role's key comes from (a subgroup key from a stream of its own)."""
    return (protocol, role, "key", "subgroup") if subgroup else (protocol, role, "key")


def _prepared_label(seed: SeedLike, protocol: str, role: str, bits: int, subgroup: bool = False) -> bytes:
    """Where the key pair of (root, protocol, role, size, kind) is shelved when made ahead: a stream of the root
    other than the key's own, so nothing about the key follows from it; random, never found, without a root."""
    kind = ("subgroup",) if subgroup else ()
    return as_randomness(seed).stream_key(protocol, role, "key", "prepared", str(int(bits)), *kind)


def session_keypair(
    seed: SeedLike, protocol: str, role: str, bits: int, *, allow_insecure: bool = False, subgroup: bool = False
) -> tuple[PrivateKey, ObfuscatorPool | None]:
    """The Paillier key pair that ``role`` of ``protocol`` derives from its root ``seed`` (the stream
    ``protocol, role, "key"``; a subgroup key, ``subgroup=True``, the stream ``…, "key", "subgroup"``), and the
    obfuscators made for it ahead, if any.

    When the party made this very key while it was idle (:func:`prepare_session_keypair`,
    :mod:`smcdp.runtime.offline`) it is taken from the party's :data:`~smcdp.crypto.prepared.SHELF` with
    its tables built; otherwise -- a replay, a seeded session, another key size -- it is derived now.
    Either way it is the same key."""
    # the root is this session's now: a key of the other kind prepared for it (the party's last session
    # was of that kind) would go on filling its stock at idle priority beside this session, for nobody
    SHELF.discard(_prepared_label(seed, protocol, role, bits, not subgroup))
    prepared = SHELF.take(_prepared_label(seed, protocol, role, bits, subgroup))
    if prepared is not None:
        return prepared.key, prepared.obfuscators
    rng = protocol_rng(seed, *_key_labels(protocol, role, subgroup))
    return generate_keypair(bits, allow_insecure=allow_insecure, rng=rng, subgroup=subgroup)[1], None


def owned_session_key(
    seed: SeedLike,
    protocol: str,
    role: str,
    bits: int,
    kind: str,
    *,
    private_key: PrivateKey | None = None,
    allow_insecure: bool = False,
) -> tuple[PrivateKey, ObfuscatorPool | None]:
    """The key pair a key-owning role uses in a session that agreed on ``bits`` and ``kind`` (``"standard"`` or
    ``"subgroup"``): the caller's ``private_key``, checked against both, or the one derived from the root
    (:func:`session_keypair`, with its prepared obfuscators if any).  A mismatch is an InvalidMessage."""
    check_key_bits(bits, allow_insecure)
    obfuscators = None
    if private_key is None:
        private_key, obfuscators = session_keypair(
            seed, protocol, role, bits, allow_insecure=allow_insecure, subgroup=kind == "subgroup"
        )
    pk = private_key.public_key
    check_key_bits(pk.bits, allow_insecure)
    if pk.bits != bits:
        raise InvalidMessage(f"the private key has {pk.bits} bits; the session agreed on {bits}")
    if pk.kind != kind:
        raise InvalidMessage(f"the private key is a {pk.kind} key; the session agreed on a {kind} key")
    return private_key, obfuscators


def prepare_session_keypair(
    root: Randomness,
    protocol: str,
    role: str,
    bits: int,
    *,
    uses: int,
    obfuscators: int = 0,
    allow_insecure: bool = False,
    subgroup: bool = False,
) -> None:
    """Start making, in the background, the key pair a session with root ``root`` will derive for ``role``
    (:func:`session_keypair`), its tables sized for ``uses`` encryptions and ``obfuscators`` of its
    obfuscators (:mod:`smcdp.crypto.prepared`)."""
    check_key_bits(bits, allow_insecure)

    def make() -> PrivateKey:
        rng = protocol_rng(root, *_key_labels(protocol, role, subgroup))
        return generate_keypair(bits, allow_insecure=allow_insecure, rng=rng, subgroup=subgroup)[1]

    SHELF.prepare(_prepared_label(root, protocol, role, bits, subgroup), make, uses=uses, obfuscators=obfuscators)
