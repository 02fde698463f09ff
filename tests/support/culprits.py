"""What the parties' records say of who ended a session that a deviating coordinator made fail."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def own_refusals(recs: Mapping[str, Mapping[str, Any]], parties: Sequence[str], phrase: str, culprit: str) -> list[str]:
    """The parties of ``parties`` that refused by themselves (their error carries ``phrase`` and names ``culprit`` as
    its origin), at least one.  A party that another party's abort reached before its own check (CI of 7d922b4 and of
    89b2c21: each once, under load) names that party as the origin and keeps ``culprit`` as the claimed one
    (runtime.session: a peer's word becomes the origin only where this party confirms it) -- checked here: the
    party it names refused by itself, naming ``culprit``."""
    errors = {p: recs[p].get("error") or {} for p in parties}
    refused = [p for p in parties if phrase in errors[p].get("message", "")]
    told = [p for p in refused if errors[p].get("reported_by") in parties]
    own = [p for p in refused if p not in told]
    assert own, errors
    for p in told:
        assert errors[p]["reported_culprit"] == culprit, errors
        assert errors[errors[p]["reported_by"]]["origin"] == culprit, errors
    for p in own:
        assert errors[p]["origin"] == culprit, errors
    return own
