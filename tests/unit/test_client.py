"""smcdp.client: the typed answers, parsed from what a party sends, and the client's errors.

The calls themselves against real parties: tests/unit/cli/test_party_cli.py (in-process parties)
and tests/integration/processes/test_operator_client.py (party processes).
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import pytest

from smcdp.client import (
    PartyClient,
    ProposalState,
    SessionError,
    SessionInfo,
    SessionResult,
    SessionState,
    SessionStatus,
)
from smcdp.errors import InvalidMessage, PermissionDenied, ResourceExhausted, Unavailable
from tests.support.deployment import make_deployment

RECORD = {
    "session_id": "power-iteration-1",
    "protocol": "power-iteration",
    "party": "trent",
    "role": "trent",
    "roles": {"trent": "trent", "party1": "alice", "party2": "bob"},
    "initiator": "trent",
    "params": {"key_bits": 512},
    "seed": None,
    "timeout_seconds": 60.0,
    "state": "succeeded",
    "result": {"rounds": 12, "x": [0.6, 0.8]},
    "error": None,
    "stats": {"bytes_sent": {"alice": 10}},
    "started_at": "2026-05-01T10:00:00.000+00:00",
    "finished_at": "2026-05-01T10:00:03.500+00:00",
    "seconds": 3.5,
    "restarts": 0,
    "resumable": False,
}


def test_session_result_from_a_record():
    r = SessionResult.from_record(RECORD)
    assert r.state is SessionState.SUCCEEDED and r.succeeded and r.state.ended
    assert r.result == {"rounds": 12, "x": [0.6, 0.8]} and r.roles["party1"] == "alice"
    assert r.finished_at - r.started_at == dt.timedelta(seconds=3.5)
    assert r.raise_for_state() is r
    assert r.as_dict() == RECORD  # the party's JSON exactly (the CLI prints it)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.state = SessionState.FAILED  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.roles["party1"] = "mallory"  # type: ignore[index]


@pytest.mark.parametrize(
    "code,exc",
    [("PERMISSION_DENIED", PermissionDenied), ("UNAVAILABLE", Unavailable), ("RESOURCE_EXHAUSTED", ResourceExhausted)],
)
def test_a_failed_record_raises_its_typed_error(code, exc):
    rec = dict(
        RECORD, state="failed", result=None, error={"code": code, "message": "party 'bob' said no", "origin": "bob"}
    )
    r = SessionResult.from_record(rec)
    assert r.state is SessionState.FAILED and not r.succeeded
    assert r.error == SessionError(code, "party 'bob' said no", "bob")
    with pytest.raises(exc, match="power-iteration-1 failed: party 'bob' said no"):
        r.raise_for_state()


def test_status_and_unknown_states():
    st = SessionStatus.from_dict(
        {
            "session_id": "s",
            "protocol": "keyword",
            "party": "alice",
            "role": "client",
            "state": "running",
            "round": 3,
            "step": "logsum",
            "restarts": 1,
            "incarnation": "17ad2362a8c3",
            "seconds_left": 41.5,
            "error": None,
            "resumable": False,
            "peers": {"bob": {"role": "server", "last_answer_seconds_ago": 0.4, "incarnation": "0b9e"}},
        }
    )
    assert st.state is SessionState.RUNNING and st.round == 3 and st.step == "logsum"
    assert st.peers["bob"].role == "server" and st.peers["bob"].last_answer_seconds_ago == 0.4
    assert st.incarnation == "17ad2362a8c3" and st.peers["bob"].incarnation == "0b9e"
    assert SessionState("something-new") is SessionState.UNKNOWN and not SessionState.UNKNOWN.ended
    finished = SessionStatus.from_dict(
        {
            "session_id": "s",
            "state": "failed",
            "round": None,
            "peers": {},
            "error": {"code": "ABORTED", "message": "x", "origin": "bob"},
        }
    )
    assert finished.round is None and finished.error.origin == "bob"


def test_proposal_and_session_infos():
    p = SessionInfo.from_dict(
        {
            "session_id": "dp-1",
            "state": "pending",
            "protocol": "dp-aggregate",
            "initiator": "charlie",
            "role": "party1",
            "roles": {"party1": "alice"},
            "params": {"epsilon": 1.0},
            "seeded": False,
            "epsilon": 1.0,
            "delta": None,
            "summary": {"key_bits": 512},
            "received_at": "2026-05-01T10:00:00+00:00",
            "expires_at": "2026-05-01T10:10:00+00:00",
            "decided_at": None,
            "reason": None,
            "kind": "proposal",
        }
    )
    assert p.pending and p.state is ProposalState.PENDING and p.epsilon == 1.0
    assert p.expires_at - p.received_at == dt.timedelta(minutes=10)
    s = SessionInfo.from_dict(
        {
            "session_id": "dp-0",
            "state": "succeeded",
            "kind": "session",
            "epsilon": "0.5",
            "budget_state": "charged",
            "error": None,
        }
    )
    assert s.state is SessionState.SUCCEEDED and s.epsilon == 0.5 and s.budget_state == "charged"
    with pytest.raises(InvalidMessage, match="proposal state"):
        SessionInfo.from_dict({"session_id": "x", "state": "teleported", "kind": "proposal"})


def test_client_from_config_and_its_errors(tmp_path):
    cfgs = make_deployment(tmp_path, ["alice", "bob"])
    pc = PartyClient.from_config(cfgs["alice"])
    assert pc.name == "alice" and "alice" in repr(pc)
    with pytest.raises(InvalidMessage):
        PartyClient(str(cfgs["alice"]))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage, match="roles"):
        pc.start_session("net-echo", {})
    # nobody serves alice's address: a typed, actionable error naming the party
    with pytest.raises(Unavailable, match="party 'alice' is not reachable"):
        pc.result("nope")
