"""Issue 16: the secure forward algorithm is exact for every valid HMM (property tests, real Paillier).

Random models with transitions, start and mixture weights drawn log-uniformly down to the smallest
double (5e-324, and 1e-300 as the issue names), exact zeros, one-state models, "bridge" models whose only
path crosses a transition of 5e-324, discrete / diagonal / full / mixture emissions; a 1,000-frame
utterance.  Secure == plaintext (``smcdp.speech.forward``) within 1e-6 relative; an impossible sequence
(P = 0) gives LOG_ZERO exactly where the plaintext gives −∞.

Tolerance: ``|got − want| ≤ 1e-6·|want| + 1e-6``.  The absolute 1e-6 nats covers ℓ = 0 exactly (a one-state,
one-symbol model), where no finite-precision method can promise a relative error; the proven bound
(docs/protocols/keyword.md) is (T + 1)·7·10⁻¹⁰ nats plus the Gaussian emission rounding, far below it
for every case here.  512-bit keys: an explicit test-only opt-in (keypair512).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from smcdp.errors import CryptoOverflow
from smcdp.protocols.secure_forward import LOG_ZERO, ForwardParams, Shape, forward_alice, forward_bob
from smcdp.speech import score_models
from smcdp.speech.models import HMM, KeywordModels
from tests.unit.protocols.keyword_util import bounds_for, run_pair

TINY = 5e-324
REL, ABS = 1e-6, 1e-6
#: log-uniform down to the smallest double, with the named extremes drawn often
LOG_W = st.one_of(
    st.floats(-744.4, 0.0, allow_nan=False),
    st.floats(math.log(1e-300), 0.0, allow_nan=False),
    st.sampled_from([math.log(TINY), math.log(2.2250738585072014e-308), math.log(1e-300), 0.0]),
)


@st.composite
def stochastic(draw, rows: int, cols: int, zero_p: float = 0.3):
    """Rows of probabilities: log-uniform entries, exact zeros with probability zero_p, ≥ 1 positive."""
    out = np.zeros((rows, cols))
    for r in range(rows):
        lw = np.array([draw(LOG_W) for _ in range(cols)])
        zero = np.array([draw(st.floats(0, 1)) < zero_p for _ in range(cols)])
        if zero.all():
            zero[draw(st.integers(0, cols - 1))] = False
        p = np.where(zero, 0.0, np.exp(np.where(zero, 0.0, lw - lw[~zero].max())))
        p = p / p.sum()
        assume(abs(p.sum() - 1.0) <= 1e-9 and np.all(np.isfinite(p)))
        out[r] = p
    return out


@st.composite
def transitions(draw, n: int):
    kind = draw(st.sampled_from(["dense", "left-right", "random", "bridge"]))
    A = draw(stochastic(n, n))
    if kind == "dense" or n == 1:
        return kind, A
    if kind == "bridge":  # the only path crosses tiny transitions
        A = np.zeros((n, n))
        for i in range(n):
            a = draw(st.sampled_from([TINY, 1e-300, 1e-200, 0.5])) if i + 1 < n else 0.0
            A[i, i] = 1.0 - a
            if i + 1 < n:
                A[i, i + 1] = a
        return kind, A
    if kind == "left-right":
        mask = np.eye(n, dtype=bool) | np.eye(n, k=1, dtype=bool)
    else:
        mask = np.array([[draw(st.booleans()) for _ in range(n)] for _ in range(n)])
        for i in range(n):
            if not mask[i].any():
                mask[i, draw(st.integers(0, n - 1))] = True
    A = np.where(mask, A, 0.0)
    for i in range(n):
        if A[i].sum() == 0.0:  # the mask removed every positive entry of the row
            A[i, np.flatnonzero(mask[i])[0]] = 1.0
    A = A / A.sum(1, keepdims=True)
    return kind, A


@st.composite
def keyword_models(draw, kind: str, max_models=2, max_states=4, max_dim=3, max_mix=3, max_sym=5):
    D = draw(st.integers(1, max_models))
    N = draw(st.integers(1, max_states))
    d = draw(st.integers(1, max_dim))
    M = draw(st.integers(1, max_sym))
    C = draw(st.integers(1, max_mix))
    hmms = []
    for _ in range(D):
        topo, A = draw(transitions(N))
        sp = np.eye(N)[0] if topo == "bridge" else draw(stochastic(1, N))[0]
        if kind == "discrete":
            hmms.append(HMM(sp, A, emissionprob=draw(stochastic(N, M, 0.2))))
            continue
        floats = lambda k, lo, hi: np.array(draw(st.lists(st.floats(lo, hi), min_size=k, max_size=k)))  # noqa: E731
        if kind == "diag":
            hmms.append(
                HMM(sp, A, means=floats(N * d, -6, 6).reshape(N, d), covars=10.0 ** floats(N * d, -2, 2).reshape(N, d))
            )
        elif kind == "full":
            B = floats(N * d * d, -2, 2).reshape(N, d, d)
            hmms.append(
                HMM(
                    sp, A, means=floats(N * d, -6, 6).reshape(N, d), covars=B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(d)
                )
            )
        else:
            hmms.append(
                HMM(
                    sp,
                    A,
                    means=floats(N * C * d, -6, 6).reshape(N, C, d),
                    covars=10.0 ** floats(N * C * d, -2, 2).reshape(N, C, d),
                    weights=draw(stochastic(N, C, 0.3)),
                )
            )
    return KeywordModels.from_hmms([f"m{i}" for i in range(D)], hmms)


@st.composite
def observations(draw, models: KeywordModels, max_T=12):
    T = draw(st.integers(1, max_T))
    if models.kind == "discrete":
        return np.array(draw(st.lists(st.integers(0, models.n_symbols - 1), min_size=T, max_size=T)))
    d = models.n_features
    return np.array(draw(st.lists(st.floats(-8, 8), min_size=T * d, max_size=T * d))).reshape(T, d)


def secure(models, X, sk, params=None, seed=None):
    params = params or ForwardParams(**bounds_for(models, X))
    pk = sk.public_key
    res, _ = run_pair(
        lambda ch: forward_alice(ch, X, params, private_key=sk),
        lambda ch: forward_bob(ch, models, params, public_key=pk, seed=seed),
        timeout=600,
    )
    return np.asarray(res["bob"].log_likelihoods.decrypt(sk), dtype=float)


def check(models, X, got):
    want = score_models(models, X)
    for g, w in zip(got, want):
        if w == -np.inf:
            assert abs(g - LOG_ZERO) <= 2.0**40 + 8 and g < -(2.0**41), (g, w)
        else:
            assert abs(g - w) <= REL * abs(w) + ABS, (g, w, abs(g - w))


def possible_somewhere(models, X) -> bool:
    return bool(np.any(np.isfinite(score_models(models, X))))


SETTINGS = dict(
    deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]
)


@pytest.mark.parametrize("kind,examples", [("discrete", 100), ("diag", 60), ("full", 30), ("gmm-diag", 50)])
def test_random_models_secure_equals_plaintext(kind, examples, keypair512):
    _, sk = keypair512
    ran = []

    @settings(max_examples=examples, database=None, **SETTINGS)
    @given(data=st.data())
    def prop(data):
        models = data.draw(keyword_models(kind))
        X = data.draw(observations(models))
        assume(possible_somewhere(models, X))  # all impossible: Alice refuses (tested below)
        m = data.draw(st.integers(1, 3), label="frames_per_round")
        shape = Shape.of_models(models, 0)
        while shape.paths_beyond(ForwardParams(frames_per_round=m)) is not None:
            m -= 1  # refused for this topology (tested elsewhere)
        check(models, X, secure(models, X, sk, ForwardParams(frames_per_round=m, **bounds_for(models, X))))
        ran.append((models.n_states, len(X), m))

    prop()
    assert len(ran) >= examples // 2, f"only {len(ran)} examples ran"


def test_bridge_through_the_smallest_double(keypair512):
    """The only path crosses a_01 = 5e-324 (ln = −744.4): today's range_bits dropped it."""
    _, sk = keypair512
    A = np.array([[1.0 - TINY, TINY], [0.0, 1.0]])
    hmm = HMM(np.array([1.0, 0.0]), A, emissionprob=np.array([[1.0, 0.0], [0.0, 1.0]]))
    other = HMM(np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.5, 0.5]]), emissionprob=np.full((2, 2), 0.5))
    models = KeywordModels.from_hmms(["bridge", "flat"], [hmm, other])
    X = np.array([0, 0, 1, 1])
    got = secure(models, X, sk)
    want = score_models(models, X)
    assert want[0] == pytest.approx(math.log(TINY), rel=1e-12)
    check(models, X, got)


def test_one_state_one_symbol_model_scores_exactly_zero(keypair512):
    _, sk = keypair512
    hmm = HMM(np.array([1.0]), np.array([[1.0]]), emissionprob=np.array([[1.0]]))
    models = KeywordModels.from_hmms(["sure"], [hmm])
    got = secure(models, np.zeros(7, dtype=int), sk)
    assert abs(got[0]) <= ABS


def test_issue_16_em_like_models_with_transitions_down_to_1e_297(keypair512):
    """Dense 5-state diagonal models whose transition rows span 1 … 1e-297 (EM-trained HMMs do)."""
    _, sk = keypair512
    rng = np.random.default_rng(16)
    hmms = []
    for _ in range(3):
        A = 10.0 ** rng.uniform(-297, 0, (5, 5))
        A[np.arange(5), rng.integers(0, 5, 5)] = 1.0
        A /= A.sum(1, keepdims=True)
        hmms.append(HMM(np.full(5, 0.2), A, means=rng.normal(size=(5, 4)) * 3, covars=rng.uniform(0.3, 2, (5, 4))))
    models = KeywordModels.from_hmms(["a", "b", "c"], hmms)
    X = rng.normal(size=(40, 4)) * 3
    check(models, X, secure(models, X, sk))


@pytest.mark.slow  # ~10 CPU-s (not in make test-quick)
@pytest.mark.parametrize("kind,N", [("discrete", 5), ("diag", 1), ("diag", 5)])
def test_a_1000_frame_utterance(kind, N, keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(1000 + N)
    A = 10.0 ** rng.uniform(-300, 0, (N, N))
    A[np.arange(N), np.arange(N)] = 1.0
    A /= A.sum(1, keepdims=True)
    sp = np.full(N, 1.0 / N)
    if kind == "discrete":
        hmm = HMM(sp, A, emissionprob=rng.dirichlet(np.ones(4), N))
        X = rng.integers(0, 4, 1000)
    else:
        hmm = HMM(sp, A, means=rng.normal(size=(N, 3)), covars=rng.uniform(0.5, 2, (N, 3)))
        X = rng.normal(size=(1000, 3)) * 2
    models = KeywordModels.from_hmms(["long"], [hmm])
    check(models, X, secure(models, X, sk))


def test_zero_mixture_weights_are_structural_zeros(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(5)
    w = np.array([[0.0, 1.0, 0.0], [TINY, 0.5, 0.5]])
    w[1] /= w[1].sum()
    hmm = HMM(
        np.array([0.6, 0.4]),
        np.array([[0.9, 0.1], [0.0, 1.0]]),
        means=rng.normal(size=(2, 3, 2)),
        covars=rng.uniform(0.5, 2, (2, 3, 2)),
        weights=w,
    )
    models = KeywordModels.from_hmms(["mix"], [hmm])
    X = rng.normal(size=(10, 2))
    check(models, X, secure(models, X, sk))


def test_every_model_impossible_is_a_clear_error(keypair512):
    _, sk = keypair512
    hmm = HMM(np.array([1.0]), np.array([[1.0]]), emissionprob=np.array([[1.0, 0.0]]))
    models = KeywordModels.from_hmms(["never"], [hmm])
    with pytest.raises(Exception, match="impossible under every model"):
        secure(models, np.array([0, 1]), sk)


def test_a_model_fixed_point_cannot_hold_is_refused_up_front(keypair512):
    """Variances of 1e-22 make coefficients ≈ 5e21 > 2^64: Bob refuses before any ciphertext, naming
    model, state and the fix; nothing is approximated."""
    _, sk = keypair512
    hmm = HMM(
        np.array([1.0, 0.0]),
        np.array([[0.5, 0.5], [0.0, 1.0]]),
        means=np.zeros((2, 2)),
        covars=np.array([[1.0, 1.0], [1e-22, 1.0]]),
    )
    models = KeywordModels.from_hmms(["spike"], [hmm])
    with pytest.raises(CryptoOverflow, match=r"model 'spike', state 1: .*variance.*--min-covar"):
        secure(models, np.zeros((3, 2)), sk)
