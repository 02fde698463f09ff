"""Alice's subgroup key (docs/crypto.md, "Subgroup keys") across real party processes: the models' party
runs a session under it only when its [policy] allows it (PERMISSION_DENIED naming the rule otherwise),
and then the session recognises the same word; the demo's --key-kind writes the rule into both policies."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from smcdp.cli.demo.common import governed
from smcdp.cli.demo.keyword import demo_keyword
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
PARAMS = {"key_bits": 512, "key_kind": "subgroup"}


def _want() -> int:
    return int(
        np.argmax(score_models(load_models(KEYWORD_DATA / "models.npz"), np.load(KEYWORD_DATA / "utterance_98.npy")))
    )


def test_bob_runs_under_alices_subgroup_key_only_when_his_policy_allows_it(tmp_path):
    options, _ = governed("keyword", ROLES, PARAMS, initiator="alice", seed=None)
    rules = options["policies"]["bob"].protocols["keyword"]
    assert rules.allow_subgroup_key and options["policies"]["alice"].protocols["keyword"].allow_subgroup_key
    options["policies"]["bob"] = replace(
        options["policies"]["bob"], protocols={"keyword": replace(rules, allow_subgroup_key=None)}
    )
    with LocalCluster(PARTIES, allow_insecure_keys=True, workdir=tmp_path / "strict", **options) as cluster:
        with pytest.raises(SmcdpError) as ei:
            client.start_session(
                cluster.configs["alice"], "keyword", ROLES, PARAMS, session_id="kw-subgroup-refused", timeout=120
            )
        assert ei.value.code == "PERMISSION_DENIED", ei.value
        assert "party 'bob'" in str(ei.value) and "allow_subgroup_key" in str(ei.value), ei.value
        recs = cluster.run("keyword", ROLES, {"key_bits": 512}, initiator="alice", session_id="kw-std", timeout=300)
        assert all(r["state"] == "succeeded" for r in recs.values()), recs
        assert recs["alice"]["result"]["index"] == _want()


def test_the_demo_runs_under_a_subgroup_key_with_both_policies_allowing_it():
    out = demo_keyword(
        str(KEYWORD_DATA / "utterance_98.npy"), str(KEYWORD_DATA / "models.npz"), key_bits=512, key_kind="subgroup"
    )
    assert out["key_kind"] == "subgroup" and out["index"] == _want()
