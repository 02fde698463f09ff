"""Resume by deterministic replay, protocol by protocol, in memory.

Each protocol runs once with a journal and a randomness root per role.  Then
every role is replayed *alone* -- the others gone, as after a crash of that
role -- from its journal and its root: it must reach exactly the result it
reached before (same decrypted values, same noise, same keys) and transmit
nothing, because every message it sends was acknowledged already.  This is
what docs/fault-tolerance.md relies on: a replay reveals nothing a completed
run would not, and never re-draws a mask, a scaling or DP noise.
"""

from __future__ import annotations

import asyncio
from dataclasses import asdict

import numpy as np
import pytest

from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives.rng import Randomness
from smcdp.protocols.dp_aggregate import DPAggregateParams, charlie, data_party, dave
from smcdp.protocols.keyword import KeywordParams, keyword_alice, keyword_bob
from smcdp.protocols.power_iteration import PowerIterationParams, trent
from smcdp.protocols.power_iteration import data_party as pi_party
from smcdp.runtime.durability.journal import FileJournal
from tests.unit.protocols.keyword_util import synthetic_models


def _comparable(result):
    d = asdict(result) if not isinstance(result, dict) else dict(result)
    for k in ("stats", "timings", "round_seconds", "share_file", "model_file"):
        d.pop(k, None)
    return d


def _run_and_replay(tmp_path, roles: dict[str, str], make_fns):
    roots = {r: Randomness.fresh() for r in roles}
    journals = {r: FileJournal(tmp_path / f"{r}.log") for r in roles}
    net = InMemoryNetwork(roles, journals=journals)
    first = asyncio.run(net.run(make_fns(roots)))
    for j in journals.values():
        j.close()
    for role in roles:
        replay = InMemoryNetwork(roles, journals={role: FileJournal(tmp_path / f"{role}.log")})
        ch = replay.channels[role]
        fns = make_fns({r: Randomness(k.key) for r, k in roots.items()})
        again = asyncio.run(fns[role](ch))
        assert _comparable(again) == _comparable(first[role]), f"replayed role {role} reached another result"
        assert replay.transcript == [], f"replayed role {role} sent {len(replay.transcript)} message(s) again"
        assert ch.replayed_sends == sum(1 for sender, *_ in net.transcript if sender == role)
    return first


def test_power_iteration_replays(tmp_path):
    rng = np.random.default_rng(5)
    blocks = [rng.normal(size=(5, 4)), rng.normal(size=(5, 6))]
    params = PowerIterationParams(n_parties=2, key_bits=512, p=0.7, tol=1e-8, max_iterations=300)
    roles = {"trent": "trent", "party1": "alice", "party2": "bob"}

    def fns(roots):
        return {
            "trent": lambda ch: trent(ch, params, seed=roots["trent"], allow_insecure_keys=True),
            "party1": lambda ch: pi_party(ch, blocks[0], params, seed=roots["party1"], allow_insecure_keys=True),
            "party2": lambda ch: pi_party(ch, blocks[1], params, seed=roots["party2"], allow_insecure_keys=True),
        }

    first = _run_and_replay(tmp_path, roles, fns)
    assert first["trent"].converged


def test_dp_aggregate_replays_with_the_same_noise(tmp_path):
    p = DPAggregateParams(
        n_parties=2, dim=3, epsilon=1.0, lam=0.1, max_sensitivity=0.5, key_bits=768, dgk_bits=512, dgk_t=64
    ).validate()
    weights = [np.array([0.3, -0.2, 0.1]), np.array([0.25, -0.1, 0.05])]
    sens = [0.05, 0.08]
    roles = {"charlie": "charlie", "dave": "dave", "party1": "p1", "party2": "p2"}

    def fns(roots):
        return {
            "charlie": lambda ch: charlie(ch, p, seed=roots["charlie"], allow_insecure_keys=True),
            "dave": lambda ch: dave(ch, p),
            "party1": lambda ch: data_party(ch, weights[0], sens[0], p, seed=roots["party1"], allow_insecure_keys=True),
            "party2": lambda ch: data_party(ch, weights[1], sens[1], p, seed=roots["party2"], allow_insecure_keys=True),
        }

    first = _run_and_replay(tmp_path, roles, fns)
    assert np.all(np.isfinite(first["dave"].weights))


@pytest.mark.parametrize("kind,m", [("discrete", 1), ("diag", 1), ("diag", 2)])
def test_keyword_replays(tmp_path, kind, m):
    """Also with rounds of 2 frames (12 frames: five full rounds and a last one of 1 step)."""
    rng = np.random.default_rng(7)
    models = synthetic_models(kind, rng, D=3, N=3, d=4, M=5)
    X = rng.integers(0, 5, size=12) if kind == "discrete" else rng.normal(size=(12, 4))
    params = KeywordParams(key_bits=768, debug_reveal=True, frames_per_round=m)
    _, sk = generate_keypair(768, allow_insecure=True)
    roles = {"alice": "alice", "bob": "bob"}

    def fns(roots):
        return {
            "alice": lambda ch: keyword_alice(
                ch, X, params, private_key=sk, seed=roots["alice"], allow_insecure_keys=True
            ),
            "bob": lambda ch: keyword_bob(ch, models, params, seed=roots["bob"], allow_insecure_keys=True),
        }

    first = _run_and_replay(tmp_path, roles, fns)
    assert first["alice"].keyword in models.words
