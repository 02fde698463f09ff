"""Secure forward algorithm = plaintext forward algorithm (hmmlearn's score) within 1e-6 relative."""

from __future__ import annotations

import numpy as np
import pytest

from smcdp.errors import CryptoOverflow, InputRejected, InvalidMessage
from smcdp.protocols.secure_forward import (
    LOG_ZERO,
    ForwardParams,
    Plan,
    Shape,
    forward_alice,
    forward_bob,
)
from smcdp.speech import load_models, score_models
from smcdp.speech.models import KeywordModels, to_hmmlearn
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.keyword_util import DATA, bounds_for, run_pair, synthetic_models

REL_TOL = 1e-6


def secure_scores(models, X, sk, params=None, seed=None):
    params = params or ForwardParams(**bounds_for(models, X))
    pk = sk.public_key
    res, net = run_pair(
        lambda ch: forward_alice(ch, X, params, private_key=sk),
        lambda ch: forward_bob(ch, models, params, public_key=pk, seed=seed),
    )
    return res["bob"].log_likelihoods.decrypt(sk), res, net


def hmmlearn_scores(models, X):
    Xh = np.asarray(X).reshape(-1, 1) if models.kind == "discrete" else X
    return np.array([to_hmmlearn(models.hmm(i)).score(Xh) for i in range(models.n_words)])


def assert_close(got, want):
    assert got.shape == want.shape
    rel = np.abs(got - want) / np.abs(want)
    assert np.all(rel <= REL_TOL), f"relative errors {rel} exceed {REL_TOL}"


@pytest.mark.parametrize("kind", ["discrete", "diag", "full", "gmm-diag", "gmm-full"])
@pytest.mark.parametrize("topology", ["dense", "left-right"])
def test_synthetic_matches_hmmlearn(kind, topology, keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(hash((kind, topology)) % 2**32)
    models = synthetic_models(kind, rng, topology=topology)
    T = 25
    X = rng.integers(0, 6, T) if kind == "discrete" else rng.normal(size=(T, 4)) * 3
    got, _, _ = secure_scores(models, X, sk)
    want = hmmlearn_scores(models, X)
    assert_close(got, want)
    assert_close(got, score_models(models, X))


@pytest.mark.parametrize("kind", ["discrete", "diag", "gmm-diag"])
@pytest.mark.parametrize("topology", ["dense", "left-right"])
@pytest.mark.parametrize("m,T", [(2, 25), (2, 26), (3, 25), (4, 9), (3, 2)])
def test_rounds_of_several_frames_match_hmmlearn(kind, topology, m, T, keypair512):
    """A round of m frames (paths of m steps, one round trip) gives the forward algorithm's result, whether
    the frames fill whole rounds or the last round is shorter, and takes ⌈(T − 1)/m⌉ round trips per group."""
    _, sk = keypair512
    rng = np.random.default_rng(hash((kind, topology, m, T)) % 2**32)
    models = synthetic_models(kind, rng, topology=topology)
    X = rng.integers(0, 6, T) if kind == "discrete" else rng.normal(size=(T, 4)) * 3
    params = ForwardParams(frames_per_round=m, **bounds_for(models, X))
    if topology == "dense" and m >= 3:  # N^m paths into each of N = 4 states: more than 2m × the N² edges
        with pytest.raises(InputRejected, match="too many paths for the session's frames_per_round") as ei:
            secure_scores(models, X, sk, params)
        assert f"rounds of 3 frames would sum over {models.n_words * models.n_states**4} paths" in str(ei.value)
        return
    got, _, net = secure_scores(models, X, sk, params)
    assert_close(got, hmmlearn_scores(models, X))
    rounds = {tag.split("/")[2] for _, tag, *_ in net.received_by("bob") if tag.startswith("fw/e/")}
    assert rounds == {str(s) for s in range(0, T - 1, m)}, rounds


def test_alice_refuses_a_header_with_too_many_paths_for_the_rounds(keypair512):
    """An Alice whose session says rounds of 3 frames refuses Bob's header of dense models (64 paths into
    each of 4 states) before any ciphertext: the rounds would cost more than single steps, and the byte
    envelope counts on the bound."""
    _, sk = keypair512
    rng = np.random.default_rng(3)
    models = synthetic_models("discrete", rng, topology="dense")
    X = rng.integers(0, 6, 10)
    bounds = bounds_for(models, X)
    with pytest.raises(InvalidMessage, match="describes models whose rounds of 3 frames would sum over"):
        run_pair(
            lambda ch: forward_alice(ch, X, ForwardParams(frames_per_round=3, **bounds), private_key=sk),
            lambda ch: forward_bob(ch, models, ForwardParams(**bounds), public_key=sk.public_key),
        )


@pytest.mark.parametrize("name", ["models.npz", "models_full.npz", "models_gmm.npz"])
def test_fixture_models_98_frames(name, keypair1024):
    """The speech fixture (trained HMMs, real MFCCs, left-to-right) over a 98-frame utterance."""
    _, sk = keypair1024
    models = load_models(DATA / name)
    X = np.load(DATA / "utterance_98.npy")
    if name == "models.npz":
        models = KeywordModels.from_hmms(models.words[:4], models.hmms()[:4])
    got, _, _ = secure_scores(models, X, sk)
    assert_close(got, hmmlearn_scores(models, X))


def test_fixture_discrete(keypair512):
    _, sk = keypair512
    models = load_models(DATA / "models_discrete.npz")
    z = np.load(DATA / "discrete_test.npz")
    X = z["symbols"][: z["lengths"][0]]
    got, _, _ = secure_scores(models, X, sk)
    assert_close(got, hmmlearn_scores(models, X))


def test_long_utterance_does_not_underflow(keypair512):
    """600 frames: P(x|λ) ~ e^-5000, far below double precision; the log domain keeps it exact."""
    _, sk = keypair512
    rng = np.random.default_rng(11)
    models = synthetic_models("diag", rng, D=2, N=3, d=3, topology="left-right")
    X = rng.normal(size=(600, 3)) * 4
    got, _, _ = secure_scores(models, X, sk)
    want = hmmlearn_scores(models, X)
    assert np.all(want < -3000)
    assert_close(got, want)


def test_seeded_masks_change_alice_view_not_result(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(3)
    models = synthetic_models("diag", rng, D=2, N=3, d=3)
    X = rng.normal(size=(6, 3))
    g1, _, n1 = secure_scores(models, X, sk, seed=1)
    g2, _, n2 = secure_scores(models, X, sk, seed=2)
    assert np.max(np.abs(g1 - g2)) < 1e-8

    def first_u(net):
        return next(d for s, t, _, d in net.received_by("alice") if t == "fw/u/1/0")

    assert first_u(n1) != first_u(n2)


def test_bob_receives_only_ciphertexts_and_public_sizes(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(4)
    models = synthetic_models("full", rng, D=2, N=3, d=3)
    X = rng.normal(size=(5, 3))
    _, _, net = secure_scores(models, X, sk)
    kinds = {(t.split("/")[1], tn) for _, t, tn, _ in net.received_by("bob")}
    assert {tn for _, tn in kinds} <= {"smcdp.v1.CiphertextVector", "smcdp.v1.Ints"}
    ints = [(t, pb.Ints.FromString(d).values) for _, t, tn, d in net.received_by("bob") if tn == "smcdp.v1.Ints"]
    # the frames to prepare for (offline), then the frame count of each block (all of them: one block)
    assert ints == [("fw/plan", [5]), ("fw/blk/0", [5, 1])]


def test_alice_features_above_bound_are_clipped_not_refused(keypair512, caplog):
    """feature_bits is a proposal's: a refusal told a proposer who moved it over sessions whether Alice's largest
    |feature| reached it.  A value beyond 2^feature_bits is clipped inside the bound -- her log says so -- and the
    scores are those of the clipped frames."""
    _, sk = keypair512
    rng = np.random.default_rng(5)
    models = synthetic_models("diag", rng, D=1, N=2, d=3)
    X = rng.normal(size=(4, 3))
    X[2, 1] = 300.0
    params = ForwardParams(**{**bounds_for(models, X), "feature_bits": 8})
    with caplog.at_level("WARNING", logger="smcdp.protocols.secure_forward"):
        got, _, _ = secure_scores(models, X, sk, params)
    assert "1 feature value(s)" in caplog.text and "clipped inside it" in caplog.text
    inside = X.copy()
    inside[2, 1] = np.nextafter(256.0, 0.0)
    assert_close(got, score_models(models, inside))


def test_coefficients_above_bound_raise_overflow(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(6)
    models = synthetic_models("diag", rng, D=1, N=2, d=3)
    tiny = KeywordModels(
        models.words, models.startprob, models.transmat, means=models.means, covars=np.full_like(models.covars, 1e-7)
    )
    # an agreed coefficient size the models exceed
    with pytest.raises(CryptoOverflow, match="16-bit coefficients"):
        secure_scores(tiny, rng.normal(size=(3, 3)), sk, params=ForwardParams(coef_bits=16))
    # coef_bits="auto" (default) fits them (coefficients ≈ 5e6 < 2^24): exact, not refused -- in a box small
    # enough that no utterance of its frames reaches the score range (|x_i| < 8; the default 2^8 is refused below)
    X = rng.normal(size=(3, 3)) * 1e-3 + models.means[0, 0]
    assert np.abs(X).max() < 8
    got, _, _ = secure_scores(tiny, X, sk, params=ForwardParams(feature_bits=3, **bounds_for(tiny, X)))
    assert_close(got, score_models(tiny, X))
    # beyond 2^64 nothing fits: Bob refuses before sending anything, naming model, state and the fix
    tinier = KeywordModels(
        models.words, models.startprob, models.transmat, means=models.means, covars=np.full_like(models.covars, 1e-22)
    )
    with pytest.raises(CryptoOverflow, match=r"model 'w0', state \d.*variance.*--min-covar") as exc:
        secure_scores(tinier, rng.normal(size=(3, 3)), sk)
    assert "1e-22" not in exc.value.public_message and "w0" not in exc.value.public_message


def test_models_that_could_leave_the_score_range_are_refused_by_bob_before_anything_is_sent(keypair512):
    """Alice refuses a log-likelihood beyond ±2^40 nats, but she sees it masked (log P + ω, |ω| < 2^40): whether
    her check fired depended on her features and on Bob's offset -- with variances of 10⁻⁷, an in-box utterance
    far from the means could be refused or not by ω (a review).  Bob now refuses, before anything is sent, models
    whose log-likelihood could reach the range for some utterance of max_frames frames inside the agreed box; a
    smaller box or fewer frames admit the same models."""
    from smcdp.protocols.secure_forward import score_range

    _, sk = keypair512
    rng = np.random.default_rng(6)
    models = synthetic_models("diag", rng, D=1, N=2, d=3)
    tiny = KeywordModels(
        models.words, models.startprob, models.transmat, means=models.means, covars=np.full_like(models.covars, 1e-7)
    )
    X = np.full((3, 3), -200.0)  # inside the default box 2^8
    params = ForwardParams(**bounds_for(tiny, X))
    assert score_range(tiny, params)[1] >= 2.0**40
    assert abs(score_models(tiny, X)).max() < 2.0**41  # an utterance whose score the masked check may refuse
    with pytest.raises(InputRejected, match=r"could reach 2\^40 nats") as exc:
        secure_scores(tiny, X, sk, params=params)
    assert "frames:" not in exc.value.public_message  # the bound's values stay in Bob's log
    for bound in (2, 8):  # the bound is loose (each form at the box's corner) and grows with the box
        small = ForwardParams(feature_bits=bound, **bounds_for(tiny, X))
        assert (score_range(tiny, small)[1] < 2.0**40) is (bound == 2)


def test_wrong_feature_dimension(keypair512):
    _, sk = keypair512
    rng = np.random.default_rng(8)
    models = synthetic_models("diag", rng, D=1, N=2, d=3)
    with pytest.raises(InvalidMessage, match="features"):
        secure_scores(models, rng.normal(size=(4, 5)), sk)


def test_params_validation():
    with pytest.raises(InvalidMessage):
        ForwardParams.from_mapping({"nonsense": 1})
    with pytest.raises(InvalidMessage):
        ForwardParams(feature_bits=0).validate()
    with pytest.raises(InvalidMessage):
        Shape.from_proto(pb.Ints(values=[1, 9, 1, 1, 1, 1]))


def test_plan_left_right_and_dense(keypair512):
    """One-predecessor sums need no homomorphic work; the others are LOGSUMs sized by the in-degree."""
    pk = keypair512[0]
    lr = np.array([[[1, 1, 0], [0, 1, 1], [0, 0, 1]]], dtype=bool)
    shape = Shape("discrete", 1, 3, 1, 4, 0, np.array([[True, False, False]]), lr, None)
    plan = Plan(shape, ForwardParams(), pk)
    assert plan.preds == [[[0], [0, 1], [1, 2]]]
    assert plan.group_sums == {1: [[(0, 1), (0, 2)]]} and plan.ind.n_terms == 2
    dense = Shape("discrete", 1, 3, 1, 4, 0, np.ones((1, 3), bool), np.ones((1, 3, 3), bool), None)
    plan = Plan(dense, ForwardParams(), pk)
    assert plan.group_sums == {1: [[(0, 0), (0, 1), (0, 2)]]} and plan.ind.n_terms == 3


def test_plan_of_rounds_of_two_frames(keypair512):
    """Rounds of 2 steps sum over the paths i → i′ → j of non-zero transitions; rounds end at the even
    frames and at the last one, and only a round's last frame carries its offsets."""
    pk = keypair512[0]
    lr = np.array([[[1, 1, 0], [0, 1, 1], [0, 0, 1]]], dtype=bool)
    shape = Shape("discrete", 1, 3, 1, 4, 0, np.array([[True, False, False]]), lr, None)
    plan = Plan(shape, ForwardParams(frames_per_round=2), pk)
    assert plan.paths[2] == [[[(0, 0)], [(0, 0), (0, 1), (1, 1)], [(0, 1), (1, 1), (1, 2), (2, 2)]]]
    assert plan.group_sums == {1: [[(0, 1), (0, 2)]], 2: [[(0, 1), (0, 2)]]} and plan.ind.n_terms == 4
    assert plan.n_paths == {1: 5, 2: 8}
    assert plan.rounds(1) == [] and plan.rounds(2) == [1] and plan.rounds(6) == [2, 2, 1] and plan.rounds(7) == [2] * 3
    # frames 0..5 of a 6-frame sequence: starts, nothing, a full round, nothing, a full round, a 1-step round
    assert [plan.induction_offsets(t, 6) for t in range(6)] == [1, 0, 8, 0, 8, 5]
    assert [plan.induction_offsets(t, None) for t in range(6)] == [1, 0, 8, 0, 8, 0]  # not yet the last
    assert [plan.round_length(e) for e in (2, 4, 5, 7)] == [2, 2, 1, 1]


def test_range_bits_is_refused_with_a_clear_error():
    with pytest.raises(InvalidMessage, match="range_bits was removed"):
        ForwardParams.from_mapping({"range_bits": 16})


def test_impossible_sequence_gets_the_sentinel(keypair512):
    """A discrete model that cannot emit a symbol of the sequence scores LOG_ZERO; the others are exact."""
    _, sk = keypair512
    rng = np.random.default_rng(12)
    models = synthetic_models("discrete", rng, D=2, N=3, M=4)
    ep = np.array(models.emissionprob)
    ep[1, :, 3] = 0.0
    ep[1] /= ep[1].sum(-1, keepdims=True)
    models = KeywordModels(models.words, models.startprob, models.transmat, emissionprob=ep)
    X = np.array([0, 1, 3, 2, 0])
    got, _, _ = secure_scores(models, X, sk)
    want = score_models(models, X)
    # LOG_ZERO = −2^42 shifted by Bob's final offset (±2^40): below −2^41, under every real score
    assert want[1] == -np.inf and abs(got[1] - LOG_ZERO) <= 2.0**40 + 8 and got[1] < -(2.0**41)
    assert abs(got[0] - want[0]) / abs(want[0]) <= REL_TOL


def test_many_components_take_the_spread_layout_and_match_hmmlearn(keypair512):
    """Mixtures of many components (a speaker GMM's 64; 24 here at a 512-bit key) take the spread layout
    (S terms per ciphertext of Alice's -- S = 2 at this key, 10 at 2048 bits -- and one weighted sum per
    ciphertext back), and the scores still match hmmlearn within 1e-6."""
    _, sk = keypair512
    rng = np.random.default_rng(24)
    models = synthetic_models("gmm-diag", rng, D=2, N=2, C=24)
    T = 9
    X = rng.normal(size=(T, 4)) * 3
    params = ForwardParams(**bounds_for(models, X))
    plan = Plan(Shape.of_models(models, 8), params, sk.public_key)
    assert plan.mix_spread and plan.mix_inputs(T) < T * plan.n_mix
    got, _, net = secure_scores(models, X, sk, params)
    assert_close(got, hmmlearn_scores(models, X))
    terms = [pb.CiphertextVector.FromString(d) for _, t, _, d in net.received_by("bob") if "/mix-e/" in t]
    sums = [pb.CiphertextVector.FromString(d) for _, t, _, d in net.received_by("alice") if "/mix-u/" in t]
    assert sum(len(v.ciphertexts) for v in terms) == plan.mix_inputs(T)  # S terms per ciphertext
    assert sum(len(v.ciphertexts) for v in sums) == T * len(plan.mix_sums)  # one ciphertext per sum


def test_few_components_stay_packed(keypair512):
    _, sk = keypair512
    models = synthetic_models("gmm-diag", np.random.default_rng(2), C=2)
    plan = Plan(Shape.of_models(models, 8), ForwardParams(max_mixtures=2), sk.public_key)
    assert not plan.mix_spread and plan.mix_inputs(10) == 10 * plan.n_mix


def test_rows_close_to_an_earlier_row_are_computed_from_it_exactly(keypair512):
    """RowPlan: a MAP-adapted speaker's rows share the UBM's squared-feature coefficients; computed as the
    UBM row's product times a multi-exponentiation over the differing columns, they equal the full rows'
    products exactly (signed differences included), and rows with nothing in common stay full."""
    import random

    from smcdp.crypto.modexp import multi_exp_rows
    from smcdp.protocols.secure_forward import RowPlan

    pk, sk = keypair512
    rng = random.Random(4)
    P = 9
    bases = [pk.raw_encrypt(rng.randrange(-50, 50)) for _ in range(P)]
    shared = [rng.randrange(-(2**40), 2**40) for _ in range(4)]
    ubm = [shared + [rng.randrange(-(2**40), 2**40) for _ in range(P - 4)] for _ in range(3)]
    spk = [shared + [rng.randrange(-(2**40), 2**40) for _ in range(P - 4)] for _ in range(3)]
    other = [[rng.randrange(-(2**40), 2**40) for _ in range(P)] for _ in range(2)]
    rows = ubm[:1] + spk + other + ubm[1:]
    plan = RowPlan.for_rows(rows)
    assert plan.base[0] == 0 and set(plan.derived) >= {1, 2, 3} and {4, 5} <= set(plan.base)
    assert plan.cols == tuple(range(4, P)) or set(plan.cols) >= set(range(4, P))
    assert plan.products(bases, rows, pk.nsquare, 2) == multi_exp_rows(bases, rows, pk.nsquare)
    assert [sk.raw_decrypt_signed(c) for c in plan.products(bases, rows, pk.nsquare, 1)] == [
        sk.raw_decrypt_signed(c) for c in multi_exp_rows(bases, rows, pk.nsquare)
    ]
    # nothing shared: every row in full
    assert RowPlan.for_rows(other).derived == () and RowPlan.for_rows([]).base == ()


@pytest.mark.parametrize("kind", ["diag", "gmm-diag", "gmm-full"])
@pytest.mark.parametrize("shared_variances", [True, False], ids=["same-variances", "other-variances"])
def test_a_known_part_alice_adds_herself_leaves_the_scores_exact(kind, shared_variances, keypair512):
    """``known``: Alice holds models of the same shape and adds their quadratic forms to Bob's masked rows
    herself; Bob's rows are the differences (with shared variances no squared-feature coefficient is left).
    The scores are still the models' own, within 1e-6 of hmmlearn."""
    from smcdp.protocols.secure_forward import known_rows, model_coefficients
    from smcdp.speech.forward import product_index_pairs

    _, sk = keypair512
    rng = np.random.default_rng(hash((kind, shared_variances)) % 2**32)
    models = synthetic_models(kind, rng, D=2, N=2, C=3)
    other = synthetic_models(kind, rng, D=2, N=2, C=3)
    known = KeywordModels(
        models.words,
        models.startprob,
        models.transmat,
        means=other.means,
        covars=models.covars if shared_variances else other.covars,
        weights=models.weights,
    )
    T = 11
    X = rng.normal(size=(T, 4)) * 3
    params = ForwardParams(**bounds_for(models, X))
    diff, _ = model_coefficients(models, params, known)
    full, _ = model_coefficients(models, params)
    I, J = product_index_pairs(4, models.covariance_type)
    quadratic = (I < 4) & (J < 4)  # the products x_i x_j (not x_i · 1, not 1 · 1)
    if shared_variances:
        assert np.all(diff[:, quadratic] == 0) and np.any(full[:, quadratic] != 0)
    res, net = _run_with_known_part(models, params, sk, X, alice_known=known_rows(known), bob_known=known)
    assert_close(res["bob"].log_likelihoods.decrypt(sk), hmmlearn_scores(models, X))
    # no square left (diagonal models, shared variances): the header says "lin"/"gmm-lin" and Alice encrypts
    # the d + 1 products x_i·1 and 1 a frame instead of 2d + 1; otherwise the models' own kind and products
    (hdr,) = [d for frm, _, tag, _, d in net.transcript if tag == "fw/hdr"]
    linear = shared_variances and kind != "gmm-full"
    sent = Shape.from_proto(pb.Ints.FromString(hdr))
    assert sent.kind == ({"diag": "lin", "gmm-diag": "gmm-lin"}[kind] if linear else kind)
    products_sent = [pb.CiphertextVector.FromString(d) for frm, _, tag, _, d in net.transcript if "/prod/" in tag]
    P = len(product_index_pairs(4, "linear" if linear else models.covariance_type)[0])
    assert products_sent and all(len(v.ciphertexts) == P for v in products_sent)  # a ciphertext per product


def test_a_known_part_of_another_shape_is_refused(keypair512):
    from smcdp.protocols.secure_forward import ForwardAlice, ForwardBob, known_rows

    pk, sk = keypair512
    rng = np.random.default_rng(3)
    models = synthetic_models("gmm-diag", rng, D=2, N=2, C=3)
    with pytest.raises(ValueError, match="kind and shape"):
        ForwardBob(
            None,
            models,
            ForwardParams(max_mixtures=3),
            public_key=pk,
            known=synthetic_models("gmm-diag", rng, D=2, N=2, C=2),
        )
    wrong = synthetic_models("gmm-diag", rng, D=1, N=2, C=3)  # Alice's part covers one model, Bob has two
    X = rng.normal(size=(6, 4))
    params = ForwardParams(**bounds_for(models, X))

    async def alice(ch):
        role = ForwardAlice(ch, params, private_key=sk, known=known_rows(wrong))
        try:
            await role.prepare(len(X))
            return await role.run(X)
        finally:
            role.close()

    with pytest.raises(InvalidMessage, match="emission rows"):
        run_pair(alice, lambda ch: forward_bob(ch, models, params, public_key=pk))


def test_rows_without_squares_need_a_known_part_at_alice(keypair512):
    """A header of kind "gmm-lin" (Bob's rows are differences from a known part) is refused by an Alice who
    holds no known part: only a known part's differences lose their squares."""
    _, sk = keypair512
    rng = np.random.default_rng(5)
    models = synthetic_models("gmm-diag", rng, D=2, N=2, C=3)
    other = synthetic_models("gmm-diag", rng, D=2, N=2, C=3)
    known = KeywordModels(
        models.words, models.startprob, models.transmat, means=other.means, covars=models.covars, weights=models.weights
    )
    X = rng.normal(size=(6, 4))
    params = ForwardParams(**bounds_for(models, X))
    with pytest.raises(InvalidMessage, match="rows without squares"):
        _run_with_known_part(models, params, sk, X, alice_known=None, bob_known=known)


def _run_with_known_part(models, params, sk, X, *, alice_known, bob_known):
    """One forward session in memory: Alice with ``alice_known`` (a known_rows callable or None), Bob with
    ``bob_known`` models; returns run_pair's (results, network)."""
    from smcdp.protocols.secure_forward import ForwardAlice, ForwardBob

    async def alice(ch):
        role = ForwardAlice(ch, params, private_key=sk, known=alice_known)
        try:
            await role.prepare(len(X))
            return await role.run(X)
        finally:
            role.close()

    async def bob(ch):
        role = ForwardBob(ch, models, params, public_key=sk.public_key, known=bob_known)
        try:
            await role.prepare()
            return await role.run()
        finally:
            role.close()

    return run_pair(alice, bob)
