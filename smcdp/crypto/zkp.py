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
import secrets
from typing import Sequence

import gmpy2
from gmpy2 import mpz

from smcdp.crypto.paillier import PrivateKey, PublicKey

CHALLENGE_BITS = 128
_MASK = (1 << CHALLENGE_BITS) - 1


def randomness_of(sk: PrivateKey, c: int, m: int) -> mpz:
    """The r of ``c = g^m · r^n mod n²`` (the key owner can recover it: n is invertible mod φ(n))."""
    pk = sk.public_key
    n, n2 = pk.n, pk.nsquare
    rn = mpz(c) * (1 - mpz(m) * n) % n2 % n          # g^-m = 1 - m·n mod n², so c·g^-m = r^n
    phi = (sk.p - 1) * (sk.q - 1)
    return gmpy2.powmod(rn, gmpy2.invert(n, phi), n)


def _unit_below(n: mpz) -> mpz:
    while True:
        x = mpz(secrets.randbelow(int(n) - 1) + 1)
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


def _prove_bit(pk: PublicKey, c: mpz, bit: int, r: mpz, context: bytes) -> list[int]:
    n, n2 = pk.n, pk.nsquare
    us = [mpz(c), mpz(c) * (1 - n) % n2]               # c·g^-0, c·g^-1
    fake = 1 - bit
    a, e, z = [mpz(0), mpz(0)], [0, 0], [mpz(0), mpz(0)]
    rho = _unit_below(n)
    a[bit] = gmpy2.powmod(rho, n, n2)
    e[fake] = secrets.randbits(CHALLENGE_BITS)
    z[fake] = _unit_below(n)
    a[fake] = gmpy2.powmod(z[fake], n, n2) * gmpy2.powmod(gmpy2.invert(us[fake], n2), e[fake], n2) % n2
    total = _challenge(pk, context, c, a[0], a[1])
    e[bit] = (total - e[fake]) & _MASK
    z[bit] = rho * gmpy2.powmod(r, e[bit], n) % n
    return [int(a[0]), int(a[1]), e[0], int(z[0]), int(z[1])]


def _verify_bit(pk: PublicKey, c: mpz, proof: Sequence[int], context: bytes) -> bool:
    n, n2 = pk.n, pk.nsquare
    a0, a1, e0, z0, z1 = (mpz(x) for x in proof)
    if not (0 < a0 < n2 and 0 < a1 < n2 and 0 < z0 < n and 0 < z1 < n and 0 <= e0 <= _MASK):
        return False
    if gmpy2.gcd(a0 * a1 % n, n) != 1 or gmpy2.gcd(z0 * z1 % n, n) != 1:
        return False
    e1 = (_challenge(pk, context, c, a0, a1) - int(e0)) & _MASK
    us = [mpz(c), mpz(c) * (1 - n) % n2]
    return (gmpy2.powmod(z0, n, n2) == a0 * gmpy2.powmod(us[0], e0, n2) % n2
            and gmpy2.powmod(z1, n, n2) == a1 * gmpy2.powmod(us[1], e1, n2) % n2)


def prove_one_hot(sk: PrivateKey, cts: Sequence[int], hot: int, context: bytes) -> list[int]:
    """Proof that ``cts`` (under ``sk``'s public key) encrypt the indicator of position ``hot``.

    Returns 5 integers per ciphertext and then R, the opening of their product.
    """
    pk = sk.public_key
    proof: list[int] = []
    for k, c in enumerate(cts):
        bit = 1 if k == hot else 0
        proof += _prove_bit(pk, mpz(c), bit, randomness_of(sk, c, bit), context + k.to_bytes(4, "big"))
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
        if not _verify_bit(pk, mpz(c), proof[5 * k:5 * k + 5], context + k.to_bytes(4, "big")):
            return False
    n, n2 = pk.n, pk.nsquare
    R = mpz(proof[-1])
    if not 0 < R < n or gmpy2.gcd(R, n) != 1:
        return False
    product = mpz(1)
    for c in cts:
        product = product * mpz(c) % n2
    return product == (1 + n) * gmpy2.powmod(R, n, n2) % n2
