"""Parties on separate network-namespace "hosts", started from `smcdp deploy init` bundles.

Runs as root (CI runs `make test` as root; `make multihost-test` runs only this
directory) and skips with the reason elsewhere.  The tests share one
deployment and run in file order: protocols first, then failures (a party
down at session start, a restart between sessions, certificate rotation, a
link dropped for less than the grace, a cable cut past it and `session
resume`, a party killed and restarted mid-session), then a clean shutdown.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from datetime import UTC, datetime

import numpy as np
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
    sid = "trent.down-at-start"
    # the deadline leaves room for the other proposals (alice's and bob's, made with charlie's since issue
    # 26: one at a time in name order they took 3.3 s of a 6 s deadline on a loaded CI host, before charlie
    # was ever tried)
    timeout = 12
    out = cluster.session(
        "trent", "power-iteration", PI_ROLES, power_iteration_params(), session_id=sid, timeout=timeout
    )
    assert out.returncode != 0
    # the error names the unreachable party and its address, and says it kept trying
    assert "'charlie'" in out.stderr and f"{cluster.addresses['charlie']}:{PORT}" in out.stderr, out.stderr
    m = re.search(r"\((\d+) attempt", out.stderr)
    assert m and int(m.group(1)) >= 3, out.stderr  # retried with backoff, not one try
    assert timeout - 1 <= out.seconds <= timeout + 25, out.seconds
    records = cluster.wait_records(["trent", "alice", "bob"], sid, timeout=20)
    assert records["trent"]["error"]["code"] == "UNAVAILABLE"
    assert "charlie" in records["trent"]["error"]["message"]
    for p in ("alice", "bob"):  # they had accepted the proposal
        rec = records[p]
        assert rec["state"] == "failed"
        assert _seconds_between(rec["started_at"], rec["finished_at"]) <= timeout + 3, rec
        err = rec["error"]
        # Both endings are clear.  The transport races them: trent retries Propose until the
        # session deadline and only then sends Abort, whose culprit is the party it could not reach
        # (issue 26: the origin is whoever failed, not the one that reports it), while alice and bob
        # wait for Begin until the same deadline -- and the one whose wait ends first aborts to the other,
        # which may hear that before its own wait ends (its record then names the teller, who reported it).
        if err["origin"] == "charlie":
            assert err["code"] == "UNAVAILABLE" and "charlie" in err["message"], err
        else:
            assert err["origin"] in ("alice", "bob") and err["code"] == "FAILED_PRECONDITION", err
            assert err["origin"] == p or err.get("reported_by") == err["origin"], err
            assert "never began" in err["message"] and "'trent'" in err["message"], err
    assert not cluster.record_path("charlie", sid).exists()


def test_party_coming_up_during_retries_joins_the_session(cluster):
    assert cluster.stop("charlie") == 0
    result = {}

    def run():
        result["out"] = cluster.session(
            "trent", "power-iteration", PI_ROLES, power_iteration_params(), session_id="trent.late-joiner", timeout=45
        )

    t = threading.Thread(target=run)
    t0 = time.monotonic()
    t.start()
    time.sleep(4.0)
    assert t.is_alive()  # still retrying charlie
    cluster.start("charlie")
    t.join(90)
    assert not t.is_alive()
    out = result["out"]
    assert out.returncode == 0, out.stderr
    assert out.seconds > 4.0 and time.monotonic() - t0 < 60
    check_power_iteration(
        cluster.wait_records(PI_PARTIES, "trent.late-joiner", timeout=30), cluster.expected["power-iteration"]
    )


def test_party_restarted_between_sessions(cluster):
    others = {p: cluster.procs[p].pid for p in PI_PARTIES if p != "bob"}
    assert cluster.stop("bob") == 0
    cluster.start("bob")
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="trent.after-restart")
    for p, pid in others.items():  # nobody else was restarted
        assert cluster.procs[p].pid == pid and cluster.procs[p].poll() is None


def test_rotated_certificate_takes_effect_after_restart(cluster):
    import subprocess
    import sys

    from .harness import REPO

    crt = cluster.bundle("alice") / "certs" / "alice.crt"
    old = _cert_fingerprint(crt)
    ca_before = (cluster.bundle("bob") / "certs" / "ca.crt").read_bytes()
    r = subprocess.run(
        [sys.executable, "-m", "smcdp", "deploy", "rotate", "--dir", str(cluster.deploy_dir), "--party", "alice"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    assert _cert_fingerprint(crt) != old
    assert (cluster.bundle("alice") / "certs" / "alice.key").stat().st_mode & 0o777 == 0o600
    assert (cluster.bundle("bob") / "certs" / "ca.crt").read_bytes() == ca_before
    assert cluster.stop("alice") == 0
    cluster.start("alice")
    run_power_iteration(cluster, cluster.expected["power-iteration"], session_id="trent.after-rotation")


def _long_session(cluster, sid: str, rounds: int, timeout: float):
    """Start a power-iteration session of exactly ``rounds`` rounds in the background."""
    params = power_iteration_params(tol=1e-300, max_iterations=rounds)  # no fixed-point run converges
    result = {}

    def run():
        result["out"] = cluster.session("trent", "power-iteration", PI_ROLES, params, session_id=sid, timeout=timeout)

    t = threading.Thread(target=run)
    t.start()
    end = time.monotonic() + 90  # a bound for a loaded host (the session starts in seconds)
    while not all(cluster.running_at(p, sid) for p in PI_PARTIES):
        assert time.monotonic() < end, "the session never started running everywhere"
        time.sleep(0.05)
    return t, result


def _check_eigenvectors(records, blocks) -> None:
    from smcdp.protocols.power_iteration import plaintext_reference

    u_ref, x_ref = plaintext_reference(blocks)
    for p, rec in records.items():
        assert rec["state"] == "succeeded", (p, rec.get("error"))
    assert abs(np.dot(records["trent"]["result"]["x"], x_ref)) >= 0.9999
    for p in ("alice", "bob", "charlie"):
        assert abs(np.dot(records[p]["result"]["u"], u_ref)) >= 0.9999


def test_a_dropped_link_heals_without_losing_the_session(cluster):
    """bob's cable unplugged for 10 s (shorter than the 15 s grace) mid-session: the session
    carries on once it is back, at every party, with the right result."""
    sid = "trent.link-drop"
    # 400 rounds: about 8 s of work on a quiet host (120 rounds, 2.4 s, finished in a loaded CI run before
    # the `ip link` of the cut took effect, and every party's record then read "ended within the grace")
    t, result = _long_session(cluster, sid, rounds=400, timeout=300)
    time.sleep(1.0)
    assert all(cluster.running_at(p, sid) for p in PI_PARTIES), "finished before the cut"
    cluster.link("bob", up=False)
    try:
        time.sleep(10.0)
        ended = {p: _outcome(cluster, p, sid) for p in PI_PARTIES if not cluster.running_at(p, sid)}
        assert not ended, f"a party ended within the grace: {ended}"
    finally:
        cluster.link("bob", up=True)
    back = datetime.now(UTC)
    t.join(300)
    assert not t.is_alive(), "the initiator's `smcdp session start` hangs"
    assert result["out"].returncode == 0, result["out"].stderr
    records = cluster.wait_records(PI_PARTIES, sid, timeout=30)
    # the cut fell inside the session: nobody could finish while bob was cut off
    for p, rec in records.items():
        assert datetime.fromisoformat(rec["finished_at"]) > back, (p, rec["finished_at"], back)
    assert records["trent"]["result"]["rounds"] == 400
    _check_eigenvectors(records, cluster.expected["power-iteration"])


def _outcome(cluster, party: str, sid: str) -> object:
    """What ``party``'s record of ``sid`` says of its end (for an assertion's message)."""
    path = cluster.record_path(party, sid)
    if not path.exists():
        return "its role never started"
    rec = json.loads(path.read_text())
    return {"state": rec.get("state"), "finished_at": rec.get("finished_at"), "error": rec.get("error")}


def test_a_cut_longer_than_the_grace_fails_everywhere_naming_bob_then_resumes(cluster):
    """bob cut off past the grace: every party fails within seconds of the grace (not the
    deadline) with UNAVAILABLE naming bob -- bob too, who lost every peer at once -- and
    keeps its checkpoint; with the cable back, `smcdp session resume` completes it."""
    before = _records_snapshot(cluster)
    sid = "trent.cable-cut"
    grace = cluster.peer_grace_seconds
    t, result = _long_session(cluster, sid, rounds=400, timeout=300)
    time.sleep(1.0)
    cluster.link("bob", up=False)
    t_cut = time.monotonic()
    try:
        t.join(grace + 60)
        assert not t.is_alive(), "the initiator's `smcdp session start` hangs"
        out = result["out"]
        assert out.returncode != 0 and re.search(r"\bbob\b", out.stderr), out.stderr
        others = [p for p in PI_PARTIES if p != "bob"]
        records = cluster.wait_records(others, sid, timeout=30)
        assert time.monotonic() - t_cut < grace + 30
        for p, rec in records.items():
            assert rec["state"] == "failed", (p, rec["state"])
            assert rec["error"]["code"] == "UNAVAILABLE" and rec["error"]["origin"] == "bob", (p, rec["error"])
            assert rec["resumable"] is True, p
            assert rec["seconds"] < 300 - 30, (p, rec["seconds"])  # far from the deadline
        bob = cluster.wait_records(["bob"], sid, timeout=grace + 30)["bob"]
        assert bob["state"] == "failed" and bob["error"]["origin"] == "bob", bob["error"]
        assert "lost contact with every other participant" in bob["error"]["message"], bob["error"]
    finally:
        cluster.link("bob", up=True)
    for p in cluster.parties:
        assert cluster.procs[p].poll() is None, (p, cluster.log(p))
    # nothing published earlier was lost or changed
    after = _records_snapshot(cluster)
    for name, data in before.items():
        assert after.get(name) == data, f"{name} changed or vanished"
    # continue it: every participant replays from its checkpoint
    r = cluster.cli(
        "trent", "session", "resume", sid, "--config", str(cluster.config("trent")), "--timeout", "300", timeout=400
    )
    assert r.returncode == 0, r.stderr
    records = {}
    end = time.monotonic() + 60
    while len(records) < len(PI_PARTIES) and time.monotonic() < end:
        for p in PI_PARTIES:
            rec = json.loads(cluster.record_path(p, sid).read_text())
            if rec["state"] == "succeeded":
                records[p] = rec
        time.sleep(0.2)
    assert set(records) == set(PI_PARTIES)
    assert records["trent"]["result"]["rounds"] == 400 and records["trent"]["restarts"] == 1
    _check_eigenvectors(records, cluster.expected["power-iteration"])


def test_party_crash_mid_session_then_restart(cluster):
    """SIGKILL alice mid-session and restart her from her bundle at once: she reopens the
    session from her checkpoint and replays her role, and the session ends correctly at
    every party, the other processes untouched."""
    import signal

    others = {p: cluster.procs[p].pid for p in PI_PARTIES if p != "alice"}
    sid = "trent.crash"
    t, result = _long_session(cluster, sid, rounds=300, timeout=240)  # about 6 s of work on a quiet host
    time.sleep(0.5)
    assert cluster.stop("alice", sig=signal.SIGKILL) == -signal.SIGKILL
    cluster.start("alice")
    t.join(240)
    assert not t.is_alive(), "the initiator's `smcdp session start` hangs"
    assert result["out"].returncode == 0, result["out"].stderr
    records = cluster.wait_records(PI_PARTIES, sid, timeout=30)
    assert records["alice"]["restarts"] == 1
    _check_eigenvectors(records, cluster.expected["power-iteration"])
    for p, pid in others.items():
        assert cluster.procs[p].pid == pid and cluster.procs[p].poll() is None


def test_every_party_stops_cleanly(cluster):
    hashes = {k: hashlib.sha256(v).hexdigest() for k, v in _records_snapshot(cluster).items()}
    for p in cluster.parties:
        assert cluster.stop(p, timeout=30) == 0, cluster.log(p)
        assert f"party {p} stopped" in cluster.log(p)
    assert {k: hashlib.sha256(v).hexdigest() for k, v in _records_snapshot(cluster).items()} == hashes
