"""Protocols at scale (issue 28): dp-aggregate with K data parties, power iteration with N data parties.

``python bench/scale_bench.py [dp-aggregate]``: K data parties as processes on this machine, and up to 256 in one
process.

* **Processes** (``--processes``, default K ∈ {2, 4, 8, 12, 16, 32}): ``LocalCluster`` -- Charlie, Dave and K
  data parties as separate OS processes over gRPC with mutual TLS on loopback, the code path of
  ``smcdp demo dp-aggregate`` -- at ``--key-bits`` (default 2048: Paillier ξ, ζ; DGK 2048-bit, t = 224), d =
  ``--dim`` features, 200 synthetic rows per party.  Two sessions per cluster (the first pays lazy imports
  and table builds in every process).  Per session: wall seconds, CPU seconds of every process (from
  /proc, so other helpers' load is not counted), the bytes every role sent and received (protobuf payload),
  the 1-minute load average before and after.  The cluster's start-up (processes, certificates, imports)
  is timed separately: it is paid once per party, not per session.
* **In one process** (``--memory``, default K ∈ {2, 4, 8, 12, 16, 32, 64, 100, 128, 256}): the same role
  code over ``InMemoryNetwork`` (every message serialised as on the wire), every key generated in the
  session as a party would.  Wall and CPU seconds of the process, bytes per role.
* **Exactness** at every K: the release T (Dave's shares added mod M) minus Σ_j W_j is exactly the noise
  vector of the party with the largest sensitivity (recomputed from its seeded noise stream).

Then the slopes (least squares on log K for K ≥ 4) of total bytes, per-data-party bytes and seconds, the
issue's targets (bytes(12)/bytes(4) ≤ 4.5, K = 100 in one process within 10 minutes, per-party bytes
constant or O(log K)), and a model of K parties on K machines from the measured per-role CPU (printed
with its assumptions; docs/benchmarks.md records a run).

``python bench/scale_bench.py power-iteration``: N ∈ {2, 4, 8, 16} data parties of k × n matrices (default k = 200,
n = 100 per party, a clear leading direction) and a fixed number of rounds (``--rounds``, p = 1: no decoys, so
every N runs the same rounds), 2048-bit keys, in one process (wall, CPU, bytes, and a profile of the session
grouped by where the time goes: Trent's code, the data parties' protocol code, the compute engine,
Paillier / gmpy2, the channel) and as processes (the cluster's start-up, then two sessions: wall, the CPU of
every process and of its descendants -- the local engine's crypto workers -- from /proc, bytes).  Log–log
slopes against N show what grows faster than O(N).

    python bench/scale_bench.py                  # dp-aggregate, everything (about an hour on 2 shared cores)
    python bench/scale_bench.py --quick          # processes K ≤ 8, memory K ≤ 16 (a few minutes)
    python bench/scale_bench.py power-iteration  # N = 2, 4, 8, 16
    python bench/scale_bench.py --json out.json  # also the raw measurements
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import math
import os
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from smcdp.net.channel import InMemoryNetwork  # noqa: E402
from smcdp.plugins.dp_aggregate import load_dataset  # noqa: E402
from smcdp.primitives.rng import noise_source  # noqa: E402
from smcdp.protocols.dp_aggregate import (  # noqa: E402
    DPAggregateParams,
    charlie,
    data_party,
    dave,
    sensitivity_key,
    to_fixed,
    train_local,
)
from smcdp.protocols.power_iteration import (
    PowerIterationParams,  # noqa: E402
    trent,  # noqa: E402
)
from smcdp.protocols.power_iteration import data_party as pi_party  # noqa: E402
from smcdp.runtime.local import LocalCluster  # noqa: E402

SEED = 28
_TICK = os.sysconf("SC_CLK_TCK")


# ----------------------------------------------------------------------------- helpers
def cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system, reaped children included) of a process and of its live descendants
    (e.g. the local compute engine's crypto workers)."""
    total = 0.0
    for p in [pid, *descendants(pid)]:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        total += sum(int(fields[i]) for i in (11, 12, 13, 14)) / _TICK
    return total


def descendants(pid: int) -> list[int]:
    try:
        kids = [int(k) for k in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []
    return [d for k in kids for d in (k, *descendants(k))]


def load() -> float:
    return os.getloadavg()[0]


def params_for(K: int, d: int, key_bits: int) -> dict:
    dgk_bits, dgk_t = (2048, 224) if key_bits >= 2048 else (max(512, key_bits + key_bits % 2), 96)
    return {
        "n_parties": K,
        "dim": d,
        "epsilon": 1.0,
        "lam": 0.01,
        "min_records": 100,
        "key_bits": key_bits,
        "dgk_bits": dgk_bits,
        "dgk_t": dgk_t,
    }


def selected_noise(p: DPAggregateParams, sens: list[float], streams) -> list[int]:
    """The fixed-point noise of the party with the largest sensitivity (lowest index on ties)."""
    keys = [sensitivity_key(s)[0] for s in sens]
    j = min(range(len(keys)), key=lambda i: (keys[i], i))
    _, dh = sensitivity_key(sens[j])
    mech = p.mechanism(p.mechanism_sensitivity(dh), random_state=streams(j))
    return [to_fixed(x, p.frac_bits) for x in np.asarray(mech.sample(p.dim)).reshape(-1)]


def check_release(p: DPAggregateParams, shares_mod: list[list[str]], weights, sens, streams) -> None:
    M = 1 << p.modulus_bits
    T = [sum(int(s[i]) for s in shares_mod) % M for i in range(p.dim)]
    T = [t - M if t >= M // 2 else t for t in T]
    W = [sum(to_fixed(w[i], p.frac_bits) for w in weights) for i in range(p.dim)]
    if [t - w for t, w in zip(T, W)] != selected_noise(p, sens, streams):
        raise AssertionError(f"K = {p.n_parties}: the release is not Σ W + the selected party's noise")


def write_parties(dirpath: Path, K: int, d: int, seed: int = 0) -> list[Path]:
    rng = np.random.default_rng(seed)
    w = rng.normal(size=d)
    paths = []
    for j in range(K):
        n = 200 + 7 * j  # distinct sizes: the smallest data set is party1's
        X = rng.normal(size=(n, d))
        X /= np.maximum(1.0, np.linalg.norm(X, axis=1))[:, None] * 1.0001
        y = (X @ w + 0.2 * rng.normal(size=n) > 0).astype(int)
        paths.append(dirpath / f"P{j + 1}.npz")
        np.savez(paths[-1], X=X, y=y)
    return paths


def role_bytes(stats: dict[str, dict], K: int) -> dict:
    data = [f"party{i}" for i in range(1, K + 1)]
    both = {r: s["bytes_sent"] + s["bytes_received"] for r, s in stats.items()}
    return {
        "total_sent": sum(s["bytes_sent"] for s in stats.values()),
        "charlie": both["charlie"],
        "dave": both["dave"],
        "party_mean": float(np.mean([both[r] for r in data])),
        "party_max": max(both[r] for r in data),
        "party1": both["party1"],
    }


def run_retrying(cluster, protocol: str, roles, params, initiator: str, out: dict, **kw) -> dict:
    """cluster.run, once more if the session never started (the start call timed out on a loaded machine:
    no party knows the session); the retry is recorded in ``out["retries"]``."""
    for attempt in (1, 2):
        recs = cluster.run(protocol, roles, params, initiator=initiator, **kw)
        if any(r.get("state") != "unknown" for r in recs.values()) or attempt == 2:
            return recs
        out.setdefault("retries", []).append(str(recs[roles[initiator]].get("error"))[:300])
    return recs


# ----------------------------------------------------------------------------- processes
def run_processes(K: int, d: int, key_bits: int, tmp: Path) -> dict:
    sub = tmp / f"proc-K{K}"
    sub.mkdir()
    paths = write_parties(sub, K, d)
    names = [f"p{j + 1}" for j in range(K)]
    parties = {"charlie": {}, "dave": {}, **{n: {"dp-aggregate": {"data": str(pth)}} for n, pth in zip(names, paths)}}
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{j + 1}": n for j, n in enumerate(names)}}
    params = params_for(K, d, key_bits)
    p = DPAggregateParams.from_mapping(params)
    fits = [train_local(*load_dataset(pth), p.lam) for pth in paths]
    out: dict = {"K": K, "mode": "processes", "sessions": []}
    load0, t0 = load(), time.perf_counter()
    with LocalCluster(
        parties,
        allow_insecure_keys=key_bits < 2048,
        workdir=sub / "run",
        allow_seeded=True,
        session_seconds=3600,
        open_policy=True,
    ) as c:
        out["startup_seconds"] = time.perf_counter() - t0
        procs = {name: pr.pid for name, pr in c.procs.items()}
        cpu0 = {name: cpu_seconds(pid) for name, pid in procs.items()}
        out["startup_cpu_per_process"] = float(np.mean(list(cpu0.values())))
        for s in range(2):
            before = {name: cpu_seconds(pid) for name, pid in procs.items()}
            load_before, t1 = load(), time.perf_counter()
            recs = run_retrying(c, "dp-aggregate", roles, params, "charlie", out, seed=SEED + s)
            wall = time.perf_counter() - t1
            cpu = {name: cpu_seconds(pid) - before[name] for name, pid in procs.items()}
            bad = {n: r.get("error") for n, r in recs.items() if r.get("state") != "succeeded"}
            if bad:
                raise AssertionError(f"K = {K}: session failed: {bad}")
            by_role = {r: recs[n]["stats"] for r, n in roles.items()}
            check_release(
                p,
                recs["dave"]["result"]["shares_mod"],
                [f[0] for f in fits],
                [f[1] for f in fits],
                lambda j, s=s: noise_source(SEED + s, "dp-aggregate", "noise", f"party{j + 1}"),
            )
            out["sessions"].append(
                {
                    "wall": wall,
                    "cpu_total": sum(cpu.values()),
                    "cpu_charlie": cpu["charlie"],
                    "cpu_party_mean": float(np.mean([cpu[n] for n in names])),
                    "cpu_party_max": max(cpu[n] for n in names),
                    "cpu_party1": cpu[names[0]],
                    "load_before": load_before,
                    "load_after": load(),
                    "bytes": role_bytes(by_role, K),
                }
            )
    out["load_start"] = load0
    return out


# ----------------------------------------------------------------------------- one process
def run_memory(K: int, d: int, key_bits: int) -> dict:
    params = params_for(K, d, key_bits)
    p = DPAggregateParams.from_mapping(params)
    rng = np.random.default_rng(K)
    weights = [rng.uniform(-1, 1, size=d) for _ in range(K)]
    sens = [1.0 / (int(n) * p.lam) for n in rng.integers(100, 10_000, size=K)]
    roles = {"charlie": "charlie", "dave": "dave", **{f"party{j + 1}": f"p{j + 1}" for j in range(K)}}
    insecure = key_bits < 2048
    fns = {
        "charlie": lambda ch: charlie(ch, p, seed=SEED, allow_insecure_keys=insecure),
        "dave": lambda ch: dave(ch, p),
    }
    for j in range(K):
        fns[f"party{j + 1}"] = (
            lambda idx: (
                lambda ch: data_party(
                    ch,
                    weights[idx],
                    sens[idx],
                    p,
                    seed=SEED,
                    allow_insecure_keys=insecure,
                    noise_random_state=np.random.default_rng(1000 + idx),
                )
            )
        )(j)
    net = InMemoryNetwork(roles, timeout=7200)
    load_before, t0, c0 = load(), time.perf_counter(), time.process_time()
    res = asyncio.run(net.run(fns))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    check_release(p, res["dave"].shares_mod, weights, sens, lambda j: np.random.default_rng(1000 + j))
    stats = {r: res[r].stats for r in roles}
    return {
        "K": K,
        "mode": "memory",
        "wall": wall,
        "cpu": cpu,
        "load_before": load_before,
        "load_after": load(),
        "bytes": role_bytes(stats, K),
        "messages": len(net.transcript),
    }


# ----------------------------------------------------------------------------- power iteration against N
def pi_blocks(N: int, k: int, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.normal(size=k)
    return [rng.normal(size=(k, n)) + 3 * np.outer(u, rng.normal(size=n)) for _ in range(N)]


def pi_params(N: int, k: int, rounds: int, key_bits: int) -> dict:
    return {"n_parties": N, "key_bits": key_bits, "p": 1.0, "tol": 1e-15, "max_iterations": rounds, "rows": k}


GROUPS = [
    ("trent", "power_iteration.py:trent"),
    ("party protocol", "power_iteration.py"),
    ("compute engine", "smcdp/compute/"),
    ("paillier / gmpy2", "gmpy2"),
    ("paillier / gmpy2", "smcdp/crypto/"),
    ("paillier / gmpy2", "_mont"),
    ("channel", "smcdp/net/"),
    ("protobuf", "google/protobuf"),
    ("numpy", "numpy"),
    ("asyncio", "asyncio"),
    ("waiting for workers", "acquire"),
    ("waiting for workers", "select"),
    ("waiting for workers", "poll"),
]


def profile_groups(stats: pstats.Stats) -> dict[str, float]:
    """Self time per group: the first group whose pattern is in "file:function" (built-ins: "~:<built-in …>")."""
    out: dict[str, float] = {}
    for (file, _, func), (_, _, tottime, _, _) in stats.stats.items():
        where = f"{file}:{func}"
        name = next((g for g, pat in GROUPS if pat in where), "other")
        out[name] = out.get(name, 0.0) + tottime
    return out


def pi_memory(N: int, k: int, n: int, rounds: int, key_bits: int) -> dict:
    p = PowerIterationParams.from_mapping(pi_params(N, k, rounds, key_bits))
    data = pi_blocks(N, k, n)
    roles = {"trent": "trent", **{f"party{i + 1}": f"p{i + 1}" for i in range(N)}}
    fns = {"trent": lambda ch: trent(ch, p, allow_insecure_keys=key_bits < 2048)}
    for i in range(N):
        fns[f"party{i + 1}"] = (lambda idx: lambda ch: pi_party(ch, data[idx], p, allow_insecure_keys=key_bits < 2048))(
            i
        )
    net = InMemoryNetwork(roles, timeout=7200)
    prof = cProfile.Profile()
    load0, t0, c0 = os.getloadavg()[0], time.perf_counter(), cpu_seconds(os.getpid())
    prof.enable()
    res = asyncio.run(net.run(fns))
    prof.disable()
    wall, cpu = time.perf_counter() - t0, cpu_seconds(os.getpid()) - c0  # the crypto workers included
    groups = profile_groups(pstats.Stats(prof))
    return {
        "N": N,
        "wall": wall,
        "cpu": cpu,
        "load": (load0, os.getloadavg()[0]),
        "round_seconds": res["trent"].round_seconds,
        "rounds": res["trent"].rounds,
        "bytes": sum(r.stats["bytes_sent"] for r in res.values()),
        "profile": groups,
        "trent_bytes": res["trent"].stats["bytes_sent"] + res["trent"].stats["bytes_received"],
    }


def pi_processes(N: int, k: int, n: int, rounds: int, key_bits: int, tmp: Path) -> dict:
    sub = tmp / f"N{N}"
    sub.mkdir()
    names = [f"p{i + 1}" for i in range(N)]
    parties = {"trent": {}}
    for name, b in zip(names, pi_blocks(N, k, n)):
        np.save(sub / f"{name}.npy", b)
        parties[name] = {"power-iteration": {"data": sub / f"{name}.npy"}}
    roles = {"trent": "trent", **{f"party{i + 1}": nm for i, nm in enumerate(names)}}
    out: dict = {"N": N, "sessions": []}
    t0 = time.perf_counter()
    with LocalCluster(
        parties, allow_insecure_keys=key_bits < 2048, workdir=sub / "run", session_seconds=3600, open_policy=True
    ) as c:
        out["startup_seconds"] = time.perf_counter() - t0
        pids = {nm: pr.pid for nm, pr in c.procs.items()}
        out["startup_cpu_per_process"] = float(np.mean([cpu_seconds(pid) for pid in pids.values()]))
        for _ in range(2):
            before = {nm: cpu_seconds(pid) for nm, pid in pids.items()}
            load0, t1 = os.getloadavg()[0], time.perf_counter()
            recs = run_retrying(c, "power-iteration", roles, pi_params(N, k, rounds, key_bits), "trent", out)
            wall = time.perf_counter() - t1
            bad = {nm: r.get("error") for nm, r in recs.items() if r.get("state") != "succeeded"}
            if bad:
                raise AssertionError(f"N = {N}: {bad}")
            cpu = {nm: cpu_seconds(pid) - before[nm] for nm, pid in pids.items()}
            out["sessions"].append(
                {
                    "wall": wall,
                    "cpu_total": sum(cpu.values()),
                    "cpu_trent": cpu["trent"],
                    "cpu_party_mean": float(np.mean([cpu[nm] for nm in names])),
                    "load": (load0, os.getloadavg()[0]),
                    "round_seconds": recs["trent"]["result"]["round_seconds"],
                    "bytes": sum(int(r["stats"]["bytes_sent"]) for r in recs.values()),
                }
            )
    return out


# ----------------------------------------------------------------------------- fits and the report
def slope(Ks, ys) -> float:
    pts = [(math.log(k), math.log(y)) for k, y in zip(Ks, ys) if k >= 4 and y > 0]
    if len(pts) < 2:
        return float("nan")
    x, y = zip(*pts)
    return float(np.polyfit(x, y, 1)[0])


def linear(Ks, ys) -> tuple[float, float]:
    """(a, b) of y ≈ a + b·K by least squares."""
    b, a = np.polyfit(np.asarray(Ks, dtype=float), np.asarray(ys, dtype=float), 1)
    return float(a), float(b)


def kib(x: float) -> str:
    return f"{x / 1024:,.0f} KiB" if x < 10 * 1024 * 1024 else f"{x / 1024 / 1024:,.1f} MiB"


#: what the measurements are compared with, measured once (the tree moved on; the bench reruns the rest)
DPA_BEFORE = (
    "Before issue 28 (main 33edd04: all-pairs secure minimum, the whole indicator to every party, the "
    "K(K+1)-vector secure sum), measured in the same hour with the same harness in one process: total bytes "
    "99 KiB, 554 KiB, 2.5 MiB, 5.8 MiB, 10.5 MiB and CPU 0.5, 1.1, 3.5, 7.5, 12.6 s for K = 2, 4, 8, 12, 16 "
    "(slopes K^2.14 and K^1.74; bytes(12)/bytes(4) = 10.74); a data party's traffic grew as K^1.14 (party1's "
    "1.3 MiB at K = 16). Now the check of issue 25 costs every party two more DGK comparisons, so K = 2 sends "
    "more than before (225 KiB against 99 KiB) and K ≥ 8 much less."
)
PI_FINDINGS = (
    "What grew faster than O(N), and where: **the liveness probes** (smcdp/runtime/session.py): every participant "
    "probed every other one every min(5 s, grace/6) -- N(N+1) heartbeats per interval and a mutual-TLS connection "
    "per pair and session; now each probes its two nearest unfinished neighbours in a ring (2(N+1)).  And **the "
    "cluster's start-up** (smcdp/runtime/local.py): all N + 1 processes import at once (≈ 1.5 CPU-s each), so the "
    "fixed 60 s wait for the first one failed at 34 processes on two loaded cores; the wait now grows with the "
    "number of processes.  Nothing in the protocol module grows faster than O(N): Trent receives, sums and sends N "
    "vectors per round and a data party's work is constant (its CPU per session is flat in N above).  What "
    "dominates a session at every N is per party and per session -- the local engine's crypto process pool "
    "(spawned per session; its workers build their own tables: the first round's seconds) -- which issue 27 "
    "replaces with party-lifetime crypto threads (branch `speed`)."
)
PI_BEFORE = (
    "With every participant probing every other one (before issue 28; processes, second session, same hour): "
    "N = 8: CPU 15.3 s, a party's 1.62 s; N = 16: CPU 32.8 s, a party's 1.85 s, Trent's 3.10 s — CPU slope "
    "N^1.10 against N^0.85 with the ring."
)


def dpa_report(proc: list[dict], mem: list[dict], key_bits: int, d: int, rtt: float, bandwidth: float) -> str:
    lines = [
        f"Paillier {key_bits}-bit (ξ, ζ), DGK {params_for(2, d, key_bits)['dgk_bits']}-bit, d = {d}, ε = 1, "
        "κ = 40; bytes are protobuf payloads, a role's sent + received; CPU from /proc (processes) or "
        "the process (in memory); load = 1-minute load average before → after.",
        "",
    ]
    if proc:
        lines += [
            "**Processes** (gRPC + mutual TLS on loopback, K + 2 processes on the 2 shared cores; second session "
            "of each cluster, the first in brackets):",
            "",
            "| K | wall s | CPU s (all) | Charlie CPU s | party CPU s (mean / max) | load | bytes sent (all) | "
            "Charlie | party (mean / max) | start-up s (CPU s per process) |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in proc:
            s, f = r["sessions"][1], r["sessions"][0]
            b = s["bytes"]
            lines.append(
                f"| {r['K']} | {s['wall']:.1f} ({f['wall']:.1f}) | {s['cpu_total']:.1f} ({f['cpu_total']:.1f}) | "
                f"{s['cpu_charlie']:.2f} | {s['cpu_party_mean']:.2f} / {s['cpu_party_max']:.2f} | "
                f"{s['load_before']:.1f} → {s['load_after']:.1f} | {kib(b['total_sent'])} | {kib(b['charlie'])} | "
                f"{kib(b['party_mean'])} / {kib(b['party_max'])} | {r['startup_seconds']:.1f} "
                f"({r['startup_cpu_per_process']:.1f}) |"
            )
        Ks = [r["K"] for r in proc]
        warm = [r["sessions"][1] for r in proc]
        lines += [
            "",
            f"Slopes (log–log, K ≥ 4): total bytes K^{slope(Ks, [s['bytes']['total_sent'] for s in warm]):.2f}, "
            f"per-party bytes K^{slope(Ks, [s['bytes']['party_mean'] for s in warm]):.2f}, "
            f"Charlie's bytes K^{slope(Ks, [s['bytes']['charlie'] for s in warm]):.2f}, "
            f"wall K^{slope(Ks, [s['wall'] for s in warm]):.2f}, CPU K^{slope(Ks, [s['cpu_total'] for s in warm]):.2f}.",
        ]
    if mem:
        lines += [
            "",
            "**One process** (InMemoryNetwork, the same role code, every key generated in the session):",
            "",
            "| K | wall s | CPU s | load | messages | bytes sent (all) | Charlie | party (mean / max) | party1 |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in mem:
            b = r["bytes"]
            lines.append(
                f"| {r['K']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['load_before']:.1f} → {r['load_after']:.1f} | "
                f"{r['messages']} | {kib(b['total_sent'])} | {kib(b['charlie'])} | {kib(b['party_mean'])} / "
                f"{kib(b['party_max'])} | {kib(b['party1'])} |"
            )
        Ks = [r["K"] for r in mem]
        lines += [
            "",
            f"Slopes (log–log, K ≥ 4): total bytes K^{slope(Ks, [r['bytes']['total_sent'] for r in mem]):.2f}, "
            f"per-party bytes (mean) K^{slope(Ks, [r['bytes']['party_mean'] for r in mem]):.2f}, "
            f"(max) K^{slope(Ks, [r['bytes']['party_max'] for r in mem]):.2f}, "
            f"Charlie K^{slope(Ks, [r['bytes']['charlie'] for r in mem]):.2f}, "
            f"CPU K^{slope(Ks, [r['cpu'] for r in mem]):.2f}.",
        ]
        a, b = linear(Ks, [r["cpu"] for r in mem])
        lines.append(f"CPU ≈ {a:.1f} s + {b:.2f} s·K.")
        by = {r["K"]: r for r in mem}
        if 4 in by and 12 in by:
            ratio = by[12]["bytes"]["total_sent"] / by[4]["bytes"]["total_sent"]
            lines.append(f"Target bytes(K = 12)/bytes(K = 4) ≤ 4.5: **{ratio:.2f}**.")
        if 100 in by:
            lines.append(
                f"Target K = 100 in one process within 10 minutes: **{by[100]['wall']:.0f} s** wall "
                f"({by[100]['cpu']:.0f} s CPU)."
            )
        lines += ["", DPA_BEFORE]
    if len(proc) >= 2:
        Ks = [r["K"] for r in proc]
        warm = [r["sessions"][1] for r in proc]
        ca, cb = linear(Ks, [s["cpu_charlie"] for s in warm])
        K = 100
        p_slope = max(0.0, slope(Ks, [s["cpu_party_max"] for s in warm]))
        cpu_p = warm[-1]["cpu_party_max"] * (K / Ks[-1]) ** p_slope  # the largest K measured, extrapolated
        depth = math.ceil(math.log2(K))
        hops = 12 + 8 * depth  # sequential message latencies on the critical path (docs/benchmarks.md)
        rows = mem or [dict(K=r["K"], bytes=s["bytes"]) for r, s in zip(proc, warm)]
        ba, bb = linear([r["K"] for r in rows], [r["bytes"]["charlie"] for r in rows])
        ch_bytes = next((r["bytes"]["charlie"] for r in rows if r["K"] == K), ba + bb * K)
        cpu_c = ca + cb * K
        lines += [
            "",
            f"**Model: {K} parties on {K} machines** (one core each).  Charlie's CPU ≈ {ca:.2f} + {cb:.3f}·K s "
            f"(fitted on the processes above); a data party's (the largest) grows as K^{p_slope:.2f} here "
            f"(its protocol work is constant but for ⌈log₂ K⌉ bits more per comparison; K + 2 processes on "
            f"two cores also cost each other cache and switches), extrapolated from K = {Ks[-1]}: "
            f"{cpu_p:.2f} s; "
            f"{hops} sequential message latencies (12 + 8⌈log₂ K⌉) at {rtt * 1000:.0f} ms one way; "
            f"Charlie's {kib(ch_bytes)} at {bandwidth / 1e6:.1f} MB/s.",
            f"Charlie's CPU {cpu_c:.1f} s (his K − 1 comparisons and K openings: the only part that grows with K), "
            f"a party's {cpu_p:.2f} s, latencies {hops * rtt:.1f} s, Charlie's transfer {ch_bytes / bandwidth:.1f} s: "
            f"a session ≈ **{cpu_c + cpu_p + hops * rtt + ch_bytes / bandwidth:.0f} s** (an upper bound: nothing "
            "overlaps).",
        ]
    return "\n".join(lines)


def pi_report(mem: list[dict], proc: list[dict], k: int, n: int, rounds: int, key_bits: int) -> str:
    Ns = [r["N"] for r in mem] or [r["N"] for r in proc]
    groups = sorted({g for r in mem for g in r["profile"]})
    lines = [f"k = {k}, n = {n} per party, {rounds} rounds (p = 1), {key_bits}-bit keys.", ""]
    if mem:
        lines += [
            "**One process**: seconds, and the profile's self time by group (wall seconds: 'waiting for workers' "
            "is the event loop waiting on the crypto pool and threads, so it includes the machine's load; "
            "CPU counts the pool's workers):",
            "",
            "| N | wall s | CPU s | load | round s (median) | bytes | " + " | ".join(groups) + " |",
            "|---|---|---|---|---|---|" + "---|" * len(groups),
        ]
        for r in mem:
            lines.append(
                f"| {r['N']} | {r['wall']:.1f} | {r['cpu']:.1f} | {r['load'][0]:.1f} → {r['load'][1]:.1f} | "
                f"{np.median(r['round_seconds'][1:]):.2f} | {kib(r['bytes'])} | "
                + " | ".join(f"{r['profile'].get(g, 0):.2f}" for g in groups)
                + " |"
            )
        lines += [
            "",
            f"Slopes against N (N ≥ 4): CPU N^{slope(Ns, [r['cpu'] for r in mem]):.2f}, bytes N^"
            f"{slope(Ns, [r['bytes'] for r in mem]):.2f}; "
            + ", ".join(
                f"{g} N^{slope(Ns, [r['profile'].get(g, 0) for r in mem]):.2f}"
                for g in groups
                if max(r["profile"].get(g, 0) for r in mem) >= 0.5
            )
            + " (groups below 0.5 s left out: their slopes are noise).",
        ]
    if proc:
        lines += [
            "",
            "**Processes** (second session; the first in brackets):",
            "",
            "| N | start-up s (CPU s per process) | wall s | CPU s (all, with workers) | Trent CPU s | "
            "party CPU s (mean) | load | round s (median) | bytes |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in proc:
            s, f = r["sessions"][1], r["sessions"][0]
            lines.append(
                f"| {r['N']} | {r['startup_seconds']:.1f} ({r['startup_cpu_per_process']:.1f}) | {s['wall']:.1f} "
                f"({f['wall']:.1f}) | {s['cpu_total']:.1f} ({f['cpu_total']:.1f}) | {s['cpu_trent']:.2f} | "
                f"{s['cpu_party_mean']:.2f} | {s['load'][0]:.1f} → {s['load'][1]:.1f} | "
                f"{np.median(s['round_seconds'][1:]):.2f} | {kib(s['bytes'])} |"
            )
        warm = [r["sessions"][1] for r in proc]
        lines += [
            "",
            f"Slopes against N (N ≥ 4): wall N^{slope(Ns, [s['wall'] for s in warm]):.2f}, CPU N^"
            f"{slope(Ns, [s['cpu_total'] for s in warm]):.2f}, Trent's CPU N^"
            f"{slope(Ns, [s['cpu_trent'] for s in warm]):.2f}, a party's CPU N^"
            f"{slope(Ns, [s['cpu_party_mean'] for s in warm]):.2f}, start-up N^"
            f"{slope(Ns, [r['startup_seconds'] for r in proc]):.2f}.",
            "",
            PI_BEFORE,
        ]
    lines += ["", PI_FINDINGS]
    return "\n".join(lines)


def ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("protocol", nargs="?", default="dp-aggregate", choices=("dp-aggregate", "power-iteration"))
    ap.add_argument(
        "--processes",
        help="K (or N) for separate processes, a comma list ('' for none); default "
        "2,4,8,12,16,32 (dp-aggregate), 2,4,8,16 (power-iteration)",
    )
    ap.add_argument(
        "--memory",
        help="K (or N) in one process; default 2,4,8,12,16,32,64,100,128,256 "
        "(dp-aggregate), 2,4,8,16 (power-iteration)",
    )
    ap.add_argument("--quick", action="store_true", help="small K only")
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--dim", type=int, default=10, help="dp-aggregate: d")
    ap.add_argument("--rows", type=int, default=200, help="power-iteration: k")
    ap.add_argument("--samples", type=int, default=100, help="power-iteration: columns per party")
    ap.add_argument("--rounds", type=int, default=6, help="power-iteration: rounds (p = 1, no decoys)")
    ap.add_argument("--rtt", type=float, default=0.05, help="dp-aggregate model: one-way latency, seconds")
    ap.add_argument("--bandwidth", type=float, default=12.5e6, help="dp-aggregate model: Charlie's bytes/s")
    ap.add_argument("--json", help="write the raw measurements here")
    args = ap.parse_args(argv)
    dpa = args.protocol == "dp-aggregate"
    quick = "2,4,8" if dpa else "2,4"
    procs = ints(
        quick
        if args.quick
        else args.processes
        if args.processes is not None
        else "2,4,8,12,16,32"
        if dpa
        else "2,4,8,16"
    )
    mems = ints(
        "2,4,8,12,16"
        if args.quick and dpa
        else quick
        if args.quick
        else args.memory
        if args.memory is not None
        else "2,4,8,12,16,32,64,100,128,256"
        if dpa
        else "2,4,8,16"
    )
    proc_rows, mem_rows = [], []

    def note(row: dict) -> None:
        print(json.dumps(row), file=sys.stderr, flush=True)

    for K in mems:
        print(f"one process, {K} data parties …", file=sys.stderr, flush=True)
        mem_rows.append(
            run_memory(K, args.dim, args.key_bits)
            if dpa
            else pi_memory(K, args.rows, args.samples, args.rounds, args.key_bits)
        )
        note(mem_rows[-1])
    with tempfile.TemporaryDirectory() as tmp:
        for K in procs:
            print(f"processes, {K} data parties …", file=sys.stderr, flush=True)
            proc_rows.append(
                run_processes(K, args.dim, args.key_bits, Path(tmp))
                if dpa
                else pi_processes(K, args.rows, args.samples, args.rounds, args.key_bits, Path(tmp))
            )
            note(proc_rows[-1])
    if args.json:
        Path(args.json).write_text(json.dumps({"processes": proc_rows, "memory": mem_rows}, indent=1))
    print(
        dpa_report(proc_rows, mem_rows, args.key_bits, args.dim, args.rtt, args.bandwidth)
        if dpa
        else pi_report(mem_rows, proc_rows, args.rows, args.samples, args.rounds, args.key_bits)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
