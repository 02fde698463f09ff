"""A malicious Trent against the data parties (docs/security.md, "Power iteration").

Each test plays Trent honestly except for the messages it rewrites on the wire, and shows either
that the data parties' cheap checks refuse the attack, or -- for what no cheap check can see --
exactly what the attacker obtains.
"""

import asyncio

import numpy as np
import pytest

from smcdp.crypto.encoding import Packing
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent
from smcdp.v1 import messages_pb2 as pb

K_ROWS = 5


def _attack(blocks, params, rewrite):
    """Run the session with Trent's outgoing messages passed through ``rewrite(tag, data, pk)``."""
    pk, sk = generate_keypair(params.key_bits, allow_insecure=True)
    roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(len(blocks))}}
    net = InMemoryNetwork(roles, timeout=120)
    ch = net.channels["trent"]
    original = ch._transmit

    async def evil(to_role, tag, type_url, data):
        await original(to_role, tag, type_url, rewrite(tag, data, pk))

    ch._transmit = evil
    coros = {"trent": lambda c: trent(c, params, allow_insecure_keys=True)}
    for i, A in enumerate(blocks):
        coros[f"party{i + 1}"] = (lambda c, A=A, i=i: data_party(
            c, A, params, private_key=sk if i == 0 else None, allow_insecure_keys=True))
    return net, asyncio.run(net.run(coros))


def _basis(pk, params, j, scale):
    v = np.zeros(K_ROWS)
    v[j] = scale
    return EncryptedVector.encrypt(pk, v, frac_bits=params.frac_bits, packing=params.packing(pk)).to_proto()


def _scalar(pk, params, value):
    return EncryptedVector.encrypt(pk, [value], frac_bits=params.frac_bits, packing=Packing()).to_proto()


def _data(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(K_ROWS, 4)), rng.normal(size=(K_ROWS, 3))]


PARAMS = PowerIterationParams(n_parties=2, key_bits=512, p=1.0, max_iterations=30)


def _clear_blocks(net):
    return [m for m in net.received_by("trent") if m[1] == "final/alpha"]


def test_basis_vector_as_final_vector_is_refused():
    """The issue's example: final vector e_j with normaliser 1 would hand Trent row j of every
    party's matrix exactly.  The final vector must be the direction of one of the last two rounds'
    vectors (the last real state), so the parties refuse before sending anything in clear."""
    def rewrite(tag, data, pk):
        if tag == "final/v":
            return _basis(pk, PARAMS, 2, 1.0).SerializeToString()
        if tag == "final/S":
            return _scalar(pk, PARAMS, 1.0).SerializeToString()
        return data

    with pytest.raises(InvalidMessage, match="final/v from trent is not the direction"):
        _attack(_data(), PARAMS, rewrite)


def test_normaliser_below_the_partys_own_term_is_refused():
    """An honest final vector with a forged normaliser of 1: S is a sum of non-negative terms one of
    which is the party's own, so S = 1 below that term is refused."""
    def rewrite(tag, data, pk):
        return _scalar(pk, PARAMS, 1.0).SerializeToString() if tag == "final/S" else data

    with pytest.raises(InvalidMessage, match="final/S from trent is smaller than this party's own term"):
        _attack(_data(1), PARAMS, rewrite)


def test_residual_a_trent_deviating_every_round_gets_one_chosen_projection():
    """What no cheap check stops (docs/security.md): a Trent who sends c·e_j as *every* round's
    vector and as the final one, with a large forged normaliser, passes both checks and learns
    row j of every party's matrix exactly -- one chosen projection per session.  Mitigations: who
    may act as Trent (issue 14's policy) and a per-dataset session budget; x itself, the honest
    output, is a projection of the same form (Mᵀu)."""
    blocks = _data(2)
    j, c, S = 3, 2.0 ** 10, 2.0 ** 40

    def rewrite(tag, data, pk):
        if tag.startswith("v/") or tag == "final/v":
            return _basis(pk, PARAMS, j, c).SerializeToString()
        if tag == "final/S":
            return _scalar(pk, PARAMS, S).SerializeToString()
        return data

    net, _ = _attack(blocks, PARAMS, rewrite)

    for sender, tag, _, data in _clear_blocks(net):
        block = np.asarray(pb.Floats.FromString(data).values)
        i = int(sender.removeprefix("party")) - 1
        np.testing.assert_array_equal(block * np.sqrt(S) / c, blocks[i][j])
    assert len(_clear_blocks(net)) == 2


@pytest.mark.parametrize("p", [1.0, 0.6])
def test_honest_runs_pass_the_checks(p):
    """The checks never fire on an honest Trent, with or without decoys (the last round may be one)."""
    for seed in range(3):
        params = PowerIterationParams(n_parties=2, key_bits=512, p=p, max_iterations=60)
        net, res = _attack(_data(seed + 10), params, lambda tag, data, pk: data)
        assert len(res["trent"].x) == 7
