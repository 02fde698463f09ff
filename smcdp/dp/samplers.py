"""Exact discrete samplers and the randomness sources behind them.

Why this module exists
----------------------
Continuous Laplace or Gaussian noise computed in floating point leaks the
noiseless value through the low-order bits of the output (Mironov, CCS 2012).
smcdp therefore adds *integer* noise to a value rounded onto a power-of-two
grid, and draws the integer noise with the exact algorithms of Canonne,
Kamath and Steinke ("The Discrete Gaussian for Differential Privacy",
NeurIPS 2020, Algorithms 1-3).  Every probability the algorithms use is a
ratio of integers compared against a uniformly random integer, so the
sampled distribution is exactly the discrete Laplace / discrete Gaussian
(given a perfect source of uniform integers) -- no floating-point step is
involved.

Why not OpenDP: its wheel is 47 MB, its samplers draw only from the operating
system's CSPRNG (so the seeded experiments the project needs would run a
different code path), and the grid bookkeeping we need for vectors with a
per-call dimension is a few lines on top of the samplers below.  The
algorithms here are vectorised with numpy: they run on ``int64`` arrays when
all intermediate integers provably fit, and on arrays of Python integers
(``dtype=object``; slower, unbounded) otherwise.  Both dtypes execute the same
code.

Randomness sources
------------------
:func:`resolve_rng` maps a ``random_state`` argument to a source: ``None`` to
``SecureSource``, which draws from ``os.urandom`` (the kernel CSPRNG) and is the
default everywhere.  ``SeededSource`` wraps an explicitly supplied
``numpy.random.Generator`` for reproducible experiments and tests; it is never
chosen implicitly.  Both expose the same three primitives -- uniform integers
below per-element bounds, uniform doubles in (0, 1), and standard normals -- so
the samplers do not know which source they use.
"""

from __future__ import annotations

import math
import numbers
import os
import secrets
from collections.abc import Callable
from typing import Any

import numpy as np

from smcdp.dp.validation import InvalidParameter, check_positive

__all__ = [
    "INT64_SAFE",
    "RandomSource",
    "SecureSource",
    "SeededSource",
    "StreamSource",
    "aux_rng",
    "bernoulli_exp",
    "ceil_sqrt",
    "discrete_gaussian",
    "discrete_laplace",
    "noise_rng",
    "resolve_rng",
]

#: Largest magnitude we let an ``int64`` intermediate reach before switching to
#: Python integers.  Leaves two bits of headroom for sums of two such values.
INT64_SAFE = 1 << 61
_U64_MAX = np.uint64(0xFFFFFFFFFFFFFFFF)


class RandomSource:
    """Interface shared by the secure and the seeded source."""

    secure: bool = False

    def uniform_below(self, bounds: np.ndarray) -> np.ndarray:
        """One uniform integer in ``[0, b)`` for each element ``b`` of ``bounds``.

        ``bounds`` is an ``int64`` array (every element in ``[1, 2**62]``) or an
        object array of Python ints (any positive size); the result has the
        same dtype and shape.
        """
        raise NotImplementedError

    def uniform01(self, n: int) -> np.ndarray:
        """``n`` doubles uniform on the open interval (0, 1) (53 random bits)."""
        raise NotImplementedError

    def standard_normal(self, n: int) -> np.ndarray:
        """``n`` standard normal doubles (Box-Muller on :meth:`uniform01`)."""
        m = (n + 1) // 2
        u1 = self.uniform01(m)
        u2 = self.uniform01(m)
        r = np.sqrt(-2.0 * np.log(u1))
        theta = 2.0 * np.pi * u2
        out = np.concatenate([r * np.cos(theta), r * np.sin(theta)])
        return out[:n]

    # helpers shared by both sources -------------------------------------
    def _uniform_below_object(self, bounds: np.ndarray) -> np.ndarray:
        out = np.empty(bounds.shape, dtype=object)
        flat_in = bounds.reshape(-1)
        flat_out = out.reshape(-1)
        for i, b in enumerate(flat_in):
            flat_out[i] = self._randbelow(int(b))
        return out

    def _randbelow(self, b: int) -> int:
        raise NotImplementedError


class SecureSource(RandomSource):
    """Uniform integers and doubles from the operating system's CSPRNG."""

    secure = True

    def __repr__(self) -> str:
        return "SecureSource()"

    def _randbelow(self, b: int) -> int:
        return secrets.randbelow(b)

    def _u64(self, n: int) -> np.ndarray:
        return np.frombuffer(os.urandom(8 * n), dtype=np.uint64).copy()

    def uniform_below(self, bounds: np.ndarray) -> np.ndarray:
        bounds = np.asarray(bounds)
        if bounds.dtype == object:
            return self._uniform_below_object(bounds)
        b = bounds.astype(np.uint64).reshape(-1)
        if b.size and (b.min() < 1):
            raise InvalidParameter("uniform_below needs positive bounds")
        # Rejection sampling: accept x < 2**64 - (2**64 mod b), a multiple of b,
        # then x mod b is exactly uniform on [0, b).
        rem = (_U64_MAX % b + np.uint64(1)) % b
        limit = _U64_MAX - rem  # accept x <= limit
        out = np.empty(b.size, dtype=np.uint64)
        pending = np.arange(b.size)
        while pending.size:
            x = self._u64(pending.size)
            ok = x <= limit[pending]
            idx = pending[ok]
            out[idx] = x[ok] % b[idx]
            pending = pending[~ok]
        return out.astype(np.int64).reshape(bounds.shape)

    def uniform01(self, n: int) -> np.ndarray:
        # 53 random bits k, value (k + 0.5) / 2**53: never 0, never 1, exact.
        k = self._u64(n) >> np.uint64(11)
        return (k.astype(np.float64) + 0.5) * (2.0**-53)


class StreamSource(SecureSource):
    """Uniform integers and doubles from a caller's cryptographically secure byte stream.

    ``read(n)`` must return ``n`` bytes of a CSPRNG -- e.g. a keyed ChaCha20
    stream, which a party process uses so that a session's noise is the same
    when the session is replayed after a crash (the key stays with the party
    and never leaves it).  The sampling is the same as :class:`SecureSource`'s.
    """

    secure = True

    def __init__(self, read: Callable[[int], bytes]):
        if not callable(read):
            raise InvalidParameter("StreamSource needs a callable read(n) -> bytes")
        self._read = read

    def __repr__(self) -> str:
        return "StreamSource()"

    def _randbelow(self, b: int) -> int:
        if b <= 0:
            raise InvalidParameter("uniform_below needs positive bounds")
        nbits = b.bit_length()
        nbytes = (nbits + 7) // 8
        mask = (1 << nbits) - 1
        while True:
            x = int.from_bytes(self._read(nbytes), "little") & mask
            if x < b:
                return x

    def _u64(self, n: int) -> np.ndarray:
        return np.frombuffer(self._read(8 * n), dtype=np.uint64).copy()


class SeededSource(RandomSource):
    """A reproducible source wrapping an explicitly passed numpy Generator.

    For tests and experiments only: the stream is predictable from the seed.
    """

    secure = False

    def __init__(self, generator: np.random.Generator):
        if not isinstance(generator, np.random.Generator):
            raise InvalidParameter("SeededSource needs a numpy.random.Generator")
        self.generator = generator

    def __repr__(self) -> str:
        return f"SeededSource({self.generator!r})"

    def _randbelow(self, b: int) -> int:
        if b <= 0:
            raise InvalidParameter("uniform_below needs positive bounds")
        nbits = b.bit_length()
        nbytes = (nbits + 7) // 8
        mask = (1 << nbits) - 1
        while True:
            x = int.from_bytes(self.generator.bytes(nbytes), "little") & mask
            if x < b:
                return x

    def uniform_below(self, bounds: np.ndarray) -> np.ndarray:
        bounds = np.asarray(bounds)
        if bounds.dtype == object:
            return self._uniform_below_object(bounds)
        if bounds.size and bounds.min() < 1:
            raise InvalidParameter("uniform_below needs positive bounds")
        # numpy's bounded integers are exact (masked / Lemire rejection).
        return self.generator.integers(0, bounds, dtype=np.int64)

    def uniform01(self, n: int) -> np.ndarray:
        k = self.generator.integers(0, 1 << 53, size=n, dtype=np.int64)
        return (k.astype(np.float64) + 0.5) * (2.0**-53)


# ---------------------------------------------------------------------------
# exact Bernoulli and discrete distributions (Canonne-Kamath-Steinke 2020)
# ---------------------------------------------------------------------------


def _like(template: np.ndarray, value: Any) -> np.ndarray:
    """Array of ``value`` with the shape and integer dtype of ``template``."""
    if template.dtype == object:
        out = np.empty(template.shape, dtype=object)
        out[...] = int(value)
        return out
    return np.full(template.shape, value, dtype=np.int64)


def bernoulli_exp(num: np.ndarray, den: np.ndarray, src: RandomSource) -> np.ndarray:
    """Exact Bernoulli(exp(-num/den)) per element, for integers 0 <= num <= den.

    CKS Algorithm 1: with gamma = num/den in [0, 1], draw A_k ~ Bernoulli(gamma/k)
    for k = 1, 2, ... until the first failure; the result is 1 iff the number of
    draws K is odd.  Bernoulli(gamma/k) is drawn as the AND of the independent
    exact draws Bernoulli(num/den) and Bernoulli(1/k), so no product ``den*k``
    is ever formed (nothing can overflow).
    """
    num = np.asarray(num)
    den = np.asarray(den)
    n = num.size
    k = np.ones(n, dtype=np.int64)
    active = np.arange(n)
    while active.size:
        a = src.uniform_below(den[active]) < num[active]
        a &= src.uniform_below(k[active]) == 0
        k[active[a]] += 1
        active = active[a]
    return (k % 2) == 1


def _bernoulli_exp_minus_one(n: int, src: RandomSource) -> np.ndarray:
    one = np.ones(n, dtype=np.int64)
    return bernoulli_exp(one, one, src)


def _geometric_exp_minus_one(n: int, src: RandomSource) -> np.ndarray:
    """Number of successes of Bernoulli(exp(-1)) before the first failure."""
    v = np.zeros(n, dtype=np.int64)
    active = np.arange(n)
    while active.size:
        a = _bernoulli_exp_minus_one(active.size, src)
        v[active[a]] += 1
        active = active[a]
    return v


def discrete_laplace(t: int, n: int, src: RandomSource) -> np.ndarray:
    """``n`` exact draws with P[Y = y] proportional to exp(-|y|/t), integer t >= 1.

    CKS Algorithm 2 with s = 1: U uniform on {0..t-1} accepted with probability
    exp(-U/t), V ~ Geometric(exp(-1)) so that X = U + tV is geometric with ratio
    exp(-1/t); a random sign, rejecting the duplicate "-0".
    Returns ``int64`` when every possible intermediate fits, else Python ints.
    """
    t = check_positive(t, "discrete Laplace scale t", integer=True)
    n = check_positive(n, "sample count", allow_zero=True, integer=True)
    big = t > (1 << 60)
    out = np.empty(n, dtype=object if big else np.int64)
    pending = np.arange(n)
    while pending.size:
        m = pending.size
        tb = _like(np.empty(m, dtype=object if big else np.int64), t)
        u = src.uniform_below(tb)
        keep = bernoulli_exp(u, tb, src)
        u = u[keep]
        idx = pending[keep]
        v = _geometric_exp_minus_one(u.size, src)
        if big or (v.size and int(v.max()) > (INT64_SAFE // t) - 1):
            x = u.astype(object) + v.astype(object) * t
        else:
            x = u + v * t
        sign = src.uniform_below(np.full(u.size, 2, dtype=np.int64))
        ok = ~((sign == 1) & (x == 0))
        y = np.where(sign == 1, -x, x)
        if out.dtype != object and y.dtype == object:
            out = out.astype(object)
        out[idx[ok]] = y[ok]
        rejected = np.ones(m, dtype=bool)
        rejected[np.flatnonzero(keep)[ok]] = False
        pending = pending[rejected]
    return out


def discrete_gaussian(t: int, q: int, n: int, src: RandomSource) -> np.ndarray:
    """``n`` exact draws with P[Y = y] proportional to exp(-y**2 / (2*t*q)).

    The variance parameter is sigma**2 = t*q with integers t, q >= 1; callers pick
    t close to sigma (CKS recommend floor(sigma) + 1) so that the rejection rate
    stays low.  CKS Algorithm 3: Y ~ DiscreteLaplace(t) accepted with probability
    exp(-(|Y| - sigma**2/t)**2 / (2 sigma**2)) = exp(-(|Y| - q)**2 / (2 t q)).  That
    exponent is split into its integer part a (a Bernoulli(exp(-1)) draws, all of
    which must succeed) and a remainder r/(2tq) in [0, 1).
    """
    t = check_positive(t, "discrete Gaussian t", integer=True)
    q = check_positive(q, "discrete Gaussian q", integer=True)
    n = check_positive(n, "sample count", allow_zero=True, integer=True)
    big = t * q > (1 << 56)
    out = np.empty(n, dtype=object if big else np.int64)
    pending = np.arange(n)
    den_val = 2 * t * q
    while pending.size:
        m = pending.size
        y = discrete_laplace(t, m, src)
        absdiff = np.abs(y) - q
        # (|Y| - q)^2 on int64 where it provably fits (|Y| - q <= 2^30), on Python ints for the few draws in the
        # Laplace tail beyond that: one such draw no longer sends the whole batch to the object path (at σ ≈ 2^27
        # on the grid a batch of 10^5 draws always holds one, and its per-element Python draws took 0.4 s)
        far = np.ones(m, dtype=bool) if big or y.dtype == object else np.abs(absdiff) > (1 << 30)
        accept = np.zeros(m, dtype=bool)
        whole = np.zeros(m, dtype=np.int64)  # a far draw's whole part capped at 2^62: the loop below never gets there
        for part, wide in ((~far, False), (far, True)):
            if not part.any():
                continue
            d = np.array([int(e) for e in absdiff[part]], dtype=object) if wide else absdiff[part]
            numer = d * d
            den = _like(numer, den_val) if wide else np.full(d.size, den_val, dtype=np.int64)
            w = numer // den
            accept[part] = bernoulli_exp(numer - w * den, den, src)
            whole[part] = [min(int(x), 1 << 62) for x in w] if wide else w
        j = 0
        cand = np.flatnonzero(accept & (whole > 0))
        while cand.size:
            ok = _bernoulli_exp_minus_one(cand.size, src)
            accept[cand[~ok]] = False
            j += 1
            cand = cand[ok]
            cand = cand[whole[cand] > j]
        if out.dtype != object and y.dtype == object:
            out = out.astype(object)
        out[pending[accept]] = y[accept]
        pending = pending[~accept]
    return out


def ceil_sqrt(n: int) -> int:
    """Smallest integer r with r*r >= n (exact, for any non-negative int)."""
    if n < 0:
        raise InvalidParameter("ceil_sqrt of a negative number")
    r = math.isqrt(n)
    return r if r * r == n else r + 1


# ---------------------------------------------------------------------------
# choosing a source from a ``random_state`` argument
# ---------------------------------------------------------------------------


def _is_seed(value: Any) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))


def resolve_rng(random_state: Any = None) -> RandomSource:
    """The randomness source for privacy noise.

    ``None`` -> :class:`SecureSource` (``os.urandom``);
    ``int`` -> a reproducible source seeded with it (experiments only);
    ``numpy.random.Generator`` -> that generator (experiments only);
    an existing :class:`RandomSource` is returned as is.
    Anything else (including the legacy ``numpy.random.RandomState``) is refused.
    """
    if random_state is None:
        return SecureSource()
    if isinstance(random_state, RandomSource):
        return random_state
    if isinstance(random_state, np.random.Generator):
        return SeededSource(random_state)
    if _is_seed(random_state):
        if int(random_state) < 0:
            raise InvalidParameter(f"random_state seed must be non-negative, got {random_state}")
        return SeededSource(np.random.default_rng(int(random_state)))
    raise InvalidParameter(
        "random_state must be None (secure randomness), an int seed or a "
        f"numpy.random.Generator; got {type(random_state).__name__}"
    )


def noise_rng(random_state: Any) -> np.random.Generator | None:
    """What to pass as ``random_state`` to the mechanisms so that several draws in
    one fit use one stream: ``None`` stays ``None`` (the secure source); an int
    or a numpy Generator becomes one seeded Generator (experiments only)."""
    if random_state is None:
        return None
    if isinstance(random_state, np.random.Generator):
        return random_state
    if _is_seed(random_state):
        if random_state < 0:
            raise InvalidParameter(f"random_state must be a non-negative int, got {random_state!r}")
        return np.random.default_rng(int(random_state))
    raise InvalidParameter(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")


#: what an int seed is mixed with for :func:`aux_rng`, so that a seeded fit's initialisation and its privacy noise
#: (:func:`noise_rng`: ``default_rng(seed)``) are independent streams, not the same draws
_AUX_STREAM = 0x61757869


def aux_rng(random_state: Any) -> np.random.Generator:
    """Generator for randomness that is not privacy noise (initialisation).  An int seed gives a stream of its own,
    independent of the noise's stream from the same seed (:func:`noise_rng`); a Generator is used as it is (one
    stream, drawn in turn)."""
    if isinstance(random_state, np.random.Generator):
        return random_state
    if random_state is None:
        return np.random.default_rng(None)
    if _is_seed(random_state):
        if random_state < 0:
            raise InvalidParameter(f"random_state must be a non-negative int, got {random_state!r}")
        return np.random.default_rng([int(random_state), _AUX_STREAM])
    raise InvalidParameter(f"random_state must be None, an int or a numpy Generator, got {random_state!r}")
