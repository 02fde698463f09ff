"""Stage 1: blind-and-permute secure argmin with real DGK comparisons (small keys, in memory)."""

import itertools
import random

import pytest

from smcdp.crypto.codec import bigints, from_bigints
from smcdp.errors import InvalidMessage, SessionAborted
from smcdp.primitives.argmin import (
    SecureMinParams,
    argmin_curator,
    argmin_from_bits,
    argmin_party,
    check_permutation,
)
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.aggregate_util import run_network, tamper_message


def _params(K, value_bits=32):
    return SecureMinParams(n_parties=K, value_bits=value_bits, key_bits=768, dgk_bits=512, dgk_t=64)


def run_argmin(values, keys, *, value_bits=32, seed=None, tamper=None):
    K = len(values)
    p = _params(K, value_bits)
    roles = {"charlie": "charlie", **{f"party{i + 1}": f"p{i + 1}" for i in range(K)}}
    fns = {"charlie": lambda ch: argmin_curator(ch, p, zeta_key=keys["zeta"], dgk_key=keys["dgk"], seed=seed,
                                                allow_insecure_keys=True)}
    for i in range(K):
        fns[f"party{i + 1}"] = (lambda i: lambda ch: argmin_party(
            ch, values[i], p, xi_key=keys["xi"] if i == 0 else None, seed=seed, allow_insecure_keys=True))(i)
    res, net = run_network(roles, fns, tamper)
    c = res["charlie"]
    holders = [i for i in range(K) if res[f"party{i + 1}"].position == c.position]
    assert len(holders) == 1
    # the permutations compose: doubly permuted index j̃ -> position -> party
    assert c.pi2[c.index] == c.position
    assert res[f"party{holders[0] + 1}"].pi1[holders[0]] == c.position
    assert c.comparisons == K * (K - 1) // 2
    return holders[0], res, net


def expected_argmin(values):
    return min(range(len(values)), key=lambda j: (values[j], j))


# ----------------------------------------------------------------------------- decoding (plaintext)
@pytest.mark.parametrize("K", range(2, 9))
def test_argmin_decoding_all_permutations(K):
    """Every permutation of K distinct values (K ≤ 8: up to 40320) decodes to the right index."""
    for perm in itertools.permutations(range(K)):
        bits = {(i, j): int(perm[i] < perm[j]) for i in range(K) for j in range(i + 1, K)}
        assert argmin_from_bits(bits, K) == perm.index(0)


def test_argmin_decoding_refuses_inconsistent_bits():
    with pytest.raises(InvalidMessage, match="total order"):
        argmin_from_bits({(0, 1): 1, (1, 2): 1, (0, 2): 0}, 3)      # a cycle 0<1<2<0
    with pytest.raises(InvalidMessage, match="every pair"):
        argmin_from_bits({(0, 1): 1}, 3)
    with pytest.raises(InvalidMessage, match="0 or 1"):
        argmin_from_bits({(0, 1): 2}, 2)


# ----------------------------------------------------------------------------- the protocol (DGK)
@pytest.mark.parametrize("K", [2, 3, 4, pytest.param(5, marks=pytest.mark.slow)])   # K = 5: 120 runs, ~7 CPU-s
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


@pytest.mark.parametrize("values", [[5, 5], [7, 7, 7], [3, 9, 3, 9], [9, 1, 1, 1, 4], [0, 0, 0, 0, 0, 0, 0, 0],
                                    [2 ** 32 - 1, 2 ** 32 - 1, 0, 0]])
def test_ties_pick_the_lowest_index(values, keys):
    j, _, _ = run_argmin(values, keys)
    assert j == expected_argmin(values)


def test_extreme_values(keys):
    top = 2 ** 32 - 1
    assert run_argmin([top, 0, top - 1], keys)[0] == 1
    assert run_argmin([top, top - 1], keys)[0] == 1
    assert run_argmin([1, 0], keys)[0] == 1


def test_nothing_in_clear(keys):
    """No message carries a value, its tie-broken form v' or an unmasked share in clear."""
    values = [123_456, 7, 98_765, 7]
    K = len(values)
    _, res, net = run_argmin(values, keys)
    secret = set(values) | {K * v + j for j, v in enumerate(values)}
    seen_ints = 0
    for sender, receiver, tag, type_name, data in net.transcript:
        assert type_name != "smcdp.v1.Floats"
        if type_name == "smcdp.v1.BigInts" and "dgk" not in tag:
            msg = pb.BigInts.FromString(data)
            for m, neg in zip(msg.magnitude, msg.negative):
                v = int.from_bytes(m, "big") * (-1 if neg else 1)
                seen_ints += 1
                assert v not in secret and -v not in secret, (sender, receiver, tag)
                assert abs(v) > 2 ** 40, (sender, receiver, tag)        # every share is masked by ≥ 40 bits
        if type_name == "smcdp.v1.Ints":
            msg = pb.Ints.FromString(data)
            for v in msg.values:
                assert v not in secret or tag.endswith("pi1") or "dgk" in tag, (sender, tag)
    assert seen_ints >= 2 * K - 2
    # the parties' permutation never reaches Charlie; the parties' private key neither
    to_charlie = [t for (s, r, t, tn, d) in net.transcript if r == "charlie"]
    assert not any("pi1" in t or "keypair" in t for t in to_charlie)


@pytest.mark.slow   # ~5 CPU-s (not in make test-quick)
def test_charlie_sees_a_uniformly_random_order(keys):
    """With the tie-break v' = K·v + j, the position of the minimum in Charlie's (doubly permuted) view
    is uniform even when all values are equal."""
    from scipy import stats

    for values in ([4, 4, 4], [1, 2, 3]):
        counts = [0, 0, 0]
        for s in range(90):
            _, res, _ = run_argmin(values, keys, seed=1000 + s)
            counts[res["charlie"].index] += 1
        assert stats.chisquare(counts).pvalue > 1e-3, (values, counts)


# ----------------------------------------------------------------------------- malformed input
def test_out_of_range_value_is_refused(keys):
    with pytest.raises(InvalidMessage, match=r"\[0, 2\^32\)"):
        run_argmin([1, 2 ** 32], keys)
    with pytest.raises(InvalidMessage, match="integer"):
        run_argmin([1, 2.5], keys)


def test_malformed_share_message_is_refused(keys):
    def tamper(net):
        tamper_message(net, "party2", "s1/at", lambda d: bigints([1, 2]).SerializeToString())

    with pytest.raises((InvalidMessage, SessionAborted), match="exactly 1 integers"):
        run_argmin([3, 4, 5], keys, tamper=tamper)


def test_ciphertext_outside_range_is_refused(keys):
    def bad(data):
        msg = pb.CiphertextVector.FromString(data)
        n2 = keys["xi"].public_key.nsquare
        msg.ciphertexts[0] = int(n2 + 5).to_bytes((int(n2).bit_length() + 15) // 8, "big")
        return msg.SerializeToString()

    def tamper(net):
        tamper_message(net, "charlie", "s1/xat", bad, receiver="party2")

    with pytest.raises((InvalidMessage, SessionAborted), match="longer than n²|outside"):
        run_argmin([3, 4, 5], keys, tamper=tamper)


def test_bad_permutation_is_refused(keys):
    def tamper(net):
        tamper_message(net, "party1", "s1/pi1", lambda d: pb.Ints(values=[0, 0, 1]).SerializeToString())

    with pytest.raises((InvalidMessage, SessionAborted), match="permutation"):
        run_argmin([3, 4, 5], keys, tamper=tamper)


def test_bigints_codec_validation():
    msg = bigints([0, -5, 2 ** 70])
    assert from_bigints(msg, count=3, bound_bits=71, what="x") == [0, -5, 2 ** 70]
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
    for bad in (dict(n_parties=1), dict(mask_bits=39), dict(value_bits=0), dict(curator="party9"),
                dict(n_parties=3, key_bits=200)):
        with pytest.raises(InvalidMessage):
            SecureMinParams(**bad).validate()
