"""Data sets for dp-aggregate sessions between real party processes (small, linearly separable with noise)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

#: the data parties and their numbers of records
SIZES = (("alice", 60), ("bob", 45), ("carol", 80))


def dpa_parties(tmp: Path, seed: int = 11) -> dict[str, dict]:
    """Charlie, Dave and one ``.npz`` (3 features, rows of norm ≤ 1, labels ±1) per data party of SIZES,
    written to ``tmp``: the ``parties`` argument of a LocalCluster."""
    rng = np.random.default_rng(seed)
    parties: dict[str, dict] = {"charlie": {}, "dave": {}}
    for name, n in SIZES:
        X = rng.normal(size=(n, 3))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None]
        y = np.where(X @ np.array([1.0, -0.5, 0.2]) + 0.1 * rng.normal(size=n) > 0, 1, -1)
        np.savez(tmp / f"{name}.npz", X=X, y=y)
        parties[name] = {"dp-aggregate": {"data": tmp / f"{name}.npz"}}
    return parties


#: dp-aggregate's shared noise for SIZES' three parties at the tests' insecure 512 bits, h = K − t for t = 1 (without
#: the group: the single-key shared noise)
SHARED_NOISE_PARAMS = {
    "n_parties": 3,
    "dim": 3,
    "epsilon": 1.0,
    "lam": 0.05,
    "key_bits": 512,
    "calibration": "gaussian",
    "delta": 1e-6,
    "noise_parties": 2,
}
#: the group key the sessions name (a (1, 3) key of SIZES' parties)
GROUP = {"key_group": "lab", "key_threshold": 1}
