"""The one-release DP mode of power iteration (issue 38, ``dp_method = "covariance"``), in memory.

Utility against numpy on the issue's data (median over five data seeds), the release against the plaintext
clipped covariance (the noise at party_sigma, σ/√2 off the diagonal once unpacked), what leaves a data party
(one release), what Trent sends (nothing before the releases, only their sum after), a malicious Trent who
cannot change a release, replay, the byte envelope, ``auto``'s choice from public parameters, the rounds
the power mode takes from ``gap_ratio``, and an empirical privacy audit of the one release.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math

import numpy as np
import pytest

from smcdp.compute.kernels import clipped_gram_block
from smcdp.crypto.encoding import decode_fixed
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.vector import EncryptedVector
from smcdp.dp.conversions import analytic_gaussian_sigma
from smcdp.errors import InvalidMessage
from smcdp.net.channel import InMemoryNetwork
from smcdp.primitives.rng import Randomness
from smcdp.protocols.power_iteration import (
    COV_AUTO_VALUES,
    COV_SUM_TAG,
    COV_TAG,
    DP_ITERATIONS,
    PowerIterationParams,
    covariance_pack,
    covariance_unpack,
    data_party,
    dp_calibration,
    dp_noise,
    dp_release_tag,
    dp_rounds_for_gap,
    noisy_limit,
    trent,
)
from smcdp.v1 import messages_pb2 as pb
from tests.support.pca_data import small_gap_data, spectral_gap_data, top_eigenvectors
from tests.unit.protocols.test_power_iteration_dp import _epsilon_lower_bound


@pytest.fixture(scope="module")
def keys512():
    return generate_keypair(512, allow_insecure=True)


def cov_params(**kw) -> PowerIterationParams:
    base = dict(n_parties=2, key_bits=512, epsilon=1.0, delta=1e-6)
    return PowerIterationParams(**{**base, **kw})


def run(blocks, params, *, sk, seeds=None, trent_seed=None, rewrite=None, timeout=300):
    """All roles on one InMemoryNetwork, party1 given ``sk``; ``rewrite(tag, data, pk)`` rewrites Trent's
    outgoing messages (a malicious Trent)."""
    roles = {"trent": "trent", **{f"party{i + 1}": f"org{i + 1}" for i in range(len(blocks))}}
    net = InMemoryNetwork(roles, timeout=timeout)
    if rewrite is not None:
        ch = net.channels["trent"]
        original = ch._transmit

        async def evil(to_role, tag, type_url, data):
            await original(to_role, tag, type_url, rewrite(tag, data, sk.public_key))

        ch._transmit = evil
    seeds = seeds or [None] * len(blocks)
    coros = {"trent": lambda c: trent(c, params, seed=trent_seed, allow_insecure_keys=True)}
    for i, A in enumerate(blocks):
        coros[f"party{i + 1}"] = lambda c, A=A, i=i: data_party(
            c, A, params, private_key=sk if i == 0 else None, seed=seeds[i], allow_insecure_keys=True
        )
    return net, asyncio.run(net.run(coros))


def release(net, sk, params, sender) -> np.ndarray:
    """The packed release ``sender`` sent to Trent, decrypted (what Trent colluding with a key holder sees)."""
    (data,) = [d for s, t, _, d in net.received_by("trent") if s == sender and t == COV_TAG]
    vec = EncryptedVector.from_proto(
        pb.CiphertextVector.FromString(data), sk.public_key, packing=params.packing(sk.public_key)
    )
    return np.asarray(decode_fixed(vec.decrypt_ints(sk), vec.exponent), dtype=np.float64)


def split(M, n1):
    return [M[:, :n1], M[:, n1:]]


# ------------------------------------------------------------------ utility against the plaintext computation
def test_issue_targets_k20_n2000_two_parties_median_of_five_seeds(keys512):
    """The issue's targets (k = 20, n = 2,000 over two parties, delta = 1e-6, median over five data seeds):
    epsilon = 0.3: u_1 |cos| >= 0.99 and u_2 >= 0.90; epsilon = 0.1: u_1 >= 0.85 -- against numpy's
    eigenvectors of MMᵀ.  Both parties get the same u (the same post-processing of the same sum)."""
    _, sk = keys512
    cos = {0.3: ([], []), 0.1: ([], [])}
    for seed in range(5):
        M = spectral_gap_data(seed, n=2_000)
        U = top_eigenvectors(M, 2)
        for eps, (c1, c2) in cos.items():
            params = cov_params(epsilon=eps, rows=20, max_samples=2_000, components=2)
            assert params.dp_mode == "covariance"
            roots = [Randomness.from_seed(100 + 2 * seed), Randomness.from_seed(101 + 2 * seed)]
            _, res = run(split(M, 900), params, sk=sk, seeds=roots)
            assert res["party1"].components == res["party2"].components
            c1.append(abs(np.dot(res["party1"].components[0]["u"], U[:, 0])))
            c2.append(abs(np.dot(res["party1"].components[1]["u"], U[:, 1])))
    assert np.median(cos[0.3][0]) >= 0.99, cos[0.3][0]
    assert np.median(cos[0.3][1]) >= 0.90, cos[0.3][1]
    assert np.median(cos[0.1][0]) >= 0.85, cos[0.1][0]


def test_the_release_is_the_clipped_covariance_plus_noise_at_party_sigma(keys512):
    """Trent colluding with a key holder decrypts a party's release: it is the isometric upper triangle of
    the *clipped* Ã_iÃ_iᵀ (a column of norm 1000 weighs as one of norm C) plus noise of std party_sigma;
    unpacked, the noise is σ on the diagonal and σ/√2 off it.  The sum the parties decrypt is the sum of
    the two releases, and u is its top eigenvector."""
    _, sk = keys512
    k = 40  # 820 values per release: the spreads below are within ±4 standard errors
    rng = np.random.default_rng(3)
    A = rng.normal(size=(k, 200)) * 0.1
    A[:, 7] = 1000.0 * np.eye(k)[:, 0]
    B = rng.normal(size=(k, 150)) * 0.1
    params = cov_params(rows=k, max_samples=200)
    net, res = run([A, B], params, sk=sk, seeds=[Randomness.from_seed(31), Randomness.from_seed(32)])
    cal = dp_calibration(params)
    assert cal.method == "covariance" and cal.rounds == 1
    W = {p: release(net, sk, params, p) for p in ("party1", "party2")}
    S = {"party1": clipped_gram_block(A, np.eye(k), 1.0)[0], "party2": clipped_gram_block(B, np.eye(k), 1.0)[0]}
    noise = np.concatenate([W[p] - covariance_pack(S[p]) for p in W])
    assert abs(noise.mean()) < 4 * cal.party_sigma / math.sqrt(noise.size)
    assert 0.9 < noise.std() / cal.party_sigma < 1.1
    E = covariance_unpack(W["party1"], k) - S["party1"]
    off = E[np.triu_indices(k, 1)]
    assert 0.8 < off.std() / (cal.party_sigma / math.sqrt(2)) < 1.2
    assert res["party1"].dp["clipped_columns"] == 1 and res["party2"].dp["clipped_columns"] == 0
    # the issue's target: the aggregate's noise is √N times the central Gaussian's sigma (one release at the
    # same (epsilon, delta), by the exact Gaussian profile), measured -- never more
    central = analytic_gaussian_sigma(1.0, 1e-6, 1.0)
    agg = (W["party1"] + W["party2"]) - covariance_pack(S["party1"] + S["party2"])
    assert 0.85 * math.sqrt(2) < agg.std() / central < 1.1 * math.sqrt(2)
    total = covariance_unpack(W["party1"] + W["party2"], k)
    u = np.linalg.eigh(total)[1][:, -1]
    assert abs(np.dot(u, res["party1"].u)) == pytest.approx(1.0, abs=1e-9)
    np.testing.assert_allclose(res["party1"].alpha, A.T @ np.asarray(res["party1"].u), atol=1e-9)


def test_with_negligible_noise_it_is_the_plaintext_computation(keys512):
    """At epsilon = 99 (noise ~0.01 against eigenvalues in the thousands) the components match numpy's to
    1e-4: the encrypted sum, the packing and the eigen step compute MMᵀ's eigenvectors."""
    _, sk = keys512
    M = spectral_gap_data(11, k=10, n=6_000)
    params = cov_params(epsilon=99.0, delta=1e-3, components=3, rows=10, max_samples=6_000)
    _, res = run(split(M, 2_500), params, sk=sk)
    U = top_eigenvectors(M, 3)
    for j in range(2):
        assert abs(np.dot(res["party2"].components[j]["u"], U[:, j])) > 1 - 1e-4, j


# ------------------------------------------------------------------ what leaves a party, what Trent sends
def test_one_release_leaves_a_party_and_trent_sends_only_the_sum_after_every_release(keys512):
    """Per data party: dims (public) and one release to Trent (party1 also the keys).  Trent sends a data
    party exactly one message, the sum, and only after he holds every release: nothing he sends can shape
    a release (no block, no start vector, nothing data-dependent before it)."""
    _, sk = keys512
    M = spectral_gap_data(1, k=6, n=40)
    params = cov_params(rows=6, max_samples=40)
    net, res = run(split(M, 15), params, sk=sk)
    for party in ("party1", "party2"):
        sent = sorted(t for s, r, t, _, _ in net.transcript if s == party)
        assert sent == sorted(["dims", COV_TAG] + (["keypair", "public_key"] if party == "party1" else [])), sent
    order = [(s, t) for s, r, t, _, _ in net.transcript]
    from_trent = [i for i, (s, t) in enumerate(order) if s == "trent"]
    assert [order[i][1] for i in from_trent] == [COV_SUM_TAG, COV_SUM_TAG]
    releases = [i for i, (s, t) in enumerate(order) if t == COV_TAG]
    assert len(releases) == 2 and max(releases) < min(from_trent)
    assert res["trent"].rounds == 1 and res["trent"].x is None and res["trent"].n_per_party == []
    assert dp_release_tag(params) == COV_TAG


def test_a_malicious_trent_changes_the_output_never_the_release(keys512):
    """A Trent who sends the parties something else than the sum (here: party1's own release doubled, re-
    encrypted) changes what they compute from it, never what they released: with the same roots each party's
    release is bit for bit the honest run's.  A sum of the wrong size is refused."""
    _, sk = keys512
    M = spectral_gap_data(2, k=6, n=60)
    params = cov_params(rows=6, max_samples=60)
    roots = [Randomness.from_seed(21), Randomness.from_seed(22)]
    honest, res_h = run(split(M, 25), params, sk=sk, seeds=roots)
    L = 6 * 7 // 2

    def forge(tag, data, pk):
        if tag == COV_SUM_TAG:
            return (
                EncryptedVector.encrypt(
                    pk, np.arange(L, dtype=float), frac_bits=params.release_frac_bits(), packing=params.packing(pk)
                )
                .to_proto()
                .SerializeToString()
            )
        return data

    evil, res_e = run(split(M, 25), params, sk=sk, seeds=roots, rewrite=forge)
    for p in ("party1", "party2"):
        assert np.array_equal(release(honest, sk, params, p), release(evil, sk, params, p)), p
    assert res_e["party1"].u != res_h["party1"].u

    def short(tag, data, pk):
        if tag == COV_SUM_TAG:
            return (
                EncryptedVector.encrypt(
                    pk, np.ones(L - 1), frac_bits=params.release_frac_bits(), packing=params.packing(pk)
                )
                .to_proto()
                .SerializeToString()
            )
        return data

    with pytest.raises(Exception, match="final/cov from trent"):
        run(split(M, 25), params, sk=sk, rewrite=short, timeout=30)


def test_replay_with_the_same_root_releases_the_same_values(keys512):
    _, sk = keys512
    M = spectral_gap_data(3, k=6, n=50)
    params = cov_params(rows=6, max_samples=50)
    roots = [Randomness.from_seed(11), Randomness.from_seed(12)]
    a = run(split(M, 20), params, sk=sk, seeds=roots)[0]
    b = run(split(M, 20), params, sk=sk, seeds=roots)[0]
    c = run(split(M, 20), params, sk=sk, seeds=[Randomness.from_seed(13), roots[1]])[0]
    assert np.array_equal(release(a, sk, params, "party1"), release(b, sk, params, "party1"))
    assert not np.array_equal(release(a, sk, params, "party1"), release(c, sk, params, "party1"))


@pytest.mark.parametrize("k,ns", [(6, (20, 30)), (9, (10, 12, 14))])
def test_traffic_envelope_covers_every_message_of_the_covariance_mode(keys512, k, ns):
    """N releases of k(k+1)/2 values to Trent; their sum and the key pair to a party."""
    _, sk = keys512
    rng = np.random.default_rng(k)
    blocks = [rng.normal(size=(k, n)) * 0.2 for n in ns]
    params = cov_params(n_parties=len(ns), rows=k, max_samples=max(ns))
    net, _ = run(blocks, params, sk=sk)
    for role in ["trent", *params.data_roles]:
        env = params.traffic_envelope(role)
        got = [len(d) for *_, d in net.received_by(role)]
        assert max(got) <= env.message_bytes and sum(got) <= env.session_bytes and len(got) <= env.tags, role
        # the same session in the power mode (T = 10 rounds of k values) receives less than the covariance
        # envelope only when k(k+1)/2 > 10·k·b·(T+1)/T -- not here: both are a few ciphertexts
        assert env.session_bytes < 4 * sum(got) + 4096, role


# ------------------------------------------------------------------ auto, from public parameters only
def test_auto_picks_covariance_while_it_fits_and_the_power_method_beyond():
    assert cov_params(rows=20).dp_mode == "covariance"
    assert cov_params(rows=255).covariance_length <= COV_AUTO_VALUES
    assert cov_params(rows=255).dp_mode == "covariance"
    assert cov_params(rows=256).dp_mode == "power"
    assert cov_params().dp_mode == "power"  # rows unset: k <= max_rows = 1000
    assert cov_params(max_rows=100).dp_mode == "covariance"
    assert cov_params(rows=20, iterations=5).dp_mode == "power"  # a power-mode parameter asks for it
    assert cov_params(rows=20, gap_ratio=0.5).dp_mode == "power"
    assert cov_params(rows=500, dp_method="covariance").dp_mode == "covariance"
    assert cov_params(rows=20, dp_method="power").dp_mode == "power"
    assert PowerIterationParams(n_parties=2).dp_mode is None
    assert cov_params(rows=500).dp_rounds == DP_ITERATIONS and cov_params(rows=20).dp_rounds == 1


def test_rounds_follow_the_public_gap_ratio_and_never_the_data(keys512):
    """T from gap_ratio γ and the public k: the least T with γ^T·√k <= 0.01.  Fewer rounds when the gap is
    larger (0.19: 4 rounds at k = 20, against the fixed 10), more when it is small (0.82: 31); iterations
    overrides.  Two data sets give the same T, and the parties make exactly that many releases."""
    assert dp_rounds_for_gap(0.19, 20) == 4 and dp_rounds_for_gap(0.82, 20) == 31
    assert [dp_rounds_for_gap(g, 20) for g in (0.1, 0.3, 0.5, 0.7, 0.9)] == sorted(
        dp_rounds_for_gap(g, 20) for g in (0.1, 0.3, 0.5, 0.7, 0.9)
    )
    for g in (0.1, 0.5, 0.9):
        T = dp_rounds_for_gap(g, 20)
        assert g**T * math.sqrt(20) <= 0.01 < g ** (T - 1) * math.sqrt(20)
    assert cov_params(rows=20, gap_ratio=0.19).dp_rounds == 4
    assert cov_params(rows=20, gap_ratio=0.19, iterations=7).dp_rounds == 7
    assert cov_params(gap_ratio=0.5).dp_rounds == dp_rounds_for_gap(0.5, 1000)  # k unknown: max_rows
    _, sk = keys512
    params = cov_params(rows=6, max_samples=300, gap_ratio=0.3)
    for seed in (1, 2):
        M = spectral_gap_data(seed, k=6, n=300) * (1 + seed)
        _, res = run(split(M, 100), params, sk=sk)
        assert res["party1"].rounds == res["trent"].rounds == dp_rounds_for_gap(0.3, 6)
        assert res["party1"].dp["dp_method"] == "power"


def test_a_small_gap_with_its_rounds_converges_from_every_start(keys512):
    """The issue's failing case, at the protocol's level: λ₂/λ₁ ≈ 0.84, epsilon = 1, the power mode with
    gap_ratio = 0.86 (a bound on the data's ratio: 41 rounds from public parameters) -- every one of 5 runs
    (5 noise roots) has u_1 |cos| >= 0.99; the covariance mode (auto) too."""
    _, sk = keys512
    M = small_gap_data(0)
    lam = np.linalg.eigvalsh(M @ M.T)[::-1]
    assert 0.75 < lam[1] / lam[0] < 0.86
    u_ref = top_eigenvectors(M, 1)[:, 0]
    for params in (cov_params(rows=20, max_samples=20_000, gap_ratio=0.86), cov_params(rows=20, max_samples=20_000)):
        worst = min(
            abs(
                np.dot(
                    run(
                        split(M, 9_000),
                        params,
                        sk=sk,
                        trent_seed=Randomness.from_seed(50 + i),
                        seeds=[Randomness.from_seed(60 + i), Randomness.from_seed(70 + i)],
                    )[1]["party1"].u,
                    u_ref,
                )
            )
            for i in range(5)
        )
        assert worst >= 0.99, (params.dp_mode, worst)


# ------------------------------------------------------------------ the empirical privacy audit
def _audit(cal, params, trials: int, seed: int) -> float:
    """Neighbouring matrices A and A plus one column m = C·e_1 (it moves the release's first value, the
    (1,1) entry, by C²: the whole sensitivity).  Each trial is the party's one release as the protocol
    computes it (the clipped kernel, packing, the exact discrete Gaussian on its grid, the clamp); the
    distinguisher is the release's first value, the likelihood-ratio test for this shift."""
    k = 3
    rng = np.random.default_rng(seed)
    A = rng.normal(size=(k, 6)) * 0.3
    A1 = np.column_stack([A, params.column_norm * np.eye(k)[:, 0]])
    limit = noisy_limit(params)
    out = []
    for i, data in enumerate((A, A1)):
        v = covariance_pack(clipped_gram_block(data, np.eye(k), params.column_norm)[0])
        mech = dp_noise(params, cal, v.shape, Randomness.from_seed(1000 * seed + i), "party1", "cov")
        W = np.clip(mech.randomise_many(v, trials), -limit, limit).reshape(trials, v.size)
        out.append(W[:, 0])
    return _epsilon_lower_bound(out[0], out[1], float(params.delta), alpha=0.05)


def test_empirical_audit_of_the_one_release_and_a_tenfold_noise_bug():
    """200,000 releases on each of two neighbouring matrices at epsilon = 1, delta = 1e-6: the audit's 95 %
    lower bound on epsilon stays below 1; against sigma/10 it certifies far above 1."""
    params = cov_params(rows=3)
    cal = dp_calibration(params)
    assert cal.method == "covariance"
    honest = _audit(cal, params, 200_000, seed=1)
    assert honest < 1.0, honest
    buggy = _audit(dataclasses.replace(cal, party_sigma=cal.party_sigma / 10), params, 200_000, seed=2)
    assert buggy > 1.0, buggy


def test_a_covariance_session_is_refused_when_k_exceeds_its_bound():
    with pytest.raises(InvalidMessage, match="needs k <= 4096"):
        cov_params(rows=4097, dp_method="covariance").validate()
