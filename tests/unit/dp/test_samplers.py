"""Exact samplers: distributions match the exact pmfs; sources behave."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

import smcdp.dp.samplers as samplers
from smcdp.dp.samplers import (
    SecureSource,
    SeededSource,
    bernoulli_exp,
    ceil_sqrt,
    discrete_gaussian,
    discrete_laplace,
)
from smcdp.dp.validation import InvalidParameter
from smcdp.errors import InvalidMessage


def _chi2_pvalue(samples: np.ndarray, pmf, support: range) -> float:
    samples = np.asarray(samples, dtype=np.int64)
    obs = np.array([np.sum(samples == k) for k in support] + [0], dtype=float)
    probs = np.array([pmf(k) for k in support])
    obs[-1] = samples.size - obs[:-1].sum()
    exp = np.append(probs, max(1.0 - probs.sum(), 0.0)) * samples.size
    keep = exp > 5
    # merge small cells into the last one
    obs2 = np.append(obs[keep], obs[~keep].sum())
    exp2 = np.append(exp[keep], exp[~keep].sum())
    if exp2[-1] == 0:
        obs2, exp2 = obs2[:-1], exp2[:-1]
    return float(stats.chisquare(obs2, exp2 * obs2.sum() / exp2.sum()).pvalue)


@pytest.mark.parametrize("t", [1, 3, 7])
def test_discrete_laplace_matches_pmf(t):
    src = SeededSource(np.random.default_rng(100 + t))
    y = discrete_laplace(t, 100_000, src)
    r = math.exp(-1.0 / t)
    pmf = lambda k: (1 - r) / (1 + r) * r ** abs(k)
    assert _chi2_pvalue(y, pmf, range(-12 * t, 12 * t + 1)) > 1e-4


@pytest.mark.parametrize("t,q", [(1, 1), (3, 2), (4, 5)])
def test_discrete_gaussian_matches_pmf(t, q):
    src = SeededSource(np.random.default_rng(200 + t))
    y = discrete_gaussian(t, q, 100_000, src)
    s2 = t * q
    z = sum(math.exp(-k * k / (2 * s2)) for k in range(-200, 201))
    pmf = lambda k: math.exp(-k * k / (2 * s2)) / z
    assert _chi2_pvalue(y, pmf, range(-8 * ceil_sqrt(s2), 8 * ceil_sqrt(s2) + 1)) > 1e-4


def test_wrong_pmf_is_rejected_by_the_same_check():
    # the chi-square check above has power: a discrete Laplace with t=3 is not t=4
    src = SeededSource(np.random.default_rng(7))
    y = discrete_laplace(3, 100_000, src)
    r = math.exp(-1.0 / 4)
    pmf = lambda k: (1 - r) / (1 + r) * r ** abs(k)
    assert _chi2_pvalue(y, pmf, range(-40, 41)) < 1e-6


def test_bernoulli_exp_probability():
    src = SeededSource(np.random.default_rng(3))
    num = np.full(200_000, 3, dtype=np.int64)
    den = np.full(200_000, 7, dtype=np.int64)
    p = bernoulli_exp(num, den, src).mean()
    assert abs(p - math.exp(-3 / 7)) < 4 * math.sqrt(p * (1 - p) / 200_000)


def test_big_integer_path_has_right_scale():
    # t beyond 2**60 forces Python integers; same algorithm, same distribution family
    src = SeededSource(np.random.default_rng(5))
    t = (1 << 61) + 12345
    y = discrete_laplace(t, 3000, src)
    assert y.dtype == object
    m = float(np.mean([abs(int(v)) for v in y])) / t
    assert abs(m - 1.0) < 0.1  # E|Y| ~ t for large t


def test_big_integer_gaussian_path():
    src = SeededSource(np.random.default_rng(6))
    t = (1 << 30) + 1
    q = (1 << 30) - 3
    y = discrete_gaussian(t, q, 3000, src)
    sd = float(np.std(np.array([float(v) for v in y]))) / math.sqrt(t * q)
    assert abs(sd - 1.0) < 0.05


def test_secure_source_uniform_below_is_in_range_and_uniform():
    src = SecureSource()
    b = np.array([1, 2, 3, 10, (1 << 62) - 1], dtype=np.int64)
    for _ in range(50):
        u = src.uniform_below(b)
        assert np.all(u >= 0) and np.all(u < b)
    u = src.uniform_below(np.full(60_000, 6, dtype=np.int64))
    counts = np.bincount(u, minlength=6)
    assert stats.chisquare(counts).pvalue > 1e-4
    big = np.array([(1 << 100) + 7], dtype=object)
    assert 0 <= int(src.uniform_below(big)[0]) < (1 << 100) + 7
    x = src.uniform01(10_000)
    assert np.all((x > 0) & (x < 1))


def test_sources_validate():
    with pytest.raises(InvalidMessage):
        SecureSource().uniform_below(np.array([0], dtype=np.int64))
    with pytest.raises(InvalidMessage):
        SeededSource(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        discrete_laplace(0, 3, SecureSource())
    with pytest.raises(InvalidMessage):
        discrete_gaussian(2, 1.5, 3, SecureSource())  # type: ignore[arg-type]


def test_seeded_source_is_reproducible():
    a = discrete_laplace(1000, 50, SeededSource(np.random.default_rng(9)))
    b = discrete_laplace(1000, 50, SeededSource(np.random.default_rng(9)))
    assert np.array_equal(a, b)


def test_ceil_sqrt():
    for n in [0, 1, 2, 3, 4, 5, 15, 16, 17, 10**30, 10**30 + 1]:
        r = ceil_sqrt(n)
        assert (r * r >= n and (r - 1) * (r - 1) < n) or n == 0


def test_gaussian_at_a_fine_grid_keeps_int64_and_its_shape(monkeypatch):
    """sigma ≈ 2^27 on the grid (a DP release at 2^-25): the Laplace proposals of a batch of 10^5 reach
    |Y| − q > 2^30 a dozen times, and those few draws -- not the whole batch -- go through Python integers (the
    acceptance Bernoullis of well under 1 % of the proposals have object denominators; all of them did before).
    The draws have the discrete Gaussian's variance t·q, kurtosis 3 (a Laplace's would be 6) and two-sigma tail."""
    wide = {"object": 0, "int64": 0}
    real_bernoulli = samplers.bernoulli_exp

    def counting(num, den, src):
        wide["object" if np.asarray(den).dtype == object else "int64"] += np.asarray(den).size
        return real_bernoulli(num, den, src)

    monkeypatch.setattr(samplers, "bernoulli_exp", counting)
    t, q, n = (1 << 27) + 1, 1 << 27, 100_000
    y = discrete_gaussian(t, q, n, SeededSource(np.random.default_rng(5)))
    assert y.dtype == np.int64 and y.shape == (n,)
    assert 0 < wide["object"] < 0.01 * wide["int64"]
    x = y.astype(np.float64) / math.sqrt(t * q)
    assert abs(x.var() - 1.0) < 0.02
    assert abs(float(np.mean(x**4)) / x.var() ** 2 - 3.0) < 0.1
    assert abs(float(np.mean(np.abs(x) > 2.0)) - 0.0455) < 0.004


def test_a_seed_gives_initialisation_and_privacy_noise_streams_of_their_own():
    """aux_rng (initialisation) and noise_rng (privacy noise) of one int seed were both default_rng(seed): a seeded
    KMeans or GaussianMixture drew its initial centres and its noise from the same bits, so a seeded experiment's
    noise was a function of its initialisation.  Now the seed gives two independent streams, each reproducible; a
    Generator passed in is one stream, drawn in turn; a negative seed is refused by both."""
    from smcdp.dp.samplers import aux_rng, noise_rng

    a, b = aux_rng(3).random(16), noise_rng(3).random(16)
    assert not np.any(a == b)
    np.testing.assert_array_equal(aux_rng(3).random(16), a)  # still reproducible
    np.testing.assert_array_equal(noise_rng(3).random(16), np.random.default_rng(3).random(16))  # noise unchanged
    g = np.random.default_rng(5)
    assert aux_rng(g) is g and noise_rng(g) is g
    for make in (aux_rng, noise_rng):
        with pytest.raises(InvalidParameter, match="non-negative"):
            make(-1)
