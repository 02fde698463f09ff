"""A modified power-iteration plug-in for the group-key tests (listed in ``party.plugins`` of trent only).

As **trent** it runs the honest Trent code behind a channel that, when it relays the releases of the
covariance mode under a group key (``contrib/cov/<role>``), delivers party3's release in place of every other
party's: the "sum" a data party would decrypt is then n·(party3's release) -- a coordinator asking the data
parties to decrypt one party's contribution.  Every other role is honest.
"""

from __future__ import annotations

from typing import Any

from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.power_iteration import PowerIterationPlugin
from smcdp.protocols.power_iteration import COV_TAG, TRENT, PowerIterationParams, trent
from smcdp.protocols.power_iteration_threshold import CONTRIB_TAG


class _OneForAll:
    """Trent's channel, relaying party3's release under every party's tag."""

    def __init__(self, ch: Channel) -> None:
        self._ch = ch
        self._releases: dict[str, Any] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ch, name)

    async def recv_all(self, roles, tag: str, cls):
        got = await self._ch.recv_all(roles, tag, cls)
        if tag == COV_TAG:
            self._releases = dict(got)
        return got

    async def send_many(self, to, tag: str, msg):
        if tag.startswith(f"{CONTRIB_TAG}/"):
            msg = self._releases["party3"]
        return await self._ch.send_many(to, tag, msg)


class OneForAllTrent(PowerIterationPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role != TRENT:
            return await super().run_role(role, ch, ctx)
        p = PowerIterationParams.from_mapping(ctx.params)
        await trent(_OneForAll(ch), p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
        return {}


register(OneForAllTrent())
