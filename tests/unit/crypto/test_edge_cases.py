"""Edge cases found by differential testing against gmpy2 and phe (issue 19): each is now a clear
InvalidMessage / ValueError or a correct value."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from fractions import Fraction

import gmpy2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from smcdp.crypto import native
from smcdp.crypto.codec import keypair_from_proto, keypair_to_proto
from smcdp.crypto.encoding import Packing, decode_fixed, encode_fixed
from smcdp.crypto.ints import as_int
from smcdp.crypto.paillier import PrivateKey, generate_keypair
from smcdp.crypto.threshold import decode_signed as threshold_decode_signed
from smcdp.crypto.vector import EncryptedVector
from smcdp.errors import InvalidMessage
from smcdp.v1 import messages_pb2 as pb
from tests.support.fuzz_native import native_calls, run_call
from tests.support.paths import REPO

needs_native = pytest.mark.skipif(not native.AVAILABLE, reason=f"native engine not built: {native.REASON}")


# ----------------------------------------------------------------------------- the C accelerator
@needs_native
def test_huge_modulus_is_refused_not_a_crash():
    from smcdp.crypto import _mont

    m = (1 << (8 * 8 * 1024 * 1024)) - 1  # 8 MB: used to overflow the stack
    mb = m.to_bytes(8 * 1024 * 1024, "little")
    with pytest.raises(ValueError, match="larger than the limit"):
        _mont.FixedBase(b"\x02", mb, 8, 4)
    with pytest.raises(ValueError, match="larger than the limit"):
        _mont.multi_exp([b"\x02"], [b"\x03"], mb, 4)


@pytest.mark.slow  # ~4 CPU-s in a subprocess (not in make test-quick)
@needs_native
def test_large_modulus_on_a_small_thread_stack():
    """A 120 KB modulus (under the limit) on a thread with a 64 KB stack: the quotient of the
    reduction used to be a stack array as large as the modulus (segfault); it is on the heap now.
    In a child process, so that a crash fails this test instead of killing the run."""
    code = textwrap.dedent("""
        import threading
        import gmpy2
        from smcdp.crypto import _mont
        m = (1 << (8 * 120 * 1024)) - 1
        mb = m.to_bytes(120 * 1024, "little")
        out = []
        def run():
            fb = _mont.FixedBase(b"\\x02", mb, 8, 2)
            out.append(int.from_bytes(fb.pow(b"\\x05"), "little") == 32)
            r = _mont.multi_exp([b"\\x02", b"\\x03"], [b"\\x03", b"\\x02"], mb, 2)
            out.append(int.from_bytes(r, "little") == 72)
        threading.stack_size(64 * 1024)
        t = threading.Thread(target=run)
        t.start(); t.join()
        assert out == [True, True], out
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])


@needs_native
def test_oversized_tables_and_exponents_are_refused():
    from smcdp.crypto import _mont

    mb = ((1 << 2047) | 1).to_bytes(256, "little")
    with pytest.raises(ValueError, match="exceeds the limit"):
        _mont.FixedBase(b"\x02", mb, 1 << 40, 20)
    with pytest.raises(ValueError, match="longer than the limit"):
        _mont.multi_exp([b"\x02"], [b"\x01" * ((1 << 20) + 1)], mb, 4)


@needs_native
@settings(max_examples=300, deadline=None)
@given(call=native_calls())
def test_native_fuzz_short(call):
    """The short version of bench/fuzz_native.py: arbitrary arguments give gmpy2's value or a
    Python exception, never a crash or a wrong value."""
    from smcdp.crypto import _mont

    run_call(_mont, call)


# ----------------------------------------------------------------------------- key generation and loading
@pytest.mark.parametrize("bits", [257, 385, 512, 513])
def test_generate_keypair_gives_exactly_the_requested_size(bits):
    pk, sk = generate_keypair(bits, allow_insecure=True)
    assert pk.bits == bits
    assert sk.p * sk.q == pk.n and gmpy2.is_prime(sk.p) and gmpy2.is_prime(sk.q)
    assert sk.raw_decrypt_signed(pk.raw_encrypt(-12345)) == -12345


@pytest.mark.timeout(120)
def test_generate_keypair_odd_secure_size_terminates():
    pk, sk = generate_keypair(2049)
    assert pk.bits == 2049
    assert sk.raw_decrypt_signed(pk.raw_encrypt(7)) == 7


def test_generate_keypair_refuses_non_integer_sizes():
    with pytest.raises(InvalidMessage):
        generate_keypair(2048.0)


def _composite_factor_key(keypair512):
    """n = p·q with p replaced by a composite: (p·r, q/r) is impossible, so take n' = (p·3)·q'
    for a prime q' -- a key whose 'p' is composite but p·q = n holds."""
    _, sk = keypair512
    p_comp = sk.p * 3
    q = gmpy2.next_prime(sk.q)
    return p_comp, q, p_comp * q


def test_private_key_from_json_checks_the_factors(keypair512):
    _pk, sk = keypair512
    ok = sk.to_json()
    assert PrivateKey.from_json(ok, allow_insecure=True).p == sk.p
    p_comp, q, n = _composite_factor_key(keypair512)
    bad = {
        "kind": "smcdp-paillier-private-key",
        "version": 1,
        "n": format(int(n), "x"),
        "p": format(int(p_comp), "x"),
        "q": format(int(q), "x"),
    }
    with pytest.raises(InvalidMessage, match="not prime"):
        PrivateKey.from_json(bad, allow_insecure=True)
    wrong_n = dict(ok, n=format(int(sk.public_key.n) + 2, "x"))
    with pytest.raises(InvalidMessage, match="does not equal"):
        PrivateKey.from_json(wrong_n, allow_insecure=True)


def test_private_key_from_proto_checks_the_factors(keypair512):
    _, sk = keypair512
    assert keypair_from_proto(keypair_to_proto(sk), allow_insecure=True).q == sk.q
    p_comp, q, n = _composite_factor_key(keypair512)
    from smcdp.crypto.encoding import int_to_bytes

    msg = pb.PaillierKeyPair(n=int_to_bytes(n), p=int_to_bytes(p_comp), q=int_to_bytes(q))
    with pytest.raises(InvalidMessage, match="not prime"):
        keypair_from_proto(msg, allow_insecure=True)
    # equal primes
    msg = pb.PaillierKeyPair(n=int_to_bytes(sk.p * sk.p), p=int_to_bytes(sk.p), q=int_to_bytes(sk.p))
    with pytest.raises(InvalidMessage):
        keypair_from_proto(msg, allow_insecure=True)


# ----------------------------------------------------------------------------- vectors and fixed point
@pytest.mark.parametrize("slot_bits", [0, 1])
def test_packed_vector_with_too_narrow_slots_is_invalid(keypair512, slot_bits):
    pk, _ = keypair512
    v = EncryptedVector.encrypt_ints(pk, [1, 2, 3, 4], packing=Packing(2, 20))
    msg = v.to_proto()
    msg.slot_bits = slot_bits
    with pytest.raises(InvalidMessage, match="at least 2 bits"):
        EncryptedVector.from_proto(msg, pk)
    with pytest.raises(ValueError):
        Packing(2, slot_bits)


def test_packing_too_narrow_for_the_declared_bound_is_invalid(keypair512):
    pk, _ = keypair512
    msg = EncryptedVector.encrypt_ints(pk, [1, 2, 3, 4], packing=Packing(2, 8)).to_proto()
    with pytest.raises(InvalidMessage, match="too narrow"):
        EncryptedVector.from_proto(msg, pk, bound=1 << 20)


def test_decode_fixed_below_the_subnormal_range_of_the_exponent():
    assert decode_fixed([2**900], -1100)[0] == 2.0**-200
    assert decode_fixed([-(2**900)], -1100)[0] == -(2.0**-200)
    assert decode_fixed([1], -1074)[0] == 5e-324
    assert decode_fixed([2**2000], 0)[0] == float("inf")


@settings(max_examples=400, deadline=None)
@given(v=st.integers(min_value=-(1 << 3000), max_value=1 << 3000), e=st.integers(min_value=-4096, max_value=64))
def test_decode_fixed_is_correctly_rounded(v, e):
    exact = Fraction(v) * Fraction(2) ** e
    try:
        want = float(exact)  # Fraction -> float rounds correctly
    except OverflowError:
        want = float("inf") if v > 0 else float("-inf")
    assert decode_fixed([v], e)[0] == want


def test_ciphertext_vector_has_no_offset_field():
    names = {f.name for f in pb.CiphertextVector.DESCRIPTOR.fields}
    assert "offset" not in names
    text = (REPO / "protos" / "smcdp" / "v1" / "messages.proto").read_text()
    assert "bytes offset" not in text and "balanced signed digits" in text


@pytest.mark.parametrize(
    "call",
    [
        lambda pk, v: EncryptedVector.encrypt(pk, [1.5] * 4, frac_bits=-2),  # exponent 2
        lambda pk, v: EncryptedVector.encrypt_ints(pk, [1, 2], exponent=-4097),
        lambda pk, v: EncryptedVector.zeros(pk, 4, exponent=1),
        lambda pk, v: v.mul_scalar(2.0, frac_bits=40),  # -4090 - 40
        lambda pk, v: v.mul_elementwise([1.0] * 4, frac_bits=7),
        lambda pk, v: v.matvec([[1.0] * 4], frac_bits=7),
    ],
)
def test_an_exponent_the_wire_refuses_is_refused_before_any_ciphertext_is_computed(call):
    """A vector's exponent lies in [-4096, 0] (what from_proto takes): a call that would make another is refused
    up front, naming it -- not after encrypting or exponentiating every element (a review found 0.5 s of
    encryption before the refusal)."""
    from smcdp.crypto import counters

    pk, _ = generate_keypair(256, allow_insecure=True)
    v = EncryptedVector.encrypt_ints(pk, [1, 2, 3, 4], exponent=-4090)
    before = counters.snapshot()
    with pytest.raises(ValueError, match=r"exponent|frac_bits"):
        call(pk, v)
    after = counters.snapshot()
    assert after["encrypt"] == before["encrypt"] and after["mul"] == before["mul"], (before, after)


# ----------------------------------------------------------------------------- a review's minor notes (2026-12-05)
@pytest.mark.parametrize("flag", [True, False, np.bool_(True)])
def test_a_bool_is_no_integer_argument(keypair512, flag):
    """``raw_encrypt(True)`` encrypted 1 and a count of ``True`` made one of something: a bool is refused."""
    pk, _ = keypair512
    with pytest.raises(TypeError, match="bool"):
        as_int(flag)
    with pytest.raises(TypeError, match="bool"):
        pk.raw_encrypt(flag)
    with pytest.raises(TypeError, match="bool"):
        EncryptedVector.zeros(pk, flag)


@settings(max_examples=300, deadline=None)
@given(v=st.integers(min_value=-(1 << 200), max_value=1 << 200), f=st.integers(min_value=-300, max_value=300))
def test_encode_fixed_rounds_integers_with_negative_frac_bits_as_floats(v, f):
    """round(v · 2^f), half away from zero, for integers too -- negative ``frac_bits`` said "negative shift count"."""
    exact = Fraction(v) * Fraction(2) ** f
    q, r = divmod(abs(exact.numerator), exact.denominator)
    want = (q + (2 * r >= exact.denominator)) * (1 if v >= 0 else -1)
    assert encode_fixed([v], f) == [want]
    assert encode_fixed(np.array([v], dtype=object), f) == [want]
    if abs(v) < 1 << 62:
        assert encode_fixed(np.array([v], dtype=np.int64), f) == [want]
    if abs(v) < 1 << 53:  # the float is v exactly: the same rounding
        assert encode_fixed([float(v)], f) == [want]


def test_decode_signed_and_combine_halves_refuse_what_is_no_decryption(keypair512):
    """Outside [0, n) (or [0, p) x [0, q)) nothing was decrypted: InvalidMessage, as for every other value that is
    no ciphertext, from the single key and from a threshold key alike."""
    pk, sk = keypair512
    for m in (-1, pk.n, pk.n + 5):
        with pytest.raises(InvalidMessage, match=r"\[0, n\)"):
            sk.decode_signed(m)
        with pytest.raises(InvalidMessage, match=r"\[0, n\)"):
            threshold_decode_signed(pk, m)
    for mp, mq in ((-1, 0), (sk.p, 0), (0, sk.q)):
        with pytest.raises(InvalidMessage, match="halves"):
            sk.combine_halves(mp, mq)
    for m in (0, 1, 7, pk.n - 1, pk.n - 7, pk.max_int):
        assert threshold_decode_signed(pk, m) == sk.decode_signed(m)
