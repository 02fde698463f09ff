"""A party process prepares its next keyword session as Alice while idle (issue 27): the second session on
the same processes finds its key, tables and obfuscators made, and still recognises the right word."""

import numpy as np

from smcdp.runtime.local import LocalCluster
from smcdp.speech import load_models, score_models
from tests.support.paths import KEYWORD_DATA


def test_a_warm_alice_finds_her_next_sessions_offline_phase_done(tmp_path):
    utterance = KEYWORD_DATA / "utterance_98.npy"
    parties = {
        "alice": {"keyword": {"utterance": utterance}},
        "bob": {"keyword": {"models": KEYWORD_DATA / "models.npz"}},
    }
    roles = {"alice": "alice", "bob": "bob"}
    params = {"key_bits": 512}
    want = int(np.argmax(score_models(load_models(KEYWORD_DATA / "models.npz"), np.load(utterance))))
    with LocalCluster(parties, allow_insecure_keys=True, workdir=tmp_path / "run", open_policy=True) as cluster:
        offline = []
        for sid in ("kw-cold", "kw-warm"):
            recs = cluster.run("keyword", roles, params, initiator="alice", session_id=sid, timeout=300)
            assert all(r["state"] == "succeeded" for r in recs.values()), recs
            res = recs["alice"]["result"]
            assert res["index"] == want
            offline.append(res["timings"]["offline"])
    # the first session's root was prepared for at start-up, but for the default 2048-bit key; the
    # second one's for the 512-bit key the first session used
    assert offline[0]["prepared"] is False
    assert offline[1]["prepared"] is True
    assert 0 <= offline[1]["obfuscators_made_before"] <= offline[1]["obfuscator_count"]
