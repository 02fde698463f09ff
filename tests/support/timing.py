"""Where the test suite's time goes: wall and CPU seconds per test, per file and per directory.

A pytest plugin, off by default: ``pytest -p tests.support.timing --timing-json FILE`` writes one
record per test (setup, call and teardown added up) and prints the per-directory totals and the
slowest tests.  CPU seconds are the test process's own (all its threads) plus those of the child
processes it waited for (party processes, ``smcdp`` subprocesses): on a shared machine wall time
says how long a run took, CPU time says how much work it was.  Under pytest-xdist each worker
measures its own tests and the records reach the controller as ``user_properties``.

docs/testing.md's before/after table comes from these files.
"""

from __future__ import annotations

import collections
import json
import resource
import time
from pathlib import Path

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("timing", "wall and CPU seconds per test (tests/support/timing.py)")
    group.addoption(
        "--timing-json",
        metavar="FILE",
        default=None,
        help="write wall and CPU seconds per test to FILE (JSON) and print per-directory totals",
    )
    group.addoption(
        "--timing-top", metavar="N", type=int, default=20, help="how many of the slowest tests to print (default 20)"
    )


def _cpu() -> float:
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if item.config.getoption("timing_json"):
        item._smcdp_timing_start = (time.monotonic(), _cpu())
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    start = getattr(item, "_smcdp_timing_start", None)
    if call.when == "teardown" and start is not None:
        # on the teardown report, which xdist carries to the controller with its user_properties
        outcome.get_result().user_properties.append(
            ("timing", {"wall": time.monotonic() - start[0], "cpu": _cpu() - start[1]})
        )


class _Collector:
    def __init__(self, config) -> None:
        self.config = config
        self.records: dict[str, dict] = {}
        self.started = time.monotonic()
        self.cpu0 = _cpu()

    def pytest_runtest_logreport(self, report):
        if report.when != "teardown":
            return
        for key, value in report.user_properties:
            if key == "timing":
                self.records[report.nodeid] = {
                    "nodeid": report.nodeid,
                    **value,
                    "worker": getattr(report, "node", None) and report.node.gateway.id,
                }

    def pytest_terminal_summary(self, terminalreporter):
        records = sorted(self.records.values(), key=lambda r: -r["wall"])
        by_dir: dict[str, dict[str, float]] = collections.defaultdict(lambda: {"wall": 0.0, "cpu": 0.0, "n": 0})
        for r in records:
            d = by_dir[directory(r["nodeid"])]
            d["wall"] += r["wall"]
            d["cpu"] += r["cpu"]
            d["n"] += 1
        total = {
            "wall": time.monotonic() - self.started,
            "cpu_controller_and_children": _cpu() - self.cpu0,
            "tests": len(records),
        }
        Path(self.config.getoption("timing_json")).write_text(
            json.dumps({"total": total, "directories": by_dir, "tests": records}, indent=1)
        )
        tr = terminalreporter
        tr.section("wall and CPU seconds (tests/support/timing.py)")
        tr.write_line(f"{'wall s':>9} {'cpu s':>9} {'tests':>6}  directory")
        for name, d in sorted(by_dir.items(), key=lambda kv: -kv[1]["wall"]):
            tr.write_line(f"{d['wall']:9.1f} {d['cpu']:9.1f} {d['n']:6d}  {name}")
        tr.write_line(
            f"{sum(d['wall'] for d in by_dir.values()):9.1f} "
            f"{sum(d['cpu'] for d in by_dir.values()):9.1f} {len(records):6d}  (sum over tests)"
        )
        tr.write_line("")
        for r in records[: self.config.getoption("timing_top")]:
            tr.write_line(f"{r['wall']:9.1f} {r['cpu']:9.1f}  {r['nodeid']}")


def directory(nodeid: str) -> str:
    """tests/unit/dp/learners/test_x.py::t -> tests/unit/dp; tests/examples/test_x.py -> tests/examples."""
    parts = nodeid.split("::")[0].split("/")
    depth = 3 if len(parts) > 3 and parts[1] in ("unit", "integration") else 2
    return "/".join(parts[: min(depth, len(parts) - 1)]) or parts[0]


def pytest_configure(config):
    if config.getoption("timing_json") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Collector(config), "smcdp-timing-collector")
