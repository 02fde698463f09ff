"""How the suite runs in parallel (pytest-xdist, ``make test``): which tests must share a worker.

``make test`` runs ``pytest -n N --dist loadgroup``: each test goes to whichever worker is free,
except tests marked ``xdist_group(NAME)``, which all go to one worker.  This plugin adds that mark
where sharing a worker is what the test's fixtures need, so nobody has to remember it:

* a test that uses a **module-, class- or package-scoped fixture** (a party cluster started once per
  module, say) runs on the worker that holds that fixture.  Tests of one module that share such a
  fixture, directly or through another test that uses both, form one group named after the module
  and the fixtures (``integration/x:cluster`` for tests/integration/x.py); two clusters in one module are two groups that may run
  on two workers at once.  Without this, every worker that got one of the module's tests would start
  its own cluster (and two copies of the namespace cluster would collide on its fixed names);
* a test marked ``serial`` runs in the one group ``serial``: those tests run one after the other,
  never two at once (other tests still run beside them on other workers).

Session-scoped fixtures (keys, say) are made once per worker; they must be cheap or cached on disk
(see tests/support/keys.py).  Without xdist (``pytest`` alone, ``make test-quick`` with ``-n 0``)
the marks change nothing.
"""

from __future__ import annotations

import pytest

SHARED_SCOPES = ("module", "class", "package")


def pytest_configure(config):
    config.addinivalue_line("markers", "serial: runs in one xdist group with every other serial test "
                                       "(never two of them at once); see tests/support/scheduling.py")
    config.pluginmanager.register(_GroupIds(), "smcdp-xdist-group-ids")


def shared_fixtures(item) -> list[str]:
    """The names of the module/class/package-scoped fixtures ``item`` uses (directly or not)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:                      # not a Function (a doctest, say)
        return []
    names = []
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope in SHARED_SCOPES:
            names.append(name)
    return sorted(names)


def groups(items) -> dict[int, str]:
    """index in ``items`` -> xdist group name, for the items that must share a worker."""
    out: dict[int, str] = {}
    parent: dict[tuple[str, str], tuple[str, str]] = {}   # union-find over (module, fixture)

    def find(x):
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    uses: dict[int, list[tuple[str, str]]] = {}
    for i, item in enumerate(items):
        module = item.nodeid.split("::")[0]
        keys = [(module, name) for name in shared_fixtures(item)]
        if keys:
            uses[i] = keys
            for k in keys[1:]:
                parent[find(k)] = find(keys[0])
    members: dict[tuple[str, str], set[str]] = {}
    serial_roots = set()
    for i, keys in uses.items():
        members.setdefault(find(keys[0]), set()).update(name for _, name in keys)
        if items[i].get_closest_marker("serial") is not None:
            serial_roots.add(find(keys[0]))
    for i, keys in uses.items():
        root = find(keys[0])
        # a serial test that shares a fixture takes the fixture's other users into "serial" with it
        module = root[0].removeprefix("tests/").removesuffix(".py")
        out[i] = "serial" if root in serial_roots else f"{module}:{'+'.join(sorted(members[root]))}"
    for i, item in enumerate(items):
        if item.get_closest_marker("serial") is not None:
            out[i] = "serial"
    return out


@pytest.hookimpl(tryfirst=True)   # before xdist reads the marks (it renames grouped tests)
def pytest_collection_modifyitems(config, items):
    for i, name in groups(items).items():
        if items[i].get_closest_marker("xdist_group") is None:
            items[i].add_marker(pytest.mark.xdist_group(name))


def group_of(item) -> str | None:
    """The xdist group of ``item`` as xdist spells it (its marks' names, sorted, joined by ``_``)."""
    names = {str(m.args[0] if m.args else m.kwargs.get("name", "default")) for m in item.iter_markers("xdist_group")}
    return "_".join(sorted(names)) if names else None


class _GroupIds:
    """xdist tells its controller a test's group through the test ids a worker collected,
    ``nodeid@group``; xdist 3.8 writes them where pytest 9.2 no longer reads (pytest-xdist issue 1386),
    so every group would be split across workers without a word.  Where its renaming did not take,
    this renames (the structured id pytest 9.2 reads) until the worker has sent its collection, then
    gives the tests their own ids back (reports and ``-ra`` show ids one can paste into a command;
    the controller schedules by the ids it was sent).  tests/unit/test_scheduling.py checks that
    groups hold."""

    def __init__(self) -> None:
        self.renamed: list[tuple[object, object]] = []

    @pytest.hookimpl(trylast=True)   # after xdist's own renaming
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):   # set in xdist workers under --dist loadgroup
            return
        for item in items:
            group = group_of(item)
            if group is None or item.nodeid.endswith(f"@{group}") or not hasattr(item, "_id"):
                continue
            new = f"{item.nodeid}@{group}"
            self.renamed.append((item, item._id))
            item._id = type(item._id).parse(new)
            assert item.nodeid == new, "cannot give the test its xdist group"

    @pytest.hookimpl(trylast=True)   # after xdist's worker sent its collection to the controller
    def pytest_collection_finish(self, session):
        for item, original in self.renamed:
            item._id = original
        self.renamed.clear()
