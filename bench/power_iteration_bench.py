"""Power iteration per round at 2048 bits: k = 200 and 500, two parties of 100 samples each.

Measured in one run, side by side:
* smcdp's protocol in one process (InMemoryNetwork: Trent and both parties share one core, so this is a
  pessimistic serial figure): the median of Trent's per-round wall times after the first round (which
  builds the parties' encryption tables); bytes per round from the difference of a 6-round and a 1-round run;
* the same protocol across three OS processes over gRPC with mutual TLS on loopback (LocalCluster);
* plain numpy power iteration (one matrix-vector round trip);
* one round done with plain phe operations: each party encrypts its k contributions and Trent's scaled
  sum is decrypted by each party (unpacked, phe's default obfuscation): the cost without our fast paths.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from smcdp.net.channel import InMemoryNetwork
from smcdp.protocols.power_iteration import PowerIterationParams, data_party, trent
from smcdp.runtime.local import LocalCluster


def data(k, n=100, seed=0):
    rng = np.random.default_rng(seed)
    M = rng.normal(size=(k, 2 * n)) + 3 * np.outer(rng.normal(size=k), rng.normal(size=2 * n))
    return [M[:, :n], M[:, n:]]


def inmemory_rounds(blocks, key_bits, rounds):
    """Steady-state seconds per round (median over rounds 2..) and bytes per round, all roles in one process."""
    params = PowerIterationParams(n_parties=2, key_bits=key_bits, p=1.0, tol=1e-15, max_iterations=rounds)
    net = InMemoryNetwork({"trent": "trent", "party1": "alice", "party2": "bob"})
    res = asyncio.run(
        net.run(
            {
                "trent": lambda ch: trent(ch, params, allow_insecure_keys=True),
                "party1": lambda ch: data_party(ch, blocks[0], params, allow_insecure_keys=True),
                "party2": lambda ch: data_party(ch, blocks[1], params, allow_insecure_keys=True),
            }
        )
    )
    sent = sum(r.stats["bytes_sent"] for r in res.values())
    return float(np.median(res["trent"].round_seconds[1:])), sent


def grpc_rounds(blocks, key_bits, rounds):
    with tempfile.TemporaryDirectory() as d:
        paths = []
        for i, b in enumerate(blocks):
            p = Path(d) / f"p{i}.npy"
            np.save(p, b)
            paths.append(p)
        parties = {
            "trent": {},
            "alice": {"power-iteration": {"data": paths[0]}},
            "bob": {"power-iteration": {"data": paths[1]}},
        }
        roles = {"trent": "trent", "party1": "alice", "party2": "bob"}
        with LocalCluster(parties, allow_insecure_keys=key_bits < 2048, open_policy=True) as c:
            recs = c.run(
                "power-iteration",
                roles,
                {"n_parties": 2, "key_bits": key_bits, "p": 1.0, "tol": 1e-15, "max_iterations": rounds},
                initiator="trent",
            )
            assert all(x["state"] == "succeeded" for x in recs.values()), recs
    # round 0 includes each party's one-off table building; the median of the rest is the steady state
    return float(np.median(recs["trent"]["result"]["round_seconds"][1:]))


def phe_round(blocks, key_bits):
    from phe import paillier

    pub, priv = paillier.generate_paillier_keypair(n_length=key_bits)
    x = [np.ones(b.shape[1]) / np.sqrt(b.shape[1]) for b in blocks]
    t0 = time.perf_counter()
    encs = [[pub.encrypt(float(v)) for v in b @ xi] for b, xi in zip(blocks, x)]  # parties encrypt
    summed = [a + b for a, b in zip(*encs)]  # Trent adds …
    scaled = [c * 12345 for c in summed]  # … and scales
    for _ in blocks:  # each party decrypts
        [priv.decrypt(c) for c in scaled]
    return time.perf_counter() - t0


def numpy_round(blocks):
    M = np.concatenate(blocks, axis=1)
    x = np.ones(M.shape[1])
    t0 = time.perf_counter()
    reps = 2000
    for _ in range(reps):
        y = M.T @ (M @ x)
        x = y / np.linalg.norm(y)
    return (time.perf_counter() - t0) / reps


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--ks", default="200,500")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--no-phe", action="store_true", help="skip the plain-phe round (slow)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    rows = []
    for k in [int(v) for v in args.ks.split(",")]:
        blocks = data(k)
        _, b1 = inmemory_rounds(blocks, args.key_bits, 1)
        per_mem, br = inmemory_rounds(blocks, args.key_bits, args.rounds)
        bytes_round = (br - b1) / (args.rounds - 1)
        per_grpc = grpc_rounds(blocks, args.key_bits, args.rounds)
        phe_t = None if args.no_phe else phe_round(blocks, args.key_bits)
        np_t = numpy_round(blocks)
        rows.append(
            {
                "k": k,
                "n_per_party": 100,
                "key_bits": args.key_bits,
                "seconds_per_round_inmemory": per_mem,
                "seconds_per_round_grpc": per_grpc,
                "bytes_per_round": bytes_round,
                "phe_seconds_per_round": phe_t,
                "numpy_seconds_per_round": np_t,
                "speedup_vs_phe": None if phe_t is None else phe_t / per_grpc,
                "slowdown_vs_numpy": per_grpc / np_t,
            }
        )
        print(
            f"k={k}: {per_grpc:.3f} s/round over gRPC ({per_mem:.3f} in memory), {bytes_round / 1024:.1f} KiB/round, "
            f"phe {phe_t if phe_t is None else round(phe_t, 2)} s, numpy {np_t * 1e6:.1f} µs",
            file=sys.stderr,
        )
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        print(markdown(rows))
    return 0


def markdown(rows) -> str:
    out = [
        "| k | parties × samples | key | s/round (3 processes, gRPC+mTLS) | s/round (1 process, serial) | bytes/round "
        "| plain phe s/round | ratio phe / smcdp | numpy s/round | smcdp / numpy |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        phe = "—" if r["phe_seconds_per_round"] is None else f"{r['phe_seconds_per_round']:.2f}"
        ratio = "—" if r["speedup_vs_phe"] is None else f"{r['speedup_vs_phe']:.0f}×"
        out.append(
            f"| {r['k']} | 2 × {r['n_per_party']} | {r['key_bits']} | {r['seconds_per_round_grpc']:.3f} | "
            f"{r['seconds_per_round_inmemory']:.3f} | {r['bytes_per_round']:.0f} | {phe} | {ratio} | "
            f"{r['numpy_seconds_per_round'] * 1e6:.1f} µs | {r['slowdown_vs_numpy']:.0f}× |"
        )
    return "\n".join(out)


if __name__ == "__main__":
    sys.exit(main())
