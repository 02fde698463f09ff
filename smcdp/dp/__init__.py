"""Differential privacy core and learners.

The learners are exported lazily (PEP 562 ``__getattr__``): ``import
smcdp.dp.mechanisms`` or ``smcdp.dp.accounting`` does not import
scikit-learn; the first access to e.g. ``smcdp.dp.LogisticRegression`` does.
"""

from __future__ import annotations

import importlib

_LAZY = {
    "LogisticRegression": "logistic",
    "logistic_sensitivity": "logistic",
    "LargeMarginGaussianClassifier": "large_margin",
    "GaussianBayesClassifier": "bayes",
    "bhattacharyya_bound": "bayes",
    "GaussianMixture": "mixture",
    "FactorAnalysis": "factor_analysis",
    "KMeans": "kmeans",
    "PrivacyLeakWarning": "_validation",
}

__all__ = [
    "FactorAnalysis",
    "GaussianBayesClassifier",
    "GaussianMixture",
    "KMeans",
    "LargeMarginGaussianClassifier",
    "LogisticRegression",
    "PrivacyLeakWarning",
    "bhattacharyya_bound",
    "logistic_sensitivity",
]


def __getattr__(name: str):
    mod = _LAZY.get(name)
    if mod is None:
        raise AttributeError(f"module 'smcdp.dp' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{mod}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
