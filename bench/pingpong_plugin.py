"""A two-role ping-pong protocol for transport benchmarks (``bench/session_driver.py --workload pingpong``).

Role ``a`` sends ``rounds`` messages of ``bytes`` bytes to role ``b``, each after ``b``'s answer to the one
before (a protocol round trip, as keyword's induction rounds are); ``b`` answers each with as many bytes.
No computation: what a round costs is the channel's and the transport's per-message work (serialisation,
the journal, gRPC and TLS, the hand-overs between the server's loop and the session's) and the wake-ups
on the way.  Only the plug-in API that has been stable since the governance work, so that a baseline tree
runs it too (the driver puts this directory on the party processes' ``PYTHONPATH``).  It describes no
session (no ``summary``): it runs at parties with ``[policy] open = true`` only, as bench parties are.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.plugins.base import ProtocolPlugin, SessionContext, register
from smcdp.v1 import messages_pb2 as mpb

NAME = "bench-pingpong"


class PingPong(ProtocolPlugin):
    name = NAME

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        if set(roles) != {"a", "b"}:
            raise InvalidMessage(f"{NAME} needs roles a and b, got {sorted(roles)}")
        out = {"rounds": 100, "bytes": 1024, **params}
        if set(out) != {"rounds", "bytes"}:
            raise InvalidMessage(f"{NAME}: unknown params {sorted(set(out) - {'rounds', 'bytes'})}")
        if not isinstance(out["rounds"], int) or not 1 <= out["rounds"] <= 100_000:
            raise InvalidMessage(f"{NAME}: rounds must be an integer in 1..100000")
        if not isinstance(out["bytes"], int) or not 0 <= out["bytes"] <= 1 << 20:
            raise InvalidMessage(f"{NAME}: bytes must be an integer in 0..1048576")
        return out

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        rounds, payload = ctx.params["rounds"], b"\x5a" * ctx.params["bytes"]
        if role == "a":
            t0 = time.perf_counter()
            for i in range(rounds):
                await ch.send("b", f"ping/{i}", mpb.Blobs(values=[payload]))
                pong = await ch.recv("b", f"pong/{i}", mpb.Blobs)
                if pong.values[0] != payload:
                    raise InvalidMessage(f"{NAME}: pong {i} is not what was sent")
            seconds = time.perf_counter() - t0
            return {"rounds": rounds, "seconds": seconds, "ms_per_round_trip": 1e3 * seconds / rounds}
        for i in range(rounds):
            ping = await ch.recv("a", f"ping/{i}", mpb.Blobs)
            await ch.send("a", f"pong/{i}", ping)
        return {"rounds": rounds}


register(PingPong())
