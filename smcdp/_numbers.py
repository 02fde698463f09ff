"""Numbers a peer supplies (protocol parameters): checked for type, finiteness and range before use.

A protocol parameter arrives as JSON, so it can be any JSON value: a string, a list,
``true``, an integer of thousands of digits, ``1e308`` or -- from ``1e400`` -- infinity.
``float()`` on such a value raises TypeError, ValueError or OverflowError, and arithmetic
on an extreme but finite one overflows later, far from the parameter (``{"epsilon": 1e308}``
overflowed inside a noise mechanism).  :func:`real` and :func:`integer` accept a JSON number
of the right kind inside a closed or half-open range and refuse everything else with
:class:`~smcdp.errors.InvalidMessage` (INVALID_ARGUMENT) naming the parameter and the range.
Bottom layer: protocols and primitives use it alike.
"""

from __future__ import annotations

import math
from typing import Any

from smcdp.errors import InvalidMessage


def shown(value: Any) -> str:
    """``repr`` of a peer's value, short: an integer of thousands of digits is described, not printed."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"<an integer of {value.bit_length()} bits>"
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _range(lo: float, hi: float, lo_open: bool, hi_open: bool) -> str:
    return f"{'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"


def real(value: Any, what: str, lo: float, hi: float, *, lo_open: bool = False, hi_open: bool = False) -> float:
    """``value`` as a float if it is a JSON number (int or float, not a boolean) in the range; else InvalidMessage.

    ``what`` names the parameter in the refusal, e.g. ``"power-iteration parameter p"``.
    """
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and isinstance(value, float):
        ok = math.isfinite(value)
    if ok:  # int/float comparisons are exact in Python: a huge int never overflows here
        ok = (lo < value if lo_open else lo <= value) and (value < hi if hi_open else value <= hi)
    if not ok:
        raise InvalidMessage(f"{what}={shown(value)} must be a number in {_range(lo, hi, lo_open, hi_open)}")
    return float(value)


def integer(value: Any, what: str, lo: int, hi: int) -> int:
    """``value`` if it is a JSON integer (not a boolean, not 3.0) in [lo, hi]; else InvalidMessage."""
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise InvalidMessage(f"{what}={shown(value)} must be an integer in [{lo}, {hi}]")
    return value
