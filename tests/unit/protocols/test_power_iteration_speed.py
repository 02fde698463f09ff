"""Power iteration builds only the tables its session needs (issue 27): Trent's re-randomisations used to
build the largest fixed-base table the memory budget allows (172 MB and 2 s at 2048 bits), most of a
k = 500 session."""

import asyncio

import numpy as np

from smcdp.compute import LocalEngine
from smcdp.crypto import modexp, paillier
from smcdp.crypto.codec import keypair_from_proto
from smcdp.crypto.prepared import SHELF
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives import rng
from smcdp.primitives.rng import Randomness, protocol_rng
from smcdp.protocols.power_iteration import (
    PowerIterationParams,
    data_party,
    plaintext_reference,
    prepare_party1,
    trent,
)
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.test_power_iteration import blocks_with_gap


def test_no_role_builds_a_table_for_more_uses_than_its_session_has(monkeypatch):
    built = []
    real = modexp.FixedBaseTable.__init__

    def spy(self, base, modulus, exp_bits, window=None):
        real(self, base, modulus, exp_bits, window)
        if int(modulus).bit_length() <= 1024:  # this session's 512-bit key: not a 2048-bit key another test of
            built.append((int(modulus).bit_length(), self.window))  # this worker still prepares in the background

    monkeypatch.setattr(modexp.FixedBaseTable, "__init__", spy)
    blocks = blocks_with_gap(np.random.default_rng(3), 12, (9, 7))
    params = PowerIterationParams(n_parties=2, key_bits=512, max_iterations=40)
    net = InMemoryNetwork({"trent": "trent", "party1": "alice", "party2": "bob"})
    engines = [LocalEngine(2), LocalEngine(2)]

    async def go():
        try:
            return await net.run(
                {
                    "trent": lambda ch: trent(ch, params, seed=1, allow_insecure_keys=True),
                    "party1": lambda ch: data_party(
                        ch, blocks[0], params, engine=engines[0], seed=2, allow_insecure_keys=True
                    ),
                    "party2": lambda ch: data_party(
                        ch, blocks[1], params, engine=engines[1], seed=3, allow_insecure_keys=True
                    ),
                }
            )
        finally:
            for e in engines:
                await e.aclose()

    res = asyncio.run(go())
    u, x = plaintext_reference(blocks)
    assert abs(np.dot(res["trent"].x, x)) > 1 - 1e-9 and abs(np.dot(res["party1"].u, u)) > 1 - 1e-9

    # Trent's public table (mod n²) and each party's two CRT tables (mod p², q²), each sized by its uses
    # (tens of ciphertexts per round): never the budget's largest window
    def budget(bits):
        return modexp.window_for(
            256,
            bits,
            entry_overhead=0 if modexp.native.AVAILABLE else 32,
            max_window=12 if modexp.native.AVAILABLE else 10,
        )

    assert len([b for b, _ in built if b <= 512]) == 4 and len([b for b, _ in built if b > 1000]) == 1, built
    assert all(w < budget(bits) for bits, w in built), built
    assert paillier.MIN_SECURE_BITS == 2048  # the test's 512-bit key is an explicit opt-in above


def test_party1_takes_the_key_its_party_prepared_for_the_sessions_root():
    """The key made ahead (issue 27) is the one party1 derives from its root: the same key reaches party2,
    the result is right, and a replay (nothing prepared any more) derives it again."""
    blocks = blocks_with_gap(np.random.default_rng(5), 8, (6, 5))
    params = PowerIterationParams(n_parties=2, key_bits=512, max_iterations=40)
    root = Randomness.fresh()
    want = paillier.generate_keypair(
        512, allow_insecure=True, rng=protocol_rng(root, "power-iteration", "party1", "key")
    )[1]
    prepare_party1(root, key_bits=512, allow_insecure_keys=True)

    def session():
        net = InMemoryNetwork({"trent": "trent", "party1": "alice", "party2": "bob"})
        res = asyncio.run(
            net.run(
                {
                    "trent": lambda ch: trent(ch, params, allow_insecure_keys=True),
                    "party1": lambda ch: data_party(ch, blocks[0], params, seed=root, allow_insecure_keys=True),
                    "party2": lambda ch: data_party(ch, blocks[1], params, allow_insecure_keys=True),
                }
            )
        )
        (sent,) = [d for (s, r, tag, _, d) in net.transcript if tag == "keypair"]
        return res, keypair_from_proto(pb.PaillierKeyPair.FromString(sent), allow_insecure=True)

    label = rng._prepared_label(root, "power-iteration", "party1", 512)
    assert label in SHELF._jobs
    u, _ = plaintext_reference(blocks)
    for _ in range(2):
        res, sk = session()
        assert label not in SHELF._jobs  # the first session took it
        assert (sk.p, sk.q) == (want.p, want.q)
        assert abs(np.dot(res["party2"].u, u)) > 1 - 1e-9
