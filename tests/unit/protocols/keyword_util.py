"""Shared helpers for the keyword / secure-HMM tests (small keys are an explicit test-only opt-in)."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from smcdp.net.channel import InMemoryNetwork
from smcdp.speech.models import KeywordModels
from tests.support.paths import KEYWORD_DATA

DATA = KEYWORD_DATA


def run_pair(alice_fn, bob_fn, timeout: float = 120.0):
    net = InMemoryNetwork({"alice": "alice", "bob": "bob"}, timeout=timeout)
    res = asyncio.run(net.run({"alice": alice_fn, "bob": bob_fn}))
    return res, net


def stochastic(rng, *shape, zeros=None):
    a = rng.random(shape) + 0.05
    if zeros is not None:
        a = np.where(zeros, 0.0, a)
    return a / a.sum(-1, keepdims=True)


def left_right(n: int, stay: float = 0.7) -> np.ndarray:
    A = np.zeros((n, n))
    for i in range(n):
        if i + 1 < n:
            A[i, i], A[i, i + 1] = stay, 1 - stay
        else:
            A[i, i] = 1.0
    return A


def synthetic_models(kind: str, rng, D=3, N=4, d=4, C=2, M=6, topology="dense") -> KeywordModels:
    words = [f"w{i}" for i in range(D)]
    if topology == "dense":
        sp, tm = stochastic(rng, D, N), stochastic(rng, D, N, N)
    else:
        sp = np.zeros((D, N))
        sp[:, 0] = 1.0
        tm = np.stack([left_right(N, 0.5 + 0.4 * rng.random()) for _ in range(D)])
    if kind == "discrete":
        return KeywordModels(words, sp, tm, emissionprob=stochastic(rng, D, N, M))
    if kind == "diag":
        return KeywordModels(
            words, sp, tm, means=rng.normal(size=(D, N, d)) * 3, covars=rng.uniform(0.3, 2.0, (D, N, d))
        )
    if kind == "full":
        B = rng.normal(size=(D, N, d, d))
        cov = B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(d)
        return KeywordModels(words, sp, tm, means=rng.normal(size=(D, N, d)) * 3, covars=cov)
    if kind == "gmm-diag":
        return KeywordModels(
            words,
            sp,
            tm,
            means=rng.normal(size=(D, N, C, d)) * 3,
            covars=rng.uniform(0.3, 2.0, (D, N, C, d)),
            weights=stochastic(rng, D, N, C),
        )
    if kind == "gmm-full":
        B = rng.normal(size=(D, N, C, d, d))
        cov = B @ np.swapaxes(B, -1, -2) + 0.5 * np.eye(d)
        return KeywordModels(
            words, sp, tm, means=rng.normal(size=(D, N, C, d)) * 3, covars=cov, weights=stochastic(rng, D, N, C)
        )
    raise ValueError(kind)


def fixture_utterances():
    labels = json.loads((DATA / "labels.json").read_text())
    return [(DATA / u["file"], u) for u in labels["utterances"]]


def bounds_for(models: KeywordModels, X) -> dict:
    """The tightest public bounds (issue 24: max_frames, max_models, ...) a session with these models and
    observations runs under: the sessions of the correctness tests use them, so they also show that
    inputs exactly at the bounds pass."""
    return {
        "max_frames": len(X),
        "max_models": models.n_words,
        "max_states": models.n_states,
        "max_mixtures": models.n_mix or 1,
        "max_features": models.n_symbols if models.kind == "discrete" else models.n_features,
    }
