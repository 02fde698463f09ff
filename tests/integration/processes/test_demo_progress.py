"""The power-iteration demo's progress line counts rounds (issue 27: it said "0 round done … ? round/s"
through the whole session, and an ended session's status had no round)."""

import json
import os
import re
import subprocess
import sys

import numpy as np

from smcdp.client import PartyClient
from smcdp.runtime.local import LocalCluster
from tests.support.paths import REPO

DATA = REPO / "examples" / "data" / "power_iteration"


def test_the_demos_last_progress_line_shows_the_sessions_rounds(tmp_path):
    env = dict(os.environ, SMCDP_PROGRESS="plain")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "smcdp",
            "demo",
            "power-iteration",
            "--data",
            str(DATA / "hospital_a.npy"),
            "--data",
            str(DATA / "hospital_b.npy"),
            "--key-bits",
            "512",
            "--out",
            str(tmp_path / "pi.json"),
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads((tmp_path / "pi.json").read_text())
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("power iteration (")]
    assert lines, r.stderr
    m = re.match(r"power iteration \(succeeded(, final)?\): (\d+) round done, ([0-9.]+) round/s, ", lines[-1])
    assert m, lines[-1]
    assert int(m.group(2)) == out["iterations"] > 0 and float(m.group(3)) > 0


def test_an_ended_sessions_status_reports_its_last_round(tmp_path):
    parties = {
        "trent": {},
        "alice": {"power-iteration": {"data": DATA / "hospital_a.npy"}},
        "bob": {"power-iteration": {"data": DATA / "hospital_b.npy"}},
    }
    roles = {"trent": "trent", "party1": "alice", "party2": "bob"}
    with LocalCluster(parties, allow_insecure_keys=True, workdir=tmp_path / "run", open_policy=True) as cluster:
        recs = cluster.run(
            "power-iteration",
            roles,
            {"n_parties": 2, "key_bits": 512},
            initiator="trent",
            session_id="pi-rounds",
            timeout=120,
        )
        assert all(r["state"] == "succeeded" for r in recs.values()), recs
        st = PartyClient.from_config(cluster.configs["trent"]).status("pi-rounds")
    rounds = recs["trent"]["result"]["rounds"]
    assert recs["trent"]["round"] == rounds > 0
    assert st.round == rounds
    assert np.isfinite(recs["trent"]["result"]["x"]).all()
