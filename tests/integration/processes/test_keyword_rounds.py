"""Keyword recognition with induction rounds of two frames across real party processes: the models'
party runs them only when its [policy] allows them (they show Alice more of its models), and then they
recognise the same word as the seed's rounds of one frame."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from smcdp.cli.demo.common import governed
from smcdp.errors import SmcdpError
from smcdp.runtime import client
from smcdp.runtime.local import LocalCluster
from smcdp.speech import load_models, score_models
from tests.support.paths import KEYWORD_DATA

ROLES = {"alice": "alice", "bob": "bob"}
PARTIES = {
    "alice": {"keyword": {"utterance": KEYWORD_DATA / "utterance_98.npy"}},
    "bob": {"keyword": {"models": KEYWORD_DATA / "models.npz"}},
}


def _cluster(tmp_path, name: str, params: dict, bob_allows: int | None) -> LocalCluster:
    options, _ = governed("keyword", ROLES, params, initiator="alice", seed=None)
    rules = options["policies"]["bob"].protocols["keyword"]
    assert rules.max_frames_per_round == params.get("frames_per_round")  # the narrowest admitting rules
    options["policies"]["bob"] = replace(
        options["policies"]["bob"], protocols={"keyword": replace(rules, max_frames_per_round=bob_allows)}
    )
    return LocalCluster(PARTIES, allow_insecure_keys=True, workdir=tmp_path / name, **options)


def test_rounds_of_two_frames_need_bobs_policy_and_recognise_the_same_word(tmp_path):
    params = {"key_bits": 512, "frames_per_round": 2}
    want = int(
        np.argmax(score_models(load_models(KEYWORD_DATA / "models.npz"), np.load(KEYWORD_DATA / "utterance_98.npy")))
    )
    with _cluster(tmp_path, "strict", params, bob_allows=None) as cluster:
        with pytest.raises(SmcdpError) as ei:
            client.start_session(
                cluster.configs["alice"], "keyword", ROLES, params, session_id="kw-m2-refused", timeout=120
            )
        assert ei.value.code == "FAILED_PRECONDITION", ei.value
        assert "party 'bob'" in str(ei.value) and "max_frames_per_round" in str(ei.value), ei.value
        recs = cluster.run("keyword", ROLES, {"key_bits": 512}, initiator="alice", session_id="kw-m1", timeout=300)
        assert all(r["state"] == "succeeded" for r in recs.values()), recs
        assert recs["alice"]["result"]["index"] == want
    with _cluster(tmp_path, "allowing", params, bob_allows=2) as cluster:
        recs = cluster.run("keyword", ROLES, params, initiator="alice", session_id="kw-m2", timeout=300)
        assert all(r["state"] == "succeeded" for r in recs.values()), recs
        assert recs["alice"]["result"]["index"] == want
