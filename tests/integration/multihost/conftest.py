"""The namespace deployment shared by the multi-host tests (one per module, torn down always)."""

from __future__ import annotations

import pytest

from .cases import available_cases, governance_args
from .harness import NetnsCluster, netns_unavailable_reason


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    cases = available_cases()
    parties: list[str] = []
    for case in cases:
        parties += [p for p in case.parties if p not in parties]
    workdir = tmp_path_factory.mktemp("multihost")
    inputs, expected = [], {}
    for case in cases:
        items, state = case.inputs(workdir, case.parties)
        inputs += items
        expected[case.protocol] = state
    plugins = [case.module for case in cases if case.module and case.module_needed]
    c = NetnsCluster(
        parties,
        workdir,
        inputs=inputs,
        plugins=plugins,
        connect_seconds=3.0,
        session_seconds=60.0,
        rpc_seconds=10.0,
        peer_grace_seconds=15.0,
        init_args=governance_args(cases),
    )
    c.cases = {case.protocol: case for case in cases}
    c.expected = expected
    try:
        c.up()
        c.start_all()
        yield c
    finally:
        c.down()
