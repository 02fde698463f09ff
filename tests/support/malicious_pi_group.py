"""A modified power-iteration plug-in for the group-key tests (listed in ``party.plugins`` of trent only).

As **trent** it runs the honest Trent code behind a channel that, when it relays the releases of the
covariance mode under a group key (``contrib/cov``), delivers party3's release in place of every other
party's: the "sum" a data party would decrypt is then n·(party3's release) -- a coordinator asking the data
parties to decrypt one party's contribution.  In the exact mode it sends party3's start contribution as the
first block (``v/0``), to be decrypted as such.  Every other role is honest.
"""

from __future__ import annotations

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.protocols.power_iteration import COV_TAG, TRENT, PowerIterationParams, trent
from smcdp.protocols.power_iteration_threshold import CONTRIB_TAG, Tags
from tests.support.group_keys import OneForAll


class OneForAllTrent(PowerIterationPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != TRENT:
            return await super().run_role(role, ch, ctx)
        p = PowerIterationParams.from_mapping(ctx.params)
        evil = OneForAll(ch, COV_TAG, CONTRIB_TAG) if p.dp else BlockIsOneContribution(ch)
        await trent(evil, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


class BlockIsOneContribution:
    """Trent's channel in the exact mode: party3's start contribution (as party3 released it to him) goes out as
    the first block, in place of Trent's proven combination."""

    def __init__(self, ch: Channel) -> None:
        self._ch = ch
        self._third = None

    def __getattr__(self, name: str):
        return getattr(self._ch, name)

    async def recv_all(self, roles, tag: str, cls):
        got = await self._ch.recv_all(roles, tag, cls)
        if tag == Tags.exact_release("contrib", 0).release:
            self._third = got["party3"]
        return got

    async def send_many(self, to, tag: str, msg):
        if tag == "v/0":
            msg = self._third
        return await self._ch.send_many(to, tag, msg)


register(OneForAllTrent())
