"""Power iteration under a group (threshold) key against the single-key mode, measured in the same run: the DP modes
and the exact mode.

Real party processes (trent, alice, bob, carol: N = 3 data parties, mutual TLS on loopback, one
:class:`~smcdp.runtime.local.LocalCluster` per k).  First a key ceremony among the three data parties
(``key-ceremony`` session, t = 1, ``--key-bits``): its wall time and the ceremony's own
``generation_seconds``; the key stores it fills are copied to the later clusters' data directories (the
ceremony runs once).  Then, per k, the same data and the same (epsilon, delta) in both modes:

* **single** -- party1 makes the session's Paillier key pair (the mode of every release before group keys);
* **group** -- ``key_group`` / ``key_threshold = 1``: the releases are encrypted under the ceremony's key and
  decrypted by the data parties together (digests, partial decryptions with proofs, their checks).

Each mode runs one unmeasured warm-up session and then ``--repeats`` sessions, alternating single and group so
that a change of host load hits both; the table gives the median wall time of a session (proposal to the
initiator's record) and the bytes all parties sent, and the ratio group / single -- the issue's target is
≤ 1.5× at k = 500.  Workloads (``--ks``): k = 20 and 100 in the covariance mode (one release), k = 500 with
``auto`` (the noisy power method, T = 10: the covariance mode at k = 500 takes 90 s even with one key); ``xK``
(e.g. ``x20``, ``x500``): the exact mode at k = K (tol 1e-9, its rounds until convergence; docs/protocols/
power-iteration.md, "The exact mode with a group key").

    python bench/group_key_bench.py                        # 2048-bit keys, k = 20, 100, 500; exact k = 20, 500
    python bench/group_key_bench.py --key-bits 1024 --ks 20 --repeats 1 --json
    python bench/group_key_bench.py --quick                # make bench --quick: 1024 bits, k = 20, once
    python bench/group_key_bench.py --ks 500 --keys /tmp/g3 # keep the ceremony's key stores in /tmp/g3 and
                                                            # reuse them next time
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE.parent))

from smcdp.runtime.governance.charges import BudgetConfig  # noqa: E402
from smcdp.runtime.governance.policy import Policy, ProtocolRules  # noqa: E402
from smcdp.runtime.local import LocalCluster, bytes_sent  # noqa: E402

DATA = ("alice", "bob", "carol")
ROLES = {"trent": "trent", "party1": "alice", "party2": "bob", "party3": "carol"}
GROUP = "bench"
DELTA = 1e-6


def blocks(k: int, n: int, seed: int = 0) -> list[np.ndarray]:
    """Three parties' n columns each of a k × 3n matrix with a clear leading direction, columns of norm ≤ 1."""
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(k, 3 * n)) + 3 * np.outer(rng.normal(size=k), rng.normal(size=3 * n))
    M /= np.linalg.norm(M, axis=0).max()
    return [M[:, i * n : (i + 1) * n] for i in range(3)]


def policies(samples: int) -> dict[str, Policy]:
    """trent proposes and coordinates; the data parties admit both keys (``key = "single"`` admits a single-key
    session although they hold a group of exactly these parties) and alice's key ceremony; each states its
    ``samples`` (the sessions' max_samples)."""
    data = ProtocolRules(
        roles=("party*",),
        initiators=("trent",),
        coordinators=("trent",),
        release_to=(*DATA, "trent"),  # the exact mode's x goes to trent
        key="single",
        allow_non_dp=True,
        min_threshold=1,  # its data withstands trent with one data party: admits the group key's h = n − t = 2
        data_bounds=(("samples", samples),),
    )
    # the ceremony's byte envelope at 2048 bits (30 times the expected candidates) is capped by [limits] at 2 GiB,
    # above the default max_receive_mib of 512 (docs/governance.md, "The key ceremony")
    ceremony = ProtocolRules(roles=("party*",), initiators=("alice",), max_receive_mib=2048)
    return {
        "trent": Policy(protocols={"power-iteration": ProtocolRules(roles=("trent",), initiators=("trent",))}),
        **{p: Policy(protocols={"power-iteration": data, "key-ceremony": ceremony}) for p in DATA},
    }


def cluster(tmp: Path, k: int, n: int, bits: int, sessions: int, eps: float) -> LocalCluster:
    tmp.mkdir(parents=True, exist_ok=True)
    parties: dict = {"trent": {}}
    for name, A in zip(DATA, blocks(k, n)):
        np.save(tmp / f"{name}-{k}.npy", A)
        parties[name] = {"power-iteration": {"data": tmp / f"{name}-{k}.npy"}}
    budgets = {p: BudgetConfig(dataset=p, epsilon=eps * sessions * 1.01, delta=DELTA * sessions * 1.01) for p in DATA}
    return LocalCluster(
        parties,
        allow_insecure_keys=bits < 2048,
        workdir=tmp / f"run-{k}",
        data_root=tmp / f"state-{k}",
        policies=policies(n),
        budgets=budgets,
    )


def timed_run(c: LocalCluster, protocol: str, roles: dict, params: dict, initiator: str, what: str):
    """One session's records and its wall seconds at the initiator's CLI; exits naming ``what`` if any party failed."""
    t0 = time.monotonic()
    recs = c.run(protocol, roles, params, initiator=initiator)
    wall = time.monotonic() - t0
    failed = {p: r.get("error") for p, r in recs.items() if r.get("state") != "succeeded"}
    if failed:
        raise SystemExit(f"{what} failed: {failed}")
    return recs, wall


def ceremony(c: LocalCluster, bits: int) -> dict:
    roles = {"party1": "alice", "party2": "bob", "party3": "carol"}
    params = {"group": GROUP, "parties": 3, "threshold": 1, "key_bits": bits}
    print(f"key ceremony: 3 parties, t = 1, {bits} bits (minutes at 2048 bits) ...", file=sys.stderr, flush=True)
    recs, wall = timed_run(c, "key-ceremony", roles, params, "alice", "the key ceremony")
    res = recs["alice"]["result"]
    out = {"wall_seconds": wall, **{k: res[k] for k in ("generation_seconds", "candidates", "fingerprint")}}
    print(f"key ceremony: {wall:.1f} s wall, {res['candidates']} candidate moduli", file=sys.stderr, flush=True)
    return out


def session(c: LocalCluster, k: int, n: int, bits: int, eps: float, group: bool, exact: bool = False) -> dict:
    params: dict = {"n_parties": 3, "key_bits": bits, "rows": k, "max_samples": n}
    if exact:
        params["tol"] = 1e-9
    else:
        params.update(epsilon=eps, delta=DELTA)
    if k <= 255 and not exact:
        params["dp_method"] = "covariance"
    if group:
        params.update(key_group=GROUP, key_threshold=1)
    recs, wall = timed_run(
        c, "power-iteration", ROLES, params, "trent", f"k = {k} ({'group' if group else 'single'} key)"
    )
    sent = bytes_sent(recs)
    res = recs["alice"]["result"]
    dp = res["dp"] or {}
    key = dp.get("key") or res["stats"].get("key") or {}
    return {
        "seconds": wall,
        "bytes": sum(sent.values()),
        "bytes_per_party": sent,
        "dp_method": dp.get("dp_method", "exact"),
        "rounds": dp.get("rounds", res["rounds"]),
        "key": key.get("kind", "single"),
    }


def measure(tmp: Path, ks: list[str], n: int, bits: int, eps: float, repeats: int, keys: Path | None = None) -> dict:
    """Every k of ``ks``: the ceremony once (or, with ``keys`` holding an earlier run's key stores of this key size,
    those: the ceremony's figures are then the earlier run's), then the sessions."""
    keygen: dict | None = None
    keys_from: Path | None = None
    saved = None if keys is None else keys / f"n3-t1-{bits}"
    if saved is not None and (saved / "keygen.json").exists():
        keygen, keys_from = json.loads((saved / "keygen.json").read_text()), saved
        print(f"the key stores of {saved}", file=sys.stderr, flush=True)
    rows = []
    for token in ks:
        exact = token.startswith("x")
        k = int(token.removeprefix("x"))
        with cluster(tmp / token, k, n, bits, 2 * (repeats + 1), eps) as c:
            if keys_from is None:
                keygen = ceremony(c, bits)
                keys_from = tmp / token / f"state-{k}"
                if saved is not None:
                    for p in DATA:
                        shutil.copytree(keys_from / p / "keys", saved / p / "keys")
                    (saved / "keygen.json").write_text(json.dumps(keygen))
            else:  # the ceremony's key stores, copied (modes kept: 0700 directories, 0600 files)
                for p in DATA:
                    shutil.copytree(keys_from / p / "keys", c.data_dir(p) / "keys")
            runs: dict[str, list[dict]] = {"single": [], "group": []}
            for i in range(repeats + 1):
                for mode in ("single", "group"):
                    r = session(c, k, n, bits, eps, mode == "group", exact)
                    print(
                        f"k = {k} {mode}{' (warm-up)' if i == 0 else ''}: {r['seconds']:.2f} s, "
                        f"{r['bytes'] / 1e6:.2f} MB, {r['dp_method']}",
                        file=sys.stderr,
                        flush=True,
                    )
                    if i:
                        runs[mode].append(r)
            rows.append({"k": k, **runs})
    return {"keygen": keygen, "sessions": rows, "n_samples": n, "key_bits": bits, "epsilon": eps, "delta": DELTA}


def render(m: dict) -> None:
    kg = m["keygen"]
    print(
        f"Key ceremony, 3 data parties, t = 1, {m['key_bits']} bits: {kg['wall_seconds']:.1f} s wall "
        f"(generation_seconds {kg['generation_seconds']:.1f}), {kg['candidates']} candidate moduli."
    )
    print()
    print(
        "| k | mode | sessions | single key: s (median [range]) | group key: s | × | single: bytes | group: bytes | × "
        "| rounds single / group | s a round × |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for row in m["sessions"]:
        s, g = row["single"], row["group"]
        ss, gs = [r["seconds"] for r in s], [r["seconds"] for r in g]
        sb, gb = statistics.median(r["bytes"] for r in s), statistics.median(r["bytes"] for r in g)
        rounds = g[0]["rounds"]
        mode = g[0]["dp_method"] + (f", T = {rounds}" if g[0]["dp_method"] == "power" else "")
        print(
            f"| {row['k']} | {mode} | {len(ss)} + {len(gs)} | {statistics.median(ss):.2f} [{min(ss):.2f}–{max(ss):.2f}] "
            f"| {statistics.median(gs):.2f} [{min(gs):.2f}–{max(gs):.2f}] "
            f"| {statistics.median(gs) / statistics.median(ss):.2f} | {sb / 1e6:.3f} MB | {gb / 1e6:.3f} MB "
            f"| {gb / sb:.2f} | {_rounds(s)} / {_rounds(g)} | {_per_round(g) / _per_round(s):.2f} |"
        )


def _rounds(runs: list[dict]) -> str:
    """The sessions' rounds (the exact mode's vary with the decoys and the convergence test)."""
    counts = sorted({r["rounds"] for r in runs})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"


def _per_round(runs: list[dict]) -> float:
    """The median seconds a round: sessions of different lengths compare by it."""
    return statistics.median(r["seconds"] / max(1, r["rounds"]) for r in runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument(
        "--ks", default="20,100,500,x20,x500", help="numbers of rows k (comma separated; xK: the exact mode at K)"
    )
    ap.add_argument("--samples", type=int, default=100, help="columns per data party (default 100)")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--repeats", type=int, default=2, help="measured sessions per mode and k (after one warm-up)")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON instead of the table")
    ap.add_argument("--from-json", metavar="FILE", help="render the table of an earlier --json run")
    ap.add_argument("--quick", action="store_true", help="1024-bit keys, k = 20, one session per mode (a smoke run)")
    ap.add_argument("--keys", metavar="DIR", help="keep the ceremony's key stores here, and reuse them if there")
    args = ap.parse_args()
    if args.quick:
        args.key_bits, args.ks, args.repeats = 1024, "20,x20", 1
    if args.from_json:
        render(json.loads(Path(args.from_json).read_text()))
        return
    print(f"load average at the start: {os.getloadavg()}", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="smcdp-group-key-") as tmp:
        m = measure(
            Path(tmp),
            args.ks.split(","),
            args.samples,
            args.key_bits,
            args.epsilon,
            args.repeats,
            Path(args.keys) if args.keys else None,
        )
    m["load_average_end"] = os.getloadavg()
    print(f"load average at the end: {m['load_average_end']}", file=sys.stderr, flush=True)
    if args.json:
        print(json.dumps(m, indent=2))
    else:
        render(m)


if __name__ == "__main__":
    main()
