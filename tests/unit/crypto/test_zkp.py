"""Zero-knowledge proof that a ciphertext vector is a one-hot indicator (smcdp.crypto.zkp)."""

import pytest

from smcdp.crypto.zkp import (
    open_ciphertext,
    prove_bit,
    prove_one_hot,
    prove_plaintext_knowledge,
    randomness_of,
    verify_bit,
    verify_one_hot,
    verify_opening,
    verify_plaintext_knowledge,
)

CTX = b"session-1"


@pytest.fixture(scope="module")
def key(keypair512):
    return keypair512


def _enc(pk, values):
    return [pk.raw_encrypt_textbook(v) for v in values]


@pytest.mark.parametrize("K,hot", [(1, 0), (2, 1), (5, 0), (5, 4)])
def test_a_one_hot_vector_verifies(key, K, hot):
    pk, sk = key
    cts = _enc(pk, [1 if k == hot else 0 for k in range(K)])
    assert verify_one_hot(pk, cts, prove_one_hot(sk, cts, hot, CTX), CTX)


@pytest.mark.parametrize("values", [[0, 0, 0], [1, 1, 0], [2, -1, 0], [0, 0, 2], [-1, 1, 1]])
def test_anything_else_does_not(key, values):
    """Whatever the prover claims (every position tried), a vector that is not one-hot fails:
    each entry must be 0 or 1 and their sum 1."""
    pk, sk = key
    cts = _enc(pk, values)
    for hot in range(len(values)):
        assert not verify_one_hot(pk, cts, prove_one_hot(sk, cts, hot, CTX), CTX)


def test_half_mod_n_sums_to_one_but_is_refused(key):
    """(n+1)/2 twice sums to 1 mod n: the opening alone would accept it, the per-entry proofs do not."""
    pk, sk = key
    half = (pk.n + 1) // 2  # g^half = 1 + half·n mod n² (raw, beyond n/3)
    cts = [(1 + half * pk.n) % pk.nsquare * pk.slow_obfuscator() % pk.nsquare for _ in range(2)]
    assert sk.raw_decrypt(cts[0] * cts[1] % pk.nsquare) == 1
    assert not verify_one_hot(pk, cts, prove_one_hot(sk, cts, 0, CTX), CTX)


def test_proof_is_bound_to_context_and_statement(key):
    pk, sk = key
    cts = _enc(pk, [0, 1, 0])
    proof = prove_one_hot(sk, cts, 1, CTX)
    assert not verify_one_hot(pk, cts, proof, b"session-2")
    assert not verify_one_hot(pk, list(reversed(cts)), proof, CTX)
    assert not verify_one_hot(pk, cts, proof[:-1], CTX)
    for i in range(len(proof)):
        bad = list(proof)
        bad[i] = bad[i] + 1
        assert not verify_one_hot(pk, cts, bad, CTX), i
    fresh = _enc(pk, [0, 1, 0])  # same plaintexts, other ciphertexts
    assert not verify_one_hot(pk, fresh, proof, CTX)


def test_randomness_recovery(key):
    pk, sk = key
    r = pk.slow_obfuscator()  # r^n mod n²; recover r from c = g^m r^n
    c = pk.raw_encrypt(7, obfuscate=False) * r % pk.nsquare
    rec = randomness_of(sk, c, 7)
    assert pow(int(rec), int(pk.n), int(pk.nsquare)) == r


@pytest.mark.parametrize("bit", [0, 1])
def test_a_bit_proof_verifies_alone_and_only_for_its_ciphertext_and_context(key, bit):
    pk, sk = key
    c = pk.raw_encrypt_textbook(bit)
    proof = prove_bit(sk, c, bit, CTX)
    assert verify_bit(pk, c, proof, CTX)
    assert not verify_bit(pk, c, proof, b"session-2")
    assert not verify_bit(pk, pk.raw_encrypt_textbook(bit), proof, CTX)
    assert not verify_bit(pk, c, proof[:4], CTX)
    for m in (2, -1, 3):  # not a bit, whatever the prover claims
        c = pk.raw_encrypt_textbook(m)
        assert not any(verify_bit(pk, c, prove_bit(sk, c, b, CTX), CTX) for b in (0, 1))
    with pytest.raises(ValueError):
        prove_bit(sk, c, 2, CTX)


@pytest.mark.parametrize("m", [0, 1, 12345, -7])
def test_an_opening_proves_the_plaintext(key, m):
    """(m, r) with c = g^m r^n: exactly one m ∈ Z_n opens c, so a decryptor cannot claim another."""
    pk, sk = key
    c = pk.raw_encrypt(m)  # table obfuscator: still g^m times an n-th residue
    got, r = open_ciphertext(sk, c)
    assert got == m % pk.n and verify_opening(pk, c, got, r)
    assert not verify_opening(pk, c, (got + 1) % pk.n, r)
    assert not verify_opening(pk, c, got, (r + 1) % pk.n)
    assert not verify_opening(pk, c, got + pk.n, r)  # m must be reduced
    assert not verify_opening(pk, c, got, 0)
    assert not verify_opening(pk, pk.rerandomize_textbook(c), got, r)


# ------------------------------------------------------------------ proof of plaintext knowledge
def _enc_known(pk, values, seed=1):
    """Ciphertexts with their openings: (cts, ms, rs)."""
    import random

    import gmpy2

    rng = random.Random(seed)
    rs = [rng.randrange(2, int(pk.n) - 1) for _ in values]
    cts = [
        int(pk.raw_encrypt(m, obfuscate=False) * gmpy2.powmod(r, pk.n, pk.nsquare) % pk.nsquare)
        for m, r in zip(values, rs)
    ]
    return cts, list(values), rs


@pytest.mark.parametrize("values", [[0], [5, -3, 2**200], list(range(40))])
def test_a_proof_of_plaintext_knowledge_verifies(key, values):
    pk, _ = key
    cts, ms, rs = _enc_known(pk, values)
    proof = prove_plaintext_knowledge(pk, cts, ms, rs, CTX)
    assert verify_plaintext_knowledge(pk, cts, proof, CTX)
    assert verify_plaintext_knowledge(pk, cts, prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"k" * 32), CTX)


def test_a_proof_of_plaintext_knowledge_is_bound_to_context_and_every_ciphertext(key):
    pk, _ = key
    cts, ms, rs = _enc_known(pk, [1, 2, 3])
    proof = prove_plaintext_knowledge(pk, cts, ms, rs, CTX)
    assert not verify_plaintext_knowledge(pk, cts, proof, b"session-2")
    assert not verify_plaintext_knowledge(pk, list(reversed(cts)), proof, CTX)
    assert not verify_plaintext_knowledge(pk, cts[:2], proof, CTX)
    assert not verify_plaintext_knowledge(pk, [cts[0], cts[1], cts[2] * cts[0] % pk.nsquare], proof, CTX)
    for i in range(3):
        for delta in (1, -1):
            bad = list(proof)
            bad[i] += delta
            assert not verify_plaintext_knowledge(pk, cts, bad, CTX), (i, delta)
    assert not verify_plaintext_knowledge(pk, cts, [proof[0], proof[1] + pk.n, proof[2]], CTX)  # z out of range
    assert not verify_plaintext_knowledge(pk, cts, proof[:2], CTX)


def test_a_wrong_witness_gives_no_proof(key):
    """Someone else's ciphertext (or its power) with a made-up opening -- the copy attack -- fails."""
    pk, _ = key
    cts, ms, rs = _enc_known(pk, [7, 8])
    copied = [pow(c, 3, pk.nsquare) for c in cts]
    assert not verify_plaintext_knowledge(pk, copied, prove_plaintext_knowledge(pk, copied, ms, rs, CTX), CTX)
    assert not verify_plaintext_knowledge(pk, cts, prove_plaintext_knowledge(pk, cts, [7, 9], rs, CTX), CTX)


def test_keyed_nonces_replay_and_depend_on_the_key_and_the_witness(key):
    """With a nonce key the proof is a function of the key and the witness (a replayed prover re-sends it);
    another key, or another witness of the same ciphertexts' plaintexts, gives another commitment."""
    pk, _ = key
    cts, ms, rs = _enc_known(pk, [1, 2])
    one = prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"a" * 32)
    assert prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"a" * 32) == one
    assert prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"b" * 32)[0] != one[0]
    assert prove_plaintext_knowledge(pk, cts, ms, rs, b"other", b"a" * 32)[0] != one[0]
    cts2, ms2, rs2 = _enc_known(pk, [1, 3], seed=2)
    assert prove_plaintext_knowledge(pk, cts2, ms2, rs2, CTX, b"a" * 32)[0] != one[0]


def test_the_nonce_stream_separates_its_label_from_the_witness():
    """The keyed nonce hashes the label (the nonce's name and the context) and then the witness's integers,
    each length-prefixed.  Were the label not length-prefixed, a context ending in the encoding of the first
    integer, with that integer dropped from the witness, would hash alike: two statements, one nonce."""
    from smcdp.crypto.zkp import _witness_stream

    key, label = b"k" * 32, b"x:context"
    shifted = label + (1).to_bytes(4, "big") + b"\x05"  # the label swallowing the encoding of the integer 5
    assert _witness_stream(key, label, [5, 6], 64) != _witness_stream(key, shifted, [6], 64)
    assert _witness_stream(key, label, [5, 6], 64) == _witness_stream(key, label, [5, 6], 64)


# ----------------------------------------------------------------------------- scaling by a secret
def _scaled(key, plaintexts, bits=300, seed=7):
    import random

    import gmpy2

    pk = key[0]
    rng = random.Random(seed)
    bases = [pk.raw_encrypt(m) for m in plaintexts]
    rs = [rng.getrandbits(bits) for _ in bases]
    ss = [rng.randrange(1, int(pk.n)) for _ in bases]
    n2 = pk.nsquare
    cts = [int(gmpy2.powmod(b, r, n2) * gmpy2.powmod(s, pk.n, n2) % n2) for b, r, s in zip(bases, rs, ss)]
    return pk, bases, cts, (rs, ss)


def test_a_scaling_proof_verifies_and_its_ciphertexts_decrypt_to_multiples(key):
    from smcdp.crypto.zkp import prove_scaling, verify_scaling

    pk, bases, cts, (rs, ss) = _scaled(key, [0, 1, 3, 5])
    proof = prove_scaling(pk, bases, cts, rs, ss, b"ctx")
    assert verify_scaling(pk, bases, cts, proof, b"ctx", 300)
    assert [key[1].raw_decrypt(c) for c in cts] == [m * r % pk.n for m, r in zip([0, 1, 3, 5], rs)]
    keyed = prove_scaling(pk, bases, cts, rs, ss, b"ctx", nonce_key=b"k" * 32)
    assert keyed == prove_scaling(pk, bases, cts, rs, ss, b"ctx", nonce_key=b"k" * 32) != proof
    assert verify_scaling(pk, bases, cts, keyed, b"ctx", 300)


def test_a_scaling_proof_fails_for_anything_mixed_in_another_context_or_base(key):
    """One ciphertext times another's (the leak it exists to stop), an encryption of a constant, a swapped
    pair, another context, another base: refused -- with the verifier's fresh batching weights, every time."""
    from smcdp.crypto.zkp import prove_scaling, verify_scaling

    pk, bases, cts, (rs, ss) = _scaled(key, [0, 1, 3, 5])
    proof = prove_scaling(pk, bases, cts, rs, ss, b"ctx")
    n2 = pk.nsquare
    mixed = [cts[0] * bases[2] % n2, *cts[1:]]
    shifted = [*cts[:3], cts[3] * pk.raw_encrypt(1) % n2]
    swapped = [cts[1], cts[0], *cts[2:]]
    for _ in range(3):
        for bad in (mixed, shifted, swapped):
            assert not verify_scaling(pk, bases, bad, proof, b"ctx", 300)
            # a proof made for the bad ciphertexts with the honest exponents fails too
            assert not verify_scaling(pk, bases, bad, prove_scaling(pk, bases, bad, rs, ss, b"ctx"), b"ctx", 300)
        assert not verify_scaling(pk, bases, cts, proof, b"other", 300)
        assert not verify_scaling(pk, [bases[1], bases[0], *bases[2:]], cts, proof, b"ctx", 300)
    assert not verify_scaling(pk, bases, cts, proof[:-1], b"ctx", 300)
    assert not verify_scaling(pk, bases, cts, proof, b"ctx", 100)  # responses beyond the stated exponents' bits
    # the wrong randomness: the re-randomiser is part of the witness
    assert not verify_scaling(
        pk, bases, cts, prove_scaling(pk, bases, cts, rs, [s + 1 for s in ss], b"ctx"), b"ctx", 300
    )


def _bits_encrypted(pk, bits, seed=3):
    import random

    import gmpy2

    rng = random.Random(seed)
    n, n2 = pk.n, pk.nsquare
    rs = [rng.randrange(1, int(n)) for _ in bits]
    return [int((1 + b * n) * gmpy2.powmod(r, n, n2) % n2) for b, r in zip(bits, rs)], rs


def test_many_bit_proofs_verify_together_and_one_wrong_entry_among_many_fails(key):
    import random

    from smcdp.crypto.zkp import prove_bits, verify_bits

    pk = key[0]
    bits = [0, 1, 1, 0, 1, 0, 0, 1]
    cts, rs = _bits_encrypted(pk, bits)
    streams = [random.Random(k) for k in range(len(bits))]  # tests only: a protocol passes cryptographic streams
    proof = prove_bits(pk, cts, bits, rs, b"ctx", streams)
    assert verify_bits(pk, cts, proof, b"ctx") and not verify_bits(pk, cts, proof, b"other")
    again = prove_bits(pk, cts, bits, rs, b"ctx", [random.Random(k) for k in range(len(bits))])
    assert again == proof  # the same streams, the same proof (a replay)
    assert len({tuple(proof[5 * k : 5 * k + 5]) for k in range(len(bits))}) == len(bits)  # each entry its own
    n2 = pk.nsquare
    two = (1 + 2 * pk.n) * (cts[5] * (1 - pk.n) % n2) % n2  # entry 5 now encrypts 1 -> made to encrypt 2
    bad = [*cts[:5], int(two), *cts[6:]]
    for _ in range(5):
        assert not verify_bits(pk, bad, proof, b"ctx")
    with pytest.raises(ValueError):
        prove_bits(pk, cts, [*bits[:5], 2, *bits[6:]], rs, b"ctx")
    swapped = [*proof[5:10], *proof[0:5], *proof[10:]]  # entry 1's proof in entry 0's place: bound to k
    assert not verify_bits(pk, cts, swapped, b"ctx")


def test_scaling_proofs_of_several_provers_verify_together_and_errors_do_not_cancel(key):
    """Two provers scale the same bases; one's ciphertext encrypts one more than it should, the other's one less:
    the batch (the verifier's own weights per prover and entry) refuses it, every time."""
    import gmpy2

    from smcdp.crypto.zkp import prove_scaling, verify_scalings

    pk, bases, cts1, (rs1, ss1) = _scaled(key, [0, 1, 3, 5], seed=1)
    _, _, _, (rs2, ss2) = _scaled(key, [0, 1, 3, 5], seed=2)  # the second prover's exponents, on the same bases

    n2 = pk.nsquare
    cts2 = [int(gmpy2.powmod(b, r, n2) * gmpy2.powmod(s, pk.n, n2) % n2) for b, r, s in zip(bases, rs2, ss2)]
    p1 = prove_scaling(pk, bases, cts1, rs1, ss1, b"one")
    p2 = prove_scaling(pk, bases, cts2, rs2, ss2, b"two")
    assert verify_scalings(pk, bases, [(cts1, p1, b"one"), (cts2, p2, b"two")], 300)
    plus = [cts1[0] * pk.raw_encrypt(1) % n2, *cts1[1:]]
    minus = [cts2[0] * pk.raw_encrypt(-1) % n2, *cts2[1:]]
    for _ in range(5):
        assert not verify_scalings(pk, bases, [(plus, p1, b"one"), (minus, p2, b"two")], 300)
    assert not verify_scalings(pk, bases, [(cts1, p1, b"two"), (cts2, p2, b"one")], 300)  # contexts swapped


def test_several_provers_bit_proofs_verify_in_one_check_and_one_wrong_fails_it(key):
    from smcdp.crypto.zkp import prove_bits, verify_bits_many

    pk = key[0]
    one_bits, two_bits = [0, 1, 1], [1, 0, 0]
    c1, r1 = _bits_encrypted(pk, one_bits, seed=1)
    c2, r2 = _bits_encrypted(pk, two_bits, seed=2)
    p1, p2 = prove_bits(pk, c1, one_bits, r1, b"one"), prove_bits(pk, c2, two_bits, r2, b"two")
    assert verify_bits_many(pk, [(c1, p1, b"one"), (c2, p2, b"two")])
    assert not verify_bits_many(pk, [(c1, p1, b"one"), (c2, p2, b"one")])  # the second bound to another context
    n2 = pk.nsquare
    bad = [c2[0], c2[1] * (1 + pk.n) % n2, c2[2]]  # entry 1 now encrypts 1 + 0 ... made 1, its proof says 0
    assert not verify_bits_many(pk, [(c1, p1, b"one"), (bad, p2, b"two")])
    assert not verify_bits_many(pk, [])


def _combined(key, rows_plain, exps, seed=11):
    """Ciphertexts c_ℓ = Π_j X_{jℓ}^{a_j}·s_ℓ^n of bases X_{jℓ} encrypting ``rows_plain[j][ℓ]``."""
    import random

    import gmpy2

    pk = key[0]
    rng = random.Random(seed)
    rows = [[pk.raw_encrypt(m) for m in row] for row in rows_plain]
    n2 = pk.nsquare
    ss = [rng.randrange(1, int(pk.n)) for _ in rows[0]]
    cts = []
    for i, s in enumerate(ss):
        c = gmpy2.powmod(s, pk.n, n2)
        for row, a in zip(rows, exps):
            c = c * gmpy2.powmod(row[i], a, n2) % n2
        cts.append(int(c))
    return pk, rows, cts, ss


def test_a_combination_proof_verifies_for_real_and_decoy_blocks_alike(key):
    """A block that is one base row scaled (Trent's real block) and one that mixes several (a decoy) are the
    same statement: both verify, decrypt to the combination, and the proofs have one shape."""
    from smcdp.crypto.zkp import combination_proof_size, prove_combination, verify_combination

    plain = [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    for exps in ([12345, 0, 0], [3 * 2**20, 5 * 2**20, 2**20]):
        pk, rows, cts, ss = _combined(key, plain, exps)
        proof = prove_combination(pk, rows, cts, exps, ss, b"ctx", 24)
        assert len(proof) == combination_proof_size(3, 3)
        assert verify_combination(pk, rows, cts, proof, b"ctx", 24)
        want = [sum(a * row[i] for a, row in zip(exps, plain)) % pk.n for i in range(3)]
        assert [key[1].raw_decrypt(c) for c in cts] == want
        keyed = prove_combination(pk, rows, cts, exps, ss, b"ctx", 24, nonce_key=b"k" * 32)
        assert keyed == prove_combination(pk, rows, cts, exps, ss, b"ctx", 24, nonce_key=b"k" * 32) != proof
        assert verify_combination(pk, rows, cts, keyed, b"ctx", 24)
        # the responses lie in the same public range whichever exponents are zero
        assert all(z < 1 << (24 + 128 + 80 + 1) for z in proof[3:6])
    with pytest.raises(ValueError):
        prove_combination(pk, rows, cts, [1 << 24, 0, 0], ss, b"ctx", 24)


def test_a_combination_proof_fails_for_anything_but_one_combination_of_the_bases(key):
    """What a coordinator would need to read one party's contribution -- a ciphertext outside the bases (one
    party's own), entries combined with different exponents, a constant added, a swap -- is refused, as are
    another context, other bases, and responses beyond the stated bits: with fresh batching weights each time."""
    import gmpy2

    from smcdp.crypto.zkp import prove_combination, verify_combination

    plain = [[1, 2, 3, 4], [5, 6, 7, 8]]
    exps = [1000, 77]
    pk, rows, cts, ss = _combined(key, plain, exps)
    proof = prove_combination(pk, rows, cts, exps, ss, b"ctx", 16)
    n2 = pk.nsquare
    outsider = pk.raw_encrypt(42)
    foreign = [outsider, *cts[1:]]
    mixed = [cts[0] * outsider % n2, *cts[1:]]
    per_entry = [int(gmpy2.powmod(rows[0][0], 999, n2) * gmpy2.powmod(rows[1][0], 77, n2) % n2), *cts[1:]]
    shifted = [*cts[:3], cts[3] * pk.raw_encrypt(1) % n2]
    swapped = [cts[1], cts[0], *cts[2:]]
    for _ in range(3):
        for bad in (foreign, mixed, per_entry, shifted, swapped):
            assert not verify_combination(pk, rows, bad, proof, b"ctx", 16)
            assert not verify_combination(
                pk, rows, bad, prove_combination(pk, rows, bad, exps, ss, b"ctx", 16), b"ctx", 16
            )
        assert not verify_combination(pk, rows, cts, proof, b"other", 16)
        assert not verify_combination(pk, rows[::-1], cts, proof, b"ctx", 16)
        assert not verify_combination(pk, [rows[0]], cts, proof, b"ctx", 16)
    assert not verify_combination(pk, rows, cts, proof[:-1], b"ctx", 16)
    assert not verify_combination(pk, rows, cts, proof, b"ctx", 8)
    bad_s = prove_combination(pk, rows, cts, exps, [s + 1 for s in ss], b"ctx", 16)
    assert not verify_combination(pk, rows, cts, bad_s, b"ctx", 16)


def test_djn_nonces_powers_of_the_keys_base_verify_replay_and_still_fail_when_false(key):
    """djn=True (a group key's proofs, whose witnesses are powers h^a of the key's public base): the proof of
    plaintext knowledge, the bit proofs, the scaling and the combination proof all verify with the unchanged
    verifiers, a keyed prover sends the same bytes twice and other bytes than the textbook nonces, the nonce
    units are powers of h, and a false statement still fails (soundness does not rest on the nonces)."""
    import gmpy2

    from smcdp.crypto.threshold import encrypt_replayable, encryption_base, replayable_obfuscator
    from smcdp.crypto.zkp import (
        prove_bits,
        prove_combination,
        prove_scaling,
        verify_bits,
        verify_combination,
        verify_scaling,
    )

    pk = key[0]
    n, n2 = pk.n, pk.nsquare
    h = encryption_base(int(n))
    ms, exps = [0, 1, 1, 0], [11, 2**60 + 3, 5, 2**40]
    pairs = [encrypt_replayable(pk, m, a) for m, a in zip(ms, exps)]
    cts, rs = [int(c) for c, _ in pairs], [int(r) for _, r in pairs]

    popk = prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"k" * 32, djn=True)
    assert verify_plaintext_knowledge(pk, cts, popk, CTX)
    assert popk == prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"k" * 32, djn=True)
    assert popk != prove_plaintext_knowledge(pk, cts, ms, rs, CTX, b"k" * 32)
    assert verify_plaintext_knowledge(pk, cts, prove_plaintext_knowledge(pk, cts, ms, rs, CTX, djn=True), CTX)
    # the response w is h^(b + Σ e_i a_i): a power of h, as the nonce is
    assert not verify_plaintext_knowledge(pk, cts, [popk[0], (popk[1] + 1) % n, popk[2]], CTX)

    bits = prove_bits(pk, cts, ms, rs, CTX, djn=True)
    assert verify_bits(pk, cts, bits, CTX)
    two, r2 = encrypt_replayable(pk, 2, 7)
    with pytest.raises(ValueError):
        prove_bits(pk, [int(two)], [2], [int(r2)], CTX, djn=True)
    forged = prove_bits(pk, [int(two)], [1], [int(r2)], CTX, djn=True)  # claims 1 for an encryption of 2
    assert not verify_bits(pk, [int(two)], forged, CTX)

    scale_r = [3, 2**70 + 1, 9, 4]
    obf = [replayable_obfuscator(pk, a) for a in (1, 2, 3, 4)]
    D = [int(gmpy2.powmod(c, r, n2) * on % n2) for c, r, (on, _) in zip(cts, scale_r, obf)]
    ss = [int(s) for _, s in obf]
    proof = prove_scaling(pk, cts, D, scale_r, ss, CTX, b"k" * 32, djn=True)
    assert proof == prove_scaling(pk, cts, D, scale_r, ss, CTX, b"k" * 32, djn=True)
    assert verify_scaling(pk, cts, D, proof, CTX, 71)
    assert not verify_scaling(pk, cts, [D[0] * (1 + n) % n2, *D[1:]], proof, CTX, 71)

    rows = [cts, [int(c) for c in reversed(cts)]]
    coef = [5, 7]
    combined = [
        int(gmpy2.powmod(a, coef[0], n2) * gmpy2.powmod(b, coef[1], n2) * on % n2)
        for a, b, (on, _) in zip(rows[0], rows[1], obf)
    ]
    cproof = prove_combination(pk, rows, combined, coef, ss, CTX, 8, b"k" * 32, djn=True)
    assert verify_combination(pk, rows, combined, cproof, CTX, 8)
    assert not verify_combination(pk, rows, [combined[0] * (1 + n) % n2, *combined[1:]], cproof, CTX, 8)
    # the nonce unit of the djn form is h^b with b drawn at the exponent size, u^n from the table; the textbook
    # form is the drawn unit itself
    from smcdp.crypto.threshold import djn_exponent_bits
    from smcdp.crypto.zkp import _nonce_unit

    sizes = []
    u, un = _nonce_unit(pk, True, lambda b: sizes.append(b) or 12345, lambda: pytest.fail("no unit is drawn"))
    assert sizes == [djn_exponent_bits(pk)] and u == pow(int(h), 12345, int(n)) and un == pow(int(u), int(n), int(n2))
    u, un = _nonce_unit(pk, False, lambda b: pytest.fail("no exponent is drawn"), lambda: gmpy2.mpz(77))
    assert u == 77 and un == pow(77, int(n), int(n2))


def test_a_verifier_answers_false_for_a_ciphertext_or_proof_that_is_no_integer_or_out_of_range(key):
    """A review: verify_bit took a ciphertext as a string (mpz() parsed it; True) or negative (OverflowError), and
    verify_plaintext_knowledge a proof of decimal strings (True).  A verifier now answers False for any element
    that is not an integer (a string, a fraction, a bool) and for a ciphertext outside (0, n²) or not a unit."""
    pk, sk = key
    c = pk.raw_encrypt_textbook(1)
    proof = prove_bit(sk, c, 1, CTX)
    assert verify_bit(pk, c, proof, CTX)
    for bad_c in (str(c), -int(c), int(c) + int(pk.nsquare), 0, 2.5, True):
        assert verify_bit(pk, bad_c, proof, CTX) is False, bad_c
    assert verify_bit(pk, c, [str(v) for v in proof], CTX) is False
    assert verify_bit(pk, c, "x" * 5, CTX) is False
    cts, ms, rs = _enc_known(pk, [1, 2, 3])
    popk = prove_plaintext_knowledge(pk, cts, ms, rs, CTX)
    assert verify_plaintext_knowledge(pk, cts, popk, CTX)
    assert verify_plaintext_knowledge(pk, cts, tuple(str(v) for v in popk), CTX) is False
    assert verify_plaintext_knowledge(pk, [str(v) for v in cts], popk, CTX) is False
    assert verify_one_hot(pk, [str(c)], [*proof, 1], CTX) is False
    # the caller's own mistake is not the prover's: a context that is not bytes still raises
    with pytest.raises(TypeError):
        verify_bit(pk, c, proof, "session-1")
    with pytest.raises(TypeError):
        verify_plaintext_knowledge(pk, cts, popk, None)
