"""Party processes as separate OS processes (launchers, signals, clean shutdown)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from smcdp.errors import SessionAborted
from smcdp.net.grpc_channel import NotFound
from smcdp.runtime import client
from tests.support.deployment import REPO, make_deployment

ROLES = {"a": "alice", "b": "bob"}


def test_two_processes_run_a_session_and_stop_on_sigterm(tmp_path, processes):
    values = tmp_path / "values.txt"
    values.write_text("1.25 -2 3e3\n")
    cfgs = make_deployment(tmp_path, ["alice", "bob"], inputs={"alice": {"net-echo": {"values": values}}})
    alice = processes("alice", cfgs["alice"])  # parties/alice.py
    bob = processes("bob", cfgs["bob"], use_launcher=False)  # python -m smcdp party
    client.wait_healthy(cfgs["alice"], timeout=30)
    client.wait_healthy(cfgs["alice"], peer="bob", timeout=30)
    rec = client.start_session(cfgs["alice"], "net-echo", ROLES, {}, session_id="proc-1", timeout=30)
    assert rec["state"] == "succeeded"
    assert rec["result"]["y"] == [2.5, -4.0, 6000.0]
    deadline = time.monotonic() + 10
    while (bob_rec := client.get_result(cfgs["bob"], "proc-1"))["state"] == "running":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert bob_rec["result"]["received"] == [1.25, -2.0, 3000.0]
    assert (tmp_path / "state/bob/sessions/alice.proc-1.json").exists()
    for proc in (alice, bob):
        rc = proc.terminate(timeout=20)
        assert rc == 0, proc.output()
        assert f"party {proc.name} stopped" in proc.output()
    # records survive the processes
    assert '"state": "succeeded"' in (tmp_path / "state/alice/sessions/alice.proc-1.json").read_text()


def _session_running_at_bob(tmp_path, processes, session_id, wait_forever_role, timeout):
    """alice and bob as processes; alice starts a never-ending echo session in a thread.

    Returns once bob runs its role: (cfgs, bob process, thread, outcome dict, session start time).
    """
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    processes("alice", cfgs["alice"])
    bob = processes("bob", cfgs["bob"])
    client.wait_healthy(cfgs["alice"], timeout=30)
    client.wait_healthy(cfgs["bob"], timeout=30)
    outcome = {}

    def run():
        try:
            outcome["rec"] = client.start_session(
                cfgs["alice"],
                "net-echo",
                ROLES,
                {"wait_forever_role": wait_forever_role},
                session_id=session_id,
                timeout=timeout,
            )
        except Exception as exc:  # noqa: BLE001 - inspected by the caller
            outcome["exc"] = exc

    started = time.monotonic()
    t = threading.Thread(target=run)
    t.start()
    while _state(cfgs["bob"], session_id) != "running":
        assert time.monotonic() - started < 20
        time.sleep(0.1)
    return cfgs, bob, t, outcome, started


def test_sigterm_mid_session_aborts_peers_cleanly(tmp_path, processes):
    cfgs, bob, t, outcome, _ = _session_running_at_bob(tmp_path, processes, "proc-2", "a", 50)
    t0 = time.monotonic()
    assert bob.terminate(timeout=20) == 0, bob.output()
    t.join(20)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 15
    exc = outcome.get("exc")
    assert isinstance(exc, SessionAborted), outcome
    assert exc.origin == "bob" and exc.code == "UNAVAILABLE"
    assert "bob is shutting down" in str(exc)
    rec = client.get_result(cfgs["alice"], "proc-2")
    assert rec["state"] == "failed" and rec["error"]["origin"] == "bob"
    # bob wrote its own record before exiting
    bob_rec = (tmp_path / "state/bob/sessions/alice.proc-2.json").read_text()
    assert '"state": "failed"' in bob_rec and "shutting down" in bob_rec


def _state(cfg, sid):
    try:
        return client.get_result(cfg, sid)["state"]
    except NotFound:  # not proposed there yet
        return None


def test_launcher_refuses_config_of_other_party(tmp_path):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    proc = subprocess.run(
        [sys.executable, str(REPO / "parties" / "bob.py"), "--config", str(cfgs["alice"])],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "configures party 'alice', but this launcher runs 'bob'" in proc.stderr


def test_bad_config_exits_with_clear_error(tmp_path):
    bad = tmp_path / "x.toml"
    bad.write_text('[party]\nname = "alice"\n')
    proc = subprocess.run(
        [sys.executable, "-m", "smcdp", "party", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert "missing party.listen" in proc.stderr


@pytest.mark.parametrize("launcher", ["alice", "bob", "trent", "charlie", "dave"])
def test_launchers_exist(launcher):
    text = (REPO / "parties" / f"{launcher}.py").read_text()
    assert f'run_party(expect_name="{launcher}")' in text


def test_peer_killed_mid_session_initiator_ends_by_deadline(tmp_path, processes):
    """SIGKILL (no goodbye, like a dropped link): the initiator ends at its deadline."""
    cfgs, bob, t, outcome, _ = _session_running_at_bob(tmp_path, processes, "proc-3", "b", 5)
    t0 = time.monotonic()  # the session began at alice before bob ran it: its deadline is < t0 + 5
    bob.kill()
    t.join(30)
    assert not t.is_alive()
    assert time.monotonic() - t0 < 5 + 8  # deadline + abort attempt + slack
    exc = outcome.get("exc")
    assert exc is not None and exc.code == "DEADLINE_EXCEEDED", outcome
    rec = client.get_result(cfgs["alice"], "proc-3")
    assert rec["state"] == "failed" and rec["error"]["origin"] == "alice"
    assert "no message 'y' from b within" in rec["error"]["message"]
    assert rec["seconds"] < 5 + 3 + 2  # from its Begin: the deadline, the abort attempt (3 s), slack


def test_a_port_taken_before_the_party_binds_it_is_replaced(tmp_path, monkeypatch):
    """free_tcp_port picks a port that was free a moment ago; another process can take it before the party
    binds it (one of 40 demo runs failed with "Address already in use").  The cluster then starts again on
    fresh ports instead of failing."""
    import socket

    from smcdp.runtime import local
    from smcdp.runtime.config import load_config
    from smcdp.runtime.local import LocalCluster

    squatter = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real, handed = local.free_tcp_port, []

    def first_one_taken(host="127.0.0.1"):
        handed.append(taken if not handed else real(host))
        return handed[-1]

    monkeypatch.setattr(local, "free_tcp_port", first_one_taken)
    try:
        with LocalCluster(
            {"alice": {}, "bob": {}}, allow_insecure_keys=True, workdir=tmp_path / "run", open_policy=True
        ) as cluster:
            ports = {p: load_config(cluster.configs[p]).listen for p in ("alice", "bob")}
            assert f":{taken}" not in " ".join(ports.values()), ports
            assert client.check_health(cluster.configs["alice"], peer="bob") == "SERVING"
            assert "cannot listen on" in cluster.log("alice") or "cannot listen on" in cluster.log("bob")
    finally:
        squatter.close()
    assert handed[0] == taken and len(handed) >= 4  # two parties, twice
