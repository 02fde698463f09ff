"""The C engine's two Montgomery products against each other and against gmpy2, in one run (issue 42).

For the operations the protocols spend their time in, at the sizes of a 2048-bit key -- n² (4096 bits) for
ciphertext arithmetic, p² (2048 bits) for a decryption's CRT half -- one thread, median of ``--repeats``:

* keyword's round sum: Π c_i^k_i over 28 ciphertexts with 86-bit weights (``modexp.multi_exp``);
* an emission block: 50 rows × 79 ciphertexts × 45-bit exponents (``modexp.multi_exp_rows``);
* an obfuscator: a fixed-base power with a 1024-bit exponent (``FixedBaseTable``, 8-bit windows);
* a decryption half: c^e mod p² with a 1024-bit (standard key) and a 225-bit (subgroup key) exponent
  (``native.powmod`` against ``gmpy2.powmod``, the baseline of the decryptions);
* a whole decryption's two halves, mod p² and q² (1024-bit exponents), in one call whose products the
  engine interleaves (``native.powmod2``) against two ``gmpy2.powmod`` -- and, after the table, against two
  ``native.powmod`` calls on the IFMA products (what interleaving gains by itself).

Each row runs on GMP's products (``mpn_mul_n`` + REDC) and, where the CPU has AVX-512 IFMA, on the IFMA
products; the ratio column is GMP's time over IFMA's, the last column the baseline (gmpy2) over the engine.

    PYTHONPATH=. .venv/bin/python bench/native_bench.py [--repeats 7]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import gmpy2
from gmpy2 import mpz

from smcdp.crypto import modexp, native


def _timed(fn, repeats: int, inner: int) -> float:
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(inner):
            fn()
        samples.append((time.perf_counter() - t) / inner)
    return statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    if not native.AVAILABLE:
        raise SystemExit(f"the native engine is not built: {native.REASON}")
    from smcdp.crypto import _mont

    rng = random.Random(1)
    n2 = mpz(rng.getrandbits(4096)) | 1 | (mpz(1) << 4095)
    p2 = mpz(rng.getrandbits(2048)) | 1 | (mpz(1) << 2047)
    sums = ([mpz(rng.randrange(n2)) for _ in range(28)], [rng.getrandbits(86) for _ in range(28)])
    block = ([mpz(rng.randrange(n2)) for _ in range(79)], [[rng.getrandbits(45) for _ in range(79)] for _ in range(50)])
    base = mpz(rng.randrange(n2))
    exps = [rng.getrandbits(1024) for _ in range(64)]
    c = mpz(rng.randrange(p2))
    q2 = mpz(rng.getrandbits(2048)) | 1 | (mpz(1) << 2047)
    cq, e_q = mpz(rng.randrange(q2)), mpz(rng.getrandbits(1024))
    e_std, e_sub = mpz(rng.getrandbits(1024)), mpz(rng.getrandbits(225))

    def table_pows() -> None:
        for e in exps:
            table.pow(e)

    rows = {
        "round sum 28 × 86-bit mod n² (ms)": (lambda: modexp.multi_exp(*sums, n2), 20, 1e3, None),
        "emission block 50 × 79 × 45-bit mod n² (ms)": (lambda: modexp.multi_exp_rows(*block, n2), 1, 1e3, None),
        "fixed-base power, 1024-bit exponent mod n² (µs)": (table_pows, 1, 1e6 / len(exps), None),
        "decryption half, 1024-bit exponent mod p² (µs)": (
            lambda: native.powmod(c, e_std, p2),
            20,
            1e6,
            lambda: gmpy2.powmod(c, e_std, p2),
        ),
        "decryption half, 225-bit exponent mod p² (µs)": (
            lambda: native.powmod(c, e_sub, p2),
            50,
            1e6,
            lambda: gmpy2.powmod(c, e_sub, p2),
        ),
        "both decryption halves, 1024-bit exponents mod p², q² (µs)": (
            lambda: native.powmod2(c, e_std, p2, cq, e_q, q2),
            20,
            1e6,
            lambda: (gmpy2.powmod(c, e_std, p2), gmpy2.powmod(cq, e_q, q2)),
        ),
    }
    products = [False, True] if _mont.cpu_ifma() else [False]
    print(
        f"engine: {native.engine_name()}, products: {native.products_name()}; GMP {_mont.GMP_VERSION}; {args.repeats} repeats, medians, one thread\n"
    )
    print("| operation | GMP's products | IFMA products | GMP / IFMA | gmpy2 (baseline) | baseline / engine |")
    print("|---|---|---|---|---|---|")
    before = _mont.ifma()
    try:
        for name, (fn, inner, scale, baseline) in rows.items():
            t = {}
            for flag in products:
                _mont._set_ifma(flag)
                table = modexp.FixedBaseTable(base, n2, 1024, window=8)  # read by table_pows
                t[flag] = _timed(fn, args.repeats, inner)
            best = t[products[-1]]
            ifma = f"{t[True] * scale:.3g}" if True in t else "—"
            ratio = f"{t[False] / t[True]:.2f}×" if True in t else "—"
            base_t = _timed(baseline, args.repeats, inner) if baseline else None
            base_s = f"{base_t * scale:.3g}" if base_t else "—"
            base_r = f"{base_t / best:.2f}×" if base_t else "—"
            print(f"| {name} | {t[False] * scale:.3g} | {ifma} | {ratio} | {base_s} | {base_r} |")
        if _mont.cpu_ifma():
            _mont._set_ifma(True)
            apart = _timed(lambda: (native.powmod(c, e_std, p2), native.powmod(cq, e_q, q2)), args.repeats, 20)
            together = _timed(lambda: native.powmod2(c, e_std, p2, cq, e_q, q2), args.repeats, 20)
            print(
                f"\nboth halves on the IFMA products: two powmod calls {apart * 1e6:.3g} µs, one powmod2 call "
                f"{together * 1e6:.3g} µs (interleaved: {apart / together:.2f}×)"
            )
    finally:
        _mont._set_ifma(before)


if __name__ == "__main__":
    main()
