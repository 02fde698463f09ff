"""A modified power-iteration plug-in for the group-key tests (listed in ``party.plugins`` of trent only).

As **trent** it runs the honest Trent code behind a channel that, when it relays the releases of the
covariance mode under a group key (``contrib/cov/<role>``), delivers party3's release in place of every other
party's: the "sum" a data party would decrypt is then n·(party3's release) -- a coordinator asking the data
parties to decrypt one party's contribution.  Every other role is honest.
"""

from __future__ import annotations

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.protocols.power_iteration import COV_TAG, TRENT, PowerIterationParams, trent
from smcdp.protocols.power_iteration_threshold import CONTRIB_TAG
from tests.support.group_keys import OneForAll


class OneForAllTrent(PowerIterationPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != TRENT:
            return await super().run_role(role, ch, ctx)
        p = PowerIterationParams.from_mapping(ctx.params)
        await trent(OneForAll(ch, COV_TAG, CONTRIB_TAG), p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


register(OneForAllTrent())
