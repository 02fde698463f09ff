"""Non-interactive zero-knowledge proofs about Paillier ciphertexts (g = n + 1).

Used where a malicious participant could otherwise cheat undetected at little
cost to detect (docs/security.md):

* :func:`prove_one_hot` / :func:`verify_one_hot` -- a vector of ciphertexts
  encrypts a one-hot indicator: every entry is 0 or 1 (a disjunctive
  Chaum–Pedersen-style proof per entry that ``c`` or ``c·g⁻¹`` is an n-th
  residue, Cramer–Damgård–Schoenmakers OR composition) and the entries sum to
  1 (the prover opens the product ``Π c_k = g · R^n`` by revealing R).  The
  verifier learns nothing about *which* entry is 1: each OR-proof is
  witness-indistinguishable, and R = Π r_k is uniform given any K − 1 of the
  r_k.  dp-aggregate's Charlie proves his Stage-2 indicator with it, so he can
  no longer send zeros (no noise at all) or a non-indicator.
* :func:`prove_bit` / :func:`verify_bit` -- the per-entry part alone, so that
  K verifiers can check one entry each (dp-aggregate: party k checks the
  entry Charlie sends it), and :func:`open_ciphertext` /
  :func:`verify_opening` -- the key owner reveals a ciphertext's plaintext m
  and its randomness r, which proves ``c = g^m · r^n`` (a perfectly binding
  proof of correct decryption: no other m ∈ Z_n gives the same c); the
  product's opening above is one.
* :func:`prove_plaintext_knowledge` / :func:`verify_plaintext_knowledge` -- a
  batched proof that the prover knows an opening (m_i, r_i) of every
  ciphertext of a vector (it encrypted them itself): a contribution cannot be
  a copy (or a power, or a product with) another party's ciphertext whose
  plaintext the sender does not know.  Its nonces may be derived from a
  secret key *and the witness* (:func:`_witness_stream`), so that a replayed
  prover sends the same proof and nobody who lacks the witness can predict them.

* :func:`prove_bit_any_key` / :func:`verify_bit_any_key` -- a bit under a key its prover made, sound whatever the
  modulus (chunked challenges, see below); :func:`prove_modulus` / :func:`verify_modulus` -- the owner's modulus has
  gcd(n, φ(n)) = 1, so its openings bind mod n (dp-aggregate's Charlie proves both about his key ζ).

* :func:`prove_scaling` / :func:`verify_scalings` -- each ciphertext is a multiple, known to the prover, of
  its base, re-randomised (dp-aggregate's blinded counts under a group key); :func:`prove_combination` /
  :func:`verify_combination` -- every entry is the same linear combination of its J bases, re-randomised
  (power iteration's exact mode under a group key: Trent's blocks and blinded Grams); :func:`prove_bits` /
  :func:`verify_bits_many` -- many bit proofs checked at once.

Challenges are ``CHALLENGE_BITS`` = 128-bit Fiat–Shamir hashes of the
statement and a caller-supplied context (session, purpose), so a proof cannot
be replayed into another session.  Soundness needs 2^128 below the smallest
prime factor of n: true of every key an honest owner makes (primes of ≥ 1024
bits; the test keys' ≥ 128-bit primes from 256-bit moduli up), **not checked
of a key the prover made**: a verifier checks a peer's modulus for its size
only, so an owner who put a small prime r in n passes a bit proof of a
non-bit after about r hashes of grinding, and with r | p − 1 reads a
verifier's exponents modulo r through a character that n-th powers cannot
touch (tests/unit/crypto/test_crafted_modulus.py, a strict expected failure).
Under a key its prover made, use :func:`prove_bit_any_key` /
:func:`verify_bit_any_key` instead: chunked challenges, sound for any modulus
without a prime factor below 2^16, which the verifier checks (dp-aggregate's
indicator under Charlie's ζ).  Speaker identification's :func:`verify_bits`
under Bob's ζ still leans on the modulus (docs/protocols/speaker.md).  The proofs' nonces come from
``secrets`` -- like encryption obfuscators, never from a seedable generator:
a predictable nonce would reveal which branch of an OR-proof is real (or the
witness of a proof of knowledge) -- or from a secret stream mixed with the
witness, which is as unpredictable.
"""

from __future__ import annotations

import hashlib
import hmac
import random
import secrets
from collections.abc import Callable, Sequence
from functools import partial

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.modexp import multi_exp, powmod
from smcdp.crypto.paillier import PrivateKey, PublicKey, as_mpz
from smcdp.crypto.threshold import djn_exponent_bits, replayable_obfuscator

CHALLENGE_BITS = 128
_MASK = (1 << CHALLENGE_BITS) - 1


def randomness_of(sk: PrivateKey, c: int, m: int) -> mpz:
    """The r of ``c = g^m · r^n mod n²`` (the key owner can recover it: n is invertible mod φ(n))."""
    pk = sk.public_key
    n, n2 = pk.n, pk.nsquare
    rn = mpz(c) * (1 - mpz(m) * n) % n2 % n  # g^-m = 1 - m·n mod n², so c·g^-m = r^n
    phi = (sk.p - 1) * (sk.q - 1)
    return powmod(rn, gmpy2.invert(n, phi), n)


def _unit_below(n: mpz, rng: random.Random | None = None) -> mpz:
    below = secrets.randbelow if rng is None else rng.randrange
    while True:
        x = mpz(below(int(n) - 1) + 1)
        if gmpy2.gcd(x, n) == 1:
            return x


def _nonce_unit(
    pk: PublicKey, djn: bool, draw_bits: Callable[[int], int], draw_unit: Callable[[], mpz], terms: int = 1
) -> tuple[mpz, mpz]:
    """A proof's nonce unit u and u^n mod n²: u uniform in Z*_n (``draw_unit``, one power), or -- ``djn`` -- u = h^b
    for the key's public base h and b of :func:`~smcdp.crypto.threshold.djn_exponent_bits` bits for a response
    over ``terms`` terms (``draw_bits``), u^n from the key's table.  The second is for witnesses that are powers
    of h themselves (a group key's replayable encryptions and re-randomisers: r = h^a, a < 2^obfuscation_bits):
    a response u·Π r_i^{e_i} = h^(b + Σ e_i·a_i) is then within 2^-80 of h^b' for a fresh b' (b exceeds
    Σ e_i·a_i by 80 bits), which is what a simulator draws -- zero knowledge stays statistical, the verifier is
    unchanged."""
    if djn:
        un, u = replayable_obfuscator(pk, draw_bits(djn_exponent_bits(pk, terms)))
        return mpz(u), un
    u = draw_unit()
    return u, powmod(u, pk.n, pk.nsquare)


def _challenge(pk: PublicKey, context: bytes, *values: int) -> int:
    h = hashlib.sha256()
    h.update(b"smcdp/zkp/v1\x00" + len(context).to_bytes(4, "big") + context)
    h.update(pk.fingerprint)
    for v in values:
        b = int(v).to_bytes((int(v).bit_length() + 7) // 8 or 1, "big")
        h.update(len(b).to_bytes(4, "big") + b)
    return int.from_bytes(h.digest(), "big") & _MASK


def _prove_bit_with(
    pk: PublicKey, c: mpz, bit: int, r: mpz, context: bytes, rng: random.Random | None = None, djn: bool = False
) -> list[int]:
    n, n2 = pk.n, pk.nsquare
    us = [mpz(c), mpz(c) * (1 - n) % n2]  # c·g^-0, c·g^-1
    fake = 1 - bit
    a, e, z = [mpz(0), mpz(0)], [0, 0], [mpz(0), mpz(0)]
    draw = secrets.randbits if rng is None else rng.getrandbits
    rho, a[bit] = _nonce_unit(pk, djn, draw, lambda: _unit_below(n, rng))
    e[fake] = draw(CHALLENGE_BITS)
    z[fake], zn = _nonce_unit(pk, djn, draw, lambda: _unit_below(n, rng))
    a[fake] = zn * powmod(gmpy2.invert(us[fake], n2), e[fake], n2) % n2
    total = _challenge(pk, context, c, a[0], a[1])
    e[bit] = (total - e[fake]) & _MASK
    z[bit] = rho * powmod(r, e[bit], n) % n
    return [int(a[0]), int(a[1]), e[0], int(z[0]), int(z[1])]


def _integers(values: Sequence[object]) -> list[mpz] | None:
    """A proof's or a statement's elements as mpz, or None when one is no integer (a string, a fraction, a bool:
    ``as_mpz`` refuses them, where ``mpz()`` parsed a string) -- a verifier then answers False, not a proof.  Only
    the elements: a caller's own mistake (a context that is not bytes, say) still raises."""
    if isinstance(values, (str, bytes)):
        return None
    try:
        return [as_mpz(v) for v in values]
    except (TypeError, ValueError):
        return None


def verify_bit(pk: PublicKey, c: int, proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (5 integers) shows that ``c`` encrypts 0 or 1 (bound to ``context``)."""
    if isinstance(proof, (str, bytes)) or len(proof) != 5:
        return False
    n, n2 = pk.n, pk.nsquare
    ints = _integers([c, *proof])  # integers only; c in range and a unit, as verify_bits_many takes it
    if ints is None:
        return False
    c, a0, a1, e0, z0, z1 = ints
    if not (0 < c < n2) or gmpy2.gcd(c, n) != 1:
        return False
    if not (0 < a0 < n2 and 0 < a1 < n2 and 0 < z0 < n and 0 < z1 < n and 0 <= e0 <= _MASK):
        return False
    if gmpy2.gcd(a0 * a1 % n, n) != 1 or gmpy2.gcd(z0 * z1 % n, n) != 1:
        return False
    e1 = (_challenge(pk, context, c, a0, a1) - int(e0)) & _MASK
    us = [mpz(c), mpz(c) * (1 - n) % n2]
    return powmod(z0, n, n2) == a0 * powmod(us[0], e0, n2) % n2 and powmod(z1, n, n2) == a1 * powmod(us[1], e1, n2) % n2


def prove_bit(sk: PrivateKey, c: int, bit: int, context: bytes, rng: random.Random | None = None) -> list[int]:
    """Proof (5 integers) that ``c`` encrypts ``bit`` ∈ {0, 1}, witness-indistinguishable: it does not
    say which.  Its nonces come from the OS CSPRNG, or from ``rng`` -- a secret stream used for this one
    statement only (a session's randomness root, so that a replayed prover sends the same proof; two
    proofs with one nonce would reveal the witness)."""
    if bit not in (0, 1):
        raise ValueError("a bit proof is for 0 or 1")
    return _prove_bit_with(sk.public_key, mpz(c), bit, randomness_of(sk, c, bit), context, rng)


def open_ciphertext(sk: PrivateKey, c: int) -> tuple[int, int]:
    """(m, r) with ``c = g^m · r^n mod n²`` and 0 ≤ m < n: the plaintext and its proof."""
    m = sk.raw_decrypt(c)
    return int(m), int(randomness_of(sk, c, m))


def verify_opening(pk: PublicKey, c: int, m: int, r: int) -> bool:
    """True iff ``c = g^m · r^n mod n²`` with 0 ≤ m < n and r a unit mod n (then m is c's plaintext)."""
    n, n2 = pk.n, pk.nsquare
    m, r = mpz(m), mpz(r)
    if not (0 <= m < n and 0 < r < n) or gmpy2.gcd(r, n) != 1:
        return False
    return mpz(c) % n2 == (1 + m * n) * powmod(r, n, n2) % n2


def _entry_context(context: bytes, k: int) -> bytes:
    return context + k.to_bytes(4, "big")


def prove_one_hot(sk: PrivateKey, cts: Sequence[int], hot: int, context: bytes) -> list[int]:
    """Proof that ``cts`` (under ``sk``'s public key) encrypt the indicator of position ``hot``.

    Returns 5 integers per ciphertext (:func:`prove_bit` of entry k with context ``context ‖ k``)
    and then R, the opening of their product to 1.
    """
    pk = sk.public_key
    proof: list[int] = []
    for k, c in enumerate(cts):
        proof += prove_bit(sk, c, 1 if k == hot else 0, _entry_context(context, k))
    product = mpz(1)
    for c in cts:
        product = product * mpz(c) % pk.nsquare
    proof.append(int(randomness_of(sk, product, 1)))
    return proof


def verify_one_hot(pk: PublicKey, cts: Sequence[int], proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` shows that ``cts`` encrypt a 0/1 vector with exactly one 1."""
    K = len(cts)
    if len(proof) != 5 * K + 1 or K < 1:
        return False
    for k, c in enumerate(cts):
        if not verify_bit(pk, c, proof[5 * k : 5 * k + 5], _entry_context(context, k)):
            return False
    product = mpz(1)
    for c in cts:
        product = product * mpz(c) % pk.nsquare
    return verify_opening(pk, product, 1, proof[-1])


# --------------------------------------------------------------------------- proof of plaintext knowledge
_POPK_DOMAIN = b"smcdp/zkp/plaintext-knowledge/v1\x00"


def _popk_weights(pk: PublicKey, cts: Sequence[mpz], a: int, context: bytes) -> list[int]:
    """The challenge: one CHALLENGE_BITS weight per ciphertext, from a hash of the context, the key, every
    ciphertext and the commitment ``a`` (Fiat–Shamir: the weights are fixed only once ``a`` is)."""
    seed = _challenge(pk, _POPK_DOMAIN + context, len(cts), a, *cts)
    root = seed.to_bytes(CHALLENGE_BITS // 8, "big")
    return [
        int.from_bytes(hashlib.sha256(root + k.to_bytes(8, "big")).digest(), "big") & _MASK for k in range(len(cts))
    ]


def _witness_stream(key: bytes, label: bytes, parts: Sequence[int], nbytes: int) -> bytes:
    """``nbytes`` of HMAC-SHA256(key, label ‖ parts ‖ counter) in counter mode: a nonce that is a function of
    a secret key and the witness (RFC 6979 style), so that it repeats only with the same statement and
    witness, and nobody lacking either the key or the witness can compute it.  The label (the nonce's name
    and the context) and every part are length-prefixed: no two (label, parts) hash alike."""
    msg = hashlib.sha256(_POPK_DOMAIN + len(label).to_bytes(4, "big") + label)
    for v in parts:
        b = int(v).to_bytes((int(v).bit_length() + 7) // 8 or 1, "big")
        msg.update(len(b).to_bytes(4, "big") + b)
    digest = msg.digest()
    out = b"".join(
        hmac.new(key, digest + k.to_bytes(4, "big"), hashlib.sha256).digest() for k in range(-(-nbytes // 32))
    )
    return out[:nbytes]


def _popk_nonces(
    pk: PublicKey,
    cts: Sequence[mpz],
    ms: Sequence[int],
    rs: Sequence[int],
    context: bytes,
    key: bytes | None,
    djn: bool = False,
) -> tuple[mpz, mpz, mpz]:
    """x uniform in Z_n, s uniform in Z*_n (or ``djn``: a power of the key's base, :func:`_nonce_unit`) and s^n mod
    n²: from the OS CSPRNG, or (``key``) from the key and the whole witness -- n's size plus 128 bits reduced mod
    n, statistically uniform."""
    n = pk.n
    if key is None:
        s, sn = _nonce_unit(pk, djn, secrets.randbits, lambda: _unit_below(n), len(cts))
        return mpz(secrets.randbelow(int(n))), s, sn
    parts = [len(cts), *cts, *ms, *rs]
    size = (int(n).bit_length() + CHALLENGE_BITS + 7) // 8
    x = mpz(int.from_bytes(_witness_stream(key, b"x:" + context, parts, size), "big")) % n

    def unit() -> mpz:
        for k in range(1 << 16):
            s = mpz(int.from_bytes(_witness_stream(key, b"s%d:" % k + context, parts, size), "big")) % n
            if s > 0 and gmpy2.gcd(s, n) == 1:
                return s
        raise AssertionError("no unit found")  # pragma: no cover - probability ~(2/√n)^65536

    s, sn = _nonce_unit(pk, djn, partial(_stream_bits, key, b"b:" + context, parts), unit, len(cts))
    return x, s, sn


def prove_plaintext_knowledge(
    pk: PublicKey,
    cts: Sequence[int],
    plaintexts: Sequence[int],
    randomness: Sequence[int],
    context: bytes,
    nonce_key: bytes | None = None,
    djn: bool = False,
) -> tuple[int, int, int]:
    """Proof (a, z, w) that the prover knows (m_i, r_i) with c_i = g^{m_i}·r_i^n mod n² for every c_i in
    ``cts`` (``plaintexts``: the m_i, any sign, taken mod n; ``randomness``: the r_i), bound to ``context``.

    The Σ-protocol, batched by per-ciphertext weights and made non-interactive by Fiat–Shamir:

    * commitment a = g^x·s^n mod n², x uniform in Z_n, s uniform in Z*_n;
    * challenge e_1 … e_k, each CHALLENGE_BITS bits, a hash of the context, the key, all c_i and a;
    * response z = x + Σ e_i·m_i mod n and w = s·Π r_i^{e_i} mod n.  The carry q of the reduction of z
      would enter w as g^q -- and g^q = (1 + n)^q ≡ 1 (mod n): it vanishes, as does every multiple of n in
      w, since (w + jn)^n ≡ w^n (mod n²).
    * the verifier checks 0 <= z < n, w and a units, and g^z·w^n ≡ a·Π c_i^{e_i} (mod n²).

    Zero knowledge (perfect, honest verifier; in the random-oracle model for Fiat–Shamir): z is uniform in
    Z_n (x is) and w uniform in Z*_n (s is), independent of each other and of the witness; a is then
    determined.  A simulator draws e, z, w and sets a = g^z·w^n·Π c_i^{-e_i}: the same distribution.

    Soundness (knowledge).  All k weights come from one hash of (context, key, c_1 … c_k, a), so no prover
    answers two challenges that differ in one weight only; an extractor needs k + 1 accepting transcripts
    with the same commitment a.  The generalised forking lemma (Bellare–Neven 2006) gives them: a prover that
    convinces with probability noticeably above 2^-CHALLENGE_BITS per hash query, rewound k times at the
    query that fixed a, answers k + 1 weight vectors e^(0) … e^(k), each fresh and uniform in
    [0, 2^CHALLENGE_BITS)^k (random oracle), with (z_j, w_j).  Dividing transcript j by transcript 0:
    g^{z_j − z_0}·(w_j/w_0)^n ≡ Π_i c_i^{D_ji} (mod n²), j = 1 … k, with D_ji = e^(j)_i − e^(0)_i.
    det D is coprime to n except with probability at most 2k·2^-CHALLENGE_BITS: modulo a prime p of n
    (p > 2^CHALLENGE_BITS), row j makes D singular only if e^(j) satisfies one nonzero linear equation
    mod p fixed by the rows before it, which a vector uniform on a box of side 2^CHALLENGE_BITS < p does with
    probability at most 2^-CHALLENGE_BITS (Schwartz–Zippel); a union bound over the k rows and n's two
    primes.  Then invert D: with adj(D) the adjugate (integer entries, adj(D)·D = det D·I), raising relation j
    to adj(D)_ij and multiplying over j gives c_i^{det D} = g^{x_i}·y_i^n, x_i = Σ_j adj(D)_ij·(z_j − z_0),
    y_i = Π_j (w_j/w_0)^{adj(D)_ij}; and with β·det D + γ·n = 1 (Bézout), c_i = (c_i^{det D})^β·(c_i^γ)^n =
    g^{β·x_i}·(y_i^β·c_i^γ)^n -- an opening (β·x_i mod n, y_i^β·c_i^γ mod n) of every c_i (g has order n
    mod n², and (y + jn)^n ≡ y^n).  So a party cannot contribute another's ciphertext c (or c^C, or c times
    its own): an opening of c^C·E(m) gives C·m_c + m, hence m_c -- which it does not know.

    ``nonce_key``: a secret of the prover (a stream of its randomness root).  The nonces x, s are then an
    HMAC keyed by it over the context and the witness (every c_i, m_i, r_i), so a replayed prover sends
    the same proof and whoever knows the key but not the witness still cannot predict x (z − x = Σ e_i m_i
    would reveal a combination of the plaintexts).  Without it, fresh from the OS CSPRNG."""
    n, n2 = pk.n, pk.nsquare
    if not (len(cts) == len(plaintexts) == len(randomness)) or not cts:
        raise ValueError("one plaintext and one randomness per ciphertext, at least one ciphertext")
    cs = [mpz(c) for c in cts]
    ms = [int(mpz(m) % n) for m in plaintexts]
    rs = [int(mpz(r) % n) for r in randomness]
    x, s, sn = _popk_nonces(pk, cs, ms, rs, context, nonce_key, djn)
    a = (1 + x * n) * sn % n2
    es = _popk_weights(pk, cs, int(a), context)
    z = (x + sum(e * m for e, m in zip(es, ms))) % n
    w = s * multi_exp([mpz(r) for r in rs], es, n) % n
    return int(a), int(z), int(w)


def verify_plaintext_knowledge(pk: PublicKey, cts: Sequence[int], proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (a, z, w) shows knowledge of an opening of every ciphertext of ``cts`` (bound to
    ``context``; see :func:`prove_plaintext_knowledge`)."""
    n, n2 = pk.n, pk.nsquare
    if len(proof) != 3 or not cts:
        return False
    ints, cs = _integers(proof), _integers(cts)
    if ints is None or cs is None:
        return False
    a, z, w = ints
    if not (0 < a < n2 and 0 <= z < n and 0 < w < n) or any(not 0 < c < n2 for c in cs):
        return False
    acc = a * w % n
    for c in cs:
        acc = acc * c % n
    if gmpy2.gcd(acc, n) != 1:  # a, w and every c_i units
        return False
    es = _popk_weights(pk, cs, int(a), context)
    return (1 + z * n) * powmod(w, n, n2) % n2 == a * multi_exp(cs, es, n2) % n2


# --------------------------------------------------------------------------- scaling by a secret
_SCALE_DOMAIN = b"smcdp/zkp/scaling/v1\x00"
#: statistical hiding of a scaling proof's responses: z = x + e·r with x this many bits beyond e·r
SCALE_HIDING_BITS = 80
#: the verifier's batching weights (its own randomness): a wrong equation passes with probability 2^-this
SCALE_BATCH_BITS = 64


def _scaling_challenge(
    pk: PublicKey, bases: Sequence[mpz], cts: Sequence[mpz], commitments: Sequence[int], context: bytes
) -> int:
    return _challenge(pk, _SCALE_DOMAIN + context, len(cts), *bases, *cts, *commitments)


def prove_scaling(
    pk: PublicKey,
    bases: Sequence[int],
    cts: Sequence[int],
    exponents: Sequence[int],
    randomness: Sequence[int],
    context: bytes,
    nonce_key: bytes | None = None,
    djn: bool = False,
) -> list[int]:
    """Proof [A_1 … A_k, z_1 … z_k, w_1 … w_k] that the prover knows integers r_i ≥ 0 and units s_i with
    c_i = b_i^{r_i}·s_i^n mod n² for every i: each c_i encrypts a multiple, known to the prover, of what b_i
    encrypts -- and nothing else (no other ciphertext's plaintext mixed in) -- re-randomised by s_i.  Bound to
    ``context``.

    The s_i matter: without them c_i = b_i^{r_i} is a deterministic function of r_i, and whoever knows the
    plaintexts of b_i and of a product of such c_i (dp-aggregate's zero test) and all but one factor's
    exponents can search the last one's in a range of the size of r's excess over n (found by review: a data
    party read the counts this way).  With s_i, each c_i is a fresh encryption (DCR).

    The Σ-protocol per entry, one Fiat–Shamir challenge e (CHALLENGE_BITS bits) for all of them:

    * commitments A_i = b_i^{x_i}·u_i^n mod n², x_i uniform in [0, 2^(|r| + CHALLENGE_BITS + SCALE_HIDING_BITS)),
      u_i uniform in Z*_n;
    * e = a hash of the context, the key, every b_i, c_i and A_i;
    * responses z_i = x_i + e·r_i over the integers and w_i = u_i·s_i^e mod n; the verifier checks
      b_i^{z_i}·w_i^n ≡ A_i·c_i^e (mod n²) (:func:`verify_scaling`, batched).

    Zero knowledge (honest verifier, random oracle): z_i is within statistical distance 2^-SCALE_HIDING_BITS of
    uniform on the x-range whatever r_i is, w_i uniform in Z*_n; A_i is then determined (a simulator draws e,
    z_i, w_i and sets A_i = b_i^{z_i}·w_i^n·c_i^{-e}).

    Soundness, for what is decrypted.  Two accepting answers to challenges e ≠ e' for the same commitments
    give b_i^{Δz}·y^n ≡ c_i^{Δe} for Δz = z − z', Δe = e − e' and some y (the w's ratio, and the n-th-power
    slack the batched check lets through).  Δe < 2^CHALLENGE_BITS is coprime to n (its primes are larger), so
    βΔe + γn = 1 for integers β, γ and c_i = (c_i^{Δe})^β·(c_i^γ)^n = b_i^{βΔz}·(y^β·c_i^γ)^n: c_i is b_i raised
    to a known integer times an encryption of 0, so its plaintext is βΔz times b_i's (mod n) --
    unconditionally.

    ``nonce_key``: x_i, u_i are an HMAC keyed by it over the context and the witness (every b_i, c_i, r_i, s_i),
    so a replayed prover sends the same proof and nobody lacking the witness predicts them; without it, fresh
    from the OS CSPRNG."""
    n, n2 = pk.n, pk.nsquare
    if not (len(bases) == len(cts) == len(exponents) == len(randomness)) or not cts:
        raise ValueError("one base, exponent and randomness per ciphertext, at least one ciphertext")
    if any(int(r) < 0 for r in exponents):
        raise ValueError("the exponents must be non-negative integers")
    bs, cs, rs = [mpz(b) for b in bases], [mpz(c) for c in cts], [int(r) for r in exponents]
    ss = [mpz(v) % n for v in randomness]
    xbits = max(r.bit_length() for r in rs) + CHALLENGE_BITS + SCALE_HIDING_BITS
    if nonce_key is None:
        xs = [secrets.randbits(xbits) for _ in rs]
        nonces = [_nonce_unit(pk, djn, secrets.randbits, lambda: _unit_below(n)) for _ in rs]
    else:
        parts = [len(cs), *bs, *cs, *rs, *ss]
        size = (xbits + 7) // 8
        xs = [
            int.from_bytes(_witness_stream(nonce_key, b"x%d:" % i + context, parts, size), "big") % (1 << xbits)
            for i in range(len(rs))
        ]
        nonces = [_stream_nonce(pk, djn, nonce_key, b"u%d:" % i + context, parts) for i in range(len(rs))]
    us = [u for u, _ in nonces]
    commitments = [int(powmod(b, x, n2) * un % n2) for b, x, (_, un) in zip(bs, xs, nonces)]
    e = _scaling_challenge(pk, bs, cs, commitments, context)
    zs = [x + e * r for x, r in zip(xs, rs)]
    ws = [int(u * powmod(sv, e, n) % n) for u, sv in zip(us, ss)]
    return [*commitments, *zs, *ws]


def _stream_bits(key: bytes, label: bytes, parts: Sequence[int], count: int) -> int:
    """``count`` bits of the witness stream (:func:`_witness_stream`): a nonce exponent."""
    raw = _witness_stream(key, label, parts, (count + 7) // 8)
    return int.from_bytes(raw, "big") >> (8 * len(raw) - count)


def _stream_nonce(pk: PublicKey, djn: bool, key: bytes, label: bytes, parts: Sequence[int]) -> tuple[mpz, mpz]:
    """:func:`_nonce_unit` with its randomness from the witness stream (``key``, ``label``, ``parts``)."""
    bits = partial(_stream_bits, key, b"djn/" + label, parts)
    return _nonce_unit(pk, djn, bits, lambda: _unit_from(key, label, parts, pk.n))


def _unit_from(key: bytes, label: bytes, parts: Sequence[int], n: mpz) -> mpz:
    """A unit mod n from the witness stream (n's size plus 128 bits, reduced): statistically uniform in Z*_n."""
    size = (int(n).bit_length() + CHALLENGE_BITS + 7) // 8
    for k in range(1 << 16):
        u = mpz(int.from_bytes(_witness_stream(key, label + b"/%d" % k, parts, size), "big")) % n
        if u > 0 and gmpy2.gcd(u, n) == 1:
            return u
    raise AssertionError("no unit found")  # pragma: no cover - probability ~(2/√n)^65536


def verify_scaling(
    pk: PublicKey,
    bases: Sequence[int],
    cts: Sequence[int],
    proof: Sequence[int],
    context: bytes,
    exponent_bits: int,
) -> bool:
    """True iff ``proof`` shows that every c_i encrypts a multiple of what b_i encrypts (bound to ``context``;
    the exponents have at most ``exponent_bits`` bits; see :func:`prove_scaling`)."""
    return verify_scalings(pk, bases, [(cts, proof, context)], exponent_bits)


def verify_scalings(
    pk: PublicKey,
    bases: Sequence[int],
    statements: Sequence[tuple[Sequence[int], Sequence[int], bytes]],
    exponent_bits: int,
) -> bool:
    """True iff every (cts, proof, context) of ``statements`` -- several provers' scalings of the same
    ``bases`` -- verifies (:func:`prove_scaling`); False says that one fails, not which.

    All k·P equations b_i^{z_pi}·w_pi^n ≡ A_pi·c_pi^{e_p} are checked at once: with weights λ_pi of
    SCALE_BATCH_BITS bits from this verifier's own CSPRNG, Π_i b_i^{Σ_p λ_pi z_pi}·(Π w^λ)^n ≡ Π A^λ·Π c^{λ e}
    -- the bases shared by every prover take one exponent each, so P proofs cost about one.  If some equation is
    off by a factor δ whose plaintext part (in Z_n, under the isomorphism Z*_{n²} ≅ Z_n × Z*_n, m ↦ g^m) is
    nonzero, the weighted sum of those parts vanishes modulo a prime of n with probability at most
    2^-SCALE_BATCH_BITS; a factor with a zero plaintext part is an n-th power, an encryption of 0, which leaves
    every plaintext as the soundness argument of :func:`prove_scaling` needs."""
    n, n2 = pk.n, pk.nsquare
    k = len(bases)
    bs = _integers(bases)
    if bs is None:
        return False
    if k == 0 or not statements or any(not 0 < b < n2 for b in bs):
        return False
    zbits = exponent_bits + CHALLENGE_BITS + SCALE_HIDING_BITS + 1
    base_exps = [0] * k
    ws_all, lams_all, commit_all, cts_all, cexps = [], [], [], [], []
    acc = mpz(1)
    for b in bs:
        acc = acc * b % n
    for cts, proof, context in statements:
        if len(cts) != k or len(proof) != 3 * k:
            return False
        cs, pr = _integers(cts), _integers(proof)
        if cs is None or pr is None:
            return False
        commitments, zs, ws = pr[:k], [int(z) for z in pr[k : 2 * k]], pr[2 * k :]
        if any(not 0 < v < n2 for v in (*cs, *commitments)) or any(not 0 <= z < 1 << zbits for z in zs):
            return False
        if any(not 0 < w < n for w in ws):
            return False
        for v in (*cs, *commitments, *ws):
            acc = acc * v % n
        e = _scaling_challenge(pk, bs, cs, [int(a) for a in commitments], context)
        lams = [secrets.randbits(SCALE_BATCH_BITS) for _ in range(k)]
        for i in range(k):
            base_exps[i] += lams[i] * zs[i]
        ws_all += ws
        lams_all += lams
        commit_all += commitments
        cts_all += cs
        cexps += [lam * e for lam in lams]
    if gmpy2.gcd(acc, n) != 1:  # every value a unit
        return False
    lhs = multi_exp(bs, base_exps, n2) * powmod(multi_exp(ws_all, lams_all, n), n, n2) % n2
    rhs = multi_exp(commit_all, lams_all, n2) * multi_exp(cts_all, cexps, n2) % n2
    return lhs == rhs


# --------------------------------------------------------------------------- a combination of given ciphertexts
_COMB_DOMAIN = b"smcdp/zkp/combination/v1\x00"


def _combination_challenge(
    pk: PublicKey, rows: Sequence[Sequence[mpz]], cts: Sequence[mpz], commitments: Sequence[int], context: bytes
) -> int:
    flat = [v for row in rows for v in row]
    return _challenge(pk, _COMB_DOMAIN + context, len(rows), len(cts), *flat, *cts, *commitments)


def _combination_rows(pk: PublicKey, bases: Sequence[Sequence[int]], k: int) -> list[list[mpz]] | None:
    rows = []
    for row in bases:
        ints = _integers(row)
        if ints is None:
            return None
        rows.append(ints)
    if not rows or any(len(row) != k for row in rows):
        return None
    if any(not 0 < b < pk.nsquare for row in rows for b in row):
        return None
    return rows


def prove_combination(
    pk: PublicKey,
    bases: Sequence[Sequence[int]],
    cts: Sequence[int],
    exponents: Sequence[int],
    randomness: Sequence[int],
    context: bytes,
    exponent_bits: int,
    nonce_key: bytes | None = None,
    djn: bool = False,
) -> list[int]:
    """Proof [A_1 … A_k, z_1 … z_J, w_1 … w_k] that the prover knows coefficients a_1 … a_J (one per row of
    ``bases``, the same for every entry) and units s_ℓ with c_ℓ = Π_j X_{jℓ}^{a_j}·s_ℓ^n mod n² for every entry
    ℓ: each c_ℓ encrypts the *same* linear combination of what the J bases of its entry encrypt, and nothing
    else, re-randomised.  The honest prover's a_j are integers in [0, 2^exponent_bits); what the proof shows is
    weaker and is all it is used for: coefficients mod n, not bounded, not signed (see the soundness note).  Power iteration's Trent under a group key proves with it that a block is a combination
    of the round's recomputed aggregates (a real state scaled: one non-zero a_j; a decoy: several) and his
    blinded Gram a multiple of the recomputed Gram sum (J = 1), so a data party decrypts nothing but functions
    of sums it recomputed itself (docs/protocols/power-iteration.md, "The exact mode with a group key").

    The Σ-protocol, one Fiat–Shamir challenge e (CHALLENGE_BITS bits) for all entries:

    * x_j uniform in [0, 2^(``exponent_bits`` + CHALLENGE_BITS + SCALE_HIDING_BITS)) -- a public range, so that
      the responses do not tell which a_j are zero (a real block from a decoy) -- and u_ℓ uniform in Z*_n;
      commitments A_ℓ = Π_j X_{jℓ}^{x_j}·u_ℓ^n mod n²;
    * e = a hash of the context, the key, every base, c_ℓ and A_ℓ;
    * z_j = x_j + e·a_j over the integers, w_ℓ = u_ℓ·s_ℓ^e mod n; the verifier checks
      Π_j X_{jℓ}^{z_j}·w_ℓ^n ≡ A_ℓ·c_ℓ^e (mod n²) for every ℓ (:func:`verify_combination`, batched).

    Zero knowledge (honest verifier, random oracle): each z_j is within 2^-SCALE_HIDING_BITS of uniform on the
    x-range whatever a_j ∈ [0, 2^exponent_bits) is, w_ℓ uniform; a simulator draws e, z, w and solves for A.

    Soundness, for what is decrypted: two accepting answers to e ≠ e' give Π_j X_{jℓ}^{Δz_j}·y_ℓ^n ≡ c_ℓ^{Δe}
    for every ℓ.  Δe < 2^CHALLENGE_BITS is coprime to n, βΔe + γn = 1, so c_ℓ = Π_j X_{jℓ}^{βΔz_j}·(y_ℓ^β·c_ℓ^γ)^n:
    the plaintext of c_ℓ is Σ_j βΔz_j·m(X_{jℓ}) mod n with integers βΔz_j that do not depend on ℓ --
    unconditionally (as :func:`prove_scaling`).  The z-range check serves zero knowledge only: a prover may pass
    with negative coefficients (x near the top of its range), with large ones, or with fractions mod n (e.g. 1/2,
    retrying until e is even) -- still one combination of the bases, which is what a verifier relying on it may
    assume, and no more (found in review).

    ``nonce_key``: x_j and u_ℓ are an HMAC keyed by it over the context and the witness (every base, c_ℓ, a_j and
    s_ℓ), so a replayed prover sends the same proof and nobody lacking the witness predicts them; without it,
    fresh from the OS CSPRNG."""
    n, n2 = pk.n, pk.nsquare
    rows = _combination_rows(pk, bases, len(cts))
    if rows is None or not cts or len(exponents) != len(rows) or len(randomness) != len(cts):
        raise ValueError("one exponent per row of bases, each row and the randomness one entry per ciphertext")
    as_ = [int(a) for a in exponents]
    if any(not 0 <= a < 1 << exponent_bits for a in as_):
        raise ValueError(f"the exponents must be integers in [0, 2^{exponent_bits})")
    cs = [mpz(c) for c in cts]
    ss = [mpz(v) % n for v in randomness]
    xbits = exponent_bits + CHALLENGE_BITS + SCALE_HIDING_BITS
    if nonce_key is None:
        xs = [secrets.randbits(xbits) for _ in as_]
        nonces = [_nonce_unit(pk, djn, secrets.randbits, lambda: _unit_below(n)) for _ in cs]
    else:
        parts = [len(rows), len(cs), *(v for row in rows for v in row), *cs, *as_, *ss]
        size = (xbits + 7) // 8
        xs = [
            int.from_bytes(_witness_stream(nonce_key, b"cx%d:" % j + context, parts, size), "big") % (1 << xbits)
            for j in range(len(as_))
        ]
        nonces = [_stream_nonce(pk, djn, nonce_key, b"cu%d:" % i + context, parts) for i in range(len(cs))]
    us = [u for u, _ in nonces]
    commitments = [int(multi_exp([row[i] for row in rows], xs, n2) * un % n2) for i, (_, un) in enumerate(nonces)]
    e = _combination_challenge(pk, rows, cs, commitments, context)
    zs = [x + e * a for x, a in zip(xs, as_)]
    ws = [int(u * powmod(sv, e, n) % n) for u, sv in zip(us, ss)]
    return [*commitments, *zs, *ws]


def combination_proof_size(rows: int, entries: int) -> int:
    """How many integers :func:`prove_combination` returns for ``rows`` bases of ``entries`` ciphertexts."""
    return 2 * entries + rows


def verify_combination(
    pk: PublicKey,
    bases: Sequence[Sequence[int]],
    cts: Sequence[int],
    proof: Sequence[int],
    context: bytes,
    exponent_bits: int,
) -> bool:
    """True iff ``proof`` shows that every c_ℓ encrypts the same linear combination (coefficients mod n, the
    same for every entry) of what its entry's bases encrypt, re-randomised (:func:`prove_combination`).
    ``exponent_bits``: the honest prover's bound, which sets the responses' range; it does not bound the
    coefficients.

    The k equations are checked at once with weights λ_ℓ of SCALE_BATCH_BITS bits from this verifier's CSPRNG:
    Π_ℓ Π_j X_{jℓ}^{λ_ℓ z_j}·(Π_ℓ w_ℓ^{λ_ℓ})^n ≡ Π_ℓ A_ℓ^{λ_ℓ}·Π_ℓ c_ℓ^{λ_ℓ e}; an equation off by a factor with a
    non-zero plaintext part survives with probability at most 2^-SCALE_BATCH_BITS, one off by an n-th power
    leaves every plaintext as the soundness argument needs (as :func:`verify_scalings`)."""
    n, n2 = pk.n, pk.nsquare
    k = len(cts)
    rows = _combination_rows(pk, bases, k)
    if rows is None or k == 0 or len(proof) != combination_proof_size(len(rows), k):
        return False
    cs, pr = _integers(cts), _integers(proof)
    if cs is None or pr is None:
        return False
    commitments, zs, ws = pr[:k], [int(z) for z in pr[k : k + len(rows)]], pr[k + len(rows) :]
    zbits = exponent_bits + CHALLENGE_BITS + SCALE_HIDING_BITS + 1
    if any(not 0 < v < n2 for v in (*cs, *commitments)) or any(not 0 <= z < 1 << zbits for z in zs):
        return False
    if any(not 0 < w < n for w in ws):
        return False
    acc = mpz(1)
    for v in (*cs, *commitments, *ws, *(b for row in rows for b in row)):
        acc = acc * v % n
    if gmpy2.gcd(acc, n) != 1:  # every value a unit
        return False
    e = _combination_challenge(pk, rows, cs, [int(a) for a in commitments], context)
    lams = [secrets.randbits(SCALE_BATCH_BITS) for _ in range(k)]
    bases_all = [row[i] for i in range(k) for row in rows]
    exps_all = [lams[i] * z for i in range(k) for z in zs]
    lhs = multi_exp(bases_all, exps_all, n2) * powmod(multi_exp(ws, lams, n), n, n2) % n2
    rhs = multi_exp(commitments, lams, n2) * multi_exp(cs, [lam * e for lam in lams], n2) % n2
    return lhs == rhs


# --------------------------------------------------------------------------- many bits, verified at once
def prove_bits(
    pk: PublicKey,
    cts: Sequence[int],
    bits: Sequence[int],
    randomness: Sequence[int],
    context: bytes,
    rngs: Sequence[random.Random] | None = None,
    djn: bool = False,
) -> list[int]:
    """:func:`prove_bit` for every c_k of ``cts`` (c_k = g^{b_k}·r_k^n, ``bits`` and ``randomness`` known to the
    encryptor), entry k bound to ``context`` and k: 5 integers an entry.  ``rngs``: one secret stream per entry
    for its nonces (a cryptographic one -- the fake branch's nonces are in the proof; a replayed prover passes
    the same streams and sends the same proof); without them, the OS CSPRNG.  ``djn``: every r_k is a power
    h^a of the key's public base (a group key's replayable encryption); both branches' z are then powers of h
    (:func:`_nonce_unit`: statistically the same distribution for the real and the simulated branch), their
    n-th powers from the key's table."""
    if not (len(cts) == len(bits) == len(randomness)) or any(b not in (0, 1) for b in bits):
        raise ValueError("one bit (0 or 1) and one randomness per ciphertext")
    if rngs is not None and len(rngs) != len(cts):
        raise ValueError("one nonce stream per ciphertext")
    out: list[int] = []
    for k, (c, b, r) in enumerate(zip(cts, bits, randomness)):
        rng = None if rngs is None else rngs[k]
        out += _prove_bit_with(pk, mpz(c), b, mpz(r), _entry_context(context, k), rng, djn)
    return out


def verify_bits(pk: PublicKey, cts: Sequence[int], proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (5 integers per entry, :func:`prove_bits`) shows that every c_k encrypts 0 or 1."""
    return verify_bits_many(pk, [(cts, proof, context)])


def verify_bits_many(pk: PublicKey, statements: Sequence[tuple[Sequence[int], Sequence[int], bytes]]) -> bool:
    """True iff every (cts, proof, context) of ``statements`` -- several provers' :func:`prove_bits` -- verifies;
    False says that one fails, not which.

    The equations z^n ≡ a·u^e of every entry of every statement (u = c or c·g⁻¹ for the two branches) are
    checked at once with weights λ of SCALE_BATCH_BITS bits from this verifier's CSPRNG: (Π z^λ)^n ≡ Π a^λ·Π u^{λe}
    -- one exponentiation by n for them all.  A wrong equation whose ratio has a nonzero plaintext part (under
    Z*_{n²} ≅ Z_n × Z*_n) survives the weighting with probability at most 2^-SCALE_BATCH_BITS; a ratio with a zero
    plaintext part is an n-th power, and then the equation holds with another z -- the OR-proof's statement
    (u an n-th residue for one branch) is the same."""
    n, n2 = pk.n, pk.nsquare
    zs, bases, exps, commit = [], [], [], []
    for cts, proof, context in statements:
        if not cts or len(proof) != 5 * len(cts):
            return False
        for k, c in enumerate(cts):
            ints = _integers([c, *proof[5 * k : 5 * k + 5]])
            if ints is None:
                return False
            c, a0, a1, e0, z0, z1 = ints
            if not (0 < c < n2 and 0 < a0 < n2 and 0 < a1 < n2 and 0 < z0 < n and 0 < z1 < n and 0 <= e0 <= _MASK):
                return False
            if gmpy2.gcd(a0 * a1 % n * c % n, n) != 1 or gmpy2.gcd(z0 * z1 % n, n) != 1:
                return False
            e1 = (_challenge(pk, _entry_context(context, k), c, a0, a1) - int(e0)) & _MASK
            lam0, lam1 = secrets.randbits(SCALE_BATCH_BITS), secrets.randbits(SCALE_BATCH_BITS)
            zs += [(z0, lam0), (z1, lam1)]
            commit += [(a0, lam0), (a1, lam1)]
            bases += [c, c * (1 - n) % n2]
            exps += [lam0 * int(e0), lam1 * int(e1)]
    if not zs:
        return False
    lhs = powmod(multi_exp([z for z, _ in zs], [lam for _, lam in zs], n), n, n2)
    rhs = multi_exp([a for a, _ in commit], [lam for _, lam in commit], n2) * multi_exp(bases, exps, n2) % n2
    return lhs == rhs


# --------------------------------------------------------------------------- a bit under the prover's own key
#: A bit proof under a key its *prover* made (dp-aggregate's ζ, Charlie's own) cannot lean on the modulus: a
#: 128-bit challenge is sound only if n has no prime factor below 2^128, and nobody checks that of a key its owner
#: made (tests/unit/crypto/test_crafted_modulus.py: n = p·q·r with r | p − 1 passes :func:`verify_bit` after
#: about r hashes).  :func:`prove_bit_any_key` cuts the challenge into ``ANY_KEY_CHUNKS`` chunks of
#: ``ANY_KEY_CHUNK_BITS`` bits, each answered by a repetition of its own, and :func:`verify_bit_any_key` refuses a
#: modulus with a prime factor below 2^ANY_KEY_CHUNK_BITS.  Why that is sound for any modulus: the quotient of
#: Z*_(n²) by its n-th powers has order |{x : x^n = 1}|, whose primes all divide n (Cauchy), hence are above
#: 2^ANY_KEY_CHUNK_BITS; two answers with one commitment to chunk values that differ give u_b^Δ = (z/z')^n with
#: 0 < |Δ| < 2^ANY_KEY_CHUNK_BITS, Δ invertible modulo that order, so u_b itself is an n-th power: c = g^b·w^n
#: exactly -- no character of the group can see anything in c that g^b and n-th powers do not carry.
ANY_KEY_CHUNK_BITS = 16
ANY_KEY_CHUNKS = -(-CHALLENGE_BITS // ANY_KEY_CHUNK_BITS)
_CHUNK_MASK = (1 << ANY_KEY_CHUNK_BITS) - 1
_ANY_KEY_DOMAIN = b"smcdp/zkp/bit-any-key/v1\x00"
#: the product of every prime up to 2^ANY_KEY_CHUNK_BITS (94,000 bits): one gcd trial-divides a modulus by all
_SMALL_PRIMES = gmpy2.primorial(1 << ANY_KEY_CHUNK_BITS)


def no_small_factor(n: int) -> bool:
    """True iff ``n`` has no prime factor up to 2^:data:`ANY_KEY_CHUNK_BITS` (what :func:`verify_bit_any_key` needs)."""
    return n > 1 and gmpy2.gcd(mpz(n), _SMALL_PRIMES) == 1


def bit_proof_any_key_size(key_bits: int) -> int:
    """The bytes of a :func:`prove_bit_any_key` proof as a BigInts message, at most (for traffic envelopes)."""
    return 2 * ANY_KEY_CHUNKS * ((key_bits + 7) // 8 + 8) + 2 * ANY_KEY_CHUNKS * 8 + 32


def _any_key_challenge(pk: PublicKey, context: bytes, c: mpz, a0: Sequence[mpz], a1: Sequence[mpz]) -> list[int]:
    """The Fiat–Shamir challenge of :func:`_challenge` (domain-separated by the context's prefix), cut into chunks."""
    x = _challenge(pk, _ANY_KEY_DOMAIN + context, c, *a0, *a1)
    return [(x >> (ANY_KEY_CHUNK_BITS * i)) & _CHUNK_MASK for i in range(ANY_KEY_CHUNKS)]


def prove_bit_any_key(sk: PrivateKey, c: int, bit: int, context: bytes, rng: random.Random | None = None) -> list[int]:
    """Proof that ``c`` encrypts ``bit`` ∈ {0, 1} that holds whatever the modulus (see above): the disjunctive
    proof of :func:`prove_bit` repeated ``ANY_KEY_CHUNKS`` times, chunk i of one Fiat–Shamir hash its challenge.
    Returned as the chunks' challenges and responses, e_0 (one per chunk), e_1, z_0, z_1: 4·ANY_KEY_CHUNKS integers
    (the verifier recomputes the commitments).  Witness-indistinguishable, its nonces from the OS CSPRNG or from
    ``rng``, a secret stream for this statement only (a replayed prover sends the same proof)."""
    if bit not in (0, 1):
        raise ValueError("a bit proof is for 0 or 1")
    return _prove_bit_any_key_with(sk.public_key, mpz(c), bit, randomness_of(sk, c, bit), context, rng)


def _prove_bit_any_key_with(
    pk: PublicKey, c: mpz, bit: int, r: mpz, context: bytes, rng: random.Random | None = None
) -> list[int]:
    """:func:`prove_bit_any_key` from the encryption's randomness r (c = g^bit·r^n)."""
    n, n2 = pk.n, pk.nsquare
    us = [c, c * (1 - n) % n2]  # c·g^-0, c·g^-1
    fake = 1 - bit
    inv_fake = gmpy2.invert(us[fake], n2)
    draw = secrets.randbits if rng is None else rng.getrandbits
    m = ANY_KEY_CHUNKS
    a: list[list[mpz]] = [[mpz(0)] * m, [mpz(0)] * m]
    e: list[list[int]] = [[0] * m, [0] * m]
    z: list[list[mpz]] = [[mpz(0)] * m, [mpz(0)] * m]
    rhos = []
    for i in range(m):
        rho, a[bit][i] = _nonce_unit(pk, False, draw, lambda: _unit_below(n, rng))
        rhos.append(rho)
        e[fake][i] = draw(ANY_KEY_CHUNK_BITS)
        z[fake][i], zn = _nonce_unit(pk, False, draw, lambda: _unit_below(n, rng))
        a[fake][i] = zn * powmod(inv_fake, e[fake][i], n2) % n2
    total = _any_key_challenge(pk, context, c, a[0], a[1])
    for i in range(m):
        e[bit][i] = (total[i] - e[fake][i]) & _CHUNK_MASK
        z[bit][i] = rhos[i] * powmod(r, e[bit][i], n) % n
    return [*e[0], *e[1], *(int(x) for x in z[0]), *(int(x) for x in z[1])]


def verify_bit_any_key(pk: PublicKey, c: int, proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (:func:`prove_bit_any_key`) shows that ``c`` is g^b·w^n with b ∈ {0, 1}, bound to
    ``context`` -- and the key's modulus has no prime factor up to 2^ANY_KEY_CHUNK_BITS (else False: the proof
    would say nothing under it)."""
    m = ANY_KEY_CHUNKS
    if isinstance(proof, (str, bytes)) or len(proof) != 4 * m:
        return False
    n, n2 = pk.n, pk.nsquare
    if not no_small_factor(n):
        return False
    ints = _integers([c, *proof])
    if ints is None:
        return False
    c, rest = ints[0], ints[1:]
    e0, e1, z0, z1 = rest[:m], rest[m : 2 * m], rest[2 * m : 3 * m], rest[3 * m :]
    if not (0 < c < n2) or gmpy2.gcd(c, n) != 1:
        return False
    if any(not 0 <= e <= _CHUNK_MASK for e in (*e0, *e1)) or any(not 0 < z < n for z in (*z0, *z1)):
        return False
    if any(gmpy2.gcd(z, n) != 1 for z in (*z0, *z1)):
        return False
    us = [c, c * (1 - n) % n2]
    inv = [gmpy2.invert(u, n2) for u in us]
    a0 = [powmod(z, n, n2) * powmod(inv[0], e, n2) % n2 for z, e in zip(z0, e0)]
    a1 = [powmod(z, n, n2) * powmod(inv[1], e, n2) % n2 for z, e in zip(z1, e1)]
    total = _any_key_challenge(pk, context, c, a0, a1)
    return all((int(x) + int(y)) & _CHUNK_MASK == t for x, y, t in zip(e0, e1, total))


# --------------------------------------------------------------------------- the owner's modulus: gcd(n, φ(n)) = 1
#: An opening c = g^m·r^n fixes m only modulo the order of g = 1 + n among Z*_(n²)'s classes modulo n-th powers,
#: which is rad(n): under a key whose modulus has a square factor (n = p^a, say) its owner opens one ciphertext to m,
#: m + p, m + 5p ... (a review, 2026-12-06: dp-aggregate's Charlie could then pass the selection's "≤ mine" check and
#: shift the revealed k_sel).  :func:`prove_modulus` shows gcd(n, φ(n)) = 1 -- so n is square-free, every opening is
#: binding modulo n and Z*_(n²) is ⟨g⟩ × the n-th powers -- by n-th roots modulo n of ``MODULUS_PROOF_ROOTS``
#: elements derived from n and the context by a hash (Goldberg, Reyzin, Sagga and Baldimtsi, "Efficient
#: noninteractive certification of RSA moduli and beyond", 2019).  If gcd(n, φ(n)) > 1, x ↦ x^n on Z*_n has a kernel
#: whose order's primes all divide n, so (with no prime factor up to 2^16: :func:`no_small_factor`) a uniform unit
#: has an n-th root with probability at most 2^-16: eight roots, 2^-128.
MODULUS_PROOF_ROOTS = ANY_KEY_CHUNKS
_MODULUS_DOMAIN = b"smcdp/zkp/modulus/v1\x00"


def _modulus_challenges(n: mpz, context: bytes) -> list[mpz]:
    """MODULUS_PROOF_ROOTS elements of Z_n from a hash of n and the context (|n| + 128 bits each, reduced mod n):
    :func:`_witness_stream`'s counter mode under a public key, the domain -- a hash anybody recomputes."""
    size = (int(n).bit_length() + CHALLENGE_BITS + 7) // 8
    return [
        mpz(int.from_bytes(_witness_stream(_MODULUS_DOMAIN, context, [n, i], size), "big")) % n
        for i in range(MODULUS_PROOF_ROOTS)
    ]


def prove_modulus(sk: PrivateKey, context: bytes) -> list[int]:
    """The n-th roots mod n of the context's challenges (deterministic: a replay sends the same): shows
    gcd(n, φ(n)) = 1 for the key's modulus, bound to ``context``."""
    n = sk.public_key.n
    phi = (sk.p - 1) * (sk.q - 1)
    if gmpy2.gcd(n, phi) != 1:  # generate_keypair and PrivateKey.from_factors refuse such keys; the constructor not
        raise ValueError("gcd(n, φ(n)) ≠ 1: this key's openings would not bind, and it has no proof")
    d = gmpy2.invert(n, phi)
    return [int(powmod(y, d, n)) for y in _modulus_challenges(n, context)]


def modulus_proof_size(key_bits: int) -> int:
    """The bytes of a :func:`prove_modulus` proof as a BigInts message, at most (for traffic envelopes)."""
    return MODULUS_PROOF_ROOTS * ((key_bits + 7) // 8 + 8) + 32


def verify_modulus(pk: PublicKey, proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (:func:`prove_modulus`) holds for ``pk``'s modulus and ``context`` and the modulus has no
    prime factor up to 2^ANY_KEY_CHUNK_BITS -- then gcd(n, φ(n)) = 1 (up to 2^-128)."""
    n = pk.n
    if isinstance(proof, (str, bytes)) or len(proof) != MODULUS_PROOF_ROOTS or not no_small_factor(n):
        return False
    roots = _integers(proof)
    if roots is None:
        return False
    for x, y in zip(roots, _modulus_challenges(n, context)):
        if not 0 < x < n or gmpy2.gcd(y, n) != 1 or powmod(x, n, n) != y:
            return False
    return True
