"""Sphinx configuration of the documentation site: `make docs` builds it into out/docs.

Sphinx rather than MkDocs because the docstrings are written in reStructuredText roles
(:class:`SessionResult`, :func:`~smcdp.dp.budget.charge_on_success`, ``literals``): autodoc renders and
resolves them as they are, and nitpicky mode turns every reference that resolves to nothing into a
warning, which `-W` makes an error.  The pages in docs/ stay Markdown (MyST).  No intersphinx: CI has no
network, so references to other projects' objects are listed below as known-external instead.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.abspath(".."))

import smcdp  # noqa: E402 - after the path is set

project = "smcdp"
author = "the smcdp authors"
release = version = smcdp.__version__
copyright = "the smcdp authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",  # the DP learners' docstrings are NumPy style (Parameters / Attributes)
    "sphinx.ext.viewcode",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_heading_anchors = 3  # [text](page.md#a-heading) links resolve to the heading
myst_enable_extensions = ["deflist"]

# --- API reference -----------------------------------------------------------------------------------
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_format = "short"
autodoc_preserve_defaults = True
autodoc_default_options = {"members": True, "show-inheritance": True}
add_module_names = False
python_use_unqualified_type_names = True

napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_ivar = False
napoleon_use_param = False  # NumPy "type" columns are prose ({"clip", "raise"}, default=...), not references
napoleon_use_rtype = False


def _skip(app, what, name, obj, skip, options):
    # scikit-learn adds set_fit_request / set_score_request ... to every estimator class; they are its API,
    # documented there, and their docstrings refer to its glossary.
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return skip


def setup(app):
    app.connect("autodoc-skip-member", _skip)


nitpicky = True
# Objects of other projects (and of the standard library) named in signatures and docstrings: without
# intersphinx (no network in CI) they cannot resolve, and are not broken references of ours.
nitpick_ignore_regex = [
    (
        "py:.*",
        r"(numpy|np|scipy|sklearn|gmpy2|mpz|phe|grpc|google|concurrent|asyncio|threading|os|pathlib|"
        r"collections|typing|datetime|decimal|enum|random|sqlite3|types|abc|numbers|json|io)(\..*)?",
    ),
    (
        "py:class",
        r"(Path|PathLike|Decimal|Enum|Any|Callable|Awaitable|Iterable|Iterator|Sequence|Mapping|"
        r"MappingProxyType|ArrayLike|NDArray|ndarray|Self|Literal|NamedTuple|Exception|"
        r"BaseEstimator|ClassifierMixin|ClusterMixin|TransformerMixin|DensityMixin|"
        r"Random|SystemRandom|ABC|Executor|ThreadPoolExecutor|Event|Thread|Lock|RLock)",
    ),
    (
        "py:class",
        r"(str|int|float|bool|bytes|dict|list|tuple|set|frozenset|object|type|None|"
        r"builtins\..*|SupportsInt|SupportsIndex|array-like|optional|callable)",
    ),
    # Internal modules, outside the reference by design (the public API is smcdp.client, smcdp.dp,
    # smcdp.crypto and smcdp.errors): references to them render as code, without a link.
    ("py:.*", r"smcdp\.(runtime|net|protocols|plugins|speech|primitives|compute|cli|v1|progress|_[a-z]+)(\..*)?"),
    ("py:.*", r"smcdp\.dp\.(events|conversions|samplers)(\..*)?"),
    ("py:.*", r"(smcdp\..*\.)?_[A-Za-z]\w*(\..*)?"),  # private names (_rpc.StartCall, _ApproxDPAccountant)
    ("py:class", r"PartyConfig"),  # smcdp.runtime.config, in annotations by short name
    ("py:.*", r"smcdp\.crypto\.(modexp|threads|native|codec|counters|dgk|zkp|naor_pinkas|parallel|prepared)(\..*)?"),
    # NumPy-style "type" columns of the DP learners are prose ("ndarray of shape (1, n_features)",
    # "float   (objective perturbation only)"), which Sphinx splits into would-be class names: a word that
    # is not a CamelCase identifier, or any text with spaces or symbols, is not a reference of ours.
    ("py:class", r"[a-z0-9_]+|.*[^\w.].*"),
    (
        "py:class",
        r"(T|_Mechanism|smcdp\.dp\.ledger\.T|smcdp\.dp\.mechanisms\._Mechanism)",
    ),  # type variables, private bases
    ("py:exc", r"(ValueError|TypeError|KeyError|RuntimeError|OSError|FileNotFoundError|ImportError)"),
]

# --- HTML --------------------------------------------------------------------------------------------
html_theme = "furo"
html_title = f"smcdp {release}"
