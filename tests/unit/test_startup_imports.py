"""A party process and the ``smcdp`` command start without the heavy numerical libraries.

Every party process imports every built-in plug-in at start-up, and every ``smcdp`` command imports the
runtime's configuration (with the budget ledger and its calibrations).  scipy.optimize, scipy.stats and
scikit-learn (which pulls in pandas) cost more than a second and a half of CPU there, in every process,
including the many that never calibrate a mechanism or train a classifier; they are imported where they
are used.  This keeps it so: a new module-level import of them in that path fails here, naming the module.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.timeout(120)

HEAVY = ("scipy", "sklearn", "pandas", "hmmlearn", "python_speech_features", "dp_accounting", "matplotlib")

_PROBE = """
import json, sys
before = set(sys.modules)
{imports}
heavy = {heavy!r}
loaded = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in heavy)
# which smcdp module imported each heavy package first is not recorded by Python; name the smcdp
# modules present so that a failure says where to look
print(json.dumps({{"heavy": loaded[:20], "smcdp": sorted(m for m in sys.modules if m.startswith("smcdp"))}}))
"""


def _probe(imports: str) -> dict[str, list[str]]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE.format(imports=imports, heavy=HEAVY)],
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, list[str]] = json.loads(out.stdout)
    return result


def test_a_party_process_imports_its_plugins_without_scipy_or_sklearn() -> None:
    got = _probe("import smcdp.cli.party, smcdp.runtime.process, smcdp.plugins.registry")
    assert "smcdp.plugins.dp_aggregate" in got["smcdp"] and "smcdp.protocols.secure_forward" in got["smcdp"]
    assert got["heavy"] == [], f"imported at a party's start-up: {got['heavy']}"


def test_the_command_line_starts_without_scipy_or_sklearn() -> None:
    got = _probe("import smcdp.cli.app, smcdp.cli.governance, smcdp.client")
    assert "smcdp.dp.budget" in got["smcdp"]
    assert got["heavy"] == [], f"imported by every smcdp command: {got['heavy']}"


def test_a_data_partys_local_training_imports_neither_sklearn_nor_scipy_optimize() -> None:
    """dp-aggregate's local fit (every data party's first session, again after each restart) uses the
    learners' solver, not the scikit-learn estimator: importing scikit-learn for it cost ~1 CPU-s there."""
    got = _probe(
        "import numpy as np\n"
        "from smcdp.protocols.dp_aggregate import train_local\n"
        "rng = np.random.default_rng(0); X = rng.normal(size=(50, 3)); X /= np.linalg.norm(X, axis=1)[:, None]\n"
        "w, d = train_local(X, np.where(X[:, 0] > 0, 1, -1), 0.1)"
    )
    assert "smcdp.dp.learners.logistic_objective" in got["smcdp"]
    heavy = [m for m in got["heavy"] if m.split(".")[0] in ("sklearn", "pandas") or m.startswith("scipy.optimize")]
    assert heavy == [], f"imported by the local fit: {heavy}"


def test_the_lazy_paths_still_import_what_they_use() -> None:
    """The functions that now import scipy / scikit-learn themselves work in a fresh process."""
    code = (
        "import numpy as np\n"
        "from smcdp.dp.conversions import analytic_gaussian_sigma, rho_capacity\n"
        "from smcdp.protocols.dp_aggregate import train_local\n"
        "assert analytic_gaussian_sigma(1.0, 1e-6) > 0 and rho_capacity(1.0, 1e-6) > 0\n"
        "rng = np.random.default_rng(0); X = rng.normal(size=(50, 3)); X /= np.linalg.norm(X, axis=1)[:, None]\n"
        "w, d = train_local(X, np.where(X[:, 0] > 0, 1, -1), 0.1)\n"
        "assert w.shape == (3,) and d > 0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
