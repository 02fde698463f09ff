"""A member's Abort naming another party is that member's word, at a party served over mutual TLS
(docs/fault-tolerance.md, "What a peer's word can put in a record"; the unit tests are
tests/unit/runtime/test_reported_culprits.py).

The review's script: alice, a participant, sends bob one Abort UNAVAILABLE naming bob as the culprit,
resumes the session, and again.  Bob's record said origin bob, his checkpoint counted the restarts as bob's
(``restarts_by = {'bob': 1}``, 2, 3) and the next Resume was refused "after failures of bob".
"""

from __future__ import annotations

import json
import time

import grpc

from smcdp.net.config import Timeouts
from smcdp.net.limits import Limits
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.v1 import transport_pb2 as tpb
from tests.support.boundary import MAILBOX, call_unary, spec_bytes
from tests.support.deployment import make_deployment, raw_channel

SID = "alice.framed"


def _failed(cfg, timeout: float = 20.0) -> dict:
    end = time.monotonic() + timeout
    while True:
        rec = client.get_result(cfg, SID)
        if rec["state"] == "failed":
            return rec
        assert time.monotonic() < end, rec
        time.sleep(0.1)


def test_an_abort_naming_its_receiver_is_the_aborters_word_and_charged_to_neither(tmp_path, in_thread):
    cfgs = make_deployment(
        tmp_path,
        ["alice", "bob"],
        limits=Limits(max_restarts=2),
        timeouts=Timeouts(connect_seconds=3, session_seconds=120, rpc_seconds=30, peer_grace_seconds=60),
    )
    bob = in_thread.start(cfgs["bob"])
    address = load_config(cfgs["bob"]).address_of("bob")
    ref = tpb.SessionRef(session_id=SID).SerializeToString()
    params = json.dumps({"wait_forever_role": "b"})
    with raw_channel(tmp_path / "certs", "alice", address, "bob") as alice:
        assert (
            call_unary(alice, MAILBOX + "Propose", spec_bytes(SID, params=params, timeout=120))[0] == grpc.StatusCode.OK
        )
        assert call_unary(alice, MAILBOX + "Begin", ref)[0] == grpc.StatusCode.OK
        for restarts in range(3):
            time.sleep(0.5)
            abort = tpb.AbortRequest(session_id=SID, code="UNAVAILABLE", message="bob went silent", culprit="bob")
            assert call_unary(alice, MAILBOX + "Abort", abort.SerializeToString())[0] == grpc.StatusCode.OK
            err = _failed(cfgs["bob"])["error"]
            assert err["origin"] == "alice", err  # whose word it is; bob is only what alice said
            assert (err["reported_by"], err["reported_culprit"]) == ("alice", "bob") and "corroborated" not in err
            meta = json.loads((bob.core.sessions_dir / f"{SID}.d" / "checkpoint.json").read_text())
            assert "bob" not in (meta.get("restarts_by") or {}), meta.get("restarts_by")
            code, details = call_unary(alice, MAILBOX + "Resume", ref)
            if restarts < 2:
                assert code == grpc.StatusCode.OK, details
            else:  # alice's claims used up their own allowance, and the refusal says whose claims they were
                assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
                assert "after failures of 'bob' as reported by 'alice' (not confirmed here)" in details, details
                assert meta["restarts_by"] == {"bob (reported by alice)": 2}
