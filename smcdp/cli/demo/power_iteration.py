"""``smcdp demo power-iteration``: Trent and one process per data matrix (contract JSON: see --help)."""

from __future__ import annotations

import argparse
import time
from importlib import resources

import numpy as np

from smcdp._optional import require
from smcdp.cli.demo.common import (
    DEMO_KEY_GROUP,
    Faults,
    add_fault_arguments,
    add_rules,
    ceremony_rules,
    check_key_bits_arg,
    data_party_names,
    dump_json,
    governed,
    key_ceremony,
    ledger_budgets,
    require_success,
    run_session,
    say,
)
from smcdp.compute import ComputeConfig, open_matrix
from smcdp.compute.config import scheduler_scheme_host
from smcdp.errors import InvalidMessage
from smcdp.plugins.keygen import PROTOCOL as KEY_CEREMONY
from smcdp.protocols.power_iteration import PowerIterationParams
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.local import LocalCluster, bytes_sent


def compute_config(
    engine: str = "local",
    *,
    workers: int | None = None,
    scheduler: str | None = None,
    tls: tuple[str | None, str | None, str | None] = (None, None, None),
    block_values: int | None = None,
    memory_limit: str | None = None,
) -> ComputeConfig:
    """The ``[compute]`` section the demo writes for every data party."""
    table: dict = {} if block_values is None else {"block_values": block_values}
    if engine == "local":
        table.update({} if workers is None else {"workers": workers})
    elif scheduler is None or scheduler == "local":
        table.update(engine="dask", scheduler="local", workers=workers or 2)
        table.update({} if memory_limit is None else {"memory_limit": memory_limit})
    else:
        table.update(engine="dask", scheduler=scheduler)
        if scheduler_scheme_host(scheduler)[0] == "tls":
            table.update(tls_ca=tls[0], tls_cert=tls[1], tls_key=tls[2])
        elif ComputeConfig(engine="dask", scheduler=scheduler, allow_plaintext=True).plaintext_scheduler:
            say(
                f"WARNING: {scheduler} is plain TCP to another host: the session key and the data cross the "
                "network unencrypted (use tls:// for real data)"
            )
            table["allow_plaintext"] = True
    return ComputeConfig.from_mapping({k: v for k, v in table.items() if v is not None})


def demo_power_iteration(
    data: list[str],
    key_bits: int = 2048,
    seed: int | None = None,
    params: dict | None = None,
    keep_dir: str | None = None,
    faults: Faults | None = None,
    compute: ComputeConfig | None = None,
    threshold: int | None = None,
) -> dict:
    """Start the parties, run one session, return the contract JSON.  ``threshold``: first a key ceremony
    among the data parties (a (threshold, N) group key), then the session (exact or DP) under that key."""
    if len(data) < 2:
        raise InvalidMessage("power iteration needs at least two --data inputs (one per data party)")
    if threshold is not None and seed is not None:  # refused before the ceremony, not after it
        raise InvalidMessage(
            "--threshold cannot run with --seed: under a group key the encryption randomness comes from the "
            "parties' randomness roots, which a known seed makes public"
        )
    compute = compute or ComputeConfig()
    sources = [open_matrix(p, block_values=compute.block_values) for p in data]  # metadata only
    ks = {s.k for s in sources}
    if len(ks) != 1:
        raise InvalidMessage(
            "every --data matrix must have the same number of rows k; got "
            + ", ".join(f"{p}: {s.k}" for p, s in zip(data, sources))
        )
    insecure = check_key_bits_arg(key_bits)
    names = data_party_names(len(data))
    parties: dict[str, dict] = {"trent": {}}
    for name, path in zip(names, data):
        parties[name] = {"power-iteration": {"data": path}}
    roles = {"trent": "trent", **{f"party{i + 1}": n for i, n in enumerate(names)}}
    # k and the largest n_i are public bounds of the session: its byte envelope follows them
    p = {
        "n_parties": len(data),
        "key_bits": key_bits,
        "rows": next(iter(ks)),
        "max_samples": max(s.n for s in sources),
        **(params or {}),
    }
    if threshold is not None:
        p.update(key_group=DEMO_KEY_GROUP, key_threshold=threshold)
    where = "its own Dask cluster" if compute.engine == "dask" else "the local engine"
    say(
        f"{len(data)} data parties ({', '.join(f'{n}: {s.k}×{s.n}' for n, s in zip(names, sources))}) "
        f"and trent, {key_bits}-bit Paillier, mutual TLS on loopback; each data party computes on {where}"
    )
    options, summary = governed("power-iteration", roles, p, initiator="trent", seed=seed)
    if threshold is not None:  # the data parties also admit the demo's key ceremony (checked here, not later)
        add_rules(options, KEY_CEREMONY, ceremony_rules(names, threshold, key_bits))
    dp = summary.epsilon is not None
    if (
        summary.epsilon is not None
    ):  # dp: every data party guards its data with a fresh ledger holding just this session's cost
        options["budgets"] = {
            n: BudgetConfig(dataset=n, epsilon=summary.epsilon * (1 + 1e-9), delta=summary.delta * (1 + 1e-9))
            for n in names
        }
        mode = (
            "one noisy covariance release"
            if PowerIterationParams.from_mapping(p).dp_mode == "covariance"
            else "noisy power method"
        )
        say(
            f"differentially private mode ({mode}): epsilon={summary.epsilon:g}, "
            f"delta={summary.delta:g} per data party, charged to its [budget]"
        )
    if faults is not None:
        faults.check(parties)
    with LocalCluster(
        parties,
        allow_insecure_keys=insecure,
        workdir=keep_dir,
        data_root=keep_dir,
        peer_grace_seconds=faults.peer_grace if faults else None,
        compute={n: compute for n in names},
        **options,
    ) as cluster:
        say(f"party processes up (pids {', '.join(str(pr.pid) for pr in cluster.procs.values())}); running the session")
        # the exact mode and the DP modes without --threshold: party1 makes the session's Paillier key pair
        key = key_ceremony(cluster, names, threshold, key_bits) if threshold is not None else None
        t0 = time.monotonic()
        records, fault_info = run_session(
            cluster, faults, "power iteration", "power-iteration", roles, p, initiator="trent", seed=seed
        )
        seconds = time.monotonic() - t0
        require_success(records)
        tr = records["trent"]["result"]
        if dp:  # DP mode: x is not released; Trent holds no output
            tr = dict(tr, components=[{"x": None} for _ in records[names[0]]["result"]["components"]])
        elif tr["x"] is None:  # a large x is in Trent's output file (same host), not in his record
            X = np.load(tr["x_file"])
            tr = dict(tr, x=X[:, 0].tolist(), components=[{"x": X[:, j].tolist()} for j in range(X.shape[1])])
        budgets = ledger_budgets(cluster, names) if dp else None
    first = records[names[0]]["result"]
    per_party = {n: records[n]["result"]["stats"]["compute"] for n in names}
    out = {
        "u": first["u"],
        "x": tr["x"],
        "components": [
            {"u": cu["u"], "x": cx["x"]} for cu, cx in zip(first["components"], tr["components"], strict=True)
        ],
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
        "key": key or {"kind": "single", "holder": names[0], "key_bits": key_bits},
        **fault_info,
        "compute": {
            "engine": compute.engine,
            "workers": per_party[names[0]]["workers"],
            "tasks": sum(int(s["tasks"]) for s in per_party.values()),
            "scheduler": None if compute.engine == "local" else per_party[names[0]].get("scheduler"),
            "per_party": per_party,
        },
        "peak_rss_bytes": {n: int((r.get("stats") or {}).get("peak_rss_bytes", 0)) for n, r in records.items()},
        "data_bytes": {n: int(records[n]["result"]["data_bytes"]) for n in names},
        "params": {k: records["trent"]["params"][k] for k in ("components", "oversample", "p", "tol", "max_iterations")}
        | {"block_values": compute.block_values},
    }
    if key is not None:  # what the session says of its key: the ceremony's (and in a DP mode each party's noise share)
        used = first["dp"]["key"] if dp else first["stats"]["key"]
        if used["fingerprint"] != key["fingerprint"]:
            raise InvalidMessage(f"the session used key {used['fingerprint']}, not the ceremony's {key['fingerprint']}")
        if dp:
            key.update(noise_share=used["noise_share"], honest_noise_sigma2=used["honest_noise_sigma2"])
    if dp:
        cal = first["dp"]
        # part of the output's contract: dp_method is the mode that ran, "covariance" or "power"
        out.update(
            epsilon=summary.epsilon,
            delta=summary.delta,
            budgets=budgets,
            dp_method=cal["dp_method"],
            dp={
                k: cal[k]
                for k in (
                    "rounds",
                    "sigma",
                    "party_sigma",
                    "rho",
                    "certified_epsilon",
                    "accountant",
                    "epsilon_zcdp",
                    "epsilon_pld",
                    "column_norm",
                    "noise_parties",
                )
            },
        )
        out["params"] = {
            k: records["trent"]["params"][k]
            for k in (
                "components",
                "oversample",
                "iterations",
                "column_norm",
                "noise_parties",
                "dp_method",
                "gap_ratio",
            )
        } | {"block_values": compute.block_values}
    if dp:
        say(
            f"done in {seconds:.1f} s: {out['dp_method']} mode, {tr['rounds']} noisy release(s) per party, "
            f"{len(out['components'])} component(s), "
            f"each data party charged epsilon={summary.epsilon:g}, delta={summary.delta:g}; "
            f"bytes sent: {out['bytes_sent']}"
        )
    else:
        say(
            f"done in {seconds:.1f} s: {tr['rounds']} rounds ({tr['decoys']} decoys), converged={tr['converged']}, "
            f"{len(out['components'])} component(s), bytes sent: {out['bytes_sent']}"
        )
    return out


def bundled_data() -> list[str]:
    """The example matrices shipped in the package (two hospitals, k = 30 rows): the default ``--data``.

    They are ``examples/data/power_iteration`` of the repository, in the wheel as package data
    (``smcdp/_bundled``), so the demo runs the same from a source tree and from an installed wheel.
    """
    root = resources.files("smcdp") / "_bundled" / "power_iteration"
    paths = sorted(str(p) for p in root.iterdir() if p.name.endswith(".npy"))
    if len(paths) < 2:
        raise InvalidMessage(
            f"the bundled example data is missing from {root} (a broken installation?); pass --data PATH at least twice"
        )
    return paths


def _cmd(args: argparse.Namespace) -> int:
    params = {}
    for name in (
        "p",
        "tol",
        "max_iterations",
        "components",
        "oversample",
        "epsilon",
        "delta",
        "iterations",
        "column_norm",
        "noise_parties",
        "dp_method",
        "gap_ratio",
    ):
        v = getattr(args, name)
        if v is not None:
            params[name] = v
    if args.compute == "local" and (args.dask_scheduler or args.dask_workers is not None):
        raise InvalidMessage("--dask-scheduler and --dask-workers need --compute dask")
    if args.compute == "dask" and args.threshold is not None:
        raise InvalidMessage(
            "--threshold needs --compute local: a data party under a group key computes in its own process (the "
            "Dask engine ships the session's private key to its workers, and under a group key there is none)"
        )
    if args.compute == "dask":
        require("dask", "--compute dask")  # before any party process starts
    compute = compute_config(
        args.compute,
        workers=args.dask_workers,
        scheduler=args.dask_scheduler,
        tls=(args.dask_tls_ca, args.dask_tls_cert, args.dask_tls_key),
        block_values=args.block_values,
        memory_limit=args.dask_memory_limit,
    )
    out = demo_power_iteration(
        args.data or bundled_data(),
        args.key_bits,
        args.seed,
        params,
        args.keep_dir,
        Faults.from_args(args),
        compute,
        threshold=args.threshold,
    )
    dump_json(out, args.out)
    return 0


def register(sub) -> None:
    """Adds ``smcdp demo power-iteration`` to the demo subcommands."""
    pi = sub.add_parser(
        "power-iteration",
        help="privacy-preserving power iteration (Trent + one process per --data)",
        description="Starts Trent and one data party per --data input as separate processes over "
        "gRPC with mutual TLS on loopback and writes JSON with u, x, components "
        "(the top --components eigenvector pairs), iterations, decoys, seconds, "
        "bytes_sent, compute (engine, workers, Dask tasks) and peak_rss_bytes.  With "
        "--epsilon and --delta it runs the differentially private mode (the noisy "
        "power method or one noisy covariance release, docs/protocols/power-iteration.md): "
        "x is null (not released), and the JSON gains epsilon, delta, dp_method (the mode "
        "that ran: covariance or power), dp (the noise calibration) and budgets "
        "(every data party's ledger, charged once for the session).  key says who can decrypt: "
        '{"kind": "single", "holder": party1\'s name} (party1 makes a key pair for the session), or with '
        '--threshold T {"kind": "threshold", "threshold": T, "parties": [...], "generation_seconds": ...} '
        "(a key ceremony among the data parties first; exact or DP mode).",
    )
    pi.add_argument(
        "--data",
        action="append",
        metavar="PATH",
        help="a matrix with k rows: a .npy file, a folder of .npy column shards (name order) or a "
        "Zarr array (one data party per --data; at least two; default: the two bundled "
        "example matrices, examples/data/power_iteration)",
    )
    pi.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    pi.add_argument("--seed", type=int, help="fix protocol randomness for experiments (encryption stays random)")
    pi.add_argument("--out", help="write the JSON result here (default stdout)")
    pi.add_argument("--p", type=float, help="probability that Trent sends the real block (default 0.9)")
    pi.add_argument("--tol", type=float, help="convergence tolerance on the change of u_1 … u_r (default 1e-9)")
    pi.add_argument("--max-iterations", type=int, help="maximum rounds, decoys included (default 2000)")
    pi.add_argument("--components", type=int, help="how many leading eigenvectors (default 1)")
    pi.add_argument(
        "--oversample",
        type=int,
        help="extra block columns (default 0): faster when λ_r ≈ λ_(r+1), but every data party "
        "also learns approximations of the next components",
    )
    pi.add_argument(
        "--epsilon",
        type=float,
        help="differentially private mode: (epsilon, delta)-DP per sample of each party (needs --delta)",
    )
    pi.add_argument("--delta", type=float, help="differentially private mode: delta (needs --epsilon)")
    pi.add_argument(
        "--iterations",
        type=int,
        help="DP power mode: the fixed number of noisy rounds T (default: from --gap-ratio, else 10)",
    )
    pi.add_argument(
        "--dp-method",
        choices=("auto", "covariance", "power"),
        help="DP mode: one noisy release of the covariance, the noisy power method, or auto (default: "
        "covariance up to k = 255, and unless --iterations or --gap-ratio is given)",
    )
    pi.add_argument(
        "--gap-ratio",
        type=float,
        help="DP power mode: a public bound on lambda_(b+1)/lambda_r assumed for the data; sets the "
        "rounds T (fewer when the gap is larger) unless --iterations is given",
    )
    pi.add_argument(
        "--column-norm", type=float, help="DP mode: every sample (column) is clipped to this L2 norm (default 1)"
    )
    pi.add_argument(
        "--noise-parties",
        type=int,
        help="DP mode: h, each party adding noise variance sigma^2/h; needs h honest data parties "
        "(default 1: every party's noise protects it alone)",
    )
    pi.add_argument(
        "--threshold",
        type=int,
        metavar="T",
        help="a group key: first a key ceremony among the data parties makes a dealer-free (T, N) threshold "
        "Paillier key of --key-bits bits, which the session uses: any T + 1 data parties decrypt, no T of them "
        "(with trent) can.  Exact mode: trent proves every block and blinded Gram a combination of sums the "
        "parties recompute; DP mode (--epsilon): each party adds noise variance sigma^2/(N - T) "
        "(docs/protocols/power-iteration.md)",
    )
    pi.add_argument(
        "--compute",
        choices=("local", "dask"),
        default="local",
        help="where each data party computes: in its process (local) or on a Dask cluster",
    )
    pi.add_argument("--dask-workers", type=int, help="workers of each data party's local Dask cluster (default 2)")
    pi.add_argument("--dask-scheduler", help="an existing Dask scheduler (tls://host:port; tcp:// warns off loopback)")
    pi.add_argument("--dask-tls-ca", help="the existing cluster's CA (tls:// scheduler)")
    pi.add_argument("--dask-tls-cert", help="client certificate for the existing cluster")
    pi.add_argument("--dask-tls-key", help="client key for the existing cluster")
    pi.add_argument("--dask-memory-limit", help="memory per worker of a local Dask cluster (e.g. 1GiB)")
    pi.add_argument("--block-values", type=int, help="canonical block size in matrix values (default 4194304)")
    pi.add_argument(
        "--keep-dir",
        help="keep certificates, configs and logs in this directory; party P's data directory is KEEP_DIR/P/",
    )
    add_fault_arguments(pi)
    pi.set_defaults(func=_cmd)
