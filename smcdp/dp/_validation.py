"""Shared argument checks, public-bound handling and small linear-algebra helpers
for the DP learners.

Everything here is data-independent bookkeeping: checking that ``epsilon``,
``delta``, ``lam`` ... are well formed, clipping or rejecting rows that fall
outside the *public* bounds the caller declared, and the PSD repairs used by
the Gaussian learners.  Two rules are enforced throughout:

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

import numpy as np

from smcdp.errors import InvalidMessage

__all__ = [
    "InvalidParameter",
    "PrivacyLeakWarning",
    "check_delta",
    "check_epsilon",
    "check_out_of_bounds",
    "check_positive",
    "clip_rows_to_norm",
    "clip_to_bounds",
    "is_private",
    "project_psd",
    "repair_eigen",
    "repair_nearest",
    "resolve_bounds",
    "resolve_data_norm",
]


class InvalidParameter(InvalidMessage, ValueError):
    """An argument of a DP learner is invalid.

    Subclasses both :class:`smcdp.errors.InvalidMessage` (so the transport
    reports INVALID_ARGUMENT) and :class:`ValueError` (so scikit-learn's
    estimator checks, which expect ``ValueError`` for bad input, accept it).
    """


class PrivacyLeakWarning(UserWarning):
    """The requested operation reads something from the private data that a
    differentially private learner should take as a public input."""


def is_private(epsilon: float) -> bool:
    return not math.isinf(epsilon)


def check_epsilon(epsilon, name: str = "epsilon") -> float:
    """``epsilon`` must be a real number > 0; ``float('inf')`` means non-private."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise InvalidParameter(f"{name} must be a positive real number, got {epsilon!r}")
    epsilon = float(epsilon)
    if math.isnan(epsilon) or epsilon <= 0:
        raise InvalidParameter(f"{name} must be > 0 (use float('inf') for a non-private fit), got {epsilon!r}")
    return epsilon


def check_delta(delta, name: str = "delta", *, allow_zero: bool = True) -> float:
    if isinstance(delta, bool) or not isinstance(delta, numbers.Real):
        raise InvalidParameter(f"{name} must be a real number in [0, 1), got {delta!r}")
    delta = float(delta)
    if math.isnan(delta) or delta < 0 or delta >= 1 or (not allow_zero and delta == 0):
        lo = "(0" if not allow_zero else "[0"
        raise InvalidParameter(f"{name} must lie in {lo}, 1), got {delta!r}")
    return delta


def check_positive(value, name: str, *, allow_zero: bool = False, integer: bool = False):
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InvalidParameter(f"{name} must be a {'positive integer' if integer else 'positive number'}, got {value!r}")
    v = int(value) if integer else float(value)
    if (not integer and (math.isnan(v) or math.isinf(v))) or v < 0 or (v == 0 and not allow_zero):
        raise InvalidParameter(f"{name} must be {'>= 0' if allow_zero else '> 0'} and finite, got {value!r}")
    return v


def check_out_of_bounds(value) -> str:
    if value not in ("clip", "raise"):
        raise InvalidParameter(f"out_of_bounds must be 'clip' or 'raise', got {value!r}")
    return value


def resolve_data_norm(data_norm, X: np.ndarray, *, private: bool, who: str) -> float:
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
        return max(inferred, np.finfo(float).tiny)
    return check_positive(data_norm, "data_norm")


def clip_rows_to_norm(X: np.ndarray, data_norm: float, out_of_bounds: str = "clip") -> np.ndarray:
    """Scale every row with ``||x||_2 > data_norm`` back onto the ball (or raise)."""
    norms = np.linalg.norm(X, axis=1)
    over = norms > data_norm * (1 + 1e-12)
    if not over.any():
        return X
    if out_of_bounds == "raise":
        raise InvalidParameter(
            f"{int(over.sum())} row(s) have L2 norm above data_norm={data_norm:g} "
            "(use out_of_bounds='clip' to project them onto the ball)")
    X = X.copy()
    X[over] *= (data_norm / norms[over])[:, None]
    return X


def resolve_bounds(bounds, X: np.ndarray, *, private: bool, who: str):
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
    outside = (X < lower) | (X > upper)
    if not outside.any():
        return X
    if out_of_bounds == "raise":
        raise InvalidParameter(
            f"{int(outside.any(axis=1).sum())} row(s) fall outside the declared bounds "
            "(use out_of_bounds='clip' to clip them)")
    return np.clip(X, lower, upper)


# --------------------------------------------------------------------------
# PSD repair
# --------------------------------------------------------------------------

def _sym(M: np.ndarray) -> np.ndarray:
    return (M + M.T) / 2.0


def repair_eigen(M: np.ndarray, floor: float = 1e-10) -> np.ndarray:
    """Xi, Kantarcioglu & Inan's heuristic (002, §5 step 3): symmetrise, then
    replace every non-positive eigenvalue by the smallest positive eigenvalue.
    If no eigenvalue is positive, every eigenvalue becomes ``floor`` (the
    paper's "repeat until positive definite" would not terminate)."""
    w, V = np.linalg.eigh(_sym(M))
    pos = w[w > floor]
    repl = pos.min() if pos.size else floor
    w = np.where(w > floor, w, repl)
    return _sym((V * w) @ V.T)


def repair_nearest(M: np.ndarray, floor: float = 1e-10) -> np.ndarray:
    """Nearest symmetric matrix with eigenvalues >= ``floor`` in Frobenius norm
    (Higham 1988: for a symmetric argument the nearest PSD matrix keeps the
    eigenvectors and clips the eigenvalues at zero; we clip at ``floor`` so the
    result is positive definite)."""
    w, V = np.linalg.eigh(_sym(M))
    return _sym((V * np.maximum(w, floor)) @ V.T)


def project_psd(M: np.ndarray) -> np.ndarray:
    """Euclidean projection of a symmetric matrix onto the PSD cone."""
    w, V = np.linalg.eigh(_sym(M))
    return _sym((V * np.maximum(w, 0.0)) @ V.T)


def noise_rng(random_state):
    """What to pass as ``random_state`` to the mechanisms so that several draws in
    one fit use one stream: ``None`` stays ``None`` (the secure source); an int
    or a numpy Generator becomes one seeded Generator (experiments only)."""
    if random_state is None:
        return None
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, (numbers.Integral, np.integer)) and not isinstance(random_state, bool):
        return np.random.default_rng(int(random_state))
    raise InvalidParameter(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")


def aux_rng(random_state) -> np.random.Generator:
    """Generator for randomness that is not privacy noise (initialisation)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None or isinstance(random_state, (numbers.Integral, np.integer)):
        return np.random.default_rng(None if random_state is None else int(random_state))
    raise InvalidParameter(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")
