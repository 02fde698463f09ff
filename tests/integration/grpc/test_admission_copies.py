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
        with pytest.raises(grpc.RpcError) as ei:
            bob.Propose(_spec("alice.gone"), timeout=1.0)  # still in governance when the caller gives up
        assert ei.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert calls == ["alice.gone"]
        retry = bob.Propose.future(_spec("alice.gone"), timeout=30)
        time.sleep(1.0)  # the retry arrives while the first copy's governance still runs (without the fix it
        gate.set()  # ran governance beside it; with it, the retry waits whatever the instant)
        assert retry.result().role == "b"
    assert calls == ["alice.gone"], calls
    _wait_for("bob's session", lambda: "alice.gone" in parties["bob"].sessions)
    assert parties["bob"].sessions["alice.gone"].initiator == "alice"


def test_a_retried_proposal_is_not_accepted_for_a_session_whose_thread_did_not_start(pair, monkeypatch):
    """bob admits a proposal but its session thread does not start in time: the Propose fails.  A retried copy
    must not then be answered "accepted" for that session (before, it was: the session stayed registered and
    undecided, so alice would have begun a session bob had already given up)."""
    root, cfgs, parties, runner = pair
    core = parties["bob"].core
    release = threading.Event()
    real_start = Session.start_thread

    def late_start(self):
        threading.Thread(target=lambda: (release.wait(20), real_start(self)), daemon=True).start()

    async def short_wait_ready(s):  # the party's wait for a session thread, cut from 10 s
        await asyncio.get_running_loop().run_in_executor(None, s.ready.wait, 0.5)

    monkeypatch.setattr(Session, "start_thread", late_start)
    monkeypatch.setattr(core, "wait_ready", short_wait_ready)
    try:
        with _bob_as_alice(root, cfgs) as ch:
            bob = tgrpc.MailboxStub(ch)
            with pytest.raises(grpc.RpcError) as ei:
                bob.Propose(_spec("alice.late"), timeout=10)
            # this party overloaded: UNAVAILABLE naming it (the session can be proposed again or resumed)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, (ei.value.code(), ei.value.details())
            assert "bob is overloaded" in ei.value.details() and "thread did not start" in ei.value.details()
            with pytest.raises(grpc.RpcError) as ei:
                bob.Propose(_spec("alice.late"), timeout=10)
            assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS, (ei.value.code(), ei.value.details())
    finally:
        release.set()  # the thread starts after all: it finds the failure and ends the session so
    rec = runner.run(_record(parties["bob"], "alice.late"))
    assert rec["state"] == "failed" and "thread did not start" in rec["error"]["message"], rec


async def _record(party, sid):
    s = party.sessions.get(sid)
    if s is not None:
        await asyncio.wait_for(asyncio.wrap_future(s.done), 20)
    return party.records.load(sid)


def test_a_start_naming_a_session_being_resumed_waits_for_the_resume(tmp_path, in_thread):
    """alice's operator resumes a session and, while it runs, starts it again under the same id (a client that
    repeated its call, or an operator who did not know the resume was under way).  The start must wait for the
    resume's flow and answer with its record -- not run a second proposal flow (before, it proposed the session
    to bob again and began it a second time)."""
    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob"],
        timeouts=Timeouts(connect_seconds=2, session_seconds=60, rpc_seconds=20, peer_grace_seconds=2),
    )
    alice = in_thread.start(cfgs["alice"])
    in_thread.start(cfgs["bob"])
    params = {"n": 3, "block_seconds": 3.0}  # bob's role holds 3 s, without computing
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
    proposals = []
    real_propose = bob.peers._admission.propose

    async def counted(peer, spec):
        proposals.append(spec.session_id)
        return await real_propose(peer, spec)

    bob.peers._admission.propose = counted
    resumed: dict = {}
    th = threading.Thread(target=lambda: resumed.update(rec=client.resume_session(cfgs["alice"], "twice", timeout=60)))
    th.start()
    _wait_for("bob to run its role again", lambda: _state(cfgs["bob"], "alice.twice") == "running")
    again = client.start_session(cfgs["alice"], "net-echo", ROLES, params, session_id="twice", timeout=60)
    th.join(60)
    assert resumed["rec"]["state"] == "succeeded" and resumed["rec"]["result"]["y"] == [1.0, 3.0, 5.0], resumed
    assert again == resumed["rec"], (again, resumed["rec"])
    assert proposals == [], proposals  # nothing proposed to bob again
    assert alice.records.load("alice.twice")["state"] == "succeeded"
