"""Fixtures for the DGK, comparison and Naor–Pinkas OT unit tests.

DGK keys here are deliberately tiny (512-bit modulus, t = 32): every use
opts in with ``allow_insecure=True``.
"""

from __future__ import annotations

import pytest

from smcdp.crypto import dgk
from tests.unit.protocols.aggregate_util import small_dgk, small_paillier


@pytest.fixture(scope="session")
def small_key() -> dgk.DGKPrivateKey:
    """Test key supporting comparisons of up to 128 bits (u = 131)."""
    return dgk.generate_keypair(512, 32, max_ell=128, allow_insecure=True)


@pytest.fixture(scope="session")
def keys():
    """Small Paillier keys ζ, ξ, β and a DGK key for the secure-minimum and aggregation tests."""

    return {
        "zeta": small_paillier(768, 1),
        "xi": small_paillier(768, 2),
        "beta": small_paillier(768, 3),
        "dgk": small_dgk(),
    }
