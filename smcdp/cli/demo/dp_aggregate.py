"""``smcdp demo dp-aggregate``: Charlie, Dave and one process per data set (contract JSON: see --help)."""

from __future__ import annotations

import time

from smcdp.cli.demo.common import (
    check_key_bits_arg,
    data_party_names,
    dump_json,
    require_success,
    say,
    with_progress,
)
from smcdp.errors import InvalidMessage
from smcdp.plugins.dp_aggregate import load_dataset
from smcdp.protocols.dp_aggregate import CALIBRATIONS, PROTOCOL, DPAggregateParams
from smcdp.runtime.local import LocalCluster, bytes_sent


def demo_dp_aggregate(data: list[str], epsilon: float, lam: float, key_bits: int = 2048, seed: int | None = None,
                      calibration: str = "exact", min_records: int = 1, test: str | None = None,
                      keep_dir: str | None = None) -> dict:
    if len(data) < 2:
        raise InvalidMessage("dp-aggregate needs at least two --data files (one per data party)")
    sets = [load_dataset(p) for p in data]
    dims = {X.shape[1] for X, _ in sets}
    if len(dims) != 1:
        raise InvalidMessage("every --data file must have the same number of features; got "
                             + ", ".join(f"{p}: {X.shape[1]}" for p, (X, _) in zip(data, sets)))
    if test is not None:
        load_dataset(test)
    insecure = check_key_bits_arg(key_bits)
    dgk_bits, dgk_t = (2048, 224) if key_bits >= 2048 else (max(512, key_bits + key_bits % 2), 96)
    names = data_party_names(len(data))
    parties: dict[str, dict] = {"charlie": {}, "dave": {PROTOCOL: {"test": test}} if test else {}}
    for name, path in zip(names, data):
        parties[name] = {PROTOCOL: {"data": path}}
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": n for i, n in enumerate(names)}}
    params = {"n_parties": len(data), "dim": dims.pop(), "epsilon": float(epsilon), "lam": float(lam),
              "calibration": calibration, "min_records": int(min_records), "key_bits": key_bits,
              "dgk_bits": dgk_bits, "dgk_t": dgk_t}
    DPAggregateParams.from_mapping(params)
    say(f"{len(data)} data parties ({', '.join(names)}), charlie and dave; {key_bits}-bit Paillier, "
        f"{dgk_bits}-bit DGK, mutual TLS on loopback")
    with LocalCluster(parties, allow_insecure_keys=insecure, workdir=keep_dir,
                      allow_seeded_sessions=seed is not None) as cluster:
        t0 = time.monotonic()
        records = with_progress("dp-aggregate", lambda: cluster.run(PROTOCOL, roles, params, initiator="charlie",
                                                                      seed=seed))
        seconds = time.monotonic() - t0
    require_success(records)
    dv = records["dave"]["result"]
    out = {
        "weights": dv["weights"],
        "shares": dv["shares"],
        "shares_mod": dv["shares_mod"],
        "share_modulus": dv["share_modulus"],
        "frac_bits": dv["frac_bits"],
        "seconds": seconds,
        "bytes_sent": bytes_sent(records),
        "epsilon": float(epsilon),
        "lam": float(lam),
        "calibration": calibration,
        "key_bits": key_bits,
        "n_parties": len(data),
        "dim": params["dim"],
        "roles": roles,
        "session_id": records["charlie"]["session_id"],
    }
    if dv.get("test_error") is not None:
        out["test_error"] = dv["test_error"]
    say(f"done in {seconds:.1f} s; bytes sent: {out['bytes_sent']}")
    return out


def _cmd(args) -> int:
    out = demo_dp_aggregate(args.data, args.epsilon, args.lam, args.key_bits, args.seed, args.calibration,
                            args.min_records, args.test, args.keep_dir)
    dump_json(out, args.out)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "dp-aggregate", help="DP aggregation of locally trained classifiers (charlie, dave, one process per --data)",
        description="Starts Charlie, Dave and one data party per --data file as separate processes over gRPC with "
                    "mutual TLS on loopback.  Each party fits L2-regularised logistic regression (no intercept) on "
                    "its .npz (X: n×d rows with ‖x‖ ≤ 1, y in {-1,+1} or {0,1}); the parties, Charlie and Dave run "
                    "the blind-and-permute secure minimum (DGK comparisons), oblivious noise selection and the "
                    "secure sum; Dave reassembles the model.  The JSON has weights (Dave's ŵˢ), shares (K + 1 share "
                    "vectors whose sum divided by K is weights; shares_mod are the published residues modulo "
                    "share_modulus), seconds and bytes_sent (party name -> bytes).")
    p.add_argument("--data", action="append", required=True, metavar="P.npz", help="one data party per file (>= 2)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy parameter of the released classifier")
    p.add_argument("--lam", type=float, required=True, help="regularisation λ of the local objective")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    p.add_argument("--seed", type=int, help="fix protocol randomness and noise for experiments "
                                            "(default: the OS CSPRNG; encryption randomness is always secure)")
    p.add_argument("--out", help="write the JSON result here (default stdout)")
    p.add_argument("--calibration", choices=CALIBRATIONS, default="exact",
                   help="exact: L2 vector mechanism for Δ/K (default); seed: the seed's Laplace 2/(n ε λ)")
    p.add_argument("--min-records", type=int, default=1, help="public lower bound on every party's n_j (default 1)")
    p.add_argument("--test", metavar="T.npz", help="Dave classifies this test set and reports test_error")
    p.add_argument("--keep-dir", help="keep certificates, configs, logs and outputs in this directory")
    p.set_defaults(func=_cmd)
