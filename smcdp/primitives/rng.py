"""Protocol randomness: the one place where a role's random draws come from.

Every mask, permutation, scaling factor, decoy choice and DP noise draw of a
protocol role comes from here; Paillier encryption randomness does not (it
always uses the OS CSPRNG, :mod:`smcdp.crypto.paillier`).

* Without a seed (``seed=None``, the default everywhere) every generator is
  the operating system's CSPRNG.
* An experiment may pass an explicit integer seed.  It is expanded with
  SHA-256 over labels — protocol, role, purpose — so that two roles given the
  same session seed never draw the same values, and two purposes within a
  role never share a stream.  A seeded generator is *not* cryptographically
  secure (Mersenne Twister / PCG64): seeds are for reproducible experiments
  and tests only, which is why a party accepts a peer's session seed only if
  its own configuration allows seeded sessions.
"""

from __future__ import annotations

import hashlib
import random
import secrets

import numpy as np

__all__ = ["derive_seed", "noise_generator", "protocol_rng", "stream_key"]


def derive_seed(seed: int | None, *labels: str) -> int | None:
    """A 256-bit seed for the stream named by ``labels`` (None stays None: secure randomness)."""
    if seed is None:
        return None
    text = "/".join(("smcdp", *labels, str(int(seed))))
    return int.from_bytes(hashlib.sha256(text.encode()).digest(), "big")


def protocol_rng(seed: int | None, *labels: str) -> random.Random:
    """Masks, permutations, scalings: ``random.SystemRandom`` unless an experiment fixes ``seed``."""
    derived = derive_seed(seed, *labels)
    return random.SystemRandom() if derived is None else random.Random(derived)


def stream_key(seed: int | None, *labels: str) -> bytes:
    """32 bytes that key a deterministic stream (e.g. SHAKE-256 over block indices, issue 17):
    from the OS CSPRNG without a seed, derived from ``seed`` and ``labels`` with one."""
    derived = derive_seed(seed, *labels, "stream-key")
    return secrets.token_bytes(32) if derived is None else derived.to_bytes(32, "big")


def noise_generator(seed: int | None, *labels: str) -> np.random.Generator | None:
    """DP noise source for :mod:`smcdp.dp.mechanisms` (``random_state``).

    ``None`` means the mechanisms' own CSPRNG (:class:`smcdp.dp.samplers.SecureSource`);
    with a seed, a PCG64 generator for reproducible experiments.
    """
    derived = derive_seed(seed, *labels)
    return None if derived is None else np.random.default_rng(derived)
