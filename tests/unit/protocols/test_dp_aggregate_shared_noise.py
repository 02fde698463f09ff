"""dp-aggregate with shared noise (``calibration="gaussian"``): every data party adds a share of the noise, so
that Charlie with any K − h data parties -- party1, or the selected party -- cannot remove it (issue 36's
coalition, for the noise).  In memory with small keys; the release is compared with the plaintext sum of the
rounded models and every party's share, and the shares' distribution with the calibration's claim."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from smcdp.dp.conversions import zcdp_epsilon_cks
from smcdp.errors import InvalidMessage
from smcdp.plugins.dp_aggregate import DPAggregatePlugin
from smcdp.protocols.dp_aggregate import (
    DPAggregateParams,
    selected_sensitivity,
    sensitivity_key,
    shared_noise,
    to_fixed,
)
from tests.unit.protocols.test_dp_aggregate import make_params, released_T, run_aggregate


def gaussian(K, d, h=1, **kw):
    kw.setdefault("delta", 1e-5)
    return make_params(K, d, calibration="gaussian", noise_parties=h, **kw)


def _rounded_sum(p, ws):
    return np.array([[to_fixed(x, p.frac_bits) for x in w] for w in ws], dtype=object).sum(axis=0)


@pytest.mark.parametrize("K,largest,h", [(3, 1, 1), (4, 3, 3), (5, 0, 2)])
def test_the_release_is_the_models_plus_every_partys_share(keys, K, largest, h):
    """T = Σ_j W_j + Σ_j N_j exactly, each N_j drawn for the selected (largest) sensitivity -- and T minus the
    selected party's own share is not the exact sum: its noise alone no longer is the release's."""
    d = 4
    p = gaussian(K, d, h)
    rng = np.random.default_rng(K + largest)
    ws = [rng.uniform(-1, 1, size=d) for _ in range(K)]
    sens = [0.01 + 0.001 * j for j in range(K)]
    sens[largest], sens[-1] = sens[-1], sens[largest]
    seeds = [500 + 10 * K + j for j in range(K)]
    res, _ = run_aggregate(p, ws, sens, keys, noise_seeds=seeds)
    k_sel = min(sensitivity_key(s)[0] for s in sens)
    assert k_sel == sensitivity_key(sens[largest])[0]
    N = [shared_noise(f"party{j + 1}", p, k_sel, np.random.default_rng(seeds[j])) for j in range(K)]
    W = _rounded_sum(p, ws)
    T = released_T(res, p)
    assert [int(t - w) for t, w in zip(T, W)] == [sum(col) for col in zip(*N)]
    # the selected party's noise is one share of K: T − N_sel − ΣW is the others' shares, not zero
    rest = [int(t - w - n) for t, w, n in zip(T, W, N[largest])]
    assert rest == [sum(N[j][i] for j in range(K) if j != largest) for i in range(d)] and any(rest)
    assert np.allclose(res["dave"].weights, (np.array(T, dtype=float) / (K << p.frac_bits)), atol=0)


def test_charlie_with_party1_or_the_selected_party_is_left_with_the_honest_shares(keys):
    """The coalitions the single-noise mode loses to -- Charlie with party1 (who masks the total for him) and
    Charlie with the selected party (which knows its noise is the one released) -- recover here only
    T − (their own shares) = the exact sum + the honest parties' shares, whose variance is (K − c)·σ_p² ≥ σ² for
    c ≤ K − h colluding data parties.  Their view is a function of T and their own shares (everything else
    they see is masked or encrypted), so this is what they can compute."""
    K, d, h = 4, 3, 3  # party1 (which masks the total) is also the selected party
    p = gaussian(K, d, h)
    ws = [np.full(d, 0.2 * j) for j in range(K)]
    sens = [0.02, 0.01, 0.01, 0.01]
    seeds = [11, 12, 13, 14]
    res, _ = run_aggregate(p, ws, sens, keys, noise_seeds=seeds)
    k_sel = sensitivity_key(0.02)[0]
    N = [shared_noise(f"party{j + 1}", p, k_sel, np.random.default_rng(seeds[j])) for j in range(K)]
    left = [int(t - w - n) for t, w, n in zip(released_T(res, p), _rounded_sum(p, ws), N[0])]
    honest = [sum(N[j][i] for j in (1, 2, 3)) for i in range(d)]
    assert left == honest
    t, q = p.share_parameters(selected_sensitivity(k_sel))
    sigma = _curator_sigma(p, selected_sensitivity(k_sel))
    assert (K - 1) * t * q >= sigma**2  # three honest shares carry at least one curator's σ²


def _curator_sigma(p, delta_hat):
    """σ (grid steps) one trusted curator adds for (ε, δ) under zCDP with the CKS conversion, without margins."""
    sens = delta_hat * 2.0**p.frac_bits + math.isqrt(p.dim - 1) + 1
    return sens / math.sqrt(2 * p.rho_capacity)


@pytest.mark.parametrize("h", [1, 2, 4])
def test_a_share_has_variance_sigma_squared_over_h_and_h_shares_certify_epsilon_delta(h):
    """The privacy claim: each share is a discrete Gaussian of variance σ²/h (checked on 4,000 draws against
    σ²/h by a chi-square interval that fails for σ²/(h ± 1)), so any h honest shares sum to variance ≥ σ²,
    and a Gaussian of that σ for the release's sensitivity Δ_g is (ε, δ)-DP by the CKS conversion of its
    zCDP ρ = Δ_g²/2σ² -- and by dp-accounting's PLD accountant (an independent reference)."""
    from dp_accounting.pld import privacy_loss_distribution

    K, d = 4, 5
    p = gaussian(K, d, h, epsilon=0.8, delta=1e-6)
    k_sel = sensitivity_key(0.3)[0]
    dh = selected_sensitivity(k_sel)
    t, q = p.share_parameters(dh)
    draws = np.concatenate(
        [np.array(shared_noise("party1", p, k_sel, np.random.default_rng(r)), dtype=float) for r in range(800)]
    )
    n = draws.size
    var = float(np.sum(draws.astype(float) ** 2) / n)  # mean 0
    lo, hi = (n * var / stats.chi2.ppf(q_, n) for q_ in (0.9995, 0.0005))  # 99.9 % interval for the variance
    assert lo <= t * q <= hi, (lo, t * q, hi)
    sigma2 = _curator_sigma(p, dh) ** 2
    for wrong in (h - 1, h + 1):
        if wrong >= 1:
            assert not lo <= sigma2 / wrong <= hi
    # h shares: variance h·t·q ≥ σ², and that σ certifies (ε, δ) for Δ_g
    sens = dh * 2.0**p.frac_bits + math.isqrt(d - 1) + 1
    sigma_h = math.sqrt(h * t * q)
    assert zcdp_epsilon_cks(sens**2 / (2 * sigma_h**2), p.delta) <= p.epsilon
    pld = privacy_loss_distribution.from_gaussian_mechanism(sigma_h / sens, value_discretization_interval=1e-4)
    assert pld.get_delta_for_epsilon(p.epsilon) <= p.delta


def test_parameters_of_the_shared_noise_are_validated():
    with pytest.raises(InvalidMessage, match="delta must be set"):
        make_params(3, 2, calibration="gaussian")
    with pytest.raises(InvalidMessage, match="noise_parties=4 must lie in"):
        gaussian(3, 2, 4)
    with pytest.raises(InvalidMessage, match="belong to calibration='gaussian'"):
        make_params(3, 2, delta=1e-5)
    with pytest.raises(InvalidMessage, match="belong to calibration='gaussian'"):
        make_params(3, 2, noise_parties=2)
    with pytest.raises(InvalidMessage, match="delta"):
        gaussian(3, 2, delta=0.9)
    gaussian(3, 2).check_shared_noise(2.0**-60)  # the rounding's ⌈√d⌉ steps keep the shares wide enough
    # at a huge epsilon, a selected sensitivity far below the grid's resolution leaves shares below a grid
    # step, where a sum of discrete Gaussians is far from one (Kairouz, Liu & Steinke's τ): refused
    with pytest.raises(InvalidMessage, match="too small for the public grid"):
        gaussian(3, 2, epsilon=1e4).check_shared_noise(2.0**-60)


def test_the_summary_states_the_delta_the_shared_noise_and_what_the_parties_learn():
    plugin = DPAggregatePlugin()
    roles = {"charlie": "c", "dave": "d", "party1": "p1", "party2": "p2", "party3": "p3"}
    base = {"n_parties": 3, "dim": 2, "epsilon": 1.0, "lam": 0.1, "max_sensitivity": 0.5}
    one = plugin.summary({**base, "calibration": "gaussian", "delta": 1e-6, "noise_parties": 2}, roles)
    assert one.epsilon == 1.0 and 1e-6 < one.delta < 1e-6 * (1 + 1e-9)
    assert one.noise_parties == {"party1": 2, "party2": 2, "party3": 2}
    assert one.rho == pytest.approx(DPAggregateParams(**base, calibration="gaussian", delta=1e-6).rho_capacity)
    exact = [o for o in one.outputs if not o.dp]
    assert [(o.name, o.recipients, o.sources) for o in exact] == [
        ("selected_sensitivity", ("party1", "party2", "party3"), ("party1", "party2", "party3"))
    ]
    single = plugin.summary(base, roles)
    assert single.noise_parties == {} and all(o.dp for o in single.outputs)


def test_a_coalition_of_k_minus_h_parties_cannot_isolate_one_partys_model_and_share(keys):
    """K = 5, h = 2: Charlie with party2 (the tree parent of the leaf party4) and party3, party5 (party4's ring
    neighbours) -- c = 3 = K − h data parties.  Charlie decrypts what party2 received from party4, party5 and
    party3 contribute the mask seeds they share with party4, t_4 is published.  With ring masks (one party's
    noise) this recovers W_4 + N_4, party4's model with a single share, σ²/h, of noise.  With pairwise masks the
    seed party1 (honest) shares with party4 stays hidden, so the coalition is left with a uniform residue; given
    that seed too, the same arithmetic gives W_4 + N_4 exactly (the control that the arithmetic is right)."""
    K, d, h = 5, 3, 2
    p = gaussian(K, d, h)
    ws = [np.full(d, 0.1 * (j + 1)) for j in range(K)]
    sens = [0.01 + 0.001 * j for j in range(K)]
    seeds = [70 + j for j in range(K)]
    res, net = run_aggregate(p, ws, sens, keys, noise_seeds=seeds)
    M = 1 << p.modulus_bits
    msgs = {(s, r, t): data for (s, r, t, _tn, data) in net.transcript}
    zeta = keys["zeta"]
    from smcdp.crypto.vector import EncryptedVector
    from smcdp.protocols.dp_aggregate import ring_mask
    from smcdp.v1 import messages_pb2 as pb

    agg = EncryptedVector.from_proto(
        pb.CiphertextVector.FromString(msgs[("party4", "party2", "s2/agg")]), zeta.public_key
    )
    seen = [v % M for v in agg.decrypt_ints(zeta)]  # Charlie decrypts what party2 holds
    t4 = [int(v) for v in res["party4"].share]  # published

    def estimate(holders):
        """Y_4 + t_4 with every mask of party4's the ``holders`` know removed, centred."""
        est = [(y + t) % M for y, t in zip(seen, t4)]
        for (s, r, tag), data in msgs.items():
            if tag != "s2/seed" or "party4" not in (s, r) or ({s, r} - {"party4"}).isdisjoint(holders):
                continue
            sign = 1 if s == "party4" else -1  # party4 adds the masks of the seeds it drew
            rho = ring_mask(pb.Blobs.FromString(data).values[0], d, M)
            est = [(e - sign * m) % M for e, m in zip(est, rho)]
        return [e - M if e >= M // 2 else e for e in est]

    k_sel = min(sensitivity_key(s)[0] for s in sens)
    target = [
        w + n
        for w, n in zip(
            [to_fixed(x, p.frac_bits) for x in ws[3]], shared_noise("party4", p, k_sel, np.random.default_rng(seeds[3]))
        )
    ]
    assert estimate({"party2", "party3", "party5"}) != target  # the coalition of K − h: masked
    assert estimate({"party1", "party2", "party3", "party5"}) == target  # every other party: exact


def test_a_share_beyond_its_public_bound_aborts_and_the_bounds_hold(monkeypatch):
    """The public bound on a share covers the largest admissible calibration at the subgaussian tail 2^-64 (so
    that no sum wraps modulo M), a draw beyond it aborts the session, and the mask that hides k_sel from Charlie
    is κ bits longer than any key."""
    import smcdp.protocols.dp_aggregate as dpa
    from smcdp.protocols.dp_aggregate import NOISE_TAIL_BITS, SENS_KEY_BITS

    K, d = 4, 6
    p = gaussian(K, d, 2)
    t, q = p.share_parameters(p.sensitivity_bound)
    z = math.sqrt(2 * (NOISE_TAIL_BITS * math.log(2) + math.log(2 * d)))
    assert p.share_noise_int_bound >= math.sqrt(t * q) * z
    # K shares and K models at their bounds stay below M/2: nothing wraps
    assert K * p.share_noise_int_bound + K * (p.weight_limit * 2**p.frac_bits + 1) < 2 ** (p.modulus_bits - 1)
    assert p.secure_min_params().check_mask_bits >= SENS_KEY_BITS + p.mask_bits
    k = sensitivity_key(p.sensitivity_bound)[0]
    monkeypatch.setattr(dpa, "discrete_gaussian", lambda t, q, n, src: np.full(n, p.share_noise_int_bound + 1))
    with pytest.raises(InvalidMessage, match="exceeded its public bound"):
        shared_noise("party1", p, k, np.random.default_rng(0))
