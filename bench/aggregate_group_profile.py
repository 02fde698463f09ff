"""Where a dp-aggregate session under a group key spends its CPU: every role in one process (the in-memory
network, dealt key shares), thread CPU of each step summed over the parties.

    PYTHONPATH=. .venv/bin/python bench/aggregate_group_profile.py --parties 8 [--key-bits 2048]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from thread_cpu import report, timed

import smcdp.protocols.dp_aggregate_threshold as dt
import smcdp.protocols.power_iteration_threshold as pit
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.threshold import deal
from smcdp.protocols.power_iteration_threshold import ProofKind
from tests.unit.protocols.test_dp_aggregate_threshold import params_for, run


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--parties", type=int, default=8)
    ap.add_argument("--threshold", type=int, default=1)
    ap.add_argument("--key-bits", type=int, default=2048)
    args = ap.parse_args()
    for mod, name, label in (
        (dt, "_blind", "blind counts and prove it"),
        (dt, "verify_scalings", "verify every scaling proof (batched)"),
        (pit, "partial_decrypt", "partial decryptions"),
        (pit, "combine", "verify partials and combine (release)"),
        (pit, "combine_assigned", "verify partials and combine (split)"),
        (pit, "encrypt_replayable", "replayable encryptions"),
    ):
        setattr(mod, name, timed(getattr(mod, name), label))
    b = dt.BITS
    assert b.verify_many is not None
    dt.BITS = ProofKind(
        b.claim,
        b.size,
        timed(b.prove, "prove bits"),
        timed(b.verify, "verify bits one by one"),
        timed(b.verify_many, "verify every party's bits (batched)"),
    )
    sk = generate_keypair(args.key_bits, allow_insecure=args.key_bits < 2048)[1]
    K = args.parties
    p = params_for(K, args.threshold, d=10, key_bits=args.key_bits, size_levels=33, levels_per_octave=4)
    _, shares = deal(sk, K, args.threshold)
    t0, c0 = time.time(), time.process_time()
    run(p, [np.zeros(10)] * K, [0.01 * (j + 1) for j in range(K)], shares)
    print(f"K = {K}, {args.key_bits} bits: wall {time.time() - t0:.2f} s, CPU {time.process_time() - c0:.2f} s")
    report()


if __name__ == "__main__":
    main()
