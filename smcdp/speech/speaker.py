"""Speaker models for verification and identification: a GMM-UBM and MAP-adapted speaker GMMs.

The classic GMM-UBM recogniser (Reynolds, Quatieri & Dunn, "Speaker verification using adapted
Gaussian mixture models", DSP 2000): a universal background model (UBM), a diagonal-covariance GMM
trained on many speakers, and one model per enrolled speaker obtained by MAP adaptation of the UBM's
means to the speaker's enrolment frames (weights and variances stay the UBM's).  An utterance X of T
frames is scored against speaker s by the average frame log-likelihood ratio

    score_s(X) = (1/T) Σ_t [log p(x_t | λ_s) − log p(x_t | λ_UBM)],

accepted when score ≥ θ.  :mod:`smcdp.protocols.speaker` computes exactly this under encryption.

Files (``numpy.savez``, read with ``allow_pickle=False``; unknown keys are refused):

* UBM (``smcdp speech ubm``): ``kind = "ubm"``, ``weights`` (C,), ``means`` (C, d), ``covars`` (C, d)
  (diagonal variances), ``cmn``, ``format_version``; with DP-EM also ``epsilon``, ``delta``.
* speaker models (``smcdp speech enroll``, what bob's party reads): ``kind = "speakers"``, the UBM's
  arrays as ``ubm_weights``, ``ubm_means``, ``ubm_covars``, ``names`` (K,), ``means`` (K, C, d)
  (the adapted means), ``threshold`` () (θ, nats per frame), ``relevance`` (), ``cmn``,
  ``format_version``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes
from smcdp.errors import InvalidMessage, local_failure
from smcdp.speech.frontend import CMN_MODES
from smcdp.speech.models import KeywordModels

FORMAT_VERSION = 1
#: MAP relevance factor r of Reynolds et al. (2000): α_c = n_c / (n_c + r)
DEFAULT_RELEVANCE = 16.0
MAX_COMPONENTS = 256
MAX_SPEAKERS = 4096
NAME_RE = re.compile(r"^[^\s=]{1,64}\Z")
LOG_2PI = float(np.log(2 * np.pi))


def _real(name: str, value, shape: tuple | None = None) -> np.ndarray:
    a = np.asarray(value)
    if a.dtype.kind not in "iuf" or a.dtype == np.bool_:
        raise InvalidMessage(f"{name}: expected real numbers, got dtype {a.dtype}")
    a = np.array(a, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise InvalidMessage(f"{name}: contains NaN or infinite values")
    if shape is not None and a.shape != shape:
        raise InvalidMessage(f"{name}: expected shape {shape}, got {a.shape}")
    return a


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InvalidMessage(f"speaker name {name!r}: 1-64 characters without spaces or '='")
    return name


@dataclass(frozen=True)
class DiagGMM:
    """A validated diagonal-covariance GMM: weights (C,), means (C, d), variances (C, d)."""

    weights: np.ndarray
    means: np.ndarray
    covars: np.ndarray

    def __post_init__(self) -> None:
        w = _real("weights", self.weights)
        if w.ndim != 1 or not 1 <= w.size <= MAX_COMPONENTS:
            raise InvalidMessage(f"weights: expected 1..{MAX_COMPONENTS} mixture weights, got shape {w.shape}")
        C = w.size
        mu = _real("means", self.means)
        if mu.ndim != 2 or mu.shape[0] != C or mu.shape[1] < 1:
            raise InvalidMessage(f"means: expected shape ({C}, d), got {mu.shape}")
        cv = _real("covars", self.covars, mu.shape)
        if np.any(w < 0) or abs(w.sum() - 1.0) > 1e-6:
            raise InvalidMessage("weights: must be non-negative and sum to 1")
        if np.any(cv <= 0):
            raise InvalidMessage("covars: variances must be positive")
        for name, a in (("weights", w), ("means", mu), ("covars", cv)):
            a.setflags(write=False)
            object.__setattr__(self, name, a)

    @property
    def n_components(self) -> int:
        return int(self.weights.size)

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])

    def component_logliks(self, X: np.ndarray) -> np.ndarray:
        """log (w_c N(x_t | μ_c, diag σ²_c)) for every frame and component: (T, C)."""
        X = np.asarray(X, dtype=np.float64)
        if X.ndim != 2 or X.shape[1] != self.dim:
            raise InvalidMessage(f"features of shape {X.shape}; the model expects T x {self.dim}")
        prec = 1.0 / self.covars
        quad = ((X[:, None, :] - self.means[None]) ** 2 * prec[None]).sum(-1)
        logdet = np.log(self.covars).sum(-1)
        with np.errstate(divide="ignore"):
            logw = np.log(self.weights)
        return logw[None] - 0.5 * (quad + logdet[None] + self.dim * LOG_2PI)

    def frame_logliks(self, X: np.ndarray) -> np.ndarray:
        """log p(x_t | λ) for every frame: (T,)."""
        from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

        return logsumexp(self.component_logliks(X), axis=1)

    def loglik(self, X: np.ndarray) -> float:
        """Σ_t log p(x_t | λ): the log-likelihood of the utterance (frames independent)."""
        return float(self.frame_logliks(X).sum())

    def with_means(self, means: np.ndarray) -> DiagGMM:
        return DiagGMM(self.weights, means, self.covars)


def map_adapt_means(ubm: DiagGMM, X: np.ndarray, relevance: float = DEFAULT_RELEVANCE) -> np.ndarray:
    """MAP adaptation of the UBM's means to the frames ``X`` (Reynolds et al. 2000, eq. 7-11 with the
    weights and variances kept): n_c = Σ_t γ_tc, E_c = Σ_t γ_tc x_t / n_c, α_c = n_c / (n_c + r),
    μ̂_c = α_c E_c + (1 − α_c) μ_c."""
    if not np.isfinite(relevance) or relevance <= 0:
        raise InvalidMessage(f"relevance factor must be positive, got {relevance!r}")
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 1:
        raise InvalidMessage(f"enrolment features must be a non-empty T x d matrix, got shape {X.shape}")
    lc = ubm.component_logliks(X)
    from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

    gamma = np.exp(lc - logsumexp(lc, axis=1, keepdims=True))
    n = gamma.sum(axis=0)
    first = gamma.T @ X
    alpha = (n / (n + relevance))[:, None]
    E = first / np.maximum(n, 1e-300)[:, None]
    return alpha * E + (1.0 - alpha) * ubm.means


def llr_score(ubm: DiagGMM, speaker_means: np.ndarray, X: np.ndarray) -> float:
    """The average frame log-likelihood ratio of ``X`` under the speaker and the UBM (plaintext)."""
    spk = ubm.with_means(speaker_means)
    return (spk.loglik(X) - ubm.loglik(X)) / len(X)


# ------------------------------------------------------------------------------ files
def _np_load(p: str, what: str) -> Any:
    """``np.load`` without pickles, its declared sizes checked first; the file's errors are InvalidMessage naming it."""
    try:
        check_array_sizes(p)
        with NUMPY_HEADERS:
            return np.load(p, allow_pickle=False)
    except FileNotFoundError:
        raise InvalidMessage(f"{what} file not found: {p}") from None
    except ARRAY_ERRORS as exc:
        if local_failure(exc):
            raise
        raise InvalidMessage(f"cannot read {what} file {p}: {exc}") from None


def load_npy(path: str | os.PathLike, what: str) -> np.ndarray:
    """One array from a ``.npy`` file (an ``.npz`` archive is refused), its declared sizes checked first."""
    p = os.fspath(path)
    obj = _np_load(p, what)
    if not isinstance(obj, np.ndarray):
        obj.close()
        raise InvalidMessage(f"{what} file {p}: expected a .npy array, got an .npz archive")
    return obj


def _load_npz(path: str | os.PathLike, what: str) -> dict[str, np.ndarray]:
    p = os.fspath(path)
    obj = _np_load(p, what)
    if not isinstance(obj, np.lib.npyio.NpzFile):
        raise InvalidMessage(f"{p}: expected an .npz archive, got a single array")
    with obj:
        try:
            with NUMPY_HEADERS:  # each member's header is parsed as it is read
                return {k: obj[k] for k in obj.files}
        except ARRAY_ERRORS as exc:
            if local_failure(exc):
                raise
            raise InvalidMessage(f"{p}: cannot read {what}: {exc}") from None


def _string(arrays: Mapping, key: str, p: str) -> str:
    a = np.asarray(arrays[key])
    if a.shape != () or a.dtype.kind != "U":
        raise InvalidMessage(f"{p}: {key!r} must be a single string")
    return str(a)


def _scalar(arrays: Mapping, key: str, p: str) -> float:
    a = _real(f"{p}: {key}", arrays[key])
    if a.shape != ():
        raise InvalidMessage(f"{p}: {key!r} must be a single number")
    return float(a)


def _check_keys(arrays: Mapping, allowed: set[str], required: set[str], kind: str, p: str) -> None:
    if "kind" not in arrays:
        raise InvalidMessage(f"{p}: not a speaker-model file (no 'kind'; smcdp speech ubm / enroll write them)")
    if _string(arrays, "kind", p) != kind:
        raise InvalidMessage(f"{p}: a {_string(arrays, 'kind', p)!r} file, expected {kind!r}")
    unknown = set(arrays) - allowed
    if unknown:
        raise InvalidMessage(f"{p}: unknown keys {sorted(unknown)}")
    missing = required - set(arrays)
    if missing:
        raise InvalidMessage(f"{p}: lacks {sorted(missing)}")
    v = np.asarray(arrays["format_version"])
    if v.shape != () or v.dtype.kind not in "iu" or int(v) != FORMAT_VERSION:
        raise InvalidMessage(f"{p}: unsupported format_version {v!r} (this reader knows {FORMAT_VERSION})")


def _cmn(arrays: Mapping, p: str) -> str:
    cmn = _string(arrays, "cmn", p)
    if cmn not in CMN_MODES:
        raise InvalidMessage(f"{p}: cmn {cmn!r} is not one of {list(CMN_MODES)}")
    return cmn


@dataclass(frozen=True)
class UBM:
    """Bob's universal background model and how it was made."""

    gmm: DiagGMM
    cmn: str = "utterance"
    epsilon: float | None = None  # DP-EM budget when trained privately
    delta: float | None = None

    def save(self, path: str | os.PathLike) -> None:
        p = os.fspath(path)
        if not p.endswith(".npz"):
            raise InvalidMessage(f"UBM file name must end in .npz, got {p!r}")
        extra = {} if self.epsilon is None else {"epsilon": np.float64(self.epsilon), "delta": np.float64(self.delta)}
        # allow_pickle=False: every array is numeric or unicode, and the reader refuses pickles too
        np.savez_compressed(
            p,
            kind=np.array("ubm"),
            format_version=np.int64(FORMAT_VERSION),
            weights=self.gmm.weights,
            means=self.gmm.means,
            covars=self.gmm.covars,
            cmn=np.array(self.cmn),
            allow_pickle=False,
            **extra,
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> UBM:
        p = os.fspath(path)
        a = _load_npz(p, "UBM")
        _check_keys(
            a,
            {"kind", "format_version", "weights", "means", "covars", "cmn", "epsilon", "delta"},
            {"kind", "format_version", "weights", "means", "covars", "cmn"},
            "ubm",
            p,
        )
        try:
            gmm = DiagGMM(a["weights"], a["means"], a["covars"])
        except InvalidMessage as exc:
            raise InvalidMessage(f"{p}: {exc}") from None
        eps = _scalar(a, "epsilon", p) if "epsilon" in a else None
        delta = _scalar(a, "delta", p) if "delta" in a else None
        return cls(gmm, _cmn(a, p), eps, delta)


class SpeakerModels:
    """Bob's input: the UBM, the enrolled speakers' adapted means and the decision threshold θ."""

    def __init__(
        self,
        ubm: DiagGMM,
        names: Sequence[str],
        means,
        *,
        threshold: float = 0.0,
        relevance: float = DEFAULT_RELEVANCE,
        cmn: str = "utterance",
    ) -> None:
        names = [check_name(str(n)) for n in names]
        if not 1 <= len(names) <= MAX_SPEAKERS:
            raise InvalidMessage(f"1..{MAX_SPEAKERS} enrolled speakers needed, got {len(names)}")
        if len(set(names)) != len(names):
            raise InvalidMessage("speaker names must be unique")
        means = _real("means", means, (len(names), ubm.n_components, ubm.dim))
        if not np.isfinite(threshold):
            raise InvalidMessage(f"threshold must be finite, got {threshold!r}")
        if cmn not in CMN_MODES:
            raise InvalidMessage(f"cmn must be one of {list(CMN_MODES)}, got {cmn!r}")
        means.setflags(write=False)
        self.ubm, self.names, self.means = ubm, tuple(names), means
        self.threshold, self.relevance, self.cmn = float(threshold), float(relevance), cmn

    @property
    def n_speakers(self) -> int:
        return len(self.names)

    def index(self, name: str) -> int:
        try:
            return self.names.index(name)
        except ValueError:
            raise InvalidMessage(f"no enrolled speaker {name!r}") from None

    def speaker(self, i: int) -> DiagGMM:
        return self.ubm.with_means(self.means[i])

    def score(self, i: int, X: np.ndarray) -> float:
        return llr_score(self.ubm, self.means[i], X)

    def scores(self, X: np.ndarray) -> np.ndarray:
        """Every enrolled speaker's average frame LLR (plaintext), reusing the UBM's frame scores."""
        base = self.ubm.loglik(X)
        return np.array([(self.speaker(i).loglik(X) - base) / len(X) for i in range(self.n_speakers)])

    def verify(self, name: str, X: np.ndarray) -> bool:
        return self.score(self.index(name), X) >= self.threshold

    def identify(self, X: np.ndarray) -> str | None:
        s = self.scores(X)
        best = int(np.argmax(s))
        return self.names[best] if s[best] >= self.threshold else None

    @staticmethod
    def hmm_set(gmms: Sequence[DiagGMM], labels: Sequence[str]) -> KeywordModels:
        """The GMMs as one-state mixture HMMs (π = 1, a₁₁ = 1): the forward algorithm of such a model is
        Σ_t log p(x_t | λ), the utterance's log-likelihood with independent frames."""
        D = len(gmms)
        return KeywordModels(
            list(labels),
            np.ones((D, 1)),
            np.ones((D, 1, 1)),
            means=np.stack([g.means for g in gmms])[:, None],
            covars=np.stack([g.covars for g in gmms])[:, None],
            weights=np.stack([g.weights for g in gmms])[:, None],
        )

    def save(self, path: str | os.PathLike) -> None:
        p = os.fspath(path)
        if not p.endswith(".npz"):
            raise InvalidMessage(f"speaker models file name must end in .npz, got {p!r}")
        np.savez_compressed(
            p,
            kind=np.array("speakers"),
            format_version=np.int64(FORMAT_VERSION),
            ubm_weights=self.ubm.weights,
            ubm_means=self.ubm.means,
            ubm_covars=self.ubm.covars,
            names=np.array(self.names, dtype=str),
            means=self.means,
            threshold=np.float64(self.threshold),
            relevance=np.float64(self.relevance),
            cmn=np.array(self.cmn),
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> SpeakerModels:
        p = os.fspath(path)
        a = _load_npz(p, "speaker models")
        keys = {
            "kind",
            "format_version",
            "ubm_weights",
            "ubm_means",
            "ubm_covars",
            "names",
            "means",
            "threshold",
            "relevance",
            "cmn",
        }
        _check_keys(a, keys, keys, "speakers", p)
        names = np.asarray(a["names"])
        if names.ndim != 1 or names.dtype.kind != "U":
            raise InvalidMessage(f"{p}: 'names' must be a 1-D array of strings")
        try:
            ubm = DiagGMM(a["ubm_weights"], a["ubm_means"], a["ubm_covars"])
            return cls(
                ubm,
                [str(n) for n in names],
                a["means"],
                threshold=_scalar(a, "threshold", p),
                relevance=_scalar(a, "relevance", p),
                cmn=_cmn(a, p),
            )
        except InvalidMessage as exc:
            raise InvalidMessage(f"{p}: {exc}") from None
