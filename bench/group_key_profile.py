"""Where a power-iteration session under a group key spends its CPU, against the single-key session: every role in
one process (the in-memory network, dealt key shares), thread CPU of each wrapped step summed over the parties.

    PYTHONPATH=. .venv/bin/python bench/group_key_profile.py                  # DP power method, k = 500
    PYTHONPATH=. .venv/bin/python bench/group_key_profile.py --k 20 --exact   # the exact mode
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from group_key_bench import blocks  # noqa: E402
from thread_cpu import report, reset, timed  # noqa: E402

import smcdp.crypto.threshold as th  # noqa: E402
import smcdp.protocols.power_iteration_threshold as pit  # noqa: E402
from smcdp.crypto.paillier import generate_keypair  # noqa: E402
from smcdp.crypto.threshold import deal  # noqa: E402
from smcdp.protocols.power_iteration import PowerIterationParams  # noqa: E402
from tests.support.pi_group import run  # noqa: E402

STEPS = (
    (pit, "partial_decrypt", "partial decryptions and their proofs"),
    (th, "verify_partial", "partial decryptions' proofs verified"),
    (pit, "encrypt_replayable", "replayable encryptions"),
    (pit, "prove_plaintext_knowledge", "proofs of plaintext knowledge made"),
    (pit, "prove_combination", "trent's combination proofs made (exact)"),
    (pit, "verify_combination", "combination proofs verified (exact)"),
    (th, "_combine", "Lagrange combinations"),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--k", type=int, default=500, help="rows (default 500: the noisy power method, T = 10)")
    ap.add_argument("--samples", type=int, default=100, help="columns per data party")
    ap.add_argument("--exact", action="store_true", help="the exact mode (tol 1e-9) instead of the DP mode")
    ap.add_argument("--key-bits", type=int, default=2048)
    args = ap.parse_args()
    for mod, name, label in STEPS:
        setattr(mod, name, timed(getattr(mod, name), label))
    sk = generate_keypair(args.key_bits, allow_insecure=args.key_bits < 2048)[1]
    _, shares = deal(sk, 3, 1)
    base = dict(n_parties=3, key_bits=args.key_bits, rows=args.k, max_samples=args.samples)
    base.update(tol=1e-9) if args.exact else base.update(epsilon=1.0, delta=1e-6)
    data = blocks(args.k, args.samples)
    for mode in ("single", "group"):
        params = PowerIterationParams(**base, **({"key_group": "lab", "key_threshold": 1} if mode == "group" else {}))
        run(data, params, sk=sk, shares=shares if mode == "group" else None)  # warm-up: every table built
        reset()
        t0, c0 = time.time(), time.process_time()
        _, res = run(data, params, sk=sk, shares=shares if mode == "group" else None)
        if isinstance(res, Exception):
            raise SystemExit(f"the {mode}-key session failed: {res!r}")
        what = "exact" if args.exact else "DP"
        print(
            f"{mode} key, {what}, k = {args.k}, {args.key_bits} bits: wall {time.time() - t0:.2f} s, "
            f"CPU {time.process_time() - c0:.2f} s"
        )
        report(45)


if __name__ == "__main__":
    main()
