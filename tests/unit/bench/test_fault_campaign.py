"""The fault campaign's verdicts on link faults (bench/fault_campaign.py), without party processes."""

from __future__ import annotations

import importlib
import sys

import pytest

from tests.support.paths import REPO

if str(REPO / "bench") not in sys.path:
    sys.path.insert(0, str(REPO / "bench"))
campaign = importlib.import_module("fault_campaign")


def _protocol():
    p = campaign.Protocol("power-iteration", {}, {}, {}, "trent", (1, 12))
    p.reference = {"trent": {"x": [1.0]}, "alice": {"u": [1.0]}, "bob": {"u": [1.0]}}
    return p


def _failed(origin: str, link: str | None = None) -> dict:
    return {"state": "failed", "resumable": True, "error": {"code": "UNAVAILABLE", "origin": origin, "link": link}}


def test_a_link_named_by_every_record_is_named_resumable_with_the_link():
    recs = {p: _failed("trent", "trent→alice") for p in ("trent", "alice", "bob")}
    assert campaign._classify(_protocol(), recs) == ("named-resumable", "culprit trent, link trent→alice")


def test_a_link_cut_both_ways_may_be_named_from_either_end_but_nothing_else():
    recs = {"trent": _failed("alice"), "alice": _failed("trent"), "bob": _failed("trent")}
    assert campaign._classify(_protocol(), recs)[0] == "lost"  # not a link fault: no single culprit
    assert campaign._classify(_protocol(), recs, ("trent", "alice"))[0] == "named-resumable"
    recs["bob"] = _failed("bob")
    assert campaign._classify(_protocol(), recs, ("trent", "alice"))[0] == "lost"


def test_a_split_outcome_is_lost():
    recs = {"trent": {"state": "succeeded", "result": {"x": [1.0]}}, "alice": _failed("alice"), "bob": _failed("alice")}
    assert campaign._classify(_protocol(), recs)[0] == "lost"


@pytest.mark.parametrize(
    ("kind", "faults"),
    [
        ("link-corrupt", [(("alice", "trent"), "down", "corrupt")]),
        ("link-oneway", [(("alice", "trent"), "up", "drop")]),
        (
            "link-both",
            [(link, d, "drop") for link in (("alice", "trent"), ("trent", "alice")) for d in ("up", "down")],
        ),
    ],
)
def test_each_link_fault_switches_what_it_says(kind, faults):
    fault = campaign.LinkFault(_protocol(), "sid", 3, kind, ("alice", "trent"), "down")
    assert fault._faults() == faults


def test_the_link_group_selects_the_three_link_faults():
    assert campaign.GROUPS["link"] == ("link-corrupt", "link-oneway", "link-both")
    assert set(campaign.GROUPS["process"]) | set(campaign.GROUPS["link"]) == set(campaign.KINDS)
