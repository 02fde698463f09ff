"""Fixed-point encoding and plaintext packing (no keys, no ciphertexts).

Fixed point
    A value ``x`` is the integer ``round(x · 2^F)`` with ``F`` fractional bits;
    a vector of such integers carries the base-2 exponent ``-F``.
    :func:`encode_float` rounds exactly (half away from zero) from the float's
    binary representation, so no precision is lost before encryption.

Packing
    With ``slot_bits = s``, one Paillier plaintext holds up to ``slots`` signed
    values as balanced base-2^s digits ``P = Σ_j v_j · 2^(s·j)``,
    ``|v_j| < 2^(s-1)``.  Addition and multiplication by an integer act on
    every slot independently while no slot leaves that range, and negative
    values need no offset (docs/crypto.md gives the capacity rule).
"""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from smcdp.crypto.ints import as_int
from smcdp.errors import CryptoOverflow, InvalidMessage

if TYPE_CHECKING:  # typing only: encoding needs no key at run time
    from smcdp.crypto.paillier import PublicKey

#: Default fractional bits of fixed-point encodings.
DEFAULT_FRAC_BITS = 40


#: the largest magnitude of a fixed-point exponent (fractional bits); the wire takes 4,096 (a 2^62 shift ran out
#: of memory)
MAX_FRAC_BITS = 1 << 14


def check_frac_bits(frac_bits: object, what: str = "frac_bits") -> int:
    """``frac_bits`` (or an exponent) as an int of magnitude at most :data:`MAX_FRAC_BITS`; ValueError/TypeError."""
    if isinstance(frac_bits, (float, np.floating)) or (isinstance(frac_bits, np.ndarray) and frac_bits.ndim):
        raise TypeError(f"{what} must be an integer, got {frac_bits!r}")
    e = operator.index(frac_bits)  # type: ignore[arg-type]  # TypeError for what is no integer
    if abs(e) > MAX_FRAC_BITS:
        raise ValueError(f"{what} = {e} is beyond ±{MAX_FRAC_BITS}")
    return int(e)


def encode_fixed(values: ArrayLike, frac_bits: int) -> list[int]:
    """round(v · 2^frac_bits) for each finite value (exact for integer input, Python ints beyond int64 included)."""
    frac_bits = check_frac_bits(frac_bits)
    if isinstance(values, (str, bytes)):
        raise TypeError("values must be numbers, not a string")
    if isinstance(values, (list, tuple)) and all(isinstance(v, numbers.Integral) for v in values):
        return [_scaled_int(int(v), frac_bits) for v in values]  # numpy would make 2^63 + 1 a float64
    arr = np.asarray(values)
    if arr.dtype.kind not in "biufO":  # complex (the imaginary part would be dropped), dates, strings, bytes
        raise InvalidMessage(f"cannot encode values of dtype {arr.dtype} in fixed point")
    if arr.dtype.kind in "biu":
        return [_scaled_int(int(v), frac_bits) for v in arr.ravel()]
    if arr.dtype == object:
        out = []
        for v in arr.ravel():
            if isinstance(v, numbers.Integral):
                out.append(_scaled_int(int(v), frac_bits))
            elif isinstance(v, (complex, np.complexfloating, str, bytes)):
                raise InvalidMessage(f"cannot encode {type(v).__name__} values in fixed point")
            else:
                out.append(encode_float(float(v), frac_bits))
        return out
    arr = arr.astype(np.float64, copy=False)
    if not np.all(np.isfinite(arr)):
        raise InvalidMessage("cannot encrypt NaN or infinite values")
    return [encode_float(v, frac_bits) for v in arr.ravel().tolist()]


def encode_float(v: float, frac_bits: int) -> int:
    """round(v · 2^frac_bits) exactly (half away from zero) for a finite float."""
    if not math.isfinite(v):
        raise InvalidMessage("cannot encode NaN or infinite values in fixed point")
    m, e = math.frexp(v)  # v = m·2^e, 0.5 <= |m| < 1, exact
    mi = int(m * (1 << 53))  # exact 53-bit mantissa
    shift = e - 53 + frac_bits
    if shift >= 0:
        return mi << shift
    # round half away from zero (inline rather than _scaled_int: this runs once per value encrypted)
    q, r = divmod(abs(mi), 1 << -shift)
    if 2 * r >= (1 << -shift):
        q += 1
    return q if mi >= 0 else -q


def _scaled_int(v: int, shift: int) -> int:
    """round(v · 2^shift) for an int, exactly: a left shift, or for a negative ``shift`` the quotient rounded half
    away from zero (integers with negative ``frac_bits`` are rounded as floats are)."""
    if shift >= 0:
        return v << shift
    q, r = divmod(abs(v), 1 << -shift)
    if 2 * r >= (1 << -shift):
        q += 1
    return q if v >= 0 else -q


def decode_fixed(ints: Iterable[int], exponent: int) -> np.ndarray:
    """Integers · 2^exponent as float64, each correctly rounded (±inf beyond the float range).

    A negative exponent divides exactly with Python's integer true division,
    which rounds once, correctly, also into the subnormal range: 2^900 · 2^-1100
    is 2^-200, not the 0.0 that ``float(v) * 2.0**exponent`` would give once
    2.0**exponent underflows.
    """
    exponent = check_frac_bits(exponent, "exponent")
    if isinstance(ints, (str, bytes)):
        raise TypeError("decode_fixed takes integers, not a string")
    divisor = 1 << -exponent if exponent < 0 else 1
    out = []
    for v in ints:
        v = v if type(v) is int else as_int(v)
        try:
            if exponent >= 0 or (v.bit_length() <= 53 and exponent >= -1021):
                # exact float, scaled exactly (the result is a normal float or overflows)
                out.append(math.ldexp(float(v), exponent))
            else:
                out.append(v / divisor)
        except OverflowError:
            out.append(math.inf if v > 0 else -math.inf)
    return np.asarray(out, dtype=np.float64)


#: bounds on a packing's fields: far beyond any key (a modulus has at most 16,384 bits), small enough to allocate
MAX_SLOT_BITS = 1 << 15
MAX_SLOTS = 1 << 15


@dataclass(frozen=True)
class Packing:
    """Layout of packed ciphertexts: ``slots`` signed values of ``slot_bits`` bits each."""

    slots: int = 1
    slot_bits: int = 0

    def __post_init__(self) -> None:
        # Python ints whatever came in: numpy int64 fields made every shift below wrap silently at 64 bits
        for name in ("slots", "slot_bits"):
            v = getattr(self, name)
            if isinstance(v, (float, np.floating)):
                raise TypeError(f"a packing's {name} must be an integer, got {v!r}")
            object.__setattr__(self, name, int(operator.index(v)))
        if not (0 <= self.slot_bits <= MAX_SLOT_BITS and self.slots <= MAX_SLOTS):
            raise ValueError(f"a packing has 1..{MAX_SLOTS} slots of 0..{MAX_SLOT_BITS} bits, got {self}")
        if self.slots < 1:
            raise ValueError(f"a packing needs at least one slot, got {self.slots}")
        if self.slots > 1 and self.slot_bits < 2:
            raise ValueError(f"packed slots need slot_bits >= 2 (a sign and a value bit), got {self.slot_bits}")

    @property
    def packed(self) -> bool:
        """Whether more than one value shares a ciphertext."""
        return self.slots > 1

    @property
    def slot_capacity(self) -> int:
        """Largest allowed ``|value|`` per slot."""
        return (1 << (self.slot_bits - 1)) - 1

    @classmethod
    def for_key(cls, pk: PublicKey, slot_bits: int, max_slots: int | None = None) -> Packing:
        """As many slots of ``slot_bits`` as fit below n/3 (at least 1)."""
        if not hasattr(pk, "max_int"):  # a PrivateKey, None, an int (paillier imports this module, not the reverse)
            raise TypeError(f"Packing.for_key takes a PublicKey, got {type(pk).__name__}")
        slot_bits = as_int(slot_bits)  # not truncated: 2.5 or NaN is refused
        if slot_bits < 2:
            raise ValueError("slot_bits must be >= 2")
        if max_slots is not None:
            max_slots = as_int(max_slots)
        usable = pk.max_int.bit_length() - 2
        slots = max(1, usable // slot_bits)
        if max_slots is not None:
            slots = max(1, min(slots, max_slots))
        if slots == 1:
            return cls(1, 0)
        return cls(slots, slot_bits)

    def pack(self, ints: Sequence[int]) -> list[int]:
        """Pack signed integers ``slots`` to a plaintext, value j of each group at bit ``j * slot_bits`` (:meth:`unpack` undoes it).
        A value beyond its slot's signed range would carry into the next slot: refused (CryptoOverflow)."""
        if isinstance(ints, (str, bytes)):
            raise TypeError("pack takes integers, not a string")
        s = self.slot_bits
        lo, hi = -(1 << (s - 1)), (1 << (s - 1)) - 1
        vals = ints if type(ints) is list and all(type(v) is int for v in ints) else [as_int(v) for v in ints]
        if vals and not (lo <= min(vals) and max(vals) <= hi):
            raise CryptoOverflow(f"a value does not fit a slot of {s} bits")
        out = []
        for start in range(0, len(vals), self.slots):
            acc = 0
            for j, v in enumerate(vals[start : start + self.slots]):
                acc += v << (s * j)
            out.append(acc)
        return out

    def unpack(self, packed: Sequence[int], length: int) -> list[int]:
        """The first ``length`` signed integers held in the packed plaintexts."""
        if isinstance(packed, (str, bytes)):
            raise TypeError("unpack takes integers, not a string")
        s = self.slot_bits
        full, half = 1 << s, 1 << (s - 1)
        out: list[int] = []
        for P in packed:
            P = as_int(P)
            for _ in range(self.slots):
                if len(out) == length:
                    break
                d = P & (full - 1)
                if d >= half:
                    d -= full
                out.append(d)
                P = (P - d) >> s
            else:
                if P:  # bits above the last slot: a value overflowed its slot (or the plaintext is no packing)
                    raise CryptoOverflow("a packed plaintext holds more than its slots: a value overflowed")
        if len(out) != length:
            raise InvalidMessage("packed ciphertexts hold fewer values than declared")
        return out

    def n_ciphertexts(self, length: int) -> int:
        """How many ciphertexts hold ``length`` values (an int >= 0)."""
        length = as_int(length)
        if length < 0:
            raise ValueError(f"a length is at least 0, got {length}")
        return -(-length // self.slots) if self.packed else length


#: One value per ciphertext (no packing).
UNPACKED = Packing()


# --------------------------------------------------------------------------- integers as bytes
def int_to_bytes(x: int) -> bytes:
    """Big-endian, minimal length (``b""`` for 0); refuses negatives."""
    x = int(x)
    if x < 0:
        raise ValueError("negative integer")
    return x.to_bytes((x.bit_length() + 7) // 8, "big")


def bytes_to_int(b: bytes) -> int:
    """The non-negative integer whose big-endian bytes are ``b`` (the inverse of :func:`int_to_bytes`)."""
    return int.from_bytes(b, "big")
