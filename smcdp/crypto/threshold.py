"""Threshold Paillier decryption over the integers (Shoup 2000, Damgård–Jurik 2001 with s = 1).

A (t, n) threshold key is an ordinary Paillier public key N (g = N + 1: encryption, homomorphic
operations, packing and the C accelerator are those of :class:`~smcdp.crypto.paillier.PublicKey`,
unchanged) whose decryption exponent is shared among n parties so that any t + 1 of them decrypt
and no t of them learn anything about a plaintext.  docs/crypto.md, "Threshold key without a dealer",
has the construction, its assumptions and error probabilities; in short:

* **The exponent.**  A secret integer d with d ≡ 0 mod φ(N) and a public θ = d mod N, invertible
  mod N.  A dealer (:func:`deal`, for tests and benchmarks) uses d = φ·(φ⁻¹ mod N), so θ = 1 as in
  Damgård–Jurik; the dealer-free key generation (:mod:`smcdp.protocols.keygen`) uses d = β·φ for a
  β nobody knows and reveals θ = β·φ mod N.  Either way c^d = (1 + N)^(m·θ) mod N² for c = Enc(m).
* **Shares.**  Shamir shares over the integers of **Δ·d** (Rabin 1998), Δ = n!: s_i = f(i) for
  f(X) = Δ·d + a_1 X + … + a_t X^t with a_k uniform in [0, 2^(ℓ_d + 2·log₂Δ + κ)), κ = :data:`STAT_BITS`;
  any t shares are statistically independent of d.  (Sharing d itself would not be: an integer polynomial
  has f(i) ≡ f(0) mod i, so share i alone would tell party i d mod i -- for d = β·φ(N), whether small
  primes divide p − 1 or q − 1.  With f(0) = Δ·d every f(i) ≡ 0 mod i for i ≤ n.)  Δ·λ_{0,i}^S =
  Δ·Π_{j∈S∖i} j/(j − i) is an integer for every set S of t + 1 indices, and Σ_{i∈S} Δλ_{0,i}^S s_i = Δ²·d.
* **Partial decryption** of c by party i: c_i = c^(2Δ s_i) mod N².
* **Combination** of the c_i of t + 1 parties S: c' = Π c_i^(2Δλ_{0,i}^S) = c^(4Δ³ d) =
  (1 + N)^(4Δ³ θ m), so m = L(c') · (4Δ³θ)⁻¹ mod N with L(u) = (u − 1)/N; a c' ≢ 1 mod N is no
  combination of right partials and is refused.
* **Proof of correct partial decryption** (Shoup's, Fiat–Shamir): the verification base v is a
  square in Z*_{N²} derived from N by a domain-separated hash (nobody knows its discrete logarithm
  to anything), party i's verification key is v_i = v^(Δ s_i), and party i proves
  log_{c⁴}(c_i²) = log_v(v_i) (= Δ s_i).  A partial decryption whose proof fails raises
  :class:`BadPartialDecryption` naming the party; nothing is combined from it.

Proofs (:func:`partial_decrypt`):

* ``batch=False`` -- one proof per ciphertext (2 exponentiations to prove, 4 to verify, each).
* ``batch=True`` (the default for vectors) -- **one** proof for the whole vector: the verifier's
  weights ρ_k (``CHALLENGE_BITS`` bits each) are a hash of every ciphertext and every partial
  decryption, and the party proves log_X(Y) = log_v(v_i) for X = Π c_k^(4ρ_k), Y = Π c_{i,k}^(2ρ_k)
  (a random linear combination, Bellare–Garay–Rabin's small-exponent test).  If any c_{i,k}² differs
  from c_k^(4Δ s_i) by a factor ε_k, Y = X^(Δs_i)·Π ε_k^(ρ_k) and the proof passes only if
  Π ε_k^(ρ_k) = 1, probability ≤ 2^-128 over the hash under the assumption below.  Cost: two
  multi-exponentiations with 128-bit exponents instead of 2k full-size exponentiations, so
  verifying a 1,000-ciphertext vector costs about what 30 single proofs would.  Both variants name
  the party; only the per-ciphertext one also names the ciphertext.

Soundness (both variants) rests on the assumption that no party can find an element of small odd
order in the squares of Z*_{N²} (true by construction for safe-prime moduli, and, for the moduli
that the dealer-free generation produces, a computational assumption the literature makes too:
Damgård–Jurik §4.1 and Fouque–Poupard–Stern; Squaring c_i removes the elements of order 2).  The
challenge is ``CHALLENGE_BITS`` = 128 bits, the hash SHA-256 with the domain tag
``smcdp/threshold-paillier/v1``, the key and a caller-supplied context (session, purpose), so a proof
does not replay into another session, another key or another ciphertext.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import random
import secrets
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gmpy2
from gmpy2 import mpz

from smcdp._files import atomic_write, json_loads
from smcdp.crypto.counters import count_many as _count_many
from smcdp.crypto.encoding import decode_fixed
from smcdp.crypto.modexp import FixedBaseTable, multi_exp, powmod, table_budget_bytes, window_for
from smcdp.crypto.paillier import PrivateKey, PublicKey, as_mpz, check_key_bits
from smcdp.errors import CryptoOverflow, InvalidMessage, naming_file

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from smcdp.crypto.vector import EncryptedVector

#: bits of a Fiat–Shamir challenge and of a batch weight ρ_k
CHALLENGE_BITS = 128
#: statistical hiding parameter κ: integer sharing coefficients and proof nonces exceed what they hide by 2^κ
STAT_BITS = 128
#: most parties a threshold key supports (Δ = n! has 296 bits at 64)
MAX_PARTIES = 64
_DOMAIN = b"smcdp/threshold-paillier/v1"
#: the key files' format: 2 = shares of Δ·d (version 1 shared d itself, and share i told party i d mod i)
KEY_VERSION = 2
_MASK = (1 << CHALLENGE_BITS) - 1


class BadPartialDecryption(InvalidMessage):
    """A party's partial decryption is malformed or its proof of correctness fails: ``party`` names it."""

    def __init__(self, party: int, reason: str) -> None:
        super().__init__(f"party {party}'s partial decryption is refused: {reason}")
        self.party = party
        self.reason = reason


class NotEnoughShares(InvalidMessage):
    """Fewer than t + 1 valid partial decryptions: the ciphertexts cannot be decrypted."""


# --------------------------------------------------------------------------- helpers
def _int_bytes(v: int) -> bytes:
    v = int(v)
    b = abs(v).to_bytes((abs(v).bit_length() + 7) // 8 or 1, "big")
    return (b"-" if v < 0 else b"+") + len(b).to_bytes(4, "big") + b


def _hash(*parts: bytes | int) -> bytes:
    h = hashlib.sha256(_DOMAIN + b"\x00")
    for p in parts:
        h.update(_int_bytes(p) if isinstance(p, int) else len(p).to_bytes(4, "big") + p)
    return h.digest()


def verification_base(n: int) -> mpz:
    """The public verification base v of modulus ``n``: a square in Z*_{n²} from a domain-separated hash
    of n (so every party derives the same v and nobody chose it)."""
    n = mpz(n)
    n2 = n * n
    need = n2.bit_length() + STAT_BITS
    counter = 0
    while True:
        stream = b"".join(_hash(b"verification-base", int(n), counter, block) for block in range((need + 255) // 256))
        x = mpz(int.from_bytes(stream, "big")) % n2
        counter += 1
        if x > 1 and gmpy2.gcd(x, n) == 1:
            return x * x % n2


def lagrange_at_zero(delta: int, indices: Sequence[int], i: int) -> int:
    """Δ·λ_{0,i}^S = Δ·Π_{j∈S, j≠i} j/(j − i): an integer when Δ = n! and S ⊂ {1..n} (exact division)."""
    num, den = delta, 1
    for j in indices:
        if j != i:
            num *= j
            den *= j - i
    q, r = divmod(num, den)
    if r:  # pragma: no cover - impossible for Δ = n! and distinct indices in 1..n
        raise ArithmeticError("Δ·λ is not an integer")
    return q


def decode_signed(pk: PublicKey, m: int) -> int:
    """The signed value of a plaintext in [0, n) (phe's convention; the middle third means overflow); a value
    outside [0, n) is no plaintext and is refused (as the single key's ``decode_signed`` does)."""
    n, max_int = pk.n, pk.max_int
    m = as_mpz(m)
    if not 0 <= m < n:
        raise InvalidMessage("a decrypted integer must lie in [0, n)")
    if m <= max_int:
        return int(m)
    if m >= n - max_int:
        return int(m - n)
    raise CryptoOverflow("decrypted value lies in the overflow region (n/3, 2n/3): a homomorphic result wrapped")


# --------------------------------------------------------------------------- keys
def _check_version(obj: dict[str, Any], what: str) -> None:
    """Refuse a key file of another format than :data:`KEY_VERSION`, saying what to do about a version-1 one."""
    version = obj.get("version")
    if version == 1:
        raise InvalidMessage(
            f"a version-1 {what} (its shares are of d itself, and share i tells party i d mod i) is no longer "
            "accepted: run the key ceremony again (smcdp keys generate --group NAME ...)"
        )
    if version != KEY_VERSION:
        raise InvalidMessage(f"unknown {what} version {version!r} (this smcdp reads version {KEY_VERSION})")


@dataclass(frozen=True)
class ThresholdPublicKey:
    """The public part of a (t, n) threshold Paillier key: what every party and every verifier holds."""

    public_key: PublicKey
    parties: int
    threshold: int
    #: d mod N, invertible mod N (1 for a dealt key)
    theta: int
    #: public bound: every share satisfies |s_i| < 2^share_bits (sizes the proof nonces)
    share_bits: int
    #: v_i = v^(Δ s_i) mod N² for i = 1..parties
    verification_keys: tuple[int, ...]
    v: mpz = field(init=False, repr=False, compare=False)
    delta: int = field(init=False, repr=False, compare=False)
    #: SHA-256 of the canonical JSON: two parties holding the same key hold the same fingerprint
    fingerprint: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.parties, int) and 2 <= self.parties <= MAX_PARTIES):
            raise InvalidMessage(f"a threshold key needs 2 to {MAX_PARTIES} parties, got {self.parties!r}")
        if not (isinstance(self.threshold, int) and 1 <= self.threshold < self.parties):
            raise InvalidMessage(f"threshold t must satisfy 1 <= t < n = {self.parties}, got {self.threshold!r}")
        n = self.public_key.n
        if not (0 < self.theta < n) or gmpy2.gcd(self.theta, n) != 1:
            raise InvalidMessage("theta must be a unit mod N")
        if gmpy2.gcd(math.factorial(self.parties), n) != 1:  # 4Δ³θ must be invertible mod N to combine
            raise InvalidMessage(f"N has a prime factor of at most {self.parties} parties: no RSA modulus")
        if not (0 < self.share_bits <= 4 * n.bit_length() + 4096):
            raise InvalidMessage("share_bits out of range")
        if len(self.verification_keys) != self.parties:
            raise InvalidMessage(f"{self.parties} verification keys needed, got {len(self.verification_keys)}")
        n2 = self.public_key.nsquare
        for i, vk in enumerate(self.verification_keys, 1):
            if not (0 < vk < n2) or gmpy2.gcd(vk, n) != 1:
                raise InvalidMessage(f"verification key of party {i} is not a unit mod N²")
        object.__setattr__(self, "v", verification_base(int(n)))
        object.__setattr__(self, "delta", math.factorial(self.parties))
        object.__setattr__(
            self, "fingerprint", hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode()).digest()
        )

    @property
    def n(self) -> mpz:
        return self.public_key.n

    def nonce_bits(self) -> int:
        """Bits of a proof nonce r: |Δ s_i|·2^challenge, times 2^κ for statistical zero knowledge."""
        return self.share_bits + self.delta.bit_length() + CHALLENGE_BITS + STAT_BITS

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "smcdp-threshold-paillier-public-key",
            "version": KEY_VERSION,
            "n": format(int(self.n), "x"),
            "parties": self.parties,
            "threshold": self.threshold,
            "theta": format(int(self.theta), "x"),
            "share_bits": self.share_bits,
            "verification_keys": [format(int(v), "x") for v in self.verification_keys],
        }

    @classmethod
    def from_json(cls, obj: object, allow_insecure: bool = False) -> ThresholdPublicKey:
        if not isinstance(obj, dict) or obj.get("kind") != "smcdp-threshold-paillier-public-key":
            raise InvalidMessage("not an smcdp threshold Paillier public key")
        _check_version(obj, "threshold public key")
        try:
            n = int(obj["n"], 16)
            theta = int(obj["theta"], 16)
            vks = tuple(int(v, 16) for v in obj["verification_keys"])
            parties, threshold, share_bits = obj["parties"], obj["threshold"], obj["share_bits"]
        except (KeyError, TypeError, ValueError):
            raise InvalidMessage("threshold public key needs hex n, theta, verification_keys and integers") from None
        check_key_bits(n.bit_length(), allow_insecure)
        return cls(PublicKey(n), parties, threshold, theta, share_bits, vks)


@dataclass(frozen=True)
class KeyShare:
    """Party ``index``'s secret share s_i of the decryption exponent (keep it 0600: :func:`save_key_share`)."""

    public: ThresholdPublicKey
    index: int
    secret: int = field(repr=False)

    def __post_init__(self) -> None:
        if not (isinstance(self.index, int) and 1 <= self.index <= self.public.parties):
            raise InvalidMessage(f"share index must be in 1..{self.public.parties}, got {self.index!r}")
        if abs(int(self.secret)).bit_length() > self.public.share_bits:
            raise InvalidMessage("key share exceeds the key's public share bound")

    def check(self) -> None:
        """Raise unless v^(Δ s_i) is this party's published verification key."""
        pub = self.public
        if powmod(pub.v, pub.delta * self.secret, pub.public_key.nsquare) != pub.verification_keys[self.index - 1]:
            raise InvalidMessage(f"key share {self.index} does not match its verification key")

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "smcdp-threshold-paillier-key-share",
            "version": KEY_VERSION,
            "public": self.public.to_json(),
            "index": self.index,
            "secret": format(int(self.secret), "x") if self.secret >= 0 else "-" + format(-int(self.secret), "x"),
        }

    @classmethod
    def from_json(cls, obj: object, allow_insecure: bool = False) -> KeyShare:
        if not isinstance(obj, dict) or obj.get("kind") != "smcdp-threshold-paillier-key-share":
            raise InvalidMessage("not an smcdp threshold Paillier key share")
        _check_version(obj, "threshold key share")
        try:
            secret = int(obj["secret"], 16)
            index = obj["index"]
            public = ThresholdPublicKey.from_json(obj["public"], allow_insecure)
        except (KeyError, TypeError, ValueError):
            raise InvalidMessage("key share needs a public key, an index and a hexadecimal secret") from None
        share = cls(public, index, secret)
        share.check()
        return share


def save_key_share(share: KeyShare, path: str | os.PathLike[str]) -> None:
    """Write a key share with mode 0600 from creation on (atomically)."""
    atomic_write(path, json.dumps(share.to_json()).encode(), 0o600)


def load_key_share(path: str | os.PathLike[str], allow_insecure: bool = False) -> KeyShare:
    """Read a key share file; one that group or others can read is refused."""
    st = os.stat(path)
    if st.st_mode & 0o077:
        raise InvalidMessage(f"key share file {path} is readable by group/others; chmod 600 it")
    try:
        obj = json_loads(Path(path).read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise InvalidMessage(f"key share file {path} is not valid JSON") from None
    with naming_file(path):
        return KeyShare.from_json(obj, allow_insecure)


# --------------------------------------------------------------------------- sharing
def coefficient_bits(secret_bits: int, parties: int) -> int:
    """Bits of the random coefficients of an integer Shamir sharing of a ``secret_bits``-bit secret (times Δ = n!):
    2^κ times Δ²·2^secret_bits, Rabin's bound for t shares statistically independent of the secret."""
    return secret_bits + 2 * math.factorial(parties).bit_length() + STAT_BITS


def share_bound_bits(secret_bits: int, parties: int, threshold: int, dealers: int = 1) -> int:
    """A public bound on |s_i| for the sum of ``dealers`` integer sharings of secrets below 2^secret_bits."""
    cb = coefficient_bits(secret_bits, parties)
    # |f(i)| <= Δ·|d| + Σ_k a_k i^k < 2^cb + t·2^cb·n^t (Δ·2^secret_bits < 2^cb), summed over the dealers
    return cb + threshold * parties.bit_length() + (threshold + 1).bit_length() + dealers.bit_length() + 1


def integer_shamir(
    secret: int, parties: int, threshold: int, secret_bits: int, rng: random.Random | None = None
) -> tuple[list[int], list[int]]:
    """(coefficients a_0 = Δ·secret, a_1..a_t; shares f(1)..f(n)) of an integer Shamir sharing of Δ·secret, Δ = n!
    (shares of the secret itself would give party i secret mod i: f(i) ≡ f(0) mod i).

    The coefficients come from ``rng`` when given (a role's keyed stream, :mod:`smcdp.primitives.rng`, so
    that a replayed role deals the same shares), from the OS CSPRNG otherwise."""
    if abs(int(secret)).bit_length() > secret_bits:
        raise ValueError("secret exceeds its declared size")
    cb = coefficient_bits(secret_bits, parties)
    draw = rng.getrandbits if rng is not None else secrets.randbits
    coeffs = [math.factorial(parties) * int(secret)] + [draw(cb) for _ in range(threshold)]
    shares = [sum(a * i**k for k, a in enumerate(coeffs)) for i in range(1, parties + 1)]
    return coeffs, shares


def deal(sk: PrivateKey, parties: int, threshold: int) -> tuple[ThresholdPublicKey, list[KeyShare]]:
    """A (threshold, parties) key from a trusted dealer who knows ``sk`` (tests, benchmarks, migration).

    d = φ·(φ⁻¹ mod N): d ≡ 0 mod φ, d ≡ 1 mod N (θ = 1).  The dealer-free generation is
    :mod:`smcdp.protocols.keygen`; this one exists to test and measure decryption on its own.
    """
    pk = sk.public_key
    n = pk.n
    phi = (sk.p - 1) * (sk.q - 1)
    d = int(phi * gmpy2.invert(phi, n))
    bits = d.bit_length()
    _, shares = integer_shamir(d, parties, threshold, bits)
    share_bits = share_bound_bits(bits, parties, threshold)
    delta = math.factorial(parties)
    v = verification_base(int(n))
    vks = tuple(int(powmod(v, delta * s, pk.nsquare)) for s in shares)
    pub = ThresholdPublicKey(pk, parties, threshold, 1, share_bits, vks)
    return pub, [KeyShare(pub, i, s) for i, s in enumerate(shares, 1)]


# --------------------------------------------------------------------------- partial decryption
@dataclass(frozen=True)
class PartialDecryption:
    """Party ``party``'s c_i = c^(2Δ s_i) for each ciphertext, with its proof of correctness.

    ``proofs``: one (e, z) pair per ciphertext, or exactly one pair for the whole batch (``batch``)."""

    party: int
    values: tuple[int, ...]
    proofs: tuple[tuple[int, int], ...]
    batch: bool


def _challenge(pub: ThresholdPublicKey, context: bytes, party: int, x: int, y: int, a: int, b: int) -> int:
    vi = pub.verification_keys[party - 1]
    d = _hash(b"dleq", context, pub.fingerprint, party, int(pub.v), vi, x, y, a, b)
    return int.from_bytes(d, "big") & _MASK


def _batch_weights(
    pub: ThresholdPublicKey, context: bytes, party: int, cts: Sequence[int], values: Sequence[int]
) -> list[int]:
    h = hashlib.sha256(_hash(b"batch-weights", context, pub.fingerprint, party, len(cts)))
    for c, ci in zip(cts, values):
        h.update(_int_bytes(c) + _int_bytes(ci))
    seed = h.digest()
    out = []
    for k in range(len(cts)):
        out.append(int.from_bytes(_hash(b"rho", seed, k), "big") & _MASK)
    return out


def _nonce(pub: ThresholdPublicKey, share: KeyShare, x: mpz, y: mpz, context: bytes, nonce_key: bytes | None) -> int:
    """The proof's nonce: fresh, or -- with ``nonce_key`` -- derived as RFC 6979 derives a signature's: HMAC-SHA256
    keyed by ``nonce_key`` over the share's secret and the whole statement (expanded in counter mode to
    ``nonce_bits``).  A replayed prover sends the same proof; two different statements never share a nonce; and
    since the secret share is an input, whoever knows ``nonce_key`` (the root of a seeded session, say) still
    cannot recompute the nonce, so z = r + e·Δ·s does not reveal s."""
    bits = pub.nonce_bits()
    if nonce_key is None:
        return secrets.randbits(bits)
    statement = _hash(b"nonce", context, pub.fingerprint, share.index, int(x), int(y))
    msg = b"smcdp/threshold-nonce/v2\x00" + _int_bytes(share.secret) + statement
    out = b"".join(
        hmac.new(nonce_key, k.to_bytes(4, "big") + msg, hashlib.sha256).digest() for k in range((bits + 255) // 256)
    )
    return int.from_bytes(out, "big") >> (8 * len(out) - bits)


#: fixed-base tables of a key's public bases (the verification base v: every proof and every verification raises it
#: to a nonce-sized exponent; the encryption base h^N and its root h: every replayable encryption), three a key
#: (about 70 MB at 2048 bits); a party holds one or two group keys, and up to four keep their tables (more would
#: rebuild a table whenever sessions of five groups alternate)
_TABLES: dict[tuple[str, int, int, int], FixedBaseTable] = {}
_TABLES_MAX = 12
_TABLES_LOCK = threading.Lock()
_BUILDING: dict[tuple[str, int, int, int], threading.Lock] = {}
#: the largest window of the verification base's table: ⌈bits/6⌉ rows of 63 residues (about 24 MB at 2048 bits,
#: 0.2 s to build), and an exponentiation of ~4,500 bits then costs ~750 multiplications instead of ~5,300;
#: smaller where the tables would not fit the table budget (SMCDP_TABLE_BUDGET_MB: 4096-bit keys get 4-bit windows)
_V_WINDOW = 6
#: the encryption bases' tables: exponents of 1,248 bits at 2048 (djn_exponent_bits: an obfuscator's 1,024 and a
#: proof nonce's), 9-bit windows (139 rows, 36 MB mod N², 18 MB mod N, 0.15 s)
_ENC_WINDOW = 9


def _table_pow(kind: str, base: mpz, modulus: mpz, bits: int, e: int, max_window: int) -> mpz:
    """base^e mod modulus for 0 ≤ e < 2^bits, from a table built on first use for (kind, base, modulus) (else
    powmod).  One thread builds a table while the others that need it wait (the roles of an in-memory session
    share a process); other tables' powers do not wait for a build."""
    if e < 0 or e.bit_length() > bits:
        return powmod(base, e, modulus)
    key = (kind, int(modulus), int(base), bits)
    with _TABLES_LOCK:
        table = _TABLES.get(key)
        building = None if table is not None else _BUILDING.setdefault(key, threading.Lock())
    if building is not None:
        with building:
            with _TABLES_LOCK:
                table = _TABLES.get(key)
            if table is None:
                budget = table_budget_bytes() // 4
                window = window_for(bits, modulus.bit_length(), budget, entry_overhead=0, max_window=max_window)
                table = FixedBaseTable(mpz(base), modulus, bits, window=window)
                with _TABLES_LOCK:
                    if len(_TABLES) >= _TABLES_MAX:
                        _TABLES.pop(next(iter(_TABLES)))
                    _TABLES[key] = table
                    _BUILDING.pop(key, None)
    assert table is not None
    return table.pow(e)


def _v_pow(pub: ThresholdPublicKey, e: int) -> mpz:
    """v^e mod N² for 0 ≤ e < 2^(nonce_bits + 1), from the key's table (else powmod)."""
    return _table_pow("v", pub.v, pub.public_key.nsquare, pub.nonce_bits() + 1, e, _V_WINDOW)


def encryption_base(n: int) -> mpz:
    """The public encryption base h of modulus ``n``: −x² mod n for x from a domain-separated hash of n -- a
    base as the DJN variant draws it (:class:`~smcdp.crypto.paillier.PublicKey`), but one every party derives
    alike and nobody chose.  Its N-th power h^N mod N² makes the obfuscators of :func:`encrypt_replayable`."""
    n = mpz(n)
    blocks = n.bit_length() // 256 + 2  # n's size plus more than 128 bits: x is statistically uniform mod n
    counter = 0
    while True:
        stream = b"".join(_hash(b"encryption-base", int(n), counter, block) for block in range(blocks))
        x = mpz(int.from_bytes(stream, "big")) % n
        counter += 1
        if x > 1 and gmpy2.gcd(x, n) == 1:
            return (-(x * x)) % n


_BASES: dict[int, tuple[mpz, mpz]] = {}


def _encryption_bases(pk: PublicKey) -> tuple[mpz, mpz]:
    """(h mod N, h^N mod N²) of the key, computed once a process."""
    key = int(pk.n)
    with _TABLES_LOCK:
        bases = _BASES.get(key)
    if bases is None:
        h = encryption_base(key)
        made = (h, powmod(h, pk.n, pk.nsquare))
        with _TABLES_LOCK:
            bases = _BASES.setdefault(key, made)
            if len(_BASES) > _TABLES_MAX:
                _BASES.pop(next(iter(_BASES)))
    return bases


#: statistical hiding of a proof's nonce exponent over what it hides (:func:`djn_exponent_bits`)
DJN_HIDING_BITS = 80
#: the terms of a response Σ e_i·a_i that the tables' exponent size covers (more: longer nonces, by powmod)
DJN_TABLE_TERMS_BITS = 16


def djn_exponent_bits(pk: PublicKey, terms: int = 1) -> int:
    """Bits of a proof's nonce exponent b (u = h^b, smcdp.crypto.zkp ``djn``) for a response b + Σ e_i·a_i over
    ``terms`` terms, each e_i below 2^CHALLENGE_BITS and a_i below 2^obfuscation_bits: their sum's bits plus
    DJN_HIDING_BITS, so that b + Σ e_i·a_i is within 2^-DJN_HIDING_BITS of b alone.  Sized for at least
    2^DJN_TABLE_TERMS_BITS terms (the tables' size); beyond, one more bit for every doubling."""
    sum_bits = pk.obfuscation_bits + CHALLENGE_BITS + max(DJN_TABLE_TERMS_BITS, int(terms).bit_length())
    return sum_bits + DJN_HIDING_BITS


def replayable_obfuscator(pk: PublicKey, a: int) -> tuple[mpz, mpz]:
    """(h^N)^a mod N² and its N-th root r = h^a mod N, for h the key's :func:`encryption_base` and an exponent
    ``a`` ≥ 0: an obfuscator's (``pk.obfuscation_bits`` bits; DJN: the obfuscator of a short a looks like a
    uniform N-th residue) or a proof's nonce (:func:`djn_exponent_bits`; longer ones go by powmod).  ``a`` comes
    from the caller (derived from a party's secret root: a replayed party computes the same bytes); r is the
    opening a proof about the ciphertext is made from.  Two table lookups -- about 0.2 ms at 2048 bits instead
    of the 3 ms of a textbook r^N."""
    if pk.subgroup:  # its obfuscation_bits are l + 64, far too short for this base
        raise ValueError("a replayable obfuscator needs a standard key (a group key), not a subgroup key")
    if a < 0:
        raise ValueError("the exponent a must be a non-negative integer")
    bits = djn_exponent_bits(pk)  # the tables' exponent size; a longer a (a longer proof's nonce) goes by powmod
    h, hn = _encryption_bases(pk)
    return _table_pow("h^N", hn, pk.nsquare, bits, a, _ENC_WINDOW), _table_pow("h", h, pk.n, bits, a, _ENC_WINDOW)


def encrypt_replayable(pk: PublicKey, m: int, a: int) -> tuple[mpz, mpz]:
    """(c, r): c = g^m·(h^N)^a mod N² = g^m·r^N with (h^N)^a, r = h^a mod N from :func:`replayable_obfuscator`;
    ``a`` below 2^obfuscation_bits (an obfuscator's exponent)."""
    if not 0 <= a < 1 << pk.obfuscation_bits:
        raise ValueError(f"the exponent a must have at most {pk.obfuscation_bits} bits")
    obfuscator, r = replayable_obfuscator(pk, a)
    return obfuscator * pk.raw_encrypt(m, obfuscate=False) % pk.nsquare, r


def _prove(
    pub: ThresholdPublicKey, share: KeyShare, x: mpz, y: mpz, context: bytes, nonce_key: bytes | None = None
) -> tuple[int, int]:
    n2 = pub.public_key.nsquare
    r = _nonce(pub, share, x, y, context, nonce_key)
    a = powmod(x, r, n2)
    b = _v_pow(pub, r)
    e = _challenge(pub, context, share.index, int(x), int(y), int(a), int(b))
    return e, r + e * pub.delta * share.secret


def _verify(pub: ThresholdPublicKey, party: int, x: mpz, y: mpz, proof: tuple[int, int], context: bytes) -> bool:
    n2 = pub.public_key.nsquare
    try:
        if isinstance(proof, (str, bytes)) or len(proof) != 2:
            return False
        e, z = (int(as_mpz(v)) for v in proof)
    except (TypeError, ValueError):
        return False
    if not (0 <= e <= _MASK) or abs(z).bit_length() > pub.nonce_bits() + 1:
        return False
    vi = mpz(pub.verification_keys[party - 1])
    a = multi_exp([x, y], [z, -e], n2)
    b = _v_pow(pub, z) * gmpy2.invert(powmod(vi, e, n2), n2) % n2 if z >= 0 else multi_exp([pub.v, vi], [z, -e], n2)
    return _challenge(pub, context, party, int(x), int(y), int(a), int(b)) == e


def _batch_statement(
    pub: ThresholdPublicKey, party: int, cts: Sequence[mpz], values: Sequence[mpz], context: bytes
) -> tuple[mpz, mpz]:
    n2 = pub.public_key.nsquare
    rho = _batch_weights(pub, context, party, cts, values)
    x = multi_exp(list(cts), [4 * r for r in rho], n2)
    y = multi_exp(list(values), [2 * r for r in rho], n2)
    return x, y


def _powers(cs: Sequence[mpz], exp: int, n2: mpz) -> list[mpz]:
    """c^exp mod n2 for every c: on every core when there are several (the engine's powers release the GIL; a
    partial decryption's ~4,500-bit power mod N² costs 6 ms at 2048 bits, so a vector's are worth spreading)."""
    workers = min(len(cs), os.cpu_count() or 1)
    if workers < 2:
        return [powmod(c, exp, n2) for c in cs]
    chunks = [cs[i::workers] for i in range(workers)]
    with ThreadPoolExecutor(workers, thread_name_prefix="smcdp-partial") as ex:
        parts = list(ex.map(lambda chunk: [powmod(c, exp, n2) for c in chunk], chunks))
    out: list[mpz] = [mpz(0)] * len(cs)
    for i, part in enumerate(parts):
        out[i::workers] = part
    return out


def partial_decrypt(
    share: KeyShare, cts: Sequence[int], context: bytes, *, batch: bool = True, nonce_key: bytes | None = None
) -> PartialDecryption:
    """Party ``share.index``'s partial decryptions of ``cts`` and the proof(s) that they are correct.

    ``nonce_key``: a secret of the party (a stream of its randomness root) from which the proofs' nonces are
    derived together with each statement, so that a replayed party sends the same bytes; fresh nonces without."""
    pub = share.public
    pk = pub.public_key
    cs = pk.validate_ciphertexts(cts, "ciphertext")
    n2 = pk.nsquare
    exp = 2 * pub.delta * share.secret
    values = _powers(cs, exp, n2)
    if batch:
        x, y = _batch_statement(pub, share.index, cs, values, context)
        proofs: tuple[tuple[int, int], ...] = (_prove(pub, share, x, y, context, nonce_key),)
    else:
        proofs = tuple(
            _prove(pub, share, powmod(c, 4, n2), ci * ci % n2, context + k.to_bytes(8, "big"), nonce_key)
            for k, (c, ci) in enumerate(zip(cs, values))
        )
    return PartialDecryption(share.index, tuple(int(v) for v in values), proofs, batch)


def verify_partial(pub: ThresholdPublicKey, cts: Sequence[int], partial: PartialDecryption, context: bytes) -> None:
    """Raise :class:`BadPartialDecryption` (naming the party) unless ``partial`` is correct for ``cts``."""
    # the caller's ciphertexts first: a bad one is the caller's error, not the prover's (its proof would fail)
    _verify_partial(pub, pub.public_key.validate_ciphertexts(cts, "ciphertext"), partial, context)


def _verify_partial(pub: ThresholdPublicKey, cs: Sequence[mpz], partial: PartialDecryption, context: bytes) -> None:
    """:func:`verify_partial` of ciphertexts the caller has validated (``combine`` validates a vector once)."""
    party = partial.party
    if not (type(party) is int and 1 <= party <= pub.parties):  # not a bool
        raise InvalidMessage(f"partial decryption from an unknown party index {party!r}")
    pk = pub.public_key
    n, n2 = pk.n, pk.nsquare
    if len(partial.values) != len(cs):
        raise BadPartialDecryption(party, f"{len(partial.values)} values for {len(cs)} ciphertexts")
    values = []
    for k, raw in enumerate(partial.values):
        try:  # an integer (as_mpz refuses a string, a fraction, a bool), a unit mod N²
            ci = as_mpz(raw)
        except (TypeError, ValueError):
            raise BadPartialDecryption(party, f"value {k} is not an integer") from None
        if not (0 < ci < n2) or gmpy2.gcd(ci, n) != 1:
            raise BadPartialDecryption(party, f"value {k} is not a unit mod N²")
        values.append(ci)
    if partial.batch:
        if len(partial.proofs) != 1:
            raise BadPartialDecryption(party, "a batch proof is one (e, z) pair")
        x, y = _batch_statement(pub, party, cs, values, context)
        if not _verify(pub, party, x, y, partial.proofs[0], context):
            raise BadPartialDecryption(party, "the batch proof of correct decryption fails")
        return
    if len(partial.proofs) != len(cs):
        raise BadPartialDecryption(party, f"{len(partial.proofs)} proofs for {len(cs)} ciphertexts")
    for k, (c, ci, proof) in enumerate(zip(cs, values, partial.proofs)):
        x, y = powmod(c, 4, n2), ci * ci % n2
        if not _verify(pub, party, x, y, proof, context + k.to_bytes(8, "big")):
            raise BadPartialDecryption(party, f"the proof of correct decryption of ciphertext {k} fails")


def _combine(pub: ThresholdPublicKey, count: int, partials: Sequence[PartialDecryption]) -> list[int]:
    """Lagrange combination of exactly the given partials (no checks): plaintexts in [0, N)."""
    pk = pub.public_key
    n, n2 = pk.n, pk.nsquare
    indices = [p.party for p in partials]
    mus = [2 * lagrange_at_zero(pub.delta, indices, i) for i in indices]
    inv = gmpy2.invert(4 * pub.delta**3 * pub.theta % n, n)
    out = []
    for k in range(count):
        cprime = multi_exp([mpz(p.values[k]) for p in partials], mus, n2)
        if cprime % n != 1:  # (1 + N)^x ≡ 1 mod N: a partial that was not checked (one's own) is wrong
            raise InvalidMessage(
                f"the partial decryptions of parties {indices} do not combine to a decryption of ciphertext {k} "
                "(a share of another key, or an unverified partial, is wrong)"
            )
        out.append(int((cprime - 1) // n * inv % n))
    _count_many("decrypt", count)
    return out


def _by_party(pub: ThresholdPublicKey, partials: Sequence[PartialDecryption]) -> dict[int, PartialDecryption]:
    seen: dict[int, PartialDecryption] = {}
    for p in partials:
        if type(p.party) is not int or not 1 <= p.party <= pub.parties:
            raise InvalidMessage(f"partial decryption from an unknown party index {p.party!r}")
        if p.party in seen:
            raise InvalidMessage(f"two partial decryptions from party {p.party}")
        seen[p.party] = p
    return seen


def combine(
    pub: ThresholdPublicKey,
    cts: Sequence[int],
    partials: Sequence[PartialDecryption],
    context: bytes,
    *,
    signed: bool = True,
    own: int | None = None,
    needed_only: bool = False,
) -> list[int]:
    """The plaintexts of ``cts`` from the partial decryptions of at least t + 1 distinct parties.

    Every partial decryption is verified first: one that fails raises :class:`BadPartialDecryption`
    naming its party (a caller that wants to go on without it drops it and calls again); fewer than
    t + 1 distinct parties raise :class:`NotEnoughShares`.  ``signed``: decode into (−N/3, N/3) with
    phe's overflow convention (as :meth:`PrivateKey.raw_decrypt_signed`), else return [0, N).
    ``own``: the caller's share index, whose partial decryption it made itself and need not verify.
    ``needed_only``: verify only the partials that are used -- ``own``'s and the others' in index order until
    t + 1 (a wrong one among them is still named; one beyond them is never used, and not examined)."""
    cts = pub.public_key.validate_ciphertexts(cts, "ciphertext")
    seen = _by_party(pub, partials)
    if len(seen) < pub.threshold + 1:
        raise NotEnoughShares(f"{len(seen)} partial decryptions, {pub.threshold + 1} needed")
    order = sorted(seen, key=lambda i: (i != own, i))  # our own first: it needs no check
    chosen: list[PartialDecryption] = []
    for i in order:
        if needed_only and len(chosen) == pub.threshold + 1:
            break
        if i != own:
            _verify_partial(pub, cts, seen[i], context)
        elif len(seen[i].values) != len(cts):
            raise InvalidMessage(f"own partial decryption covers {len(seen[i].values)} of {len(cts)} ciphertexts")
        chosen.append(seen[i])
    chosen = sorted(chosen, key=lambda p: p.party)[: pub.threshold + 1]
    plain = _combine(pub, len(cts), chosen)
    return [decode_signed(pub.public_key, m) for m in plain] if signed else plain


# --------------------------------------------------------------------------- split decryption
#: a partial decryption's proof verified, in units of one partial decryption of a ciphertext (an exponentiation
#: mod N² by the ~4,500-bit share): the proof's response power and its multi-exponentiations, measured at 2048 bits
VERIFY_COST = 1.25


def decryptor_count(count: int, parties: int, threshold: int) -> int:
    """How many parties m share the partial decryptions of ``count`` ciphertexts (t + 1 ≤ m ≤ n).  With m of them,
    a decryptor does count·(t + 1)/m partial decryptions, one proof and verifies the m − 1 others' proofs; more
    decryptors spread the decryptions but add verifications.  m = √(count·(t + 1)/VERIFY_COST) minimises the
    busiest party's work (and keeps the total far below n parties decrypting everything): 17 ciphertexts at
    n = 3, t = 1 → all 3; 9 at n = 8, t = 1 → 4."""
    best = round(math.sqrt(count * (threshold + 1) / VERIFY_COST))
    return max(threshold + 1, min(parties, best))


def decryptors(count: int, parties: int, threshold: int, offset: int = 0) -> list[tuple[int, ...]]:
    """S_k, the t + 1 share indices that partially decrypt ciphertext k of ``count`` when the work is split
    (:func:`assigned`): the m = :func:`decryptor_count` parties offset + 1, …, offset + m (cyclically mod n)
    take the ciphertexts in turn, t + 1 consecutive ones of them for each -- so each decryptor does about
    (t + 1)/m of the ciphertexts, and a ciphertext gets exactly the t + 1 partial decryptions it needs.  The
    ``offset`` (a hash of the session and the message's tag: ``split_offset``) rotates who decrypts from one
    vector to the next.  Public and deterministic: every party computes the same sets."""
    m = decryptor_count(count, parties, threshold)
    return [tuple(sorted((offset + (k + j) % m) % parties + 1 for j in range(threshold + 1))) for k in range(count)]


def assigned(count: int, parties: int, threshold: int, index: int, offset: int = 0) -> list[int]:
    """The positions k of the ciphertexts party ``index`` partially decrypts when the work is split."""
    return [k for k, s in enumerate(decryptors(count, parties, threshold, offset)) if index in s]


def combine_assigned(
    pub: ThresholdPublicKey,
    cts: Sequence[int],
    partials: Sequence[PartialDecryption],
    context: bytes,
    *,
    signed: bool = True,
    own: int | None = None,
    offset: int = 0,
) -> list[int]:
    """The plaintexts of ``cts`` when the partial decryption was split (``offset`` as :func:`decryptors`): each
    party's partial covers exactly its :func:`assigned` ciphertexts (in order, one batch proof), and ciphertext k
    is combined from the partials of :func:`decryptors` S_k.  Every partial is verified on its own ciphertexts (except ``own``'s): each one is used,
    so each wrong one raises :class:`BadPartialDecryption` naming its party; a partial of another party, or of
    another length, is refused, and a missing one needed for some ciphertext raises :class:`NotEnoughShares`."""
    cts = pub.public_key.validate_ciphertexts(cts, "ciphertext")
    sets = decryptors(len(cts), pub.parties, pub.threshold, offset)
    seen = _by_party(pub, partials)
    positions = {i: [k for k, s in enumerate(sets) if i in s] for i in range(1, pub.parties + 1)}
    for i in sorted(seen, key=lambda i: (i != own, i)):
        mine = positions.get(i)
        if not mine:
            raise InvalidMessage(f"party {i} decrypts none of these ciphertexts: its partial decryption is unexpected")
        if i != own:
            _verify_partial(pub, [cts[k] for k in mine], seen[i], context)
        elif len(seen[i].values) != len(mine):
            raise InvalidMessage(f"own partial decryption covers {len(seen[i].values)} of {len(mine)} ciphertexts")
    missing = sorted({i for s in sets for i in s if i not in seen})
    if missing:
        raise NotEnoughShares(f"no partial decryption from part(ies) {missing}, which these ciphertexts need")
    at = {i: {k: j for j, k in enumerate(positions[i])} for i in seen}
    groups: dict[tuple[int, ...], list[int]] = {}
    for k, s in enumerate(sets):
        groups.setdefault(s, []).append(k)
    plain = [0] * len(cts)
    for s, ks in groups.items():
        subset = [PartialDecryption(i, tuple(seen[i].values[at[i][k]] for k in ks), (), True) for i in s]
        for k, m in zip(ks, _combine(pub, len(ks), subset)):
            plain[k] = m
    return [decode_signed(pub.public_key, m) for m in plain] if signed else plain


# --------------------------------------------------------------------------- vectors
def partial_decrypt_vector(
    share: KeyShare, vec: EncryptedVector, context: bytes, *, batch: bool = True, nonce_key: bytes | None = None
) -> PartialDecryption:
    """:func:`partial_decrypt` of every ciphertext of an :class:`~smcdp.crypto.vector.EncryptedVector`."""
    if vec.public_key != share.public.public_key:
        raise InvalidMessage("the vector is not encrypted under the threshold key")
    return partial_decrypt(share, [int(c) for c in vec.ciphertexts], context, batch=batch, nonce_key=nonce_key)


def combine_vector_ints(
    pub: ThresholdPublicKey, vec: EncryptedVector, partials: Sequence[PartialDecryption], context: bytes
) -> list[int]:
    """The vector's signed integers (unpacked), as :meth:`EncryptedVector.decrypt_ints` with a private key."""
    if vec.public_key != pub.public_key:
        raise InvalidMessage("the vector is not encrypted under the threshold key")
    plain = combine(pub, [int(c) for c in vec.ciphertexts], partials, context)
    return vec._unpack(plain)


def combine_vector(
    pub: ThresholdPublicKey, vec: EncryptedVector, partials: Sequence[PartialDecryption], context: bytes
) -> np.ndarray:
    """The vector's values (fixed point decoded), as :meth:`EncryptedVector.decrypt` with a private key."""
    return decode_fixed(combine_vector_ints(pub, vec, partials, context), vec.exponent)
