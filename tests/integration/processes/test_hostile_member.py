"""Issue 24, the transport half, against real party processes: no member can freeze a party (per-peer call
quotas with the operator's reserve, idle message calls closed), proposals in flight count, session ids
cannot be squatted and tell a non-participant nothing, every protocol's byte envelope holds, and bad
numbers are INVALID_ARGUMENT."""

from __future__ import annotations

import dataclasses
import re
import time

import grpc
import pytest

from smcdp.net.config import Timeouts
from smcdp.net.limits import Limits
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.v1 import transport_pb2 as tpb
from tests.support.boundary import MAILBOX, StreamFlood, call_deliver, call_stream, call_unary
from tests.support.deployment import make_deployment, raw_channel

C = grpc.StatusCode


@pytest.fixture
def parties(tmp_path, processes):
    """Party processes of a deployment alice, bob, charlie, dave (alice is the hostile member: she has a
    valid certificate but runs no process; the tests speak for her)."""

    def start(names=("bob", "charlie", "dave"), limits: Limits | None = None, grace: float = 30.0, **deployment):
        cfgs = make_deployment(
            tmp_path,
            ["alice", "bob", "charlie", "dave"],
            limits=limits,
            timeouts=Timeouts(connect_seconds=3, session_seconds=60, rpc_seconds=30, peer_grace_seconds=grace),
            **deployment,
        )
        procs = {n: processes(n, cfgs[n], use_launcher=False) for n in names}
        for n in names:
            client.wait_healthy(cfgs[n], timeout=60)
        return cfgs, procs

    return start


def _limits(**kw) -> Limits:
    """Limits with ``kw`` -- those that exist: the tests also run against main's code, to show they fail there."""
    known = {f.name for f in dataclasses.fields(Limits)}
    return Limits(**{k: v for k, v in kw.items() if k in known})


def _address(cfgs, party):
    return load_config(cfgs[party]).address_of(party)


def test_a_stream_flood_leaves_other_sessions_the_operator_and_health_alone(tmp_path, parties):
    """The issue's stream flood: ~520 idle Mailbox.Stream calls from alice, kept up (a closed call is opened
    again), with no session at all.  Bob admits limits.idle_calls_per_peer of them at a time, refuses the
    rest at once (RESOURCE_EXHAUSTED), and ends the admitted ones after limits.call_idle_seconds
    (FAILED_PRECONDITION).  Meanwhile charlie runs a session with bob in which bob's role holds its loop past
    the peer grace (so charlie's heartbeats must get through), bob's operator starts a session and reads its
    status, and bob's health check answers SERVING to its operator and to charlie.  On main the flood took
    every call slot (max_concurrent_rpcs): all of these were refused with RESOURCE_EXHAUSTED.

    bob's role blocks without computing (the echo plug-in's block_seconds): the subject is bob's call slots,
    and a GIL-holding spin only burnt a core for 13 s (test_transport checks a party answering while a role
    computes)."""
    limits = _limits(call_idle_seconds=4.0)
    # a 10-s grace: bob must answer charlie's heartbeats through the flood, and at 5 s a host at load ~19
    # (the suite beside other work on 2 cores) starved it past the grace; the session computes past it
    grace = 10.0
    cfgs, _ = parties(limits=limits, grace=grace)
    flood = StreamFlood(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob", count=520, reopen_delay=3.0).start()
    try:
        assert client.check_health(cfgs["bob"]) == "SERVING"  # bob's operator
        assert client.check_health(cfgs["charlie"], peer="bob") == "SERVING"  # another member
        t0 = time.monotonic()
        rec = client.start_session(
            cfgs["charlie"],
            "net-echo",
            {"a": "charlie", "b": "bob"},
            {"n": 3, "block_seconds": grace + 3.0},
            timeout=60,
        )
        assert rec["state"] == "succeeded", rec.get("error")
        assert rec["result"]["y"] == [1.0, 3.0, 5.0]
        assert time.monotonic() - t0 > limits.call_idle_seconds  # the flood was renewed meanwhile
        own = client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "dave"}, {"n": 2}, timeout=30)
        assert own["state"] == "succeeded", own.get("error")
        assert client.get_status(cfgs["bob"], own["session_id"])["state"] == "succeeded"
        # held open by bob: the calls open for 2 s or more (refusals are answered at once; the calls
        # the flood has just reopened and bob has not yet refused are in flight, not held)
        assert flood.held_steadily(2.0) <= limits.idle_calls_per_peer, (flood.held(2.0), flood.open_now())
    finally:
        flood.stop()
    assert flood.codes.get("RESOURCE_EXHAUSTED", 0) >= 520 - limits.idle_calls_per_peer, flood.codes
    assert "limits.idle_calls_per_peer" in flood.details["RESOURCE_EXHAUSTED"]
    # the admitted idle calls were ended by bob, after call_idle_seconds and not much later
    closed = flood.lifetimes.get("FAILED_PRECONDITION", [])
    assert closed and "limits.call_idle_seconds" in flood.details["FAILED_PRECONDITION"], flood.codes
    assert all(limits.call_idle_seconds - 0.5 < t < limits.call_idle_seconds + 10 for t in closed), closed
    assert set(flood.codes) <= {"RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "CANCELLED"}, flood.codes


@pytest.mark.parametrize("members", [4, 8])
def test_members_holding_health_watch_streams_switch_nobody_off(tmp_path, processes, members):
    """Health.Watch streams never end by themselves: four members holding 128 each filled bob's
    max_concurrent_rpcs (512), and bob then refused every peer, its own operator's session and other
    parties' health checks.  Now each member holds at most limits.watch_calls_per_peer of them (the rest
    RESOURCE_EXHAUSTED at once, naming the rule), and with 4 or 8 such members a session between charlie
    and bob -- in which bob's role holds its loop past the peer grace, so charlie's heartbeats must get through
    -- bob's own operator's session, and health checks from bob's operator and from charlie all succeed.
    (The role blocks without computing, as in the stream flood test: the subject is bob's call slots.)

    The call quotas are scaled down by 4 (the members together still attempt more than max_concurrent_rpcs,
    as in the attack, and fill it on the code before) so that the flood's refusals do not take the CPU a
    loaded test host needs for the sessions themselves."""
    hostile = [f"m{i}" for i in range(1, members + 1)]
    limits = _limits(max_concurrent_rpcs=128, calls_per_peer=32, calls_per_session=16, idle_calls_per_peer=8)
    cfgs = make_deployment(
        tmp_path,
        [*hostile, "bob", "charlie", "dave"],
        limits=limits,
        timeouts=Timeouts(connect_seconds=3, session_seconds=90, rpc_seconds=30, peer_grace_seconds=8.0),
    )
    for n in ("bob", "charlie", "dave"):
        processes(n, cfgs[n], use_launcher=False)
    for n in ("bob", "charlie", "dave"):
        client.wait_healthy(cfgs[n], timeout=60)
    per_member = limits.max_concurrent_rpcs // members + 8  # together past bob's max_concurrent_rpcs
    floods = [
        StreamFlood(
            tmp_path / "certs",
            m,
            _address(cfgs, "bob"),
            "bob",
            count=per_member,
            connections=2,
            reopen_delay=3.0,
            method="watch",
        ).start()
        for m in hostile
    ]
    try:
        assert client.check_health(cfgs["bob"]) == "SERVING"
        assert client.check_health(cfgs["charlie"], peer="bob") == "SERVING"
        rec = client.start_session(
            cfgs["charlie"], "net-echo", {"a": "charlie", "b": "bob"}, {"n": 3, "block_seconds": 10.0}, timeout=90
        )
        assert rec["state"] == "succeeded", rec.get("error")
        own = client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "dave"}, {"n": 2}, timeout=30)
        assert own["state"] == "succeeded", own.get("error")
        limit = limits.watch_calls_per_peer
        for f in floods:
            assert f.held_steadily(2.0) <= limit, (f.held(2.0), f.open_now())
    finally:
        for f in floods:
            f.stop()
    for f in floods:
        assert f.codes.get("RESOURCE_EXHAUSTED", 0) >= per_member - limit, f.codes
        assert "limits.watch_calls_per_peer" in f.details["RESOURCE_EXHAUSTED"]


def _wait_for(predicate, what: str, timeout: float = 60.0):
    end = time.monotonic() + timeout
    last: object = None
    while True:
        try:
            value = last = predicate()
        except Exception as exc:  # noqa: BLE001 - not there yet
            value, last = None, exc
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what} (last: {last!r})"
        time.sleep(0.1)


@pytest.mark.parametrize("members", [4, 8])
def test_members_flooding_every_kind_of_call_cannot_stop_a_running_session(tmp_path, processes, members):
    """Issue 40, item 1: members whose certificates bob admits flood bob with every kind of call they can
    hold -- idle Streams, Health.Watch, Streams stalled inside their own admitted (never begun) sessions, and
    new proposals -- together far more than bob's max_concurrent_rpcs, which they fill (refusals name it).  A
    session between charlie and bob that was running when the flood began still succeeds: charlie's
    heartbeats to bob (bob's peer grace is short) and its final message, sent on a new call once charlie has
    been busy for a while, are calls of a running session and use capacity no other call can take.  Bob's
    operator starts a session of its own with dave and reads statuses, and health checks of bob from its
    operator and from charlie answer SERVING throughout.  Before, the same flood starved the session.

    The call quotas are scaled down by 4 (as in the Watch test) so that the flood's refusals do not take the
    CPU a loaded test host needs for the sessions themselves."""
    from concurrent.futures import ThreadPoolExecutor

    hostile = [f"m{i}" for i in range(1, members + 1)]
    limits = _limits(
        max_concurrent_rpcs=128,
        calls_per_peer=48,
        calls_per_session=24,
        idle_calls_per_peer=8,
        proposal_grace_seconds=900.0,
    )
    cfgs = make_deployment(
        tmp_path,
        [*hostile, "bob", "charlie", "dave"],
        limits=limits,
        timeouts=Timeouts(connect_seconds=3, session_seconds=120, rpc_seconds=30, peer_grace_seconds=8.0),
    )
    procs_of = {n: processes(n, cfgs[n], use_launcher=False) for n in ("bob", "charlie", "dave")}
    for n in ("bob", "charlie", "dave"):
        client.wait_healthy(cfgs[n], timeout=120)
    bob = _address(cfgs, "bob")
    # each member's own sessions with bob, admitted and never begun: as many as bob lets it propose
    stalled: dict[str, list[str]] = {m: [] for m in hostile}
    for m in hostile:
        with raw_channel(tmp_path / "certs", m, bob, "bob") as ch:
            for i in range(limits.pending_per_peer + 1):
                code, _ = call_unary(ch, MAILBOX + "Propose", _spec(f"{m}.stall-{i}", {"a": m, "b": "bob"}))
                if code != C.OK:
                    assert code == C.RESOURCE_EXHAUSTED, code
                    break
                stalled[m].append(f"{m}.stall-{i}")
        assert stalled[m], m  # every member holds at least one: its share of pending_total
    # charlie's session with bob: bob sends x, charlie's role holds its loop 40 s (past bob's peer grace, and long
    # enough for the flood to fill bob's pool first on a loaded host: 12 s were not always), then sends y.  It
    # blocks without computing (block_seconds): the party under attack is bob, and a charlie burning a core for
    # 40 s took that CPU from bob and the flood (test_transport checks a party answering while a role computes)
    sid = "charlie.guarded"
    with ThreadPoolExecutor(1) as pool:
        guarded = pool.submit(
            client.start_session,
            cfgs["charlie"],
            "net-echo",
            {"a": "bob", "b": "charlie"},
            {"n": 3, "block_seconds": 40.0},
            session_id=sid,
            timeout=120,
        )
        _wait_for(
            lambda: client.get_status(cfgs["bob"], sid)["state"] == "running" or (guarded.done() and guarded.result()),
            "bob to run the session",
        )
        assert not guarded.done(), guarded.result()
        per_member = 2 * limits.calls_per_peer  # together far past max_concurrent_rpcs
        floods = [
            StreamFlood(
                tmp_path / "certs",
                m,
                bob,
                "bob",
                count=per_member,
                connections=2,
                reopen_delay=2.0,
                method=("stream", "bound", "watch", "bound", "propose", "bound"),
                session_ids=tuple(stalled[m]),
            ).start()
            for m in hostile
        ]
        try:
            # the members fill bob's shared pool: some of their calls are refused for it
            _wait_for(
                lambda: sum(f.rules.get("limits.max_concurrent_rpcs", 0) for f in floods) > 0,
                "the flood to fill max_concurrent_rpcs",
            )
            assert client.check_health(cfgs["bob"]) == "SERVING"  # bob's operator
            assert client.check_health(cfgs["charlie"], peer="bob") == "SERVING"  # another member
            assert client.get_status(cfgs["bob"], sid)["state"] == "running"
            assert client.list_sessions(cfgs["bob"]) is not None
            rec = guarded.result(timeout=150)
            assert rec["state"] == "succeeded", rec.get("error")
            assert rec["result"]["received"] == [0.5, 1.5, 2.5], rec
            own = client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "dave"}, {"n": 2}, timeout=60)
            assert own["state"] == "succeeded", own.get("error")
            assert client.check_health(cfgs["charlie"], peer="bob") == "SERVING"
            assert sum(f.rules.get("limits.max_concurrent_rpcs", 0) for f in floods) > 0
        finally:
            for f in floods:
                f.stop()
    bob_rec = client.follow_session(cfgs["bob"], sid, 30)  # his record is written just after his confirmation
    assert bob_rec["state"] == "succeeded" and bob_rec["result"]["y"] == [1.0, 3.0, 5.0], bob_rec
    # what bob held of each member at most, as bob counted it (reported when it stops): within its quota.
    # (Counted at the members, calls open for 2 s looked held: under load bob's refusals took longer.)
    assert procs_of["bob"].terminate() == 0
    line = re.search(r"calls in progress at their peak, per peer: (.*)", procs_of["bob"].output())
    assert line, procs_of["bob"].output()[-2000:]
    peak = {p: int(n) for p, n in (item.split() for item in line.group(1).split(", "))}
    assert set(hostile) <= set(peak), peak
    assert all(peak[m] <= limits.calls_per_peer for m in hostile), peak


def _spec(sid, roles, protocol="net-echo", params="{}", timeout=60.0) -> bytes:
    msg = tpb.SessionSpec(session_id=sid, protocol=protocol, params_json=params, timeout_seconds=timeout)
    for r, p in roles.items():
        msg.roles[r] = p
    return msg.SerializeToString()


DPA_ROLES = {"charlie": "alice", "party1": "bob", "party2": "charlie", "dave": "dave"}
PI_ROLES = {"trent": "alice", "party1": "bob", "party2": "charlie"}
KW_ROLES = {"alice": "alice", "bob": "bob"}


def test_bad_numbers_and_health_garbage_are_invalid_argument(tmp_path, parties):
    """Item 10 over a real process: a number no protocol can use, in any numeric parameter of any protocol
    (1e308, 1e400 = infinity in JSON, an integer of 1,000 digits, a string, a list), is INVALID_ARGUMENT
    naming the parameter -- {"epsilon": 1e308} was INTERNAL (OverflowError) -- and bytes that are no
    HealthCheckRequest are INVALID_ARGUMENT (were UNKNOWN)."""
    cfgs, _ = parties(names=("bob",))
    cases = [
        ("dp-aggregate", DPA_ROLES, '{"n_parties": 2, "epsilon": 1e308}', "epsilon"),
        ("dp-aggregate", DPA_ROLES, '{"n_parties": 2, "epsilon": 1e-308}', "epsilon"),
        ("dp-aggregate", DPA_ROLES, '{"n_parties": 2, "lam": 1e400}', "lam"),
        ("dp-aggregate", DPA_ROLES, '{"n_parties": 2, "max_sensitivity": "1"}', "max_sensitivity"),
        ("power-iteration", PI_ROLES, '{"p": ' + "9" * 1000 + "}", "power-iteration parameter p"),
        ("power-iteration", PI_ROLES, '{"tol": [0.1]}', "tol"),
        ("power-iteration", PI_ROLES, '{"padding": 1e308}', "padding"),
        ("power-iteration", PI_ROLES, '{"max_iterations": 1e308}', "max_iterations"),
        ("keyword", KW_ROLES, '{"mask_nats": 1e400}', "mask_nats"),
        ("keyword", KW_ROLES, '{"offset_nats": null}', "offset_nats"),
        ("keyword", KW_ROLES, '{"emission_offset_nats": -1e308}', "emission_offset_nats"),
        ("keyword", KW_ROLES, '{"key_bits": 1e308}', "key_bits"),
    ]
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        got = [
            (name, call_unary(alice, MAILBOX + "Propose", _spec(f"alice.num-{i}", roles, protocol, params)))
            for i, (protocol, roles, params, name) in enumerate(cases)
        ]
        wrong = [
            (name, code.name, details)
            for name, (code, details) in got
            if code != C.INVALID_ARGUMENT or name not in details
        ]
        assert not wrong, wrong
        for payload in (b"\xff\xfe\x00garbage", b"\x0a\xff\xff\xff"):
            code, details = call_unary(alice, "/grpc.health.v1.Health/Check", payload)
            assert code == C.INVALID_ARGUMENT and "HealthCheckRequest" in details, (code, details)
    assert client.check_health(cfgs["bob"]) == "SERVING"


def _wait_state(cfg, sid, states=("failed", "succeeded"), timeout=30.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        try:
            rec = client.get_result(cfg, sid)
            if rec.get("state") in states:
                return rec
        except Exception:  # noqa: BLE001 - not there yet
            rec = None
        assert time.monotonic() < end, (sid, rec)
        time.sleep(0.1)


def test_proposals_in_flight_count_against_the_initiators_slots(tmp_path, parties):
    """40 Proposes from alice at once: every one of them passed the slot check before any was registered
    (the governor's audit write is awaited in between), so bob accepted far more than pending_per_peer."""
    limits = _limits(pending_per_peer=2, pending_total=8, proposal_grace_seconds=30.0)
    cfgs, _ = parties(names=("bob",), limits=limits)
    from concurrent.futures import ThreadPoolExecutor

    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        with ThreadPoolExecutor(40) as pool:
            codes = list(
                pool.map(
                    lambda i: call_unary(
                        alice, MAILBOX + "Propose", _spec(f"alice.burst-{i}", {"a": "alice", "b": "bob"})
                    )[0],
                    range(40),
                )
            )
    assert codes.count(C.OK) == limits.pending_per_peer, codes
    assert codes.count(C.RESOURCE_EXHAUSTED) == 40 - limits.pending_per_peer, codes


def _failed_resumably(alice, cfgs, sids, params="{}"):
    for sid in sids:
        assert call_unary(alice, MAILBOX + "Propose", _spec(sid, {"a": "alice", "b": "bob"}, params=params))[0] == C.OK
        assert (
            call_unary(
                alice,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id=sid, code="UNAVAILABLE", message="gone").SerializeToString(),
            )[0]
            == C.OK
        )
    for sid in sids:
        rec = _wait_state(cfgs["bob"], sid)
        assert rec["state"] == "failed" and rec["resumable"], rec


def test_concurrent_resumes_hold_slots_like_proposals(tmp_path, parties):
    """Sessions alice made 'failed resumably' (Propose, then Abort UNAVAILABLE), resumed all at once: a
    resume is admitted in an executor, so every one of them passed the slot check before any was reopened
    (the governance half's admission counts the sessions that exist, not those being admitted).  Each
    resume being admitted now holds its slot: no more than limits.pending_per_peer are accepted.  (The
    journal of a resumed session against its envelope: the governance half's test_a_resume_is_admitted_again.)"""
    from concurrent.futures import ThreadPoolExecutor

    limits = _limits(pending_per_peer=2, pending_total=8, proposal_grace_seconds=30.0)
    cfgs, _ = parties(names=("bob",), limits=limits)
    sids = [f"alice.res-{i}" for i in range(8)]
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        _failed_resumably(alice, cfgs, sids)
        ref = lambda sid: tpb.SessionRef(session_id=sid).SerializeToString()  # noqa: E731
        with ThreadPoolExecutor(len(sids)) as pool:
            got = list(pool.map(lambda sid: call_unary(alice, MAILBOX + "Resume", ref(sid)), sids))
        codes = [c for c, _ in got]
        # never more than the limit; fewer when a resume that is refused still held its slot while it was
        # being admitted (it was pending at that moment) -- so the refused ones are asked again, one at a
        # time: the slots fill up exactly to the limit, and no further
        assert 1 <= codes.count(C.OK) <= limits.pending_per_peer, got
        assert codes.count(C.OK) + codes.count(C.RESOURCE_EXHAUSTED) == len(sids), got
        again = [
            call_unary(alice, MAILBOX + "Resume", ref(sid))[0]
            for sid, c in zip(sids, codes)
            if c == C.RESOURCE_EXHAUSTED
        ]
    assert codes.count(C.OK) + again.count(C.OK) == limits.pending_per_peer, (got, again)
    assert again.count(C.RESOURCE_EXHAUSTED) == len(again) - again.count(C.OK), again


def test_session_ids_cannot_be_squatted(tmp_path, parties):
    """A member that proposes and aborts `monthly-pca` used to block everyone's `monthly-pca` at that party
    for ever (ALREADY_EXISTS).  Ids are namespaced by their initiator now: alice can only propose
    `alice.<name>`, and charlie's operator's `monthly-pca` is `charlie.monthly-pca` -- which bob's operator
    can still call `monthly-pca` while it is the only session of that name."""
    cfgs, _ = parties(names=("bob", "charlie"))
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        for sid in ("monthly-pca", "charlie.monthly-pca"):
            code, details = call_unary(
                alice,
                MAILBOX + "Propose",
                _spec(
                    sid,
                    {
                        "a": "alice",
                        "b": "bob",
                    },
                ),
            )
            if code == C.OK:  # (main) squatted: give it up at once, as the member did
                call_unary(
                    alice, MAILBOX + "Abort", tpb.AbortRequest(session_id=sid, code="ABORTED").SerializeToString()
                )
            else:
                assert code == C.INVALID_ARGUMENT and "namespace" in details, (sid, code, details)
        assert call_unary(alice, MAILBOX + "Propose", _spec("alice.monthly-pca", {"a": "alice", "b": "bob"}))[0] == C.OK
        assert (
            call_unary(
                alice,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.monthly-pca", code="ABORTED").SerializeToString(),
            )[0]
            == C.OK
        )
    rec = client.start_session(
        cfgs["charlie"], "net-echo", {"a": "charlie", "b": "bob"}, {"n": 2}, session_id="monthly-pca", timeout=30
    )
    assert rec["state"] == "succeeded" and rec["session_id"] == "charlie.monthly-pca"
    assert _wait_state(cfgs["bob"], "charlie.monthly-pca")["state"] == "succeeded"
    assert client.get_status(cfgs["charlie"], "monthly-pca")["session_id"] == "charlie.monthly-pca"
    with pytest.raises(Exception, match="several sessions named 'monthly-pca'"):  # bob holds alice's too
        client.get_result(cfgs["bob"], "monthly-pca")


def test_a_non_participant_hears_the_same_of_existing_and_missing_sessions(tmp_path, parties):
    """Alice holds no role in charlie's sessions at bob -- one prepared, one that failed, one that failed
    resumably -- and asks about them with every Mailbox method: each answer (status and words, the id
    aside) is the one she gets for an id bob never saw.  On main Heartbeat, Deliver, Stream, Begin, Abort
    and Resume told them apart (PERMISSION_DENIED "holds no role", ALREADY_EXISTS, "is running" ...).  And
    none of her calls changed charlie's sessions."""
    cfgs, _ = parties(names=("bob",), limits=_limits(proposal_grace_seconds=300.0))
    certs, bob = tmp_path / "certs", _address(cfgs, "bob")
    roles = {"a": "charlie", "b": "bob"}
    with raw_channel(certs, "charlie", bob, "bob") as charlie:
        for sid in ("charlie.live", "charlie.ended", "charlie.resumable"):
            assert call_unary(charlie, MAILBOX + "Propose", _spec(sid, roles))[0] == C.OK
        for sid, code in (("charlie.ended", "ABORTED"), ("charlie.resumable", "UNAVAILABLE")):
            assert (
                call_unary(
                    charlie,
                    MAILBOX + "Abort",
                    tpb.AbortRequest(session_id=sid, code=code, message="x").SerializeToString(),
                )[0]
                == C.OK
            )
    assert _wait_state(cfgs["bob"], "charlie.resumable")["resumable"]
    assert _wait_state(cfgs["bob"], "charlie.ended")["state"] == "failed"

    def ask(alice, sid):
        env = tpb.Envelope(
            session_id=sid,
            tag="t",
            type_name="smcdp.v1.Flag",
            chunk_index=0,
            chunk_count=1,
            total_size=2,
            data=b"\x08\x01",
        ).SerializeToString()
        ref = tpb.SessionRef(session_id=sid).SerializeToString()
        answers = {
            "Heartbeat": call_unary(
                alice,
                MAILBOX + "Heartbeat",
                tpb.HeartbeatRequest(session_id=sid, incarnation="x", round=0).SerializeToString(),
            ),
            "Deliver": call_deliver(alice, [env]),
            "Stream": call_stream(alice, [env])[:2],
            "Begin": call_unary(alice, MAILBOX + "Begin", ref),
            "Abort": call_unary(
                alice,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id=sid, code="ABORTED", message="mine").SerializeToString(),
            ),
            "Resume": call_unary(alice, MAILBOX + "Resume", ref),
        }
        return {m: (code.name, details.replace(sid, "<ID>")) for m, (code, details) in answers.items()}

    with raw_channel(certs, "alice", bob, "bob") as alice:
        missing = ask(alice, "charlie.missing")
        for sid in ("charlie.live", "charlie.ended", "charlie.resumable"):
            got = ask(alice, sid)
            differ = {m: (got[m], missing[m]) for m in got if got[m] != missing[m]}
            assert not differ, (sid, differ)
    # her Heartbeat answer is bob's view of a session he does not know; her Abort and Begin changed nothing
    assert missing["Heartbeat"][0] == "OK"
    assert client.get_status(cfgs["bob"], "charlie.live")["state"] == "prepared"
    assert client.get_result(cfgs["bob"], "charlie.resumable")["resumable"]


def _junk(alice, sid, size, count, tag="junk"):
    """``count`` messages of ``size`` bytes into session ``sid`` (1 MiB chunks); the codes, and how many bytes
    went in before the first refusal."""
    data = b"\x0a" + b"x" * (size - 1)
    n = max(1, -(-size // (1 << 20)))
    codes, accepted, details = [], 0, ""
    for i in range(count):
        chunks = [
            tpb.Envelope(
                session_id=sid,
                tag=f"{tag}/{i}",
                type_name="smcdp.v1.Blobs",
                chunk_index=k,
                chunk_count=n,
                total_size=size,
                data=data[k << 20 : (k + 1) << 20],
            ).SerializeToString()
            for k in range(n)
        ]
        code, details = call_deliver(alice, chunks)
        codes.append(code)
        if code != C.OK:
            break
        accepted += size
    return codes, accepted, details


def test_every_protocol_session_is_bounded_by_its_own_envelope(tmp_path, parties):
    """Item 7 over real processes.  A power-iteration session that does not state rows (k then bounded by
    max_rows), a keyword session with its default bounds, and a dp-aggregate session holding a budget
    reservation (governed) each refuse -- RESOURCE_EXHAUSTED, naming the protocol's parameters -- a message
    or a total their parameters cannot produce.  On main the first two accepted anything up to the [limits]
    ceilings (a power-iteration session without rows derived its envelope from k = 1,000,000: hundreds of
    MB; keyword had none), and a governed session lost its protocol's envelope."""
    from smcdp.runtime.governance.charges import BudgetConfig
    from smcdp.runtime.governance.policy import Policy

    open_policy = {p: Policy(open=True) for p in ("alice", "bob", "charlie", "dave")}
    cfgs, _ = parties(
        names=("bob",), policies=open_policy, budgets={"bob": BudgetConfig(dataset="bob", epsilon=100.0, delta=1e-6)}
    )
    got = {}
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        # power iteration, rows not stated, 5 rounds, 512-bit keys: bob (party1) receives about 0.2 MB at most
        assert (
            call_unary(
                alice,
                MAILBOX + "Propose",
                _spec("alice.pi", PI_ROLES, "power-iteration", '{"key_bits": 512, "max_iterations": 5}'),
            )[0]
            == C.OK
        )
        got["power-iteration"] = _junk(alice, "alice.pi", 256 << 10, 32)
        # keyword, default bounds: one message above what any of them can be (a few MB) is refused
        assert (
            call_unary(alice, MAILBOX + "Propose", _spec("alice.kw", KW_ROLES, "keyword", '{"key_bits": 512}'))[0]
            == C.OK
        )
        got["keyword"] = _junk(alice, "alice.kw", 24 << 20, 1)
        # dp-aggregate at a data party with a privacy budget: its session runs wrapped by the governor
        assert (
            call_unary(
                alice,
                MAILBOX + "Propose",
                _spec("alice.dpa", DPA_ROLES, "dp-aggregate", '{"n_parties": 2, "key_bits": 512, "dgk_bits": 512}'),
            )[0]
            == C.OK
        )
        got["dp-aggregate"] = _junk(alice, "alice.dpa", 8 << 20, 1)
    wrong = {
        protocol: (codes[-1].name, accepted, details)
        for protocol, (codes, accepted, details) in got.items()
        if codes[-1] != C.RESOURCE_EXHAUSTED or accepted >= 2 << 20 or f"{protocol} parameters" not in details
    }
    assert not wrong, wrong


def test_what_one_peer_sends_is_bounded_across_its_sessions(tmp_path, parties):
    """Each session bounds what it receives; across sessions a peer is held to limits.inbound_mib_per_peer
    (the sessions keep its messages in memory until their roles read them, and in their journals until they
    end): alice's junk into a third session is refused, charlie's session is not held back by her, and an
    ended session gives its bytes back.  On main nothing bounded a peer across sessions (64 sessions of
    2 GiB each)."""
    cfgs, _ = parties(names=("bob",), limits=_limits(inbound_mib_per_peer=4, inbound_mib_total=16))
    certs, bob = tmp_path / "certs", _address(cfgs, "bob")
    with raw_channel(certs, "alice", bob, "bob") as alice, raw_channel(certs, "charlie", bob, "bob") as charlie:
        got = []
        for i in range(3):
            assert call_unary(alice, MAILBOX + "Propose", _spec(f"alice.s{i}", {"a": "alice", "b": "bob"}))[0] == C.OK
            got.append(_junk(alice, f"alice.s{i}", 3 << 19, 1))  # 1.5 MiB each
        assert [r[0][-1] for r in got] == [C.OK, C.OK, C.RESOURCE_EXHAUSTED], got
        assert "limits.inbound_mib_per_peer" in got[2][2]
        assert call_unary(charlie, MAILBOX + "Propose", _spec("charlie.s", {"a": "charlie", "b": "bob"}))[0] == C.OK
        assert _junk(charlie, "charlie.s", 3 << 19, 1)[0] == [C.OK]
        assert (
            call_unary(
                alice,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.s0", code="ABORTED", message="x").SerializeToString(),
            )[0]
            == C.OK
        )
        _wait_state(cfgs["bob"], "alice.s0")
        end = time.monotonic() + 10
        while (codes := _junk(alice, "alice.s2", 3 << 19, 1, tag="again")[0]) != [C.OK]:
            assert time.monotonic() < end, codes  # the ended session's bytes come back
            time.sleep(0.2)


def test_a_waiting_notice_naming_a_party_never_asked_does_not_keep_a_proposal(tmp_path, parties):
    """Issue 40, item 2: alice proposes to bob a session with charlie, never asks charlie, and keeps telling
    bob that it waits for charlie's operator.  Each notice kept the proposal prepared -- and its slot held --
    for the proposal grace again, up to approval_timeout_seconds (a day).  Now bob asks charlie (a Heartbeat
    on the session), charlie knows of no proposal waiting for its operator, so the notice is refused
    (FAILED_PRECONDITION, saying so) and the proposal expires after its grace while the notices go on."""
    import threading

    limits = _limits(proposal_grace_seconds=6.0)
    cfgs, _ = parties(names=("bob", "charlie"), limits=limits)
    sid = "alice.pi-never-asked"
    notice = tpb.WaitingNotice(session_id=sid, party="charlie").SerializeToString()
    stop = threading.Event()
    answers: list[tuple[grpc.StatusCode, str]] = []
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        spec = _spec(sid, PI_ROLES, "power-iteration", '{"key_bits": 512, "max_iterations": 5}')
        assert call_unary(alice, MAILBOX + "Propose", spec)[0] == C.OK
        t0 = time.monotonic()

        def keep_telling() -> None:
            while not stop.is_set():
                answers.append(call_unary(alice, MAILBOX + "Waiting", notice))
                stop.wait(1.0)  # the initiator's pace: it repeats the notice with every poll

        teller = threading.Thread(target=keep_telling, daemon=True)
        teller.start()
        try:
            rec = _wait_state(cfgs["bob"], sid, timeout=90.0)
        finally:
            stop.set()
            teller.join(30)
    waited = time.monotonic() - t0
    assert rec["state"] == "failed" and "proposal grace" in rec["error"]["message"], rec
    assert waited < limits.proposal_grace_seconds + 60.0, waited  # not a notice's grace again and again
    assert answers and all(code == C.FAILED_PRECONDITION for code, _ in answers[:-1]), answers
    assert "does not confirm" in answers[0][1], answers


def test_a_proposer_cannot_size_the_partys_receive_limit(tmp_path, parties):
    """Issue 40, item 4: alice, admitted by bob's policy as power iteration's Trent, proposes 64 components of
    4096-bit keys over 2,000 rounds -- each within its own bound -- whose envelope at bob was gigabytes, capped
    only by max_session_mib (2 GiB), so 300 MB of junk was accepted.  Bob's policy bounds the envelope a peer's
    proposal derives (max_receive_mib, default 512 MiB): the proposal is refused, FAILED_PRECONDITION naming
    the rule, and nothing of alice's junk is taken for it; a session of honest size is admitted."""
    from smcdp.runtime.governance.policy import Policy, ProtocolRules

    rules = ProtocolRules(
        roles=("party*",),
        initiators=("alice",),
        coordinators=("alice",),
        release_to=("alice", "charlie"),
        allow_non_dp=True,
    )
    cfgs, _ = parties(names=("bob",), policies={"bob": Policy(protocols={"power-iteration": rules})})
    big = '{"components": 64, "key_bits": 4096, "max_iterations": 2000}'
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        code, details = call_unary(alice, MAILBOX + "Propose", _spec("alice.big", PI_ROLES, "power-iteration", big))
        assert code == C.FAILED_PRECONDITION and "policy.power-iteration.max_receive_mib" in details, (code, details)
        codes, accepted, _ = _junk(alice, "alice.big", 4 << 20, 2)
        assert accepted == 0 and C.OK not in codes, (codes, accepted)
        honest = '{"key_bits": 2048, "max_iterations": 2000}'  # a data party receives at most ~80 MB
        code, details = call_unary(alice, MAILBOX + "Propose", _spec("alice.ok", PI_ROLES, "power-iteration", honest))
        assert code == C.OK, (code, details)


def test_proposals_aborted_before_begin_are_summarised_in_the_audit_trail(tmp_path, parties):
    """Issue 40, item 5: 300 proposals accepted and aborted before Begin added 1,500 fsync-ed audit lines.  alice
    proposes 40 sessions to bob and aborts each before Begin: bob's audit trail records the first ones of her
    window in full (proposal, accepted, abort, session-end; the first to end, which need not be the first
    proposed) and counts the others in one 'unbegun-summarised' line (written when the window ends or, here,
    when bob stops); the chain verifies.  The counted ones leave no file either (each left its record file
    for ever before): bob answers for them from memory -- but half of alice's aborts say UNAVAILABLE, which
    makes a session resumable, and those keep their checkpoint and record (marked "counted") so that a
    resume continues them (a review: removing them broke an honest resume after a stopped initiator); the
    retention sweep takes such a record with its checkpoint."""
    from smcdp.runtime.durability.checkpoint import SUFFIX as CHECKPOINT_SUFFIX
    from smcdp.runtime.governance.audit import REFUSALS_IN_FULL, read_entries, verify_log

    cfgs, procs = parties(names=("bob",))
    n = 40
    sids = [f"alice.gone-{i}" for i in range(n)]
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        for i, sid in enumerate(sids):
            assert call_unary(alice, MAILBOX + "Propose", _spec(sid, {"a": "alice", "b": "bob"}))[0] == C.OK
            code = ("ABORTED", "UNAVAILABLE")[i % 2]
            abort = tpb.AbortRequest(session_id=sid, code=code, message="never mind").SerializeToString()
            assert call_unary(alice, MAILBOX + "Abort", abort)[0] == C.OK
    for sid in sids:  # every one ended at bob before bob stops (the counted ones answered from memory)
        _wait_for(lambda sid=sid: client.get_result(cfgs["bob"], sid).get("state") == "failed", f"{sid} to end")
    data_dir = load_config(cfgs["bob"]).data_dir
    sessions_dir = data_dir / "sessions"
    records = {p.name[: -len(".json")] for p in sessions_dir.glob("alice.gone-*.json")}
    checkpoints = {p.name[: -len(CHECKPOINT_SUFFIX)] for p in sessions_dir.glob(f"alice.gone-*{CHECKPOINT_SUFFIX}")}
    resumable = {sid for i, sid in enumerate(sids) if i % 2}
    marked = {r for r in records if client.get_result(cfgs["bob"], r).get("ended_before_begin") == "counted"}
    procs["bob"].terminate()
    events = [e for _, e, _ in read_entries(data_dir) if e is not None]
    mine = [e for e in events if str(e.get("session", "")).startswith("alice.gone-")]
    # the first ones to *end* are written in full (the allowance is spent as sessions end, and bob ends them
    # on their own threads, not necessarily in the order alice proposed them)
    full = [e["session"] for e in mine if e["event"] == "proposal"]
    assert len(set(full)) == len(full) == REFUSALS_IN_FULL and set(full) <= set(sids), full
    for sid in full:
        assert [e["event"] for e in mine if e["session"] == sid] == ["proposal", "accepted", "abort", "session-end"]
    assert len(mine) == 4 * REFUSALS_IN_FULL, [e["event"] for e in mine]
    (summary,) = [e for e in events if e["event"] == "unbegun-summarised"]
    assert summary["peer"] == "alice" and summary["ended_before_begin"] == n - REFUSALS_IN_FULL, summary
    assert verify_log(data_dir).ok
    counted = set(sids) - set(full)
    # a file for each audited in full and each counted resumable one (marked), none for a counted ABORTED one
    assert records == set(full) | (counted & resumable), (sorted(records), sorted(full))
    assert marked == counted & resumable and marked, sorted(marked)
    assert checkpoints == resumable, sorted(checkpoints)  # a resumable one keeps its checkpoint, counted or not


def test_a_counted_resumable_session_that_never_began_is_resumed(tmp_path, parties):
    """A review of the change above: a party that removed the checkpoint of a counted, resumable session (ended
    UNAVAILABLE before Begin -- an initiator stopped with a batch of proposals, a participant that failed
    first) refused its honest resume, FAILED_PRECONDITION "no checkpoint", and the session ended for good.
    alice ends 14 proposals UNAVAILABLE before Begin (10 in full, 4 counted); bob resumes a counted one."""
    from smcdp.runtime.governance.audit import REFUSALS_IN_FULL

    cfgs, _ = parties(names=("bob",))
    sids = [f"alice.r-{i}" for i in range(REFUSALS_IN_FULL + 4)]
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        for sid in sids:
            assert call_unary(alice, MAILBOX + "Propose", _spec(sid, {"a": "alice", "b": "bob"}))[0] == C.OK
            abort = tpb.AbortRequest(session_id=sid, code="UNAVAILABLE", message="charlie down").SerializeToString()
            assert call_unary(alice, MAILBOX + "Abort", abort)[0] == C.OK
        for sid in sids:
            _wait_for(lambda sid=sid: client.get_result(cfgs["bob"], sid).get("state") == "failed", f"{sid} to end")
        counted = [s for s in sids if client.get_result(cfgs["bob"], s).get("ended_before_begin") == "counted"]
        assert len(counted) == 4, counted
        code, details = call_unary(alice, MAILBOX + "Resume", tpb.SessionRef(session_id=counted[0]).SerializeToString())
        assert code == C.OK, (code, details)
