"""A modified dp-aggregate plug-in for the group-key tests (listed in ``party.plugins`` of charlie only).

As **charlie** it runs the honest group-key Charlie behind a channel that, when it relays the releases of G3
(``g3/contrib/<role>``), delivers party3's release in place of every other party's: the "sum" a data party would
decrypt for him would be K·(party3's release) -- a curator asking the data parties to decrypt one party's
contribution.  Every other role is honest.
"""

from __future__ import annotations

from typing import Any

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.dp_aggregate import DPAggregatePlugin
from smcdp.protocols.dp_aggregate import CHARLIE, DPAggregateParams
from smcdp.protocols.dp_aggregate_threshold import RELEASE, charlie


class _OneForAll:
    """Charlie's channel, relaying party3's release under every party's tag."""

    def __init__(self, ch: Channel) -> None:
        self._ch = ch
        self._releases: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    async def recv_all(self, roles, tag: str, cls):
        got = await self._ch.recv_all(roles, tag, cls)
        if tag == RELEASE.release:
            self._releases = dict(got)
        return got

    async def send_many(self, to, tag: str, msg):
        if tag.startswith(f"{RELEASE.contrib}/"):
            msg = self._releases["party3"]
        return await self._ch.send_many(to, tag, msg)


class OneForAllCharlie(DPAggregatePlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != CHARLIE:
            return await super().run_role(role, ch, ctx)
        p = DPAggregateParams.from_mapping(ctx.params)
        await charlie(_OneForAll(ch), p, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


register(OneForAllCharlie())
