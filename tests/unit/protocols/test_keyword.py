"""Keyword recognition returns the plaintext argmax on every fixture utterance; demo over real processes."""

from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

from smcdp.errors import InvalidMessage
from smcdp.plugins.keyword import KeywordPlugin, load_utterance
from smcdp.protocols.keyword import AliceResult, KeywordParams, keyword_alice, keyword_bob
from smcdp.speech import load_models, score_models
from smcdp.speech.models import KeywordModels
from smcdp.v1 import messages_pb2 as pb
from tests.unit.protocols.keyword_util import DATA, fixture_utterances, run_pair, synthetic_models

MODELS = load_models(DATA / "models.npz")
UTTERANCES = fixture_utterances()


def run_keyword(X, models, sk, **params):
    p = KeywordParams(key_bits=sk.public_key.bits, **params)
    return run_pair(
        lambda ch: keyword_alice(ch, X, p, private_key=sk, allow_insecure_keys=True),
        lambda ch: keyword_bob(ch, models, p, allow_insecure_keys=True),
    )


def test_fixture_is_present():
    assert len(UTTERANCES) >= 10
    assert all(path.exists() for path, _ in UTTERANCES)


# ~1.5 CPU-s each: make test-quick runs the first five utterances, make test all of them
@pytest.mark.parametrize(
    "path,meta",
    [pytest.param(p, m, id=p.name, marks=[pytest.mark.slow] if i >= 5 else []) for i, (p, m) in enumerate(UTTERANCES)],
)
def test_keyword_equals_plaintext_argmax(path, meta, keypair512):
    _, sk = keypair512
    X = load_utterance(path)
    plain = score_models(MODELS, X)
    res, _ = run_keyword(X, MODELS, sk)
    a = res["alice"]
    assert a.index == int(np.argmax(plain))
    assert a.keyword == MODELS.words[a.index]
    assert a.log_likelihoods is None  # nothing revealed without debug_reveal


def test_debug_reveal_gives_the_scores(keypair512):
    _, sk = keypair512
    X = load_utterance(UTTERANCES[0][0])
    res, _ = run_keyword(X, MODELS, sk, debug_reveal=True)
    got = np.array(res["alice"].log_likelihoods)
    want = score_models(MODELS, X)
    assert np.max(np.abs(got - want) / np.abs(want)) <= 1e-6


def test_debug_reveal_reports_an_impossible_model_as_minus_infinity(keypair512):
    """P(x | λ) = 0 is revealed as −∞ (as hmmlearn and smcdp.speech.forward say), not as the sentinel's
    masked value; the possible model's score is exact and wins."""
    _, sk = keypair512
    models = synthetic_models("discrete", np.random.default_rng(12), D=2, N=3, M=4)
    ep = np.array(models.emissionprob)
    ep[1, :, 3] = 0.0
    ep[1] /= ep[1].sum(-1, keepdims=True)
    models = KeywordModels(models.words, models.startprob, models.transmat, emissionprob=ep)
    X = np.array([0, 1, 3, 2, 0])
    want = score_models(models, X)
    res, _ = run_keyword(X, models, sk, debug_reveal=True)
    got = res["alice"].log_likelihoods
    assert want[1] == -np.inf and got[1] == -np.inf
    assert abs(got[0] - want[0]) <= 1e-6 * abs(want[0])
    assert res["alice"].index == 0


def test_alice_sees_only_a_permuted_order_preserving_transform(keypair512):
    _, sk = keypair512
    X = load_utterance(UTTERANCES[3][0])
    want = score_models(MODELS, X)
    res, net = run_keyword(X, MODELS, sk, debug_reveal=False)
    from smcdp.crypto.vector import EncryptedVector

    msg = next(d for _, t, _, d in net.received_by("alice") if t == "kw/ranked")
    ranked = EncryptedVector.from_proto(pb.CiphertextVector.FromString(msg), sk.public_key).decrypt_ints(sk)
    # the sorted transformed scores are a positive affine image of the sorted true scores
    a = sorted(ranked)
    b = np.sort(want)
    ratio = np.array([float(y - x) for x, y in itertools.pairwise(a)]) / np.diff(b)
    assert np.allclose(ratio, ratio[0], rtol=1e-4) and ratio[0] > 1e6  # gaps carry ~1e-5 abs error
    assert abs(a[0]) > 2**60  # shifted by Bob's secret offset
    # Bob's scale stays his: each score carries its own r_i in [0, a), so the gcd of the differences is not a (it
    # was, exactly, when the transform was a·p + c alone), nor any multiple of 2^(scale_bits − 1)
    g = math.gcd(*(y - a[0] for y in a[1:]))
    assert g < 1 << 31
    # and the order Alice sees is Bob's secret permutation of the models, not the model order
    order_seen = np.argsort(np.argsort([float(x - a[0]) for x in ranked]))
    order_true = np.argsort(np.argsort(want))
    assert sorted(order_seen.tolist()) == sorted(order_true.tolist())
    assert res["alice"].index == int(np.argmax(want))


def test_other_emission_kinds(keypair512):
    _, sk = keypair512
    gmm = load_models(DATA / "models_gmm.npz")
    X = load_utterance(UTTERANCES[0][0])[:40]
    res, _ = run_keyword(X, gmm, sk)
    assert res["alice"].index == int(np.argmax(score_models(gmm, X)))
    disc = load_models(DATA / "models_discrete.npz")
    z = np.load(DATA / "discrete_test.npz")
    starts = np.concatenate([[0], np.cumsum(z["lengths"])])
    S = z["symbols"][starts[2] : starts[3]]
    res, _ = run_keyword(S, disc, sk)
    assert res["alice"].index == int(np.argmax(score_models(disc, S)))


def test_key_size_must_match_session(keypair512, keypair1024):
    _, sk = keypair512
    p_alice = KeywordParams(key_bits=512)
    p_bob = KeywordParams(key_bits=1024)
    X = load_utterance(UTTERANCES[0][0])
    with pytest.raises(InvalidMessage, match="agreed"):
        run_pair(
            lambda ch: keyword_alice(ch, X, p_alice, private_key=sk, allow_insecure_keys=True),
            lambda ch: keyword_bob(ch, MODELS, p_bob, allow_insecure_keys=True),
        )


def test_plugin_validation():
    plug = KeywordPlugin()
    ok = plug.validate_params({"key_bits": 2048}, {"alice": "a", "bob": "b"})
    assert ok["key_bits"] == 2048 and ok["debug_reveal"] is False
    with pytest.raises(InvalidMessage):
        plug.validate_params({}, {"alice": "a", "carol": "b"})
    with pytest.raises(InvalidMessage):
        plug.validate_params({}, {"alice": "a", "bob": "a"})
    with pytest.raises(InvalidMessage):
        plug.validate_params({"debug_reveal": "yes"}, {"alice": "a", "bob": "b"})
    with pytest.raises(InvalidMessage):
        plug.validate_params({"bogus": 1}, {"alice": "a", "bob": "b"})


def test_load_utterance_validation(tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.array([[1.0, np.nan]]))
    with pytest.raises(InvalidMessage, match="NaN"):
        load_utterance(bad)
    with pytest.raises(InvalidMessage, match="does not exist"):
        load_utterance(tmp_path / "missing.npy")
    np.save(bad, np.zeros((2, 2, 2)))
    with pytest.raises(InvalidMessage):
        load_utterance(bad)


@pytest.mark.slow  # party processes (not in make test-quick)
def test_demo_through_local_cluster(tmp_path):
    """Alice and Bob as separate OS processes over gRPC with mutual TLS (small key: test-only opt-in)."""
    from smcdp.cli.demo.keyword import demo_keyword

    path = DATA / "utterance_98.npy"
    out = demo_keyword(str(path), str(DATA / "models.npz"), key_bits=512, debug_reveal=True)
    X = np.load(path)
    plain = score_models(MODELS, X)
    assert out["index"] == int(np.argmax(plain))
    assert out["keyword"] == MODELS.words[out["index"]]
    assert out["seconds"] > 0 and out["bytes_sent"]["alice"] > 0 and out["bytes_sent"]["bob"] > 0
    lls = np.array(out["log_likelihoods"])
    assert np.max(np.abs(lls - plain) / np.abs(plain)) <= 1e-6
    json.dumps(out)


def test_load_utterance_accepts_a_wav_by_its_header(tmp_path):
    from scipy.io import wavfile

    from smcdp.errors import InputRejected
    from smcdp.speech.features import wav_features

    rng = np.random.default_rng(0)
    x = (np.sin(np.arange(11025) * 0.07) * 8000 + rng.normal(0, 300, 11025)).astype(np.int16)
    wav = tmp_path / "u.wav"
    wavfile.write(wav, 22050, np.stack([x, x], axis=1))
    X = load_utterance(wav)
    np.testing.assert_array_equal(X, wav_features(wav))
    assert X.shape == (49, 39)  # 0.5 s: 8000 samples at 16 kHz, 1 + ceil(7600 / 160)
    causal = load_utterance(wav, "causal")
    np.testing.assert_array_equal(causal, wav_features(wav, cmn="causal"))
    assert not np.allclose(causal, X)
    named_npy = tmp_path / "features.npy"  # the header decides, not the name
    named_npy.write_bytes(wav.read_bytes())
    np.testing.assert_array_equal(load_utterance(named_npy), X)
    np.save(tmp_path / "f.npy", X)
    (tmp_path / "f.npy").rename(tmp_path / "f.wav")
    np.testing.assert_array_equal(load_utterance(tmp_path / "f.wav"), X)
    for content, rule in (
        (b"", "is empty"),
        (b"hello there, world", "must be a WAV file"),
        (b"RIFF\x24\0\0\0WAVEfmt ", "not usable audio"),
    ):
        bad = tmp_path / "bad.wav"
        bad.write_bytes(content)
        with pytest.raises(InputRejected, match=rule) as exc:
            load_utterance(bad)
        assert str(bad) not in exc.value.public_message  # peers learn the rule, not the path
    nan = tmp_path / "nan.wav"
    y = np.zeros(4000, np.float32)
    y[10] = np.nan
    wavfile.write(nan, 16000, y)
    with pytest.raises(InputRejected, match="NaN"):
        load_utterance(nan)


def test_cmn_parameter_is_validated():
    assert KeywordParams.from_mapping({"cmn": "causal"}).cmn == "causal"
    assert KeywordParams().cmn == "utterance"
    with pytest.raises(InvalidMessage, match="cmn"):
        KeywordParams.from_mapping({"cmn": "sideways"})


@pytest.mark.parametrize("cmn", ["utterance", "causal"])
def test_alice_role_featurises_a_configured_wav_with_the_session_cmn(tmp_path, monkeypatch, cmn):
    """[inputs.keyword] utterance = "U.wav": Alice's role reads the audio with the agreed front end."""
    import asyncio
    from types import SimpleNamespace

    from scipy.io import wavfile

    import smcdp.plugins.keyword as plugin_mod
    from smcdp.plugins.base import SessionContext
    from smcdp.speech.features import wav_features

    rng = np.random.default_rng(1)
    wav = tmp_path / "u.wav"
    wavfile.write(wav, 16000, rng.normal(0, 0.1, 8000).astype(np.float32))
    seen = {}

    async def fake_alice(ch, X, p, **kw):
        seen["X"], seen["p"] = X, p
        return AliceResult(keyword="w", index=0)

    params = KeywordPlugin().validate_params({"key_bits": 512, "cmn": cmn}, {"alice": "a", "bob": "b"})
    ctx = SessionContext(
        "s", "keyword", {"alice": "a", "bob": "b"}, params, inputs={"utterance": str(wav)}, allow_insecure_keys=True
    )
    monkeypatch.setattr(plugin_mod, "keyword_alice", fake_alice)
    asyncio.run(KeywordPlugin().run_role("alice", SimpleNamespace(me="a"), ctx))
    assert seen["p"].cmn == cmn
    np.testing.assert_array_equal(seen["X"], wav_features(wav, cmn=cmn))


def test_streamed_frames_give_the_batch_result(keypair512):
    """Issue 16 --stream: frames from a blocking source (a front end, a microphone) pulled one at a time give
    the same keyword and scores as the whole matrix; the latency after the last frame is reported."""
    import time as _time

    from smcdp.protocols.keyword import frames_from

    _, sk = keypair512
    path, _ = UTTERANCES[1]
    X = load_utterance(path)

    def slow_source():  # 10 ms per frame (1.2 s in all): the protocol runs while frames arrive
        for row in X:  # (at 2 ms, block 0's round trip on a loaded CI host could outlast the source)
            _time.sleep(0.01)
            yield row

    p = KeywordParams(key_bits=sk.public_key.bits, debug_reveal=True)
    res, net = run_pair(
        lambda ch: keyword_alice(ch, frames_from(slow_source()), p, private_key=sk, allow_insecure_keys=True),
        lambda ch: keyword_bob(ch, MODELS, p, allow_insecure_keys=True),
    )
    batch, _ = run_keyword(X, MODELS, sk, debug_reveal=True)
    a = res["alice"]
    assert a.index == batch["alice"].index == int(np.argmax(score_models(MODELS, X)))
    np.testing.assert_allclose(a.log_likelihoods, score_models(MODELS, X), rtol=1e-6)
    st = a.timings["online"]["stream"]
    assert st["frames"] == len(X) and 0 < st["latency_after_last_frame"] < st["keyword_at"]
    # the frames went out in several blocks (a product ciphertext's slots each), not all at the end
    blocks = [t for _, t, _, _ in net.received_by("bob") if t.startswith("kw/fw/blk/")]
    assert len(blocks) > 1
    # the first frames were in the protocol long before the last one: online work overlapped the source
    assert a.timings["online"]["first_frame"] < st["last_frame_at"]


def test_offsets_made_ahead_for_the_announced_frames_and_computed_for_the_rest(keypair512):
    """Bob makes the offsets of the frames Alice announced (200 when streaming) ahead; a streamed utterance of
    another length ends its last round elsewhere (m = 2, an even frame count: the last frame, odd, ends a round
    only because it is the last): those offsets are computed when the block comes.  Scores equal the batch session's and the plaintext forward algorithm's."""
    from smcdp.protocols.keyword import STREAM_EXPECTED_FRAMES, frames_from

    _, sk = keypair512
    X = load_utterance(UTTERANCES[1][0])
    X = X[: len(X) - len(X) % 2]  # even: the last round is one frame (T − 1 is odd), not m = 2
    assert len(X) % 2 == 0 and len(X) != STREAM_EXPECTED_FRAMES
    p = KeywordParams(key_bits=sk.public_key.bits, debug_reveal=True, frames_per_round=2)
    res, _ = run_pair(
        lambda ch: keyword_alice(ch, frames_from(iter(X)), p, private_key=sk, allow_insecure_keys=True),
        lambda ch: keyword_bob(ch, MODELS, p, allow_insecure_keys=True),
    )
    np.testing.assert_allclose(res["alice"].log_likelihoods, score_models(MODELS, X), rtol=1e-6)
    assert res["alice"].index == int(np.argmax(score_models(MODELS, X)))


def test_stream_parameters_are_validated():
    with pytest.raises(InvalidMessage, match="per-utterance mean normalisation needs the whole utterance"):
        KeywordParams.from_mapping({"stream": True})
    KeywordParams.from_mapping({"stream": True, "cmn": "causal"})
    with pytest.raises(InvalidMessage, match="stream_pace"):
        KeywordParams.from_mapping({"stream": True, "cmn": "causal", "stream_pace": "slow"})


@pytest.fixture(scope="module")
def subgroup512():
    from smcdp.crypto.paillier import generate_keypair

    return generate_keypair(512, allow_insecure=True, subgroup=True)


def test_a_subgroup_key_gives_the_same_keyword_and_scores(subgroup512):
    """Alice's subgroup key (docs/crypto.md, "Subgroup keys"): the same protocol, Bob re-randomising under her
    base; her decryptions use the short exponents, and every score is the plaintext one to 1e-6."""
    _, sk = subgroup512
    X = load_utterance(UTTERANCES[1][0])
    res, _ = run_keyword(X, MODELS, sk, key_kind="subgroup", debug_reveal=True)
    want = score_models(MODELS, X)
    assert res["alice"].index == int(np.argmax(want))
    got = np.array(res["alice"].log_likelihoods)
    assert np.max(np.abs(got - want) / np.abs(want)) <= 1e-6
    assert res["alice"].prepare_next.key_kind == "subgroup"


def test_bob_refuses_a_subgroup_key_the_session_did_not_name(subgroup512):
    from smcdp.errors import PermissionDenied

    _, sk = subgroup512
    X = load_utterance(UTTERANCES[0][0])[:20]
    with pytest.raises(PermissionDenied, match="subgroup key"):
        run_pair(
            lambda ch: keyword_alice(
                ch, X, KeywordParams(key_bits=512, key_kind="subgroup"), private_key=sk, allow_insecure_keys=True
            ),
            lambda ch: keyword_bob(ch, MODELS, KeywordParams(key_bits=512), allow_insecure_keys=True),
        )
    with pytest.raises(InvalidMessage, match="key_kind"):
        KeywordParams(key_kind="fast").validate()
