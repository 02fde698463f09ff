"""gRPC transport with mutual TLS, parties served in-process on loopback."""

from __future__ import annotations

import json
import re
import threading
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from smcdp.errors import InvalidMessage, SessionAborted, Unavailable
from smcdp.net.config import Timeouts
from smcdp.net.grpc_channel import NotFound
from smcdp.net.tls import generate_deployment
from smcdp.runtime import client, party
from smcdp.runtime.config import load_config
from smcdp.v1 import messages_pb2 as mpb
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc
from tests.support.deployment import make_deployment, raw_channel

ROLES = {"a": "alice", "b": "bob"}


@pytest.fixture
def deployment(tmp_path, in_thread):
    # a seeded session runs below: every party allows seeds (a test deployment)
    cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"], allow_seeded=True)
    for name in ("alice", "bob", "charlie"):
        in_thread.start(cfgs[name])
    return tmp_path, cfgs, in_thread


def addr(cfgs, name):
    return load_config(cfgs[name]).address_of(name)


def test_session_end_to_end_and_records(deployment):
    root, cfgs, _ = deployment
    rec = client.start_session(cfgs["alice"], "net-echo", ROLES, {"n": 5}, session_id="s-ok", timeout=30, seed=7)
    assert rec["state"] == "succeeded" and rec["role"] == "a" and rec["party"] == "alice"
    assert rec["result"]["y"] == [2 * (i + 0.5) for i in range(5)]
    # the protocol's one message each way, and one confirmation each of the final acknowledgement round
    # (smcdp.runtime.ending: nobody reports "succeeded" before every participant holds its output)
    assert rec["stats"]["messages_sent"] == 2 and rec["stats"]["messages_received"] == 2
    assert rec["unconfirmed"] == []
    # every participant wrote its durable record
    assert rec["session_id"] == "alice.s-ok"  # in its initiator's namespace (issue 24)
    on_disk = json.loads((root / "state/alice/sessions/alice.s-ok.json").read_text())
    assert on_disk == rec
    bob = _wait_record(cfgs["bob"], "s-ok")
    assert bob["state"] == "succeeded" and bob["result"]["received"] == [i + 0.5 for i in range(5)]
    assert bob["stats"]["bytes_received"] == rec["stats"]["bytes_sent"] > 0
    assert rec["seed"] == bob["seed"] == 7 and bob["initiator"] == "alice"
    # a session id cannot be reused
    with pytest.raises(Exception) as ei:
        client.start_session(cfgs["alice"], "net-echo", ROLES, {}, session_id="s-ok", timeout=10)
    assert getattr(ei.value, "code", None) == "ALREADY_EXISTS"
    with pytest.raises(NotFound):
        client.get_result(cfgs["alice"], "no-such-session")


def test_large_payload_streams_in_chunks(deployment):
    _, cfgs, _ = deployment
    size = 9 * 1024 * 1024 + 123
    rec = client.start_session(cfgs["alice"], "net-echo", ROLES, {"big_bytes": size}, timeout=60)
    bob = _wait_record(cfgs["bob"], rec["session_id"])
    assert rec["result"]["big_sha256"] == bob["result"]["big_sha256"] is not None
    assert bob["stats"]["bytes_received"] > size


def test_unchunked_large_envelope_is_refused(deployment):
    """The gRPC message limit is what chunking avoids: one 9 MiB envelope does not pass."""
    root, cfgs, _ = deployment
    with raw_channel(root / "certs", "alice", addr(cfgs, "bob"), "bob") as ch:
        env = tpb.Envelope(
            session_id="x",
            tag="t",
            type_name="smcdp.v1.Blobs",
            chunk_index=0,
            chunk_count=1,
            total_size=9 << 20,
            data=b"\0" * (9 << 20),
        )
        with pytest.raises(grpc.RpcError) as ei:
            tgrpc.MailboxStub(ch).Deliver(iter([env]), timeout=10)
    assert ei.value.code() in (grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.INVALID_ARGUMENT)


def _spec(sid, roles=ROLES, params=None, protocol="net-echo", timeout=30.0):
    return tpb.SessionSpec(
        session_id=sid, protocol=protocol, roles=roles, params_json=json.dumps(params or {}), timeout_seconds=timeout
    )


def _env(sid, tag, msg, **kw):
    data = msg.SerializeToString()
    fields = dict(
        session_id=sid,
        tag=tag,
        type_name=msg.DESCRIPTOR.full_name,
        chunk_index=0,
        chunk_count=1,
        total_size=len(data),
        data=data,
    )
    fields.update(kw)
    return tpb.Envelope(**fields)


def test_authorisation_duplicates_and_abort_by_raw_peer(deployment):
    """Act as alice with raw RPCs against bob: identity, roles, duplicates, abort."""
    root, cfgs, _ = deployment
    certs = root / "certs"
    with (
        raw_channel(certs, "alice", addr(cfgs, "bob"), "bob") as a_ch,
        raw_channel(certs, "charlie", addr(cfgs, "bob"), "bob") as c_ch,
    ):
        alice = tgrpc.MailboxStub(a_ch)
        charlie = tgrpc.MailboxStub(c_ch)
        x = mpb.Floats(values=[1.0, 2.0])

        # unknown session
        with pytest.raises(grpc.RpcError) as ei:
            alice.Deliver(iter([_env("alice.s1", "x", x)]), timeout=5)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no session 'alice.s1'" in ei.value.details()

        # a proposer that holds no role / a bad proposal
        with pytest.raises(grpc.RpcError) as ei:
            charlie.Propose(_spec("charlie.s1"), timeout=5)
        assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.RpcError) as ei:
            alice.Propose(_spec("alice.s1", protocol="no-such-protocol"), timeout=5)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "unknown protocol" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            alice.Propose(_spec("alice.s1", params={"n": "many"}), timeout=5)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "n must be" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            alice.Propose(_spec("alice.s1", roles={"a": "alice", "b": "bob", "c": "zed"}), timeout=5)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION and "zed" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            alice.Propose(_spec("bad id!"), timeout=5)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT

        assert alice.Propose(_spec("alice.s1"), timeout=5).role == "b"
        # a retried, identical proposal (its first reply was lost) is accepted again …
        assert alice.Propose(_spec("alice.s1"), timeout=5).role == "b"
        # … but a different proposal under the same session id is refused
        with pytest.raises(grpc.RpcError) as ei:
            alice.Propose(_spec("alice.s1", params={"n": 4}), timeout=5)
        assert ei.value.code() == grpc.StatusCode.ALREADY_EXISTS

        # charlie's certificate is valid but charlie holds no role in s1: to him it does not exist (issue 24)
        with pytest.raises(grpc.RpcError) as ei:
            charlie.Deliver(iter([_env("alice.s1", "x", x)]), timeout=5)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "no session 'alice.s1' in which 'charlie' holds a role" in ei.value.details()
        with pytest.raises(grpc.RpcError) as ei:
            charlie.Abort(tpb.AbortRequest(session_id="alice.s1", code="INTERNAL", message="x"), timeout=5)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION

        # malformed envelopes
        bad = [
            [_env("alice.s1", "", x)],
            [_env("alice.s1", "x", x, type_name="not a type")],
            [_env("alice.s1", "x", x, total_size=999)],
            [_env("alice.s1", "x", x, chunk_count=2)],
            [_env("alice.s1", "x", x, chunk_index=1)],
            [],
        ]
        for envs in bad:
            with pytest.raises(grpc.RpcError) as ei:
                alice.Deliver(iter(envs), timeout=5)
            assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, envs

        # first delivery, a harmless duplicate, then a conflicting rewrite
        assert alice.Deliver(iter([_env("alice.s1", "x", x)]), timeout=5).duplicate is False
        assert alice.Deliver(iter([_env("alice.s1", "x", x)]), timeout=5).duplicate is True
        with pytest.raises(grpc.RpcError) as ei:
            alice.Deliver(iter([_env("alice.s1", "x", mpb.Floats(values=[9.0]))]), timeout=5)
        assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "different message" in ei.value.details()

        # only the initiator begins; bob's role b then receives x, sends y to alice,
        # where the session does not exist -> bob's session fails with that final error
        with pytest.raises(grpc.RpcError) as ei:
            charlie.Begin(tpb.SessionRef(session_id="alice.s1"), timeout=5)
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        alice.Begin(tpb.SessionRef(session_id="alice.s1"), timeout=5)
        rec = _wait_record(cfgs["bob"], "s1")
        assert rec["state"] == "failed"
        assert rec["error"]["code"] == "FAILED_PRECONDITION"
        assert "alice" in rec["error"]["message"] and "no session 'alice.s1'" in rec["error"]["message"]
        assert rec["result"] is None and rec["stats"]["messages_received"] == 1

        # abort: bob waits for a message that never comes; alice aborts
        alice.Propose(_spec("alice.s2", params={"wait_forever_role": "b"}), timeout=5)
        alice.Begin(tpb.SessionRef(session_id="alice.s2"), timeout=5)
        assert _wait_status(cfgs["bob"], "alice.s2", lambda st: st["state"] != "prepared")["state"] == "running"
        t0 = time.monotonic()
        alice.Abort(
            tpb.AbortRequest(session_id="alice.s2", code="INVALID_ARGUMENT", message="alice found a bad ciphertext"),
            timeout=5,
        )
        rec = _wait_record(cfgs["bob"], "s2")
        assert time.monotonic() - t0 < 5
        assert rec["state"] == "failed"
        assert rec["error"] == {
            "code": "INVALID_ARGUMENT",
            "origin": "alice",
            "message": "session alice.s2 aborted by alice (role a): alice found a bad ciphertext",
        }


def _wait_status(cfg, sid, condition, timeout=10.0):
    """Poll ``sid``'s status at ``cfg``'s party until ``condition(status)`` holds; fail after ``timeout`` s."""
    end = time.monotonic() + timeout
    while True:
        try:
            st = client.get_status(cfg, sid, timeout=max(1.0, end - time.monotonic()))
        except NotFound:
            st = None
        if st is not None and condition(st):
            return st
        assert time.monotonic() < end, f"{sid} at {cfg}: condition not reached within {timeout} s; last {st}"
        time.sleep(0.05)


def _wait_record(cfg, sid, timeout=15.0):
    end = time.monotonic() + timeout
    while True:
        rec = client.get_result(cfg, sid)
        if rec["state"] in ("succeeded", "failed") or time.monotonic() > end:
            return rec
        time.sleep(0.05)


def test_mutual_tls_is_required(deployment, tmp_path):
    root, cfgs, _ = deployment
    certs = root / "certs"
    other = tmp_path / "other-ca"
    generate_deployment(other, ["alice"])  # same name, different CA
    env = _env("alice.s1", "x", mpb.Flag(value=True))
    cases = {
        "no client certificate": raw_channel(certs, None, addr(cfgs, "bob"), "bob"),
        "certificate from another CA": raw_channel(other, "alice", addr(cfgs, "bob"), "bob", ca=certs / "ca.crt"),
    }
    for what, ch in cases.items():
        with ch:
            with pytest.raises(grpc.RpcError) as ei:
                tgrpc.MailboxStub(ch).Deliver(iter([env]), timeout=5)
            assert ei.value.code() == grpc.StatusCode.UNAVAILABLE, what
            with pytest.raises(grpc.RpcError):
                health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
    # and a client that trusts another CA does not accept bob's server certificate
    with raw_channel(other, "alice", addr(cfgs, "bob"), "bob") as ch:
        with pytest.raises(grpc.RpcError) as ei:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE
    # a server must present the certificate of the party we meant: alice's
    # server reached under the name "bob" is refused
    with raw_channel(certs, "charlie", addr(cfgs, "alice"), "bob") as ch:
        with pytest.raises(grpc.RpcError) as ei:
            health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=5)
        assert ei.value.code() == grpc.StatusCode.UNAVAILABLE


def test_operator_control_needs_own_certificate(deployment):
    root, cfgs, _ = deployment
    with raw_channel(root / "certs", "bob", addr(cfgs, "alice"), "alice") as ch:
        ctl = tgrpc.ControlStub(ch)
        for call in (
            lambda: ctl.StartSession(
                tpb.StartSessionRequest(protocol="net-echo", roles=ROLES, params_json="{}"), timeout=5
            ),
            lambda: ctl.GetResult(tpb.SessionRef(session_id="x"), timeout=5),
        ):
            with pytest.raises(grpc.RpcError) as ei:
                call()
            assert ei.value.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "only this party's operator" in ei.value.details()
    with pytest.raises(InvalidMessage, match="must hold a role"):
        client.start_session(cfgs["alice"], "net-echo", {"a": "bob", "b": "charlie"}, {}, timeout=5)
    with pytest.raises(InvalidMessage, match="at most one role"):
        client.start_session(cfgs["alice"], "net-echo", {"a": "alice", "b": "alice"}, {}, timeout=5)


def test_abort_propagates_to_pending_recv(deployment):
    _, cfgs, _ = deployment
    t0 = time.monotonic()
    # b fails at once; a is waiting for y and must end with b's error, long before the deadline
    with pytest.raises(SessionAborted) as ei:
        client.start_session(cfgs["alice"], "net-echo", ROLES, {"fail_role": "b"}, session_id="s-abort", timeout=40)
    assert time.monotonic() - t0 < 10
    # depending on timing alice learns it from bob's Abort or from bob refusing 'x';
    # either way the error names bob and bob's cause
    assert "bob" in str(ei.value) and "role b was told to fail" in str(ei.value)
    assert ei.value.origin == "bob"
    a = client.get_result(cfgs["alice"], "s-abort")
    b = _wait_record(cfgs["bob"], "s-abort")
    assert b["error"]["code"] == "INVALID_ARGUMENT" and b["error"]["origin"] == "bob"
    assert a["state"] == "failed" and a["error"]["origin"] == "bob"
    # the status code of the origin's failure travels with the abort
    assert a["error"]["code"] == "INVALID_ARGUMENT"
    assert ei.value.code == "INVALID_ARGUMENT"


def test_initiator_fails_naming_unreachable_party(tmp_path, in_thread):
    cfgs = make_deployment(
        tmp_path, ["alice", "bob"], timeouts=Timeouts(connect_seconds=1, session_seconds=60, rpc_seconds=5)
    )
    in_thread.start(cfgs["alice"])  # bob is down
    t0 = time.monotonic()
    with pytest.raises(Unavailable) as ei:
        client.start_session(cfgs["alice"], "net-echo", ROLES, {}, session_id="s-down", timeout=3)
    elapsed = time.monotonic() - t0
    assert 2.5 < elapsed < 8, elapsed  # retried until the 3 s deadline, then failed
    # it started at bob: bob is named (not alice), and it is a SessionAborted as well as an Unavailable
    assert isinstance(ei.value, SessionAborted) and ei.value.code == "UNAVAILABLE" and ei.value.origin == "bob"
    msg = str(ei.value)
    assert "could not reach party 'bob'" in msg and "attempt(s)" in msg
    attempts = int(re.search(r"\((\d+) attempt\(s\)", msg).group(1))
    assert attempts >= 3  # retried with backoff, not a single try
    rec = client.get_result(cfgs["alice"], "s-down")
    assert rec["state"] == "failed" and rec["error"]["code"] == "UNAVAILABLE" and rec["error"]["origin"] == "bob"
    assert "'bob'" in rec["error"]["message"]
    assert "attempt(s)" in rec["error"]["message"]


def test_peer_restart_between_sessions(tmp_path, in_thread):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    in_thread.start(cfgs["alice"])
    in_thread.start(cfgs["bob"])
    assert client.start_session(cfgs["alice"], "net-echo", ROLES, {}, timeout=20)["state"] == "succeeded"
    in_thread.stop("bob")
    in_thread.start(cfgs["bob"])
    assert client.start_session(cfgs["alice"], "net-echo", ROLES, {}, timeout=20)["state"] == "succeeded"


BUSY = 6.0  # seconds bob's role computes holding the GIL (the bounds below are fractions of it)


def test_server_answers_while_a_role_computes(deployment):
    """bob's role b computes for BUSY s without yielding its loop: bob's server answers meanwhile, each
    time in a fraction of the computation (a server blocked by the role would answer when it ends)."""
    _, cfgs, _ = deployment
    result = {}

    def run():
        result["rec"] = client.start_session(
            cfgs["alice"], "net-echo", ROLES, {"busy_seconds": BUSY, "late_send": True}, session_id="s-busy", timeout=60
        )

    def busy() -> bool:  # bob's server says the role is computing (answering while it does)
        return client.get_status(cfgs["bob"], "alice.s-busy", timeout=BUSY)["step"] == "busy"

    t = threading.Thread(target=run)
    t.start()
    _wait_status(
        cfgs["bob"],
        "alice.s-busy",
        lambda st: st["step"] == "busy" or st["state"] in ("succeeded", "failed"),
        timeout=30,
    )
    latencies = []  # health checks that began and were answered while the role computed
    while busy():
        t0 = time.monotonic()
        assert client.check_health(cfgs["bob"], timeout=BUSY) == "SERVING"
        latency = time.monotonic() - t0
        if not busy():  # the computation may have ended before this answer
            break
        latencies.append(latency)
        time.sleep(0.05)
    t.join(60)
    rec = result["rec"]
    assert rec["state"] == "succeeded"
    bob = _wait_record(cfgs["bob"], rec["session_id"])
    assert bob["seconds"] >= BUSY  # the role really was busy while we asked
    assert len(latencies) >= 5 and max(latencies) < BUSY / 4, latencies
    # a delivery to bob during the busy phase was acknowledged long before the computation ended
    assert rec["result"]["late_send_seconds"] < BUSY / 4


def test_party_refuses_certificate_of_other_name(tmp_path):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    text = cfgs["alice"].read_text().replace('cert = "../certs/alice.crt"', 'cert = "../certs/bob.crt"')
    text = text.replace('key = "../certs/alice.key"', 'key = "../certs/bob.key"')
    cfgs["alice"].write_text(text)
    with pytest.raises(Exception, match=r"certificate .* is for 'bob'"):
        party.Party(load_config(cfgs["alice"]))


def test_every_party_ends_by_its_deadline(deployment):
    """b waits for a message that never comes: both end with DEADLINE_EXCEEDED, nothing hangs."""
    _, cfgs, _ = deployment
    t0 = time.monotonic()
    with pytest.raises(Exception) as ei:
        client.start_session(
            cfgs["alice"], "net-echo", ROLES, {"wait_forever_role": "b"}, session_id="s-late", timeout=2
        )
    assert time.monotonic() - t0 < 8
    assert ei.value.code == "DEADLINE_EXCEEDED"
    a = client.get_result(cfgs["alice"], "s-late")
    b = _wait_record(cfgs["bob"], "s-late")
    for rec in (a, b):
        assert rec["state"] == "failed" and rec["error"]["code"] == "DEADLINE_EXCEEDED", rec["error"]
        # whoever timed out first names the message it was waiting for
        assert re.search(r"no message '(y|never-sent)' from [ab] within", rec["error"]["message"])


def test_client_reports_own_party_down(tmp_path):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    with pytest.raises(Unavailable, match=re.escape("party 'alice' is not reachable at 127.0.0.1:")):
        client.start_session(cfgs["alice"], "net-echo", ROLES, {}, timeout=5)
    with pytest.raises(Unavailable, match="not healthy within"):
        client.wait_healthy(cfgs["alice"], peer="bob", timeout=1)


def test_a_ca_bundle_with_two_cas_is_honoured_during_rotation(tmp_path, in_thread):
    """Old and new CA side by side in every party's CA file: parties with certificates from
    either CA talk to each other, so a CA rotation needs no coordinated restart."""
    from smcdp.net.tls import create_ca, issue_party_certificate, write_certificate, write_private_key

    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    certs = tmp_path / "certs"
    new_key, new_ca = create_ca("smcdp rotated CA")
    key, cert = issue_party_certificate(new_key, new_ca, "bob")
    write_private_key(certs / "bob.key", key, overwrite=True)
    write_certificate(certs / "bob.crt", cert, overwrite=True)  # bob: new CA; alice: still the old one
    old = (certs / "ca.crt").read_bytes()
    write_certificate(certs / "ca.crt", new_ca, overwrite=True)
    (certs / "ca.crt").write_bytes(old + (certs / "ca.crt").read_bytes())
    for name in ("alice", "bob"):
        in_thread.start(cfgs[name])
    rec = client.start_session(cfgs["alice"], "net-echo", ROLES, {"n": 2}, timeout=30)
    assert rec["state"] == "succeeded"
    # a party certificate from neither CA is still refused at load
    other_key, other_ca = create_ca("stranger")
    k2, c2 = issue_party_certificate(other_key, other_ca, "alice")
    write_private_key(tmp_path / "x.key", k2)
    write_certificate(tmp_path / "x.crt", c2)
    from smcdp.net.tls import CertificateError, TlsMaterial

    with pytest.raises(CertificateError, match="2 certificate"):
        TlsMaterial.load(certs / "ca.crt", tmp_path / "x.crt", tmp_path / "x.key")
