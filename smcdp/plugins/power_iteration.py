"""Plug-in for privacy-preserving power iteration: a data party's matrix (file, shard folder or Zarr
array) and its compute engine -> its role; results -> JSON and files in the session's output directory.

Outputs written by each party (``data_dir/outputs/<session>/``):

* data party: ``u.npy`` (k × r, column j = u_j) and ``x_block.npy`` (n_i × r): its blocks of
  σ_j·A_iᵀu_j, i.e. its rows of x_j up to a factor common to all parties;
* Trent: ``x.npy`` (n × r, column j = x_j).  Above :data:`INLINE_MAX` samples the record carries the
  path of that file (``x_file``) instead of the vectors themselves (``x`` and the components' ``x``
  are then null), so that session records and their replies stay small.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Mapping

import numpy as np

from smcdp.compute import engine_for, open_matrix
from smcdp.crypto.paillier import check_key_bits
from smcdp.net.channel import Channel
from smcdp.plugins.base import ProtocolPlugin, SessionContext
from smcdp.protocols.base import check_roles
from smcdp.protocols.power_iteration import (
    ALPHA_INLINE_MAX,
    TRENT,
    PowerIterationParams,
    data_party,
    trent,
)


#: Trent's record holds x_1 … x_r inline up to this many samples (the same limit as a party's own block)
INLINE_MAX = ALPHA_INLINE_MAX


class PowerIterationPlugin(ProtocolPlugin):
    name = "power-iteration"

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = PowerIterationParams.from_mapping(params)
        check_roles(self.name, roles, {TRENT, *p.data_roles})
        return asdict(p)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = PowerIterationParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        if role == TRENT:
            res = await trent(ch, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
            out = asdict(res)
            if ctx.output_dir is not None:
                path = ctx.output_dir / "x.npy"
                np.save(path, np.column_stack([c["x"] for c in res.components]))
                out["x_file"] = str(path)
                if len(res.x) > INLINE_MAX:
                    out["x"] = None
                    out["components"] = [{"x": None} for _ in res.components]
            return out
        source = open_matrix(self.input_path(ctx, "data", ch.me), block_values=ctx.compute.block_values)
        blocks = sink = None
        if ctx.output_dir is not None:
            blocks = np.lib.format.open_memmap(ctx.output_dir / "x_block.npy", mode="w+", dtype=np.float64,
                                               shape=(source.n, p.components))
            sink = _writer(blocks)
        res = await data_party(ch, source, p, engine=engine_for(ctx.compute), seed=ctx.seed,
                               allow_insecure_keys=ctx.allow_insecure_keys, x_sink=sink)
        if blocks is not None:
            blocks.flush()
            del blocks
            np.save(ctx.output_dir / "u.npy", np.column_stack([c["u"] for c in res.components]))
        out = asdict(res)
        out["data_bytes"] = source.nbytes
        return out


def _writer(blocks: np.ndarray):
    """A sink writing a party's final blocks (col0, n_b × r) into its memory-mapped output file."""
    def sink(col0: int, block: np.ndarray) -> None:
        blocks[col0:col0 + block.shape[0]] = block
    return sink
