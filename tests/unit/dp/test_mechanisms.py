"""Mechanism API, calibration, grid behaviour and validation."""

from __future__ import annotations

import math

import numpy as np
import pytest

from smcdp.dp.conversions import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_delta,
    gaussian_epsilon,
)
from smcdp.dp.mechanisms import GaussianMechanism, LaplaceMechanism, VectorMechanism
from smcdp.dp.samplers import SecureSource, SeededSource, resolve_rng
from smcdp.errors import InvalidMessage


def test_resolve_rng():
    assert isinstance(resolve_rng(None), SecureSource)
    assert isinstance(resolve_rng(3), SeededSource)
    g = np.random.default_rng(1)
    assert resolve_rng(g).generator is g
    s = SecureSource()
    assert resolve_rng(s) is s
    for bad in ("seed", 1.5, np.random.RandomState(0), True, -1):
        with pytest.raises(InvalidMessage):
            resolve_rng(bad)


def test_default_is_secure_and_seeded_is_reproducible():
    assert LaplaceMechanism(1.0, 1.0).secure
    assert not LaplaceMechanism(1.0, 1.0, random_state=1).secure
    a = LaplaceMechanism(1.0, 1.0, random_state=4).randomise(np.arange(5.0))
    b = LaplaceMechanism(1.0, 1.0, random_state=4).randomise(np.arange(5.0))
    assert np.array_equal(a, b)
    for m in (GaussianMechanism(0.5, 1e-5, 1.0), VectorMechanism(1.0, 1.0)):
        assert m.secure
        out = m.randomise(np.zeros((3, 2)))
        assert out.shape == (3, 2) and out.dtype == np.float64


def test_privacy_reports():
    lap = LaplaceMechanism(0.5, 2.0)
    assert lap.scale == 4.0 and lap.delta == 0.0 and lap.rho == pytest.approx(0.125)
    g = GaussianMechanism(0.5, 1e-5, 2.0)
    assert g.sigma == pytest.approx(math.sqrt(2 * math.log(1.25e5)) * 2.0 / 0.5)
    assert g.rho == pytest.approx(4.0 / (2 * g.sigma**2))
    assert g.privacy() == {"epsilon": 0.5, "delta": 1e-5, "rho": g.rho}
    v = VectorMechanism(2.0, 1.0)
    assert v.epsilon == 2.0 and v.delta == 0.0 and v.rho == 2.0


def test_classic_gaussian_refuses_large_epsilon():
    with pytest.raises(InvalidMessage, match="analytic"):
        GaussianMechanism(1.5, 1e-5, 1.0)
    g = GaussianMechanism(1.5, 1e-5, 1.0, analytic=True)
    assert g.sigma > 0


def test_analytic_gaussian_is_tight_and_smaller():
    for eps, delta in [(0.1, 1e-6), (0.5, 1e-5), (1.0, 1e-5), (4.0, 1e-3)]:
        s = analytic_gaussian_sigma(eps, delta)
        assert gaussian_delta(eps, s) <= delta
        assert gaussian_delta(eps, s * (1 - 1e-9)) > delta * (1 - 1e-6)
        if eps < 1:
            assert s < classic_gaussian_sigma(eps, delta)


def test_from_sigma():
    g = GaussianMechanism.from_sigma(3.0, 1.5, delta=1e-5)
    assert g.rho == pytest.approx(1.5**2 / (2 * 9.0))
    assert gaussian_delta(g.epsilon, 2.0) <= 1e-5
    assert g.epsilon == pytest.approx(gaussian_epsilon(1e-5, 2.0))
    assert math.isinf(GaussianMechanism.from_sigma(3.0, 1.0).epsilon)
    # the classic calibration is conservative: its exact epsilon is below the target
    c = GaussianMechanism(0.5, 1e-5, 1.0)
    assert gaussian_epsilon(1e-5, c.sigma) < 0.5


@pytest.mark.parametrize(
    "make",
    [
        lambda: LaplaceMechanism(0.7, 3.0, random_state=1),
        lambda: GaussianMechanism(0.7, 1e-6, 3.0, random_state=1),
        lambda: VectorMechanism(0.7, 3.0, random_state=1),
    ],
)
def test_outputs_live_on_the_grid_whatever_the_input(make):
    """Mironov: the set of possible outputs must not depend on the input's low bits."""
    m = make()
    e = m.grid_exponent((4,))
    g = 2.0**e
    for x in (
        np.full(4, 0.1),
        np.full(4, np.nextafter(0.1, 1)),
        np.array([1e6, -3.3, 7.0, 1e-300]),
    ):
        out = m.randomise(x)
        k = out / g
        assert np.array_equal(k, np.rint(k)), "release must be a multiple of the grid width"
    # and the grid is fine relative to the noise and sensitivity
    assert g <= 3.0 * 2.0**-16


def test_grid_slack_is_small():
    lap = LaplaceMechanism(1.0, 1.0)
    for shape in [(1,), (100,), (5050,)]:
        assert lap.grid_scale(shape) >= lap.scale
        assert lap.grid_scale(shape) <= lap.scale * (1 + 2.0**-15)
    g = GaussianMechanism(0.5, 1e-5, 1.0)
    for shape in [(1,), (5050,)]:
        assert g.sigma <= g.grid_sigma(shape) <= g.sigma * (1 + 2.0**-15)


def test_noise_statistics():
    lap = LaplaceMechanism(2.0, 1.0, random_state=11)
    s = lap.sample(200_000)
    assert abs(np.mean(np.abs(s)) - 0.5) < 0.01
    g = GaussianMechanism.from_sigma(2.5, 1.0, random_state=12)
    s = g.sample(200_000)
    assert abs(np.std(s) - 2.5) < 0.02 and abs(np.mean(s)) < 0.03
    v = VectorMechanism(2.0, 1.0, random_state=13)
    s = v.sample_many(50_000, (2, 3))
    norms = np.sqrt((s**2).sum(axis=(1, 2)))
    assert s.shape == (50_000, 2, 3)
    assert abs(norms.mean() - 6 * 0.5) < 0.03  # Gamma(6, 1/2) has mean 3
    assert abs(norms.var() - 6 * 0.25) < 0.06
    # direction uniform: first coordinate's sign is balanced and mean ~ 0
    assert abs(np.mean(s[:, 0, 0])) < 0.03


def test_randomise_preserves_large_values_and_shapes():
    m = LaplaceMechanism(1.0, 1.0, random_state=2)
    out = m.randomise([1e20, -2.5])
    assert out[0] == pytest.approx(1e20, rel=1e-12)
    assert m.randomise(3.0).shape == ()
    assert m.randomise([]).shape == (0,)
    assert m.randomise_many(np.zeros(3), 4).shape == (4, 3)


@pytest.mark.parametrize(
    "call",
    [
        lambda: LaplaceMechanism(0, 1.0),
        lambda: LaplaceMechanism(1.0, -1),
        lambda: LaplaceMechanism(float("nan"), 1.0),
        lambda: LaplaceMechanism(True, 1.0),
        lambda: GaussianMechanism(0.5, 0.0, 1.0),
        lambda: GaussianMechanism(0.5, 1.0, 1.0),
        lambda: GaussianMechanism.from_sigma(-1.0, 1.0),
        lambda: VectorMechanism(1.0, float("inf")),
        lambda: LaplaceMechanism(1.0, 1.0).randomise([1.0, float("nan")]),
        lambda: LaplaceMechanism(1.0, 1.0).randomise("abc"),
        lambda: LaplaceMechanism(1.0, 1.0).randomise([1e308]),
        lambda: LaplaceMechanism(1.0, 1.0).sample((-1,)),
        lambda: VectorMechanism(1.0, 1.0).sample_many(-2, 3),
    ],
)
def test_validation(call):
    with pytest.raises(InvalidMessage):
        call()


def test_classic_gaussian_is_certified_by_exact_zcdp():
    for eps, delta in [(0.05, 1e-9), (0.5, 1e-5), (0.9, 1e-3), (0.999, 0.3)]:
        g = GaussianMechanism(eps, delta, 1.0)
        assert g.rigorous_epsilon <= eps
    a = GaussianMechanism(0.5, 1e-5, 1.0, analytic=True)
    assert a.rigorous_epsilon > a.epsilon  # the analytic claim is not the zCDP one
    assert math.isinf(GaussianMechanism.from_sigma(2.0, 1.0).rigorous_epsilon)


def test_a_dithered_vector_draw_stays_in_its_lattice_cell_and_is_uniform_within_it():
    from scipy import stats

    mech = VectorMechanism(1.0, 2.0, random_state=7)
    e = mech.grid_exponent(3)
    lattice = VectorMechanism(1.0, 2.0, random_state=7).sample_many(1, 3).reshape(-1)
    first = mech.sample_dithered(3)
    assert np.array_equal(np.rint(np.ldexp(first, -e)), np.ldexp(lattice, -e))  # the same cell
    frac = np.concatenate(
        [np.ldexp(x, -e) - np.rint(np.ldexp(x, -e)) for x in (mech.sample_dithered(3) for _ in range(2000))]
    )
    assert stats.kstest(frac, stats.uniform(loc=-0.5, scale=1.0).cdf).pvalue > 1e-3


def _log_cell(k: np.ndarray, s: float) -> np.ndarray:
    """log P(z = k) of a Laplace(0, s) variable rounded to the nearest integer."""
    k = np.abs(k)
    inner = np.where(k == 0, -math.inf, -(k - 0.5) / s)
    return np.where(k == 0, np.log(-np.expm1(-0.5 / s)), inner + np.log(-np.expm1(-1.0 / s)) - math.log(2))


def _worst_log_ratio(s: float, width: float) -> float:
    """max over x and |shift| <= width of log f(x) − log f(x + shift), f the dithered density (P(cell)/1)."""
    x = np.linspace(-30 * s, 30 * s, 200_001)
    return max(
        float(np.max(_log_cell(np.rint(x), s) - _log_cell(np.rint(x + shift), s)))
        for shift in np.linspace(-width, width, 41)
    )


def test_a_dithered_vector_draws_density_ratio_is_within_e_to_the_epsilon_for_every_shift_up_to_the_sensitivity():
    """What objective perturbation's proof needs of b (VectorMechanism.sample_dithered): a density with
    f(x)/f(x') <= e^ε whenever |x − x'| <= Δ.  In one dimension the lattice draw is a Laplace variable of the
    mechanism's lattice scale s rounded to the nearest integer, so the dithered density is P(cell)/width, computed
    here exactly for every shift within Δ (and with the snapping's inflation taken out of s, it exceeds e^ε)."""
    for eps, sens in ((1.0, 2.0), (0.3, 2.0), (4.0, 0.5)):
        e, s = VectorMechanism(eps, sens)._lattice_scale(1)
        width = sens / 2.0**e  # Δ in lattice steps
        assert _worst_log_ratio(s, width) <= eps * (1 + 1e-9), (eps, sens)
        assert _worst_log_ratio(width / eps, width) > eps  # the textbook scale, without the cells' inflation
