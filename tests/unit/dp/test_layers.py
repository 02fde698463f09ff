"""The shape of smcdp.dp, checked from its source (imports inside functions included).

* Imports point down the layers listed in LAYERS (same layer allowed) and form
  no cycle.
* Outside smcdp.dp, only smcdp.errors and smcdp._files are imported: nothing
  from the network, the protocols, the party runtime or any CLI.
* No private name is imported from another module.
* An import inside a function defers a heavy optional import and says why in a
  comment on its line or the line above.
"""

from __future__ import annotations

import ast
from pathlib import Path

import smcdp.dp

ROOT = Path(smcdp.dp.__file__).parent
ALLOWED_OUTSIDE = {"smcdp.errors", "smcdp._files"}

#: rank of each module: a module may import modules of its rank or lower
LAYERS = {
    "smcdp.dp.validation": 0,
    "smcdp.dp.conversions": 1,
    "smcdp.dp.samplers": 1,
    "smcdp.dp.events": 1,
    "smcdp.dp.mechanisms": 2,
    "smcdp.dp.accountants": 2,
    "smcdp.dp.budget": 3,
    "smcdp.dp.ledger": 4,
    "smcdp.dp.learners.dpem_budget": 4,
    "smcdp.dp.learners.logistic_bounds": 4,
    "smcdp.dp.learners.logistic_objective": 4,
    "smcdp.dp.learners.logistic": 5,
    "smcdp.dp.learners.bayes": 5,
    "smcdp.dp.learners.mixture": 5,
    "smcdp.dp.learners.large_margin": 5,
    "smcdp.dp.learners.factor_analysis": 5,
    "smcdp.dp.learners.kmeans": 5,
    "smcdp.dp": 7,
    "smcdp.dp.learners": 7,
}


def _module_name(path: Path) -> str:
    parts = ["smcdp", "dp", *path.relative_to(ROOT).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    rel = Path(*name.split(".")[2:]) if name.startswith("smcdp.dp.") else None
    return rel is not None and ((ROOT / rel).with_suffix(".py").exists() or (ROOT / rel / "__init__.py").exists())


def _imports(path: Path, text: str | None = None):
    """(target module, imported names, line, inside a function?) for every import."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text() if text is None else text, str(path))
    nested = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            nested.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, [], node.lineno, id(node) in nested
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [a.name for a in node.names]
            # "from smcdp.dp.learners import mixture" imports the module smcdp.dp.learners.mixture
            targets = [f"{base}.{n}" for n in names if _is_module(f"{base}.{n}")] or [base]
            for t in targets:
                yield t, names, node.lineno, id(node) in nested


FILES = sorted(ROOT.rglob("*.py"))
GRAPH = {_module_name(p): {t for t, *_ in _imports(p) if t.startswith("smcdp.dp")} for p in FILES}


def test_every_module_has_a_layer():
    assert set(GRAPH) == set(LAYERS)


def test_imports_point_down_the_layers():
    wrong = [
        f"{src} (layer {LAYERS[src]}) imports {dst} (layer {LAYERS[dst]})"
        for src, dsts in GRAPH.items()
        for dst in dsts
        if dst in LAYERS and LAYERS[dst] > LAYERS[src]
    ]
    assert not wrong, wrong


def test_no_import_cycle():
    state: dict[str, int] = {}

    def visit(node, stack):
        state[node] = 1
        for nxt in sorted(GRAPH.get(node, ())):
            if state.get(nxt) == 1:
                raise AssertionError("import cycle: " + " -> ".join(stack[stack.index(nxt) :] + [nxt]))
            if nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = 2

    for mod in sorted(GRAPH):
        if mod not in state:
            visit(mod, [mod])


def test_nothing_from_network_protocols_runtime_or_cli():
    bad = [
        f"{_module_name(p)}:{line} imports {t}"
        for p in FILES
        for t, _, line, _ in _imports(p)
        if t.split(".")[0] == "smcdp" and not t.startswith("smcdp.dp") and t not in ALLOWED_OUTSIDE
    ]
    assert not bad, bad


def test_no_private_name_crosses_a_module():
    bad = [
        f"{_module_name(p)}:{line} imports {n} from {t}"
        for p in FILES
        for t, names, line, _ in _imports(p)
        if t.startswith("smcdp")
        for n in names
        if n.startswith("_") and not n.startswith("__")
    ]
    assert not bad, bad


def test_function_level_imports_say_why():
    bad = []
    for p in FILES:
        lines = p.read_text().splitlines()
        for t, _, line, nested in _imports(p):
            if nested and "#" not in lines[line - 1] and not lines[line - 2].strip().startswith("#"):
                bad.append(f"{_module_name(p)}:{line} imports {t} inside a function without a reason")
    assert not bad, bad


def test_the_checks_see_function_level_and_relative_imports():
    src = "from .budget import _x\ndef f():\n    from smcdp.net import channel\n    return channel\n"
    found = list(_imports(ROOT / "learners" / "probe.py", src))
    assert found == [("smcdp.dp.learners.budget", ["_x"], 1, False), ("smcdp.net", ["channel"], 3, True)]
