"""Plug-in for DP aggregation: a data party's ``.npz`` -> a locally trained model -> its role; Dave's test set."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import numpy as np

from smcdp._files import ARRAY_ERRORS, NUMPY_HEADERS, check_array_sizes
from smcdp.crypto.paillier import check_key_bits
from smcdp.errors import InputRejected, local_failure
from smcdp.net.channel import Channel
from smcdp.plugins.base import DataBound, OutputFlow, ProtocolPlugin, SessionContext, SessionSummary
from smcdp.plugins.keystore import session_group_key
from smcdp.protocols.base import check_roles
from smcdp.protocols.dp_aggregate import (
    CHARLIE,
    DAVE,
    NOISE_TAIL_BITS,
    PROTOCOL,
    SHARE_TAG,
    DPAggregateParams,
    charlie,
    data_party,
    dave,
    records_needed,
    train_local,
)
from smcdp.protocols.dp_aggregate_threshold import charlie as group_charlie
from smcdp.protocols.dp_aggregate_threshold import data_party as group_data_party
from smcdp.protocols.dp_aggregate_threshold import stages as group_stages
from smcdp.protocols.power_iteration_threshold import refuse_seeded


def load_dataset(path) -> tuple[np.ndarray, np.ndarray]:
    """(X, y) from an ``.npz`` with ``X`` (n × d, rows ‖x‖ ≤ 1) and ``y`` in {−1, +1} or {0, 1} -> y in {−1, +1}."""
    try:
        check_array_sizes(path)  # no array declaring more than the file holds is allocated
        with NUMPY_HEADERS, np.load(path, allow_pickle=False) as z:  # the members' headers parsed as read
            if "X" not in z or "y" not in z:
                raise InputRejected("the data file must hold arrays 'X' and 'y'", str(path))
            X, y = np.asarray(z["X"]), np.asarray(z["y"])
    except FileNotFoundError:
        raise InputRejected("the configured data file does not exist", str(path)) from None
    except ARRAY_ERRORS as exc:
        if local_failure(exc):
            raise
        raise InputRejected("the data file is not a valid .npz without pickles", f"{path}: {exc}") from None
    if X.ndim != 2 or X.shape[0] < 1 or X.shape[1] < 1 or X.dtype.kind not in "fiu":
        raise InputRejected("X must be a non-empty numeric n × d matrix", f"{path}: shape {X.shape}, {X.dtype}")
    X = X.astype(np.float64)
    if not np.all(np.isfinite(X)):
        raise InputRejected("X must not contain NaN or infinite values", str(path))
    norms = np.linalg.norm(X, axis=1)
    if np.any(norms > 1.0 + 1e-9):
        raise InputRejected(
            "every row x must have ‖x‖ ≤ 1 (scale the features into the unit ball: the sensitivity bound needs it)",
            f"{path}: {int(np.sum(norms > 1 + 1e-9))} rows have ‖x‖ > 1",
        )
    X = X / np.maximum(norms, 1.0)[:, None]
    if y.ndim != 1 or y.shape[0] != X.shape[0] or y.dtype.kind not in "fiub":
        raise InputRejected("y must be a numeric vector with one label per row of X", f"{path}: y {y.shape}")
    labels = set(np.unique(y).tolist())
    if labels <= {0, 1}:
        y = np.where(y == 1, 1, -1)
    elif labels <= {-1, 1}:
        y = y.astype(int)
    else:
        raise InputRejected("labels must be in {-1, +1} or {0, 1}", f"{path}: {sorted(labels)[:5]}")
    return X, y.astype(int)


def abort_delta(epsilon: float, n_parties: int, *, margin: bool) -> float:
    """What the parties' aborts on a noise draw beyond the public bound add to delta.

    Their chance is at most K * 2^-64, whatever the data (it depends on the noise alone).  With ``margin`` (the
    single-noise calibrations: the bound is the noise's 2^-64 tail quantile plus the largest shift one record
    can cause, ``DPAggregateParams.noise_bound``) every draw within the quantile has its counterpart under the
    neighbouring data set, and the cost is that chance.  Without (shared noise: each share is truncated at its
    own bound while the shift applies to their sum), the truncated mechanism is (epsilon, delta + e^epsilon * p)-DP:
    P_D[S] <= e^epsilon * P_D'[S] + delta + e^epsilon * p for every set S of outcomes, the untruncated mechanism's
    mass on the aborted draws being at most p under D'.  Capped at 1 (vacuous from epsilon ~ 44 on)."""
    tail = n_parties * 2.0**-NOISE_TAIL_BITS
    if margin:
        return tail
    log_term = float(epsilon) + math.log(tail)
    return 1.0 if log_term >= 0.0 else math.exp(log_term)


def privacy_cost(p: DPAggregateParams) -> tuple[float, float]:
    """(epsilon, delta) of one release to every data party's dataset (docs/protocols/dp-aggregate.md).

    ``calibration="exact"``: the session's epsilon.  ``"seed"``: a bound on the actual guarantee of the
    seed's per-coordinate Laplace noise, epsilon * max(1, sqrt(d) / (2K)): the noise's L1 scale on the sum is
    (2K·Δ̂ + d·2^-F)/epsilon against an L1 sensitivity of √d·Δ̂ + d·2^-F (the grid's rounding in both), a ratio
    between √d/(2K) and 1 -- it was charged epsilon * sqrt(d) / (2K), which the rounding term exceeds when
    sqrt(d) < 2K (a review: 3.5x at K = 200, d = 10^4).  ``"gaussian"``: the session's (epsilon, delta).  delta
    also counts the parties' aborts on a noise draw beyond the public bound (:func:`abort_delta`): K * 2^-64, or
    e^epsilon times that with shared noise."""
    eps = float(p.epsilon)
    if p.calibration == "seed":
        eps = eps * max(1.0, math.sqrt(p.dim) / (2 * p.n_parties))
    if p.calibration == "gaussian":  # (epsilon, delta) of the Gaussian release, against h honest parties' shares
        assert p.delta is not None
        return eps, min(1.0, float(p.delta) + abort_delta(eps, p.n_parties, margin=False))
    return eps, abort_delta(eps, p.n_parties, margin=True)


def records_bound(p: DPAggregateParams) -> DataBound:
    """The records a party's data must reach for the session to run there: ``min_records``, or more where the
    sensitivity bound (``max_sensitivity``) asks more -- the fewest records whose reported sensitivity
    (:func:`~smcdp.protocols.dp_aggregate.fit_sensitivity`, a function of n, d and λ) meets it."""
    value = max(int(p.min_records), records_needed(p.sensitivity_bound, float(p.lam), int(p.dim)))
    return DataBound("records", "at_least", value, trivial=value <= 1)


class DPAggregatePlugin(ProtocolPlugin):
    name = PROTOCOL
    coordinating_roles = (CHARLIE, DAVE)
    differentially_private = True

    def validate_params(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> dict:
        p = DPAggregateParams.from_mapping(params)
        check_roles(self.name, roles, {CHARLIE, DAVE, *p.party_roles})
        return asdict(p)

    def summary(self, params: Mapping[str, Any], roles: Mapping[str, str]) -> SessionSummary:
        p = DPAggregateParams.from_mapping(params)
        eps, delta = privacy_cost(p)
        data = tuple(p.party_roles)
        shared = p.calibration == "gaussian"
        outputs = [OutputFlow("model", (DAVE,), data, dp=True)]
        grouped = p.key_group is not None
        if grouped:
            # every data party learns the smallest party's size level (the calibration its noise share is drawn
            # for): an exact output of every data role's data, coarser than the selected key itself
            outputs.append(OutputFlow("smallest_size_level", data, data, dp=False))
        elif shared:
            # every data party learns the selected calibration k_sel exactly (its noise share is drawn for it):
            # the smallest data set's size, not whose it is -- an exact output of every data role's data
            outputs.append(OutputFlow("selected_sensitivity", data, data, dp=False))
        return SessionSummary(
            protocol=self.name,
            key_bits={"paillier": p.key_bits} if grouped else {"paillier": p.key_bits, "dgk": p.dgk_bits},
            data_roles=data,
            coordinator_roles=(CHARLIE, DAVE),
            outputs=tuple(outputs),
            epsilon=eps,
            delta=delta,
            # rho: the Gaussian release's zCDP capacity; otherwise the pure epsilon part (eps^2/2).  The
            # K*2^-64 delta is informational under zCDP
            rho=p.rho_capacity if shared else eps * eps / 2,
            # h > 1: each party adds 1/h of the variance, and h - 1 colluding parties remove theirs
            noise_parties={r: p.noise_parties for r in data} if shared and p.noise_parties > 1 else {},
            record_bound=p.min_records,
            # a party whose data is below the session's record bound ends it: a bit of its data a session
            data_bounds={r: (records_bound(p),) for r in data},
            # single key: party1's key pair xi, shared with every data party, protects the sizes' shares, and
            # Charlie's key zeta the contributions (docs/protocols/dp-aggregate.md, "Trust assumptions").  A group
            # key (shared noise only) protects everything the data parties send
            key=p.key_kind,
            group_key_mode=shared,
            threshold=p.key_threshold,
        )

    def traffic_envelope(self, params: Mapping[str, Any], roles: Mapping[str, str], role: str):
        return DPAggregateParams.from_mapping(params).traffic_envelope(role)

    async def run_role(self, role: str, ch: Channel, ctx: SessionContext) -> dict:
        p = DPAggregateParams.from_mapping(ctx.params)
        for bits in (p.key_bits, p.dgk_bits):
            check_key_bits(bits, ctx.allow_insecure_keys)
        grouped = p.key_group is not None
        if grouped:  # its releases' randomness comes from the party's root: a seeded session is refused
            refuse_seeded(group_stages(p)[2], ctx.seed)
        if role == CHARLIE and grouped:
            return asdict(
                await group_charlie(ch, p, output_dir=ctx.output_dir, allow_insecure_keys=ctx.allow_insecure_keys)
            )
        if role == CHARLIE:
            return asdict(
                await charlie(
                    ch, p, seed=ctx.seed, allow_insecure_keys=ctx.allow_insecure_keys, output_dir=ctx.output_dir
                )
            )
        if role == DAVE:
            test = ctx.inputs.get("test")
            test_data = None
            if test:
                X, y = load_dataset(test)
                if X.shape[1] != p.dim:
                    raise InputRejected(
                        f"{ch.me}: the test data does not have the session's dim features",
                        f"{X.shape[1]} features, dim = {p.dim}",
                    )
                test_data = (X, y)
            return asdict(await dave(ch, p, output_dir=ctx.output_dir, test_data=test_data))
        X, y = load_dataset(self.input_path(ctx, "data", ch.me))
        # these errors reach the other participants: they say which public bound fails, never the count
        if X.shape[1] != p.dim:
            raise InputRejected(
                f"{ch.me}: the data does not have the session's dim features", f"{X.shape[1]} features, dim = {p.dim}"
            )
        if X.shape[0] < p.min_records:
            raise InputRejected(
                f"{ch.me}: the data has fewer records than the public min_records={p.min_records}",
                f"{X.shape[0]} records",
            )
        w, delta = await asyncio.get_running_loop().run_in_executor(None, train_local, X, y, float(p.lam))
        gated = self.release_gate(ch, ctx, [(DAVE, SHARE_TAG)])
        if grouped:
            assert p.key_group is not None
            group_key = session_group_key(ctx, p.key_group, p.party_roles, ch.role)
            return asdict(
                await group_data_party(gated, w, delta, p, group_key, seed=ctx.seed, output_dir=ctx.output_dir)
            )
        return asdict(
            await data_party(
                gated,
                w,
                delta,
                p,
                seed=ctx.seed,
                allow_insecure_keys=ctx.allow_insecure_keys,
                output_dir=ctx.output_dir,
            )
        )
