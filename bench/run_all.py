"""Run every benchmark in one run and write docs/benchmarks.md.

Every figure is measured here, in this run, next to its baseline (plain phe, plaintext numpy); nothing
is copied from elsewhere.  Benchmarks of protocols that are not part of this build are skipped with a
note.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
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
    return (
        f"{cpu}, {os.cpu_count()} cores, Python {platform.python_version()}, {libs}; "
        f"measured {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC"
    )


def _sections(text: str, level: str) -> tuple[list[str], list[tuple[str, list[str]]]]:
    """(the lines before the first heading of ``level`` ("## " or "### "), [(heading line, its lines)])."""
    pre: list[str] = []
    secs: list[tuple[str, list[str]]] = []
    for line in text.split("\n"):  # not splitlines(): a section's trailing blank line is kept
        if line.startswith(level):
            secs.append((line.strip(), [line]))
        elif secs:
            secs[-1][1].append(line)
        else:
            pre.append(line)
    return pre, secs


def merge_report(existing: str, generated: str) -> str:
    """The report to write over ``existing`` (docs/benchmarks.md): the generated preamble; every existing
    ``## `` section in its place -- replaced by the generated one of the same heading, which keeps the
    existing section's ``### `` subsections that the generated one does not have (the hand-written records:
    profiles, decisions, runs of other commands); generated sections the file did not have, at the end.
    Hand-written text directly under a generated ``## `` heading is replaced: give it a ``### `` of its own."""
    gen_pre, gen_secs = _sections(generated, "## ")
    _, ex_secs = _sections(existing, "## ")
    generated_by_title = dict(gen_secs)
    out = list(gen_pre)
    used: set[str] = set()
    for title, lines in ex_secs:
        if title not in generated_by_title:
            out += lines
            continue
        used.add(title)
        new = generated_by_title[title]
        _, new_subs = _sections("\n".join(new), "### ")
        have = {t for t, _ in new_subs}
        out += new
        for sub_title, sub_lines in _sections("\n".join(lines), "### ")[1]:
            if sub_title not in have:
                out += sub_lines
    for title, lines in gen_secs:
        if title not in used:
            out += lines
    return "\n".join(out).rstrip("\n") + "\n"


def run_module(path: Path, args: list[str]) -> str:
    out = subprocess.run([sys.executable, str(path), *args], capture_output=True, text=True, check=True)
    return out.stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument(
        "--write",
        help="write the markdown report here (default: stdout); an existing file keeps its sections and "
        "subsections this run does not generate (merge_report)",
    )
    ap.add_argument("--quick", action="store_true", help="shorter measurements")
    ap.add_argument(
        "--full-scale",
        action="store_true",
        help="power iteration at scale: add n = 10⁶ per party (0.8, 4 and 20 GB of shards on disk)",
    )
    args = ap.parse_args()

    from smcdp.cli.bench import paillier_benchmark
    from smcdp.progress import task

    with task("benchmarks", total=11, unit="bench") as progress:
        return _run(args, paillier_benchmark, progress)


def _run(args, paillier_benchmark, progress) -> int:
    def stage(what: str) -> None:
        """The next benchmark: the bar on a terminal, a line otherwise (stderr)."""
        if progress.description != "benchmarks":
            progress.advance()
        progress.update(description=f"benchmarks: {what}")

    parts = [
        "# Benchmarks",
        "",
        f"Machine: {machine()}.",
        "",
        "Regenerate with `make bench`. Every ratio compares two measurements taken in the same run on this "
        "machine; absolute rates move with machine load, ratios much less.",
        "",
    ]

    stage("paillier micro-benchmarks")
    secs = 1.0 if args.quick else 3.0
    p = paillier_benchmark(2048, secs)
    stage("paillier micro-benchmarks, pure gmpy2 engine")
    pure = json.loads(
        subprocess.run(
            [
                sys.executable,
                "-m",
                "smcdp",
                "bench",
                "paillier",
                "--key-bits",
                "2048",
                "--seconds",
                str(secs),
                "--json",
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "SMCDP_NATIVE": "0"},
        ).stdout
    )

    def row(label: str, base: str, ours: str, ratio: str, target: str, fmt: str = ".0f") -> str:
        return (
            f"| {label} | {p[base]:{fmt}}/s | {p[ours]:{fmt}}/s | **{p[ratio]:.1f}×** | {pure[ratio]:.1f}× | {target} |"
        )

    parts += [
        "## Paillier micro-benchmarks (2048-bit, one core)",
        "",
        "`smcdp bench paillier --json` prints these numbers as JSON (contract). Each ratio is the median "
        "of nine rounds that alternate the baseline and ours, so that a drift in machine speed between "
        f"phases cancels. Engine: {p['engine']}, Montgomery products: {p.get('montgomery_products', '?')} "
        "(docs/crypto.md); the 'pure' column is the same benchmark with the C "
        "accelerator switched off (`SMCDP_NATIVE=0`), run right after.",
        "",
        "| operation | plain phe | smcdp | ratio | ratio, pure gmpy2 | target (issue 8) |",
        "|---|---|---|---|---|---|",
        row(
            f"encrypt, public key (fixed-base table, w={p['fixed_base_window_bits']})",
            "phe_encrypt_per_s",
            "encrypt_public_per_s",
            "encrypt_public_ratio",
            "≥ 20×",
        ),
        row(
            f"encrypt, own private key (CRT, per-prime tables, w={p['crt_window_bits']})",
            "phe_encrypt_per_s",
            "encrypt_private_per_s",
            "encrypt_private_ratio",
            "≥ 40×",
        ),
        row(
            f"encrypt, own private key, process pool ({p['pool_workers']} workers, all cores)",
            "phe_encrypt_per_s",
            "encrypt_private_pool_per_s",
            "encrypt_private_pool_ratio",
            "—",
        ),
        row(
            f"values decrypted (packing {p['packing_slots']} × {p['packing_slot_bits']}-bit slots)",
            "phe_decrypt_values_per_s",
            "decrypt_packed_values_per_s",
            "decrypt_packed_ratio",
            "≥ 10×",
        ),
        row(
            f"dot product, {p['dot_terms']} ciphertexts × {p['dot_weight_bits']}-bit signed weights",
            "phe_dot_per_s",
            "dot_per_s",
            "dot_ratio",
            "≥ 5×",
            ".2f",
        ),
        "",
        f"One-off table building per key: fixed-base {p['fixed_base_table_seconds']:.2f} s, "
        f"CRT tables {p['crt_tables_seconds']:.2f} s (table budget {p['table_budget_mb']} MB per table, "
        "`SMCDP_TABLE_BUDGET_MB`).",
        "",
        "### What limits encryption (profile, same run)",
        "",
        f"A fixed-base obfuscator h_s^a with a of 1024 bits costs one modular multiplication per table "
        f"window and nothing else: {p['fixed_base_steps_public']} multiplications mod n² for the public path "
        f"and {p['fixed_base_steps_private']} mod p² or q² for the CRT path (12-bit windows). phe's encryption "
        f"is one exponentiation with a 2048-bit exponent mod n², about 2048 squarings and 340 "
        f"multiplications: {p['phe_encrypt_ms']:.2f} ms here. The ratios are therefore counts of "
        "multiplications times the cost of one:",
        "",
        "| one multiplication | mod n² (4096 bits) | mod p² (2048 bits) |",
        "|---|---|---|",
        f"| gmpy2 `a * b % m` (product, then division) | {p['mulmod_n2_us']:.2f} µs | {p['mulmod_p2_us']:.2f} µs |",
        f"| one table step of the {p['engine']} engine (measured: a power / its steps) | "
        f"{p['table_step_n2_us']:.2f} µs | {p['table_step_p2_us']:.2f} µs |",
        f"| one table step, pure gmpy2 engine (its run) | {pure['table_step_n2_us']:.2f} µs | "
        f"{pure['table_step_p2_us']:.2f} µs |",
        "",
        "The pure engine pays a division per step plus the interpreter and two object allocations, and its "
        "10-bit windows (it gains nothing from larger ones) need 103 / 206 steps: hence the pure column. "
        "The accelerator (`smcdp/crypto/_mont.c`) keeps the tables in Montgomery form in C "
        "memory and runs the loop there: GMP's own mpn multiplication followed by Montgomery reduction "
        "(which GMP uses inside `mpz_powm` but does not export), the next entry prefetched while the "
        "current one is multiplied, and the tables on transparent huge pages. The last two matter: the "
        "tables are far larger than the caches and are read at random, and before them a CRT encryption "
        "spent a third of its time waiting for memory (348 µs against 233 µs after, same machine). "
        "Dot products use Bos–Coster for exponents below 2^64 (30–50 % fewer multiplications than "
        "Pippenger for 820 terms), one inversion for all negative weights together instead of one per "
        "term, and no conversion of the bases into Montgomery form (a single correction by R^Σe instead). "
        "What remains is the multiplication itself. On both cores the process pool gives the pool row.",
        "",
    ]

    stage("power iteration")
    pi = run_module(HERE / "power_iteration_bench.py", ["--ks", "200,500"])
    parts += [
        "## Power iteration per round (2048-bit keys, two parties of 100 samples)",
        "",
        "Steady-state round (the first round, which builds each party's encryption tables, is excluded). "
        "'3 processes' is Trent and two parties as separate OS processes over gRPC with mutual TLS on "
        "loopback (the two cores are shared by three processes); '1 process' runs all roles serially in one "
        "process. Plain phe: one unpacked round with phe's operations (both parties encrypt k values, "
        "Trent adds and scales, both decrypt k values). Target (issue 8): k = 500 ≤ 0.5 s per round.",
        "",
        pi,
        "",
    ]

    stage("whole sessions")
    sess = run_module(
        HERE / "session_bench.py", ["--workloads", "pi500,pi30,keyword", "--repeats", "1" if args.quick else "3"]
    )
    parts += [
        "## Whole sessions as users run them: cold and warm party processes (issue 27)",
        "",
        "`bench/session_bench.py`: each demo's session set up as `smcdp demo` does (one OS process per "
        "party, mutual TLS on loopback, 2048-bit keys); the cold session runs on party processes "
        "started just before it (the demo's `seconds`), the warm one on the same processes right after. "
        "Median [min–max]; CPU seconds of all party processes during the session. Before every merge "
        "that touches crypto, compute, net or protocols: `bench/session_guard.py --baseline main` "
        "(exit 1 when a median session is more than 20 % slower than the baseline's, same run).",
        "",
        sess,
        "",
    ]

    stage("power iteration at scale")
    scale = run_module(HERE / "power_iteration_scale_bench.py", ["--full"] if args.full_scale else [])
    parts += [
        "## Power iteration at scale: a data party's round against k and n, local vs Dask (issue 17)",
        "",
        "`bench/power_iteration_scale_bench.py` (`--full` adds n = 10⁶ per party; the table below says "
        "which grid this run measured). Shards are generated on disk by the bench and removed afterwards.",
        "",
        scale,
        "",
    ]

    for name, title, extra in (
        ("keyword_bench.py", "Keyword recognition (seed Table 4.1)", []),
        ("aggregate_bench.py", "DP aggregation", []),
        ("scale_bench.py", "DP aggregation at scale: K up to 256 data parties (issue 28)", []),
        ("scale_bench.py", "Power iteration against the number of data parties (issue 28)", ["power-iteration"]),
        ("checkpoint_bench.py", "The cost of checkpointing (issues 15, 26)", []),
        ("rtt_bench.py", "Sessions over a slow network (issue 26)", []),
        (
            "dp_power_iteration_bench.py",
            "Power iteration, DP modes: utility against central DP PCA (issues 25, 38)",
            [],
        ),
        ("group_key_bench.py", "Group keys: DP power iteration against the single-key mode (issue 36)", []),
        (
            "aggregate_group_bench.py",
            "dp-aggregate under a group key against the single-key shared noise (issue 36)",
            [],
        ),
    ):
        path = HERE / name
        stage(name)
        if not path.exists():
            parts += [f"## {title}", "", f"_`bench/{name}` is not part of this build._", ""]
            continue
        try:
            quick = (
                (["--key-bits", "1024", "--repeats", "1"] if name == "rtt_bench.py" else ["--quick"])
                if args.quick
                else []
            )
            parts += [f"## {title}", "", run_module(path, extra + quick), ""]
        except subprocess.CalledProcessError as exc:
            parts += [f"## {title}", "", f"_failed in this run: {exc.stderr.strip()[-500:]}_", ""]

    progress.advance()
    progress.update(description="benchmarks")
    text = "\n".join(parts) + "\n"
    if args.write:
        target = Path(args.write)
        if target.exists():  # keep the hand-written records (merge_report)
            text = merge_report(target.read_text(), text)
        target.write_text(text)
        print(f"wrote {args.write}", file=sys.stderr)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
