"""Plug-in for privacy-preserving power iteration: a data party's matrix file -> its role."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

import numpy as np

from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InputRejected
from smcdp.net.channel import Channel
from smcdp.plugins.base import OutputFlow, ProtocolPlugin, SessionContext, SessionSummary
from smcdp.protocols.base import check_roles
from smcdp.protocols.power_iteration import (
    TRENT,
    PowerIterationParams,
    check_matrix,
    data_party,
    trent,
)


def load_matrix(path) -> np.ndarray:
    """A float matrix from a ``.npy`` file (no pickles), validated."""
    try:
        A = np.load(path, allow_pickle=False)
    except FileNotFoundError:
        raise InputRejected("the configured data file does not exist", str(path)) from None
    except (ValueError, OSError) as exc:
        raise InputRejected("the data file is not a valid .npy array", f"{path}: {exc}") from None
    return check_matrix(A)


class PowerIterationPlugin(ProtocolPlugin):
    name = "power-iteration"
    coordinating_roles = (TRENT,)

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = PowerIterationParams.from_mapping(params)
        check_roles(self.name, roles, {TRENT, *p.data_roles})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = PowerIterationParams.from_mapping(params)
        data = tuple(p.data_roles)
        # exact outputs: u (every data party) and x, the parties' blocks A_i^T v / sqrt(S) in clear (trent)
        return SessionSummary(protocol=self.name, key_bits={"paillier": p.key_bits}, data_roles=data,
                              coordinator_roles=(TRENT,),
                              outputs=(OutputFlow("u", data, data), OutputFlow("x", (TRENT,), data)))
    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return PowerIterationParams.from_mapping(params).traffic_envelope(role)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = PowerIterationParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == TRENT:
            return asdict(await trent(ch, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys))
        A = load_matrix(self.input_path(ctx, "data", ch.me))
        return asdict(await data_party(ch, A, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys))
