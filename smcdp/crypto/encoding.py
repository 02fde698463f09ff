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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from smcdp.errors import InvalidMessage

if TYPE_CHECKING:  # typing only: encoding needs no key at run time
    from smcdp.crypto.paillier import PublicKey

#: Default fractional bits of fixed-point encodings.
DEFAULT_FRAC_BITS = 40


def encode_fixed(values: ArrayLike, frac_bits: int) -> list[int]:
    """round(v · 2^frac_bits) for each finite value (exact for integer input)."""
    arr = np.asarray(values)
    if arr.dtype.kind in "iu":
        return [int(v) << frac_bits for v in arr.ravel()]
    if arr.dtype == object:
        out = []
        for v in arr.ravel():
            if isinstance(v, (int, np.integer)):
                out.append(int(v) << frac_bits)
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
    # round half away from zero
    q, r = divmod(abs(mi), 1 << -shift)
    if 2 * r >= (1 << -shift):
        q += 1
    return q if mi >= 0 else -q


def decode_fixed(ints: Iterable[int], exponent: int) -> np.ndarray:
    """Integers · 2^exponent as float64, each correctly rounded (±inf beyond the float range).

    A negative exponent divides exactly with Python's integer true division,
    which rounds once, correctly, also into the subnormal range: 2^900 · 2^-1100
    is 2^-200, not the 0.0 that ``float(v) * 2.0**exponent`` would give once
    2.0**exponent underflows.
    """
    exponent = int(exponent)
    divisor = 1 << -exponent if exponent < 0 else 1
    out = []
    for v in ints:
        v = int(v)
        try:
            if exponent >= 0 or (v.bit_length() <= 53 and exponent >= -1021):
                # exact float, scaled exactly (the result is a normal float or overflows)
                out.append(math.ldexp(float(v), exponent))
            else:
                out.append(v / divisor)
        except OverflowError:
            out.append(math.inf if v > 0 else -math.inf)
    return np.asarray(out, dtype=np.float64)


@dataclass(frozen=True)
class Packing:
    """Layout of packed ciphertexts: ``slots`` signed values of ``slot_bits`` bits each."""

    slots: int = 1
    slot_bits: int = 0

    def __post_init__(self) -> None:
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
        if slot_bits < 2:
            raise ValueError("slot_bits must be >= 2")
        usable = pk.max_int.bit_length() - 2
        slots = max(1, usable // slot_bits)
        if max_slots is not None:
            slots = max(1, min(slots, max_slots))
        if slots == 1:
            return cls(1, 0)
        return cls(slots, slot_bits)

    def pack(self, ints: Sequence[int]) -> list[int]:
        """Pack signed integers ``slots`` to a plaintext, value j of each group at bit ``j * slot_bits`` (:meth:`unpack` undoes it)."""
        s = self.slot_bits
        out = []
        for start in range(0, len(ints), self.slots):
            acc = 0
            for j, v in enumerate(ints[start : start + self.slots]):
                acc += int(v) << (s * j)
            out.append(acc)
        return out

    def unpack(self, packed: Sequence[int], length: int) -> list[int]:
        """The first ``length`` signed integers held in the packed plaintexts."""
        s = self.slot_bits
        full, half = 1 << s, 1 << (s - 1)
        out: list[int] = []
        for P in packed:
            P = int(P)
            for _ in range(self.slots):
                if len(out) == length:
                    break
                d = P & (full - 1)
                if d >= half:
                    d -= full
                out.append(d)
                P = (P - d) >> s
        if len(out) != length:
            raise InvalidMessage("packed ciphertexts hold fewer values than declared")
        return out

    def n_ciphertexts(self, length: int) -> int:
        """How many ciphertexts hold ``length`` values."""
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
