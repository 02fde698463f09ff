"""smcdp: secure multiparty computation with differentially private release.

The public API (docs/api): :mod:`smcdp.client` (the operator's client of a running party),
:mod:`smcdp.dp` (mechanisms, accountants, budgets and scikit-learn-style DP learners),
:mod:`smcdp.crypto` (Paillier keys and encrypted vectors) and :mod:`smcdp.errors` (the typed
exceptions every layer raises).  The ``smcdp`` command is :mod:`smcdp.cli`.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
