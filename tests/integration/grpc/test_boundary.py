"""Every refusal at the party boundary has the right status (issue 19): a table of malformed or
over-limit requests against a party served over mutual TLS, and a short fuzz run (the long one is
bench/fuzz_boundary.py)."""

from __future__ import annotations

import json
import time

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from hypothesis import HealthCheck, Phase, given, settings

from smcdp.net.limits import Limits
from smcdp.net.tls import party_identity_name
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.v1 import transport_pb2 as tpb
from tests.support.boundary import (
    CONTROL,
    MAILBOX,
    SERVER_FAILURES,
    call_deliver,
    call_stream,
    call_unary,
    envelope_bytes,
    mailbox_requests,
    nested_json,
    send,
    spec_bytes,
)
from tests.support.deployment import make_deployment, raw_channel

C = grpc.StatusCode
LIMITS = Limits(pending_per_peer=3, pending_total=8, running_per_peer=3, sessions_total=16, proposal_grace_seconds=60.0)


@pytest.fixture
def party(tmp_path, in_thread):
    cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"], limits=LIMITS, allow_seeded=False)
    for name in ("bob", "charlie"):
        in_thread.start(cfgs[name])
    address = load_config(cfgs["bob"]).address_of("bob")
    certs = tmp_path / "certs"
    with (
        raw_channel(certs, "alice", address, "bob") as peer,
        raw_channel(certs, "bob", address, "bob") as own,
        raw_channel(certs, "charlie", address, "bob") as charlie,
    ):
        yield {
            "peer": peer,
            "own": own,
            "charlie_ch": charlie,
            "cfgs": cfgs,
            "root": tmp_path,
            "party": in_thread.parties["bob"],
        }


_spec = spec_bytes


def _env(sid, tag="t", data=b"\x08\x01", type_name="smcdp.v1.Flag", total=None, count=1, index=0):
    return envelope_bytes(sid, tag, data, type_name, total, count, index)


PI_ROLES = {"trent": "alice", "party1": "bob", "party2": "charlie"}
PI_PARAMS = json.dumps({"key_bits": 512, "rows": 30, "max_iterations": 1})


def test_status_code_table(party):
    peer, own = party["peer"], party["own"]
    propose = lambda body: call_unary(peer, MAILBOX + "Propose", body)[0]  # noqa: E731
    # a prepared session to deliver into (net-echo: the [limits] ceilings apply)
    assert propose(_spec("alice.live")) == C.OK
    # a power-iteration session: its envelope follows from k = 30, 512-bit keys, one round
    assert propose(_spec("alice.pi", "power-iteration", PI_ROLES, PI_PARAMS)) == C.OK
    valid = tpb.Envelope(
        session_id="alice.live",
        tag="t0",
        type_name="smcdp.v1.Flag",
        chunk_index=0,
        chunk_count=1,
        total_size=2,
        data=b"\x08\x01",
    ).SerializeToString()
    table = [
        # (what, status, call)
        ("Deliver: garbage bytes", C.INVALID_ARGUMENT, lambda: call_deliver(peer, [b"\xff\xfe\x00garbage"])[0]),
        ("Deliver: truncated Envelope", C.INVALID_ARGUMENT, lambda: call_deliver(peer, [valid[:-3]])[0]),
        ("Deliver: empty stream", C.INVALID_ARGUMENT, lambda: call_deliver(peer, [])[0]),
        ("Deliver: chunk_count 0", C.INVALID_ARGUMENT, lambda: call_deliver(peer, [_env("alice.live", count=0)])[0]),
        ("Deliver: invalid session id", C.INVALID_ARGUMENT, lambda: call_deliver(peer, [_env("a\nb")])[0]),
        ("Deliver: unknown session", C.FAILED_PRECONDITION, lambda: call_deliver(peer, [_env("nope")])[0]),
        (
            "Deliver: chunks beyond total_size",
            C.INVALID_ARGUMENT,
            lambda: call_deliver(peer, [_env("alice.live", "t1", b"abcd", total=2)])[0],
        ),
        (
            "Deliver: message above the session's envelope",
            C.RESOURCE_EXHAUSTED,
            lambda: call_deliver(peer, [_env("alice.pi", "big", b"x" * 1024, total=64 * 1024, count=64)])[0],
        ),
        (
            "Deliver: message above limits.max_message_mib",
            C.RESOURCE_EXHAUSTED,
            lambda: call_deliver(peer, [_env("alice.live", "huge", b"x", total=300 << 20, count=300)])[0],
        ),
        (
            "Deliver: a second message in one call",
            C.INVALID_ARGUMENT,
            lambda: call_deliver(peer, [_env("alice.live", "d1"), _env("alice.live", "d2")])[0],
        ),
        (
            "Deliver: ... and the refused call stored nothing (other bytes under its tag pass)",
            C.OK,
            lambda: call_deliver(peer, [_env("alice.live", "d1", b"\x08\x00")])[0],
        ),
        ("Deliver: accepted", C.OK, lambda: call_deliver(peer, [valid])[0]),
        (
            "Deliver: same tag, other bytes",
            C.INVALID_ARGUMENT,
            lambda: call_deliver(peer, [_env("alice.live", "t0", b"\x08\x00")])[0],
        ),
        ("Propose: garbage bytes", C.INVALID_ARGUMENT, lambda: propose(b"\xff\xff\xff\xff")),
        ("Propose: truncated", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s1")[:-2])),
        (
            "Propose: params nested 200,000 deep",
            C.INVALID_ARGUMENT,
            lambda: propose(_spec("alice.s2", params=nested_json(200_000))),
        ),
        (
            "Propose: params of 100 KB",
            C.INVALID_ARGUMENT,
            lambda: propose(_spec("alice.s3", params=json.dumps({"n": 1, "pad": "x" * 100_000}))),
        ),
        ("Propose: params with NaN", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s4", params='{"n": NaN}'))),
        ("Propose: params not an object", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s5", params="[1]"))),
        ("Propose: timeout NaN", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s6", timeout=float("nan")))),
        ("Propose: unknown protocol", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s7", protocol="nope\n"))),
        (
            "Propose: proposer holds no role",
            C.PERMISSION_DENIED,
            lambda: propose(_spec("alice.s8", roles={"a": "charlie", "b": "bob"})),
        ),
        (
            "Propose: experiment seed not allowed here ([policy] allow_seeded)",
            C.FAILED_PRECONDITION,
            lambda: propose(_spec("alice.s9", seed=7)),
        ),
        (
            "Propose: 7-day timeout above limits.max_session_seconds",
            C.RESOURCE_EXHAUSTED,
            lambda: propose(_spec("alice.s10", timeout=7 * 86400.0)),
        ),
        ("Propose: invalid parameters", C.INVALID_ARGUMENT, lambda: propose(_spec("alice.s11", params='{"n": -1}'))),
        ("Propose: an id outside the proposer's namespace", C.INVALID_ARGUMENT, lambda: propose(_spec("charlie.s14"))),
        ("Propose: an id without a namespace", C.INVALID_ARGUMENT, lambda: propose(_spec("s15"))),
        ("Propose: used id", C.ALREADY_EXISTS, lambda: propose(_spec("alice.live", params='{"n": 5}'))),
        ("Propose: third pending proposal", C.OK, lambda: propose(_spec("alice.s12"))),
        (
            "Propose: fourth pending proposal (limits.pending_per_peer = 3)",
            C.RESOURCE_EXHAUSTED,
            lambda: propose(_spec("alice.s13")),
        ),
        ("Begin: garbage", C.INVALID_ARGUMENT, lambda: call_unary(peer, MAILBOX + "Begin", b"\xff\xff")[0]),
        (
            "Begin: unknown session",
            C.FAILED_PRECONDITION,
            lambda: call_unary(peer, MAILBOX + "Begin", tpb.SessionRef(session_id="nope").SerializeToString())[0],
        ),
        (
            "Abort: code OK",
            C.INVALID_ARGUMENT,
            lambda: call_unary(
                peer,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.live", code="OK", message="fine").SerializeToString(),
            )[0],
        ),
        (
            "Abort: unknown code",
            C.INVALID_ARGUMENT,
            lambda: call_unary(
                peer,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.live", code="aborted", message="x").SerializeToString(),
            )[0],
        ),
        (
            "Abort: a link that is not two party names joined by an arrow",
            C.INVALID_ARGUMENT,
            lambda: call_unary(
                peer,
                MAILBOX + "Abort",
                tpb.AbortRequest(
                    session_id="alice.live", code="UNAVAILABLE", message="x", link="alice->Bob\n"
                ).SerializeToString(),
            )[0],
        ),
        *(
            (
                f"Abort: {what}",
                C.INVALID_ARGUMENT,
                lambda sid=sid, link=link: call_unary(
                    peer,
                    MAILBOX + "Abort",
                    tpb.AbortRequest(session_id=sid, code="UNAVAILABLE", message="x", link=link).SerializeToString(),
                )[0],
            )
            for what, sid, link in [
                ("a link from a party to itself", "alice.live", "alice→alice"),
                ("a link with a newline after each name", "alice.live", "alice\n→bob\n"),
                ("a link to a party outside the session", "alice.live", "alice→charlie"),
                ("a link whose sending end is neither the aborting peer nor its culprit", "alice.pi", "charlie→bob"),
            ]
        ),
        ("Abort: garbage", C.INVALID_ARGUMENT, lambda: call_unary(peer, MAILBOX + "Abort", b"\x0a\xff")[0]),
        (
            "Abort: unknown session",
            C.FAILED_PRECONDITION,
            lambda: call_unary(
                peer, MAILBOX + "Abort", tpb.AbortRequest(session_id="nope", code="ABORTED").SerializeToString()
            )[0],
        ),
        (
            "StartSession: another party's certificate",
            C.PERMISSION_DENIED,
            lambda: call_unary(peer, CONTROL + "StartSession", b"")[0],
        ),
        (
            "StartSession: garbage from the operator",
            C.INVALID_ARGUMENT,
            lambda: call_unary(own, CONTROL + "StartSession", b"\xff\xff\xff")[0],
        ),
        (
            "GetResult: unknown id",
            C.NOT_FOUND,
            lambda: call_unary(own, CONTROL + "GetResult", tpb.SessionRef(session_id="nope").SerializeToString())[0],
        ),
        ("GetResult: garbage", C.INVALID_ARGUMENT, lambda: call_unary(own, CONTROL + "GetResult", b"\xff")[0]),
        (
            "Health/Check: garbage (issue 24; was UNKNOWN)",
            C.INVALID_ARGUMENT,
            lambda: call_unary(peer, "/grpc.health.v1.Health/Check", b"\xff\xfe\x00garbage")[0],
        ),
        (
            "Heartbeat: a session the caller holds no role in answers as a missing one",
            C.OK,
            lambda: call_unary(
                party["charlie_ch"],
                MAILBOX + "Heartbeat",
                tpb.HeartbeatRequest(session_id="alice.live").SerializeToString(),
            )[0],
        ),
        *(
            (
                f"Heartbeat: {what}",
                C.INVALID_ARGUMENT,
                lambda about=about: call_unary(
                    peer,
                    MAILBOX + "Heartbeat",
                    tpb.HeartbeatRequest(session_id="alice.pi", about=about).SerializeToString(),
                )[0],
            )
            for what, about in [
                ("asks about more than 16 parties", ["charlie"] * 17),
                ("asks about an invalid party name", ["charlie\nINFO forged"]),
            ]
        ),
        (
            "Begin: a session the caller holds no role in answers as a missing one",
            C.FAILED_PRECONDITION,
            lambda: call_unary(
                party["charlie_ch"], MAILBOX + "Begin", tpb.SessionRef(session_id="alice.live").SerializeToString()
            )[0],
        ),
    ]
    got = [(what, expected, call()) for what, expected, call in table]
    wrong = [(what, expected.name, code.name) for what, expected, code in got if code != expected]
    assert not wrong, wrong
    # a participant's question about others: one answer each, -1 for the asker itself, a party outside the
    # session and a participant bob has not heard from
    ask = peer.unary_unary(MAILBOX + "Heartbeat", request_serializer=None, response_deserializer=None)
    reply = tpb.HeartbeatReply.FromString(
        ask(tpb.HeartbeatRequest(session_id="alice.pi", about=["charlie", "alice", "dave"]).SerializeToString())
    )
    assert list(reply.about_heard_seconds) == [-1.0, -1.0, -1.0]

    # Mailbox.Stream: every message is checked exactly as by Deliver; one Ack per message, in order; the first
    # refused message ends the call with its status (the Acks before it stand)
    stream_table = [
        ("Stream: garbage bytes", (C.INVALID_ARGUMENT, 0), [b"\xff\xfe\x00garbage"]),
        ("Stream: empty", (C.OK, 0), []),
        ("Stream: two messages", (C.OK, 2), [_env("alice.live", "s0"), _env("alice.live", "s1", b"\x08\x00")]),
        (
            "Stream: a message in two chunks, then one in one",
            (C.OK, 2),
            [
                _env("alice.live", "s2", b"\x08", total=2, count=2),
                _env("alice.live", "s2", b"\x01", total=2, count=2, index=1),
                _env("alice.live", "s3"),
            ],
        ),
        ("Stream: a duplicate is acknowledged", (C.OK, 1), [_env("alice.live", "s0")]),
        (
            "Stream: accepted, then an unknown session",
            (C.FAILED_PRECONDITION, 1),
            [_env("alice.live", "s4"), _env("nope")],
        ),
        (
            "Stream: accepted, then same tag other bytes",
            (C.INVALID_ARGUMENT, 1),
            [_env("alice.live", "s5"), _env("alice.live", "s0", b"\x08\x00")],
        ),
        (
            "Stream: message above the session's envelope",
            (C.RESOURCE_EXHAUSTED, 0),
            [_env("alice.pi", "big2", b"x" * 1024, total=64 * 1024, count=64)],
        ),
        (
            "Stream: message above limits.max_message_mib",
            (C.RESOURCE_EXHAUSTED, 0),
            [_env("alice.live", "huge2", b"x", total=300 << 20, count=300)],
        ),
        (
            "Stream: a message cut short by the end of the call",
            (C.INVALID_ARGUMENT, 0),
            [_env("alice.live", "s6", b"\x08", total=2, count=2)],
        ),
        (
            "Stream: chunk of another message inside one",
            (C.INVALID_ARGUMENT, 0),
            [
                _env("alice.live", "s7", b"\x08", total=2, count=2),
                _env("alice.live", "s8", b"\x01", total=2, count=2, index=1),
            ],
        ),
    ]
    got = [(what, expected, call_stream(peer, chunks)) for what, expected, chunks in stream_table]
    wrong = [(what, expected, (r[0], r[2])) for what, expected, r in got if (r[0], r[2]) != expected]
    assert not wrong, wrong


def test_session_envelope_tags_and_bytes(party):
    """Past the session's distinct-message budget a new tag is refused before it is buffered;
    a retried (duplicate) message is not charged again."""
    peer = party["peer"]
    assert call_unary(peer, MAILBOX + "Propose", _spec("alice.pi2", "power-iteration", PI_ROLES, PI_PARAMS))[0] == C.OK
    budget = party["party"].sessions["alice.pi2"].channel.budget
    tags = budget.envelope.tags
    codes = [call_deliver(peer, [_env("alice.pi2", f"junk/{i}")])[0] for i in range(tags)]
    assert codes == [C.OK] * tags
    code, details = call_deliver(peer, [_env("alice.pi2", "one-too-many")])
    assert code == C.RESOURCE_EXHAUSTED and "distinct messages" in details
    assert call_deliver(peer, [_env("alice.pi2", "junk/0")])[0] == C.OK  # a duplicate: acknowledged
    assert budget.bytes_charged == 2 * tags


def test_abort_message_is_escaped_in_the_record(party):
    peer, cfgs = party["peer"], party["cfgs"]
    assert call_unary(peer, MAILBOX + "Propose", _spec("alice.inj"))[0] == C.OK
    forged = "stop\n2026-01-01 00:00:00,000 INFO smcdp.party: session inj succeeded\x1b[2K\u2028"
    assert (
        call_unary(
            peer,
            MAILBOX + "Abort",
            tpb.AbortRequest(session_id="alice.inj", code="ABORTED", message=forged).SerializeToString(),
        )[0]
        == C.OK
    )
    rec = _wait(lambda: client.get_result(cfgs["bob"], "inj"))
    msg = rec["error"]["message"]
    assert msg.isprintable() and "\\x0a2026-01-01" in msg and "\\x1b" in msg and "\\u2028" in msg


def _wait(get, timeout=20.0):
    end = time.monotonic() + timeout
    while True:
        rec = get()
        if rec.get("state") in ("succeeded", "failed") or time.monotonic() > end:
            return rec
        time.sleep(0.05)


def test_fuzz_mailbox_short(party):
    """The short version of bench/fuzz_boundary.py: structured, mutated and random requests to
    every Mailbox method get a status, never INTERNAL or UNKNOWN, and the party stays healthy."""
    peer = party["peer"]
    assert call_unary(peer, MAILBOX + "Propose", _spec("alice.fuzz-live"))[0] == C.OK
    seen: dict[str, int] = {}

    @settings(
        max_examples=300, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(request=mailbox_requests())
    def one(request):
        code, details = send(peer, request)
        seen[code.name] = seen.get(code.name, 0) + 1
        assert code not in SERVER_FAILURES, (request, code, details)

    one()
    assert sum(seen.values()) == 300 and "INVALID_ARGUMENT" in seen
    health = health_pb2_grpc.HealthStub(party["own"]).Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
    assert health.status == health_pb2.HealthCheckResponse.SERVING
    # ... and still runs a session that another peer starts
    rec = client.start_session(party["cfgs"]["charlie"], "net-echo", {"a": "charlie", "b": "bob"}, {"n": 2}, timeout=20)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0]


def test_ended_sessions_live_on_disk_and_answer_only_their_participants(tmp_path, in_thread):
    """With no ended session kept in memory (keep_ended_sessions = 0), a late message for a failed
    session is refused from its record on disk with the failure's code -- to a participant; to
    anyone else the session does not exist."""
    cfgs = make_deployment(tmp_path, ["alice", "bob", "charlie"], limits=Limits(keep_ended_sessions=0))
    in_thread.start(cfgs["bob"])
    address = load_config(cfgs["bob"]).address_of("bob")
    with (
        raw_channel(tmp_path / "certs", "alice", address, "bob") as alice,
        raw_channel(tmp_path / "certs", "charlie", address, "bob") as charlie,
    ):
        assert call_unary(alice, MAILBOX + "Propose", _spec("alice.gone"))[0] == C.OK
        assert (
            call_unary(
                alice,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.gone", code="DATA_LOSS", message="x").SerializeToString(),
            )[0]
            == C.OK
        )
        assert _wait(lambda: client.get_result(cfgs["bob"], "gone"))["state"] == "failed"
        end = time.monotonic() + 10
        while "alice.gone" in in_thread.parties["bob"].sessions and time.monotonic() < end:
            time.sleep(0.05)
        assert "alice.gone" not in in_thread.parties["bob"].sessions and len(in_thread.parties["bob"].ended) == 0
        assert call_deliver(alice, [_env("alice.gone")])[0] == C.DATA_LOSS
        code, details = call_deliver(charlie, [_env("alice.gone")])
        assert code == C.FAILED_PRECONDITION and "has no session" in details


def test_a_stream_whose_session_ended_is_closed_with_its_status(party):
    """A Mailbox.Stream call left open after its session ended held its call slot for as long as the sender
    liked (issue 24); the server now ends it within a few seconds, with the session's status."""
    import threading

    peer = party["peer"]
    assert call_unary(peer, MAILBOX + "Propose", _spec("alice.short"))[0] == C.OK
    hold = threading.Event()

    def envelopes():
        yield _env("alice.short", "first")
        hold.wait(60)  # keep the call open, sending nothing more

    fn = peer.stream_stream(MAILBOX + "Stream", request_serializer=None, response_deserializer=None)
    call = fn(envelopes(), timeout=60)
    try:
        assert next(call) is not None  # the first message's Ack: the call is bound
        assert (
            call_unary(
                peer,
                MAILBOX + "Abort",
                tpb.AbortRequest(session_id="alice.short", code="DATA_LOSS", message="x").SerializeToString(),
            )[0]
            == C.OK
        )
        t0 = time.monotonic()
        with pytest.raises(grpc.RpcError) as info:
            next(call)
        assert time.monotonic() - t0 < 15
        assert info.value.code() == C.DATA_LOSS and "already ended" in info.value.details()
    finally:
        hold.set()


def test_a_session_whose_thread_cannot_start_for_want_of_descriptors_is_unavailable(party, monkeypatch):
    """A Propose at a party out of file descriptors (EMFILE when its session thread opened the checkpoint's
    journal) answered INTERNAL "its thread did not start": now UNAVAILABLE naming the cause, which the
    initiator retries like a party that is down."""
    import errno

    from smcdp.runtime.session import Session

    async def no_descriptors(self):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(Session, "_main", no_descriptors)
    code, details = call_unary(party["peer"], MAILBOX + "Propose", _spec("alice.no-fds"))
    assert code == C.UNAVAILABLE, (code, details)
    assert "no file descriptors left (process limit) at bob" in details and "did not start" in details


def test_a_compressed_message_is_bounded_by_its_size_once_decompressed(party):
    """16 MiB of a Propose sent gzip-compressed (16 KiB on the wire): a member's decompression bomb is refused by
    the decompressed size (RESOURCE_EXHAUSTED), and the party goes on answering."""
    cfg = load_config(party["cfgs"]["bob"])
    certs = party["root"] / "certs"
    creds = grpc.ssl_channel_credentials(
        (certs / "ca.crt").read_bytes(), (certs / "alice.key").read_bytes(), (certs / "alice.crt").read_bytes()
    )
    options = [("grpc.ssl_target_name_override", party_identity_name("bob")), ("grpc.max_send_message_length", -1)]
    bomb = tpb.SessionSpec(session_id="alice.bomb", protocol="net-echo", params_json="{" + " " * (16 << 20) + "}")
    with grpc.secure_channel(cfg.address_of("bob"), creds, options=options) as ch:
        propose = ch.unary_unary(MAILBOX + "Propose", request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as refused:
            propose(bomb.SerializeToString(), timeout=30, compression=grpc.Compression.Gzip)
    assert refused.value.code() == C.RESOURCE_EXHAUSTED, refused.value.details()
    assert client.check_health(party["cfgs"]["bob"]) == "SERVING"
