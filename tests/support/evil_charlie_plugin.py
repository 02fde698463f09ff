"""A malicious Charlie for dp-aggregate (listed in ``party.plugins`` of a test deployment).

It replaces the built-in ``dp-aggregate`` plug-in with one whose Charlie runs the protocol honestly
except for the secure minimum's tournament, where he reads every comparison the other way round: he
finds the position of the *largest* key -- the party with the smallest sensitivity, i.e. the least
noise -- and selects it (issue 25's attack; docs/security.md).  Every other role is the honest one,
so loading the module in every party of the deployment changes only Charlie's behaviour.
"""

from __future__ import annotations

import smcdp.primitives.argmin as argmin
from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from smcdp.plugins.dp_aggregate import DPAggregatePlugin
from smcdp.protocols.dp_aggregate import CHARLIE

_honest_tournament = argmin.run_tournament


async def _tournament_for_the_largest(k, match):
    async def reversed_match(t, p, q):
        return not await match(t, p, q)

    return await _honest_tournament(k, reversed_match)


class MaliciousCharliePlugin(DPAggregatePlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        if role == CHARLIE:  # Charlie's process runs only Charlie's role
            argmin.run_tournament = _tournament_for_the_largest
        return await super().run_role(role, ch, ctx)


register(MaliciousCharliePlugin())
