"""Execute the notebooks in examples/notebooks with nbclient (issue 39; `make notebook-test`, CI).

Each notebook runs top to bottom in a fresh kernel, in a temporary directory, with a per-cell timeout;
an exception in any cell fails it.  The notebooks are committed without outputs (nbstripout, see
.pre-commit-config.yaml) and this run checks that too.  Prints 'N passed, M failed'; exit 1 on a failure.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

REPO = Path(__file__).resolve().parents[2]


def has_outputs(nb: nbformat.NotebookNode) -> bool:
    return any(c.get("outputs") or c.get("execution_count") for c in nb.cells if c.cell_type == "code")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "notebooks", nargs="*", type=Path, default=sorted((REPO / "examples" / "notebooks").glob("*.ipynb"))
    )
    ap.add_argument("--timeout", type=int, default=600, help="seconds per cell (default 600)")
    args = ap.parse_args()
    env_mpl = os.environ.setdefault("MPLBACKEND", "Agg")  # plots render to nothing, no display needed
    passed = failed = 0
    for path in args.notebooks:
        nb = nbformat.read(path, as_version=4)
        if has_outputs(nb):
            print(f"FAILED {path.name}: committed with outputs (run nbstripout on it)")
            failed += 1
            continue
        t0 = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="smcdp-nb-") as tmp:
            client = NotebookClient(
                nb, timeout=args.timeout, kernel_name="python3", resources={"metadata": {"path": tmp}}
            )
            try:
                client.execute()
            except CellExecutionError as exc:
                print(f"FAILED {path.name} ({time.monotonic() - t0:.0f} s):\n{exc}")
                failed += 1
                continue
        print(f"passed {path.name} ({time.monotonic() - t0:.0f} s, {len(nb.cells)} cells, MPLBACKEND={env_mpl})")
        passed += 1
    print(f"{passed} passed, {failed} failed")
    return 1 if failed or not passed else 0


if __name__ == "__main__":
    sys.exit(main())
