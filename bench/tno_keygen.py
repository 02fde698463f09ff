"""TNO's dealer-free Paillier key generation, timed on this host for a comparison with smcdp's ceremony.

The reference is ``tno.mpc.protocols.distributed_keygen`` (Veugen, Attema & Spini; PyPI).  It is not a
dependency of smcdp: install it into a venv of its own and run this script with that venv's Python::

    python3 -m venv /tmp/tno-venv && /tmp/tno-venv/bin/pip install tno.mpc.protocols.distributed_keygen
    /tmp/tno-venv/bin/python bench/tno_keygen.py --parties 3,5 --repeats 3

All n parties run in this one process, as ``bench/threshold_keygen.py`` runs smcdp's ceremony (there over
an in-memory network, here over TNO's HTTP pools on loopback, without TLS), so the wall time is the sum of
every party's work in both.  TNO's defaults are kept (prime_threshold 2000, biprimality parameter 40,
Shamir statistical security 40) with the corruption threshold t = ⌊(n − 1)/2⌋, the same t smcdp's bench
uses; TNO needs n ≥ 2t + 1 and n ≥ 3.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time

from tno.mpc.communication import Pool
from tno.mpc.protocols.distributed_keygen import DistributedPaillier

BASE_PORT = 47100


async def _pools(n: int, base: int) -> list[Pool]:
    pools = []
    for i in range(n):
        pool = Pool()
        pool.add_http_server(port=base + i, addr="127.0.0.1")
        for j in range(n):
            if j != i:
                pool.add_http_client(f"local{j}", "127.0.0.1", base + j)
        pools.append(pool)
    return pools


async def ceremony(n: int, bits: int, base: int) -> dict:
    t = (n - 1) // 2
    pools = await _pools(n, base)
    try:
        t0 = time.perf_counter()
        keys = await asyncio.gather(
            *(
                DistributedPaillier.from_security_parameter(pool, t, bits, distributed=False, batch_size=100)
                for pool in pools
            )
        )
        seconds = time.perf_counter() - t0
    finally:
        await asyncio.gather(*(pool.shutdown() for pool in pools))
    modulus = keys[0].public_key.n
    assert all(k.public_key.n == modulus for k in keys), "the parties disagree on the modulus"
    return {"parties": n, "threshold": t, "bits": bits, "seconds": seconds, "modulus_bits": modulus.bit_length()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parties", default="3,5")
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    runs = []
    base = BASE_PORT
    for n in (int(x) for x in args.parties.split(",")):
        for _ in range(args.repeats):
            run = asyncio.run(ceremony(n, args.bits, base))
            base += n
            runs.append(run)
            print(json.dumps(run), flush=True)
        secs = [r["seconds"] for r in runs if r["parties"] == n]
        print(
            f"n = {n}: median {statistics.median(secs):.1f} s over {len(secs)} ({', '.join(f'{s:.1f}' for s in secs)})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
