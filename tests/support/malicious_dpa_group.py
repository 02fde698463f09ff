"""A modified dp-aggregate plug-in for the group-key tests (listed in ``party.plugins`` of charlie only).

As **charlie** it runs the honest group-key Charlie behind a channel that, when it relays the releases of G3
(``g3/contrib``), delivers party3's release in place of every other party's: the "sum" a data party would
decrypt for him would be K·(party3's release) -- a curator asking the data parties to decrypt one party's
contribution.  Every other role is honest.
"""

from __future__ import annotations

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.dp_aggregate import DPAggregatePlugin
from smcdp.protocols.dp_aggregate import CHARLIE, DPAggregateParams
from smcdp.protocols.dp_aggregate_threshold import RELEASE, charlie
from tests.support.group_keys import OneForAll


class OneForAllCharlie(DPAggregatePlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != CHARLIE:
            return await super().run_role(role, ch, ctx)
        p = DPAggregateParams.from_mapping(ctx.params)
        await charlie(OneForAll(ch, RELEASE.release, RELEASE.contrib), p, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


register(OneForAllCharlie())
