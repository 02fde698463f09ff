"""The keyword protocol's byte envelope (issue 24): derived from its public bounds (max_frames, max_models,
max_states, max_mixtures, max_features), it holds every message of real runs with every emission kind --
each message, the total and the count -- and stays within a small factor of what the run needed when the
bounds are the inputs' own sizes.  Before, only the number of messages was bounded: a keyword session
accepted anything up to the [limits] ceilings (2 GiB)."""

from __future__ import annotations

import numpy as np
import pytest

from smcdp.errors import InputRejected, InvalidMessage, SessionAborted
from smcdp.plugins.keyword import KeywordPlugin, load_utterance
from smcdp.protocols.keyword import KeywordParams, keyword_alice, keyword_bob
from smcdp.speech import load_models
from tests.unit.protocols.keyword_util import DATA, bounds_for, fixture_utterances, run_pair


def _discrete():
    z = np.load(DATA / "discrete_test.npz")
    starts = np.concatenate([[0], np.cumsum(z["lengths"])])
    return z["symbols"][starts[2] : starts[3]]


def _cases():
    X = load_utterance(fixture_utterances()[0][0])
    return {
        "diag": (load_models(DATA / "models.npz"), X),
        "full": (load_models(DATA / "models_full.npz"), X[:30]),
        "gmm-diag": (load_models(DATA / "models_gmm.npz"), X[:40]),
        "discrete": (load_models(DATA / "models_discrete.npz"), _discrete()),
    }


def _run(models, X, sk, p_alice, p_bob=None):
    return run_pair(
        lambda ch: keyword_alice(ch, X, p_alice, private_key=sk, allow_insecure_keys=True),
        lambda ch: keyword_bob(ch, models, p_bob or p_alice, allow_insecure_keys=True),
    )


@pytest.mark.parametrize("kind", ["diag", "full", "gmm-diag", "discrete"])
@pytest.mark.parametrize("m", [1, 2, 3])
def test_every_real_transcript_fits_the_envelope_of_its_bounds(kind, m, keypair512):
    _, sk = keypair512
    models, X = _cases()[kind]
    for bounds in (bounds_for(models, X), {}):  # the inputs' own sizes, and the defaults
        p = KeywordParams(key_bits=512, debug_reveal=True, frames_per_round=m, **bounds).validate()
        _, net = _run(models, X, sk, p)
        for role in ("alice", "bob"):
            env = p.traffic_envelope(role)
            got = [len(d) for *_, d in net.received_by(role)]
            assert max(got) <= env.message_bytes, (kind, role, max(got), env)
            assert sum(got) <= env.session_bytes, (kind, role, sum(got), env)
            assert len(got) <= env.tags, (kind, role, len(got), env)
            if bounds:  # tight: the bounds cannot say which transitions exist (every one is counted), nor,
                # with rounds of m frames, how many paths (at most 2m × the edges per state on average)
                slack = 12 if m == 1 else 12 * 2 * m
                assert env.session_bytes <= slack * sum(got) + 64 * 1024, (kind, role, sum(got), env)


def test_the_plugin_gives_the_envelope_and_the_defaults_are_far_below_the_ceilings():
    plugin = KeywordPlugin()
    roles = {"alice": "a", "bob": "b"}
    params = plugin.validate_params({"key_bits": 2048}, roles)
    for role in roles:
        env = plugin.traffic_envelope(params, roles, role)
        assert env == KeywordParams.from_mapping(params).traffic_envelope(role)
        assert env.session_bytes < 300 << 20 and env.message_bytes < 8 << 20, env
    tight = plugin.validate_params(
        {"key_bits": 2048, "max_frames": 98, "max_models": 10, "max_states": 5, "max_mixtures": 1, "max_features": 39},
        roles,
    )
    assert all(plugin.traffic_envelope(tight, roles, r).session_bytes < 32 << 20 for r in roles)


def test_models_or_frames_beyond_the_bounds_are_refused(keypair512):
    """Bob does not run models beyond the session's bounds (the rule only reaches Alice); Alice refuses a
    header beyond hers (a Bob who ignores them), and observations longer than max_frames."""
    _, sk = keypair512
    models, X = _cases()["diag"]
    with pytest.raises((InputRejected, SessionAborted), match="larger than the session's public bounds"):
        _run(models, X, sk, KeywordParams(key_bits=512, max_models=9))
    with pytest.raises((InvalidMessage, SessionAborted), match="beyond the session's bounds: 5 states"):
        _run(models, X, sk, KeywordParams(key_bits=512, max_states=4), KeywordParams(key_bits=512))
    with pytest.raises((InputRejected, SessionAborted), match="more frames than the session's max_frames"):
        _run(models, X, sk, KeywordParams(key_bits=512, max_frames=50))


def test_a_subgroup_key_session_fits_the_envelope_too():
    """Alice's subgroup key (docs/crypto.md) makes kw/pk carry the base h_s (mod n², twice n's bytes): the
    envelope's key message allows for it (net.limits.public_key_bytes)."""
    from smcdp.crypto.paillier import generate_keypair
    from smcdp.net.limits import public_key_bytes
    from smcdp.v1 import messages_pb2 as pb

    _, sk = generate_keypair(512, allow_insecure=True, subgroup=True)
    models, X = _cases()["diag"]
    p = KeywordParams(key_bits=512, key_kind="subgroup", **bounds_for(models, X[:20])).validate()
    _, net = _run(models, X[:20], sk, p)
    for role in ("alice", "bob"):
        env = p.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags
    from smcdp.crypto.codec import public_key_to_proto

    assert len(public_key_to_proto(sk.public_key).SerializeToString()) <= public_key_bytes(512)
    assert len(pb.PaillierPublicKey(n=b"\xff" * 64).SerializeToString()) <= public_key_bytes(512)
