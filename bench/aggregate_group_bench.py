"""dp-aggregate under a group (threshold) key against the single-key shared-noise mode, measured in the same run.

Real party processes (charlie, dave and K data parties, mutual TLS on loopback, one
:class:`~smcdp.runtime.local.LocalCluster` per K).  First a key ceremony among the K data parties (a
``key-ceremony`` session, t = ``--threshold``, ``--key-bits``): its wall time and ``generation_seconds``.  Then
the same data and the same (epsilon, delta, h = K − t) in both modes:

* **single** -- ``calibration = "gaussian"`` with party1's key ξ and Charlie's ζ (the secure minimum's DGK
  tournament, the indicator, the masked reveal of k_sel): Charlie with any data party learns every n_j;
* **group** -- ``key_group`` / ``key_threshold``: the size levels' zero test and the releases under the group key
  (docs/protocols/dp-aggregate.md, "Under a group key").

One unmeasured warm-up session per mode, then ``--repeats`` sessions alternating single and group, so that a
change of host load hits both; the table gives the median wall time of a session (proposal to the initiator's
record), the bytes all parties sent, and group / single (the issue's target: ≤ 1.5× at K = 8).

    python bench/aggregate_group_bench.py                      # 2048-bit keys, K = 3 and 8, t = 1
    python bench/aggregate_group_bench.py --key-bits 1024 --ks 3 --repeats 1
    python bench/aggregate_group_bench.py --quick               # make bench --quick: 1024 bits, K = 3, once
    python bench/aggregate_group_bench.py --ks 8 --keys /tmp/k8 # keep the ceremony's key stores in /tmp/k8 and
                                                                # reuse them next time (the ceremony: 4–500 s)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE.parent))

from smcdp.runtime.governance.charges import BudgetConfig  # noqa: E402
from smcdp.runtime.governance.policy import Policy, ProtocolRules  # noqa: E402
from smcdp.runtime.local import LocalCluster, bytes_sent  # noqa: E402

sys.path.insert(0, str(HERE))  # the sibling benchmark's session timer
from group_key_bench import timed_run  # noqa: E402
from session_driver import process_cpu  # noqa: E402

GROUP = "bench"
DELTA = 1e-6
LAM = 0.05


def names(K: int) -> list[str]:
    return [f"org{i + 1}" for i in range(K)]


def write_data(tmp: Path, K: int, d: int, seed: int = 0) -> list[Path]:
    """K data sets of 60..60+40(K−1) rows, d features, rows of norm ≤ 1, labels from one linear rule."""
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    out = []
    for j in range(K):
        n = 60 + 40 * j
        X = rng.normal(size=(n, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.0001
        y = np.where(X @ w + 0.3 * rng.normal(size=n) > 0, 1, 0)
        out.append(tmp / f"K{K}-P{j + 1}.npz")
        np.savez(out[-1], X=X, y=y)
    return out


def policies(K: int, h: int) -> dict[str, Policy]:
    """charlie proposes; the data parties admit both keys (``key = "single"`` admits a single-key session although
    they hold a group of exactly these parties), h = K − t noise parties, and org1's key ceremony."""
    data = ProtocolRules(
        roles=("party*",),
        initiators=("charlie",),
        coordinators=("charlie", "dave"),
        release_to=("dave", *names(K)),
        key="single",
        max_noise_parties=h,
        allow_non_dp=True,
        data_bounds=(("records", 50),),  # what each states of its data: the sessions' min_records
    )
    ceremony = ProtocolRules(roles=("party*",), initiators=("org1",), max_receive_mib=2048)
    coord = {"dp-aggregate": ProtocolRules(roles=("charlie", "dave"), initiators=("charlie",))}
    return {
        "charlie": Policy(protocols=coord),
        "dave": Policy(protocols=coord),
        **{p: Policy(protocols={"dp-aggregate": data, "key-ceremony": ceremony}) for p in names(K)},
    }


def measure_k(tmp: Path, K: int, t: int, d: int, bits: int, eps: float, repeats: int, keys: Path | None = None) -> dict:
    """One K: the ceremony (or, with ``keys`` holding an earlier run's key stores for this K, t and key size, those
    copied in: the ceremony's figures are then the earlier run's), then the sessions."""
    h = K - t
    paths = write_data(tmp, K, d)
    parties: dict = {"charlie": {}, "dave": {}}
    for name, path in zip(names(K), paths):
        parties[name] = {"dp-aggregate": {"data": path}}
    sessions = 2 * (repeats + 1)
    budgets = {p: BudgetConfig(dataset=p, epsilon=eps * sessions * 1.01, delta=0.5) for p in names(K)}
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{i + 1}": n for i, n in enumerate(names(K))}}
    with LocalCluster(
        parties,
        allow_insecure_keys=bits < 2048,
        workdir=tmp / f"run-{K}",
        data_root=tmp / f"state-{K}",
        policies=policies(K, h),
        budgets=budgets,
    ) as c:
        saved = None if keys is None else keys / f"K{K}-t{t}-{bits}"
        if saved is not None and (saved / "keygen.json").exists():
            keygen = json.loads((saved / "keygen.json").read_text())
            for p in names(K):  # the saved key stores (modes kept: 0700 directories, 0600 files)
                shutil.copytree(saved / p, c.data_dir(p) / "keys")
            print(f"K = {K}: the key stores of {saved}", file=sys.stderr, flush=True)
        else:
            keygen = ceremony(c, K, t, bits)
            if saved is not None:
                for p in names(K):
                    shutil.copytree(c.data_dir(p) / "keys", saved / p)
                (saved / "keygen.json").write_text(json.dumps(keygen))
        base = {
            "n_parties": K,
            "dim": d,
            "epsilon": eps,
            "lam": LAM,
            "calibration": "gaussian",
            "delta": DELTA,
            "noise_parties": h,
            "min_records": 50,
            "key_bits": bits,
            "dgk_bits": bits,
            "dgk_t": 224 if bits >= 2048 else 96,
        }
        runs: dict[str, list[dict]] = {"single": [], "group": []}
        for i in range(repeats + 1):
            for mode in ("single", "group"):
                params = dict(base, key_group=GROUP, key_threshold=t) if mode == "group" else base
                cpu0 = sum(process_cpu(proc.pid) for proc in c.procs.values())
                recs, wall = timed_run(c, "dp-aggregate", roles, params, "charlie", f"K = {K} {mode}")
                cpu = sum(process_cpu(proc.pid) for proc in c.procs.values()) - cpu0
                sent = sum(bytes_sent(recs).values())
                messages = sum(int((r.get("stats") or {}).get("messages_sent", 0)) for r in recs.values())
                print(
                    f"K = {K} {mode}{' (warm-up)' if i == 0 else ''}: {wall:.2f} s, CPU {cpu:.2f} s (every party "
                    f"process), {sent / 1e6:.2f} MB, {messages} messages",
                    file=sys.stderr,
                    flush=True,
                )
                if i:
                    runs[mode].append({"seconds": wall, "cpu_seconds": cpu, "bytes": sent})
    return {"K": K, "t": t, "keygen": keygen, **runs}


def ceremony(c: LocalCluster, K: int, t: int, bits: int) -> dict:
    """The key ceremony among the K data parties: its wall time, generation seconds and candidates."""
    print(f"K = {K}: key ceremony, t = {t}, {bits} bits ...", file=sys.stderr, flush=True)
    krecs, kwall = timed_run(
        c,
        "key-ceremony",
        {f"party{i + 1}": n for i, n in enumerate(names(K))},
        {"group": GROUP, "parties": K, "threshold": t, "key_bits": bits},
        "org1",
        "the key ceremony",
    )
    kres = krecs["org1"]["result"]
    print(f"K = {K}: key ceremony {kwall:.1f} s, {kres['candidates']} candidates", file=sys.stderr, flush=True)
    return {"wall_seconds": kwall, "generation_seconds": kres["generation_seconds"], "candidates": kres["candidates"]}


def render(m: dict) -> None:
    print(f"{m['key_bits']}-bit keys, d = {m['dim']}, epsilon = {m['epsilon']}, delta = {DELTA}, h = K − t")
    print()
    print(
        "| K | t | key ceremony s (candidates) | single key: s (median [range]) | group key: s | × | single: bytes | group: bytes | × |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for row in m["rows"]:
        s, g = row["single"], row["group"]
        ss, gs = [r["seconds"] for r in s], [r["seconds"] for r in g]
        sb, gb = statistics.median(r["bytes"] for r in s), statistics.median(r["bytes"] for r in g)
        kg = row["keygen"]
        print(
            f"| {row['K']} | {row['t']} | {kg['wall_seconds']:.1f} ({kg['candidates']}) "
            f"| {statistics.median(ss):.2f} [{min(ss):.2f}–{max(ss):.2f}] "
            f"| {statistics.median(gs):.2f} [{min(gs):.2f}–{max(gs):.2f}] | {statistics.median(gs) / statistics.median(ss):.2f} "
            f"| {sb / 1e6:.3f} MB | {gb / 1e6:.3f} MB | {gb / sb:.2f} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--ks", default="3,8", help="numbers of data parties K (comma separated)")
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2, help="measured sessions per mode and K (after one warm-up)")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON instead of the table")
    ap.add_argument("--from-json", metavar="FILE", help="render the table of an earlier --json run")
    ap.add_argument("--quick", action="store_true", help="1024-bit keys, K = 3, one session per mode (a smoke run)")
    ap.add_argument("--keys", metavar="DIR", help="keep each K's ceremony key stores here, and reuse them if there")
    args = ap.parse_args()
    if args.quick:
        args.key_bits, args.ks, args.repeats = 1024, "3", 1
    if args.from_json:
        render(json.loads(Path(args.from_json).read_text()))
        return
    print(f"load average at the start: {os.getloadavg()}", file=sys.stderr, flush=True)
    m: dict = {"key_bits": args.key_bits, "dim": args.dim, "epsilon": args.epsilon, "rows": []}
    with tempfile.TemporaryDirectory(prefix="smcdp-aggregate-group-") as tmp:
        for K in (int(k) for k in args.ks.split(",")):
            m["rows"].append(
                measure_k(
                    Path(tmp),
                    K,
                    args.threshold,
                    args.dim,
                    args.key_bits,
                    args.epsilon,
                    args.repeats,
                    Path(args.keys) if args.keys else None,
                )
            )
    m["load_average_end"] = os.getloadavg()
    print(f"load average at the end: {m['load_average_end']}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        render(m)


if __name__ == "__main__":
    main()
