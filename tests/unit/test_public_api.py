"""The public API (issue 39): what smcdp, smcdp.client, smcdp.dp, smcdp.crypto and smcdp.errors export is
stated in their ``__all__``, every name resolves, and every public class, function and method has a
docstring -- what the API reference (docs/api, `make docs`) renders."""

import importlib
import inspect

import pytest

PUBLIC_MODULES = ["smcdp", "smcdp.client", "smcdp.dp", "smcdp.crypto", "smcdp.errors"]


def _public_objects():
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        for name in mod.__all__:
            obj = getattr(mod, name)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                yield f"{modname}.{name}", obj
            if inspect.isclass(obj):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or (attr.startswith("set_") and attr.endswith("_request")):
                        continue  # private, dunder, or scikit-learn's metadata-routing setters
                    if isinstance(member, (staticmethod, classmethod)):
                        member = member.__func__
                    if inspect.isfunction(member) or isinstance(member, property):
                        yield f"{modname}.{name}.{attr}", getattr(obj, attr) if inspect.isfunction(member) else member


@pytest.mark.parametrize("modname", PUBLIC_MODULES)
def test_public_modules_state_their_api(modname):
    mod = importlib.import_module(modname)
    assert mod.__doc__, f"{modname} has no module docstring"
    assert isinstance(mod.__all__, list) and mod.__all__, f"{modname} states no __all__"
    for name in mod.__all__:
        assert hasattr(mod, name), f"{modname}.__all__ names {name!r}, which does not resolve"


def test_every_public_object_has_a_docstring():
    # inspect.getdoc: an override without a docstring inherits its base's, as the reference renders it
    missing = sorted({qualname for qualname, obj in _public_objects() if not (inspect.getdoc(obj) or "").strip()})
    assert not missing, "public objects without a docstring (the API reference would omit them):\n  " + "\n  ".join(
        missing
    )
