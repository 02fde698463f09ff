"""How make test spreads the suite over xdist workers (tests/support/scheduling.py), checked on a small
suite run with two workers: a module-scoped fixture is set up once, on the worker that runs every
test using it (a module's tests that use such fixtures share one worker); `serial` tests never overlap.

(pytest-xdist 3.8 with pytest 9.2 silently dropped the grouping -- pytest-xdist issue 1386 -- which
is how this test came about: nothing else would notice that each worker starts its own cluster.)
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from tests.support.paths import REPO
from tests.support.scheduling import groups

SUITE = {
    "conftest.py": """
        pytest_plugins = ["tests.support.scheduling"]
    """,
    "record.py": """
        import json, os, time
        from pathlib import Path

        def record(kind, name, **kw):
            with open(Path(os.environ["SCHED_LOG"]), "a") as f:
                f.write(json.dumps({"kind": kind, "name": name, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                                    "t": time.monotonic(), **kw}) + "\\n")
    """,
    "test_clusters.py": """
        import time
        import pytest
        from record import record

        @pytest.fixture(scope="module")
        def pi_cluster():
            record("setup", "pi_cluster")
            yield
            record("teardown", "pi_cluster")

        @pytest.fixture(scope="module")
        def kw_cluster():
            record("setup", "kw_cluster")
            yield

        @pytest.mark.parametrize("i", range(8))
        def test_pi(pi_cluster, i):
            record("test", "pi")
            time.sleep(0.05)

        @pytest.mark.parametrize("i", range(8))
        def test_kw(kw_cluster, i):
            record("test", "kw")
            time.sleep(0.05)
    """,
    "test_free.py": """
        import time
        import pytest
        from record import record

        @pytest.mark.parametrize("i", range(12))
        def test_free(i):
            record("test", "free")
            time.sleep(0.05)

        @pytest.mark.serial
        @pytest.mark.parametrize("i", range(4))
        def test_alone(i):
            record("start", "alone")
            time.sleep(0.2)
            record("end", "alone")
    """,
}


@pytest.mark.slow  # starts a pytest with two xdist workers
def test_groups_hold_under_two_xdist_workers(pytester, monkeypatch):
    for name, text in SUITE.items():
        pytester.path.joinpath(name).write_text(textwrap.dedent(text))
    log = pytester.path / "log.jsonl"
    monkeypatch.setenv("SCHED_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), str(pytester.path)]))
    res = pytester.runpytest_subprocess("-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q")
    res.assert_outcomes(passed=32)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    setups = [r for r in rows if r["kind"] == "setup"]
    assert sorted(r["name"] for r in setups) == ["kw_cluster", "pi_cluster"]  # each once
    assert len({r["worker"] for r in setups}) == 1  # on one worker
    workers = {r["worker"] for r in rows if r["kind"] == "test" and r["name"] in ("pi", "kw")}
    assert workers == {setups[0]["worker"]}, workers  # with their tests
    spans = sorted(
        (s["t"], e["t"])
        for s, e in zip([r for r in rows if r["kind"] == "start"], [r for r in rows if r["kind"] == "end"])
    )
    assert len(spans) == 4 and len({r["worker"] for r in rows if r["name"] == "alone"}) == 1
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))  # never two at once
    assert {r["worker"] for r in rows} == {"gw0", "gw1"}  # and both worked


def test_group_names(pytester):
    """In-process: which tests share a worker, and under which name."""
    for name, text in SUITE.items():
        pytester.path.joinpath(name).write_text(textwrap.dedent(text))
    items, _ = pytester.inline_genitems("-p", "no:cacheprovider")
    by_name = {}
    for i, group in groups(items).items():
        by_name.setdefault(group, set()).add(items[i].name.split("[")[0])
    module = str(Path(items[0].nodeid.split("::")[0]).with_suffix(""))
    assert by_name == {module: {"test_pi", "test_kw"}, "serial": {"test_alone"}}
