"""argparse types shared by the subcommands: each refuses what its option cannot mean, naming the value (an empty
path is not the current directory, inf is not a timeout, a seed beyond its generator's range is not a seed)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = [
    "certificate_days",
    "nonempty",
    "nonnegative_int",
    "positive_float",
    "positive_int",
    "seed_int",
    "session_seed",
]


def nonempty(text: str) -> str:
    """A path or name that must be given as something: an empty one is not "the current directory" nor "none"."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty")
    return text


def nonnegative_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return v


def _int_within(lo: int, hi: int, what: str) -> Callable[[str], int]:
    """An argparse type: an integer in [lo, hi]."""

    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
        return v

    return parse


#: a seed for numpy/hmmlearn/scikit-learn generators
seed_int = _int_within(0, (1 << 32) - 1, "an integer in [0, 2^32)")
#: an experiment's session seed (the wire's int64)
session_seed = _int_within(-(1 << 63), (1 << 63) - 1, "an integer in [-2^63, 2^63)")
#: a certificate's validity (beyond 100 years the date leaves datetime's range soon)
certificate_days = _int_within(1, 36_500, "between 1 and 36500 days")
positive_int = _int_within(1, 1 << 62, "an integer >= 1")


def positive_float(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < v < math.inf:
        raise argparse.ArgumentTypeError(f"must be a positive finite number, got {text!r}")
    return v
