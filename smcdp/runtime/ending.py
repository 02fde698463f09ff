"""How a session ends: nobody reports "succeeded" until every participant holds its output.

A role that returned has its output, and once its channel's :meth:`~smcdp.net.channel.Channel.flush`
returned, every message it sent -- the outputs it produced for its peers among them -- is journaled at its
receiver.  But a participant still waiting for a message from a third one may never get it (that one was
killed after the others finished), and before, the others reported "succeeded" regardless: an initiator's
``smcdp session start`` exited 0 while the party that was to receive the model failed 35 s later, and
``smcdp session resume`` was refused because the initiator had succeeded.

So after its role returned and its messages are acknowledged, each participant runs a final
acknowledgement round (:class:`Ending`): it sends every other participant a confirmation, "my role ended
here: I hold my output" (tag :data:`CONFIRM_TAG`), and waits until every other participant has confirmed
too.  The confirmations are ordinary messages of the session's channel -- journaled, acknowledged, replayed
by a restarted party like any other -- so the round is as transport-agnostic as the protocols are.

A participant that reports "succeeded" therefore vouches that every participant held its output.  That is
what a participant still waiting in this round may rely on: while it waits it asks the others how the
session stands (``probe``), and one that answers "succeeded" ends its wait too.  So a participant killed
after its confirmation reached everyone does not hold the others back (they succeed), and when it is
restarted it finds the others succeeded and succeeds as well; one killed before -- before its role ended,
say before the model reached it -- holds everyone back: nobody succeeds, and the session fails at every
participant naming it, resumably, once its silence passes the grace (docs/fault-tolerance.md, "How a
session ends").
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from smcdp.errors import SessionAborted
from smcdp.net.channel import Channel
from smcdp.states import SessionState
from smcdp.v1 import messages_pb2 as pb

#: the tag of the final acknowledgement round's messages (no protocol uses the ``end/`` prefix)
CONFIRM_TAG = "end/holds-output"
#: the step a participant reports once its role returned and its messages were acknowledged, before its
#: confirmations leave (status; an exact point for the failpoints of the fault tests)
CONFIRMING_STEP = "confirming outputs"
#: the step a participant reports once every other participant acknowledged its confirmation (as above)
DELIVERED_STEP = "confirmations delivered"

log = logging.getLogger("smcdp.session")

#: asks a participant (a role) how the session stands there; its state's value ("succeeded", ...)
Probe = Callable[[str], Awaitable[str]]


async def finished_roles(ch: Channel, probe: Probe, within: float, retry: float = 0.5) -> set[str]:
    """The other participants whose session already succeeded.  One that does not answer is asked again
    every ``retry`` seconds for ``within`` seconds (the connect timeout): a finished participant briefly
    unreachable is not taken for a running one; one still silent then is not counted."""
    roles = ch.peers()
    states = await asyncio.gather(*(_answer(probe, r, within, retry) for r in roles))
    return {r for r, state in zip(roles, states, strict=True) if state == SessionState.SUCCEEDED.value}


async def _answer(probe: Probe, role: str, within: float, retry: float) -> str | None:
    """``probe(role)``, asked until it answers or ``within`` seconds passed (None: never answered)."""
    deadline = time.monotonic() + within
    while True:
        try:
            return await probe(role)
        except Exception:  # noqa: BLE001 - unreachable for now, or refused: ask again while there is time
            if time.monotonic() + retry >= deadline:
                return None
        await asyncio.sleep(retry)


class Ending:
    """The final acknowledgement round of one session at one party.

    ``poll``: while the round waits, every other participant is asked this often how the session stands
    there (and once the round is complete, the own confirmations' acknowledgements are awaited at most
    this long: a peer that never acknowledges learns from its own probes that this party succeeded).
    """

    def __init__(self, poll: float) -> None:
        self.poll = float(poll)
        #: the role returned here and the round started
        self.reached = False
        #: the roles whose confirmation arrived
        self.confirmed: set[str] = set()
        #: the participant whose "succeeded" ended the wait, if one did
        self.vouched_by: str | None = None

    def unconfirmed(self, ch: Channel) -> list[str] | None:
        """The parties that did not confirm holding their outputs (None: the round never started here)."""
        if not self.reached:
            return None
        if self.vouched_by is not None:
            return []
        return sorted(ch.roles[r] for r in ch.peers() if r not in self.confirmed)

    async def run(self, ch: Channel, probe: Probe | None) -> None:
        """Confirm to every other participant, and return once every one confirmed (or one succeeded)."""
        self.reached = True
        peers = ch.peers()
        if not peers:
            return
        ch.progress(step=CONFIRMING_STEP)
        await ch.send_many(peers, CONFIRM_TAG, pb.Flag(value=True))
        delivered = asyncio.ensure_future(self._delivered(ch))
        waits = {asyncio.ensure_future(self._confirmation(ch, r)) for r in peers}
        asker = asyncio.ensure_future(self._ask(ch, probe)) if probe is not None else None
        try:
            while waits:
                done, _ = await asyncio.wait(
                    waits | ({asker} if asker is not None else set()), return_when=asyncio.FIRST_COMPLETED
                )
                for task in done:
                    task.result()  # an abort, a failed delivery
                if asker is not None and asker in done:
                    break  # a participant succeeded: every one held its output
                waits -= done
        except Exception:
            # an abort or a silent peer ended the wait; but if a participant already succeeded, every one
            # held its output, and so the session succeeded here too (else it would fail here and not
            # there, and a resume at a succeeded initiator would be refused)
            if probe is None or not await self._any_succeeded(ch, probe):
                raise
        finally:
            for task in [*waits, *([asker] if asker is not None else []), delivered]:
                task.cancel()
            await asyncio.gather(*waits, *([asker] if asker is not None else []), delivered, return_exceptions=True)
        # every participant holds its output: the session succeeded here, unless a peer refuses this party's
        # confirmation because the session *failed* there.  They are awaited for a while; a peer that has not
        # acknowledged one by then learns from its probes that this party succeeded
        try:
            await asyncio.wait_for(ch.flush(), self.poll)
        except SessionAborted:
            # that peer gave up waiting for this party's confirmation (this party was down or cut off past the
            # grace, and its replay found every other confirmation in its journal): succeeding here would
            # leave the session succeeded here and failed there.  It fails here too, as it did there -- unless
            # a participant already succeeded (then the failed one is the late participant; :mod:`.late`)
            if probe is None or not await self._any_succeeded(ch, probe):
                raise
        except Exception as exc:  # noqa: BLE001 - not acknowledged in time: see above
            log.info("session %s: a confirmation was not acknowledged (%s); the session succeeded", ch.session_id, exc)

    @staticmethod
    async def _delivered(ch: Channel) -> None:
        """Report :data:`DELIVERED_STEP` once this party's confirmations are acknowledged (a failed delivery
        is the round's to handle, not this report's)."""
        try:
            await ch.flush()
        except Exception:  # noqa: BLE001 - see above
            return
        ch.progress(step=DELIVERED_STEP)

    async def _confirmation(self, ch: Channel, role: str) -> None:
        await ch.recv(role, CONFIRM_TAG, pb.Flag)
        self.confirmed.add(role)

    async def _ask(self, ch: Channel, probe: Probe) -> None:
        """Return once a participant answers that the session succeeded there."""
        while True:
            await asyncio.sleep(self.poll)
            if await self._any_succeeded(ch, probe):
                return

    async def _any_succeeded(self, ch: Channel, probe: Probe) -> bool:
        """Ask every other participant once; True (and :attr:`vouched_by` set) if one says it succeeded."""
        roles = ch.peers()
        states = await asyncio.gather(*(probe(r) for r in roles), return_exceptions=True)
        for role, state in zip(roles, states, strict=True):
            if state == SessionState.SUCCEEDED.value:
                self.vouched_by = ch.roles[role]
                return True
        return False
