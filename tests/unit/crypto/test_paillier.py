"""Paillier core: key floor, key files, encryption paths, vectors, validation, overflow."""

import os
import stat

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from phe import paillier as phe_paillier

from smcdp.crypto import modexp
from smcdp.crypto import paillier as P
from smcdp.crypto.codec import public_key_from_proto, public_key_to_proto
from smcdp.crypto.encoding import Packing, decode_fixed, encode_fixed, int_to_bytes
from smcdp.crypto.modexp import multi_exp
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InsecureParameters, InvalidMessage
from tests.conftest import _keypair


def test_key_floor_refuses_small_keys_without_opt_in():
    with pytest.raises(InsecureParameters, match="2048"):
        P.generate_keypair(1024)
    pk, _sk = P.generate_keypair(512, allow_insecure=True)
    assert pk.bits == 512


def test_default_key_size_is_3072():
    assert P.DEFAULT_KEY_BITS == 3072


def test_key_files_roundtrip_and_private_mode(tmp_path, keypair512):
    pk, sk = keypair512
    P.save_public_key(pk, tmp_path / "k.pub")
    P.save_private_key(sk, tmp_path / "k.key")
    assert stat.S_IMODE(os.stat(tmp_path / "k.key").st_mode) == 0o600
    assert P.load_public_key(tmp_path / "k.pub", allow_insecure=True) == pk
    sk2 = P.load_private_key(tmp_path / "k.key", allow_insecure=True)
    assert sk2.raw_decrypt_signed(pk.raw_encrypt(-42)) == -42
    # without the opt-in a small stored key is refused too
    with pytest.raises(InsecureParameters):
        P.load_private_key(tmp_path / "k.key")


def test_private_key_file_readable_by_others_is_refused(tmp_path, keypair512):
    _, sk = keypair512
    P.save_private_key(sk, tmp_path / "k.key")
    os.chmod(tmp_path / "k.key", 0o644)
    with pytest.raises(InvalidMessage, match="chmod 600"):
        P.load_private_key(tmp_path / "k.key", allow_insecure=True)


def test_bad_key_files(tmp_path):
    (tmp_path / "x").write_text("{not json")
    with pytest.raises(InvalidMessage):
        P.load_public_key(tmp_path / "x")
    (tmp_path / "y").write_text('{"kind": "something-else"}')
    with pytest.raises(InvalidMessage):
        P.load_public_key(tmp_path / "y")
    with pytest.raises(InvalidMessage):
        P.load_public_key(tmp_path / "missing")


@settings(max_examples=60, deadline=None)
@given(m=st.integers(min_value=-(2**200), max_value=2**200), bits=st.sampled_from([512, 1024]))
def test_every_encryption_path_is_plain_paillier(m, bits):
    """Fixed-base, CRT and textbook ciphertexts decrypt identically, also with plain phe."""
    pk, sk = _keypair(bits)
    for c in (pk.raw_encrypt(m), sk.raw_encrypt(m), (1 + pk.n * (m % pk.n)) * pk.slow_obfuscator() % pk.nsquare):
        assert sk.raw_decrypt_signed(c) == m
        assert sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c))) == m
    # and what phe encrypts, we decrypt
    assert sk.raw_decrypt_signed(pk.phe.encrypt(m).ciphertext(be_secure=True)) == m


def test_encryption_is_randomised(keypair512):
    pk, sk = keypair512
    assert pk.raw_encrypt(5) != pk.raw_encrypt(5)
    assert sk.raw_encrypt(5) != sk.raw_encrypt(5)


def test_obfuscator_is_an_nth_residue(keypair512):
    pk, sk = keypair512
    r = pk.obfuscator()
    # an n-th residue decrypts to 0
    assert sk.raw_decrypt(r) == 0


@settings(max_examples=40, deadline=None)
@given(
    vals=st.lists(st.floats(min_value=-1e9, max_value=1e9, allow_nan=False), min_size=1, max_size=12),
    frac=st.integers(min_value=0, max_value=60),
)
def test_fixed_point_roundtrip_error_is_half_ulp(vals, frac):
    ints = encode_fixed(vals, frac)
    back = decode_fixed(ints, -frac)
    assert np.all(np.abs(back - np.asarray(vals)) <= 2.0 ** (-frac - 1) + 1e-300 + np.abs(vals) * 1e-15)


def test_vector_operations_match_numpy(keypair1024):
    pk, sk = keypair1024
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=20) * 100, rng.normal(size=20)
    ea = EncryptedVector.encrypt(pk, a, frac_bits=30)
    eb = EncryptedVector.encrypt(pk, b, frac_bits=30, private_key=sk)
    tol = 2.0**-20
    assert np.allclose((ea + eb).decrypt(sk), a + b, atol=tol)
    assert np.allclose((ea - eb).decrypt(sk), a - b, atol=tol)
    assert np.allclose(ea.add_plain(b).decrypt(sk), a + b, atol=tol)
    assert np.allclose(ea.mul_int(-7).decrypt(sk), -7 * a, atol=tol * 7)
    assert np.allclose(ea.mul_scalar(0.125, frac_bits=10).decrypt(sk), a * 0.125, atol=tol)
    assert np.allclose(ea.mul_elementwise(b, frac_bits=20).decrypt(sk), a * b, atol=1e-4)
    assert np.allclose(ea.sum().decrypt(sk), [a.sum()], atol=tol * 20)
    W = rng.integers(-1000, 1000, size=(3, 20))
    assert np.allclose(ea.matvec(W).decrypt(sk), W @ a, atol=1e-3)
    assert np.allclose(ea.dot(b, frac_bits=30).decrypt(sk), [a @ b], atol=1e-4)
    assert np.allclose(ea[2:5].decrypt(sk), a[2:5], atol=tol)
    assert np.allclose(EncryptedVector.concat([ea[:3], eb[:2]]).decrypt(sk), np.r_[a[:3], b[:2]], atol=tol)
    assert np.allclose(ea.rerandomize().decrypt(sk), a, atol=tol)
    # exponent alignment: different precisions add correctly
    ec = EncryptedVector.encrypt(pk, b, frac_bits=10)
    assert np.allclose((ea + ec).decrypt(sk), a + b, atol=2.0**-9)


def test_multi_exp_matches_naive(keypair512):
    pk, _ = keypair512
    rng = np.random.default_rng(1)
    bases = [pk.raw_encrypt(int(v)) for v in rng.integers(0, 1000, size=40)]
    exps = [int(e) for e in rng.integers(-(2**47), 2**47, size=40)]
    naive = 1
    for b, e in zip(bases, exps):
        naive = naive * pk.raw_mul(b, e) % pk.nsquare
    assert multi_exp(bases, exps, pk.nsquare) == naive


@settings(max_examples=25, deadline=None)
@given(
    vals=st.lists(st.integers(min_value=-(2**80), max_value=2**80), min_size=1, max_size=40),
    k=st.integers(min_value=-(2**8), max_value=2**8),
)
def test_packed_vectors_add_and_scale_slotwise(vals, k):
    pk, sk = _keypair(1024)
    pack = Packing.for_key(pk, 100)
    assert pack.slots >= 3
    ev = EncryptedVector.encrypt_ints(pk, vals, packing=pack)
    assert ev.decrypt_ints(sk) == vals
    assert len(ev.ciphertexts) == -(-len(vals) // pack.slots)
    out = (ev + ev).mul_int(k)
    assert out.decrypt_ints(sk) == [2 * v * k for v in vals]
    # phe decrypts the packed integer the same way
    packed_plain = pack.pack(vals)
    assert [sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c))) for c in ev.ciphertexts] == packed_plain


def test_overflow_is_detected_not_wrapped(keypair512):
    pk, sk = keypair512
    with pytest.raises(CryptoOverflow):
        pk.raw_encrypt(pk.max_int + 1)
    v = EncryptedVector.encrypt_ints(pk, [pk.max_int // 2 + 5])
    with pytest.raises(CryptoOverflow):
        v + v  # would exceed n/3
    with pytest.raises(CryptoOverflow):
        v.mul_int(3)
    pack = Packing.for_key(pk, 64)
    pv = EncryptedVector.encrypt_ints(pk, [2**62, -(2**62)], packing=pack)
    with pytest.raises(CryptoOverflow, match="per slot"):
        pv.mul_int(2)
    with pytest.raises(CryptoOverflow):
        EncryptedVector.encrypt_ints(pk, [2**63], packing=pack)
    # a wrapped raw result is caught at decryption (middle third of Z_n)
    c = pk.raw_encrypt(pk.max_int)
    wrapped = pk.raw_mul(c, 2)
    with pytest.raises(CryptoOverflow):
        sk.raw_decrypt_signed(wrapped)


def test_declared_bound_must_hold(keypair512):
    pk, _ = keypair512
    with pytest.raises(CryptoOverflow, match="declared bound"):
        EncryptedVector.encrypt_ints(pk, [1000], bound=100)


def test_proto_roundtrip_and_validation(keypair512, keypair1024):
    pk, sk = keypair512
    ev = EncryptedVector.encrypt(pk, [1.0, -2.0, 3.5], frac_bits=20)
    msg = ev.to_proto()
    back = EncryptedVector.from_proto(msg, pk, length=3, exponent=-20)
    assert np.allclose(back.decrypt(sk), [1.0, -2.0, 3.5])
    assert public_key_from_proto(public_key_to_proto(pk), allow_insecure=True) == pk
    with pytest.raises(InsecureParameters):
        public_key_from_proto(public_key_to_proto(pk))

    def bad(mutate, match):
        m = type(msg)()
        m.CopyFrom(msg)
        mutate(m)
        with pytest.raises(InvalidMessage, match=match):
            EncryptedVector.from_proto(m, pk, length=3, exponent=-20)

    bad(lambda m: m.ciphertexts.__setitem__(1, int_to_bytes(pk.nsquare + 5)), "outside")
    bad(lambda m: m.ciphertexts.__setitem__(1, b""), "outside")  # zero
    bad(lambda m: m.ciphertexts.__setitem__(0, int_to_bytes(pk.n)), "gcd")
    bad(lambda m: m.ciphertexts.__setitem__(0, b"\x01" * 1000), "longer")
    bad(lambda m: setattr(m, "length", 4), "holds 4 values")
    bad(lambda m: m.ciphertexts.append(m.ciphertexts[0]), "ciphertexts")
    bad(lambda m: setattr(m, "exponent", -10), "exponent")
    bad(lambda m: setattr(m, "key_fingerprint", b"x" * 32), "different public key")
    # a vector under another key is refused
    pk2, _ = keypair1024
    with pytest.raises(InvalidMessage, match="different public key"):
        EncryptedVector.from_proto(EncryptedVector.encrypt(pk2, [1.0]).to_proto(), pk)


def test_nonfinite_values_refused(keypair512):
    pk, _ = keypair512
    with pytest.raises(InvalidMessage):
        EncryptedVector.encrypt(pk, [1.0, float("nan")])
    with pytest.raises(InvalidMessage):
        EncryptedVector.encrypt(pk, [float("inf")])


# ------------------------------------------------------------------ tables, pools, batched checks (issue 16)
def test_window_for_uses_balances_building_against_use():
    from smcdp.crypto.modexp import window_for_uses

    few, many = window_for_uses(1024, 4096, 600), window_for_uses(1024, 4096, 8000)
    assert 6 <= few < many <= 12
    cost = lambda w, u: -(-1024 // w) * ((1 << w) - 1 + u)  # noqa: E731
    assert all(cost(many, 8000) <= cost(w, 8000) for w in range(4, 13))


def test_a_pool_sized_for_its_uses_gives_that_table_to_whichever_thread_builds_it_first():
    """The race a CI run lost: Trent's pool sizes the key's table for the session on its background thread,
    but the session's first obfuscator, taken on the event loop before that thread ran, built the budget's
    largest table (w = 12 at 1024 bits).  The pool now plans the size before any thread can build."""
    from smcdp.crypto.modexp import window_for_uses
    from smcdp.crypto.obfuscation import ObfuscatorPool

    def unplanned(bits, modulus):  # what a table built with no plan gets: the memory budget's largest window
        return modexp.window_for(
            bits,
            modulus.bit_length(),
            entry_overhead=0 if modexp.native.AVAILABLE else 32,
            max_window=12 if modexp.native.AVAILABLE else 10,
        )

    pk, sk = P.generate_keypair(512, allow_insecure=True)  # a fresh key: no tables yet
    want_pk = window_for_uses(pk.obfuscation_bits, pk.nsquare.bit_length(), 40)
    want_sk = window_for_uses(max(sk._crt_exp_bits()), sk.psquare.bit_length(), 40)
    # no background thread at all: the caller's own first use is the one that builds
    public = ObfuscatorPool.for_public_key(pk, capacity=4, background=False, uses=40)
    private = ObfuscatorPool.for_private_key(sk, capacity=4, background=False, uses=40)
    assert sk.raw_decrypt_signed(pk.raw_encrypt(5)) == 5 and sk.raw_decrypt_signed(sk.raw_encrypt(-3)) == -3
    assert pk.table().window == want_pk < unplanned(pk.obfuscation_bits, pk.nsquare)
    assert [t.window for t in sk._crt_tables()] == [want_sk, want_sk]
    assert want_sk < unplanned(max(sk._crt_exp_bits()), sk.psquare)
    public.close()
    private.close()
    pk.plan(10**6)  # a built table is kept, and so is its plan
    assert pk.table().window == want_pk


def test_tables_are_built_once_under_concurrent_use():
    import threading

    pk, sk = P.generate_keypair(512, allow_insecure=True)  # a fresh key: no table yet
    pk.prepare(uses=50)
    table = pk.table()
    assert pk.prepare(uses=10**6) is table  # an existing table is kept
    seen = []

    def enc():
        seen.append(sk._crt_tables())
        sk.raw_encrypt(1)

    threads = [threading.Thread(target=enc) for _ in range(4)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert all(t is seen[0] for t in seen)
    assert sk.raw_decrypt_signed(pk.raw_encrypt(-7)) == -7


def test_obfuscator_pool_precompute_and_stats(keypair512):
    from smcdp.crypto.obfuscation import ObfuscatorPool

    _pk, sk = keypair512
    pool = ObfuscatorPool.for_private_key(sk, capacity=4, background=False)
    pool.precompute(10, threads=2)
    assert pool.stats() == {"precomputed": 10, "inline": 0, "stock": 10}
    cts = [pool.encrypt(i) for i in range(12)]
    assert [sk.raw_decrypt_signed(c) for c in cts] == list(range(12))
    assert pool.stats() == {"precomputed": 10, "inline": 2, "stock": 0}
    pool.close()


def test_obfuscator_pool_encrypt_many_takes_the_stock_then_makes_the_rest(keypair512):
    from smcdp.crypto.obfuscation import ObfuscatorPool

    pk, sk = keypair512
    pool = ObfuscatorPool.for_private_key(sk, capacity=4, background=False)
    pool.precompute(5, threads=1)
    values = [0, 1, -1, 7, -(2**200), int(pk.max_int), -int(pk.max_int)]
    cts = pool.encrypt_many(values)
    assert [sk.raw_decrypt_signed(c) for c in cts] == values
    assert len(set(cts)) == len(values)  # a fresh obfuscator each
    assert pool.stats() == {"precomputed": 5, "inline": 2, "stock": 0}
    assert pool.encrypt_many([]) == []
    with pytest.raises(P.CryptoOverflow):
        pool.encrypt_many([1, int(pk.max_int) + 1])
    pool.close()


def test_pooled_encryption_is_the_textbook_product_with_the_same_obfuscator(keypair512):
    """(1 + n·m)·obf mod n², computed with half-size products: the very same ciphertext."""
    from smcdp.crypto.obfuscation import ObfuscatorPool

    pk, sk = keypair512
    obfs = [sk.raw_encrypt(0) for _ in range(6)]
    made = iter(obfs)
    pool = ObfuscatorPool(pk, lambda: next(made), background=False)
    values = [3, -3, 0, int(pk.max_int), -int(pk.max_int), 12345]
    expected = [(1 + pk.n * pk.raw_plain(m)) * o % pk.nsquare for m, o in zip(values, obfs)]
    assert pool.encrypt_many(values[:3]) + [pool.encrypt(m) for m in values[3:]] == expected
    pool.close()


def test_obfuscator_pool_background_refills_below_low_water(keypair512):
    import time

    from smcdp.crypto.obfuscation import ObfuscatorPool

    pk, _ = keypair512
    with ObfuscatorPool.for_public_key(pk, capacity=6, low_water=3) as pool:
        deadline = time.monotonic() + 20
        while pool.stats()["stock"] < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.stats()["stock"] == 6
        pool.get()
        pool.get()  # 4 left: above the low-water mark, no refill
        time.sleep(0.2)
        assert pool.stats()["stock"] == 4
        pool.get()
        pool.get()  # 2 left: refilled to capacity
        while pool.stats()["stock"] < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert pool.stats()["stock"] == 6


def test_batched_unit_check_names_the_bad_ciphertext(keypair512):
    pk, _ = keypair512
    good = [pk.raw_encrypt(i) for i in range(5)]
    assert pk.validate_ciphertexts(good) == good
    bad = list(good)
    bad[3] = bad[3] * pk.n % pk.nsquare or pk.n  # a multiple of n: not a unit
    with pytest.raises(InvalidMessage, match="ciphertext 3 is not a unit"):
        pk.validate_ciphertexts(bad, "ciphertext")
    with pytest.raises(InvalidMessage, match="ciphertext 1 is outside"):
        pk.validate_ciphertexts([good[0], pk.nsquare], "ciphertext")
