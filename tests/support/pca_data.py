"""Data with a clear spectral gap for the DP mode of power iteration (issue 25): the utility tests and
bench/dp_power_iteration_bench.py use the same matrices."""

from __future__ import annotations

import math

import numpy as np


def spectral_gap_data(seed: int, k: int = 20, n: int = 20_000) -> np.ndarray:
    """k × n, every column of norm <= 1 (median ~0.63): two strong directions (weights 0.6 and 0.35,
    eigenvalues of MMᵀ ~5700 and ~2300) over isotropic noise (~90), then columns above norm 1 scaled
    down.  λ2/λ1 ~ 0.4 and λ3/λ2 ~ 0.04: u_1 and u_2 are well separated."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((k, k)))[0]
    M = (
        np.outer(U[:, 0], 0.6 * rng.standard_normal(n))
        + np.outer(U[:, 1], 0.35 * rng.standard_normal(n))
        + 0.3 / math.sqrt(k) * rng.standard_normal((k, n))
    )
    return M / np.maximum(1.0, np.linalg.norm(M, axis=0))


def small_gap_data(seed: int, k: int = 20, n: int = 20_000) -> np.ndarray:
    """Issue 38's second data set: like :func:`spectral_gap_data` but with a small eigengap, λ₂/λ₁ ≈ 0.82
    (weights 0.5 and 0.45 on two directions over the same isotropic noise), every column of norm <= 1."""
    rng = np.random.default_rng(seed)
    U = np.linalg.qr(rng.standard_normal((k, k)))[0]
    M = (
        np.outer(U[:, 0], 0.5 * rng.standard_normal(n))
        + np.outer(U[:, 1], 0.45 * rng.standard_normal(n))
        + 0.3 / math.sqrt(k) * rng.standard_normal((k, n))
    )
    return M / np.maximum(1.0, np.linalg.norm(M, axis=0))


def top_eigenvectors(M: np.ndarray, r: int) -> np.ndarray:
    """numpy's leading r eigenvectors of MMᵀ (k × r), descending (from the k × k matrix, never n × n)."""
    _, V = np.linalg.eigh(M @ M.T)
    return V[:, ::-1][:, :r]
