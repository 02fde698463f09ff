"""``smcdp demo dp-aggregate``: Charlie, Dave and one process per data set (contract JSON: see --help)."""

from __future__ import annotations

import math
import threading
import time

from smcdp.cli.argtypes import nonempty
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
    with_progress,
)
from smcdp.errors import InvalidMessage, SmcdpError
from smcdp.net.limits import Limits
from smcdp.net.server import new_session_id
from smcdp.plugins.dp_aggregate import load_dataset
from smcdp.plugins.keygen import PROTOCOL as KEY_CEREMONY
from smcdp.protocols.dp_aggregate import CALIBRATIONS, PROTOCOL, DPAggregateParams
from smcdp.runtime.governance.charges import BudgetConfig
from smcdp.runtime.local import LocalCluster, bytes_sent
from smcdp.states import SessionState

#: --threshold without --delta: the release's delta
THRESHOLD_DELTA = 1e-6
#: delta of every data party's demo budget (a session costs K * 2^-64, see docs/governance.md)
DEMO_DELTA = 1e-9


def _outcome(records: dict[str, dict], epsilon: float) -> dict:
    """One entry of the JSON's ``sessions``: released (Dave's weights) or refused (why)."""
    dave = records.get("dave") or {}
    sid = records["charlie"].get("session_id")
    if dave.get("state") == SessionState.SUCCEEDED and records["charlie"].get("state") == SessionState.SUCCEEDED:
        return {"session_id": sid, "status": "released", "epsilon": epsilon, "weights": dave["result"]["weights"]}
    err = records["charlie"].get("error") or {}
    if not err:
        bad = next((r for r in records.values() if r.get("state") != SessionState.SUCCEEDED), {})
        err = bad.get("error") or {}
    message = str(err.get("message", "unknown failure"))
    return {
        "session_id": sid,
        "status": "refused",
        "epsilon": epsilon,
        "code": err.get("code"),
        "reason": message,
        "stage": "propose" if "Propose failed" in message else "run",
    }


def demo_dp_aggregate(
    data: list[str],
    epsilon: float,
    lam: float,
    key_bits: int = 2048,
    seed: int | None = None,
    calibration: str = "exact",
    min_records: int = 1,
    test: str | None = None,
    keep_dir: str | None = None,
    faults: Faults | None = None,
    budget: float | None = None,
    sessions: int = 1,
    concurrent: bool = False,
    delta: float | None = None,
    noise_parties: int = 1,
    threshold: int | None = None,
) -> dict:
    """Start the parties, run the sessions, return the contract JSON.  ``threshold``: first a key ceremony among
    the data parties (a (threshold, K) group key), then sessions under that key (shared noise only)."""
    if len(data) < 2:
        raise InvalidMessage("dp-aggregate needs at least two --data files (one per data party)")
    if not isinstance(sessions, int) or not 1 <= sessions <= 100:
        raise InvalidMessage("--sessions must be an integer in 1..100")
    if faults is not None and faults.actions and sessions != 1:
        raise InvalidMessage("--chaos acts on one session: it cannot be combined with --sessions")
    if budget is not None and not 0 < budget < math.inf:
        raise InvalidMessage(f"--budget must be a positive finite epsilon, got {budget!r}")
    if threshold is not None:
        if calibration != "gaussian":
            raise InvalidMessage(
                "--threshold needs --calibration gaussian: under a group key every data party adds a share of "
                "the noise (one party's noise could be removed by that party and whoever learns the selection)"
            )
        if seed is not None:
            raise InvalidMessage(
                "--threshold cannot run with --seed: a release's encryption randomness comes from the party's "
                "randomness root, which a known seed makes public"
            )
    sets = [load_dataset(p) for p in data]
    dims = {X.shape[1] for X, _ in sets}
    if len(dims) != 1:
        raise InvalidMessage(
            "every --data file must have the same number of features; got "
            + ", ".join(f"{p}: {X.shape[1]}" for p, (X, _) in zip(data, sets))
        )
    if test is not None:
        load_dataset(test)
    insecure = check_key_bits_arg(key_bits)
    dgk_bits, dgk_t = (2048, 224) if key_bits >= 2048 else (max(512, key_bits + key_bits % 2), 96)
    names = data_party_names(len(data))
    parties: dict[str, dict] = {"charlie": {}, "dave": {PROTOCOL: {"test": test}} if test else {}}
    for name, path in zip(names, data):
        parties[name] = {PROTOCOL: {"data": path}}
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": n for i, n in enumerate(names)}}
    # the shared noise's parameters (validated with the others just below)
    shared = {"delta": delta, "noise_parties": noise_parties} if calibration == "gaussian" else {}
    params = {
        "n_parties": len(data),
        "dim": dims.pop(),
        "epsilon": float(epsilon),
        "lam": float(lam),
        "calibration": calibration,
        "min_records": int(min_records),
        **shared,
        "key_bits": key_bits,
        "dgk_bits": dgk_bits,
        "dgk_t": dgk_t,
    }
    if threshold is not None:
        params.update(key_group=DEMO_KEY_GROUP, key_threshold=threshold)
    DPAggregateParams.from_mapping(params)
    options, summary = governed(PROTOCOL, roles, params, initiator="charlie", seed=seed)
    if threshold is not None:  # the data parties also admit the demo's key ceremony (checked here, not later)
        add_rules(options, KEY_CEREMONY, ceremony_rules(names, threshold, key_bits))
    cost = summary.epsilon
    if cost is None:  # the dp-aggregate plugin always states its cost
        raise InvalidMessage(f"the {PROTOCOL} plugin did not state the session's epsilon")
    # every data party guards its data set with a fresh ledger: --budget, or just enough for the sessions
    total = float(budget) if budget is not None else cost * sessions * (1 + 1e-9)
    delta_total = max(DEMO_DELTA, summary.delta * sessions * (1 + 1e-9))  # the Gaussian release's delta
    if delta_total >= 1.0:
        raise InvalidMessage(
            f"at epsilon={epsilon:g} the sessions' delta adds up to {summary.delta * sessions:g} (shared noise: "
            "e^epsilon times the parties' abort chance, docs/protocols/dp-aggregate.md): no ledger holds it; "
            "lower --epsilon or --sessions"
        )
    options["budgets"] = {n: BudgetConfig(dataset=n, epsilon=total, delta=delta_total) for n in names}
    # every party admits --sessions proposals from charlie at once (the [limits] defaults admit 4
    # pending and 8 running per initiating peer): here the budget, not a rate limit, decides
    d = Limits()
    options["limits"] = Limits(
        pending_per_peer=max(d.pending_per_peer, sessions),
        pending_total=max(d.pending_total, sessions),
        running_per_peer=max(d.running_per_peer, sessions),
    )
    say(
        f"{len(data)} data parties ({', '.join(names)}), charlie and dave; {key_bits}-bit Paillier, "
        f"{dgk_bits}-bit DGK, mutual TLS on loopback; each data party's budget epsilon={total:g}, "
        f"a session costs epsilon={cost:g}; {sessions} session(s){' at once' if concurrent else ''}"
    )
    results: list[dict | None] = [None] * sessions
    fault_info: dict = {}
    if faults is not None:
        faults.check(parties)
    with LocalCluster(
        parties,
        allow_insecure_keys=insecure,
        workdir=keep_dir,
        data_root=keep_dir,
        peer_grace_seconds=faults.peer_grace if faults else None,
        **options,
    ) as cluster:
        # without --threshold: party1 makes the session's key pair xi, charlie his own keys
        key = key_ceremony(cluster, names, threshold, key_bits) if threshold is not None else None

        def one(i: int) -> None:
            sid = f"{new_session_id(PROTOCOL)}-{i + 1}"
            results[i] = cluster.run(PROTOCOL, roles, params, initiator="charlie", seed=seed, session_id=sid)

        t0 = time.monotonic()

        def run_all(progress) -> None:
            def counted(i: int) -> None:
                try:
                    one(i)
                finally:
                    progress.advance()

            if concurrent:
                threads = [threading.Thread(target=counted, args=(i,)) for i in range(sessions)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
            else:
                for i in range(sessions):
                    counted(i)

        if faults is not None and faults.actions:  # one session (checked above) with chaos meanwhile
            results[0], fault_info = run_session(
                cluster, faults, "dp-aggregate", PROTOCOL, roles, params, initiator="charlie", seed=seed
            )
        else:
            with_progress("dp-aggregate", run_all, total=sessions, unit="session")
        seconds = time.monotonic() - t0
        budgets = ledger_budgets(cluster, names)
    finished = [r for r in results if r is not None]
    if len(finished) != sessions:  # a session thread died before the party answered (its error is on stderr)
        raise SmcdpError(f"{sessions - len(finished)} of {sessions} session(s) ended without a record")
    outcomes = [_outcome(r, cost) for r in finished]
    released = [(o, r) for o, r in zip(outcomes, finished) if o["status"] == "released"]
    if not released and sessions == 1 and outcomes[0]["stage"] == "run":
        require_success(finished[0])  # a session that failed while running: an error, as before
    out: dict = {
        "seconds": seconds,
        "epsilon": float(epsilon),
        "lam": float(lam),
        "calibration": calibration,
        **shared,
        "key_bits": key_bits,
        "n_parties": len(data),
        "dim": params["dim"],
        "roles": roles,
        "sessions": outcomes,
        "budgets": budgets,
        "key": key or {"kind": "single", "holder": names[0], "key_bits": key_bits},
        **fault_info,
    }
    if released:
        records = released[0][1]
        dv = records["dave"]["result"]
        out.update(
            {
                "weights": dv["weights"],
                "shares": dv["shares"],
                "shares_mod": dv["shares_mod"],
                "share_modulus": dv["share_modulus"],
                "frac_bits": dv["frac_bits"],
                "bytes_sent": bytes_sent(records),
                "session_id": records["charlie"]["session_id"],
            }
        )
        if dv.get("test_error") is not None:
            out["test_error"] = dv["test_error"]
        if key is not None:  # what the session says of its key: the ceremony's, and each party's noise share
            used = records[names[0]]["result"]["key"]
            if used["fingerprint"] != key["fingerprint"]:
                raise InvalidMessage(
                    f"the session used key {used['fingerprint']}, not the ceremony's {key['fingerprint']}"
                )
            key.update(noise_share=used["noise_share"], honest_noise_sigma2=used["honest_noise_sigma2"])
            out["size_level"] = records[names[0]]["result"]["size_level"]
    say(
        f"done in {seconds:.1f} s: {len(released)} released, {sessions - len(released)} refused"
        + (f"; bytes sent (first release): {out['bytes_sent']}" if released else "")
    )
    for o in outcomes:
        if o["status"] == "refused":
            say(f"  {o['session_id']} refused: {o['reason']}")
    return out


def _cmd(args) -> int:
    if args.threshold is not None and not 1 <= args.threshold <= len(args.data) - 1:
        raise InvalidMessage(
            f"--threshold must lie in [1, {len(args.data) - 1}]: no T of the {len(args.data)} data parties decrypt "
            "anything, T + 1 do"
        )
    calibration = args.calibration or ("gaussian" if args.threshold is not None else "exact")
    delta, noise_parties = args.delta, args.noise_parties
    if calibration != "gaussian" and (delta is not None or noise_parties is not None):
        raise InvalidMessage("--delta and --noise-parties belong to --calibration gaussian (the shared noise)")
    if calibration == "gaussian" and delta is None:
        if args.threshold is None:
            raise InvalidMessage("--calibration gaussian needs --delta (the release is (epsilon, delta)-DP)")
        delta = THRESHOLD_DELTA
        say(
            f"--threshold: the release is (epsilon, delta)-DP Gaussian noise shared by the data parties; delta = {delta:g}"
        )
    if noise_parties is None:  # a group key: the K − t parties outside any coalition of t add one curator's σ²
        noise_parties = len(args.data) - args.threshold if args.threshold is not None else 1
    out = demo_dp_aggregate(
        args.data,
        args.epsilon,
        args.lam,
        args.key_bits,
        args.seed,
        calibration,
        args.min_records,
        args.test,
        args.keep_dir,
        Faults.from_args(args),
        budget=args.budget,
        sessions=args.sessions,
        concurrent=args.concurrent,
        delta=delta,
        noise_parties=noise_parties,
        threshold=args.threshold,
    )
    dump_json(out, args.out)
    return 0


def register(sub) -> None:
    p = sub.add_parser(
        "dp-aggregate",
        help="DP aggregation of locally trained classifiers (charlie, dave, one process per --data)",
        description="Starts Charlie, Dave and one data party per --data file as separate processes over gRPC with "
        "mutual TLS on loopback.  Each party fits L2-regularised logistic regression (no intercept) on "
        "its .npz (X: n×d rows with ‖x‖ ≤ 1, y in {-1,+1} or {0,1}); the parties, Charlie and Dave run "
        "the secure minimum (blind, permute, a tournament of DGK comparisons), an oblivious noise "
        "selection that every party checks, and the publication of K + 1 additive shares; Dave "
        "reassembles the model.  The JSON has weights (Dave's ŵˢ), shares (K + 1 share "
        "vectors whose sum divided by K is weights; shares_mod are the published residues modulo "
        "share_modulus), seconds and bytes_sent (party name -> bytes) of the first released session, "
        "and sessions: one object per session with status (released or refused), epsilon, weights "
        "(released) or reason (refused; it says 'budget' when the privacy budget refused), and "
        "budgets (every data party's ledger at the end).  Every party runs with an explicit "
        "[policy] for this layout; every data party guards its data set with a fresh ledger "
        f"(--budget; delta {DEMO_DELTA:g}).",
    )
    p.add_argument("--data", action="append", required=True, metavar="P.npz", help="one data party per file (>= 2)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy parameter of the released classifier")
    p.add_argument("--lam", type=float, required=True, help="regularisation λ of the local objective")
    p.add_argument("--key-bits", type=int, default=2048, help="Paillier key size (default 2048; <2048 warns)")
    p.add_argument(
        "--seed",
        type=int,
        help="fix protocol randomness and noise for experiments "
        "(default: the OS CSPRNG; encryption randomness is always secure)",
    )
    p.add_argument("--out", help="write the JSON result here (default stdout)")
    p.add_argument(
        "--calibration",
        choices=CALIBRATIONS,
        default=None,
        help="exact: L2 vector mechanism for Δ/K, drawn by the selected party (default; gaussian with --threshold); seed: the seed's "
        "Laplace 2/(n ε λ); gaussian: (ε, δ) Gaussian noise shared by every data party, so that charlie with "
        "parties cannot remove it (needs --delta; every party learns the selected sensitivity)",
    )
    p.add_argument("--delta", type=float, help="--calibration gaussian: the δ of the release")
    p.add_argument(
        "--noise-parties",
        type=int,
        default=None,
        metavar="H",
        help="--calibration gaussian: each party adds 1/H of the noise's variance, so the noise survives any "
        "coalition of charlie and K − H data parties (default 1: every party adds all of it; K − T with "
        "--threshold T)",
    )
    p.add_argument("--min-records", type=int, default=1, help="public lower bound on every party's n_j (default 1)")
    p.add_argument(
        "--test", type=nonempty, metavar="T.npz", help="Dave classifies this test set and reports test_error"
    )
    p.add_argument(
        "--keep-dir",
        help="keep certificates, configs, logs and outputs in this directory; party P's "
        "data directory (audit.jsonl, ledger.sqlite, sessions/, outputs/) is KEEP_DIR/P/",
    )
    p.add_argument(
        "--budget",
        type=float,
        metavar="EPS",
        help="every data party's total epsilon for its data set, in a fresh ledger (default: just "
        "enough for --sessions)",
    )
    p.add_argument("--sessions", type=int, default=1, help="run N sessions (default 1)")
    p.add_argument(
        "--threshold",
        type=int,
        metavar="T",
        help="a group key: first a key ceremony among the data parties makes a dealer-free (T, K) threshold "
        "Paillier key of --key-bits bits (minutes at 2048 bits), then the sessions run under it, so that "
        "charlie with T data parties learns no party's size beyond the smallest party's size level and cannot "
        "remove the noise (shared noise: "
        "--calibration gaussian, the default here, --delta default "
        f"{THRESHOLD_DELTA:g}); the JSON gains key: {{kind, threshold, parties, generation_seconds, ...}}",
    )
    p.add_argument("--concurrent", action="store_true", help="start the --sessions at once")
    add_fault_arguments(p)
    p.set_defaults(func=_cmd)
