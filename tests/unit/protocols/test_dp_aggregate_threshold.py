"""dp-aggregate under a group (threshold) key, in memory, with dealt shares (smcdp.crypto.threshold.deal: the key
ceremony is tested on its own).

What is shown: the release is Σ_j W_j + Σ_j N_j exactly, every share drawn for the smallest party's size level,
which covers every party; the zero test gives the parties that level and not the number of parties at any level;
a party mixing another ciphertext into its blinded counts is refused and named, and so is a Charlie relaying
something else; and Charlie with t data parties, pooling their shares and every message they received, reads
neither an honest party's level contribution nor its release -- where with party1's key ξ (the single-key modes)
Charlie with any data party reads every party's size.
"""

from __future__ import annotations

import numpy as np
import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.threshold import NotEnoughShares, combine, deal, partial_decrypt
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.protocols.dp_aggregate import (
    DPAggregateParams,
    dave,
    sensitivity_key,
    shared_noise,
    to_fixed,
)
from smcdp.protocols.dp_aggregate_threshold import (
    COARSE,
    FINE,
    RELEASE,
    charlie,
    coarse_thresholds,
    data_party,
    fine_thresholds,
    first_nonzero,
    level_of,
    thermometer,
)
from smcdp.protocols.power_iteration_threshold import BadContributionProof, ContributionMismatch, GroupKey
from smcdp.v1 import messages_pb2 as pb
from tests.support.group_keys import relayed_release, with_relayed_release
from tests.unit.protocols.aggregate_util import run_network, tamper_message
from tests.unit.protocols.test_dp_aggregate import released_T


@pytest.fixture(scope="module")
def sk768():
    return generate_keypair(768, allow_insecure=True)[1]


def params_for(K, t, d=3, **kw) -> DPAggregateParams:
    base = dict(
        n_parties=K,
        dim=d,
        epsilon=1.0,
        lam=0.1,
        max_sensitivity=0.5,
        calibration="gaussian",
        delta=1e-5,
        key_bits=768,
        dgk_bits=512,
        dgk_t=64,
        key_group="lab",
        key_threshold=t,
        noise_parties=K - t,
        size_levels=12,
        levels_per_octave=2,
    )
    return DPAggregateParams(**{**base, **kw}).validate()


def run(p, weights, sens, shares, *, noise_seeds=None, tamper=None, roots=None):
    K = p.n_parties
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": f"org{i + 1}" for i in range(K)}}
    indices = {f"party{i + 1}": i + 1 for i in range(K)}
    fns = {
        "charlie": lambda ch: charlie(ch, p, allow_insecure_keys=True),
        "dave": lambda ch: dave(ch, p),
    }
    for i in range(K):
        rs = None if noise_seeds is None else np.random.default_rng(noise_seeds[i])
        fns[f"party{i + 1}"] = lambda ch, i=i, rs=rs: data_party(
            ch,
            weights[i],
            sens[i],
            p,
            GroupKey(shares[i], indices, "lab"),
            noise_random_state=rs,
            seed=None if roots is None else roots[i],
        )
    return run_network(roles, fns, tamper)


def _rounded_sum(p, ws):
    return np.array([[to_fixed(x, p.frac_bits) for x in w] for w in ws], dtype=object).sum(axis=0)


@pytest.mark.parametrize("K,t,smallest", [(3, 1, 2), (4, 2, 0)])
def test_the_release_is_the_models_plus_every_partys_share_for_the_smallest_level(sk768, K, t, smallest):
    p = params_for(K, t)
    _, shares = deal(sk768, K, t)
    rng = np.random.default_rng(K)
    ws = [rng.uniform(-1, 1, size=p.dim) for _ in range(K)]
    sens = [0.02, 0.04, 0.1, 0.3][-K:]  # levels 9, 7, 4, 1 of 0..11 at two per octave from Δ_max = 0.5
    sens[smallest], sens[-1] = sens[-1], sens[smallest]  # the largest sensitivity (smallest key) at `smallest`
    seeds = [900 + j for j in range(K)]
    res, _ = run(p, ws, sens, shares, noise_seeds=seeds)
    table = p.level_keys
    levels = [level_of(sensitivity_key(s)[0], table) for s in sens]
    k_hat = table[min(levels)]
    assert min(levels) == levels[smallest] and all(k_hat <= sensitivity_key(s)[0] for s in sens)
    assert len(set(levels)) == K and 0 < min(levels) < p.size_levels - 1  # distinct, not the bottom or top
    for j in range(K):
        assert res[f"party{j + 1}"].size_level["selected"] == min(levels)
        assert res[f"party{j + 1}"].key["threshold"] == t
    N = [shared_noise(f"party{j + 1}", p, k_hat, np.random.default_rng(seeds[j])) for j in range(K)]
    T = released_T(res, p)
    assert [int(x - w) for x, w in zip(T, _rounded_sum(p, ws))] == [sum(col) for col in zip(*N)]
    assert res["charlie"].comparisons == 0  # no DGK comparisons: the selection is the zero test


def test_levels_round_keys_down_and_the_zero_test_reads_the_first_nonzero():
    table = [10, 14, 20, 28, 40]
    assert [level_of(k, table) for k in (10, 13, 14, 39, 40, 10**9)] == [0, 0, 1, 3, 4, 4]
    with pytest.raises(InvalidMessage):
        level_of(9, table)
    assert thermometer(2, [0, 1, 2, 3]) == [0, 0, 1, 1]
    assert first_nonzero([0, 0, 7, 5]) == 2 and first_nonzero([0, 0, 0, 0]) == 4
    with pytest.raises(InvalidMessage, match="not zeros-then-nonzeros"):
        first_nonzero([0, 3, 0, 5])
    # two zero tests find every level: the group (the last level of each but the top group), then within it
    for L, s in ((33, 4), (12, 2), (10, 3), (7, 7)):
        assert len(coarse_thresholds(L, s)) == -(-L // s) - 1
        for level in range(L):
            bits = thermometer(level, coarse_thresholds(L, s))
            group = next((i for i, b in enumerate(bits) if b), len(bits))
            fine = fine_thresholds(L, s, group)
            assert len(fine) == s - 1
            within = next((i for i, b in enumerate(thermometer(level, fine)) if b), len(fine))
            assert min(s * group + within, L - 1) == level, (L, s, level)


def test_the_zero_test_shows_the_smallest_level_and_not_how_many_parties_share_it(sk768):
    """Sessions whose parties' levels differ: every decrypted value of both zero tests is 0 below the smallest
    level's group (then its level) and, at and above it, of N's size -- not the count of parties (1 to 3)."""
    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)
    ws = [np.zeros(p.dim)] * 3
    L, s = p.size_levels, p.levels_per_octave
    for sens in ([0.02, 0.02, 0.02], [0.02, 0.2, 0.45], [0.3, 0.25, 0.02], [0.001, 0.001, 0.001]):
        _, net = run(p, ws, sens, shares)
        smallest = min(level_of(sensitivity_key(x)[0], p.level_keys) for x in sens)
        coarse, fine = _zero_test_values(net, p, shares, COARSE), _zero_test_values(net, p, shares, FINE)
        expect_c = [int(smallest <= t) for t in coarse_thresholds(L, s)]
        expect_f = [
            int(smallest <= t)
            for t in fine_thresholds(L, s, next((i for i, b in enumerate(expect_c) if b), len(expect_c)))
        ]
        assert [int(z != 0) for z in coarse] == expect_c and [int(z != 0) for z in fine] == expect_f
        assert all(z > 1 << 700 or z == 0 for z in coarse + fine)  # 768-bit N: counts (1..3) would be tiny


def _zero_test_values(net, p, shares, rnd):
    """Zero test ``rnd``'s plaintexts, from the partial decryptions party1 received (party2's, party3's)."""
    from smcdp.protocols.power_iteration_threshold import partial_from_proto

    received = net.received_by("party1")
    cts = None
    for _sender, tag, _, data in received:
        if tag != rnd.blinded.contrib:
            continue
        for entry in pb.RelayedReleases.FromString(data).releases:
            vals = [int.from_bytes(c, "big") for c in entry.release.ciphertexts]
            cts = vals if cts is None else [a * b % shares[0].public.public_key.nsquare for a, b in zip(cts, vals)]
    assert cts is not None
    pub = shares[0].public
    from smcdp.crypto.threshold import PartialDecryption, _combine, assigned, decryptors, partial_decrypt

    # the work is split: party j's partial covers its assigned ciphertexts; party1 adds its own
    from smcdp.protocols.power_iteration_threshold import split_offset

    offset = split_offset(net.session_id, rnd.blinded.partial, pub.parties)
    at = {i: assigned(len(cts), pub.parties, pub.threshold, i, offset) for i in range(1, pub.parties + 1)}
    partials = {
        int(sender[-1]): partial_from_proto(
            pb.BigInts.FromString(data), pub, int(sender[-1]), len(at[int(sender[-1])]), "partial"
        )
        for sender, tag, _, data in received
        if tag == rnd.blinded.partial
    }
    if at[1]:
        partials[1] = partial_decrypt(shares[0], [cts[k] for k in at[1]], b"unchecked")
    out = []
    for k, group in enumerate(decryptors(len(cts), pub.parties, pub.threshold, offset)):
        sub = [PartialDecryption(i, (partials[i].values[at[i].index(k)],), (), True) for i in group]
        out.extend(_combine(pub, 1, sub))
    return out


def test_a_party_mixing_another_ciphertext_into_its_blinded_counts_is_refused_and_named(sk768, monkeypatch):
    """party3 multiplies party1's level bit at another level into one of its blinded counts: decrypted where
    nobody is at or below the level, that count would read party1's bit.  It commits to the mixed counts (so
    Charlie's relay matches its digest), but its scaling proof fails at every honest party, which names it."""
    import smcdp.protocols.dp_aggregate_threshold as mod

    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)
    n2 = shares[0].public.public_key.nsquare
    held = {}
    real = mod._blind

    def blind(pk, C, rs, ss, context, seed, who):
        D, proof = real(pk, C, rs, ss, context, seed, who)
        if who == "party3":
            D = [D[0] * held["party1 level 5"] % n2, *D[1:]]
        return D, proof

    def tamper(net):
        original = net.channels["party3"].recv

        async def recv(sender, tag, cls):  # party3 keeps party1's level ciphertexts as Charlie relays them
            msg = await original(sender, tag, cls)
            if tag == COARSE.levels.contrib:
                release = next(e.release for e in msg.releases if e.role == "party1")
                held["party1 level 5"] = int.from_bytes(release.ciphertexts[4], "big")
            return msg

        net.channels["party3"].recv = recv

    monkeypatch.setattr(mod, "_blind", blind)
    with pytest.raises(BadContributionProof) as info:
        run(p, [np.zeros(p.dim)] * 3, [0.001, 0.002, 0.003], shares, tamper=tamper)
    assert info.value.origin == "org3"


def test_charlie_relaying_other_blinded_counts_is_named(sk768):
    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)

    def tamper(net):
        def swap(data):
            vec = relayed_release(data, "party2")
            vec.ciphertexts[0], vec.ciphertexts[1] = vec.ciphertexts[1], vec.ciphertexts[0]
            return with_relayed_release(data, "party2", vec)

        tamper_message(net, "charlie", COARSE.blinded.contrib, swap, receiver="party1")

    with pytest.raises(ContributionMismatch) as info:
        run(p, [np.zeros(p.dim)] * 3, [0.001, 0.002, 0.003], shares, tamper=tamper)
    assert info.value.origin == "charlie"


def test_charlie_and_t_parties_read_no_honest_contribution(sk768):
    """n = 3, t = 1: Charlie and party1 pool party1's share and every message either received.  party3's level
    thermometer and its release do not decrypt with one share, nor with the honest parties' partial decryptions
    (which are of the sums only); they decrypt what the protocol gives them."""
    p = params_for(3, 1)
    pub, shares = deal(sk768, 3, 1)
    ws = [np.full(p.dim, 0.25), np.full(p.dim, -0.5), np.full(p.dim, 0.75)]
    res, net = run(p, ws, [0.001, 0.002, 0.003], shares)
    pk = pub.public_key
    held = net.received_by("charlie") + net.received_by("party1")
    release3 = next(
        pb.CiphertextVector.FromString(d) for s, tag, _, d in held if s == "party3" and tag == RELEASE.release
    )
    vec = EncryptedVector.from_proto(release3, pk, packing=p.packing(pk))
    cts = [int(c) for c in vec.ciphertexts]
    own = partial_decrypt(shares[0], cts, b"coalition")
    with pytest.raises(NotEnoughShares):
        combine(pub, cts, [own], b"coalition")
    # the honest parties' partial decryptions the coalition holds are of the releases' sum, not of party3's
    from smcdp.protocols.power_iteration_threshold import partial_from_proto

    honest = [
        partial_from_proto(pb.BigInts.FromString(d), pub, int(s[-1]), len(cts), "p")
        for s, tag, _, d in held
        if tag == RELEASE.partial and s != "party1"
    ]
    assert honest
    with pytest.raises(InvalidMessage):  # their proofs are for the sum: they do not verify for party3's release
        combine(pub, cts, [own, honest[0]], b"coalition")
    from smcdp.crypto.threshold import _combine  # unverified: no decryption at all (c' ≢ 1 mod N), refused

    with pytest.raises(InvalidMessage, match="do not combine to a decryption"):
        _combine(pub, len(cts), [own, honest[0]])
    # what they do get: the release, a DP output
    assert len(released_T(res, p)) == p.dim


@pytest.mark.parametrize("K,t,d", [(3, 1, 3), (5, 2, 40)])
def test_traffic_envelope_covers_every_message_under_a_group_key(sk768, K, t, d):
    """Charlie: the group key, three stages' digests, echoes, releases and proofs, the partial decryptions of
    the releases' sum.  A data party: Charlie's relays, the others' digests and echoes, the zero test's partial
    decryptions.  Dave: the K + 1 shares.  (The session's ending messages are not in the in-memory network.)"""
    p = params_for(K, t, d=d)
    _, shares = deal(sk768, K, t)
    res, net = run(p, [np.zeros(d)] * K, [0.01] * K, shares)
    assert len(released_T(res, p)) == d
    for role in ["charlie", "dave", *p.party_roles]:
        env = p.traffic_envelope(role)
        got = [len(data) for *_, data in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags, role
        assert env.session_bytes < 4 * sum(got) + 4096, role


def test_a_thermometer_entry_that_is_not_a_bit_is_refused_and_named(sk768, monkeypatch):
    """party3 encrypts −1 at a level: the zero test there would say whether exactly one other party sits at or
    below it (counts, not just the smallest level).  Its entries' bit proofs fail at every honest party, which
    names it before anything is blinded or decrypted."""
    import smcdp.protocols.dp_aggregate_threshold as mod
    from smcdp.crypto.zkp import prove_bits
    from smcdp.protocols.power_iteration_threshold import ProofKind

    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)
    sens = [0.3, 0.2, 0.05]
    probing = level_of(sensitivity_key(sens[2])[0], p.level_keys)
    assert probing not in {level_of(sensitivity_key(x)[0], p.level_keys) for x in sens[:2]}
    real = mod.thermometer

    def thermometer(level, thresholds):
        bits = real(level, thresholds)
        return [-1, *bits[1:]] if level == probing else bits

    def prove(pk, cts, ms, rs, context, key):  # a "proof" made as if the entry were a bit
        return prove_bits(pk, cts, [m if m in (0, 1) else 1 for m in ms], rs, context)

    monkeypatch.setattr(mod, "thermometer", thermometer)
    monkeypatch.setattr(mod, "BITS", ProofKind(mod.BITS.claim, mod.BITS.size, prove, mod.BITS.verify))
    with pytest.raises(BadContributionProof) as info:
        run(p, [np.zeros(p.dim)] * 3, sens, shares)
    assert info.value.origin == "org3" and "0 or 1" in str(info.value)


def test_a_curious_party_cannot_read_the_counts_from_the_blinded_counts_it_holds(sk768, monkeypatch):
    """Found by review: with D = C^r (no re-randomisation), party1 -- following the protocol -- holds z (decrypted
    by everyone), its own r, the C it recomputed and the others' D; for a guessed count c the others' exponent
    sum is z/c − r_1 mod N up to a multiple k·N of N with k below the exponents' excess over N, which it can
    search.  The excess is cut to 8 bits here so that the search is quick (at 64 bits it is a kangaroo of ~2^33
    steps a guess).  Without the re-randomisers the search reads every count; with them it reads nothing."""
    import gmpy2

    import smcdp.protocols.dp_aggregate_threshold as mod
    from smcdp.v1 import messages_pb2 as pb

    monkeypatch.setattr(mod, "BLIND_EXTRA_BITS", 8)
    p = params_for(3, 1)
    pub, shares = deal(sk768, 3, 1)
    n, n2 = int(pub.public_key.n), int(pub.public_key.nsquare)
    sens = [0.3, 0.1, 0.1]
    levels = [level_of(sensitivity_key(x)[0], p.level_keys) for x in sens]
    thresholds = coarse_thresholds(p.size_levels, p.levels_per_octave)
    true_counts = [sum(lv <= t for lv in levels) for t in thresholds]

    real_blind, real_exps = mod._blind, mod.blinding_exponents

    def counts_read(unrandomised: bool) -> list[list[int]]:
        own = {}

        def blind(pk, C, rs, ss, context, seed, who):
            if who == "party1" and len(C) == len(thresholds):
                own.update(r=list(rs), C=[int(c) for c in C])
            return real_blind(pk, C, rs, ss, context, seed, who)

        def exps(key, n_, count, bits):
            rs, exps_ = real_exps(key, n_, count, bits)
            return rs, ([0] * count if unrandomised else exps_)  # a = 0: the re-randomiser (h^N)^0 = 1

        monkeypatch.setattr(mod, "_blind", blind)
        monkeypatch.setattr(mod, "blinding_exponents", exps)
        _, net = run(p, [np.zeros(p.dim)] * 3, sens, shares)
        z = _zero_test_values(net, p, shares, COARSE)
        others = [1] * len(z)
        for _sender, tag, _, data in net.received_by("party1"):
            if tag != COARSE.blinded.contrib:
                continue
            for entry in pb.RelayedReleases.FromString(data).releases:
                if entry.role != "party1":
                    cts = [int.from_bytes(c, "big") for c in entry.release.ciphertexts]
                    others = [a * b % n2 for a, b in zip(others, cts)]
        read = []
        for ell, zl in enumerate(z):
            found = []
            C = own["C"][ell]
            step = int(gmpy2.powmod(C, n, n2))
            for c in range(1, 4) if zl else ():
                r0 = (zl * pow(c, -1, n) - own["r"][ell]) % n
                target = others[ell] * int(gmpy2.invert(gmpy2.powmod(C, r0, n2), n2)) % n2
                acc = 1
                for _ in range(1 << 11):
                    if acc == target:
                        found.append(c)
                        break
                    acc = acc * step % n2
            read.append(found)
        return read

    assert counts_read(unrandomised=True) == [[c] if c else [] for c in true_counts]  # the attack works
    assert counts_read(unrandomised=False) == [[] for _ in true_counts]  # and reads nothing now


def test_charlie_refuses_a_share_map_from_party1_that_the_others_do_not_hold(sk768):
    """Found by review: Charlie took the role -> share index map from party1 alone; a party1 swapping two
    indices made an honest party's partial decryption fail at the end, naming it.  Every other data party now
    sends Charlie a hash of the key and map it holds, and Charlie refuses before anything else, naming no one."""
    import json

    from smcdp.protocols.dp_aggregate_threshold import KEY_TAG

    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)

    def swap(data):
        msg = pb.Blobs.FromString(data)
        indices = json.loads(msg.values[1])
        indices["party2"], indices["party3"] = indices["party3"], indices["party2"]
        msg.values[1] = json.dumps(indices, sort_keys=True).encode()
        return msg.SerializeToString()

    with pytest.raises(InvalidMessage, match="differ from those party2, party3 hold") as info:
        run(
            p,
            [np.zeros(p.dim)] * 3,
            [0.3, 0.2, 0.1],
            shares,
            tamper=lambda net: tamper_message(net, "party1", KEY_TAG, swap),
        )
    assert getattr(info.value, "origin", None) is None


def test_blinding_exponents_fit_the_bound_the_verifier_checks_for_every_key_size():
    """Found by review: r was drawn with whole bytes of bits, the verifier bounds the proof's responses by
    |N| + 64: for |N| mod 8 in 1..6 honest proofs failed and their owners were named."""
    import gmpy2

    from smcdp.protocols.dp_aggregate_threshold import BLIND_EXTRA_BITS, blinding_exponents

    for bits in (768, 769, 770, 772, 774, 2048, 2050):
        n = int(gmpy2.next_prime(1 << (bits - 1))) * 3  # odd, of about that size; only its length matters here
        rs, exps = blinding_exponents(b"k" * 32, n, 64, n.bit_length() // 2)
        assert max(r.bit_length() for r in rs) <= n.bit_length() + BLIND_EXTRA_BITS
        assert max(r.bit_length() for r in rs) > n.bit_length() + BLIND_EXTRA_BITS - 8  # and about that long
        assert max(a.bit_length() for a in exps) <= n.bit_length() // 2
        assert max(a.bit_length() for a in exps) > n.bit_length() // 2 - 8 and len(set(exps)) == 64


@pytest.mark.parametrize("size_levels,per_octave", [(12, 1), (3, 4), (2, 2), (5, 5)])
def test_a_zero_test_with_no_level_to_test_is_skipped_by_everyone(sk768, size_levels, per_octave):
    """Found by review: one level a group (no second test) or one group (no first test) -- parameters validate()
    accepts -- had Charlie skip the empty test and the data parties start it: the session never ended."""
    p = params_for(3, 1, size_levels=size_levels, levels_per_octave=per_octave)
    _, shares = deal(sk768, 3, 1)
    sens = [0.3, 0.1, 0.02]
    seeds = [5, 6, 7]
    ws = [np.full(p.dim, 0.1 * j) for j in range(3)]
    res, _ = run(p, ws, sens, shares, noise_seeds=seeds)
    table = p.level_keys
    smallest = min(level_of(sensitivity_key(s)[0], table) for s in sens)
    assert res["party1"].size_level["selected"] == smallest
    N = [shared_noise(f"party{j + 1}", p, table[smallest], np.random.default_rng(seeds[j])) for j in range(3)]
    T = released_T(res, p)
    assert [int(x - w) for x, w in zip(T, _rounded_sum(p, ws))] == [sum(col) for col in zip(*N)]


def test_charlie_refuses_a_malformed_key_message_all_parties_agree_on(sk768, monkeypatch):
    """Every data party sends the same junk as the group's key and map (so the hashes agree): Charlie refuses it
    as INVALID_ARGUMENT (InvalidMessage), not with a TypeError or a RecursionError."""
    import smcdp.protocols.dp_aggregate_threshold as mod

    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)
    for junk in ([b"[" * 5000, b"{}"], [b'{"kind": 3}', b'{"party1": 1, "party2": "2", "party3": 3}'], [b"\xff", b"x"]):
        monkeypatch.setattr(mod, "_key_message", lambda pub, indices, junk=junk: list(junk))
        with pytest.raises(InvalidMessage, match="g0/key from party1"):
            run(p, [np.zeros(p.dim)] * 3, [0.3, 0.2, 0.1], shares)


def test_a_replayed_party_sends_the_same_bytes_so_its_commitments_still_hold(sk768):
    """Everything a data party sends under the group key -- level bits and their proofs, blinded counts and
    theirs, partial decryptions, the release and its proof, its published share -- comes from its randomness
    root (the nonces also from the witness): a party replayed after a crash re-sends every message bit for bit,
    so the digests the others hold still match.  Another root gives other bytes for every committed message."""
    from smcdp.primitives.rng import Randomness

    p = params_for(3, 1)
    _, shares = deal(sk768, 3, 1)
    ws = [np.full(p.dim, 0.1 * j) for j in range(3)]

    def sent(roots):
        _, net = run(p, ws, [0.3, 0.1, 0.02], shares, roots=roots)
        return {(s, r, t): d for s, r, t, _, d in net.transcript if s.startswith("party")}

    def root(i):  # a party's secret root, as its checkpoint keeps it (not an experiment seed)
        return Randomness(bytes([i]) * 32)

    first = sent([root(40 + i) for i in range(3)])
    assert first == sent([root(40 + i) for i in range(3)])
    other = sent([root(99), root(41), root(42)])
    tags = (COARSE.levels.release, COARSE.levels.proof, COARSE.blinded.release, COARSE.blinded.proof)
    tags += (COARSE.blinded.partial, RELEASE.release, RELEASE.proof, RELEASE.partial, "s3/share")
    for tag in tags:
        mine = [k for k in first if k[0] == "party1" and k[2] == tag]
        assert mine and all(first[k] != other[k] for k in mine), tag
