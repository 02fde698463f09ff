"""Helpers shared by the primitive tests."""

from __future__ import annotations

import asyncio

from smcdp.net.channel import InMemoryNetwork

ROLES = {"a": "alice", "b": "bob"}


def run_roles(coros: dict, roles: dict | None = None, session_id: str = "test-session"):
    """Run role -> async fn(channel) on a fresh InMemoryNetwork; returns (results, network)."""
    net = InMemoryNetwork(roles or ROLES, session_id=session_id, timeout=120)
    results = asyncio.run(net.run(coros))
    return results, net
