"""Run smcdp in a subprocess as if some packages were not installed (the optional-part tests, issue 29).

:func:`blocked_env` returns an environment whose ``PYTHONPATH`` starts with a folder holding a
``sitecustomize.py`` (Python imports it at start-up) that puts a finder first on ``sys.meta_path``:
importing -- or :func:`importlib.util.find_spec` on -- any of the named top-level packages raises
``ModuleNotFoundError`` as for a package that is not there.  Child processes inherit the
environment, so party processes a command starts lack the packages too.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.support.paths import REPO

SITECUSTOMIZE = '''\
import os
import sys

_BLOCKED = tuple(n for n in os.environ.get("SMCDP_TEST_BLOCKED_MODULES", "").split(",") if n)


class _NotInstalled:
    """Behave as if the packages in SMCDP_TEST_BLOCKED_MODULES were not installed."""

    @staticmethod
    def find_spec(name, path=None, target=None):
        if name.split(".")[0] in _BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


if _BLOCKED:
    sys.meta_path.insert(0, _NotInstalled)
'''


def blocked_env(tmp_path: Path, modules: Sequence[str]) -> dict[str, str]:
    """``os.environ`` plus what makes a Python process started with it lack ``modules``."""
    folder = tmp_path / "not-installed"
    folder.mkdir(exist_ok=True)
    (folder / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.pathsep.join([str(folder), str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
    return dict(os.environ, PYTHONPATH=path, SMCDP_TEST_BLOCKED_MODULES=",".join(modules))


def run_without(
    tmp_path: Path, modules: Sequence[str], argv: Sequence[str], *, timeout: float = 120, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    """``python ARGV...`` (``-m smcdp ...``, a script) with ``modules`` missing; output as text."""
    return subprocess.run(
        [sys.executable, *argv],
        env=blocked_env(tmp_path, modules),
        cwd=cwd or tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
