"""Plaintext forward algorithm and the quadratic-form view of Gaussian emissions.

This is the reference the secure keyword protocol is tested against.

* :func:`log_emissions` — the T × N matrix ``log b_j(x_t)`` for discrete,
  diagonal/full Gaussian and Gaussian-mixture emissions.
* :func:`forward_log_alpha` / :func:`log_likelihood` — the forward recursion in
  the log domain (``logsumexp``), so no rescaling is needed and long
  utterances do not underflow:

      log α_1(j)     = log π_j + log b_j(x_1)
      log α_{t+1}(j) = logsumexp_i(log α_t(i) + log a_ij) + log b_j(x_{t+1})
      log P(x | λ)   = logsumexp_j log α_T(j)

  Zero probabilities (the structural zeros of a left-to-right model) become
  ``-inf`` and drop out of ``logsumexp`` exactly.
* :func:`quadratic_form` and friends — for a Gaussian N(μ, C) and
  z = [x; 1] ∈ R^{d+1}, ``log N(x; μ, C) = zᵀ W z`` with the symmetric

      W = [[ -½ C⁻¹ ,   ½ C⁻¹μ ],
           [  ½ μᵀC⁻¹ ,  w     ]],
      w = -½ μᵀC⁻¹μ - ½ ln|C| - (d/2) ln 2π.

  Seed 003 (§4.2.1) writes the equivalent non-symmetric form with C⁻¹μ in the
  top-right block and 0 bottom-left, and prints w with the signs of its first
  two terms flipped (``+½μᵀC⁻¹μ − ½ln|C⁻¹|``); the expression above is the
  correct one (it is what the tests check against the Gaussian log-density).

  The secure protocol needs the coefficients of the *distinct* products
  z_i z_j (i ≤ j): :func:`product_index_pairs` fixes their order and
  :func:`quadratic_coefficients` folds W into one coefficient per product
  (W_ii on the diagonal, W_ij + W_ji off it), so that
  ``log b_j(x) = products(z) · coeffs_j``.  With diagonal covariances only
  x_i², x_i and 1 carry non-zero coefficients (:func:`product_index_pairs`
  with ``"diag"``), 2d + 1 products instead of (d+1)(d+2)/2.
  For mixtures there is one W per component; with ``include_log_weight`` the
  component's log weight is added to the constant entry, and
  ``log b_j(x) = logsumexp_c zᵀ W_{jc} z``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from smcdp.errors import InvalidMessage

from .models import HMM, KeywordModels

_LOG_2PI = float(np.log(2.0 * np.pi))


# --------------------------------------------------------------------------- inputs


def _check_observations(hmm: HMM, X: Any) -> np.ndarray:
    arr = np.asarray(X)
    if hmm.kind == "discrete":
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1 or arr.dtype.kind not in "iu":
            raise InvalidMessage(f"discrete observations must be a 1-D integer array, got {arr.dtype} {arr.shape}")
        if arr.size == 0:
            raise InvalidMessage("observation sequence is empty")
        n_symbols = hmm.n_symbols
        assert n_symbols is not None  # a discrete HMM carries emissionprob (validated in HMM)
        if arr.min() < 0 or arr.max() >= n_symbols:
            raise InvalidMessage(f"observation symbols outside 0..{n_symbols - 1}")
        return arr.astype(np.int64)
    if arr.ndim != 2 or arr.dtype.kind not in "iuf":
        raise InvalidMessage(f"observations must be a T x d real matrix, got {arr.dtype} {arr.shape}")
    if arr.shape[0] == 0:
        raise InvalidMessage("observation sequence is empty")
    if arr.shape[1] != hmm.n_features:
        raise InvalidMessage(f"observations have {arr.shape[1]} features, model expects {hmm.n_features}")
    arr = arr.astype(np.float64)
    if not np.all(np.isfinite(arr)):
        raise InvalidMessage("observations contain NaN or infinite values")
    return arr


def _log(p: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(p)


# --------------------------------------------------------------------------- densities


def gaussian_logpdf_diag(X: np.ndarray, mean: np.ndarray, var: np.ndarray) -> np.ndarray:
    """log N(x_t; mean, diag(var)) for each row of X."""
    diff = X - mean
    return -0.5 * (mean.shape[-1] * _LOG_2PI + np.sum(np.log(var)) + np.sum(diff * diff / var, axis=1))


def gaussian_logpdf_full(X: np.ndarray, mean: np.ndarray, cov: np.ndarray) -> np.ndarray:
    """log N(x_t; mean, cov) for each row of X (Cholesky; cov validated positive definite)."""
    L = np.linalg.cholesky(cov)
    from scipy.linalg import solve_triangular  # lazily: scipy's import is a party's start-up cost

    sol = solve_triangular(L, (X - mean).T, lower=True)
    logdet = 2.0 * np.sum(np.log(np.diag(L)))
    return -0.5 * (mean.shape[-1] * _LOG_2PI + logdet + np.sum(sol * sol, axis=0))


def _state_logpdf(X, mean, cov, cov_type):
    if cov_type == "diag":
        return gaussian_logpdf_diag(X, mean, cov)
    return gaussian_logpdf_full(X, mean, cov)


def log_emissions(hmm: HMM, X: Any) -> np.ndarray:
    """The T × N matrix ``log b_j(x_t)``."""
    from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

    obs = _check_observations(hmm, X)
    N = hmm.n_states
    if hmm.kind == "discrete":
        assert hmm.emissionprob is not None  # a discrete HMM carries emissionprob (validated in HMM)
        return _log(hmm.emissionprob)[:, obs].T
    means, covars = hmm.means, hmm.covars
    assert means is not None and covars is not None  # every Gaussian HMM has both (validated in HMM)
    T = obs.shape[0]
    out = np.empty((T, N))
    ct = hmm.covariance_type
    for j in range(N):
        if hmm.kind in ("diag", "full"):
            out[:, j] = _state_logpdf(obs, means[j], covars[j], ct)
        else:
            weights, n_mix = hmm.weights, hmm.n_mix
            assert weights is not None and n_mix is not None  # mixtures have weights (validated in HMM)
            comp = np.stack([_state_logpdf(obs, means[j, c], covars[j, c], ct) for c in range(n_mix)], axis=1)
            out[:, j] = logsumexp(comp + _log(weights[j])[None, :], axis=1)
    return out


# --------------------------------------------------------------------------- forward


def _logsumexp0(M: np.ndarray) -> np.ndarray:
    """logsumexp over axis 0 (a lean version of scipy's for the per-frame hot loop).

    Columns that are all ``-inf`` give ``-inf``; no ``+inf`` can occur here.
    """
    mx = M.max(axis=0)
    shift = np.where(np.isfinite(mx), mx, 0.0)
    with np.errstate(divide="ignore"):
        return np.log(np.exp(M - shift).sum(axis=0)) + shift


def forward_from_log_emissions(startprob: np.ndarray, transmat: np.ndarray, log_b: np.ndarray) -> np.ndarray:
    """Log-domain forward recursion given log b (T × N); returns log α (T × N)."""
    log_pi = _log(np.asarray(startprob, dtype=float))
    log_A = _log(np.asarray(transmat, dtype=float))
    T, N = log_b.shape
    log_alpha = np.empty((T, N))
    log_alpha[0] = log_pi + log_b[0]
    for t in range(1, T):
        log_alpha[t] = _logsumexp0(log_alpha[t - 1][:, None] + log_A) + log_b[t]
    return log_alpha


def forward_log_alpha(hmm: HMM, X: Any) -> np.ndarray:
    """log α_t(j) for t = 1..T (rows) and j = 1..N (columns)."""
    return forward_from_log_emissions(hmm.startprob, hmm.transmat, log_emissions(hmm, X))


def log_likelihood(hmm: HMM, X: Any) -> float:
    """log P(x_1..x_T | λ) by the forward algorithm (``-inf`` if the sequence is impossible)."""
    from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

    return float(logsumexp(forward_log_alpha(hmm, X)[-1]))


def score_models(models: KeywordModels, X: Any) -> np.ndarray:
    """log P(x | λ_δ) for every keyword model δ (shape (Δ,))."""
    return np.array([log_likelihood(models.hmm(i), X) for i in range(models.n_words)])


def recognise(models: KeywordModels, X: Any) -> tuple[int, str, np.ndarray]:
    """Plaintext keyword recognition: (argmax index, word, all log-likelihoods)."""
    scores = score_models(models, X)
    k = int(np.argmax(scores))
    return k, models.words[k], scores


# --------------------------------------------------------------------------- quadratic form


def quadratic_form(mean: Any, cov: Any, *, log_weight: float = 0.0) -> np.ndarray:
    """Symmetric W ((d+1) × (d+1)) with zᵀWz = log N(x; mean, cov) + log_weight, z = [x; 1].

    ``cov`` is a (d,) vector of variances (diagonal) or a (d, d) covariance.
    """
    mu = np.asarray(mean, dtype=float)
    c = np.asarray(cov, dtype=float)
    if mu.ndim != 1:
        raise InvalidMessage(f"mean must be a vector, got shape {mu.shape}")
    d = mu.shape[0]
    if c.shape == (d,):
        if np.any(c <= 0):
            raise InvalidMessage("variances must be positive")
        P = np.diag(1.0 / c)
        logdet = float(np.sum(np.log(c)))
    elif c.shape == (d, d):
        try:
            L = np.linalg.cholesky(c)
        except np.linalg.LinAlgError as exc:
            raise InvalidMessage("covariance is not positive definite") from exc
        Linv = np.linalg.inv(L)
        P = Linv.T @ Linv
        P = 0.5 * (P + P.T)
        logdet = 2.0 * float(np.sum(np.log(np.diag(L))))
    else:
        raise InvalidMessage(f"cov must have shape ({d},) or ({d}, {d}), got {c.shape}")
    Pm = P @ mu
    W = np.empty((d + 1, d + 1))
    W[:d, :d] = -0.5 * P
    W[:d, d] = 0.5 * Pm
    W[d, :d] = 0.5 * Pm
    W[d, d] = -0.5 * float(mu @ Pm) - 0.5 * logdet - 0.5 * d * _LOG_2PI + float(log_weight)
    return W


def quadratic_forms(hmm: HMM, *, include_log_weight: bool = True) -> np.ndarray:
    """W_j for every state: (N, d+1, d+1); for mixtures (N, C, d+1, d+1).

    With mixtures and ``include_log_weight`` the constant entry of W_{jc}
    includes log w_{jc}, so log b_j(x) = logsumexp_c zᵀ W_{jc} z.
    """
    if hmm.kind == "discrete":
        raise InvalidMessage("quadratic forms exist only for Gaussian emissions")
    N, d = hmm.n_states, hmm.n_features
    means, covars = hmm.means, hmm.covars
    assert d is not None and means is not None and covars is not None  # Gaussian HMM (validated in HMM)
    if hmm.kind in ("diag", "full"):
        return np.stack([quadratic_form(means[j], covars[j]) for j in range(N)])
    C, weights = hmm.n_mix, hmm.weights
    assert C is not None and weights is not None  # mixtures have weights (validated in HMM)
    out = np.empty((N, C, d + 1, d + 1))
    logw = _log(weights)
    for j in range(N):
        for c in range(C):
            lw = float(logw[j, c]) if include_log_weight else 0.0
            out[j, c] = quadratic_form(means[j, c], covars[j, c], log_weight=lw)
    return out


def augment(X: Any) -> np.ndarray:
    """z_t = [x_t; 1] for each row: (T, d) → (T, d+1)."""
    A = np.asarray(X, dtype=float)
    if A.ndim == 1:
        return np.append(A, 1.0)
    return np.hstack([A, np.ones((A.shape[0], 1))])


def product_index_pairs(d: int, covariance_type: str = "full") -> tuple[np.ndarray, np.ndarray]:
    """Index pairs (i, j), i ≤ j, of the products z_i z_j a protocol must encrypt (z ∈ R^{d+1}).

    ``full``: all (d+1)(d+2)/2 pairs in ``numpy.triu_indices`` order.
    ``diag``: the 2d+1 pairs with possibly non-zero coefficients — (i, i) and
    (i, d) for i < d, then (d, d) — in ``triu_indices`` order.
    ``linear``: the d+1 pairs (i, d) — the features themselves and 1 — of forms
    without second-degree terms (the difference of two diagonal Gaussians'
    forms with equal variances: a speaker model against its UBM).
    """
    if not isinstance(d, (int, np.integer)) or d < 1:
        raise InvalidMessage(f"d must be a positive integer, got {d!r}")
    I, J = np.triu_indices(d + 1)
    if covariance_type == "full":
        return I, J
    keep = _kept_pairs(I, J, d, covariance_type)
    return I[keep], J[keep]


#: the product sets of :func:`product_index_pairs`
COVARIANCE_TYPES = ("full", "diag", "linear")


def _kept_pairs(I: np.ndarray, J: np.ndarray, d: int, covariance_type: str) -> np.ndarray:
    if covariance_type == "diag":
        return np.asarray((I == J) | np.equal(J, d))
    if covariance_type == "linear":
        return np.equal(J, d)
    if covariance_type == "full":
        return np.ones(I.shape, dtype=bool)
    raise InvalidMessage(f"covariance_type must be one of {list(COVARIANCE_TYPES)}, got {covariance_type!r}")


def products(X: Any, covariance_type: str = "full") -> np.ndarray:
    """Alice's side: the distinct products z_i z_j of z_t = [x_t; 1] for each frame, (T, P)."""
    Z = augment(X)
    if Z.ndim == 1:
        Z = Z[None, :]
    I, J = product_index_pairs(Z.shape[1] - 1, covariance_type)
    return Z[:, I] * Z[:, J]


def quadratic_coefficients(W: Any, covariance_type: str = "full") -> np.ndarray:
    """Bob's side: fold W (..., d+1, d+1) into one coefficient per product, (..., P).

    ``products(x) @ quadratic_coefficients(W)`` equals zᵀWz.  For ``diag`` the
    dropped coefficients must be zero (checked), i.e. W's x-block is diagonal; for
    ``linear`` W's whole x-block is zero.
    """
    Wa = np.asarray(W, dtype=float)
    if Wa.ndim < 2 or Wa.shape[-1] != Wa.shape[-2]:
        raise InvalidMessage(f"W must be (..., d+1, d+1), got shape {Wa.shape}")
    d = Wa.shape[-1] - 1
    S = Wa + np.swapaxes(Wa, -1, -2)
    I, J = np.triu_indices(d + 1)
    full = np.where(I == J, Wa[..., I, J], S[..., I, J])
    keep = _kept_pairs(I, J, d, covariance_type)
    if np.any(full[..., ~keep] != 0):
        raise InvalidMessage(
            "W has off-diagonal x-terms: not a diagonal-covariance form"
            if covariance_type == "diag"
            else "W has second-degree x-terms: not a linear form"
        )
    return full[..., keep]


def log_emissions_quadratic(hmm: HMM, X: Any) -> np.ndarray:
    """log b_j(x_t) computed through the quadratic forms (what the secure protocol evaluates)."""
    obs = _check_observations(hmm, X)
    Z = augment(obs)
    Ws = quadratic_forms(hmm)
    if hmm.kind in ("diag", "full"):
        return np.einsum("ti,nij,tj->tn", Z, Ws, Z)
    comp = np.einsum("ti,ncij,tj->tnc", Z, Ws, Z)
    from scipy.special import logsumexp  # lazily: scipy's import is a party's start-up cost

    return logsumexp(comp, axis=2)
