"""A malicious Trent against the data parties (docs/security.md, "Power iteration").

Each test plays Trent honestly except for the messages it rewrites on the wire, and shows either
that the data parties' cheap checks refuse the attack, or -- for what no cheap check can see --
exactly what the attacker obtains.  The protocol is the top-r subspace iteration (issue 17): what
leaves a data party in clear is σ_j·A_iᵀu_j (tags ``final/x/<c>``), u_j being the Ritz vectors the
party computed for the block that Trent's final block repeats.
"""

import asyncio

import numpy as np
import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent
from smcdp.v1 import messages_pb2 as pb

K_ROWS = 5


def _attack(blocks, params, rewrite, seed=None):
    """Run the session with Trent's outgoing messages passed through ``rewrite(tag, data, pk)``;
    returns (network, results or the exception the session ended with).  ``seed``: every role's
    randomness (not the encryptions'), so that two runs differ only by the rewrite."""
    pk, sk = generate_keypair(params.key_bits, allow_insecure=True)
    roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(len(blocks))}}
    net = InMemoryNetwork(roles, timeout=120)
    ch = net.channels["trent"]
    original = ch._transmit

    async def evil(to_role, tag, type_url, data):
        await original(to_role, tag, type_url, _by_step(tag, data, pk, rewrite))

    ch._transmit = evil
    coros = {"trent": lambda c: trent(c, params, seed=seed, allow_insecure_keys=True)}
    for i, A in enumerate(blocks):
        coros[f"party{i + 1}"] = lambda c, A=A, i=i: data_party(
            c,
            A,
            params,
            private_key=sk if i == 0 else None,
            allow_insecure_keys=True,
            seed=None if seed is None else seed + i + 1,
        )
    try:
        return net, asyncio.run(net.run(coros))
    except Exception as exc:  # noqa: BLE001 - the tests look at it
        return net, exc


def _by_step(tag, data, pk, rewrite):
    """``rewrite`` sees Trent's messages under the names of the protocol's steps: a ``reply/t`` is the
    blinded Gram ``blinded/t`` and the block ``v/<t+1>`` -- or ``final/v`` after the stop bit."""
    if not tag.startswith("reply/"):
        return rewrite(tag, data, pk)
    t, msg = int(tag.split("/")[1]), pb.PowerIterationReply.FromString(data)
    for field, name in (("blinded_gram", f"blinded/{t}"), ("block", "final/v" if msg.stop else f"v/{t + 1}")):
        part = getattr(msg, field)
        part.CopyFrom(pb.CiphertextVector.FromString(rewrite(name, part.SerializeToString(), pk)))
    return msg.SerializeToString()


def _basis_block(pk, params, rows, scale):
    """E[scale·[e_{rows[0]} … e_{rows[b-1]}]]: a k × b block of standard basis vectors of Trent's choosing."""
    E = np.zeros((K_ROWS, params.block_size))
    for col, j in enumerate(rows):
        E[j, col] = scale
    return (
        EncryptedVector.encrypt(pk, E.ravel(order="F"), frac_bits=params.frac_bits, packing=params.packing(pk))
        .to_proto()
        .SerializeToString()
    )


def _gram(pk, params, G):
    """E[G] as a blinded Gram (upper triangle, exponent −(frac + a)): Trent may send any matrix there."""
    values = G[np.triu_indices(G.shape[0])]
    return (
        EncryptedVector.encrypt(
            pk, values, frac_bits=params.frac_bits + params.blind_offset_bits, packing=params.gram_packing(pk)
        )
        .to_proto()
        .SerializeToString()
    )


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(K_ROWS, 4)), rng.normal(size=(K_ROWS, 3))]


PARAMS = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, max_iterations=30)


def _clear_blocks(net):
    return [m for m in net.received_by("trent") if m[1].startswith("final/x/")]


@pytest.mark.parametrize("components", [1, 2])
def test_basis_block_as_final_block_is_refused(components):
    """The issue's example, for r components: a final block of standard basis vectors would make every
    party's clear blocks rows of its matrix (up to σ_j).  The final block must be the direction of a
    block of the last two rounds (the last real state Trent sent), so the parties refuse before
    they send anything more (final/cols, the x blocks)."""
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, max_iterations=30, components=components)

    def rewrite(tag, data, pk):
        return _basis_block(pk, params, range(components), 1.0) if tag == "final/v" else data

    net, outcome = _attack(_data(), params, rewrite)
    assert isinstance(outcome, InvalidMessage), outcome
    assert "the final block (reply/" in str(outcome)
    assert "from trent (its block)) is not the direction of a block of the last two rounds" in str(outcome)
    sent_after = {tag for _, tag, _, _ in net.received_by("trent")}
    assert not any(t.startswith("final/x/") or t == "final/cols" for t in sent_after)


def test_an_older_real_block_as_final_block_is_refused():
    """Only the last two rounds count: replaying the first round's (real) block at the end is refused
    too, so Trent cannot pick, at the end, among all the blocks of the session."""
    first = {}

    def rewrite(tag, data, pk):
        if tag == "v/0":
            first["v"] = data
        if tag == "final/v":
            return first["v"]
        return data

    _, outcome = _attack(_data(3), PARAMS, rewrite)
    assert isinstance(outcome, InvalidMessage) and "is not the direction of a block of the last two" in str(outcome)


def test_residual_a_trent_deviating_every_round_gets_chosen_rows_up_to_sigma():
    """What no cheap check stops (docs/security.md): a Trent who sends c·[e_j1 e_j2] as *every*
    round's block and as the final one, and blinded Grams of his choosing (diag(2, 1): the Ritz vectors
    are then e_j1, e_j2), passes every check and learns rows j1 and j2 of every party's matrix, each up
    to the factor σ_l that the data parties share and he does not know -- r chosen projections per
    session, the same form as the honest output x_l ∝ Mᵀu_l.  Mitigations: who may act as Trent
    (issue 14's policy) and a per-dataset session budget."""
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, max_iterations=30, components=2)
    blocks = _data(2)
    rows, c = (3, 1), 2.0**10

    def rewrite(tag, data, pk):
        if tag.startswith("v/") or tag == "final/v":
            return _basis_block(pk, params, rows, c)
        if tag.startswith("blinded/"):
            return _gram(pk, params, np.diag([2.0, 1.0]))
        return data

    net, res = _attack(blocks, params, rewrite)
    assert isinstance(res, dict), res
    clear = _clear_blocks(net)
    assert len(clear) == 2  # one chunk per party
    factors = []
    for sender, _tag, _, data in clear:
        m = pb.Matrix.FromString(data)
        got = np.asarray(m.values).reshape(m.rows, m.cols)
        i = int(sender.removeprefix("party")) - 1
        ratios = []
        for col, j in enumerate(rows):
            ratio = got[:, col] / blocks[i][j]
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-12)  # row j exactly, times one factor
            assert 2.0**-16 <= abs(ratio[0]) <= 2.0**16
            ratios.append(ratio[0])
        factors.append(ratios)
    # the factor of each component is σ_l, the same for both parties, and unknown to Trent
    np.testing.assert_allclose(factors[0], factors[1], rtol=1e-12)


def test_the_final_vectors_are_those_of_the_round_whose_block_comes_again():
    """Issue 26: the parties take u_j from the round whose block matches the final one (Trent's last real
    state), not from the other of the last two rounds.  With p = 1 and a tolerance never met, the last round
    is real and is the one that matches: a Gram forged in the round before leaves the result as it was,
    the same forgery in the last round turns it."""
    n = 8
    params = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, max_iterations=n, tol=1e-300, components=2)
    blocks = _data(4)
    forged = np.array([[1.0, 0.9], [0.9, 1.0]])  # positive definite; its eigenvectors turn the basis by 45°

    def forge(round_):
        return lambda tag, data, pk: _gram(pk, params, forged) if tag == f"blinded/{round_}" else data

    def us(res):
        assert isinstance(res, dict), res
        return np.array([c["u"] for c in res["party1"].components])

    _, honest = _attack(blocks, params, lambda tag, data, pk: data, seed=5)
    _, other = _attack(blocks, params, forge(n - 2), seed=5)
    _, matching = _attack(blocks, params, forge(n - 1), seed=5)
    assert honest["trent"].rounds == n and not honest["trent"].converged
    np.testing.assert_allclose(us(other), us(honest), atol=1e-9)
    assert np.max(np.abs(us(matching) - us(honest))) > 0.1


@pytest.mark.parametrize("p,components", [(1.0, 1), (0.6, 1), (0.6, 2)])
def test_honest_runs_pass_the_checks(p, components):
    """The checks never fire on an honest Trent, with or without decoys (the last round may be one)."""
    for seed in range(3):
        params = PowerIterationParams(n_parties=2, key_bits=512, p=p, max_iterations=60, components=components)
        _, res = _attack(_data(seed + 10), params, lambda tag, data, pk: data)
        assert isinstance(res, dict), res
        assert len(res["trent"].x) == 7 and len(res["trent"].components) == components
