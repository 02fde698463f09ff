"""Issue 24, the transport half, against real party processes: no member can freeze a party (per-peer call
quotas with the operator's reserve, idle message calls closed), proposals in flight count, session ids
cannot be squatted and tell a non-participant nothing, every protocol's byte envelope holds, and bad
numbers are INVALID_ARGUMENT."""

from __future__ import annotations

import dataclasses
import time

import grpc
import pytest

from smcdp.net.config import Timeouts
from smcdp.net.limits import Limits
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.v1 import transport_pb2 as tpb
from tests.support.boundary import MAILBOX, StreamFlood, call_unary
from tests.support.deployment import make_deployment, raw_channel

C = grpc.StatusCode


@pytest.fixture
def parties(tmp_path, processes):
    """Party processes of a deployment alice, bob, charlie, dave (alice is the hostile member: she has a
    valid certificate but runs no process; the tests speak for her)."""
    def start(names=("bob", "charlie", "dave"), limits: Limits | None = None, grace: float = 30.0):
        cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie", "dave"], limits=limits,
                               timeouts=Timeouts(connect_seconds=3, session_seconds=60, rpc_seconds=30,
                                                 peer_grace_seconds=grace))
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
    (FAILED_PRECONDITION).  Meanwhile charlie runs a session with bob in which bob computes past the peer
    grace (so charlie's heartbeats must get through), bob's operator starts a session and reads its status,
    and bob's health check answers SERVING to its operator and to charlie.  On main the flood took every
    call slot (max_concurrent_rpcs): all of these were refused with RESOURCE_EXHAUSTED."""
    limits = _limits(call_idle_seconds=4.0)
    cfgs, _ = parties(limits=limits, grace=5.0)
    flood = StreamFlood(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob", count=520, reopen_delay=3.0).start()
    try:
        assert client.check_health(cfgs["bob"]) == "SERVING"                 # bob's operator
        assert client.check_health(cfgs["charlie"], peer="bob") == "SERVING"  # another member
        t0 = time.monotonic()
        rec = client.start_session(cfgs["charlie"], "net-echo", {"a": "charlie", "b": "bob"},
                                   {"n": 3, "busy_seconds": 8.0}, timeout=60)
        assert rec["state"] == "succeeded", rec.get("error")
        assert rec["result"]["y"] == [1.0, 3.0, 5.0]
        assert time.monotonic() - t0 > limits.call_idle_seconds   # the flood was renewed meanwhile
        own = client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "dave"}, {"n": 2}, timeout=30)
        assert own["state"] == "succeeded", own.get("error")
        assert client.get_status(cfgs["bob"], own["session_id"])["state"] == "succeeded"
        assert flood.open_now() <= limits.idle_calls_per_peer
    finally:
        flood.stop()
    assert flood.codes.get("RESOURCE_EXHAUSTED", 0) >= 520 - limits.idle_calls_per_peer, flood.codes
    assert "limits.idle_calls_per_peer" in flood.details["RESOURCE_EXHAUSTED"]
    # the admitted idle calls were ended by bob, after call_idle_seconds and not much later
    closed = flood.lifetimes.get("FAILED_PRECONDITION", [])
    assert closed and "limits.call_idle_seconds" in flood.details["FAILED_PRECONDITION"], flood.codes
    assert all(limits.call_idle_seconds - 0.5 < t < limits.call_idle_seconds + 10 for t in closed), closed
    assert set(flood.codes) <= {"RESOURCE_EXHAUSTED", "FAILED_PRECONDITION", "CANCELLED"}, flood.codes


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
    cases = [("dp-aggregate", DPA_ROLES, '{"n_parties": 2, "epsilon": 1e308}', "epsilon"),
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
             ("keyword", KW_ROLES, '{"key_bits": 1e308}', "key_bits")]
    with raw_channel(tmp_path / "certs", "alice", _address(cfgs, "bob"), "bob") as alice:
        got = [(name, call_unary(alice, MAILBOX + "Propose", _spec(f"alice.num-{i}", roles, protocol, params)))
               for i, (protocol, roles, params, name) in enumerate(cases)]
        wrong = [(name, code.name, details) for name, (code, details) in got
                 if code != C.INVALID_ARGUMENT or name not in details]
        assert not wrong, wrong
        for payload in (b"\xff\xfe\x00garbage", b"\x0a\xff\xff\xff"):
            code, details = call_unary(alice, "/grpc.health.v1.Health/Check", payload)
            assert code == C.INVALID_ARGUMENT and "HealthCheckRequest" in details, (code, details)
    assert client.check_health(cfgs["bob"]) == "SERVING"
