"""A party's channel to a peer far away: the TLS handshake with both certificates and HTTP/2's settings take
about two round trips (three with TCP's own, which the local proxy here does not delay), so a link with a
round trip of 1.5 s makes a connection take ~3 s.  Each connection attempt of the peers' channels had 200 ms
growing to 2 s (``grpc.min_reconnect_backoff_ms`` is the deadline of an attempt): no attempt ever completed,
and every call to a live peer failed until its deadline (DEADLINE_EXCEEDED after 30 s here)."""

from __future__ import annotations

import asyncio
from concurrent import futures

import grpc

from smcdp.net.grpc_channel import channel_options
from smcdp.net.tls import TlsMaterial, party_identity_name
from smcdp.runtime.config import load_config
from smcdp.runtime.local import write_local_deployment
from smcdp.v1 import transport_pb2 as tpb
from smcdp.v1 import transport_pb2_grpc as tgrpc
from tests.support.link_proxy import LinkProxy


class _Bob(tgrpc.ControlServicer):
    def GetResult(self, request, context):
        context.abort(grpc.StatusCode.NOT_FOUND, "no such session")


def test_a_peer_one_and_a_half_seconds_of_round_trip_away_is_reached(tmp_path):
    proxy = LinkProxy(rtt=1.5)
    configs = write_local_deployment(tmp_path, ["alice", "bob"], allow_insecure_keys=True)
    mine, bobs = load_config(configs["alice"]), load_config(configs["bob"])
    bob_tls = TlsMaterial.load(bobs.tls.ca, bobs.tls.cert, bobs.tls.key)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    tgrpc.add_ControlServicer_to_server(_Bob(), server)
    creds = grpc.ssl_server_credentials(
        [(bob_tls.key_pem, bob_tls.cert_pem)], root_certificates=bob_tls.ca_pem, require_client_auth=True
    )
    proxy.to(f"127.0.0.1:{server.add_secure_port('127.0.0.1:0', creds)}")
    server.start()
    tls = TlsMaterial.load(mine.tls.ca, mine.tls.cert, mine.tls.key)

    async def call() -> grpc.StatusCode:
        channel = grpc.aio.secure_channel(
            f"127.0.0.1:{proxy.port}",
            grpc.ssl_channel_credentials(tls.ca_pem, tls.key_pem, tls.cert_pem),
            options=channel_options() + [("grpc.ssl_target_name_override", party_identity_name("bob"))],
        )
        try:
            # waits through connection attempts until one completes (or 30 s pass)
            await tgrpc.ControlStub(channel).GetResult(tpb.SessionRef(session_id="x"), timeout=30, wait_for_ready=True)
        except grpc.aio.AioRpcError as exc:
            return exc.code()
        finally:
            await channel.close()
        return grpc.StatusCode.OK

    try:
        assert asyncio.run(call()) == grpc.StatusCode.NOT_FOUND  # bob answered: the handshake completed
    finally:
        server.stop(0)
        proxy.close()
