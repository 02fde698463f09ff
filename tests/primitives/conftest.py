"""Fixtures for the DGK comparison and Naor–Pinkas OT tests.

DGK keys here are deliberately tiny (512-bit modulus, t = 32): every use
opts in with ``allow_insecure=True``.
"""

from __future__ import annotations

import pytest

from smcdp.crypto import dgk


@pytest.fixture(scope="session")
def small_key() -> dgk.DGKPrivateKey:
    """Test key supporting comparisons of up to 128 bits (u = 131)."""
    return dgk.generate_keypair(512, 32, max_ell=128, allow_insecure=True)
