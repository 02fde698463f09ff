"""The C accelerator (smcdp.crypto._mont) against gmpy2, and the pure path against it.

Every value the native engine computes is compared with ``gmpy2.powmod`` (the
reference) and with the pure-gmpy2 loops it replaces, over moduli of one to
many limbs, every window width and exponents at the edges of the tables.

In CI the accelerator must be present (``SMCDP_REQUIRE_NATIVE=1``, set by
.ci/run): there a missing build fails instead of skipping.  Where the CPU has AVX-512
IFMA, the engine's values are compared on both of its Montgomery products (GMP's and
IFMA's, ``on_each_product``), at every width the IFMA products take.
"""

import os
import random
import secrets
import subprocess
import sys
import threading
import time
from contextlib import contextmanager, nullcontext

import gmpy2
import pytest
from gmpy2 import mpz
from hypothesis import given, settings
from hypothesis import strategies as st
from phe import paillier as phe_paillier

from smcdp.crypto import modexp, native
from smcdp.crypto import paillier as P
from smcdp.crypto.modexp import multi_exp

if not native.AVAILABLE and os.environ.get("SMCDP_REQUIRE_NATIVE") == "1":
    raise RuntimeError(f"SMCDP_REQUIRE_NATIVE=1 but the native engine is unavailable: {native.REASON}")

needs_native = pytest.mark.skipif(not native.AVAILABLE, reason=f"native engine not built: {native.REASON}")


def _odd_modulus(bits: int) -> mpz:
    return mpz(secrets.randbits(bits)) | 1 | (mpz(1) << (bits - 1))


def _mont_module():
    from smcdp.crypto import _mont

    return _mont


#: the Montgomery products this host runs: GMP's always (where the engine is built), IFMA's where the CPU has it
PRODUCTS = ([False, True] if _mont_module().cpu_ifma() else [False]) if native.AVAILABLE else []


@contextmanager
def product(ifma: bool):
    """New Montgomery contexts use IFMA's products (True) or GMP's (False) inside the block."""
    mont = _mont_module()
    before = mont._set_ifma(ifma)
    try:
        yield
    finally:
        mont._set_ifma(before)


def on_each_product(call):
    """``call()`` once per Montgomery product of this host: the list of its results."""
    out = []
    for flag in PRODUCTS:
        with product(flag):
            out.append(call())
    return out


@pytest.fixture(params=["native", "pure"])
def engine(request, monkeypatch):
    """Run a test once on each engine (the pure one by switching the accelerator off)."""
    if request.param == "native":
        if not native.AVAILABLE:
            pytest.skip(f"native engine not built: {native.REASON}")
    else:
        monkeypatch.setattr(native, "AVAILABLE", False)
    return request.param


@needs_native
@settings(max_examples=80, deadline=None)
@given(
    bits=st.sampled_from([3, 63, 64, 65, 127, 128, 129, 512, 1024, 1400, 1662, 2048, 4096, 4158]),
    exp_bits=st.integers(min_value=1, max_value=300),
    window=st.integers(min_value=1, max_value=9),
    data=st.data(),
)
def test_fixed_base_matches_powmod(bits, exp_bits, window, data):
    m = mpz(data.draw(st.integers(min_value=1 << (bits - 1), max_value=(1 << bits) - 1))) | 1
    base = mpz(data.draw(st.integers(min_value=0, max_value=int(m) * 3)))
    edges = [e for e in (0, 1, 2, (1 << exp_bits) - 1, 1 << (exp_bits - 1)) if e < 1 << exp_bits]
    exps = edges + [data.draw(st.integers(min_value=0, max_value=(1 << exp_bits) - 1))]
    factor = mpz(data.draw(st.integers(min_value=0, max_value=int(m) - 1)))
    want = [gmpy2.powmod(base, e, m) for e in exps] + [factor * gmpy2.powmod(base, exps[-1], m) % m]

    def powers():
        fb = native.FixedBase(base, m, exp_bits, window)
        return [fb.pow(e) for e in exps] + [fb.pow(exps[-1], factor)]

    assert on_each_product(powers) == [want] * len(PRODUCTS), (bits, exp_bits, window)


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    bits=st.sampled_from([5, 64, 65, 200, 1024, 1400, 1662, 2048, 4096, 4158]),
    terms=st.integers(min_value=0, max_value=60),
    exp_bits=st.sampled_from([1, 7, 48, 63, 64, 65, 130]),
    window=st.integers(min_value=1, max_value=10),
    data=st.data(),
)
def test_native_multi_exp_matches_powmod_product(bits, terms, exp_bits, window, data):
    m = mpz(data.draw(st.integers(min_value=1 << (bits - 1), max_value=(1 << bits) - 1))) | 1
    bases = [mpz(data.draw(st.integers(min_value=0, max_value=int(m) - 1))) for _ in range(terms)]
    exps = [data.draw(st.integers(min_value=0, max_value=(1 << exp_bits) - 1)) for _ in range(terms)]
    ref = mpz(1) % m
    for b, e in zip(bases, exps):
        ref = ref * gmpy2.powmod(b, e, m) % m
    got = on_each_product(lambda: native.multi_exp(bases, exps, m, window))
    # the empty product is 1 (also mod 1 < m: m >= 5 here)
    assert got == [ref] * len(PRODUCTS)


@settings(max_examples=40, deadline=None)
@given(
    terms=st.integers(min_value=0, max_value=50),
    exp_bits=st.sampled_from([1, 20, 48, 64, 65, 86, 100, 128, 129, 640, 641, 700]),
    data=st.data(),
)
def test_multi_exp_with_signs_on_both_engines(terms, exp_bits, data, keypair512):
    pk, _sk = keypair512
    bases = [pk.raw_encrypt(data.draw(st.integers(min_value=-1000, max_value=1000))) for _ in range(terms)]
    exps = [data.draw(st.integers(min_value=-(1 << exp_bits) + 1, max_value=(1 << exp_bits) - 1)) for _ in range(terms)]
    ref = mpz(1)
    for b, e in zip(bases, exps):
        ref = ref * pk.raw_mul(b, e) % pk.nsquare
    results = {multi_exp(bases, exps, pk.nsquare)}
    saved = native.AVAILABLE
    try:
        native.AVAILABLE = False
        results.add(multi_exp(bases, exps, pk.nsquare))
    finally:
        native.AVAILABLE = saved
    assert results == {ref}


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    bits=st.sampled_from([5, 64, 65, 200, 1024, 1400, 1662, 2048, 4096, 4158]),
    terms=st.integers(min_value=0, max_value=30),
    rows=st.integers(min_value=0, max_value=6),
    exp_bits=st.sampled_from([1, 7, 45, 64, 65, 130]),
    group=st.integers(min_value=1, max_value=12),
    threads=st.integers(min_value=1, max_value=5),
    data=st.data(),
)
def test_native_multi_exp_rows_matches_powmod_products(bits, terms, rows, exp_bits, group, threads, data):
    """Issue 27: the rows share subset tables; each row is still exactly Π b^e (every group size, last
    groups of fewer bases, zero rows, zero exponents, exponents at limb edges, bases ≥ the modulus).
    Issue 42: the same when the tables and rows are shared among threads (more threads than rows or
    groups included)."""
    m = mpz(data.draw(st.integers(min_value=1 << (bits - 1), max_value=(1 << bits) - 1))) | 1
    bases = [mpz(data.draw(st.integers(min_value=0, max_value=int(m) - 1))) for _ in range(terms)]
    E = [
        [data.draw(st.integers(min_value=0, max_value=(1 << exp_bits) - 1)) for _ in range(terms)] for _ in range(rows)
    ]
    want = []
    for row in E:
        ref = mpz(1) % m
        for b, e in zip(bases, row):
            ref = ref * gmpy2.powmod(b, e, m) % m
        want.append(ref)
    assert on_each_product(lambda: native.multi_exp_rows(bases, E, m, group, threads)) == [want] * len(PRODUCTS)


@needs_native
def test_multi_exp_rows_threads_outside_the_engines_bounds_are_refused_or_clamped():
    from smcdp.crypto import _mont

    m = _odd_modulus(256)
    b = (5).to_bytes(32, "little")
    for threads in (0, -1, native.MAX_ROW_THREADS + 1):
        with pytest.raises(ValueError, match="threads"):
            _mont.multi_exp_rows([b], [[b"\x03"]], int(m).to_bytes(32, "little"), 1, threads)
    # the wrapper clamps to what the engine takes
    assert native.multi_exp_rows([5], [[3]], m, 1, 100) == [mpz(125) % m]


@settings(max_examples=30, deadline=None)
@given(
    terms=st.integers(min_value=0, max_value=40),
    rows=st.integers(min_value=0, max_value=8),
    exp_bits=st.sampled_from([1, 20, 44, 64, 65, 100]),
    data=st.data(),
)
def test_multi_exp_rows_with_signs_equals_one_multi_exp_per_row_on_both_engines(
    terms, rows, exp_bits, data, keypair512
):
    """Signed exponents through the offset 2^b and one shared inversion: the same ciphertexts as one
    multi_exp per row, on either engine."""
    pk, _ = keypair512
    bases = [pk.raw_encrypt(data.draw(st.integers(min_value=-1000, max_value=1000))) for _ in range(terms)]
    E = [
        [data.draw(st.integers(min_value=-(1 << exp_bits) + 1, max_value=(1 << exp_bits) - 1)) for _ in range(terms)]
        for _ in range(rows)
    ]
    want = [multi_exp(bases, row, pk.nsquare) for row in E]
    assert modexp.multi_exp_rows(bases, E, pk.nsquare) == want
    saved = native.AVAILABLE
    try:
        native.AVAILABLE = False
        assert modexp.multi_exp_rows(bases, E, pk.nsquare) == want
    finally:
        native.AVAILABLE = saved
    with pytest.raises(ValueError, match="one exponent per base"):
        modexp.multi_exp_rows(bases, [[1] * (terms + 1)], pk.nsquare)


@pytest.mark.skipif(not native.AVAILABLE, reason="native engine not built")
def test_exponents_cut_into_limbs_give_the_bucket_methods_result(keypair512):
    """65..640-bit exponents go through one-limb chunks (Bos–Coster); the result is the engine's own bucket
    method's, exponent by exponent, at every chunk boundary."""
    from smcdp.crypto import modexp

    pk, _ = keypair512
    rng = __import__("random").Random(3)
    bases = [pk.raw_encrypt(i) % pk.nsquare for i in range(12)]
    for bits in (65, 86, 127, 128, 129, 192, 640):
        exps = [rng.getrandbits(bits) | (1 << (bits - 1)) for _ in bases]
        exps[3] = 0
        exps[5] = (1 << bits) - 1
        want = native.multi_exp(bases, exps, pk.nsquare, 5)
        assert modexp._multi_exp_limbs(bases, exps, pk.nsquare, bits, 5) == want
        assert modexp.multi_exp(bases, exps, pk.nsquare) == want


@needs_native
def test_short_wide_multi_exps_go_to_straus_and_give_the_powmod_product(keypair512, monkeypatch):
    """Up to STRAUS_MAX_TERMS terms with 65..STRAUS_MAX_BITS-bit exponents (the keyword rounds' weighted
    sums) take Straus with subset tables, one row of native.multi_exp_rows; more terms, or exponents of
    one limb or beyond the bound, do not.  Every result is the product of powmods."""
    pk, _ = keypair512
    n2 = pk.nsquare
    calls = []
    rows = native.multi_exp_rows
    monkeypatch.setattr(native, "multi_exp_rows", lambda *a: calls.append(len(a[0])) or rows(*a))
    rng = __import__("random").Random(42)
    for terms, bits, straus in (
        (5, 65, True),
        (24, 86, True),
        (28, 86, True),
        (modexp.STRAUS_MAX_TERMS + 1, modexp.STRAUS_MAX_BITS, True),
        (modexp.STRAUS_MAX_TERMS + 2, 86, False),  # one more than the bound after the zero is dropped
        (20, 64, False),
        (20, modexp.STRAUS_MAX_BITS + 1, False),
    ):
        bases = [pk.raw_encrypt(rng.randrange(-1000, 1000)) for _ in range(terms)]
        exps = [rng.getrandbits(bits) for _ in range(terms)]
        exps[0] = (1 << bits) - 1  # the widest exponent: maxbits = bits
        exps[-1] = 0
        want = mpz(1)
        for b, e in zip(bases, exps):
            want = want * gmpy2.powmod(b, e, n2) % n2
        calls.clear()
        assert multi_exp(bases, exps, n2) == want
        assert calls == ([terms - 1] if straus else []), (terms, bits)  # the zero exponent is dropped


@needs_native
def test_an_engine_built_before_row_threads_gets_four_arguments_and_the_same_rows(monkeypatch):
    """An accelerator built before multi_exp_rows took ``threads`` (no MAX_ROW_THREADS) is called as it was:
    the rows run on the calling thread, same values (a tree updated without rebuilding the engine)."""
    from smcdp.crypto import _mont

    real = _mont.multi_exp_rows
    seen = []

    def four_only(bases, rows, modulus, group):  # the old signature: a fifth argument is a TypeError
        seen.append(group)
        return real(bases, rows, modulus, group)

    m = _odd_modulus(512)
    bases = [mpz(secrets.randbits(500)) for _ in range(9)]
    rows = [[secrets.randbits(70) for _ in bases] for _ in range(5)]
    want = native.multi_exp_rows(bases, rows, m, 3, 2)
    monkeypatch.setattr(_mont, "multi_exp_rows", four_only)
    monkeypatch.setattr(native, "MAX_ROW_THREADS", 1)
    assert native.multi_exp_rows(bases, rows, m, 3, 2) == want
    assert modexp.multi_exp_rows(bases, rows, m, threads=4) == want
    assert len(seen) == 2


def test_fixed_base_table_engines_agree(engine):
    m = _odd_modulus(1024)
    base = mpz(secrets.randbits(1024)) % m
    t = modexp.FixedBaseTable(base, m, 256, window=6)
    assert (t._native is not None) == (engine == "native")
    for e in (0, 1, (1 << 256) - 1, secrets.randbits(256)):
        assert t.pow(e) == gmpy2.powmod(base, e, m)
    with pytest.raises(ValueError, match="range"):
        t.pow(1 << 256)
    with pytest.raises(ValueError, match="range"):
        t.pow(-1)


def test_encryption_on_each_engine_is_plain_paillier(engine):
    """A fresh key per engine, so that its tables are built on that engine."""
    pk, sk = P.generate_keypair(512, allow_insecure=True)
    for m in (0, 1, -1, 2**100, -(2**100), secrets.randbits(150)):
        for c in (pk.raw_encrypt(m), sk.raw_encrypt(m)):
            assert sk.phe.decrypt(phe_paillier.EncryptedNumber(pk.phe, int(c))) == m
    assert (pk.table()._native is not None) == (engine == "native")


@needs_native
def test_bad_arguments_are_refused_cleanly():
    from smcdp.crypto import _mont

    m = _odd_modulus(256)
    mb = int(m).to_bytes(32, "little")
    with pytest.raises(ValueError, match="odd modulus"):
        _mont.FixedBase(b"\x02", (int(m) + 1).to_bytes(32, "little"), 10, 4)
    with pytest.raises(ValueError, match="odd modulus"):
        _mont.FixedBase(b"\x02", b"\x01", 10, 4)
    with pytest.raises(ValueError, match="odd modulus"):
        _mont.FixedBase(b"\x02", b"", 10, 4)
    with pytest.raises(ValueError, match="window"):
        _mont.FixedBase(b"\x02", mb, 10, 0)
    with pytest.raises(ValueError, match="window"):
        _mont.FixedBase(b"\x02", mb, 10, 21)
    with pytest.raises(ValueError, match="wider"):
        _mont.FixedBase(b"\x01" * 40, mb, 10, 4)
    with pytest.raises(TypeError):
        _mont.FixedBase("2", mb, 10, 4)
    fb = _mont.FixedBase(b"\x02", mb, 10, 4)
    with pytest.raises(ValueError, match="range"):
        fb.pow((1 << 10).to_bytes(2, "little"))
    assert fb.pow((1 << 9).to_bytes(2, "little")) == int(gmpy2.powmod(2, 1 << 9, m)).to_bytes(32, "little")
    with pytest.raises(RuntimeError, match="already"):
        fb.__init__(b"\x02", mb, 10, 4)
    with pytest.raises(ValueError, match="differ in length"):
        _mont.multi_exp([b"\x02"], [], mb, 4)
    with pytest.raises(TypeError, match="bytes"):
        _mont.multi_exp([b"\x02"], [5], mb, 4)
    with pytest.raises(ValueError, match="window"):
        _mont.multi_exp([b"\x02"], [b"\x05"], mb, 17)
    with pytest.raises(ValueError, match="wider"):
        _mont.multi_exp([b"\x01" * 40], [b"\x05"], mb, 4)
    with pytest.raises(RuntimeError, match="not initialised"):
        _mont.FixedBase.__new__(_mont.FixedBase).pow(b"\x01")
    with pytest.raises(ValueError, match="group"):
        _mont.multi_exp_rows([b"\x02"], [[b"\x05"]], mb, 0)
    with pytest.raises(ValueError, match="group"):
        _mont.multi_exp_rows([b"\x02"], [[b"\x05"]], mb, 13)
    with pytest.raises(ValueError, match="row 0 has 0 exponents for 1 bases"):
        _mont.multi_exp_rows([b"\x02"], [[]], mb, 4)
    with pytest.raises(TypeError, match="bytes"):
        _mont.multi_exp_rows([b"\x02"], [[5]], mb, 4)
    with pytest.raises(TypeError, match="sequence"):
        _mont.multi_exp_rows([b"\x02"], [5], mb, 4)
    with pytest.raises(ValueError, match="wider"):
        _mont.multi_exp_rows([b"\x01" * 40], [[b"\x05"]], mb, 4)
    with pytest.raises(ValueError, match="odd modulus"):
        _mont.multi_exp_rows([b"\x02"], [[b"\x05"]], b"\x04", 4)
    with pytest.raises(ValueError, match="limit"):
        _mont.multi_exp_rows([b"\x02"], [[b"\x01" * ((1 << 20) + 1)]], mb, 4)


@needs_native
def test_pow_releases_the_gil():
    """Another Python thread keeps running while a long table build / pow is in C.

    A ticker thread notes the time every millisecond it gets a turn.  While a call holds the GIL it
    gets none: no tick falls in the middle third of that call (the control, a built-in ``pow`` of big
    ints, shows it).  During the table build it ticks throughout -- counted loosely, as a loaded host
    wakes a sleeping thread 5-50 ms late."""
    m = _odd_modulus(4096)
    ticks = []
    stop = threading.Event()

    def ticker():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    def ticks_during(call):
        """(ticks within the call, ticks within its middle third)"""
        time.sleep(0.01)
        t_a = time.perf_counter()
        call()
        t_b = time.perf_counter()
        third = (t_b - t_a) / 3
        inside = [t for t in list(ticks) if t_a < t <= t_b]
        return len(inside), sum(t_a + third <= t <= t_b - third for t in inside)

    exponent = int(mpz(secrets.randbits(6000)) | 1)
    th = threading.Thread(target=ticker)
    th.start()
    try:
        held = ticks_during(lambda: pow(3, exponent, int(m)))  # C that keeps the GIL: ~0.2 s
        # three builds in a row (~0.07 s each with IFMA products, 15 MiB each): a middle third long enough that a
        # ticker woken late on a loaded host still lands in it
        released = ticks_during(lambda: [native.FixedBase(mpz(3), m, 1024, 8) for _ in range(3)])
    finally:
        stop.set()
        th.join()
    assert held[1] == 0, held  # the measurement sees a held GIL
    # with the GIL held, the ticker would get no turn at all during the build
    assert released[0] >= 3 and released[1] >= 1, released


def test_table_budget_setting(monkeypatch):
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "8")
    assert modexp.table_budget_bytes() == 8 << 20
    # 2048-bit residues, 1024-bit exponents: 8 MB fits 8-bit windows only with GMP's 256-byte residues
    # (128 windows x 255 entries x 256 bytes = 8.4e6), 7-bit ones with IFMA's 320-byte residues (40 digits)
    for flag in PRODUCTS or [False]:
        with product(flag) if PRODUCTS else nullcontext():
            assert native.residue_bytes(2048) == (320 if flag else 256)
            assert modexp.window_for(1024, 2048, entry_overhead=0, max_window=12) == (7 if flag else 8)
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "lots")
    with pytest.raises(ValueError, match="SMCDP_TABLE_BUDGET_MB"):
        modexp.table_budget_bytes()
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "0")
    with pytest.raises(ValueError, match="at least 1"):
        modexp.table_budget_bytes()
    monkeypatch.delenv("SMCDP_TABLE_BUDGET_MB")
    assert modexp.table_budget_bytes() == 192 << 20


# ---------------------------------------------------------------------------- the IFMA products
needs_ifma = pytest.mark.skipif(len(PRODUCTS) < 2, reason="this CPU has no AVX-512 IFMA (or the engine is not built)")


def _table_words(bits: int) -> int:
    """Words per residue the engine's context chose for a ``bits``-bit modulus (from a FixedBase's table:
    one window of 15 entries), whatever the Python side believes."""
    m = _odd_modulus(bits)
    return native.FixedBase(mpz(3), m, 4, 4).table_bytes // 15 // 8


@needs_ifma
def test_each_product_is_the_one_the_engine_runs():
    """``product(True)`` really gives IFMA's residues (8·V words) inside 1400..6654 bits and GMP's limbs
    outside; ``product(False)`` GMP's everywhere -- so the comparisons below do compare two products."""
    for bits in (1399, 1400, 2048, 4096, 6654, 6655):
        limbs, digits = -(-bits // 64), 8 * -(-(bits + 2) // 416)
        with product(True):
            assert _table_words(bits) == (digits if 1400 <= bits <= 6654 else limbs), bits
            assert native.residue_bytes(bits) == 8 * _table_words(bits)
        with product(False):
            assert _table_words(bits) == limbs, bits
            assert native.residue_bytes(bits) == 8 * limbs


#: every digit count V the IFMA products take (4..16): its widest modulus 416·V − 2 and the next width (V + 1,
#: or GMP's products after V = 16), and the narrowest width they take (1400, V = 4)
IFMA_WIDTHS = (1399, 1400, *(w for v in range(4, 17) for w in (416 * v - 2, 416 * v - 1)))


@needs_ifma
def test_ifma_products_at_every_width_they_take():
    """At every width in IFMA_WIDTHS, fixed base (with and without a factor), multi_exp, rows and powmod
    on each product equal gmpy2, with bases 0, 1, m − 1 and ≥ m among them.  At 416·V − 2 bits R/m is
    only about 4, so about one almost-Montgomery result in twenty lies in [m, 2m): the final reduction
    (``canon52``) is exercised, as by a composite modulus whose factors multiply to 0 ≡ m."""
    rng = __import__("random").Random(7)
    for bits in IFMA_WIDTHS:
        m = mpz(rng.getrandbits(bits)) | 1 | (mpz(1) << (bits - 1))
        bases = [mpz(0), mpz(1), m - 1, m + 5, *(mpz(rng.getrandbits(bits + 8)) for _ in range(5))]
        exps = [rng.getrandbits(86) for _ in bases]
        rows = [[rng.getrandbits(45) for _ in bases] for _ in range(4)]
        e = rng.getrandbits(1030)
        factors = [mpz(rng.randrange(int(m))) for _ in range(24)]
        want_multi = mpz(1)
        for b, x in zip(bases, exps):
            want_multi = want_multi * gmpy2.powmod(b, x, m) % m
        want_rows = []
        for row in rows:
            w = mpz(1)
            for b, x in zip(bases, row):
                w = w * gmpy2.powmod(b, x, m) % m
            want_rows.append(w)
        fixed = gmpy2.powmod(bases[4], e, m)
        want = (
            want_multi,
            want_rows,
            gmpy2.powmod(bases[5], e, m),
            fixed,
            [f * gmpy2.powmod(bases[4], x, m) % m for f, x in zip(factors, exps * 3)],
        )

        def compute(m=m, bases=bases, exps=exps, rows=rows, e=e, factors=factors):
            fb = native.FixedBase(bases[4], m, 1030, 6)
            return (
                native.multi_exp([b % m for b in bases], exps, m, 5),
                native.multi_exp_rows([b % m for b in bases], rows, m, 3, 2),
                native.powmod(bases[5] % m, e, m),
                fb.pow(e),
                [fb.pow(x, f) for f, x in zip(factors, exps * 3)],
            )

        assert on_each_product(compute) == [want, want], bits
        with product(True):
            assert native.ifma_takes(bits) == (1400 <= bits <= 6654)


@needs_ifma
def test_a_product_that_is_zero_mod_a_composite_modulus_comes_out_zero():
    """m = p·q (an n²-like composite): p^1 · q^1 ≡ 0, which the almost-Montgomery product may hold as m
    itself; every way out of the engine reduces it to 0."""
    p = gmpy2.next_prime(mpz(secrets.randbits(1100)) | (mpz(1) << 1099))
    q = gmpy2.next_prime(mpz(secrets.randbits(1100)) | (mpz(1) << 1099))
    m = p * q
    got = on_each_product(
        lambda: (
            native.multi_exp([p, q], [1, 1], m, 2),
            native.multi_exp_rows([p, q, p, q], [[1, 1, 0, 0], [0, 2, 1, 0], [1, 0, 0, 1], [3, 3, 3, 3]], m, 2),
            native.FixedBase(p, m, 8, 4).pow(1, q),
            native.powmod(p * q % m, 5, m),
        )
    )
    assert got == [(0, [0, 0, 0, 0], 0, 0)] * len(PRODUCTS)


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    bits=st.sampled_from([3, 64, 65, 512, 1400, 1662, 2048, 4096, 4158]),
    exp_bits=st.sampled_from([0, 1, 2, 24, 25, 160, 161, 225, 768, 769, 1024]),
    data=st.data(),
)
def test_powmod_matches_gmpy2_on_each_product(bits, exp_bits, data):
    """The engine's one-base exponentiation (a decryption's CRT half) and modexp.powmod, which takes it
    only where the IFMA products take the modulus."""
    m = mpz(data.draw(st.integers(min_value=1 << (bits - 1), max_value=(1 << bits) - 1))) | 1
    base = mpz(data.draw(st.integers(min_value=0, max_value=int(m) - 1)))
    e = data.draw(st.integers(min_value=0, max_value=(1 << exp_bits) - 1)) if exp_bits else 0
    want = gmpy2.powmod(base, e, m)
    assert on_each_product(lambda: (native.powmod(base, e, m), modexp.powmod(base, e, m))) == [(want, want)] * len(
        PRODUCTS
    )


@needs_native
def test_decryption_on_each_product_is_phes():
    """A 2048-bit key (p^2 of 2048 bits: the IFMA products where the CPU has them) decrypts what phe
    encrypted, standard and subgroup keys."""
    for subgroup in (False, True):
        pk, sk = P.generate_keypair(2048, subgroup=subgroup)
        msgs = [0, 1, -1, 2**200, -(2**200), secrets.randbits(1000)]
        cts = [pk.raw_encrypt(x) for x in msgs]
        assert on_each_product(lambda sk=sk, cts=cts: [sk.raw_decrypt_signed(c) for c in cts]) == [msgs] * len(PRODUCTS)


@needs_native
def test_ifma_can_be_switched_off_from_the_environment():
    """SMCDP_NATIVE_IFMA=0 keeps GMP's products (for comparing, or a CPU whose IFMA misbehaves)."""
    code = "from smcdp.crypto import native, _mont; print(native.ifma(), _mont.cpu_ifma(), native.products_name())"
    for off in ("0", " 0 "):  # read as SMCDP_NATIVE is
        env = {**os.environ, "SMCDP_NATIVE_IFMA": off}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
        ifma, cpu, name = out.strip().split(" ", 2)
        assert ifma == "False" and "IFMA" not in name
    env.pop("SMCDP_NATIVE_IFMA")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip().split(" ", 2)[0] == cpu  # on by default where the CPU has it


@needs_native
def test_modexp_powmod_leaves_what_the_engine_refuses_to_gmpy2(monkeypatch):
    """Exponents beyond the engine's limit (1 MiB; 100 bits here), negative ones and even moduli go to
    gmpy2's powmod (the engine is not called), with gmpy2's value."""
    m = _odd_modulus(2048)
    b = mpz(secrets.randbits(2000))
    while gmpy2.gcd(b, m) != 1:  # a negative power needs b invertible mod m (a random odd m shares 3 with b 1 in 9)
        b += 1
    want = {e: gmpy2.powmod(b, e, m) for e in (-5, (1 << 100) + 1)}
    monkeypatch.setattr(modexp, "EXP_MAX_BITS", 100)
    monkeypatch.setattr(native, "powmod", lambda *a: pytest.fail("the engine was called"))
    for e, w in want.items():
        assert modexp.powmod(b, e, m) == w
    assert modexp.powmod(b, 12345, m + 1) == gmpy2.powmod(b, 12345, m + 1)


@needs_native
def test_powmod_refuses_bad_arguments():
    mont = _mont_module()
    m = _odd_modulus(2048)
    mb = int(m).to_bytes(256, "little")
    with pytest.raises(ValueError, match="odd modulus"):
        mont.powmod(b"\x02", b"\x05", (int(m) + 1).to_bytes(256, "little"))
    with pytest.raises(ValueError, match="wider"):
        mont.powmod(b"\x01" * 257, b"\x05", mb)
    with pytest.raises(ValueError, match="limit"):
        mont.powmod(b"\x02", b"\x01" * ((1 << 20) + 1), mb)
    with pytest.raises(TypeError):
        mont.powmod("2", b"\x05", mb)


#: widths of the interleaved products' pairs: every digit count they take (V = 4..8 from 1400 bits), at both
#: ends of each (416·V − 2 bits is V's widest, 416·V − 1 the next V's narrowest)
X2_WIDTHS = (1400, *(416 * v - 2 for v in range(4, 9)), *(416 * v - 1 for v in range(4, 8)))


@needs_ifma
def test_two_interleaved_powers_equal_gmpy2_at_every_width_they_take():
    """powmod2 (a decryption's two CRT halves in one call): at every width the interleaved products take,
    both powers equal gmpy2's -- exponents of different lengths, 0 and 1 among them, bases 0, 1, m − 1 and
    ≥ m --, on each product (GMP's: two plain powers).  Widths that differ, or beyond 3326 bits, are not
    interleaved and still right."""
    rng = random.Random(11)
    cases = []
    for bits in X2_WIDTHS:
        m1, m2 = (mpz(rng.getrandbits(bits)) | 1 | (mpz(1) << (bits - 1)) for _ in range(2))
        for b1, b2 in ((mpz(0), mpz(1)), (m1 - 1, m2 + 7), (mpz(rng.getrandbits(bits)), mpz(rng.getrandbits(bits)))):
            for e1, e2 in (
                (rng.getrandbits(bits // 2), rng.getrandbits(bits // 2)),
                (rng.getrandbits(900), 0),
                (1, rng.getrandbits(40)),
                (rng.getrandbits(17), rng.getrandbits(1030)),
            ):
                cases.append((b1, e1, m1, b2, e2, m2))
    for bits1, bits2 in ((2048, 1500), (3327, 3327), (4096, 2048)):  # not interleaved
        m1, m2 = _odd_modulus(bits1), _odd_modulus(bits2)
        cases.append((mpz(rng.getrandbits(bits1)), rng.getrandbits(700), m1, mpz(5), rng.getrandbits(600), m2))
        with product(True):
            assert not native.interleaves(bits1, bits2)
    with product(True):
        assert all(native.interleaves(b, b) for b in X2_WIDTHS) and native.interleaves(2047, 2048)
    want = [(gmpy2.powmod(b1, e1, m1), gmpy2.powmod(b2, e2, m2)) for b1, e1, m1, b2, e2, m2 in cases]

    def compute():
        return [native.powmod2(b1 % m1, e1, m1, b2 % m2, e2, m2) for b1, e1, m1, b2, e2, m2 in cases]

    assert on_each_product(compute) == [want] * len(PRODUCTS)


@needs_native
def test_decryption_halves_in_one_call_equal_two_calls_and_a_thread_pool_pairs_them():
    """PrivateKey.decrypt_halves equals the two decrypt_half calls (standard and subgroup keys, on each
    product); CryptoThreads decrypts several ciphertexts one job each where the halves interleave, a single
    one half by half, and the plaintexts are the same; a subgroup key still refuses foreign randomness."""
    from smcdp.crypto import threads as T
    from smcdp.errors import InvalidMessage

    for subgroup in (False, True):
        pk, sk = P.generate_keypair(2048, subgroup=subgroup)
        msgs = [0, -1, 2**300, secrets.randbits(1500)]
        cts = [pk.raw_encrypt(x) for x in msgs]

        def both(sk=sk, cts=cts):
            return [sk.decrypt_halves(c) for c in cts], [(sk.decrypt_half(c, 0), sk.decrypt_half(c, 1)) for c in cts]

        for pairs, halves in on_each_product(both):
            assert pairs == halves
        with T.CryptoThreads(2) as th:
            assert th.decrypt_signed(sk, cts) == msgs and th.decrypt_signed(sk, cts[:1]) == msgs[:1]
        if subgroup:
            foreign = cts[0] * gmpy2.powmod(3, pk.n, pk.nsquare) % pk.nsquare  # randomness outside <h_s>
            with pytest.raises(InvalidMessage, match="subgroup"):
                sk.decrypt_halves(foreign)
    jobs = []
    monkey = pytest.MonkeyPatch()
    try:
        monkey.setattr(T, "_both", lambda job: jobs.append("pair") or job[0].decrypt_halves(job[1]))
        monkey.setattr(T, "_half", lambda job: jobs.append("half") or job[0].decrypt_half(job[1], job[2]))
        with T.CryptoThreads(2) as th:
            th.decrypt_signed(sk, cts)
            th.decrypt_signed(sk, cts[:1])
    finally:
        monkey.undo()
    assert jobs.count("pair") == (len(cts) if sk.interleaved_halves else 0)
    assert jobs.count("half") == 2 + (0 if sk.interleaved_halves else 2 * len(cts))


@needs_native
def test_powmod2_refuses_bad_arguments():
    mont = _mont_module()
    m = _odd_modulus(2048)
    mb = int(m).to_bytes(256, "little")
    with pytest.raises(ValueError, match="odd modulus"):
        mont.powmod2(b"\x02", b"\x05", mb, b"\x02", b"\x05", (int(m) + 1).to_bytes(256, "little"))
    with pytest.raises(ValueError, match="wider"):
        mont.powmod2(b"\x02", b"\x05", mb, b"\x01" * 257, b"\x05", mb)
    with pytest.raises(ValueError, match="limit"):
        mont.powmod2(b"\x02", b"\x01" * ((1 << 20) + 1), mb, b"\x02", b"\x05", mb)
    with pytest.raises(TypeError):
        mont.powmod2(b"\x02", b"\x05", mb)
