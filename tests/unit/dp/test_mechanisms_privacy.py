"""Empirical privacy checks on neighbouring inputs.

For each mechanism we draw n releases at x and at a neighbour x' (the maximal
allowed change), and for a family of events E check

    P[M(x) in E] <= e^eps P[M(x') in E] + delta     (and with x, x' swapped)

using one-sided Clopper-Pearson bounds (Bonferroni over events): a violation is
reported only when the *lower* confidence bound of the left side exceeds the
*upper* bound of the right side.  The same procedure is then shown to flag a
mechanism with half the claimed noise.  Releases use an explicitly seeded
generator on the production code path (same samplers, same grid).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from smcdp.dp.mechanisms import GaussianMechanism, LaplaceMechanism, VectorMechanism

N = 200_000
ALPHA = 1e-6  # overall false-alarm probability per check


def _cp_lower(k: int, n: int, a: float) -> float:
    return 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))


def _cp_upper(k: int, n: int, a: float) -> float:
    return 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))


def worst_violation(
    a: np.ndarray,
    b: np.ndarray,
    events: Sequence[Callable[[np.ndarray], np.ndarray]],
    eps: float,
    delta: float,
) -> float:
    """max over events and both directions of  lower(P_a(E)) - e^eps upper(P_b(E)) - delta.

    Positive means the claimed (eps, delta) is violated with confidence 1 - ALPHA.
    """
    n_a, n_b = len(a), len(b)
    level = ALPHA / (2 * len(events))
    worst = -math.inf
    for ev in events:
        ka, kb = int(np.sum(ev(a))), int(np.sum(ev(b)))
        worst = max(
            worst,
            _cp_lower(ka, n_a, level) - math.exp(eps) * _cp_upper(kb, n_b, level) - delta,
        )
        worst = max(
            worst,
            _cp_lower(kb, n_b, level) - math.exp(eps) * _cp_upper(ka, n_a, level) - delta,
        )
    return worst


def _half_lines(cs: Sequence[float]) -> list[Callable[[np.ndarray], np.ndarray]]:
    evs: list[Callable[[np.ndarray], np.ndarray]] = []
    for c in cs:
        evs.append(lambda y, c=c: y <= c)
        evs.append(lambda y, c=c: y > c)
    return evs


def _laplace_releases(eps: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    m = LaplaceMechanism(eps, 1.0, random_state=seed)
    return m.randomise_many(0.0, N), m.randomise_many(1.0, N)


def test_laplace_respects_epsilon_and_is_tight():
    eps = 1.0
    a, b = _laplace_releases(eps, 1)
    events = _half_lines(np.linspace(-4, 5, 19))
    assert worst_violation(a, b, events, eps, 0.0) <= 0
    # tightness: on {y <= 0} the loss is exactly eps, so the estimate is close to e^eps
    ratio = np.mean(a <= 0) / np.mean(b <= 0)
    assert math.exp(0.95 * eps) < ratio < math.exp(1.05 * eps)


def test_check_catches_laplace_with_half_the_noise():
    eps = 1.0
    a, b = _laplace_releases(2 * eps, 2)  # scale 1/(2 eps): half the noise the claim needs
    events = _half_lines(np.linspace(-4, 5, 19))
    assert worst_violation(a, b, events, eps, 0.0) > 0


def test_laplace_grid_release_of_vectors_respects_l1_sensitivity():
    # d = 3, neighbours differ by L1 = 1 spread over coordinates
    eps = 0.8
    m = LaplaceMechanism(eps, 1.0, random_state=3)
    x = np.zeros(3)
    x2 = np.array([0.5, -0.3, 0.2])
    a, b = m.randomise_many(x, N), m.randomise_many(x2, N)
    # the loss is maximal on the orthant-type event that moves every coordinate the worst way
    events = [
        lambda y: (y[:, 0] <= 0) & (y[:, 1] >= 0) & (y[:, 2] <= 0),
        lambda y: (y[:, 0] >= 0.5) & (y[:, 1] <= -0.3) & (y[:, 2] >= 0.2),
        lambda y: y[:, 0] <= 0,
        lambda y: y.sum(axis=1) <= 0.4,
    ]
    assert worst_violation(a, b, events, eps, 0.0) <= 0


def test_gaussian_respects_epsilon_delta():
    eps, delta = 0.9, 1e-3
    for analytic in (False, True):
        m = GaussianMechanism(eps, delta, 1.0, analytic=analytic, random_state=4)
        a, b = m.randomise_many(0.0, N), m.randomise_many(1.0, N)
        events = _half_lines(np.linspace(-3 * m.sigma, 4 * m.sigma, 29))
        assert worst_violation(a, b, events, eps, delta) <= 0


def test_check_catches_gaussian_with_half_the_noise():
    eps, delta = 1.0, 1e-3
    good = GaussianMechanism(eps, delta, 1.0, analytic=True, random_state=5)
    half = GaussianMechanism.from_sigma(good.sigma / 2, 1.0, random_state=5)
    a, b = half.randomise_many(0.0, N), half.randomise_many(1.0, N)
    events = _half_lines(np.linspace(-3 * good.sigma, 4 * good.sigma, 29))
    assert worst_violation(a, b, events, eps, delta) > 0


def _vector_events() -> list[Callable[[np.ndarray], np.ndarray]]:
    evs: list[Callable[[np.ndarray], np.ndarray]] = []
    for c in (-6.0, -4.0, -2.0, 0.0, 1.0, 3.0, 5.0, 7.0):
        evs.append(lambda y, c=c: y[:, 0] <= c)
        evs.append(lambda y, c=c: y[:, 0] > c)
    for r in (2.0, 4.0, 6.0):
        # narrow cones pointing away from / towards the neighbour: loss -> eps there
        evs.append(lambda y, r=r: (y[:, 0] <= -r) & (np.abs(y[:, 1]) <= 0.2 * np.abs(y[:, 0])))
        evs.append(lambda y, r=r: (y[:, 0] >= 1 + r) & (np.abs(y[:, 1]) <= 0.2 * np.abs(y[:, 0] - 1)))
    return evs


def test_vector_mechanism_respects_epsilon():
    eps = 1.0
    m = VectorMechanism(eps, 1.0, random_state=6)
    x, x2 = np.zeros(2), np.array([1.0, 0.0])
    a, b = m.randomise_many(x, N), m.randomise_many(x2, N)
    assert worst_violation(a, b, _vector_events(), eps, 0.0) <= 0
    # and the loss is nearly attained far along the axis
    far = (a[:, 0] <= -4) & (np.abs(a[:, 1]) <= 0.2 * np.abs(a[:, 0]))
    far_b = (b[:, 0] <= -4) & (np.abs(b[:, 1]) <= 0.2 * np.abs(b[:, 0]))
    assert np.mean(far) / np.mean(far_b) > math.exp(0.85 * eps)


def test_check_catches_vector_mechanism_with_half_the_noise():
    eps = 1.0
    m = VectorMechanism(2 * eps, 1.0, random_state=7)
    x, x2 = np.zeros(2), np.array([1.0, 0.0])
    a, b = m.randomise_many(x, N), m.randomise_many(x2, N)
    assert worst_violation(a, b, _vector_events(), eps, 0.0) > 0
