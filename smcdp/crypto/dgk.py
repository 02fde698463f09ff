"""The DGK homomorphic encryption scheme (Damgård, Geisler, Krøigaard 2007/2009) on gmpy2.

DGK encrypts a message m from the small plaintext space Z_u as

    E(m; r) = g^m * h^r  mod n,

where n = p*q, u is a small prime, v_p and v_q are t-bit primes with
u*v_p | p-1 and u*v_q | q-1, g has order u*v_p*v_q and h has order v_p*v_q in
Z_n^*.  The key holder tests whether a ciphertext encrypts zero with a single
short exponentiation modulo p:

    E(m; r)^{v_p} mod p = (g^{v_p})^m mod p   (h^{v_p} = 1 mod p),

and g^{v_p} has order u modulo p, so the result is 1 exactly when m = 0 mod u.
That zero test is all the comparison protocol (``smcdp.primitives.comparison``)
needs; a full decryption (table lookup over the u possible values) is offered
for tests and debugging.

Why this module is written here rather than taken from PyPI: the one DGK
package there (``tno.mpc.encryption_schemes.dgk``, TNO PET Lab, Apache-2.0) is
tied to TNO's own template/serialisation/communication stack; smcdp needs the
scheme's internals (CRT encryption by the key holder, the zero test with a
subgroup-membership check folded in, fixed-base tables shared with a process
pool, protobuf key transfer with validation), so the scheme is implemented
here directly on gmpy2.  See docs/primitives.md.

Parameters (see :func:`generate_keypair`): modulus >= 2048 bits and t >= 160
unless the caller passes ``allow_insecure=True``; the default t is 224 because
the best known attack on the hidden-order subgroup (Coron, Joux, Mandal,
Naccache, Tibouchi, PKC 2011) costs about 2^(t/2), so t = 224 matches the
~112-bit strength of a 2048-bit modulus, while t = 160 gives ~80 bits.
Public-key encryption randomness r has 2.5*t bits; <h> has fewer than 2^(2t)
elements, so h^r is within ~2^(-t/2) of uniform in <h>.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.encoding import bytes_to_int, int_to_bytes
from smcdp.crypto.modexp import FixedBase
from smcdp.errors import InsecureParameters, InvalidMessage
from smcdp.v1 import messages_pb2

#: Security floors: refused below these unless ``allow_insecure=True``.
MIN_MODULUS_BITS = 2048
MIN_T_BITS = 160
#: Defaults for :func:`generate_keypair`.
DEFAULT_MODULUS_BITS = 2048
DEFAULT_T_BITS = 224
#: Largest comparison bit length a default key supports (u = smallest prime > DEFAULT_MAX_ELL + 2).
DEFAULT_MAX_ELL = 256
#: u must stay small: a full decryption is a table lookup over Z_u.
MAX_U = 1 << 16
#: Floors even an explicitly insecure (test) key must respect, so that the arithmetic is sound.
ABSOLUTE_MIN_MODULUS_BITS = 256
ABSOLUTE_MIN_T_BITS = 16


def _mpz_from_bytes(b: bytes) -> mpz:
    return mpz(bytes_to_int(b))


def _random_below(bound: int, rng: random.Random | None = None) -> mpz:
    return mpz(secrets.randbelow(int(bound)) if rng is None else rng.randrange(int(bound)))


def _random_prime(bits: int, rng: random.Random | None = None) -> mpz:
    """A uniformly random prime of exactly ``bits`` bits."""
    while True:
        cand = mpz(secrets.randbits(bits) if rng is None else rng.getrandbits(bits)) | (mpz(1) << (bits - 1)) | 1
        if gmpy2.is_prime(cand, 40):
            return cand


def smallest_prime_above(x: int) -> int:
    """The smallest prime strictly greater than x."""
    return int(gmpy2.next_prime(mpz(x)))


# --------------------------------------------------------------------------
# keys
@dataclass(eq=False)
class DGKPublicKey:
    """DGK public key (n, g, h, u, t).  Build with :meth:`from_values` to validate."""

    n: mpz
    g: mpz
    h: mpz
    u: int
    t: int
    _h_table: FixedBase | None = field(default=None, repr=False)
    _g_powers: list[mpz] | None = field(default=None, repr=False)

    # ---------------------------------------------------------- construction
    @classmethod
    def from_values(
        cls,
        n: int,
        g: int,
        h: int,
        u: int,
        t: int,
        *,
        allow_insecure: bool = False,
        min_modulus_bits: int = MIN_MODULUS_BITS,
    ) -> DGKPublicKey:
        """Validate public values (what a receiver can check without the factors)."""
        n, g, h, u, t = mpz(n), mpz(g), mpz(h), int(u), int(t)
        bits = n.bit_length()
        if bits < ABSOLUTE_MIN_MODULUS_BITS:
            raise InvalidMessage(f"DGK modulus has {bits} bits; even test keys need {ABSOLUTE_MIN_MODULUS_BITS}")
        floor = max(int(min_modulus_bits), MIN_MODULUS_BITS)
        if not allow_insecure and bits < floor:
            raise InsecureParameters(
                f"DGK modulus of {bits} bits is below the {floor}-bit floor; pass allow_insecure=True only for tests"
            )
        if n % 2 == 0 or gmpy2.is_square(n) or gmpy2.is_prime(n):
            raise InvalidMessage("DGK modulus is not an odd composite non-square")
        if t < ABSOLUTE_MIN_T_BITS:
            raise InvalidMessage(f"DGK parameter t = {t}; even test keys need {ABSOLUTE_MIN_T_BITS}")
        if not allow_insecure and t < MIN_T_BITS:
            raise InsecureParameters(
                f"DGK parameter t = {t} bits is below the {MIN_T_BITS}-bit floor; "
                "pass allow_insecure=True only for tests"
            )
        if not (3 <= u < MAX_U) or not gmpy2.is_prime(u):
            raise InvalidMessage(f"DGK plaintext modulus u = {u} is not a prime in [3, {MAX_U})")
        # p - 1 and q - 1 must each hold u and a t-bit prime.
        if 2 * (t + u.bit_length()) + 4 > bits:
            raise InvalidMessage(f"DGK parameters inconsistent: t = {t} and u = {u} do not fit a {bits}-bit modulus")
        for name, x in (("g", g), ("h", h)):
            if not (1 < x < n - 1):
                raise InvalidMessage(f"DGK generator {name} is out of range (1, n-1)")
            if gmpy2.gcd(x, n) != 1:
                raise InvalidMessage(f"DGK generator {name} shares a factor with n")
        if g == h:
            raise InvalidMessage("DGK generators g and h are equal")
        return cls(n=n, g=g, h=h, u=u, t=t)

    # ------------------------------------------------------------- encoding
    @property
    def byte_length(self) -> int:
        """Length of the fixed-width big-endian encoding of a ciphertext."""
        return (self.n.bit_length() + 7) // 8

    @property
    def r_bits(self) -> int:
        """Bits of the public-key encryption randomness r (2.5 t)."""
        return (5 * self.t + 1) // 2

    def fingerprint(self) -> bytes:
        h = hashlib.sha256(b"smcdp/dgk-public-key/v1")
        for x in (self.n, self.g, self.h, self.u, self.t):
            b = int_to_bytes(int(x))
            h.update(len(b).to_bytes(4, "big") + b)
        return h.digest()

    def cache_key(self) -> tuple[int, int, int, int, int]:
        return (int(self.n), int(self.g), int(self.h), self.u, self.t)

    def to_proto(self) -> messages_pb2.BigInts:
        """BigInts [n, g, h, u, t] (all non-negative)."""
        msg = messages_pb2.BigInts()
        for x in (self.n, self.g, self.h, self.u, self.t):
            msg.magnitude.append(int_to_bytes(int(x)))
            msg.negative.append(False)
        return msg

    @classmethod
    def from_proto(
        cls, msg: messages_pb2.BigInts, *, allow_insecure: bool = False, min_modulus_bits: int = MIN_MODULUS_BITS
    ) -> DGKPublicKey:
        if len(msg.magnitude) != 5 or len(msg.negative) not in (0, 5):
            raise InvalidMessage(f"a DGK public key is 5 big integers [n, g, h, u, t], got {len(msg.magnitude)}")
        if any(msg.negative):
            raise InvalidMessage("a DGK public key holds no negative values")
        if len(msg.magnitude[0]) > 2048:  # 16384-bit modulus: far beyond anything sensible
            raise InvalidMessage("DGK modulus is implausibly large")
        for b in msg.magnitude:
            if b[:1] == b"\x00":
                raise InvalidMessage("big integers must not carry leading zero bytes")
        if len(msg.magnitude[3]) > 4 or len(msg.magnitude[4]) > 4:
            raise InvalidMessage("DGK parameters u and t must be small integers")
        vals = [_mpz_from_bytes(b) for b in msg.magnitude]
        return cls.from_values(*vals, allow_insecure=allow_insecure, min_modulus_bits=min_modulus_bits)

    # ------------------------------------------------------------ arithmetic
    def h_table(self) -> FixedBase:
        if self._h_table is None:
            self._h_table = FixedBase(self.h, self.n, self.r_bits)
        return self._h_table

    def g_pow(self, m: int) -> mpz:
        """g^(m mod u) mod n from a table of the u powers."""
        if self._g_powers is None:
            pw = [mpz(1)]
            for _ in range(1, self.u):
                pw.append(pw[-1] * self.g % self.n)
            self._g_powers = pw
        return self._g_powers[int(m) % self.u]

    def random_r(self) -> int:
        return secrets.randbits(self.r_bits)

    def rerandomizer(self) -> mpz:
        """h^r for a fresh random r of 2.5 t bits (fixed-base table)."""
        return self.h_table().pow(self.random_r())

    def encrypt(self, m: int) -> mpz:
        """E(m) = g^(m mod u) h^r mod n with r of 2.5 t bits."""
        return self.g_pow(m) * self.rerandomizer() % self.n

    def add(self, c1: int, c2: int) -> mpz:
        return mpz(c1) * mpz(c2) % self.n

    def add_plain(self, c: int, m: int) -> mpz:
        return mpz(c) * self.g_pow(m) % self.n

    def neg(self, c: int) -> mpz:
        return gmpy2.invert(mpz(c), self.n)

    def mul_plain(self, c: int, k: int) -> mpz:
        k = int(k) % self.u
        return gmpy2.powmod(mpz(c), k, self.n)

    def rerandomize(self, c: int) -> mpz:
        return mpz(c) * self.rerandomizer() % self.n

    def ciphertext_to_bytes(self, c: int) -> bytes:
        return int(c).to_bytes(self.byte_length, "big")

    def ciphertext_from_bytes(self, b: bytes, *, what: str = "ciphertext", check_unit: bool = True) -> mpz:
        """Parse one fixed-width ciphertext and check 0 < c < n and (if check_unit) gcd(c, n) = 1.

        Callers that invert the values anyway, or that run the key holder's
        subgroup test, may skip the gcd (about 12 us at 2048 bits).
        """
        if len(b) != self.byte_length:
            raise InvalidMessage(f"DGK {what} has {len(b)} bytes, expected {self.byte_length}")
        c = _mpz_from_bytes(b)
        if not (0 < c < self.n):
            raise InvalidMessage(f"DGK {what} is out of range (0, n)")
        if check_unit and gmpy2.gcd(c, self.n) != 1:
            raise InvalidMessage(f"DGK {what} is not a unit modulo n")
        return c


@dataclass(eq=False)
class DGKPrivateKey:
    """DGK key pair: the public key plus p, q, v_p, v_q and CRT tables."""

    public: DGKPublicKey
    p: mpz
    q: mpz
    vp: mpz
    vq: mpz
    _tables: dict[str, Any] | None = field(default=None, repr=False)

    @classmethod
    def from_values(
        cls, p: int, q: int, vp: int, vq: int, g: int, h: int, u: int, t: int, *, allow_insecure: bool = False
    ) -> DGKPrivateKey:
        """Build and fully validate a key pair (primality, divisibility, element orders)."""
        p, q, vp, vq, g, h = (mpz(x) for x in (p, q, vp, vq, g, h))
        u, t = int(u), int(t)
        pub = DGKPublicKey.from_values(p * q, g, h, u, t, allow_insecure=allow_insecure)
        if p == q:
            raise InvalidMessage("DGK primes p and q are equal")
        for name, x in (("p", p), ("q", q), ("v_p", vp), ("v_q", vq)):
            if not gmpy2.is_prime(x, 40):
                raise InvalidMessage(f"DGK private value {name} is not prime")
        if vp.bit_length() != t or vq.bit_length() != t or vp == vq:
            raise InvalidMessage(f"DGK v_p and v_q must be distinct {t}-bit primes")
        if (p - 1) % (u * vp) or (q - 1) % (u * vq):
            raise InvalidMessage("DGK key: u*v_p must divide p-1 and u*v_q must divide q-1")
        if (p - 1) % vq == 0 or (q - 1) % vp == 0:
            raise InvalidMessage("DGK key: v_q divides p-1 or v_p divides q-1")
        for prime, v in ((p, vp), (q, vq)):
            gp, hp = g % prime, h % prime
            if gmpy2.powmod(hp, v, prime) != 1 or hp == 1:
                raise InvalidMessage("DGK key: h does not have order v_p*v_q")
            if (
                gmpy2.powmod(gp, u * v, prime) != 1
                or gmpy2.powmod(gp, v, prime) == 1
                or gmpy2.powmod(gp, u, prime) == 1
            ):
                raise InvalidMessage("DGK key: g does not have order u*v_p*v_q")
        return cls(public=pub, p=p, q=q, vp=vp, vq=vq)

    @property
    def n(self) -> mpz:
        return self.public.n

    def _t(self) -> dict[str, Any]:
        if self._tables is None:
            pub, p, q = self.public, self.p, self.q
            gvp = gmpy2.powmod(pub.g, self.vp, p)
            dec = {}
            acc = mpz(1)
            for m in range(pub.u):
                dec[int(acc)] = m
                acc = acc * gvp % p
            gp_pows, gq_pows = [mpz(1)], [mpz(1)]
            for _ in range(1, pub.u):
                gp_pows.append(gp_pows[-1] * pub.g % p)
                gq_pows.append(gq_pows[-1] * pub.g % q)
            self._tables = {
                "dec": dec,
                "gp": gp_pows,
                "gq": gq_pows,
                "hp": FixedBase(pub.h % p, p, self.vp.bit_length()),
                "hq": FixedBase(pub.h % q, q, self.vq.bit_length()),
                "q_inv_p": gmpy2.invert(q, p),
            }
        return self._tables

    # -------------------------------------------------------------- crypto
    def encrypt(self, m: int) -> mpz:
        """CRT encryption with exactly uniform randomness in <h> (key holder only).

        h^r for r uniform mod v_p*v_q is computed as (h_p^{r_p}, h_q^{r_q}) with
        r_p, r_q uniform mod v_p, v_q: two t-bit fixed-base exponentiations
        modulo the half-size primes instead of one 2.5t-bit one modulo n.
        """
        tb = self._t()
        m = int(m) % self.public.u
        cp = tb["gp"][m] * tb["hp"].pow(_random_below(self.vp)) % self.p
        cq = tb["gq"][m] * tb["hq"].pow(_random_below(self.vq)) % self.q
        # CRT: c = cq + q * ((cp - cq) * q^-1 mod p)
        return cq + self.q * ((cp - cq) * tb["q_inv_p"] % self.p)

    def zero_test(self, c: int) -> bool:
        """True iff c encrypts 0 mod u.  Raises InvalidMessage if c mod p is not in <g>.

        One exponentiation c^{v_p} mod p (t-bit exponent, half-size modulus)
        plus a tiny one (exponent u) that checks membership of c mod p in the
        subgroup of order u*v_p, where every honest ciphertext lies.
        """
        a = gmpy2.powmod(mpz(c) % self.p, self.vp, self.p)
        if a == 1:
            return True
        if gmpy2.powmod(a, self.public.u, self.p) != 1:
            raise InvalidMessage("DGK ciphertext is not in the ciphertext subgroup")
        return False

    def decrypt(self, c: int) -> int:
        """Full decryption to m in [0, u) by table lookup (tests and debugging)."""
        a = gmpy2.powmod(mpz(c) % self.p, self.vp, self.p)
        try:
            return self._t()["dec"][int(a)]
        except KeyError:
            raise InvalidMessage("DGK ciphertext is not in the ciphertext subgroup") from None

    # ----------------------------------------------------- serialisation
    def to_proto(self) -> messages_pb2.BigInts:
        """BigInts [p, q, v_p, v_q, g, h, u, t].  Keep it secret (file mode 0600)."""
        msg = messages_pb2.BigInts()
        for x in (self.p, self.q, self.vp, self.vq, self.public.g, self.public.h, self.public.u, self.public.t):
            msg.magnitude.append(int_to_bytes(int(x)))
            msg.negative.append(False)
        return msg

    @classmethod
    def from_proto(cls, msg: messages_pb2.BigInts, *, allow_insecure: bool = False) -> DGKPrivateKey:
        if len(msg.magnitude) != 8 or any(msg.negative):
            raise InvalidMessage("a DGK private key is 8 non-negative big integers [p, q, v_p, v_q, g, h, u, t]")
        if len(msg.magnitude[6]) > 4 or len(msg.magnitude[7]) > 4:
            raise InvalidMessage("DGK parameters u and t must be small integers")
        return cls.from_values(*(_mpz_from_bytes(b) for b in msg.magnitude), allow_insecure=allow_insecure)

    def to_bytes(self) -> bytes:
        return self.to_proto().SerializeToString()

    @classmethod
    def from_bytes(cls, data: bytes, *, allow_insecure: bool = False) -> DGKPrivateKey:
        msg = messages_pb2.BigInts()
        try:
            msg.ParseFromString(data)
        except Exception as exc:  # DecodeError
            raise InvalidMessage(f"DGK private key does not parse: {exc}") from None
        return cls.from_proto(msg, allow_insecure=allow_insecure)


def _dgk_prime(half_bits: int, u: int, v: mpz, avoid: mpz | None, rng: random.Random | None = None) -> mpz:
    """A prime p = 2*u*v*w + 1 (w random) in [sqrt(2) * 2^(half_bits-1), 2^half_bits).

    The lower bound makes the product of two such primes have exactly
    2*half_bits bits, so key generation never retries for the modulus length.
    """
    base = 2 * u * v
    p_min = gmpy2.isqrt(mpz(1) << (2 * half_bits - 1)) + 1
    p_max = (mpz(1) << half_bits) - 1
    w_min = (p_min - 1 + base - 1) // base
    w_max = (p_max - 1) // base
    if w_max - w_min < (1 << 16):
        raise InvalidMessage("DGK modulus too small for the requested t and u")
    while True:
        p = base * (w_min + _random_below(w_max - w_min + 1, rng)) + 1
        if avoid is not None and (p - 1) % avoid == 0:
            continue
        if gmpy2.is_prime(p, 40):
            return p


def _element_of_order(prime: mpz, factors: Sequence[int], rng: random.Random | None = None) -> mpz:
    """A random element of order exactly prod(factors) (distinct primes dividing prime-1)."""
    order = math.prod(int(f) for f in factors)
    cof = (prime - 1) // order
    while True:
        x = gmpy2.powmod(2 + _random_below(prime - 3, rng), cof, prime)
        if all(gmpy2.powmod(x, order // int(f), prime) != 1 for f in factors):
            return x


def generate_keypair(
    modulus_bits: int = DEFAULT_MODULUS_BITS,
    t: int = DEFAULT_T_BITS,
    *,
    max_ell: int = DEFAULT_MAX_ELL,
    u: int | None = None,
    allow_insecure: bool = False,
    rng: random.Random | None = None,
) -> DGKPrivateKey:
    """Generate a DGK key pair (from ``rng`` when given, e.g. a role's keyed stream; else the OS CSPRNG).

    ``modulus_bits``: bits of n (>= 2048 unless allow_insecure); ``t``: bits of
    v_p, v_q (>= 160 unless allow_insecure; default 224); ``u``: plaintext
    prime, by default the smallest prime > max_ell + 2, so that comparisons of
    up to ``max_ell`` bits fit.  p = 2*u*v_p*w_p + 1 with a random w_p, so p-1
    also has the large factor v_p (no smooth p-1).  About 0.1 s at 2048 bits.
    """
    modulus_bits, t, max_ell = int(modulus_bits), int(t), int(max_ell)
    if not allow_insecure:
        if modulus_bits < MIN_MODULUS_BITS:
            raise InsecureParameters(
                f"DGK modulus of {modulus_bits} bits is below the {MIN_MODULUS_BITS}-bit floor; "
                "pass allow_insecure=True only for tests"
            )
        if t < MIN_T_BITS:
            raise InsecureParameters(
                f"DGK t = {t} is below the {MIN_T_BITS}-bit floor; pass allow_insecure=True only for tests"
            )
    if modulus_bits < ABSOLUTE_MIN_MODULUS_BITS or modulus_bits % 2:
        raise InvalidMessage(f"DGK modulus bits must be even and >= {ABSOLUTE_MIN_MODULUS_BITS}")
    if t < ABSOLUTE_MIN_T_BITS:
        raise InvalidMessage(f"DGK t must be >= {ABSOLUTE_MIN_T_BITS}")
    if max_ell < 1:
        raise InvalidMessage("max_ell must be positive")
    if u is None:
        u = smallest_prime_above(max_ell + 2)
    u = int(u)
    if not gmpy2.is_prime(u) or u <= max_ell + 2 or u >= MAX_U:
        raise InvalidMessage(f"u = {u} must be a prime in ({max_ell + 2}, {MAX_U})")
    half = modulus_bits // 2
    if half - (2 * u * (1 << t)).bit_length() < 16:
        raise InvalidMessage(f"t = {t} is too large for a {modulus_bits}-bit modulus")
    while True:
        vp = _random_prime(t, rng)
        vq = _random_prime(t, rng)
        if vp == vq:
            continue
        p = _dgk_prime(half, u, vp, vq, rng)
        q = _dgk_prime(half, u, vq, vp, rng)
        if p == q:
            continue
        break
    n = p * q
    q_inv_p = gmpy2.invert(q, p)

    def crt(xp: mpz, xq: mpz) -> mpz:
        return xq + q * ((xp - xq) * q_inv_p % p)

    g = crt(_element_of_order(p, (u, vp), rng), _element_of_order(q, (u, vq), rng))
    h = crt(_element_of_order(p, (vp,), rng), _element_of_order(q, (vq,), rng))
    assert n.bit_length() == modulus_bits and 1 < g < n and 1 < h < n
    pub = DGKPublicKey(n=n, g=g, h=h, u=u, t=t)
    return DGKPrivateKey(public=pub, p=p, q=q, vp=vp, vq=vq)


def encrypt_many(key: DGKPublicKey | DGKPrivateKey, ms: Iterable[int]) -> list[mpz]:
    return [key.encrypt(m) for m in ms]
