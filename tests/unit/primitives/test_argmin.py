"""Stage 1: the secure argmin (blind, permute, tournament) with real DGK comparisons (small keys, in memory)."""

import asyncio
import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from smcdp.crypto.codec import bigints, ciphertext_to_proto, from_bigints
from smcdp.errors import InvalidMessage, SessionAborted
from smcdp.primitives.argmin import (
    SecureMinParams,
    argmin_curator,
    argmin_party,
    check_permutation,
    check_selection_curator,
    check_selection_helper,
    check_selection_party,
    match_evaluator,
    run_tournament,
    tree_children,
    tree_parent,
    tree_size,
)
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.aggregate_util import run_network, tamper_message


def _params(K, value_bits=32):
    return SecureMinParams(n_parties=K, value_bits=value_bits, key_bits=768, dgk_bits=512, dgk_t=64)


def run_argmin(values, keys, *, value_bits=32, seed=None, tamper=None):
    K = len(values)
    p = _params(K, value_bits)
    roles = {"charlie": "charlie", **{f"party{i + 1}": f"p{i + 1}" for i in range(K)}}
    fns = {
        "charlie": lambda ch: argmin_curator(
            ch, p, zeta_key=keys["zeta"], dgk_key=keys["dgk"], seed=seed, allow_insecure_keys=True
        )
    }
    for i in range(K):
        fns[f"party{i + 1}"] = (
            lambda j: (
                lambda ch: argmin_party(
                    ch, values[j], p, xi_key=keys["xi"] if j == 0 else None, seed=seed, allow_insecure_keys=True
                )
            )
        )(i)
    res, net = run_network(roles, fns, tamper)
    c = res["charlie"]
    parties = [res[f"party{i + 1}"] for i in range(K)]
    holders = [i for i in range(K) if parties[i].position == c.position]
    assert len(holders) == 1
    # π₁ as the parties know it: every party its position and the party whose shares it held
    assert sorted(q.position for q in parties) == list(range(K))
    assert all(parties[q.position].source == i for i, q in enumerate(parties))
    # K − 1 comparisons in ⌈log₂ K⌉ rounds, every party but party1 evaluating one
    assert c.comparisons == K - 1 == sum(len(r) for r in c.rounds)
    assert len(c.rounds) == math.ceil(math.log2(K))
    evaluators = [r for (s, r, t, tn, d) in net.transcript if s == "charlie" and t == "s1/x"]
    assert sorted(evaluators) == sorted(f"party{i + 1}" for i in range(1, K))
    assert sum(1 for (s, r, t, tn, d) in net.transcript if t == "s1/cmp/dgk-bits") == K - 1
    return holders[0], res, net


def expected_argmin(values):
    return min(range(len(values)), key=lambda j: (values[j], j))


# ----------------------------------------------------------------------------- the bracket (plaintext)
def _plain_tournament(values):
    calls = []

    async def match(t, p, q):
        calls.append(t)
        return (values[p], p) < (values[q], q)

    winner, rounds = asyncio.run(run_tournament(len(values), match))
    assert sorted(calls) == list(range(len(values) - 1))  # every match number once
    return winner, rounds


@pytest.mark.parametrize("K", range(2, 8))
def test_tournament_all_permutations(K):
    """Every permutation of K distinct values (K ≤ 7: up to 5040) gives the minimum, in K − 1 matches."""
    for perm in itertools.permutations(range(K)):
        winner, rounds = _plain_tournament(perm)
        assert winner == perm.index(0)
        assert sum(len(r) for r in rounds) == K - 1 and len(rounds) == math.ceil(math.log2(K))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=2, max_size=300))
def test_tournament_finds_the_first_minimum(values):
    winner, rounds = _plain_tournament(values)
    assert winner == expected_argmin(values)
    # every position but the winner loses exactly once
    losers = [p if w == q else q for rnd in rounds for p, q, w in rnd]
    assert sorted(losers) == sorted(set(range(len(values))) - {winner})


@pytest.mark.parametrize("K", [1, 2, 3, 7, 8, 40, 256])
def test_tree_and_schedule(K):
    for i in range(K):
        for c in tree_children(i, K):
            assert tree_parent(c) == i
    assert tree_parent(0) is None and tree_size(0, K) == K
    assert sorted(c for i in range(K) for c in tree_children(i, K)) == list(range(1, K))
    assert sorted(match_evaluator(t) for t in range(K - 1)) == list(range(1, K))


# ----------------------------------------------------------------------------- the protocol (DGK)
@pytest.mark.parametrize("K", [2, 3, 4, pytest.param(5, marks=pytest.mark.slow)])  # K = 5: 120 runs, ~7 CPU-s
def test_all_permutations_small_K(K, keys):
    base = [10 + 7 * i for i in range(K)]
    for perm in itertools.permutations(base):
        j, _, _ = run_argmin(list(perm), keys)
        assert j == expected_argmin(perm), perm


@pytest.mark.parametrize("K", [6, 7, 8])
def test_every_position_of_the_minimum(K, keys):
    rng = random.Random(K)
    for pos in range(K):
        values = [rng.randrange(100, 10_000) for _ in range(K)]
        values[pos] = 99
        j, _, _ = run_argmin(values, keys, seed=rng.randrange(1 << 30))
        assert j == pos


@pytest.mark.parametrize(
    "values", [[5, 5], [7, 7, 7], [3, 9, 3, 9], [9, 1, 1, 1, 4], [0, 0, 0, 0, 0, 0, 0, 0], [2**32 - 1, 2**32 - 1, 0, 0]]
)
def test_ties_pick_the_lowest_index(values, keys):
    j, _, _ = run_argmin(values, keys)
    assert j == expected_argmin(values)


def test_extreme_values(keys):
    top = 2**32 - 1
    assert run_argmin([top, 0, top - 1], keys)[0] == 1
    assert run_argmin([top, top - 1], keys)[0] == 1
    assert run_argmin([1, 0], keys)[0] == 1


# property tests over K ∈ [2, 40] (issue 28): ties, equal sizes, the smallest party at every position
_K = st.integers(2, 40)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_property_random_values_with_ties(keys, data):
    K = data.draw(_K, label="K")
    values = data.draw(st.lists(st.integers(0, 3), min_size=K, max_size=K), label="values")  # many ties
    j, _, _ = run_argmin(values, keys, seed=data.draw(st.integers(0, 2**30), label="seed"))
    assert j == expected_argmin(values)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_property_equal_values_select_party1(keys, data):
    K = data.draw(_K, label="K")
    v = data.draw(st.integers(0, 2**32 - 1), label="value")
    assert run_argmin([v] * K, keys)[0] == 0


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data())
def test_property_the_smallest_party_at_any_position(keys, data):
    K = data.draw(_K, label="K")
    pos = data.draw(st.integers(0, K - 1), label="position of the smallest")
    others = data.draw(st.lists(st.integers(1, 2**32 - 1), min_size=K, max_size=K), label="others")
    values = list(others)
    values[pos] = data.draw(st.integers(0, min(others) - 1), label="smallest")
    assert run_argmin(values, keys)[0] == pos


@pytest.mark.parametrize("K", [16, 17])
def test_the_smallest_party_at_every_position(K, keys):
    rng = random.Random(100 + K)
    for pos in range(K):
        values = [rng.randrange(1, 2**32) for _ in range(K)]
        values[pos] = rng.randrange(0, min(values))
        assert run_argmin(values, keys, seed=pos)[0] == pos


def test_nothing_in_clear(keys):
    """No message carries a value, its tie-broken form v' or an unmasked share in clear."""
    values = [123_456, 7, 98_765, 7]
    K = len(values)
    _, res, net = run_argmin(values, keys)
    secret = set(values) | {K * v + j for j, v in enumerate(values)}
    seen_ints = 0
    for sender, receiver, tag, type_name, data in net.transcript:
        assert type_name != "smcdp.v1.Floats"
        if type_name == "smcdp.v1.BigInts" and "dgk" not in tag and not tag.endswith("zeta-proof"):  # roots: public
            msg = pb.BigInts.FromString(data)
            for m, neg in zip(msg.magnitude, msg.negative):
                v = int.from_bytes(m, "big") * (-1 if neg else 1)
                seen_ints += 1
                assert v not in secret and -v not in secret, (sender, receiver, tag)
                assert abs(v) > 2**40, (sender, receiver, tag)  # every share is masked by ≥ 40 bits
        if type_name == "smcdp.v1.Ints":
            msg = pb.Ints.FromString(data)
            for v in msg.values:
                assert v not in secret or tag.endswith("pi1") or "dgk" in tag, (sender, tag)
    assert seen_ints == sum(1 for i in range(K) if res[f"party{i + 1}"].position != i)
    # the parties' permutation never reaches Charlie; the parties' private key neither; a party gets
    # only its own position and source, never π₁ whole
    to_charlie = [t for (s, r, t, tn, d) in net.transcript if r == "charlie"]
    assert not any("pi1" in t or "keypair" in t for t in to_charlie)
    assert all(len(pb.Ints.FromString(d).values) == 2 for (s, r, t, tn, d) in net.transcript if t == "s1/pi1")


def test_the_tournament_view_is_distributed_as_for_a_random_permutation(keys):
    """Charlie's view -- the bracket's results -- is that of a uniformly random arrangement of the
    values over the positions, whatever the values (π₁ is uniform and unknown to him).  K = 3: match 0
    is (0, 1), fair; match 1 is (its winner, 2), which position 2 wins with probability 1/3."""
    from scipy import stats

    outcomes = [(0, 0), (0, 2), (1, 1), (1, 2)]  # (winner of match 0, overall winner)
    expected = [1 / 3, 1 / 6, 1 / 3, 1 / 6]
    runs = 96
    for values in ([4, 4, 4], [1, 2, 3], [30, 10, 20]):
        counts = [0] * 4
        for s in range(runs):
            _, res, _ = run_argmin(values, keys, seed=1000 + s)
            r = res["charlie"].rounds
            counts[outcomes.index((r[0][0][2], r[1][0][2]))] += 1
        assert stats.chisquare(counts, [e * runs for e in expected]).pvalue > 1e-3, (values, counts)


# ----------------------------------------------------------------------------- malformed input
def test_out_of_range_value_is_refused(keys):
    with pytest.raises(InvalidMessage, match=r"\[0, 2\^32\)"):
        run_argmin([1, 2**32], keys)
    with pytest.raises(InvalidMessage, match="integer"):
        run_argmin([1, 2.5], keys)


def test_malformed_share_message_is_refused(keys):
    def tamper(net):  # every share sent (seed 5: π₁ = [1, 2, 0], no party keeps its own)
        for sender in ("party1", "party2", "party3"):
            tamper_message(net, sender, "s1/a", lambda d: bigints([1, 2]).SerializeToString())

    with pytest.raises((InvalidMessage, SessionAborted), match="exactly 1 integers"):
        run_argmin([3, 4, 5], keys, tamper=tamper, seed=5)


def test_ciphertext_outside_range_is_refused(keys):
    def bad(data):
        msg = pb.CiphertextVector.FromString(data)
        n2 = keys["xi"].public_key.nsquare
        msg.ciphertexts[0] = int(n2 + 5).to_bytes((int(n2).bit_length() + 15) // 8, "big")
        return msg.SerializeToString()

    def tamper(net):
        tamper_message(net, "charlie", "s1/x", bad, receiver="party2")

    with pytest.raises((InvalidMessage, SessionAborted), match=r"longer than n²|outside"):
        run_argmin([3, 4, 5], keys, tamper=tamper)


def test_bad_permutation_is_refused(keys):
    for bad in ([0, 0, 1], [3, 0], [-1, 0], [1, 0], [2, 1]):  # party2 (index 1): not (position, source) in 0..2,

        def tamper(net, bad=bad):  # or a fixed point on one side only
            tamper_message(
                net, "party1", "s1/pi1", lambda d: pb.Ints(values=bad).SerializeToString(), receiver="party2"
            )

        with pytest.raises((InvalidMessage, SessionAborted), match="position and a source"):
            run_argmin([3, 4, 5], keys, tamper=tamper)


def test_bigints_codec_validation():
    msg = bigints([0, -5, 2**70])
    assert from_bigints(msg, count=3, bound_bits=71, what="x") == [0, -5, 2**70]
    with pytest.raises(InvalidMessage, match="exactly 2"):
        from_bigints(msg, count=2, bound_bits=71, what="x")
    with pytest.raises(InvalidMessage, match="2\\^70"):
        from_bigints(msg, count=3, bound_bits=70, what="x")
    with pytest.raises(InvalidMessage, match="negative"):
        from_bigints(bigints([-1]), count=1, bound_bits=8, what="x", nonnegative=True)
    bad = pb.BigInts(magnitude=[b"\x00\x01"], negative=[False])
    with pytest.raises(InvalidMessage, match="canonical"):
        from_bigints(bad, count=1, bound_bits=16, what="x")
    with pytest.raises(InvalidMessage, match="permutation"):
        check_permutation([1, 1], 2, "p")


def test_parameter_validation():
    for bad in (
        dict(n_parties=1),
        dict(mask_bits=39),
        dict(value_bits=0),
        dict(curator="party9"),
        dict(n_parties=3, key_bits=200),
    ):
        with pytest.raises(InvalidMessage):
            SecureMinParams(**bad).validate()


# ----------------------------------------------------------------------------- verifying a selection
def run_check(values, selected, keys, *, tamper=None):
    """Every party checks 'selected ≤ my value' (selected given as ζ(selected)); returns the K bits."""
    K = len(values)
    p = _params(K)
    zeta = keys["zeta"]
    pk = zeta.public_key
    ct = pk.raw_encrypt_textbook(selected)
    roles = {"charlie": "charlie", **{f"party{i + 1}": f"p{i + 1}" for i in range(K)}}

    async def party(ch, i):
        ok, _ = await asyncio.gather(
            check_selection_party(ch, values[i], p, zeta_pk=pk, allow_insecure_keys=True),
            check_selection_helper(ch, ct, p, zeta_pk=pk, allow_insecure_keys=True),
        )
        return ok

    fns = {"charlie": lambda ch: check_selection_curator(ch, p, zeta_key=zeta)}
    for i in range(K):
        fns[f"party{i + 1}"] = (lambda j: lambda ch: party(ch, j))(i)
    res, net = run_network(roles, fns, tamper)
    return [res[f"party{i + 1}"] for i in range(K)], net


@pytest.mark.parametrize(
    "values,selected",
    [
        ([5, 9], 5),
        ([5, 9], 9),
        ([7, 7, 7], 7),
        ([3, 1, 4, 1, 5], 1),
        ([3, 1, 4, 1, 5], 4),
        ([0, 2**32 - 1], 0),
        ([0, 2**32 - 1], 2**32 - 1),
    ],
)
def test_selection_check_tells_each_party_whether_the_selected_value_is_at_most_its_own(keys, values, selected):
    bits, net = run_check(values, selected, keys)
    assert bits == [selected <= v for v in values]
    # Charlie only opens masked values: none of them is the selected value or a party's
    opened = [
        int.from_bytes(pb.BigInts.FromString(d).magnitude[0], "big")
        for (s, r, t, tn, d) in net.transcript
        if t == "chk/open"
    ]
    assert len(opened) == len(values) and all(v >= 2**40 for v in opened)


def test_selection_check_refuses_an_opening_that_does_not_match(keys):
    def tamper(net):
        def lie(data):
            c, r = [int.from_bytes(m, "big") for m in pb.BigInts.FromString(data).magnitude]
            return bigints([c - 5, r]).SerializeToString()

        tamper_message(net, "charlie", "chk/open", lie, receiver="party1")

    with pytest.raises((InvalidMessage, SessionAborted), match="does not open"):
        run_check([5, 9], 9, keys, tamper=tamper)


def test_charlie_opens_nothing_but_a_masked_selected_value(keys):
    """A helper's ciphertext that decrypts beyond the masked range (e.g. some other secret) is not opened."""
    pk = keys["zeta"].public_key

    def tamper(net):
        tamper_message(
            net,
            "party2",
            "chk/c",
            lambda d: ciphertext_to_proto(pk, pk.raw_encrypt_textbook(2**200)).SerializeToString(),
            receiver="charlie",
        )

    with pytest.raises((InvalidMessage, SessionAborted), match="not a masked selected value"):
        run_check([5, 9], 5, keys, tamper=tamper)


def test_the_evaluating_party_holds_the_dgk_key(keys):
    """DGK protects the side without the key only against a key holder who follows the protocol: with a crafted
    key Charlie, the holder of every match's key until 2026-12-05, read each evaluator's x and so v'_p − v'_q
    (a review; tests/unit/primitives/test_dgk_key_holder.py).  Now each evaluator sends Charlie its own DGK
    public key and encrypted bits, and Charlie sends no DGK key at all."""
    _, _, net = run_argmin([7, 3, 9, 3], keys)
    sent = [(s, r) for (s, r, t, tn, d) in net.transcript if t == "s1/cmp/dgk-pk"]
    assert sorted(sent) == sorted((f"party{i + 1}", "charlie") for i in range(1, 4))
    assert not [t for (s, r, t, tn, d) in net.transcript if s == "charlie" and t.endswith("dgk-bits")]
