"""The PrivacyBudget interface: in-memory BudgetAccountant and the SQLite LedgerBudget."""

from __future__ import annotations

import copy
import threading
from decimal import Decimal

import pytest

from smcdp.dp.budget import BudgetAccountant, BudgetExceeded, PrivacyBudget
from smcdp.dp.ledger import Ledger, LedgerBudget
from smcdp.errors import InvalidMessage, PreconditionFailed


def test_budget_accountant():
    b = BudgetAccountant(1.0, 1e-5)
    for _ in range(10):
        b.spend(0.1)
    with pytest.raises(BudgetExceeded, match="remaining budget is epsilon=0"):
        b.spend(0.1)
    z = BudgetAccountant(1.0, 1e-5, rule="zcdp")
    z.spend(0.2)  # rho 0.02
    z.spend(0.5, 1e-6, rho=0.005)
    rem = z.remaining()["rho"]
    with pytest.raises(BudgetExceeded):
        z.spend(0.1, 1e-6, rho=rem * 1.01)
    z.spend(0.1, 1e-6, rho=rem * 0.99)


# ---------------------------------------------------------------------------
# one interface, two implementations: every test below runs against both
# ---------------------------------------------------------------------------


def _make(kind, tmp_path, epsilon, delta=0.0, rule="linear"):
    if kind == "memory":
        return BudgetAccountant(epsilon, delta, rule=rule, dataset="d")
    ledger = Ledger(tmp_path / "ledger.sqlite")
    ledger.set_budget("d", epsilon, delta, rule=rule)
    return LedgerBudget(ledger, "d")


@pytest.fixture(params=["memory", "ledger"])
def make(request, tmp_path):
    return lambda *a, **k: _make(request.param, tmp_path, *a, **k)


def test_both_are_privacy_budgets(make):
    b = make(1.0, 1e-5)
    assert isinstance(b, PrivacyBudget) and b.dataset == "d"
    assert copy.deepcopy(b) is b and copy.copy(b) is b  # a budget is never duplicated


def test_budget_exceeded_is_resource_exhausted(make):
    b = make(1.0)
    with pytest.raises(BudgetExceeded) as ei:
        b.spend(1.5)
    assert ei.value.code == "RESOURCE_EXHAUSTED"
    assert not isinstance(ei.value, PreconditionFailed)
    assert "remaining budget is epsilon=1" in str(ei.value)
    assert b.history() == []


def test_spend_is_exact_and_check_does_not_record(make):
    b = make(1.0, 1e-5)
    for _ in range(10):
        b.check(0.1)
        b.spend(0.1, note="q")
    st = b.status()
    assert st.spent_epsilon == Decimal(1) and st.n_charges == 10 and st.remaining_epsilon == 0
    with pytest.raises(BudgetExceeded):
        b.check(1e-9)
    assert b.status().n_charges == 10
    with pytest.raises(BudgetExceeded):
        b.spend(0.1, 1e-6)


def test_delta_is_budgeted(make):
    b = make(2.0, 1e-5)
    b.spend(0.5, 6e-6)
    with pytest.raises(BudgetExceeded, match=r"delta=0\.000004"):
        b.spend(0.5, 6e-6)
    assert b.remaining() == {"epsilon": Decimal("1.5"), "delta": Decimal("0.000004")}


def test_reservation_counts_as_spent_until_released(make):
    b = make(1.0)
    r = b.reserve("s1", 0.6, note="session 1")
    assert r.state == "reserved" and r.key == "s1" and r.epsilon == Decimal("0.6")
    st = b.status()
    assert st.reserved_epsilon == Decimal("0.6") and st.spent_epsilon == 0 and st.n_reserved == 1
    assert st.remaining_epsilon == Decimal("0.4")
    with pytest.raises(BudgetExceeded, match="open reservation"):
        b.reserve("s2", 0.5)
    with pytest.raises(BudgetExceeded):
        b.spend(0.5)
    b.spend(0.4)  # exactly what is left next to the reservation
    released = b.release("s1", reason="peer aborted")
    assert released.state == "released" and released.reason == "peer aborted" and released.settled_at
    st = b.status()
    assert st.reserved_epsilon == 0 and st.n_reserved == 0 and st.remaining_epsilon == Decimal("0.6")
    b.reserve("s2", 0.6)
    assert b.commit("s2").state == "charged"
    st = b.status()
    assert st.spent_epsilon == Decimal(1) and st.n_charges == 2 and st.remaining_epsilon == 0
    assert [c.state for c in b.history()] == ["released", "charged", "charged"]
    assert [c.key for c in b.reservations()] == []


def test_reserve_is_idempotent_by_key(make):
    b = make(1.0, 1e-5)
    first = b.reserve("sess", 0.5, 1e-6, note="a")
    again = b.reserve("sess", 0.5, 1e-6, note="retry")
    assert again == first and b.status().n_reserved == 1
    assert b.status().reserved_epsilon == Decimal("0.5")
    with pytest.raises(PreconditionFailed, match="different amount"):
        b.reserve("sess", 0.4, 1e-6)
    with pytest.raises(PreconditionFailed, match="different amount"):
        b.reserve("sess", 0.5, 2e-6)
    b.commit("sess")
    assert b.reserve("sess", 0.5, 1e-6).state == "charged"  # the same session asking again
    assert b.status().spent_epsilon == Decimal("0.5") and b.status().n_charges == 1
    b.reserve("gone", 0.1)
    b.release("gone")
    with pytest.raises(PreconditionFailed, match="released"):
        b.reserve("gone", 0.1)


def test_commit_and_release_are_idempotent_and_refuse_the_wrong_transition(make):
    b = make(1.0)
    b.reserve("a", 0.2)
    b.reserve("b", 0.3)
    c1 = b.commit("a")
    assert b.commit("a") == c1
    r1 = b.release("b", "failed")
    assert b.release("b", "again") == r1  # the first reason stays
    with pytest.raises(PreconditionFailed, match="already charged"):
        b.release("a")
    with pytest.raises(PreconditionFailed, match="already released"):
        b.commit("b")
    with pytest.raises(PreconditionFailed, match="no reservation"):
        b.commit("never")
    with pytest.raises(PreconditionFailed, match="no reservation"):
        b.release("never")
    assert b.reservation("a").state == "charged" and b.reservation("never") is None
    st = b.status()
    assert st.spent_epsilon == Decimal("0.2") and st.reserved_epsilon == 0


def test_validation(make):
    b = make(1.0, 1e-5)
    for bad in (0, -1, float("nan"), "x", True, None):
        with pytest.raises(InvalidMessage):
            b.spend(bad)
    for bad in (1, -1e-6, "nan"):
        with pytest.raises(InvalidMessage):
            b.spend(0.1, bad)
    for key in ("", " k", "a\nb", "k" * 257, 7):  # keys up to 256: a 192-character session id's resume keys
        with pytest.raises(InvalidMessage):
            b.reserve(key, 0.1)
    with pytest.raises(InvalidMessage):
        b.spend(0.1, note="n" * 2001)
    with pytest.raises(BudgetExceeded, match="non-private"):
        b.spend(float("inf"))
    assert b.history() == []


def test_the_longest_session_ids_resume_key_is_a_valid_reservation_key(make):
    """A session id may have 192 characters, and a resume reserves under ``<id>/resume-<n>``: at a 200-character
    limit such a session could not be resumed where a budget is kept (a review)."""
    b = make(1.0, 1e-5)
    key = "s" * 192 + "/resume-999"
    assert b.reserve(key, 0.01).key == key


def test_zcdp_rule_with_reservations(make):
    b = make(1.0, 1e-5, rule="zcdp")
    b.spend(0.2)  # pure: rho 0.02
    with pytest.raises(InvalidMessage, match="rho"):
        b.spend(0.5, 1e-6)
    b.reserve("g", 0.5, 1e-6, rho=0.005)
    st = b.status()
    assert st.spent_rho == pytest.approx(0.02) and st.reserved_rho == pytest.approx(0.005)
    rem = st.remaining_rho
    assert st.reserved_epsilon > 0 and st.remaining_epsilon == pytest.approx((2 * rem) ** 0.5)
    with pytest.raises(BudgetExceeded, match="remaining budget is rho"):
        b.reserve("h", 0.1, 1e-6, rho=rem * 1.01)
    b.release("g")
    b.reserve("h", 0.1, 1e-6, rho=rem * 1.01)  # fits once g is given back
    b.commit("h")
    assert b.status().spent_rho == pytest.approx(0.02 + rem * 1.01)


def test_threads_racing_for_reservations_never_overspend(make):
    b = make(3.0)
    barrier = threading.Barrier(8)
    won = []

    def run(i):
        barrier.wait()
        try:
            b.reserve(f"t{i}", 1.0)
            won.append(i)
        except BudgetExceeded:
            pass

    threads = [threading.Thread(target=run, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 3 and b.status().n_reserved == 3 and b.status().remaining_epsilon == 0
