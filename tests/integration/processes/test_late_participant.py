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

The same split in dp-aggregate (alice, a data party, cut off after her confirmation was acknowledged; dave
sends her nothing but his confirmation; the resume at charlie gives her the undisturbed share) and in keyword
(two parties: bob cut off after alice acknowledged his confirmation, hers never reaching him; the resume at
alice).  The helpers that make a split are :mod:`tests.support.late`.
"""

from __future__ import annotations

import numpy as np
import pytest

from smcdp.protocols.power_iteration import plaintext_reference
from smcdp.runtime.ending import CONFIRMING_STEP, DELIVERED_STEP
from tests.support.dpa_data import dpa_parties
from tests.support.kw_data import KW_PARAMS, KW_ROLES, kw_parties
from tests.support.late import Split, cut_off, restore_links, succeeded, wait_for
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
def _links_restored(request):
    """Every link carries everything again after each test, whatever it asserted: a module's tests share one
    cluster per protocol, and a test that failed with a link still cut would make the next one fail for that."""
    yield
    for name in ("split", "dpa_split", "kw_split"):
        if name in request.fixturenames:
            restore_links(request.getfixturevalue(name)[0])


def _pi_split(cluster: ProxiedCluster, step: str) -> Split:
    """A session started from trent with bob's link to alice carrying nothing (in power iteration bob sends
    alice nothing but his confirmation), and alice armed to stop herself at ``step`` of her session's ending."""
    return Split(
        cluster, "power-iteration", PI_ROLES, PI_PARAMS, "trent", stops={"alice": step}, silent=[("bob", "alice")]
    )


def test_a_participant_that_failed_after_the_others_succeeded_is_brought_to_the_same_end(split):
    cluster, (u_ref, x_ref) = split
    s = _pi_split(cluster, DELIVERED_STEP)
    try:
        s.stopped("alice")  # her confirmations were acknowledged
        wait_for("trent and bob succeeded", succeeded(cluster, ("trent", "bob"), s.sid))
        cut_off(cluster, "alice")
    finally:
        s.finish()
    recs = s.records(GRACE + 120)
    assert recs["trent"]["state"] == recs["bob"]["state"] == "succeeded", recs
    alice = recs["alice"]
    assert alice["state"] == "failed" and alice["resumable"] is True, alice
    # bob's confirmation never reached her; trent's may have arrived before she stopped, or not (under load
    # her own confirmations can be acknowledged first): either way she names herself and cannot succeed alone
    assert alice["error"]["origin"] == "alice" and "bob" in alice["unconfirmed"], alice
    assert set(alice["unconfirmed"]) <= {"bob", "trent"}, alice
    restore_links(cluster)
    # the finished parties restarted meanwhile: what they received lives only in their records now, and a
    # message of the session sent to them again would be refused ("already ended") -- alice sends them none
    for p in ("trent", "bob"):
        cluster.kill(p, restart=True)
        cluster.restart(p)
    # the operator resumes at trent, whose session succeeded: alice replays to the same end
    alice = s.resume_late("trent", "alice")
    assert abs(np.dot(alice["result"]["u"], u_ref)) >= 0.9999
    assert abs(np.dot(recs["bob"]["result"]["u"], u_ref)) >= 0.9999
    assert abs(np.dot(recs["trent"]["result"]["x"], x_ref)) >= 0.9999


def test_a_late_participant_whose_confirmation_was_never_acknowledged_is_brought_to_the_same_end(split):
    """The same split, made by a partition that cuts the acknowledgements of alice's confirmation: trent and
    bob received it (and succeeded), but alice's journal never marked it delivered.  Her resumed replay must
    not send it again to them (restarted, they refuse it: "already ended"), acknowledged or not."""
    cluster, (u_ref, _x_ref) = split
    s = _pi_split(cluster, CONFIRMING_STEP)
    try:
        s.stopped("alice")  # before sending her confirmations
        # from now on nothing trent's and bob's servers answer alice arrives: her confirmation reaches them,
        # its acknowledgement does not (nor do the answers to her heartbeats)
        for link in (("alice", "trent"), ("alice", "bob")):
            cluster.proxies[link].set_fault("down", "drop")
    finally:
        s.finish()
    wait_for("trent and bob succeeded", succeeded(cluster, ("trent", "bob"), s.sid))
    recs = s.records(GRACE + 120)
    assert recs["trent"]["state"] == recs["bob"]["state"] == "succeeded", recs
    alice = recs["alice"]
    assert alice["state"] == "failed" and alice["resumable"] is True, alice
    assert cluster.proxies[("alice", "trent")].faulted("down") > 0
    restore_links(cluster)
    for p in ("trent", "bob"):
        cluster.kill(p, restart=True)
        cluster.restart(p)
    late = s.resume_late("trent", "alice")
    assert abs(np.dot(late["result"]["u"], u_ref)) >= 0.9999
    # her replay sent nothing: every message she had sent (those acknowledged before, and her two
    # confirmations, never acknowledged) went to a participant that had finished
    assert late["stats"]["messages_sent"] == 0, late["stats"]
    assert late["stats"]["replayed_sends"] == alice["stats"]["messages_sent"] + 2, (late["stats"], alice["stats"])


# ----------------------------------------------------------------- dp aggregation
DPA_ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}
DPA_PARAMS = {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.05, "key_bits": 768, "dgk_bits": 512, "dgk_t": 64}
SEED = 5


@pytest.fixture(scope="module")
def dpa_split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("late_dpa")
    parties = dpa_parties(tmp)
    del parties["carol"]
    with ProxiedCluster(
        parties,
        # dave (who receives the shares) sends alice nothing but his confirmation; every link from alice, to
        # cut her off later
        links=[("dave", "alice"), ("alice", "charlie"), ("alice", "bob"), ("alice", "dave")],
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        open_policy=True,
        allow_seeded=True,
    ) as c:
        base = c.run("dp-aggregate", DPA_ROLES, DPA_PARAMS, initiator="charlie", seed=SEED)
        assert {r["state"] for r in base.values()} == {"succeeded"}, base
        yield c, {"share": base["alice"]["result"]["share"], "weights": base["dave"]["result"]["weights"]}


def test_dp_aggregate_a_data_party_failed_after_the_others_succeeded_is_brought_to_the_same_end(dpa_split):
    """Alice published her share to dave and confirmed, then was cut off before she heard dave's confirmation:
    charlie, dave and bob succeed, alice fails.  A resume at charlie ends her session with the share of the
    undisturbed session."""
    cluster, base = dpa_split
    s = Split(
        cluster,
        "dp-aggregate",
        DPA_ROLES,
        DPA_PARAMS,
        "charlie",
        stops={"alice": DELIVERED_STEP},
        silent=[("dave", "alice")],
        seed=SEED,
    )
    others = ("charlie", "dave", "bob")
    try:
        s.stopped("alice")  # her confirmations were acknowledged
        wait_for("charlie, dave and bob succeeded", succeeded(cluster, others, s.sid))
        cut_off(cluster, "alice")
    finally:
        s.finish()
    recs = s.records(GRACE + 120)
    assert all(recs[p]["state"] == "succeeded" for p in others), recs
    assert recs["dave"]["result"]["weights"] == base["weights"]
    alice = recs["alice"]
    assert alice["state"] == "failed" and alice["resumable"] is True, alice
    assert "dave" in alice["unconfirmed"], alice
    restore_links(cluster)
    alice = s.resume_late("charlie", "alice")
    assert alice["result"]["share"] == base["share"]


# ----------------------------------------------------------------- keyword
@pytest.fixture(scope="module")
def kw_split(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("late_kw")
    with ProxiedCluster(
        kw_parties(tmp),
        links=[("alice", "bob"), ("bob", "alice")],
        allow_insecure_keys=True,
        workdir=tmp / "run",
        peer_grace_seconds=GRACE,
        open_policy=True,
    ) as c:
        yield c, None


def test_keyword_bob_failed_after_alice_succeeded_is_brought_to_the_same_end(kw_split):
    """Two parties, so no link carries a confirmation alone: alice stops before her confirmation leaves, her
    link to bob is cut, she goes on; bob confirms (alice acknowledges it) and stops; alice, holding his
    confirmation, succeeds; bob's link to alice is cut too and he wakes: he never hears alice confirm, and
    fails.  A resume at alice, the initiator, brings him to "succeeded"."""
    cluster, _ = kw_split
    s = Split(
        cluster,
        "keyword",
        KW_ROLES,
        KW_PARAMS,
        "alice",
        stops={"alice": CONFIRMING_STEP, "bob": DELIVERED_STEP},
        silent=[],
    )
    try:
        s.stopped("alice")
        cluster.proxies[("alice", "bob")].set_fault("up", "drop")  # her confirmation (and heartbeats) to bob
        s.wake("alice")
        s.stopped("bob")  # his confirmation reached alice
        wait_for("alice succeeded", succeeded(cluster, ("alice",), s.sid))
        cut_off(cluster, "bob")
    finally:
        s.finish()
    recs = s.records(GRACE + 120)
    assert recs["alice"]["state"] == "succeeded", recs
    bob = recs["bob"]
    assert bob["state"] == "failed" and bob["resumable"] is True and bob["unconfirmed"] == ["alice"], bob
    restore_links(cluster)
    bob = s.resume_late("alice", "bob")
    assert bob["result"]["n_models"] == 3
