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
