"""Paillier micro-benchmarks against plain phe, measured in the same run.

``smcdp bench paillier [--key-bits BITS] [--json]`` (contract) prints the
rates of our fast paths and of python-paillier on the same key, and their
ratios: ``encrypt_public_ratio``, ``encrypt_private_ratio``,
``decrypt_packed_ratio``, ``dot_ratio``.  Everything runs on one core in this
process; no number is taken from elsewhere.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import secrets
import statistics
import sys
import time
from collections.abc import Callable

from phe import paillier as phe_paillier

from smcdp.cli.argtypes import positive_float
from smcdp.crypto import native
from smcdp.crypto.encoding import Packing
from smcdp.crypto.modexp import multi_exp, table_budget_bytes
from smcdp.crypto.paillier import generate_keypair
from smcdp.crypto.parallel import CryptoPool
from smcdp.crypto.vector import EncryptedVector
from smcdp.progress import Task, task


def _rate(fn: Callable[[], object], min_seconds: float, min_reps: int = 3) -> tuple[float, int, float]:
    """Calls per second of ``fn`` over at least ``min_seconds`` and ``min_reps`` calls."""
    reps = 0
    t0 = time.perf_counter()
    while True:
        fn()
        reps += 1
        el = time.perf_counter() - t0
        if el >= min_seconds and reps >= min_reps:
            return reps / el, reps, el


def _paired(
    baseline: Callable[[], object], ours: Callable[[], object], seconds: float, rounds: int = 9, min_reps: int = 2
) -> tuple[float, float, float]:
    """Rates of ``baseline`` and ``ours`` measured in alternating rounds, and the median of the
    per-round ratios: a shared machine's speed drifts between phases, and a ratio taken within
    one round cancels that drift."""
    base_rates, our_rates, ratios = [], [], []
    for _ in range(rounds):
        b, _, _ = _rate(baseline, seconds / (2 * rounds), min_reps)
        o, _, _ = _rate(ours, seconds / (2 * rounds), min_reps)
        base_rates.append(b)
        our_rates.append(o)
        ratios.append(o / b)
    return statistics.median(base_rates), statistics.median(our_rates), statistics.median(ratios)


STAGES = (
    "key generation",
    "fixed-base and CRT tables",
    "encryption",
    "decryption",
    "dot products",
    "profile",
    "process pool",
)


def paillier_benchmark(
    key_bits: int = 2048, seconds: float = 2.0, dot_terms: int = 820, dot_weight_bits: int = 48, slot_bits: int = 64
) -> dict:
    """Run the micro-benchmarks; returns a JSON-serialisable dict.  Progress (stages, key generation)
    goes to stderr through :mod:`smcdp.progress`."""
    with task(f"bench paillier {key_bits}-bit", total=len(STAGES), unit="stage") as progress:
        return _paillier_benchmark(key_bits, seconds, dot_terms, dot_weight_bits, slot_bits, progress)


def _paillier_benchmark(
    key_bits: int, seconds: float, dot_terms: int, dot_weight_bits: int, slot_bits: int, progress: Task
) -> dict:
    def stage(i: int) -> None:
        progress.update(completed=i, description=f"bench paillier {key_bits}-bit: {STAGES[i]}")

    stage(0)
    pk, sk = generate_keypair(key_bits, allow_insecure=key_bits < 2048, progress=True)
    phe_pk, phe_sk = pk.phe, sk.phe
    m = secrets.randbits(40)

    # ---- encryption
    stage(1)
    t0 = time.perf_counter()
    pk.table()
    public_table_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    sk._crt_tables()
    private_table_s = time.perf_counter() - t0
    stage(2)
    phe_enc, pub_enc, pub_ratio = _paired(lambda: phe_pk.encrypt(m), lambda: pk.raw_encrypt(m), 2 * seconds)
    phe_enc2, priv_enc, priv_ratio = _paired(lambda: phe_pk.encrypt(m), lambda: sk.raw_encrypt(m), 2 * seconds)

    # ---- decryption: plain phe (one value per ciphertext) vs packed CRT decryption
    stage(3)
    c_plain = phe_pk.encrypt(m)
    packing = Packing.for_key(pk, slot_bits)
    vals = [secrets.randbits(slot_bits - 2) - (1 << (slot_bits - 3)) for _ in range(packing.slots)]
    packed = EncryptedVector.encrypt_ints(pk, vals, packing=packing, private_key=sk)
    assert packed.decrypt_ints(sk) == vals
    phe_dec, packed_dec, dec_ratio = _paired(
        lambda: phe_sk.decrypt(c_plain), lambda: packed.decrypt_ints(sk), 2 * seconds
    )
    packed_values_per_s = packed_dec * packing.slots

    # ---- homomorphic dot product: phe's naive loop vs multi-exponentiation
    stage(4)
    cts = [pk.raw_encrypt(secrets.randbits(32)) for _ in range(dot_terms)]
    weights = [secrets.randbits(dot_weight_bits) - (1 << (dot_weight_bits - 1)) for _ in range(dot_terms)]
    phe_cts = [phe_paillier.EncryptedNumber(phe_pk, int(c), 0) for c in cts]

    def phe_dot():
        acc = phe_cts[0] * weights[0]
        for c, w in zip(phe_cts[1:], weights[1:]):
            acc = acc + c * w
        return acc

    def our_dot():
        return multi_exp(cts, weights, pk.nsquare)

    # same result, checked once
    assert sk.raw_decrypt_signed(our_dot()) == phe_sk.decrypt(phe_dot())
    phe_dot_rate, our_dot_rate, dot_ratio = _paired(phe_dot, our_dot, 2 * seconds, min_reps=1)

    stage(5)
    # ---- profile: the cost of one modular multiplication, which bounds the fixed-base paths
    import gmpy2

    x, y = (
        gmpy2.mpz(secrets.randbits(pk.nsquare.bit_length() - 1)),
        gmpy2.mpz(secrets.randbits(pk.nsquare.bit_length() - 1)),
    )
    mul_n2, _, _ = _rate(lambda: x * y % pk.nsquare, seconds / 4, 1000)
    xp, yp = x % sk.psquare, y % sk.psquare
    mul_p2, _, _ = _rate(lambda: xp * yp % sk.psquare, seconds / 4, 1000)
    steps_public = -(-pk.table().exp_bits // pk.table().window)
    tp_table = sk._crt_tables()[0]
    steps_private = 2 * -(-tp_table.exp_bits // tp_table.window)
    # one table step as the engine runs it: a fixed-base power with a random exponent, per window
    it = itertools.cycle([secrets.randbits(pk.obfuscation_bits) for _ in range(64)])
    pow_n2, _, _ = _rate(lambda: pk.table().pow(next(it)), seconds / 4, 20)
    pow_p2, _, _ = _rate(lambda: tp_table.pow(next(it)), seconds / 4, 20)

    # ---- parallel batches: the same CRT encryption on a process pool using every core
    stage(6)

    with CryptoPool(pk, sk) as pool:
        pool.encrypt([1] * pool.workers * 4, use_private=True)  # warm-up: workers build their tables
        batch = [secrets.randbits(40) for _ in range(max(200, int(priv_enc * seconds)))]
        t0 = time.perf_counter()
        pool.encrypt(batch, use_private=True)
        pool_enc = len(batch) / (time.perf_counter() - t0)
        pool_workers = pool.workers
    progress.update(completed=len(STAGES), description=f"bench paillier {key_bits}-bit")

    return {
        "key_bits": key_bits,
        "machine": {
            "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(),
            "cores_used": 1,
            "cpu_count": os.cpu_count(),
        },
        "phe_encrypt_per_s": phe_enc,
        "encrypt_public_per_s": pub_enc,
        "encrypt_private_per_s": priv_enc,
        "encrypt_public_ratio": pub_ratio,
        "encrypt_private_ratio": priv_ratio,
        "engine": native.engine_name(),
        "montgomery_products": native.products_name(),
        "ratio_method": "median over 9 alternating rounds (baseline, ours) of the per-round ratio",
        "mulmod_n2_us": 1e6 / mul_n2,
        "mulmod_p2_us": 1e6 / mul_p2,
        "table_step_n2_us": 1e6 / pow_n2 / steps_public,
        "table_step_p2_us": 1e6 / pow_p2 / (steps_private // 2),
        "fixed_base_steps_public": steps_public,
        "fixed_base_steps_private": steps_private,
        "phe_encrypt_ms": 1e3 / phe_enc,
        "encrypt_private_pool_per_s": pool_enc,
        "encrypt_private_pool_ratio": pool_enc / statistics.mean([phe_enc, phe_enc2]),
        "pool_workers": pool_workers,
        "fixed_base_table_seconds": public_table_s,
        "crt_tables_seconds": private_table_s,
        "fixed_base_window_bits": pk.table().window,
        "crt_window_bits": tp_table.window,
        "table_budget_mb": table_budget_bytes() >> 20,
        "phe_decrypt_values_per_s": phe_dec,
        "decrypt_packed_values_per_s": packed_values_per_s,
        "decrypt_packed_ratio": dec_ratio * packing.slots,
        "packing_slots": packing.slots,
        "packing_slot_bits": slot_bits,
        "dot_terms": dot_terms,
        "dot_weight_bits": dot_weight_bits,
        "phe_dot_per_s": phe_dot_rate,
        "dot_per_s": our_dot_rate,
        "dot_ratio": dot_ratio,
    }


def _cmd_paillier(args: argparse.Namespace) -> int:
    if args.key_bits < 2048:
        print(f"warning: {args.key_bits}-bit keys are insecure; benchmarking only", file=sys.stderr)
    res = paillier_benchmark(args.key_bits, args.seconds)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        for k in ("encrypt_public_ratio", "encrypt_private_ratio", "decrypt_packed_ratio", "dot_ratio"):
            print(f"{k:24s} {res[k]:8.1f}x")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="micro-benchmarks against plain phe, measured in the same run")
    sub = p.add_subparsers(dest="bench_command", metavar="WHAT")
    sub.required = True
    pp = sub.add_parser("paillier", help="encryption, packed decryption and dot products vs plain phe")
    pp.add_argument("--key-bits", type=int, default=2048)
    pp.add_argument("--seconds", type=positive_float, default=2.0, help="minimum time per measurement")
    pp.add_argument("--json", action="store_true", help="print JSON (contract)")
    pp.set_defaults(func=_cmd_paillier)
