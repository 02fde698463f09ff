"""Optional parts name their missing packages (smcdp._optional, issue 29): the table and its install lines.

The commands and party processes that refuse to start without them are tested in
tests/integration/processes/test_optional_parts.py (subprocesses with the packages blocked).
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib import metadata
from pathlib import Path

import pytest

import smcdp
from smcdp._optional import PARTS, MissingDependency, install_line, missing_modules, require
from tests.support.paths import REPO

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())


def _name(requirement: str) -> str:
    return re.sub(r"[-_.]+", "-", re.match(r"[A-Za-z0-9._-]+", requirement).group(0)).lower()


def test_the_dask_line_is_the_extra():
    assert install_line("dask") == "pip install 'smcdp[dask]'"
    assert install_line("zarr") == "pip install 'smcdp[dask]'"
    assert install_line("plotting") == "pip install 'smcdp[dev]'"


@pytest.mark.parametrize("part", sorted(PARTS))
def test_every_install_line_follows_pyproject(part):
    """An extra's packages are installed with the extra; a plain dependency with its own specifier."""
    deps = {_name(r): r for r in PYPROJECT["project"]["dependencies"]}
    extras = {extra: {_name(r) for r in reqs} for extra, reqs in PYPROJECT["project"]["optional-dependencies"].items()}
    line = install_line(part)
    assert line.startswith("pip install '")
    for dist in PARTS[part].distributions:
        key = _name(dist)
        if key in deps:
            spec = re.sub(r"\s", "", deps[key][len(re.match(r"[A-Za-z0-9._-]+", deps[key]).group(0)) :])
            # the metadata may order a specifier's clauses differently: compare them as sets
            quoted = re.search(rf"'{re.escape(dist)}([^']*)'", line)
            assert quoted is not None, (dist, line)
            assert set(quoted.group(1).split(",")) == set(spec.split(",")), (dist, line, spec)
        else:
            owner = [e for e, names in extras.items() if key in names and e != "test"]
            assert owner, f"{dist} of part {part!r} is in no extra of pyproject.toml"
            assert any(f"smcdp[{e}]" in line for e in owner), (dist, line)


def test_require_names_the_part_the_setting_and_the_install_line(monkeypatch):
    monkeypatch.setattr("smcdp._optional.missing_modules", lambda part: ("distributed",))
    with pytest.raises(MissingDependency) as err:
        require("dask", "--compute dask")
    assert str(err.value) == (
        "--compute dask needs the Dask compute engine, but the Python package "
        "'distributed' is not installed here: pip install 'smcdp[dask]'"
    )
    assert err.value.code == "FAILED_PRECONDITION"
    assert (err.value.part, err.value.modules, err.value.install) == (
        "dask",
        ("distributed",),
        "pip install 'smcdp[dask]'",
    )


def test_nothing_is_missing_here():
    """`make install` installs every part (the test and dev extras): require() passes, finding them."""
    for part in PARTS:
        assert missing_modules(part) == (), part
        require(part, "this test")


def test_a_module_whose_lookup_fails_counts_as_missing(monkeypatch):
    def broken(name, *a):
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    monkeypatch.setattr("importlib.util.find_spec", broken)
    assert missing_modules("console") == ("aiohttp", "prometheus_client")


def _function_level_imports():
    """(file:line, top-level module) of every import inside a function in smcdp (not smcdp's own)."""
    package = Path(smcdp.__file__).parent
    for path in sorted(package.rglob("*.py")):
        if "v1" in path.relative_to(package).parts:
            continue
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for node in ast.walk(fn):
                    if isinstance(node, ast.Import):
                        names = [a.name for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                        names = [node.module]
                    else:
                        continue
                    for name in names:
                        top = name.split(".")[0]
                        if top != "smcdp" and top not in sys.stdlib_module_names:
                            yield f"{path.relative_to(package.parent)}:{node.lineno}", top


def _with_their_dependencies(names: set[str]) -> set[str]:
    """``names`` and what they require, transitively (extras' requirements not counted)."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            reqs = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [_name(r) for r in reqs if "extra ==" not in r]
    return seen


def test_every_deferred_import_of_a_package_outside_the_dependencies_is_an_optional_part():
    """An import deferred into a function (the architecture test lists them) of a package that `pip
    install smcdp` does not install (directly or as a dependency's dependency) must belong to a part of
    smcdp._optional, so that what needs it can name it and its install line."""
    core = _with_their_dependencies({_name(r) for r in PYPROJECT["project"]["dependencies"]})
    dists = metadata.packages_distributions()
    in_parts = {m for part in PARTS.values() for m in part.modules}
    unexplained = []
    for where, module in _function_level_imports():
        provided_by = {_name(d) for d in dists.get(module, [module])}
        if not provided_by & core and module not in in_parts:
            unexplained.append(f"{where}: {module}")
    assert not unexplained, "optional imports that no part of smcdp._optional covers:\n" + "\n".join(unexplained)


def test_the_completeness_check_sees_the_deferred_dask_imports():
    # the completeness check above must see a deferred optional import when there is one
    found = dict(_function_level_imports())
    assert "distributed" in found.values() and "zarr" in found.values()
