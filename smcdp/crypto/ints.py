"""Integer arguments taken exactly: a whole number as a Python int, anything else refused rather than floored.

Below :mod:`smcdp.crypto.encoding` and :mod:`smcdp.crypto.paillier`, which both check their integer arguments
with it (``int(2.5)`` is 2, ``int(inf)`` an OverflowError: a plaintext, ciphertext or count of 2.5 must be
refused, not taken as 2).
"""

from __future__ import annotations

import math
import operator

import numpy as np


def as_int(v: object) -> int:
    """An integer value as a Python int: ints, numpy integers, mpz, and floats that are whole numbers; a fraction,
    NaN, an infinity, a string, bytes or a bool is refused (TypeError/ValueError) rather than truncated or read as
    0 or 1 (``raw_encrypt(True)`` would encrypt 1, a count of ``True`` make one of something)."""
    if isinstance(v, (bool, np.bool_)):
        raise TypeError(f"{v!r} is a bool, not an integer")
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v) or not float(v).is_integer():
            raise ValueError(f"{v!r} is not an integer")
        return int(v)
    return int(operator.index(v))  # type: ignore[arg-type]  # TypeError for str, bytes, Fraction, Decimal, ...
