"""A malicious Charlie or data party in dp-aggregate (docs/security.md, "DP aggregation").

Each test runs the honest roles with one participant's outgoing messages rewritten on the wire.
"""

import numpy as np
import pytest

from smcdp.crypto.codec import bigints
from smcdp.crypto.encoding import Packing
from smcdp.crypto.vector import EncryptedVector
from smcdp.crypto.zkp import prove_one_hot
from smcdp.errors import InvalidMessage
from smcdp.protocols.dp_aggregate import _indicator_context, to_fixed
from tests.unit.protocols.test_dp_aggregate import make_params, party_noise, released_T, run_aggregate

K, D = 3, 4
SENS = [0.01, 0.04, 0.02]          # party2 has the largest sensitivity: its noise is the right one
SEEDS = [31, 32, 33]


def _rewrite(net, sender, fn):
    ch = net.channels[sender]
    original = ch._transmit

    async def evil(to_role, tag, type_url, data):
        await original(to_role, tag, type_url, fn(tag, data))

    ch._transmit = evil


def _sum_of_weights(p, ws):
    return np.array([[to_fixed(x, p.frac_bits) for x in w] for w in ws], dtype=object).sum(axis=0)


def _weights():
    rng = np.random.default_rng(5)
    return [rng.uniform(-1, 1, size=D) for _ in range(K)]


def test_charlie_selecting_no_noise_is_refused(keys):
    """Charlie encrypts an all-zero 'indicator': every party's ψ would be ζ(0) and the release the
    exact average, without any noise.  He cannot prove a one-hot vector, so the parties refuse."""
    p = make_params(K, D, epsilon=2.0)
    zeta = keys["zeta"]

    def zeros(tag, data):
        if tag != "s2/u":
            return data
        pk = zeta.public_key
        return EncryptedVector(pk, [pk.raw_encrypt_textbook(0) for _ in range(K)], K, 0, Packing(),
                               1).to_proto().SerializeToString()

    with pytest.raises(InvalidMessage, match="not proven to be a one-hot indicator"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS,
                      tamper=lambda net: _rewrite(net, "charlie", zeros))


def test_charlie_proof_is_bound_to_its_session(keys):
    """A proof made for another session's context does not verify here (no replay)."""
    p = make_params(K, D, epsilon=2.0)
    zeta = keys["zeta"]
    state = {}

    def swap(tag, data):
        if tag == "s2/u":
            state["u"] = data
        if tag == "s2/u-proof":
            from smcdp.v1 import messages_pb2 as pb
            cts = [int.from_bytes(c, "big") for c in pb.CiphertextVector.FromString(state["u"]).ciphertexts]
            hot = next(k for k in range(K) if zeta.raw_decrypt(cts[k]) == 1)
            return bigints(prove_one_hot(zeta, cts, hot, _indicator_context("another-session"))).SerializeToString()
        return data

    with pytest.raises(InvalidMessage, match="not proven to be a one-hot indicator"):
        run_aggregate(p, _weights(), SENS, keys, noise_seeds=SEEDS,
                      tamper=lambda net: _rewrite(net, "charlie", swap))


def test_residual_charlie_can_pick_whose_noise_is_added(keys):
    """What the proof does not stop: a one-hot indicator at a position of Charlie's choosing.
    Charlie does not know which party sits at a position (π₁), but he learns the positions' order
    from the comparisons, so he can pick the one with the *least* noise.  Every position selects
    exactly one party's noise, and over the K positions every party's.  Mitigation: who may act as
    Charlie (issue 14's policy); the guarantee then degrades to ε·Δ_(1)/Δ_sel (docs/security.md)."""
    p = make_params(K, D, epsilon=2.0)
    zeta = keys["zeta"]
    pk = zeta.public_key
    ws = _weights()
    selected = []
    for position in range(K):
        cts = [pk.raw_encrypt_textbook(1 if k == position else 0) for k in range(K)]
        u = EncryptedVector(pk, cts, K, 0, Packing(), 1).to_proto().SerializeToString()
        proof = bigints(prove_one_hot(zeta, cts, position, _indicator_context("local"))).SerializeToString()
        forged = {"s2/u": u, "s2/u-proof": proof}
        # a fixed protocol seed keeps π₁ (party -> position) the same in every run
        res, _ = run_aggregate(p, ws, SENS, keys, noise_seeds=SEEDS, seed=7,
                               tamper=lambda net: _rewrite(net, "charlie", lambda tag, data: forged.get(tag, data)))
        diff = [int(t - w) for t, w in zip(released_T(res, p), _sum_of_weights(p, ws))]
        matches = [j for j in range(K) if diff == party_noise(p, SENS[j], SEEDS[j])]
        assert len(matches) == 1
        selected += matches
    assert sorted(selected) == list(range(K))


def test_residual_selected_party_can_withhold_its_noise(keys):
    """A malicious data party contributes ζ(0) instead of ζ(v_j·N_j).  It does not know whether it
    is selected, but when it is, the release carries no noise at all.  No cheap check sees it (the
    contribution is encrypted under Charlie's key and its noise is private by design); mitigations:
    who may take part (issue 14's policy), and a per-dataset budget that accounts for it."""
    p = make_params(K, D, epsilon=2.0)
    pk = keys["zeta"].public_key

    def no_noise(tag, data):
        if tag != "s2/psi":
            return data
        vec = EncryptedVector.encrypt_ints(pk, [0] * D, exponent=-p.frac_bits, packing=p.packing(pk))
        return vec.to_proto().SerializeToString()

    ws = _weights()
    res, _ = run_aggregate(p, ws, SENS, keys, noise_seeds=SEEDS, tamper=lambda net: _rewrite(net, "party2", no_noise))
    diff = [int(t - w) for t, w in zip(released_T(res, p), _sum_of_weights(p, ws))]
    assert diff == [0] * D                                   # the exact sum: no noise
    assert party_noise(p, SENS[1], SEEDS[1]) != [0] * D       # ... where party2's noise belonged
