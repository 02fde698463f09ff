"""Issue 24, governance half, against real party processes: a hostile member with a valid
certificate tries each door (docs/security.md, "Governance doors").

Each test starts its own small loopback deployment (``make_deployment``) and talks to the
parties either as their operators (``smcdp.runtime.client``) or as a member speaking raw
gRPC with its own certificate (``tests.support.deployment.raw_channel``)."""

from __future__ import annotations

import json
import threading
import time

import grpc
import pytest

from smcdp.errors import InvalidMessage
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.runtime.governance.audit import read_entries
from smcdp.runtime.governance.policy import Policy
from smcdp.v1 import transport_pb2 as tpb
from tests.support.boundary import MAILBOX, call_unary
from tests.support.deployment import make_deployment, raw_channel

C = grpc.StatusCode
ECHO = {"a": "alice", "b": "bob"}


def _spec(sid, roles, protocol="net-echo", params="{}", timeout=60.0) -> bytes:
    msg = tpb.SessionSpec(session_id=sid, protocol=protocol, params_json=params, timeout_seconds=timeout)
    for r, p in roles.items():
        msg.roles[r] = p
    return msg.SerializeToString()


def _member(tmp_path, cfgs, as_party, target):
    """A raw channel to ``target`` presenting ``as_party``'s (valid) certificate."""
    return raw_channel(tmp_path / "certs", as_party, load_config(cfgs[target]).address_of(target), target)


def _start(processes, cfgs, names):
    procs = {n: processes(n, cfgs[n], use_launcher=False) for n in names}
    for n in names:
        client.wait_healthy(cfgs[n], timeout=60)
    return procs


def _events(data_dir, event=None):
    return [e for _, e, _ in read_entries(data_dir) if e is not None and (event is None or e["event"] == event)]


# ------------------------------------------------------------------ 1. deny by default
def test_a_party_without_policy_refuses_every_peer_and_its_own_operator_still_starts(tmp_path, processes):
    """alice has no [policy]; bob is an open test party.  A member (bob's certificate) proposes to
    alice in several ways (an echo session, a keyword session where alice holds bob's models, a
    seeded one): each is refused with PERMISSION_DENIED, rule policy.  alice's own operator starts
    a session with bob, which bob's policy admits."""
    cfgs = make_deployment(tmp_path, ["alice", "bob"], open_policy=False, policies={"bob": Policy(open=True)})
    procs = _start(processes, cfgs, ["alice", "bob"])
    with _member(tmp_path, cfgs, "bob", "alice") as bob:
        for i, extra in enumerate(({}, {"timeout": 30.0}, {"protocol": "keyword", "params": '{"key_bits": 2048}'})):
            roles = ECHO if extra.get("protocol") is None else {"alice": "bob", "bob": "alice"}
            code, details = call_unary(bob, MAILBOX + "Propose", _spec(f"bob.deny-{i}", roles, **extra))
            assert code == C.PERMISSION_DENIED, (code, details)
            assert "rule policy)" in details and "deny by default" in details
        seeded = tpb.SessionSpec.FromString(_spec("bob.deny-seeded", ECHO))
        seeded.seed = 7
        code, details = call_unary(bob, MAILBOX + "Propose", seeded.SerializeToString())
        assert code == C.PERMISSION_DENIED and "rule policy)" in details
    rec = client.start_session(cfgs["alice"], "net-echo", ECHO, {"n": 2}, session_id="own-1", timeout=30)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0]
    # bob has no say over alice, and alice's operator none over bob: bob's own operator can't use alice
    with pytest.raises(Exception) as ei:
        client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "alice"}, {}, session_id="bob-1", timeout=30)
    assert getattr(ei.value, "code", "") == "PERMISSION_DENIED" and "party 'alice'" in str(ei.value)
    refused = _events(tmp_path / "state" / "alice", "refused")
    assert {e["rule"] for e in refused} == {"policy"} and len(refused) >= 4
    procs["alice"].terminate()
    assert "has no [policy]: it refuses EVERY session a peer proposes" in procs["alice"].output()


# ------------------------------------------------------------------ 5. approval waits properly
PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}
PI_PARAMS = {"n_parties": 2, "key_bits": 512, "tol": 1e-9, "max_iterations": 200}


def _pi_deployment(tmp_path, *, approval=(), limits=None, budgets=None):
    """trent, alice, bob with policies admitting exactly the power-iteration layout (``approval``:
    parties whose operator approves by hand) and a small data block each."""
    from dataclasses import replace

    import numpy as np

    from smcdp.cli.demo.common import governed

    rng = np.random.default_rng(2)
    inputs = {"trent": {}}
    for name, n in (("alice", 4), ("bob", 3)):
        np.save(tmp_path / f"{name}.npy", rng.normal(size=(5, n)))
        inputs[name] = {"power-iteration": {"data": tmp_path / f"{name}.npy"}}
    options, _ = governed("power-iteration", PI_ROLES, PI_PARAMS, initiator="trent", seed=None)
    policies = {
        p: replace(pol, approval="operator") if p in approval else pol for p, pol in options["policies"].items()
    }
    return make_deployment(
        tmp_path, ["trent", "alice", "bob"], inputs=inputs, policies=policies, limits=limits, budgets=budgets
    )


def _status(cfg, sid):
    try:
        return client.get_status(cfg, sid)
    except Exception:  # noqa: BLE001 - not there yet
        return {}


def _wait_for(what, predicate, timeout=60.0):
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.2)


def _start_pi(cfgs, sid):
    """trent's operator starts a power-iteration session in the background: (thread, its outcome)."""
    out = {}

    def start():
        try:
            out["rec"] = client.start_session(
                cfgs["trent"], "power-iteration", PI_ROLES, PI_PARAMS, session_id=sid, timeout=60
            )
        except Exception as exc:  # noqa: BLE001 - looked at by the test
            out["error"] = exc

    th = threading.Thread(target=start)
    th.start()
    return th, out


def _approve_and_succeed(cfgs, party, sid, th, out):
    """``party``'s operator approves (by the full id: a short name is refused, naming the candidates, so a
    member cannot have its own session of that name approved instead); the session ends succeeded."""
    with pytest.raises(InvalidMessage, match=f"full id only: '{sid}' could be trent.{sid}"):
        client.approve_session(cfgs[party], sid)
    client.approve_session(cfgs[party], f"trent.{sid}")
    th.join(120)
    assert out.get("rec", {}).get("state") == "succeeded", out
    for p in ("alice", "bob"):  # a participant's role may end a moment after the initiator's
        _wait_for(f"{p}'s record", lambda p=p: client.get_result(cfgs[p], sid)["state"] == "succeeded")


def test_an_operator_approving_after_the_proposal_grace_still_gets_the_session(tmp_path, processes):
    """bob's operator approves by hand and takes longer than the proposal grace (3 s here, 120 s by
    default).  alice, who accepted first, keeps the session prepared and says whom it waits for, as
    do trent and bob; after the approval the session runs to its normal result.  On main alice
    expired it after the grace ("never began … within the proposal grace")."""
    from smcdp.net.limits import Limits

    cfgs = _pi_deployment(tmp_path, approval=("bob",), limits=Limits(proposal_grace_seconds=3.0))
    _start(processes, cfgs, ["trent", "alice", "bob"])
    th, out = _start_pi(cfgs, "slow-ok")
    _wait_for("bob's pending proposal", lambda: _status(cfgs["bob"], "slow-ok").get("state") == "pending")
    time.sleep(3.0 + 6.0)  # well past alice's proposal grace
    st = {}
    for p in ("trent", "alice", "bob"):  # (a status call may time out on a loaded host: asked again)
        _wait_for(f"{p}'s status", lambda p=p: st.update({p: _status(cfgs[p], "slow-ok")}) or st[p])
    assert st["alice"]["state"] == "prepared" and st["alice"]["waiting_for"] == "bob", st["alice"]
    assert st["trent"]["state"] == "prepared" and st["trent"]["waiting_for"] == "bob", st["trent"]
    assert st["bob"]["state"] == "pending" and st["bob"]["waiting_for"] == "bob", st["bob"]
    _approve_and_succeed(cfgs, "bob", "slow-ok", th, out)


def test_a_session_that_reserves_no_budget_is_proposed_to_everyone_at_once(tmp_path, processes):
    """Issue 26: an exact power-iteration session reserves no budget, so trent proposes it to alice and
    bob at once (one round trip of set-up, not one per participant).  alice -- first in name order --
    waits for her operator, and bob has accepted meanwhile: he holds the session prepared and says
    whom it waits for.  Proposed one at a time (as a session that reserves budget still is), bob would
    not have heard of it before alice's approval."""
    cfgs = _pi_deployment(tmp_path, approval=("alice",))
    _start(processes, cfgs, ["trent", "alice", "bob"])
    th, out = _start_pi(cfgs, "at-once")
    _wait_for("alice's pending proposal", lambda: _status(cfgs["alice"], "at-once").get("state") == "pending")
    _wait_for(
        "bob told whom the session waits for", lambda: _status(cfgs["bob"], "at-once").get("waiting_for") == "alice"
    )
    assert _status(cfgs["bob"], "at-once")["state"] == "prepared"
    _approve_and_succeed(cfgs, "alice", "at-once", th, out)


def test_a_refusal_at_one_party_aborts_the_proposals_made_at_once(tmp_path, processes):
    """Proposed at once, one refusal (bob's operator rejects) ends the session everywhere: alice, whose
    operator has not decided yet, has her proposal withdrawn, and the initiator names bob."""
    cfgs = _pi_deployment(tmp_path, approval=("alice", "bob"))
    _start(processes, cfgs, ["trent", "alice", "bob"])
    th, out = _start_pi(cfgs, "refused")
    for p in ("alice", "bob"):
        _wait_for(f"{p}'s pending proposal", lambda p=p: _status(cfgs[p], "refused").get("state") == "pending")
    # the initiator names both operators it waits for (not whichever notice came last)
    _wait_for(
        "trent waiting for both", lambda: _status(cfgs["trent"], "trent.refused").get("waiting_for") == "alice, bob"
    )
    client.reject_session(cfgs["bob"], "trent.refused", reason="not this week")
    th.join(120)
    assert "error" in out and getattr(out["error"], "code", "") == "PERMISSION_DENIED", out
    assert "bob" in str(out["error"]) and "not this week" in str(out["error"]), out
    _wait_for("alice's proposal withdrawn", lambda: _status(cfgs["alice"], "refused").get("state") != "pending")


def test_an_exact_session_refused_elsewhere_gives_alice_her_place_back(tmp_path, processes):
    """alice admits an exact session at once (it counts against her max_exact_sessions); bob's operator
    refuses it; the session never began at alice, so her audit trail gives the place back."""
    cfgs = _pi_deployment(tmp_path, approval=("bob",))
    _start(processes, cfgs, ["trent", "alice", "bob"])
    th, out = _start_pi(cfgs, "given-back")
    _wait_for("bob's pending proposal", lambda: _status(cfgs["bob"], "given-back").get("state") == "pending")
    client.reject_session(cfgs["bob"], "trent.given-back", reason="no")
    th.join(120)
    assert getattr(out.get("error"), "code", "") == "PERMISSION_DENIED", out
    alice = load_config(cfgs["alice"]).data_dir
    assert [e.get("exact") for e in _events(alice, "accepted") if e["session"] == "trent.given-back"] == [True]
    _wait_for(
        "alice's place given back",
        lambda: [e["session"] for e in _events(alice, "exact-returned")] == ["trent.given-back"],
    )


def test_a_refusal_is_reported_while_another_party_cannot_be_reached(tmp_path, processes):
    """Proposed at once to alice, whose operator refuses, and to bob, who is down: the refusal is reported
    within seconds (the call retrying bob is stopped after timeouts.connect_seconds), not when bob's
    retries reach the session's deadline -- which alice's wait for her operator had moved to the approval
    timeout."""
    cfgs = _pi_deployment(tmp_path, approval=("alice",))
    _start(processes, cfgs, ["trent", "alice"])  # bob is down
    t0 = time.monotonic()
    th, out = _start_pi(cfgs, "bob-down")
    _wait_for("alice's pending proposal", lambda: _status(cfgs["alice"], "bob-down").get("state") == "pending")
    client.reject_session(cfgs["alice"], "trent.bob-down", reason="not now")
    th.join(120)
    assert getattr(out.get("error"), "code", "") == "PERMISSION_DENIED" and "not now" in str(out["error"]), out
    assert time.monotonic() - t0 < 40, time.monotonic() - t0


# ------------------------------------------------------------------ 3. resume is admission again
def _abort(ch, sid, code="UNAVAILABLE"):
    return call_unary(
        ch, MAILBOX + "Abort", tpb.AbortRequest(session_id=sid, code=code, message="gone").SerializeToString()
    )


def _resume(ch, sid):
    return call_unary(ch, MAILBOX + "Resume", tpb.SessionRef(session_id=sid).SerializeToString())


def _failed_resumably(cfg, sid):
    _wait_for(f"{sid} to fail resumably", lambda: client.get_result(cfg, sid).get("state") == "failed")
    rec = client.get_result(cfg, sid)
    assert rec["resumable"] is True, rec
    return rec


def _junk(sid, tag, nbytes, chunk=1 << 20):
    data = b"\x00" * nbytes
    n = -(-nbytes // chunk)
    return [
        tpb.Envelope(
            session_id=sid,
            tag=tag,
            type_name="smcdp.v1.Blobs",
            chunk_index=i,
            chunk_count=n,
            total_size=nbytes,
            data=data[i * chunk : (i + 1) * chunk],
        ).SerializeToString()
        for i in range(n)
    ]


def _restart(processes, procs, cfgs, name):
    assert procs[name].terminate() == 0, procs[name].output()
    procs[name] = processes(name, cfgs[name], use_launcher=False)
    client.wait_healthy(cfgs[name], timeout=60)


def _set_limits(cfg_path, **values):
    """Rewrite keys of a config's [limits] table (the TOML the deployment wrote)."""
    import re

    text = cfg_path.read_text()
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value}", text)
        assert n == 1, key
    cfg_path.write_text(text)


def test_a_resume_is_admitted_again(tmp_path, processes):
    """alice (a member with a valid certificate) makes bob's sessions fail resumably -- Propose, then
    Abort UNAVAILABLE -- and resumes them.  On main every resume was accepted: past pending_total, with
    a renewed deadline, any number of times, with a fresh envelope each time, under yesterday's
    policy.  Now each resume is admitted like a proposal."""
    from smcdp.net.limits import Limits

    # (pending_total 4: alice's share among the two peers bob's open policy admits is 2, her pending_per_peer)
    limits = Limits(pending_per_peer=2, pending_total=4, max_restarts=2, max_session_mib=4, max_message_mib=4)
    cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"], limits=limits)
    procs = _start(processes, cfgs, ["bob", "charlie"])
    bob_dir = tmp_path / "state" / "bob"
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        # six resumable failures; a proposal's slot is free again once it failed
        t0 = None
        for i in range(6):
            assert call_unary(alice, MAILBOX + "Propose", _spec(f"alice.r-{i}", ECHO, timeout=40.0))[0] == C.OK
            if t0 is None:
                t0 = time.monotonic()  # r-0's deadline was set before this: at most t0 + 40
            assert _abort(alice, f"alice.r-{i}")[0] == C.OK
            _failed_resumably(cfgs["bob"], f"alice.r-{i}")
        time.sleep(max(0.0, t0 + 4.0 - time.monotonic()))  # a renewed deadline would be >= t0 + 44
        codes = [_resume(alice, f"alice.r-{i}") for i in range(4)]
        assert [c for c, _ in codes[:2]] == [C.OK, C.OK], codes
        for code, details in codes[2:]:  # two of alice's sessions wait for Begin: pending_per_peer
            assert code == C.RESOURCE_EXHAUSTED and "rule limits.pending)" in details, (code, details)
        # the deadline is the one the session had (proposed before t0), not a new 40 s from the resume:
        # seconds left, computed after t1, is at most t0 + 40 - t1 (+ its rounding to 0.1 s)
        t1 = time.monotonic()
        left = client.get_status(cfgs["bob"], "alice.r-0")["seconds_left"]
        assert left <= 40.0 - (t1 - t0) + 0.1, (left, t1 - t0)
        # another peer's session still gets a slot and runs
        rec = client.start_session(
            cfgs["charlie"], "net-echo", {"a": "charlie", "b": "bob"}, {"n": 2}, session_id="honest-1", timeout=30
        )
        assert rec["state"] == "succeeded"
        # restarts are bounded: r-0 resumed once; abort and resume it until limits.max_restarts (2) says no
        assert _abort(alice, "alice.r-0")[0] == C.OK
        _failed_resumably(cfgs["bob"], "alice.r-0")
        assert _resume(alice, "alice.r-0")[0] == C.OK  # restart 2
        assert _abort(alice, "alice.r-0")[0] == C.OK
        _failed_resumably(cfgs["bob"], "alice.r-0")
        code, details = _resume(alice, "alice.r-0")
        assert code == C.RESOURCE_EXHAUSTED and "rule limits.max_restarts)" in details, (code, details)
        # journaled bytes count against the envelope: 3 MiB into r-4, abort, resume, 3 MiB more is refused
        assert _abort(alice, "alice.r-1")[0] == C.OK  # frees alice's second slot
        _failed_resumably(cfgs["bob"], "alice.r-1")
        assert _resume(alice, "alice.r-4")[0] == C.OK
        from tests.support.boundary import call_deliver

        assert call_deliver(alice, _junk("alice.r-4", "junk-1", 3 << 20))[0] == C.OK
        assert _abort(alice, "alice.r-4")[0] == C.OK
        _failed_resumably(cfgs["bob"], "alice.r-4")
        assert _resume(alice, "alice.r-4")[0] == C.OK
        code, details = call_deliver(alice, _junk("alice.r-4", "junk-2", 3 << 20))
        assert code == C.RESOURCE_EXHAUSTED and "past its budget" in details, (code, details)
        assert _abort(alice, "alice.r-4")[0] == C.OK
        _failed_resumably(cfgs["bob"], "alice.r-4")
    # bob restarts with a smaller envelope (and room for restarts): a journal holding more than it
    # allows is not reloaded at all
    _set_limits(cfgs["bob"], max_session_mib=1, max_message_mib=1, max_restarts=5)
    _restart(processes, procs, cfgs, "bob")
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        code, details = _resume(alice, "alice.r-4")
        assert code == C.RESOURCE_EXHAUSTED and "rule envelope)" in details, (code, details)
    # and with today's policy: bob's operator removed [policy] (deny by default) and restarted
    text = cfgs["bob"].read_text()
    policy = '[policy]\napproval = "auto"\nallow_seeded = false\nopen = true\n'
    assert policy in text
    cfgs["bob"].write_text(text.replace(policy, ""))
    assert load_config(cfgs["bob"]).policy is None
    _restart(processes, procs, cfgs, "bob")
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        code, details = _resume(alice, "alice.r-5")
        # refused by today's policy, but not for ever: the session stays resumable (it used to be refused
        # as PERMISSION_DENIED, and still after the policy was restored)
        assert code == C.UNAVAILABLE and "rule policy)" in details and "stays resumable" in details, (code, details)
    cfgs["bob"].write_text(text)  # the operator restores the policy
    _restart(processes, procs, cfgs, "bob")
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        assert _resume(alice, "alice.r-5")[0] == C.OK
    refused = {e["rule"] for e in _events(bob_dir, "refused") if e.get("how") == "resume"}
    assert {"limits.pending", "limits.max_restarts", "envelope", "policy"} <= refused, refused


def test_a_participant_failing_a_session_again_and_again_uses_up_only_its_own_restarts(tmp_path, processes):
    """bob, a participant alice's policy admits, runs a modified net-echo whose role fails with UNAVAILABLE: he
    answers each run of alice's sessions with Abort UNAVAILABLE, and alice's operator resumes them.  Their
    restarts are charged to bob: his third failure of a session is not resumed, the refusal naming him and his
    count; but a session bob failed twice still comes back when alice's own process is killed (a restore, her
    failure).  With restarts counted as a whole, that restore was refused: bob had used up max_restarts."""
    from dataclasses import replace

    from smcdp.net.config import Timeouts
    from smcdp.net.limits import Limits
    from smcdp.runtime.config import dump_config
    from tests.support.deployment import ECHO_PLUGIN

    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob"],
        limits=Limits(max_restarts=2),
        # a grace that outlasts alice's restart on a busy machine
        timeouts=Timeouts(connect_seconds=3, session_seconds=60, rpc_seconds=30, peer_grace_seconds=120),
    )
    hostile = (ECHO_PLUGIN, "tests.support.unavailable_echo_plugin")
    dump_config(replace(load_config(cfgs["bob"]), plugins=hostile), cfgs["bob"])
    # while they exist, bob's role aborts every run / waits before it plays
    # (the names tests/support/unavailable_echo_plugin.py looks for; the module is not imported here: it would
    # replace net-echo in this process too)
    switch, hold = tmp_path / "state" / "bob" / "abort-sessions", tmp_path / "state" / "bob" / "hold-sessions"
    procs = _start(processes, cfgs, ["alice", "bob"])
    switch.touch()

    def failed_by_bob(sid, outcome):
        assert outcome.get("code") == "UNAVAILABLE" and "role b (bob) failed" in outcome["message"], outcome
        assert _failed_resumably(cfgs["alice"], sid)["error"]["origin"] == "bob"

    def start(sid):
        return client.start_session(cfgs["alice"], "net-echo", ECHO, {"n": 3}, session_id=sid, timeout=240)

    def resume(sid):
        return client.resume_session(cfgs["alice"], sid, timeout=240)

    # bob fails "worn" at its start and at each of its two resumes; the third resume is not his to have
    failed_by_bob("worn", _outcome(lambda: start("worn")))
    for _ in range(2):
        failed_by_bob("worn", _outcome(lambda: resume("worn")))
    refused = _outcome(lambda: resume("worn"))
    assert refused.get("code") == "RESOURCE_EXHAUSTED", refused
    assert "restarted 2 times at party 'alice' after failures of 'bob'" in refused["message"], refused
    assert "limits.max_restarts" in refused["message"], refused
    # bob fails "crash" twice too, then plays his role; alice's process is killed before he is done
    failed_by_bob("crash", _outcome(lambda: start("crash")))
    failed_by_bob("crash", _outcome(lambda: resume("crash")))
    hold.touch()
    switch.unlink()
    call = client.begin_resume(cfgs["alice"], "crash", timeout=240)
    _wait_for("bob to play his role", lambda: _status(cfgs["bob"], "crash").get("step") == "held")
    procs["alice"].kill()
    procs["alice"] = processes("alice", cfgs["alice"], use_launcher=False)  # restores "crash" at start-up
    client.wait_healthy(cfgs["alice"], timeout=120)
    hold.unlink()
    rec = call.result()  # the operator's `session resume` follows alice through her restart
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0, 5.0], rec
    assert rec["restarts"] == 3, rec  # bob's two and alice's own
    _wait_for("bob's record", lambda: client.get_result(cfgs["bob"], "crash")["state"] == "succeeded")


# ------------------------------------------------------------------ 4. abort releases
DPA_ROLES = {"charlie": "alice", "dave": "carol", "party1": "bob", "party2": "dan"}
DPA_PARAMS = {"n_parties": 2, "dim": 3, "epsilon": 1.0, "lam": 0.1, "key_bits": 512, "dgk_bits": 512, "dgk_t": 96}


def _dpa_bob(tmp_path, limits=None):
    """bob holds data in dp-aggregate sessions alice initiates; his budget admits one session (ε = 1)."""
    import numpy as np

    from smcdp.cli.demo.common import governed
    from smcdp.runtime.governance.charges import BudgetConfig

    np.savez(tmp_path / "bob.npz", X=np.zeros((60, 3)), y=np.ones(60))
    options, _ = governed("dp-aggregate", DPA_ROLES, DPA_PARAMS, initiator="alice", seed=None)
    return make_deployment(
        tmp_path,
        ["alice", "bob", "carol", "dan"],
        limits=limits,
        inputs={"bob": {"dp-aggregate": {"data": tmp_path / "bob.npz"}}},
        policies=options["policies"],
        budgets={"bob": BudgetConfig(dataset="bob", epsilon=1.0, delta=1e-6)},
    )


def _reservation(tmp_path, key):
    from smcdp.dp.ledger import Ledger

    return Ledger(tmp_path / "state" / "bob" / "ledger.sqlite").reservation("bob", key)


def test_an_abort_gives_the_reservation_back_and_the_checkpoint_goes_after_the_retention(tmp_path, processes):
    """alice proposes a dp-aggregate session to bob (ε = 1: all of bob's budget) and aborts it with
    UNAVAILABLE.  On main bob kept the reservation for ever (also across a restart), so the next
    honest session was refused for budget, and the checkpoint and journal stayed on disk for ever.
    Now the reservation goes back when the session fails, a resume reserves again, and the checkpoint
    is deleted limits.failed_retention_seconds after the failure -- every step in the audit trail."""
    from smcdp.net.limits import Limits

    # a retention no step before the restart can outlast: a-1's checkpoint must be there for its resume
    cfgs = _dpa_bob(tmp_path, limits=Limits(failed_retention_seconds=3600.0))
    procs = _start(processes, cfgs, ["bob"])
    spec = lambda sid: _spec(sid, DPA_ROLES, "dp-aggregate", json.dumps(DPA_PARAMS), 600.0)  # noqa: E731
    bob_dir = tmp_path / "state" / "bob"
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        assert call_unary(alice, MAILBOX + "Propose", spec("alice.a-1"))[0] == C.OK
        assert _reservation(tmp_path, "alice.a-1").state == "reserved"
        assert call_unary(alice, MAILBOX + "Propose", spec("alice.a-2"))[0] == C.RESOURCE_EXHAUSTED  # budget held
        assert _abort(alice, "alice.a-1")[0] == C.OK
        _failed_resumably(cfgs["bob"], "alice.a-1")
        # the record is published by the session, the reservation settled just after by the governor
        _wait_for(
            "alice.a-1's reservation to go back",
            lambda: _reservation(tmp_path, "alice.a-1").state == "released",
            timeout=10,
        )
        assert (bob_dir / "sessions" / "alice.a-1.d").is_dir()  # kept for a resume, for now
        # the honest next session is admitted (it reserves the whole budget in turn) ...
        assert call_unary(alice, MAILBOX + "Propose", spec("alice.a-2"))[0] == C.OK
        # ... so resuming a-1 is admitted again only if its cost fits: it does not
        code, details = _resume(alice, "alice.a-1")
        assert code == C.RESOURCE_EXHAUSTED and "rule budget)" in details, (code, details)
        assert _abort(alice, "alice.a-2", code="ABORTED")[0] == C.OK  # a final failure: nothing to keep
        _wait_for("alice.a-2 to end", lambda: client.get_result(cfgs["bob"], "alice.a-2").get("state") == "failed")
        # the record is published by the session, the reservation settled just after by the governor
        _wait_for(
            "alice.a-2's reservation to go back",
            lambda: _reservation(tmp_path, "alice.a-2").state == "released",
            timeout=10,
        )
        assert not (bob_dir / "sessions" / "alice.a-2.d").exists()
        assert _resume(alice, "alice.a-1")[0] == C.OK  # now it fits: reserved again
        assert _reservation(tmp_path, "alice.a-1/resume-1").state == "reserved"
    # kill -9 while the resumed session holds its reservation: restored, it keeps it; aborted, it goes back.
    # bob comes back with a short retention, for its part below
    _set_limits(cfgs["bob"], failed_retention_seconds=6.0)
    procs["bob"].kill()
    procs["bob"] = processes("bob", cfgs["bob"], use_launcher=False)
    client.wait_healthy(cfgs["bob"], timeout=60)
    assert _reservation(tmp_path, "alice.a-1/resume-1").state == "reserved"
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        assert _abort(alice, "alice.a-1")[0] == C.OK
    _wait_for(
        "alice.a-1's reservation to go back", lambda: _reservation(tmp_path, "alice.a-1/resume-1").state == "released"
    )
    # the retention (6 s) deletes the resumable checkpoint -- root key and journal -- and says so
    _wait_for(
        "alice.a-1's checkpoint to be deleted", lambda: not (bob_dir / "sessions" / "alice.a-1.d").exists(), timeout=40
    )
    deleted = _events(bob_dir, "checkpoint-deleted")
    assert [e["session"] for e in deleted] == ["alice.a-1"] and deleted[0]["resumable"] is True
    released = [e for e in _events(bob_dir, "released") if e["session"] == "alice.a-1"]
    assert len(released) == 2 and released[1]["key"] == "alice.a-1/resume-1"
    from smcdp.dp.ledger import Ledger

    st = Ledger(bob_dir / "ledger.sqlite").status("bob")
    assert (str(st.spent_epsilon), str(st.reserved_epsilon)) == ("0", "0")


# ------------------------------------------------------------------ 6. refusals and the approval queue
def test_a_refused_peers_flood_is_counted_not_written_line_by_line(tmp_path, processes):
    """500 refused proposals from one peer grew the audit log by 476 KB on main, each line fsync-ed.
    Now the first few per window are recorded in full and the rest are one counted event; the chain
    still verifies."""
    from smcdp.runtime.governance.audit import REFUSALS_IN_FULL, verify_log

    # bob's policy joins no protocol (and the echo plug-in has no summary a policy could admit)
    cfgs = make_deployment(tmp_path, ["alice", "bob"], policies={"bob": Policy()})
    procs = _start(processes, cfgs, ["bob"])
    bob_dir = tmp_path / "state" / "bob"
    before = (bob_dir / "audit.jsonl").stat().st_size
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        codes = {call_unary(alice, MAILBOX + "Propose", _spec(f"alice.f-{i}", ECHO))[0] for i in range(300)}
    assert codes == {C.FAILED_PRECONDITION}
    grown = (bob_dir / "audit.jsonl").stat().st_size - before
    assert grown < 2 * REFUSALS_IN_FULL * 600, grown  # a few KB, not 300 × 2 lines
    assert procs["bob"].terminate() == 0  # a stop writes the open window's count
    [summary] = _events(bob_dir, "refusals-summarised")
    assert summary["peer"] == "alice" and summary["refused"] == 300 - REFUSALS_IN_FULL
    assert summary["rules"] == {"summary": 300 - REFUSALS_IN_FULL}
    assert len(_events(bob_dir, "refused")) == REFUSALS_IN_FULL
    assert verify_log(bob_dir).ok


def test_the_approval_queue_holds_a_bounded_number_per_peer(tmp_path, processes):
    """One peer left 300 proposals waiting for bob's operator on main; now limits.pending_approvals_per_peer
    (8 by default) wait, the rest are refused with RESOURCE_EXHAUSTED, and another peer still gets in."""
    # an open test party whose operator approves every proposal by hand
    cfgs = make_deployment(
        tmp_path, ["alice", "bob", "charlie"], policies={"bob": Policy(open=True, approval="operator")}
    )
    assert load_config(cfgs["bob"]).policy.approval == "operator"
    _start(processes, cfgs, ["bob"])
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        replies = [call_unary(alice, MAILBOX + "Propose", _spec(f"alice.q-{i}", ECHO)) for i in range(30)]
    assert [c for c, _ in replies[:8]] == [C.OK] * 8  # pending
    for code, details in replies[8:]:
        assert code == C.RESOURCE_EXHAUSTED and "limits.pending_approvals_per_peer" in details, (code, details)
    pending = client.list_sessions(cfgs["bob"], pending_only=True)
    assert len(pending) == 8
    with _member(tmp_path, cfgs, "charlie", "bob") as charlie:
        assert call_unary(charlie, MAILBOX + "Propose", _spec("charlie.c-1", {"a": "charlie", "b": "bob"}))[0] == C.OK
    assert len(client.list_sessions(cfgs["bob"], pending_only=True)) == 9


# ------------------------------------------------------------------ 8. a witnessed audit trail
def _rechain(lines: list[dict]) -> tuple[bytes, bytes]:
    """A forger's consistent log and head: ``lines`` renumbered and re-hashed."""
    import hashlib

    from smcdp.runtime.governance.audit import GENESIS, encode

    prev, out = GENESIS, []
    for i, entry in enumerate(lines, 1):
        line = encode(dict(entry, seq=i, prev=prev))
        out.append(line)
        prev = hashlib.sha256(line).hexdigest()
    return b"".join(x + b"\n" for x in out), encode({"lines": len(out), "sha256": prev}) + b"\n"


def _verify_cli(*args):
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "smcdp", "audit", "verify", *args], capture_output=True, text=True, timeout=120
    )
    return p.returncode, p.stdout + p.stderr


def test_peers_witness_the_audit_head_so_truncation_or_a_rewrite_shows(tmp_path, processes):
    """After each session alice and bob exchange their audit heads, signed with their TLS keys.  Whoever
    controls alice's disk truncates her log and rewrites audit.head to match, then rewrites history
    consistently: `smcdp audit verify` alone says "intact" both times (as on main), `--witnesses`
    (bob asked over mutual TLS) and `--witness-file` (bob's file) say TAMPERED.  A deleted log stops
    alice at start until her operator starts a new one with `smcdp audit new`, which the new log
    records; the witnesses then say the log was replaced."""
    from smcdp.runtime.governance.audit import verify_log

    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    procs = _start(processes, cfgs, ["alice", "bob"])
    alice_dir, bob_dir = tmp_path / "state" / "alice", tmp_path / "state" / "bob"
    for i in range(2):
        rec = client.start_session(cfgs["alice"], "net-echo", ECHO, {"n": 2}, session_id=f"w-{i}", timeout=30)
        assert rec["state"] == "succeeded"
    held = bob_dir / "witness" / "alice.json"

    def witnessed_lines():
        try:
            heads = json.loads(held.read_text())["heads"]
        except (OSError, ValueError):
            return 0
        return max(json.loads(h["statement"])["lines"] for h in heads.values())

    _wait_for(
        "bob to hold alice's head of the second session",
        lambda: witnessed_lines() and (alice_dir / "witness" / "bob.json").exists() and "alice.w-1" in held.read_text(),
    )
    n = witnessed_lines()
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 0 and "agree with the log" in out, out
    assert procs["alice"].terminate() == 0

    # truncation plus a rewritten head: intact on its own, contradicted by bob
    entries = [json.loads(x) for x in (alice_dir / "audit.jsonl").read_bytes().splitlines()]
    original = (alice_dir / "audit.jsonl").read_bytes(), (alice_dir / "audit.head").read_bytes()
    log, head = _rechain(entries[: n - 2])
    (alice_dir / "audit.jsonl").write_bytes(log)
    (alice_dir / "audit.head").write_bytes(head)
    assert verify_log(alice_dir).ok
    code, out = _verify_cli("--config", str(cfgs["alice"]))
    assert code == 0 and "intact" in out
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 1 and "it was truncated" in out and "TAMPERED" in out, out
    # a consistent rewrite of history (an event changed, every later line re-chained)
    forged = [
        dict(e, state="failed") if e.get("session") == "alice.w-0" and e["event"] == "session-end" else e
        for e in entries
    ]
    assert forged != entries
    log, head = _rechain(forged)
    (alice_dir / "audit.jsonl").write_bytes(log)
    (alice_dir / "audit.head").write_bytes(head)
    assert verify_log(alice_dir).ok
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 1 and "the log was rewritten" in out, out
    # the same from bob's file, with bob stopped (handed over by bob's operator)
    assert procs["bob"].terminate() == 0
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witness-file", str(held))
    assert code == 1 and "the log was rewritten" in out, out
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 4 and "could not be asked" in out, out
    (alice_dir / "audit.jsonl").write_bytes(original[0])
    (alice_dir / "audit.head").write_bytes(original[1])
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witness-file", str(held))
    assert code == 0, out

    # a deleted log: alice refuses to start; her operator starts a new one, on the record
    (alice_dir / "audit.jsonl").unlink()
    (alice_dir / "audit.head").unlink()
    refused = processes("alice", cfgs["alice"], use_launcher=False)
    assert refused.proc.wait(60) != 0
    assert "is missing although this party kept one before" in refused.output()
    import subprocess
    import sys

    p = subprocess.run(
        [sys.executable, "-m", "smcdp", "audit", "new", "--config", str(cfgs["alice"]), "--reason", "disk replaced"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    first = json.loads((alice_dir / "audit.jsonl").read_bytes().splitlines()[0])
    assert first["event"] == "log-started" and first["reason"] == "disk replaced"
    _start(processes, cfgs, ["alice", "bob"])
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 1 and "of another log (this log was started anew by its operator" in out, out


def test_a_witness_returning_one_head_many_times_counts_once(tmp_path, processes):
    """bob answers GetWitnessed with the one head he holds for alice 2,003 times (a modified servicer,
    tests/support/repeating_witness.py); charlie is an honest witness.  alice's `smcdp audit verify
    --witnesses` reports each witness's verdict by name and counts bob once -- "2 distinct witness(es)
    agree", not 2,004 agreements -- and, once alice's log is cut back to what bob witnessed, bob's copies
    outweigh nothing: charlie contradicts, TAMPERED, one of two witnesses."""
    from dataclasses import replace

    from smcdp.runtime.config import dump_config
    from smcdp.runtime.governance.audit import verify_log
    from tests.support.deployment import ECHO_PLUGIN

    copies = 2003  # tests/support/repeating_witness.COPIES (not imported: it would patch this process's store)

    cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"])
    hostile = (ECHO_PLUGIN, "tests.support.repeating_witness")
    dump_config(replace(load_config(cfgs["bob"]), plugins=hostile), cfgs["bob"])
    procs = _start(processes, cfgs, ["alice", "bob", "charlie"])
    alice_dir = tmp_path / "state" / "alice"
    for peer in ("bob", "charlie"):  # alice's head is witnessed at the end of each session
        rec = client.start_session(
            cfgs["alice"], "net-echo", {"a": "alice", "b": peer}, {"n": 2}, session_id=f"w-{peer}", timeout=30
        )
        assert rec["state"] == "succeeded"
        held, sid = tmp_path / "state" / peer / "witness" / "alice.json", f"alice.w-{peer}"
        _wait_for(f"{peer} to hold alice's head", lambda held=held, sid=sid: held.exists() and sid in held.read_text())
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 0, out
    assert f"peer bob: agrees ({copies} head(s))" in out and "peer charlie: agrees (1 head(s))" in out, out
    assert f"2 distinct witness(es) agree with the log ({copies + 1} heads): peer bob, peer charlie" in out, out
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses", "--json")
    by = json.loads(out)["by_witness"]
    assert {w: (v["verdict"], v["heads"]) for w, v in by.items()} == {
        "peer bob": ("agrees", copies),
        "peer charlie": ("agrees", 1),
    }, by
    # alice's log cut back to the lines bob witnessed (its head rewritten to match): intact on its own, bob's
    # copies agree, charlie's one head says it was truncated
    assert procs["alice"].terminate() == 0
    [bob_saw] = {json.loads(h["statement"])["lines"] for h in _held(tmp_path / "state" / "bob", "alice")}
    entries = [json.loads(x) for x in (alice_dir / "audit.jsonl").read_bytes().splitlines()]
    log, head = _rechain(entries[:bob_saw])
    (alice_dir / "audit.jsonl").write_bytes(log)
    (alice_dir / "audit.head").write_bytes(head)
    assert verify_log(alice_dir).ok
    code, out = _verify_cli("--config", str(cfgs["alice"]), "--witnesses")
    assert code == 1 and "it was truncated" in out, out
    assert f"peer bob: agrees ({copies} head(s))" in out and "peer charlie: contradicts (1 head(s))" in out, out
    assert f"TAMPERED: 1 of 2 witness(es) contradict the log ({copies + 1} heads): peer charlie" in out, out
    assert out.count("peer bob witnessed") == 1 and f"matches (x{copies})" in out, out  # one line, not 2,003


def _held(data_dir, peer):
    """The heads a party's witness file holds for ``peer``."""
    return list(json.loads((data_dir / "witness" / f"{peer}.json").read_text())["heads"].values())


# ------------------------------------------------------------------ 9. the console authenticates its clients
PRIVATE_PAGES = ("/", "/peers", "/budgets", "/audit", "/metrics", "/sessions/x")


def _https(url, *, cafile, cert=None, token=None):
    """(status, body) of one HTTPS GET; raises OSError (ssl.SSLError, URLError) if TLS refuses."""
    import ssl
    import urllib.error
    import urllib.request

    ctx = ssl.create_default_context(cafile=str(cafile))
    ctx.check_hostname = False
    if cert is not None:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(req, timeout=10, context=ctx) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_the_console_shows_nothing_to_a_client_that_has_not_authenticated(tmp_path, processes):
    """[console.tls] on main served /, /peers, /budgets, /audit and /metrics to any client without a
    certificate.  Now: with client_ca an operators' CA, a client without a certificate from it gets no
    TLS session at all; with the federation's CA as client_ca and a bearer token file, a client gets
    401 on every page unless it presents this party's own certificate or the token (a member's
    certificate is not enough).  Every page warns that the party's policy is open."""
    import os
    import secrets
    import ssl

    from smcdp.net.tls import generate_deployment
    from smcdp.runtime.console.config import ConsoleConfig, ConsoleTls
    from smcdp.runtime.local import free_tcp_port, write_local_deployment

    ops = tmp_path / "ops"
    generate_deployment(ops, ["operator"])
    certs = tmp_path / "certs"
    port = free_tcp_port()
    console = ConsoleConfig(
        listen=f"127.0.0.1:{port}",
        refresh_seconds=0,
        tls=ConsoleTls(certs / "alice.crt", certs / "alice.key", client_ca=ops / "ca.crt"),
    )
    cfgs = write_local_deployment(tmp_path, ["alice", "bob"], open_policy=True, consoles={"alice": console})
    procs = _start(processes, cfgs, ["alice"])
    base = f"https://127.0.0.1:{port}"
    operator = (ops / "operator.crt", ops / "operator.key")
    for path in PRIVATE_PAGES[:5]:
        for cert in (None, (certs / "bob.crt", certs / "bob.key")):  # no certificate; a member's
            with pytest.raises((ssl.SSLError, OSError)):
                _https(base + path, cafile=certs / "ca.crt", cert=cert)
        status, body = _https(base + path, cafile=certs / "ca.crt", cert=operator)
        assert status == 200, (path, status)
    status, body = _https(base + "/", cafile=certs / "ca.crt", cert=operator)
    assert "!!! party alice has [policy] open = true: ANY peer" in body
    assert procs["alice"].terminate() == 0

    # the federation's CA as client_ca, and a bearer token for scripts
    token = secrets.token_urlsafe(32)
    token_file = tmp_path / "console.token"
    token_file.write_text(token + "\n")
    os.chmod(token_file, 0o600)
    text = cfgs["alice"].read_text()
    text = text.replace(
        f'client_ca = "{os.path.relpath(ops / "ca.crt", cfgs["alice"].parent)}"', 'client_ca = "../certs/ca.crt"'
    )
    text = text.replace("[console.tls]", 'token_file = "../console.token"\n\n[console.tls]')
    cfgs["alice"].write_text(text)
    cfg = load_config(cfgs["alice"])
    assert cfg.console.tls.client_ca == certs / "ca.crt" and cfg.console.token_file == token_file
    procs["alice"] = processes("alice", cfgs["alice"], use_launcher=False)
    client.wait_healthy(cfgs["alice"], timeout=60)
    _wait_for("the console", lambda: _https(base + "/healthz", cafile=certs / "ca.crt")[0] == 200)
    for path in PRIVATE_PAGES:
        for how in ({}, {"cert": (certs / "bob.crt", certs / "bob.key")}, {"token": "x" * 43}, {"token": token[:-1]}):
            status, body = _https(base + path, cafile=certs / "ca.crt", **how)
            assert status == 401 and body == "authentication required\n", (path, how, status, body)
    for how in ({"token": token}, {"cert": (certs / "alice.crt", certs / "alice.key")}):
        status, body = _https(base + "/", cafile=certs / "ca.crt", **how)
        assert status == 200 and "party alice" in body, how
        assert _https(base + "/metrics", cafile=certs / "ca.crt", **how)[0] == 200
    # a token file others can read is refused at start
    os.chmod(token_file, 0o644)
    assert procs["alice"].terminate() == 0
    bad = processes("alice", cfgs["alice"], use_launcher=False)
    assert bad.proc.wait(60) != 0 and "readable by others" in bad.output()


def test_a_resume_a_participant_has_no_room_for_now_stays_resumable(tmp_path, processes):
    """alice's operator resumes a session while bob has no slot for it (a proposal of alice's waiting for
    Begin at bob holds her share of bob's pending slots: pending_total 2 shared by the two peers bob admits;
    charlie can no longer fill them for her): bob refuses with RESOURCE_EXHAUSTED, and the session stays
    resumable everywhere instead of ending for good; once bob has room, the same resume completes it."""
    import signal

    from smcdp.net.config import Timeouts
    from smcdp.net.limits import Limits

    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob", "charlie"],
        limits=Limits(pending_per_peer=2, pending_total=2),
        timeouts=Timeouts(connect_seconds=3, session_seconds=60, rpc_seconds=30, peer_grace_seconds=3),
    )
    procs = _start(processes, cfgs, ["alice", "bob"])
    # bob's role holds its loop for 4 s, so that the session is running at bob when bob is stopped (block_seconds:
    # without spinning a core, which nothing here needs)
    th, _ = _echo_running_at_bob(cfgs, "busy-1", {"block_seconds": 4.0}, timeout=60)
    procs["bob"].proc.send_signal(signal.SIGSTOP)  # silent past alice's grace (3 s)
    time.sleep(8.0)
    procs["bob"].proc.send_signal(signal.SIGCONT)
    th.join(60)
    _failed_resumably(cfgs["alice"], "busy-1")
    _failed_resumably(cfgs["bob"], "busy-1")
    with _member(tmp_path, cfgs, "alice", "bob") as alice:
        assert call_unary(alice, MAILBOX + "Propose", _spec("alice.c-0", {"a": "alice", "b": "bob"}))[0] == C.OK
        rec = _outcome(lambda: client.resume_session(cfgs["alice"], "busy-1", timeout=60))
        assert rec["code"] == "UNAVAILABLE" and "RESOURCE_EXHAUSTED" in rec["message"], rec
        assert "stays resumable" in rec["message"]
        for party in ("alice", "bob"):
            assert client.get_result(cfgs[party], "busy-1")["resumable"] is True
        assert _abort(alice, "alice.c-0", code="ABORTED")[0] == C.OK
    rec = client.resume_session(cfgs["alice"], "busy-1", timeout=60)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0, 5.0]


def _echo_running_at_bob(cfgs, sid, params, timeout):
    """alice's operator starts a net-echo session with bob in the background; returns once bob runs its role:
    (the thread, a dict that gets its outcome as ``rec``)."""
    out: dict = {}
    th = threading.Thread(
        target=lambda: out.update(
            rec=_outcome(
                lambda: client.start_session(cfgs["alice"], "net-echo", ECHO, params, session_id=sid, timeout=timeout)
            )
        )
    )
    th.start()
    _wait_for("bob to run its role", lambda: _status(cfgs["bob"], sid).get("state") == "running")
    return th, out


def _outcome(call):
    """The record, or the error's code and message."""
    try:
        return call()
    except Exception as exc:  # noqa: BLE001 - the test looks at it
        return {"code": getattr(exc, "code", type(exc).__name__), "message": str(exc)}


def test_a_restart_refused_by_todays_policy_waits_resumably_and_continues_once_it_admits_it(tmp_path, processes):
    """The restart path of a resume's admission: bob is killed while it runs a session, and comes back with a
    policy that no longer admits it (its operator removed [policy]).  The session must not be reopened against
    today's policy -- nor end for good: it fails resumably, naming the rule and saying it stays resumable; once
    the policy is restored, the initiator's resume ends it with the undisturbed result (before, a restart
    refused by today's policy ended the session for good, and it was still refused after the restore)."""
    from smcdp.net.config import Timeouts

    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob"],
        timeouts=Timeouts(connect_seconds=3, session_seconds=120, rpc_seconds=30, peer_grace_seconds=30),
    )
    procs = _start(processes, cfgs, ["alice", "bob"])
    th, out = _echo_running_at_bob(cfgs, "kept-1", {"n": 3, "block_seconds": 8.0}, timeout=120)
    procs["bob"].kill()  # no shutdown: at its next start bob continues the session from its checkpoint
    text = cfgs["bob"].read_text()
    policy = '[policy]\napproval = "auto"\nallow_seeded = false\nopen = true\n'
    assert policy in text
    cfgs["bob"].write_text(text.replace(policy, ""))
    procs["bob"] = processes("bob", cfgs["bob"], use_launcher=False)
    client.wait_healthy(cfgs["bob"], timeout=60)
    rec = _failed_resumably(cfgs["bob"], "kept-1")
    assert "stays resumable" in rec["error"]["message"] and "policy" in rec["error"]["message"], rec["error"]
    th.join(90)
    assert out["rec"].get("code") == "UNAVAILABLE" and "stays resumable" in out["rec"]["message"], out["rec"]
    _failed_resumably(cfgs["alice"], "kept-1")
    cfgs["bob"].write_text(text)  # the operator restores the policy
    _restart(processes, procs, cfgs, "bob")
    rec = client.resume_session(cfgs["alice"], "kept-1", timeout=120)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0, 5.0], rec
