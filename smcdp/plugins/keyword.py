"""Plug-in for keyword recognition: Alice's feature file, Bob's model file -> their roles."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

import numpy as np

from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InputRejected, InvalidMessage, PermissionDenied
from smcdp.net.channel import Channel
from smcdp.plugins.base import OutputFlow, ProtocolPlugin, SessionContext, SessionSummary
from smcdp.protocols.base import check_roles
from smcdp.protocols.keyword import (
    ALICE,
    BOB,
    KeywordParams,
    keyword_alice,
    keyword_bob,
)
from smcdp.protocols.secure_forward import MAX_FRAMES
from smcdp.speech.models import KeywordModels, load_models


def load_utterance(path) -> np.ndarray:
    """A T × d float feature matrix (or a 1-D integer symbol sequence) from ``.npy`` (no pickles)."""
    try:
        X = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputRejected("the configured utterance file does not exist", str(path)) from None
    except (ValueError, OSError) as exc:
        raise InputRejected("the utterance file is not a valid .npy array", f"{path}: {exc}") from None
    if X.ndim == 2 and X.dtype.kind in "fiu":
        if not np.all(np.isfinite(X)):
            raise InputRejected("the utterance must not contain NaN or infinite values", str(path))
    elif not (X.ndim == 1 and X.dtype.kind in "iu"):
        raise InputRejected("the utterance must be a T x d real matrix (or 1-D integer symbols)",
                            f"{path}: {X.dtype} {X.shape}")
    if X.shape[0] < 1 or X.shape[0] > MAX_FRAMES:
        raise InputRejected(f"the utterance must have 1..{MAX_FRAMES} frames", f"{path}: {X.shape[0]} frames")
    return X


def load_keyword_models(path) -> KeywordModels:
    return load_models(path)


class KeywordPlugin(ProtocolPlugin):
    name = "keyword"

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = KeywordParams.from_mapping(params)
        check_roles(self.name, roles, {ALICE, BOB})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = KeywordParams.from_mapping(params)
        outputs = [OutputFlow("keyword", (ALICE,), (ALICE, BOB))]
        if p.debug_reveal:
            outputs.append(OutputFlow("log-likelihoods", (ALICE,), (ALICE, BOB)))
        return SessionSummary(protocol=self.name, key_bits={"paillier": p.key_bits},
                              data_roles=(ALICE, BOB), coordinator_roles=(), outputs=tuple(outputs))
    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return KeywordParams.from_mapping(params).traffic_envelope(role)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = KeywordParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == ALICE:
            X = load_utterance(self.input_path(ctx, "utterance", ch.me))
            return asdict(await keyword_alice(ch, X, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys))
        if role == BOB:
            if p.debug_reveal and not ctx.allow_insecure_keys:
                # the initiator chose the parameters: Bob does not hand out every score on request
                raise PermissionDenied(
                    f"{ch.me}: debug_reveal would reveal every model's score to Alice; this party accepts it "
                    "only on a test deployment (party.allow_insecure_keys = true)")
            models = load_keyword_models(self.input_path(ctx, "models", ch.me))
            return asdict(await keyword_bob(ch, models, p, seed=ctx.seed,
                                            allow_insecure_keys=ctx.allow_insecure_keys))
        raise InvalidMessage(f"keyword has no role {role!r}")
