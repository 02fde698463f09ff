"""The architecture of docs/architecture.md, checked from the code.

* The import-linter contracts in pyproject.toml hold (layers, no gRPC below
  the runtime, smcdp.dp layered inside, protocols independent).
* No import cycle anywhere in smcdp, counting imports inside functions and
  under ``if TYPE_CHECKING``.
* An import inside a function defers a heavy or optional import and says why
  in a comment on its line or the line above.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import grimp

import smcdp
from tests.support.paths import REPO

PACKAGE = Path(smcdp.__file__).parent


def test_import_linter_contracts_hold():
    exe = Path(sys.executable).with_name("lint-imports")
    r = subprocess.run(
        [str(exe), "--config", str(REPO / "pyproject.toml")], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def _strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm (iterative); components with more than one module, or a self-import."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter
                    counter += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    comp.append(m)
                    if m == node:
                        break
                if len(comp) > 1 or node in graph.get(node, ()):
                    out.append(sorted(comp))
    return out


def _module_graph() -> dict[str, set[str]]:
    g = grimp.build_graph("smcdp", include_external_packages=False)
    graph = {}
    for m in g.modules:
        targets = set(g.find_modules_directly_imported_by(m))
        # importing a submodule imports its package's __init__ too: a package importing
        # one of its own submodules is not a cycle unless the submodule imports back
        graph[m] = {t for t in targets if t != m}
    return graph


def test_no_import_cycle_anywhere():
    cycles = _strongly_connected(_module_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle():
    # the checker itself must be able to fail
    assert _strongly_connected({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_function_level_imports_say_why():
    missing = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "v1" in path.relative_to(PACKAGE).parts:
            continue  # generated protobuf code
        text = path.read_text()
        lines = text.splitlines()
        for fn in ast.walk(ast.parse(text)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    here, above = lines[node.lineno - 1], lines[node.lineno - 2]
                    if "#" not in here and not above.strip().startswith("#"):
                        missing.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {here.strip()}")
    assert not missing, "imports inside functions without a reason:\n" + "\n".join(missing)
