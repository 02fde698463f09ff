"""A tiny two-role protocol for transport tests (listed in ``party.plugins``).

Role ``a`` sends Floats ``x`` (and optionally a large Blobs ``big``, and a
late ``x2``) to role ``b``; ``b`` answers ``y = 2 x``.  Parameters make a role
fail, compute (CPU-bound, holding the GIL), block its event loop without computing
(``block_seconds``: the GIL is released, no CPU is spent) or wait for a message that
never comes, so tests can exercise aborts, deadlines and server responsiveness.
"""

from __future__ import annotations

import hashlib
import os
import time
from collections.abc import Mapping
from typing import Any

from smcdp.errors import InvalidMessage
from smcdp.net.channel import Channel
from smcdp.plugins.base import ProtocolPlugin, SessionContext, register
from smcdp.v1 import messages_pb2 as mpb

_PARAMS = {
    "n": 3,
    "big_bytes": 0,
    "busy_seconds": 0.0,
    "block_seconds": 0.0,
    "fail_role": "",
    "late_send": False,
    "wait_forever_role": "",
}


class EchoPlugin(ProtocolPlugin):
    name = "net-echo"

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        if set(roles) != {"a", "b"}:
            raise InvalidMessage(f"net-echo needs roles a and b, got {sorted(roles)}")
        unknown = set(params) - set(_PARAMS)
        if unknown:
            raise InvalidMessage(f"net-echo: unknown params {sorted(unknown)}")
        out = dict(_PARAMS, **params)
        if not isinstance(out["n"], int) or not 1 <= out["n"] <= 1000:
            raise InvalidMessage("net-echo: n must be an integer in 1..1000")
        if not isinstance(out["big_bytes"], int) or not 0 <= out["big_bytes"] <= 64 << 20:
            raise InvalidMessage("net-echo: big_bytes must be 0..64 MiB")
        return out

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = ctx.params
        if p["fail_role"] == role:
            raise InvalidMessage(f"net-echo role {role} was told to fail")
        if p["wait_forever_role"] == role:
            other = "b" if role == "a" else "a"
            await ch.recv(other, "never-sent", mpb.Flag)
        if role == "a":
            values = [float(i) + 0.5 for i in range(p["n"])]
            if "values" in ctx.inputs:
                with open(ctx.inputs["values"], encoding="utf-8") as f:
                    values = [float(v) for v in f.read().split()]
            await ch.send("b", "x", mpb.Floats(values=values))
            digest = None
            if p["big_bytes"]:
                blob = os.urandom(p["big_bytes"])
                digest = hashlib.sha256(blob).hexdigest()
                await ch.send("b", "big", mpb.Blobs(values=[blob]))
            late_send_seconds = None
            if p["late_send"]:
                await _sleep(0.5)  # b is computing by now
                t0 = time.monotonic()
                await ch.send("b", "x2", mpb.Flag(value=True))
                late_send_seconds = time.monotonic() - t0
            y = await ch.recv("b", "y", mpb.Floats)
            return {"y": list(y.values), "big_sha256": digest, "late_send_seconds": late_send_seconds}
        x = await ch.recv("a", "x", mpb.Floats)
        digest = None
        if p["big_bytes"]:
            big = await ch.recv("a", "big", mpb.Blobs)
            digest = hashlib.sha256(big.values[0]).hexdigest()
        if p["busy_seconds"]:
            ch.progress(step="busy")  # the party's status shows it (tests sample while it holds)
            end = time.monotonic() + p["busy_seconds"]
            acc = 0
            while time.monotonic() < end:  # pure-Python work: holds the GIL, blocks this loop
                acc = (acc * 31 + 7) % 1000003
            ch.progress(step="")
        if p["block_seconds"]:
            # the role's loop is held as by a computation (its own messages and the channel's work wait),
            # but the GIL is free: for tests whose subject is the *other* party, where burning a core
            # here would only take CPU from the parties under test
            ch.progress(step="blocked")
            time.sleep(p["block_seconds"])  # noqa: ASYNC251 - blocking the loop is the point
            ch.progress(step="")
        if p["late_send"]:
            await ch.recv("a", "x2", mpb.Flag)
        await ch.send("a", "y", mpb.Floats(values=[2 * v for v in x.values]))
        return {"received": list(x.values), "big_sha256": digest}


async def _sleep(s: float) -> None:
    import asyncio

    await asyncio.sleep(s)


register(EchoPlugin())
