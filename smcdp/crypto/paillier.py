"""Paillier keys and raw (integer) operations, built on phe + gmpy2.

The key objects wrap python-paillier (``phe``) keys, so every ciphertext made
here is an ordinary Paillier ciphertext with g = n + 1 that ``phe`` decrypts
to the same value, and vice versa for standard keys (a subgroup key refuses
randomness outside its subgroup, below).  What this module adds to phe:

* a security floor: keys below 2048 bits are refused unless the caller passes
  ``allow_insecure=True`` (tests); the default is 3072 bits;
* key files: JSON, the private one created with mode 0600 (never chmod-ed
  after the fact) and replaced atomically;
* fast encryption (docs/crypto.md, "Encryption paths"):

  - **fixed-base randomness** (the Damgård–Jurik–Nielsen variant that
    SecretFlow HEU uses): ``h = -x² mod n`` for a random x, ``h_s = h^n mod n²``,
    obfuscator ``h_s^a`` with ``a`` uniform of key_size/2 bits, computed from a
    windowed table of ``h_s^(j·2^(w·i))`` built once per key.  Security rests
    on the DJN assumption that ``h_s^a`` for such short ``a`` is
    indistinguishable from a uniform n-th residue (plus DCR for Paillier
    itself); see docs/crypto.md.
  - **CRT encryption** when the encrypting party holds the private key: the
    same obfuscator computed mod p² and mod q² from per-prime tables and
    recombined, ~4x cheaper multiplications.

* CRT decryption on gmpy2 (as phe does) and batch helpers;
* **subgroup keys** (``generate_keypair(..., subgroup=True)``; Ma, Han & Lei,
  "Optimized Paillier's cryptosystem with fast encryption and decryption",
  ACSAC 2021): p − 1 = 2·α_p·p', q − 1 = 2·α_q·q' with secret primes α_p, α_q
  of l/2 bits (l = 448 at 2048 bits) and a public base h_s of order dividing
  2α_pα_q, so that every obfuscator is h_s^a and decryption raises to 2α_p
  (225 bits) instead of p − 1 (1024 bits): about 4× cheaper.  Its ciphertexts
  are ordinary Paillier ciphertexts (phe decrypts them); the security
  assumption changes (docs/crypto.md, "Subgroup keys"), so a key is of this
  kind only when its owner asks, and a peer who re-randomises under it must
  allow it.

Plaintexts here are integers in [0, n); signed values are represented as
``v mod n`` and decoded with phe's convention: results in the middle third
(max_int, n - max_int) mean overflow and raise :class:`~smcdp.errors.CryptoOverflow`.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import threading
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np
from gmpy2 import mpz
from phe import paillier as phe_paillier

from smcdp._files import atomic_write, json_loads
from smcdp.crypto import native
from smcdp.crypto.counters import count as _count
from smcdp.crypto.ints import as_int
from smcdp.crypto.modexp import FixedBaseTable, powmod, powmod2, window_for_uses
from smcdp.errors import CryptoOverflow, InsecureParameters, InvalidMessage, naming_file
from smcdp.progress import task

MIN_SECURE_BITS = 2048
#: No key below this many bits, not even in tests (:func:`check_key_bits`, :class:`PublicKey`).
MIN_KEY_BITS = 128
DEFAULT_KEY_BITS = 3072
#: statistical margin of a subgroup key's obfuscator exponents over the subgroup's order (bits)
SUBGROUP_MARGIN_BITS = 64


#: what a session's ``key_kind`` may name: a standard key (the default) or a subgroup key (docs/crypto.md)
KEY_KINDS = ("standard", "subgroup")


def check_key_kind(kind: object, where: str) -> None:
    """Raise :class:`~smcdp.errors.InvalidMessage` unless ``kind`` is one of :data:`KEY_KINDS`."""
    if kind not in KEY_KINDS:
        raise InvalidMessage(f"{where} key_kind={kind!r} must be one of {list(KEY_KINDS)}")


def subgroup_bits_for(bits: int) -> int:
    """l, the bits of α = α_p·α_q of a ``bits``-bit subgroup key: Ma, Han & Lei's 448 at 2048 bits (112-bit
    security: the best known attack, a baby-step giant-step search for α_p, takes about 2^(l/4) steps), 512 at
    3072, 576 at 4096 (144 bits, about the modulus's), 768 at 7680; below 2048 bits (test keys only) a quarter
    of the modulus, at least 64.  It is also the least l a peer accepts for a modulus of 2048 bits or more."""
    if bits >= 7680:
        return 768
    if bits >= 4096:
        return 576
    if bits >= 3072:
        return 512
    if bits >= 2048:
        return 448
    return max(64, (bits // 4) & ~1)


_MPZ = type(mpz(0))


def as_mpz(v: object) -> mpz:
    """An integer argument (a plaintext, a ciphertext, a factor) as an mpz: mpz and int as they are, numpy
    integers and whole floats converted, anything else -- 2.5, an infinity, NaN, a string -- refused
    (ValueError/TypeError) instead of floored by ``mpz()``."""
    if type(v) is _MPZ:
        return v
    return mpz(v if type(v) is int else as_int(v))


def _orders(orders: object) -> tuple[mpz, mpz]:
    """A subgroup key's secret orders (α_p, α_q): a pair of integers above 1."""
    if isinstance(orders, (str, bytes)) or not isinstance(orders, Sequence) or len(orders) != 2:
        raise InvalidMessage("private key: the subgroup orders are a pair (alpha_p, alpha_q)")
    a, b = as_mpz(orders[0]), as_mpz(orders[1])
    if a < 2 or b < 2:
        raise InvalidMessage("private key: the subgroup orders are integers above 1")
    return a, b


class PublicKey:
    """A Paillier public key (g = n + 1) with fast encryption.

    ``subgroup_base`` (h_s) and ``subgroup_bits`` (l) make it a *subgroup key*: every obfuscator, whoever
    computes it, is h_s^a with a of l + 64 bits, which the key owner decrypts with short exponents
    (module docstring).  Without them each instance draws its own fixed base (the DJN variant)."""

    def __init__(self, n: int, subgroup_base: int | None = None, subgroup_bits: int = 0):
        if isinstance(n, (bool, np.bool_)):
            raise TypeError("a Paillier modulus is an integer, not a bool")
        n = int(as_mpz(n))
        if n <= 0 or n % 2 == 0:
            raise InvalidMessage("Paillier modulus must be a positive odd integer")
        if n.bit_length() < MIN_KEY_BITS:  # n = 1 or 3 leaves no plaintext; generate_keypair makes none so small
            raise InsecureParameters(f"a Paillier modulus has at least {MIN_KEY_BITS} bits, got {n.bit_length()}")
        if subgroup_base is None and subgroup_bits:
            raise InvalidMessage("subgroup_bits without a subgroup_base: a subgroup key needs both")
        self.n = mpz(n)
        self.nsquare = self.n * self.n
        self.max_int = self.n // 3 - 1
        self.bits = n.bit_length()
        self._phe = phe_paillier.PaillierPublicKey(n)
        self.fingerprint = hashlib.sha256(n.to_bytes((n.bit_length() + 7) // 8, "big")).digest()
        self._table: FixedBaseTable | None = None
        self._window: int | None = None  # set by plan(): the window whichever thread builds the table uses
        self._hs: mpz | None = None
        self.subgroup_bits = 0
        if subgroup_base is not None:
            self._set_subgroup(as_mpz(subgroup_base), subgroup_bits)
        # one fixed base and one table per key, however many threads ask at once
        self._lock = threading.Lock()

    # ------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        return isinstance(other, PublicKey) and self.n == other.n and self.subgroup_base == other.subgroup_base

    def __hash__(self) -> int:
        return hash(int(self.n))

    def __repr__(self) -> str:
        return f"PublicKey({self.bits} bits, fp={self.fingerprint[:4].hex()})"

    @property
    def phe(self) -> phe_paillier.PaillierPublicKey:
        """The equivalent python-paillier key."""
        return self._phe

    # ------------------------------------------------------------ subgroup keys
    def _set_subgroup(self, hs: mpz, bits: int) -> None:
        """Validate a subgroup key's public part (a peer's or a file's): l even, below half the modulus and at
        least :func:`subgroup_bits_for` the modulus (64 for test keys below 2048 bits: with a short α_p a
        search for it factors n); h_s a unit mod n² with h_s² ≢ 1 mod p and mod q (gcd(h_s² − 1, n) = 1: a
        base of order ≤ 2 modulo a prime would make encryption deterministic there, and could give a factor).
        Its full order cannot be checked without the factors: the owner's key file is checked against them
        (:meth:`PrivateKey.from_factors`)."""
        floor = subgroup_bits_for(self.bits) if self.bits >= MIN_SECURE_BITS else 64
        if isinstance(bits, bool) or not isinstance(bits, int) or bits < floor or bits % 2 or bits >= self.bits // 2:
            raise InvalidMessage(
                f"subgroup key: l = {bits!r} bits must be even, at least {floor} for a {self.bits}-bit modulus "
                "and below half the modulus"
            )
        if not (1 < hs < self.nsquare) or gmpy2.gcd(hs, self.n) != 1 or gmpy2.gcd(hs * hs - 1, self.n) != 1:
            raise InvalidMessage("subgroup key: the base h_s is not a unit mod n² whose square is ≢ 1 mod p and q")
        self._hs = hs
        self.subgroup_bits = bits

    @property
    def subgroup(self) -> bool:
        """True for a subgroup key (obfuscators in the owner's subgroup, fast decryption)."""
        return self.subgroup_bits > 0

    @property
    def kind(self) -> str:
        """``"subgroup"`` or ``"standard"``: what a session's summary and a peer's policy name."""
        return "subgroup" if self.subgroup else "standard"

    @property
    def subgroup_base(self) -> mpz | None:
        """h_s of a subgroup key (public), None for a standard one."""
        return self._hs if self.subgroup else None

    # ------------------------------------------------------------ fixed base
    @property
    def obfuscation_bits(self) -> int:
        """Bits of the exponent ``a`` of a fixed-base obfuscator ``h_s^a``: half the key size, or for a
        subgroup key l + 64 (within 2^-63 of uniform over the subgroup, whose order is below 2^(l+1))."""
        if self.subgroup:
            return self.subgroup_bits + SUBGROUP_MARGIN_BITS
        return self.bits // 2

    def _fixed_base(self) -> mpz:
        with self._lock:
            if self._hs is None:
                while True:
                    x = mpz(secrets.randbelow(int(self.n) - 2) + 2)
                    if gmpy2.gcd(x, self.n) == 1:
                        break
                h = (-(x * x)) % self.n
                self._hs = gmpy2.powmod(h, self.n, self.nsquare)
            return self._hs

    def table(self) -> FixedBaseTable:
        """The fixed-base table of the obfuscators, built once: with the window :meth:`plan` chose, else the
        largest the memory budget allows."""
        if self._table is None:
            hs = self._fixed_base()
            with self._lock:
                if self._table is None:
                    self._table = FixedBaseTable(hs, self.nsquare, self.obfuscation_bits, window=self._window)
        return self._table

    def plan(self, uses: int) -> None:
        """Size the table, not yet built, for ``uses`` obfuscators: the window that minimises building it
        plus that many powers (:func:`~smcdp.crypto.modexp.window_for_uses`).  Whichever thread builds the
        table first then builds this one, so a background :meth:`prepare` racing the session's first
        obfuscator cannot end up with the budget's largest table.  A table built earlier is kept."""
        with self._lock:
            if self._table is None and self._window is None:
                self._window = window_for_uses(self.obfuscation_bits, self.nsquare.bit_length(), uses)

    def prepare(self, uses: int) -> FixedBaseTable:
        """:meth:`plan` for ``uses`` obfuscators and build the table now."""
        self.plan(uses)
        return self.table()

    def obfuscator(self, factor: int | None = None) -> mpz:
        """A fresh random n-th residue h_s^a mod n² (a of key_size/2 bits), times ``factor``
        when one is given (the table loop absorbs that multiplication)."""
        return self.table().pow(secrets.randbits(self.obfuscation_bits), None if factor is None else as_mpz(factor))

    def slow_obfuscator(self) -> mpz:
        """r^n mod n² for uniform r in Z*_n (the textbook obfuscator, as phe does); for a subgroup key
        h_s^a by one ``powmod`` (no table), since the owner decrypts only randomness in its subgroup."""
        if self.subgroup:
            return powmod(self._fixed_base(), secrets.randbits(self.obfuscation_bits), self.nsquare)
        while True:
            r = mpz(secrets.randbelow(int(self.n) - 1) + 1)
            if gmpy2.gcd(r, self.n) == 1:
                return powmod(r, self.n, self.nsquare)

    # ------------------------------------------------------------ raw ops
    def raw_plain(self, m: int) -> mpz:
        """Map a signed integer with ``|m| <= max_int`` into Z_n."""
        m = as_mpz(m)
        if m > self.max_int or m < -self.max_int:
            raise CryptoOverflow(
                f"plaintext integer of {abs(int(m)).bit_length()} bits does not fit below n/3 "
                f"({self.max_int.bit_length()} bits)"
            )
        return m % self.n

    def raw_encrypt(self, m: int, obfuscate: bool = True) -> mpz:
        """Encrypt a signed integer (``|m| <= max_int``)."""
        gm = 1 + self.n * self.raw_plain(m)  # < n², no reduction needed
        _count("encrypt")
        if not obfuscate:
            return gm % self.nsquare
        return self.obfuscator(gm)

    def raw_encrypt_many(self, ms: Iterable[int]) -> list[mpz]:
        """:meth:`raw_encrypt` of every plaintext."""
        return [self.raw_encrypt(m) for m in ms]

    def rerandomize(self, c: mpz) -> mpz:
        """``c`` times a fresh obfuscator: the same plaintext under new randomness."""
        if c is None:  # obfuscator(None) is a fresh encryption of 0, not c re-randomised
            raise TypeError("rerandomize takes a ciphertext, got None")
        _count("rerandomize")
        return self.obfuscator(as_mpz(c))

    def raw_encrypt_textbook(self, m: int) -> mpz:
        """Encrypt with a fresh textbook obfuscator r^n (r uniform in Z*_n), no fixed-base table.

        For protocols that encrypt only a handful of values under a key (the
        secure minimum's keys): building the table of :meth:`raw_encrypt`
        (≈ 0.1 s at 768 bits, seconds at 2048) would cost more than it saves.
        """
        return self.raw_encrypt(m, obfuscate=False) * self.slow_obfuscator() % self.nsquare

    def rerandomize_textbook(self, c: mpz) -> mpz:
        """``c · r^n mod n²`` with a fresh textbook obfuscator (see :meth:`raw_encrypt_textbook`)."""
        _count("rerandomize")
        return as_mpz(c) * self.slow_obfuscator() % self.nsquare

    def raw_add(self, c1: mpz, c2: mpz) -> mpz:
        """The product of two ciphertexts mod n²: an encryption of the sum of their plaintexts."""
        # not counted: a few microseconds each, a counter would cost measurably here (the vector
        # additions count per element, in EncryptedVector)
        return as_mpz(c1) * as_mpz(c2) % self.nsquare

    def raw_mul(self, c: mpz, k: int) -> mpz:
        """c^k mod n² for a signed integer k (negative k uses the inverse)."""
        _count("mul")
        c, k = as_mpz(c), as_mpz(k)
        if k < 0:
            try:
                c = gmpy2.invert(c, self.nsquare)
            except ZeroDivisionError:
                raise InvalidMessage("ciphertext is not a unit mod n² (gcd(c, n) != 1): it has no inverse") from None
            k = -k
        return powmod(c, k, self.nsquare)

    def validate_ciphertext(self, c: int, where: str = "ciphertext") -> mpz:
        """Check 0 < c < n² and gcd(c, n) = 1; return it as mpz."""
        c = as_mpz(c)
        if not (0 < c < self.nsquare):
            raise InvalidMessage(f"{where} is outside (0, n²)")
        if gmpy2.gcd(c, self.n) != 1:
            raise InvalidMessage(f"{where} is not a unit mod n (gcd(c, n) != 1)")
        return c

    def validate_ciphertexts(self, cs: Iterable[int], where: str = "ciphertext") -> list[mpz]:
        """:meth:`validate_ciphertext` for many at once: the range per ciphertext, the unit check
        batched as gcd(Π c mod n, n) = 1 (one gcd instead of one per ciphertext; the per-ciphertext
        check runs only to name the culprit when the batch fails)."""
        n, n2 = self.n, self.nsquare
        out = []
        acc = mpz(1)
        for i, c in enumerate(cs):
            c = as_mpz(c)
            if not (0 < c < n2):
                raise InvalidMessage(f"{where} {i} is outside (0, n²)")
            out.append(c)
            acc = acc * c % n
        if out and gmpy2.gcd(acc, n) != 1:
            for i, c in enumerate(out):
                self.validate_ciphertext(c, f"{where} {i}")
        return out

    # ------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        """The key file's JSON (hex ``n``; a subgroup key's ``subgroup_base`` in hex and ``subgroup_bits``)."""
        out: dict[str, Any] = {"kind": "smcdp-paillier-public-key", "version": 1, "n": format(int(self.n), "x")}
        if self.subgroup:
            out["subgroup_base"] = format(int(self._fixed_base()), "x")
            out["subgroup_bits"] = self.subgroup_bits
        return out

    @classmethod
    def from_json(cls, obj: object) -> PublicKey:
        """The public key of a key file's JSON; anything else raises :class:`~smcdp.errors.InvalidMessage`."""
        if not isinstance(obj, dict) or obj.get("kind") != "smcdp-paillier-public-key":
            raise InvalidMessage("not an smcdp Paillier public key file")
        try:
            n = int(obj["n"], 16)
        except (KeyError, TypeError, ValueError):
            raise InvalidMessage("public key file has no valid hexadecimal 'n'") from None
        return cls(n, *_subgroup_from_json(obj))


class PrivateKey:
    """A Paillier private key (p, q) with CRT decryption and CRT encryption.

    For a subgroup key (the public key has a subgroup base) ``orders`` = (α_p, α_q), the secret primes with
    2α_p | p − 1 and 2α_q | q − 1: a decryption half raises to 2α_p instead of p − 1 (without them the
    key still decrypts, with p − 1, at the standard cost)."""

    def __init__(self, public_key: PublicKey, p: int, q: int, orders: tuple[int, int] | None = None):
        if not isinstance(public_key, PublicKey):
            raise TypeError(f"a private key needs its PublicKey, got {type(public_key).__name__}")
        p, q = as_mpz(p), as_mpz(q)
        if p * q != public_key.n or p == q or p < 3 or q < 3:
            raise InvalidMessage("private key primes do not match the public key")
        if orders is not None and not public_key.subgroup:
            raise InvalidMessage("private key: subgroup orders given for a standard public key")
        if orders is not None:
            orders = _orders(orders)
        if q < p:
            p, q = q, p
            orders = None if orders is None else (orders[1], orders[0])
        if orders is not None:  # swapped or another key's orders would make a key that decrypts nothing of its own
            _check_subgroup(public_key, p, q, *orders)
        self.public_key = public_key
        self.p, self.q = p, q
        self.psquare, self.qsquare = p * p, q * q
        self._phe = phe_paillier.PaillierPrivateKey(public_key.phe, int(p), int(q))
        n = public_key.n
        #: the secret subgroup orders (α_p, α_q) of a subgroup key, None otherwise
        self.orders = None if orders is None else (mpz(orders[0]), mpz(orders[1]))
        # decryption exponents: p − 1 and q − 1, or 2α_p and 2α_q (they kill every obfuscator h_s^a)
        self.ep: mpz = p - 1 if self.orders is None else 2 * self.orders[0]
        self.eq: mpz = q - 1 if self.orders is None else 2 * self.orders[1]
        # decryption constants (g = n + 1)
        self.hp = gmpy2.invert((gmpy2.powmod(n + 1, self.ep, self.psquare) - 1) // p, p)
        self.hq = gmpy2.invert((gmpy2.powmod(n + 1, self.eq, self.qsquare) - 1) // q, q)
        self.p_inv_q = gmpy2.invert(p, q)
        self.psq_inv_qsq = gmpy2.invert(self.psquare, self.qsquare)
        self._tables: tuple[FixedBaseTable, FixedBaseTable] | None = None
        self._window: int | None = None  # set by plan(), as the public key's
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"PrivateKey(for {self.public_key!r})"

    @classmethod
    def from_factors(cls, public_key: PublicKey, p: int, q: int, orders: tuple[int, int] | None = None) -> PrivateKey:
        """A private key from factors that came from outside this process (a file, a peer).

        Checks what decryption silently relies on: p and q are distinct primes
        (Miller–Rabin, 25 rounds: error below 4^-25 for an adversarial input),
        n = p·q, and gcd(n, (p−1)(q−1)) = 1 (else g = n + 1 is not a valid
        generator and decryption is not unique).  A composite factor would
        otherwise decrypt to garbage without any error.
        """
        if not isinstance(public_key, PublicKey):
            raise TypeError(f"a private key needs its PublicKey, got {type(public_key).__name__}")
        p, q = as_mpz(p), as_mpz(q)
        n = public_key.n
        if p < 3 or q < 3 or p * q != n or p == q:
            raise InvalidMessage("private key: p·q does not equal the public modulus n (or p = q)")
        for name, f in (("p", p), ("q", q)):
            if not gmpy2.is_prime(f, 25):
                raise InvalidMessage(f"private key: {name} is not prime")
        if gmpy2.gcd(n, (p - 1) * (q - 1)) != 1:
            raise InvalidMessage("private key: gcd(n, (p-1)(q-1)) != 1, not a valid Paillier key")
        if public_key.subgroup != (orders is not None):
            raise InvalidMessage("private key: a subgroup key needs its orders (α_p, α_q), a standard key has none")
        return cls(public_key, p, q, orders)  # the constructor checks the orders (_check_subgroup)

    @property
    def phe(self) -> phe_paillier.PaillierPrivateKey:
        """The same key as a python-paillier (``phe``) private key."""
        return self._phe

    # ------------------------------------------------------------ decryption
    def raw_decrypt(self, c: int) -> mpz:
        """Decrypt to an integer in [0, n)."""
        return self.combine_halves(*self.decrypt_halves(c))

    def decrypt_half(self, c: int, which: int) -> mpz:
        """m mod p (``which`` = 0) or m mod q (1): the two independent halves of a CRT decryption,
        for running them on two threads (:mod:`smcdp.crypto.threads`); :meth:`combine_halves` joins them.

        A subgroup key refuses a ciphertext whose randomness is not in its subgroup (c^(2α_p) ≢ 1 mod p:
        made with another obfuscator, or crafted) with :class:`~smcdp.errors.InvalidMessage` rather than
        return a wrong value."""
        if which not in (0, 1) or isinstance(which, float):
            raise ValueError(f"which is 0 (the half mod p) or 1 (mod q), got {which!r}")
        fsq, e, other = (self.psquare, self.ep, self.q) if which == 0 else (self.qsquare, self.eq, self.p)
        c = self._ciphertext(c)
        if c % other == 0:  # the other half's check (_half_of), which this one alone would not make
            raise InvalidMessage("not a ciphertext of this key: it is not a unit mod n (gcd(c, n) != 1)")
        return self._half_of(powmod(c, e, fsq), which)

    def decrypt_halves(self, c: int) -> tuple[mpz, mpz]:
        """``(decrypt_half(c, 0), decrypt_half(c, 1))`` in one call: the two powers' products interleaved by
        the engine where :attr:`interleaved_halves` (1.6x two halves' CPU at 2048 bits), on one thread."""
        c = self._ciphertext(c)
        xp, xq = powmod2(c, self.ep, self.psquare, c, self.eq, self.qsquare)
        return self._half_of(xp, 0), self._half_of(xq, 1)

    @property
    def interleaved_halves(self) -> bool:
        """Whether :meth:`decrypt_halves` interleaves the halves (the engine's IFMA products take p² and q²,
        of one width): then one job per ciphertext costs less CPU than two jobs of a half each."""
        return native.interleaves(self.psquare.bit_length(), self.qsquare.bit_length())

    def _ciphertext(self, c: object) -> mpz:
        """A ciphertext to decrypt: an integer in (0, n²) (a unit mod n is checked by :meth:`_half_of`)."""
        v = as_mpz(c)
        if not 0 < v < self.public_key.nsquare:
            raise InvalidMessage("ciphertext is outside (0, n²)")
        return v

    def _half_of(self, power: mpz, which: int) -> mpz:
        """m mod p (or q) from c^e mod p² (or q²): L(x)·h, once it is checked that c^e ≡ 1 mod p (or q).

        That holds for every unit c with the standard key's exponent p − 1 (Fermat) and, with a subgroup key's
        2α_p, for every c whose randomness is in the subgroup; a c ≡ 0 mod p (0, p, n: no ciphertext) would
        otherwise decrypt to some value."""
        f, h = (self.p, self.hp) if which == 0 else (self.q, self.hq)
        x = power - 1
        if x % f:
            if self.orders is not None and power % f:
                raise InvalidMessage(
                    "ciphertext's randomness is not in the subgroup key's subgroup (not made with its base h_s)"
                )
            raise InvalidMessage("not a ciphertext of this key: it is not a unit mod n (gcd(c, n) != 1)")
        return x // f * h % f

    def combine_halves(self, mp: mpz, mq: mpz) -> mpz:
        """CRT: m = mp + p·((mq − mp)·p⁻¹ mod q) in [0, n), for halves mp in [0, p) and mq in [0, q); counts one
        decryption."""
        _count("decrypt")
        p, q = self.p, self.q
        mp, mq = as_mpz(mp), as_mpz(mq)
        if not (0 <= mp < p and 0 <= mq < q):
            raise InvalidMessage("decryption halves must lie in [0, p) x [0, q)")
        return mp + p * ((mq - mp) * self.p_inv_q % q)

    def decode_signed(self, m: mpz) -> int:
        """Signed value of a decrypted integer; middle third means overflow."""
        n, max_int = self.public_key.n, self.public_key.max_int
        m = as_mpz(m)
        if not 0 <= m < n:
            raise InvalidMessage("a decrypted integer must lie in [0, n)")
        if m <= max_int:
            return int(m)
        if m >= n - max_int:
            return int(m - n)
        raise CryptoOverflow("decrypted value lies in the overflow region (n/3, 2n/3): a homomorphic result wrapped")

    def raw_decrypt_signed(self, c: int) -> int:
        """Decrypt to a signed integer in (-n/2, n/2]."""
        return self.decode_signed(self.raw_decrypt(c))

    # ------------------------------------------------------------ CRT encryption
    def _crt_exp_bits(self) -> tuple[int, int]:
        """Exponent bits of the two CRT tables: the obfuscator's, or for a subgroup key those of 2α_p and
        2α_q (h_s mod p² has order dividing 2α_p, so the exponent is reduced mod it first)."""
        if self.orders is None:
            bits = self.public_key.obfuscation_bits
            return bits, bits
        return self.ep.bit_length(), self.eq.bit_length()

    def _crt_tables(self) -> tuple[FixedBaseTable, FixedBaseTable]:
        if self._tables is None:
            hs = self.public_key._fixed_base()
            bp, bq = self._crt_exp_bits()
            with self._lock:  # built once even when several threads encrypt at the start
                if self._tables is None:
                    window = self._window
                    # the q table on a second thread while this one builds p's: the native engine
                    # releases the GIL while it builds, so the two take the time of one on two cores
                    with ThreadPoolExecutor(1, thread_name_prefix="smcdp-table") as ex:
                        tq = ex.submit(FixedBaseTable, hs % self.qsquare, self.qsquare, bq, window=window)
                        tp = FixedBaseTable(hs % self.psquare, self.psquare, bp, window=window)
                        self._tables = (tp, tq.result())
        return self._tables

    def plan(self, uses: int) -> None:
        """Size the CRT tables, not yet built, for ``uses`` encryptions (as :meth:`PublicKey.plan`): whichever
        thread encrypts first builds these."""
        with self._lock:
            if self._tables is None and self._window is None:
                self._window = window_for_uses(max(self._crt_exp_bits()), self.psquare.bit_length(), uses)

    def prepare(self, uses: int) -> None:
        """:meth:`plan` for ``uses`` encryptions and build the CRT tables now."""
        self.plan(uses)
        self._crt_tables()

    @property
    def tables_ready(self) -> bool:
        """True once the CRT tables exist (encryption then costs no table building)."""
        return self._tables is not None

    def raw_encrypt(self, m: int) -> mpz:
        """Encrypt with the private key: same distribution as the public path, computed mod p² and q²."""
        _count("encrypt")
        pk = self.public_key
        gm = 1 + pk.n * pk.raw_plain(m)
        a = secrets.randbits(pk.obfuscation_bits)
        tp, tq = self._crt_tables()
        if self.orders is None:
            cp, cq = tp.pow(a, gm), tq.pow(a, gm)
        else:
            cp, cq = tp.pow(a % self.ep, gm), tq.pow(a % self.eq, gm)
        return cp + self.psquare * ((cq - cp) * self.psq_inv_qsq % self.qsquare)

    # ------------------------------------------------------------ files
    def to_json(self) -> dict[str, Any]:
        """The key file's JSON (hex ``n``, ``p``, ``q``; a subgroup key's base, l and orders ``alpha_p``,
        ``alpha_q`` too); write it with :func:`save_private_key` (mode 0600)."""
        out = {
            "kind": "smcdp-paillier-private-key",
            "version": 1,
            "n": format(int(self.public_key.n), "x"),
            "p": format(int(self.p), "x"),
            "q": format(int(self.q), "x"),
        }
        if self.orders is not None:
            pub = self.public_key.to_json()
            out.update(subgroup_base=pub["subgroup_base"], subgroup_bits=pub["subgroup_bits"])
            out.update(alpha_p=format(int(self.orders[0]), "x"), alpha_q=format(int(self.orders[1]), "x"))
        return out

    @classmethod
    def from_json(cls, obj: object, allow_insecure: bool = False) -> PrivateKey:
        """The private key of a key file's JSON, with its factors checked (:meth:`from_factors`)."""
        if not isinstance(obj, dict) or obj.get("kind") != "smcdp-paillier-private-key":
            raise InvalidMessage("not an smcdp Paillier private key file")
        try:
            n, p, q = (int(obj[k], 16) for k in ("n", "p", "q"))
            orders = (int(obj["alpha_p"], 16), int(obj["alpha_q"], 16)) if "alpha_p" in obj else None
        except (KeyError, TypeError, ValueError):
            raise InvalidMessage(
                "private key file needs hexadecimal 'n', 'p', 'q' (and 'alpha_p', 'alpha_q' for a subgroup key)"
            ) from None
        check_key_bits(n.bit_length(), allow_insecure)
        return cls.from_factors(PublicKey(n, *_subgroup_from_json(obj)), p, q, orders)


def _subgroup_from_json(obj: dict[str, Any]) -> tuple[int | None, int]:
    """(h_s, l) of a key file's JSON: (None, 0) for a standard key; a malformed pair is an InvalidMessage."""
    if "subgroup_base" not in obj and "subgroup_bits" not in obj:
        return None, 0
    try:
        hs, bits = int(obj["subgroup_base"], 16), obj["subgroup_bits"]
    except (KeyError, TypeError, ValueError):
        raise InvalidMessage("key file: a subgroup key needs hexadecimal 'subgroup_base' and 'subgroup_bits'") from None
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise InvalidMessage("key file: 'subgroup_bits' must be an integer")
    return hs, bits


def _check_subgroup(pk: PublicKey, p: mpz, q: mpz, ap: mpz, aq: mpz) -> None:
    """What a subgroup key's decryption relies on, for factors from outside the process: α_p, α_q distinct
    primes of l/2 bits, 2α_p | p − 1 and 2α_q | q − 1, and h_s^(2α_p) ≡ 1 mod p², h_s^(2α_q) ≡ 1 mod q²
    (every obfuscator h_s^a is then killed by the short decryption exponents)."""
    half = pk.subgroup_bits // 2
    hs = pk._fixed_base()
    for name, f, a in (("p", p, ap), ("q", q, aq)):
        if a.bit_length() != half or not gmpy2.is_prime(a, 25):
            raise InvalidMessage(f"subgroup key: α_{name} is not a prime of {half} bits")
        if (f - 1) % (2 * a):
            raise InvalidMessage(f"subgroup key: 2α_{name} does not divide {name} − 1")
        if gmpy2.powmod(hs, 2 * a, f * f) != 1:
            raise InvalidMessage(f"subgroup key: h_s^(2α_{name}) ≠ 1 mod {name}², the base is not in the subgroup")
    if ap == aq:
        raise InvalidMessage("subgroup key: α_p = α_q")


#: the largest modulus :func:`generate_keypair` makes: what a peer accepts (:data:`smcdp.crypto.codec.MAX_MODULUS_BITS`)
MAX_GENERATED_BITS = 16384


def _switch(value: object, name: str) -> bool:
    """An opt-in as a bool: a truthy string such as "false" (a configuration value passed through) must not
    admit a 256-bit key."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} is True or False, got {type(value).__name__} {value!r}")
    return bool(value)


def check_key_bits(bits: int, allow_insecure: bool) -> None:
    """Refuse a key size below 2048 bits unless ``allow_insecure`` (tests only), and below 128 bits always.

    Raises :class:`~smcdp.errors.InsecureParameters`."""
    allow_insecure = _switch(allow_insecure, "allow_insecure")
    if bits < MIN_SECURE_BITS and not allow_insecure:
        raise InsecureParameters(
            f"a {bits}-bit Paillier key is below the {MIN_SECURE_BITS}-bit floor; "
            "pass allow_insecure=True (tests only) to use it"
        )
    if bits < MIN_KEY_BITS:
        raise InsecureParameters(f"Paillier keys below {MIN_KEY_BITS} bits are not supported even for tests")


def _random_prime(bits: int, rng: random.Random) -> mpz:
    """A random prime of exactly ``bits`` bits with its top two bits set (so p·q has bits(p)+bits(q) bits)."""
    top = (mpz(3) << (bits - 2)) | 1
    while True:
        p = gmpy2.next_prime(mpz(rng.getrandbits(bits)) | top)
        if p.bit_length() == bits:
            return p


#: odd primes the subgroup key's search sieves its candidates by (below 2^12)
_SIEVE_PRIMES = [int(p) for p in range(3, 4096, 2) if gmpy2.is_prime(p)]
#: candidates α = α₀ + 2j, j < _SIEVE_WINDOW, sieved at once (about one α a window at 2048 bits)
_SIEVE_WINDOW = 1 << 15


def _subgroup_prime(bits: int, half: int, rng: random.Random, avoid: mpz | None) -> tuple[mpz, mpz]:
    """(P, α) with P = 2·α·P' + 1 a prime of exactly ``bits`` bits, α a prime of ``half`` bits (≠ ``avoid``)
    and P' a prime of the remaining bits: P − 1 has no factor below α but 2, so it is no smoother than a
    safe prime's beyond α.  As Ma, Han & Lei: one large P' drawn first, then α searched until P is prime --
    here over a window of odd α from a random start, sieved for both α and P by the odd primes below 2^12
    (Miller–Rabin only for what survives: about 20 times fewer big-integer operations than a next_prime
    per candidate).  α has its top two bits set (as before the sieve: α_p's range, which a search for it
    must cover, stays 2^(l/2 − 2)) and P' its top five, so P ≥ 2·0.75·(31/32)·2^(bits−1) ≥ √2·2^(bits−1):
    two such primes make n of full size."""
    rest = bits - half - 1  # 2·α·P' has half + rest + 1 bits
    least = gmpy2.isqrt(mpz(1) << (2 * bits - 1)) + 1
    while True:
        big = gmpy2.next_prime(mpz(rng.getrandbits(rest)) | (mpz(31) << (rest - 5)))
        if big.bit_length() != rest:
            continue
        for _ in range(64):  # windows of candidates for this P' (a few at most, as a rule)
            a0 = mpz(rng.getrandbits(half)) | (mpz(3) << (half - 2)) | 1
            alive = np.ones(_SIEVE_WINDOW, dtype=bool)
            for r in _SIEVE_PRIMES:  # all below α (half ≥ 32 bits) and below P' (a prime above 4096)
                inv2 = (r + 1) // 2  # 2⁻¹ mod r
                a0r = int(a0 % r)
                alive[(-a0r * inv2) % r :: r] = False  # r | α
                b = int(2 * big % r)  # r | P  ⇔  α ≡ −(2P')⁻¹ mod r
                alive[((-pow(b, -1, r) - a0r) * inv2) % r :: r] = False
            for j in np.flatnonzero(alive):
                alpha = a0 + 2 * int(j)
                if alpha.bit_length() != half or alpha == avoid or not gmpy2.is_prime(alpha, 25):
                    continue
                prime = 2 * alpha * big + 1
                if least <= prime < (mpz(1) << bits) and gmpy2.is_prime(prime, 30):
                    return prime, alpha


def generate_keypair(
    bits: int = DEFAULT_KEY_BITS,
    *,
    allow_insecure: bool = False,
    rng: random.Random | None = None,
    progress: bool = False,
    subgroup: bool = False,
) -> tuple[PublicKey, PrivateKey]:
    """New key pair with an exactly ``bits``-bit modulus (default 3072; < 2048 only with ``allow_insecure``).

    Primes come from ``rng`` when given -- a role's keyed stream
    (:mod:`smcdp.primitives.rng`), so that a session replayed after a crash
    regenerates the same key -- and from the OS CSPRNG otherwise.  As in
    python-paillier, each prime is the next prime after a random odd number;
    n = pq with p != q and gcd(n, (p-1)(q-1)) = 1.  Odd sizes are supported:
    p has ⌈bits/2⌉ bits and q ⌊bits/2⌋ (phe's own generator draws both of
    ⌊bits/2⌋ bits and waits for an n of ``bits`` bits, which for an odd size
    never comes).  ``progress=True`` (the CLI) shows the primes found on stderr
    (:mod:`smcdp.progress`).

    ``subgroup=True`` makes a subgroup key (module docstring): p = 2α_p·p' + 1, q = 2α_q·q' + 1 with α_p, α_q
    primes of l/2 bits (:func:`subgroup_bits_for`) and p', q' prime, and the public base
    h_s = (−x^(2p'q'))^n mod n² for a random unit x, whose order divides 2α_pα_q.
    """
    if isinstance(bits, bool) or not isinstance(bits, int):
        raise InvalidMessage(f"key size must be an integer number of bits, got {bits!r}")
    if bits > MAX_GENERATED_BITS:  # 2^31 bits searched for a prime for ever; 2^63 aborted the process in GMP
        raise InvalidMessage(f"key size {bits} bits is above the {MAX_GENERATED_BITS} bits a peer accepts")
    check_key_bits(bits, allow_insecure)
    subgroup = _switch(subgroup, "subgroup")
    if subgroup and subgroup_bits_for(bits) >= bits // 2:
        raise InsecureParameters(
            f"a {bits}-bit modulus is too small for a subgroup key (l = {subgroup_bits_for(bits)})"
        )
    _count("keygen")
    if rng is not None and not isinstance(rng, random.Random):  # what the prime search calls: getrandbits
        raise TypeError(f"rng is a random.Random (a role's keyed stream), got {type(rng).__name__}")
    rng = rng if rng is not None else random.SystemRandom()
    label = f"Paillier {bits}-bit {'subgroup ' if subgroup else ''}key"
    with task(label, total=2, unit="prime") if progress else nullcontext() as shown:
        while True:
            if subgroup:
                half = subgroup_bits_for(bits) // 2
                p, ap = _subgroup_prime((bits + 1) // 2, half, rng, None)
                if shown is not None:
                    shown.update(completed=1)
                q, aq = _subgroup_prime(bits // 2, half, rng, ap)
            else:
                p = _random_prime((bits + 1) // 2, rng)
                if shown is not None:
                    shown.update(completed=1)
                q = _random_prime(bits // 2, rng)
            if shown is not None:
                shown.update(completed=2)
            n = p * q
            if p != q and n.bit_length() == bits and gmpy2.gcd(n, (p - 1) * (q - 1)) == 1:
                if not subgroup:
                    pk = PublicKey(int(n))
                    return pk, PrivateKey(pk, p, q)
                beta = ((p - 1) // (2 * ap)) * ((q - 1) // (2 * aq))
                while True:
                    x = mpz(rng.getrandbits(bits + 64)) % n
                    h = (-gmpy2.powmod(x, 2 * beta, n)) % n
                    if gmpy2.gcd(x, n) == 1 and gmpy2.gcd(h * h - 1, n) == 1:  # h_s of order 2α: h² ≢ 1 mod p, q
                        break
                pk = PublicKey(int(n), gmpy2.powmod(h, n, n * n), 2 * half)
                return pk, PrivateKey(pk, p, q, (ap, aq))
            if shown is not None:
                shown.update(completed=0)


def save_public_key(pk: PublicKey, path: str | os.PathLike[str]) -> None:
    """Write the public key file (mode 0644, atomically)."""
    if not isinstance(pk, PublicKey):  # a PrivateKey's JSON holds p and q: never into a world-readable file
        raise TypeError(f"save_public_key writes a PublicKey, got {type(pk).__name__}")
    atomic_write(path, json.dumps(pk.to_json()).encode(), 0o644)


def save_private_key(sk: PrivateKey, path: str | os.PathLike[str]) -> None:
    """Write the private key with mode 0600 from creation on."""
    if not isinstance(sk, PrivateKey):
        raise TypeError(f"save_private_key writes a PrivateKey, got {type(sk).__name__}")
    atomic_write(path, json.dumps(sk.to_json()).encode(), 0o600)


def _read_json(path: str | os.PathLike[str]) -> object:
    try:
        return json_loads(Path(path).read_text())
    except FileNotFoundError:
        raise InvalidMessage(f"key file {path} does not exist") from None
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidMessage(f"key file {path} is not valid JSON") from None


def load_public_key(path: str | os.PathLike[str], allow_insecure: bool = False) -> PublicKey:
    """Read a public key file (keys under 2048 bits only with ``allow_insecure``)."""
    pk = PublicKey.from_json(_read_json(path))
    check_key_bits(pk.bits, allow_insecure)
    return pk


def load_private_key(path: str | os.PathLike[str], allow_insecure: bool = False) -> PrivateKey:
    """Read a private key file; one that group or others can read is refused (``chmod 600`` it)."""
    st = os.stat(path)
    if st.st_mode & 0o077:
        raise InvalidMessage(
            f"private key file {path} is readable by group/others (mode {st.st_mode & 0o777:o}); chmod 600 it"
        )
    with naming_file(path):
        return PrivateKey.from_json(_read_json(path), allow_insecure)


def decrypt_many(sk: PrivateKey, cs: Sequence[int]) -> list[int]:
    """The ciphertexts ``cs`` decrypted with ``sk`` to signed integers in (-n/2, n/2], in order
    (:meth:`PrivateKey.raw_decrypt_signed` of each)."""
    return [sk.raw_decrypt_signed(c) for c in cs]
