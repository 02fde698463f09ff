"""A demo whose party was killed and not restarted says how to resume the session -- and following what it
says, word for word, resumes it to the undisturbed result.  Without ``--keep-dir`` it says that the demo's
directory (the checkpoints with it) is gone and how to keep it."""

import json
import re
import subprocess
import sys
import time

import numpy as np
import pytest

from smcdp.client import PartyClient
from smcdp.protocols.power_iteration import plaintext_components
from smcdp.runtime.client import get_result
from smcdp.runtime.local import spawn_party, stop_party
from smcdp.states import SessionState
from tests.support.paths import REPO

DATA = [REPO / "examples/data/power_iteration/hospital_a.npy", REPO / "examples/data/power_iteration/hospital_b.npy"]


def smcdp(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "smcdp", *args], cwd=REPO, capture_output=True, text=True, timeout=timeout
    )


def killed_demo(*extra):
    out = smcdp(
        "demo",
        "power-iteration",
        *(a for d in DATA for a in ("--data", str(d))),
        "--key-bits",
        "512",
        "--peer-grace",
        "3",
        "--chaos",
        "kill:bob:round=3,restart=no",
        *extra,
    )
    assert out.returncode != 0, out.stdout[-2000:]
    assert "party 'bob'" in out.stderr and "(culprit: bob)" in out.stderr, out.stderr[-3000:]
    return out.stderr


@pytest.mark.slow
def test_the_printed_resume_steps_resume_the_session(tmp_path):
    err = killed_demo("--keep-dir", str(tmp_path / "kept"))
    hint = next(line for line in err.splitlines() if "failed resumably" in line)
    configs = re.findall(r"smcdp party --config (\S+) &", hint)
    resume = re.search(r"run: smcdp session resume (\S+) --config (\S+)$", hint)
    assert len(configs) == 3 and resume, hint
    sid, initiator_config = resume.groups()
    assert sid.startswith("trent.power-iteration-") and initiator_config.endswith("trent.toml"), hint
    # the session line printed at the start names the same full id (what `session status` takes)
    assert f"session {sid}: waiting at most" in err, err[-3000:]
    procs = [spawn_party(c, log_file=subprocess.DEVNULL) for c in configs]
    try:
        for c in configs:
            PartyClient.from_config(c).wait_healthy(timeout=60)
        out = smcdp("session", "resume", sid, "--config", initiator_config)
        assert out.returncode == 0, out.stderr[-3000:]
        record = json.loads(out.stdout)
        alice = next(c for c in configs if c.endswith("alice.toml"))
        deadline = time.monotonic() + 60  # the session ends the same way at every participant
        while not SessionState((held := get_result(alice, sid))["state"]).ended and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for p in procs:
            stop_party(p)
    assert record["state"] == "succeeded" and held["state"] == "succeeded", (record, held)
    _, U, _ = plaintext_components([np.load(d) for d in DATA], 1)
    u = np.asarray(held["result"]["u"])
    assert np.allclose(u * np.sign(u @ U[:, 0]), U[:, 0], atol=1e-5), (u, U[:, 0])


@pytest.mark.slow
def test_without_keep_dir_it_says_the_checkpoints_are_gone():
    err = killed_demo()
    hint = next(line for line in err.splitlines() if "failed resumably" in line)
    assert "removes its directory on exit" in hint and "--keep-dir DIR" in hint, hint
