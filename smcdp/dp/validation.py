"""Every argument check of ``smcdp.dp`` in one place.

Mechanisms, accountants, budgets and learners validate their inputs with the
functions here, so a bad epsilon gets the same message wherever it is passed.
All of them raise :class:`InvalidParameter`, which is both an
:class:`smcdp.errors.InvalidMessage` (the transport reports INVALID_ARGUMENT)
and a :class:`ValueError` (what scikit-learn's estimator checks expect).

Besides the scalar checks the module holds the data-independent bookkeeping of
the learners: clipping or rejecting rows that fall outside the *public* bounds
the caller declared, and the PSD repairs of noisy covariance matrices.  Two
rules hold throughout:

* Bounds (``data_norm``, ``bounds``) are public inputs.  If the caller asks us
  to infer them from the data (``data_norm=None`` / ``bounds=None``) we do it,
  but we emit a :class:`PrivacyLeakWarning` every time, because a bound read
  off the private data is itself a (non-private) release.
* Rows outside the declared bounds are clipped (projected onto the bound set)
  by default, or rejected with :class:`InvalidParameter` when the caller asks
  for ``out_of_bounds="raise"``.  Clipping is a per-row map that does not
  depend on other rows, so it does not change any sensitivity.
"""

from __future__ import annotations

import math
import numbers
import warnings
from decimal import Decimal, InvalidOperation
from typing import Any, Literal, cast, overload

import numpy as np
from numpy.typing import ArrayLike

from smcdp.errors import InvalidMessage, PreconditionFailed

__all__ = [
    "MAX_KEY",
    "MAX_NAME",
    "MAX_NOTE",
    "InvalidParameter",
    "PrivacyLeakWarning",
    "check_choice",
    "check_delta",
    "check_epsilon",
    "check_name",
    "check_note",
    "check_out_of_bounds",
    "check_positive",
    "check_shape",
    "clip_rows_to_norm",
    "clip_to_bounds",
    "decimal_amount",
    "finite_array",
    "is_private",
    "project_psd",
    "refuse_short_of_tol",
    "repair_eigen",
    "repair_nearest",
    "resolve_bounds",
    "resolve_data_norm",
    "set_solver_diagnostics",
    "unfit",
]

#: longest dataset name a budget accepts
MAX_NAME = 200
#: longest reservation key a budget accepts: a party's keys are session ids (up to 192 characters) and their
#: resumes' ``<id>/resume-<n>`` -- at 200 a session of a long id could not be resumed where a budget is kept
MAX_KEY = 256
#: longest note or reason a budget stores
MAX_NOTE = 2000


class InvalidParameter(InvalidMessage, ValueError):
    """An argument of a mechanism, accountant, budget or learner is invalid.

    Subclasses both :class:`smcdp.errors.InvalidMessage` (so the transport
    reports INVALID_ARGUMENT) and :class:`ValueError` (so scikit-learn's
    estimator checks, which expect ``ValueError`` for bad input, accept it).
    """


class PrivacyLeakWarning(UserWarning):
    """The requested operation reads something from the private data that a
    differentially private learner should take as a public input."""


def is_private(epsilon: float) -> bool:
    """Whether a fit with ``epsilon`` is differentially private: any finite epsilon (the learners'
    convention: ``float('inf')`` means a non-private fit)."""
    return not math.isinf(epsilon)


def _real(value: Any, name: str, what: str) -> float:
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise InvalidParameter(f"{name} must be {what}, got {value!r}")
    return float(value)


def check_epsilon(epsilon: Any, name: str = "epsilon", *, allow_inf: bool = True) -> float:
    """``epsilon`` must be a real number > 0.  With ``allow_inf`` (the learners'
    convention) ``float('inf')`` is accepted and means a non-private fit."""
    v = _real(epsilon, name, "a positive real number")
    if math.isnan(v) or v <= 0 or (math.isinf(v) and not allow_inf):
        hint = " (use float('inf') for a non-private fit)" if allow_inf else " and finite"
        raise InvalidParameter(f"{name} must be > 0{hint}, got {epsilon!r}")
    if math.isfinite(v):
        check_magnitude(v, name)  # 1e154 overflowed a learner's budget split; 1e-320 its noise scale
    return v


def check_delta(delta: Any, name: str = "delta", *, allow_zero: bool = True) -> float:
    """``delta`` as a float if it is a real number in [0, 1) -- (0, 1) without ``allow_zero``;
    :class:`InvalidParameter` otherwise."""
    v = _real(delta, name, "a real number in [0, 1)")
    if math.isnan(v) or v < 0 or v >= 1 or (not allow_zero and v == 0):
        lo = "(0" if not allow_zero else "[0"
        raise InvalidParameter(f"{name} must lie in {lo}, 1), got {delta!r}")
    return v


@overload
def check_positive(value: Any, name: str, *, allow_zero: bool = ..., integer: Literal[True]) -> int: ...
@overload
def check_positive(value: Any, name: str, *, allow_zero: bool = ..., integer: Literal[False] = ...) -> float: ...
def check_positive(value: Any, name: str, *, allow_zero: bool = False, integer: bool = False) -> float:
    """A finite real (or, with ``integer``, an integer) that is > 0 (>= 0 with ``allow_zero``)."""
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, kind):
        what = "an integer" if integer else "a number"
        raise InvalidParameter(f"{name} must be {what}, got {value!r}")
    v: float = int(cast(numbers.Integral, value)) if integer else float(value)  # the kind was checked above
    if (not integer and (math.isnan(v) or math.isinf(v))) or v < 0 or (v == 0 and not allow_zero):
        raise InvalidParameter(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


#: the magnitudes a mechanism's or a calibration's epsilon, sensitivity and noise scale may take: inside them every
#: derived quantity (scale = Δ/ε, its square, ρ = Δ²/2σ², the grid 2^e) is a finite, positive double; outside them
#: (ε = 1e-320, Δ = 1e154, σ/Δ = 1e300, say) one overflowed or underflowed to inf, nan or 0
MAGNITUDE_BITS = 200


def check_magnitude(value: Any, name: str) -> float:
    """A finite real in [2^-MAGNITUDE_BITS, 2^MAGNITUDE_BITS] (about 6e-61 .. 1.6e60); :class:`InvalidParameter`
    otherwise."""
    v = check_positive(value, name)
    if not 2.0**-MAGNITUDE_BITS <= v <= 2.0**MAGNITUDE_BITS:
        raise InvalidParameter(f"{name} must lie in [2^-{MAGNITUDE_BITS}, 2^{MAGNITUDE_BITS}], got {value!r}")
    return v


#: the most components (clusters, mixture components, factors) a learner fits: a public cap, so that a count
#: of 2^70 is refused before anything is allocated (it was a MemoryError, or the machine's OOM killer)
MAX_COMPONENTS = 4096


def check_count(value: Any, name: str, hi: int = MAX_COMPONENTS) -> int:
    """An integer in [1, ``hi``]; :class:`InvalidParameter` otherwise."""
    v = check_positive(value, name, integer=True)
    if v > hi:
        raise InvalidParameter(f"{name} must be at most {hi}, got {value!r}")
    return v


def check_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
    """``value`` if it is one of the strings ``choices``; :class:`InvalidParameter` naming ``name`` otherwise."""
    if not isinstance(value, str) or value not in choices:
        raise InvalidParameter(f"{name} must be one of {', '.join(repr(c) for c in choices)}; got {value!r}")
    return value


def check_shape(shape: Any) -> tuple[int, ...]:
    """An int or a tuple of non-negative ints."""
    if isinstance(shape, numbers.Integral) and not isinstance(shape, (bool, np.bool_)):
        shape = (int(shape),)
    try:
        shp = tuple(int(s) for s in shape)
    except (TypeError, ValueError):
        raise InvalidParameter(f"shape must be an int or a tuple of ints, got {shape!r}") from None
    if any(s < 0 for s in shp):
        raise InvalidParameter(f"shape must be non-negative, got {shape!r}")
    return shp


def finite_array(value: Any, name: str = "value") -> np.ndarray:
    """``value`` as a float64 array; NaN and infinity are refused (never released)."""
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise InvalidParameter(f"{name} must be numeric (a number or an array of numbers)") from None
    if not np.all(np.isfinite(arr)):
        raise InvalidParameter(f"{name} contains NaN or infinity; refusing to release it")
    return arr


def decimal_amount(name: str, value: Any, *, allow_zero: bool, upper_one: bool = False) -> Decimal:
    """A budget amount as an exact decimal: floats by their shortest repr, strings
    and ints as written.  Finite, >= 0 (> 0 unless ``allow_zero``), < 1 if ``upper_one``."""
    if isinstance(value, (bool, np.bool_)):
        raise InvalidParameter(f"{name} must be a number, got {value!r}")
    try:
        if isinstance(value, Decimal):
            d = value
        elif isinstance(value, float):
            d = Decimal(repr(value))
        elif isinstance(value, int):
            d = Decimal(value)
        elif isinstance(value, str):
            d = Decimal(value.strip())
        elif isinstance(value, numbers.Real):
            d = Decimal(repr(float(value)))
        else:
            raise TypeError
    except (InvalidOperation, ValueError, TypeError):
        raise InvalidParameter(f"{name} must be a number, got {value!r}") from None
    if not d.is_finite():
        raise InvalidParameter(f"{name} must be finite, got {value!r}")
    if d < 0 or (d == 0 and not allow_zero):
        raise InvalidParameter(f"{name} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    if upper_one and d >= 1:
        raise InvalidParameter(f"{name} must be < 1, got {value!r}")
    return d.normalize() if d != 0 else Decimal(0)


def check_name(value: Any, what: str = "dataset name") -> str:
    """1-200 printable characters without leading or trailing spaces (a reservation key: up to
    :data:`MAX_KEY`)."""
    most = MAX_KEY if what == "reservation key" else MAX_NAME
    if not isinstance(value, str):
        raise InvalidParameter(f"{what} must be a string, got {type(value).__name__}")
    if not value or len(value) > most or not value.isprintable() or value != value.strip():
        raise InvalidParameter(
            f"{what} must be 1-{most} printable characters without leading/trailing spaces, got {value!r}"
        )
    return value


def check_note(value: Any, what: str = "note") -> str:
    """``value`` if it is a string of at most :data:`MAX_NOTE` characters (a charge's note);
    :class:`InvalidParameter` naming ``what`` otherwise."""
    if not isinstance(value, str) or len(value) > MAX_NOTE:
        raise InvalidParameter(f"{what} must be a string of at most {MAX_NOTE} characters")
    return value


def check_out_of_bounds(value: object) -> str:
    """A learner's ``out_of_bounds`` parameter: "clip" or "raise" (see :func:`clip_to_bounds`)."""
    return check_choice(value, "out_of_bounds", ("clip", "raise"))


def resolve_classes(classes: Any, y: np.ndarray, *, private: bool, who: str) -> tuple[np.ndarray, np.ndarray]:
    """(classes_, the index of every label in it): ``classes`` when the caller states the set from public knowledge,
    else the labels' own set -- which is data: replacing the only row of a class changes it (and with it a
    classifier's outputs, its class count and in the large-margin classifier the noise), so a private fit that
    reads it warns (:class:`PrivacyLeakWarning`), as with ``data_norm=None``.  A stated set is sorted (as
    ``np.unique`` sorts), must hold at least two distinct labels, and every label of ``y`` must be in it."""
    if classes is None:
        found, yi = np.unique(y, return_inverse=True)
        if private:
            warnings.warn(
                f"{who}: classes=None, so the set of classes is read from the private labels (replacing the only "
                "row of a class changes it); pass classes= from public knowledge",
                PrivacyLeakWarning,
                stacklevel=3,
            )
        return found, yi
    stated = np.asarray(classes)
    if stated.ndim != 1 or stated.size < 2 or np.unique(stated).size != stated.size:
        raise InvalidParameter(f"classes must be at least two distinct labels, got {classes!r}")
    stated = np.unique(stated)
    try:
        yi = np.searchsorted(stated, y)
    except TypeError:
        raise InvalidParameter("the labels are not of the stated classes' type") from None
    inside = yi < stated.size
    if not np.all(inside) or not np.all(stated[np.where(inside, yi, 0)] == y):
        raise InvalidParameter(f"a label is not one of the stated classes {stated.tolist()!r}")
    return stated, yi


def resolve_data_norm(data_norm: float | None, X: np.ndarray, *, private: bool, who: str) -> float:
    """Return the row-norm bound to use.  ``None`` infers it from ``X`` with a
    loud :class:`PrivacyLeakWarning` when the fit is private."""
    if data_norm is None:
        inferred = float(np.max(np.linalg.norm(X, axis=1))) if X.shape[0] else 0.0
        if private:
            warnings.warn(
                f"{who}: data_norm=None, so the row-norm bound is read from the private data "
                f"(max ||x|| = {inferred:.6g}).  This leaks information and voids the differential "
                "privacy guarantee; pass data_norm from public knowledge instead.",
                PrivacyLeakWarning,
                stacklevel=3,
            )
        return min(max(inferred, 2.0**-MAGNITUDE_BITS), 2.0**MAGNITUDE_BITS)
    return check_magnitude(data_norm, "data_norm")  # 1e-300 made a factor model's transform non-finite


def set_solver_diagnostics(estimator: Any, values: dict[str, Any], *, private: bool, keep: Any, who: str) -> None:
    """Set a solver's diagnostics (``n_iter_``, ``optimality_``, ``converged_``, ...) on a fitted estimator.

    They are computed from the private data and the noise, not from the release alone -- no post-processing
    of it, so not covered by the fit's guarantee (how many iterations, how small the gradient got, tell
    apart neighbouring data sets).  A private fit therefore keeps them only when its caller asks
    (``keep_diagnostics=True``, warned: a :class:`PrivacyLeakWarning`), and the fitted estimator, which its
    owner may pass on, holds nothing beyond the release and public inputs; a non-private fit keeps them
    always.  ``keep`` must be a bool."""
    if not isinstance(keep, (bool, np.bool_)):
        raise InvalidParameter(f"keep_diagnostics must be True or False, got {keep!r}")
    if private and not keep:
        for name in values:  # a refit with keep_diagnostics=False leaves none of a previous fit's
            estimator.__dict__.pop(name, None)
        return
    if private:
        warnings.warn(
            f"{who}: keep_diagnostics=True keeps {', '.join(sorted(values))} on a private fit: they are computed "
            "from the data, not from the noisy release, and are not differentially private -- keep the "
            "estimator to yourself, or refit without them before passing it on.",
            PrivacyLeakWarning,
            stacklevel=4,
        )
    for name, value in values.items():
        setattr(estimator, name, value)


def refuse_short_of_tol(residual: float, tol: float, who: str) -> None:
    """A private fit's solver must reach ``tol``: each mechanism's proof is for the (perturbed) objective's
    minimiser, so a point short of it is not released (PreconditionFailed).  The attained residual is not named:
    it is computed from the data."""
    if not residual <= tol:
        raise PreconditionFailed(
            f"{who}: the solver stopped above tol={tol:g}; nothing was released (raise max_iter or tol)"
        )


def unfit(estimator: Any) -> None:
    """Remove what a fit set (every attribute ending in ``_``): a fit that raised -- a refusal, bad data --
    leaves an estimator that is not fitted, not one holding half of this fit and half of an earlier one."""
    for name in [n for n in vars(estimator) if n.endswith("_") and not n.startswith("_")]:
        delattr(estimator, name)


def clip_rows_to_norm(X: np.ndarray, data_norm: float, out_of_bounds: str = "clip") -> np.ndarray:
    """Scale every row with ``||x||_2 > data_norm`` back onto the ball (or raise).

    Every such row is scaled, also one beyond the bound by a rounding error only (a review: rows up to
    data_norm·(1 + 10⁻¹²) were left as they were, while the sensitivities assume ‖x‖ ≤ data_norm), and by a
    factor 2⁻⁵⁰ short of the bound, so that the float product lands inside; ``"raise"`` still tolerates such
    rounding errors (it clips them) and refuses only rows clearly beyond."""
    norms = np.linalg.norm(X, axis=1)
    over = norms > data_norm
    if not over.any():
        return X
    if out_of_bounds == "raise" and np.any(norms > data_norm * (1 + 1e-12)):
        beyond = int(np.count_nonzero(norms > data_norm * (1 + 1e-12)))
        raise InvalidParameter(
            f"{beyond} row(s) have L2 norm above data_norm={data_norm:g} "
            "(use out_of_bounds='clip' to project them onto the ball)"
        )
    X = X.copy()
    X[over] *= (data_norm / norms[over] * (1.0 - 2.0**-50))[:, None]
    return X


def resolve_bounds(
    bounds: tuple[ArrayLike, ArrayLike] | None, X: np.ndarray, *, private: bool, who: str
) -> tuple[np.ndarray, np.ndarray]:
    """Return ``(lower, upper)`` arrays of length ``n_features``."""
    d = X.shape[1]
    if bounds is None:
        lower, upper = X.min(axis=0), X.max(axis=0)
        if private:
            warnings.warn(
                f"{who}: bounds=None, so the attribute bounds are read from the private data. "
                "This leaks the minimum and maximum of every attribute and voids the differential "
                "privacy guarantee; pass bounds=(lower, upper) from public knowledge instead.",
                PrivacyLeakWarning,
                stacklevel=3,
            )
        upper = np.where(upper > lower, upper, lower + 1.0)
        return lower.astype(float), upper.astype(float)
    try:
        lower, upper = bounds
    except (TypeError, ValueError):
        raise InvalidParameter(f"bounds must be a pair (lower, upper), got {bounds!r}") from None
    try:
        lower = np.broadcast_to(np.asarray(lower, dtype=float), (d,)).copy()
        upper = np.broadcast_to(np.asarray(upper, dtype=float), (d,)).copy()
    except (TypeError, ValueError):
        raise InvalidParameter(f"bounds must be scalars or arrays of length n_features={d}") from None
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise InvalidParameter("bounds must be finite")
    if np.any(upper <= lower):
        raise InvalidParameter("bounds must satisfy lower < upper for every feature")
    return lower, upper


def clip_to_bounds(X: np.ndarray, lower: np.ndarray, upper: np.ndarray, out_of_bounds: str = "clip") -> np.ndarray:
    """``X`` with every value clipped to its column's declared bounds [``lower``, ``upper``]; ``X`` itself
    when all lie within them.  With ``out_of_bounds="raise"`` a row outside them raises
    :class:`InvalidParameter` (saying how many rows) instead of being clipped."""
    outside = (lower > X) | (upper < X)
    if not outside.any():
        return X
    if out_of_bounds == "raise":
        raise InvalidParameter(
            f"{int(outside.any(axis=1).sum())} row(s) fall outside the declared bounds "
            "(use out_of_bounds='clip' to clip them)"
        )
    return np.clip(X, lower, upper)


# --------------------------------------------------------------------------
# PSD repair
# --------------------------------------------------------------------------


def _sym(M: np.ndarray) -> np.ndarray:
    return (M + np.swapaxes(M, -1, -2)) / 2.0


def _rebuild(V: np.ndarray, w: np.ndarray) -> np.ndarray:
    """V diag(w) V^T for one matrix or a stack of them."""
    return _sym((V * w[..., None, :]) @ np.swapaxes(V, -1, -2))


def _resolvable(w: np.ndarray, floor: float) -> np.ndarray:
    """``floor``, raised where it is below what float64 keeps of a matrix's eigenvalues ``w`` once it is rebuilt
    (64·d·ε times the largest in magnitude): below that the rebuilt matrix need not be positive definite."""
    return np.maximum(floor, 64 * w.shape[-1] * np.finfo(float).eps * np.max(np.abs(w), axis=-1, keepdims=True))


def repair_eigen(M: np.ndarray, floor: float = 1e-10) -> np.ndarray:
    """Xi, Kantarcioglu & Inan's heuristic (002, §5 step 3): symmetrise, then
    replace every non-positive eigenvalue by the smallest positive eigenvalue.
    If no eigenvalue is positive, every eigenvalue becomes ``floor`` (the
    paper's "repeat until positive definite" would not terminate).  ``floor`` is
    raised as in :func:`repair_nearest`."""
    w, V = np.linalg.eigh(_sym(M))
    floor = float(np.max(_resolvable(w, floor)))
    pos = w[w > floor]
    repl = pos.min() if pos.size else floor
    w = np.where(w > floor, w, repl)
    return _rebuild(V, w)


def repair_nearest(M: np.ndarray, floor: float = 1e-10) -> np.ndarray:
    """Nearest symmetric matrix with eigenvalues >= ``floor`` in Frobenius norm
    (Higham 1988: for a symmetric argument the nearest PSD matrix keeps the
    eigenvectors and clips the eigenvalues at zero; we clip at ``floor`` so the
    result is positive definite).  A floor below what float64 keeps of the
    eigenvalues once rebuilt (:func:`_resolvable`) is raised to it: a floor of
    5e-39 beside eigenvalues of 1 gave a matrix Cholesky refused."""
    w, V = np.linalg.eigh(_sym(M))
    return _rebuild(V, np.maximum(w, _resolvable(w, floor)))


def project_psd(M: np.ndarray) -> np.ndarray:
    """Euclidean projection of a symmetric matrix (or of each matrix of a stack
    ``(..., d, d)``) onto the PSD cone."""
    w, V = np.linalg.eigh(_sym(M))
    return _rebuild(V, np.maximum(w, 0.0))
