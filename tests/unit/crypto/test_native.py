"""The C accelerator (smcdp.crypto._mont) against gmpy2, and the pure path against it.

Every value the native engine computes is compared with ``gmpy2.powmod`` (the
reference) and with the pure-gmpy2 loops it replaces, over moduli of one to
many limbs, every window width and exponents at the edges of the tables.

In CI the accelerator must be present (``SMCDP_REQUIRE_NATIVE=1``, set by
.ci/run): there a missing build fails instead of skipping.
"""

import os
import secrets
import threading
import time

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
    bits=st.sampled_from([3, 63, 64, 65, 127, 128, 129, 512, 1024, 2048]),
    exp_bits=st.integers(min_value=1, max_value=300),
    window=st.integers(min_value=1, max_value=9),
    data=st.data(),
)
def test_fixed_base_matches_powmod(bits, exp_bits, window, data):
    m = mpz(data.draw(st.integers(min_value=1 << (bits - 1), max_value=(1 << bits) - 1))) | 1
    base = mpz(data.draw(st.integers(min_value=0, max_value=int(m) * 3)))
    fb = native.FixedBase(base, m, exp_bits, window)
    edges = [e for e in (0, 1, 2, (1 << exp_bits) - 1, 1 << (exp_bits - 1)) if e < 1 << exp_bits]
    for e in edges + [data.draw(st.integers(min_value=0, max_value=(1 << exp_bits) - 1))]:
        assert fb.pow(e) == gmpy2.powmod(base, e, m), (bits, exp_bits, window, e)


@needs_native
@settings(max_examples=60, deadline=None)
@given(
    bits=st.sampled_from([5, 64, 65, 200, 1024, 2048]),
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
    got = native.multi_exp(bases, exps, m, window)
    # the empty product is 1 (also mod 1 < m: m >= 5 here)
    assert got == ref


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
    bits=st.sampled_from([5, 64, 65, 200, 1024, 2048]),
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
    assert native.multi_exp_rows(bases, E, m, group, threads) == want


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
        released = ticks_during(lambda: native.FixedBase(mpz(3), m, 1024, 8))  # ~0.2 s in C, 15 MiB
    finally:
        stop.set()
        th.join()
    assert held[1] == 0, held  # the measurement sees a held GIL
    # with the GIL held, the ticker would get no turn at all during the build
    assert released[0] >= 3 and released[1] >= 1, released


def test_table_budget_setting(monkeypatch):
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "8")
    assert modexp.table_budget_bytes() == 8 << 20
    # 2048-bit residues, 1024-bit exponents: 8 MB fits 8-bit windows only
    assert modexp.window_for(1024, 2048, entry_overhead=0, max_window=12) == 8
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "lots")
    with pytest.raises(ValueError, match="SMCDP_TABLE_BUDGET_MB"):
        modexp.table_budget_bytes()
    monkeypatch.setenv("SMCDP_TABLE_BUDGET_MB", "0")
    with pytest.raises(ValueError, match="at least 1"):
        modexp.table_budget_bytes()
    monkeypatch.delenv("SMCDP_TABLE_BUDGET_MB")
    assert modexp.table_budget_bytes() == 192 << 20
