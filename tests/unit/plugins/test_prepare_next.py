"""A plug-in keeps what its role's last session used and prepares the party's next session for it (the
protocol modules keep no state of their own): keyword's Alice sizes, power iteration's party1 key."""

from __future__ import annotations

import asyncio

import numpy as np

import smcdp.plugins.keyword as keyword_plugin
import smcdp.plugins.power_iteration as pi_plugin
from smcdp.compute.local import TABLE_BATCHES
from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.base import SessionContext
from smcdp.plugins.keyword import KeywordPlugin
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.primitives.rng import Randomness
from smcdp.protocols.keyword import AliceSizes
from smcdp.protocols.power_iteration import Party1KeySizes, PowerIterationParams
from tests.unit.protocols.keyword_util import DATA, run_pair
from tests.unit.protocols.test_power_iteration import blocks_with_gap


def _calls(monkeypatch, module, name):
    calls = []
    monkeypatch.setattr(module, name, lambda *args, **kw: calls.append((args, kw)))
    return calls


def test_keyword_alice_prepares_for_her_last_sessions_sizes_kept_by_her_plugin(tmp_path, monkeypatch):
    X = np.load(DATA / "utterance_98.npy")[:12]
    np.save(tmp_path / "utterance.npy", X)
    inputs = {"utterance": str(tmp_path / "utterance.npy")}
    alice, bob = KeywordPlugin(), KeywordPlugin()  # one per party, living as long as the party
    calls = _calls(monkeypatch, keyword_plugin, "prepare_alice")
    root = Randomness.fresh()

    alice.prepare_next(root, inputs, False)  # before any session: the defaults
    assert calls.pop() == (
        (root, len(X)),
        {"key_bits": 2048, "obfuscators_per_frame": 64.0, "allow_insecure_keys": False, "key_kind": "standard"},
    )

    params = alice.validate_params({"key_bits": 512}, {"alice": "a", "bob": "b"})

    def ctx(inputs):
        return SessionContext(
            "s1", "keyword", {"alice": "a", "bob": "b"}, params, inputs=inputs, allow_insecure_keys=True
        )

    res, _ = run_pair(
        lambda ch: alice.run_role("alice", ch, ctx(inputs)),
        lambda ch: bob.run_role("bob", ch, ctx({"models": str(DATA / "models.npz")})),
    )
    record = res["alice"]
    assert "prepare_next" not in record  # kept by the plug-in, not written to the record
    per_frame = record["timings"]["offline"]["obfuscator_count"] / len(X)
    assert alice.last_alice == AliceSizes(key_bits=512, obfuscators_per_frame=per_frame)
    assert bob.last_alice == AliceSizes()  # Bob's party learnt nothing as Alice

    alice.prepare_next(root, inputs, True)
    assert calls.pop() == (
        (root, len(X)),
        {"key_bits": 512, "obfuscators_per_frame": per_frame, "allow_insecure_keys": True, "key_kind": "standard"},
    )

    # a session under a subgroup key (docs/crypto.md): her next key is made of that kind
    params = alice.validate_params({"key_bits": 512, "key_kind": "subgroup"}, {"alice": "a", "bob": "b"})
    run_pair(
        lambda ch: alice.run_role("alice", ch, ctx(inputs)),
        lambda ch: bob.run_role("bob", ch, ctx({"models": str(DATA / "models.npz")})),
    )
    assert alice.last_alice.key_kind == "subgroup"
    alice.prepare_next(root, inputs, True)
    assert calls.pop()[1]["key_kind"] == "subgroup"


def test_power_iteration_prepares_party1s_next_key_for_the_last_sessions_kept_by_the_plugin(tmp_path, monkeypatch):
    k = 6
    blocks = blocks_with_gap(np.random.default_rng(11), k, (5, 4))
    roles = {"trent": "t", "party1": "a", "party2": "b"}
    plugins = {role: PowerIterationPlugin() for role in roles}  # one per party
    params = plugins["trent"].validate_params({"n_parties": 2, "key_bits": 512, "max_iterations": 40}, roles)
    inputs = {}
    for role, block in zip(("party1", "party2"), blocks):
        np.save(tmp_path / f"{role}.npy", block)
        inputs[role] = {"data": str(tmp_path / f"{role}.npy")}
    calls = _calls(monkeypatch, pi_plugin, "prepare_party1")
    root = Randomness.fresh()

    plugins["party2"].prepare_next(root, inputs["party2"], False)  # before any session: the defaults
    assert calls.pop() == ((root,), {"key_bits": 2048, "uses": TABLE_BATCHES, "allow_insecure_keys": False})

    def ctx(role):
        return SessionContext(
            "s1", "power-iteration", roles, params, inputs=inputs.get(role, {}), allow_insecure_keys=True
        )

    net = InMemoryNetwork(roles)
    records = asyncio.run(
        net.run({role: (lambda ch, role=role: plugins[role].run_role(role, ch, ctx(role))) for role in roles})
    )
    assert all("prepare_next" not in r for r in records.values())  # kept by the plug-ins, not recorded
    p, pk = PowerIterationParams.from_mapping(params), generate_keypair(512, allow_insecure=True)[0]
    want = Party1KeySizes(key_bits=512, uses=TABLE_BATCHES * p.packing(pk).n_ciphertexts(k * p.block_size))
    assert plugins["party1"].last_key == plugins["party2"].last_key == want  # either may be party1 next time
    assert plugins["trent"].last_key == Party1KeySizes()

    plugins["party2"].prepare_next(root, inputs["party2"], True)
    assert calls.pop() == ((root,), {"key_bits": 512, "uses": want.uses, "allow_insecure_keys": True})
