"""Fuzz the C accelerator (smcdp.crypto._mont), and run the fuzzer under valgrind (issue 19).

Two child processes run the harness of tests/support/fuzz_native.py (hypothesis, generate phase
only: arbitrary bytes for bases, moduli, exponents and factors, any window and exponent width;
every result is compared with gmpy2):

1. ``--inputs`` calls in a plain interpreter -- a crash (the child dying on a signal) or a wrong
   value is a finding;
2. ``--valgrind-inputs`` calls under ``valgrind --tool=memcheck`` with ``PYTHONMALLOC=malloc``:
   a finding is any invalid read, write or free anywhere in the process, and any error at all
   whose stack passes through the extension or GMP.  (CPython itself, not built for valgrind,
   reports "uninitialised value" errors in its small-integer cache and import machinery; they are
   counted and listed by kind, and do not involve the extension.  Leak reports are off: the
   interpreter keeps its objects until exit.)
3. ``--asan-inputs`` calls on an AddressSanitizer build of the extension (compiled into a temporary
   directory with ``-fsanitize=address``, loaded in place of the installed one, libasan preloaded,
   ``PYTHONMALLOC=malloc`` so that CPython's small-object allocator does not hide the extension's
   buffers).  valgrind cannot run AVX-512 (under it the CPU reports no IFMA and the engine takes GMP's
   products), so this is the memory check of the IFMA products; every call runs on both products.  A
   finding is any AddressSanitizer report or the child dying.

    python bench/fuzz_native.py [--inputs 100000] [--valgrind-inputs 2000] [--asan-inputs 3000] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent


def child(n: int) -> int:
    sys.path.insert(0, str(REPO))
    from hypothesis import HealthCheck, Phase, given, settings

    asan_so = os.environ.get("SMCDP_FUZZ_ASAN_SO")
    if asan_so:  # the AddressSanitizer build, loaded as the engine
        import importlib.util

        spec = importlib.util.spec_from_file_location("smcdp.crypto._mont", asan_so)
        assert spec is not None and spec.loader is not None
        _mont = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_mont)
    else:
        from smcdp.crypto import _mont
    from tests.support.fuzz_native import native_calls, run_call

    counts = {"ok": 0, "refused": 0}

    @settings(
        max_examples=n, deadline=None, database=None, phases=[Phase.generate], suppress_health_check=list(HealthCheck)
    )
    @given(call=native_calls())
    def one(call):
        counts[run_call(_mont, call)] += 1

    one()
    print(json.dumps(counts), flush=True)
    return 0


def _error_blocks(stderr: str) -> list[str]:
    """valgrind's error reports (one block each, the first line naming the kind); the banner and
    the summary are not errors."""
    blocks, cur = [], []
    for line in stderr.splitlines():
        body = line.split("== ", 1)[-1] if line.startswith("==") else line
        if not body.strip():
            if cur:
                blocks.append("\n".join(cur))
            cur = []
        else:
            cur.append(line)
    if cur:
        blocks.append("\n".join(cur))
    skip = (
        "Memcheck,",
        "Copyright",
        "Using Valgrind",
        "Command:",
        "HEAP SUMMARY",
        "ERROR SUMMARY",
        "For lists of",
        "Use --track-origins",
        "in use at exit",
        "total heap usage",
        "For counts",
    )
    return [b for b in blocks if not any(s in b.splitlines()[0] for s in skip) and re.search(r"\bat 0x|by 0x", b)]


def asan_phase(inputs: int, env: dict) -> dict:
    """Build the extension with AddressSanitizer and run ``inputs`` calls on it (point 3 above)."""
    import sysconfig
    import tempfile

    cc = shutil.which("gcc") or shutil.which("cc")
    if not cc:
        return {"skipped": "no C compiler"}
    libasan = subprocess.run([cc, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    if not libasan or not Path(libasan).exists():
        return {"skipped": "no libasan (apt-get install libasan8 or gcc's)"}
    with tempfile.TemporaryDirectory(prefix="smcdp-asan-") as tmp:
        so = Path(tmp) / ("_mont" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
        build = subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", "-g", "-fsanitize=address", "-fno-omit-frame-pointer", "-std=c11",
             f"-I{sysconfig.get_paths()['include']}", str(REPO / "smcdp/crypto/_mont.c"), "-lgmp", "-o", str(so)],
            capture_output=True, text=True,
        )  # fmt: skip
        if build.returncode:
            return {"skipped": "the AddressSanitizer build failed", "stderr_tail": build.stderr[-1500:]}
        asan_env = dict(
            env, SMCDP_FUZZ_ASAN_SO=str(so), LD_PRELOAD=libasan, PYTHONMALLOC="malloc", ASAN_OPTIONS="detect_leaks=0"
        )
        rc, out, err, secs = run([sys.executable, __file__, "--child", str(inputs)], asan_env)
    reports = re.findall(r"ERROR: AddressSanitizer: [^\n]*", err)
    return {
        "inputs": inputs,
        "returncode": rc,
        "reports": reports[:5],
        "counts": json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else None,
        "seconds": round(secs, 1),
        "stderr_tail": err[-1500:] if rc else "",
    }


def run(cmd: list[str], env: dict) -> tuple[int, str, str, float]:
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    return proc.returncode, proc.stdout, proc.stderr, time.monotonic() - t0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--inputs", type=int, default=100_000)
    ap.add_argument("--valgrind-inputs", type=int, default=2000)
    ap.add_argument("--asan-inputs", type=int, default=3000)
    ap.add_argument("--json")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child is not None:
        return child(args.child)

    env = dict(os.environ, PYTHONPATH=str(REPO), SMCDP_REQUIRE_NATIVE="1")
    summary: dict = {}
    rc, out, err, secs = run([sys.executable, __file__, "--child", str(args.inputs)], env)
    counts = json.loads(out.strip().splitlines()[-1]) if rc == 0 and out.strip() else None
    summary["plain"] = {
        "inputs": args.inputs,
        "returncode": rc,
        "crashed": rc < 0,
        "counts": counts,
        "seconds": round(secs, 1),
        "stderr_tail": err[-1500:] if rc else "",
    }
    valgrind = shutil.which("valgrind")
    if valgrind and args.valgrind_inputs > 0:
        vg_env = dict(env, PYTHONMALLOC="malloc")
        supp = [f"--suppressions={p}" for p in ("/usr/lib/valgrind/python3.supp",) if Path(p).exists()]
        cmd = [
            valgrind,
            "--tool=memcheck",
            "--error-exitcode=99",
            "--leak-check=no",
            "--track-origins=no",
            "--num-callers=40",
            *supp,
            sys.executable,
            __file__,
            "--child",
            str(args.valgrind_inputs),
        ]
        rc, out, err, secs = run(cmd, vg_env)
        m = re.search(r"ERROR SUMMARY: (\d+) errors from (\d+) contexts", err)
        blocks = _error_blocks(err)
        ours = [b for b in blocks if "_mont" in b or "libgmp" in b]
        # glibc's vectorised string functions read whole aligned words past a string's end, which
        # memcheck reports as "Invalid read of size 32" inside them: a known false positive
        memory = [
            b
            for b in blocks
            if re.search(r"Invalid (read|write|free)|Mismatched free|overlap", b)
            and not re.search(r"at 0x[0-9A-F]+: __\w+_(avx2|evex|sse\d?)\w*", b.splitlines()[1])
        ]
        kinds: dict[str, int] = {}
        for b in blocks:
            kind = b.splitlines()[0].split("== ", 1)[-1].strip()
            kinds[kind] = kinds.get(kind, 0) + 1
        summary["valgrind"] = {
            "inputs": args.valgrind_inputs,
            "returncode": rc,
            "errors": int(m.group(1)) if m else None,
            "contexts": int(m.group(2)) if m else None,
            "error_kinds": kinds,
            "contexts_in_extension_or_gmp": len(ours),
            "invalid_accesses_anywhere": len(memory),
            "counts": json.loads(out.strip().splitlines()[-1]) if out.strip() else None,
            "seconds": round(secs, 1),
            "version": subprocess.run([valgrind, "--version"], capture_output=True, text=True).stdout.strip(),
            "findings": (ours + memory)[:5],
        }
    else:
        summary["valgrind"] = {"skipped": "valgrind not installed (apt-get install valgrind)"}
    summary["asan"] = asan_phase(args.asan_inputs, env) if args.asan_inputs > 0 else {"skipped": "--asan-inputs 0"}
    asan = summary["asan"]
    vg = summary["valgrind"]
    summary["passed"] = ("skipped" in asan or (asan["returncode"] == 0 and not asan["reports"])) and (
        summary["plain"]["returncode"] == 0
        and vg.get("counts", {"ok": 1}) is not None
        and vg.get("contexts_in_extension_or_gmp", 0) == 0
        and vg.get("invalid_accesses_anywhere", 0) == 0
    )
    text = json.dumps(summary, indent=2)
    print(text)
    if args.json:
        Path(args.json).write_text(text + "\n")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
