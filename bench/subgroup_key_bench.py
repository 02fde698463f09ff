"""A subgroup key against a standard key of the same size, measured in the same run (docs/crypto.md,
"Subgroup keys"): key generation, one decryption, one obfuscator by the owner (CRT) and by a peer
(public table), one re-randomisation.  Rounds alternate the two kinds so that a drift in machine speed
cancels; each figure is the median over the rounds of the mean CPU time per operation (one thread).

    PYTHONPATH=. .venv/bin/python bench/subgroup_key_bench.py [--bits 2048] [--rounds 7] [--json out.json]

Prints a markdown table (standard, subgroup, ratio) and, with ``--json``, the figures as JSON.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import time
from collections.abc import Callable

from smcdp.crypto.paillier import PrivateKey, PublicKey, generate_keypair


def _cpu_per_call(fn: Callable[[], object], calls: int) -> float:
    t = time.process_time()
    for _ in range(calls):
        fn()
    return (time.process_time() - t) / calls


def _keygen(bits: int, subgroup: bool) -> tuple[float, PublicKey, PrivateKey]:
    t = time.process_time()
    pk, sk = generate_keypair(bits, allow_insecure=bits < 2048, subgroup=subgroup)
    return time.process_time() - t, pk, sk


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bits", type=int, default=2048)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=300, help="operations per round and kind (default 300)")
    ap.add_argument("--keys", type=int, default=3, help="key pairs generated per kind (default 3)")
    ap.add_argument("--json", help="also write the figures here")
    a = ap.parse_args(argv)
    kinds = ("standard", "subgroup")
    keygen: dict[str, list[float]] = {k: [] for k in kinds}
    keys: dict[str, tuple[PublicKey, PrivateKey]] = {}
    for _ in range(a.keys):
        for k in kinds:
            secs, pk, sk = _keygen(a.bits, k == "subgroup")
            keygen[k].append(secs)
            keys[k] = (pk, sk)
    ops = ("decrypt", "owner obfuscator (CRT)", "peer obfuscator (public table)", "re-randomise")
    per: dict[str, dict[str, list[float]]] = {k: {o: [] for o in ops} for k in kinds}
    prepared = {}
    for k in kinds:
        pk, sk = keys[k]
        peer = PublicKey.from_json(pk.to_json())  # a peer's copy: its own table (and, standard, its own base)
        sk.prepare(10_000)
        peer.prepare(10_000)
        prepared[k] = (sk, peer, pk.raw_encrypt(123456789))
    for _ in range(a.rounds):
        for k in kinds:
            sk, peer, c = prepared[k]
            calls = {
                "decrypt": functools.partial(sk.raw_decrypt, c),
                "owner obfuscator (CRT)": functools.partial(sk.raw_encrypt, 0),
                "peer obfuscator (public table)": functools.partial(peer.raw_encrypt, 0),
                "re-randomise": functools.partial(peer.rerandomize, c),
            }
            for o, fn in calls.items():
                per[k][o].append(_cpu_per_call(fn, a.calls))
    rows = {o: {k: statistics.median(per[k][o]) * 1e3 for k in kinds} for o in ops}
    rows["key generation (s)"] = {k: statistics.median(keygen[k]) for k in kinds}
    out = {
        "bits": a.bits,
        "subgroup_bits": keys["subgroup"][0].subgroup_bits,
        "decryption_exponent_bits": {
            "standard": int(keys["standard"][1].ep.bit_length()),
            "subgroup": int(keys["subgroup"][1].ep.bit_length()),
        },
        "ms": rows,
    }
    print(
        f"{a.bits}-bit keys, l = {out['subgroup_bits']}; CPU per operation (ms; key generation in s), "
        f"median of {a.rounds} alternating rounds of {a.calls}"
    )
    print()
    print("| operation | standard | subgroup | standard / subgroup |")
    print("|---|---|---|---|")
    for o, v in rows.items():
        print(f"| {o} | {v['standard']:.3f} | {v['subgroup']:.3f} | {v['standard'] / v['subgroup']:.2f}× |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
