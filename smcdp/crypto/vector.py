"""Encrypted vectors: batch Paillier arithmetic with explicit fixed point,
optional plaintext packing and overflow detection that raises, never wraps.

Fixed point
    A vector stores integers ``v`` and a base-2 ``exponent`` (in [-4096, 0]); the value
    is ``v · 2^exponent``.  ``encrypt(..., frac_bits=F)`` uses exponent ``-F``.
    Exponents only change where the caller asks (a fixed-point scalar
    multiplication adds its own fractional bits); adding two vectors with
    different exponents rescales one of them by a power of two.

Packing
    With ``slot_bits=s``, each ciphertext holds up to ``slots`` signed values
    as balanced base-2^s digits: ``P = Σ_j v_j · 2^(s·j)`` with
    ``|v_j| < 2^(s-1)``.  Addition and multiplication by a (possibly secret)
    integer scalar act on every slot independently as long as no slot leaves
    that range, and a negative value needs no offset: the digits are
    recovered from the signed integer ``P`` one at a time.  We prefer this to
    offset encoding because an offset would be multiplied by a secret scalar
    (power iteration's r_i) and the decryptor would need the scalar to remove
    it.  docs/crypto.md gives the capacity rule.

Overflow
    Every vector carries ``bound``, an upper bound on the absolute value of
    every integer it encrypts (per slot when packed).  Each operation computes
    the new bound first and raises :class:`~smcdp.errors.CryptoOverflow` if it could exceed
    the capacity (``n/3`` unpacked, ``2^(s-1)`` per slot packed).  A vector
    received from a peer gets the bound the receiving protocol declares for
    it; decryption additionally refuses results in the middle third of Z_n.
"""

from __future__ import annotations

import numbers
from collections.abc import Awaitable, Callable, Sequence

import gmpy2
import numpy as np
from gmpy2 import mpz
from numpy.typing import ArrayLike

from smcdp.crypto.counters import count_many
from smcdp.crypto.encoding import (
    DEFAULT_FRAC_BITS,
    UNPACKED,
    Packing,
    bytes_to_int,
    check_frac_bits,
    decode_fixed,
    encode_fixed,
    int_to_bytes,
)
from smcdp.crypto.ints import as_int
from smcdp.crypto.modexp import multi_exp, powmod
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import PrivateKey, PublicKey
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.v1 import messages_pb2

#: The lowest fixed-point exponent of a vector (4,096 fractional bits), as the wire format takes it; the highest is 0.
MIN_EXPONENT = -4096
#: The most values :meth:`EncryptedVector.zeros` makes: 2^28 ciphertexts of a 2048-bit key are 128 GiB.
MAX_LENGTH = 1 << 28


# --------------------------------------------------------------------------- the vector type
class EncryptedVector:
    """A vector of Paillier ciphertexts with a shared fixed-point exponent."""

    __slots__ = ("bound", "ciphertexts", "exponent", "length", "packing", "public_key")

    def __init__(
        self,
        public_key: PublicKey,
        ciphertexts: list[mpz],
        length: int,
        exponent: int,
        packing: Packing = UNPACKED,
        bound: int | None = None,
    ):
        _check_kinds(public_key, packing)
        if packing.packed and packing.slots * packing.slot_bits > public_key.max_int.bit_length() - 1:
            # wider than the plaintext space: a product would wrap modulo n, silently
            raise InvalidMessage(f"a packing of {packing.slots} x {packing.slot_bits} bits does not fit the key")
        self.public_key = public_key
        self.ciphertexts = ciphertexts
        self.length = as_int(length)
        self.exponent = _exponent(exponent)  # what the wire takes (from_proto): made here, sendable
        self.packing = packing
        if self.length < 0:
            raise ValueError(f"a vector's length is at least 0, got {self.length}")
        cap = self.capacity
        self.bound = cap if bound is None else as_int(bound)
        if self.bound < 0:
            raise ValueError(f"a bound on |values| is at least 0, got {self.bound}")
        if self.bound > cap:
            raise CryptoOverflow(
                f"declared bound of {self.bound.bit_length()} bits exceeds the capacity of {cap.bit_length()} bits"
            )
        if len(ciphertexts) != packing.n_ciphertexts(self.length):
            raise InvalidMessage(
                f"{len(ciphertexts)} ciphertexts cannot hold {self.length} values in {packing.slots} slots"
            )

    # ------------------------------------------------------------------ basics
    @property
    def capacity(self) -> int:
        """Largest ``|integer|`` an element may hold: the slot capacity when packed, else the key's ``max_int``."""
        return self.packing.slot_capacity if self.packing.packed else int(self.public_key.max_int)

    def __len__(self) -> int:
        return self.length

    def __repr__(self) -> str:
        return (
            f"EncryptedVector(len={self.length}, exponent={self.exponent}, slots={self.packing.slots}, "
            f"bound_bits={self.bound.bit_length()})"
        )

    def _check_bound(self, bound: int, what: str) -> int:
        if bound > self.capacity:
            raise CryptoOverflow(
                f"{what} could reach {bound.bit_length()} bits, above the capacity of "
                f"{self.capacity.bit_length()} bits ({'per slot' if self.packing.packed else 'n/3'}); "
                "use fewer fractional bits, wider slots or a larger key"
            )
        return bound

    def _like(self, cts: list[mpz], bound: int, exponent: int | None = None) -> EncryptedVector:
        return EncryptedVector(
            self.public_key, cts, self.length, self.exponent if exponent is None else exponent, self.packing, bound
        )

    # ------------------------------------------------------------------ construction
    @classmethod
    def encrypt(
        cls,
        public_key: PublicKey,
        values: ArrayLike,
        *,
        frac_bits: int = DEFAULT_FRAC_BITS,
        packing: Packing = UNPACKED,
        private_key: PrivateKey | None = None,
        bound: int | None = None,
    ) -> EncryptedVector:
        """Encrypt floats (or ints) at ``2^-frac_bits`` precision.

        ``private_key``: use CRT encryption (the encryptor owns the key).
        ``bound``: a public bound on ``|integer|`` to record instead of the actual
        maximum (so the bound itself carries no information); it must hold.
        """
        frac_bits = _scaled(0, frac_bits)  # a Python int (-np.uint8(3) would be 253), checked before encrypting
        ints = encode_fixed(values, frac_bits)
        return cls.encrypt_ints(
            public_key, ints, exponent=-frac_bits, packing=packing, private_key=private_key, bound=bound
        )

    @classmethod
    def encrypt_ints(
        cls,
        public_key: PublicKey,
        ints: Sequence[int],
        *,
        exponent: int = 0,
        packing: Packing = UNPACKED,
        private_key: PrivateKey | None = None,
        bound: int | None = None,
    ) -> EncryptedVector:
        """Encrypt signed integers as they are, with the given ``exponent`` (see :meth:`encrypt` for the other arguments)."""
        exponent = _exponent(exponent)
        ints, plain, bound = _plaintexts(public_key, ints, packing, bound)
        if private_key is not None and (
            not isinstance(private_key, PrivateKey) or private_key.public_key != public_key
        ):  # CRT encryption under another key: a vector labelled with one key, encrypted under another
            raise InvalidMessage("the private key does not match the public key to encrypt under")
        enc = private_key.raw_encrypt if private_key is not None else public_key.raw_encrypt
        return cls(public_key, [enc(m) for m in plain], len(ints), exponent, packing, bound)

    @classmethod
    async def encrypt_with(
        cls,
        encrypt_raw: Callable[[list[int]], Awaitable[list[int]]],
        public_key: PublicKey,
        values: ArrayLike,
        *,
        frac_bits: int = DEFAULT_FRAC_BITS,
        packing: Packing = UNPACKED,
        bound: int | None = None,
    ) -> EncryptedVector:
        """:meth:`encrypt` with the raw encryptions done by ``encrypt_raw`` (a batch engine: a process
        pool, a cluster).  Encoding, packing and the bound checks stay here."""
        frac_bits = _scaled(0, frac_bits)
        ints, plain, bound = _plaintexts(public_key, encode_fixed(values, frac_bits), packing, bound)
        cts = await encrypt_raw(plain)
        if len(cts) != len(plain):
            raise InvalidMessage(f"the encryption engine returned {len(cts)} ciphertexts for {len(plain)} plaintexts")
        return cls(public_key, [mpz(c) for c in cts], len(ints), -frac_bits, packing, bound)

    @classmethod
    def zeros(
        cls, public_key: PublicKey, length: int, *, exponent: int = 0, packing: Packing = UNPACKED
    ) -> EncryptedVector:
        """Fresh encryptions of ``length`` zeros (at most :data:`MAX_LENGTH`)."""
        _check_kinds(public_key, packing)
        exponent = _exponent(exponent)
        n = as_int(length)
        if not 0 <= n <= MAX_LENGTH:
            raise ValueError(f"a vector's length is in [0, {MAX_LENGTH}], got {n}")
        return cls.encrypt_ints(public_key, [0] * n, exponent=exponent, packing=packing)

    # ------------------------------------------------------------------ decryption
    def decrypt_ints(self, private_key: PrivateKey) -> list[int]:
        """Decrypt to the signed integers (unpacked); the key must match the vector's."""
        if not isinstance(private_key, PrivateKey):
            raise TypeError(f"decryption needs a PrivateKey, got {type(private_key).__name__}")
        if private_key.public_key != self.public_key:
            raise InvalidMessage("private key does not match the vector's public key")
        return self._unpack([private_key.raw_decrypt_signed(c) for c in self.ciphertexts])

    def decrypt(self, private_key: PrivateKey) -> np.ndarray:
        """Decrypt to floats (the integers scaled by ``2^exponent``); the key must match the vector's."""
        return decode_fixed(self.decrypt_ints(private_key), self.exponent)

    async def decrypt_with(self, decrypt_raw: Callable[[list[int]], Awaitable[list[int]]]) -> np.ndarray:
        """:meth:`decrypt` with the raw (signed) decryptions done by ``decrypt_raw`` (a batch engine)."""
        return decode_fixed(await self.decrypt_ints_with(decrypt_raw), self.exponent)

    async def decrypt_ints_with(self, decrypt_raw: Callable[[list[int]], Awaitable[list[int]]]) -> list[int]:
        """:meth:`decrypt_ints` with the raw (signed) decryptions done by ``decrypt_raw`` (a batch engine)."""
        plain = await decrypt_raw([int(c) for c in self.ciphertexts])
        if len(plain) != len(self.ciphertexts):
            raise InvalidMessage(
                f"the decryption engine returned {len(plain)} values for {len(self.ciphertexts)} ciphertexts"
            )
        return self._unpack([v if type(v) is int else as_int(v) for v in plain])  # 5.5 refused, not read as 5

    def _unpack(self, plain: list[int]) -> list[int]:
        return self.packing.unpack(plain, self.length) if self.packing.packed else plain

    # ------------------------------------------------------------------ arithmetic
    def _compatible(self, other: EncryptedVector) -> None:
        if not isinstance(other, EncryptedVector):
            raise TypeError("expected an EncryptedVector")
        if other.public_key != self.public_key:
            raise InvalidMessage("vectors are encrypted under different public keys")
        if other.length != self.length:
            raise InvalidMessage(f"length mismatch: {self.length} vs {other.length}")
        if other.packing != self.packing:
            raise InvalidMessage("vectors use different packing layouts")

    def scale_exponent(self, new_exponent: int) -> EncryptedVector:
        """Same values at a lower exponent (multiply the integers by 2^(exponent - new))."""
        new_exponent = check_frac_bits(new_exponent, "new_exponent")
        if new_exponent > self.exponent:
            raise ValueError("can only lower the exponent (raising would need division)")
        if new_exponent == self.exponent:
            return self
        return self.mul_int(1 << (self.exponent - new_exponent))._with_exponent(new_exponent)

    def _with_exponent(self, exponent: int) -> EncryptedVector:
        return EncryptedVector(self.public_key, self.ciphertexts, self.length, exponent, self.packing, self.bound)

    def __add__(self, other: EncryptedVector) -> EncryptedVector:
        self._compatible(other)
        a, b = self, other
        if a.exponent != b.exponent:
            e = min(a.exponent, b.exponent)
            a, b = a.scale_exponent(e), b.scale_exponent(e)
        bound = a._check_bound(a.bound + b.bound, "sum")
        n2 = self.public_key.nsquare
        count_many("add", len(a.ciphertexts))
        return a._like([x * y % n2 for x, y in zip(a.ciphertexts, b.ciphertexts)], bound)

    def __neg__(self) -> EncryptedVector:
        return self.mul_int(-1)

    def __sub__(self, other: EncryptedVector) -> EncryptedVector:
        return self + (-other)

    def add_plain(self, values: ArrayLike, *, frac_bits: int | None = None) -> EncryptedVector:
        """Add plaintext values (encoded at this vector's exponent unless ``frac_bits`` is given)."""
        fb = -self.exponent if frac_bits is None else frac_bits
        other = EncryptedVector.trivial(self.public_key, encode_fixed(values, fb), exponent=-fb, packing=self.packing)
        if other.length != self.length:
            raise InvalidMessage(f"length mismatch: {self.length} vs {other.length}")
        return self + other

    @classmethod
    def trivial(
        cls, public_key: PublicKey, ints: Sequence[int], *, exponent: int = 0, packing: Packing = UNPACKED
    ) -> EncryptedVector:
        """Deterministic encryptions (1 + n·m) of public values, for adding plaintexts."""
        _check_kinds(public_key, packing)
        exponent = _exponent(exponent)
        if isinstance(ints, (str, bytes)):
            raise TypeError("the values are integers, not a string")
        if not (type(ints) is list and all(type(v) is int for v in ints)):  # else as they are: the common case
            ints = [as_int(v) for v in ints]
        bound = max((abs(v) for v in ints), default=0)
        plain = packing.pack(ints) if packing.packed else ints
        pk = public_key
        return cls(pk, [(1 + pk.n * pk.raw_plain(m)) % pk.nsquare for m in plain], len(ints), exponent, packing, bound)

    def mul_int(self, k: int) -> EncryptedVector:
        """Multiply every value (every slot) by the integer ``k``."""
        k = as_int(k)
        bound = self._check_bound(self.bound * abs(k), "scalar product")
        pk = self.public_key
        count_many("mul", len(self.ciphertexts))
        if k < 0:
            inv = [gmpy2.invert(c, pk.nsquare) for c in self.ciphertexts]
            return self._like([powmod(c, -k, pk.nsquare) for c in inv], bound)
        return self._like([powmod(c, k, pk.nsquare) for c in self.ciphertexts], bound)

    def mul_scalar(self, s: float, *, frac_bits: int = DEFAULT_FRAC_BITS) -> EncryptedVector:
        """Multiply by a real scalar encoded with ``frac_bits`` (the exponent drops by frac_bits)."""
        frac_bits = _scaled(self.exponent, frac_bits)
        (k,) = encode_fixed([s], frac_bits)
        return self.mul_int(k)._with_exponent(self.exponent - frac_bits)

    def mul_elementwise(self, values: ArrayLike, *, frac_bits: int = 0) -> EncryptedVector:
        """Element-wise product with plaintext values (unpacked vectors only)."""
        self._require_unpacked("element-wise multiplication")
        frac_bits = _scaled(self.exponent, frac_bits)
        ks = encode_fixed(values, frac_bits)
        if len(ks) != self.length:
            raise InvalidMessage(f"length mismatch: {self.length} vs {len(ks)}")
        bound = self._check_bound(self.bound * max((abs(k) for k in ks), default=0), "element-wise product")
        pk = self.public_key
        return self._like([pk.raw_mul(c, k) for c, k in zip(self.ciphertexts, ks)], bound, self.exponent - frac_bits)

    def sum(self) -> EncryptedVector:
        """Sum of all values as a 1-vector (unpacked only)."""
        self._require_unpacked("sum")
        n2 = self.public_key.nsquare
        acc = mpz(1)
        count_many("add", max(0, len(self.ciphertexts) - 1))
        for c in self.ciphertexts:
            acc = acc * c % n2
        bound = self._check_bound(self.bound * self.length, "sum")
        return EncryptedVector(self.public_key, [acc], 1, self.exponent, UNPACKED, bound)

    def dot(self, weights: ArrayLike, *, frac_bits: int = 0) -> EncryptedVector:
        """Σ_i w_i·x_i as a 1-vector, by multi-exponentiation (unpacked only)."""
        w = _exact_array(weights)
        if w.ndim != 1:
            raise InvalidMessage(f"dot takes a vector of weights, got an array of shape {w.shape}")
        return self.matvec(w[None, :], frac_bits=frac_bits)

    def matvec(self, W: ArrayLike, *, frac_bits: int = 0) -> EncryptedVector:
        """W @ x for a plaintext matrix W (rows × len), each row by multi-exponentiation."""
        self._require_unpacked("matrix-vector product")
        frac_bits = _scaled(self.exponent, frac_bits)
        W = _exact_array(W)
        if W.ndim != 2 or W.shape[1] != self.length:
            raise InvalidMessage(f"matrix of shape {W.shape} cannot multiply a vector of length {self.length}")
        pk = self.public_key
        out, bound = [], 0
        for row in W:
            ks = encode_fixed(row, frac_bits)
            bound = max(bound, self.bound * sum(abs(k) for k in ks))
            out.append(multi_exp(self.ciphertexts, ks, pk.nsquare))
        count_many("mul", W.shape[0] * self.length)
        self._check_bound(bound, "matrix-vector product")
        return EncryptedVector(pk, out, W.shape[0], self.exponent - frac_bits, UNPACKED, bound)

    def rerandomize(self, pool: ObfuscatorPool | None = None) -> EncryptedVector:
        """Every ciphertext times a fresh obfuscator: from ``pool`` (made ahead) when one is given."""
        if pool is not None:
            if not isinstance(pool, ObfuscatorPool):
                raise TypeError(f"rerandomize takes an ObfuscatorPool, got {type(pool).__name__}")
            if pool.pk != self.public_key:  # its obfuscators are n-th residues mod another n²
                raise InvalidMessage("the obfuscator pool is for another key than the vector's")
            count_many("rerandomize", len(self.ciphertexts))
            return self._like([pool.rerandomize(c) for c in self.ciphertexts], self.bound)
        pk = self.public_key
        return self._like([pk.rerandomize(c) for c in self.ciphertexts], self.bound)

    def _require_unpacked(self, what: str) -> None:
        if self.packing.packed:
            raise InvalidMessage(f"{what} needs an unpacked vector")

    def __getitem__(self, idx: slice | ArrayLike) -> EncryptedVector:
        self._require_unpacked("indexing")
        if isinstance(idx, slice):
            cts = self.ciphertexts[idx]
        else:
            sel = np.atleast_1d(np.asarray(idx))
            if sel.dtype.kind == "b":  # a mask, not the indices 0 and 1
                if sel.shape != (self.length,):
                    raise IndexError(f"a boolean mask of shape {sel.shape} for a vector of {self.length}")
                sel = np.flatnonzero(sel)
            elif sel.dtype.kind not in "iu" and sel.size:
                raise IndexError(f"indices must be integers, got {sel.dtype}")
            cts = [self.ciphertexts[i] for i in sel.astype(np.int64, copy=False)]
        return EncryptedVector(self.public_key, cts, len(cts), self.exponent, UNPACKED, self.bound)

    @classmethod
    def concat(cls, parts: Sequence[EncryptedVector]) -> EncryptedVector:
        """One vector of the parts' elements in order, at the smallest exponent among them (same key and packing)."""
        if isinstance(parts, (str, bytes)):
            raise TypeError("concat takes a sequence of EncryptedVectors")
        parts = list(parts)  # a generator would be used up by min()
        if not parts:
            raise ValueError("nothing to concatenate")
        if not all(isinstance(p, EncryptedVector) for p in parts):
            raise TypeError("concat takes a sequence of EncryptedVectors")
        e = min(p.exponent for p in parts)
        parts = [p.scale_exponent(e) for p in parts]
        for p in parts:
            p._require_unpacked("concatenation")
            if p.public_key != parts[0].public_key:
                raise InvalidMessage("vectors are encrypted under different public keys")
        cts = [c for p in parts for c in p.ciphertexts]
        return cls(parts[0].public_key, cts, len(cts), e, UNPACKED, max(p.bound for p in parts))

    # ------------------------------------------------------------------ wire format
    def to_proto(self) -> messages_pb2.CiphertextVector:
        """The wire form: a ``CiphertextVector`` message with the key's fingerprint."""
        return messages_pb2.CiphertextVector(
            ciphertexts=[int_to_bytes(c) for c in self.ciphertexts],
            exponent=self.exponent,
            length=self.length,
            slots_per_ciphertext=self.packing.slots,
            slot_bits=self.packing.slot_bits,
            key_fingerprint=self.public_key.fingerprint,
        )

    @classmethod
    def from_proto(
        cls,
        msg: messages_pb2.CiphertextVector,
        public_key: PublicKey,
        *,
        length: int | None = None,
        exponent: int | None = None,
        packing: Packing | None = None,
        bound: int | None = None,
        what: str = "ciphertext vector",
    ) -> EncryptedVector:
        """Parse and validate a received vector.

        Checks the key fingerprint, the expected length, exponent and packing
        (when given), and that every ciphertext c satisfies 0 < c < n² and
        gcd(c, n) = 1.  ``bound`` is the bound the receiving protocol declares
        for the plaintexts (default: the full capacity, which leaves no room for
        further arithmetic).
        """
        if not isinstance(msg, messages_pb2.CiphertextVector):
            raise TypeError(f"from_proto takes a CiphertextVector message, got {type(msg).__name__}")
        _check_kinds(public_key, UNPACKED if packing is None else packing)
        bound = None if bound is None else as_int(bound)
        if msg.key_fingerprint != public_key.fingerprint:
            raise InvalidMessage(f"{what} was encrypted under a different public key")
        if length is not None and msg.length != length:
            raise InvalidMessage(f"{what} holds {msg.length} values, expected {length}")
        if exponent is not None and msg.exponent != exponent:
            raise InvalidMessage(f"{what} has fixed-point exponent {msg.exponent}, expected {exponent}")
        if msg.exponent > 0 or msg.exponent < MIN_EXPONENT:
            raise InvalidMessage(f"{what} has an out-of-range exponent {msg.exponent}")
        if msg.slots_per_ciphertext > 1 and msg.slot_bits < 2:
            raise InvalidMessage(
                f"{what} declares {msg.slots_per_ciphertext} slots of {msg.slot_bits} bits; "
                "packed slots need at least 2 bits"
            )
        if (
            msg.slots_per_ciphertext > 1
            and msg.slots_per_ciphertext * msg.slot_bits > public_key.max_int.bit_length() - 1
        ):
            raise InvalidMessage(f"{what} declares a packing that does not fit the key")
        got = Packing(msg.slots_per_ciphertext, msg.slot_bits) if msg.slots_per_ciphertext > 1 else UNPACKED
        if packing is not None and got != packing:
            raise InvalidMessage(
                f"{what} uses packing {got.slots}x{got.slot_bits} bits, expected "
                f"{packing.slots}x{packing.slot_bits} bits"
            )
        expected_cts = got.n_ciphertexts(msg.length)
        if len(msg.ciphertexts) != expected_cts:
            raise InvalidMessage(f"{what} has {len(msg.ciphertexts)} ciphertexts, expected {expected_cts}")
        max_bytes = (public_key.nsquare.bit_length() + 7) // 8
        for i, b in enumerate(msg.ciphertexts):
            if len(b) > max_bytes:
                raise InvalidMessage(f"{what}: ciphertext {i} is longer than n²")
        cts = public_key.validate_ciphertexts((bytes_to_int(b) for b in msg.ciphertexts), f"{what}: ciphertext")
        cap = got.slot_capacity if got.packed else int(public_key.max_int)
        if bound is not None and bound > cap:
            raise InvalidMessage(
                f"{what} uses {got.slots} slots of {got.slot_bits} bits, too narrow for the "
                f"{int(bound).bit_length()}-bit values expected here"
            )
        return cls(public_key, cts, msg.length, msg.exponent, got, bound)


def _plaintexts(
    public_key: PublicKey, ints: Sequence[int], packing: Packing, bound: int | None
) -> tuple[list[int], list[int], int]:
    """(the integers, the plaintexts to encrypt, the bound to record), after the bound checks."""
    _check_kinds(public_key, packing)
    if isinstance(ints, (str, bytes)):
        raise TypeError("the values to encrypt are integers, not a string")
    if isinstance(ints, np.ndarray) and ints.ndim == 1 and ints.dtype.kind in "iu":
        ints = ints.tolist()  # Python ints at C speed
    if not (type(ints) is list and all(type(v) is int for v in ints)):  # else as they are: the common case, fast
        ints = [as_int(v) for v in ints]
    actual = max((abs(v) for v in ints), default=0)
    if bound is None:
        bound = actual
    bound = as_int(bound)
    if bound < 0:
        raise ValueError(f"a bound on |values| is at least 0, got {bound}")
    if actual > bound:
        raise CryptoOverflow(
            f"a value of {actual.bit_length()} bits exceeds the declared bound of {int(bound).bit_length()} bits"
        )
    vec_cap = packing.slot_capacity if packing.packed else int(public_key.max_int)
    if bound > vec_cap:
        raise CryptoOverflow(
            f"values of {int(bound).bit_length()} bits do not fit the capacity of {vec_cap.bit_length()} bits"
        )
    return ints, (packing.pack(ints) if packing.packed else ints), int(bound)


def _exponent(exponent: object, what: str = "exponent") -> int:
    """The exponent of a vector about to be made, checked before any ciphertext is computed: an int in
    [MIN_EXPONENT, 0] (``what`` names the argument it comes from)."""
    e = check_frac_bits(exponent, what)
    if not MIN_EXPONENT <= e <= 0:
        raise ValueError(f"a vector's exponent lies in [{MIN_EXPONENT}, 0]: {what} gives {e}")
    return e


def _scaled(exponent: int, frac_bits: object) -> int:
    """The exponent after a product with ``frac_bits`` fractional bits, checked before the product is computed."""
    f = check_frac_bits(frac_bits)
    if not MIN_EXPONENT <= exponent - f <= 0:
        raise ValueError(f"frac_bits={f} would give exponent {exponent - f}, outside [{MIN_EXPONENT}, 0]")
    return f


def _check_kinds(public_key: object, packing: object) -> None:
    """TypeError unless ``public_key`` is a :class:`PublicKey` and ``packing`` a :class:`Packing` (a private key, an
    int or None would otherwise fail on its first missing attribute)."""
    if not isinstance(public_key, PublicKey):
        raise TypeError(f"a PublicKey is needed here, got {type(public_key).__name__}")
    if not isinstance(packing, Packing):
        raise TypeError(f"a Packing is needed here, got {type(packing).__name__}")


def _exact_array(x: ArrayLike) -> np.ndarray:
    """``np.asarray(x)``, except that integers stay exact: numpy makes a float64 array of Python ints beyond
    int64 (2^63 + 1 would become 2^63), so a sequence that holds only integers (mpz included) becomes an object
    array of them."""
    arr = np.asarray(x)
    if arr.dtype.kind in "fO" and not isinstance(x, np.ndarray):
        obj = np.asarray(x, dtype=object)
        if obj.size and all(isinstance(v, numbers.Integral) for v in obj.ravel()):
            return obj
    return arr
