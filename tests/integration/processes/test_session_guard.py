"""bench/session_guard.py (issue 27): whole sessions of this tree against a baseline; a session more than
20 % slower fails the guard with a message naming it."""

import importlib
import json
import subprocess
import sys

import pytest

from tests.support.paths import REPO

sys.path.insert(0, str(REPO / "bench"))
session_guard = importlib.import_module("session_guard")
session_bench = importlib.import_module("session_bench")


def _run(tree, workload, cold, warm, cpu=1.0):
    return {
        "tree": str(tree),
        "workload": workload,
        "start_seconds": 3.0,
        "stop_seconds": 1.0,
        "load": 1.0,
        "sessions": [{"seconds": cold, "cpu_total": cpu}, {"seconds": warm, "cpu_total": cpu}],
    }


@pytest.mark.parametrize("slower,code", [(1.0, 0), (1.19, 0), (1.25, 1)])
def test_the_guard_fails_when_a_session_is_more_than_20_percent_slower(tmp_path, monkeypatch, capsys, slower, code):
    base = tmp_path / "baseline"
    base.mkdir()
    root = session_guard.ROOT

    def fake_measure(trees, workloads, repeats, sessions, key_bits, gap):
        assert trees == [root, base] and workloads == ["pi500", "keyword"] and sessions == 2
        runs = []
        for _ in range(repeats):
            runs += [
                _run(base, "pi500", 2.0, 1.5),
                _run(root, "pi500", 2.0, 1.5 * slower),
                _run(base, "keyword", 5.0, 4.0),
                _run(root, "keyword", 5.0, 4.0),
            ]
        return runs

    monkeypatch.setattr(session_guard, "measure", fake_measure)
    monkeypatch.setattr(session_guard, "check_native", lambda tree: None)
    assert session_guard.main(["--baseline-tree", str(base), "--repeats", "3"]) == code
    out = capsys.readouterr()
    if code:
        assert "REGRESSION: power iteration k = 500, 2 × 100, warm session: 1.88 s against 1.50 s" in out.out
        assert "more than 20% slower" in out.err
        assert "keyword" not in "".join(ln for ln in out.out.splitlines() if ln.startswith("REGRESSION"))
    else:
        assert out.out.rstrip().splitlines()[-1].startswith("OK: no session more than 20% slower")


def test_a_baseline_without_its_accelerator_is_refused(tmp_path, capsys):
    (tmp_path / "smcdp" / "crypto").mkdir(parents=True)
    (tmp_path / "smcdp" / "crypto" / "_mont.c").write_text("")
    assert session_guard.main(["--baseline-tree", str(tmp_path)]) == 2
    assert "no built C accelerator" in capsys.readouterr().err


@pytest.mark.slow
def test_the_session_driver_runs_cold_and_warm_sessions_of_this_tree():
    proc = subprocess.run(
        [
            sys.executable,
            str(REPO / "bench" / "session_driver.py"),
            "--workload",
            "pi30",
            "--sessions",
            "2",
            "--key-bits",
            "512",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    run = json.loads(proc.stdout)
    assert run["workload"] == "pi30" and len(run["sessions"]) == 2 and run["start_seconds"] > 0
    for s in run["sessions"]:
        assert s["seconds"] > 0 and s["rounds"] > 0 and set(s["cpu_seconds"]) == {"trent", "alice", "bob"}
    summ = session_bench.summary([dict(run, tree=str(REPO))])
    cell = summ[(str(REPO), "pi30")]
    assert cell["cold"] == run["sessions"][0]["seconds"] and cell["warm"] == run["sessions"][1]["seconds"]
