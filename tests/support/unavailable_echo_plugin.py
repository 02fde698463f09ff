"""A hostile participant for the restart tests (listed in ``party.plugins`` of one party, after
:mod:`tests.support.echo_plugin`).

It replaces ``net-echo`` with a plug-in whose role ``b`` fails with UNAVAILABLE -- so the party aborts the
session with Abort UNAVAILABLE, a resumable failure -- every time it runs while the file ``abort-sessions``
exists in the party's data directory, and plays the honest role once it is gone.  While ``hold-sessions``
exists there, the role waits before playing (its status step "held"), so that a test can fail another
party at a moment it knows.  The test holds the files (the hostile party's operator's switches; not
inputs of the party, whose change a resume refuses).  Only party processes load it: imported by a test, it
would replace ``net-echo`` in the test's own process.
"""

from __future__ import annotations

import asyncio

from smcdp.errors import Unavailable
from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from tests.support.echo_plugin import EchoPlugin

SWITCH = "abort-sessions"
HOLD = "hold-sessions"


class UnavailableEchoPlugin(EchoPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        assert ctx.keys_dir is not None  # in a party process: <data_dir>/keys
        data_dir = ctx.keys_dir.parent
        if role == "b" and (data_dir / SWITCH).exists():
            raise Unavailable(f"net-echo role b is unavailable (for as long as {SWITCH} exists)")
        if role == "b" and (data_dir / HOLD).exists():
            ch.progress(step="held")
            while (data_dir / HOLD).exists():
                await asyncio.sleep(0.05)
            ch.progress(step="")
        return await super().run_role(role, ch, ctx)


register(UnavailableEchoPlugin())
