"""The public API of :mod:`smcdp.crypto` (its ``__all__``: Paillier keys of both kinds, key files, encrypted vectors,
packing and fixed-point encoding, the obfuscator pool, the crypto threads) fuzzed argument by argument: a fixed,
deterministic list of cases, each one public call with one argument replaced by an odd value -- a wrong type, None,
bool, numpy scalars and arrays, NaN / ±inf / -0.0, 0, negatives, 2^k around every documented bound (n/3, a slot's
capacity, the wire format's exponent range, the 128- and 2048-bit key floors, a subgroup key's l), huge integers,
empty and odd sequences, objects of another key -- plus the cross-key and cross-layout combinations (vectors under
two keys, two packings, two exponents; a private key, an obfuscator pool or a file of another key).

The oracle, per case: the call either

* returns what the plaintext computation gives -- a vector decrypts (with the right key, exactly, as integers and
  as floats) to the plaintext result, its bound covers its values and stays within its capacity; a key encrypts and
  decrypts; a file loads back as the key saved -- or
* refuses with TypeError / ValueError or an :class:`~smcdp.errors.SmcdpError` carrying a message (a case may allow
  one more class where Python's protocols say so: IndexError for an index out of range, OSError for a path).

Never: AssertionError, ZeroDivisionError, IndexError, KeyError, AttributeError, a plain OverflowError, RecursionError
or MemoryError escaping (the origin, :func:`~tests.support.known_bugs.smcdp_origin`, is in the failure); a hang
(``time_limit``); a crash (the cases whose sizes reach GMP -- a key of more than 4096 bits -- run in a child
process); a result without a meaning for the argument (2.5 where an integer is expected, a NaN, a complex number,
a string taken as a sequence) that is returned instead of refused.

What the oracle lets pass either way (a refusal or the value): bool as 0/1, an integral float or a numeric string
for an integer, a 0-d array for a scalar, a 2-D array flattened where a vector of values is taken, a ciphertext
>= n² or negative read modulo n², and a standard key's decryption of a unit below n² of another key (no key can
tell it from its own).  Refusals a standard key could make cheaply (0, non-units) are required.

Keys are test keys (``allow_insecure=True``, 256 bits; 768 and 1408 bits where the C accelerator's IFMA products
take n² or p²), generated once per process from fixed seeds.  Known bugs are ``xfail(strict=True)`` in
``KNOWN_BUGS`` (id -> diagnosis; ``_BUGS`` groups them by diagnosis, "[bug]" or "[judgement]"): each flips to XPASS
when fixed.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import json
import math
import os
import random
import subprocess
import sys
import textwrap
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

import gmpy2
import numpy as np
import pytest
from gmpy2 import mpz

import smcdp.crypto as crypto
from smcdp.crypto import (
    UNPACKED,
    CryptoThreads,
    EncryptedVector,
    ObfuscatorPool,
    Packing,
    PrivateKey,
    PublicKey,
    decode_fixed,
    encode_fixed,
    generate_keypair,
    load_private_key,
    load_public_key,
    save_private_key,
    save_public_key,
)
from smcdp.errors import SmcdpError
from smcdp.v1 import messages_pb2 as pb
from tests.support.known_bugs import check_cases, params_with_known_bugs, smcdp_origin
from tests.support.limits import memory_cap, time_limit
from tests.support.paths import REPO

CASE_SECONDS = 5
#: what one call may allocate beyond what the process has mapped (a MemoryError past it is a bug)
MEMORY_MARGIN = 2 << 30
MPZ = type(mpz(0))

# ============================================================================ keys and vectors (built once, lazily)
#: name -> (bits, subgroup): 256-bit keys for almost everything; "big" for a foreign ciphertext that is >= n² of
#: the others; "ifma" (n² of 1536 bits) and "crt"/"sub-crt" (p² of 1408 bits) for the C accelerator's IFMA products
KEY_SPECS = {
    "std": (256, False),
    "other": (256, False),
    "sub": (256, True),
    "big": (512, False),
    "ifma": (768, False),
    "crt": (1408, False),
    "sub-crt": (1408, True),
}


@dataclass(frozen=True)
class Pair:
    pk: PublicKey
    sk: PrivateKey


_KEYS: dict[str, Pair] = {}


def key(name: str) -> Pair:
    if name not in _KEYS:
        bits, sub = KEY_SPECS[name]
        pk, sk = generate_keypair(bits, allow_insecure=True, rng=random.Random(f"crypto-api-fuzz-{name}"), subgroup=sub)
        pk.plan(64)  # small tables: a 1408-bit key's public table would otherwise take ~100 MB
        sk.plan(64)
        _KEYS[name] = Pair(pk, sk)
    return _KEYS[name]


def pk(name: str = "std") -> PublicKey:
    return key(name).pk


def sk(name: str = "std") -> PrivateKey:
    return key(name).sk


def fresh_pk(name: str = "std") -> PublicKey:
    """Another instance of a key (same n, its own fixed base and table), for the calls that change a key's state."""
    p = pk(name)
    out = PublicKey(int(p.n), p.subgroup_base, p.subgroup_bits) if p.subgroup else PublicKey(int(p.n))
    out.plan(16)
    return out


X = [5, -7, 11]
PACK = Packing(4, 16)
PX = [5, -7, 11, 0, -32767]


def vec(kname: str = "std", ints=None, exponent: int = 0, packing: Packing = UNPACKED, bound=None) -> EncryptedVector:
    return EncryptedVector.encrypt_ints(
        pk(kname), X if ints is None else ints, exponent=exponent, packing=packing, bound=bound
    )


def pvec(kname: str = "std", ints=None) -> EncryptedVector:
    return vec(kname, PX if ints is None else ints, packing=PACK)


_CTS: dict[tuple[int, str], mpz] = {}


def ct(m: int, kname: str = "std") -> mpz:
    """An encryption of m, the same one on every call (a case's run and its check see one value)."""
    if (m, kname) not in _CTS:
        _CTS[m, kname] = pk(kname).raw_encrypt(m)
    return _CTS[m, kname]


# ============================================================================ exact meanings of odd values
class NoValue(Exception):
    """The argument has no value of the kind the parameter takes (2.5 for an integer, NaN, a complex number, a
    string for a sequence of numbers): the call must refuse it."""


class Wrong(Exception):
    """A returned result that is not the plaintext computation's."""


def exact_int(x: Any) -> int:
    """The integer ``x`` stands for (bool as 0/1, an integral float, a numeric string: a call may take it or refuse
    it), else NoValue."""
    if isinstance(x, (bool, np.bool_)):
        return int(x)
    if isinstance(x, (int, np.integer, MPZ)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        if math.isfinite(x) and float(x).is_integer():
            return int(x)
        raise NoValue(f"{x!r} is not an integer")
    if isinstance(x, Fraction) and x.denominator == 1:
        return int(x)
    if isinstance(x, Decimal) and x.is_finite() and x == x.to_integral_value():
        return int(x)
    if isinstance(x, str):
        try:
            return int(x)
        except ValueError:
            raise NoValue(f"{x!r} is not an integer") from None
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return exact_int(x.item())
    raise NoValue(f"{type(x).__name__} {_short(x)} is not an integer")


def _real(x: Any) -> tuple[str, Any]:
    """("int", i) or ("float", f): a finite real value as encode_fixed documents it (floats rounded from the
    double, integers exact), else NoValue."""
    if isinstance(x, (bool, np.bool_, int, np.integer, MPZ)):
        return "int", int(x)
    if isinstance(x, (float, np.floating, Fraction, Decimal)):
        f = float(x)
        if not math.isfinite(f) or (isinstance(x, Decimal) and not x.is_finite()):
            raise NoValue(f"{x!r} is not finite")
        return "float", f
    if isinstance(x, (complex, np.complexfloating)):
        if x.imag == 0:
            return _real(float(x.real))
        raise NoValue(f"{x!r} is complex")
    if isinstance(x, str):
        try:
            return _real(float(x))
        except ValueError:
            raise NoValue(f"{x!r} is not a number") from None
    if isinstance(x, np.ndarray) and x.ndim == 0:
        return _real(x.item())
    raise NoValue(f"{type(x).__name__} {_short(x)} is not a real number")


def flat_reals(values: Any) -> list[tuple[str, Any]]:
    """The values an ArrayLike stands for, flattened in C order (nested lists, arrays of any dtype)."""
    if isinstance(values, np.ndarray):
        if values.dtype.kind in "mM":
            raise NoValue(f"a {values.dtype} array holds no numbers")
        if values.dtype.kind in "iub":
            return [("int", int(v)) for v in values.ravel().tolist()]
        return [_real(v) for v in values.ravel().tolist()]
    if isinstance(values, (list, tuple)):
        return [r for v in values for r in flat_reals(v)]
    if isinstance(values, (set, dict, bytes)) or inspect.isgenerator(values):
        raise NoValue(f"a {type(values).__name__} is not an array of numbers")
    return [_real(values)]


def round_half_away(fr: Fraction) -> int:
    q, r = divmod(abs(fr.numerator), fr.denominator)
    if 2 * r >= fr.denominator:
        q += 1
    return q if fr >= 0 else -q


def encode_one(kv: tuple[str, Any], frac_bits: int) -> int:
    """round(v · 2^frac_bits), half away from zero, exactly (the value encode_fixed documents)."""
    _kind, v = kv
    if v == 0:
        return 0
    if abs(frac_bits) > 1 << 20:
        if frac_bits < 0:
            return 0  # |v| < 2^1100 times 2^-(2^20) rounds to 0
        raise NoValue(f"{v!r} times 2^{frac_bits} fits no key")
    return round_half_away(Fraction(v) * Fraction(2) ** frac_bits)


def encode(values: Any, frac_bits: Any) -> list[int]:
    fb = exact_int(frac_bits)
    return [encode_one(kv, fb) for kv in flat_reals(values)]


def scaled_float(i: int, e: int) -> float:
    """i · 2^e as the correctly rounded float (±inf beyond the range)."""
    if i == 0:
        return 0.0
    top = i.bit_length() + e
    if top > 1100:
        return math.inf if i > 0 else -math.inf
    if top < -1200:
        return 0.0 if i > 0 else -0.0
    fr = Fraction(i) * Fraction(2) ** e
    try:
        return float(fr)
    except OverflowError:
        return math.inf if i > 0 else -math.inf


def _short(x: Any, n: int = 120) -> str:
    try:
        s = repr(x)
    except ValueError:  # an int beyond the str conversion limit
        return f"<{type(x).__name__} of {int(x).bit_length()} bits>"
    return s if len(s) <= n else s[: n - 3] + "..."


# ============================================================================ checks
Check = Callable[[Any], None]


def refuse(why: str) -> Check:
    def check(out: Any) -> None:
        raise Wrong(f"returned {_short(out)} instead of refusing: {why}")

    return check


def anything(out: Any) -> None:
    """Any result is right (the call's meaning does not depend on the odd value: a label, a hint)."""


def wants(expected: Callable[[], Any], compare: Callable[[Any, Any], None]) -> Check:
    """``compare(out, expected())``; a NoValue from ``expected`` means there is no right result to return."""

    def check(out: Any) -> None:
        try:
            want = expected()
        except NoValue as exc:
            raise Wrong(f"returned {_short(out)} for an argument that has no value here ({exc})") from None
        compare(out, want)

    return check


def equal(out: Any, want: Any) -> None:
    if isinstance(want, list) and isinstance(out, (list, tuple)):
        ok = len(out) == len(want) and all(type(o) is not float and o == w for o, w in zip(out, want))
    else:
        ok = not isinstance(out, float) and out == want
    if not ok:
        raise Wrong(f"returned {_short(out)}, the plaintext computation gives {_short(want)}")


def decrypts(kname: str, signed: bool = True) -> Callable[[Any, Any], None]:
    """compare: ``out`` is a raw ciphertext under ``kname`` of ``want`` (a signed value, or an int mod n)."""

    def compare(out: Any, want: Any) -> None:
        if not isinstance(out, (int, MPZ)) or isinstance(out, bool):
            raise Wrong(f"returned {type(out).__name__} {_short(out)}, not a ciphertext")
        p = key(kname)
        if not 0 < out < p.pk.nsquare or gmpy2.gcd(out, p.pk.n) != 1:
            raise Wrong(f"returned {_short(out)}, which is not a ciphertext under the key (outside Z*_n²)")
        try:
            got = p.sk.raw_decrypt_signed(out) if signed else int(p.sk.raw_decrypt(out))
        except Exception as exc:  # noqa: BLE001 - a result that does not decrypt is the finding
            raise Wrong(f"returned a ciphertext that does not decrypt: {type(exc).__name__}: {exc}") from None
        w = want if signed else want % int(p.pk.n)
        if got != w:
            raise Wrong(f"returned an encryption of {_short(got)}, the plaintext computation gives {_short(w)}")

    return compare


def check_vec(
    out: Any, kname: str, ints: list[int], exponent: int | None, packing: Packing = UNPACKED, *, actual_bound=True
) -> None:
    """``out`` is a vector under key ``kname`` that decrypts to ``ints`` (and to their floats at ``exponent``), with
    a bound that covers them (``actual_bound``: else only a non-negative one) within its capacity."""
    if not isinstance(out, EncryptedVector):
        raise Wrong(f"returned {type(out).__name__} {_short(out)}, not an EncryptedVector")
    p = key(kname)
    if out.public_key != p.pk:
        raise Wrong(f"the result is labelled with {out.public_key!r}, the operands' key is {p.pk!r}")
    if out.packing != packing:
        raise Wrong(f"the result has packing {out.packing}, expected {packing}")
    if exponent is not None and out.exponent != exponent:
        raise Wrong(f"the result has exponent {out.exponent!r}, the plaintext computation gives {exponent}")
    try:
        got = out.decrypt_ints(p.sk)
    except Exception as exc:  # noqa: BLE001 - a result that does not decrypt is the finding
        raise Wrong(f"the result does not decrypt: {type(exc).__name__}: {str(exc)[:200]}") from None
    if got != ints:
        raise Wrong(f"the result decrypts to {_short(got)}, the plaintext computation gives {_short(ints)}")
    if len(out) != len(ints):
        raise Wrong(f"len() is {len(out)} for {len(ints)} values")
    b = out.bound
    need = max((abs(v) for v in ints), default=0) if actual_bound else 0
    if not isinstance(b, int) or not need <= b <= out.capacity:
        raise Wrong(f"bound {_short(b)} does not lie in [{need}, capacity {out.capacity}]: later operations can wrap")
    try:
        floats = out.decrypt(p.sk)
    except Exception as exc:  # noqa: BLE001
        raise Wrong(f"the result's floats do not decode: {type(exc).__name__}: {str(exc)[:200]}") from None
    want = [scaled_float(i, out.exponent) for i in ints]
    if [float(f) for f in floats] != want:
        raise Wrong(f"the result decodes to {_short(list(floats))}, the plaintext computation gives {_short(want)}")


def vec_wants(kname: str, ints: Callable[[], list[int]], exponent: Callable[[], int] | int | None, **kw) -> Check:
    def compare(out: Any, want: tuple[list[int], int | None]) -> None:
        check_vec(out, kname, want[0], want[1], **kw)

    def expected() -> tuple[list[int], int | None]:
        e = exponent() if callable(exponent) else exponent
        return ints(), e

    return wants(expected, compare)


# ============================================================================ the case type and its runner
@dataclass(frozen=True)
class Case:
    id: str
    #: the public callable under test ("EncryptedVector.mul_int"), for the coverage test
    target: str
    #: the call, given a scratch directory (also the working directory)
    run: Callable[[Path], Any]
    #: raises Wrong unless what the call returned is the plaintext computation's result
    check: Check
    #: refusals beyond TypeError, ValueError and SmcdpError that Python's protocols name (IndexError for an index)
    allow: tuple[type[BaseException], ...] = ()
    seconds: int = CASE_SECONDS
    #: run ``run``'s call in a child process (where GMP may abort the process): the source of a statement binding
    #: ``out``; ``check`` then gets a dict of what the child reports about ``out``
    child: str | None = None


REFUSALS = (TypeError, ValueError)


def _refused_clearly(exc: BaseException, case: Case) -> bool:
    if isinstance(exc, SmcdpError) or (isinstance(exc, REFUSALS + case.allow) and not isinstance(exc, AssertionError)):
        assert str(exc).strip(), f"{type(exc).__name__} without a message from {smcdp_origin(exc)}"
        return True
    return False


def run_case(case: Case, tmp: Path) -> None:
    if case.child is not None:
        return run_child_case(case, tmp)
    with contextlib.chdir(tmp), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with time_limit(case.seconds, case.id), memory_cap(MEMORY_MARGIN):
                out = case.run(tmp)
        except KeyboardInterrupt:
            raise
        except BaseException as exc:  # noqa: BLE001 - the bug classes are what this test looks for
            if isinstance(exc, AssertionError) and "took more than" in str(exc):
                pytest.fail(f"hang: {exc} (at {smcdp_origin(exc)})")
            if _refused_clearly(exc, case):
                return
            pytest.fail(f"raw {type(exc).__name__} escaped at {smcdp_origin(exc)}: {str(exc)[:300]}")
        try:
            with time_limit(4 * case.seconds, f"{case.id}: checking the result"), memory_cap(MEMORY_MARGIN):
                case.check(out)
        except Wrong as exc:
            pytest.fail(f"silently wrong: {exc}")
        except Exception as exc:  # noqa: BLE001 - the result does not even hold up to being checked
            pytest.fail(f"the result cannot be checked: {type(exc).__name__} at {smcdp_origin(exc)}: {str(exc)[:300]}")


_CHILD = """
import json, resource, sys, traceback
resource.setrlimit(resource.RLIMIT_AS, ({cap}, resource.RLIM_INFINITY))
sys.path.insert(0, {repo!r})
{imports}
try:
{body}
except BaseException as exc:
    where = [f"{{f.filename}}:{{f.lineno}}" for f in traceback.extract_tb(exc.__traceback__) if "/smcdp/" in f.filename]
    print(json.dumps({{"raised": type(exc).__name__, "smcdp": isinstance(exc, SmcdpError), "msg": str(exc)[:300],
                      "where": where[-1] if where else "?"}}))
else:
    print(json.dumps({{"returned": report(out)}}))
"""

_CHILD_REFUSALS = {"TypeError", "ValueError"}


def run_child_case(case: Case, tmp: Path) -> None:
    code = _CHILD.format(
        cap=4 << 30,
        repo=str(REPO),
        imports="import random\nfrom smcdp.crypto import generate_keypair\nfrom smcdp.errors import SmcdpError\n"
        "def report(out):\n    pk, sk = out\n    return {'bits': int(pk.bits), 'ok': bool(sk.p * sk.q == pk.n)}",
        body=textwrap.indent(case.child, "    "),
    )
    try:
        proc = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=case.seconds, cwd=tmp
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"hang: {case.child.strip()} took more than {case.seconds} s (in a child process)")
    if proc.returncode != 0:
        pytest.fail(f"crash: the child process ended with status {proc.returncode}: {proc.stderr.strip()[-300:]}")
    verdict = json.loads(proc.stdout.strip().splitlines()[-1])
    if "raised" in verdict:
        if verdict["smcdp"] or verdict["raised"] in _CHILD_REFUSALS:
            assert verdict["msg"].strip(), f"{verdict['raised']} without a message"
            return
        pytest.fail(f"raw {verdict['raised']} escaped at {verdict['where']}: {verdict['msg']}")
    try:
        case.check(verdict["returned"])
    except Wrong as exc:
        pytest.fail(f"silently wrong: {exc}")


# ============================================================================ odd values
def _obj() -> object:
    return object()


#: odd scalars, as factories (a fresh object per run: generators, arrays); most stand for 3 or for nothing
SCALARS: dict[str, Callable[[], Any]] = {
    "none": lambda: None,
    "true": lambda: True,
    "false": lambda: False,
    "str": lambda: "x",
    "numstr": lambda: "3",
    "bytes": lambda: b"\x03",
    "float-half": lambda: 2.5,
    "float-int": lambda: 3.0,
    "neg-zero": lambda: -0.0,
    "nan": lambda: math.nan,
    "inf": lambda: math.inf,
    "-inf": lambda: -math.inf,
    "np-int64": lambda: np.int64(3),
    "np-uint8": lambda: np.uint8(3),
    "np-float-half": lambda: np.float64(2.5),
    "np-float32-int": lambda: np.float32(3.0),
    "np-bool": lambda: np.bool_(True),
    "np-0d": lambda: np.array(3),
    "np-1elem": lambda: np.array([3]),
    "np-array": lambda: np.array([1, 2]),
    "list": lambda: [3],
    "complex": lambda: 3 + 1j,
    "fraction-half": lambda: Fraction(5, 2),
    "decimal-half": lambda: Decimal("2.5"),
    "mpz": lambda: mpz(3),
    "object": _obj,
}
#: integers around the usual edges
INTS: dict[str, Callable[[], Any]] = {
    "zero": lambda: 0,
    "one": lambda: 1,
    "neg": lambda: -1,
    "2**31": lambda: 2**31,
    "2**63": lambda: 2**63,
    "2**64+1": lambda: 2**64 + 1,
    "2**1000": lambda: 2**1000,
    "-2**1000": lambda: -(2**1000),
}
ODD = {**SCALARS, **INTS}


def pick(names: str, table: dict[str, Callable[[], Any]] = ODD) -> dict[str, Callable[[], Any]]:
    return {n: table[n] for n in names.split()}


#: the scalars an integer parameter is fuzzed with (everything but the arrays' repeats)
INT_ARGS = pick(
    "none true false str numstr bytes float-half float-int neg-zero nan inf -inf np-int64 np-uint8 np-float-half "
    "np-float32-int np-bool np-0d np-1elem np-array list complex fraction-half decimal-half mpz object "
    "zero one neg 2**31 2**63 2**64+1 2**1000 -2**1000"
)
#: the scalars the secondary integer parameters are fuzzed with
INT_FEW = pick(
    "none true str numstr float-half float-int nan inf -inf np-int64 np-uint8 np-float-half np-0d np-1elem complex "
    "fraction-half mpz zero neg 2**31 2**63 2**64+1 2**1000 -2**1000"
)
#: the arrays the ``values`` of encrypt / add_plain / encode_fixed are fuzzed with (three values each, where a length
#: matters)
VALUES: dict[str, Callable[[], Any]] = {
    "floats": lambda: [0.5, -1.25, 3.0],
    "ints": lambda: [5, -7, 11],
    "np-floats": lambda: np.array([0.5, -1.25, 3.0]),
    "np-int8": lambda: np.array([-128, 127, 0], dtype=np.int8),
    "np-uint64-max": lambda: np.array([2**64 - 1, 0, 1], dtype=np.uint64),
    "np-int64-min": lambda: np.array([-(2**63), 0, 1], dtype=np.int64),
    "np-float16": lambda: np.array([0.5, 65504.0, -0.0], dtype=np.float16),
    "np-float32": lambda: np.array([1e-8, 3.0e38, -2.5], dtype=np.float32),
    "np-longdouble": lambda: np.array([1.5, -2.25, 1e-3], dtype=np.longdouble),
    "np-bool": lambda: np.array([True, False, True]),
    "bools": lambda: [True, False, True],
    "nan": lambda: [1.0, math.nan, 2.0],
    "inf": lambda: [1.0, math.inf, 2.0],
    "-inf": lambda: [-math.inf, 1.0, 2.0],
    "neg-zero": lambda: [-0.0, 0.0, -0.0],
    "huge-float": lambda: [1e308, 0.0, 1.0],
    "subnormal": lambda: [5e-324, -5e-324, 0.0],
    "half-ulp": lambda: [2.0**-9, -(2.0**-9), 3 * 2.0**-9],
    "big-ints": lambda: [2**63 + 1, -1, 0],
    "big-mpz": lambda: [mpz(2**63 + 1), mpz(-1), mpz(0)],
    "huge-int": lambda: [2**1000, 0, 1],
    "none": lambda: None,
    "list-none": lambda: [1.0, None, 2.0],
    "str": lambda: "x",
    "numstrs": lambda: ["1.5", "2", "-0.25"],
    "strs": lambda: ["a", "b", "c"],
    "complex": lambda: [1 + 2j, 0j, 1j],
    "complex-real": lambda: [1 + 0j, 2 + 0j, 0j],
    "object-fraction": lambda: np.array([Fraction(1, 3), Fraction(-1, 2), 1], dtype=object),
    "decimals": lambda: [Decimal("0.1"), Decimal("-2.5"), Decimal(3)],
    "decimal-nan": lambda: [Decimal("NaN"), Decimal(1), Decimal(2)],
    "object-mixed": lambda: np.array([1, 2.5, np.int64(-3)], dtype=object),
    "object-nan": lambda: np.array([1, math.nan, 2], dtype=object),
    "object-inf": lambda: np.array([1, 2, -math.inf], dtype=object),
    "object-none": lambda: np.array([1, None, 2], dtype=object),
    "datetime": lambda: np.array(["2020-01-01", "1970-01-02", "1970-01-01"], dtype="datetime64[D]"),
    "2d": lambda: [[0.5], [-1.25], [3.0]],
    "ragged": lambda: [[0.5], [-1.25, 3.0]],
    "set": lambda: {0.5, -1.25, 3.0},
    "dict": lambda: {"a": 0.5},
    "generator": lambda: (v for v in [0.5, -1.25, 3.0]),
    "object": _obj,
    "empty": lambda: [],
    "np-empty": lambda: np.zeros(0),
    "scalar": lambda: 2.5,
    "np-0d": lambda: np.array(2.5),
    "two": lambda: [0.5, -1.25],
    "four": lambda: [0.5, -1.25, 3.0, 1.0],
}
#: the values the secondary array arguments take (add_plain, mul_elementwise, dot)
VALUES_FEW = (
    "floats ints np-int64-min np-bool nan inf neg-zero huge-float big-ints big-mpz huge-int none str numstrs complex "
    "datetime 2d ragged set generator empty scalar np-0d two four"
)
#: the sizes a length takes beyond the scalars: the ones that allocate
LENGTHS = pick("zero one neg 2**63 2**64+1 2**1000")


# ============================================================================ the cases, target by target
CaseList = list[Case]


def _add(cases: CaseList, target: str, what: str, run, check: Check, **kw) -> None:
    cases.append(Case(f"{target}-{what}", target, run, check, **kw))


# ---------------------------------------------------------------------------- generate_keypair
def _keypair_compare(bits: int, kind: str) -> Callable[[Any, Any], None]:
    def compare(out: Any, want: int) -> None:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise Wrong(f"returned {_short(out)}, not (public key, private key)")
        p, s = out
        if p.bits != want or s.p * s.q != p.n or not gmpy2.is_prime(s.p) or not gmpy2.is_prime(s.q):
            raise Wrong(f"made a {p.bits}-bit key for bits={want}")
        if p.kind != kind:
            raise Wrong(f"made a {p.kind} key, expected {kind}")
        if s.raw_decrypt_signed(p.raw_encrypt(-5)) != -5:
            raise Wrong("the key does not decrypt its own encryption")

    return compare


def _child_bits_check(out: dict) -> None:
    raise Wrong(f"made a key of {out['bits']} bits: a size no key file, peer or table can take")


def cases_generate_keypair(cases: CaseList) -> None:
    t = "generate_keypair"

    def gen(bits_f, insecure=True, rng_f=lambda: random.Random(7), subgroup=False, progress=False):
        return lambda tmp: generate_keypair(
            bits_f(), allow_insecure=insecure, rng=rng_f(), subgroup=subgroup, progress=progress
        )

    for name, f in pick(
        "none true str float-half float-int np-int64 mpz nan zero neg 2**31 2**63 2**64+1 2**1000 -2**1000"
    ).items():
        v = f()
        if isinstance(v, int) and not isinstance(v, bool) and v > 4096:
            # mpz(3) << (bits - 2) and next_prime: GMP aborts the process or computes for hours
            _add(
                cases,
                t,
                f"bits-{name}",
                None,
                _child_bits_check,
                child=f"out = generate_keypair({v!r}, allow_insecure=True, rng=random.Random(7))",
                seconds=6,
            )
            continue
        _add(cases, t, f"bits-{name}", gen(f), wants(lambda f=f: exact_int(f()), _keypair_compare(0, "standard")))
    for bits in (2, 127, 128, 129, 255, 256, 257):
        _add(
            cases, t, f"bits-{bits}", gen(lambda b=bits: b), wants(lambda b=bits: b, _keypair_compare(bits, "standard"))
        )
    for bits in (128, 129, 130, 131, 256):
        _add(
            cases,
            t,
            f"bits-{bits}-subgroup",
            gen(lambda b=bits: b, subgroup=True),
            wants(lambda b=bits: b, _keypair_compare(bits, "subgroup")),
        )
    # the floor: below 2048 bits only with allow_insecure
    _add(
        cases, t, "bits-2047-secure", gen(lambda: 2047, insecure=False), refuse("a 2047-bit key without allow_insecure")
    )
    for name, v in {"none": None, "str-false": "false", "one": 1, "np-bool": np.bool_(True), "empty": []}.items():
        opted = v is True or v == 1 or isinstance(v, np.bool_)
        check = (
            wants(lambda: 256, _keypair_compare(256, "standard"))
            if opted
            else refuse(f"allow_insecure={v!r} is no opt-in to a 256-bit key")
        )
        _add(cases, t, f"allow_insecure-{name}", gen(lambda: 256, insecure=v), check)
    rngs = {
        "none": lambda: None,
        "seeded": lambda: random.Random(3),
        "system": random.SystemRandom,
        "module-random": lambda: random,
        "int": lambda: 5,
        "str": lambda: "seed",
        "numpy-generator": lambda: np.random.default_rng(1),
        "numpy-legacy": lambda: np.random.RandomState(1),
        "object": _obj,
    }
    for name, f in rngs.items():
        _add(cases, t, f"rng-{name}", gen(lambda: 256, rng_f=f), wants(lambda: 256, _keypair_compare(256, "standard")))
    for name, v, kind in (("none", None, "standard"), ("one", 1, "subgroup"), ("np-bool", np.bool_(True), "subgroup")):
        _add(
            cases, t, f"subgroup-{name}", gen(lambda: 256, subgroup=v), wants(lambda: 256, _keypair_compare(256, kind))
        )
    _add(
        cases,
        t,
        "subgroup-str-false",
        gen(lambda: 256, subgroup="false"),
        refuse("subgroup='false' made a subgroup key"),
    )
    _add(
        cases,
        t,
        "progress-true",
        gen(lambda: 256, progress=True),
        wants(lambda: 256, _keypair_compare(256, "standard")),
    )


# ---------------------------------------------------------------------------- PublicKey(...)
def _pubkey_compare(kname: str | None, subgroup: bool) -> Callable[[Any, Any], None]:
    def compare(out: Any, want: tuple) -> None:
        n, base, bits = want
        if not isinstance(out, PublicKey) or out.n != n:
            raise Wrong(f"returned {_short(out)} for n = {_short(n)}")
        if out.subgroup != subgroup or (subgroup and (out.subgroup_base != base or out.subgroup_bits != bits)):
            raise Wrong(f"made a {out.kind} key (l = {out.subgroup_bits!r}) for base {_short(base)}, l = {bits!r}")
        if n < 2**127:
            raise Wrong(f"made a key of a {int(n).bit_length()}-bit modulus (keys under 128 bits are refused)")
        if kname is not None and n == pk(kname).n and (not subgroup or base == pk(kname).subgroup_base):
            out.plan(16)
            if sk(kname).raw_decrypt_signed(out.raw_encrypt(-9)) != -9:
                raise Wrong("the key's encryptions do not decrypt under the key's owner")

    return compare


def cases_public_key(cases: CaseList) -> None:
    t = "PublicKey"

    def n_std() -> int:
        return int(pk().n)

    ns: dict[str, Callable[[], Any]] = {
        **pick("none true str bytes nan inf list zero one"),
        "numstr": lambda: str(n_std()),
        "hexstr": lambda: hex(n_std()),
        "float": lambda: float(n_std()),
        "np-float": lambda: np.float64(n_std()),
        "fraction-half": lambda: Fraction(2 * n_std() + 1, 2),
        "fraction-int": lambda: Fraction(n_std()),
        "decimal-half": lambda: Decimal(n_std()) + Decimal("0.5"),
        "decimal-int": lambda: Decimal(n_std()),
        "mpz": lambda: mpz(n_std()),
        "np-object-0d": lambda: np.array(n_std(), dtype=object),
        "valid": n_std,
        "neg-n": lambda: -n_std(),
        "even": lambda: n_std() + 1,
        "three": lambda: 3,
        "2**1000+1": lambda: 2**1000 + 1,
        "bool-true": lambda: True,
    }
    for name, f in ns.items():
        _add(
            cases,
            t,
            f"n-{name}",
            lambda tmp, f=f: PublicKey(f()),
            wants(lambda f=f: (_odd_positive(exact_int(f())), None, 0), _pubkey_compare("std", False)),
        )

    def sub_parts():
        p = pk("sub")
        return int(p.n), int(p.subgroup_base), p.subgroup_bits

    bases: dict[str, Callable[[], Any]] = {
        **pick("str nan inf -inf list complex object zero one neg true"),
        "valid": lambda: sub_parts()[1],
        "mpz": lambda: mpz(sub_parts()[1]),
        "numstr": lambda: str(sub_parts()[1]),
        "fraction-half": lambda: Fraction(2 * sub_parts()[1] + 1, 2),
        "two": lambda: 2,
        "n2-1": lambda: int(pk("sub").nsquare) - 1,
        "n2": lambda: int(pk("sub").nsquare),
        "n2+base": lambda: int(pk("sub").nsquare) + sub_parts()[1],
        "n": lambda: sub_parts()[0],
        "2**1000": lambda: 2**1000,
    }
    for name, f in bases.items():
        _add(
            cases,
            t,
            f"subgroup_base-{name}",
            lambda tmp, f=f: PublicKey(sub_parts()[0], f(), sub_parts()[2]),
            wants(lambda f=f: (sub_parts()[0], _base_ok(exact_int(f())), sub_parts()[2]), _pubkey_compare("sub", True)),
        )
    _add(
        cases,
        t,
        "subgroup_base-none",
        lambda tmp: PublicKey(sub_parts()[0], None, sub_parts()[2]),
        refuse("subgroup_bits given without a base is ignored: a standard key"),
    )
    bits: dict[str, Callable[[], Any]] = {
        **pick("none true str float-int np-int64 inf zero 2**1000"),
        **{str(b): (lambda b=b: b) for b in (62, 64, 65, 66, 126, 128)},
    }
    for name, f in bits.items():
        _add(
            cases,
            t,
            f"subgroup_bits-{name}",
            lambda tmp, f=f: PublicKey(sub_parts()[0], sub_parts()[1], f()),
            wants(lambda f=f: (sub_parts()[0], sub_parts()[1], _l_ok(f())), _pubkey_compare("sub", True)),
        )


def _odd_positive(n: int) -> int:
    if n <= 0 or n % 2 == 0:
        raise NoValue(f"{n} is no Paillier modulus")
    return n


def _base_ok(hs: int, n: int | None = None) -> int:
    n = mpz(pk("sub").n if n is None else n)
    if not (1 < hs < n * n) or gmpy2.gcd(hs, n) != 1 or gmpy2.gcd(hs * hs - 1, n) != 1:
        raise NoValue(f"{_short(hs)} is not a unit of Z_n² whose square is not 1 mod p, q")
    return hs


def _l_ok(bits: Any) -> int:
    if isinstance(bits, bool) or not isinstance(bits, int) or bits < 64 or bits % 2 or bits >= pk("sub").bits // 2:
        raise NoValue(f"l = {bits!r}")
    return bits


# ---------------------------------------------------------------------------- ciphertext arguments
def ct_meaning(c: Any, kname: str) -> tuple[str, int]:
    """("valid", m) for a ciphertext of m under the key; ("congruent", m) for one congruent to it mod n² (outside
    (0, n²): a call may reduce it or refuse it); ("invalid", 0) for 0 mod n² or a non-unit: the call must refuse."""
    v = exact_int(c)
    p = key(kname)
    r = v % p.pk.nsquare
    if r == 0 or gmpy2.gcd(r, p.pk.n) != 1:
        return "invalid", 0
    try:
        m = int(p.sk.raw_decrypt(r))
    except SmcdpError:  # a subgroup key's refusal of randomness outside its subgroup (documented)
        return "invalid", 0
    return ("valid" if r == v else "congruent"), m


#: ciphertext values, as factories given the key's name
CTS: dict[str, Callable[[str], Any]] = {
    "valid": lambda k: ct(7, k),
    "mpz": lambda k: mpz(ct(7, k)),
    "numstr": lambda k: str(ct(7, k)),
    "np-0d-object": lambda k: np.array(int(ct(7, k)), dtype=object),
    "one": lambda k: 1,
    "true": lambda k: True,
    "zero": lambda k: 0,
    "neg": lambda k: -int(ct(7, k)),
    "p": lambda k: sk(k).p,
    "n": lambda k: pk(k).n,
    "n2": lambda k: pk(k).nsquare,
    "n2+c": lambda k: pk(k).nsquare + ct(7, k),
    "n2-1": lambda k: pk(k).nsquare - 1,
    "2**1000": lambda k: 2**1000 + 1,
    "foreign-big": lambda k: int(ct(7, "big")),
    "float-half": lambda k: 2.5,
    "fraction-half": lambda k: Fraction(2 * int(ct(7, k)) + 1, 2),
    "float": lambda k: float(ct(7, k)),
    "nan": lambda k: math.nan,
    "inf": lambda k: math.inf,
    "none": lambda k: None,
    "str": lambda k: "x",
    "list": lambda k: [ct(7, k)],
    "object": lambda k: object(),
}


#: the ciphertext values the secondary targets take
CT_FEW = "valid zero p n2+c neg foreign-big float-half inf none str"


def ct_op_check(kname: str, f: Callable[[], Any], op: Callable[[int], int], compare_signed: bool = True) -> Check:
    """A raw operation on ciphertext ``f()``: a valid one gives an encryption of ``op(m)``; a congruent one that or
    a refusal; an invalid one a refusal."""

    def check(out: Any) -> None:
        try:
            kind, m = ct_meaning(f(), kname)
        except NoValue as exc:
            raise Wrong(f"returned {_short(out)} for a ciphertext argument that is no integer ({exc})") from None
        if kind == "invalid":
            raise Wrong(f"returned {_short(out)} for a ciphertext that is 0 mod n² or not a unit mod n")
        decrypts(kname, signed=compare_signed)(out, op(m))

    return check


def _signed(m: int, kname: str) -> int:
    """decode_signed's value of a decryption m in [0, n); NoValue in the overflow region (it must refuse)."""
    n, mi = int(pk(kname).n), int(pk(kname).max_int)
    if m <= mi:
        return m
    if m >= n - mi:
        return m - n
    raise NoValue("the overflow region")


# ---------------------------------------------------------------------------- PublicKey methods
def cases_public_key_methods(cases: CaseList) -> None:
    # plaintexts: every odd scalar, and the edges of [-max_int, max_int]
    plains: dict[str, Callable[[], Any]] = {
        **INT_FEW,
        "max_int": lambda: int(pk().max_int),
        "max_int+1": lambda: int(pk().max_int) + 1,
        "-max_int": lambda: -int(pk().max_int),
        "-max_int-1": lambda: -int(pk().max_int) - 1,
        "n": lambda: int(pk().n),
        "n//3": lambda: int(pk().n) // 3,
        "2**253": lambda: 2**253,
        "-2**253": lambda: -(2**253),
    }

    def in_range(f) -> int:
        m = exact_int(f())
        if abs(m) > pk().max_int:
            raise NoValue(f"|{_short(m)}| is above max_int")
        return m

    for name, f in plains.items():
        _add(
            cases,
            "PublicKey.raw_plain",
            f"m-{name}",
            lambda tmp, f=f: pk().raw_plain(f()),
            wants(lambda f=f: in_range(f) % int(pk().n), equal),
        )
        if (
            name
            not in [
                "none",
                "str",
                "float-half",
                "nan",
                "inf",
                "-inf",
                "np-float-half",
                "fraction-half",
                "mpz",
                "2**1000",
            ]
            and name in INT_FEW
        ):
            continue
        _add(
            cases,
            "PublicKey.raw_encrypt",
            f"m-{name}",
            lambda tmp, f=f: pk().raw_encrypt(f()),
            wants(lambda f=f: in_range(f), decrypts("std")),
        )
    for name in ["float-half", "nan", "inf", "none", "str", "max_int", "max_int+1", "-max_int-1", "2**1000"]:
        f = plains[name]
        _add(
            cases,
            "PublicKey.raw_encrypt_textbook",
            f"m-{name}",
            lambda tmp, f=f: pk().raw_encrypt_textbook(f()),
            wants(lambda f=f: in_range(f), decrypts("std")),
        )
        _add(
            cases,
            "PublicKey.raw_encrypt",
            f"m-{name}-ifma",
            lambda tmp, f=f: pk("ifma").raw_encrypt(f()),
            wants(lambda f=f: _in_range(f(), "ifma"), decrypts("ifma")),
        )
    for name, v in {"none": None, "str-no": "no", "zero": 0, "np-false": np.bool_(False), "list": []}.items():
        _add(
            cases,
            "PublicKey.raw_encrypt",
            f"obfuscate-{name}",
            lambda tmp, v=v: pk().raw_encrypt(5, obfuscate=v),
            wants(lambda: 5, decrypts("std")),
        )
    many: dict[str, Callable[[], Any]] = {
        "empty": lambda: [],
        "list": lambda: [1, -2],
        "none": lambda: None,
        "str": lambda: "12",
        "generator": lambda: (v for v in [1, -2]),
        "np-int": lambda: np.array([1, -2]),
        "np-float-half": lambda: np.array([2.5, -2.0]),
        "inf": lambda: [1, math.inf],
        "int": lambda: 5,
    }
    for name, f in many.items():
        _add(
            cases,
            "PublicKey.raw_encrypt_many",
            f"ms-{name}",
            lambda tmp, f=f: pk().raw_encrypt_many(f()),
            wants(lambda f=f: [_in_range(v, "std") for v in _int_list(_gen_list(f()))], _each_decrypts("std")),
        )
    # ciphertext arguments, on a standard and a subgroup key
    for kname in ("std", "sub"):
        for name, f in (
            pick(CT_FEW + " one mpz numstr n n2 n2-1 2**1000 fraction-half nan", CTS)
            if kname == "std"
            else pick(CT_FEW, CTS)
        ).items():
            g = lambda f=f, kname=kname: f(kname)  # noqa: E731
            sfx = f"c-{name}" + ("" if kname == "std" else "-subgroup")
            few = name in CT_FEW.split()
            _add(
                cases,
                "PublicKey.rerandomize",
                sfx,
                lambda tmp, g=g, kname=kname: pk(kname).rerandomize(g()),
                ct_op_check(kname, g, lambda m: m, compare_signed=False),
            )
            if kname == "std" and few:
                if name != "none":  # None is the documented default (no factor): "factor-default"
                    _add(
                        cases,
                        "PublicKey.obfuscator",
                        f"factor-{name}",
                        lambda tmp, g=g: pk().obfuscator(g()),
                        ct_op_check("std", g, lambda m: m, compare_signed=False),
                    )
                _add(
                    cases,
                    "PublicKey.rerandomize_textbook",
                    sfx,
                    lambda tmp, g=g: pk().rerandomize_textbook(g()),
                    ct_op_check("std", g, lambda m: m, compare_signed=False),
                )
                _add(
                    cases,
                    "PublicKey.raw_add",
                    sfx,
                    lambda tmp, g=g: pk().raw_add(ct(5), g()),
                    ct_op_check("std", g, lambda m: m + 5, compare_signed=False),
                )
                _add(
                    cases,
                    "PublicKey.raw_mul",
                    f"{sfx}-k-neg",
                    lambda tmp, g=g: pk().raw_mul(g(), -3),
                    ct_op_check("std", g, lambda m: -3 * m, compare_signed=False),
                )
            _add(
                cases,
                "PublicKey.validate_ciphertext",
                sfx,
                lambda tmp, g=g, kname=kname: pk(kname).validate_ciphertext(g()),
                _validated(kname, g),
            )
    _add(
        cases,
        "PublicKey.obfuscator",
        "factor-default",
        lambda tmp: pk().obfuscator(),
        wants(lambda: 0, decrypts("std")),
    )
    _add(
        cases,
        "PublicKey.slow_obfuscator",
        "standard",
        lambda tmp: pk().slow_obfuscator(),
        wants(lambda: 0, decrypts("std")),
    )
    _add(
        cases,
        "PublicKey.slow_obfuscator",
        "subgroup",
        lambda tmp: pk("sub").slow_obfuscator(),
        wants(lambda: 0, decrypts("sub")),
    )
    for name, f in pick(
        "none true str float-half float-int nan inf -inf np-int64 np-float-half fraction-half zero neg 2**1000 -2**1000"
    ).items():
        _add(
            cases,
            "PublicKey.raw_mul",
            f"k-{name}",
            lambda tmp, f=f: pk().raw_mul(ct(3), f()),
            wants(lambda f=f: 3 * exact_int(f()), decrypts("std", signed=False)),
        )
    for name, v in {"where-none": None, "where-int": 5, "where-object": _obj()}.items():
        _add(
            cases,
            "PublicKey.validate_ciphertext",
            name,
            lambda tmp, v=v: pk().validate_ciphertext(ct(1), v),
            anything,
        )
    lists: dict[str, Callable[[], Any]] = {
        "empty": lambda: [],
        "valid": lambda: [ct(1), ct(2)],
        "zero": lambda: [ct(1), 0],
        "p": lambda: [ct(1), sk().p],
        "n2": lambda: [ct(1), pk().nsquare],
        "none": lambda: None,
        "str": lambda: "12",
        "generator": lambda: (c for c in [ct(1), ct(2)]),
        "float-half": lambda: [ct(1), 2.5],
        "inf": lambda: [ct(1), math.inf],
        "nan": lambda: [math.nan],
        "list-none": lambda: [ct(1), None],
    }
    for name, f in lists.items():
        _add(
            cases,
            "PublicKey.validate_ciphertexts",
            f"cs-{name}",
            lambda tmp, f=f: pk().validate_ciphertexts(f()),
            _validated_many(f),
        )
    # table sizing: a hint; the key must still encrypt
    for name, f in {**pick("none str float-half nan inf -inf neg zero 2**64+1 2**1000 np-int64 object")}.items():
        for meth in ("plan", "prepare"):
            _add(
                cases,
                f"PublicKey.{meth}",
                f"uses-{name}",
                lambda tmp, f=f, meth=meth: _use_key_after(PublicKey(int(pk().n)), meth, f()),
                wants(lambda: -4, decrypts("std")),
            )
    # files
    for kname in ("std", "sub"):
        _add(
            cases,
            "PublicKey.to_json",
            kname,
            lambda tmp, kname=kname: PublicKey.from_json(json.loads(json.dumps(pk(kname).to_json()))),
            wants(lambda kname=kname: pk(kname), _same_key),
        )
    for name, f in _json_variants().items():
        _add(
            cases,
            "PublicKey.from_json",
            name,
            lambda tmp, f=f: PublicKey.from_json(f()),
            wants(lambda f=f: _pub_from_doc(f()), _same_key),
        )


def _use_key_after(p: PublicKey, meth: str, uses: Any) -> mpz:
    getattr(p, meth)(uses)
    return p.raw_encrypt(-4)


def _validated(kname: str, g: Callable[[], Any]) -> Check:
    def check(out: Any) -> None:
        try:
            v = exact_int(g())
        except NoValue as exc:
            raise Wrong(f"validated {_short(out)} from a ciphertext that is no integer ({exc})") from None
        p = pk(kname)
        if not (0 < v < p.nsquare) or gmpy2.gcd(v, p.n) != 1:
            raise Wrong(f"validated {_short(v)}, which is outside Z*_n²")
        if out != v:
            raise Wrong(f"validated {_short(v)} as {_short(out)}")

    return check


def _validated_many(f: Callable[[], Any]) -> Check:
    def check(out: Any) -> None:
        vals = f()
        if isinstance(vals, (str, bytes)):
            raise Wrong(f"validated the characters of {vals!r}")
        vals = list(vals)
        for i, c in enumerate(vals):
            _validated("std", lambda c=c: c)(out[i] if i < len(out) else None)
        if len(out) != len(vals):
            raise Wrong(f"validated {len(out)} of {len(vals)} ciphertexts")

    return check


def _same_key(out: Any, want: Any) -> None:
    if type(out) is not type(want) or out != want:
        raise Wrong(f"returned {_short(out)}, expected {_short(want)}")
    if isinstance(out, PublicKey) and out.subgroup_bits != want.subgroup_bits:
        raise Wrong(f"l = {out.subgroup_bits} instead of {want.subgroup_bits}")


def _json_variants() -> dict[str, Callable[[], Any]]:
    def doc(**kw):
        out = pk("sub").to_json()
        out.update(kw)
        return {k: v for k, v in out.items() if v is not _DROP}

    return {
        "valid": lambda: doc(),
        "none": lambda: None,
        "list": lambda: [],
        "str": lambda: "x",
        "kind-wrong": lambda: doc(kind="smcdp-paillier-private-key"),
        "kind-missing": lambda: doc(kind=_DROP),
        "n-missing": lambda: doc(n=_DROP),
        "n-int": lambda: doc(n=int(pk("sub").n)),
        "n-empty": lambda: doc(n=""),
        "n-not-hex": lambda: doc(n="zz"),
        "n-even": lambda: doc(n=format(int(pk("sub").n) + 1, "x")),
        "n-negative": lambda: doc(n="-" + format(int(pk("sub").n), "x")),
        "n-0x": lambda: doc(n="0x" + format(int(pk("sub").n), "x")),
        "n-other": lambda: doc(n=format(int(pk("std").n), "x")),
        "base-missing": lambda: doc(subgroup_base=_DROP),
        "bits-missing": lambda: doc(subgroup_bits=_DROP),
        "bits-str": lambda: doc(subgroup_bits="64"),
        "bits-true": lambda: doc(subgroup_bits=True),
        "bits-float": lambda: doc(subgroup_bits=64.0),
        "bits-odd": lambda: doc(subgroup_bits=65),
        "bits-huge": lambda: doc(subgroup_bits=2**1000),
        "base-not-hex": lambda: doc(subgroup_base="zz"),
        "base-zero": lambda: doc(subgroup_base="0"),
        "base-int": lambda: doc(subgroup_base=int(pk("sub").subgroup_base)),
    }


class _Drop:
    pass


_DROP = _Drop()


def _pub_from_doc(d: Any) -> PublicKey:
    """The key a public key document stands for, or NoValue."""
    if not isinstance(d, dict) or d.get("kind") != "smcdp-paillier-public-key":
        raise NoValue("not a public key document")
    try:
        n = int(d["n"], 16)
    except (KeyError, TypeError, ValueError):
        raise NoValue("no hexadecimal n") from None
    _odd_positive(n)
    if "subgroup_base" not in d and "subgroup_bits" not in d:
        return PublicKey(n)
    try:
        hs, bits = int(d["subgroup_base"], 16), d["subgroup_bits"]
    except (KeyError, TypeError, ValueError):
        raise NoValue("no subgroup base") from None
    bits = _l_ok(bits) if n == pk("sub").n else bits
    return PublicKey(n, _base_ok(hs, n), bits)


# ---------------------------------------------------------------------------- PrivateKey(...) and from_factors
def _sk_compare(kname: str) -> Callable[[Any, Any], None]:
    def compare(out: Any, _want: Any) -> None:
        if not isinstance(out, PrivateKey):
            raise Wrong(f"returned {_short(out)}, not a PrivateKey")
        p = pk(kname)
        try:
            for m in (0, 7, -7, int(p.max_int)):
                if out.raw_decrypt_signed(p.raw_encrypt(m)) != m:
                    raise Wrong(f"the key decrypts an encryption of {m} wrongly")
            if sk(kname).raw_decrypt_signed(out.raw_encrypt(-3)) != -3:
                raise Wrong("the key's CRT encryptions do not decrypt under the key")
        except Wrong:
            raise
        except Exception as exc:  # noqa: BLE001 - a key that was accepted and does not work
            raise Wrong(f"the key was accepted and fails on its own ciphertexts: {type(exc).__name__}: {exc}") from None

    return compare


def cases_private_key(cases: CaseList) -> None:
    def pq(kname):
        s = sk(kname)
        return int(s.p), int(s.q)

    for target, make in (("PrivateKey", PrivateKey), ("PrivateKey.from_factors", PrivateKey.from_factors)):
        pubs: dict[str, tuple[Callable[[], Any], str | None]] = {
            "copy": (lambda: PublicKey(int(pk().n)), "std"),
            "other": (lambda: pk("other"), None),
            "subgroup-key": (lambda: pk("sub"), None),
            "none": (lambda: None, None),
            "str": (lambda: "x", None),
            "private-key": (lambda: sk(), None),
            "int-n": (lambda: int(pk().n), None),
        }
        for name, (f, good) in pubs.items():
            _add(
                cases,
                target,
                f"public_key-{name}",
                lambda tmp, f=f, make=make: make(f(), *pq("std")),
                wants(lambda: None, _sk_compare(good)) if good else refuse("factors of another modulus"),
            )
        factors: dict[str, tuple[Callable[[], tuple], bool]] = {
            "swapped": (lambda: pq("std")[::-1], True),
            "mpz": (lambda: tuple(mpz(v) for v in pq("std")), True),
            "str": (lambda: tuple(str(v) for v in pq("std")), True),
            "float": (lambda: tuple(float(v) for v in pq("std")), False),
            "fraction-half": (lambda: (Fraction(2 * pq("std")[0] + 1, 2), pq("std")[1]), False),
            "one-n": (lambda: (1, int(pk().n)), False),
            "n-one": (lambda: (int(pk().n), 1), False),
            "negated": (lambda: tuple(-v for v in pq("std")), False),
            "equal": (lambda: (pq("std")[0], pq("std")[0]), False),
            "none": (lambda: (None, pq("std")[1]), False),
            "other-key": (lambda: pq("other"), False),
            "nan": (lambda: (math.nan, pq("std")[1]), False),
            "inf": (lambda: (math.inf, pq("std")[1]), False),
        }
        for name, (f, good) in factors.items():
            _add(
                cases,
                target,
                f"factors-{name}",
                lambda tmp, f=f, make=make: make(pk(), *f()),
                wants(lambda: None, _sk_compare("std")) if good else refuse("factors that are not those of n"),
            )

        def orders(kname="sub"):
            s = sk(kname)
            return int(s.orders[0]), int(s.orders[1])

        ords: dict[str, tuple[Callable[[], Any], bool]] = {
            "valid": (orders, True),
            "mpz": (lambda: tuple(mpz(v) for v in orders()), True),
            "list": (lambda: list(orders()), True),
            "none": (lambda: None, target == "PrivateKey"),  # decrypts with p - 1; from_factors needs them
            "swapped": (lambda: orders()[::-1], False),
            "one": (lambda: orders()[:1], False),
            "empty": (lambda: (), False),
            "three": (lambda: (*orders(), 7), True),
            "zeros": (lambda: (0, 0), False),
            "ones": (lambda: (1, 1), False),
            "str": (lambda: "ab", False),
            "int": (lambda: 5, False),
            "floats": (lambda: tuple(float(v) for v in orders()), True),
            "other-key": (lambda: orders("sub-crt"), False),
        }
        for name, (f, good) in ords.items():
            _add(
                cases,
                target,
                f"orders-{name}",
                lambda tmp, f=f, make=make: make(pk("sub"), *pq("sub"), f()),
                wants(lambda: None, _sk_compare("sub")) if good else refuse("orders that are not the key's"),
            )
        _add(
            cases,
            target,
            "orders-for-standard-key",
            lambda tmp, make=make: make(pk(), *pq("std"), (3, 5)),
            refuse("orders for a standard key"),
        )


# ---------------------------------------------------------------------------- PrivateKey methods
def cases_private_key_methods(cases: CaseList) -> None:
    for kname in ("std", "sub", "crt", "sub-crt"):
        sfx = "" if kname == "std" else f"-{kname}"
        names = CTS if kname == "std" else pick("valid zero p n2 n2+c neg foreign-big float-half none", CTS)
        for name, f in names.items():
            g = lambda f=f, kname=kname: f(kname)  # noqa: E731
            _add(
                cases,
                "PrivateKey.raw_decrypt",
                f"c-{name}{sfx}",
                lambda tmp, g=g, kname=kname: sk(kname).raw_decrypt(g()),
                _decrypted(kname, g, lambda m, n: m),
            )
            if name not in CT_FEW.split():
                continue
            _add(
                cases,
                "PrivateKey.raw_decrypt_signed",
                f"c-{name}{sfx}",
                lambda tmp, g=g, kname=kname: sk(kname).raw_decrypt_signed(g()),
                _decrypted(kname, g, lambda m, n, kname=kname: _signed(m, kname)),
            )
            _add(
                cases,
                "PrivateKey.decrypt_halves",
                f"c-{name}{sfx}",
                lambda tmp, g=g, kname=kname: sk(kname).decrypt_halves(g()),
                _decrypted(kname, g, lambda m, n, kname=kname: (m % sk(kname).p, m % sk(kname).q)),
            )
            if kname in ("std", "sub"):
                for which in (0, 1)[: 2 if name in ("valid", "zero", "p", "n2+c") else 1]:
                    _add(
                        cases,
                        "PrivateKey.decrypt_half",
                        f"c-{name}{sfx}-which-{which}",
                        lambda tmp, g=g, kname=kname, which=which: sk(kname).decrypt_half(g(), which),
                        _decrypted(kname, g, lambda m, n, w=which, kname=kname: m % (sk(kname).p, sk(kname).q)[w]),
                    )
    whiches: dict[str, Callable[[], Any]] = {
        **pick("none true false str numstr float-half float-int np-int64 np-bool nan inf neg object 2**1000"),
        "two": lambda: 2,
        "zero-float": lambda: 0.0,
        "p-str": lambda: "p",
    }
    for name, f in whiches.items():
        _add(
            cases,
            "PrivateKey.decrypt_half",
            f"which-{name}",
            lambda tmp, f=f: sk().decrypt_half(ct(7), f()),
            wants(lambda f=f: 7 % (sk().p, sk().q)[_which(f())], equal),
        )
    halves: dict[str, Callable[[], tuple]] = {
        "valid": lambda: (7 % sk().p, 7 % sk().q),
        "mp-plus-p": lambda: (7 % sk().p + sk().p, 7 % sk().q),
        "mp-p-mq-0": lambda: (sk().p, 0),
        "mp-neg": lambda: (-1, 7 % sk().q),
        "mp-float-half": lambda: (2.5, 7 % sk().q),
        "mp-none": lambda: (None, 1),
        "mq-str": lambda: (1, "x"),
        "mp-nan": lambda: (math.nan, 1),
        "mq-2**1000": lambda: (1, 2**1000),
    }
    for name, f in halves.items():
        _add(
            cases,
            "PrivateKey.combine_halves",
            name,
            lambda tmp, f=f: sk().combine_halves(*f()),
            wants(lambda f=f: _crt(*f()), equal),
        )

    def n() -> int:
        return int(pk().n)

    def mi() -> int:
        return int(pk().max_int)

    ms: dict[str, Callable[[], Any]] = {
        **pick("none true str numstr float-half float-int neg-zero nan inf -inf np-int64 mpz object neg 2**1000"),
        "zero": lambda: 0,
        "max_int": mi,
        "max_int+1": lambda: mi() + 1,
        "n-max_int-1": lambda: n() - mi() - 1,
        "n-max_int": lambda: n() - mi(),
        "n-1": lambda: n() - 1,
        "n": n,
        "n+5": lambda: n() + 5,
        "5n": lambda: 5 * n(),
        "-n": lambda: -n(),
        "-10**100": lambda: -(10**100),
    }
    for name, f in ms.items():
        _add(cases, "PrivateKey.decode_signed", f"m-{name}", lambda tmp, f=f: sk().decode_signed(f()), _decoded(f))
    for kname in ("std", "sub"):
        for name in ["valid", "max_int", "max_int+1", "float-half", "nan", "inf", "none", "str", "2**1000", "neg"]:
            f = {
                "valid": lambda: -11,
                "max_int": lambda kname=kname: int(pk(kname).max_int),
                "max_int+1": lambda kname=kname: int(pk(kname).max_int) + 1,
                **ODD,
            }[name]
            _add(
                cases,
                "PrivateKey.raw_encrypt",
                f"m-{name}" + ("" if kname == "std" else "-subgroup"),
                lambda tmp, f=f, kname=kname: sk(kname).raw_encrypt(f()),
                wants(lambda f=f, kname=kname: _in_range(f(), kname), decrypts(kname)),
            )
    for name, f in pick("none str float-half nan inf neg zero 2**1000 object").items():
        for meth in ("plan", "prepare"):
            _add(
                cases,
                f"PrivateKey.{meth}",
                f"uses-{name}",
                lambda tmp, f=f, meth=meth: _use_private_key_after(meth, f()),
                wants(lambda: -4, decrypts("std")),
            )
    for kname in ("std", "sub"):
        _add(
            cases,
            "PrivateKey.to_json",
            kname,
            lambda tmp, kname=kname: PrivateKey.from_json(sk(kname).to_json(), allow_insecure=True),
            wants(lambda: None, _sk_compare(kname)),
        )

    def sdoc(**kw):
        out = sk("sub").to_json()
        out.update(kw)
        return {k: v for k, v in out.items() if v is not _DROP}

    docs: dict[str, tuple[Callable[[], Any], bool]] = {
        "valid": (sdoc, True),
        "none": (lambda: None, False),
        "kind-public": (lambda: sdoc(kind="smcdp-paillier-public-key"), False),
        "p-missing": (lambda: sdoc(p=_DROP), False),
        "p-int": (lambda: sdoc(p=int(sk("sub").p)), False),
        "p-other": (lambda: sdoc(p=format(int(sk("std").p), "x")), False),
        "alpha_q-missing": (lambda: sdoc(alpha_q=_DROP), False),
        "alphas-missing": (lambda: sdoc(alpha_p=_DROP, alpha_q=_DROP), False),
        "alpha_p-not-hex": (lambda: sdoc(alpha_p="zz"), False),
        "alphas-swapped": (lambda: sdoc(alpha_p=sdoc()["alpha_q"], alpha_q=sdoc()["alpha_p"]), False),
        "base-missing": (lambda: sdoc(subgroup_base=_DROP), False),
        "bits-str": (lambda: sdoc(subgroup_bits="64"), False),
        "n-int": (lambda: sdoc(n=int(pk("sub").n)), False),
    }
    for name, (f, good) in docs.items():
        _add(
            cases,
            "PrivateKey.from_json",
            name,
            lambda tmp, f=f: PrivateKey.from_json(f(), allow_insecure=True),
            wants(lambda: None, _sk_compare("sub")) if good else refuse("a damaged private key document"),
        )
    for name, v in {"false": False, "none": None, "str-false": "false", "one": 1, "np-bool": np.bool_(True)}.items():
        opted = v is True or v == 1 or isinstance(v, np.bool_)
        _add(
            cases,
            "PrivateKey.from_json",
            f"allow_insecure-{name}",
            lambda tmp, v=v: PrivateKey.from_json(sk().to_json(), allow_insecure=v),
            wants(lambda: None, _sk_compare("std")) if opted else refuse(f"allow_insecure={v!r} admits a 256-bit key"),
        )


def _which(w: Any) -> int:
    i = exact_int(w)
    if i not in (0, 1) or isinstance(w, str):
        raise NoValue(f"which={w!r} names no half")
    return i


def _crt(mp: Any, mq: Any) -> int:
    s = sk()
    a, b = exact_int(mp), exact_int(mq)
    if not (0 <= a < s.p and 0 <= b < s.q):
        raise NoValue("halves outside [0, p) x [0, q)")
    return int(gmpy2.mpz(a + s.p * ((b - a) * gmpy2.invert(s.p, s.q) % s.q)))


def _decoded(f: Callable[[], Any]) -> Check:
    def expected() -> int:
        m = exact_int(f())
        n, mi = int(pk().n), int(pk().max_int)
        if not 0 <= m < n:
            raise NoValue(f"{_short(m)} is not a decryption (outside [0, n))")
        if m <= mi:
            return m
        if m >= n - mi:
            return m - n
        raise NoValue("the overflow region")

    return wants(expected, equal)


def _in_range(v: Any, kname: str) -> int:
    m = exact_int(v)
    if abs(m) > pk(kname).max_int:
        raise NoValue("above max_int")
    return m


def _use_private_key_after(meth: str, uses: Any) -> mpz:
    s = sk()
    fresh = PrivateKey(PublicKey(int(s.public_key.n)), s.p, s.q)
    getattr(fresh, meth)(uses)
    return fresh.raw_encrypt(-4)


def _decrypted(kname: str, g: Callable[[], Any], value: Callable[[int, int], Any]) -> Check:
    """A decryption of ``g()``: a valid ciphertext gives ``value(m, n)``; one congruent mod n² the same or a refusal;
    0 mod n², a non-unit and a foreign or crafted one under a subgroup key a refusal (the subgroup key documents
    that refusal; the standard one cannot tell a foreign unit, but 0 and non-units it can)."""

    def check(out: Any) -> None:
        try:
            kind, m = ct_meaning(g(), kname)
        except NoValue as exc:
            raise Wrong(f"decrypted {_short(out)} from a ciphertext that is no integer ({exc})") from None
        if kind == "invalid":
            raise Wrong(f"decrypted {_short(out)} from a ciphertext that is 0 mod n² or not a unit mod n")
        want = value(m, int(pk(kname).n))
        if isinstance(out, tuple):
            out = tuple(int(o) for o in out)
        if out != want:
            raise Wrong(f"decrypted {_short(out)}, the ciphertext holds {_short(want)}")

    return check


# ---------------------------------------------------------------------------- key files
def cases_key_files(cases: CaseList) -> None:
    keys: dict[str, tuple[Callable[[], Any], str | None]] = {
        "standard": (lambda: pk(), "pub:std"),
        "subgroup": (lambda: pk("sub"), "pub:sub"),
        "private-key": (lambda: sk(), None),
        "none": (lambda: None, None),
        "str": (lambda: "x", None),
        "dict": (lambda: pk().to_json(), None),
    }
    for name, (f, good) in keys.items():
        _add(
            cases,
            "save_public_key",
            f"pk-{name}",
            lambda tmp, f=f: _save_then(save_public_key, f(), tmp / "k.pub", load_public_key),
            wants(lambda f=f: f(), _saved_public(good)) if good else refuse("saved something that is no public key"),
        )
    skeys: dict[str, tuple[Callable[[], Any], bool]] = {
        "standard": (lambda: sk(), True),
        "subgroup": (lambda: sk("sub"), True),
        "public-key": (lambda: pk(), False),
        "none": (lambda: None, False),
        "str": (lambda: "x", False),
    }
    for name, (f, good) in skeys.items():
        _add(
            cases,
            "save_private_key",
            f"sk-{name}",
            lambda tmp, f=f: _save_then(save_private_key, f(), tmp / "k.key", load_private_key),
            wants(lambda f=f: f(), _saved_private) if good else refuse("saved something that is no private key"),
        )
    paths: dict[str, Callable[[Path], Any]] = {
        "str": lambda tmp: str(tmp / "k"),
        "bytes": lambda tmp: os.fsencode(tmp / "k"),
        "new-dir": lambda tmp: tmp / "a" / "b" / "k",
        "dir": lambda tmp: tmp,
        "empty": lambda tmp: "",
        "nul": lambda tmp: str(tmp / "k\0x"),
        "none": lambda tmp: None,
        "int": lambda tmp: 5,
        "long-name": lambda tmp: tmp / ("k" * 300),
        "object": lambda tmp: object(),
    }
    for name, f in paths.items():
        for saver, obj, loader, tgt in (
            (save_public_key, pk, load_public_key, "save_public_key"),
            (save_private_key, sk, load_private_key, "save_private_key"),
        ):
            _add(
                cases,
                tgt,
                f"path-{name}",
                lambda tmp, f=f, saver=saver, obj=obj, loader=loader: _save_then(saver, obj(), f(tmp), loader),
                wants(lambda obj=obj: obj(), _saved_public("pub:std") if obj is pk else _saved_private),
                allow=(OSError,),
            )
    # loading: the file's state and the path
    files: dict[str, Callable[[Path], Any]] = {
        "valid": lambda tmp: _written(tmp, "k", None),
        "missing": lambda tmp: tmp / "missing",
        "dir": lambda tmp: tmp,
        "empty-file": lambda tmp: _written(tmp, "k", b""),
        "not-json": lambda tmp: _written(tmp, "k", b"{nope"),
        "json-list": lambda tmp: _written(tmp, "k", b"[1, 2]"),
        "non-utf8": lambda tmp: _written(tmp, "k", b"\xff\xfe{"),
        "other-kind": lambda tmp: _written(tmp, "k", "other"),
        "nul": lambda tmp: str(tmp / "k\0x"),
        "none": lambda tmp: None,
        "bytes": lambda tmp: os.fsencode(_written(tmp, "k", None)),
        "object": lambda tmp: object(),
    }
    for name, f in files.items():
        for loader, kind in ((load_public_key, "public"), (load_private_key, "private")):
            good = name in ("valid", "bytes")
            _add(
                cases,
                loader.__name__,
                f"path-{name}",
                lambda tmp, f=f, loader=loader, kind=kind: loader(_for_kind(f(tmp), kind), allow_insecure=True),
                wants(lambda kind=kind: kind, _loaded) if good else refuse("loaded a file that holds no such key"),
                allow=(OSError,),
            )
    _add(
        cases,
        "load_private_key",
        "mode-0644",
        lambda tmp: load_private_key(_written(tmp, "k", None, kind="private", mode=0o644), allow_insecure=True),
        refuse("loaded a private key file that group and others can read"),
    )
    for name, v in {"false": False, "none": None, "str-false": "false", "one": 1, "np-bool": np.bool_(True)}.items():
        opted = v is True or v == 1 or isinstance(v, np.bool_)
        for loader, kind in ((load_public_key, "public"), (load_private_key, "private")):
            _add(
                cases,
                loader.__name__,
                f"allow_insecure-{name}",
                lambda tmp, loader=loader, kind=kind, v=v: loader(
                    _written(tmp, "k", None, kind=kind), allow_insecure=v
                ),
                wants(lambda kind=kind: kind, _loaded)
                if opted
                else refuse(f"allow_insecure={v!r} admits a 256-bit key"),
            )


def _save_then(saver, obj, path, loader):
    """Save (the call under test); what was written is read back by the check."""
    out = saver(obj, path)
    return out, Path(os.fsdecode(path)), loader


def _read_back(out: Any) -> tuple[int, dict, Any]:
    _ret, path, loader = out
    try:
        text = path.read_text()
        return os.stat(path).st_mode & 0o777, json.loads(text), loader(path, allow_insecure=True)
    except Exception as exc:  # noqa: BLE001 - a saved file that does not load back is the finding
        doc = json.loads(path.read_text()) if path.is_file() else {}
        raise Wrong(
            f"the saved file ({doc.get('kind')!r}, mode {os.stat(path).st_mode & 0o777:o}) does not load back: "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _saved_public(_good: str) -> Callable[[Any, Any], None]:
    def compare(out: Any, want: Any) -> None:
        mode, doc, loaded = _read_back(out)
        if doc.get("kind") != "smcdp-paillier-public-key" or {"p", "q"} & set(doc):
            raise Wrong(f"the public key file holds a {doc.get('kind')!r} with fields {sorted(doc)} (mode {mode:o})")
        _same_key(loaded, want)

    return compare


def _saved_private(out: Any, want: Any) -> None:
    mode, _doc, loaded = _read_back(out)
    if mode != 0o600:
        raise Wrong(f"the private key file has mode {mode:o}")
    if not isinstance(loaded, PrivateKey) or (loaded.p, loaded.q, loaded.orders) != (want.p, want.q, want.orders):
        raise Wrong("the private key file loads as another key")


def _written(tmp: Path, name: str, data: bytes | str | None, kind: str = "public", mode: int = 0o600) -> Path:
    path = tmp / name
    if data is None:
        data = json.dumps(pk().to_json() if kind == "public" else sk().to_json()).encode()
    elif data == "other":
        data = json.dumps(sk().to_json() if kind == "public" else pk().to_json()).encode()
    path.write_bytes(data)
    os.chmod(path, mode)
    return path


def _for_kind(path: Any, kind: str) -> Any:
    """A "valid" file for the loader's kind (the table writes the public one)."""
    if kind == "private" and isinstance(path, Path) and path.is_file() and path.name == "k":
        text = path.read_text(errors="replace")
        if '"smcdp-paillier-public-key"' in text:
            _written(path.parent, "k", json.dumps(sk().to_json()).encode())
        elif '"smcdp-paillier-private-key"' in text:
            _written(path.parent, "k", json.dumps(pk().to_json()).encode())
    return path


def _loaded(out: Any, kind: str) -> None:
    if kind == "public":
        _same_key(out, pk())
    elif not isinstance(out, PrivateKey) or (out.p, out.q) != (sk().p, sk().q):
        raise Wrong(f"loaded {_short(out)}")


# ---------------------------------------------------------------------------- EncryptedVector constructors
def _key_arg_table() -> dict[str, tuple[Callable[[], Any], str | None]]:
    """public_key arguments: (factory, the key name the result is under, or None: must refuse)."""
    return {
        "copy": (lambda: fresh_pk(), "std"),
        "none": (lambda: None, None),
        "str": (lambda: "x", None),
        "private-key": (lambda: sk(), None),
        "int-n": (lambda: int(pk().n), None),
    }


def cases_vector_constructors(cases: CaseList) -> None:
    t = "EncryptedVector.encrypt"
    fb = 8

    def enc(values=lambda: [0.5, -1.25, 3.0], frac_bits=fb, packing=UNPACKED, private_key=None, bound=None, key="std"):
        return lambda tmp: EncryptedVector.encrypt(
            pk(key) if isinstance(key, str) else key(),
            values(),
            frac_bits=frac_bits() if callable(frac_bits) else frac_bits,
            packing=packing() if callable(packing) else packing,
            private_key=private_key() if callable(private_key) else private_key,
            bound=bound() if callable(bound) else bound,
        )

    for name, f in VALUES.items():
        if name in VALUES_FEW.split():
            _add(
                cases,
                t,
                f"values-{name}",
                enc(values=f),
                vec_wants("std", lambda f=f: _fit(encode(f(), fb), "std"), -fb),
            )
        _add(
            cases,
            "encode_fixed",
            f"values-{name}",
            lambda tmp, f=f: encode_fixed(f(), fb),
            wants(lambda f=f: encode(f(), fb), equal),
        )
    for name, f in {
        **pick(
            "none true str float-half float-int nan inf np-int64 np-uint8 np-1elem zero neg 2**31 2**63 2**1000 -2**1000"
        ),
        "4096": lambda: 4096,
        "4097": lambda: 4097,
        "-4096": lambda: -4096,
        "2**62": lambda: 2**62,
        "-2**62": lambda: -(2**62),
    }.items():
        if name != "2**31":  # values times 2^(2^31): refused as too large for the key, after 1 GB of shifting
            _add(
                cases,
                t,
                f"frac_bits-{name}",
                enc(frac_bits=f),
                vec_wants(
                    "std",
                    lambda f=f: _fit(encode([0.5, -1.25, 3.0], f()), "std"),
                    lambda f=f: _exponent_ok(-exact_int(f())),
                ),
            )
        if name in ("neg", "2**31", "2**63", "2**1000", "-2**1000", "4097", "-4096", "2**62", "-2**62"):
            # zeros fit any key at any scale: what is left is the exponent
            _add(
                cases,
                t,
                f"frac_bits-{name}-zeros",
                enc(values=lambda: [0.0, -0.0], frac_bits=f),
                vec_wants("std", lambda f=f: encode([0.0, 0.0], f()), lambda f=f: _exponent_ok(-exact_int(f()))),
            )
        if name != "2**31":  # values times 2^(2^31): exact, and gigabytes
            _add(
                cases,
                "encode_fixed",
                f"frac_bits-{name}",
                lambda tmp, f=f: encode_fixed([0.5, -1.25, 3.0, 7], f()),
                wants(lambda f=f: encode([0.5, -1.25, 3.0, 7], f()), equal),
            )
    packings: dict[str, tuple[Callable[[], Any], Packing | None]] = {
        "unpacked": (lambda: UNPACKED, UNPACKED),
        "packed": (lambda: PACK, PACK),
        "for_key": (lambda: Packing.for_key(pk(), 24), "for_key"),
        "one-slot-bits": (lambda: Packing(1, 64), "same"),
        "narrow": (lambda: Packing(2, 2), "same"),
        "too-wide": (lambda: Packing(2, 200), None),
        "just-too-wide": (lambda: Packing(3, 85), None),
        "fits-exactly": (lambda: Packing(2, 127), "same"),
        "huge-slots": (lambda: Packing(2, 2**62), None),
        "np-int64": (lambda: Packing(np.int64(3), np.int64(60)), "same"),
        "none": (lambda: None, None),
        "tuple": (lambda: (4, 16), None),
        "str": (lambda: "x", None),
    }
    for name, (f, good) in packings.items():
        _add(
            cases,
            t,
            f"packing-{name}",
            enc(values=lambda: [0.5, -1.25, 3.0, 0.0, 1.0], packing=f),
            _packed_wants(f, lambda: encode([0.5, -1.25, 3.0, 0.0, 1.0], fb), -fb, good),
        )
    privs: dict[str, tuple[Callable[[], Any], bool]] = {
        "own": (lambda: sk(), True),
        "copy": (lambda: PrivateKey(fresh_pk(), sk().p, sk().q), True),
        "public-key": (lambda: pk(), True),
        "other": (lambda: sk("other"), False),
        "subgroup": (lambda: sk("sub"), False),
        "other-public": (lambda: pk("other"), False),
        "str": (lambda: "x", False),
        "object": (_obj, False),
    }
    for name, (f, good) in privs.items():
        _add(
            cases,
            t,
            f"private_key-{name}",
            enc(private_key=f),
            vec_wants("std", lambda: encode([0.5, -1.25, 3.0], fb), -fb)
            if good
            else refuse("encrypted under the private key's modulus and labelled with the public key's"),
        )
    _add(
        cases,
        t,
        "private_key-own-with-other-public",
        enc(private_key=lambda: sk(), key=lambda: pk("other")),
        refuse("encrypted under one key and labelled with another"),
    )
    for name, (f, good) in _key_arg_table().items():
        _add(
            cases,
            t,
            f"public_key-{name}",
            enc(key=f),
            vec_wants("std", lambda: encode([0.5, -1.25, 3.0], fb), -fb) if good else refuse("no public key"),
        )
    bounds: dict[str, Callable[[], Any]] = {
        **pick("none str float-half nan inf -inf neg"),
        "actual": lambda: 768,
        "actual-1": lambda: 767,
        "max_int": lambda: int(pk().max_int),
        "max_int+1": lambda: int(pk().max_int) + 1,
        "float-above": lambda: 768.5,
    }
    for name, f in bounds.items():
        _add(
            cases,
            t,
            f"bound-{name}",
            enc(bound=f),
            vec_wants("std", lambda f=f: _bounded(encode([0.5, -1.25, 3.0], fb), f(), "std"), -fb),
        )
    # encrypt_ints
    t = "EncryptedVector.encrypt_ints"
    ints: dict[str, Callable[[], Any]] = {
        "valid": lambda: [5, -7, 11],
        "empty": lambda: [],
        "float-half": lambda: [2.5, 1, 0],
        "float-int": lambda: [3.0, 1, 0],
        "nan": lambda: [math.nan],
        "inf": lambda: [math.inf],
        "str": lambda: "123",
        "bytes": lambda: b"\x01\x02",
        "np-float-half": lambda: np.array([2.5, 1.0]),
        "np-uint64": lambda: np.array([2**64 - 1, 1], dtype=np.uint64),
        "np-2d": lambda: np.array([[1, 2], [3, 4]]),
        "bools": lambda: [True, False],
        "list-none": lambda: [None],
        "numstrs": lambda: ["3", "-4"],
        "fraction-half": lambda: [Fraction(5, 2)],
        "decimal-half": lambda: [Decimal("2.5")],
        "complex": lambda: [1 + 0j],
        "mpz": lambda: [mpz(2**200)],
        "max_int": lambda: [int(pk().max_int)],
        "max_int+1": lambda: [int(pk().max_int) + 1],
        "-max_int": lambda: [-int(pk().max_int)],
        "-max_int-1": lambda: [-int(pk().max_int) - 1],
        "huge": lambda: [2**1000],
        "none": lambda: None,
        "int": lambda: 5,
        "generator": lambda: (v for v in [5, -7]),
        "np-0d": lambda: np.array(5),
    }
    for name, f in ints.items():
        _add(
            cases,
            t,
            f"ints-{name}",
            lambda tmp, f=f: EncryptedVector.encrypt_ints(pk(), f()),
            vec_wants("std", lambda f=f: _fit(_int_list(f()), "std"), 0),
        )
        if name in ("valid", "empty", "float-half", "inf", "str", "np-float-half", "max_int+1", "huge", "none", "mpz"):
            _add(
                cases,
                "EncryptedVector.trivial",
                f"ints-{name}",
                lambda tmp, f=f: EncryptedVector.trivial(pk(), f()),
                vec_wants("std", lambda f=f: _fit(_int_list(f()), "std"), 0),
            )
    # exponents are <= 0: the odd scalars negated (a positive one is its own case)
    exps: dict[str, Callable[[], Any]] = {
        **pick("none true str nan inf -inf zero neg -2**1000 object"),
        "numstr": lambda: "-3",
        "float-half": lambda: -2.5,
        "float-int": lambda: -3.0,
        "np-int64": lambda: np.int64(-3),
        "-8": lambda: -8,
        "positive": lambda: 5,
        "-4096": lambda: -4096,
        "-4097": lambda: -4097,
        "-2**62": lambda: -(2**62),
        "2**40": lambda: 2**40,
    }
    for name, f in exps.items():
        few = name in ("float-half", "inf", "positive", "-2**62", "none", "-4097")
        for tgt in ("EncryptedVector.encrypt_ints", "EncryptedVector.trivial", "EncryptedVector.zeros")[
            : 3 if few else 1
        ]:
            zeros = tgt.endswith("zeros")
            _add(
                cases,
                tgt,
                f"exponent-{name}",
                lambda tmp, f=f, tgt=tgt: _vector_with_exponent(tgt, f()),
                vec_wants(
                    "std", lambda zeros=zeros: [0, 0, 0] if zeros else X, lambda f=f: _exponent_ok(exact_int(f()))
                ),
            )
    for name, (f, good) in packings.items():
        if name in ("too-wide", "just-too-wide", "fits-exactly", "huge-slots", "np-int64"):
            for tgt, vals in (("EncryptedVector.encrypt_ints", [1, -1, 1]), ("EncryptedVector.trivial", [1, -1, 1])):
                _add(
                    cases,
                    tgt,
                    f"packing-{name}",
                    lambda tmp, f=f, tgt=tgt, vals=vals: getattr(EncryptedVector, tgt.split(".")[1])(
                        pk(), vals, packing=f()
                    ),
                    _packed_wants(f, lambda vals=vals: vals, 0, good),
                )
    # a packing wider than the key: the first operation that stays within the slots' bound wraps
    for name, (packing, k) in {"too-wide": (Packing(2, 200), 2**100)}.items():
        _add(
            cases,
            "EncryptedVector.mul_int",
            f"packing-{name}",
            lambda tmp, packing=packing, k=k: EncryptedVector.encrypt_ints(
                pk(), [1, 1, 1][: packing.slots], packing=packing
            ).mul_int(k),
            vec_wants("std", lambda packing=packing, k=k: [k] * packing.slots, 0, packing=packing),
        )
    # zeros
    for name, f in {**INT_FEW, **LENGTHS, "three": lambda: 3}.items():
        _add(
            cases,
            "EncryptedVector.zeros",
            f"length-{name}",
            lambda tmp, f=f: EncryptedVector.zeros(pk(), f()),
            vec_wants("std", lambda f=f: [0] * _length_ok(exact_int(f())), 0),
        )
    for name, (f, good) in packings.items():
        if name in ("none", "tuple", "str", "huge-slots", "packed", "narrow"):
            _add(
                cases,
                "EncryptedVector.zeros",
                f"packing-{name}",
                lambda tmp, f=f: EncryptedVector.zeros(pk(), 5, packing=f()),
                _packed_wants(f, lambda: [0] * 5, 0, good),
            )
    for name, (f, good) in _key_arg_table().items():
        for tgt in ("zeros", "trivial", "encrypt_ints"):
            arg = 3 if tgt == "zeros" else [0, 0, 0]
            _add(
                cases,
                f"EncryptedVector.{tgt}",
                f"public_key-{name}",
                lambda tmp, f=f, tgt=tgt, arg=arg: getattr(EncryptedVector, tgt)(f(), arg),
                vec_wants("std", lambda: [0, 0, 0], 0) if good else refuse("no public key"),
            )
    # encrypt_with: the batch engine's answers
    engines: dict[str, tuple[Callable[[], Any], bool]] = {
        "right": (lambda: _engine(lambda pl: [pk().raw_encrypt(m) for m in pl]), True),
        "short": (lambda: _engine(lambda pl: [pk().raw_encrypt(m) for m in pl][:-1]), False),
        "long": (lambda: _engine(lambda pl: [pk().raw_encrypt(m) for m in pl] + [ct(1)]), False),
        "none": (lambda: _engine(lambda pl: None), False),
        "sync": (lambda: lambda pl: [pk().raw_encrypt(m) for m in pl], False),
        "not-callable": (lambda: 5, False),
    }
    for name, (f, good) in engines.items():
        _add(
            cases,
            "EncryptedVector.encrypt_with",
            f"encrypt_raw-{name}",
            lambda tmp, f=f: asyncio.run(EncryptedVector.encrypt_with(f(), pk(), [0.5, -1.25, 3.0], frac_bits=fb)),
            vec_wants("std", lambda: encode([0.5, -1.25, 3.0], fb), -fb) if good else refuse("the engine's answer"),
        )
    for name in ("nan", "complex", "str", "big-ints", "huge-int", "empty"):
        f = VALUES[name]
        _add(
            cases,
            "EncryptedVector.encrypt_with",
            f"values-{name}",
            lambda tmp, f=f: asyncio.run(
                EncryptedVector.encrypt_with(
                    _engine(lambda pl: [pk().raw_encrypt(m) for m in pl]), pk(), f(), frac_bits=fb
                )
            ),
            vec_wants("std", lambda f=f: _fit(encode(f(), fb), "std"), -fb),
        )
    # the constructor itself
    t = "EncryptedVector"

    def ctor(cts=lambda: [ct(5), ct(-7), ct(11)], length=3, exponent=0, packing=UNPACKED, bound=None, key=pk):
        return lambda tmp: EncryptedVector(key(), cts(), _call(length), _call(exponent), _call(packing), _call(bound))

    for name, f in {**pick("float-half float-int numstr np-1elem none inf neg 2**63"), "four": lambda: 4}.items():
        _add(cases, t, f"length-{name}", ctor(length=f), vec_wants("std", lambda f=f: X[: _len3(f())], 0))
    for name, f in {**pick("float-half nan inf neg-zero -2**1000 str none"), "positive": lambda: 5}.items():
        _add(
            cases,
            t,
            f"exponent-{name}",
            ctor(exponent=f),
            vec_wants("std", lambda: X, lambda f=f: _exponent_ok(exact_int(f()))),
        )
    for name, f in {
        **pick("float-half nan inf -inf neg zero str none 2**1000"),
        "max_int": lambda: int(pk().max_int),
    }.items():
        _add(
            cases,
            t,
            f"bound-{name}",
            ctor(bound=f),
            vec_wants("std", lambda f=f: _ctor_bound(f()), 0, actual_bound=False),
        )
    _add(
        cases,
        t,
        "packed-length-neg",
        ctor(cts=lambda: [], length=-1, packing=PACK),
        refuse("a vector of length -1"),
    )
    _add(
        cases,
        t,
        "packed-public_key-none",
        ctor(cts=lambda: [pvec().ciphertexts[0]], length=2, packing=PACK, key=lambda: None),
        refuse("a vector under no key"),
    )
    for name, f in pick("none str").items():
        _add(cases, t, f"packing-{name}", ctor(packing=f), refuse("no packing"))
        _add(cases, t, f"public_key-{name}", ctor(key=f), refuse("no public key"))


def _call(v: Any) -> Any:
    return v() if callable(v) and not isinstance(v, type) else v


def _ctor_bound(b: Any) -> list[int]:
    """A declared bound: None or a finite real >= 0 (its floor bounds integers), else no bound at all."""
    if b is not None:
        _kind, v = _real(b)
        if v < 0 or isinstance(b, str):
            raise NoValue(f"bound {b!r}")
    return X


def _nv_raise(why: str):
    raise NoValue(why)


def _len3(n: int) -> int:
    n = exact_int(n)
    if n != 3:
        raise NoValue(f"length {n} for 3 ciphertexts")
    return n


def _engine(fn: Callable[[list[int]], Any]):
    async def engine(plain):
        return fn(plain)

    return engine


def _int_list(vals: Any) -> list[int]:
    if isinstance(vals, (str, bytes)) or vals is None or not hasattr(vals, "__iter__"):
        raise NoValue(f"{_short(vals)} is not a sequence of integers")
    if isinstance(vals, np.ndarray) and vals.ndim != 1:
        raise NoValue("not one-dimensional")
    return [exact_int(v) for v in vals]


def _fit(ints: list[int], kname: str) -> list[int]:
    if any(abs(v) > pk(kname).max_int for v in ints):
        raise NoValue("a value above max_int (n/3)")
    return ints


def _bounded(ints: list[int], bound: Any, kname: str) -> list[int]:
    if bound is not None:
        b = exact_int(bound) if not (isinstance(bound, float) and math.isfinite(bound)) else math.floor(bound)
        if b < max((abs(v) for v in ints), default=0) or b > pk(kname).max_int:
            raise NoValue(f"bound {bound!r} does not hold or exceeds the capacity")
    return _fit(ints, kname)


def _exponent_ok(e: int) -> int:
    if e > 0 or e < -4096:
        raise NoValue(f"exponent {e} is outside the wire format's [-4096, 0] (module docstring: exponent <= 0)")
    return e


def _length_ok(n: int) -> int:
    if n < 0 or n > 10**6:
        raise NoValue(f"length {n}")
    return n


def _vector_with_exponent(tgt: str, e: Any) -> EncryptedVector:
    if tgt.endswith("zeros"):
        return EncryptedVector.zeros(pk(), 3, exponent=e)
    return getattr(EncryptedVector, tgt.split(".")[1])(pk(), X, exponent=e)


def _packed_wants(f: Callable[[], Any], ints: Callable[[], list[int]], exponent: int, good: Any) -> Check:
    """A packing argument: ``good`` None: must refuse; "same"/"for_key"/a Packing: the vector has that layout."""
    if good is None:
        return refuse("a packing that does not fit the key (or is no packing)")

    def expected() -> list[int]:
        packing = f()
        want = ints()
        if packing.packed and any(abs(v) > packing.slot_capacity for v in want):
            raise NoValue("a value above the slot's capacity")
        return want

    def compare(out: Any, want: Any) -> None:
        check_vec(out, "std", want, exponent, packing=f())

    return wants(expected, compare)


# ---------------------------------------------------------------------------- EncryptedVector operations
def cases_vector_ops(cases: CaseList) -> None:
    # decryption
    sks: dict[str, tuple[Callable[[], Any], bool]] = {
        "own": (lambda: sk(), True),
        "copy": (lambda: PrivateKey(fresh_pk(), sk().p, sk().q), True),
        "other": (lambda: sk("other"), False),
        "subgroup": (lambda: sk("sub"), False),
        "public-key": (lambda: pk(), False),
        "none": (lambda: None, False),
        "str": (lambda: "x", False),
    }
    for name, (f, good) in sks.items():
        _add(
            cases,
            "EncryptedVector.decrypt_ints",
            f"private_key-{name}",
            lambda tmp, f=f: vec().decrypt_ints(f()),
            wants(lambda: X, equal) if good else refuse("decrypted with another key"),
        )
        _add(
            cases,
            "EncryptedVector.decrypt",
            f"private_key-{name}",
            lambda tmp, f=f: list(vec(exponent=-1).decrypt(f())),
            wants(lambda: [v / 2 for v in X], _floats_equal) if good else refuse("decrypted with another key"),
        )
        _add(
            cases,
            "EncryptedVector.decrypt_ints",
            f"private_key-{name}-packed",
            lambda tmp, f=f: pvec().decrypt_ints(f()),
            wants(lambda: PX, equal) if good else refuse("decrypted with another key"),
        )
    # a subgroup vector decrypted with a key that has no orders (p - 1: correct)
    _add(
        cases,
        "EncryptedVector.decrypt_ints",
        "private_key-subgroup-without-orders",
        lambda tmp: vec("sub").decrypt_ints(PrivateKey(pk("sub"), sk("sub").p, sk("sub").q)),
        wants(lambda: X, equal),
    )
    dengines: dict[str, tuple[Callable[[], Any], bool]] = {
        "right": (lambda: _engine(lambda cs: [sk().raw_decrypt_signed(c) for c in cs]), True),
        "short": (lambda: _engine(lambda cs: [sk().raw_decrypt_signed(c) for c in cs][:-1]), False),
        "long": (lambda: _engine(lambda cs: [sk().raw_decrypt_signed(c) for c in cs] + [0]), False),
        "none": (lambda: _engine(lambda cs: None), False),
        "other-key": (
            lambda: _engine(lambda cs: [sk("other").raw_decrypt_signed(c % pk("other").nsquare) for c in cs]),
            False,
        ),
        "sync": (lambda: lambda cs: [sk().raw_decrypt_signed(c) for c in cs], False),
        "floats": (lambda: _engine(lambda cs: [sk().raw_decrypt_signed(c) + 0.5 for c in cs]), False),
    }
    for name, (f, good) in dengines.items():
        if name == "other-key":
            continue  # the engine is the caller's: its answers for another key cannot be told from right ones
        _add(
            cases,
            "EncryptedVector.decrypt_ints_with",
            f"decrypt_raw-{name}",
            lambda tmp, f=f: asyncio.run(vec().decrypt_ints_with(f())),
            wants(lambda: X, equal) if good else refuse("the engine's answer"),
        )
        _add(
            cases,
            "EncryptedVector.decrypt_with",
            f"decrypt_raw-{name}",
            lambda tmp, f=f: list(asyncio.run(vec().decrypt_with(f()))),
            wants(lambda: [float(v) for v in X], _floats_equal) if good else refuse("the engine's answer"),
        )
    # scale_exponent
    exps: dict[str, Callable[[], Any]] = {
        **pick("none true str numstr float-half float-int nan inf -inf np-int64 zero neg -2**1000 object"),
        "same": lambda: -8,
        "-9": lambda: -9,
        "-20": lambda: -20,
        "-300": lambda: -300,
        "-9.5": lambda: -9.5,
        "-9.0": lambda: -9.0,
        "-2**62": lambda: -(2**62),
    }
    for name, f in exps.items():
        _add(
            cases,
            "EncryptedVector.scale_exponent",
            f"new_exponent-{name}",
            lambda tmp, f=f: vec(exponent=-8).scale_exponent(f()),
            vec_wants(
                "std",
                lambda f=f: _fit(_shifted(X, -8 - _lower(f(), -8)), "std"),
                lambda f=f: _exponent_ok(exact_int(f())),
            ),
        )
    for name in ("-2**62", "-300"):
        f = exps[name]
        _add(
            cases,
            "EncryptedVector.scale_exponent",
            f"new_exponent-{name}-zeros",
            lambda tmp, f=f: EncryptedVector.zeros(pk(), 2).scale_exponent(f()),
            vec_wants("std", lambda: [0, 0], lambda f=f: _exponent_ok(exact_int(f()))),
        )
    # the binary operations: every other operand
    others: dict[str, tuple[Callable[[], Any], Callable[[], tuple[list[int], int]] | None, str]] = {
        "same-key": (lambda: vec(ints=[1, 2, 3]), lambda: ([1, 2, 3], 0), "std"),
        "key-copy": (
            lambda: EncryptedVector.encrypt_ints(fresh_pk(), [1, 2, 3]),
            lambda: ([1, 2, 3], 0),
            "std",
        ),
        "other-key": (lambda: vec("other", ints=[1, 2, 3]), None, "std"),
        "subgroup-key": (lambda: vec("sub", ints=[1, 2, 3]), None, "std"),
        "shorter": (lambda: vec(ints=[1, 2]), None, "std"),
        "longer": (lambda: vec(ints=[1, 2, 3, 4]), None, "std"),
        "empty": (lambda: vec(ints=[]), None, "std"),
        "packed": (lambda: vec(ints=[1, 2, 3], packing=PACK), None, "std"),
        "other-exponent": (lambda: vec(ints=[1, 2, 3], exponent=-4), lambda: ([1, 2, 3], -4), "std"),
        "near-capacity": (lambda: vec(ints=[int(pk().max_int), 0, 0]), None, "std"),
        "none": (lambda: None, None, "std"),
        "int": (lambda: 5, None, "std"),
        "str": (lambda: "x", None, "std"),
        "list": (lambda: [1, 2, 3], None, "std"),
        "np-array": (lambda: np.array([1, 2, 3]), None, "std"),
        "float": (lambda: 1.5, None, "std"),
    }
    for name, (f, other_vals, _kname) in others.items():
        subtract = name in ("same-key", "other-key", "shorter", "other-exponent", "near-capacity", "int")
        for op, sign in (("__add__", 1), ("__sub__", -1))[: 2 if subtract else 1]:
            _add(
                cases,
                f"EncryptedVector.{op}",
                f"other-{name}",
                lambda tmp, f=f, op=op: getattr(vec(), op)(f()),
                vec_wants(
                    "std",
                    lambda ov=other_vals, s=sign: _combined(X, 0, ov, s)[0],
                    lambda ov=other_vals, s=sign: _combined(X, 0, ov, s)[1],
                )
                if other_vals
                else refuse("operands that cannot be combined"),
            )
    # packed operands
    _add(
        cases,
        "EncryptedVector.__add__",
        "packed-other-layout",
        lambda tmp: pvec() + EncryptedVector.encrypt_ints(pk(), PX, packing=Packing(4, 20)),
        refuse("packed vectors of two layouts"),
    )
    _add(
        cases,
        "EncryptedVector.__add__",
        "packed-same-layout",
        lambda tmp: pvec() + pvec(ints=[1, 1, 1, 1, 1]),
        vec_wants("std", lambda: [v + 1 for v in PX], 0, packing=PACK),
    )
    _add(
        cases,
        "EncryptedVector.__add__",
        "packed-slot-overflow",
        lambda tmp: pvec() + pvec(ints=[0, 0, 0, 0, -1]),
        refuse("a slot beyond its capacity"),
    )
    _add(
        cases,
        "EncryptedVector.__add__",
        "packed-other-exponent",
        lambda tmp: (
            pvec(ints=[1, 2, 3, 4, 5]) + EncryptedVector.encrypt_ints(pk(), [1, 1, 1, 1, 1], exponent=-2, packing=PACK)
        ),
        vec_wants("std", lambda: [4 * v + 1 for v in [1, 2, 3, 4, 5]], -2, packing=PACK),
    )
    for kname in ("std", "ifma", "sub"):
        _add(
            cases,
            "EncryptedVector.__neg__",
            f"unpacked-{kname}",
            lambda tmp, kname=kname: -vec(kname),
            vec_wants(kname, lambda: [-v for v in X], 0),
        )
    _add(
        cases,
        "EncryptedVector.__neg__",
        "packed",
        lambda tmp: -pvec(),
        vec_wants("std", lambda: [-v for v in PX], 0, packing=PACK),
    )
    _add(cases, "EncryptedVector.__neg__", "empty", lambda tmp: -vec(ints=[]), vec_wants("std", lambda: [], 0))
    # add_plain
    for name, f in pick(VALUES_FEW, VALUES).items():
        _add(
            cases,
            "EncryptedVector.add_plain",
            f"values-{name}",
            lambda tmp, f=f: vec(exponent=-8).add_plain(f()),
            vec_wants(
                "std",
                lambda f=f: _fit(
                    _same_len([(x << 0) + p for x, p in zip(X, encode(f(), 8), strict=False)], f, 8), "std"
                ),
                -8,
            ),
        )
    for name, f in {
        **pick("true float-half nan inf neg zero np-int64 str 2**63"),
        "4": lambda: 4,
        "12": lambda: 12,
    }.items():
        _add(
            cases,
            "EncryptedVector.add_plain",
            f"frac_bits-{name}",
            lambda tmp, f=f: vec(exponent=-8).add_plain([0.5, -1.25, 3.0], frac_bits=f()),
            vec_wants(
                "std",
                lambda f=f: _fit(_plain_sum(X, -8, [0.5, -1.25, 3.0], f())[0], "std"),
                lambda f=f: _exponent_ok(_plain_sum(X, -8, [0.5, -1.25, 3.0], f())[1]),
            ),
        )
    _add(
        cases,
        "EncryptedVector.add_plain",
        "packed",
        lambda tmp: pvec().add_plain([1, 1, 1, 1, 1]),
        vec_wants("std", lambda: [v + 1 for v in PX[:4]] + [-32766], 0, packing=PACK),
    )
    _add(
        cases,
        "EncryptedVector.add_plain",
        "packed-slot-overflow",
        lambda tmp: pvec().add_plain([0, 0, 0, 0, -1]),
        refuse("a slot beyond its capacity"),
    )
    # mul_int
    ks: dict[str, Callable[[], Any]] = {
        **INT_FEW,
        "cap//11": lambda: int(pk().max_int) // 11,
        "cap//11+1": lambda: int(pk().max_int) // 11 + 1,
        "-cap//11": lambda: -(int(pk().max_int) // 11),
    }
    for name, f in ks.items():
        _add(
            cases,
            "EncryptedVector.mul_int",
            f"k-{name}",
            lambda tmp, f=f: vec().mul_int(f()),
            vec_wants("std", lambda f=f: _fit([v * exact_int(f()) for v in X], "std"), 0),
        )
    for name in ("neg", "2**31", "float-half", "zero", "inf"):
        f = ks[name]
        _add(
            cases,
            "EncryptedVector.mul_int",
            f"k-{name}-packed",
            lambda tmp, f=f: pvec(ints=[1, -2, 3, 0, 5]).mul_int(f()),
            vec_wants("std", lambda f=f: _slots([v * exact_int(f()) for v in [1, -2, 3, 0, 5]]), 0, packing=PACK),
        )
        _add(
            cases,
            "EncryptedVector.mul_int",
            f"k-{name}-ifma",
            lambda tmp, f=f: vec("ifma").mul_int(f()),
            vec_wants("ifma", lambda f=f: [v * exact_int(f()) for v in X], 0),
        )
    # mul_scalar
    for name, f in {
        **pick("none str numstr float-half nan inf -inf np-float-half np-1elem complex fraction-half 2**1000"),
        "huge-float": lambda: 1e308,
        "tiny": lambda: 5e-324,
        "half-ulp": lambda: 2.0**-41,
    }.items():
        _add(
            cases,
            "EncryptedVector.mul_scalar",
            f"s-{name}",
            lambda tmp, f=f: vec().mul_scalar(f(), frac_bits=8),
            vec_wants("std", lambda f=f: _fit([v * _one(encode(f(), 8)) for v in X], "std"), -8),
        )
    for name, f in {**pick("none true float-half nan inf neg zero np-int64 str 2**63"), "2**62": lambda: 2**62}.items():
        _add(
            cases,
            "EncryptedVector.mul_scalar",
            f"frac_bits-{name}",
            lambda tmp, f=f: vec().mul_scalar(1.5, frac_bits=f()),
            vec_wants(
                "std",
                lambda f=f: _fit([v * _one(encode(1.5, f())) for v in X], "std"),
                lambda f=f: _exponent_ok(-exact_int(f())),
            ),
        )
    # mul_elementwise
    for name, f in pick(VALUES_FEW, VALUES).items():
        _add(
            cases,
            "EncryptedVector.mul_elementwise",
            f"values-{name}",
            lambda tmp, f=f: vec().mul_elementwise(f(), frac_bits=4),
            vec_wants(
                "std",
                lambda f=f: _fit(_same_len([x * k for x, k in zip(X, encode(f(), 4), strict=False)], f, 4), "std"),
                -4,
            ),
        )
    for name, f in pick("none true float-half nan neg np-int64 str 2**63").items():
        _add(
            cases,
            "EncryptedVector.mul_elementwise",
            f"frac_bits-{name}",
            lambda tmp, f=f: vec().mul_elementwise([1, 2, 3], frac_bits=f()),
            vec_wants(
                "std",
                lambda f=f: _fit([x * k for x, k in zip(X, encode([1, 2, 3], f()))], "std"),
                lambda f=f: _exponent_ok(-exact_int(f())),
            ),
        )
    _add(
        cases,
        "EncryptedVector.mul_elementwise",
        "packed",
        lambda tmp: pvec().mul_elementwise([1] * 5),
        refuse("a packed vector"),
    )
    # sum
    sums: dict[str, tuple[Callable[[], EncryptedVector], list[int] | None]] = {
        "three": (lambda: vec(), [sum(X)]),
        "empty": (lambda: vec(ints=[]), [0]),
        "packed": (lambda: pvec(), None),
        "near-capacity": (lambda: vec(ints=[int(pk().max_int), 1, 0]), None),
        "ifma": (lambda: vec("ifma"), [sum(X)]),
    }
    for name, (f, want) in sums.items():
        _add(
            cases,
            "EncryptedVector.sum",
            name,
            lambda tmp, f=f: f().sum(),
            vec_wants("ifma" if name == "ifma" else "std", lambda w=want: w, 0)
            if want is not None
            else refuse("no sum"),
        )
    # dot and matvec
    weights: dict[str, Callable[[], Any]] = {
        **pick(VALUES_FEW, VALUES),
        **pick("none true float-half nan inf str mpz object zero"),
        "np-int64": lambda: np.array([1, -2, 3], dtype=np.int64),
        "big-object": lambda: np.array([2**70, -1, 0], dtype=object),
    }
    for name, f in weights.items():
        for kname in ("std", "ifma") if name in ("ints", "floats", "big-object", "big-ints", "np-int64") else ("std",):
            _add(
                cases,
                "EncryptedVector.dot",
                f"weights-{name}" + ("" if kname == "std" else "-ifma"),
                lambda tmp, f=f, kname=kname: vec(kname).dot(f()),
                vec_wants(
                    kname,
                    lambda f=f, kname=kname: _fit(
                        [sum(x * k for x, k in zip(X, _one_dim(f(), 0), strict=True))], kname
                    ),
                    0,
                ),
            )
    for name, f in pick("none true float-half nan neg np-int64 str 2**63").items():
        _add(
            cases,
            "EncryptedVector.dot",
            f"frac_bits-{name}",
            lambda tmp, f=f: vec().dot([0.5, 1, 2], frac_bits=f()),
            vec_wants(
                "std",
                lambda f=f: _fit([sum(x * k for x, k in zip(X, encode([0.5, 1, 2], f())))], "std"),
                lambda f=f: _exponent_ok(-exact_int(f())),
            ),
        )
    _add(cases, "EncryptedVector.dot", "packed", lambda tmp: pvec().dot([1] * 5), refuse("a packed vector"))
    mats: dict[str, Callable[[], Any]] = {
        "valid": lambda: [[1, 0, 0], [0.5, -1, 2]],
        "ints-big": lambda: np.array([[2**70, 1, -1]], dtype=object),
        "no-rows": lambda: np.zeros((0, 3)),
        "1d": lambda: [1, 2, 3],
        "3d": lambda: np.zeros((1, 1, 3)),
        "wrong-cols": lambda: [[1, 2]],
        "ragged": lambda: [[1, 2, 3], [1]],
        "nan": lambda: [[1, math.nan, 0]],
        "inf": lambda: [[1, 0, math.inf]],
        "none": lambda: None,
        "str": lambda: "x",
        "numstrs": lambda: [["1", "2", "3"]],
        "complex": lambda: [[1j, 0, 0]],
        "bools": lambda: [[True, False, True]],
        "object-none": lambda: np.array([[1, None, 0]], dtype=object),
        "big-ints": lambda: [[2**63 + 1, -1, 0]],
        "scalar": lambda: 5,
    }
    for name, f in mats.items():
        for kname in ("std", "ifma") if name in ("valid", "ints-big") else ("std",):
            _add(
                cases,
                "EncryptedVector.matvec",
                f"W-{name}" + ("" if kname == "std" else "-ifma"),
                lambda tmp, f=f, kname=kname: vec(kname).matvec(f()),
                vec_wants(kname, lambda f=f, kname=kname: _fit(_matvec(f()), kname), 0),
            )
    _add(
        cases,
        "EncryptedVector.matvec",
        "empty-vector",
        lambda tmp: vec(ints=[]).matvec(np.zeros((2, 0))),
        vec_wants("std", lambda: [0, 0], 0),
    )
    for name, f in pick("none true float-half nan neg np-int64 str").items():
        _add(
            cases,
            "EncryptedVector.matvec",
            f"frac_bits-{name}",
            lambda tmp, f=f: vec().matvec([[0.5, 1, 2]], frac_bits=f()),
            vec_wants(
                "std",
                lambda f=f: _fit([sum(x * k for x, k in zip(X, encode([0.5, 1, 2], f())))], "std"),
                lambda f=f: _exponent_ok(-exact_int(f())),
            ),
        )
    _add(cases, "EncryptedVector.matvec", "packed", lambda tmp: pvec().matvec([[1] * 5]), refuse("a packed vector"))
    # rerandomize
    pools: dict[str, tuple[Callable[[], Any], bool]] = {
        "none": (lambda: None, True),
        "own-public": (lambda: ObfuscatorPool.for_public_key(pk(), background=False), True),
        "own-private": (lambda: ObfuscatorPool.for_private_key(sk(), background=False), True),
        "other-key": (lambda: ObfuscatorPool.for_public_key(pk("other"), background=False), False),
        "subgroup-key": (lambda: ObfuscatorPool.for_public_key(pk("sub"), background=False), False),
        "bigger-key": (lambda: ObfuscatorPool.for_public_key(pk("big"), background=False), False),
        "str": (lambda: "x", False),
        "int": (lambda: 5, False),
        "key": (lambda: pk(), True),  # a PublicKey rerandomizes too (duck typing): the right result
        "other-key-itself": (lambda: pk("other"), False),
    }
    for name, (f, good) in pools.items():
        _add(
            cases,
            "EncryptedVector.rerandomize",
            f"pool-{name}",
            lambda tmp, f=f: vec().rerandomize(f()),
            vec_wants("std", lambda: X, 0) if good else refuse("obfuscators of another key"),
        )
        if name in ("own-public", "other-key"):
            _add(
                cases,
                "EncryptedVector.rerandomize",
                f"pool-{name}-packed",
                lambda tmp, f=f: pvec().rerandomize(f()),
                vec_wants("std", lambda: PX, 0, packing=PACK) if good else refuse("obfuscators of another key"),
            )
    # indexing
    idxs: dict[str, Callable[[], Any]] = {
        **pick(
            "none true false str numstr float-half float-int np-int64 np-bool np-0d np-1elem list object neg 2**63 2**1000"
        ),
        "last": lambda: 2,
        "out-of-range": lambda: 3,
        "-4": lambda: -4,
        "slice": lambda: slice(1, None),
        "slice-step": lambda: slice(None, None, -1),
        "slice-step0": lambda: slice(None, None, 0),
        "slice-float": lambda: slice(0.5, 2),
        "slice-empty": lambda: slice(5, 9),
        "list-ints": lambda: [2, 0, 0],
        "list-empty": lambda: [],
        "mask": lambda: [True, False, True],
        "np-mask": lambda: np.array([True, False, True]),
        "np-mask-short": lambda: np.array([True, False]),
        "list-floats": lambda: [0.5, 1.9],
        "np-2d": lambda: np.array([[0, 1]]),
        "tuple": lambda: (0, 1),
        "ellipsis": lambda: Ellipsis,
    }
    for name, f in idxs.items():
        _add(
            cases,
            "EncryptedVector.__getitem__",
            f"idx-{name}",
            lambda tmp, f=f: vec()[f()],
            vec_wants("std", lambda f=f: _indexed(f()), 0),
            allow=(IndexError,),
        )
    _add(
        cases,
        "EncryptedVector.__getitem__",
        "packed",
        lambda tmp: pvec()[0],
        refuse("a packed vector"),
        allow=(IndexError,),
    )
    # concat
    parts: dict[str, tuple[Callable[[], Any], Callable[[], tuple[list[int], int]] | None]] = {
        "two": (lambda: [vec(), vec(ints=[1])], lambda: (X + [1], 0)),
        "tuple": (lambda: (vec(), vec(ints=[1])), lambda: (X + [1], 0)),
        "one": (lambda: [vec()], lambda: (X, 0)),
        "empty-part": (lambda: [vec(ints=[]), vec()], lambda: (X, 0)),
        "exponents": (lambda: [vec(), vec(ints=[1], exponent=-3)], lambda: ([v << 3 for v in X] + [1], -3)),
        "generator": (lambda: (v for v in [vec(), vec(ints=[1])]), lambda: (X + [1], 0)),
        "vector": (lambda: vec(), lambda: (X, 0)),
        "empty": (lambda: [], None),
        "other-key": (lambda: [vec(), vec("other")], None),
        "subgroup-key": (lambda: [vec(), vec("sub")], None),
        "packed": (lambda: [vec(), pvec()], None),
        "int": (lambda: [vec(), 5], None),
        "none-part": (lambda: [vec(), None], None),
        "str": (lambda: "ab", None),
        "none": (lambda: None, None),
    }
    for name, (f, want) in parts.items():
        _add(
            cases,
            "EncryptedVector.concat",
            f"parts-{name}",
            lambda tmp, f=f: EncryptedVector.concat(f()),
            vec_wants("std", lambda w=want: w()[0], lambda w=want: w()[1])
            if want
            else refuse("parts that cannot be joined"),
        )
    # the wire format
    for name, f in {
        "unpacked": lambda: vec(),
        "packed": lambda: pvec(),
        "exponent-positive": lambda: vec(exponent=5),
        "exponent-2**40": lambda: vec(exponent=2**40),
        "exponent--5000": lambda: vec(ints=[0], exponent=-5000),
    }.items():
        _add(
            cases,
            "EncryptedVector.to_proto",
            name,
            lambda tmp, f=f: _roundtrip(f()),
            _roundtrip_check(f),
        )
    _cases_from_proto(cases)


def _roundtrip(v: EncryptedVector) -> tuple:
    msg = v.to_proto()
    return EncryptedVector.from_proto(pb.CiphertextVector.FromString(msg.SerializeToString()), v.public_key), v


def _roundtrip_check(f) -> Check:
    def check(out: Any) -> None:
        got, orig = out
        check_vec(got, "std", orig.decrypt_ints(sk()), orig.exponent, packing=orig.packing, actual_bound=False)

    return check


def _shifted(xs: list[int], shift: int) -> list[int]:
    if shift > 1 << 16 and any(xs):
        raise NoValue(f"values times 2^{shift} fit no key")
    return [v << shift for v in xs]


def _lower(new: Any, e: int) -> int:
    v = exact_int(new)
    if v > e:
        raise NoValue("raising the exponent")
    return v


def _combined(
    a: list[int], ea: int, other: Callable[[], tuple[list[int], int]] | None, sign: int
) -> tuple[list[int], int]:
    b, eb = other()
    e = min(ea, eb)
    return [(x << (ea - e)) + sign * (y << (eb - e)) for x, y in zip(a, b, strict=True)], e


def _same_len(vals: list[int], f: Callable[[], Any], fb: int) -> list[int]:
    n = len(encode(f(), fb))
    if n != 3:
        raise NoValue(f"{n} values for a vector of 3")
    return vals


def _plain_sum(xs: list[int], ex: int, values: list[float], frac_bits: Any) -> tuple[list[int], int]:
    fb = exact_int(frac_bits)
    plain = encode(values, fb)
    e = min(ex, -fb)
    return [(x << (ex - e)) + (p << (-fb - e)) for x, p in zip(xs, plain)], e


def _one(vals: list[int]) -> int:
    if len(vals) != 1:
        raise NoValue(f"{len(vals)} values for one scalar")
    return vals[0]


def _slots(vals: list[int]) -> list[int]:
    if any(abs(v) > PACK.slot_capacity for v in vals):
        raise NoValue("a slot beyond its capacity")
    return vals


def _one_dim(weights: Any, fb: int) -> list[int]:
    try:
        ndim = np.ndim(weights)
    except ValueError:
        raise NoValue("ragged weights") from None
    if ndim != 1 or isinstance(weights, (set, dict)) or inspect.isgenerator(weights):
        raise NoValue("weights must be one-dimensional")
    ks = encode(weights, fb)
    if len(ks) != 3:
        raise NoValue(f"{len(ks)} weights for 3 values")
    return ks


def _matvec(W: Any) -> list[int]:
    if isinstance(W, (str, bytes)) or W is None:
        raise NoValue("no matrix")
    try:
        arr = np.asarray(W, dtype=object)
    except ValueError:
        raise NoValue("ragged") from None
    if arr.ndim != 2 or arr.shape[1] != 3:
        raise NoValue(f"a matrix of shape {arr.shape}")
    return [sum(x * k for x, k in zip(X, encode(list(row), 0))) for row in arr]


def _indexed(idx: Any) -> list[int]:
    if isinstance(idx, slice):
        for v in (idx.start, idx.stop, idx.step):
            if v is not None:
                exact_int(v) if not isinstance(v, float) else _nv_raise("a float in a slice")
        return X[idx]
    if isinstance(idx, (list, np.ndarray)) and (
        (isinstance(idx, np.ndarray) and idx.dtype == bool) or (idx and all(isinstance(v, bool) for v in idx))
    ):
        if len(idx) != len(X):
            raise NoValue("a mask of another length")
        return [x for x, m in zip(X, idx) if m]
    if isinstance(idx, (list, tuple, np.ndarray)):
        if isinstance(idx, np.ndarray) and idx.ndim > 1:
            raise NoValue("a 2-D index")
        return [X[_in_index(exact_int(v))] for v in (idx.tolist() if isinstance(idx, np.ndarray) else idx)]
    if isinstance(idx, str) or idx is Ellipsis:
        raise NoValue(f"index {idx!r}")
    return [X[_in_index(exact_int(idx))]]


def _in_index(i: int) -> int:
    if not -3 <= i < 3:
        raise NoValue("out of range")
    return i


def _cases_from_proto(cases: CaseList) -> None:
    t = "EncryptedVector.from_proto"

    def msg(**kw) -> pb.CiphertextVector:
        m = vec().to_proto()
        for k, v in kw.items():
            if k == "ciphertexts":
                del m.ciphertexts[:]
                m.ciphertexts.extend(v)
            else:
                setattr(m, k, v)
        return m

    def b(x: int) -> bytes:
        x = int(x)
        return x.to_bytes((x.bit_length() + 7) // 8, "big")

    msgs: dict[str, tuple[Callable[[], Any], bool]] = {
        "valid": (lambda: msg(), True),
        "none": (lambda: None, False),
        "bytes": (lambda: msg().SerializeToString(), False),
        "key-message": (lambda: pb.PaillierPublicKey(n=b(pk().n)), False),
        "dict": (lambda: {"length": 3}, False),
        "other-fingerprint": (lambda: msg(key_fingerprint=pk("other").fingerprint), False),
        "zero-ciphertext": (lambda: msg(ciphertexts=[b(0), b(ct(1)), b(ct(1))]), False),
        "n2-ciphertext": (lambda: msg(ciphertexts=[b(pk().nsquare), b(ct(1)), b(ct(1))]), False),
        "non-unit": (lambda: msg(ciphertexts=[b(sk().p), b(ct(1)), b(ct(1))]), False),
        "long-ciphertext": (lambda: msg(ciphertexts=[b"\x00" * 65 + b(ct(1)), b(ct(1)), b(ct(1))]), False),
        "length-short": (lambda: msg(length=2), False),
        "exponent-positive": (lambda: msg(exponent=1), False),
        "exponent--4097": (lambda: msg(exponent=-4097), False),
        "slots-1-bits": (lambda: msg(slots_per_ciphertext=2, slot_bits=1), False),
        "slots-huge": (lambda: msg(slots_per_ciphertext=2**32 - 1, slot_bits=2), False),
        "slots-too-wide": (lambda: msg(slots_per_ciphertext=2, slot_bits=200), False),
    }
    for name, (f, good) in msgs.items():
        _add(
            cases,
            t,
            f"msg-{name}",
            lambda tmp, f=f: EncryptedVector.from_proto(f(), pk()),
            wants(lambda: X, lambda out, w: check_vec(out, "std", w, 0, actual_bound=False))
            if good
            else refuse("a damaged message"),
        )
    keys: dict[str, tuple[Callable[[], Any], bool]] = {
        "copy": (lambda: fresh_pk(), True),
        "other": (lambda: pk("other"), False),
        "none": (lambda: None, False),
        "private-key": (lambda: sk(), False),
    }
    for name, (f, good) in keys.items():
        _add(
            cases,
            t,
            f"public_key-{name}",
            lambda tmp, f=f: EncryptedVector.from_proto(msg(), f()),
            wants(lambda: X, lambda out, w: check_vec(out, "std", w, 0, actual_bound=False))
            if good
            else refuse("another key"),
        )
    kws: dict[str, tuple[dict, bool]] = {
        "length-3": ({"length": 3}, True),
        "length-float": ({"length": 3.0}, True),
        "length-2": ({"length": 2}, False),
        "length-str": ({"length": "3"}, False),
        "exponent-0": ({"exponent": 0}, True),
        "exponent-1": ({"exponent": 1}, False),
        "packing-unpacked": ({"packing": UNPACKED}, True),
        "packing-packed": ({"packing": PACK}, False),
        "packing-str": ({"packing": "x"}, False),
        "bound-11": ({"bound": 11}, True),
        "bound-zero": ({"bound": 0}, True),
        "bound-neg": ({"bound": -1}, False),
        "bound-neg-huge": ({"bound": -(2**1000)}, False),
        "bound-max_int+1": ({"bound": "max_int+1"}, False),
        "bound-nan": ({"bound": math.nan}, False),
        "bound-inf": ({"bound": math.inf}, False),
        "bound-float": ({"bound": 11.5}, True),
        "bound-str": ({"bound": "x"}, False),
        "what-none": ({"what": None}, True),
    }
    for name, (kw, good) in kws.items():

        def call(tmp, kw=kw):
            kw = {k: (int(pk().max_int) + 1 if v == "max_int+1" else v) for k, v in kw.items()}
            return EncryptedVector.from_proto(msg(), pk(), **kw)

        _add(
            cases,
            t,
            name,
            call,
            wants(lambda: X, lambda out, w: check_vec(out, "std", w, 0, actual_bound=False))
            if good
            else refuse("an argument out of range"),
        )
    # the declared bound is the receiver's: a negative one lets a product wrap
    _add(
        cases,
        t,
        "bound-neg-then-mul_int",
        lambda tmp: EncryptedVector.from_proto(msg(), pk(), bound=-1).mul_int(2**250),
        refuse("a vector with a negative bound multiplied past n/3"),
    )


# ---------------------------------------------------------------------------- Packing
def cases_packing(cases: CaseList) -> None:
    pairs: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "valid": (lambda: 4, lambda: 16),
        "unpacked": (lambda: 1, lambda: 0),
        "zero-slots": (lambda: 0, lambda: 8),
        "neg-slots": (lambda: -2, lambda: 8),
        "slot_bits-1": (lambda: 2, lambda: 1),
        "slot_bits-neg": (lambda: 2, lambda: -8),
        "unpacked-neg-bits": (lambda: 1, lambda: -5),
        "slots-float-half": (lambda: 2.5, lambda: 8),
        "slots-float-int": (lambda: 2.0, lambda: 8),
        "slot_bits-float-half": (lambda: 2, lambda: 8.5),
        "slots-none": (lambda: None, lambda: 8),
        "slot_bits-none": (lambda: 2, lambda: None),
        "slots-str": (lambda: "2", lambda: 8),
        "slots-true": (lambda: True, lambda: 0),
        "np-ints": (lambda: np.int64(2), lambda: np.int64(8)),
        "np-ints-wide": (lambda: np.int64(3), lambda: np.int64(40)),
        "slots-nan": (lambda: math.nan, lambda: 8),
        "slots-inf": (lambda: math.inf, lambda: 8),
        "slot_bits-inf": (lambda: 2, lambda: math.inf),
        "slots-huge": (lambda: 2**70, lambda: 8),
        "slot_bits-huge": (lambda: 2, lambda: 2**62),
        "slot_bits-2**1000": (lambda: 2, lambda: 2**1000),
    }
    for name, (fs, fb) in pairs.items():
        _add(cases, "Packing", name, lambda tmp, fs=fs, fb=fb: Packing(fs(), fb()), _packing_check(fs, fb))
    for name, f in {
        **pick("none true str float-half float-int nan inf np-int64 zero neg 2**63 2**1000"),
        "2": lambda: 2,
        "16": lambda: 16,
        "254": lambda: 254,
    }.items():
        _add(
            cases,
            "Packing.for_key",
            f"slot_bits-{name}",
            lambda tmp, f=f: Packing.for_key(pk(), f()),
            _for_key_check(f, lambda: None),
        )
    for name, f in pick("none true str float-half nan inf np-int64 zero neg 2**63").items():
        _add(
            cases,
            "Packing.for_key",
            f"max_slots-{name}",
            lambda tmp, f=f: Packing.for_key(pk(), 16, f()),
            _for_key_check(lambda: 16, f),
        )
    for name, f in {
        "none": lambda: None,
        "str": lambda: "x",
        "private-key": lambda: sk(),
        "other": lambda: pk("other"),
    }.items():
        _add(
            cases,
            "Packing.for_key",
            f"pk-{name}",
            lambda tmp, f=f: Packing.for_key(f(), 16),
            _for_key_check(lambda: 16, lambda: None, kname="other") if name == "other" else refuse("no public key"),
        )
    packs: dict[str, Callable[[], Any]] = {
        "valid": lambda: [5, -7, 11, 0, -32767],
        "empty": lambda: [],
        "at-capacity": lambda: [32767, -32767],
        "slot-min": lambda: [-32768, 1],
        "over-capacity": lambda: [32768, 1],
        "over-slot": lambda: [70000, 1],
        "huge": lambda: [2**1000],
        "float-half": lambda: [2.5, 1],
        "nan": lambda: [math.nan],
        "inf": lambda: [math.inf],
        "str": lambda: "12",
        "none": lambda: None,
        "list-none": lambda: [None],
        "np-int": lambda: np.array([1, -1]),
        "bools": lambda: [True, False],
    }
    for name, f in packs.items():
        _add(cases, "Packing.pack", f"ints-{name}", lambda tmp, f=f: PACK.pack(f()), _pack_check(f))
    unpacks: dict[str, tuple[Callable[[], Any], Callable[[], Any]]] = {
        "valid": (lambda: PACK.pack([5, -7, 11, 0, -32767]), lambda: 5),
        "length-short": (lambda: PACK.pack([5, -7, 11, 0, -32767]), lambda: 3),
        "length-long": (lambda: PACK.pack([5, -7, 11, 0, -32767]), lambda: 9),
        "length-neg": (lambda: [1], lambda: -1),
        "length-float-half": (lambda: [1], lambda: 1.5),
        "length-none": (lambda: [1], lambda: None),
        "leftover-bits": (lambda: [1 << 100], lambda: 4),
        "leftover-negative": (lambda: [-(1 << 100)], lambda: 4),
        "float-half": (lambda: [2.5], lambda: 1),
        "nan": (lambda: [math.nan], lambda: 1),
        "inf": (lambda: [math.inf], lambda: 1),
        "none": (lambda: None, lambda: 1),
        "str": (lambda: "12", lambda: 2),
    }
    for name, (fp, fl) in unpacks.items():
        _add(cases, "Packing.unpack", name, lambda tmp, fp=fp, fl=fl: PACK.unpack(fp(), fl()), _unpack_check(fp, fl))
    _add(
        cases,
        "Packing.unpack",
        "unpacked-layout",
        lambda tmp: UNPACKED.unpack([5, -3], 2),
        wants(lambda: [5, -3], equal),
    )
    for name, f in {**pick("none true str float-half nan inf np-int64 zero neg 2**1000"), "five": lambda: 5}.items():
        for layout, p in (("packed", PACK), ("unpacked", UNPACKED)):
            _add(
                cases,
                "Packing.n_ciphertexts",
                f"length-{name}-{layout}",
                lambda tmp, f=f, p=p: p.n_ciphertexts(f()),
                wants(lambda f=f, p=p: _n_cts(f(), p), equal),
            )


def _packing_check(fs, fb) -> Check:
    def expected() -> tuple[int, int]:
        s, b = fs(), fb()
        slots = exact_int(s)
        if isinstance(s, str) or slots < 1:
            raise NoValue("no slot count")
        if slots == 1:
            return 1, 0  # unpacked: slot_bits unused
        bits = exact_int(b)
        if not 2 <= bits <= 16384:
            raise NoValue(f"{bits}-bit slots fit no key (peers send moduli of at most 16384 bits)")
        return slots, bits

    def compare(p: Any, want: tuple[int, int]) -> None:
        slots, bits = want
        if not isinstance(p.slots, (int, np.integer)) or p.slots != slots or p.packed != (slots > 1):
            raise Wrong(f"Packing({p.slots!r}, {p.slot_bits!r}) for slots={slots}")
        if not p.packed:
            return
        try:
            cap, ncts = p.slot_capacity, p.n_ciphertexts(5)
            vals = [1, -1, 1, -1][: min(4, slots)]
            back = p.unpack(p.pack(vals), len(vals))
        except Exception as exc:  # noqa: BLE001 - a layout that was accepted and cannot be used
            raise Wrong(
                f"Packing({p.slots!r}, {p.slot_bits!r}) was accepted and fails: {type(exc).__name__}: {exc}"
            ) from None
        if cap != (1 << (bits - 1)) - 1 or ncts != -(-5 // slots) or back != vals:
            raise Wrong(f"capacity {cap}, {ncts} ciphertexts for 5 values, {vals} unpack to {back}")

    return wants(expected, compare)


def _for_key_check(fbits, fmax, kname: str = "std") -> Check:
    """A layout that fits the key (for_key's own rule: slots x bits <= bits(max_int) - 2), of ``slot_bits`` bits
    when packed (any huge or infinite size gives the unpacked layout), at most ``max_slots`` slots (None or inf: no
    limit)."""

    def expected() -> tuple[Any, Any]:
        b, m = fbits(), fmax()
        if isinstance(b, (bool, np.bool_, str)) or b is None or not (isinstance(b, float) and b == math.inf):
            bits = exact_int(b)
            if bits < 2:
                raise NoValue(f"slot_bits={b!r}")
        else:
            bits = None
        if m is not None and m != math.inf:
            m = exact_int(m)
        return bits, (None if m == math.inf else m)

    def compare(out: Any, want: tuple[Any, Any]) -> None:
        bits, m = want
        if not isinstance(out, Packing):
            raise Wrong(f"returned {_short(out)}")
        if not isinstance(out.slots, (int, np.integer)) or not isinstance(out.slot_bits, (int, np.integer)):
            raise Wrong(f"Packing({out.slots!r}, {out.slot_bits!r}): not integers")
        if out.packed and (out.slot_bits != bits or out.slots * out.slot_bits > pk(kname).max_int.bit_length() - 2):
            raise Wrong(f"{out.slots} slots of {out.slot_bits} bits for slot_bits={bits} on this key")
        if m is not None and out.slots > max(1, m):
            raise Wrong(f"{out.slots} slots for max_slots={m!r}")
        if out.packed:
            cap = (1 << (int(out.slot_bits) - 1)) - 1
            vals = [cap, -cap, 1] * -(-int(out.slots) // 3)
            try:
                back = out.unpack(out.pack(vals), len(vals))
            except Exception as exc:  # noqa: BLE001 - a layout that cannot be used
                raise Wrong(f"{out} fails to pack: {type(exc).__name__}: {exc}") from None
            if [int(v) for v in back] != vals:
                raise Wrong(f"{out} packs {_short(vals)} and unpacks {_short(back)}")

    return wants(expected, compare)


def _pack_check(f) -> Check:
    def expected() -> list[int]:
        vals = _int_list(f())
        if any(abs(v) > PACK.slot_capacity + (v == -(PACK.slot_capacity + 1)) for v in vals):
            raise NoValue("a value beyond the slot's range")
        return vals

    def compare(out: Any, vals: list[int]) -> None:
        want = [sum(v << (16 * j) for j, v in enumerate(vals[i : i + 4])) for i in range(0, len(vals), 4)]
        equal(out, want)
        if PACK.unpack(out, len(vals)) != vals:
            raise Wrong("the packed values do not unpack to themselves")

    return wants(expected, compare)


def _unpack_check(fp, fl) -> Check:
    def expected() -> list[int]:
        packed = _int_list(fp())
        n = exact_int(fl())
        if n < 0 or n > 4 * len(packed):
            raise NoValue(f"length {n} for {len(packed)} plaintexts")
        out: list[int] = []
        for P in packed:
            take = min(4, n - len(out))
            for _ in range(take):
                d = P & 0xFFFF
                d = d - 0x10000 if d >= 0x8000 else d
                out.append(d)
                P = (P - d) >> 16
            if take == 4 and P != 0:
                raise NoValue("a plaintext with bits beyond its slots")
        return out

    return wants(expected, equal)


def _n_cts(length: Any, p: Packing) -> int:
    n = exact_int(length)
    if n < 0 or isinstance(length, str):
        raise NoValue(f"length {length!r}")
    return -(-n // p.slots)


# ---------------------------------------------------------------------------- decode_fixed
def cases_decode(cases: CaseList) -> None:
    for name, f in {
        **INT_FEW,
        "-1100": lambda: -1100,
        "1100": lambda: 1100,
        "-2**62": lambda: -(2**62),
        "2**62": lambda: 2**62,
    }.items():
        _add(
            cases,
            "decode_fixed",
            f"exponent-{name}",
            lambda tmp, f=f: list(decode_fixed([3, -1, 2**60 + 1, 0], f())),
            wants(lambda f=f: [scaled_float(i, exact_int(f())) for i in [3, -1, 2**60 + 1, 0]], _floats_equal),
        )
    for name, f in {
        "ints": lambda: [3, -1],
        "empty": lambda: [],
        "big": lambda: [2**2000, -(2**2000)],
        "mpz": lambda: [mpz(2**100 + 1)],
        "float-half": lambda: [2.5],
        "float-int": lambda: [3.0],
        "nan": lambda: [math.nan],
        "inf": lambda: [math.inf],
        "numstrs": lambda: ["3"],
        "strs": lambda: ["x"],
        "none": lambda: None,
        "list-none": lambda: [None],
        "np-int64": lambda: np.array([3, -1]),
        "np-float": lambda: np.array([2.5]),
        "str": lambda: "12",
        "bools": lambda: [True, False],
        "generator": lambda: (v for v in [3, -1]),
    }.items():
        _add(
            cases,
            "decode_fixed",
            f"ints-{name}",
            lambda tmp, f=f: list(decode_fixed(f(), -1)),
            wants(lambda f=f: [scaled_float(i, -1) for i in _int_list(_gen_list(f()))], _floats_equal),
        )


def _gen_list(v: Any) -> Any:
    return list(v) if inspect.isgenerator(v) else v


def _floats_equal(out: Any, want: list[float]) -> None:
    got = [float(v) for v in out]
    if len(got) != len(want) or any(
        not (g == w and math.copysign(1, g) == math.copysign(1, w)) and not (g == w == 0) for g, w in zip(got, want)
    ):
        raise Wrong(f"returned {_short(got)}, the plaintext computation gives {_short(want)}")


# ---------------------------------------------------------------------------- ObfuscatorPool
def _pool_works(pool: Any, kname: str = "std") -> tuple:
    try:
        return pool, pool.encrypt(-6), pool.stats()
    finally:
        pool.close()


def _pool_check(kname: str = "std") -> Check:
    def check(out: Any) -> None:
        _pool, c, stats = out
        decrypts(kname)(c, -6)
        if any(v < 0 for v in stats.values()):
            raise Wrong(f"stats {stats}")

    return check


def cases_pool(cases: CaseList) -> None:
    t = "ObfuscatorPool"
    for name, (f, good) in {
        "own": (lambda: pk(), True),
        "none": (lambda: None, False),
        "str": (lambda: "x", False),
        "private-key": (lambda: sk(), False),
    }.items():
        _add(
            cases,
            t,
            f"public_key-{name}",
            lambda tmp, f=f: _pool_works(ObfuscatorPool(f(), lambda: pk().raw_encrypt(0), background=False)),
            _pool_check() if good else refuse("no public key"),
        )
    for name, f in {"none": lambda: None, "int": lambda: 5, "returns-none": lambda: lambda: None}.items():
        _add(
            cases,
            t,
            f"fn-{name}",
            lambda tmp, f=f: _pool_works(ObfuscatorPool(pk(), f(), background=False)),
            refuse("no obfuscator function"),
        )
    counts = pick("none true str numstr float-half nan inf -inf np-int64 zero neg object")
    sizes = pick("none str float-half nan inf neg zero")  # sizing hints: clamped, never wrong
    for arg in ("capacity", "low_water"):
        for name, f in sizes.items():
            _add(
                cases,
                t,
                f"{arg}-{name}",
                lambda tmp, f=f, arg=arg: _pool_works(
                    ObfuscatorPool(pk(), lambda: pk().raw_encrypt(0), background=False, **{arg: f()})
                ),
                _pool_check(),
            )
    _add(
        cases,
        t,
        "background",
        lambda tmp: _pool_works(ObfuscatorPool(pk(), lambda: pk().raw_encrypt(0), capacity=4, background=True)),
        _pool_check(),
    )
    for maker, _kname, obj in (
        ("for_public_key", "std", pk),
        ("for_private_key", "std", sk),
    ):
        for name, f in {**sizes, "2**64": lambda: 2**64}.items():
            _add(
                cases,
                f"ObfuscatorPool.{maker}",
                f"uses-{name}",
                lambda tmp, f=f, maker=maker, obj=obj: _pool_works(
                    getattr(ObfuscatorPool, maker)(
                        PrivateKey(fresh_pk(), sk().p, sk().q) if obj is sk else PublicKey(int(pk().n)),
                        background=False,
                        uses=f(),
                    )
                ),
                _pool_check(),
            )
        for name, f in {"none": lambda: None, "str": lambda: "x", "wrong-kind": (sk if obj is pk else pk)}.items():
            _add(
                cases,
                f"ObfuscatorPool.{maker}",
                f"key-{name}",
                lambda tmp, f=f, maker=maker: _pool_works(getattr(ObfuscatorPool, maker)(f(), background=False)),
                refuse("no key of that kind"),
            )
        _add(
            cases,
            f"ObfuscatorPool.{maker}",
            "subgroup",
            lambda tmp, maker=maker, obj=obj: _pool_works(
                getattr(ObfuscatorPool, maker)(obj("sub"), background=False), "sub"
            ),
            _pool_check("sub"),
        )
        _add(
            cases,
            f"ObfuscatorPool.{maker}",
            "nice-background",
            lambda tmp, maker=maker, obj=obj: _pool_works(
                getattr(ObfuscatorPool, maker)(obj(), capacity=2, background=True, uses=4, nice=True)
            ),
            _pool_check(),
        )

    def pool() -> ObfuscatorPool:
        return ObfuscatorPool.for_public_key(pk(), background=False)

    for name, f in {**counts, "two": lambda: 2}.items():
        _add(
            cases,
            "ObfuscatorPool.take",
            f"count-{name}",
            lambda tmp, f=f: _took(pool(), f()),
            wants(lambda f=f: _count_ok(f()), _took_check),
        )
        _add(
            cases,
            "ObfuscatorPool.precompute",
            f"count-{name}",
            lambda tmp, f=f: _precomputed(pool(), f()),
            wants(lambda f=f: max(0, _count_ok(f(), allow_neg=True)), _stock_check),
        )
        if name not in sizes:
            continue
        _add(
            cases,
            "ObfuscatorPool.precompute",
            f"threads-{name}",
            lambda tmp, f=f: _precomputed(pool(), 3, threads=f()),
            wants(lambda: 3, _stock_check),
        )
        _add(
            cases,
            "ObfuscatorPool.fill",
            f"count-{name}",
            lambda tmp, f=f: _filled(pool(), f()),
            wants(lambda f=f: max(0, _count_ok(f(), allow_neg=True)), _stock_check),
            seconds=3,
        )
        _add(
            cases,
            "ObfuscatorPool.fill",
            f"step-{name}",
            lambda tmp, f=f: _filled(pool(), 3, step=f()),
            wants(lambda f=f: _step_ok(f()), _stock_check),
            seconds=3,
        )
        _add(
            cases,
            "ObfuscatorPool.fill_behind",
            f"count-{name}",
            lambda tmp, f=f: _filled_behind(pool(), f()),
            wants(lambda f=f: max(0, _count_ok(f(), allow_neg=True)), _stock_check),
            seconds=6,
        )
    for name, f in {
        "none": lambda: None,
        "str": lambda: "x",
        "event": threading.Event,
        "set-event": lambda: _set_event(),
    }.items():
        _add(
            cases,
            "ObfuscatorPool.fill",
            f"stop-{name}",
            lambda tmp, f=f: _filled(pool(), 3, stop=f()),
            wants(
                lambda name=name: (
                    0 if name == "set-event" else 3 if name in ("none", "event") else _nv_raise("no event")
                ),
                _stock_check,
            ),
            seconds=3,
        )
    _add(cases, "ObfuscatorPool.get", "empty-stock", lambda tmp: _pool_get(pool()), wants(lambda: 0, decrypts("std")))
    _add(cases, "ObfuscatorPool.fn_warm", "valid", lambda tmp: _warmed(pool()), wants(lambda: 1, _stock_check))
    _add(cases, "ObfuscatorPool.stats", "valid", lambda tmp: pool().stats(), wants(lambda: None, lambda o, w: None))
    _add(cases, "ObfuscatorPool.close", "twice", lambda tmp: _closed_twice(pool()), anything)
    plains = {
        **pick("none true str numstr float-half float-int nan inf np-int64 mpz object neg 2**1000"),
        "max_int": lambda: int(pk().max_int),
        "max_int+1": lambda: int(pk().max_int) + 1,
    }
    for name, f in plains.items():
        _add(
            cases,
            "ObfuscatorPool.encrypt",
            f"m-{name}",
            lambda tmp, f=f: pool().encrypt(f()),
            wants(lambda f=f: _in_range(f(), "std"), decrypts("std")),
        )
    for name, f in {
        "empty": lambda: [],
        "list": lambda: [1, -2],
        "generator": lambda: (v for v in [1, -2]),
        "str": lambda: "12",
        "none": lambda: None,
        "float-half": lambda: [2.5],
        "inf": lambda: [math.inf],
    }.items():
        _add(
            cases,
            "ObfuscatorPool.encrypt_many",
            f"ms-{name}",
            lambda tmp, f=f: pool().encrypt_many(f()),
            wants(lambda f=f: [_in_range(v, "std") for v in _int_list(_gen_list(f()))], _each_decrypts("std")),
        )
    for name in ("valid", "zero", "p", "n2", "n2+c", "neg", "float-half", "none", "str", "foreign-big", "inf"):
        g = lambda f=CTS[name]: f("std")  # noqa: E731
        _add(
            cases,
            "ObfuscatorPool.rerandomize",
            f"c-{name}",
            lambda tmp, g=g: pool().rerandomize(g()),
            ct_op_check("std", g, lambda m: m, compare_signed=False),
        )


def _count_ok(v: Any, allow_neg: bool = False) -> int:
    n = exact_int(v)
    if (n < 0 and not allow_neg) or n > 10**6:
        raise NoValue(f"count {v!r}")
    return n


def _step_ok(v: Any) -> int:
    """fill's step is a batch size: any real >= 1 (floored) fills the 3 asked for."""
    _kind, x = _real(v)
    if not 1 <= x < math.inf:
        raise NoValue(f"step {v!r}")
    return 3


def _took(pool: ObfuscatorPool, count: Any) -> tuple:
    return pool.take(count), pool.stats()


def _took_check(out: Any, want: int) -> None:
    got, stats = out
    if len(got) != want or stats["inline"] != want:
        raise Wrong(f"took {len(got)} obfuscators, stats {stats}, for a count of {want}")
    for c in got:
        decrypts("std")(c, 0)


def _precomputed(pool: ObfuscatorPool, count: Any, **kw) -> dict:
    pool.precompute(count, **kw)
    return pool.stats()


def _filled(pool: ObfuscatorPool, count: Any, **kw) -> dict:
    made = pool.fill(count, **kw)
    return {**pool.stats(), "made": made}


def _filled_behind(pool: ObfuscatorPool, count: Any) -> dict:
    th = pool.fill_behind(count)
    th.join(4)
    alive = th.is_alive()
    pool.close()
    out = pool.stats()
    return {**out, "alive": alive} if alive else out


def _stock_check(out: Any, want: int) -> None:
    if out.get("alive") or out.get("made", want) != want or out["stock"] != want or out["precomputed"] != want:
        raise Wrong(f"stats {out} after asking for {want}")


def _set_event() -> threading.Event:
    e = threading.Event()
    e.set()
    return e


def _pool_get(pool: ObfuscatorPool) -> mpz:
    return pool.get()


def _warmed(pool: ObfuscatorPool) -> dict:
    pool.fn_warm()
    return pool.stats()


def _closed_twice(pool: ObfuscatorPool) -> dict:
    pool.close()
    pool.close()
    return pool.stats()


def _each_decrypts(kname: str) -> Callable[[Any, Any], None]:
    def compare(out: Any, want: list[int]) -> None:
        if not isinstance(out, list) or len(out) != len(want):
            raise Wrong(f"returned {_short(out)} for {len(want)} plaintexts")
        for o, w in zip(out, want):
            decrypts(kname)(o, w)

    return compare


# ---------------------------------------------------------------------------- CryptoThreads
def cases_threads(cases: CaseList) -> None:
    t = "CryptoThreads"
    for name, f in {
        **pick("none true false str numstr float-half float-int nan inf np-int64 zero neg object"),
        "2**40": lambda: 2**40,
    }.items():
        _add(
            cases,
            t,
            f"workers-{name}",
            lambda tmp, f=f: _threads_use(CryptoThreads(f())),
            wants(lambda f=f: _workers_ok(f()), _threads_check),
        )
    for name, v in {
        "urgent": "urgent",
        "background": "background",
        "upper": "URGENT",
        "none": None,
        "list": [],
        "int": 0,
    }.items():
        _add(
            cases,
            t,
            f"priority-{name}",
            lambda tmp, v=v: _threads_use(CryptoThreads(2, priority=v)),
            wants(lambda v=v: 2 if v in ("urgent", "background") else _nv_raise("no priority"), _threads_check),
        )
    for name, v in {"none": None, "int": 5, "empty": ""}.items():
        _add(
            cases,
            t,
            f"name-{name}",
            lambda tmp, v=v: _threads_use(CryptoThreads(2, name=v)),
            wants(lambda: 2, _threads_check),
        )
    for name, (f, want) in {
        "valid": (lambda: (abs, [-1, 2]), [1, 2]),
        "empty": (lambda: (abs, []), []),
        "none-fn": (lambda: (None, [1]), None),
        "items-none": (lambda: (abs, None), None),
        "generator": (lambda: (abs, (v for v in [-3])), [3]),
    }.items():
        _add(
            cases,
            "CryptoThreads.map",
            name,
            lambda tmp, f=f: _with_threads(lambda ct: ct.map(*f())),
            wants(lambda w=want: w, equal) if want is not None else refuse("no function or no items"),
        )
        _add(
            cases,
            "CryptoThreads.amap",
            name,
            lambda tmp, f=f: _with_threads(lambda ct: asyncio.run(ct.amap(*f()))),
            wants(lambda w=want: w, equal) if want is not None else refuse("no function or no items"),
        )
    _add(
        cases,
        "CryptoThreads.arun",
        "valid",
        lambda tmp: _with_threads(lambda ct: asyncio.run(ct.arun(abs, -4))),
        wants(lambda: 4, equal),
    )
    _add(
        cases,
        "CryptoThreads.arun",
        "none-fn",
        lambda tmp: _with_threads(lambda ct: asyncio.run(ct.arun(None))),
        refuse("no function"),
    )
    _add(cases, "CryptoThreads.close", "twice", lambda tmp: _closed_threads(), anything)
    _add(
        cases,
        "CryptoThreads.executor",
        "valid",
        lambda tmp: _with_threads(lambda ct: ct.executor.submit(abs, -2).result()),
        wants(lambda: 2, equal),
    )
    for kname in ("std", "sub", "crt", "sub-crt"):
        sfx = "" if kname == "std" else f"-{kname}"
        cts_cases: dict[str, Callable[[], Any]] = {
            "one": lambda kname=kname: [ct(-5, kname)],
            "several": lambda kname=kname: [ct(-5, kname), ct(6, kname), ct(0, kname)],
            "empty": lambda: [],
            "zero": lambda kname=kname: [ct(-5, kname), 0],
            "non-unit": lambda kname=kname: [sk(kname).p, ct(6, kname)],
            "n2+c": lambda kname=kname: [pk(kname).nsquare + ct(6, kname), ct(1, kname)],
            "foreign-big": lambda kname=kname: [int(ct(7, "big")), ct(1, kname)],
            "float-half": lambda: [2.5, 3.5],
            "none": lambda: None,
            "list-none": lambda: [None, None],
            "str": lambda: "12",
        }
        if kname in ("crt", "sub-crt"):
            cts_cases = {
                k: v for k, v in cts_cases.items() if k in ("one", "several", "zero", "non-unit", "n2+c", "foreign-big")
            }
        for name, f in cts_cases.items():
            for meth in ("decrypt_signed", "adecrypt_signed")[: 2 if name in ("one", "several", "zero") else 1]:
                _add(
                    cases,
                    f"CryptoThreads.{meth}",
                    f"cts-{name}{sfx}",
                    lambda tmp, f=f, meth=meth, kname=kname: _with_threads(
                        lambda th: _maybe_async(getattr(th, meth)(sk(kname), f()))
                    ),
                    _decrypted_many(kname, f),
                )
    for name, f in {
        "none": lambda: None,
        "other": lambda: sk("other"),
        "public-key": lambda: pk(),
        "str": lambda: "x",
    }.items():
        for n_cts in (1, 3):
            _add(
                cases,
                "CryptoThreads.decrypt_signed",
                f"sk-{name}-{n_cts}",
                lambda tmp, f=f, n_cts=n_cts: _with_threads(lambda th: th.decrypt_signed(f(), [ct(1)] * n_cts)),
                refuse("no private key for these ciphertexts") if name != "other" else anything,
            )


def _workers_ok(v: Any) -> int:
    if v is None:
        return os.cpu_count() or 1
    n = exact_int(v)
    if n < 1:
        raise NoValue(f"workers={v!r}")
    return n


def _threads_use(th: CryptoThreads) -> tuple:
    try:
        return th.workers, th.map(abs, [-1, 2, -3])
    finally:
        th.close()


def _threads_check(out: Any, want: int) -> None:
    workers, mapped = out
    if workers != want or type(workers) is not int or mapped != [1, 2, 3]:
        raise Wrong(f"{workers!r} workers, map gave {mapped}, expected {want}")


def _with_threads(fn: Callable[[CryptoThreads], Any]) -> Any:
    with CryptoThreads(2) as th:
        return fn(th)


def _closed_threads() -> int:
    th = CryptoThreads(1)
    th.close()
    th.close()
    return th.workers


def _maybe_async(x: Any) -> Any:
    return asyncio.run(x) if inspect.iscoroutine(x) else x


def _decrypted_many(kname: str, f: Callable[[], Any]) -> Check:
    def check(out: Any) -> None:
        cts = f()
        if isinstance(cts, (str, bytes)) or cts is None:
            raise Wrong(f"decrypted {_short(out)} from {cts!r}")
        want = []
        for c in cts:
            try:
                kind, m = ct_meaning(c, kname)
            except NoValue as exc:
                raise Wrong(f"decrypted {_short(out)} from a ciphertext that is no integer ({exc})") from None
            if kind == "invalid":
                raise Wrong(f"decrypted {_short(out)} from a ciphertext that is 0 mod n² or not a unit")
            want.append(_signed(m, kname))
        equal(out, want)

    return check


# ============================================================================ all cases
def _build_cases() -> list[Case]:
    cases: CaseList = []
    cases_generate_keypair(cases)
    cases_public_key(cases)
    cases_public_key_methods(cases)
    cases_private_key(cases)
    cases_private_key_methods(cases)
    cases_key_files(cases)
    cases_vector_constructors(cases)
    cases_vector_ops(cases)
    cases_packing(cases)
    cases_decode(cases)
    cases_pool(cases)
    cases_threads(cases)
    return cases


CASES = _build_cases()

# ============================================================================ known bugs (diagnosis, case ids)
_BUGS: list[tuple[str, tuple[str, ...]]] = [
    (
        "[judgement] the raw operations trust their ciphertexts: "
        "rerandomize/rerandomize_textbook/obfuscator(factor)/raw_add (paillier.py:256-279, modexp.py:167) and "
        "ObfuscatorPool.rerandomize (obfuscation.py:213) return 0, a non-unit, or (subgroup key) randomness "
        "outside its subgroup for c = 0, p, n, n^2 or a foreign ciphertext >= n^2 -- none of them a ciphertext. "
        "validate_ciphertext exists for outside inputs; the raw layer could refuse 0 and non-units as cheaply.",
        (
            "ObfuscatorPool.rerandomize-c-n2",
            "ObfuscatorPool.rerandomize-c-p",
            "ObfuscatorPool.rerandomize-c-zero",
            "PublicKey.obfuscator-factor-p",
            "PublicKey.obfuscator-factor-zero",
            "PublicKey.raw_add-c-p",
            "PublicKey.raw_add-c-zero",
            "PublicKey.rerandomize-c-foreign-big-subgroup",
            "PublicKey.rerandomize-c-n",
            "PublicKey.rerandomize-c-n2",
            "PublicKey.rerandomize-c-p",
            "PublicKey.rerandomize-c-p-subgroup",
            "PublicKey.rerandomize-c-zero",
            "PublicKey.rerandomize-c-zero-subgroup",
            "PublicKey.rerandomize_textbook-c-p",
            "PublicKey.rerandomize_textbook-c-zero",
        ),
    ),
]

KNOWN_BUGS: dict[str, str] = {case_id: why for why, ids in _BUGS for case_id in ids}


@pytest.mark.parametrize("case", params_with_known_bugs(CASES, KNOWN_BUGS))
def test_a_crypto_call_is_right_or_refused_clearly(case: Case, tmp_path: Path) -> None:
    run_case(case, tmp_path)


def test_the_cases_are_deterministic_and_unique() -> None:
    check_cases(CASES, _build_cases, KNOWN_BUGS, _BUGS)


#: public callables with no argument to fuzz (properties, constants, context managers)
NOT_CALLED_WITH_ARGUMENTS = {
    "DEFAULT_FRAC_BITS",
    "UNPACKED",
    "PublicKey.phe",
    "PublicKey.subgroup",
    "PublicKey.kind",
    "PublicKey.subgroup_base",
    "PublicKey.obfuscation_bits",
    "PublicKey.table",
    "PrivateKey.phe",
    "PrivateKey.interleaved_halves",
    "PrivateKey.tables_ready",
    "EncryptedVector.capacity",
    "EncryptedVector.bound",
    "EncryptedVector.ciphertexts",
    "EncryptedVector.exponent",
    "EncryptedVector.length",
    "EncryptedVector.packing",
    "EncryptedVector.public_key",
    "Packing.packed",
    "Packing.slot_capacity",
    "Packing.slots",
    "Packing.slot_bits",
}


def test_every_public_callable_is_fuzzed() -> None:
    """Every name of smcdp.crypto.__all__ and every public method of its classes is a target of some case (or has no
    argument: NOT_CALLED_WITH_ARGUMENTS)."""
    targets = {c.target for c in CASES}
    missing = []
    for name in crypto.__all__:
        obj = getattr(crypto, name)
        if name not in targets and name not in NOT_CALLED_WITH_ARGUMENTS:
            missing.append(name)
        if inspect.isclass(obj):
            members = {m for klass in obj.__mro__ if klass.__module__.startswith("smcdp.") for m in vars(klass)}
            members |= set(getattr(obj, "__slots__", ()))
            for m in sorted(members):
                dunder = m in ("__add__", "__sub__", "__neg__", "__getitem__")
                if (m.startswith("_") and not dunder) or m in ("__enter__", "__exit__"):
                    continue
                q = f"{name}.{m}"
                if q not in targets and q not in NOT_CALLED_WITH_ARGUMENTS:
                    missing.append(q)
    assert not missing, f"public callables no case calls: {missing}"
