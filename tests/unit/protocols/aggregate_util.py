"""Helpers for the secure-minimum and aggregation tests: small keys (an explicit, test-only opt-in) and an in-memory runner."""

import asyncio
import functools

from smcdp.crypto import dgk
from smcdp.crypto.paillier import generate_keypair
from smcdp.net.channel import InMemoryNetwork


@functools.cache
def small_paillier(bits: int = 768, which: int = 0):
    return generate_keypair(bits, allow_insecure=True)[1]


@functools.cache
def small_dgk(bits: int = 512, t: int = 64):
    return dgk.generate_keypair(bits, t, max_ell=200, allow_insecure=True)


def run_network(roles: dict[str, str], fns: dict, tamper=None):
    """Run one coroutine per role on an InMemoryNetwork; ``tamper(net)`` may patch channels first."""
    net = InMemoryNetwork(roles, timeout=120)
    if tamper is not None:
        tamper(net)
    res = asyncio.run(net.run(fns))
    return res, net


def tamper_message(net, sender: str, tag: str, mutate, receiver: str | None = None):
    """Replace the bytes of ``sender``'s message ``tag`` (to ``receiver`` or anyone) by ``mutate(bytes)``."""
    ch = net.channels[sender]
    original = ch._transmit

    async def _transmit(to_role, t, type_url, data):
        if t == tag and (receiver is None or to_role == receiver):
            data = mutate(data)
        await original(to_role, t, type_url, data)

    ch._transmit = _transmit
