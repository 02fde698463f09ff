"""Power iteration at scale (issue 17): a data party's per-round cost against k and n, local vs Dask.

For every cell (k, n per party) the bench writes the party's matrix as float32 ``.npy`` shards in a
temporary folder (removed afterwards) and measures, on the same data and key (2048-bit), the compute of
one protocol round of that party -- exactly the engine calls the protocol makes per round:

    encrypt its contribution (⌈k·b/17⌉ packed ciphertexts at 2048 bits), decrypt the block from Trent (as many),
    one pass over its blocks (Z = A AᵀQ, H = (AᵀQ)ᵀ(AᵀQ)), encrypt its Gram, decrypt the blinded Gram

on three engines: ``local`` (the default: block threads + a crypto process pool, 2 workers), and
``dask-1`` / ``dask-2`` (a LocalCluster with 1 or 2 single-threaded TLS workers).  Baselines measured in
the same run: the local engine (the ratios), and a plaintext round with the matrix in memory (numpy,
A(Aᵀq)) where it fits.  The pass results of the three engines are compared bit for bit.

Bytes per round come from the real protocol in memory (Trent + 2 parties, 2048-bit keys): the
difference of a 4-round and a 2-round run, halved; they depend on k and b, not on n or the engine.

The 10-machine paragraph is a **model**: per-task scheduler cost, hop latency and per-value compute
measured here, combined as in the design note (docs/benchmarks.md states the formula).

    python bench/power_iteration_scale_bench.py            # k ∈ {200, 1000, 5000} × n ∈ {10⁴, 10⁵}
    python bench/power_iteration_scale_bench.py --full     # … and n = 10⁶ (0.8, 4 and 20 GB on disk)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from smcdp.compute import ComputeConfig, LocalEngine, make_engine, open_matrix  # noqa: E402
from smcdp.crypto.paillier import generate_keypair  # noqa: E402
from smcdp.net.channel import InMemoryNetwork  # noqa: E402
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent  # noqa: E402

SHARD_BYTES = 128 << 20


def write_shards(folder: Path, k: int, n: int, seed: int = 0) -> int:
    folder.mkdir(parents=True)
    cols = max(1, SHARD_BYTES // (4 * k))
    rng = np.random.default_rng(seed)
    for i, c0 in enumerate(range(0, n, cols)):
        np.save(folder / f"part-{i:05d}.npy", rng.standard_normal((k, min(cols, n - c0)), dtype=np.float32))
    return 4 * k * n


async def party_round(cs, k: int, b: int, plain_contrib, plain_gram, cts_block, cts_gram, Q):
    """The engine work of one protocol round of one data party; returns (seconds, pass seconds, pass result)."""
    t0 = time.perf_counter()
    await cs.encrypt(plain_contrib)
    await cs.decrypt(cts_block)
    t1 = time.perf_counter()
    out = await cs.gram_pass(Q)
    t2 = time.perf_counter()
    await cs.encrypt(plain_gram)
    await cs.decrypt(cts_gram)
    t3 = time.perf_counter()
    return t3 - t0, t2 - t1, (t1 - t0) + (t3 - t2), out


def slots_per_ciphertext(pk) -> tuple[int, int]:
    """(contribution, Gram) values per ciphertext of the exact mode under ``pk`` (two parties)."""
    params = PowerIterationParams(n_parties=2, key_bits=pk.bits)
    return params.packing(pk).slots, params.gram_packing(pk).slots


def measure_cell(engines, src, sk, k: int, b: int, reps: int) -> dict:
    pk = sk.public_key
    slots, gslots = slots_per_ciphertext(pk)
    m, g = math.ceil(k * b / slots), math.ceil(b * (b + 1) / 2 / gslots)
    rng = np.random.default_rng(1)
    plain = [int(v) << 1800 for v in rng.integers(1, 2**60, size=m)]
    gplain = [int(v) << 1800 for v in rng.integers(1, 2**60, size=g)]
    cts = [int(pk.raw_encrypt(v)) for v in plain]
    gcts = [int(pk.raw_encrypt(v)) for v in gplain]
    Q = np.linalg.qr(rng.normal(size=(k, b)))[0]
    row = {"ciphertexts": m + g}
    results = {}
    for name, eng in engines.items():

        async def go(eng=eng, name=name):
            async with eng.session(src, sk, label=f"bench-{name}") as cs:
                await party_round(cs, k, b, plain, gplain, cts, gcts, Q)  # warm-up: tables, pools
                runs = [await party_round(cs, k, b, plain, gplain, cts, gcts, Q) for _ in range(reps)]
                return runs, cs.tasks

        runs, tasks = asyncio.run(go())
        row[f"{name}_round_s"] = float(np.median([r[0] for r in runs]))
        row[f"{name}_pass_s"] = float(np.median([r[1] for r in runs]))
        row[f"{name}_crypto_s"] = float(np.median([r[2] for r in runs]))
        row[f"{name}_tasks_per_round"] = tasks // (reps + 1)
        results[name] = runs[-1][3]
    ref = results["local"]
    row["identical"] = all(np.array_equal(r[0], ref[0]) and np.array_equal(r[1], ref[1]) for r in results.values())
    if 4 * k * src.n <= 1 << 30:  # the plaintext baseline: matrix in memory, one thread
        A = np.concatenate([np.load(f) for f in src.files], axis=1).astype(np.float64)
        q = Q[:, 0].copy()
        t0 = time.perf_counter()
        for _ in range(reps):
            A @ (A.T @ q)
        row["numpy_round_s"] = (time.perf_counter() - t0) / reps
        del A
    return row


def protocol_bytes(k: int, b: int, sk) -> float:
    """Bytes per round, all parties both directions, from the protocol in memory (2048-bit)."""
    rng = np.random.default_rng(2)
    blocks = [rng.normal(size=(k, 30)), rng.normal(size=(k, 30))]

    def total(rounds):
        params = PowerIterationParams(n_parties=2, key_bits=2048, p=1.0, tol=1e-15, max_iterations=rounds, components=b)
        net = InMemoryNetwork({"trent": "trent", "party1": "a", "party2": "b"}, timeout=3600)
        res = asyncio.run(
            net.run(
                {
                    "trent": lambda ch: trent(ch, params),
                    "party1": lambda ch: data_party(ch, blocks[0], params, private_key=sk, engine=LocalEngine(2)),
                    "party2": lambda ch: data_party(ch, blocks[1], params, engine=LocalEngine(2)),
                }
            )
        )
        return sum(r.stats["bytes_sent"] for r in res.values())

    return (total(4) - total(2)) / 2


def task_costs(engine) -> dict:
    """Scheduler cost per task (200 trivial tasks) and the round-trip of one task, on ``engine``."""
    client = engine.client
    futs = client.map(abs, range(-50, 0), pure=False)
    client.gather(futs)
    t0 = time.perf_counter()
    futs = client.map(abs, range(-200, 0), pure=False)
    client.gather(futs)
    tau = (time.perf_counter() - t0) / 200
    hops = []
    for i in range(10):
        t0 = time.perf_counter()
        client.submit(abs, -i, pure=False).result()
        hops.append(time.perf_counter() - t0)
    return {"tau_s": tau, "hop_s": float(np.median(hops))}


def fit(xs, ys):
    """Least squares y = a + s·x; returns (a, s)."""
    X = np.column_stack([np.ones(len(xs)), np.asarray(xs, dtype=float)])
    a, s = np.linalg.lstsq(X, np.asarray(ys, dtype=float), rcond=None)[0]
    return float(a), float(s)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--full", action="store_true", help="add n = 10⁶ per party (0.8, 4 and 20 GB of shards)")
    ap.add_argument("--ks", default="200,1000,5000")
    ap.add_argument("--ns", default=None, help="override the n grid (comma-separated)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where to write the shards (default: a temporary folder)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    ks = [int(v) for v in args.ks.split(",")]
    ns = [int(v) for v in args.ns.split(",")] if args.ns else [10_000, 100_000] + ([1_000_000] if args.full else [])
    load = os.getloadavg()
    _, sk = generate_keypair(2048)
    engines = {
        "local": LocalEngine(2),
        "dask-1": make_engine(ComputeConfig(engine="dask", workers=1, memory_limit="3GiB")),
        "dask-2": make_engine(ComputeConfig(engine="dask", workers=2, memory_limit="3GiB")),
    }
    rows = []
    root = Path(tempfile.mkdtemp(prefix="smcdp-scale-", dir=args.dir))
    try:
        for k in ks:
            for n in ns:
                folder = root / f"k{k}-n{n}"
                t0 = time.perf_counter()
                nbytes = write_shards(folder, k, n)
                src = open_matrix(folder)
                print(
                    f"k={k} n={n}: {nbytes / 1e9:.2f} GB in {len(src.files)} shards, {len(src.blocks)} blocks "
                    f"(written in {time.perf_counter() - t0:.0f} s) …",
                    file=sys.stderr,
                )
                row = {
                    "k": k,
                    "n": n,
                    "data_bytes": nbytes,
                    "blocks": len(src.blocks),
                    **measure_cell(engines, src, sk, k, 1, args.reps),
                }
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
                shutil.rmtree(folder)
        asyncio.run(engines["dask-2"].start())
        costs = task_costs(engines["dask-2"])
        bytes_rows = {(k, b): protocol_bytes(k, b, sk) for k in ks for b in (1, 3)}
    finally:
        shutil.rmtree(root, ignore_errors=True)
        for eng in engines.values():
            asyncio.run(eng.aclose())
    out = {
        "rows": rows,
        "task_costs": costs,
        "bytes": {f"{k},{b}": v for (k, b), v in bytes_rows.items()},
        "slots": slots_per_ciphertext(sk.public_key),
        "load_before": load,
        "load_after": os.getloadavg(),
    }
    print(json.dumps(out, indent=2) if args.json else markdown(out))
    return 0


def markdown(out) -> str:
    rows, costs = out["rows"], out["task_costs"]
    names = ("local", "dask-1", "dask-2")
    lines = [
        f"Load average on the 2 shared cores: {out['load_before'][0]:.1f} before, "
        f"{out['load_after'][0]:.1f} after (1-minute).",
        "",
        "**Per round of one data party** (b = 1, 2048-bit key, float32 shards of 128 MB; median of the "
        "rounds after a warm-up; seconds). 'round' = the party's engine work per round (encrypt its "
        "contribution, decrypt the block, one pass, encrypt its Gram, decrypt the blinded Gram); "
        "ratios against the local engine in the same run; numpy = A(Aᵀq) with the matrix in memory "
        "(no crypto), where it fits in 1 GB.",
        "",
        "| k | n per party | data | blocks | local round s (pass + crypto) | dask-1 round s | dask-2 round s "
        "| dask-1 / local | dask-2 / local | Dask tasks per round | numpy round s | identical |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        np_s = f"{r['numpy_round_s']:.3f}" if "numpy_round_s" in r else "—"
        lines.append(
            f"| {r['k']} | {r['n']:,} | {r['data_bytes'] / 1e9:.2f} GB | {r['blocks']} | "
            f"{r['local_round_s']:.3f} ({r['local_pass_s']:.3f} + {r['local_crypto_s']:.3f}) | "
            f"{r['dask-1_round_s']:.3f} | {r['dask-2_round_s']:.3f} | "
            f"{r['dask-1_round_s'] / r['local_round_s']:.2f}× | {r['dask-2_round_s'] / r['local_round_s']:.2f}× | "
            f"{r['dask-2_tasks_per_round']} | {np_s} | {'yes' if r['identical'] else 'NO'} |"
        )
    ks = sorted({r["k"] for r in rows})
    lines += [
        "",
        "**Protocol bytes per round** (all parties, both directions, Trent + 2 parties, measured "
        "in memory; independent of n and of the engine):",
        "",
        "| k | b = 1 | b = 3 |",
        "|---|---|---|",
    ]
    for k in ks:
        lines.append(f"| {k} | {out['bytes'][f'{k},1'] / 1024:.1f} KiB | {out['bytes'][f'{k},3'] / 1024:.1f} KiB |")
    # fits
    fits = {}
    for name in names:
        a, s = fit([r["k"] * r["n"] for r in rows], [r[f"{name}_pass_s"] for r in rows])
        c0, c1 = fit([r["ciphertexts"] for r in rows], [r[f"{name}_crypto_s"] for r in rows])
        big = [r for r in rows if r["k"] * r["n"] >= 1e8] or rows
        ll = (
            np.polyfit(np.log([r["k"] * r["n"] for r in big]), np.log([r[f"{name}_pass_s"] for r in big]), 1)[0]
            if len(big) >= 2
            else float("nan")
        )
        fits[name] = {
            "pass_ns_per_value": s * 1e9,
            "pass_fixed_s": a,
            "crypto_ms_per_ct": c1 * 1e3,
            "crypto_fixed_ms": c0 * 1e3,
            "loglog": ll,
        }
    lines += [
        "",
        "**Fitted slopes** (least squares over the cells above):",
        "",
        "| | local | dask-1 | dask-2 |",
        "|---|---|---|---|",
        "| pass: ns per matrix value | " + " | ".join(f"{fits[n]['pass_ns_per_value']:.2f}" for n in names) + " |",
        "| pass: fixed s per round | " + " | ".join(f"{fits[n]['pass_fixed_s']:.3f}" for n in names) + " |",
        "| log-log slope of pass time vs k·n (cells ≥ 10⁸ values, or all) | "
        + " | ".join(f"{fits[n]['loglog']:.2f}" for n in names)
        + " |",
        "| crypto: ms per ciphertext (one encryption + one decryption) | "
        + " | ".join(f"{fits[n]['crypto_ms_per_ct']:.2f}" for n in names)
        + " |",
        "| crypto: fixed ms per round | " + " | ".join(f"{fits[n]['crypto_fixed_ms']:.1f}" for n in names) + " |",
    ]
    # the 10-machine model
    tau, hop = costs["tau_s"], costs["hop_s"]
    t_val = fits["dask-1"]["pass_ns_per_value"] * 1e-9
    t_ct = fits["dask-1"]["crypto_ms_per_ct"] * 1e-3
    W = 160

    def model(k, n, block_bytes, b=1):
        values = k * n
        B = max(1, math.ceil(values * 4 / block_bytes))
        slots, gslots = out["slots"]
        m = math.ceil(k * b / slots) + math.ceil(b * (b + 1) / 2 / gslots)
        sched = B * tau
        compute = math.ceil(B / W) * (values / B) * t_val * (0.5 + 0.5 * b)
        return max(sched, compute) + 4 * hop + m * t_ct / W, B

    here = next((r for r in rows if r["k"] == 5000 and r["n"] == 1_000_000), None)
    m128, B128 = model(5000, 1_000_000, 128 << 20)
    m16, B16 = model(5000, 1_000_000, 16 << 20)
    m7, B7 = model(5000, 10_000_000, 128 << 20)
    m7b, B7b = model(5000, 10_000_000, 512 << 20)
    lines += [
        "",
        "**What 10 machines would do — a model, not a measurement.** Measured here: the scheduler "
        f"handles a task in τ = {tau * 1e3:.1f} ms, a task's round trip is {hop * 1e3:.0f} ms, a worker "
        f"computes a block at {t_val * 1e9:.2f} ns per value (dask-1 slope), and a ciphertext costs "
        f"{t_ct * 1e3:.2f} ms to encrypt and decrypt. Model of one round with W cores and B blocks: "
        "max(B·τ, ⌈B/W⌉·t_block) + 4·hop + ciphertexts·t_ct/W (scheduler and compute overlap; "
        f"t_block = values per block × {t_val * 1e9:.2f} ns × (0.5 + 0.5·b)). For 10 machines × 16 "
        "cores (W = 160) and k = 5 000, n = 10⁶ per party (20 GB float32"
        + (f", {here['local_round_s']:.1f} s per round on this box with the local engine" if here else "")
        + f"): ≈ {m128:.2f} s per round with 128 MB blocks (B = {B128}), but ≈ {m16:.2f} s with 16 MB "
        f"blocks (B = {B16}), where the scheduler's per-task cost dominates. For n = 10⁷ per party "
        f"(200 GB): ≈ {m7:.2f} s with 128 MB blocks (B = {B7}) and ≈ {m7b:.2f} s with 512 MB blocks "
        f"(B = {B7b}). Blocks must grow with the cluster (roughly 4W ≤ B ≤ 500); crypto parallelises "
        "over the cores and protocol bytes do not change. τ was measured with the scheduler sharing two "
        "loaded cores; a dedicated scheduler host is faster, which favours smaller blocks. Re-measure "
        "on the real cluster before sizing one.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
