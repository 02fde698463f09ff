"""The PrivacyBudget interface: in-memory BudgetAccountant and the SQLite LedgerBudget."""

from __future__ import annotations

import pytest

from smcdp.dp.budget import BudgetAccountant, BudgetExceeded


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
