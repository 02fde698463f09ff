"""Issue 24, governance half, against real party processes: a hostile member with a valid
certificate tries each door (docs/security.md, "Governance doors").

Each test starts its own small loopback deployment (``make_deployment``) and talks to the
parties either as their operators (``smcdp.runtime.client``) or as a member speaking raw
gRPC with its own certificate (``tests.support.deployment.raw_channel``)."""

from __future__ import annotations

import json
import time

import grpc
import pytest

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
            code, details = call_unary(bob, MAILBOX + "Propose", _spec(f"deny-{i}", roles, **extra))
            assert code == C.PERMISSION_DENIED, (code, details)
            assert "rule policy)" in details and "deny by default" in details
        seeded = tpb.SessionSpec.FromString(_spec("deny-seeded", ECHO))
        seeded.seed = 7
        code, details = call_unary(bob, MAILBOX + "Propose", seeded.SerializeToString())
        assert code == C.PERMISSION_DENIED and "rule policy)" in details
    rec = client.start_session(cfgs["alice"], "net-echo", ECHO, {"n": 2}, session_id="own-1", timeout=30)
    assert rec["state"] == "succeeded" and rec["result"]["y"] == [1.0, 3.0]
    # bob has no say over alice, and alice's operator none over bob: bob's own operator can't use alice
    with pytest.raises(Exception) as ei:
        client.start_session(cfgs["bob"], "net-echo", {"a": "bob", "b": "alice"}, {}, session_id="bob-1",
                             timeout=30)
    assert getattr(ei.value, "code", "") == "PERMISSION_DENIED" and "party 'alice'" in str(ei.value)
    refused = _events(tmp_path / "state" / "alice", "refused")
    assert {e["rule"] for e in refused} == {"policy"} and len(refused) >= 4
    procs["alice"].terminate()
    assert "has no [policy]: it refuses EVERY session a peer proposes" in procs["alice"].output()
