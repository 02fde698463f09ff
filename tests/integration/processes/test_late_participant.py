"""A participant that confirmed holding its output and then failed on its own, after the others succeeded,
is brought to the same end by ``smcdp session resume`` at the succeeded initiator (docs/fault-tolerance.md,
"How a session ends"), between real party processes.

The split is made on purpose, at exact points: bob's link to alice carries nothing from the start (in power
iteration bob sends alice nothing but his final confirmation, and the session is far shorter than the
grace), so alice never hears bob confirm; alice stops herself once trent and bob acknowledged her own
confirmation (a failpoint at the ending's "confirmations delivered" step); trent and bob, holding every
confirmation, succeed; then alice's links to them carry nothing either and she wakes: she cannot learn that
they succeeded, and after the grace she fails, resumably, naming herself.  Trent and bob are restarted
(what they received is no longer in their memory).  Before, ``session resume`` at
trent was refused with ALREADY_EXISTS and alice stayed failed while trent and bob had succeeded.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from smcdp.net.server import namespaced, new_session_id
from smcdp.protocols.power_iteration import plaintext_reference
from smcdp.runtime import client, failpoints
from smcdp.runtime.ending import DELIVERED_STEP
from tests.support.link_proxy import ProxiedCluster
from tests.support.pi_data import PI_PARAMS, PI_ROLES, pi_parties

GRACE = 20.0


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("late")
    parties, blocks = pi_parties(tmp)
    with ProxiedCluster(
        parties,
        links=[("bob", "alice"), ("alice", "trent"), ("alice", "bob")],
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        open_policy=True,
    ) as c:
        yield c, plaintext_reference(blocks)


@pytest.fixture(autouse=True)
def _links_restored(split):
    """Every link carries everything again after each test, whatever it asserted: the module's tests share
    one cluster, and a test that failed with a link still cut would make the next one fail for that reason."""
    yield
    cluster, _ = split
    for proxy in cluster.proxies.values():
        for direction in ("up", "down"):
            proxy.set_fault(direction, None)


def _wait(what: str, cond, seconds: float = 120.0) -> None:
    end = time.monotonic() + seconds
    while not cond():
        assert time.monotonic() < end, f"never: {what}"
        time.sleep(0.05)


def _state(cluster: ProxiedCluster, party: str, sid: str) -> str:
    try:
        return str(client.get_result(cluster.configs[party], sid, timeout=5).get("state"))
    except Exception:  # noqa: BLE001 - not there yet
        return "unknown"


def _split_session(cluster: ProxiedCluster, step: str):
    """A session started from trent (on a thread) with bob's link to alice carrying nothing, and alice armed to
    stop herself at ``step`` of her session's ending: (its namespaced id, alice's failpoints, the thread, the
    dict its records land in under "recs")."""
    sid = new_session_id("power-iteration")
    full = namespaced("trent", sid)
    alice_fp = cluster.failpoint_dir("alice")
    failpoints.arm_kill(alice_fp, sid, 0, action="stop", step=step)
    cluster.proxies[("bob", "alice")].set_fault("up", "drop")
    out: dict = {}
    th = threading.Thread(
        target=lambda: out.update(
            recs=cluster.run("power-iteration", PI_ROLES, PI_PARAMS, initiator="trent", session_id=sid, timeout=300)
        ),
        daemon=True,
    )
    th.start()
    return full, alice_fp, th, out


def test_a_participant_that_failed_after_the_others_succeeded_is_brought_to_the_same_end(split):
    cluster, (u_ref, x_ref) = split
    full, alice_fp, th, out = _split_session(cluster, DELIVERED_STEP)
    try:
        _wait("alice stopped herself at her confirmations' acknowledgement", lambda: failpoints.stopped(alice_fp))
        _wait("trent and bob succeeded", lambda: {_state(cluster, p, full) for p in ("trent", "bob")} == {"succeeded"})
        for link in (("alice", "trent"), ("alice", "bob")):
            cluster.proxies[link].set_fault("up", "drop")
    finally:
        failpoints.disarm(alice_fp)
        cluster.cont("alice")
    th.join(GRACE + 120)
    recs = out["recs"]
    assert recs["trent"]["state"] == recs["bob"]["state"] == "succeeded", recs
    alice = recs["alice"]
    assert alice["state"] == "failed" and alice["resumable"] is True, alice
    # bob's confirmation never reached her; trent's may have arrived before she stopped, or not (under load
    # her own confirmations can be acknowledged first): either way she names herself and cannot succeed alone
    assert alice["error"]["origin"] == "alice" and "bob" in alice["unconfirmed"], alice
    assert set(alice["unconfirmed"]) <= {"bob", "trent"}, alice
    for link in cluster.proxies:
        cluster.proxies[link].set_fault("up", None)
    # the finished parties restarted meanwhile: what they received lives only in their records now, and a
    # message of the session sent to them again would be refused ("already ended") -- alice sends them none
    for p in ("trent", "bob"):
        cluster.kill(p, restart=True)
        cluster.restart(p)
    # the operator resumes at trent, whose session succeeded: alice replays to the same end
    rec = client.resume_session(cluster.configs["trent"], full, timeout=300)
    assert rec["state"] == "succeeded" and rec.get("brought_to_end") == {"alice": "succeeded"}, rec
    alice = cluster._record("alice", full, time.monotonic() + 90)
    assert alice["state"] == "succeeded" and alice["unconfirmed"] == [], alice
    assert abs(np.dot(alice["result"]["u"], u_ref)) >= 0.9999
    assert abs(np.dot(recs["bob"]["result"]["u"], u_ref)) >= 0.9999
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999


def test_a_late_participant_whose_confirmation_was_never_acknowledged_is_brought_to_the_same_end(split):
    """The same split, made by a partition that cuts the acknowledgements of alice's confirmation: trent and
    bob received it (and succeeded), but alice's journal never marked it delivered.  Her resumed replay must
    not send it again to them (restarted, they refuse it: "already ended"), acknowledged or not."""
    cluster, (u_ref, _x_ref) = split
    full, alice_fp, th, out = _split_session(cluster, "confirming outputs")
    try:
        _wait("alice stopped herself before sending her confirmations", lambda: failpoints.stopped(alice_fp))
        # from now on nothing trent's and bob's servers answer alice arrives: her confirmation reaches them,
        # its acknowledgement does not (nor do the answers to her heartbeats)
        for link in (("alice", "trent"), ("alice", "bob")):
            cluster.proxies[link].set_fault("down", "drop")
    finally:
        failpoints.disarm(alice_fp)
        cluster.cont("alice")
    _wait("trent and bob succeeded", lambda: {_state(cluster, p, full) for p in ("trent", "bob")} == {"succeeded"})
    th.join(GRACE + 120)
    recs = out["recs"]
    assert recs["trent"]["state"] == recs["bob"]["state"] == "succeeded", recs
    alice = recs["alice"]
    assert alice["state"] == "failed" and alice["resumable"] is True, alice
    assert cluster.proxies[("alice", "trent")].faulted("down") > 0
    for link in cluster.proxies:
        for direction in ("up", "down"):
            cluster.proxies[link].set_fault(direction, None)
    for p in ("trent", "bob"):
        cluster.kill(p, restart=True)
        cluster.restart(p)
    rec = client.resume_session(cluster.configs["trent"], full, timeout=300)
    assert rec["state"] == "succeeded" and rec.get("brought_to_end") == {"alice": "succeeded"}, rec
    late = cluster._record("alice", full, time.monotonic() + 90)
    assert late["state"] == "succeeded", late
    assert abs(np.dot(late["result"]["u"], u_ref)) >= 0.9999
    # her replay sent nothing: every message she had sent (those acknowledged before, and her two
    # confirmations, never acknowledged) went to a participant that had finished
    assert late["stats"]["messages_sent"] == 0, late["stats"]
    assert late["stats"]["replayed_sends"] == alice["stats"]["messages_sent"] + 2, (late["stats"], alice["stats"])
