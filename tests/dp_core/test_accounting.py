"""Accounting against Google's dp-accounting and against closed forms."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from smcdp.dp.accounting import (
    ApproxDPEvent,
    BudgetAccountant,
    BudgetExceeded,
    GaussianEvent,
    LaplaceEvent,
    PrivacyAccountant,
    PureDPEvent,
    account,
    advanced_composition,
    laplace_rdp,
    rdp_to_epsilon,
    solve_dpem_budget,
    zcdp_delta_cks,
    zcdp_epsilon_cks,
    zcdp_epsilon_classic,
)
from smcdp.dp.mechanisms import gaussian_delta, gaussian_epsilon
from smcdp.errors import InvalidMessage

dpa = pytest.importorskip("dp_accounting")
from dp_accounting import rdp as dpa_rdp


def google_rdp_epsilon(gaussian, laplace, delta) -> float:
    acc = dpa_rdp.RdpAccountant()
    evs = [dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(s), c) for s, c in gaussian]
    evs += [dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(b), c) for b, c in laplace]
    acc.compose(dpa.ComposedDpEvent(evs))
    return acc.get_epsilon(delta)


CASES = [
    ([(0.8, 1)], []),
    ([(1.0, 10)], []),
    ([(2.0, 100)], []),
    ([(5.0, 1000)], []),
    ([(20.0, 10000)], []),
    ([], [(0.5, 1)]),
    ([], [(1.0, 10)]),
    ([], [(3.0, 50)]),
    ([], [(10.0, 500)]),
    ([], [(100.0, 10000)]),
    ([(2.0, 10)], [(3.0, 5)]),
    ([(1.0, 50)], [(20.0, 30)]),
    ([(4.0, 60), (8.0, 20)], [(50.0, 40), (5.0, 2)]),
]


@pytest.mark.parametrize("gaussian,laplace", CASES)
@pytest.mark.parametrize("delta", [1e-3, 1e-5, 1e-8])
def test_rdp_matches_google_dp_accounting(gaussian, laplace, delta):
    ours = account("rdp", delta, gaussian=gaussian, laplace=laplace)["epsilon"]
    theirs = google_rdp_epsilon(gaussian, laplace, delta)
    assert ours <= theirs * 1.01, (ours, theirs)
    assert ours >= theirs * 0.99, (ours, theirs)


def test_laplace_rdp_equals_eq19_over_lambda():
    # DP-EM eq. (19) written with lambda = alpha - 1, evaluated directly
    eps = 0.7
    for lam in [0.25, 1.0, 3.5, 10.0, 40.0]:
        moment = math.log(
            (lam + 1) / (2 * lam + 1) * math.exp(lam * eps)
            + lam / (2 * lam + 1) * math.exp(-eps * (lam + 1))
        )
        assert laplace_rdp(lam + 1, eps) == pytest.approx(moment / lam, rel=1e-12)
    # large orders stay finite and approach eps
    assert laplace_rdp(1e6, 3.0) == pytest.approx(3.0, rel=1e-5)


def test_rdp_classic_conversion_is_eq3():
    # eq. (3): delta = min_lambda exp(alpha(lambda) - lambda eps)  <=>  eps = min (alpha(lambda) + log 1/delta)/lambda
    s, delta = 3.0, 1e-5
    lam = np.linspace(0.01, 200, 400_001)
    brute = np.min((lam * (lam + 1) / (2 * s * s) + math.log(1 / delta)) / lam)
    ours, _ = rdp_to_epsilon(lambda a: a / (2 * s * s), delta, conversion="classic")
    assert ours == pytest.approx(brute, rel=1e-6)
    assert ours <= brute + 1e-12


def test_zcdp_classic_conversion_is_the_formula():
    for rho, delta in [(0.01, 1e-5), (0.5, 1e-6), (3.0, 1e-3)]:
        assert zcdp_epsilon_classic(rho, delta) == rho + 2 * math.sqrt(
            rho * math.log(1 / delta)
        )


@pytest.mark.parametrize(
    "rho,delta", [(0.001, 1e-5), (0.05, 1e-6), (0.5, 1e-5), (2.0, 1e-3), (10.0, 1e-9)]
)
def test_zcdp_cks_conversion_is_exact_and_tighter(rho, delta):
    eps = zcdp_epsilon_cks(rho, delta)
    # exact: the CKS formula minimised by brute force over a fine grid of real orders
    alphas = 1 + np.logspace(-4, 4, 400_001)
    brute = np.min(
        alphas * rho
        + np.log1p(-1 / alphas)
        - (math.log(delta) + np.log(alphas)) / (alphas - 1)
    )
    assert eps == pytest.approx(max(brute, 0.0), rel=1e-6)
    # same formula as dp-accounting's conversion on the same orders
    theirs, _ = dpa_rdp.compute_epsilon(alphas[::100], alphas[::100] * rho, delta)
    assert eps <= theirs * (1 + 1e-9)
    assert eps == pytest.approx(theirs, rel=1e-3)
    assert eps <= zcdp_epsilon_classic(rho, delta)
    # inverse direction
    assert zcdp_delta_cks(rho, eps) == pytest.approx(delta, rel=1e-6)


def test_zcdp_conversions_upper_bound_the_exact_gaussian():
    for s in [0.7, 1.0, 3.0, 10.0]:
        rho = 1 / (2 * s * s)
        for delta in [1e-3, 1e-6]:
            exact = gaussian_epsilon(delta, s)
            assert zcdp_epsilon_cks(rho, delta) >= exact
            assert zcdp_epsilon_classic(rho, delta) >= zcdp_epsilon_cks(rho, delta)


def test_zcdp_accountant_rho_and_epsilon():
    out = account("zcdp", 1e-5, gaussian=[(2.0, 10)], laplace=[(4.0, 8)])
    rho = 10 / (2 * 4.0) + 8 * (0.25**2) / 2
    assert out["rho"] == pytest.approx(rho, rel=1e-15)
    assert out["epsilon"] == pytest.approx(zcdp_epsilon_cks(rho, 1e-5))
    assert out["epsilon_classic"] == pytest.approx(
        rho + 2 * math.sqrt(rho * math.log(1e5))
    )
    out2 = account(
        "zcdp", 1e-5, gaussian=[(2.0, 10)], laplace=[(4.0, 8)], conversion="classic"
    )
    assert out2["epsilon"] == pytest.approx(out["epsilon_classic"])


def test_advanced_composition_is_dwork_roth_3_20():
    eps, k, dp = 0.1, 200, 1e-6
    expected = math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * (math.exp(eps) - 1)
    assert advanced_composition([eps] * k, dp) == pytest.approx(expected, rel=1e-12)
    out = account("advanced", dp, laplace=[(1 / eps, k)])
    assert out["epsilon"] == pytest.approx(expected, rel=1e-12)


def test_advanced_with_gaussians_is_valid_and_optimised():
    s, k, delta = 5.0, 50, 1e-5
    eps = account("advanced", delta, gaussian=[(s, k)])["epsilon"]
    # any fixed split gives a valid bound; the optimised one is no worse than a few of them
    for frac in (0.1, 0.5, 0.9):
        ei = gaussian_epsilon(delta * frac / k, s)
        assert eps <= advanced_composition([ei] * k, delta * (1 - frac)) + 1e-9


def test_linear_composition():
    out = account("linear", 1e-5, laplace=[(2.0, 3), (4.0, 2)])
    assert out["epsilon"] == pytest.approx(3 * 0.5 + 2 * 0.25)
    assert out["delta"] == 0.0
    out = account("linear", 1e-5, gaussian=[(3.0, 4)])
    e_i = out["epsilon"] / 4
    assert gaussian_delta(e_i, 3.0) == pytest.approx(1e-5 / 4, rel=1e-6)
    acc = (
        PrivacyAccountant("linear")
        .compose(ApproxDPEvent(0.3, 1e-6), 3)
        .compose(PureDPEvent(0.1))
    )
    assert acc.get_epsilon(3e-6) == pytest.approx(1.0)
    with pytest.raises(InvalidMessage):
        acc.get_epsilon(1e-6)


def test_accountant_validation():
    with pytest.raises(InvalidMessage):
        PrivacyAccountant("basic")
    with pytest.raises(InvalidMessage):
        PrivacyAccountant("rdp").compose(ApproxDPEvent(1.0, 1e-5))
    with pytest.raises(InvalidMessage):
        PrivacyAccountant("rdp").compose(GaussianEvent(1.0), 0)
    with pytest.raises(InvalidMessage):
        LaplaceEvent(-1.0)
    with pytest.raises(InvalidMessage):
        account("rdp", 1e-5)
    with pytest.raises(InvalidMessage):
        account("rdp", 1.5, gaussian=[(1.0, 1)])


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
# DP-EM budget solver
# ---------------------------------------------------------------------------

METHODS = ["linear", "advanced", "zcdp", "moments"]


def _independent_total(b) -> float:
    """Recompute the total epsilon of a DPEMBudget from the paper's formulas."""
    J, K, e, d = b.iterations, b.n_components, b.eps_per_iter, b.delta_per_iter
    n = J * (2 * K + 1)
    s = math.sqrt(2 * math.log(1.25 / d)) / e
    n_l = J * (K + 1) if b.scenario == "LLG" else 0
    n_g = n - n_l
    if b.method == "linear":
        return n * e
    if b.method == "advanced":
        return (
            n * e * (math.exp(e) - 1)
            + math.sqrt(2 * n * math.log(1 / b.delta_prime)) * e
        )
    if b.method == "zcdp":
        rho = n_l * e * e / 2 + n_g / (2 * s * s)
        return (
            rho + 2 * math.sqrt(rho * math.log(1 / b.delta))
            if b.conversion == "classic"
            else zcdp_epsilon_cks(rho, b.delta)
        )
    lam = np.linspace(0.05, 400, 200_001)
    alpha_l = np.log(
        (lam + 1) / (2 * lam + 1) * np.exp(lam * e)
        + lam / (2 * lam + 1) * np.exp(-e * (lam + 1))
    )
    alpha_g = (lam * lam + lam) / (2 * s * s)
    total = n_l * alpha_l + n_g * alpha_g
    assert b.conversion == "classic"
    return float(np.min((total + math.log(1 / b.delta)) / lam))


@pytest.mark.parametrize("scenario", ["LLG", "GGG"])
@pytest.mark.parametrize("method", METHODS)
def test_dpem_solver_is_exact(scenario, method):
    for eps, delta, J, K in [
        (1.0, 1e-4, 20, 3),
        (0.5, 1e-5, 10, 5),
        (3.0, 1e-4, 50, 2),
    ]:
        conversions = ["classic", "cks"] if method in ("zcdp", "moments") else ["cks"]
        for conv in conversions:
            b = solve_dpem_budget(eps, delta, J, K, scenario, method, conversion=conv)
            assert b.achieved_epsilon == pytest.approx(eps, rel=1e-9)
            assert b.achieved_epsilon <= eps * (1 + 1e-12)
            if method != "moments" or conv == "classic":
                assert _independent_total(b) == pytest.approx(eps, rel=1e-6)
            if method in ("linear", "advanced"):
                assert b.achieved_delta == pytest.approx(delta, rel=1e-12)
            assert b.sigma_covariances == pytest.approx(
                math.sqrt(2 * math.log(1.25 / b.delta_per_iter)) / b.eps_per_iter
            )
            if scenario == "LLG":
                assert (
                    b.laplace_scale_means == pytest.approx(1 / b.eps_per_iter)
                    and b.sigma_means is None
                )
                assert (b.n_laplace, b.n_gaussian) == (J * (K + 1), J * K)
            else:
                assert (
                    b.sigma_means == b.sigma_covariances
                    and b.laplace_scale_means is None
                )
                assert (b.n_laplace, b.n_gaussian) == (0, J * (2 * K + 1))


@pytest.mark.parametrize("scenario", ["LLG", "GGG"])
@pytest.mark.parametrize("method", METHODS)
def test_dpem_solver_is_monotone(scenario, method):
    eps_grid = [0.2, 0.4, 0.8, 1.6, 3.2]
    per = [
        solve_dpem_budget(e, 1e-4, 20, 3, scenario, method).eps_per_iter
        for e in eps_grid
    ]
    assert all(x < y for x, y in itertools.pairwise(per))
    per_j = [
        solve_dpem_budget(1.0, 1e-4, j, 3, scenario, method).eps_per_iter
        for j in (5, 10, 20, 40)
    ]
    assert all(x > y for x, y in itertools.pairwise(per_j))
    per_k = [
        solve_dpem_budget(1.0, 1e-4, 10, k, scenario, method).eps_per_iter
        for k in (1, 2, 4, 8)
    ]
    assert all(x > y for x, y in itertools.pairwise(per_k))


def test_dpem_refined_compositions_give_more_budget():
    # the paper's point: zCDP and MA allow more per-iteration budget than linear / advanced
    for scenario in ("LLG", "GGG"):
        lin = solve_dpem_budget(1.0, 1e-4, 20, 3, scenario, "linear").eps_per_iter
        z = solve_dpem_budget(
            1.0, 1e-4, 20, 3, scenario, "zcdp", conversion="classic"
        ).eps_per_iter
        ma = solve_dpem_budget(
            1.0, 1e-4, 20, 3, scenario, "moments", conversion="classic"
        ).eps_per_iter
        assert z > lin and ma > lin


def test_dpem_validation():
    with pytest.raises(InvalidMessage):
        solve_dpem_budget(1.0, 1e-4, 10, 3, "LGG", "zcdp")
    with pytest.raises(InvalidMessage):
        solve_dpem_budget(1.0, 1e-4, 0, 3, "LLG", "zcdp")
    with pytest.raises(InvalidMessage):
        solve_dpem_budget(1.0, 0.0, 10, 3, "LLG", "zcdp")
    with pytest.raises(InvalidMessage):
        solve_dpem_budget(1.0, 1e-4, 10, 3, "LLG", "exotic")
    with pytest.raises(InvalidMessage, match="epsilon_i < 1"):
        solve_dpem_budget(100.0, 1e-4, 1, 1, "LLG", "linear")
