"""Power iteration's sessions under a group key in one process (every role on an InMemoryNetwork, dealt shares:
the key ceremony is tested on its own), for the DP modes' and the exact mode's unit tests."""

from __future__ import annotations

import asyncio

from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.power_iteration import data_party, trent
from smcdp.protocols.power_iteration_threshold import GroupKey


def run(blocks, params, *, sk, shares=None, rewrite=None, timeout=120, seeds=None, on_net=None, trent_seed=None):
    """All roles on one InMemoryNetwork.  ``shares``: dealt key shares (the group-key mode), else party1
    holds ``sk`` (the single-key mode).  ``rewrite``: role -> fn(to, tag, data) -> data, that role's
    outgoing messages rewritten (a deviating participant).  Returns (network, results or the exception)."""
    n = len(blocks)
    roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(n)}}
    net = InMemoryNetwork(roles, timeout=timeout)
    if on_net is not None:  # a deviating participant's rewrite may read what its role received
        on_net(net)
    for role, fn in (rewrite or {}).items():
        ch = net.channels[role]

        async def evil(to_role, tag, type_url, data, original=ch._transmit, fn=fn):
            await original(to_role, tag, type_url, fn(to_role, tag, data))

        ch._transmit = evil
    indices = {f"party{i + 1}": i + 1 for i in range(n)}
    coros = {"trent": lambda c: trent(c, params, allow_insecure_keys=True, seed=trent_seed)}
    for i, A in enumerate(blocks):
        group = None if shares is None else GroupKey(shares[i], indices, "lab")
        coros[f"party{i + 1}"] = lambda c, A=A, i=i, group=group: data_party(
            c,
            A,
            params,
            private_key=sk if (i == 0 and shares is None) else None,
            allow_insecure_keys=True,
            group_key=group,
            seed=None if seeds is None else seeds[i],
        )
    try:
        return net, asyncio.run(net.run(coros))
    except Exception as exc:  # noqa: BLE001 - the tests look at it
        return net, exc
