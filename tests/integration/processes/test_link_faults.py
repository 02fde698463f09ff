"""Faults of one link between real party processes (docs/fault-tolerance.md, "A faulty link").

Alice reaches Trent, and Trent Alice, through a userspace proxy each (``bench/delay_proxy.py``,
:mod:`tests.support.link_proxy`); every other link is direct.  While a power iteration runs a proxy damages
or drops one direction of its link for a while, or both proxies drop everything, then they let it through
again.

* Bytes corrupted inside the TLS stream for a while (shorter than the grace), in what Trent's server sends
  back on Alice's connection (the acknowledgements of her messages, the answers to her heartbeats): her
  sends fail with UNKNOWN "TSI_DATA_CORRUPTED" and every new connection's handshake fails too.  Those are
  the transport's errors: retried, nobody blamed, and every party ends "succeeded" with the undisturbed
  (plaintext) result.  (Before such errors were retried, Alice's send failed at once, "refused by party
  'trent'", and the session failed everywhere blaming Trent.)
* A one-way black hole (what Alice sends to Trent vanishes), or the corruption above, longer than the grace:
  Alice still hears Trent (his heartbeats reach her) while her own sends to him get no answer.  Every
  party's record names the link alice→trent (origin alice, where it was seen), not a dead Trent, and is
  resumable; once the link carries again, ``smcdp session resume`` ends the session with the plaintext
  result.  (Before, Alice reported "party 'trent' has not answered" and every record named Trent.)
* Alice and Trent cut off from each other both ways: neither hears the other, but Bob hears both, and each
  asks Bob about the other (``HeartbeatRequest.about``).  Every record names a link between them, not a dead
  party; resume ends the session with the plaintext result.  (Before, each named the other dead.)
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from smcdp.net.server import namespaced, new_session_id
from smcdp.protocols.power_iteration import plaintext_reference
from smcdp.runtime import client
from tests.support.link_proxy import ProxiedCluster
from tests.support.pi_data import PI_PARAMS, PI_ROLES, pi_parties

GRACE = 15.0
ALICE_TRENT = ("alice", "trent")  # the link the one-way faults are on


@pytest.fixture(scope="module")
def linked(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("link")
    parties, blocks = pi_parties(tmp)
    with ProxiedCluster(
        parties,
        links=[("alice", "trent"), ("trent", "alice")],
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        open_policy=True,
    ) as c:
        yield c, plaintext_reference(blocks)


def _matches_plaintext(recs: dict[str, dict], reference) -> None:
    u_ref, x_ref = reference
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999
    for name in ("alice", "bob"):
        assert abs(np.dot(recs[name]["result"]["u"], u_ref)) >= 0.9999


def _run_in_background(cluster: ProxiedCluster, sid: str) -> tuple[threading.Thread, dict]:
    out: dict = {}
    th = threading.Thread(
        target=lambda: out.update(
            recs=cluster.run("power-iteration", PI_ROLES, PI_PARAMS, initiator="trent", session_id=sid, timeout=300)
        ),
        daemon=True,
    )
    th.start()
    return th, out


def _wait_round(cluster: ProxiedCluster, sid: str, at_least: int, th: threading.Thread) -> None:
    """Until trent's session reports round ≥ ``at_least`` (the session is under way)."""
    end = time.monotonic() + 120
    while True:
        try:
            rec = client.get_result(cluster.configs["trent"], sid, timeout=5)
        except Exception:  # noqa: BLE001 - not registered yet
            rec = {}
        if (rec.get("round") or 0) >= at_least:
            return
        assert th.is_alive() and time.monotonic() < end, f"trent never reached round {at_least}: {rec}"
        time.sleep(0.05)


def test_a_corrupted_tls_stream_is_retried_and_the_session_ends_the_same_everywhere(linked):
    cluster, reference = linked
    sid = new_session_id("power-iteration")
    th, out = _run_in_background(cluster, sid)
    _wait_round(cluster, namespaced("trent", sid), 3, th)
    cluster.proxies[ALICE_TRENT].set_fault("down", "corrupt")
    try:
        # alice's stream to trent breaks, and so does every new connection she opens, several times over
        # (corrupting what she sends instead mostly shows her UNAVAILABLE: trent's server drops the stream)
        end = time.monotonic() + 0.6 * GRACE  # well within the grace: nobody may give up
        while cluster.proxies[ALICE_TRENT].faulted("down") < 3:
            assert time.monotonic() < end, f"only {cluster.proxies[ALICE_TRENT].faulted('down')} chunks corrupted"
            time.sleep(0.05)
    finally:
        cluster.proxies[ALICE_TRENT].set_fault("down", None)
    th.join(300)
    recs = out["recs"]
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    assert all(r["unconfirmed"] == [] for r in recs.values())
    _matches_plaintext(recs, reference)


@pytest.mark.parametrize(("direction", "fault"), [("up", "drop"), ("down", "corrupt")])
def test_a_link_that_carries_nothing_past_the_grace_is_named_and_the_session_resumes(linked, direction, fault):
    """A one-way black hole (alice's messages and heartbeats to trent vanish), or a corrupted stream that
    lasts (trent's answers to alice are damaged): trent is alive and probes alice all along.  Every record
    names the link alice→trent, resumably; none says trent stopped answering."""
    cluster, reference = linked
    sid = new_session_id("power-iteration")
    th, out = _run_in_background(cluster, sid)
    full = namespaced("trent", sid)
    _wait_round(cluster, full, 3, th)
    cluster.proxies[ALICE_TRENT].set_fault(direction, fault)
    try:
        th.join(GRACE + 120)
        assert not th.is_alive(), "the session did not end"
    finally:
        cluster.proxies[ALICE_TRENT].set_fault(direction, None)
    recs = out["recs"]
    for p, r in recs.items():
        assert r["state"] == "failed" and r["resumable"] is True, (p, r)
        err = r["error"]
        assert err["code"] == "UNAVAILABLE" and err["origin"] == "alice", (p, err)
        assert err["link"] == "alice→trent" and "the link alice→trent" in err["message"], (p, err)
        assert "has not answered" not in err["message"], (p, err)  # what a dead peer's record says
    rec = client.resume_session(cluster.configs["trent"], full, timeout=300)
    assert rec["state"] == "succeeded", rec
    recs = {p: cluster._record(p, full, time.monotonic() + 90) for p in PI_ROLES.values()}
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    _matches_plaintext(recs, reference)


def test_a_link_cut_both_ways_is_named_as_the_link_by_what_a_third_party_hears(linked):
    cluster, reference = linked
    sid = new_session_id("power-iteration")
    th, out = _run_in_background(cluster, sid)
    full = namespaced("trent", sid)
    _wait_round(cluster, full, 3, th)
    cut = [(link, d) for link in (ALICE_TRENT, ("trent", "alice")) for d in ("up", "down")]
    for link, d in cut:
        cluster.proxies[link].set_fault(d, "drop")
    try:
        th.join(GRACE + 120)
        assert not th.is_alive(), "the session did not end"
    finally:
        for link, d in cut:
            cluster.proxies[link].set_fault(d, None)
    for p, r in out["recs"].items():
        assert r["state"] == "failed" and r["resumable"] is True, (p, r)
        err = r["error"]
        assert err["code"] == "UNAVAILABLE" and err["origin"] in ("alice", "trent"), (p, err)
        assert err["link"] in ("alice→trent", "trent→alice") and "was heard from by 'bob'" in err["message"], (p, err)
        assert "has not answered" not in err["message"], (p, err)
    rec = client.resume_session(cluster.configs["trent"], full, timeout=300)
    assert rec["state"] == "succeeded", rec
    recs = {p: cluster._record(p, full, time.monotonic() + 90) for p in PI_ROLES.values()}
    assert {r["state"] for r in recs.values()} == {"succeeded"}, {p: r.get("error") for p, r in recs.items()}
    _matches_plaintext(recs, reference)
