"""Alice's offline phase done before her session (issue 27): the key she prepares for a root is exactly
the one her session derives from it, so the result, the messages' key and a replay are unchanged."""

import numpy as np

from smcdp.crypto.codec import public_key_from_proto
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.prepared import SHELF
from smcdp.primitives.rng import Randomness, protocol_rng
from smcdp.protocols.keyword import AliceSizes, KeywordParams, keyword_alice, keyword_bob, prepare_alice
from smcdp.speech import load_models, score_models
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.keyword_util import DATA, run_pair

MODELS = load_models(DATA / "models.npz")


def _session(X, root, p):
    res, net = run_pair(
        lambda ch: keyword_alice(ch, X, p, seed=root, allow_insecure_keys=True),
        lambda ch: keyword_bob(ch, MODELS, p, allow_insecure_keys=True),
    )
    (sent,) = [d for (s, r, tag, _, d) in net.transcript if tag == "kw/pk"]
    return res["alice"], public_key_from_proto(pb.PaillierPublicKey.FromString(sent), allow_insecure=True)


def test_a_prepared_key_is_the_sessions_own_and_a_replay_derives_it_again():
    X = np.load(DATA / "utterance_98.npy")[:30]
    root = Randomness.fresh()
    p = KeywordParams(key_bits=512)
    prepare_alice(root, len(X), key_bits=512, allow_insecure_keys=True)
    want = generate_keypair(512, allow_insecure=True, rng=protocol_rng(root, "keyword", "alice", "key"))[1]
    plain = int(np.argmax(score_models(MODELS, X)))

    first, pk1 = _session(X, root, p)
    assert first.timings["offline"]["prepared"] is True and first.index == plain
    assert pk1 == want.public_key
    # what the next session is prepared for comes back in the result (the plug-in keeps it): this one's
    assert first.prepare_next == AliceSizes(
        key_bits=512, obfuscators_per_frame=first.timings["offline"]["obfuscator_count"] / len(X)
    )

    again, pk2 = _session(X, root, p)  # what a replay after a crash does
    assert again.timings["offline"]["prepared"] is False and again.index == plain and pk2 == pk1


def test_nothing_prepared_for_another_root_or_key_size():
    X = np.load(DATA / "utterance_98.npy")[:10]
    root = Randomness.fresh()
    prepare_alice(root, len(X), key_bits=768, allow_insecure_keys=True)
    a, _ = _session(X, root, KeywordParams(key_bits=512))  # another key size
    assert a.timings["offline"]["prepared"] is False
    a, _ = _session(X, Randomness.fresh(), KeywordParams(key_bits=768))  # another root
    assert a.timings["offline"]["prepared"] is False
    SHELF.clear()
