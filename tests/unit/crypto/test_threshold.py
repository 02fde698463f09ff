"""Threshold Paillier decryption with proofs of correct partial decryption (smcdp.crypto.threshold).

Keys here come from the trusted dealer (:func:`deal`) so that decryption is tested on its own; the
dealer-free generation is tested in tests/unit/protocols/test_keygen.py.  Small keys: an explicit,
test-only opt-in (``allow_insecure=True``)."""

import itertools
import math
import os
import secrets

import gmpy2
import numpy as np
import pytest
from phe import paillier as phe_paillier

from smcdp.crypto.encoding import Packing
from smcdp.crypto.paillier import PublicKey, generate_keypair
from smcdp.crypto.threshold import (
    BadPartialDecryption,
    KeyShare,
    NotEnoughShares,
    PartialDecryption,
    ThresholdPublicKey,
    _combine,
    combine,
    combine_vector,
    combine_vector_ints,
    deal,
    integer_shamir,
    load_key_share,
    partial_decrypt,
    partial_decrypt_vector,
    save_key_share,
    verify_partial,
)
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InsecureParameters, InvalidMessage

CTX = b"session-1/decrypt"
N_PARTIES, T = 5, 2


@pytest.fixture(scope="module")
def key():
    pk, sk = generate_keypair(768, allow_insecure=True)
    pub, shares = deal(sk, N_PARTIES, T)
    return pk, sk, pub, shares


def _cts(pk, values):
    return [pk.raw_encrypt(v) for v in values]


VALUES = [0, 1, -1, 42, -(10**30), 2**200 + 7]


@pytest.mark.parametrize("batch", [True, False])
def test_threshold_decryption_equals_the_plaintext(key, batch):
    pk, sk, pub, shares = key
    cts = _cts(pk, VALUES)
    partials = [partial_decrypt(s, cts, CTX, batch=batch) for s in shares[: T + 1]]
    assert combine(pub, cts, partials, CTX) == VALUES
    # the same as the ordinary private key's decryption, unsigned too
    assert combine(pub, cts, partials, CTX, signed=False) == [int(sk.raw_decrypt(c)) for c in cts]


def test_every_set_of_t_plus_one_parties_decrypts(key):
    pk, _, pub, shares = key
    cts = _cts(pk, [123456789, -5])
    partials = {s.index: partial_decrypt(s, cts, CTX) for s in shares}
    for subset in itertools.combinations(sorted(partials), T + 1):
        assert combine(pub, cts, [partials[i] for i in subset], CTX) == [123456789, -5], subset
    # more than t + 1 is fine too (the first t + 1 valid ones are combined)
    assert combine(pub, cts, list(partials.values()), CTX) == [123456789, -5]


def test_t_parties_do_not_decrypt(key):
    """t partial decryptions are refused, and combining them anyway (Lagrange over t points) gives no
    decryption at all: c' ≢ 1 mod N, refused by the combination itself."""
    pk, _, pub, shares = key
    values = [7, -3, 99, 10**12]
    cts = _cts(pk, values)
    partials = {s.index: partial_decrypt(s, cts, CTX) for s in shares}
    for subset in itertools.combinations(sorted(partials), T):
        chosen = [partials[i] for i in subset]
        with pytest.raises(NotEnoughShares):
            combine(pub, cts, chosen, CTX)
        with pytest.raises(InvalidMessage, match="do not combine to a decryption"):
            _combine(pub, len(cts), chosen)


def _tamper_value(partial: PartialDecryption, k: int, factor: int, n2: int) -> PartialDecryption:
    values = list(partial.values)
    values[k] = values[k] * factor % n2
    return PartialDecryption(partial.party, tuple(values), partial.proofs, partial.batch)


@pytest.mark.parametrize("batch", [True, False])
@pytest.mark.parametrize("bad_party", [1, 3])
def test_a_tampered_partial_decryption_is_refused_and_its_party_named(key, batch, bad_party):
    pk, _, pub, shares = key
    cts = _cts(pk, [5, 6, 7])
    partials = [partial_decrypt(s, cts, CTX, batch=batch) for s in shares[: T + 1]]
    idx = bad_party - 1
    # (1 + N)^1 shifts the partial's plaintext by one: a plausible-looking wrong share
    partials[idx] = _tamper_value(partials[idx], 1, int(pk.n) + 1, int(pk.nsquare))
    with pytest.raises(BadPartialDecryption) as err:
        combine(pub, cts, partials, CTX)
    assert err.value.party == bad_party
    assert f"party {bad_party}" in str(err.value)


@pytest.mark.parametrize("batch", [True, False])
def test_a_partial_decryption_with_a_wrong_share_is_refused(key, batch):
    """A party that uses s_i + 1 (and proves with it) does not match its verification key."""
    pk, _, pub, shares = key
    cts = _cts(pk, [11, 12])
    liar = KeyShare(pub, 2, shares[1].secret + 1)
    with pytest.raises(BadPartialDecryption) as err:
        verify_partial(pub, cts, partial_decrypt(liar, cts, CTX, batch=batch), CTX)
    assert err.value.party == 2


def test_a_negated_partial_decryption_is_refused_or_harmless(key):
    """−c_i has the same square as c_i.  A batch proof hashes the exact values into its weights, so it
    refuses the negation; a per-ciphertext proof is about c_i² only and accepts it -- harmlessly, since
    the combination raises c_i to an even power too."""
    pk, _, pub, shares = key
    cts = _cts(pk, [31])
    n2 = int(pk.nsquare)
    for batch in (True, False):
        partials = [partial_decrypt(s, cts, CTX, batch=batch) for s in shares[: T + 1]]
        neg = PartialDecryption(1, (n2 - partials[0].values[0],), partials[0].proofs, batch)
        if batch:
            with pytest.raises(BadPartialDecryption) as err:
                combine(pub, cts, [neg, *partials[1:]], CTX)
            assert err.value.party == 1
        else:
            assert combine(pub, cts, [neg, *partials[1:]], CTX) == [31]


def test_proofs_are_bound_to_context_party_and_ciphertexts(key):
    pk, _, pub, shares = key
    cts = _cts(pk, [1, 2, 3])
    p = partial_decrypt(shares[0], cts, CTX)
    verify_partial(pub, cts, p, CTX)
    with pytest.raises(BadPartialDecryption):
        verify_partial(pub, cts, p, b"session-2/decrypt")
    with pytest.raises(BadPartialDecryption):  # claimed by another party
        verify_partial(pub, cts, PartialDecryption(2, p.values, p.proofs, True), CTX)
    with pytest.raises(BadPartialDecryption):  # for other ciphertexts
        verify_partial(pub, list(reversed(cts)), PartialDecryption(1, tuple(reversed(p.values)), p.proofs, True), CTX)
    e, z = p.proofs[0]
    for proof in ((e ^ 1, z), (e, z + 1), (e, -z), (e, 1 << (pub.nonce_bits() + 8))):
        with pytest.raises(BadPartialDecryption):
            verify_partial(pub, cts, PartialDecryption(1, p.values, (proof,), True), CTX)
    with pytest.raises(BadPartialDecryption):  # wrong count
        verify_partial(pub, cts[:2], p, CTX)
    with pytest.raises(BadPartialDecryption):  # not a unit
        verify_partial(pub, cts, PartialDecryption(1, (0, *p.values[1:]), p.proofs, True), CTX)
    with pytest.raises(InvalidMessage):
        verify_partial(pub, cts, PartialDecryption(N_PARTIES + 1, p.values, p.proofs, True), CTX)


def test_duplicate_parties_are_refused(key):
    pk, _, pub, shares = key
    cts = _cts(pk, [1])
    p = partial_decrypt(shares[0], cts, CTX)
    with pytest.raises(InvalidMessage, match="two partial decryptions"):
        combine(pub, cts, [p, p, partial_decrypt(shares[1], cts, CTX)], CTX)


def test_ciphertexts_from_phe_decrypt_too(key):
    """Encryption stays plain Paillier: phe's ciphertexts (textbook obfuscator) threshold-decrypt."""
    pk, _, pub, shares = key
    values = [secrets.randbelow(10**15) - 10**14 for _ in range(4)]
    cts = [pk.phe.encrypt(v).ciphertext() for v in values]
    partials = [partial_decrypt(s, cts, CTX) for s in shares[1 : T + 2]]
    assert combine(pub, cts, partials, CTX) == values


def test_encrypted_vectors_packing_and_homomorphic_ops(key):
    """EncryptedVector arithmetic (packing, addition, scaling, fixed point) is unchanged; only the
    decryption is threshold."""
    pk, sk, pub, shares = key
    ints_a = [3, -7, 1000, 0, -1, 12]
    ints_b = [1, 2, 3, 4, 5, 6]
    pack = Packing.for_key(pk, 80)
    assert pack.slots >= 2
    ea = EncryptedVector.encrypt_ints(pk, ints_a, packing=pack)
    eb = EncryptedVector.encrypt_ints(pk, ints_b, packing=pack)
    out = (ea + eb).mul_int(3)
    partials = [partial_decrypt_vector(s, out, CTX) for s in shares[2:]]
    assert combine_vector_ints(pub, out, partials, CTX) == [3 * (a + b) for a, b in zip(ints_a, ints_b)]
    assert combine_vector_ints(pub, out, partials, CTX) == out.decrypt_ints(sk)
    x = np.array([0.5, -1.25, 3.0])
    ev = EncryptedVector.encrypt(pk, x).mul_scalar(2.0) + EncryptedVector.encrypt(pk, x)
    partials = [partial_decrypt_vector(s, ev, CTX, batch=False) for s in shares[: T + 1]]
    np.testing.assert_allclose(combine_vector(pub, ev, partials, CTX), 3 * x, rtol=0, atol=1e-9)
    other_pk, _ = generate_keypair(512, allow_insecure=True)
    with pytest.raises(InvalidMessage):
        partial_decrypt_vector(shares[0], EncryptedVector.encrypt_ints(other_pk, [1]), CTX)


def test_key_share_files_are_0600_and_checked(key, tmp_path):
    _, _, pub, shares = key
    path = tmp_path / "share.json"
    save_key_share(shares[2], path)
    assert os.stat(path).st_mode & 0o777 == 0o600
    loaded = load_key_share(path, allow_insecure=True)
    assert loaded.index == 3 and loaded.secret == shares[2].secret and loaded.public == pub
    with pytest.raises(InsecureParameters):
        load_key_share(path)  # a 768-bit key needs the explicit opt-in
    os.chmod(path, 0o644)
    with pytest.raises(InvalidMessage, match="chmod 600"):
        load_key_share(path, allow_insecure=True)
    # a share that does not match its verification key is refused on load
    obj = shares[2].to_json()
    obj["secret"] = format(shares[2].secret + 1, "x")
    with pytest.raises(InvalidMessage, match="verification key"):
        KeyShare.from_json(obj, allow_insecure=True)


def test_public_key_validation(key):
    pk, _, pub, _ = key
    assert ThresholdPublicKey.from_json(pub.to_json(), allow_insecure=True) == pub
    vks = pub.verification_keys
    for bad in (
        dict(parties=N_PARTIES, threshold=N_PARTIES),
        dict(parties=N_PARTIES, threshold=0),
        dict(parties=1, threshold=0),
    ):
        with pytest.raises(InvalidMessage):
            ThresholdPublicKey(pk, bad["parties"], bad["threshold"], 1, pub.share_bits, vks[: bad["parties"]])
    with pytest.raises(InvalidMessage, match="theta"):
        ThresholdPublicKey(pk, N_PARTIES, T, 0, pub.share_bits, vks)
    with pytest.raises(InvalidMessage, match="verification keys"):
        ThresholdPublicKey(pk, N_PARTIES, T, 1, pub.share_bits, vks[:-1])
    with pytest.raises(InvalidMessage, match="verification key of party 2"):
        ThresholdPublicKey(pk, N_PARTIES, T, 1, pub.share_bits, (vks[0], int(pk.n), *vks[2:]))


def test_dealt_exponent_is_zero_mod_phi_and_one_mod_n(key):
    """The construction's invariants: the shares are of Δ·d, so t + 1 of them give Δ²·d (Lagrange with Δ), ≡ 0 mod
    φ(N) and ≡ Δ² mod N (d ≡ 1 mod N for a dealt key)."""
    from smcdp.crypto.threshold import lagrange_at_zero

    pk, sk, pub, shares = key
    subset = [1, 3, 5]
    delta2_d = sum(lagrange_at_zero(pub.delta, subset, i) * shares[i - 1].secret for i in subset)
    phi = int((sk.p - 1) * (sk.q - 1))
    assert delta2_d % phi == 0
    assert delta2_d % int(pk.n) == pub.delta**2 % int(pk.n)
    # phe's EncryptedNumber built on the same modulus decrypts what the threshold key encrypts
    c = pk.raw_encrypt(77)
    assert sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c))) == 77
    assert gmpy2.gcd(pub.theta, pk.n) == 1


def test_combining_only_the_needed_partials_still_names_a_wrong_one_it_uses(key):
    """``needed_only``: the caller's own partial (``own``) and the others' in index order until t + 1 are
    verified and used; a wrong one among them is named, one beyond them is never looked at (nor used)."""
    import dataclasses

    pk, sk, pub, shares = key
    cts = _cts(pk, VALUES)
    partials = [partial_decrypt(s, cts, CTX) for s in shares]
    plain = [int(sk.raw_decrypt(c)) for c in cts]

    def wrong(p):
        return dataclasses.replace(p, values=(p.values[0] * 2 % pk.nsquare, *p.values[1:]))

    # party 5 (index 4) is wrong, but with own = 3 the used ones are 3, 1, 2 (t + 1 = 3)
    mixed = [*partials[:4], wrong(partials[4])]
    got = combine(pub, cts, mixed, CTX, signed=False, own=3, needed_only=True)
    assert [g % pk.n for g in got] == [p % pk.n for p in plain]
    with pytest.raises(BadPartialDecryption) as info:  # all verified: party 5 is named
        combine(pub, cts, mixed, CTX, signed=False)
    assert info.value.party == 5
    # a wrong one among those used is named
    mixed = [partials[0], wrong(partials[1]), *partials[2:]]
    with pytest.raises(BadPartialDecryption) as info:
        combine(pub, cts, mixed, CTX, signed=False, own=3, needed_only=True)
    assert info.value.party == 2


def test_the_verification_base_table_gives_powmods_values_and_falls_back_outside_its_range(key):
    """Proofs and verifications raise v by a table (8× faster at 2048 bits); it must give gmpy2's values for every
    exponent in range -- 0, 1, the largest -- and fall back to powmod beyond it or for a negative exponent."""
    import random

    import gmpy2

    from smcdp.crypto.threshold import _v_pow

    pub = key[2]
    n2 = pub.public_key.nsquare
    bits = pub.nonce_bits() + 1
    rng = random.Random(5)
    for e in (0, 1, (1 << bits) - 1, *(rng.getrandbits(bits) for _ in range(5)), 1 << bits, -7):
        want = gmpy2.powmod(pub.v, e, n2)
        assert _v_pow(pub, e) == want, e


def test_replayable_encryption_is_an_obfuscator_of_the_keys_public_base_with_its_opening(key):
    """encrypt_replayable(pk, m, a) = g^m·(h^N)^a with h = encryption_base(N): it decrypts to m (with the dealt
    shares and with the private key), r = h^a mod N opens it (c = g^m·r^N), the same a gives the same bytes (a
    replay), another a other bytes; h is −x² mod N for a unit x (a DJN base), the same for every caller; the
    tables give powmod's values at the range's ends, and an exponent beyond obfuscation_bits is refused."""
    from smcdp.crypto.threshold import encrypt_replayable, encryption_base

    pk, sk, pub, shares = key
    n, n2 = int(pk.n), int(pk.nsquare)
    h = encryption_base(n)
    assert h == encryption_base(n) and 1 < h < n and gmpy2.gcd(h, n) == 1 and gmpy2.jacobi(-h % n, n) == 1
    bits = pk.obfuscation_bits
    for m, a in ((0, 0), (5, 1), (-3, (1 << bits) - 1), (2**100, secrets.randbits(bits))):
        c, r = encrypt_replayable(pk, m, a)
        assert int(c) == (1 + (m % n) * n) * pow(int(r), n, n2) % n2
        assert int(r) == pow(int(h), a, n)
        assert sk.raw_decrypt_signed(int(c)) == m
        assert combine(pub, [int(c)], [partial_decrypt(s, [int(c)], CTX) for s in shares[: T + 1]], CTX) == [m]
        assert encrypt_replayable(pk, m, a) == (c, r)
    assert encrypt_replayable(pk, 5, 2)[0] != encrypt_replayable(pk, 5, 3)[0]
    from smcdp.crypto.threshold import djn_exponent_bits, replayable_obfuscator

    with pytest.raises(ValueError):  # an encryption's exponent is an obfuscator's
        encrypt_replayable(pk, 1, 1 << bits)
    # a proof's nonce exponent: the obfuscator's, the challenge, 2^16 terms and 80 bits; longer for more terms
    top = djn_exponent_bits(pk)
    assert top == bits + 128 + 16 + 80 and djn_exponent_bits(pk, 1 << 20) == top + 5
    for a in (0, (1 << top) - 1, (1 << top) + 12345):  # in the tables' range, and beyond it (by powmod)
        hn_a, h_a = replayable_obfuscator(pk, a)
        assert h_a == pow(int(h), a, n) and hn_a == pow(int(h_a), n, n2)
    with pytest.raises(ValueError):
        replayable_obfuscator(pk, -1)


@pytest.mark.parametrize("count,offset", [(1, 0), (2, 4), (5, 1), (12, 3), (40, 2)])
def test_split_decryption_gives_the_plaintexts_and_names_every_wrong_partial(key, count, offset):
    """Split work (n = 5, t = 2): ciphertext k is partially decrypted by exactly the t + 1 parties decryptors()
    names, among m = decryptor_count() parties rotated by the offset, each by about (t + 1)/m of them;
    combine_assigned gives the plaintexts from those partials alone.  Every partial is used, so a wrong value
    from *any* party is named; a partial missing, from a party with nothing to decrypt, or over the wrong
    ciphertexts is refused."""
    from smcdp.crypto.threshold import assigned, combine_assigned, decryptor_count, decryptors

    pk, _, pub, shares = key
    values = [(-1) ** k * (k * 7919 + 3) for k in range(count)]
    cts = [int(c) for c in _cts(pk, values)]
    sets = decryptors(count, N_PARTIES, T, offset)
    m = decryptor_count(count, N_PARTIES, T)
    assert T + 1 <= m <= N_PARTIES and all(len(set(s)) == T + 1 for s in sets)
    assert len({i for s in sets for i in s}) == min(m, len({i for s in sets for i in s}))
    at = {s.index: assigned(count, N_PARTIES, T, s.index, offset) for s in shares}
    assert max(len(v) for v in at.values()) <= -(-count * (T + 1) // m) + 1
    kw = dict(offset=offset)
    partials = [partial_decrypt(s, [cts[k] for k in at[s.index]], CTX) for s in shares if at[s.index]]
    assert len(partials) == min(m, len(partials))
    assert combine_assigned(pub, cts, partials, CTX, **kw) == values
    assert combine_assigned(pub, cts, partials, CTX, own=partials[0].party, **kw) == values
    n2 = pk.nsquare
    for bad in partials:
        wrong = PartialDecryption(bad.party, (bad.values[0] * 4 % n2, *bad.values[1:]), bad.proofs, True)
        others = [p if p is not bad else wrong for p in partials]
        with pytest.raises(BadPartialDecryption) as info:
            combine_assigned(pub, cts, others, CTX, **kw)
        assert info.value.party == bad.party
    with pytest.raises(NotEnoughShares):
        combine_assigned(pub, cts, partials[1:], CTX, **kw)
    idle = [s for s in shares if not at[s.index]]
    for s in idle:  # a party with nothing to decrypt sends nothing, and anything it sends is refused
        with pytest.raises(InvalidMessage, match="decrypts none"):
            combine_assigned(pub, cts, [*partials, partial_decrypt(s, cts[:1], CTX)], CTX, **kw)
    if count > 1:  # a partial over other positions (all of them) does not verify for its assigned ones
        p = partials[0]
        whole = partial_decrypt(shares[p.party - 1], cts, CTX)
        if len(whole.values) != len(p.values):
            with pytest.raises(BadPartialDecryption):
                combine_assigned(pub, cts, [whole, *partials[1:]], CTX, **kw)
    if offset:  # the sets under another rotation are others: these partials do not combine under offset 0
        with pytest.raises((BadPartialDecryption, NotEnoughShares, InvalidMessage)):
            combine_assigned(pub, cts, partials, CTX)


def test_the_number_of_decryptors_balances_decryptions_against_verifications():
    """decryptor_count: between t + 1 and n, growing with the ciphertexts (√(count·(t + 1)/VERIFY_COST))."""
    from smcdp.crypto.threshold import decryptor_count

    assert decryptor_count(17, 3, 1) == 3 and decryptor_count(31, 3, 1) == 3
    assert decryptor_count(9, 8, 1) == 4 and decryptor_count(1, 8, 1) == 2 and decryptor_count(400, 8, 1) == 8
    assert decryptor_count(1, 5, 4) == 5
    assert [decryptor_count(c, 64, 2) for c in (1, 10, 100, 1000)] == sorted(
        decryptor_count(c, 64, 2) for c in (1, 10, 100, 1000)
    )


@pytest.mark.parametrize("cores", [1, 2, 3, 8])
def test_partial_decryptions_on_several_cores_keep_their_order(key, cores, monkeypatch):
    """_powers stripes a vector's powers over the cores and puts them back in order: the values equal one
    thread's for any core count (more cores than ciphertexts included), and the partial decryption verifies."""
    import smcdp.crypto.threshold as th

    pk, _, pub, shares = key
    cts = [pk.raw_encrypt(v) for v in range(7)]
    exp = 2 * pub.delta * shares[0].secret
    want = [gmpy2.powmod(c, exp, pk.nsquare) for c in cts]
    monkeypatch.setattr(th.os, "cpu_count", lambda: cores)
    assert th._powers(cts, exp, pk.nsquare) == want
    p = partial_decrypt(shares[0], [int(c) for c in cts], CTX)
    verify_partial(pub, [int(c) for c in cts], p, CTX)


# ----------------------------------------------------------------------------- a review's findings (2026-12-05)
def test_no_share_tells_its_party_the_exponent_modulo_its_index(key):
    """The shares are of Δ·d: f(i) ≡ f(0) = Δ·d ≡ 0 mod i for every index i ≤ n, whatever d is.  Shares of d itself
    gave party i d mod i (a review's finding): for the ceremony's d = β·φ(N), whether small primes divide p − 1 or
    q − 1.  Over many dealings: each share is ≡ 0 mod its index, never d mod i."""
    _, sk, _, shares = key
    for s in shares:
        assert s.secret % s.index == 0
    for _ in range(5):
        _, again = deal(sk, N_PARTIES, T)
        assert [s.secret % s.index for s in again] == [0] * N_PARTIES
        assert [s.secret for s in again] != [s.secret for s in shares]  # fresh coefficients each dealing
    # a secret ≡ 1 mod 2, 3, 4 and 5: shares of it would be ≡ 1 mod their index; shares of Δ·secret are ≡ 0
    secret = 60 * 10**40 + 1
    coeffs, split = integer_shamir(secret, N_PARTIES, T, secret.bit_length())
    assert coeffs[0] == math.factorial(N_PARTIES) * secret
    assert [v % i for i, v in enumerate(split, 1)] == [0] * N_PARTIES


def test_a_version_1_key_file_is_refused_saying_to_run_the_ceremony_again(key, tmp_path):
    _, _, pub, shares = key
    old = dict(pub.to_json(), version=1)
    with pytest.raises(InvalidMessage, match=r"version-1 threshold public key.*key ceremony again"):
        ThresholdPublicKey.from_json(old, allow_insecure=True)
    share_json = dict(shares[0].to_json(), version=1)
    with pytest.raises(InvalidMessage, match="version-1 threshold key share"):
        KeyShare.from_json(share_json, allow_insecure=True)
    with pytest.raises(InvalidMessage, match="unknown threshold public key version 3"):
        ThresholdPublicKey.from_json(dict(pub.to_json(), version=3), allow_insecure=True)
    assert ThresholdPublicKey.from_json(pub.to_json(), allow_insecure=True) == pub


def test_a_modulus_with_a_factor_below_the_party_count_is_refused(key):
    """Combination inverts 4Δ³θ mod N: an N sharing a factor with Δ = n! was accepted and combine then raised a
    bare ZeroDivisionError."""
    _, _, pub, _ = key
    bad_n = 3 * int(gmpy2.next_prime(1 << 300))
    with pytest.raises(InvalidMessage, match="prime factor of at most 5"):
        ThresholdPublicKey(PublicKey(bad_n), N_PARTIES, T, 1, pub.share_bits, (1,) * N_PARTIES)


def test_a_wrong_unverified_own_partial_is_refused_not_combined(key):
    """``combine(own=i)`` does not verify the caller's own partial: one made with a share of another key of the same
    shape used to combine to random 'plaintexts'.  The combination must be ≡ 1 mod N, so it is refused."""
    pk, sk, pub, shares = key
    cts = _cts(pk, [1, 2, 3])
    _, other_shares = deal(sk, N_PARTIES, T)  # another dealing of the same N: other shares, other keys
    stale = KeyShare.__new__(KeyShare)
    object.__setattr__(stale, "public", pub)
    object.__setattr__(stale, "index", 1)
    object.__setattr__(stale, "secret", other_shares[0].secret + 1)
    own = partial_decrypt(stale, cts, CTX)
    others = [partial_decrypt(s, cts, CTX) for s in shares[1 : T + 1]]
    with pytest.raises(InvalidMessage, match="do not combine to a decryption"):
        combine(pub, cts, [own, *others], CTX, own=1)
    good = partial_decrypt(shares[0], cts, CTX)
    assert combine(pub, cts, [good, *others], CTX, own=1) == [1, 2, 3]


def test_a_bad_ciphertext_is_the_callers_error_not_an_honest_partys(key):
    """A review: combine/verify_partial did not check the caller's ciphertexts, so a value outside (0, N²), a
    non-unit or a string got an honest party named (BadPartialDecryption: its proof 'fails' for a ciphertext it
    never decrypted).  Now they are refused as what they are, before any proof; combine_assigned too."""
    from smcdp.crypto.threshold import combine_assigned

    pk, sk, pub, shares = key
    cts = _cts(pk, [5, -7])
    partials = [partial_decrypt(s, cts, CTX) for s in shares[: T + 1]]
    assert combine(pub, cts, partials, CTX) == [5, -7]
    p = int(sk.p)  # a non-unit
    for bad in (int(cts[0]) + int(pk.nsquare), 0, -int(cts[0]), int(pk.nsquare), str(cts[0]), p):
        wrong = [bad, cts[1]]
        for call, args in (
            (combine, (pub, wrong, partials, CTX)),
            (verify_partial, (pub, wrong, partials[1], CTX)),
            (combine_assigned, (pub, wrong, partials, CTX)),
        ):
            with pytest.raises((InvalidMessage, TypeError)) as caught:  # TypeError: a string is no integer
                call(*args)
            assert not isinstance(caught.value, BadPartialDecryption), bad


def test_a_partials_values_and_parties_are_integers_and_an_own_partial_covers_every_ciphertext(key):
    """A review: mpz() parsed a partial's values given as strings (and a bool party index matched party 1); a
    three-element proof raised a bare ValueError; combine took an own partial of the wrong length (IndexError, or
    extra values ignored).  Each is now refused by name."""
    pk, _, pub, shares = key
    cts = _cts(pk, [3, 4, 5])
    partials = [partial_decrypt(s, cts, CTX) for s in shares[: T + 1]]
    p2 = partials[1]
    as_strings = PartialDecryption(p2.party, tuple(str(v) for v in p2.values), p2.proofs, p2.batch)
    with pytest.raises(BadPartialDecryption, match="not an integer"):
        verify_partial(pub, cts, as_strings, CTX)
    three = PartialDecryption(p2.party, p2.values, ((*p2.proofs[0], 1),), p2.batch)
    with pytest.raises(BadPartialDecryption, match="batch proof"):
        verify_partial(pub, cts, three, CTX)
    for party in (True, None, 0, N_PARTIES + 1):
        odd = PartialDecryption(party, p2.values, p2.proofs, p2.batch)
        with pytest.raises(InvalidMessage, match="unknown party index"):
            combine(pub, cts, [partials[0], odd, partials[2]], CTX, own=None)
        with pytest.raises(InvalidMessage, match="unknown party index"):
            verify_partial(pub, cts, odd, CTX)
    own = partials[0]
    for values in (own.values[:2], (*own.values, own.values[0])):
        short = PartialDecryption(own.party, values, own.proofs, own.batch)
        with pytest.raises(InvalidMessage, match="own partial decryption covers"):
            combine(pub, cts, [short, *partials[1:]], CTX, own=own.party)
