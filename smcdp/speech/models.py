"""Keyword HMMs: a validated container, the ``.npz`` file format, training.

File format (``numpy.savez``, read with ``allow_pickle=False``), Δ keywords,
N states, d features, C mixture components, M discrete symbols:

==============  =====================================  ===============================
key             shape                                  meaning
==============  =====================================  ===============================
words           (Δ,) unicode                            keyword labels, unique, non-empty
startprob       (Δ, N)                                  initial state distribution π
transmat        (Δ, N, N)                               a_ij = P(state j at t+1 | i at t)
means           (Δ, N, d)  or (Δ, N, C, d)              Gaussian means (C axis: mixtures)
covars          (Δ, N, d)  or (Δ, N, d, d)              diagonal variances / full covariances
                (Δ, N, C, d) or (Δ, N, C, d, d)         the same per mixture component
weights         (Δ, N, C)                               mixture weights (mixtures only)
emissionprob    (Δ, N, M)                               discrete emissions b_j(v_k)
format_version  ()  int                                 1 (written by :meth:`save`)
==============  =====================================  ===============================

A file holds either ``emissionprob`` (discrete) or ``means`` + ``covars``
(Gaussian), never both.  Mixtures are recognised by the C axis on ``means`` and
then require ``weights``; diagonal versus full covariances by the rank of
``covars`` relative to ``means``.  Every probability vector must be
non-negative and sum to 1 within ``1e-6``; variances must be positive; full
covariances symmetric (relative ``1e-8``) and positive definite (Cholesky);
every number finite.  Unknown keys are rejected.

Training uses hmmlearn (``GaussianHMM`` for single Gaussians, ``GMMHMM`` for
mixtures, ``CategoricalHMM`` for discrete symbols) with a **left-to-right**
topology: the chain starts in state 0, each state either stays or moves to the
next one, the last state is absorbing.  Baum–Welch keeps structural zeros at
zero, so the topology survives training.  Parameters are initialised by a flat
start: each training utterance is cut into N equal segments, and state j is
initialised from the frames of segment j (mean/variance, k-means per segment
for mixtures, smoothed counts for symbols).  This is deterministic given
``random_state`` and better suited to word models than hmmlearn's global
k-means initialisation, which ignores time order.  Variances (eigenvalues for
full covariances) are floored at ``min_covar`` after every M-step, which
hmmlearn itself does only at initialisation (see :func:`_trainer_classes`).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes
from smcdp.errors import InvalidMessage, local_failure
from smcdp.speech.frontend import CMN_MODES

FORMAT_VERSION = 1
STOCHASTIC_ATOL = 1e-6
SYMMETRY_RTOL = 1e-8

KINDS = ("discrete", "diag", "full", "gmm-diag", "gmm-full")

_ALLOWED_KEYS = {
    "words",
    "startprob",
    "transmat",
    "means",
    "covars",
    "weights",
    "emissionprob",
    "format_version",
    "cmn",
}

# Sanity bounds against accidental (or hostile) huge files.
MAX_WORDS = 10_000
MAX_STATES = 1_000
MAX_FEATURES = 1_000
MAX_MIX = 256
MAX_SYMBOLS = 1 << 20


# --------------------------------------------------------------------------- validation


def _float_array(name: str, value: Any) -> np.ndarray:
    try:
        arr = np.asarray(value)
    except Exception as exc:  # pragma: no cover - exotic inputs
        raise InvalidMessage(f"{name}: not an array ({exc})") from exc
    if arr.dtype.kind not in "iuf" or arr.dtype == np.bool_:
        raise InvalidMessage(f"{name}: expected real numbers, got dtype {arr.dtype}")
    arr = np.array(arr, dtype=np.float64, copy=True)
    if not np.all(np.isfinite(arr)):
        raise InvalidMessage(f"{name}: contains NaN or infinite values")
    return arr


def _check_shape(name: str, arr: np.ndarray, shape: tuple[int, ...]) -> None:
    if arr.shape != shape:
        raise InvalidMessage(f"{name}: expected shape {shape}, got {arr.shape}")


def _check_stochastic(name: str, arr: np.ndarray) -> None:
    if np.any(arr < 0):
        raise InvalidMessage(f"{name}: negative probabilities")
    sums = arr.sum(axis=-1)
    bad = np.abs(sums - 1.0) > STOCHASTIC_ATOL
    if np.any(bad):
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise InvalidMessage(
            f"{name}: probabilities must sum to 1 along the last axis (entry {idx} sums to {sums[idx]!r})"
        )


def _check_full_covars(name: str, cov: np.ndarray) -> None:
    d = cov.shape[-1]
    flat = cov.reshape(-1, d, d)
    for k, c in enumerate(flat):
        scale = max(float(np.max(np.abs(c))), np.finfo(float).tiny)
        if np.max(np.abs(c - c.T)) > SYMMETRY_RTOL * scale:
            raise InvalidMessage(f"{name}: covariance matrix {np.unravel_index(k, cov.shape[:-2])} is not symmetric")
        try:
            np.linalg.cholesky(c)
        except np.linalg.LinAlgError as exc:
            raise InvalidMessage(
                f"{name}: covariance matrix {np.unravel_index(k, cov.shape[:-2])} is not positive definite"
            ) from exc


def _validate_words(words: Any) -> tuple[str, ...]:
    if isinstance(words, str):
        raise InvalidMessage("words: expected a sequence of strings, got a single string")
    arr = np.asarray(words)
    if arr.ndim != 1 or arr.size == 0:
        raise InvalidMessage(f"words: expected a non-empty 1-D array, got shape {arr.shape}")
    if arr.dtype.kind != "U":
        raise InvalidMessage(f"words: expected unicode strings, got dtype {arr.dtype}")
    out = tuple(str(w) for w in arr)
    for w in out:
        if not w or w.strip() != w:
            raise InvalidMessage(f"words: empty or space-padded label {w!r}")
    if len(set(out)) != len(out):
        raise InvalidMessage("words: labels must be unique")
    if len(out) > MAX_WORDS:
        raise InvalidMessage(f"words: more than {MAX_WORDS} keywords")
    return out


def _infer_kind(
    means: np.ndarray | None, covars: np.ndarray | None, emissionprob: np.ndarray | None, weights: np.ndarray | None
) -> str:
    if emissionprob is not None:
        if means is not None or covars is not None or weights is not None:
            raise InvalidMessage("discrete models (emissionprob) must not also carry means, covars or weights")
        return "discrete"
    if means is None or covars is None:
        raise InvalidMessage("Gaussian models need both means and covars (or give emissionprob)")
    if means.ndim == 3:
        if weights is not None:
            raise InvalidMessage("weights given but means has no mixture axis (expected (Δ, N, C, d))")
        if covars.ndim == 3:
            return "diag"
        if covars.ndim == 4:
            return "full"
        raise InvalidMessage(f"covars: expected (Δ, N, d) or (Δ, N, d, d), got shape {covars.shape}")
    if means.ndim == 4:
        if weights is None:
            raise InvalidMessage("mixture means (Δ, N, C, d) need mixture weights (Δ, N, C)")
        if covars.ndim == 4:
            return "gmm-diag"
        if covars.ndim == 5:
            return "gmm-full"
        raise InvalidMessage(f"covars: expected (Δ, N, C, d) or (Δ, N, C, d, d) for mixtures, got shape {covars.shape}")
    raise InvalidMessage(f"means: expected (Δ, N, d) or (Δ, N, C, d), got shape {means.shape}")


#: startprob, transmat, means, covars, weights, emissionprob (float64 copies; None where absent), kind
_Stack = tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None, np.ndarray | None, np.ndarray | None, str]


def _validate_stack(
    startprob: Any, transmat: Any, means: Any, covars: Any, weights: Any, emissionprob: Any, n_models: int | None
) -> _Stack:
    """Validate stacked parameters with a leading model axis; return float64 copies + kind."""
    sp = _float_array("startprob", startprob)
    if sp.ndim != 2:
        raise InvalidMessage(f"startprob: expected shape (Δ, N), got {sp.shape}")
    D, N = sp.shape
    if n_models is not None and n_models != D:
        raise InvalidMessage(f"startprob: {D} models but {n_models} words")
    if D < 1 or N < 1:
        raise InvalidMessage("startprob: need at least one model and one state")
    if N > MAX_STATES:
        raise InvalidMessage(f"startprob: more than {MAX_STATES} states")
    tm = _float_array("transmat", transmat)
    _check_shape("transmat", tm, (D, N, N))
    _check_stochastic("startprob", sp)
    _check_stochastic("transmat", tm)

    mu = None if means is None else _float_array("means", means)
    cv = None if covars is None else _float_array("covars", covars)
    w = None if weights is None else _float_array("weights", weights)
    ep = None if emissionprob is None else _float_array("emissionprob", emissionprob)
    kind = _infer_kind(mu, cv, ep, w)

    if kind == "discrete":
        assert ep is not None  # _infer_kind: "discrete" means emissionprob was given
        if ep.ndim != 3 or ep.shape[:2] != (D, N) or ep.shape[2] < 1:
            raise InvalidMessage(f"emissionprob: expected shape ({D}, {N}, M), got {ep.shape}")
        if ep.shape[2] > MAX_SYMBOLS:
            raise InvalidMessage(f"emissionprob: more than {MAX_SYMBOLS} symbols")
        _check_stochastic("emissionprob", ep)
        return sp, tm, None, None, None, ep, kind

    assert mu is not None and cv is not None  # _infer_kind: every Gaussian kind has means and covars
    d = mu.shape[-1]
    if d < 1 or d > MAX_FEATURES:
        raise InvalidMessage(f"means: feature dimension {d} out of range 1..{MAX_FEATURES}")
    if kind in ("diag", "full"):
        _check_shape("means", mu, (D, N, d))
        if kind == "diag":
            _check_shape("covars", cv, (D, N, d))
        else:
            _check_shape("covars", cv, (D, N, d, d))
    else:
        C = mu.shape[2]
        if C < 1 or C > MAX_MIX:
            raise InvalidMessage(f"means: number of mixture components {C} out of range 1..{MAX_MIX}")
        _check_shape("means", mu, (D, N, C, d))
        assert w is not None  # _infer_kind: mixture means require weights
        _check_shape("weights", w, (D, N, C))
        _check_stochastic("weights", w)
        if kind == "gmm-diag":
            _check_shape("covars", cv, (D, N, C, d))
        else:
            _check_shape("covars", cv, (D, N, C, d, d))
    if kind in ("diag", "gmm-diag"):
        if np.any(cv <= 0):
            raise InvalidMessage("covars: diagonal variances must be strictly positive")
    else:
        _check_full_covars("covars", cv)
    return sp, tm, mu, cv, w, None, kind


# --------------------------------------------------------------------------- containers


class _EmissionShape:
    """Shape facts shared by one HMM and a stack of keyword HMMs (last axis of each parameter)."""

    means: np.ndarray | None
    weights: np.ndarray | None
    emissionprob: np.ndarray | None
    kind: str

    @property
    def n_features(self) -> int | None:
        return None if self.means is None else int(self.means.shape[-1])

    @property
    def n_mix(self) -> int | None:
        return None if self.weights is None else int(self.weights.shape[-1])

    @property
    def n_symbols(self) -> int | None:
        return None if self.emissionprob is None else int(self.emissionprob.shape[-1])

    @property
    def covariance_type(self) -> str | None:
        return {"diag": "diag", "full": "full", "gmm-diag": "diag", "gmm-full": "full"}.get(self.kind)


@dataclass(frozen=True, eq=False)
class HMM(_EmissionShape):
    """One validated HMM (no leading model axis).

    ``kind`` is one of ``discrete``, ``diag``, ``full``, ``gmm-diag``,
    ``gmm-full``.  Arrays are float64 copies; treat them as read-only.
    """

    startprob: np.ndarray
    transmat: np.ndarray
    means: np.ndarray | None = None
    covars: np.ndarray | None = None
    weights: np.ndarray | None = None
    emissionprob: np.ndarray | None = None
    kind: str = ""

    def __post_init__(self) -> None:
        def add(a):
            return None if a is None else np.asarray(a)[None, ...]

        sp, tm, mu, cv, w, ep, kind = _validate_stack(
            add(self.startprob),
            add(self.transmat),
            add(self.means),
            add(self.covars),
            add(self.weights),
            add(self.emissionprob),
            None,
        )
        if self.kind and self.kind != kind:
            raise InvalidMessage(f"declared kind {self.kind!r} does not match parameters ({kind!r})")
        for name, val in (
            ("startprob", sp),
            ("transmat", tm),
            ("means", mu),
            ("covars", cv),
            ("weights", w),
            ("emissionprob", ep),
        ):
            arr = None if val is None else val[0]
            if arr is not None:
                arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        object.__setattr__(self, "kind", kind)

    @property
    def n_states(self) -> int:
        return int(self.startprob.shape[0])


class KeywordModels(_EmissionShape):
    """Δ keyword HMMs sharing one emission kind and state count (validated on construction)."""

    def __init__(
        self,
        words: Sequence[str] | np.ndarray,
        startprob: Any,
        transmat: Any,
        *,
        means: Any = None,
        covars: Any = None,
        weights: Any = None,
        emissionprob: Any = None,
        cmn: str | None = None,
    ) -> None:
        if isinstance(words, str):
            raise InvalidMessage("words: expected a sequence of strings, got a single string")
        self.words = _validate_words(words if isinstance(words, np.ndarray) else np.asarray(list(words)))
        sp, tm, mu, cv, w, ep, kind = _validate_stack(
            startprob, transmat, means, covars, weights, emissionprob, len(self.words)
        )
        for a in (sp, tm, mu, cv, w, ep):
            if a is not None:
                a.setflags(write=False)
        self.startprob, self.transmat = sp, tm
        self.means, self.covars, self.weights, self.emissionprob = mu, cv, w, ep
        self.kind = kind
        if cmn is not None and cmn not in CMN_MODES:
            raise InvalidMessage(f"cmn must be one of {CMN_MODES} (or absent), got {cmn!r}")
        #: the cepstral mean normalisation of the front end these models were trained with
        #: (``smcdp speech train --cmn``); None when unknown (models built by hand or by hmmlearn directly)
        self.cmn = cmn

    # -- shape info
    @property
    def n_words(self) -> int:
        return len(self.words)

    @property
    def n_states(self) -> int:
        return int(self.startprob.shape[1])

    def __len__(self) -> int:
        return self.n_words

    def __repr__(self) -> str:
        return (
            f"KeywordModels(kind={self.kind!r}, words={list(self.words)!r}, "
            f"n_states={self.n_states}, n_features={self.n_features}, n_mix={self.n_mix}, "
            f"n_symbols={self.n_symbols})"
        )

    # -- per-word access
    def hmm(self, index: int) -> HMM:
        if not isinstance(index, (int, np.integer)) or not 0 <= index < self.n_words:
            raise InvalidMessage(f"model index {index!r} out of range 0..{self.n_words - 1}")

        def pick(a):
            return None if a is None else a[index]

        return HMM(
            self.startprob[index],
            self.transmat[index],
            pick(self.means),
            pick(self.covars),
            pick(self.weights),
            pick(self.emissionprob),
        )

    def __getitem__(self, word: str) -> HMM:
        try:
            return self.hmm(self.words.index(word))
        except ValueError:
            raise KeyError(word) from None

    def hmms(self) -> list[HMM]:
        return [self.hmm(i) for i in range(self.n_words)]

    @classmethod
    def from_hmms(cls, words: Sequence[str], hmms: Sequence[HMM]) -> KeywordModels:
        if len(words) != len(hmms) or not hmms:
            raise InvalidMessage(f"{len(words)} words but {len(hmms)} HMMs")
        kinds = {h.kind for h in hmms}
        if len(kinds) != 1:
            raise InvalidMessage(f"all HMMs must have the same emission kind, got {sorted(kinds)}")

        def stack(name):
            vals = [getattr(h, name) for h in hmms]
            if vals[0] is None:
                return None
            shapes = {v.shape for v in vals}
            if len(shapes) != 1:
                raise InvalidMessage(f"{name}: HMMs have different shapes {sorted(shapes)}")
            return np.stack(vals)

        return cls(
            list(words),
            stack("startprob"),
            stack("transmat"),
            means=stack("means"),
            covars=stack("covars"),
            weights=stack("weights"),
            emissionprob=stack("emissionprob"),
        )

    # -- file format
    def to_arrays(self) -> dict[str, np.ndarray]:
        out = {
            "words": np.array(self.words, dtype=str),
            "startprob": self.startprob,
            "transmat": self.transmat,
            "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
        }
        for name in ("means", "covars", "weights", "emissionprob"):
            val = getattr(self, name)
            if val is not None:
                out[name] = val
        if self.cmn is not None:
            out["cmn"] = np.array(self.cmn, dtype=str)
        return out

    def save(self, path: str | os.PathLike, *, compressed: bool = True) -> None:
        """Write the ``.npz`` file (the name must end in ``.npz``)."""
        p = os.fspath(path)
        if not p.endswith(".npz"):
            raise InvalidMessage(f"model file name must end in .npz, got {p!r}")
        # allow_pickle=False: every array is numeric or unicode, and the reader refuses pickles too
        (np.savez_compressed if compressed else np.savez)(p, allow_pickle=False, **self.to_arrays())

    @classmethod
    def from_arrays(cls, arrays: Mapping[str, Any]) -> KeywordModels:
        keys = set(arrays)
        unknown = keys - _ALLOWED_KEYS
        if unknown:
            raise InvalidMessage(f"unknown keys in model file: {sorted(unknown)}")
        for req in ("words", "startprob", "transmat"):
            if req not in keys:
                raise InvalidMessage(f"model file lacks {req!r}")
        if "format_version" in keys:
            v = np.asarray(arrays["format_version"])
            if v.shape != () or v.dtype.kind not in "iu" or int(v) != FORMAT_VERSION:
                raise InvalidMessage(f"unsupported format_version {v!r} (this reader knows {FORMAT_VERSION})")
        cmn = None
        if "cmn" in keys:
            c = np.asarray(arrays["cmn"])
            if c.shape != () or c.dtype.kind != "U":
                raise InvalidMessage("'cmn' must be a single string")
            cmn = str(c)
        return cls(
            np.asarray(arrays["words"]),
            arrays["startprob"],
            arrays["transmat"],
            means=arrays.get("means"),
            covars=arrays.get("covars"),
            weights=arrays.get("weights"),
            emissionprob=arrays.get("emissionprob"),
            cmn=cmn,
        )

    @classmethod
    def load(cls, path: str | os.PathLike) -> KeywordModels:
        """Read and fully validate a ``.npz`` model file (never unpickles)."""
        p = os.fspath(path)
        try:
            check_array_sizes(p)
            with NUMPY_HEADERS:
                obj = np.load(p, allow_pickle=False)
        except FileNotFoundError as exc:
            raise InvalidMessage(f"model file not found: {p}") from exc
        except ARRAY_ERRORS as exc:
            if local_failure(exc):
                raise
            raise InvalidMessage(f"cannot read model file {p}: {exc}") from exc
        if not isinstance(obj, np.lib.npyio.NpzFile):
            raise InvalidMessage(f"{p}: expected an .npz archive, got a single array")
        try:
            with obj:
                arrays = {}
                for k in obj.files:
                    try:
                        with NUMPY_HEADERS:  # the member's header is parsed as it is read
                            arrays[k] = obj[k]
                    except ARRAY_ERRORS as exc:
                        if local_failure(exc):
                            raise
                        raise InvalidMessage(f"{p}: cannot read array {k!r}: {exc}") from exc
        except zipfile.BadZipFile as exc:  # pragma: no cover - corrupt archive
            raise InvalidMessage(f"{p}: corrupt archive: {exc}") from exc
        try:
            return cls.from_arrays(arrays)
        except InvalidMessage as exc:
            raise InvalidMessage(f"{p}: {exc}") from exc


def load_models(path: str | os.PathLike) -> KeywordModels:
    return KeywordModels.load(path)


# --------------------------------------------------------------------------- hmmlearn bridge


def to_hmmlearn(hmm: HMM):
    """An hmmlearn model with exactly ``hmm``'s parameters (for scoring/reference)."""
    from hmmlearn import hmm as hl  # deferred: hmmlearn (~0.5 s to import) serves training only

    if hmm.kind == "discrete":
        m = hl.CategoricalHMM(n_components=hmm.n_states, n_features=hmm.n_symbols, init_params="")
        m.emissionprob_ = np.array(hmm.emissionprob)
    elif hmm.kind in ("diag", "full"):
        m = hl.GaussianHMM(n_components=hmm.n_states, covariance_type=hmm.kind, init_params="")
        m.means_ = np.array(hmm.means)
        m.covars_ = np.array(hmm.covars)
        m.n_features = hmm.n_features
    else:
        m = hl.GMMHMM(n_components=hmm.n_states, n_mix=hmm.n_mix, covariance_type=hmm.covariance_type, init_params="")
        m.weights_ = np.array(hmm.weights)
        m.means_ = np.array(hmm.means)
        m.covars_ = np.array(hmm.covars)
        m.n_features = hmm.n_features
    m.startprob_ = np.array(hmm.startprob)
    m.transmat_ = np.array(hmm.transmat)
    return m


def from_hmmlearn(model) -> HMM:
    """Convert a fitted hmmlearn ``GaussianHMM`` / ``GMMHMM`` / ``CategoricalHMM``."""
    from hmmlearn import hmm as hl  # deferred: hmmlearn (~0.5 s to import) serves training only

    if isinstance(model, hl.CategoricalHMM):
        return HMM(model.startprob_, model.transmat_, emissionprob=model.emissionprob_)
    if isinstance(model, hl.GaussianHMM):
        ct = model.covariance_type
        if ct in ("diag", "full"):
            # ``covars_`` always expands to full matrices; ``_covars_`` holds the
            # native (N, d) / (N, d, d) form.
            cov = np.array(model._covars_)
        else:
            raise InvalidMessage(f"unsupported GaussianHMM covariance_type {ct!r} (use diag or full)")
        return HMM(model.startprob_, model.transmat_, means=model.means_, covars=cov)
    if isinstance(model, hl.GMMHMM):
        ct = model.covariance_type
        if ct not in ("diag", "full"):
            raise InvalidMessage(f"unsupported GMMHMM covariance_type {ct!r} (use diag or full)")
        return HMM(model.startprob_, model.transmat_, means=model.means_, covars=model.covars_, weights=model.weights_)
    raise InvalidMessage(f"unsupported hmmlearn model type {type(model).__name__}")


# --------------------------------------------------------------------------- training


def _floor_covars(cov: np.ndarray, cov_type: str, floor: float) -> np.ndarray:
    """Variances (diag) or eigenvalues (full) below ``floor`` are raised to it."""
    if cov_type == "diag":
        return np.maximum(cov, floor)
    sym = 0.5 * (cov + np.swapaxes(cov, -1, -2))
    vals, vecs = np.linalg.eigh(sym)
    if np.all(vals >= floor):
        return sym
    vals = np.maximum(vals, floor)
    out = np.einsum("...ij,...j,...kj->...ik", vecs, vals, vecs)
    return 0.5 * (out + np.swapaxes(out, -1, -2))


_TRAINERS: dict[str, type] = {}


def _trainer_classes() -> dict[str, type]:
    """hmmlearn subclasses (hmmlearn's documented extension points ``_init``/``_do_mstep``).

    * every M-step floors variances / covariance eigenvalues at ``min_covar``
      (hmmlearn applies ``min_covar`` only at initialisation; a collapsing
      mixture component can otherwise reach zero or negative variance);
    * ``GMMHMM._init`` is replaced by the bare base initialisation because all
      parameters are set by :func:`train_word_hmm` -- hmmlearn's version runs
      k-means on every ``fit`` call even when it then keeps the given values.
    """
    if _TRAINERS:
        return _TRAINERS
    from hmmlearn import hmm as hl  # deferred: hmmlearn (~0.5 s to import) serves training only

    class FlooredGaussianHMM(hl.GaussianHMM):
        _covars_: np.ndarray  # declared for the type checker (hmmlearn has no annotations); set by hmmlearn

        def _do_mstep(self, stats):
            super()._do_mstep(stats)
            if "c" in self.params:
                self._covars_ = _floor_covars(np.asarray(self._covars_), self.covariance_type, self.min_covar)

    class FlooredGMMHMM(hl.GMMHMM):
        covars_: np.ndarray  # declared for the type checker (hmmlearn has no annotations); set by hmmlearn

        def _init(self, X, lengths=None):
            super(hl.GMMHMM, self)._init(X, lengths)  # BaseHMM._init: n_features, checks
            self._init_covar_priors()
            self._fix_priors_shape()

        def _do_mstep(self, stats):
            super()._do_mstep(stats)
            if "c" in self.params:
                self.covars_ = _floor_covars(np.asarray(self.covars_), self.covariance_type, self.min_covar)

    _TRAINERS.update(gaussian=FlooredGaussianHMM, gmm=FlooredGMMHMM)
    return _TRAINERS


def left_right_topology(n_states: int, mean_duration: float) -> tuple[np.ndarray, np.ndarray]:
    """Start in state 0; stay with probability 1 − 1/dur, else move on; last state absorbing."""
    if n_states < 1:
        raise InvalidMessage("n_states must be >= 1")
    stay = min(max(1.0 - 1.0 / max(mean_duration, 1.0), 0.05), 0.95)
    startprob = np.zeros(n_states)
    startprob[0] = 1.0
    transmat = np.zeros((n_states, n_states))
    for i in range(n_states - 1):
        transmat[i, i] = stay
        transmat[i, i + 1] = 1.0 - stay
    transmat[-1, -1] = 1.0
    return startprob, transmat


def _segments(lengths: Sequence[int], n_states: int) -> list[np.ndarray]:
    """For each state, the row indices (into the concatenation) of its flat-start segment."""
    per_state: list[list[np.ndarray]] = [[] for _ in range(n_states)]
    offset = 0
    for T in lengths:
        bounds = np.linspace(0, T, n_states + 1)
        for j in range(n_states):
            lo, hi = int(round(bounds[j])), int(round(bounds[j + 1]))
            if hi <= lo:
                hi = min(lo + 1, T)
                lo = hi - 1
            per_state[j].append(offset + np.arange(lo, hi))
        offset += T
    return [np.concatenate(p) for p in per_state]


def _check_sequences(
    sequences: Iterable[Any], discrete: bool, n_symbols: int | None, n_states: int
) -> list[np.ndarray]:
    seqs = []
    for k, s in enumerate(sequences):
        a = np.asarray(s)
        if discrete:
            assert n_symbols is not None  # train_word_hmm requires n_symbols for discrete training
            if a.ndim == 2 and a.shape[1] == 1:
                a = a[:, 0]
            if a.ndim != 1 or a.dtype.kind not in "iu":
                raise InvalidMessage(f"sequence {k}: discrete observations must be a 1-D integer array")
            if a.size and (a.min() < 0 or a.max() >= n_symbols):
                raise InvalidMessage(f"sequence {k}: symbols outside 0..{n_symbols - 1}")
            a = a.astype(np.int64)
        else:
            if a.ndim != 2 or a.dtype.kind not in "iuf":
                raise InvalidMessage(f"sequence {k}: expected a T x d float matrix, got shape {a.shape}")
            a = a.astype(np.float64)
            if not np.all(np.isfinite(a)):
                raise InvalidMessage(f"sequence {k}: non-finite values")
        if a.shape[0] < n_states:
            raise InvalidMessage(f"sequence {k}: {a.shape[0]} frames, fewer than {n_states} states")
        seqs.append(a)
    if not seqs:
        raise InvalidMessage("no training sequences")
    if not discrete:
        dims = {s.shape[1] for s in seqs}
        if len(dims) != 1:
            raise InvalidMessage(f"training sequences have different dimensions {sorted(dims)}")
    return seqs


def train_word_hmm(
    sequences: Iterable[Any],
    *,
    kind: str = "diag",
    n_states: int = 5,
    n_mix: int = 2,
    n_symbols: int | None = None,
    n_iter: int = 20,
    tol: float = 1e-3,
    min_covar: float = 1e-3,
    random_state: int = 0,
) -> HMM:
    """Train one left-to-right HMM on the utterances of one word (Baum–Welch via hmmlearn).

    ``kind``: ``diag`` / ``full`` (GaussianHMM), ``gmm-diag`` / ``gmm-full`` (GMMHMM with
    ``n_mix`` components), ``discrete`` (CategoricalHMM over ``n_symbols`` symbols).
    """
    from hmmlearn import hmm as hl  # deferred: hmmlearn (~0.5 s to import) serves training only

    if kind not in KINDS:
        raise InvalidMessage(f"kind must be one of {KINDS}, got {kind!r}")
    if not isinstance(n_states, int) or n_states < 1:
        raise InvalidMessage("n_states must be a positive integer")
    if not isinstance(n_iter, int) or n_iter < 0:
        raise InvalidMessage("n_iter must be a non-negative integer")
    if not (min_covar > 0):
        raise InvalidMessage("min_covar must be positive")
    discrete = kind == "discrete"
    if discrete and (not isinstance(n_symbols, int) or n_symbols < 1):
        raise InvalidMessage("discrete training needs n_symbols >= 1")
    if kind.startswith("gmm") and (not isinstance(n_mix, int) or n_mix < 1):
        raise InvalidMessage("n_mix must be a positive integer")
    seqs = _check_sequences(sequences, discrete, n_symbols, n_states)
    lengths = [s.shape[0] for s in seqs]
    X = np.concatenate(seqs)
    seg = _segments(lengths, n_states)
    startprob, transmat = left_right_topology(n_states, float(np.mean(lengths)) / n_states)
    common = dict(n_components=n_states, n_iter=n_iter, tol=tol, random_state=random_state, init_params="")

    if discrete:
        assert n_symbols is not None  # checked above: discrete training needs n_symbols >= 1
        counts = np.stack([np.bincount(X[idx], minlength=n_symbols) for idx in seg]).astype(float) + 1.0
        # emissionprob_prior = 2 is add-one smoothing in every M-step: no symbol
        # gets probability 0, so an unseen symbol does not veto a word.
        model = hl.CategoricalHMM(n_features=n_symbols, emissionprob_prior=2.0, params="te", **common)
        model.emissionprob_ = counts / counts.sum(axis=1, keepdims=True)
        Xfit = X.reshape(-1, 1)
    elif kind in ("diag", "full"):
        d = X.shape[1]
        model = _trainer_classes()["gaussian"](covariance_type=kind, min_covar=min_covar, params="tmc", **common)
        model.means_ = np.stack([X[idx].mean(axis=0) for idx in seg])
        if kind == "diag":
            model.covars_ = np.stack([X[idx].var(axis=0) + min_covar for idx in seg])
        else:
            model.covars_ = np.stack([np.cov(X[idx].T, bias=True).reshape(d, d) + min_covar * np.eye(d) for idx in seg])
        Xfit = X
    else:
        from sklearn.cluster import KMeans  # deferred: only codebook training needs scikit-learn

        d = X.shape[1]
        ct = kind[4:]
        means, covs, weights = [], [], []
        for idx in seg:
            Xs = X[idx]
            C = n_mix
            if Xs.shape[0] < 2 * C:
                raise InvalidMessage(f"too few frames ({Xs.shape[0]}) per state for {C} mixture components")
            labels = KMeans(n_clusters=C, n_init=4, random_state=random_state).fit_predict(Xs)
            m_, c_, w_ = [], [], []
            for c in range(C):
                Xc = Xs[labels == c]
                if Xc.shape[0] < 2:  # degenerate cluster: fall back to the state's statistics
                    Xc = Xs
                m_.append(Xc.mean(axis=0))
                if ct == "diag":
                    c_.append(Xc.var(axis=0) + min_covar)
                else:
                    c_.append(np.cov(Xc.T, bias=True).reshape(d, d) + min_covar * np.eye(d))
                w_.append(max(np.sum(labels == c), 1))
            means.append(m_)
            covs.append(c_)
            weights.append(np.asarray(w_, float) / np.sum(w_))
        model = _trainer_classes()["gmm"](n_mix=n_mix, covariance_type=ct, min_covar=min_covar, params="tmcw", **common)
        model.means_ = np.asarray(means)
        model.covars_ = np.asarray(covs)
        model.weights_ = np.asarray(weights)
        Xfit = X
    model.startprob_ = startprob
    model.transmat_ = transmat
    if n_iter > 0:
        model.fit(Xfit, lengths)
    # hmmlearn's M-step may leave rows summing to 1 only up to rounding.
    return from_hmmlearn(model)


def train_keyword_models(data: Mapping[str, Sequence[Any]], **kwargs: Any) -> KeywordModels:
    """Train one HMM per word (``data``: word → list of utterances); see :func:`train_word_hmm`."""
    if not data:
        raise InvalidMessage("no words to train")
    words = list(data)
    hmms = [train_word_hmm(data[w], **kwargs) for w in words]
    return KeywordModels.from_hmms(words, hmms)
