"""How the suite runs in parallel (pytest-xdist, ``make test``): which tests must share a worker.

``make test`` runs ``pytest -n N --dist loadgroup``: each test goes to whichever worker is free,
except tests marked ``xdist_group(NAME)``, which all go to one worker, one after the other.  This
plugin adds that mark where the tests' fixtures need it, so nobody has to remember it:

* the tests of a module that use a **module-, class- or package-scoped fixture** (a party cluster
  started once per module, say) form one group named after the module (``integration/x`` for
  tests/integration/x.py): the fixture is set up once, on one worker.  Without this, every worker
  that got one of the module's tests would start its own cluster (and two copies of the namespace
  cluster would collide on its fixed names).  A module with several clusters (fault tolerance has
  three) runs them one after the other, as a plain run does: their tests kill and restart parties
  that must come back within a grace period, which several clusters busy at once on two cores could
  make them miss;
* a test marked ``serial`` runs in the one group ``serial`` (with its module's group, if it uses a
  shared fixture): those tests run one after the other, never two at once (other tests still run
  beside them on other workers).

Session-scoped fixtures (keys, say) are made once per worker, so they must be cheap: the key
fixtures are (docs/testing.md).  Without xdist (``pytest`` alone, ``make test JOBS=0``) the marks
change nothing.
"""

from __future__ import annotations

import pytest

SHARED_SCOPES = ("module", "class", "package")


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "serial: runs in one xdist group with every other serial test "
        "(never two of them at once); see tests/support/scheduling.py",
    )
    config.pluginmanager.register(_GroupIds(), "smcdp-xdist-group-ids")


def shared_fixtures(item) -> list[str]:
    """The names of the module/class/package-scoped fixtures ``item`` uses (directly or not)."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:  # not a Function (a doctest, say)
        return []
    names = []
    for name in item.fixturenames:
        defs = info.name2fixturedefs.get(name)
        if defs and defs[-1].scope in SHARED_SCOPES:
            names.append(name)
    return sorted(names)


def groups(items) -> dict[int, str]:
    """index in ``items`` -> xdist group name, for the items that must share a worker."""
    modules: dict[int, str] = {}
    serial_modules = set()
    for i, item in enumerate(items):
        if shared_fixtures(item):
            modules[i] = item.nodeid.split("::")[0]
            if item.get_closest_marker("serial") is not None:
                serial_modules.add(modules[i])
    out = {
        i: "serial" if m in serial_modules else m.removeprefix("tests/").removesuffix(".py") for i, m in modules.items()
    }
    for i, item in enumerate(items):
        if item.get_closest_marker("serial") is not None:
            out[i] = "serial"
    return out


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (it renames grouped tests)
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

    @pytest.hookimpl(trylast=True)  # after xdist's own renaming
    def pytest_collection_modifyitems(self, config, items):
        if not getattr(config.option, "loadgroup", False):  # set in xdist workers under --dist loadgroup
            return
        for item in items:
            group = group_of(item)
            if group is None or item.nodeid.endswith(f"@{group}") or not hasattr(item, "_id"):
                continue
            new = f"{item.nodeid}@{group}"
            self.renamed.append((item, item._id))
            item._id = type(item._id).parse(new)
            assert item.nodeid == new, "cannot give the test its xdist group"

    @pytest.hookimpl(trylast=True)  # after xdist's worker sent its collection to the controller
    def pytest_collection_finish(self, session):
        for item, original in self.renamed:
            item._id = original
        self.renamed.clear()
