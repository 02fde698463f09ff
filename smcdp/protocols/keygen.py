"""Dealer-free (t, n) threshold Paillier key generation: Boneh–Franklin among the data parties.

Roles ``party1`` … ``partyN`` (N = ``parties`` ≥ 2), all symmetric; no dealer, no coordinator.  At the
end every party holds the same :class:`~smcdp.crypto.threshold.ThresholdPublicKey` (modulus N = pq,
θ, verification keys) and its own :class:`~smcdp.crypto.threshold.KeyShare`; nobody ever holds p, q,
φ(N) or the decryption exponent.  Construction, assumptions and error probabilities:
docs/crypto.md, "Threshold key without a dealer".  The steps, numbered as there:

1. **Distributed sieving** (Boneh–Franklin §3): each party draws a_i ∈ Z*_M (M the product of the odd
   primes up to a bound, public); the parties compute Shamir shares of A = Π a_i over a prime field
   (BGW products with Gennaro–Rabin–Rabin degree reduction, n ≥ 2t + 1) and convert them into
   additive integer shares x_i (parties 2..n draw x_i; A − Σ_{i≥2} x_i, statistically masked, is opened at
   every party, which checks it, and is party 1's x_1).  Party i's share of the candidate prime is p_i = x_i + M·y_i (+ a public
   offset ≡ 0 mod 4M for party 1), with y_i chosen so that p_1 ≡ 3 and p_i ≡ 0 (mod 4): p = Σ p_i ≡
   A (mod M) has no prime factor below the bound, and p ≡ 3 (mod 4).  The same for q.
2. **N = pq** by one BGW multiplication of Shamir shares of p and q plus a random sharing of zero of
   degree 2t (so the opened polynomial is uniform given N); every party learns N, nothing else.
3. **Trial division** of N by the primes below 2^16 (public: N is public).
4. **Biprimality** (Boneh–Franklin §4): for g ∈ Z*_N with Jacobi symbol 1, derived from N by a hash,
   party 1 publishes g^((N + 1 − p_1 − q_1)/4) and party i ≥ 2 publishes g^(−(p_i + q_i)/4); N passes
   if the product is ±1 mod N.  ``jacobi_rounds`` independent g: a non-biprime N (other than the
   forms excluded by step 5) passes each round with probability ≤ 1/2.
5. **gcd(N, p + q − 1) = 1**, tested by opening r·(p + q − 1) + N·s for random shared r, s (the
   integer is statistically masked; only its residue mod N, uniform when the gcd is 1, matters).
6. **The decryption exponent**: d = β·φ(N) for β = Σ β_i (β_i uniform below 2^(bits + κ)), from
   additive shares φ_i of φ(N) = N + 1 − p − q.  The parties open w = β·φ + N·s (s = Σ s_i masks
   ⌊β·φ/N⌋ statistically) and set θ = w mod N (public, a unit mod N) and d_i = [w if i = 1] − N·s_i:
   integer additive shares of d, d ≡ 0 mod φ(N) and d ≡ θ mod N.
7. **Threshold shares**: each party shares Δ·d_i (Δ = n!; a share of d_i itself would be ≡ d_i mod j at party j)
   by integer Shamir sharing of degree t with Feldman
   commitments v^(a_ik) (v the key's verification base); party j checks what it received, and sums:
   s_j = Σ_i f_i(j).  The verification keys v^(Δ s_j) follow from the commitments, so every party
   computes every one of them.
8. Every party checks its share against its verification key and compares the fingerprint of the
   public key with everyone's.

Two parties (n = 2, t = 1): BGW needs n ≥ 2t + 1, so every product above is instead a Paillier-based
two-party multiplication under ephemeral keys party 1 makes for the ceremony (party 1 sends Enc(x_1),
Enc(y_1); party 2 answers Enc(x_1)^(y_2)·Enc(y_1)^(x_2)·Enc(e_2); party 1 decrypts), and values to open
are then sent by party 1 to party 2.

Every opening (steps 1, 2, 5, 6) is checked against the range every honest opening lies in -- for n ≥ 3 at every
party, for n = 2 by party 1 before it sends party 2 anything -- and for n ≥ 3 each party's points are committed to
before any is revealed (`_Ceremony.open_committed`, `check_opening`); the Jacobi factors of step 4 are committed
too, for every n (`reveal_committed`).  A deviation that puts another party's secret into an opening's spare bits
stops the ceremony, so what it shows concerns a modulus that is never a key, and no party can pass a modulus by
choosing its Jacobi factor after the others'.

Security model: **semi-honest**, any coalition of at most t parties (n ≥ 2t + 1 with BGW; for n = 2,
one party, under DCR for the ephemeral keys); the key's decryption then tolerates malicious parties
(proofs of correct partial decryption, :mod:`smcdp.crypto.threshold`).  Against a party that deviates during
the ceremony it is **not maliciously secure**: the range checks leave it a shift inside an opening's range (a
fraction of a bit to a few bits an opening, at the masks' edges), **with n = 2 a deviating party 1 factors the
key** (its ciphertexts carry no range proof and it decrypts every product), and a deviating party can make the
ceremony fail or produce a bad key undetected.  Nishide–Sakurai / Hazay et
al. give the malicious version, which is not implemented (docs/crypto.md, "Assumptions").
"""

from __future__ import annotations

import hashlib
import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Final

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.codec import bigints, from_bigints
from smcdp.crypto.encoding import bytes_to_int, int_to_bytes
from smcdp.crypto.modexp import powmod
from smcdp.crypto.paillier import PrivateKey, PublicKey, check_key_bits, generate_keypair
from smcdp.crypto.threshold import (
    STAT_BITS,
    KeyShare,
    ThresholdPublicKey,
    integer_shamir,
    share_bound_bits,
    verification_base,
)
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.channel import Channel
from smcdp.net.limits import TrafficEnvelope
from smcdp.primitives.rng import SeedLike, as_randomness
from smcdp.protocols.base import ProtocolParams
from smcdp.v1 import messages_pb2 as pb

#: Mersenne prime exponents: the protocol's prime fields are Z_P with P = 2^e − 1 (public, no generation)
MERSENNE_EXPONENTS = (521, 607, 1279, 2203, 2281, 3217, 4253, 4423, 9689, 9941, 11213, 19937, 21701, 23209)
#: N is trial-divided by every prime below this (step 3)
TRIAL_DIVISION_BOUND = 1 << 16
#: the most parties a key ceremony supports
MAX_PARTIES = 64
KAPPA = STAT_BITS
#: n = 2: the ephemeral small key's encryption tables are sized for this many encryptions per batch
#: candidate (a guess at the whole ceremony's count; only the table's window depends on it)
TABLE_USES = 24


class KeygenFailed(SmcdpError):
    """No biprime within the candidate budget, or the parties' results disagree (ABORTED: the ceremony stops
    at every party; a new one starts from scratch)."""

    code = "ABORTED"


class BadShare(KeygenFailed, InvalidMessage):
    """A party's share of the decryption exponent does not match its Feldman commitments (step 7); ``origin``
    names it."""

    code = "INVALID_ARGUMENT"


class BadOpening(KeygenFailed, InvalidMessage):
    """An opened value (steps 1, 2, 5, 6) lies outside the range every honest opening lies in, or a party's revealed
    points do not match what it committed to before the others revealed theirs: a party deviated -- inconsistent
    shares, or values beyond their range, can put another party's secret into the field's spare bits of an
    opening (docs/crypto.md, "Assumptions").  The ceremony stops at every party; nothing opened out of range is
    used.  ``origin`` names the party where only one can have caused it (a mismatched commitment; n = 2)."""

    code = "INVALID_ARGUMENT"


class ViewsDiffer(KeygenFailed):
    """The parties opened different values at one step (a party sent different values to different parties, or
    a message was changed on the way): their next steps would differ, so the ceremony stops at once instead of
    each party waiting for messages the others will not send (steps 2-6, the echo after each opening)."""


def field_prime(min_bits: int) -> int:
    """The smallest Mersenne prime 2^e − 1 of more than ``min_bits`` bits."""
    for e in MERSENNE_EXPONENTS:
        if e > min_bits:
            return (1 << e) - 1
    raise InvalidMessage(f"no prime field of more than {min_bits} bits is configured (key too large)")


#: the smallest sieving modulus M a ceremony accepts (3·5·7·11: below it candidates are barely sieved, and
#: M = 1 left nothing to draw a_i from -- 256-bit keys with 61 parties crashed)
MIN_SIEVE_MODULUS: Final = 3 * 5 * 7 * 11


def sieve_modulus(half_bits: int, parties: int) -> int:
    """M: the product of the odd primes 3, 5, 7, … while n·bits(M) ≤ half_bits − 8 (step 1)."""
    budget = (half_bits - 8) // parties
    m, ell = 1, 3
    while True:
        nxt = m * ell
        if nxt.bit_length() > budget:
            return m
        m = nxt
        ell = int(gmpy2.next_prime(ell))


def _primes_product(bound: int) -> mpz:
    """The product of the primes below ``bound``."""
    prod, ell = mpz(1), mpz(2)
    while ell < bound:
        prod *= ell
        ell = gmpy2.next_prime(ell)
    return prod


#: the product of the primes below TRIAL_DIVISION_BOUND (a constant of the module, computed at import:
#: a few milliseconds)
TRIAL_PRODUCT: Final = _primes_product(TRIAL_DIVISION_BOUND)


@dataclass(frozen=True)
class KeygenParams(ProtocolParams):
    """Public parameters of a key ceremony (every party must hold the same)."""

    protocol_name = "threshold-keygen"

    parties: int
    threshold: int
    key_bits: int = 2048
    allow_insecure: bool = False
    #: rounds of the Jacobi biprimality test: a non-biprime passes with probability ≤ 2^-jacobi_rounds
    jacobi_rounds: int = 80
    #: candidate primes sieved per batch (each of p and q)
    batch: int = 128
    #: give up after this many candidate moduli
    max_candidates: int = 1_000_000

    def validate(self) -> KeygenParams:
        for name in ("parties", "threshold", "key_bits", "jacobi_rounds", "batch", "max_candidates"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int):
                raise InvalidMessage(f"{name} must be an integer, got {v!r}")
        if not 2 <= self.parties <= MAX_PARTIES:
            raise InvalidMessage(f"the key ceremony needs 2 to {MAX_PARTIES} parties, got {self.parties}")
        if self.parties == 2:
            if self.threshold != 1:
                raise InvalidMessage(f"with two parties the threshold is t = 1 (both decrypt), got {self.threshold}")
        elif not self.threshold >= 1 or 2 * self.threshold + 1 > self.parties:
            raise InvalidMessage(
                f"threshold t must satisfy 1 <= t and 2t + 1 <= n = {self.parties} (BGW products), got {self.threshold}"
            )
        if self.key_bits % 2:
            raise InvalidMessage("key_bits must be even (p and q have key_bits/2 bits each)")
        check_key_bits(self.key_bits, self.allow_insecure)
        if self.key_bits < 256:
            raise InvalidMessage("the key ceremony needs key_bits >= 256")
        if not 40 <= self.jacobi_rounds <= 512:
            raise InvalidMessage("jacobi_rounds must be between 40 and 512")
        if not 1 <= self.batch <= 4096:
            raise InvalidMessage("batch must be between 1 and 4096")
        if self.max_candidates < 1:
            raise InvalidMessage("max_candidates must be positive")
        field_prime(self.d_bits + 8)  # the key size is within the configured fields
        if sieve_modulus(self.half_bits, self.parties) < MIN_SIEVE_MODULUS:
            raise InvalidMessage(
                f"{self.parties} parties leave too little room to sieve {self.key_bits}-bit candidates (each party's "
                f"share of p mod M must fit in {(self.half_bits - 8) // self.parties} bits): use a larger key_bits "
                "or fewer parties"
            )
        return self

    @property
    def half_bits(self) -> int:
        return self.key_bits // 2

    @property
    def s_bits(self) -> int:
        """Bits of a mask share s_i (steps 5, 6): κ above ⌊β·φ/N⌋ < n·2^(bits + κ)."""
        return self.key_bits + 2 * KAPPA + 8

    @property
    def d_bits(self) -> int:
        """A bound on |d_i| (step 6): w and N·s_i are below 2^(2·bits + 2κ + 16)."""
        return 2 * self.key_bits + 2 * KAPPA + 16


@dataclass
class KeygenResult:
    """One party's outcome: its key share (with the public key) and what the ceremony cost."""

    share: KeyShare
    candidates: int
    sieve_batches: int
    biprimality_tests: int
    seconds: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def public(self) -> ThresholdPublicKey:
        return self.share.public


def expected_candidates(key_bits: int, parties: int) -> float:
    """How many candidate moduli the ceremony is expected to try before one is a biprime.

    A sieved candidate p of h = key_bits/2 bits is odd and has no prime factor dividing M (step 1), so it
    is prime with probability about Π_{ℓ | 2M} ℓ/(ℓ − 1) / (h·ln 2) (the prime number theorem, with the
    density of primes among numbers free of those factors); N needs p and q prime: the count of
    candidate pairs is geometric with mean 1/P(prime)^2.  An estimate (the ceremony's progress shows
    the count tried so far), not a bound."""
    h = key_bits // 2
    m = sieve_modulus(h, parties)
    boost, ell = 2.0, 3  # 2/(2 − 1): every candidate is odd; M is the product of the odd primes 3..L
    while m % ell == 0:
        boost *= ell / (ell - 1)
        ell = int(gmpy2.next_prime(ell))
    p_prime = min(1.0, boost / (h * math.log(2)))
    return 1.0 / (p_prime * p_prime)


def _blobs(values: list[Any]) -> pb.Blobs:
    """Ciphertexts as a Blobs message: their encryption randomness is fresh, in the field a replay may
    change (smcdp.net.channel.FRESH_FIELDS)."""
    return pb.Blobs(values=[int_to_bytes(int(v)) for v in values])


def _from_blobs(msg: pb.Blobs, count: int, bound_bits: int, what: str) -> list[int]:
    """Exactly ``count`` canonical non-negative integers below 2^bound_bits from a Blobs message."""
    if len(msg.values) != count:
        raise InvalidMessage(f"{what} must hold exactly {count} ciphertexts, got {len(msg.values)}")
    max_bytes = (bound_bits + 7) // 8
    out = []
    for i, b in enumerate(msg.values):
        if not b or len(b) > max_bytes or b[:1] == b"\x00":
            raise InvalidMessage(f"{what}[{i}] is not a canonical integer below 2^{bound_bits}")
        out.append(bytes_to_int(b))
    return out


def ephemeral_key_bits(params: KeygenParams) -> dict[str, int]:
    """n = 2: the sizes of party 1's ephemeral keys, large enough that no product of shares wraps."""
    # a share of p is x_i + M·y_i: x_2 has n·bits(M) + κ bits, so products of shares can exceed N
    m_bits = sieve_modulus(params.half_bits, params.parties).bit_length()
    share_bits = max(params.half_bits, params.parties * m_bits + KAPPA) + 4
    return {"small": max(params.key_bits, 2 * share_bits + 8) + 64, "big": params.d_bits + 32}


def traffic_envelope(params: KeygenParams) -> TrafficEnvelope:
    """The most any party of a ceremony with these parameters receives (smcdp.net.limits): per batch of
    candidates the sieve's sharings and products, N's product and opening, the first Jacobi round, and
    -- as if every candidate of every batch passed that round -- the remaining rounds and the gcd test;
    ``max_candidates / batch`` batches; then the exponent, its shares and the fingerprints."""
    n, k, bits = params.parties, params.batch, params.key_bits
    m_bits = sieve_modulus(params.half_bits, n).bit_length()
    p_sieve = field_prime(n * m_bits + KAPPA + 16).bit_length()
    p_n = field_prime(bits + 8).bit_length()
    p_big = field_prime(params.d_bits + 8).bit_length()

    def ints(count: int, width: int) -> int:  # a BigInts of ``count`` values below 2^width
        return count * ((width + 7) // 8 + 6) + 16

    batches = -(-params.max_candidates // k)
    peers = n - 1
    shares = share_bound_bits(params.d_bits, n, params.threshold, dealers=n)
    # a 256-bit digest from every peer: the echo after each opening (_Ceremony.agree), and the commitment before each
    # committed reveal (_Ceremony.reveal_committed), whose rows then carry the 256-bit nonce as one value more
    digest = (peers, ints(1, 256))
    once = [(peers, ints(2, 2 * bits)), (2 * peers, ints(4, p_big)), (2 * peers, ints(2, p_big))]
    once += [(peers, ints(params.threshold + 1, 2 * bits + 2)), (peers, ints(1, shares)), digest]
    if n == 2:
        eph = ephemeral_key_bits(params)
        small, big = (eph["small"] + 4) // 4 + 8, (eph["big"] + 4) // 4 + 8  # a ciphertext mod n_e²
        per_batch = [(1, 2 * k * small), (1, 2 * k * small), (1, ints(k, p_n)), (1, ints(k + 1, bits))]
        per_candidate = [(1, ints(params.jacobi_rounds, bits)), (1, 2 * big), (1, ints(1, p_big))]
        once += [(1, ints(2, eph["big"] + 8)), (2, 2 * big)]
    else:
        # committed openings: the sieve's and N's per batch, the gcd test's per candidate, the exponent's once
        per_batch = [(peers, ints(4 * k, p_sieve)), (peers * peers, ints(2 * k, p_sieve))]
        per_batch += [(peers, ints(2 * k + 1, p_sieve)), digest, digest]
        per_batch += [(peers, ints(3 * k, p_n)), (peers, ints(k + 1, p_n)), (peers, ints(k + 1, bits))]
        per_candidate = [(peers, ints(params.jacobi_rounds, bits)), (peers, ints(4, p_big))]
        per_candidate += [(peers, ints(2, p_big)), digest]
        once += [(2 * peers, ints(1, 256))]  # the exponent's commitment (a retry of it included)
    # the echoes -- after the sieve's opening (n ≥ 3), N's and the first Jacobi round (per batch), after the remaining
    # rounds and the gcd test (per candidate), after the exponent's opening (a retry of it included) -- and the Jacobi
    # factors' commitments (the first round's per batch, the remaining rounds' per candidate; their rows' nonce is
    # counted above: k + 1 values, and jacobi_rounds − 1 + 1)
    per_batch += [digest] * (4 if n > 2 else 3)
    per_candidate += [digest] * 3
    once += [digest] * 3
    messages = [(c * batches, size) for c, size in per_batch]
    messages += [(c * batches * k, size) for c, size in per_candidate]
    return TrafficEnvelope.from_messages(
        messages + once, f"key ceremony parameters (n = {n}, {bits}-bit key, {batches} batches of {k})"
    )


def party_roles(parties: int) -> list[str]:
    return [f"party{i}" for i in range(1, parties + 1)]


class _Ceremony:
    """One party's state: its index, the fields, and the exchange helpers (Shamir over Z_P)."""

    def __init__(self, ch: Channel, params: KeygenParams, seed: SeedLike = None) -> None:
        self.ch = ch
        self.params = params
        self.n = params.parties
        self.t = params.threshold
        roles = party_roles(self.n)
        if sorted(ch.roles) != sorted(roles):
            raise InvalidMessage(f"the key ceremony needs exactly the roles {roles}, got {sorted(ch.roles)}")
        self.roles = roles
        self.me = roles.index(ch.role) + 1
        self.others = [r for r in roles if r != ch.role]
        root = as_randomness(seed)
        #: every draw that ends up in a message or in this party's state, one stream per purpose, from the
        #: session's randomness root: a replayed party re-sends what it sent (docs/fault-tolerance.md)
        self.rng: dict[str, random.Random] = {
            purpose: root.rng(params.protocol_name, ch.role, purpose)
            for purpose in (
                "shamir",
                "sieve",
                "gcd",
                "exponent",
                "exponent-shares",
                "ephemeral-small",
                "ephemeral-big",
                "commit",
            )
        }
        self.M = sieve_modulus(params.half_bits, self.n)
        #: the expected number of candidate moduli, shown with the count tried so far (the progress step)
        self.expected = round(expected_candidates(params.key_bits, self.n))
        self.P_sieve = field_prime(self.n * self.M.bit_length() + KAPPA + 16)
        self.P_n = field_prime(params.key_bits + 8)
        self.P_big = field_prime(params.d_bits + 8)
        self._lam: dict[int, list[int]] = {}
        self.round = 0
        #: n = 2: party 1's ephemeral Paillier keys for the two-party products (small: the sieve and N;
        #: big: the masked products of steps 5 and 6), and party 2's copies of their public halves
        self.ek: dict[str, PrivateKey] = {}
        self.ek_public: dict[str, PublicKey] = {}

    async def two_party_setup(self) -> None:
        """n = 2: party 1 makes its ephemeral keys (at least ``key_bits``, large enough that no product
        wraps) and sends party 2 the public keys."""
        sizes = ephemeral_key_bits(self.params)
        tag = "kg/0/ephemeral-keys"
        if self.me == 1:
            for name, bits in sizes.items():
                # above key_bits: never insecure
                pk, sk = generate_keypair(bits, allow_insecure=True, rng=self.rng[f"ephemeral-{name}"])
                self.ek[name], self.ek_public[name] = sk, pk
            self.ek["small"].prepare(TABLE_USES * self.params.batch)
            await self.ch.send(self.roles[1], tag, bigints([int(self.ek_public[k].n) for k in sizes]))
        else:
            msg = await self.ch.recv(self.roles[0], tag, pb.BigInts)
            ns = from_bigints(msg, count=2, bound_bits=sizes["big"] + 8, what=tag, nonnegative=True)
            for (name, bits), n_e in zip(sizes.items(), ns):
                if n_e.bit_length() != bits:
                    raise InvalidMessage(f"party1's {name} ephemeral key has {n_e.bit_length()} bits, {bits} expected")
                self.ek_public[name] = PublicKey(n_e)

    async def two_party_products(
        self, step: str, key: str, xs: list[int], ys: list[int] | None, extra: list[int]
    ) -> list[int]:
        """n = 2, Paillier-based multiplication under party 1's ephemeral key ``key``: for every entry,
        party 1 learns u = x_1·y_2 + y_1·x_2 + extra_2 (party 2's ``extra``, which masks or completes it)
        and party 2 learns nothing (it sees ciphertexts only).  Party 2's answer is re-randomised by a
        textbook encryption of extra_2, r^N for r uniform in Z*_N: party 1 holds the key's factors, so
        against it the hiding must not rest on DCR -- a fixed-base obfuscator (h^N)^a misses the
        characters of Z*_N that are trivial on h, and through them party 1 read y_2 mod ℓ for small ℓ
        dividing p_e − 1 (a review's finding: 138 of 138 answers mod 3).  Party 1 sends [Enc(x_1)] and, unless ``ys`` is None (then u =
        x_1·x_2 + extra_2: a product of one private value of each party), [Enc(y_1)]; party 2 answers
        Enc(extra_2)·Enc(x_1)^(y_2)·Enc(y_1)^(x_2).  Returns u for party 1, [] for party 2."""
        pk = self.ek_public[key]
        count = len(xs)
        cross = ys is not None
        tag_enc, tag_ret = self.tag(step + "/enc"), self.tag(step + "/ret")
        bound = pk.nsquare.bit_length()
        # party 1's encryptions under the small key (thousands): a fixed-base table sized for them -- party 2
        # has no factors, so DCR hides them; the big key's handful: textbook obfuscators, no table
        if self.me == 1:
            sk = self.ek[key]
            enc = sk.raw_encrypt if key == "small" else pk.raw_encrypt_textbook
            cts = [enc(v) for v in xs] + ([enc(v) for v in ys] if ys is not None else [])
            await self.ch.send(self.roles[1], tag_enc, _blobs(cts))
            msg = await self.ch.recv(self.roles[1], tag_ret, pb.Blobs)
            back = pk.validate_ciphertexts(_from_blobs(msg, count, bound, tag_ret))
            return [sk.raw_decrypt_signed(c) for c in back]
        msg = await self.ch.recv(self.roles[0], tag_enc, pb.Blobs)
        cts = pk.validate_ciphertexts(_from_blobs(msg, (2 if cross else 1) * count, bound, tag_enc), tag_enc)
        out = []
        for c in range(count):
            acc = pk.raw_encrypt_textbook(extra[c])  # uniform randomness: party 1 knows the factors
            if cross:
                assert ys is not None
                if ys[c]:
                    acc = pk.raw_add(acc, pk.raw_mul(cts[c], ys[c]))
                if xs[c]:
                    acc = pk.raw_add(acc, pk.raw_mul(cts[count + c], xs[c]))
            elif xs[c]:
                acc = pk.raw_add(acc, pk.raw_mul(cts[c], xs[c]))
            out.append(int(acc))
        await self.ch.send(self.roles[0], tag_ret, _blobs(out))
        return []

    # ----------------------------------------------------------- Shamir over Z_P
    def lam(self, P: int) -> list[int]:
        """Lagrange coefficients at 0 for the points 1..n mod P (interpolates any degree ≤ n − 1)."""
        if P not in self._lam:
            out = []
            for i in range(1, self.n + 1):
                num, den = 1, 1
                for j in range(1, self.n + 1):
                    if j != i:
                        num = num * j % P
                        den = den * (j - i) % P
                out.append(num * pow(den, -1, P) % P)
            self._lam[P] = out
        return self._lam[P]

    def share(self, secret: int, degree: int, P: int) -> list[int]:
        """Points f(1..n) of a random polynomial of ``degree`` over Z_P with f(0) = secret."""
        rng = self.rng["shamir"]
        coeffs = [secret % P] + [rng.randrange(P) for _ in range(degree)]
        out = []
        for x in range(1, self.n + 1):
            acc = 0
            for a in reversed(coeffs):
                acc = (acc * x + a) % P
            out.append(acc)
        return out

    def open(self, points: list[int], P: int) -> int:
        """The constant term of the polynomial through (j, points[j−1]), as a signed integer in (−P/2, P/2)."""
        v = sum(lam * y for lam, y in zip(self.lam(P), points)) % P
        return v - P if v > P // 2 else v

    def tag(self, step: str) -> str:
        return f"kg/{self.round}/{step}"

    # ----------------------------------------------------------- exchanges
    async def exchange(
        self, step: str, rows: list[list[int]], bound_bits: int, *, signed: bool = False
    ) -> list[list[int]]:
        """Send rows[j−1] to party j; return the rows every party i sent me, by i (my own included)."""
        tag = self.tag(step)
        count = len(rows[0])
        for j, role in enumerate(self.roles, 1):
            if j != self.me:
                await self.ch.send(role, tag, bigints(rows[j - 1]))
        got = await self.ch.recv_all(self.others, tag, pb.BigInts)
        out = []
        for i, role in enumerate(self.roles, 1):
            if i == self.me:
                out.append(rows[i - 1])
            else:
                out.append(
                    from_bigints(
                        got[role], count=count, bound_bits=bound_bits, what=f"{tag} from {role}", nonnegative=not signed
                    )
                )
        return out

    async def broadcast(
        self, step: str, values: list[int], bound_bits: int, *, signed: bool = False
    ) -> list[list[int]]:
        """Send ``values`` to everyone; return everyone's values by party index (mine included)."""
        return await self.exchange(step, [values] * self.n, bound_bits, signed=signed)

    async def agree(self, step: str, opened: list[int]) -> None:
        """The echo after an opening that decides what comes next (steps 2-6): every party broadcasts a digest of
        the values it opened at ``step``; one that differs from this party's raises :class:`ViewsDiffer` at once
        (honest parties' views are equal, so they take the same branch; otherwise each would wait until the
        deadline for a message the others, on another branch, never send)."""
        h = hashlib.sha256(b"smcdp/keygen/view/v1\x00" + step.encode() + b"\x00")
        for v in opened:
            h.update(int(v).to_bytes((int(v).bit_length() + 8) // 8, "big", signed=True) + b"\x00")
        mine = int.from_bytes(h.digest(), "big")
        got = await self.broadcast(step + "/agree", [mine], 256)
        differ = [role for role, row in zip(self.roles, got) if row[0] != mine]
        if differ:
            names = ", ".join(self.ch.roles.get(r, r) for r in differ)
            raise ViewsDiffer(
                f"the key ceremony's parties opened different values at {self.tag(step)!r} ({names} saw other "
                "values than this party): a party sent different values to different parties, or a message was "
                "changed; the ceremony stops"
            )

    async def reveal_committed(self, step: str, values: list[int], bound_bits: int) -> list[list[int]]:
        """Broadcast ``values`` (each below 2^bound_bits, bound_bits ≥ 256), committed first: every party broadcasts
        a SHA-256 commitment (with a 256-bit nonce from its root) and reveals only when it holds everyone's, so no
        party chooses what it sends after seeing what the others sent (a *rushing* party).  A revealed row that
        does not match its commitment stops the ceremony, naming its party.  Returns every party's values by party
        index (mine included).  Used for every opening (:meth:`open_committed`) and the Jacobi factors (step 4)."""
        tag = self.tag(step)
        nonce = self.rng["commit"].getrandbits(256)
        digests = await self.broadcast(step + "/commit", [_commitment(tag, self.me, values, nonce, bound_bits)], 256)
        rows = await self.broadcast(step, [*values, nonce], bound_bits)
        for i, row in enumerate(rows, 1):
            if i != self.me and _commitment(tag, i, row[:-1], row[-1], bound_bits) != digests[i - 1][0]:
                bad = BadOpening(
                    f"{self.roles[i - 1]}'s values at {tag!r} are not the ones it committed to before the others "
                    "revealed theirs: the ceremony stops"
                )
                bad.origin = self.ch.roles.get(self.roles[i - 1])
                raise bad
        return [row[:-1] for row in rows]

    async def open_committed(self, step: str, mine: list[int], P: int) -> list[int]:
        """Open Shamir-shared values (degree ≤ n − 1) at every party, each party's points committed before any is
        revealed (:meth:`reveal_committed`).  Without it a party could wait for the others' points, read the true
        opening -- with whatever its inconsistent shares put into the field's spare bits -- and then choose its own
        point so that the others open a value inside the honest range (the range checks after each opening would
        not see it).  Returns the opened values, signed."""
        rows = await self.reveal_committed(step, mine, P.bit_length())
        return [self.open([rows[j][c] for j in range(self.n)], P) for c in range(len(mine))]

    def check_opening(self, step: str, values: list[int], bounds: tuple[int, int], culprit: int = 0) -> None:
        """Every honest opening of ``step`` lies in ``bounds`` (inclusive; `_Ceremony` documents each): a value
        outside them is a deviation -- its spare bits may carry another party's point of a sharing -- and the
        ceremony stops (:class:`BadOpening`), the modulus it concerns never used.  ``culprit``: the one party that
        can have caused it (n = 2), else 0."""
        lo, hi = bounds
        for c, v in enumerate(values):
            if not lo <= v <= hi:
                where = f"{self.tag(step)!r}" + (f" (entry {c})" if len(values) > 1 else "")
                bad = BadOpening(
                    f"the value opened at {where} lies outside the range every honest opening lies in "
                    f"({v.bit_length()}-bit {'negative ' if v < 0 else ''}value, bound {max(-lo, hi).bit_length()} "
                    "bits): a party deviated (inconsistent shares or values beyond their range); the ceremony stops"
                )
                if culprit:
                    bad.origin = self.ch.roles.get(self.roles[culprit - 1])
                raise bad

    # the ranges of honest openings (inclusive), from the draws' ranges in steps 1, 5 and 6
    def sieve_bounds(self) -> tuple[int, int]:
        """Step 1: party 1's share x_1 = A − Σ_{i≥2} r_i, A = Π a_i with a_i ∈ [1, M), r_i ∈ [0, 2^(n·bits(M) + κ))."""
        r_max = (1 << (self.n * self.M.bit_length() + KAPPA)) - 1
        return 1 - (self.n - 1) * r_max, (self.M - 1) ** self.n

    def modulus_bounds(self) -> tuple[int, int]:
        """Step 2: 3·2^(h−2) ≤ p, q < 2^h (`_prime_shares`), so N has exactly key_bits bits."""
        bits = self.params.key_bits
        return 1 << (bits - 1), (1 << bits) - 1

    def masked_bounds(self, N: int, factor_max: int) -> tuple[int, int]:
        """Steps 5 and 6: w = (Σ r_i)·f + N·Σ s_i with r_i ∈ [0, 2^(bits+κ)), s_i ∈ [0, 2^s_bits) and
        0 < f ≤ ``factor_max`` (p + q − 1 < 2^(h+1) in step 5, φ(N) < N in step 6)."""
        n, params = self.n, self.params
        r_max, s_max = (1 << (params.key_bits + KAPPA)) - 1, (1 << params.s_bits) - 1
        return 0, n * r_max * factor_max + n * N * s_max

    async def shared(self, step: str, secrets_by_kind: list[tuple[list[int], int]], P: int) -> list[list[list[int]]]:
        """Shamir-share several vectors of secrets (each with its degree) over Z_P in one exchange.

        Returns, per kind, per sender i, the points f_i(me) of that kind (a list over the vector)."""
        rows: list[list[int]] = [[] for _ in range(self.n)]
        sizes = []
        for values, degree in secrets_by_kind:
            sizes.append(len(values))
            for v in values:
                pts = self.share(v, degree, P)
                for j in range(self.n):
                    rows[j].append(pts[j])
        got = await self.exchange(step, rows, P.bit_length())
        out = []
        off = 0
        for size in sizes:
            out.append([row[off : off + size] for row in got])
            off += size
        return out

    # ----------------------------------------------------------- step 1: sieving
    async def sieve(self, count: int) -> list[int]:
        """My additive shares of ``count`` candidate primes, each ≡ 3 (mod 4), coprime to M (step 1)."""
        M, P, n = self.M, self.P_sieve, self.n
        rng = self.rng["sieve"]
        a: list[int] = []
        while len(a) < count:
            cand = rng.randrange(M - 1) + 1
            if math.gcd(cand, M) == 1:
                a.append(cand)
        a_bits = n * M.bit_length()
        r = [0] * count if self.me == 1 else [rng.getrandbits(a_bits + KAPPA) for _ in range(count)]
        if n == 2:
            # A = a_1·a_2: party 1 learns a_1·a_2 − r_2 (Enc(a_1)^(a_2)·Enc(−r_2)), party 2 keeps r_2
            u = await self.two_party_products("sieve", "small", a, None, [-v for v in r])
            if self.me == 1:
                self.check_opening("sieve/ret", u, self.sieve_bounds(), culprit=2)
            return self._prime_shares(u if self.me == 1 else r)
        kinds = await self.shared("sieve/a", [(a, self.t), (r, self.t)], P)
        a_pts, r_pts = kinds
        prod = a_pts[0]
        for i in range(1, n):  # BGW product with the next party's factor, then GRR degree reduction
            local = [u * v % P for u, v in zip(prod, a_pts[i])]
            (reshared,) = await self.shared(f"sieve/mul{i}", [(local, self.t)], P)
            lam = self.lam(P)
            prod = [sum(lam[k] * reshared[k][c] for k in range(n)) % P for c in range(count)]
        masked = [(prod[c] - sum(r_pts[i][c] for i in range(n))) % P for c in range(count)]
        # x_1 = A − Σ r_i is opened at every party (statistically masked by the honest parties' r_i), so that every
        # party checks it lies where an honest x_1 does; party 1 takes it as its share
        x_1 = await self.open_committed("sieve/open", masked, P)
        await self.agree("sieve/open", x_1)
        self.check_opening("sieve/open", x_1, self.sieve_bounds())
        return self._prime_shares(x_1 if self.me == 1 else r)

    def _prime_shares(self, x: list[int]) -> list[int]:
        """p_i = x_i + M·y_i (+ offset for party 1), p_1 ≡ 3 and p_i ≡ 0 (mod 4), from additive shares x_i of A."""
        M, n = self.M, self.n
        h = self.params.half_bits
        y_range = max(1, (1 << (h - 4 - M.bit_length())) // n // 4)
        m_inv4 = pow(M, -1, 4)
        offset = 4 * M * -(-(3 << (h - 2)) // (4 * M))
        out = []
        for xc in x:
            target = 3 if self.me == 1 else 0
            base = xc + (offset if self.me == 1 else 0)
            fix = (target - base) * m_inv4 % 4
            y = 4 * self.rng["sieve"].randrange(y_range) + fix
            out.append(base + M * y)
        return out

    # ----------------------------------------------------------- products
    async def open_products(
        self,
        step: str,
        xs: list[int],
        ys: list[int],
        P: int,
        bounds: tuple[int, int],
        mask: int = 0,
        s: list[int] | None = None,
    ) -> list[int]:
        """Open Σx·Σy + mask·Σs for each entry (BGW, plus a random degree-2t sharing of zero, the points committed
        before they are revealed; for n = 2 a Paillier-based product, after which party 1 sends party 2 the opened
        values), echo them (:meth:`agree`) and check them against ``bounds``, the range of every honest opening
        (:meth:`check_opening`: for n = 2 party 1 checks before it sends anything)."""
        count = len(xs)
        if self.n == 2:
            s_ = s if s is not None else [0] * count
            key = "big" if self.P_big == P else "small"
            own = [x * y + mask * v for x, y, v in zip(xs, ys, s_)]
            # party 1 learns x_1·y_2 + y_1·x_2 + (x_2·y_2 + mask·s_2) = w − x_1·y_1 − mask·s_1: nothing beyond w
            u = await self.two_party_products(step, key, xs, ys, own)
            tag = self.tag(step + "/open")
            if self.me == 1:
                # before w goes to party 2: a deviating party 2 (a multiplier beyond its range) would read party
                # 1's values in w's bits above every honest opening
                w = [a + b for a, b in zip(u, own)]
                self.check_opening(step + "/ret", w, bounds, culprit=2)
                await self.ch.send(self.roles[1], tag, bigints(w))
            else:
                msg = await self.ch.recv(self.roles[0], tag, pb.BigInts)
                w = from_bigints(msg, count=count, bound_bits=P.bit_length(), what=tag)
            await self.agree(step, w)
            if self.me == 2:
                self.check_opening(step + "/open", w, bounds, culprit=1)
            return w
        kinds: list[tuple[list[int], int]] = [(xs, self.t), (ys, self.t), ([0] * count, 2 * self.t)]
        if s is not None:
            kinds.append((s, self.t))
        got = await self.shared(step, kinds, P)
        n = self.n
        mine = []
        for c in range(count):
            X = sum(got[0][i][c] for i in range(n))
            Y = sum(got[1][i][c] for i in range(n))
            Z = sum(got[2][i][c] for i in range(n))
            S = sum(got[3][i][c] for i in range(n)) if s is not None else 0
            mine.append((X * Y + mask * S + Z) % P)
        w = await self.open_committed(step + "/open", mine, P)
        await self.agree(step, w)
        self.check_opening(step + "/open", w, bounds)
        return w


def _commitment(tag: str, index: int, values: list[int], nonce: int, bound_bits: int) -> int:
    """Party ``index``'s commitment to the values it reveals at ``tag`` (`_Ceremony.reveal_committed`): SHA-256 over
    the tag, the index, the values at the width of ``bound_bits`` and the nonce; hiding (the nonce) and binding
    (collision resistance) in the random-oracle reading."""
    width = (bound_bits + 7) // 8
    h = hashlib.sha256(b"smcdp/keygen/commit/v1\x00" + tag.encode() + b"\x00" + index.to_bytes(2, "big"))
    h.update(len(values).to_bytes(4, "big"))
    for v in values:
        h.update(int(v).to_bytes(width, "big"))
    nonce_bytes = int(nonce).to_bytes(max(32, (int(nonce).bit_length() + 7) // 8), "big")  # a peer's may be longer
    h.update(len(nonce_bytes).to_bytes(4, "big") + nonce_bytes)
    return int.from_bytes(h.digest(), "big")


def _hash_to_jacobi_one(N: int, k: int, counter: int) -> int:
    """A g ∈ Z*_N with Jacobi symbol (g/N) = 1, derived from N (step 4; public, deterministic)."""
    nbytes = (N.bit_length() + 7) // 8 + KAPPA // 8
    j = 0
    while True:
        digest = hashlib.shake_256(
            b"smcdp/keygen/biprimality/v1\x00"
            + N.to_bytes((N.bit_length() + 7) // 8, "big")
            + k.to_bytes(4, "big")
            + counter.to_bytes(4, "big")
            + j.to_bytes(4, "big")
        ).digest(nbytes)
        g = int.from_bytes(digest, "big") % N
        j += 1
        if g > 1 and gmpy2.jacobi(g, N) == 1:
            return g


def _jacobi_share(me: int, N: int, p_i: int, q_i: int, g: int) -> int:
    """Party ``me``'s factor of g^(φ/4) mod N (step 4)."""
    e4 = (N + 1 - p_i - q_i) if me == 1 else -(p_i + q_i)
    if e4 % 4:
        raise KeygenFailed("a share violates the mod-4 constraint")  # pragma: no cover - by construction
    return int(powmod(g, e4 // 4, N))


async def party(ch: Channel, params: KeygenParams, *, seed: SeedLike = None) -> KeygenResult:
    """One data party's side of the key ceremony (every party runs the same code).

    ``seed``: the role's randomness root (:mod:`smcdp.primitives.rng`); every value this party draws comes
    from it, so a party replayed from its journal and root sends exactly what it sent before.  Only the
    ephemeral keys' encryption randomness (n = 2) is fresh, in message fields the replay check exempts."""
    params.validate()
    start = time.monotonic()
    st = _Ceremony(ch, params, seed)
    if st.n == 2:
        await st.two_party_setup()
    counts = {"candidates": 0, "batches": 0, "tests": 0}
    found: tuple[int, int, int] | None = None
    while found is None:
        if counts["candidates"] >= params.max_candidates:
            raise KeygenFailed(f"no biprime among {counts['candidates']} candidate moduli")
        found = await _candidate_batch(st, counts)
    N, p_i, q_i = found
    theta, d_i = await _exponent(st, N, p_i, q_i)
    del p_i, q_i
    share = await _share_exponent(st, N, theta, d_i)
    await _agree(st, share.public)
    return KeygenResult(share, counts["candidates"], counts["batches"], counts["tests"], time.monotonic() - start)


async def _candidate_batch(st: _Ceremony, counts: dict[str, int]) -> tuple[int, int, int] | None:
    """Steps 1-5 for one batch of candidates: (N, p_i, q_i) of the first biprime N, or None."""
    ch, params, me = st.ch, st.params, st.me
    bits = params.key_bits
    st.round += 1
    counts["batches"] += 1
    tried = f"{counts['candidates']} of ~{st.expected} candidates tried"
    ch.progress(round=st.round, step=f"sieve, {tried}")
    # step 1: K candidate p's and K candidate q's, sieved
    k = params.batch
    primes = await st.sieve(2 * k)
    ps, qs = primes[:k], primes[k:]
    # step 2: N for every pair
    ch.progress(step=f"modulus, {tried}")
    Ns = await st.open_products("n", ps, qs, st.P_n, st.modulus_bounds())
    counts["candidates"] += k
    # step 3: public trial division (every N has key_bits bits: modulus_bounds)
    alive = [c for c in range(k) if gmpy2.gcd(Ns[c], TRIAL_PRODUCT) == 1]
    if not alive:
        return None
    # step 4, first round for every survivor at once
    ch.progress(step=f"biprimality, {counts['candidates']} of ~{st.expected} candidates tried")
    counts["tests"] += len(alive)
    first = [_jacobi_share(me, Ns[c], ps[c], qs[c], _hash_to_jacobi_one(Ns[c], c, 0)) for c in alive]
    # committed before revealed: a party that saw the others' factors first could publish the inverse of their
    # product and pass any N it has found a factor of (a review: a non-biprime key whose factor it knew)
    got = await st.reveal_committed("jacobi/0", first, bits)
    await st.agree("jacobi/0", [v for row in got for v in row])
    passing = [c for idx, c in enumerate(alive) if _jacobi_passes(Ns[c], [row[idx] for row in got])]
    for c in passing:
        N = Ns[c]
        # step 4, the remaining rounds for this candidate
        rest = [
            _jacobi_share(me, N, ps[c], qs[c], _hash_to_jacobi_one(N, c, r)) for r in range(1, params.jacobi_rounds)
        ]
        got = await st.reveal_committed(f"jacobi/rest/{c}", rest, bits)
        await st.agree(f"jacobi/rest/{c}", [v for row in got for v in row])
        if not all(_jacobi_passes(N, [row[r] for row in got]) for r in range(len(rest))):
            continue
        # step 5: gcd(N, p + q − 1) = 1
        psi = ps[c] + qs[c] - (1 if me == 1 else 0)
        rnd = st.rng["gcd"].getrandbits(bits + KAPPA)
        s = st.rng["gcd"].getrandbits(params.s_bits)
        bounds = st.masked_bounds(N, (1 << (params.half_bits + 1)) - 1)
        (w,) = await st.open_products(f"gcd/{c}", [rnd], [psi], st.P_big, bounds, mask=N, s=[s])
        if math.gcd(w % N, N) == 1:
            return N, ps[c], qs[c]
    return None


def _jacobi_passes(N: int, factors: list[int]) -> bool:
    """Step 4's check of one round: the product of every party's factor is ±1 mod N."""
    prod = mpz(1)
    for f in factors:
        prod = prod * f % N
    return prod in (1, N - 1)


async def _exponent(st: _Ceremony, N: int, p_i: int, q_i: int) -> tuple[int, int]:
    """Step 6: d = β·φ, θ = d mod N; returns (θ, this party's additive share d_i of d)."""
    st.ch.progress(step="exponent")
    phi_i = (N + 1 - p_i - q_i) if st.me == 1 else -(p_i + q_i)
    beta = st.rng["exponent"].getrandbits(st.params.key_bits + KAPPA)
    s_i = st.rng["exponent"].getrandbits(st.params.s_bits)
    hi = st.masked_bounds(N, N - 1)[1]
    # β ≥ 0, φ > 0, s ≥ 0: an honest w is positive (w = 0 needs β = s = 0: probability below 2^−(bits + κ))
    (w,) = await st.open_products("theta", [beta], [phi_i], st.P_big, (1, hi), mask=N, s=[s_i])
    theta = w % N
    if math.gcd(theta, N) != 1:  # pragma: no cover - probability about 2/sqrt(N)
        # w mod N = −β·ψ mod N shares a factor with N, so the opened value has just factored N for everyone: this
        # modulus is spent, not retried with another β (a review)
        raise KeygenFailed("the opened θ shares a factor with N: this modulus is public now; start the ceremony again")
    d_i = (w if st.me == 1 else 0) - N * s_i
    del phi_i, beta
    return int(theta), d_i


async def _share_exponent(st: _Ceremony, N: int, theta: int, d_i: int) -> KeyShare:
    """Step 7: integer Shamir sharing of Δ·d_i with Feldman commitments; every share checked against its
    dealer's commitments; the verification keys from the combined commitments."""
    params, me, n = st.params, st.me, st.n
    st.ch.progress(step="shares")
    pk = PublicKey(N)
    n2 = pk.nsquare
    v = verification_base(N)
    if abs(d_i).bit_length() > params.d_bits:  # an honest w and N·s_i are below it (KeygenParams.d_bits)
        raise KeygenFailed("this party's share of the exponent exceeds its bound: a party deviated; the ceremony stops")
    coeffs, my_shares = integer_shamir(d_i, n, params.threshold, params.d_bits, rng=st.rng["exponent-shares"])
    share_bits = share_bound_bits(params.d_bits, n, params.threshold, dealers=n)
    commits = [int(powmod(v, a, n2)) for a in coeffs]
    got_commits = await st.broadcast("commit", commits, n2.bit_length())
    got_shares = await st.exchange("share", [[s] for s in my_shares], share_bits, signed=True)
    for i in range(1, n + 1):
        f_ij = got_shares[i - 1][0]
        expect = mpz(1)
        for kk, V in enumerate(got_commits[i - 1]):
            expect = expect * powmod(V, me**kk, n2) % n2
        if powmod(v, f_ij, n2) != expect:
            bad = BadShare(f"party {i}'s share of the decryption exponent does not match its commitments")
            bad.origin = st.ch.roles.get(st.roles[i - 1])
            raise bad
    secret = sum(row[0] for row in got_shares)
    delta = math.factorial(n)
    C = [mpz(1)] * (params.threshold + 1)
    for kk in range(params.threshold + 1):
        for i in range(n):
            C[kk] = C[kk] * got_commits[i][kk] % n2
    vks = []
    for j in range(1, n + 1):
        vk = mpz(1)
        for kk in range(params.threshold + 1):
            vk = vk * powmod(C[kk], delta * j**kk, n2) % n2
        vks.append(int(vk))
    pub = ThresholdPublicKey(pk, n, params.threshold, theta, share_bits, tuple(vks))
    share = KeyShare(pub, me, secret)
    share.check()
    return share


async def _agree(st: _Ceremony, pub: ThresholdPublicKey) -> None:
    """Step 8: everyone holds the same public key (its fingerprint broadcast and compared)."""
    fp = int.from_bytes(pub.fingerprint, "big")
    fps = await st.broadcast("fingerprint", [fp], 256)
    if any(f[0] != fp for f in fps):
        raise KeygenFailed("the parties computed different public keys")
