"""deploy/netns/demo.sh, the walk-through deploy/README.md gives, runs as written: four namespace "hosts" from
`smcdp deploy init` bundles, a power-iteration session started by trent, the result next to numpy's, and no
namespace of its run left behind.  (Its `deploy init` once lacked `--roles`, so every party's policy refused the
session: found by running the README's commands on a fresh clone.)"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from .harness import netns_unavailable_reason

pytestmark = [pytest.mark.multihost, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[3]


def test_the_netns_demo_runs_power_iteration_and_cleans_up(tmp_path):
    reason = netns_unavailable_reason()
    if reason:
        pytest.skip(reason)
    proc = subprocess.Popen(
        ["bash", str(REPO / "deploy" / "netns" / "demo.sh"), str(tmp_path / "work")],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "PYTHON": sys.executable},
    )
    try:
        out, _ = proc.communicate(timeout=200)
    finally:
        proc.kill()
    assert proc.returncode == 0, out[-3000:]
    assert "succeeded" in out, out[-3000:]
    cosines = [float(c) for c in re.findall(r"\|cos\([xu], numpy\)\| = ([0-9.]+)", out)]
    assert len(cosines) == 2 and all(c > 1 - 1e-9 for c in cosines), out[-3000:]
    assert "namespaces removed" in out
    # the run's namespaces are smcdp-<the script's pid>-<hex>-<name> (deploy/netns/netns.sh): none is left
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert f"smcdp-{proc.pid}-" not in left, left
