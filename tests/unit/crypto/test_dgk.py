"""The DGK scheme: key generation, encryption, zero test, homomorphism, (de)serialisation, validation."""

from __future__ import annotations

import secrets

import gmpy2
import pytest

from smcdp.crypto import dgk
from smcdp.errors import InsecureParameters, InvalidMessage
from smcdp.v1 import messages_pb2


def test_key_structure(small_key):
    k, pub = small_key, small_key.public
    assert pub.n == k.p * k.q and pub.n.bit_length() == 512
    assert pub.u == 131 and gmpy2.is_prime(pub.u)
    assert k.vp.bit_length() == 32 and k.vq.bit_length() == 32
    assert (k.p - 1) % (pub.u * k.vp) == 0 and (k.q - 1) % (pub.u * k.vq) == 0
    # g has order u*vp*vq and h has order vp*vq modulo n
    order = pub.u * k.vp * k.vq
    assert gmpy2.powmod(pub.g, order, pub.n) == 1
    for f in (pub.u, k.vp, k.vq):
        assert gmpy2.powmod(pub.g, order // f, pub.n) != 1
    assert gmpy2.powmod(pub.h, k.vp * k.vq, pub.n) == 1
    assert gmpy2.powmod(pub.h, k.vp, pub.n) != 1 and gmpy2.powmod(pub.h, k.vq, pub.n) != 1
    # the full validator accepts it
    dgk.DGKPrivateKey.from_values(k.p, k.q, k.vp, k.vq, pub.g, pub.h, pub.u, pub.t, allow_insecure=True)


def test_encrypt_decrypt_all_plaintexts(small_key):
    k, pub = small_key, small_key.public
    for m in range(pub.u):
        c_pub = pub.encrypt(m)
        c_priv = k.encrypt(m)
        assert k.decrypt(c_pub) == m and k.decrypt(c_priv) == m
        assert k.zero_test(c_pub) == (m == 0) and k.zero_test(c_priv) == (m == 0)
    assert k.decrypt(pub.encrypt(-1)) == pub.u - 1
    # probabilistic: two encryptions of the same value differ
    assert pub.encrypt(5) != pub.encrypt(5) and k.encrypt(5) != k.encrypt(5)


def test_homomorphic_operations(small_key):
    k, pub = small_key, small_key.public
    u = pub.u
    for _ in range(20):
        a, b, s = secrets.randbelow(u), secrets.randbelow(u), secrets.randbelow(3 * u) - u
        ca, cb = pub.encrypt(a), k.encrypt(b)
        assert k.decrypt(pub.add(ca, cb)) == (a + b) % u
        assert k.decrypt(pub.add_plain(ca, s)) == (a + s) % u
        assert k.decrypt(pub.neg(ca)) == (-a) % u
        assert k.decrypt(pub.mul_plain(ca, s)) == (a * s) % u
        rr = pub.rerandomize(ca)
        assert rr != ca and k.decrypt(rr) == a


def test_fixed_base_matches_powmod(small_key):
    pub = small_key.public
    fb = dgk.FixedBase(pub.h, pub.n, 100)
    for e in [0, 1, 255, 256, 2**99 + 12345, 2**100 - 1, 2**150 + 7]:  # last one exceeds max_bits
        assert fb.pow(e) == gmpy2.powmod(pub.h, e, pub.n)
    assert fb.pow(-5) == gmpy2.invert(gmpy2.powmod(pub.h, 5, pub.n), pub.n)


def test_zero_test_rejects_non_subgroup_elements(small_key):
    k = small_key
    bad = 0
    for _ in range(30):
        c = 2 + secrets.randbelow(int(k.n) - 3)
        try:
            k.zero_test(c)
        except InvalidMessage:
            bad += 1
    assert bad == 30  # a random unit of Z_n is almost never in the order-u*vp subgroup mod p
    with pytest.raises(InvalidMessage):
        k.decrypt(k.p)  # 0 mod p


def test_public_key_roundtrip_and_validation(small_key):
    pub = small_key.public
    msg = pub.to_proto()
    back = dgk.DGKPublicKey.from_proto(msg, allow_insecure=True)
    assert back.cache_key() == pub.cache_key() and back.fingerprint() == pub.fingerprint()
    # refused without the opt-in: 512 bits and t = 32 are below the floors
    with pytest.raises(InsecureParameters, match="2048"):
        dgk.DGKPublicKey.from_proto(msg)

    def mutate(i, value):
        m = messages_pb2.BigInts()
        m.CopyFrom(msg)
        m.magnitude[i] = dgk.int_to_bytes(value)
        return m

    with pytest.raises(InvalidMessage, match="u ="):
        dgk.DGKPublicKey.from_proto(mutate(3, 133), allow_insecure=True)  # not prime
    with pytest.raises(InvalidMessage, match="out of range"):
        dgk.DGKPublicKey.from_proto(mutate(1, pub.n + 5), allow_insecure=True)
    with pytest.raises(InvalidMessage, match="shares a factor"):
        dgk.DGKPublicKey.from_proto(mutate(2, small_key.p), allow_insecure=True)
    with pytest.raises(InvalidMessage, match="composite"):
        dgk.DGKPublicKey.from_proto(mutate(0, gmpy2.next_prime(pub.n)), allow_insecure=True)
    with pytest.raises(InvalidMessage, match="5 big integers"):
        dgk.DGKPublicKey.from_proto(messages_pb2.BigInts(magnitude=msg.magnitude[:4]), allow_insecure=True)
    m = messages_pb2.BigInts()
    m.CopyFrom(msg)
    m.negative[1] = True
    with pytest.raises(InvalidMessage, match="negative"):
        dgk.DGKPublicKey.from_proto(m, allow_insecure=True)
    m = mutate(0, 0)
    m.magnitude[0] = b"\x00" + msg.magnitude[0]
    with pytest.raises(InvalidMessage, match="leading zero"):
        dgk.DGKPublicKey.from_proto(m, allow_insecure=True)


def test_private_key_roundtrip_and_validation(small_key):
    k = small_key
    back = dgk.DGKPrivateKey.from_bytes(k.to_bytes(), allow_insecure=True)
    c = k.public.encrypt(7)
    assert back.decrypt(c) == 7
    with pytest.raises(InsecureParameters):
        dgk.DGKPrivateKey.from_bytes(k.to_bytes())
    pub = k.public
    with pytest.raises(InvalidMessage, match="order"):
        # h replaced by g: wrong order
        dgk.DGKPrivateKey.from_values(
            k.p, k.q, k.vp, k.vq, pub.g, pub.g * pub.g % pub.n, pub.u, pub.t, allow_insecure=True
        )
    with pytest.raises(InvalidMessage, match="divide"):
        dgk.DGKPrivateKey.from_values(k.p, k.q, k.vq, k.vp, pub.g, pub.h, pub.u, pub.t, allow_insecure=True)
    with pytest.raises(InvalidMessage, match="parse"):
        dgk.DGKPrivateKey.from_bytes(b"\xff\xff\xff", allow_insecure=True)


def test_keygen_floors():
    with pytest.raises(InsecureParameters):
        dgk.generate_keypair(1024)
    with pytest.raises(InsecureParameters):
        dgk.generate_keypair(2048, 128)
    with pytest.raises(InvalidMessage):
        dgk.generate_keypair(512, 32, u=127, max_ell=128, allow_insecure=True)  # u <= ell + 2
    with pytest.raises(InvalidMessage):
        dgk.generate_keypair(512, 240, allow_insecure=True)  # t too large for n


def test_default_key_parameters():
    k = dgk.generate_keypair()
    assert k.n.bit_length() == 2048 and k.public.t == 224 and k.vp.bit_length() == 224
    assert k.public.u == 263  # smallest prime > 256 + 2
    assert k.public.r_bits == 560
    dgk.DGKPublicKey.from_proto(k.public.to_proto())  # accepted without any opt-in
    c = k.public.encrypt(0)
    assert k.zero_test(c) and not k.zero_test(k.public.encrypt(1))


def test_ciphertext_parsing(small_key):
    pub = small_key.public
    c = pub.encrypt(3)
    assert pub.ciphertext_from_bytes(pub.ciphertext_to_bytes(c)) == c
    with pytest.raises(InvalidMessage, match="bytes"):
        pub.ciphertext_from_bytes(pub.ciphertext_to_bytes(c)[1:])
    with pytest.raises(InvalidMessage, match="range"):
        pub.ciphertext_from_bytes(b"\x00" * pub.byte_length)
    with pytest.raises(InvalidMessage, match="range"):
        pub.ciphertext_from_bytes(pub.ciphertext_to_bytes(pub.n))
    with pytest.raises(InvalidMessage, match="unit"):
        pub.ciphertext_from_bytes(pub.ciphertext_to_bytes(small_key.p))
