"""The regression guard (issue 27): whole sessions of this tree against a baseline commit, in the same run;
fails (exit 1) when a session got more than ``--threshold`` (20 %) slower.

Run it before every merge that touches crypto, compute, net or protocols (docs/benchmarks.md):

    .venv/bin/python bench/session_guard.py --baseline main
    .venv/bin/python bench/session_guard.py --baseline 2577dbe --workloads pi500,pi30,keyword --repeats 5

It checks ``REV`` out into a temporary git worktree (detached; removed afterwards), builds the C
accelerator there in place, and runs ``bench/session_bench.py``'s sessions -- cold and warm party
processes -- from both trees alternately (the order flips every repetition), so both see the same host.
For each workload and kind it compares the medians: this tree / baseline > 1 + threshold is a
regression.  ``--baseline-tree PATH`` uses an existing source tree instead of a checkout.

Exit status: 0 no session slower beyond the threshold; 1 a regression (each one named on stderr and in
the last lines of stdout); 2 the guard could not measure (a failed checkout, build or session).
On a loaded host raise ``--repeats``: medians of 3 alternating runs still move by ~10 %.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from session_bench import (  # noqa: E402  (bench/ is not a package)
    ROOT,
    TITLES,
    add_arguments,
    describe,
    log,
    markdown,
    measure,
    parse_workloads,
    ratios,
    summary,
)

DEFAULT_THRESHOLD = 0.20


def verdict(rows: list[dict], threshold: float) -> list[str]:
    """One message per (workload, kind) whose median this tree / baseline exceeds 1 + threshold."""
    return [
        f"REGRESSION: {describe(r)}: more than {threshold:.0%} slower" for r in rows if r["ratio"] > 1.0 + threshold
    ]


class Checkout:
    """``rev`` in a temporary detached worktree of this repository, with its C accelerator built in place."""

    def __init__(self, rev: str) -> None:
        self.rev = rev
        self.dir = Path(tempfile.mkdtemp(prefix="smcdp-guard-")) / "baseline"
        self.commit = ""

    def __enter__(self) -> Path:
        git = ["git", "-C", str(ROOT)]
        self.commit = _run([*git, "rev-parse", "--verify", f"{self.rev}^{{commit}}"]).strip()
        _run([*git, "worktree", "add", "--detach", str(self.dir), self.commit])
        try:
            build(self.dir)
        except BaseException:
            self.__exit__()
            raise
        return self.dir

    def __exit__(self, *exc) -> None:
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(self.dir)], capture_output=True, text=True
        )
        subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True, text=True)
        shutil.rmtree(self.dir.parent, ignore_errors=True)


def build(tree: Path) -> None:
    """The C accelerator of ``tree``, in place (without it the baseline would run the slower pure engine)."""
    if (tree / "smcdp" / "crypto" / "_mont.c").exists():
        _run([sys.executable, "setup.py", "build_ext", "--inplace"], cwd=tree)
    check_native(tree)


def check_native(tree: Path) -> None:
    if (tree / "smcdp" / "crypto" / "_mont.c").exists() and not list((tree / "smcdp" / "crypto").glob("_mont*.so")):
        raise RuntimeError(
            f"{tree} has no built C accelerator (smcdp/crypto/_mont*.so): the baseline would run "
            "the slower pure engine and the comparison would not be fair"
        )


def _run(cmd: list[str], cwd: Path | None = None) -> str:
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def guard(baseline: Path, args: argparse.Namespace) -> int:
    workloads = parse_workloads(args.workloads)
    trees = [ROOT, baseline]
    runs = measure(trees, workloads, args.repeats, max(2, args.sessions), args.key_bits, args.gap)
    if args.json:
        args.json.write_text(json.dumps(runs, indent=1))
    summ = summary(runs)
    rows = ratios(summ, ROOT, baseline, workloads)
    print(markdown(summ, trees, workloads))
    print()
    for r in rows:
        print(f"- {describe(r)}")
    bad = verdict(rows, args.threshold)
    print()
    if bad:
        for msg in bad:
            print(msg)
            log(msg)
        return 1
    print(
        f"OK: no session more than {args.threshold:.0%} slower than the baseline "
        f"({', '.join(TITLES[w] for w in workloads)}; cold and warm)"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--baseline", metavar="REV", help="a commit, branch or tag of this repository")
    src.add_argument("--baseline-tree", type=Path, metavar="PATH", help="an existing source tree instead")
    ap.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="allowed slowdown of a median session (default 0.20 = 20 %%)",
    )
    add_arguments(ap)
    args = ap.parse_args(argv)
    try:
        check_native(ROOT)
        if args.baseline_tree is not None:
            tree = args.baseline_tree.resolve()
            check_native(tree)  # an existing tree is never written to
            return guard(tree, args)
        with Checkout(args.baseline) as tree:
            log(f"baseline {args.baseline} checked out at {tree}")
            return guard(tree, args)
    except (RuntimeError, subprocess.TimeoutExpired, OSError) as exc:
        log(f"session guard: could not measure: {exc}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
