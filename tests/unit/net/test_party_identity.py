"""A party dialing party P accepts only a server whose certificate names P as its party identity
(``<P>.party.smcdp.invalid``), never one that merely carries P's name among its extra host names.

The review's case (/tmp/review-net/san.py): alice's certificate carried the extra host name "bob"
(`--hosts alice=bob`, a short host name that later became a party's name, `--localhost` beside a party
named localhost); carol, dialing party bob, reached alice's server and accepted it.  The certificate
here is issued with that host directly (the tools now refuse such host lists: test_tls, test_deploy), as
any certificate an earlier version issued may carry it.  Real handshakes on loopback, each of the three
clients a party has: its peer channels (PeerConnector), its operator's calls (smcdp.runtime.client) and
the console's certificate probe."""

from __future__ import annotations

import asyncio
import ssl
from concurrent import futures

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from smcdp.errors import SmcdpError
from smcdp.net import tls
from smcdp.net.grpc_channel import PeerConnector
from smcdp.runtime import client
from smcdp.runtime.config import load_config
from smcdp.runtime.local import write_local_deployment


@pytest.fixture()
def impostor(tmp_path):
    """carol's config, whose peer bob's address is that of a server holding alice's certificate, issued with
    the extra host name "bob"; ``alice_at`` is the same address under alice's name."""
    configs = write_local_deployment(tmp_path, ["alice", "bob", "carol"])
    certs = tmp_path / "certs"
    ca_key = tls.load_private_key(certs / "ca.key")
    ca = tls.load_certificate(certs / "ca.crt")
    key, cert = tls.issue_party_certificate(ca_key, ca, "alice", ["bob"])  # type: ignore[arg-type]
    tls.write_private_key(tmp_path / "alice-as-bob.key", key)
    tls.write_certificate(tmp_path / "alice-as-bob.crt", cert)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), server)
    creds = grpc.ssl_server_credentials(
        [((tmp_path / "alice-as-bob.key").read_bytes(), (tmp_path / "alice-as-bob.crt").read_bytes())],
        root_certificates=(certs / "ca.crt").read_bytes(),
        require_client_auth=True,
    )
    address = f"127.0.0.1:{server.add_secure_port('127.0.0.1:0', creds)}"
    server.start()
    carol = load_config(configs["carol"])
    try:
        yield {
            "bob_at": carol.with_changes(peers={**carol.peers, "bob": address}),
            "alice_at": carol.with_changes(peers={**carol.peers, "alice": address}),
            "tls": tls.TlsMaterial.load(carol.tls.ca, carol.tls.cert, carol.tls.key),
            "address": address,
        }
    finally:
        server.stop(0)


def _check(config, material, party: str) -> str:
    async def run() -> str:
        connector = PeerConnector(config, material)
        try:
            reply = await health_pb2_grpc.HealthStub(connector.channel(party)).Check(
                health_pb2.HealthCheckRequest(), timeout=10
            )
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.aio.AioRpcError as exc:
            return f"{exc.code().name}: {exc.details()}"
        finally:
            await connector.close()

    return asyncio.run(run())


def test_a_peer_channel_to_bob_refuses_a_server_whose_certificate_only_carries_bob_as_a_host(impostor):
    outcome = _check(impostor["bob_at"], impostor["tls"], "bob")
    assert outcome.startswith("UNAVAILABLE"), outcome  # before: SERVING -- alice passed for bob
    # the same server is accepted as the party its certificate names
    assert _check(impostor["alice_at"], impostor["tls"], "alice") == "SERVING"


def test_the_failure_says_which_identity_name_was_missing(impostor):
    from smcdp.net.grpc_channel import identity_hint

    details = _check(impostor["bob_at"], impostor["tls"], "bob")
    hint = identity_hint(details, "bob")
    assert "bob.party.smcdp.invalid" in hint and "re-issued" in hint, details
    assert identity_hint("failed to connect to all addresses; last error: UNKNOWN: Connection refused", "bob") == ""


def test_an_operator_call_to_bob_refuses_a_server_whose_certificate_only_carries_bob_as_a_host(impostor):
    with pytest.raises(SmcdpError) as refused:
        client.check_health(impostor["bob_at"], peer="bob", timeout=10)  # before: "SERVING"
    assert refused.value.code == "UNAVAILABLE" and "bob.party.smcdp.invalid" in str(refused.value)
    assert client.check_health(impostor["alice_at"], peer="alice", timeout=10) == "SERVING"


def test_the_consoles_certificate_probe_checks_the_identity_name_too(impostor):
    from smcdp.runtime.console.readmodel import _peer_certificate

    cfg = impostor["bob_at"]
    with pytest.raises(ssl.SSLCertVerificationError):  # before: alice's certificate, shown as bob's
        _peer_certificate(impostor["address"], "bob", impostor["tls"], cfg.tls.cert, cfg.tls.key, 10)
    cert = _peer_certificate(impostor["address"], "alice", impostor["tls"], cfg.tls.cert, cfg.tls.key, 10)
    assert tls.certificate_party_name(cert) == "alice"
