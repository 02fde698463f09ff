"""Per-term log-domain LOGSUM (smcdp.primitives.logsum): its steps in the clear, the layout, and the
standalone secure pair over the in-memory network -- exact for weights of any magnitude (issue 16)."""

from __future__ import annotations

import asyncio
import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from smcdp.crypto.obfuscation import ObfuscatorPool
from smcdp.crypto.threads import CryptoThreads
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import CryptoOverflow, InvalidMessage
from smcdp.primitives import logsum as ls
from smcdp.primitives.rng import Drbg, DrbgRandom, protocol_rng
from tests.unit.protocols.keyword_util import run_pair

F = 40
TINY = 5e-324
LOG_W = st.one_of(st.floats(math.log(TINY), 0.0), st.sampled_from([math.log(TINY), math.log(1e-300), 0.0]))


class _Key:
    """Just what LogsumLayout.make reads of a public key (no encryption in the clear tests)."""

    def __init__(self, bits: int) -> None:
        self.bits = bits
        self.max_int = (1 << bits) // 3


def clear_logsum(log_w, ell, params: ls.MaskParams, rng: random.Random) -> tuple[int, ls.LogsumLayout]:
    """One LOGSUM ln Σ_l w_l e^{ℓ_l} through the protocol's integer steps, the homomorphic sum computed in the
    clear (Σ k·ê + ν is what Paillier returns while the slot bound holds).  Returns Bob's unmasked result."""
    n = len(log_w)
    lay = ls.LogsumLayout.make(params, n, _Key(2048))
    K, psi = lay.mask_int, params.offset_int
    M = ls.uniform_ints(rng, n, psi)  # Bob's masks of Alice's values
    L = [None if x == -math.inf else ls.fx(x, F) + m for x, m in zip(ell, M)]
    omega = ls.uniform_ints(rng, 1, psi)[0]
    sigma = ls.uniform_ints(rng, n, K)
    c = ls.term_offsets([ls.fx(x, F) for x in log_w], M, omega, sigma)  # (E) Bob
    y = [None if v is None else v + ci for v, ci in zip(L, c)]
    e, m = ls.exponentiate_terms(y, lay)  # (E) Alice
    k = ls.term_weights(sigma, lay)  # (W) Bob
    u = sum(ki * ei for ki, ei in zip(k, e)) + ls.smudging(rng, lay, 1)[0]
    assert 0 <= u <= lay.max_sum < 1 << (lay.slot_bits - 1)  # slot never overflows
    if m is None:
        return None, lay
    return ls.logarithm(u, m, lay) - omega + K, lay  # (L) Alice, Bob unmasks


def bound(n: int, params: ls.MaskParams) -> float:
    """docs/protocols/keyword.md §bound: δ = 1.0001(|ε_a| + η) + e_ln, η ≤ 0.75·2^−p(1+2^−40) + 2^−51, plus the
    grid rounding of the n inputs (ε_a per term, ≤ 2^−F each)."""
    eta = 0.75 * 2.0**-params.precision_bits * (1 + 2.0**-40) + 2.0**-51
    return 1.0001 * (2.0**-41 + 2.0**-43 + eta) + 2.0**-41 + 2.0**-47 + 2.0**-F


@settings(max_examples=300, deadline=None)
@given(data=st.data(), n=st.integers(1, 12))
def test_logsum_steps_in_the_clear_are_exact_for_any_weights(data, n):
    params = ls.MaskParams().validate()
    log_w = [data.draw(LOG_W) for _ in range(n)]
    ell = [data.draw(st.one_of(st.floats(-5000, 50), st.just(-math.inf))) for _ in range(n)]
    got, _ = clear_logsum(log_w, ell, params, random.Random(data.draw(st.integers(0, 2**32))))
    want = logsumexp(np.array(log_w) + np.array(ell))
    if want == -math.inf:
        assert got is None  # every term an exact zero: Alice knows, nothing leaks
        return
    assert abs(got / 2.0**F - want) <= bound(n, params), (got / 2.0**F, want)


@settings(max_examples=200, deadline=None)
@given(
    K=st.floats(0, 8),
    p=st.integers(20, 40),
    lam=st.integers(20, 40),
    n=st.integers(1, 1000),
    bits=st.sampled_from([512, 1024, 2048, 3072]),
)
def test_layout_never_overflows_or_refuses_clearly(K, p, lam, n, bits):
    params = ls.MaskParams(mask_nats=K, precision_bits=p, smudge_bits=lam).validate()
    try:
        lay = ls.LogsumLayout.make(params, n, _Key(bits))
    except CryptoOverflow as exc:
        assert "use a key of at least" in str(exc)
        return
    assert n * (1 << (lay.weight_bits + lay.exp_bits)) + (1 << lay.smudge_bits) < 1 << (lay.slot_bits - 1)
    assert lay.slots >= 1 and lay.slots * lay.slot_bits <= bits


def test_weights_span_only_e_2k():
    params = ls.MaskParams()
    lay = ls.LogsumLayout.make(params, 4, _Key(2048))
    K = lay.mask_int
    k = ls.term_weights([-K, 0, K - 1], lay)
    assert k[0] == 1 << lay.weight_bits
    assert math.isclose(k[2] / k[0], math.exp(-2 * params.mask_nats), rel_tol=1e-9)


def _pools(sk):
    return ObfuscatorPool.for_private_key(sk, background=False), ObfuscatorPool.for_public_key(
        sk.public_key, background=False
    )


def run_secure_logsum(sk, logs, A, seed=9):
    pk = sk.public_key
    params = ls.MaskParams()
    vec = EncryptedVector.encrypt(pk, logs, frac_bits=F)
    apool, bpool = _pools(sk)
    try:
        res, _ = run_pair(
            lambda ch: ls.secure_logsum_alice(ch, "bob", sk, params, apool, "s", length=len(logs)),
            lambda ch: ls.secure_logsum_bob(ch, "alice", vec, A, params, bpool, protocol_rng(seed, "t"), "s"),
        )
    finally:
        apool.close()
        bpool.close()
    return res["bob"].decrypt(sk)


def test_secure_logsum_with_weights_down_to_the_smallest_double(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(7)
    logs = np.concatenate([rng.normal(size=5) * 3 - 500, rng.normal(size=5) * 3 - 2000])
    A = np.zeros((5, 10))
    A[0, :5] = rng.random(5)
    A[1, :3] = [TINY, 1.0, 1e-300]
    A[2, 5:] = rng.random(5)
    A[3, 7] = 0.25
    A[4, [0, 9]] = [TINY, 1.0]  # the tiny weight's term dominates: e^{−744} · e^{−500} ≫ e^{−2000}
    got = run_secure_logsum(sk, logs, A)
    with np.errstate(divide="ignore"):
        want = np.array([logsumexp(logs + np.log(A[r])) for r in range(len(A))])
    assert np.max(np.abs(got - want) / np.abs(want)) < 1e-9


def test_secure_logsum_matches_numpy_for_mixture_like_sums(keypair512):
    """The role the forward algorithm gives it for mixtures: ln Σ_c w_c e^{ℓ_c} per (state, frame)."""
    _, sk = keypair512
    rng = np.random.default_rng(11)
    rows, C = 6, 3
    ell = rng.normal(-60.0, 25.0, size=(rows, C))
    ell[0, 1] -= 300.0
    w = rng.dirichlet(np.ones(C), size=rows)
    w[1] = [TINY, 0.5, 0.5 - TINY]
    A = np.zeros((rows, rows * C))
    for r in range(rows):
        A[r, r * C : (r + 1) * C] = w[r]
    got = run_secure_logsum(sk, ell.reshape(-1), A)
    want = logsumexp(ell + np.log(w), axis=1)
    assert np.max(np.abs(got - want)) < 1e-8


def test_secure_logsum_refuses_a_row_without_weights(keypair512):
    pk, sk = keypair512
    vec = EncryptedVector.encrypt(pk, [0.0, 1.0], frac_bits=F)
    _, bpool = _pools(sk)

    async def bob(ch):
        await ls.secure_logsum_bob(ch, "alice", vec, np.zeros((1, 2)), ls.MaskParams(), bpool, random.Random(1), "s")

    async def alice(ch):
        await ch.recv("bob", "never", object, timeout=5)

    with pytest.raises(InvalidMessage, match="every LOGSUM row needs a positive weight"):
        run_pair(alice, bob)


def test_logarithm_refuses_sums_an_honest_bob_cannot_produce():
    lay = ls.LogsumLayout.make(ls.MaskParams(), 3, _Key(2048))
    with pytest.raises(InvalidMessage, match="outside what an honest weighted sum"):
        ls.logarithm(1, 0, lay)
    with pytest.raises(InvalidMessage):
        ls.logarithm(lay.max_sum + 1, 0, lay)


def test_mask_params_validation():
    with pytest.raises(InvalidMessage):
        ls.MaskParams(mask_nats=-1).validate()
    with pytest.raises(InvalidMessage):
        ls.MaskParams(precision_bits=4).validate()


def test_uniform_ints_range_and_seed():
    a = ls.uniform_ints(random.Random(1), 1000, 1 << 20)
    assert a == ls.uniform_ints(random.Random(1), 1000, 1 << 20)
    assert min(a) >= -(1 << 20) and max(a) < 1 << 20
    assert a != ls.uniform_ints(protocol_rng(None), 1000, 1 << 20)


def _uniform_below_one_at_a_time(rng, count, bound, offset=0):
    """The reference: each value from its own k = bits(bound − 1) bits (the top ones of ⌈k/8⌉ bytes),
    rejected and drawn again when ≥ bound."""
    k = (bound - 1).bit_length()
    nbytes = (k + 7) // 8
    out = []
    while len(out) < count:
        x = int.from_bytes(rng.randbytes(nbytes), "little") >> (8 * nbytes - k) if k else 0
        if x < bound:
            out.append(x + offset)
    return out


@settings(max_examples=200, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    count=st.integers(0, 300),
    bound=st.one_of(st.integers(1, 1 << 20), st.integers(1, 1 << 90), st.integers(0, 90).map(lambda b: 1 << b)),
    offset=st.integers(-(1 << 60), 1 << 60),
)
def test_uniform_below_is_the_one_at_a_time_rejection_draw_in_bulk(seed, count, bound, offset):
    """uniform_below equals drawing each value by itself with rejection -- the same values in the same order
    from the same byte stream (a protocol role's :class:`DrbgRandom`), on both of its paths (numpy below
    2^56, Python ints above) -- so it is exactly uniform on [0, bound); the stream is left where the reference
    leaves it."""
    a, b = (DrbgRandom(Drbg(seed.to_bytes(32, "little"))) for _ in range(2))  # a party's streams: bytes in order
    assert ls.uniform_below(a, count, bound, offset) == _uniform_below_one_at_a_time(b, count, bound, offset)
    assert a.getrandbits(64) == b.getrandbits(64)


def test_uniform_below_is_uniform_and_reads_no_more_than_it_needs():
    """Counts of 60,000 draws on 3 and 1000 values pass a chi-square test (p > 10^-6); a power-of-two bound
    rejects nothing (exactly count·⌈k/8⌉ bytes read); a bound of 1 is all offsets; a bound below 1 is refused."""
    from scipy.stats import chisquare

    for bound in (3, 1000):
        v = ls.uniform_below(random.Random(7), 60000, bound)
        assert chisquare(np.bincount(v, minlength=bound)).pvalue > 1e-6
    a, b = (DrbgRandom(Drbg(bytes(32))) for _ in range(2))
    ls.uniform_below(a, 1000, 1 << 44)
    b.randbytes(1000 * 6)
    assert a.getrandbits(64) == b.getrandbits(64)
    assert ls.uniform_below(random.Random(1), 4, 1, offset=-5) == [-5] * 4
    with pytest.raises(ValueError):
        ls.uniform_below(random.Random(1), 4, 0)


# ------------------------------------------------------------------------------- the spread layout
def _spread_in_the_clear(es, weights, nu, lay, rng):
    """Alice's spread plaintexts, Bob's outputs computed on them in the clear (Σ_ℓ k·E_ℓ + noise: what
    Paillier returns while no slot overflows), and what Alice reads back."""
    E = ls.spread_terms(es, lay)
    counts = ls.spread_chunks([len(w) for w in weights], lay)
    noise = ls.spread_noise(rng, weights, nu, lay)
    S, out, pos = lay.slots, [], 0
    for c, L in enumerate(counts):
        for i in range(c * S, min((c + 1) * S, len(weights))):
            out.append(sum(k * E[pos + l] for l, k in enumerate(weights[i])) + noise[i])
        pos += L
    assert pos == len(E)
    return out, ls.unspread_sums(out, lay)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), n_sums=st.integers(1, 25), bits=st.sampled_from([512, 1024, 2048]))
def test_spread_layout_gives_each_sum_exactly_and_covers_the_cross_terms(data, n_sums, bits):
    """Each sum reads back exactly Σ k·ê + ν (what the packed layout gives), at the largest values too; every
    other slot of its chunk holds the cross term plus noise of λ_g more bits, and no slot overflows."""
    params = ls.MaskParams()
    n_terms = data.draw(st.integers(2, 64))
    lay = ls.LogsumLayout.make(params, n_terms, _Key(bits), garbage_bits=params.smudge_bits + 8)
    top = data.draw(st.booleans())  # every value at its bound: the overflow case
    Wmax, Emax = 1 << lay.weight_bits, 1 << lay.exp_bits
    lens = [data.draw(st.integers(1, n_terms)) for _ in range(n_sums)]
    es = [[Emax if top else data.draw(st.integers(0, Emax)) for _ in range(m)] for m in lens]
    ks = [[Wmax if top else data.draw(st.integers(1, Wmax)) for _ in range(m)] for m in lens]
    nu = [(1 << lay.smudge_bits) - 1 if top else data.draw(st.integers(0, (1 << lay.smudge_bits) - 1)) for _ in lens]
    rng = random.Random(data.draw(st.integers(0, 2**32)))
    out, got = _spread_in_the_clear(es, ks, nu, lay, rng)
    assert got == [sum(k * e for k, e in zip(kw, ew)) + v for kw, ew, v in zip(ks, es, nu)]
    S, s, mask = lay.slots, lay.slot_bits, (1 << lay.slot_bits) - 1
    assert S >= 2 and S * s <= bits
    for i, P in enumerate(out):
        assert 0 <= P < 1 << (S * s)  # below n/3: decrypts as it is
        for j in range(i - i % S, min(i - i % S + S, n_sums)):
            slot = (P >> (s * (j % S))) & mask
            assert slot < 1 << (s - 1)  # no carry into the next slot
            if j != i:
                cross = sum(k * e for k, e in zip(ks[i], es[j]))
                assert cross <= lay.max_sum and slot >= cross  # the cover is non-negative and added


def test_spread_cover_is_wide_enough_to_hide_the_cross_terms():
    """The noise on a cross slot is uniform on [0, 2^{bits(max_sum)+λ_g}): the statistical distance of
    cross + noise from noise alone is at most max_sum / 2^{bits(max_sum)+λ_g} < 2^{−λ_g}."""
    params = ls.MaskParams()
    lay = ls.LogsumLayout.make(params, 64, _Key(2048), garbage_bits=38)
    assert lay.garbage_mask_bits == lay.max_sum.bit_length() + 38
    rng = random.Random(3)
    weights = [[1] * 64 for _ in range(2 * lay.slots)]
    noise = ls.spread_noise(rng, weights, [0] * len(weights), lay)
    s, mask = lay.slot_bits, (1 << lay.slot_bits) - 1
    covers = [(z >> (s * j)) & mask for i, z in enumerate(noise) for j in range(lay.slots) if j != i % lay.slots]
    assert len(covers) == 2 * lay.slots * (lay.slots - 1)
    assert all(0 <= c < 1 << lay.garbage_mask_bits for c in covers)
    assert max(c.bit_length() for c in covers) >= lay.garbage_mask_bits - 8  # drawn on the full range
    own = [(z >> (s * (i % lay.slots))) & mask for i, z in enumerate(noise)]
    assert own == [0] * len(noise)  # ν = 0 here: nothing but ν in the sum's own slot


def test_spread_weighted_sums_under_paillier(keypair512):
    """Bob's spread step on real ciphertexts = the clear computation; Alice reads every sum exactly."""
    _, sk = keypair512
    pk = sk.public_key
    params = ls.MaskParams()
    lay = ls.LogsumLayout.make(params, 24, pk, garbage_bits=params.smudge_bits + 8)
    assert lay.packing.packed
    r = random.Random(5)
    lens = [24, 7, 24, 1, 13]
    es = [[r.randrange(1 << lay.exp_bits) for _ in range(m)] for m in lens]
    ks = [ls.term_weights(ls.uniform_ints(r, m, lay.mask_int), lay) for m in lens]
    nu = ls.smudging(r, lay, len(lens))
    apool, bpool = _pools(sk)
    threads = CryptoThreads(2, name="test-spread")
    try:
        cts = [apool.encrypt(x) for x in ls.spread_terms(es, lay)]
        assert len(cts) == sum(ls.spread_chunks(lens, lay)) < sum(lens)
        noise = ls.spread_noise(random.Random(1), ks, nu, lay)
        u = asyncio.run(ls.aspread_weighted_sums(pk, cts, ks, noise, lay, bpool, threads))
    finally:
        threads.close()
        apool.close()
        bpool.close()
    got = ls.unspread_sums([sk.raw_decrypt_signed(c) for c in u], lay)
    assert got == [sum(k * e for k, e in zip(kw, ew)) + v for kw, ew, v in zip(ks, es, nu)]
