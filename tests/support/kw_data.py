"""Small data for keyword sessions between real party processes whose subject is not the forward pass (a
session's ending, a late participant): a few frames of the fixture utterance and a few of its models."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.support.paths import KEYWORD_DATA

KW_ROLES = {"alice": "alice", "bob": "bob"}
KW_PARAMS = {"key_bits": 768, "debug_reveal": True}


def kw_parties(tmp: Path, frames: int = 6, words: int = 3) -> dict[str, dict]:
    """Alice's utterance (the first ``frames`` frames of ``utterance_98.npy``) and Bob's models (the first
    ``words`` of ``models.npz``), written to ``tmp``: the ``parties`` argument of a LocalCluster."""
    np.save(tmp / "utterance.npy", np.load(KEYWORD_DATA / "utterance_98.npy")[:frames])
    with np.load(KEYWORD_DATA / "models.npz") as z:
        np.savez(tmp / "models.npz", **{k: z[k][:words] if z[k].ndim else z[k] for k in z.files})
    return {
        "alice": {"keyword": {"utterance": tmp / "utterance.npy"}},
        "bob": {"keyword": {"models": tmp / "models.npz"}},
    }
