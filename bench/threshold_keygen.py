"""Dealer-free threshold Paillier (issue 36): key ceremony time, and threshold decryption against phe.

Part 1 -- the key ceremony (:mod:`smcdp.protocols.keygen`) for n parties and threshold t = ⌊(n−1)/2⌋
(t = 1 for n = 2),
run in one process over :class:`~smcdp.net.channel.InMemoryNetwork` (every message serialised as on
the wire).  All parties share this process, so the wall time is the sum of every party's work
(about n times one party's critical path on separate hosts, plus network round trips, which a
ceremony has about 10 of per sieve batch).  The number of candidates is geometric, so the time varies
from run to run: the table gives every run and the median.

Part 2 -- decryption of k ciphertexts under one 2048-bit key, measured in the same run:
plain phe (``PaillierPrivateKey.decrypt``), smcdp's CRT decryption, and the threshold path
(t + 1 partial decryptions with one batch proof each, their verification, and the combination;
the per-ciphertext-proof variant too).  The threshold key is dealt from the same key pair
(:func:`smcdp.crypto.threshold.deal`), so the modulus is the same for all three.

    python bench/threshold_keygen.py                     # n = 2, 3, 5 at 1024 and 2048 bits
    python bench/threshold_keygen.py --bits 1024 --repeats 5 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
if not os.environ.get("PYTHONPATH"):
    sys.path.insert(0, str(HERE.parent))

from phe import paillier as phe_paillier  # noqa: E402

from smcdp.crypto.paillier import generate_keypair  # noqa: E402
from smcdp.crypto.threshold import _combine, combine, deal, decode_signed, partial_decrypt, verify_partial  # noqa: E402
from smcdp.net.channel import InMemoryNetwork  # noqa: E402
from smcdp.protocols.keygen import KeygenParams, party, party_roles  # noqa: E402


def ceremony(n: int, bits: int, root: int | None = None) -> dict:
    """One ceremony; ``root``: every party's randomness root derived from it (party i: 100·root + i), so that two
    trees of the code run the same candidates and make the same key (comparing their costs)."""
    t = max(1, (n - 1) // 2)
    params = KeygenParams(
        parties=n, threshold=t, key_bits=bits, allow_insecure=bits < 2048 or root is not None
    ).validate()
    roles = party_roles(n)
    net = InMemoryNetwork({r: r for r in roles}, timeout=3600)
    t0 = time.perf_counter()
    seeds = {r: None if root is None else 100 * root + i for i, r in enumerate(roles, 1)}
    res = asyncio.run(net.run({r: (lambda ch, r=r: party(ch, params, seed=seeds[r])) for r in roles}))
    wall = time.perf_counter() - t0
    r1 = res["party1"]
    return {
        "parties": n,
        "threshold": t,
        "bits": bits,
        "seconds": wall,
        "candidates": r1.candidates,
        "sieve_batches": r1.sieve_batches,
        "biprimality_tests": r1.biprimality_tests,
        "bytes_per_party": sum(len(d) for (s, _r, _t, _ty, d) in net.transcript if s == "party1"),
    }


def decryption(bits: int, k: int, n: int) -> dict:
    t = (n - 1) // 2
    pk, sk = generate_keypair(bits, allow_insecure=bits < 2048)
    pub, shares = deal(sk, n, t)
    values = list(range(-k // 2, k - k // 2))
    cts = [pk.raw_encrypt(v) for v in values]
    ctx = b"bench/threshold"
    out: dict = {"bits": bits, "ciphertexts": k, "parties": n, "threshold": t}

    t0 = time.perf_counter()
    plain = [sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c))) for c in cts]
    out["phe_seconds"] = time.perf_counter() - t0
    assert plain == values
    t0 = time.perf_counter()
    assert [sk.raw_decrypt_signed(c) for c in cts] == values
    out["crt_seconds"] = time.perf_counter() - t0

    for batch in (True, False):
        key = "batch" if batch else "each"
        t0 = time.perf_counter()
        partials = [partial_decrypt(s, cts, ctx, batch=batch) for s in shares[: t + 1]]
        out[f"{key}_partial_seconds_per_party"] = (time.perf_counter() - t0) / (t + 1)
        t0 = time.perf_counter()
        for p in partials:
            verify_partial(pub, cts, p, ctx)
        out[f"{key}_verify_seconds"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        combined = _combine(pub, len(cts), partials)  # the Lagrange combination alone (verified above)
        out[f"{key}_combine_seconds"] = time.perf_counter() - t0
        assert [decode_signed(pk, m) for m in combined] == values
        assert combine(pub, cts, partials, ctx) == values  # the public entry point: verify, then combine
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bits", default="1024,2048", help="key sizes of the ceremony (comma separated)")
    ap.add_argument("--parties", default="2,3,5", help="numbers of parties (comma separated; n >= 2)")
    ap.add_argument("--repeats", type=int, default=3, help="ceremonies per (n, bits)")
    ap.add_argument("--ciphertexts", type=int, default=200, help="k for the decryption comparison")
    ap.add_argument("--decrypt-bits", type=int, default=2048)
    ap.add_argument(
        "--root",
        type=int,
        help="fixed randomness roots (repeat i uses ROOT + i): the same candidates and key in any tree of the code",
    )
    ap.add_argument("--no-decryption", action="store_true", help="the key ceremonies only")
    ap.add_argument("--json", action="store_true", help="print the measurements as JSON instead of tables")
    ap.add_argument("--from-json", metavar="FILE", help="render the tables of an earlier --json run")
    args = ap.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        render(saved["keygen"], saved["decryption"])
        return
    runs = []
    for bits in (int(b) for b in args.bits.split(",")):
        for n in (int(x) for x in args.parties.split(",")):
            for i in range(args.repeats):
                r = ceremony(n, bits, None if args.root is None else args.root + i)
                runs.append(r)
                print(
                    f"keygen n={n} t={r['threshold']} {bits} bits: {r['seconds']:.1f} s, "
                    f"{r['candidates']} candidate moduli, {r['biprimality_tests']} biprimality tests, "
                    f"{r['bytes_per_party'] / 1e6:.1f} MB sent by party1",
                    file=sys.stderr,
                    flush=True,
                )
    if args.no_decryption:
        return
    dec = decryption(args.decrypt_bits, args.ciphertexts, 3)
    if args.json:
        print(json.dumps({"keygen": runs, "decryption": dec}, indent=2))
        return
    render(runs, dec)


def render(runs: list[dict], dec: dict) -> None:
    """The markdown tables of docs/benchmarks.md."""
    print("| n | t | bits | runs | median s | seconds of each run | candidates (median) | MB sent by party1 (median) |")
    print("|---|---|---|---|---|---|---|---|")
    groups: dict[tuple[int, int], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["parties"], r["bits"]), []).append(r)
    for (n, bits), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        secs = [r["seconds"] for r in rs]
        print(
            f"| {n} | {rs[0]['threshold']} | {bits} | {len(rs)} | {statistics.median(secs):.1f} | "
            f"{', '.join(f'{s:.1f}' for s in secs)} | {statistics.median(r['candidates'] for r in rs):.0f} | "
            f"{statistics.median(r['bytes_per_party'] for r in rs) / 1e6:.1f} |"
        )
    k = dec["ciphertexts"]
    print()
    print(f"Decryption of {k} ciphertexts, {dec['bits']}-bit key, n = 3, t = 1 (ms per ciphertext):")
    print()
    print("| path | ms / ciphertext | × phe |")
    print("|---|---|---|")
    phe_ms = dec["phe_seconds"] / k * 1e3
    rows = [
        ("phe decrypt", dec["phe_seconds"]),
        ("smcdp CRT decrypt", dec["crt_seconds"]),
        ("threshold: one party's partial decryption + batch proof", dec["batch_partial_seconds_per_party"]),
        ("threshold: verify t + 1 batch proofs", dec["batch_verify_seconds"]),
        ("threshold: combine t + 1 partials", dec["batch_combine_seconds"]),
        ("threshold: one party's partial decryption + per-ciphertext proofs", dec["each_partial_seconds_per_party"]),
        ("threshold: verify t + 1 × k per-ciphertext proofs", dec["each_verify_seconds"]),
    ]
    for name, sec in rows:
        ms = sec / k * 1e3
        print(f"| {name} | {ms:.2f} | {ms / phe_ms:.1f} |")


if __name__ == "__main__":
    main()
