"""Shared helpers for the speech tests: the committed fixture in tests/data/keyword."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tests.support.paths import KEYWORD_DATA

FIXTURE = KEYWORD_DATA


@pytest.fixture(scope="session")
def fixture_dir() -> Path:
    return FIXTURE


@pytest.fixture(scope="session")
def labels() -> dict:
    return json.loads((FIXTURE / "labels.json").read_text())


@pytest.fixture(scope="session")
def test_utterances(labels) -> list[tuple[np.ndarray, int, dict]]:
    return [(np.load(FIXTURE / u["file"], allow_pickle=False), u["index"], u) for u in labels["utterances"]]


@pytest.fixture(scope="session")
def discrete_test() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    with np.load(FIXTURE / "discrete_test.npz", allow_pickle=False) as z:
        seqs = np.split(z["symbols"], np.cumsum(z["lengths"])[:-1])
        return seqs, z["labels"].copy(), z["codebook"].copy()
