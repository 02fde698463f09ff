"""The process pool yields ordinary Paillier ciphertexts and keeps order."""

import asyncio

import pytest
from phe import paillier as phe_paillier

from smcdp.crypto.parallel import CryptoPool
from smcdp.errors import CryptoOverflow


def test_pool_encrypts_and_decrypts_in_order(keypair512):
    pk, sk = keypair512
    values = list(range(-20, 21)) + [2**100, -(2**100)]
    with CryptoPool(pk, sk, workers=2) as pool:
        cts = pool.encrypt(values)
        cts_priv = pool.encrypt(values, use_private=True)
        assert [sk.raw_decrypt_signed(c) for c in cts] == values
        assert [sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, c)) for c in cts_priv] == values
        assert pool.decrypt(cts_priv) == values
        # the event-loop-friendly form gives the same answer
        assert asyncio.run(pool.adecrypt(cts)) == values
        with pytest.raises(CryptoOverflow):
            pool.encrypt([pk.max_int + 1])


def test_public_only_pool_cannot_decrypt(keypair512):
    pk, sk = keypair512
    with CryptoPool(pk, workers=1) as pool:
        cts = pool.encrypt([1, 2, 3])
        assert [sk.raw_decrypt_signed(c) for c in cts] == [1, 2, 3]
        with pytest.raises(ValueError):
            pool.decrypt(cts)
        with pytest.raises(ValueError):
            pool.encrypt([1], use_private=True)
