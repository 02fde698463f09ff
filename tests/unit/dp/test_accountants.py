"""Accountants (one class per composition method) against Google's dp-accounting and closed forms."""

from __future__ import annotations

import math

import pytest

from smcdp.dp.accountants import (
    AdvancedAccountant,
    LinearAccountant,
    PrivacyAccountant,
    RDPAccountant,
    ZCDPAccountant,
    account,
)
from smcdp.dp.conversions import (
    advanced_composition,
    gaussian_delta,
    gaussian_epsilon,
    zcdp_epsilon_cks,
)
from smcdp.dp.events import ApproxDPEvent, GaussianEvent, LaplaceEvent, PureDPEvent
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


def test_zcdp_accountant_rho_and_epsilon():
    out = account("zcdp", 1e-5, gaussian=[(2.0, 10)], laplace=[(4.0, 8)])
    rho = 10 / (2 * 4.0) + 8 * (0.25**2) / 2
    assert out["rho"] == pytest.approx(rho, rel=1e-15)
    assert out["epsilon"] == pytest.approx(zcdp_epsilon_cks(rho, 1e-5))
    assert out["epsilon_classic"] == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e5)))
    out2 = account("zcdp", 1e-5, gaussian=[(2.0, 10)], laplace=[(4.0, 8)], conversion="classic")
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
    acc = PrivacyAccountant("linear").compose(ApproxDPEvent(0.3, 1e-6), 3).compose(PureDPEvent(0.1))
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


def test_factory_returns_one_class_per_method():
    for method, cls in [
        ("linear", LinearAccountant),
        ("advanced", AdvancedAccountant),
        ("zcdp", ZCDPAccountant),
        ("rdp", RDPAccountant),
        ("moments", RDPAccountant),
    ]:
        acc = PrivacyAccountant(method, conversion="classic")
        assert type(acc) is cls and acc.conversion == "classic"
    assert type(RDPAccountant()) is RDPAccountant
    with pytest.raises(InvalidMessage):
        ZCDPAccountant("linear")
    with pytest.raises(InvalidMessage):
        PrivacyAccountant("zcdp", conversion="exact")
    # the classes agree with the CLI's composition
    acc = ZCDPAccountant().compose(GaussianEvent(2.0), 10).compose(LaplaceEvent(4.0), 8)
    assert acc.summary(1e-5) == {
        k: v for k, v in account("zcdp", 1e-5, gaussian=[(2.0, 10)], laplace=[(4.0, 8)]).items() if k != "steps"
    }
