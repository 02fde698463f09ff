"""Bit proofs that hold whatever the prover's modulus (smcdp.crypto.zkp.prove_bit_any_key): dp-aggregate's Charlie
proves his indicator entries under his own key ζ, which nobody but him has seen the factors of."""

from __future__ import annotations

import random

import gmpy2
import pytest
from gmpy2 import mpz

from smcdp.crypto import zkp
from smcdp.crypto.codec import bigints
from smcdp.crypto.paillier import PublicKey, generate_keypair
from smcdp.crypto.zkp import (
    ANY_KEY_CHUNK_BITS,
    ANY_KEY_CHUNKS,
    bit_proof_any_key_size,
    no_small_factor,
    prove_bit_any_key,
    verify_bit_any_key,
)
from tests.unit.crypto.test_crafted_modulus import _Chi, _crafted_modulus, _order_r_element


@pytest.fixture(scope="module")
def key():
    return generate_keypair(768, allow_insecure=True, rng=random.Random(3))


@pytest.mark.parametrize("bit", [0, 1])
def test_a_bit_verifies_for_its_ciphertext_and_context_only(key, bit):
    pk, sk = key
    c = pk.raw_encrypt_textbook(bit)
    proof = prove_bit_any_key(sk, c, bit, b"ctx")
    assert len(proof) == 4 * ANY_KEY_CHUNKS
    assert verify_bit_any_key(pk, c, proof, b"ctx")
    assert not verify_bit_any_key(pk, c, proof, b"other")
    assert not verify_bit_any_key(pk, pk.rerandomize_textbook(c), proof, b"ctx")
    assert len(bigints(proof).SerializeToString()) <= bit_proof_any_key_size(pk.bits)


def test_a_non_bit_has_no_proof(key):
    pk, sk = key
    for m in (2, -1, 1 << 40):
        c = pk.raw_encrypt_textbook(m)
        assert not verify_bit_any_key(pk, c, prove_bit_any_key(sk, c, 1, b"ctx"), b"ctx")
        assert not verify_bit_any_key(pk, c, prove_bit_any_key(sk, c, 0, b"ctx"), b"ctx")


def test_every_chunk_is_checked(key):
    pk, sk = key
    c = pk.raw_encrypt_textbook(1)
    proof = prove_bit_any_key(sk, c, 1, b"ctx")
    m = ANY_KEY_CHUNKS
    for i in range(4 * m):
        bad = list(proof)
        bad[i] = bad[i] + 1 if i >= 2 * m else (bad[i] + 1) % (1 << ANY_KEY_CHUNK_BITS)
        assert not verify_bit_any_key(pk, c, bad, b"ctx"), i
    # a shift of e_0 by one in a chunk and of e_1 by minus one keeps the chunk's sum: the responses no longer fit
    shifted = list(proof)
    shifted[0], shifted[m] = (proof[0] + 1) % (1 << 16), (proof[m] - 1) % (1 << 16)
    assert not verify_bit_any_key(pk, c, shifted, b"ctx")


def test_malformed_proofs_are_false_not_errors(key):
    pk, sk = key
    c = pk.raw_encrypt_textbook(0)
    proof = prove_bit_any_key(sk, c, 0, b"ctx")
    m = ANY_KEY_CHUNKS
    for bad in (proof[:-1], [*proof, 1], "x" * len(proof), [*proof[:-1], "1"], [*proof[:-1], 0], [*proof[:-1], pk.n]):
        assert not verify_bit_any_key(pk, c, bad, b"ctx")
    assert not verify_bit_any_key(pk, c, [*proof[:m], *proof[m : 2 * m - 1], 1 << 16, *proof[2 * m :]], b"ctx")
    assert not verify_bit_any_key(pk, 0, proof, b"ctx")
    assert not verify_bit_any_key(pk, pk.n, proof, b"ctx")  # not a unit
    with pytest.raises(ValueError):
        prove_bit_any_key(sk, c, 2, b"ctx")


def test_a_modulus_with_a_small_prime_factor_is_refused_whatever_the_proof(monkeypatch):
    """The crafted ζ of test_crafted_modulus (n = p·q·r, r | p − 1, r of 12 bits): an honest encryption of 1 with an
    honest proof (made from its randomness) is refused because n has a prime factor below 2^16 -- the only reason:
    with the trial division switched off the same proof verifies."""
    rng = random.Random(11)
    n, *_ = _crafted_modulus(768, 12, rng)
    pk = PublicKey(int(n))
    assert not no_small_factor(n)
    rand = mpz(rng.randrange(2, int(n)))
    c = (1 + n) * gmpy2.powmod(rand, n, pk.nsquare) % pk.nsquare  # g·rand^n: an honest encryption of 1
    proof = zkp._prove_bit_any_key_with(pk, c, 1, rand, b"ctx")
    assert not verify_bit_any_key(pk, c, proof, b"ctx")
    monkeypatch.setattr(zkp, "no_small_factor", lambda n: True)
    assert verify_bit_any_key(pk, c, proof, b"ctx")


def test_the_crafted_entry_cannot_be_proven_a_bit_once_the_challenge_is_chunked(monkeypatch):
    """The attack of test_crafted_modulus against the chunked proof, trial division switched off (so that a prime r
    of 6 bits stands in for one above 2^16): the entry g·y, y of order r and χ(y) ≠ 1, has an answer in a chunk only
    where that chunk's challenge to the real branch is ≡ 0 mod r.  Charlie grinds as before, and every attempt goes
    to the verifier: the one-chunk condition that sufficed against the 128-bit proof is met within the 8·r tries,
    no attempt verifies (all eight chunks at once: about r^-8 a try)."""
    monkeypatch.setattr(zkp, "no_small_factor", lambda n: True)
    rng = random.Random(11)
    n, p, q, r = _crafted_modulus(768, 6, rng)
    pk = PublicKey(int(n))
    n2 = pk.nsquare
    y = _order_r_element(n, p, q, r, rng)
    assert _Chi(p, r)(y) != 1
    u = (1 + n) * y % n2
    m, mask = ANY_KEY_CHUNKS, (1 << ANY_KEY_CHUNK_BITS) - 1
    inv_u = gmpy2.invert(u, n2)
    e_fake = [rng.getrandbits(ANY_KEY_CHUNK_BITS) for _ in range(m)]
    z_fake = [mpz(rng.randrange(2, int(n))) for _ in range(m)]
    a_fake = [gmpy2.powmod(z, n, n2) * gmpy2.powmod(inv_u, e, n2) % n2 for z, e in zip(z_fake, e_fake)]
    rho = [mpz(rng.randrange(2, int(n))) for _ in range(m)]
    a_real = [gmpy2.powmod(x, n, n2) for x in rho]
    step = mpz(rng.randrange(2, int(n)))
    step_n = gmpy2.powmod(step, n, n2)
    one_chunk_met, verified = False, 0
    for _ in range(8 * int(r)):
        total = zkp._any_key_challenge(pk, b"ctx", u, a_fake, a_real)
        e_real = [(t - f) & mask for t, f in zip(total, e_fake)]
        one_chunk_met |= e_real[0] % r == 0
        # the cheat's answer (z = ρ: right in every chunk whose challenge is ≡ 0 mod r, since y^r = 1)
        proof = [*e_fake, *e_real, *(int(z) for z in z_fake), *(int(x) for x in rho)]
        verified += verify_bit_any_key(pk, u, proof, b"ctx")
        a_real[0], rho[0] = a_real[0] * step_n % n2, rho[0] * step % n
    assert one_chunk_met
    assert verified == 0


def test_the_modulus_proof_verifies_for_a_key_and_its_context_only(key):
    pk, sk = key
    roots = zkp.prove_modulus(sk, b"ctx")
    assert len(roots) == zkp.MODULUS_PROOF_ROOTS and roots == zkp.prove_modulus(sk, b"ctx")  # deterministic
    assert zkp.verify_modulus(pk, roots, b"ctx")
    assert not zkp.verify_modulus(pk, roots, b"other")
    other_pk, _ = generate_keypair(768, allow_insecure=True, rng=random.Random(4))
    assert not zkp.verify_modulus(other_pk, roots, b"ctx")
    for bad in (roots[:-1], [*roots, 1], [*roots[:-1], 0], [*roots[:-1], pk.n], [*roots[:-1], "1"], "x" * 8):
        assert not zkp.verify_modulus(pk, bad, b"ctx")


def _prime_power_key(rng: random.Random) -> tuple[PublicKey, mpz]:
    """n = p^3, p a prime of 256 bits (above 2^16): square factors, gcd(n, φ(n)) = p."""
    while True:
        p = mpz(rng.getrandbits(256)) | (1 << 255) | 1
        if gmpy2.is_prime(p, 30):
            return PublicKey(int(p**3)), p


def test_under_a_prime_power_modulus_an_opening_is_not_binding_and_the_modulus_proof_fails():
    """What a review found (2026-12-06): with n = p^3 the owner opens one ciphertext to two plaintexts that differ
    mod n -- g's class modulo n-th powers has order p, not n -- so an opening under such a key proves nothing mod n.
    The modulus proof is what refuses such a key: the owner's best roots do not verify (a uniform unit is an n-th
    power mod n with probability 1/p²)."""
    rng = random.Random(8)
    pk, p = _prime_power_key(rng)
    n, n2 = pk.n, pk.nsquare
    assert no_small_factor(n)
    w = mpz(1 + p)  # w^n = 1 + p^4·k mod n² = g^j with j = p·k mod p^3: g^j is an n-th power
    u = gmpy2.powmod(w, n, n2)
    assert (u - 1) % n == 0
    j = (u - 1) // n % n
    assert j % n != 0
    m, r = 12345, mpz(rng.randrange(2, int(n)))
    c = (1 + m * n) * gmpy2.powmod(r, n, n2) % n2
    r2 = r * gmpy2.invert(w, n) % n  # c = g^(m + j)·(r/w)^n
    assert zkp.verify_opening(pk, c, m, int(r)) and zkp.verify_opening(pk, c, int((m + j) % n), int(r2))
    # the owner's roots: y^d with d inverting n/g modulo λ/g (g = gcd(n, λ), λ = p²(p − 1)) -- right only for y in
    # the image of x ↦ x^n, which a hash hits with probability 1/p²
    lam = p**2 * (p - 1)
    g = gmpy2.gcd(n, lam)
    d = gmpy2.invert(n // g, lam // g)
    roots = [int(gmpy2.powmod(y, d, n)) for y in zkp._modulus_challenges(n, b"ctx")]
    assert not zkp.verify_modulus(pk, roots, b"ctx")


def test_no_modulus_proof_for_a_key_whose_n_shares_a_factor_with_phi():
    """A PrivateKey built by its constructor (which, unlike from_factors, does not check gcd(n, φ(n))) with p | q − 1:
    the prover says why instead of failing inside gmpy2."""
    rng = random.Random(9)
    while True:
        p = gmpy2.next_prime(mpz(rng.getrandbits(128)) | (1 << 127))
        q = 2 * p * mpz(rng.getrandbits(250)) + 1
        if gmpy2.is_prime(q, 30):
            break
    sk = zkp.PrivateKey(PublicKey(int(p * q)), p, q)
    with pytest.raises(ValueError, match="gcd"):
        zkp.prove_modulus(sk, b"ctx")
