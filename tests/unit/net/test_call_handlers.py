"""The server registers every method as a client-streaming one: gRPC then calls the party's handler as soon as a
call's headers arrive, and the party counts the call before any request is read
(tests/integration/grpc/test_call_accounting.py shows what that changes on the wire)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from grpc_health.v1 import health_pb2

from smcdp.net import server as server_mod
from smcdp.net.limits import Limits
from smcdp.v1 import transport_pb2 as tpb


def test_the_server_serves_every_method_as_client_streaming(monkeypatch):
    """What the tests above rest on: no method of Mailbox, Control or Health is registered as one whose request
    gRPC reads before the party's handler counts the call."""
    seen = {}
    real = server_mod.grpc.method_handlers_generic_handler

    def capture(service, handlers):
        seen[service] = handlers
        return real(service, handlers)

    host = SimpleNamespace(name="bob")
    quotas = server_mod.CallQuotas(Limits(), "bob")
    services = tpb.DESCRIPTOR.services_by_name
    monkeypatch.setattr(server_mod.grpc, "method_handlers_generic_handler", capture)
    server_mod._generic_handler(
        services["Mailbox"], server_mod.MailboxServicer(host, 1 << 20, quotas), quotas, tpb, host
    )
    server_mod._generic_handler(services["Control"], server_mod.ControlServicer(host), quotas, tpb)
    server_mod._generic_handler(
        health_pb2.DESCRIPTOR.services_by_name["Health"], server_mod._HealthServicer(None), quotas, health_pb2
    )
    methods = {f"{svc}/{name}": h for svc, hs in seen.items() for name, h in hs.items()}
    assert len(methods) == len(services["Mailbox"].methods) + len(services["Control"].methods) + 2
    assert [m for m, h in methods.items() if not h.request_streaming] == []
    assert {m for m, h in methods.items() if h.response_streaming} == {
        "smcdp.v1.Mailbox/Stream",
        "grpc.health.v1.Health/Watch",
    }


def test_grpc_itself_caps_no_calls(monkeypatch):
    """gRPC's maximum_concurrent_rpcs refuses every caller alike -- other members, health checks, the operator --
    so one member's calls filled it for everyone (issue 24; the review's 32 calls that sent no request).  With
    every call counted by the party from its first moment, the server gives gRPC no such cap: the party's own
    quotas (per peer, all peers, the operator's reserve, running sessions) are the only ones that refuse."""
    made = {}

    class Stop(Exception):
        pass

    def server(*args, **kwargs):
        made.update(kwargs, args=args)
        raise Stop

    monkeypatch.setattr(server_mod.grpc.aio, "server", server)
    config = SimpleNamespace(name="bob", peers={"alice": None, "charlie": None}, limits=Limits())
    party = server_mod.PartyServer(config, None, None, None)
    try:
        asyncio.run(party.start())
    except Stop:
        pass
    assert made and made.get("maximum_concurrent_rpcs") is None and not made["args"]
    assert "grpc.max_concurrent_streams" in dict(made["options"])
