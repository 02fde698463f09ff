"""Run every experiment script (quick settings by default; ``--full`` for the papers' repetitions).

    python examples/exp_all.py --out build/experiments [--full]
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import exp_common as ec

SCRIPTS = ["exp_000_breast_cancer", "exp_003_synthetic", "exp_002_bayes_error", "exp_004_dpem", "exp_vs_diffprivlib",
           "exp_fig4_6_aggregate"]


def main(argv=None) -> int:
    args = ec.parser(__doc__.splitlines()[0]).parse_args(argv)
    passthrough = ["--out", args.out, "--seed", str(args.seed)] + (["--full"] if args.full else [])
    for name in SCRIPTS:
        print(f"== {name}", flush=True)
        rc = importlib.import_module(name).main(passthrough)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
