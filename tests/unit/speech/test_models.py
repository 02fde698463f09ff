from __future__ import annotations

import re

import numpy as np
import pytest

pytest.importorskip("hmmlearn", reason="hmmlearn is not installed")
pytest.importorskip("sklearn", reason="sklearn is not installed")
from hmmlearn import hmm as hl

from smcdp.errors import InvalidMessage
from smcdp.speech.models import (
    HMM,
    KeywordModels,
    from_hmmlearn,
    left_right_topology,
    to_hmmlearn,
    train_word_hmm,
)

FILES = {
    "models.npz": ("diag", (10, 5, 39), None),
    "models_full.npz": ("full", (3, 5, 39), None),
    "models_gmm.npz": ("gmm-diag", (3, 5, 2, 39), 2),
}


@pytest.mark.parametrize("name", sorted(FILES))
def test_fixture_gaussian_models(fixture_dir, name):
    kind, mshape, n_mix = FILES[name]
    m = KeywordModels.load(fixture_dir / name)
    assert m.kind == kind and m.means.shape == mshape and m.n_mix == n_mix
    assert m.n_states == 5 and m.n_features == 39
    assert list(m.words) == ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"][: m.n_words]
    # Left-to-right topology survived training.
    for i in range(m.n_words):
        np.testing.assert_array_equal(m.startprob[i], [1, 0, 0, 0, 0])
        A = m.transmat[i]
        assert np.all(A[np.tril_indices(5, -1)] == 0)
        assert np.all(A[np.triu_indices(5, 2)] == 0)
        assert A[4, 4] == 1.0


def test_fixture_discrete_model(fixture_dir):
    m = KeywordModels.load(fixture_dir / "models_discrete.npz")
    assert m.kind == "discrete" and m.emissionprob.shape == (10, 5, 32)
    assert m.means is None and m.covars is None
    assert np.all(m.emissionprob > 0)  # add-one smoothing in training


def _arrays(m: KeywordModels) -> dict:
    return {k: np.array(v) for k, v in m.to_arrays().items()}


def _all_fixture(fixture_dir):
    return [KeywordModels.load(fixture_dir / n) for n in (*FILES, "models_discrete.npz")]


def test_round_trip_every_kind(fixture_dir, tmp_path):
    for k, m in enumerate(_all_fixture(fixture_dir)):
        for compressed in (True, False):
            p = tmp_path / f"m{k}{compressed}.npz"
            m.save(p, compressed=compressed)
            m2 = KeywordModels.load(p)
            assert m2.words == m.words and m2.kind == m.kind
            for key, val in _arrays(m).items():
                np.testing.assert_array_equal(_arrays(m2)[key], val)
    # Per-word access and restacking are lossless too.
    m = _all_fixture(fixture_dir)[2]
    again = KeywordModels.from_hmms(m.words, m.hmms())
    np.testing.assert_array_equal(again.covars, m.covars)
    assert m["two"].kind == "gmm-diag"
    with pytest.raises(KeyError):
        m["eleven"]


def _small(kind: str, seed: int = 0) -> dict:
    """A valid small model dict of the given kind (2 words, 3 states, d = 2)."""
    rng = np.random.default_rng(seed)
    D, N, d, C, M = 2, 3, 2, 2, 4

    def stoch(*shape):
        a = rng.uniform(0.1, 1.0, shape)
        return a / a.sum(axis=-1, keepdims=True)

    def spd(*lead):
        B = rng.standard_normal((*lead, d, d))
        return B @ np.swapaxes(B, -1, -2) + np.eye(d)

    out = {"words": np.array(["yes", "no"]), "startprob": stoch(D, N), "transmat": stoch(D, N, N)}
    if kind == "discrete":
        out["emissionprob"] = stoch(D, N, M)
    elif kind == "diag":
        out |= {"means": rng.standard_normal((D, N, d)), "covars": rng.uniform(0.5, 2, (D, N, d))}
    elif kind == "full":
        out |= {"means": rng.standard_normal((D, N, d)), "covars": spd(D, N)}
    elif kind == "gmm-diag":
        out |= {
            "means": rng.standard_normal((D, N, C, d)),
            "covars": rng.uniform(0.5, 2, (D, N, C, d)),
            "weights": stoch(D, N, C),
        }
    elif kind == "gmm-full":
        out |= {"means": rng.standard_normal((D, N, C, d)), "covars": spd(D, N, C), "weights": stoch(D, N, C)}
    return out


@pytest.mark.parametrize("kind", ["discrete", "diag", "full", "gmm-diag", "gmm-full"])
def test_small_models_valid(kind, tmp_path):
    m = KeywordModels.from_arrays(_small(kind))
    assert m.kind == kind
    m.save(tmp_path / "m.npz")
    assert KeywordModels.load(tmp_path / "m.npz").kind == kind


def _mut(kind, fn):
    a = _small(kind)
    fn(a)
    return a


def _set(key, value):
    def f(a):
        a[key] = value

    return f


def _edit(key, fn):
    def f(a):
        a[key] = np.array(a[key], dtype=a[key].dtype)
        fn(a[key])

    return f


def _nonsym(c):
    c[0, 0, 0, 1] += 0.5


def _not_pd(c):
    c[0, 0] = np.array([[1.0, 2.0], [2.0, 1.0]])


BAD = [
    ("missing words", "diag", lambda a: a.pop("words"), "lacks 'words'"),
    ("missing transmat", "diag", lambda a: a.pop("transmat"), "lacks 'transmat'"),
    ("unknown key", "diag", _set("extra", np.zeros(1)), "unknown keys"),
    ("duplicate words", "diag", _set("words", np.array(["a", "a"])), "unique"),
    ("empty word", "diag", _set("words", np.array(["a", ""])), "empty"),
    ("numeric words", "diag", _set("words", np.array([1, 2])), "unicode"),
    ("2-D words", "diag", _set("words", np.array([["a", "b"]])), "1-D"),
    ("words count", "diag", _set("words", np.array(["a", "b", "c"])), "3 words"),
    ("startprob sum", "diag", _edit("startprob", lambda s: s.__setitem__((0, 0), s[0, 0] + 0.1)), "sum to 1"),
    ("startprob negative", "diag", _set("startprob", np.array([[1.5, -0.5, 0.0], [1, 0, 0]])), "negative"),
    ("startprob ndim", "diag", _set("startprob", np.ones(3) / 3), "(Δ, N)"),
    ("transmat shape", "diag", lambda a: a.__setitem__("transmat", a["transmat"][:, :2]), "transmat: expected shape"),
    ("transmat rows", "diag", _edit("transmat", lambda t: t.__setitem__((1, 2, 0), t[1, 2, 0] + 0.01)), "transmat"),
    ("transmat nan", "diag", _edit("transmat", lambda t: t.__setitem__((0, 0, 0), np.nan)), "NaN"),
    ("bool transmat", "diag", lambda a: a.__setitem__("transmat", a["transmat"] > 0), "real numbers"),
    ("means shape", "diag", lambda a: a.__setitem__("means", a["means"][:, :2]), "means: expected shape"),
    ("means 5-D", "diag", lambda a: a.__setitem__("means", a["means"][..., None, None]), "means: expected"),
    ("covars shape", "diag", lambda a: a.__setitem__("covars", a["covars"][..., :1]), "covars: expected shape"),
    ("covars rank", "diag", lambda a: a.__setitem__("covars", a["covars"][..., None, None]), "covars"),
    ("variance zero", "diag", _edit("covars", lambda c: c.__setitem__((0, 1, 1), 0.0)), "strictly positive"),
    ("variance inf", "diag", _edit("covars", lambda c: c.__setitem__((0, 1, 1), np.inf)), "infinite"),
    ("means nan", "diag", _edit("means", lambda m: m.__setitem__((1, 1, 1), np.nan)), "NaN"),
    ("no covars", "diag", lambda a: a.pop("covars"), "both means and covars"),
    ("nothing", "diag", lambda a: (a.pop("covars"), a.pop("means")), "emissionprob"),
    ("weights without mixture", "diag", _set("weights", np.ones((2, 3, 1))), "no mixture axis"),
    ("full not symmetric", "full", _edit("covars", _nonsym), "not symmetric"),
    ("full not PD", "full", _edit("covars", _not_pd), "not positive definite"),
    ("mixture without weights", "gmm-diag", lambda a: a.pop("weights"), "need mixture weights"),
    ("weights sum", "gmm-diag", _edit("weights", lambda w: w.__setitem__((0, 0, 0), 0.9)), "weights"),
    ("weights shape", "gmm-diag", lambda a: a.__setitem__("weights", a["weights"][..., :1]), "weights: expected"),
    ("mixture covars shape", "gmm-diag", lambda a: a.__setitem__("covars", a["covars"][:, :, :1]), "covars"),
    (
        "gmm full not PD",
        "gmm-full",
        _edit("covars", lambda c: c.__setitem__((1, 2, 1), [[1, 3], [3, 1]])),
        "not positive definite",
    ),
    ("emissionprob rows", "discrete", _edit("emissionprob", lambda e: e.__setitem__((0, 0, 0), 5.0)), "emissionprob"),
    (
        "emissionprob shape",
        "discrete",
        lambda a: a.__setitem__("emissionprob", a["emissionprob"][0]),
        "emissionprob: expected",
    ),
    ("discrete plus means", "discrete", _set("means", np.zeros((2, 3, 2))), "must not also carry"),
    ("format version", "diag", _set("format_version", np.array(2)), "format_version"),
    ("format version type", "diag", _set("format_version", np.array(1.0)), "format_version"),
]


@pytest.mark.parametrize("name, kind, mutate, match", BAD, ids=[b[0] for b in BAD])
def test_validation_errors(name, kind, mutate, match, tmp_path):
    arrays = _mut(kind, mutate)
    with pytest.raises(InvalidMessage, match=match.replace("(", r"\(").replace(")", r"\)")):
        KeywordModels.from_arrays(arrays)
    # The same file written to disk fails to load with the file name in the message.
    p = tmp_path / "bad.npz"
    np.savez(p, **arrays)
    with pytest.raises(InvalidMessage, match=re.escape("bad.npz")):
        KeywordModels.load(p)


def test_file_level_errors(tmp_path):
    with pytest.raises(InvalidMessage, match="not found"):
        KeywordModels.load(tmp_path / "none.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"PK\x03\x04 definitely not a zip archive")
    with pytest.raises(InvalidMessage, match="cannot read"):
        KeywordModels.load(junk)
    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(InvalidMessage, match="single array"):
        KeywordModels.load(single)
    pickled = tmp_path / "pickled.npz"
    a = _small("diag")
    a["words"] = np.array(["yes", "no"], dtype=object)
    np.savez(pickled, **a)
    with pytest.raises(InvalidMessage, match=re.escape("pickled.npz")):
        KeywordModels.load(pickled)
    m = KeywordModels.from_arrays(_small("diag"))
    with pytest.raises(InvalidMessage, match=r"\.npz"):
        m.save(tmp_path / "models.bin")


def test_constructor_validates_and_freezes():
    m = KeywordModels.from_arrays(_small("full"))
    with pytest.raises(ValueError):
        m.means[0, 0, 0] = 1.0
    with pytest.raises(InvalidMessage, match="out of range"):
        m.hmm(2)
    with pytest.raises(InvalidMessage, match="single string"):
        KeywordModels("ab", m.startprob, m.transmat, means=m.means, covars=m.covars)
    h = m.hmm(0)
    with pytest.raises(InvalidMessage, match="declared kind"):
        HMM(h.startprob, h.transmat, means=h.means, covars=h.covars, kind="diag")
    d = KeywordModels.from_arrays(_small("diag"))
    with pytest.raises(InvalidMessage, match="same emission kind"):
        KeywordModels.from_hmms(["a", "b"], [m.hmm(0), d.hmm(0)])


@pytest.mark.parametrize("kind", ["discrete", "diag", "full", "gmm-diag", "gmm-full"])
def test_hmmlearn_conversion_round_trip(kind):
    m = KeywordModels.from_arrays(_small(kind))
    h = m.hmm(1)
    back = from_hmmlearn(to_hmmlearn(h))
    for name in ("startprob", "transmat", "means", "covars", "weights", "emissionprob"):
        a, b = getattr(h, name), getattr(back, name)
        assert (a is None) == (b is None)
        if a is not None:
            np.testing.assert_array_equal(a, b)


def test_from_hmmlearn_rejects_unsupported():
    g = hl.GaussianHMM(n_components=2, covariance_type="spherical")
    g.startprob_ = np.array([1.0, 0.0])
    g.transmat_ = np.eye(2)
    g.means_ = np.zeros((2, 2))
    g.covars_ = np.ones(2)
    with pytest.raises(InvalidMessage, match="spherical"):
        from_hmmlearn(g)
    with pytest.raises(InvalidMessage, match="unsupported hmmlearn model"):
        from_hmmlearn(object())


def _synthetic_sequences(rng, n_seq=12, d=3, n_states=3):
    """Left-to-right data: each utterance walks through n_states clusters in order."""
    centres = rng.normal(0, 4, (n_states, d))
    seqs = []
    for _ in range(n_seq):
        durations = rng.integers(4, 9, n_states)
        seqs.append(np.concatenate([c + rng.normal(0, 0.5, (k, d)) for c, k in zip(centres, durations)]))
    return seqs, centres


@pytest.mark.parametrize("kind", ["diag", "full", "gmm-diag", "gmm-full"])
def test_training_keeps_left_right_topology_and_learns(kind):
    rng = np.random.default_rng(7)
    seqs, centres = _synthetic_sequences(rng)
    h = train_word_hmm(seqs, kind=kind, n_states=3, n_mix=2, n_iter=10, random_state=0)
    assert h.kind == kind
    np.testing.assert_array_equal(h.startprob, [1, 0, 0])
    assert h.transmat[1, 0] == h.transmat[2, 0] == h.transmat[2, 1] == h.transmat[0, 2] == 0
    mean_per_state = h.means if h.means.ndim == 2 else np.einsum("nc,ncd->nd", h.weights, h.means)
    np.testing.assert_allclose(mean_per_state, centres, atol=0.5)


def test_training_discrete_and_determinism():
    rng = np.random.default_rng(1)
    seqs = [np.concatenate([rng.integers(0, 2, 5), rng.integers(2, 4, 6), rng.integers(4, 6, 5)]) for _ in range(10)]
    h1 = train_word_hmm(seqs, kind="discrete", n_states=3, n_symbols=6, n_iter=10, random_state=3)
    h2 = train_word_hmm(seqs, kind="discrete", n_states=3, n_symbols=6, n_iter=10, random_state=3)
    np.testing.assert_array_equal(h1.emissionprob, h2.emissionprob)
    assert np.all(h1.emissionprob > 0)
    # State 0 emits mostly symbols 0/1, state 2 mostly 4/5.
    assert h1.emissionprob[0, :2].sum() > 0.8 and h1.emissionprob[2, 4:].sum() > 0.8


@pytest.mark.parametrize(
    "kwargs, seqs, match",
    [
        (dict(kind="bogus"), [np.zeros((10, 2))], "kind must be"),
        (dict(kind="diag"), [], "no training sequences"),
        (dict(kind="diag"), [np.zeros((2, 2))], "fewer than 5 states"),
        (dict(kind="diag"), [np.zeros((10, 2)), np.zeros((10, 3))], "different dimensions"),
        (dict(kind="diag"), [np.full((10, 2), np.nan)], "non-finite"),
        (dict(kind="discrete"), [np.zeros(10, int)], "n_symbols"),
        (dict(kind="discrete", n_symbols=3), [np.full(10, 3)], "outside"),
        (dict(kind="discrete", n_symbols=3), [np.zeros(10)], "integer"),
        (dict(kind="diag", n_states=0), [np.zeros((10, 2))], "n_states"),
        (dict(kind="diag", min_covar=0.0), [np.zeros((10, 2))], "min_covar"),
    ],
)
def test_training_input_validation(kwargs, seqs, match):
    with pytest.raises(InvalidMessage, match=match):
        train_word_hmm(seqs, **kwargs)


def test_left_right_topology():
    sp, A = left_right_topology(4, 10.0)
    np.testing.assert_array_equal(sp, [1, 0, 0, 0])
    np.testing.assert_allclose(A.sum(axis=1), 1.0)
    assert A[0, 0] == pytest.approx(0.9) and A[3, 3] == 1.0
