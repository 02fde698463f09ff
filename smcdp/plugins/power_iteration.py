"""Plug-in for privacy-preserving power iteration: a data party's matrix (file, shard folder or Zarr
array) and its compute engine -> its role; results -> JSON and files in the session's output directory.

Outputs written by each party (``data_dir/outputs/<session>/``):

* data party: ``u.npy`` (k × r, column j = u_j) and ``x_block.npy`` (n_i × r): its blocks of
  σ_j·A_iᵀu_j, i.e. its rows of x_j up to a factor common to all parties;
* Trent: ``x.npy`` (n × r, column j = x_j).  Above :data:`INLINE_MAX` samples the record carries the
  path of that file (``x_file``) instead of the vectors themselves (``x`` and the components' ``x``
  are then null), so that session records and their replies stay small.

In the DP mode (``epsilon`` and ``delta`` in the parameters) a data party writes ``u.npy`` and
``x_block.npy`` = A_iᵀu_j, computed locally and never sent; Trent writes nothing (he learns no output).
The session costs every data party's ``[budget]`` (epsilon, delta) (rho for a zCDP ledger), committed
just before its first noisy contribution leaves it (``noisy/0`` in the power mode, ``noisy/cov`` in the
one-release covariance mode).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from smcdp.compute import engine_for, open_matrix
from smcdp.crypto.paillier import check_key_bits
from smcdp.net.channel import Channel
from smcdp.plugins.base import DataBound, OutputFlow, ProtocolPlugin, SessionContext, SessionSummary, hiding_of
from smcdp.plugins.keystore import session_group_key
from smcdp.primitives.rng import Randomness
from smcdp.protocols.base import check_roles
from smcdp.protocols.power_iteration import (
    ALPHA_INLINE_MAX,
    DEFAULT_MAX_SAMPLES,
    MAX_SAMPLES,
    TRENT,
    Party1KeySizes,
    PowerIterationParams,
    check_source,
    data_party,
    dp_calibration,
    dp_release_tag,
    prepare_party1,
    trent,
)
from smcdp.protocols.power_iteration_threshold import refuse_seeded

#: Trent's record holds x_1 … x_r inline up to this many samples (the same limit as a party's own block)
INLINE_MAX = ALPHA_INLINE_MAX


#: the proposer's parameters that hide the data parties' values from Trent and each other (Trent's Gram
#: blinding, the final blocks' factors): each bounded below by the data party's policy (min_hiding)
HIDING = ("blind_bits", "sigma_bits")
#: the exact mode's too: Trent's scale range (a data party learns r_(t+1)/m_t, so r_t -- and with it U_t, the
#: others' summed contribution -- is hidden by min(scale_bits − 8, blind_bits) bits) and the data padding ρ_i (the
#: shift c = Σρ² that keeps the eigenvalues' ratios from the data parties)
EXACT_HIDING = (*HIDING, "scale_bits", "padding")


class PowerIterationPlugin(ProtocolPlugin):
    name = "power-iteration"
    coordinating_roles = (TRENT,)

    def __init__(self) -> None:
        super().__init__()
        #: the key size and table uses of this party's last session as a data party (from its result), which
        #: :meth:`prepare_next` makes party1's next key for; replaced whole, so the preparing thread reads
        #: one session's sizes or the other's, never a mixture
        self.last_key = Party1KeySizes()

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = PowerIterationParams.from_mapping(params)
        check_roles(self.name, roles, {TRENT, *p.data_roles})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = PowerIterationParams.from_mapping(params)
        data = tuple(p.data_roles)
        r, b = p.components, p.block_size
        # a party with more samples than max_samples ends the session: a bit of its data a session
        fixed = p.max_samples >= MAX_SAMPLES or p.max_samples == DEFAULT_MAX_SAMPLES
        samples = DataBound("samples", "at_most", p.max_samples, trivial=fixed)
        bounds = {role: (samples,) for role in data}

        # exact outputs, computed from every data party's matrix:
        # * u_1 … u_r (k entries each) to every data party;
        # * x_1 … x_r to Trent, gathered from the parties' blocks σ_j·A_iᵀu_j sent in clear;
        # * with oversample > 0, every data party also holds the Ritz vectors r+1 … b: approximations
        #   of components nobody asked for (docs/protocols/power-iteration.md, "Who learns what").
        def name(v: str, lo: int, hi: int) -> str:
            return v if lo == hi == 1 else f"{v}_{lo}" if lo == hi else f"{v}_{lo}..{v}_{hi}"

        if p.dp_mode == "covariance":
            # DP covariance mode: every data party receives the noisy k × k matrix Σ_i(Ã_iÃ_iᵀ + E_i)
            # -- every direction of the data, DP -- and takes u_1 … u_r from it; Trent gets only ciphertexts.
            # ``components`` is k: a party's max_components below k refuses this mode (use dp_method power).
            cal = dp_calibration(p)
            k = p.max_dp_rows
            cov_outputs = (
                OutputFlow(name("u", 1, r), data, data, dp=True),
                OutputFlow(f"noisy {k} × {k} covariance (all {k} directions)", data, data, dp=True),
            )
            return SessionSummary(
                protocol=self.name,
                key_bits={"paillier": p.key_bits},
                data_roles=data,
                coordinator_roles=(TRENT,),
                outputs=cov_outputs,
                epsilon=cal.epsilon,
                delta=cal.delta,
                rho=cal.rho,
                components=k,
                noise_parties={r_: p.noise_share for r_ in data},
                key=p.key_kind,
                group_key_mode=True,
                threshold=p.key_threshold if p.key_group is not None else None,
                iterations=p.dp_rounds,
                hiding=hiding_of(p, HIDING),
                data_bounds=bounds,
            )
        if p.dp:
            # DP mode: every data party receives the T noisy aggregates Σ_i(Ã_iÃ_iᵀQ_t + η_i) and
            # takes u_1 … u_r (and, with oversample, b − r more directions) from them; Trent gets only
            # ciphertexts; x is not released.  Each party's releases cost (epsilon, delta), rho-zCDP.
            cal = dp_calibration(p)
            outputs = [OutputFlow(name("u", 1, r), data, data, dp=True)]
            if b > r:
                outputs.append(OutputFlow(f"approximate {name('u', r + 1, b)} (oversample)", data, data, dp=True))
            return SessionSummary(
                protocol=self.name,
                key_bits={"paillier": p.key_bits},
                data_roles=data,
                coordinator_roles=(TRENT,),
                outputs=tuple(outputs),
                epsilon=cal.epsilon,
                delta=cal.delta,
                rho=cal.rho,
                components=b,
                noise_parties={r: p.noise_share for r in data},
                key=p.key_kind,
                group_key_mode=True,
                threshold=p.key_threshold if p.key_group is not None else None,
                iterations=p.dp_rounds,
                hiding=hiding_of(p, HIDING),
                data_bounds=bounds,
            )
        outputs = [OutputFlow(name("u", 1, r), data, data), OutputFlow(name("x", 1, r), (TRENT,), data)]
        if b > r:
            outputs.append(OutputFlow(f"approximate {name('u', r + 1, b)} (oversample)", data, data))
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": p.key_bits},
            data_roles=data,
            coordinator_roles=(TRENT,),
            outputs=tuple(outputs),
            components=b,
            iterations=p.max_iterations,
            hiding=hiding_of(p, EXACT_HIDING),
            data_bounds=bounds,
            key=p.key_kind,
            group_key_mode=True,
            threshold=p.key_threshold if p.key_group is not None else None,
        )

    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return PowerIterationParams.from_mapping(params).traffic_envelope(role)

    def prepare_next(self, root: Randomness, inputs: Mapping[str, str], allow_insecure_keys: bool) -> None:
        """A data party may be the next session's party1, which makes the session's key: made ahead while the
        party is idle, for its last data-party session's key size and table uses, which this plug-in keeps
        (docs/protocols/power-iteration.md, "Made ahead")."""
        if inputs.get("data"):
            last = self.last_key
            prepare_party1(root, key_bits=last.key_bits, uses=last.uses, allow_insecure_keys=allow_insecure_keys)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = PowerIterationParams.from_mapping(ctx.params)
        check_key_bits(p.key_bits, ctx.allow_insecure_keys)
        refuse_seeded(p, ctx.seed)
        if role == TRENT:
            t_res = await trent(ch, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys)
            out = asdict(t_res)
            if ctx.output_dir is not None and t_res.x is not None:
                path = ctx.output_dir / "x.npy"
                np.save(path, np.column_stack([c["x"] for c in t_res.components]))
                out["x_file"] = str(path)
                if len(t_res.x) > INLINE_MAX:
                    out["x"] = None
                    out["components"] = [{"x": None} for _ in t_res.components]
            return out
        source = open_matrix(self.input_path(ctx, "data", ch.me), block_values=ctx.compute.block_values)
        check_source(source, p, ch.role)  # before its output file of n_i × r values is made
        blocks = sink = None
        if ctx.output_dir is not None:
            blocks = np.lib.format.open_memmap(
                ctx.output_dir / "x_block.npy", mode="w+", dtype=np.float64, shape=(source.n, p.components)
            )
            sink = _writer(blocks)
        group_key = session_group_key(ctx, p.key_group, p.data_roles, ch.role) if p.key_group is not None else None
        if p.dp:  # the release point: just before the first noisy contribution leaves this party
            ch = self.release_gate(ch, ctx, [(TRENT, dp_release_tag(p))])
        res = await data_party(
            ch,
            source,
            p,
            engine=engine_for(ctx.compute),
            seed=ctx.seed,
            allow_insecure_keys=ctx.allow_insecure_keys,
            x_sink=sink,
            group_key=group_key,
        )
        if blocks is not None:
            assert ctx.output_dir is not None  # blocks are made only in an output directory (above)
            blocks.flush()
            del blocks
            np.save(ctx.output_dir / "u.npy", np.column_stack([c["u"] for c in res.components]))
        if res.prepare_next is not None:
            self.last_key = res.prepare_next
        out = asdict(res)
        del out["prepare_next"]  # kept here for the next session, not recorded
        out["data_bytes"] = source.nbytes
        return out


def _writer(blocks: np.ndarray):
    """A sink writing a party's final blocks (col0, n_b × r) into its memory-mapped output file."""

    def sink(col0: int, block: np.ndarray) -> None:
        blocks[col0 : col0 + block.shape[0]] = block

    return sink
