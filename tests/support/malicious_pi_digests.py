"""A modified power-iteration plug-in for the group-key process tests (listed in ``party.plugins`` of trent only).

As **trent** it runs the honest Trent code behind a channel that, when it relays the data parties' digests of the
covariance mode's release (``digest/cov``), relays to party1 a set in which party3's digest is another one, and
the true set to the others: a coordinator relaying different digests to different parties (were it not caught, he
could pick the digest party1 sees after party2 had released).  Every other role is honest.
"""

from __future__ import annotations

from typing import Any

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.protocols.power_iteration import TRENT, PowerIterationParams, trent
from smcdp.protocols.power_iteration_threshold import Tags
from smcdp.v1 import messages_pb2 as pb


class TwoDigestSets:
    """Trent's channel: ``digest/cov`` to party1 with party3's digest (the set's last entry) zeroed."""

    def __init__(self, ch: Channel) -> None:
        self._ch = ch

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    async def send_many(self, to, tag: str, msg):
        if tag != Tags.covariance().digest or "party1" not in to:
            return await self._ch.send_many(to, tag, msg)
        other = pb.Blobs(values=[*msg.values[:-1], bytes(32)])
        await self._ch.send("party1", tag, other)
        return await self._ch.send_many([r for r in to if r != "party1"], tag, msg)


class EquivocatingTrent(PowerIterationPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != TRENT:
            return await super().run_role(role, ch, ctx)
        p = PowerIterationParams.from_mapping(ctx.params)
        await trent(TwoDigestSets(ch), p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


register(EquivocatingTrent())
