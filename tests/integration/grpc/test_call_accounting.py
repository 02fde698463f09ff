"""Every call is counted by the party from its first moment (smcdp.net.server serves every method as a
client-streaming one, and sets no gRPC-level cap): a member's calls that never send their request cannot fill a
limit the party does not see and lock out other members, health checks and the operator; a call with no request,
or with two, is answered at once and never served; stock unary clients are served as before.

Parties run in-process over mutual TLS on loopback.  Every wait is on a condition with a bound."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp.net.limits import Limits
from smcdp.runtime import client
from smcdp.runtime.config import load_config, operator_socket
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc
from tests.support.boundary import CONTROL, HEALTH, MAILBOX, spec_bytes
from tests.support.deployment import make_deployment, raw_channel

C = grpc.StatusCode
#: small limits: calls_per_peer 4, max_concurrent_rpcs 8, operator_calls 4 (the review's stall_unary.py: gRPC's
#: cap at bob was then 2 * 8 + 4 + 2 peers * 4 = 28 calls, and 32 of alice's calls that sent no request filled it)
SMALL = Limits(
    max_concurrent_rpcs=8,
    calls_per_peer=4,
    calls_per_session=2,
    idle_calls_per_peer=2,
    watch_calls_per_peer=1,
    watch_calls_total=4,
    operator_calls=4,
    pending_total=8,
    pending_per_peer=2,
    sessions_total=16,
    running_per_peer=4,
    call_idle_seconds=60.0,  # alice's calls stay held however slow the host: she ends them herself
)


def until(condition, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.01)


@pytest.fixture
def bob(tmp_path, in_thread):
    def start(limits: Limits, parties=("bob",)):
        cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"], limits=limits)
        for p in parties:
            in_thread.start(cfgs[p])
        address = load_config(cfgs["bob"]).address_of("bob")
        return in_thread.parties["bob"], cfgs, address, tmp_path / "certs"

    return start


def unary(ch: grpc.Channel, method: str, payload: bytes, timeout: float = 10.0) -> tuple[C, str]:
    try:
        ch.unary_unary(method, request_serializer=None, response_deserializer=None)(payload, timeout=timeout)
        return C.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def streamed(ch: grpc.Channel, method: str, requests, timeout: float = 20.0) -> tuple[C, str]:
    """A call of a method with one request made as a client-streaming one: ``requests`` as they come."""
    try:
        ch.stream_unary(method, request_serializer=None, response_deserializer=None)(requests, timeout=timeout)
        return C.OK, ""
    except grpc.RpcError as exc:
        return exc.code(), exc.details() or ""


def test_calls_that_never_send_their_request_are_counted_and_lock_nobody_out(bob):
    """alice opens 32 Heartbeat calls that send their headers and never a request.  Before, gRPC read the request
    before the party's handler ran: the calls were not counted (calls of alice = 0), filled gRPC's own cap (28)
    and every caller was refused RESOURCE_EXHAUSTED "Concurrent RPC limit exceeded" -- charlie's health check and
    heartbeat, bob's own operator -- and a call closed without a request was never answered.  Now the party
    counts each at once: alice holds her calls_per_peer (4), the rest are refused naming the rule, charlie and
    the operator are served, and the held calls are answered when alice closes them."""
    party, cfgs, address, certs = bob(SMALL)
    n = 32
    stop = threading.Event()

    def never():
        stop.wait(60)
        return
        yield

    alice = raw_channel(certs, "alice", address, "bob")
    calls = [
        alice.stream_unary(MAILBOX + "Heartbeat", request_serializer=None, response_deserializer=None).future(
            never(), timeout=60
        )
        for _ in range(n)
    ]
    try:
        until(lambda: sum(f.done() for f in calls) == n - SMALL.calls_per_peer, "alice's calls past her quota refused")
        refused = [f.exception() for f in calls if f.done()]
        assert {e.code() for e in refused} == {C.RESOURCE_EXHAUSTED}
        assert all("limits.calls_per_peer" in e.details() for e in refused), refused[0].details()
        assert party.server.quotas.calls("alice") == SMALL.calls_per_peer
        ref = tpb.HeartbeatRequest(session_id="charlie.none").SerializeToString()
        health = health_pb2.HealthCheckRequest().SerializeToString()
        with raw_channel(certs, "charlie", address, "bob") as charlie:
            assert unary(charlie, HEALTH + "Check", health) == (C.OK, "")
            assert unary(charlie, MAILBOX + "Heartbeat", ref) == (C.OK, "")
        with raw_channel(certs, "bob", address, "bob") as own:  # the operator, over the TCP port
            assert unary(own, HEALTH + "Check", health) == (C.OK, "")
            assert unary(own, CONTROL + "ListSessions", tpb.ListSessionsRequest().SerializeToString()) == (C.OK, "")
        assert operator_socket(load_config(cfgs["bob"])) is not None
        assert client.check_health(cfgs["bob"]) == "SERVING"  # the operator, through the unix socket
        assert party.server.quotas.calls("alice") == SMALL.calls_per_peer  # still held meanwhile
    finally:
        stop.set()
    # alice closes them without a request: each is answered at once (it was left unanswered before)
    until(lambda: all(f.done() for f in calls), "alice's held calls answered")
    ended = [e for e in (f.exception() for f in calls) if e.code() != C.RESOURCE_EXHAUSTED]
    assert len(ended) == SMALL.calls_per_peer, ended
    assert all(e.code() == C.INVALID_ARGUMENT and "without its request" in e.details() for e in ended), ended
    until(lambda: party.server.quotas.calls("alice") == 0, "alice's calls left the accounting")
    alice.close()


def test_a_call_with_two_requests_is_refused_unserved_and_a_silent_one_is_ended(bob):
    """A method with one request: a call that sends two is INVALID_ARGUMENT and neither is served; one that sends
    no request, or its request but never closes, is ended after limits.call_idle_seconds (FAILED_PRECONDITION),
    and leaves the accounting."""
    party, _, address, certs = bob(Limits(call_idle_seconds=1.0))
    one, two = spec_bytes("alice.two-1", timeout=60), spec_bytes("alice.two-2", timeout=60)
    hb = tpb.HeartbeatRequest(session_id="alice.none").SerializeToString()
    stop = threading.Event()

    def then_wait(*requests):
        yield from requests
        stop.wait(60)

    try:
        with raw_channel(certs, "alice", address, "bob") as alice:
            code, details = streamed(alice, MAILBOX + "Propose", iter([one, two]))
            assert code == C.INVALID_ARGUMENT and "takes one request" in details, (code, details)
            assert not {"alice.two-1", "alice.two-2"} & set(party.core.sessions)
            code, details = streamed(alice, MAILBOX + "Heartbeat", then_wait())
            assert code == C.FAILED_PRECONDITION and "sent no request within 1 s" in details, (code, details)
            code, details = streamed(alice, MAILBOX + "Heartbeat", then_wait(hb))
            assert code == C.FAILED_PRECONDITION and "not closed within 1 s" in details, (code, details)
            code, details = streamed(alice, HEALTH + "Check", then_wait())
            assert code == C.FAILED_PRECONDITION, (code, details)
            assert streamed(alice, MAILBOX + "Propose", iter([one])) == (C.OK, "")  # one request: served
            assert "alice.two-1" in party.core.sessions
    finally:
        stop.set()
    until(lambda: party.server.quotas.calls("alice") == 0, "alice's calls left the accounting")


def test_stock_unary_clients_are_served_as_before(bob):
    """On the wire a method with one request is unchanged: plain generated stubs (Mailbox, Control, Health Check
    and Watch, as grpc_health_probe calls them), smcdp's own operator client and a whole session between two
    parties (their aio clients: Propose, Begin, messages, heartbeats, the end) work as they did."""
    party, cfgs, address, certs = bob(Limits(), parties=("alice", "bob"))
    with raw_channel(certs, "alice", address, "bob") as alice:
        reply = tgrpc.MailboxStub(alice).Heartbeat(tpb.HeartbeatRequest(session_id="alice.none"), timeout=10)
        assert reply.state == "unknown"
        health = health_pb2_grpc.HealthStub(alice)
        assert (
            health.Check(health_pb2.HealthCheckRequest(), timeout=10).status == health_pb2.HealthCheckResponse.SERVING
        )
        watch = health.Watch(health_pb2.HealthCheckRequest(service="smcdp.v1.Mailbox"), timeout=10)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        watch.cancel()
        with pytest.raises(grpc.RpcError) as ei:
            health.Check(health_pb2.HealthCheckRequest(service="no.such.Service"), timeout=10)
        assert ei.value.code() == C.NOT_FOUND
    with raw_channel(certs, "bob", address, "bob") as own:
        assert tgrpc.ControlStub(own).ListSessions(tpb.ListSessionsRequest(), timeout=10) is not None
    assert client.check_health(cfgs["alice"], peer="bob") == "SERVING"
    rec = client.start_session(cfgs["alice"], "net-echo", {"a": "alice", "b": "bob"}, {"n": 3}, timeout=60)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [2 * (i + 0.5) for i in range(3)]
    until(lambda: party.server.quotas.calls("alice") == 0, "alice's calls left the accounting")
