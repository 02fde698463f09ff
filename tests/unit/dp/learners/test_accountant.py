"""Learners charge a PrivacyBudget the diffprivlib way (``accountant=``).

Every learner, with the in-memory and the ledger budget alike: a budget too
small refuses the fit with BudgetExceeded before X is read and before any noise
is drawn; a fit that succeeds spends exactly ``epsilon_spent_`` /
``delta_spent_`` / ``rho_spent_``; a fit that fails gives its reservation back.
"""

import math
import warnings
from decimal import Decimal

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from smcdp.dp import (
    BudgetAccountant,
    BudgetExceeded,
    FactorAnalysis,
    GaussianBayesClassifier,
    GaussianMixture,
    KMeans,
    LargeMarginGaussianClassifier,
    Ledger,
    LedgerBudget,
    LogisticRegression,
)
from smcdp.dp.validation import InvalidParameter

INF = float("inf")


def _data(n=120, d=2, seed=0):
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 2, size=n)
    X = rng.normal(size=(n, d)) * 0.2 + (2 * y[:, None] - 1) * 0.3
    X /= max(1.0, np.linalg.norm(X, axis=1).max())
    return X, y


# name -> (estimator factory taking random_state and accountant, supervised?)
LEARNERS = {
    "logistic": (lambda rs, acc: LogisticRegression(epsilon=1.0, random_state=rs, accountant=acc), True),
    "logistic-output": (
        lambda rs, acc: LogisticRegression(epsilon=1.0, mechanism="output", random_state=rs, accountant=acc),
        True,
    ),
    "bayes": (
        lambda rs, acc: GaussianBayesClassifier(epsilon=1.0, bounds=(-1, 1), random_state=rs, accountant=acc),
        True,
    ),
    "large-margin": (lambda rs, acc: LargeMarginGaussianClassifier(epsilon=1.0, random_state=rs, accountant=acc), True),
    "large-margin-k2": (
        lambda rs, acc: LargeMarginGaussianClassifier(
            epsilon=1.0, n_components=2, label_epsilon=0.5, label_delta=1e-5, random_state=rs, accountant=acc
        ),
        True,
    ),
    "mixture": (
        lambda rs, acc: GaussianMixture(2, epsilon=1.0, delta=1e-4, n_iter=3, random_state=rs, accountant=acc),
        False,
    ),
    "factor-analysis": (
        lambda rs, acc: FactorAnalysis(1, epsilon=1.0, delta=1e-5, max_iter=50, random_state=rs, accountant=acc),
        False,
    ),
    "kmeans-zcdp": (
        lambda rs, acc: KMeans(2, epsilon=1.0, delta=1e-5, bounds=(-1, 1), random_state=rs, accountant=acc),
        False,
    ),
    "kmeans-linear": (
        lambda rs, acc: KMeans(2, epsilon=1.0, composition="linear", bounds=(-1, 1), random_state=rs, accountant=acc),
        False,
    ),
}


def _budget(kind, tmp_path, epsilon, delta, rule="linear"):
    if kind == "memory":
        return BudgetAccountant(epsilon, delta, rule=rule)
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("patients", epsilon, delta, rule=rule)
    return LedgerBudget(ledger, "patients")


def _fit(est, supervised, X, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return est.fit(X, y) if supervised else est.fit(X)


class Untouchable:
    """Stands in for X: any attempt to read it fails the test."""

    def _read(self, *args, **kwargs):
        raise AssertionError("X was read before the budget check")

    __array__ = __len__ = __iter__ = __getitem__ = _read

    def __getattr__(self, name):
        self._read()


@pytest.fixture(params=["memory", "ledger"])
def kind(request):
    return request.param


@pytest.mark.parametrize("name", LEARNERS)
def test_spends_exactly_what_it_reports(name, kind, tmp_path):
    make, supervised = LEARNERS[name]
    X, y = _data()
    budget = _budget(kind, tmp_path, 100.0, 0.01)
    est = _fit(make(0, budget), supervised, X, y)
    assert math.isfinite(est.epsilon_spent_) and est.rho_spent_ > 0
    st = budget.status()
    assert st.spent_epsilon == Decimal(repr(est.epsilon_spent_))
    assert st.spent_delta == Decimal(repr(est.delta_spent_))
    (entry,) = budget.history()
    assert entry.state == "charged" and entry.rho == Decimal(repr(est.rho_spent_))
    assert type(est).__name__ in entry.note
    assert st.n_reserved == 0


@pytest.mark.parametrize("name", LEARNERS)
def test_refuses_before_reading_data_when_the_budget_is_short(name, kind, tmp_path):
    make, supervised = LEARNERS[name]
    X, y = _data()
    # what the fit costs, measured with a budget large enough
    cost = _fit(make(0, BudgetAccountant(100.0, 0.01)), supervised, X, y)
    short = _budget(kind, tmp_path, cost.epsilon_spent_ * 0.99, 0.01)
    gen = np.random.default_rng(7)
    state = gen.bit_generator.state
    est = make(gen, short)
    with pytest.raises(BudgetExceeded) as ei:
        est.fit(Untouchable(), y) if supervised else est.fit(Untouchable())
    assert ei.value.code == "RESOURCE_EXHAUSTED"
    assert gen.bit_generator.state == state  # no noise was drawn
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    assert short.history() == [] and short.status().spent_epsilon == 0
    # the sentinel does detect a read: without a budget the same fit touches X
    with pytest.raises(AssertionError, match="X was read"):
        est2 = make(0, None)
        est2.fit(Untouchable(), y) if supervised else est2.fit(Untouchable())
    # and with just enough budget the fit goes through
    enough = (
        _budget(kind, tmp_path / "enough", cost.epsilon_spent_, 0.01)
        if kind == "ledger"
        else _budget(kind, tmp_path, cost.epsilon_spent_, 0.01)
    )
    _fit(make(0, enough), supervised, X, y)
    assert enough.status().n_charges == 1


def test_rho_claims_match_the_mechanisms(tmp_path):
    X, y = _data(n=200, d=3)
    eps = 0.8
    lr = LogisticRegression(epsilon=eps, random_state=0).fit(X, y)
    assert lr.rho_spent_ == eps**2 / 2
    km = KMeans(2, epsilon=eps, composition="linear", n_iter=4, bounds=(-1, 1), random_state=0).fit(X)
    assert km.rho_spent_ == pytest.approx(4 * (eps / 4) ** 2 / 2)
    kz = KMeans(2, epsilon=eps, delta=1e-5, n_iter=4, bounds=(-1, 1), random_state=0).fit(X)
    assert kz.rho_spent_ == pytest.approx(4 * kz.epsilon_per_iter_**2 / 2)
    fa = FactorAnalysis(1, epsilon=eps, delta=1e-5, max_iter=5000, random_state=0).fit(X)
    sens = math.sqrt(2.0) / X.shape[0]
    assert fa.rho_spent_ == pytest.approx(sens**2 / (2 * fa.noise_sigma_**2), rel=1e-9)
    gm = GaussianMixture(2, epsilon=eps, delta=1e-4, n_iter=3, random_state=0).fit(X)
    assert gm.rho_spent_ == gm.budget_.rho
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gb = GaussianBayesClassifier(epsilon=eps, bounds=(-1, 1), random_state=0).fit(X, y)
    assert gb.rho_spent_ == pytest.approx(sum((eps * s) ** 2 for s in (0.1, 0.3, 0.6)) / 2)


def test_zcdp_budget_is_charged_the_fits_rho(kind, tmp_path):
    X, _ = _data()
    budget = _budget(kind, tmp_path, 2.0, 1e-4, rule="zcdp")
    gm = GaussianMixture(2, epsilon=1.0, delta=1e-4, n_iter=3, random_state=0, accountant=budget).fit(X)
    assert budget.status().spent_rho == pytest.approx(gm.rho_spent_, rel=1e-12)
    # a second fit of the same cost still fits under zCDP composition, where linear would not
    GaussianMixture(2, epsilon=1.0, delta=1e-4, n_iter=3, random_state=1, accountant=budget).fit(X)
    assert budget.status().spent_rho == pytest.approx(2 * gm.rho_spent_, rel=1e-12)
    big = GaussianMixture(2, epsilon=10.0, delta=1e-4, n_iter=3, random_state=0, accountant=budget)
    with pytest.raises(BudgetExceeded, match="rho"):
        big.fit(X)


def test_a_non_private_fit_never_fits_a_budget(kind, tmp_path):
    X, y = _data()
    budget = _budget(kind, tmp_path, 1e6, 0.5)
    with pytest.raises(BudgetExceeded, match="non-private"):
        LogisticRegression(epsilon=INF, accountant=budget).fit(Untouchable(), y)
    with pytest.raises(BudgetExceeded, match="non-private"):
        LargeMarginGaussianClassifier(
            epsilon=1.0, n_components=2, component_labels="nonprivate", accountant=budget
        ).fit(Untouchable(), y)
    assert budget.history() == []
    LogisticRegression(epsilon=INF).fit(X, y)  # fine without a budget


@pytest.mark.parametrize("learner", sorted(LEARNERS))
def test_a_fit_whose_charge_cannot_be_committed_is_not_released(kind, tmp_path, monkeypatch, learner):
    """The budget's commit fails (a full disk, a ledger that refuses): the reservation is not spent, so the fit
    must not be released either -- every learner left its estimator fitted (a review) and leaves it unfitted now
    (smcdp.dp.budget.charged_fit)."""
    X, y = _data()
    budget = _budget(kind, tmp_path, 5.0, 0.01)
    make, supervised = LEARNERS[learner]
    est = make(0, budget)

    def refuse(key):
        raise OSError("the ledger's disk is full")

    monkeypatch.setattr(budget, "commit", refuse)
    with pytest.raises(OSError, match="disk is full"):
        _fit(est, supervised, X, y)
    with pytest.raises(NotFittedError):
        check_is_fitted(est)
    assert not [a for a in vars(est) if a.endswith("_")]


def test_a_failing_fit_gives_its_reservation_back(kind, tmp_path):
    X, y = _data()
    budget = _budget(kind, tmp_path, 5.0, 0.0)
    X[0] = [3.0, 0.0]  # a row beyond data_norm, which out_of_bounds="raise" refuses (a private fit's solver never stops
    # short any more: docs/dp-learners.md, finding 3)
    est = LogisticRegression(epsilon=1.0, mechanism="output", out_of_bounds="raise", accountant=budget)
    with pytest.raises(InvalidParameter, match="data_norm"):
        est.fit(X, y)
    (entry,) = budget.history()
    assert entry.state == "released" and "InvalidParameter" in entry.reason
    assert budget.status().remaining_epsilon == Decimal(5)


def test_clones_share_the_budget_and_bad_accountants_are_refused(tmp_path):
    X, y = _data()
    budget = BudgetAccountant(2.5)
    est = LogisticRegression(epsilon=1.0, random_state=0, accountant=budget)
    c1, c2, c3 = clone(est), clone(est), clone(est)
    assert c1.accountant is budget
    c1.fit(X, y)
    c2.fit(X, y)
    with pytest.raises(BudgetExceeded):
        c3.fit(X, y)
    assert budget.status().spent_epsilon == Decimal(2)
    with pytest.raises(InvalidParameter, match="accountant"):
        LogisticRegression(accountant="ledger.sqlite").fit(X, y)
