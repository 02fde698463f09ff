"""Bounds on a party's data across real party processes (docs/governance.md, "Bounds on a party's data").

charlie moved dp-aggregate's ``min_records`` over sessions and read from how each ended whether alice's data
reached it -- a binary search of n_j.  Now a data party answers only what its policy states: alice (50 records)
and bob (70) each state ``records = 40``; a session asking 60 -- which bob's data meets and alice's does not -- is
refused by the policy before either reads its data, with the same answer whatever the data, and a session asking
40 runs to the end.
"""

from __future__ import annotations

import re

import pytest

from smcdp.errors import SmcdpError
from smcdp.runtime import client
from smcdp.runtime.governance.audit import read_entries
from tests.integration.processes.test_governance import PARAMS, ROLES, _cluster


def test_a_bound_no_party_stated_is_refused_by_policy_whatever_the_data_and_a_stated_one_runs(tmp_path):
    with _cluster(tmp_path, budget=5.0, data_bounds=(("records", 40),)) as c:  # alice has 50 records, bob 70
        with pytest.raises(SmcdpError) as ei:
            client.start_session(
                c.configs["charlie"], "dp-aggregate", ROLES, {**PARAMS, "min_records": 60}, session_id="charlie.q60"
            )
        message = str(ei.value)
        assert "policy.dp-aggregate.data_bounds.records" in message, message
        # nothing of either data set's size -- as a number of its own: the message names the peer's address, whose
        # port may hold the digits (a CI run failed on "127.0.0.1:32704")
        unaddressed = re.sub(r"(\d+\.\d+\.\d+\.\d+|\[[0-9a-fA-F:]*\]|localhost)(:\d+)?", "<address>", message)
        numbers = set(re.findall(r"\d+", unaddressed))
        assert not numbers & {"50", "70"}, message
        refused = {}
        for party in ("alice", "bob"):
            entries = [e for _, e, _ in read_entries(c.data_dir(party)) if e and e.get("session") == "charlie.q60"]
            assert not any(e.get("event") == "accepted" for e in entries), (party, entries)  # no data was read
            refused[party] = [e["rule"] for e in entries if e.get("event") == "refused"]
        # whichever party charlie asked first answered by its policy; a party it reached refused the same way
        assert any(refused.values()) and all(
            r in ([], ["policy.dp-aggregate.data_bounds.records"]) for r in refused.values()
        )
        record = client.start_session(
            c.configs["charlie"], "dp-aggregate", ROLES, {**PARAMS, "min_records": 40}, session_id="charlie.q40"
        )
        assert record["state"] == "succeeded", record
