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

Challenges are ``CHALLENGE_BITS`` = 128-bit Fiat–Shamir hashes of the
statement and a caller-supplied context (session, purpose), so a proof cannot
be replayed into another session.  Soundness needs 2^128 below the smallest
prime factor of n: true for every key a party accepts outside tests (primes
of ≥ 1024 bits), and for the test keys too (≥ 128-bit primes from 256-bit
moduli up).  The proofs' nonces come from
``secrets`` -- like encryption obfuscators, never from a seedable generator:
a predictable nonce would reveal which branch of an OR-proof is real.
"""

from __future__ import annotations

import hashlib
import random
import secrets
from collections.abc import Sequence

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.paillier import PrivateKey, PublicKey

CHALLENGE_BITS = 128
_MASK = (1 << CHALLENGE_BITS) - 1


def randomness_of(sk: PrivateKey, c: int, m: int) -> mpz:
    """The r of ``c = g^m · r^n mod n²`` (the key owner can recover it: n is invertible mod φ(n))."""
    pk = sk.public_key
    n, n2 = pk.n, pk.nsquare
    rn = mpz(c) * (1 - mpz(m) * n) % n2 % n  # g^-m = 1 - m·n mod n², so c·g^-m = r^n
    phi = (sk.p - 1) * (sk.q - 1)
    return gmpy2.powmod(rn, gmpy2.invert(n, phi), n)


def _unit_below(n: mpz, rng: random.Random | None = None) -> mpz:
    below = secrets.randbelow if rng is None else rng.randrange
    while True:
        x = mpz(below(int(n) - 1) + 1)
        if gmpy2.gcd(x, n) == 1:
            return x


def _challenge(pk: PublicKey, context: bytes, *values: int) -> int:
    h = hashlib.sha256()
    h.update(b"smcdp/zkp/v1\x00" + len(context).to_bytes(4, "big") + context)
    h.update(pk.fingerprint)
    for v in values:
        b = int(v).to_bytes((int(v).bit_length() + 7) // 8 or 1, "big")
        h.update(len(b).to_bytes(4, "big") + b)
    return int.from_bytes(h.digest(), "big") & _MASK


def _prove_bit_with(
    pk: PublicKey, c: mpz, bit: int, r: mpz, context: bytes, rng: random.Random | None = None
) -> list[int]:
    n, n2 = pk.n, pk.nsquare
    us = [mpz(c), mpz(c) * (1 - n) % n2]  # c·g^-0, c·g^-1
    fake = 1 - bit
    a, e, z = [mpz(0), mpz(0)], [0, 0], [mpz(0), mpz(0)]
    rho = _unit_below(n, rng)
    a[bit] = gmpy2.powmod(rho, n, n2)
    e[fake] = secrets.randbits(CHALLENGE_BITS) if rng is None else rng.getrandbits(CHALLENGE_BITS)
    z[fake] = _unit_below(n, rng)
    a[fake] = gmpy2.powmod(z[fake], n, n2) * gmpy2.powmod(gmpy2.invert(us[fake], n2), e[fake], n2) % n2
    total = _challenge(pk, context, c, a[0], a[1])
    e[bit] = (total - e[fake]) & _MASK
    z[bit] = rho * gmpy2.powmod(r, e[bit], n) % n
    return [int(a[0]), int(a[1]), e[0], int(z[0]), int(z[1])]


def verify_bit(pk: PublicKey, c: int, proof: Sequence[int], context: bytes) -> bool:
    """True iff ``proof`` (5 integers) shows that ``c`` encrypts 0 or 1 (bound to ``context``)."""
    if len(proof) != 5:
        return False
    c = mpz(c)
    n, n2 = pk.n, pk.nsquare
    a0, a1, e0, z0, z1 = (mpz(x) for x in proof)
    if not (0 < a0 < n2 and 0 < a1 < n2 and 0 < z0 < n and 0 < z1 < n and 0 <= e0 <= _MASK):
        return False
    if gmpy2.gcd(a0 * a1 % n, n) != 1 or gmpy2.gcd(z0 * z1 % n, n) != 1:
        return False
    e1 = (_challenge(pk, context, c, a0, a1) - int(e0)) & _MASK
    us = [mpz(c), mpz(c) * (1 - n) % n2]
    return (
        gmpy2.powmod(z0, n, n2) == a0 * gmpy2.powmod(us[0], e0, n2) % n2
        and gmpy2.powmod(z1, n, n2) == a1 * gmpy2.powmod(us[1], e1, n2) % n2
    )


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
    return mpz(c) % n2 == (1 + m * n) * gmpy2.powmod(r, n, n2) % n2


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
