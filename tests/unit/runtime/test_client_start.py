"""The operator's start call when its transport loses it (smcdp.runtime.client.StartCall).

A ``StartSession`` that never left -- no connection to the party could be made (under load, a handshake
that timed out) -- while the party itself answers moments later that it has no such session, is made
again, a few times, instead of failing a session nobody began (seen in the suite under load as "no
session" at every party).  A call that did leave and was cut is not repeated: the party may have
restarted without the session (its state lost), and must not begin it anew.  The party here is a
stand-in gRPC server with the deployment's TLS, in this process.
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
    """Runs every session at once; ``cut``: the first ``cut`` StartSession calls arrive and are cut off
    (UNAVAILABLE) before the session is registered."""

    def __init__(self, cut: int = 0) -> None:
        self.cut = cut
        self.starts = 0
        self.records: dict[str, dict] = {}
        self.lock = threading.Lock()

    def StartSession(self, request, context):
        with self.lock:
            self.starts += 1
            n = self.starts
        if n <= self.cut:
            context.abort(grpc.StatusCode.UNAVAILABLE, "Socket closed")
        sid = request.session_id
        if sid in self.records:
            context.abort(grpc.StatusCode.ALREADY_EXISTS, f"session {sid!r} already exists")
        self.records[sid] = {"session_id": sid, "state": "succeeded", "result": {"n": n}}
        return self._reply(sid)

    def GetResult(self, request, context):
        if request.session_id not in self.records:
            context.abort(grpc.StatusCode.NOT_FOUND, f"no session {request.session_id!r}")
        return self._reply(request.session_id)

    def GetStatus(self, request, context):
        context.abort(grpc.StatusCode.NOT_FOUND, "no such session")

    def _reply(self, sid: str) -> tpb.SessionRecord:
        rec = self.records[sid]
        return tpb.SessionRecord(session_id=sid, state=rec["state"], record_json=json.dumps(rec))


@pytest.fixture
def party(tmp_path):
    """``serve(standin, after=s)``: trent's config, its stand-in serving from ``s`` seconds on (until then
    nothing listens at its address: a call there cannot connect)."""
    configs = write_local_deployment(tmp_path, ["trent", "alice"], allow_insecure_keys=True)
    cfg = load_config(configs["trent"])
    tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)
    servers, timers = [], []

    def start(standin: StandIn) -> None:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        tgrpc.add_ControlServicer_to_server(standin, server)
        creds = grpc.ssl_server_credentials(
            [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
        )
        server.add_secure_port(cfg.address_of("trent"), creds)
        server.start()
        servers.append(server)

    def serve(standin: StandIn, after: float = 0.0):
        if after:
            timer = threading.Timer(after, start, (standin,))
            timer.start()
            timers.append(timer)
        else:
            start(standin)
        return cfg

    yield serve
    for timer in timers:
        timer.join()
    for server in servers:
        server.stop(0)


def _start(cfg):
    return client.start_session(cfg, "power-iteration", {"trent": "trent", "party1": "alice"}, {}, timeout=30)


def test_a_start_call_that_could_not_connect_is_made_again_once_the_party_answers(party):
    standin = StandIn()
    rec = _start(party(standin, after=1.0))  # the first call finds nothing listening
    assert rec["state"] == "succeeded" and rec["result"] == {"n": 1}
    assert standin.starts == 1  # the first call never arrived


def test_a_start_call_that_arrived_and_was_cut_is_not_made_again(party):
    standin = StandIn(cut=1)
    with pytest.raises(Unavailable, match="Socket closed"):
        _start(party(standin))
    assert standin.starts == 1 and standin.records == {}


def test_a_lost_reply_of_a_session_the_party_runs_gives_its_record(party):
    standin = StandIn()
    cfg = party(standin)
    sid = "trent.begun"
    standin.records[sid] = {"session_id": sid, "state": "succeeded", "result": {"n": 0}}
    standin.cut, standin.starts = 1, 0
    rec = client.start_session(cfg, "power-iteration", {"trent": "trent", "party1": "alice"}, {}, session_id="begun")
    assert rec["result"] == {"n": 0} and standin.starts == 1


def test_an_operator_call_waits_for_a_slow_handshake(tmp_path):
    """The party's own channels give a connection attempt 200 ms (their calls are retried); an operator's call
    is made once, and a TLS handshake that takes longer (a busy party on a loaded host; here a link with 0.6 s
    of round trip) must not fail it."""
    from tests.support.link_proxy import LinkProxy

    proxy = LinkProxy(rtt=0.6)
    try:
        configs = write_local_deployment(
            tmp_path, ["trent", "alice"], allow_insecure_keys=True, ports={"trent": proxy.port}
        )
        cfg = load_config(configs["trent"])
        tls = TlsMaterial.load(cfg.tls.ca, cfg.tls.cert, cfg.tls.key)
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        tgrpc.add_ControlServicer_to_server(StandIn(), server)
        creds = grpc.ssl_server_credentials(
            [(tls.key_pem, tls.cert_pem)], root_certificates=tls.ca_pem, require_client_auth=True
        )
        port = server.add_secure_port("127.0.0.1:0", creds)
        server.start()
        proxy.to(f"127.0.0.1:{port}")
        try:
            assert _start(cfg)["state"] == "succeeded"
        finally:
            server.stop(0)
    finally:
        proxy.close()
