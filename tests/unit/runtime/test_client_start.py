"""The operator's start call when its transport loses it (smcdp.runtime.client.StartCall).

A ``StartSession`` that fails with UNAVAILABLE before the party heard of the session -- a connection that
failed under load, while the party itself answers moments later that it has no such session -- is made
again, a few times, instead of failing a session nobody began (seen in the suite under load as "no
session" at every party).  A repeated call whose first reached the party after all is answered with the
session's record.  The party here is a stand-in gRPC server with the deployment's TLS, in this process.
"""

from __future__ import annotations

import json
import threading
from concurrent import futures

import grpc
import pytest

from smcdp.errors import Unavailable
from smcdp.net.tls import TlsMaterial
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.runtime.local import write_local_deployment
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc


class StandIn(tgrpc.ControlServicer):
    """Loses the first ``lost`` StartSession calls (UNAVAILABLE, nothing registered); then runs the session
    at once.  ``already``: the lost call had registered the session (only its reply was lost).  ``late``:
    the lost call arrives after the party answered "no such session" (so the repeated one finds it)."""

    def __init__(self, lost: int, already: bool = False, late: bool = False) -> None:
        self.lost = lost
        self.already = already
        self.late = late
        self.pending: list[str] = []
        self.starts = 0
        self.records: dict[str, dict] = {}
        self.lock = threading.Lock()

    def StartSession(self, request, context):
        with self.lock:
            self.starts += 1
            n = self.starts
        sid = request.session_id
        if n <= self.lost:
            if self.already:
                self.records[sid] = {"session_id": sid, "state": "succeeded", "result": {"n": n}}
            elif self.late:
                self.pending.append(sid)
            context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        if sid in self.records:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"session {sid!r} already exists")
        self.records[sid] = {"session_id": sid, "state": "succeeded", "result": {"n": n}}
        return self._reply(sid)

    def GetResult(self, request, context):
        if request.session_id not in self.records:
            if request.session_id in self.pending:  # it arrives just after this answer
                self.records[request.session_id] = {
                    "session_id": request.session_id,
                    "state": "succeeded",
                    "result": {"n": 1},
                }
            context.abort(grpc.StatusCode.NOT_FOUND, f"no session {request.session_id!r}")
        return self._reply(request.session_id)

    def GetStatus(self, request, context):
        context.abort(grpc.StatusCode.NOT_FOUND, "no such session")

    def _reply(self, sid: str) -> tpb.SessionRecord:
        rec = self.records[sid]
        return tpb.SessionRecord(session_id=sid, state=rec["state"], record_json=json.dumps(rec))


@pytest.fixture
def party(tmp_path):
    configs = write_local_deployment(tmp_path, ["trent", "alice"], allow_insecure_keys=True)
    cfg = load_config(configs["trent"])
    tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)
    servers = []

    def serve(standin: StandIn):
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        tgrpc.add_ControlServicer_to_server(standin, server)
        creds = grpc.ssl_server_credentials(
            [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
        )
        server.add_secure_port(cfg.address_of("trent"), creds)
        server.start()
        servers.append(server)
        return cfg

    yield serve
    for server in servers:
        server.stop(0)


def _start(cfg):
    return client.start_session(cfg, "power-iteration", {"trent": "trent", "party1": "alice"}, {}, timeout=30)


def test_a_start_call_lost_before_the_party_heard_of_it_is_made_again(party):
    standin = StandIn(lost=1)
    rec = _start(party(standin))
    assert rec["state"] == "succeeded" and rec["result"] == {"n": 2}
    assert standin.starts == 2


def test_a_repeated_call_whose_first_arrived_gets_the_session_record(party):
    standin = StandIn(lost=1, already=True)
    rec = _start(party(standin))
    assert rec["state"] == "succeeded" and rec["result"] == {"n": 1}  # the first call's session, not a second
    assert standin.starts == 1  # the party had it: nothing to call again


def test_a_repeated_call_refused_because_the_first_arrived_late_gets_its_record(party):
    standin = StandIn(lost=1, late=True)
    rec = _start(party(standin))
    assert rec["state"] == "succeeded" and rec["result"] == {"n": 1}  # ALREADY_EXISTS: the first call's session
    assert standin.starts == 2


def test_the_call_is_made_again_a_few_times_only(party):
    standin = StandIn(lost=10)
    with pytest.raises(Unavailable, match="Socket closed"):
        _start(party(standin))
    assert standin.starts == client.StartCall.ATTEMPTS
