"""Data for power-iteration sessions between real party processes: trent and two data parties with a modest
eigengap (λ₂/λ₁ ≈ 0.55), so a session runs 20-odd rounds -- long enough for a fault at a late round."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.unit.protocols.test_power_iteration import blocks_with_gap

PI_PARAMS = {"n_parties": 2, "key_bits": 512, "p": 0.9, "tol": 1e-10, "max_iterations": 400}
PI_ROLES = {"trent": "trent", "party1": "alice", "party2": "bob"}


def pi_parties(tmp: Path) -> tuple[dict[str, dict], list[np.ndarray]]:
    """Trent and one ``.npy`` block per data party (alice 6 × 5, bob 6 × 7) written to ``tmp``: the ``parties``
    argument of a LocalCluster, and the blocks (for ``plaintext_reference``)."""
    blocks = blocks_with_gap(np.random.default_rng(3), 6, (5, 7), gap=0.45)
    parties: dict[str, dict] = {"trent": {}}
    for name, A in zip(("alice", "bob"), blocks):
        np.save(tmp / f"{name}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}.npy"}}
    return parties, blocks
