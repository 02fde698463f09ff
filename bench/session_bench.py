"""Whole sessions as users run them (issue 27): cold and warm party processes, this tree and optionally a
baseline tree, measured alternately in the same run.

docs/benchmarks.md's per-round figures leave out what a user waits for: starting the party processes,
a session's first round (keys, tables), its offline phase.  Here every figure is a whole session, set up
as the demos set it up (``bench/session_driver.py``: one OS process per party, mutual TLS on loopback,
2048-bit keys):

* ``pi500`` -- power iteration, k = 500, two parties × 100 samples (the issue's regression);
* ``pi30`` -- power iteration on ``make demo``'s data (k = 30);
* ``pidp500``, ``pidp500cov`` -- the same data in the DP mode at epsilon = 1, delta = 1e-6 (issue 38):
  ``auto`` (the noisy power method at this k) and the one-release covariance mode forced;
* ``keyword`` -- keyword recognition, 98 frames × 39-d, 10 HMMs × 5 states, 2048-bit keys, one frame per
  round (m = 1; ``smcdp demo keyword``'s fixture, issue 42's sizes); besides the sessions, the guard
  compares its online phase (cold and warm);
* ``keyword2`` -- the same with two frames a round (``frames_per_round = 2``), issue 42's "no change at m ≥ 2".

For each, one *cold* session (party processes started just before it: the demo's ``seconds``) and
``--sessions`` − 1 *warm* ones (another session on the same, running parties, ``--gap`` seconds after the
last), with the CPU seconds of all party processes during the session (a party's work for its next
session while idle is not in it: compare the CPU of cold sessions for the total).  Trees alternate, and which goes first alternates per
repetition, so both see the same host.  The host is shared: read the load beside the times and compare
trees within one run; the CPU seconds move less than wall times.

    .venv/bin/python bench/session_bench.py --repeats 3                       # this tree
    .venv/bin/python bench/session_bench.py --baseline-tree /work/main         # and a baseline tree
    .venv/bin/python bench/session_guard.py --baseline main                   # the regression guard

A baseline tree needs the C accelerator built in place (``session_guard.py`` does it); it runs on this
tree's interpreter and dependencies (``PYTHONPATH``), so a baseline with other dependencies may not run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DRIVER = Path(__file__).resolve().parent / "session_driver.py"
WORKLOADS = ("pi500", "pi30", "keyword", "keyword2", "pidp500", "pidp500cov")
TITLES = {
    "pi500": "power iteration k = 500, 2 × 100",
    "pi30": "power iteration k = 30 (make demo)",
    "keyword": "keyword, 98 frames, 10 HMMs",
    "keyword2": "keyword, 98 frames, 10 HMMs, 2 frames a round",
    "pidp500": "DP power iteration k = 500 (auto), 2 × 100",
    "pidp500cov": "DP power iteration k = 500 (covariance), 2 × 100",
}


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_driver(
    tree: Path, workload: str, sessions: int, key_bits: int, gap: float = 5.0, timeout: float = 1800
) -> dict:
    """One driver run on ``tree`` (its smcdp first on PYTHONPATH, this interpreter)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    env.setdefault("SMCDP_PROGRESS", "off")
    proc = subprocess.run(
        [
            sys.executable,
            str(DRIVER),
            "--workload",
            workload,
            "--sessions",
            str(sessions),
            "--key-bits",
            str(key_bits),
            "--gap",
            str(gap),
        ],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{workload} on {tree} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["tree"] = str(tree)
    return out


def measure(
    trees: list[Path], workloads: list[str], repeats: int, sessions: int, key_bits: int, gap: float = 5.0
) -> list[dict]:
    """Every (repeat, workload, tree) run, trees alternating and their order flipped every repetition."""
    runs = []
    for r in range(repeats):
        order = trees if r % 2 == 0 else list(reversed(trees))
        for w in workloads:
            for tree in order:
                log(f"[{r + 1}/{repeats}] {w} on {tree} …")
                run = run_driver(tree, w, sessions, key_bits, gap)
                s = run["sessions"]
                log(
                    f"    start {run['start_seconds']:.1f} s; sessions "
                    + ", ".join(f"{x['seconds']:.2f} s" for x in s)
                    + "; CPU "
                    + ", ".join(f"{x['cpu_total']:.1f}" for x in s)
                    + f"; load {run['load']:.1f}"
                )
                runs.append(run)
    return runs


def _med(vals: list[float]) -> float | None:
    return statistics.median(vals) if vals else None


def summary(runs: list[dict]) -> dict[tuple[str, str], dict]:
    """Per (tree, workload): the medians of cold sessions, warm sessions, their CPU, start-up, phases."""
    out: dict[tuple[str, str], dict] = {}
    for run in runs:
        cell = out.setdefault((run["tree"], run["workload"]), {"runs": []})
        cell["runs"].append(run)
    for cell in out.values():
        cold = [r["sessions"][0] for r in cell["runs"]]
        warm = [s for r in cell["runs"] for s in r["sessions"][1:]]
        cell.update(
            n=len(cell["runs"]),
            start=_med([r["start_seconds"] for r in cell["runs"]]),
            cold=_med([s["seconds"] for s in cold]),
            warm=_med([s["seconds"] for s in warm]),
            cold_all=[s["seconds"] for s in cold],
            warm_all=[s["seconds"] for s in warm],
            cold_cpu=_med([s["cpu_total"] for s in cold]),
            warm_cpu=_med([s["cpu_total"] for s in warm]),
            warm_idle_cpu=_med([s["cpu_idle_before"] for s in warm if s.get("cpu_idle_before") is not None]),
            cold_online=_med([s["online_seconds"] for s in cold if s.get("online_seconds") is not None]),
            warm_online=_med([s["online_seconds"] for s in warm if s.get("online_seconds") is not None]),
            loads=[r["load"] for r in cell["runs"]],
        )
    return out


def _f(x: float | None, unit: str = " s") -> str:
    return "—" if x is None else f"{x:.2f}{unit}"


def _span(vals: list[float]) -> str:
    return f" [{min(vals):.2f}–{max(vals):.2f}]" if len(vals) > 1 else ""


def markdown(summ: dict[tuple[str, str], dict], trees: list[Path], workloads: list[str]) -> str:
    lines = [
        "| workload | tree | start parties s | cold session s | warm session s | CPU cold / warm s (all parties) "
        "| CPU while idle before a warm session | online s cold / warm (keyword) | runs | load |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for w in workloads:
        for t in trees:
            c = summ.get((str(t), w))
            if c is None:
                continue
            lines.append(
                f"| {TITLES[w]} | {t} | {_f(c['start'])} | **{_f(c['cold'])}**{_span(c['cold_all'])} | "
                f"**{_f(c['warm'])}**{_span(c['warm_all'])} | {_f(c['cold_cpu'], '')} / "
                f"{_f(c['warm_cpu'], '')} | {_f(c['warm_idle_cpu'], '')} | "
                f"{_f(c['cold_online'], '')} / {_f(c['warm_online'], '')} | "
                f"{c['n']} | {min(c['loads']):.1f}–{max(c['loads']):.1f} |"
            )
    return "\n".join(lines)


def ratios(summ: dict[tuple[str, str], dict], current: Path, baseline: Path, workloads: list[str]) -> list[dict]:
    """current / baseline medians per (workload, cold|warm): wall and CPU; for keyword also its online phase
    (issue 42: what a user waits for once the parties are ready) in cold and warm sessions."""
    out = []
    for w in workloads:
        a, b = summ.get((str(current), w)), summ.get((str(baseline), w))
        if a is None or b is None:
            continue
        for kind in ("cold", "warm", "cold_online", "warm_online"):
            if a.get(kind) is None or b.get(kind) is None:
                continue
            cpu = f"{kind}_cpu"
            out.append(
                {
                    "workload": w,
                    "kind": kind,
                    "current": a[kind],
                    "baseline": b[kind],
                    "ratio": a[kind] / b[kind],
                    "cpu_ratio": (a[cpu] / b[cpu]) if b.get(cpu) else None,
                }
            )
    return out


def describe(r: dict) -> str:
    cpu = "" if r["cpu_ratio"] is None else f", CPU {r['cpu_ratio']:.2f}×"
    kind = r["kind"].replace("_online", " session's online phase") if "online" in r["kind"] else f"{r['kind']} session"
    return (
        f"{TITLES[r['workload']]}, {kind}: {r['current']:.2f} s against {r['baseline']:.2f} s "
        f"at the baseline ({r['ratio']:.2f}×{cpu})"
    )


def parse_workloads(text: str) -> list[str]:
    ws = [w.strip() for w in text.split(",") if w.strip()]
    bad = [w for w in ws if w not in WORKLOADS]
    if bad or not ws:
        raise SystemExit(f"--workloads: unknown {bad} (known: {', '.join(WORKLOADS)})")
    return ws


def add_arguments(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--workloads", default="pi500,keyword", help=f"comma-separated, of {', '.join(WORKLOADS)}")
    ap.add_argument("--repeats", type=int, default=3, help="driver runs per tree and workload (default 3)")
    ap.add_argument("--sessions", type=int, default=2, help="sessions per run: 1 cold + the rest warm (default 2)")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--gap", type=float, default=5.0, help="idle seconds before each warm session (default 5)")
    ap.add_argument("--json", type=Path, help="write every run's raw record here")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline-tree", type=Path, help="also measure this source tree (its C accelerator built)")
    add_arguments(ap)
    args = ap.parse_args()
    workloads = parse_workloads(args.workloads)
    trees = [ROOT] + ([args.baseline_tree.resolve()] if args.baseline_tree else [])
    runs = measure(trees, workloads, args.repeats, max(1, args.sessions), args.key_bits, args.gap)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    summ = summary(runs)
    print(markdown(summ, trees, workloads))
    if len(trees) == 2:
        print()
        for r in ratios(summ, trees[0], trees[1], workloads):
            print(f"- {describe(r)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
