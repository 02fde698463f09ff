"""A hostile participant for the restart tests (listed in ``party.plugins`` of one party, after
:mod:`tests.support.echo_plugin`).

It replaces ``net-echo`` with a plug-in whose role ``b`` fails with UNAVAILABLE -- so the party aborts the
session with Abort UNAVAILABLE, a resumable failure -- every time it runs while the file ``abort-sessions``
exists in the party's data directory, and plays the honest role once it is gone.  The test holds the file
(the hostile party's operator's switch; not one of the party's inputs, whose change a resume refuses):
the participant answers every run of a session with an abort for as long as the test wants.
"""

from __future__ import annotations

from smcdp.errors import Unavailable
from smcdp.net.channel import Channel
from smcdp.plugins.base import SessionContext, register
from tests.support.echo_plugin import EchoPlugin

SWITCH = "abort-sessions"


class UnavailableEchoPlugin(EchoPlugin):
    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        assert ctx.keys_dir is not None  # in a party process: <data_dir>/keys
        if role == "b" and (ctx.keys_dir.parent / SWITCH).exists():
            raise Unavailable(f"net-echo role b is unavailable (for as long as {SWITCH} exists)")
        return await super().run_role(role, ch, ctx)


register(UnavailableEchoPlugin())
