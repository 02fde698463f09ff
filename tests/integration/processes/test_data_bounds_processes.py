"""Bounds on a party's data across real party processes (docs/governance.md, "Bounds on a party's data").

charlie moved dp-aggregate's ``min_records`` over sessions and read from how each ended whether alice's data
reached it -- a binary search of n_j.  Now a data party answers only what its policy states: alice (50 records)
and bob (70) each state ``records = 40``; a session asking 60 -- which bob's data meets and alice's does not -- is
refused by the policy before either reads its data, with the same answer whatever the data, and a session asking
40 runs to the end.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from smcdp.cli.demo.common import governed
from smcdp.errors import SmcdpError
from smcdp.runtime import client
from smcdp.runtime.governance.audit import read_entries
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.local import LocalCluster
from tests.integration.processes.test_governance import PARAMS, ROLES, _data


def _cluster(tmp_path) -> LocalCluster:
    paths = _data(tmp_path)  # alice 50 records, bob 70
    parties = {
        "charlie": {},
        "dave": {},
        "alice": {"dp-aggregate": {"data": paths[0]}},
        "bob": {"dp-aggregate": {"data": paths[1]}},
    }
    options, _ = governed("dp-aggregate", ROLES, PARAMS, initiator="charlie", seed=None)
    for party in ("alice", "bob"):  # what each states of its data: at least 40 records
        options["policies"][party] = replace(
            options["policies"][party],
            protocols={
                "dp-aggregate": replace(
                    options["policies"][party].protocols["dp-aggregate"], data_bounds=(("records", 40),)
                )
            },
        )
    budgets = {p: BudgetConfig(dataset=p, epsilon=5.0, delta=1e-9) for p in ("alice", "bob")}
    return LocalCluster(
        parties,
        allow_insecure_keys=True,
        workdir=tmp_path / "run",
        data_root=tmp_path / "run",
        session_seconds=120.0,
        budgets=budgets,
        **options,
    )


def test_a_bound_no_party_stated_is_refused_by_policy_whatever_the_data_and_a_stated_one_runs(tmp_path):
    with _cluster(tmp_path) as c:
        with pytest.raises(SmcdpError) as ei:
            client.start_session(
                c.configs["charlie"], "dp-aggregate", ROLES, {**PARAMS, "min_records": 60}, session_id="charlie.q60"
            )
        message = str(ei.value)
        assert "policy.dp-aggregate.data_bounds.records" in message, message
        assert "50" not in message and "70" not in message  # nothing of either data set's size
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
