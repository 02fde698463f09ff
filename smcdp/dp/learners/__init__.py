"""The DP learners (scikit-learn estimator API), one module per model.

Import them from :mod:`smcdp.dp` (``from smcdp.dp import LogisticRegression``);
this package imports nothing itself, so ``smcdp.dp.learners.dpem_budget`` can
be used without loading scikit-learn.
"""
