"""The DP-EM per-iteration budget solver against the paper's formulas."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from smcdp.dp.conversions import zcdp_epsilon_cks
from smcdp.dp.learners.dpem_budget import solve_dpem_budget
from smcdp.errors import InvalidMessage

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
        return n * e * (math.exp(e) - 1) + math.sqrt(2 * n * math.log(1 / b.delta_prime)) * e
    if b.method == "zcdp":
        rho = n_l * e * e / 2 + n_g / (2 * s * s)
        return (
            rho + 2 * math.sqrt(rho * math.log(1 / b.delta))
            if b.conversion == "classic"
            else zcdp_epsilon_cks(rho, b.delta)
        )
    lam = np.linspace(0.05, 400, 200_001)
    alpha_l = np.log((lam + 1) / (2 * lam + 1) * np.exp(lam * e) + lam / (2 * lam + 1) * np.exp(-e * (lam + 1)))
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
                assert b.laplace_scale_means == pytest.approx(1 / b.eps_per_iter) and b.sigma_means is None
                assert (b.n_laplace, b.n_gaussian) == (J * (K + 1), J * K)
            else:
                assert b.sigma_means == b.sigma_covariances and b.laplace_scale_means is None
                assert (b.n_laplace, b.n_gaussian) == (0, J * (2 * K + 1))


@pytest.mark.parametrize("scenario", ["LLG", "GGG"])
@pytest.mark.parametrize("method", METHODS)
def test_dpem_solver_is_monotone(scenario, method):
    eps_grid = [0.2, 0.4, 0.8, 1.6, 3.2]
    per = [solve_dpem_budget(e, 1e-4, 20, 3, scenario, method).eps_per_iter for e in eps_grid]
    assert all(x < y for x, y in itertools.pairwise(per))
    per_j = [solve_dpem_budget(1.0, 1e-4, j, 3, scenario, method).eps_per_iter for j in (5, 10, 20, 40)]
    assert all(x > y for x, y in itertools.pairwise(per_j))
    per_k = [solve_dpem_budget(1.0, 1e-4, 10, k, scenario, method).eps_per_iter for k in (1, 2, 4, 8)]
    assert all(x > y for x, y in itertools.pairwise(per_k))


def test_dpem_refined_compositions_give_more_budget():
    # the paper's point: zCDP and MA allow more per-iteration budget than linear / advanced
    for scenario in ("LLG", "GGG"):
        lin = solve_dpem_budget(1.0, 1e-4, 20, 3, scenario, "linear").eps_per_iter
        z = solve_dpem_budget(1.0, 1e-4, 20, 3, scenario, "zcdp", conversion="classic").eps_per_iter
        ma = solve_dpem_budget(1.0, 1e-4, 20, 3, scenario, "moments", conversion="classic").eps_per_iter
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


@pytest.mark.parametrize("scenario", ["LLG", "GGG"])
@pytest.mark.parametrize("method", METHODS)
def test_dpem_rho_is_the_zcdp_cost_of_the_releases(scenario, method):
    b = solve_dpem_budget(1.0, 1e-4, 20, 3, scenario, method)
    s = math.sqrt(2 * math.log(1.25 / b.delta_per_iter)) / b.eps_per_iter
    assert b.rho == pytest.approx(b.n_laplace * b.eps_per_iter**2 / 2 + b.n_gaussian / (2 * s * s), rel=1e-12)
    if method == "zcdp":
        # the zCDP solver's epsilon is exactly the conversion of that rho
        assert zcdp_epsilon_cks(b.rho, 1e-4) == pytest.approx(b.achieved_epsilon, rel=1e-9)
