"""Parties on separate network-namespace "hosts", started from `smcdp deploy init` bundles.

Runs as root (CI runs `make test` as root; `make multihost-test` runs only this
directory) and skips with the reason elsewhere.  The tests share one
deployment and run in file order: protocols first, then failures (a party
down at session start, a restart between sessions, certificate rotation, a
cable cut mid-session), then a clean shutdown.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time

import pytest

from .cases import (
    PI_ROLES,
    check_power_iteration,
    power_iteration_params,
    run_power_iteration,
)
from .harness import PORT, SUBNET_PREFIX

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(240)]

PI_PARTIES = list(PI_ROLES.values())


def _cert_fingerprint(path) -> str:
    from cryptography.hazmat.primitives import hashes

    from smcdp.net.tls import load_certificate

    return load_certificate(path).fingerprint(hashes.SHA256()).hex()


def _seconds_between(a: str, b: str) -> float:
    from datetime import datetime

    return (datetime.fromisoformat(b) - datetime.fromisoformat(a)).total_seconds()


def _records_snapshot(cluster) -> dict[str, bytes]:
    out = {}
    for p in cluster.parties:
        for f in sorted((cluster.bundle(p) / "data" / "sessions").glob("*.json")):
            out[f"{p}/{f.name}"] = f.read_bytes()
    return out


@pytest.fixture(autouse=True)
def every_party_up(cluster):
    """Each test starts with every party running and every cable plugged in, whatever an
    earlier (possibly failed) test left behind."""
    for p in cluster.parties:
        cluster.link(p, up=True)
        if cluster.procs[p].poll() is not None:
            cluster.start(p)
    yield


# ------------------------------------------------------------------------- protocols
def test_each_host_sees_only_the_private_lan(cluster):
    for p in cluster.parties:
        routes = cluster.routes(p)
        assert [r.get("dst") for r in routes] == [f"{SUBNET_PREFIX}.0/24"], (p, routes)
        cfg = (cluster.bundle(p) / "party.toml").read_text()
        for q in cluster.parties:
            if q != p:
                assert f'{q} = "{cluster.addresses[q]}:{PORT}"' in cfg


def test_protocols_across_namespaces(cluster):
    assert "power-iteration" in cluster.cases
    for name, case in cluster.cases.items():
        before = cluster.switch_counters()
        records = case.run(cluster, cluster.expected[name])
        after = cluster.switch_counters()
        total = 0
        for party, rec in records.items():
            sent = int(rec["stats"]["bytes_sent"])
            total += sent
            # the payload really crossed that party's cable (TLS and TCP only add bytes)
            assert after[party]["from_party"] - before[party]["from_party"] >= sent, (party, sent)
        assert total > 0


# --------------------------------------------------------------------------- failures
def test_party_down_when_session_starts_fails_naming_it_at_the_deadline(cluster):
    assert cluster.stop("charlie") == 0
    sid = "down-at-start"
    out = cluster.session("trent", "power-iteration", PI_ROLES, power_iteration_params(),
                          session_id=sid, timeout=6)
    assert out.returncode != 0
    # the error names the unreachable party and its address, and says it kept trying
    assert "'charlie'" in out.stderr and f"{cluster.addresses['charlie']}:{PORT}" in out.stderr, out.stderr
    m = re.search(r"\((\d+) attempt", out.stderr)
    assert m and int(m.group(1)) >= 3, out.stderr  # retried with backoff, not one try
    assert 5.0 <= out.seconds <= 6 + 25, out.seconds
    records = cluster.wait_records(["trent", "alice", "bob"], sid, timeout=20)
    assert records["trent"]["error"]["code"] == "UNAVAILABLE"
    assert "charlie" in records["trent"]["error"]["message"]
    for p in ("alice", "bob"):                    # they had accepted the proposal
        rec = records[p]
        assert rec["state"] == "failed"
        assert _seconds_between(rec["started_at"], rec["finished_at"]) <= 6 + 3, rec
        err = rec["error"]
        # Both endings are clear.  The transport races them: trent retries Propose until the
        # session deadline and only then sends Abort (naming charlie), while alice and bob wait
        # for Begin until the same deadline (see the report for the proposed fix).
        if err["origin"] == "trent":
            assert "charlie" in err["message"], err
        else:
            assert err["origin"] == p and err["code"] == "FAILED_PRECONDITION", err
            assert "never began" in err["message"] and "'trent'" in err["message"], err
    assert not cluster.record_path("charlie", sid).exists()


def test_party_coming_up_during_retries_joins_the_session(cluster):
    assert cluster.stop("charlie") == 0
    result = {}

    def run():
        result["out"] = cluster.session("trent", "power-iteration", PI_ROLES,
                                        power_iteration_params(), session_id="late-joiner", timeout=45)

    t = threading.Thread(target=run)
    t0 = time.monotonic()
    t.start()
    time.sleep(4.0)
    assert t.is_alive()                           # still retrying charlie
    cluster.start("charlie")
    t.join(90)
    assert not t.is_alive()
    out = result["out"]
    assert out.returncode == 0, out.stderr
    assert out.seconds > 4.0 and time.monotonic() - t0 < 60
    check_power_iteration(cluster.wait_records(PI_PARTIES, "late-joiner", timeout=30),
                          cluster.expected["power-iteration"])


def test_party_restarted_between_sessions(cluster):
    others = {p: cluster.procs[p].pid for p in PI_PARTIES if p != "bob"}
    assert cluster.stop("bob") == 0
    cluster.start("bob")
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="after-restart")
    for p, pid in others.items():                 # nobody else was restarted
        assert cluster.procs[p].pid == pid and cluster.procs[p].poll() is None


def test_rotated_certificate_takes_effect_after_restart(cluster):
    import subprocess
    import sys

    from .harness import REPO

    crt = cluster.bundle("alice") / "certs" / "alice.crt"
    old = _cert_fingerprint(crt)
    ca_before = (cluster.bundle("bob") / "certs" / "ca.crt").read_bytes()
    r = subprocess.run([sys.executable, "-m", "smcdp", "deploy", "rotate", "--dir",
                        str(cluster.deploy_dir), "--party", "alice"],
                       capture_output=True, text=True, timeout=60, cwd=REPO)
    assert r.returncode == 0, r.stderr
    assert _cert_fingerprint(crt) != old
    assert (cluster.bundle("alice") / "certs" / "alice.key").stat().st_mode & 0o777 == 0o600
    assert (cluster.bundle("bob") / "certs" / "ca.crt").read_bytes() == ca_before
    assert cluster.stop("alice") == 0
    cluster.start("alice")
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="after-rotation")


def test_cable_cut_mid_session_ends_everywhere_within_the_deadline(cluster):
    if not all(any(k.startswith(f"{p}/") for k in _records_snapshot(cluster)) for p in PI_PARTIES):
        run_power_iteration(cluster, cluster.expected["power-iteration"])   # something to protect
    before = _records_snapshot(cluster)
    sid = "cable-cut"
    deadline = 20.0
    # a tolerance no fixed-point run reaches: the session keeps iterating until the cut
    params = power_iteration_params(tol=1e-300, max_iterations=100000)
    result = {}

    def run():
        result["out"] = cluster.session("trent", "power-iteration", PI_ROLES, params,
                                        session_id=sid, timeout=deadline)

    t = threading.Thread(target=run)
    t0 = time.monotonic()
    t.start()
    end = time.monotonic() + 30
    while not all(cluster.running_at(p, sid) for p in PI_PARTIES):
        assert time.monotonic() < end, "the session never started running everywhere"
        time.sleep(0.05)
    time.sleep(1.0)
    assert all(cluster.running_at(p, sid) for p in PI_PARTIES), "finished before the cut"
    cluster.link("bob", up=False)
    t_cut = time.monotonic()
    try:
        t.join(deadline + 60)
        assert not t.is_alive(), "the initiator's `smcdp session start` hangs"
        out = result["out"]
        assert out.returncode != 0
        records = cluster.wait_records(PI_PARTIES, sid, timeout=deadline + 30)
    finally:
        cluster.link("bob", up=True)
    limit = deadline + 15                         # deadline + abort notice + record write
    assert time.monotonic() - t0 <= limit + 30
    for p, rec in records.items():
        assert rec["state"] == "failed", (p, rec["state"])
        err = rec["error"]
        assert err["code"] in ("DEADLINE_EXCEEDED", "UNAVAILABLE", "ABORTED"), (p, err)
        assert err["message"], p
        assert rec["seconds"] is not None and rec["seconds"] <= limit, (p, rec["seconds"])
    # Who says what.  A silent cable cut is noticed only at the session deadline (the
    # transport has no peer-liveness check inside a session; see the report).  Trent names
    # bob: it could not deliver to bob (address included) or got nothing from bob, depending
    # on where in the round the cut fell; bob, cut off, reports that trent went silent.  Alice and charlie either get trent's abort naming bob or -- their own recv
    # deadline is the same instant, so the transport races the two -- report that trent
    # went silent.
    bob_addr = f"{cluster.addresses['bob']}:{PORT}"
    bob_named = r"\b(bob|party2)\b"               # a receive timeout names the role (party2)
    err = records["trent"]["error"]
    assert err["origin"] == "trent", err
    if err["code"] == "UNAVAILABLE":              # it was sending to bob: party and address
        assert "'bob'" in err["message"] and bob_addr in err["message"], err
    else:                                         # it was waiting for bob's message
        assert err["code"] == "DEADLINE_EXCEEDED" and re.search("from " + bob_named, err["message"]), err
    assert re.search(bob_named, out.stderr), out.stderr
    for p in ("alice", "charlie"):
        err = records[p]["error"]
        if err["origin"] == "trent":
            assert re.search(bob_named, err["message"]), (p, err)
        else:
            assert err["origin"] == p and err["code"] == "DEADLINE_EXCEEDED", (p, err)
            assert "from trent" in err["message"], (p, err)
    err = records["bob"]["error"]
    assert err["origin"] == "bob" and "trent" in err["message"], err
    # no process died or hangs
    for p in cluster.parties:
        assert cluster.procs[p].poll() is None, (p, cluster.log(p))
    # nothing published earlier was lost or changed, and every record parses
    after = _records_snapshot(cluster)
    for name, data in before.items():
        assert after.get(name) == data, f"{name} changed or vanished"
    for name, data in after.items():
        rec = json.loads(data)
        assert rec["state"] in ("succeeded", "failed"), name
    assert time.monotonic() - t_cut < deadline + 45
    # with the cable back, the same processes run the next session
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="after-cut")


def test_party_crash_mid_session_then_restart(cluster):
    """SIGKILL alice mid-session and restart her at once: every party ends the session with a
    clear error (fast if trent's next step is a delivery to alice, at the deadline if it is
    waiting for alice's message -- the transport does not notice the restart then; see the
    report), nothing published is lost, and the next session runs with the others untouched."""
    import signal

    if not any(k.startswith("alice/") for k in _records_snapshot(cluster)):
        run_power_iteration(cluster, cluster.expected["power-iteration"])   # something to protect
    before = _records_snapshot(cluster)
    others = {p: cluster.procs[p].pid for p in PI_PARTIES if p != "alice"}
    sid = "crash"
    deadline = 25.0
    params = power_iteration_params(tol=1e-300, max_iterations=100000)
    result = {}

    def run():
        result["out"] = cluster.session("trent", "power-iteration", PI_ROLES, params,
                                        session_id=sid, timeout=deadline)

    t = threading.Thread(target=run)
    t.start()
    end = time.monotonic() + 30
    while not all(cluster.running_at(p, sid) for p in PI_PARTIES):
        assert time.monotonic() < end, "the session never started running everywhere"
        time.sleep(0.05)
    time.sleep(0.5)
    t_kill = time.monotonic()
    assert cluster.stop("alice", sig=signal.SIGKILL) == -signal.SIGKILL
    cluster.start("alice")
    t.join(deadline + 60)
    assert not t.is_alive(), "the initiator's `smcdp session start` hangs"
    out = result["out"]
    assert out.returncode != 0
    records = cluster.wait_records(["trent", "bob", "charlie"], sid, timeout=deadline + 30)
    elapsed = time.monotonic() - t_kill
    for p, rec in records.items():
        assert rec["state"] == "failed", (p, rec)
    err = records["trent"]["error"]
    if err["code"] == "FAILED_PRECONDITION":
        # trent's next delivery reached the new alice, who refused it: no waiting for the deadline
        assert elapsed < deadline - 5, elapsed
        assert "'alice'" in out.stderr, out.stderr
        for p, rec in records.items():
            e = rec["error"]
            assert e["code"] == "FAILED_PRECONDITION", (p, e)
            assert "'alice'" in e["message"] and "restarted" in e["message"], (p, e)
    else:
        # trent was waiting for alice's (role party1's) message: it fails at the deadline
        assert err["code"] == "DEADLINE_EXCEEDED", err
        assert re.search(r"from (party1|alice)\b", err["message"]), err
        assert elapsed <= deadline + 15, elapsed
        for p in ("bob", "charlie"):
            e = records[p]["error"]
            assert (e["origin"] == "trent" and re.search(r"party1|alice", e["message"])) or \
                (e["origin"] == p and e["code"] == "DEADLINE_EXCEEDED" and "from trent" in e["message"]), (p, e)
    assert not cluster.record_path("alice", sid).exists()   # the killed process never finished it
    after = _records_snapshot(cluster)
    for name, data in before.items():
        assert after.get(name) == data, f"{name} changed or vanished"
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="after-crash")
    for p, pid in others.items():
        assert cluster.procs[p].pid == pid and cluster.procs[p].poll() is None


def test_every_party_stops_cleanly(cluster):
    hashes = {k: hashlib.sha256(v).hexdigest() for k, v in _records_snapshot(cluster).items()}
    for p in cluster.parties:
        assert cluster.stop(p, timeout=30) == 0, cluster.log(p)
        assert f"party {p} stopped" in cluster.log(p)
    assert {k: hashlib.sha256(v).hexdigest() for k, v in _records_snapshot(cluster).items()} == hashes
