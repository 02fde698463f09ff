"""A plug-in keeps what its role's last session used and prepares the party's next session for it (the
protocol modules keep no state of their own): keyword's Alice sizes, power iteration's party1 key."""

from __future__ import annotations

import numpy as np

import smcdp.plugins.keyword as keyword_plugin
from smcdp.plugins.base import SessionContext
from smcdp.plugins.keyword import KeywordPlugin
from smcdp.primitives.rng import Randomness
from smcdp.protocols.keyword import AliceSizes
from tests.unit.protocols.keyword_util import DATA, run_pair


def _calls(monkeypatch, module, name):
    calls = []
    monkeypatch.setattr(module, name, lambda *args, **kw: calls.append((args, kw)))
    return calls


def test_keyword_alice_prepares_for_her_last_sessions_sizes_kept_by_her_plugin(tmp_path, monkeypatch):
    X = np.load(DATA / "utterance_98.npy")[:12]
    np.save(tmp_path / "utterance.npy", X)
    inputs = {"utterance": str(tmp_path / "utterance.npy")}
    alice, bob = KeywordPlugin(), KeywordPlugin()          # one per party, living as long as the party
    calls = _calls(monkeypatch, keyword_plugin, "prepare_alice")
    root = Randomness.fresh()

    alice.prepare_next(root, inputs, False)                 # before any session: the defaults
    assert calls.pop() == ((root, len(X)), {"key_bits": 2048, "obfuscators_per_frame": 64.0,
                                             "allow_insecure_keys": False})

    params = alice.validate_params({"key_bits": 512}, {"alice": "a", "bob": "b"})

    def ctx(inputs):
        return SessionContext("s1", "keyword", {"alice": "a", "bob": "b"}, params, inputs=inputs,
                              allow_insecure_keys=True)

    res, _ = run_pair(lambda ch: alice.run_role("alice", ch, ctx(inputs)),
                      lambda ch: bob.run_role("bob", ch, ctx({"models": str(DATA / "models.npz")})))
    record = res["alice"]
    assert "prepare_next" not in record                     # kept by the plug-in, not written to the record
    per_frame = record["timings"]["offline"]["obfuscator_count"] / len(X)
    assert alice.last_alice == AliceSizes(key_bits=512, obfuscators_per_frame=per_frame)
    assert bob.last_alice == AliceSizes()                   # Bob's party learnt nothing as Alice

    alice.prepare_next(root, inputs, True)
    assert calls.pop() == ((root, len(X)), {"key_bits": 512, "obfuscators_per_frame": per_frame,
                                             "allow_insecure_keys": True})
