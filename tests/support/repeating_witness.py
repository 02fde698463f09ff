"""A hostile witness (listed in ``party.plugins`` of one party; it registers no protocol).

Loaded into a party process, it changes what the party answers to ``Mailbox.GetWitnessed``: instead of the
heads it holds for the asking peer, the first of them ``COPIES`` times -- one witness posing as many, to
inflate the "agree" count of the asking party's ``smcdp audit verify --witnesses``.  Only party processes
load it: imported by a test, it would patch the test's own process.
"""

from __future__ import annotations

from smcdp.runtime.governance.witness import SignedHead, WitnessStore

COPIES = 2003

_honest_held_for = WitnessStore.held_for


def _one_head_many_times(self: WitnessStore, peer: str) -> list[SignedHead]:
    return _honest_held_for(self, peer)[:1] * COPIES


WitnessStore.held_for = _one_head_many_times  # type: ignore[method-assign]
