"""smcdp.client.PartyClient and the ``smcdp session`` CLI over it, against party processes; and the
notebook-style example (examples/operator_client.py), run end to end."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from smcdp.client import PartyClient, SessionHandle, SessionState
from smcdp.errors import InvalidMessage
from smcdp.net.grpc_channel import NotFound
from smcdp.runtime import client as runtime_client
from tests.support.deployment import REPO, make_deployment

ROLES = {"a": "alice", "b": "bob"}


def test_one_start_call_made_many_times_at_once_is_one_session(tmp_path, processes):
    """Eight copies of one operator start call, sent at once (a client that repeated a call its transport lost,
    and the first arrived after all): one session, every call answered with its record.  Two copies used to
    run two proposal flows at the initiator, whose Proposes raced through bob's admission: both created the
    session there, and the second failed on the checkpoint the first had made -- failing the session (a
    fresh-clone run failed so, with two copies)."""
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    processes("alice", cfgs["alice"])
    processes("bob", cfgs["bob"])
    runtime_client.wait_healthy(cfgs["alice"], timeout=30)
    runtime_client.wait_healthy(cfgs["alice"], "bob", timeout=30)
    # bob's role holds 3 s (without computing), so that every copy arrives while the session runs: a copy of a
    # session that has already ended is refused (ALREADY_EXISTS), as any start under a used id -- a fresh-clone
    # run saw the eighth copy arrive after a session of a few milliseconds had ended
    params = {"n": 2, "block_seconds": 3.0}
    for k in range(3):
        sid = f"op-many-{k}"
        calls = [
            runtime_client.begin_session(cfgs["alice"], "net-echo", ROLES, params, session_id=sid, timeout=30)
            for _ in range(8)
        ]
        records = [c.wait(timeout=60) for c in calls]
        assert {r["state"] for r in records} == {"succeeded"}, [r.get("error") for r in records]
        assert all(r["result"] == records[0]["result"] for r in records) and records[0]["result"]["y"] == [1.0, 3.0]
        # alice reports success once bob confirmed he holds his output; bob writes his record just after, so
        # his end is waited for (a fresh-clone run read him at that instant, still "running")
        bob = runtime_client.follow_session(cfgs["bob"], f"alice.{sid}", 30)
        assert bob["state"] == "succeeded" and bob["restarts"] == 0, bob


def test_party_client_and_the_session_cli_against_party_processes(tmp_path, processes):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    processes("alice", cfgs["alice"])
    processes("bob", cfgs["bob"])
    alice, bob = PartyClient.from_config(cfgs["alice"]), PartyClient.from_config(cfgs["bob"])
    alice.wait_healthy(timeout=30)
    alice.wait_healthy("bob", timeout=30)

    res = alice.start_session("net-echo", ROLES, {"n": 2}, session_id="op-1", timeout=30)
    assert res.state is SessionState.SUCCEEDED and res.result["y"] == [1.0, 3.0]
    assert res.party == "alice" and res.role == "a" and res.initiator == "alice" and res.seconds > 0
    assert bob.wait("op-1", timeout=30).result["received"] == [0.5, 1.5]
    assert alice.status("op-1").state is SessionState.SUCCEEDED

    # without waiting: a handle, watched through status until it ends
    seen = []
    handle = alice.start_session("net-echo", ROLES, {"n": 3}, session_id="op-2", timeout=30, wait=False)
    assert isinstance(handle, SessionHandle) and handle.session_id == "alice.op-2"
    res2 = handle.wait(timeout=60, on_status=seen.append, poll=0.05)
    assert res2.succeeded and handle.done()
    assert all(s.session_id == "alice.op-2" for s in seen)

    # the operator's start call made twice under one id (a client repeats a call its transport lost, and the
    # first arrived after all): one session, both calls answered with its record
    calls = [
        runtime_client.begin_session(cfgs["alice"], "net-echo", ROLES, {"n": 2}, session_id="op-twice", timeout=30)
        for _ in range(2)
    ]
    twice = [c.wait(timeout=60) for c in calls]
    assert [r["state"] for r in twice] == ["succeeded", "succeeded"], twice
    assert twice[0]["result"] == twice[1]["result"] and twice[0]["result"]["y"] == [1.0, 3.0]
    assert bob.wait("op-twice", timeout=30).result["received"] == [0.5, 1.5]

    listed = {i.session_id: i for i in alice.sessions()}
    assert {"alice.op-1", "alice.op-2"} <= set(listed) and listed["alice.op-1"].state is SessionState.SUCCEEDED

    # failures are typed, and the record stays available with its error
    with pytest.raises(InvalidMessage, match=re.escape("session alice.op-3 failed")):
        alice.start_session("net-echo", ROLES, {"fail_role": "a"}, session_id="op-3", timeout=30)
    failed = alice.result("op-3")
    assert failed.state is SessionState.FAILED and failed.error.code == "INVALID_ARGUMENT"
    with pytest.raises(NotFound):
        alice.result("no-such-session")

    # the CLI over the client: JSON on stdout as before, progress as plain lines on stderr (not a TTY)
    env = dict(os.environ, SMCDP_PROGRESS_INTERVAL="0.2")
    env.pop("SMCDP_PROGRESS", None)
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "smcdp",
            "session",
            "start",
            "--config",
            str(cfgs["alice"]),
            "--protocol",
            "net-echo",
            "--role",
            "a=alice",
            "--role",
            "b=bob",
            "--params",
            '{"n": 2}',
            "--session-id",
            "op-cli",
            "--timeout",
            "30",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    rec = json.loads(r.stdout)
    assert rec["state"] == "succeeded" and rec["session_id"] == "alice.op-cli" and rec["result"]["y"] == [1.0, 3.0]
    assert rec == alice.result("op-cli").as_dict()
    lines = r.stderr.splitlines()
    assert (
        lines and lines[-1].startswith("session alice.op-cli (") and " done, " in lines[-1] and "round/s" in lines[-1]
    )
    assert "\x1b" not in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "smcdp", "session", "status", "op-cli", "--config", str(cfgs["alice"])],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=60,
    )
    assert r.returncode == 0 and json.loads(r.stdout)["state"] == "succeeded"


@pytest.mark.slow
def test_the_operator_client_example_runs_end_to_end():
    env = dict(os.environ, SMCDP_PROGRESS="plain")
    r = subprocess.run(
        [sys.executable, str(REPO / "examples" / "operator_client.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=400,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    out = r.stdout
    assert "decision: approved" in out and "succeeded in" in out
    assert "decision: rejected - no second run this week" in out
    assert "trent was told: [PERMISSION_DENIED]" in out and "no second run this week" in out
    assert out.rstrip().endswith("operator client example: OK")
