"""Plug-ins describe proposals in governance terms, and gate their release point."""

from __future__ import annotations

import asyncio
import math

import numpy as np
import pytest

from smcdp.errors import SmcdpError
from smcdp.net.channel import InMemoryNetwork
from smcdp.plugins.base import ProtocolPlugin, SessionContext
from smcdp.plugins.registry import get_plugin
from smcdp.protocols.dp_aggregate import SHARE_TAG

DPA_ROLES = {"charlie": "charlie", "dave": "dave", "party1": "alice", "party2": "bob"}


def _summary(name, roles, **params):
    plugin = get_plugin(name)
    return plugin.summary(plugin.validate_params(params, roles), roles)


def test_power_iteration_releases_exact_outputs_from_every_data_party():
    s = _summary("power-iteration", {"trent": "t", "party1": "a", "party2": "b"}, n_parties=2, key_bits=3072)
    assert s.key_bits == {"paillier": 3072} and s.epsilon is None and s.record_bound is None
    assert s.data_roles == ("party1", "party2") and s.coordinator_roles == ("trent",)
    assert {o.name: (o.recipients, o.dp) for o in s.outputs} == {
        "u": (("party1", "party2"), False),
        "x": (("trent",), False),
    }


def test_power_iteration_names_its_r_components_and_what_oversampling_adds():
    roles = {"trent": "t", "party1": "a", "party2": "b", "party3": "c"}
    s = _summary("power-iteration", roles, n_parties=3, components=3)
    data = ("party1", "party2", "party3")
    assert [(o.name, o.recipients, o.sources, o.dp) for o in s.outputs] == [
        ("u_1..u_3", data, data, False),
        ("x_1..x_3", ("trent",), data, False),
    ]
    s = _summary("power-iteration", roles, n_parties=3, components=2, oversample=2)
    assert [(o.name, o.recipients) for o in s.outputs] == [
        ("u_1..u_2", data),
        ("x_1..x_2", ("trent",)),
        ("approximate u_3..u_4 (oversample)", data),
    ]


def test_dp_aggregate_costs_its_epsilon_or_the_seed_calibrations_actual_guarantee():
    s = _summary("dp-aggregate", DPA_ROLES, n_parties=2, dim=9, epsilon=0.5, lam=0.1, min_records=40)
    assert (s.epsilon, s.delta, s.rho, s.record_bound) == (0.5, 2 * 2.0**-64, 0.125, 40)  # the aborts' K * 2^-64
    assert s.key_bits == {"paillier": 2048, "dgk": 2048}
    assert [(o.name, o.recipients, o.dp) for o in s.outputs] == [("model", ("dave",), True)]
    seed = _summary("dp-aggregate", DPA_ROLES, n_parties=2, dim=9, epsilon=0.5, lam=0.1, calibration="seed")
    assert seed.epsilon == 0.5  # eps * max(1, sqrt(d) / (2K)): the grid's rounding pulls the ratio 3/4 towards 1
    seed = _summary("dp-aggregate", DPA_ROLES, n_parties=2, dim=36, epsilon=0.5, lam=0.1, calibration="seed")
    assert math.isclose(seed.epsilon, 0.5 * 6 / 4)  # sqrt(d) / (2K) above 1


def _truncated_laplace_excess(eps: float, bound: int) -> tuple[float, float]:
    """A discrete Laplace mechanism of sensitivity 1 that aborts when |noise| > ``bound`` (as a dp-aggregate party
    does beyond its public bound): (its hockey-stick divergence at e^eps between neighbours 0 and 1 -- the
    smallest delta it is (eps, delta)-DP with -- and its abort probability p), computed exactly over outcomes
    (rationals: q = e^-eps rounded once, and e^eps taken as 1/q)."""
    from fractions import Fraction

    q = Fraction(math.exp(-eps))
    c = (1 - q) / (1 + q)

    def pmf(k: int) -> Fraction:
        return c * q ** abs(k) if abs(k) <= bound else Fraction(0)

    p_abort = 2 * c * q ** (bound + 1) / (1 - q)
    # the outcomes of D (mean 0) and D' (mean 1); the aborts have the same chance under both and cancel
    excess = sum(max(Fraction(0), pmf(x) - pmf(x - 1) / q) for x in range(-bound, bound + 2))
    return float(excess), float(p_abort)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0, 8.0])
def test_dp_aggregate_charges_what_its_aborts_cost_not_just_their_chance(eps):
    """A party's abort on noise beyond the public bound truncates the mechanism.  At a bound of the tail quantile
    alone, the truncated mechanism's delta is (e^eps - 1)/2 times the abort chance here -- above it for
    eps > ln 3 -- and e^eps times it covers every eps (shared noise's charge).  At the tail quantile plus the
    sensitivity (the single-noise calibrations' bound) it is at most the chance of a draw beyond the quantile,
    which is what they charge."""
    from smcdp.plugins.dp_aggregate import abort_delta

    tail = 12
    excess, p_abort = _truncated_laplace_excess(eps, bound=tail)
    assert math.isclose(excess, (math.exp(eps) - 1) / 2 * p_abort, rel_tol=1e-6)
    factor = abort_delta(eps, 3, margin=False) / (3 * 2.0**-64)  # the charge per unit of abort chance
    assert math.isclose(factor, math.exp(eps)) and excess <= factor * p_abort
    if eps > math.log(3):
        assert excess > p_abort  # the abort chance alone is not enough without a margin
    with_margin, _ = _truncated_laplace_excess(eps, bound=tail + 1)  # + the sensitivity, 1
    assert with_margin <= p_abort  # = P(|noise| > tail): the draws beyond the quantile
    assert abort_delta(eps, 3, margin=True) == 3 * 2.0**-64
    assert abort_delta(50.0, 3, margin=False) == 1.0 and abort_delta(math.inf, 3, margin=False) == 1.0
    s = _summary(
        "dp-aggregate", DPA_ROLES, n_parties=2, dim=4, epsilon=eps, lam=0.1, calibration="gaussian", delta=1e-6
    )
    assert math.isclose(s.delta, 1e-6 + abort_delta(eps, 2, margin=False), rel_tol=1e-12)


@pytest.mark.parametrize("calibration", ["exact", "seed"])
def test_dp_aggregate_noise_bound_is_the_tail_quantile_plus_the_largest_shift(calibration):
    """The single-noise bound a party aborts beyond leaves room for the shift one record causes beyond the
    2^-64 tail quantile of the noisiest allowed party (the radius's Gamma tail, or d Laplace coordinates)."""
    from scipy import stats

    from smcdp.protocols.dp_aggregate import DPAggregateParams

    p = DPAggregateParams(n_parties=3, dim=5, epsilon=2.0, lam=0.1, calibration=calibration)
    shift = p.mechanism_sensitivity(p.sensitivity_bound)
    assert p.noise_bound >= p.noise_tail_bound + shift
    scale = p.mechanism_sensitivity(p.sensitivity_bound) / p.epsilon
    if calibration == "exact":  # the radius bounds every coordinate
        beyond = stats.gamma.sf(p.noise_tail_bound, p.dim, scale=scale)
    else:
        beyond = p.dim * math.exp(-p.noise_tail_bound / scale)
    assert beyond <= 2.0**-64


def test_keyword_reveals_more_to_alice_only_when_asked():
    roles = {"alice": "a", "bob": "b"}
    assert [o.name for o in _summary("keyword", roles).outputs] == ["keyword"]
    assert [o.name for o in _summary("keyword", roles, debug_reveal=True).outputs] == ["keyword", "log-likelihoods"]


def test_a_plugin_without_a_summary_says_so():
    class Bare(ProtocolPlugin):
        name = "bare"

        def validate_params(self, params, roles):
            return dict(params)

        async def run_role(self, role, ch, ctx):
            return {}

    with pytest.raises(SmcdpError) as ei:
        Bare().summary({}, {})
    assert ei.value.code == "FAILED_PRECONDITION"


def _datasets(tmp_path):
    rng = np.random.default_rng(3)
    paths = {}
    for name, n in (("alice", 40), ("bob", 60)):
        X = rng.normal(size=(n, 3))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.001
        y = np.where(X @ np.array([1.0, -1.0, 0.5]) > 0, 1, -1)
        np.savez(tmp_path / f"{name}.npz", X=X, y=y)
        paths[name] = str(tmp_path / f"{name}.npz")
    return paths


def _run(tmp_path, on_release, box):
    """Every role through the plug-in on one in-memory network (``box["net"]``, also on failure)."""
    plugin = get_plugin("dp-aggregate")
    params = plugin.validate_params(
        {"n_parties": 2, "dim": 3, "epsilon": 1e6, "lam": 0.1, "key_bits": 512, "dgk_bits": 512, "dgk_t": 64}, DPA_ROLES
    )
    paths = _datasets(tmp_path)
    box["net"] = net = InMemoryNetwork(DPA_ROLES, timeout=120)

    def ctx(role):
        party = DPA_ROLES[role]
        return SessionContext(
            session_id="s",
            protocol="dp-aggregate",
            roles=DPA_ROLES,
            params=params,
            inputs={"data": paths[party]} if party in paths else {},
            allow_insecure_keys=True,
            on_release=on_release(role) if party in paths else None,
        )

    fns = {r: (lambda ch, r=r: plugin.run_role(r, ch, ctx(r))) for r in DPA_ROLES}
    return asyncio.run(net.run(fns))


def _sent(net, sender=None):
    return {(s, r, t) for s, r, t, _, _ in net.transcript if sender is None or s == sender}


def test_the_release_gate_fires_once_just_before_the_share_to_dave(tmp_path):
    calls, box = [], {}

    def on_release(role):
        return lambda: calls.append((role, _sent(box["net"], role)))

    results = _run(tmp_path, on_release, box)
    assert sorted(r for r, _ in calls) == ["party1", "party2"]  # once per data party
    for role, sent_before in calls:
        assert sent_before and (role, "dave", SHARE_TAG) not in sent_before  # nothing to dave yet
        assert (role, "dave", SHARE_TAG) in _sent(box["net"])  # then the share went
    assert len(results["dave"]["weights"]) == 3


def test_a_failing_release_callback_keeps_the_share_in(tmp_path):
    def on_release(role):
        def fire():
            if role == "party2":
                raise SmcdpError("the ledger is unavailable")

        return fire

    box = {}
    with pytest.raises(Exception):
        _run(tmp_path, on_release, box)
    assert ("party2", "dave", SHARE_TAG) not in _sent(box["net"])


def test_power_iteration_dp_modes_declare_what_the_data_parties_receive():
    """Issue 38: the covariance mode gives every data party the whole noisy k × k covariance, so its summary
    declares components = k and names that flow (DP); the power mode declares b = components + oversample.
    Both cost (epsilon, delta) and the same rho."""
    roles = {"trent": "t", "party1": "a", "party2": "b"}
    cov = _summary("power-iteration", roles, n_parties=2, epsilon=0.5, delta=1e-6, rows=30, components=2)
    assert cov.epsilon == 0.5 and cov.delta == 1e-6 and cov.components == 30
    assert [o.name for o in cov.outputs] == ["u_1..u_2", "noisy 30 × 30 covariance (all 30 directions)"]
    assert all(o.dp and o.recipients == ("party1", "party2") for o in cov.outputs)
    power = _summary(
        "power-iteration", roles, n_parties=2, epsilon=0.5, delta=1e-6, rows=30, components=2, dp_method="power"
    )
    assert power.components == 2 and [o.name for o in power.outputs] == ["u_1..u_2"]
    # the same total cost: one release of sigma against T = 10 releases of √10·sigma
    assert cov.rho == pytest.approx(power.rho, rel=1e-6)
