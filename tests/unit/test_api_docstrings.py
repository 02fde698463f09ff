"""The API reference (docs/api, `make docs`) renders every public class and function with a docstring.

autodoc documents a module's public members -- its ``__all__``, or without one the public names it defines --
and silently leaves out every member without a docstring.  These tests read the modules the reference's
pages name (``automodule`` / ``autoexception`` / ``autoclass`` / ``autofunction``), list what autodoc would
render of them, and fail naming every public class, function, method or property that has no docstring
(and so would be missing from the site), and every name the public modules export that no page documents.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.test_public_api import PUBLIC_MODULES

API_DOCS = Path(__file__).resolve().parents[2] / "docs" / "api"
_DIRECTIVE = re.compile(r"^\.\. (automodule|autoexception|autoclass|autofunction):: (\S+)\s*$", re.M)


def _directives() -> list[tuple[str, str]]:
    """(directive, target) of every autodoc directive of the reference's pages."""
    found = []
    for page in sorted(API_DOCS.glob("*.rst")):
        found += [(m.group(1), m.group(2)) for m in _DIRECTIVE.finditer(page.read_text(encoding="utf-8"))]
    return found


def _resolve(target: str) -> object:
    """A dotted name: a module, or an attribute of one."""
    try:
        return importlib.import_module(target)
    except ImportError:
        modname, _, name = target.rpartition(".")
        return getattr(importlib.import_module(modname), name)


def _module_members(mod: ModuleType) -> list[str]:
    """The members autodoc documents of ``mod`` (``:members:``): its ``__all__``, or else the public names
    it defines itself (imported ones are left out)."""
    names = getattr(mod, "__all__", None)
    if names is not None:
        return list(names)
    return [
        n for n, obj in vars(mod).items() if not n.startswith("_") and getattr(obj, "__module__", None) == mod.__name__
    ]


def _class_members(cls: type) -> list[tuple[str, object]]:
    """The methods and properties autodoc documents of ``cls``: the public ones its own body defines."""
    out = []
    for name, member in vars(cls).items():
        if name.startswith("_") or (name.startswith("set_") and name.endswith("_request")):
            continue  # private, dunder, or scikit-learn's metadata-routing setters (skipped in docs/conf.py)
        if isinstance(member, (staticmethod, classmethod)):
            member = member.__func__
        if isinstance(member, property):
            out.append((name, member))
        elif inspect.isfunction(member):
            # through the class: an override without a docstring inherits its base's (autodoc_inherit_docstrings)
            out.append((name, getattr(cls, name)))
    return out


def _documented() -> list[tuple[str, object]]:
    """(qualified name, object) of every module, class, function, method and property the reference renders
    -- once it has a docstring."""
    out: list[tuple[str, object]] = []
    objects: list[tuple[str, object]] = []
    for directive, target in _directives():
        obj = _resolve(target)
        if directive == "automodule":
            assert isinstance(obj, ModuleType), f"automodule:: {target} is not a module"
            out.append((target, obj))
            objects += [(f"{target}.{name}", getattr(obj, name)) for name in _module_members(obj)]
        else:
            objects.append((target, obj))
    for qualname, obj in objects:
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out.append((qualname, obj))
        if inspect.isclass(obj):
            out += [(f"{qualname}.{name}", member) for name, member in _class_members(obj)]
    return out


def test_the_reference_has_pages_and_directives():
    assert len({target for _, target in _directives()}) >= 10, f"no autodoc directives found under {API_DOCS}"


def test_every_rendered_object_has_a_docstring():
    missing = sorted({qualname for qualname, obj in _documented() if not (inspect.getdoc(obj) or "").strip()})
    assert not missing, (
        "public objects of the modules docs/api documents have no docstring, so the API reference leaves "
        "them out:\n  " + "\n  ".join(missing)
    )


@pytest.mark.parametrize("modname", PUBLIC_MODULES)
def test_every_exported_name_is_in_the_reference(modname):
    rendered = {id(obj) for _, obj in _documented()}
    mod = importlib.import_module(modname)
    absent = [
        name
        for name in mod.__all__
        if (inspect.isclass(obj := getattr(mod, name)) or inspect.isfunction(obj)) and id(obj) not in rendered
    ]
    assert not absent, f"{modname} exports names that no page of docs/api documents: {', '.join(absent)}"
