"""Subgroup Paillier keys (docs/crypto.md, "Subgroup keys"): every encryption path gives a ciphertext the key
decrypts with its short exponents, that phe decrypts too; randomness outside the subgroup is refused, not
decrypted to garbage; the key's structure, files and wire forms are checked on the way in."""

from __future__ import annotations

import json
import os
import random

import gmpy2
import pytest
from phe import paillier as phe_paillier

from smcdp.crypto.codec import (
    keypair_from_proto,
    keypair_to_proto,
    peer_public_key,
    public_key_from_proto,
    public_key_to_proto,
)
from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.paillier import (
    PrivateKey,
    PublicKey,
    check_key_kind,
    generate_keypair,
    load_private_key,
    save_private_key,
    subgroup_bits_for,
)
from smcdp.crypto.parallel import CryptoPool
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage, PermissionDenied
from smcdp.primitives.rng import Randomness, owned_session_key

VALUES = [0, 1, -1, 7, -123456789, 2**100 + 3, -(2**150)]


@pytest.fixture(scope="module")
def key512():
    return generate_keypair(512, allow_insecure=True, subgroup=True, rng=random.Random(5))


@pytest.fixture(scope="module")
def key1024():
    return generate_keypair(1024, allow_insecure=True, subgroup=True, rng=random.Random(6))


def test_structure_of_the_key(key512, key1024):
    for pk, sk in (key512, key1024):
        l_bits = subgroup_bits_for(pk.bits)
        ap, aq = sk.orders
        assert pk.kind == "subgroup" and pk.subgroup and pk.subgroup_bits == l_bits
        assert pk.n.bit_length() == pk.bits and pk.n == sk.p * sk.q
        for f, a in ((sk.p, ap), (sk.q, aq)):
            assert gmpy2.is_prime(a) and a.bit_length() == l_bits // 2
            assert (f - 1) % (2 * a) == 0 and gmpy2.is_prime((f - 1) // (2 * a))  # p − 1 = 2·α·p', p' prime
        hs = pk.subgroup_base
        assert gmpy2.powmod(hs, 2 * ap * aq, pk.nsquare) == 1  # h_s is in the subgroup of order 2α
        assert gmpy2.powmod(hs, 2, pk.nsquare) != 1 and gmpy2.powmod(hs, 2 * ap, pk.nsquare) != 1
        # the decryption exponents: 2α_p, 2α_q (l/2 + 1 bits) instead of p − 1, q − 1
        assert (sk.ep, sk.eq) == (2 * ap, 2 * aq) and sk.ep.bit_length() == l_bits // 2 + 1
        assert pk.obfuscation_bits == l_bits + 64
    assert (subgroup_bits_for(2048), subgroup_bits_for(3072), subgroup_bits_for(7680)) == (448, 512, 768)


def test_every_encryption_path_decrypts_and_is_plain_paillier(key512):
    pk, sk = key512
    phe_sk = sk.phe
    pool_pub = ObfuscatorPool.for_public_key(pk, capacity=4, background=False)
    pool_sk = ObfuscatorPool.for_private_key(sk, capacity=4, background=False)
    for m in VALUES:
        cts = [
            pk.raw_encrypt(m),
            sk.raw_encrypt(m),
            pk.raw_encrypt_textbook(m),
            pk.rerandomize(pk.raw_encrypt(m)),
            pk.rerandomize_textbook(sk.raw_encrypt(m)),
            pool_pub.encrypt(m),
            pool_sk.encrypt(m),
            PublicKey.from_json(pk.to_json()).raw_encrypt(m),  # a peer's copy of the key uses the same base
        ]
        for c in cts:
            assert sk.raw_decrypt_signed(c) == m
            assert phe_sk.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c), 0)) == m
    # homomorphic operations keep the randomness in the subgroup
    a, b = pk.raw_encrypt(5), sk.raw_encrypt(-9)
    assert sk.raw_decrypt_signed(pk.raw_mul(pk.raw_add(a, b), -3)) == 12
    vec = EncryptedVector.encrypt(pk, [0.5, -1.25, 3.0])
    assert vec.decrypt(sk) == pytest.approx([0.5, -1.25, 3.0])


def test_randomness_outside_the_subgroup_is_refused_not_decrypted_to_garbage(key512):
    pk, sk = key512
    c = pk.phe.encrypt(42).ciphertext(be_secure=True)  # r^n for r uniform in Z*_n: not in ⟨h_s⟩
    with pytest.raises(InvalidMessage, match="not in the subgroup"):
        sk.raw_decrypt(c)
    # the same key without its orders decrypts with p − 1 (any randomness), at the standard cost
    assert PrivateKey(pk, sk.p, sk.q).raw_decrypt_signed(c) == 42
    # a standard key's own fixed base is not the subgroup's either
    other = PublicKey(int(pk.n))
    with pytest.raises(InvalidMessage, match="not in the subgroup"):
        sk.raw_decrypt(other.raw_encrypt(3))


def test_keys_come_from_the_root_stream():
    a = generate_keypair(512, allow_insecure=True, subgroup=True, rng=random.Random(11))
    b = generate_keypair(512, allow_insecure=True, subgroup=True, rng=random.Random(11))
    assert a[0].n == b[0].n and a[0].subgroup_base == b[0].subgroup_base and a[1].orders == b[1].orders
    root = Randomness.from_seed(3)
    sk, _ = owned_session_key(root, "keyword", "alice", 512, "subgroup", allow_insecure=True)
    sk2, _ = owned_session_key(root, "keyword", "alice", 512, "subgroup", allow_insecure=True)
    std, _ = owned_session_key(root, "keyword", "alice", 512, "standard", allow_insecure=True)
    assert sk.public_key.kind == "subgroup" and sk.public_key.n == sk2.public_key.n
    assert std.public_key.kind == "standard" and std.public_key.n != sk.public_key.n
    with pytest.raises(InvalidMessage, match="agreed on a standard key"):
        owned_session_key(root, "keyword", "alice", 512, "standard", private_key=sk, allow_insecure=True)
    with pytest.raises(InvalidMessage, match="agreed on a subgroup key"):
        owned_session_key(root, "keyword", "alice", 512, "subgroup", private_key=std, allow_insecure=True)
    check_key_kind("subgroup", "x")
    with pytest.raises(InvalidMessage, match="key_kind"):
        check_key_kind("fast", "keyword parameter")


def test_key_files_keep_and_check_the_subgroup(tmp_path, key512):
    pk, sk = key512
    path = tmp_path / "sk.json"
    save_private_key(sk, path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    back = load_private_key(path, allow_insecure=True)
    assert back.orders == sk.orders and back.public_key.subgroup_base == pk.subgroup_base
    c = pk.raw_encrypt(-77)
    assert back.raw_decrypt_signed(c) == -77
    assert PublicKey.from_json(json.loads(json.dumps(pk.to_json()))).subgroup_bits == pk.subgroup_bits
    good = sk.to_json()
    bad_orders = dict(good, alpha_p=format(int(gmpy2.next_prime(sk.orders[0])), "x"))
    with pytest.raises(InvalidMessage, match="α_p"):
        PrivateKey.from_json(bad_orders, allow_insecure=True)
    x = gmpy2.mpz(3)
    bad_base = dict(good, subgroup_base=format(int(gmpy2.powmod(x, pk.n, pk.nsquare)), "x"))
    with pytest.raises(InvalidMessage, match="not in the subgroup"):
        PrivateKey.from_json(bad_base, allow_insecure=True)
    no_orders = {k: v for k, v in good.items() if k not in ("alpha_p", "alpha_q")}
    with pytest.raises(InvalidMessage, match="needs its orders"):
        PrivateKey.from_json(no_orders, allow_insecure=True)
    with pytest.raises(InvalidMessage, match="subgroup_bits"):
        PrivateKey.from_json(dict(good, subgroup_bits="448"), allow_insecure=True)
    with pytest.raises(InvalidMessage, match="l = 63"):
        PublicKey(int(pk.n), int(pk.subgroup_base), 63)
    with pytest.raises(InvalidMessage, match="unit"):
        PublicKey(int(pk.n), 1, pk.subgroup_bits)


def test_wire_forms_admit_a_subgroup_key_only_where_the_session_names_it(key512, keypair512):
    pk, sk = key512
    msg = public_key_to_proto(pk)
    assert msg.subgroup_bits == pk.subgroup_bits and msg.subgroup_base
    with pytest.raises(PermissionDenied, match="subgroup key"):
        public_key_from_proto(msg, allow_insecure=True)
    got = peer_public_key(msg, bits=512, kind="subgroup", who="alice", allow_insecure=True)
    assert got.subgroup_base == pk.subgroup_base and sk.raw_decrypt_signed(got.raw_encrypt(11)) == 11
    with pytest.raises(PermissionDenied):
        peer_public_key(msg, bits=512, kind="standard", who="alice", allow_insecure=True)
    std = public_key_to_proto(keypair512[0])
    assert not std.subgroup_base and not std.subgroup_bits
    with pytest.raises(InvalidMessage, match="alice's public key is a standard key"):
        peer_public_key(std, bits=512, kind="subgroup", who="alice", allow_insecure=True)
    msg.subgroup_bits = 7
    with pytest.raises(InvalidMessage, match="l = 7"):
        public_key_from_proto(msg, allow_insecure=True, allow_subgroup=True)
    pair = keypair_to_proto(sk)
    back = keypair_from_proto(pair, allow_insecure=True, allow_subgroup=True)
    assert back.orders == sk.orders and back.raw_decrypt_signed(pk.raw_encrypt(4)) == 4
    with pytest.raises(PermissionDenied):
        keypair_from_proto(pair, allow_insecure=True)


def test_worker_processes_use_the_keys_base(key512):
    pk, sk = key512
    with CryptoPool(pk, sk, workers=1) as pool:
        cts = pool.encrypt(VALUES)
        assert [sk.raw_decrypt_signed(c) for c in cts] == VALUES
        cts = pool.encrypt(VALUES, use_private=True)
        assert pool.decrypt(cts) == VALUES


def test_a_key_made_ahead_is_taken_only_by_a_session_of_its_kind():
    """The shelf's label names the kind: a subgroup key prepared while idle is the subgroup session's own
    (the same key it would derive), and a standard session does not take it (it drops it: the root is its)."""
    from smcdp.crypto.prepared import SHELF
    from smcdp.primitives.rng import prepare_session_keypair, session_keypair

    root = Randomness.fresh()
    SHELF.clear()
    try:
        prepare_session_keypair(
            root, "keyword", "alice", 512, uses=4, obfuscators=4, allow_insecure=True, subgroup=True
        )
        std, pool = session_keypair(root, "keyword", "alice", 512, allow_insecure=True)
        assert pool is None and std.public_key.kind == "standard" and len(SHELF) == 0  # dropped, not taken
        root = Randomness.fresh()
        prepare_session_keypair(
            root, "keyword", "alice", 512, uses=4, obfuscators=4, allow_insecure=True, subgroup=True
        )
        sk, pool = session_keypair(root, "keyword", "alice", 512, allow_insecure=True, subgroup=True)
        assert pool is not None and sk.public_key.kind == "subgroup"
        again, _ = owned_session_key(root, "keyword", "alice", 512, "subgroup", allow_insecure=True)  # derived now
        assert again.public_key.n == sk.public_key.n and again.orders == sk.orders
        assert sk.raw_decrypt_signed(pool.encrypt(-3)) == -3
        pool.close()
    finally:
        SHELF.clear()


def test_degenerate_or_short_subgroups_are_refused(key512, keypair2048):
    """A base h_s with h_s² ≡ 1 mod p or q (−1, or ±1 mod one prime) makes encryption deterministic there and
    can factor n; a 2048-bit key with a short α_p is factored by a search for it.  Both are refused from a
    peer and from a key file; orders for a standard public key are refused too."""
    pk, sk = key512
    n, n2 = int(pk.n), int(pk.nsquare)
    p2, q2 = int(sk.p) ** 2, int(sk.q) ** 2
    a = int(pk.subgroup_base) % p2
    crt = a + p2 * int((1 - a) * gmpy2.invert(p2, q2) % q2)  # h_s mod p², 1 mod q²
    assert crt % q2 == 1 and crt % p2 == a
    for bad in (n2 - 1, crt):
        with pytest.raises(InvalidMessage, match="square"):
            PublicKey(n, bad, pk.subgroup_bits)
        with pytest.raises(InvalidMessage, match="square"):
            PrivateKey.from_json(dict(sk.to_json(), subgroup_base=format(bad, "x")), allow_insecure=True)
    big = keypair2048[0]
    with pytest.raises(InvalidMessage, match="at least 448"):
        PublicKey(int(big.n), 3, 64)
    with pytest.raises(InvalidMessage, match="standard public key"):
        PrivateKey(PublicKey(n), sk.p, sk.q, sk.orders)
    assert PublicKey(n) != pk and PublicKey.from_json(pk.to_json()) == pk
    from smcdp.errors import InsecureParameters

    with pytest.raises(InsecureParameters, match="too small for a subgroup key"):
        generate_keypair(128, allow_insecure=True, subgroup=True)


def test_a_session_of_the_other_kind_stops_what_was_prepared_for_its_root():
    """The party prepared a standard key for its next root (its last session's kind); a subgroup session
    takes that root: the standard job is dropped and stopped, not left filling obfuscators for nobody."""
    from smcdp.crypto.prepared import SHELF
    from smcdp.primitives.rng import prepare_session_keypair, session_keypair

    root = Randomness.fresh()
    SHELF.clear()
    try:
        prepare_session_keypair(root, "keyword", "alice", 512, uses=4, obfuscators=4000, allow_insecure=True)
        assert len(SHELF) == 1
        sk, pool = session_keypair(root, "keyword", "alice", 512, allow_insecure=True, subgroup=True)
        assert pool is None and sk.public_key.kind == "subgroup" and len(SHELF) == 0
    finally:
        SHELF.clear()
