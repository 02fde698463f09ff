"""Issue 16: `smcdp demo keyword` sessions (2048-bit, gRPC + mutual TLS, two party processes), this tree
against a baseline tree in the same run, sessions alternating so both see the same host load.

For every session: the demo's JSON (this tree: ``offline_seconds``, ``online_seconds``, CPU seconds per
party and phase; the baseline has only ``seconds``), the wall time of the whole command, the 1-minute load
average before and after, and the CPU seconds each party process used (children of the demo, from
``resource.getrusage(RUSAGE_CHILDREN)`` around the command: both parties together).  Prints median
[min–max] per tree and the ratio of medians, and writes every raw record with ``--json``.

    .venv/bin/python bench/keyword_sessions_bench.py --sessions 5 --baseline /work/main [--json out.json]

The host is shared: read the load averages beside the times (timings on a loaded host are inflated; the CPU
seconds are the more stable figure).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "keyword"


def one_session(tree: Path, utterance: Path, models: Path, bits: int, extra: list[str]) -> dict:
    out = Path(tempfile.mkstemp(suffix=".json")[1])
    cmd = [
        str(tree / ".venv" / "bin" / "smcdp"),
        "demo",
        "keyword",
        "--utterance",
        str(utterance),
        "--models",
        str(models),
        "--key-bits",
        str(bits),
        "--out",
        str(out),
        *extra,
    ]
    load0 = os.getloadavg()[0]
    ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=tree, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: demo failed:\n{proc.stderr[-3000:]}")
    res = json.loads(out.read_text())
    out.unlink()
    return {
        "tree": str(tree),
        "command_wall_s": wall,
        "load_before": load0,
        "load_after": os.getloadavg()[0],
        "children_cpu_s": (ru1.ru_utime - ru0.ru_utime) + (ru1.ru_stime - ru0.ru_stime),
        **res,
    }


def summary(vals: list[float]) -> str:
    return f"{statistics.median(vals):.2f} [{min(vals):.2f}–{max(vals):.2f}]"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=5)
    ap.add_argument("--baseline", type=Path, help="a baseline source tree with its own .venv (e.g. /work/main)")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--utterance", type=Path, default=DATA / "utterance_98.npy")
    ap.add_argument("--models", type=Path, default=DATA / "models.npz")
    ap.add_argument("--json", type=Path, help="write every session's record here")
    args = ap.parse_args()
    trees = [ROOT] + ([args.baseline.resolve()] if args.baseline else [])
    runs: dict[str, list[dict]] = {str(t): [] for t in trees}
    for i in range(args.sessions):
        for t in trees:
            print(f"session {i + 1}/{args.sessions}: {t} …", file=sys.stderr, flush=True)
            r = one_session(t, args.utterance.resolve(), args.models.resolve(), args.key_bits, [])
            runs[str(t)].append(r)
            print(
                f"  seconds {r['seconds']:.2f}, online {r.get('online_seconds')}, offline {r.get('offline_seconds')}, "
                f"cpu {r['children_cpu_s']:.1f}, load {r['load_before']:.1f}",
                file=sys.stderr,
                flush=True,
            )
    lines = [f"{args.sessions} sessions per tree, {args.key_bits}-bit, alternating; median [min–max]", ""]
    lines.append(
        "| tree | session s (demo `seconds`) | offline s | online s | CPU online s: Alice / Bob | "
        "CPU offline s: Alice / Bob | CPU both party processes, whole command s | load avg (1 min) |"
    )
    lines.append("|---|---|---|---|---|---|---|---|")
    for t, rs in runs.items():
        sess = summary([r["seconds"] for r in rs])
        if rs[0].get("online_seconds") is not None:
            on = summary([r["online_seconds"] for r in rs])
            off = summary([r["offline_seconds"] for r in rs])
            c = [r["cpu_seconds"] for r in rs]
            con = f"{summary([x['online']['alice'] for x in c])} / {summary([x['online']['bob'] for x in c])}"
            coff = f"{summary([x['offline']['alice'] for x in c])} / {summary([x['offline']['bob'] for x in c])}"
        else:
            on = off = con = coff = "— (everything online)"
        loads = [r["load_before"] for r in rs] + [r["load_after"] for r in rs]
        lines.append(
            f"| {t} | {sess} | {off} | {on} | {con} | {coff} | "
            f"{summary([r['children_cpu_s'] for r in rs])} | {min(loads):.1f}–{max(loads):.1f} |"
        )
    if len(trees) == 2:
        a, b = (statistics.median(r["seconds"] for r in runs[str(t)]) for t in trees)
        lines += ["", f"ratio of median session seconds, baseline / this tree: {b / a:.2f}"]
        if runs[str(ROOT)][0].get("online_seconds") is not None:
            on = statistics.median(r["online_seconds"] for r in runs[str(ROOT)])
            lines.append(f"ratio baseline session / this tree's online phase: {b / on:.2f}")
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
