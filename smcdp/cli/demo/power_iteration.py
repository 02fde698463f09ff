"""``smcdp demo power-iteration``: Trent and one process per data matrix (contract JSON: see --help)."""

from __future__ import annotations

import argparse
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
from smcdp.plugins.power_iteration import load_matrix
from smcdp.runtime.local import LocalCluster, bytes_sent


def demo_power_iteration(data: list[str], key_bits: int = 2048, seed: int | None = None,
                         params: dict | None = None, keep_dir: str | None = None) -> dict:
    if len(data) < 2:
        raise InvalidMessage("power iteration needs at least two --data files (one per data party)")
    mats = [load_matrix(p) for p in data]
    ks = {m.shape[0] for m in mats}
    if len(ks) != 1:
        raise InvalidMessage("every --data matrix must have the same number of rows k; got "
                             + ", ".join(f"{p}: {m.shape[0]}" for p, m in zip(data, mats)))
    insecure = check_key_bits_arg(key_bits)
    names = data_party_names(len(data))
    parties: dict[str, dict] = {"trent": {}}
    for name, path in zip(names, data):
        parties[name] = {"power-iteration": {"data": path}}
    roles = {"trent": "trent", **{f"party{i + 1}": n for i, n in enumerate(names)}}
    p = {"n_parties": len(data), "key_bits": key_bits, **(params or {})}
    say(f"{len(data)} data parties ({', '.join(f'{n}: {m.shape[0]}×{m.shape[1]}' for n, m in zip(names, mats))}) "
        f"and trent, {key_bits}-bit Paillier, mutual TLS on loopback")
    with LocalCluster(parties, allow_insecure_keys=insecure, workdir=keep_dir,
                      allow_seeded_sessions=seed is not None) as cluster:
        say(f"party processes up (pids {', '.join(str(pr.pid) for pr in cluster.procs.values())}); running the session")
        t0 = time.monotonic()
        records = with_progress("power iteration", lambda: cluster.run("power-iteration", roles, p,
                                                                        initiator="trent", seed=seed))
        seconds = time.monotonic() - t0
    require_success(records)
    tr = records["trent"]["result"]
    u = records[names[0]]["result"]["u"]
    out = {
        "u": u,
        "x": tr["x"],
        "iterations": tr["rounds"],
        "real_iterations": tr["real_rounds"],
        "decoys": tr["decoys"],
        "converged": tr["converged"],
        "seconds": seconds,
        "seconds_per_iteration": seconds / max(1, tr["rounds"]),
        "bytes_sent": bytes_sent(records),
        "key_bits": key_bits,
        "roles": roles,
        "session_id": records["trent"]["session_id"],
    }
    say(f"done in {seconds:.1f} s: {tr['rounds']} rounds ({tr['decoys']} decoys), converged={tr['converged']}, "
        f"bytes sent: {out['bytes_sent']}")
    return out


def _cmd(args: argparse.Namespace) -> int:
    params = {}
    for name in ("p", "tol", "max_iterations"):
        v = getattr(args, name)
        if v is not None:
            params[name] = v
    out = demo_power_iteration(args.data, args.key_bits, args.seed, params, args.keep_dir)
    dump_json(out, args.out)
    return 0


def register(sub) -> None:
    """Adds ``smcdp demo power-iteration`` to the demo subcommands."""
    pi = sub.add_parser("power-iteration", help="privacy-preserving power iteration (Trent + one process per --data)",
                        description="Starts Trent and one data party per --data file as separate processes over "
                                    "gRPC with mutual TLS on loopback and writes JSON with u, x, iterations, decoys, "
                                    "seconds and bytes_sent.")
    pi.add_argument("--data", action="append", required=True, metavar="A.npy",
                    help="a float matrix with k rows (one data party per file; at least two)")
    pi.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    pi.add_argument("--seed", type=int, help="fix protocol randomness for experiments (encryption stays random)")
    pi.add_argument("--out", help="write the JSON result here (default stdout)")
    pi.add_argument("--p", type=float, help="probability that Trent sends the real vector (default 0.9)")
    pi.add_argument("--tol", type=float, help="convergence tolerance on ‖Δx‖ (default 1e-9)")
    pi.add_argument("--max-iterations", type=int, help="maximum rounds, decoys included (default 2000)")
    pi.add_argument("--keep-dir", help="keep certificates, configs and logs in this directory")
    pi.set_defaults(func=_cmd)
