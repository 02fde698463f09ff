"""One fuzz harness for the C accelerator (smcdp.crypto._mont), used by the test suite (a short
run) and by bench/fuzz_native.py (the long run, also under valgrind).

Inputs are arbitrary: byte strings of any length for bases, moduli, exponents and factors, any
window and exponent width.  Allowed outcomes: a result equal to gmpy2's, or ValueError /
TypeError / OverflowError / MemoryError.  Anything else -- another exception, a wrong value, or
the process dying -- is a finding.  Where the CPU has AVX-512 IFMA every call runs twice, on GMP's
Montgomery products and on the IFMA ones.
"""

from __future__ import annotations

import gmpy2
from hypothesis import strategies as st

ALLOWED = (ValueError, TypeError, OverflowError, MemoryError)


def _int(b: bytes) -> int:
    return int.from_bytes(b, "little")


def moduli(max_bytes: int = 96):
    """Mostly valid odd moduli of 1..max_bytes bytes, sometimes anything at all, and now and then one of
    176..300 bytes (1401..2400 bits: the engine's IFMA products take those where the CPU has them)."""
    odd = st.binary(min_size=1, max_size=max_bytes).map(lambda b: bytes([b[0] | 1]) + b[1:])
    wide = st.binary(min_size=176, max_size=300).map(lambda b: bytes([b[0] | 1]) + b[1:-1] + bytes([b[-1] | 1]))
    return st.one_of(odd, odd, odd, wide, st.binary(max_size=max_bytes), st.sampled_from([b"", b"\x01", b"\x02"]))


@st.composite
def native_calls(draw, max_bytes: int = 96):
    """One call: ("fixed", base, modulus, exp_bits, window, exponent, factor),
    ("multi", bases, exps, modulus, window), ("rows", bases, rows, modulus, group),
    ("pow", base, exponent, modulus) or ("pow2", base1, exponent1, modulus1, base2, exponent2, modulus2)."""
    mod = draw(moduli(max_bytes))
    width = max(max_bytes, len(mod)) + 8  # residues up to a little wider than the modulus (refused beyond it)
    if draw(st.integers(0, 4)) == 0:
        return ("pow", draw(st.binary(max_size=width)), draw(st.binary(max_size=48)), mod)
    if draw(st.integers(0, 5)) == 0:
        # two powers in lock-step: mostly a second modulus of the first's length (the engine interleaves the
        # products of two wide ones of one width), sometimes any other
        same = st.binary(min_size=len(mod), max_size=len(mod)).map(lambda b: bytes([b[0] | 1]) + b[1:] if b else b)
        mod2 = draw(st.one_of(same, same, moduli(max_bytes)))
        width2 = max(max_bytes, len(mod2)) + 8
        return (
            "pow2",
            draw(st.binary(max_size=width)),
            draw(st.binary(max_size=48)),
            mod,
            draw(st.binary(max_size=width2)),
            draw(st.binary(max_size=48)),
            mod2,
        )
    window = draw(st.one_of(st.integers(1, 12), st.integers(-3, 40)))
    if len(mod) > max_bytes:  # a wide modulus: small tables (a 12-bit window's would take seconds to build)
        window = draw(st.integers(1, 5))
    if draw(st.integers(0, 3)) == 0:
        n = draw(st.integers(0, 10))
        bases = draw(st.lists(st.binary(max_size=width), min_size=n, max_size=n))
        rows = draw(st.lists(st.lists(st.binary(max_size=40), min_size=n, max_size=n), max_size=5))
        if rows and draw(st.integers(0, 20)) == 0:  # now and then: a short row, or a non-bytes exponent
            rows[0] = draw(st.one_of(st.just(rows[0][:-1]), st.just(rows[0] + [5])))
        return ("rows", bases, rows, mod, window)
    if draw(st.booleans()):
        base = draw(st.binary(max_size=width))
        exp_bits = draw(st.one_of(st.integers(1, 300), st.integers(-5, 1 << 70)))
        if len(mod) > max_bytes and exp_bits > 4096:  # a wide modulus: a table of at most a few thousand entries
            exp_bits = draw(st.integers(1, 4096))
        exponent = draw(st.binary(max_size=48))
        factor = draw(st.one_of(st.none(), st.binary(max_size=width)))
        return ("fixed", base, mod, exp_bits, window, exponent, factor)
    n = draw(st.integers(0, 12))
    bases = draw(st.lists(st.binary(max_size=width), min_size=n, max_size=n))
    exps = draw(st.lists(st.binary(max_size=40), min_size=n, max_size=n))
    if draw(st.integers(0, 20)) == 0:  # now and then: lengths that differ, or a non-bytes exponent
        exps = draw(st.one_of(st.just(exps[:-1]), st.just(exps + [5])))
    return ("multi", bases, exps, mod, window)


def run_call(mont, call) -> str:
    """Run one call on each Montgomery product the host has; return "ok" or "refused" (the same on
    each); raise AssertionError on a wrong value."""
    cpu_ifma = getattr(mont, "cpu_ifma", None)
    if cpu_ifma is None or not cpu_ifma():
        return "ok" if _run_call(mont, call) == "ok" else "refused"
    before = mont.ifma()
    try:
        outcomes = set()
        for flag in (False, True):
            mont._set_ifma(flag)
            outcomes.add(_run_call(mont, call))
    finally:
        mont._set_ifma(before)
    # IFMA's residues are wider (52-bit digits in 64-bit words), so a table just inside the engine's memory
    # limit on GMP's products may be refused on IFMA's: the only disagreement allowed
    assert len(outcomes - {"refused: limit"}) <= 1, ("GMP's and IFMA's products disagree", call, outcomes)
    return "ok" if outcomes == {"ok"} else "refused"


def _run_call(mont, call) -> str:
    try:
        if call[0] == "fixed":
            _, base, mod, exp_bits, window, exponent, factor = call
            fb = mont.FixedBase(base, mod, exp_bits, window)
            out = fb.pow(exponent) if factor is None else fb.pow(exponent, factor)
            m = _int(mod)
            want = gmpy2.powmod(_int(base), _int(exponent), m)
            if factor is not None:
                want = want * _int(factor) % m
            assert _int(out) == want, ("FixedBase", call)
        elif call[0] == "pow":
            _, base, exponent, mod = call
            out = mont.powmod(base, exponent, mod)
            assert _int(out) == gmpy2.powmod(_int(base), _int(exponent), _int(mod)), ("powmod", call)
        elif call[0] == "pow2":
            _, b1, e1, m1, b2, e2, m2 = call
            out1, out2 = mont.powmod2(b1, e1, m1, b2, e2, m2)
            assert _int(out1) == gmpy2.powmod(_int(b1), _int(e1), _int(m1)), ("powmod2 first", call)
            assert _int(out2) == gmpy2.powmod(_int(b2), _int(e2), _int(m2)), ("powmod2 second", call)
        elif call[0] == "rows":
            _, bases, rows, mod, group = call
            out = mont.multi_exp_rows(bases, rows, mod, group)
            m = _int(mod)
            assert len(out) == len(rows), ("multi_exp_rows", call)
            for got, row in zip(out, rows):
                want = gmpy2.mpz(1)
                for b, e in zip(bases, row):
                    want = want * gmpy2.powmod(_int(b), _int(e), m) % m
                assert _int(got) == want % m, ("multi_exp_rows", call)
        else:
            _, bases, exps, mod, window = call
            out = mont.multi_exp(bases, exps, mod, window)
            m = _int(mod)
            want = gmpy2.mpz(1)
            for b, e in zip(bases, exps):
                want = want * gmpy2.powmod(_int(b), _int(e), m) % m
            assert _int(out) == want % m, ("multi_exp", call)
        return "ok"
    except ValueError as exc:
        return "refused: limit" if "limit" in str(exc) else "refused"
    except ALLOWED:
        return "refused"
