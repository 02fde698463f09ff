"""Copies of one proposal at a participant, and of one operator call at the initiator: whatever order they
arrive in and whoever goes away, a session is admitted once and its copies get one answer (parties served
in-process on loopback; governance and the session thread slowed where a test needs an instant)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import grpc
import pytest

from smcdp.net.config import Timeouts
from smcdp.net.grpc_channel import NotFound
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.runtime.session import Session
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc
from tests.support.deployment import make_deployment, raw_channel

ROLES = {"a": "alice", "b": "bob"}


def _spec(sid, params=None):
    return tpb.SessionSpec(
        session_id=sid, protocol="net-echo", roles=ROLES, params_json=json.dumps(params or {}), timeout_seconds=30
    )


def _wait_for(what, condition, timeout=20.0):
    end = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _state(cfg, sid):
    try:
        return client.get_status(cfg, sid).get("state")
    except NotFound:  # not proposed there yet
        return None


@pytest.fixture
def pair(tmp_path, in_thread):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    parties = {name: in_thread.start(cfgs[name]) for name in ("alice", "bob")}
    return tmp_path, cfgs, parties, in_thread


def _bob_as_alice(root, cfgs):
    return raw_channel(root / "certs", "alice", load_config(cfgs["bob"]).address_of("bob"), "bob")


def test_a_proposal_whose_caller_went_away_is_admitted_once(pair, monkeypatch):
    """alice's Propose reaches bob's governance, then alice goes away (its deadline passes: gRPC cancels bob's
    handler) and retries.  bob's governance must run once: the first admission ends as it would have, and the
    retry is answered as a repeated proposal.  Before, the cancelled handler let the retry in while the first
    governance call still ran in its thread, and governance ran twice for one session."""
    root, cfgs, parties, _ = pair
    governor = parties["bob"].governor
    real_admit, gate, calls = governor.admit, threading.Event(), []

    def slow_admit(peer, spec, *rest):
        calls.append(spec.session_id)
        gate.wait(20)
        return real_admit(peer, spec, *rest)

    monkeypatch.setattr(governor, "admit", slow_admit)
    with _bob_as_alice(root, cfgs) as ch:
        bob = tgrpc.MailboxStub(ch)
        first = bob.Propose.future(_spec("alice.gone"), timeout=30)
        _wait_for("the first copy to reach bob's governance", lambda: calls == ["alice.gone"])
        first.cancel()  # the caller goes away: gRPC cancels bob's handler
        with pytest.raises(grpc.FutureCancelledError):
            first.result()
        retry = bob.Propose.future(_spec("alice.gone"), timeout=30)
        time.sleep(1.0)  # the retry arrives while the first copy's governance still runs (without the fix it
        gate.set()  # ran governance beside it; with it, the retry waits whatever the instant)
        assert retry.result().role == "b"
    assert calls == ["alice.gone"], calls
    _wait_for("bob's session", lambda: "alice.gone" in parties["bob"].sessions)
    assert parties["bob"].sessions["alice.gone"].initiator == "alice"


def test_a_retried_proposal_of_a_session_whose_thread_did_not_start_gets_its_failure(pair, monkeypatch):
    """bob admits a proposal but its session thread does not start in time, and alice gave up waiting for the
    answer (its attempt's deadline is shorter than bob's wait for the thread).  Her retry must get the failure
    -- UNAVAILABLE, bob overloaded, which leaves the session resumable -- not "accepted" for a session bob has
    given up (before: the session stayed undecided and the retry was accepted), nor ALREADY_EXISTS (which
    would fail the session at alice for good)."""
    root, cfgs, parties, runner = pair
    core = parties["bob"].core
    release = threading.Event()
    real_start = Session.start_thread

    def late_start(self):
        threading.Thread(target=lambda: (release.wait(20), real_start(self)), daemon=True).start()

    async def short_wait_ready(s):  # the party's wait for a session thread, cut from 10 s
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 1.0)

    monkeypatch.setattr(Session, "start_thread", late_start)
    monkeypatch.setattr(core, "wait_ready", short_wait_ready)
    try:
        with _bob_as_alice(root, cfgs) as ch:
            bob = tgrpc.MailboxStub(ch)
            first = bob.Propose.future(_spec("alice.late"), timeout=30)
            _wait_for("bob to create the session", lambda: "alice.late" in parties["bob"].sessions)
            first.cancel()  # alice's attempt ran out before bob's answer
            for _ in range(2):  # her retries get the failure, each time
                with pytest.raises(grpc.RpcError) as ei:
                    bob.Propose(_spec("alice.late"), timeout=10)
                # this party overloaded: UNAVAILABLE naming it (the session can be proposed again or resumed)
                assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, (ei.value.code(), ei.value.details())
                assert "bob is overloaded" in ei.value.details() and "thread did not start" in ei.value.details()
    finally:
        release.set()  # the thread starts after all: it finds the failure and ends the session so
    rec = runner.run(_record(parties["bob"], "alice.late"))
    assert rec["state"] == "failed" and "thread did not start" in rec["error"]["message"], rec
    assert rec["resumable"] is True, rec


def test_a_proposal_counts_against_its_initiators_slots_before_the_next_is_checked(tmp_path, in_thread):
    """Two proposals of alice's arriving together at bob, which gives her one pending slot: one is admitted, the
    other refused RESOURCE_EXHAUSTED -- the first counts from the instant its slots were checked (when its
    admission ran as a task that counted it only on its first step, both were admitted)."""
    from smcdp.net.limits import Limits
    from smcdp.net.server import SessionSpec

    cfgs = make_deployment(tmp_path, ["alice", "bob"], limits=Limits(pending_per_peer=1, pending_total=2))
    bob = in_thread.start(cfgs["bob"])

    async def both():
        specs = [SessionSpec(f"alice.slot-{i}", "net-echo", ROLES, {}, 30.0) for i in range(2)]
        return await asyncio.gather(*(bob.admission.propose("alice", s) for s in specs), return_exceptions=True)

    outcomes = in_thread.run(both())
    assert sorted(type(o).__name__ for o in outcomes) == ["ResourceExhausted", "str"], outcomes
    refused = next(o for o in outcomes if not isinstance(o, str))
    assert "limits.pending" in str(refused), refused


async def _record(party, sid):
    s = party.sessions.get(sid)
    if s is not None:
        await asyncio.wait_for(asyncio.wrap_future(s.done), 20)
    return party.records.load(sid)


def _failed_resumably_with_a_held_resume(tmp_path, in_thread):
    """alice's net-echo session "twice" with bob, failed resumably (bob stopped while it ran); bob restarted with
    his Resume held until the returned gate is set and his proposals counted.  Returns (cfgs, alice, gate,
    proposals, params)."""
    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob"],
        timeouts=Timeouts(connect_seconds=2, session_seconds=60, rpc_seconds=20, peer_grace_seconds=6),
    )
    alice = in_thread.start(cfgs["alice"])
    in_thread.start(cfgs["bob"])
    # bob's role holds 2 s without computing (below the 6-s grace): bob is stopped while it runs
    params = {"n": 3, "block_seconds": 2.0}
    out: dict = {}

    def start():
        try:
            out["first"] = client.start_session(
                cfgs["alice"], "net-echo", ROLES, params, session_id="twice", timeout=60
            )
        except Exception as exc:  # noqa: BLE001 - looked at below
            out["first"] = exc

    th = threading.Thread(target=start)
    th.start()
    _wait_for("bob to run its role", lambda: _state(cfgs["bob"], "alice.twice") == "running")
    in_thread.stop("bob")  # bob's sessions end resumably at its shutdown; alice's fails UNAVAILABLE
    th.join(60)
    assert getattr(out["first"], "code", None) == "UNAVAILABLE", out["first"]

    bob = in_thread.start(cfgs["bob"])
    proposals, gate = [], threading.Event()
    real_propose, real_resume = bob.peers._admission.propose, bob.peers.resume

    async def counted(peer, spec):
        proposals.append(spec.session_id)
        return await real_propose(peer, spec)

    async def held(peer, session_id):  # bob answers alice's Resume once the test sets the gate
        await asyncio.get_running_loop().run_in_executor(None, gate.wait, 30)
        return await real_resume(peer, session_id)

    bob.peers._admission.propose, bob.peers.resume = counted, held
    return cfgs, alice, gate, proposals, params


def _in_background(call) -> tuple[threading.Thread, dict]:
    out: dict = {}

    def run():
        try:
            out["rec"] = call()
        except Exception as exc:  # noqa: BLE001 - looked at by the test
            out["rec"] = exc

    th = threading.Thread(target=run)
    th.start()
    return th, out


def test_a_start_naming_a_session_being_resumed_waits_for_the_resume(tmp_path, in_thread):
    """alice's operator resumes a session and, while the resume is under way, starts it again under the same id
    (a client that repeated its call, or an operator who did not know of the resume).  The start must wait for
    the resume's flow and answer with its record -- not run a second proposal flow (before, it proposed the
    session to bob again, which refused it, failing the resumed session).  The resume is held at bob's Resume
    until the start has reached alice's initiator, so the order is the same in every run."""
    cfgs, alice, gate, proposals, params = _failed_resumably_with_a_held_resume(tmp_path, in_thread)
    flows, real_once = [], alice.initiator._once

    async def watched(s, steps=None):
        flows.append(steps)
        return await (real_once(s) if steps is None else real_once(s, steps))

    alice.initiator._once = watched
    th, resumed = _in_background(lambda: client.resume_session(cfgs["alice"], "twice", timeout=60))
    _wait_for("the resume to reach bob", lambda: "alice.twice" in alice.sessions)
    th2, again = _in_background(
        lambda: client.start_session(cfgs["alice"], "net-echo", ROLES, params, session_id="twice", timeout=60)
    )
    _wait_for("the start to reach alice's initiator", lambda: None in flows)
    gate.set()
    th.join(60)
    th2.join(60)
    assert resumed["rec"]["state"] == "succeeded" and resumed["rec"]["result"]["y"] == [1.0, 3.0, 5.0], resumed
    assert again["rec"] == resumed["rec"], (again, resumed["rec"])
    assert proposals == [], proposals  # nothing proposed to bob again
    assert alice.records.load("alice.twice")["state"] == "succeeded"


def test_a_resume_made_twice_at_once_gets_one_record(tmp_path, in_thread):
    """The operator's resume call made twice while the first is under way (a client repeating a call it lost):
    the second waits for the first's flow and gets its record -- before, it was refused (the session being
    resumed, UNAVAILABLE, or not failed any more, FAILED_PRECONDITION), unlike a repeated start."""
    cfgs, alice, gate, _proposals, _ = _failed_resumably_with_a_held_resume(tmp_path, in_thread)
    calls, real_resume = [], alice.initiator.resume

    async def watched(session_id):
        calls.append(session_id)
        return await real_resume(session_id)

    alice.initiator.resume = watched
    th, first = _in_background(lambda: client.resume_session(cfgs["alice"], "twice", timeout=60))
    _wait_for("the resume to reach bob", lambda: "alice.twice" in alice.sessions and len(calls) == 1)
    th2, second = _in_background(lambda: client.resume_session(cfgs["alice"], "twice", timeout=60))
    _wait_for("the second resume to reach alice's initiator", lambda: len(calls) == 2)
    gate.set()
    th.join(60)
    th2.join(60)
    assert first["rec"]["state"] == "succeeded" and first["rec"]["result"]["y"] == [1.0, 3.0, 5.0], first
    assert second["rec"] == first["rec"], second
