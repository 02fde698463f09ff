"""Paillier keys a deviating participant can make for a key he owns: well formed in size, not in structure."""

from __future__ import annotations

import random

import gmpy2

from smcdp.crypto.paillier import PrivateKey, PublicKey


def key_with_a_small_factor(bits: int, seed: int) -> PrivateKey:
    """A key pair whose modulus has the usual size and a 13-bit prime factor (and gcd(n, φ(n)) = 1, so that it
    decrypts as any key does): a one-challenge bit proof under it passes for a non-bit after about 2^13 hashes
    (tests/unit/crypto/test_crafted_modulus.py)."""
    rng = random.Random(seed)
    small = gmpy2.next_prime(4096 + rng.randrange(4096))
    while True:
        q = gmpy2.next_prime(gmpy2.mpz(rng.getrandbits(bits - 13)) | (1 << (bits - 14)))
        n = small * q
        if n.bit_length() == bits and gmpy2.gcd(n, (small - 1) * (q - 1)) == 1:
            return PrivateKey.from_factors(PublicKey(int(n)), int(small), int(q))
