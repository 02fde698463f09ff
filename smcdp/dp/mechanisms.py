"""Noise mechanisms: Laplace (L1), Gaussian (L2, classic and analytic) and the
L2 "vector" mechanism, all sampled on a power-of-two grid.

How a release is computed (all three mechanisms)
------------------------------------------------
For a call on ``d`` coordinates the mechanism picks a grid width ``g = 2**e``
from its *public* parameters (noise scale, sensitivity, ``d``) only.  The value
``x`` is rounded to the nearest grid point, ``X = rint(x / g)`` (exact in
floating point because ``g`` is a power of two), integer noise ``Z`` is added in
exact integer arithmetic, and the release is ``float(X + Z) * g``.  The final
conversion to a double is post-processing of an exactly computed integer, so
the low-order bits of the output carry no information about ``x`` beyond what
``X + Z`` carries (Mironov's floating-point attack does not apply).

Rounding moves each coordinate by at most ``g/2``, so for neighbouring inputs
``|X_i - X'_i| <= |x_i - x'_i|/g + 1``: the integer query has L1 sensitivity at
most ``Delta_1/g + d`` and L2 sensitivity at most ``Delta_2/g + sqrt(d)``.  The
integer noise is calibrated to these *inflated* sensitivities, so the stated
epsilon / delta / rho hold exactly for the grid mechanism.  The grid is chosen
so that ``slack * g <= Delta * 2**-16``: the noise is never more than a factor
``1 + 2**-16`` (plus one grid step) larger than the textbook continuous scale.

Guarantees (see docs/dp-core.md for the full discussion)
--------------------------------------------------------
* :class:`LaplaceMechanism` -- exact discrete Laplace (CKS Alg. 2): pure
  epsilon-DP, exactly, given uniform random integers.
* :class:`GaussianMechanism` -- exact discrete Gaussian (CKS Alg. 3):
  rho-zCDP with rho = Delta**2/(2 sigma**2), exactly (the discrete Gaussian's
  Renyi divergence for an integer shift is bounded like the continuous one,
  CKS 2020; applied to the inflated integer sensitivity).  Classic
  calibration: (epsilon, delta) follows rigorously from that rho by the CKS
  conversion (:attr:`GaussianMechanism.rigorous_epsilon` <= epsilon, checked at
  construction; a sweep over epsilon < 1 gives at most 0.93 epsilon).  Analytic
  calibration: the Balle-Wang statement is exact for continuous noise and
  carries over to the discrete Gaussian through CKS's comparison of the two
  (an error term exponentially small in sigma_g**2, sigma_g >= 2**20 grid
  steps); the purely rigorous fallback is ``rigorous_epsilon``.
* :class:`VectorMechanism` -- continuous density exp(-eps ||eta||/Delta) (norm
  ~ Gamma(d), uniform direction) sampled in floating point from the secure
  source and snapped to the lattice.  In exact arithmetic the snapped
  mechanism is epsilon-DP (the snapping costs 2 sqrt(d) grid steps of
  sensitivity, paid for in the calibration); the remaining approximation is
  the accuracy of the floating-point Gamma / normal draws, which only moves
  mass across cell boundaries, of relative size ~2**-30 of a cell, and a tail
  truncation at probability ~2**-53.  This is weaker than the exact samplers
  and is documented as such.

Randomness: :func:`smcdp.dp.samplers.resolve_rng` maps ``None`` to the OS CSPRNG; an ``int`` or a
``numpy.random.Generator`` yields a reproducible source (tests, experiments)
and must be passed explicitly.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import numpy as np

from smcdp.dp.conversions import (
    analytic_gaussian_sigma,
    classic_gaussian_sigma,
    gaussian_epsilon,
    zcdp_epsilon_cks,
)
from smcdp.dp.samplers import (
    INT64_SAFE,
    RandomSource,
    ceil_sqrt,
    discrete_gaussian,
    discrete_laplace,
    resolve_rng,
)
from smcdp.dp.validation import (
    InvalidParameter,
    check_delta,
    check_magnitude,
    check_positive,
    check_shape,
    finite_array,
)

__all__ = [
    "GRID_RESOLUTION_BITS",
    "GRID_SLACK_BITS",
    "GaussianMechanism",
    "LaplaceMechanism",
    "VectorMechanism",
]

#: the grid is at least this many bits finer than the noise scale
GRID_RESOLUTION_BITS = 30
#: Gaussian: sigma spans at least 2**20 grid steps (keeps int64 arithmetic)
GAUSSIAN_RESOLUTION_BITS = 20
#: rounding slack (d, sqrt(d) or 2 sqrt(d) grid steps) is <= 2**-16 of Delta
GRID_SLACK_BITS = 16
_MAX_COORDS = 1 << 28


def _size(shp: tuple[int, ...]) -> int:
    return int(np.prod(shp, dtype=np.int64)) if shp else 1


def _grid_exponent(noise_scale: float, sensitivity: float, slack: int, resolution_bits: int) -> int:
    """Exponent e of the grid width g = 2**e (depends on public parameters only).

    g <= noise_scale * 2**-resolution_bits  and  slack * g <= sensitivity * 2**-16.
    """
    target = min(
        math.ldexp(noise_scale, -resolution_bits),
        math.ldexp(sensitivity, -GRID_SLACK_BITS) / max(slack, 1),
    )
    if not (target > 0 and math.isfinite(target)):
        raise InvalidParameter("noise scale / sensitivity out of the representable range")
    e = math.frexp(target)[1] - 1  # 2**e <= target < 2**(e+1)
    if e < -1000:
        raise InvalidParameter("sensitivity too small to place on a floating-point grid")
    return e


def _to_grid_integers(x: np.ndarray, e: int) -> np.ndarray:
    """rint(x / 2**e) as int64 when safe, else as Python ints (exact either way)."""
    with np.errstate(over="ignore"):
        scaled = np.rint(np.ldexp(x, -e))
    if not np.all(np.isfinite(scaled)):
        raise InvalidParameter(
            f"value too large for the noise grid of width 2**{e} (|value| must stay below 2**{1023 + e})"
        )
    flat = scaled.reshape(-1)
    if flat.size == 0 or np.max(np.abs(flat)) < INT64_SAFE:
        return flat.astype(np.int64)
    return np.array([int(v) for v in flat], dtype=object)


def _add_exact(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype == object or b.dtype == object:
        return a.astype(object) + b.astype(object)
    if a.size and (np.max(np.abs(a)) >= INT64_SAFE or np.max(np.abs(b)) >= INT64_SAFE):
        return a.astype(object) + b.astype(object)
    return a + b


def _from_grid(n: np.ndarray, e: int, shape: tuple[int, ...]) -> np.ndarray:
    """float(n) * 2**e -- rounding to a double is post-processing of exact n."""
    if n.dtype == object:
        try:
            f = np.array([float(v) for v in n], dtype=np.float64)
        except OverflowError:
            raise InvalidParameter("noisy value exceeds the double-precision range") from None
    else:
        f = n.astype(np.float64)
    return np.ldexp(f, e).reshape(shape)


def _ceil_fraction(f: Fraction) -> int:
    return -((-f.numerator) // f.denominator)


# ---------------------------------------------------------------------------
# Gaussian calibration
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# mechanisms
# ---------------------------------------------------------------------------


class _Mechanism:
    epsilon: float
    delta: float
    rho: float
    _rng: RandomSource

    def privacy(self) -> dict[str, float]:
        """The guarantee this mechanism gives per call: epsilon, delta, rho."""
        return {"epsilon": self.epsilon, "delta": self.delta, "rho": self.rho}

    @property
    def secure(self) -> bool:
        """True when the noise comes from the OS CSPRNG."""
        return bool(self._rng.secure)

    def sample(self, shape: Any) -> np.ndarray:
        """Noise only, as multiples of the grid width chosen for ``shape``.

        Prefer :meth:`randomise` for releases: adding this noise to an
        arbitrary double in floating point re-opens the floating-point channel
        unless the value already lies on the same grid.
        """
        shp = check_shape(shape)
        e, z = self._noise(1, _size(shp))
        return _from_grid(z, e, shp)

    def sample_many(self, n: int, shape: Any) -> np.ndarray:
        """``n`` independent noise draws for calls on ``shape``: array (n, *shape)."""
        shp = check_shape(shape)
        n = check_positive(n, "n", allow_zero=True, integer=True)
        e, z = self._noise(n, _size(shp))
        return _from_grid(z, e, (n,) + shp)

    def randomise(self, value: Any) -> np.ndarray:
        """value + noise, computed exactly on the grid; float ndarray of value's shape."""
        x = finite_array(value)
        return self._release(x, 1).reshape(x.shape)

    def randomise_many(self, value: Any, n: int) -> np.ndarray:
        """``n`` independent releases of ``value`` (array (n, *value.shape)).

        Each row is one release with this mechanism's guarantee; releasing
        several rows of the same value composes (n times the privacy cost).
        Meant for experiments and empirical privacy tests.
        """
        x = finite_array(value)
        n = check_positive(n, "n", allow_zero=True, integer=True)
        return self._release(x, n).reshape((n,) + x.shape)

    def _release(self, x: np.ndarray, n: int) -> np.ndarray:
        d = int(x.size)
        if d == 0 or n == 0:
            return np.zeros((n, d), dtype=np.float64)
        e, z = self._noise(n, d)
        xi = _to_grid_integers(x, e)
        xi = np.tile(xi, n)
        return _from_grid(_add_exact(xi, z), e, (n, d))

    def grid_exponent(self, shape: Any) -> int:
        """log2 of the grid width used for a call on an array of ``shape``."""
        return self._grid(_size(check_shape(shape)))

    def _grid(self, d: int) -> int:
        raise NotImplementedError

    def _noise(self, n: int, d: int) -> tuple[int, np.ndarray]:
        """(e, z): grid exponent for calls on d coordinates, n*d integer noises."""
        raise NotImplementedError

    @staticmethod
    def _check_d(d: int) -> None:
        if d > _MAX_COORDS:
            raise InvalidParameter(f"at most {_MAX_COORDS} coordinates per call, got {d}")


class LaplaceMechanism(_Mechanism):
    """Per-coordinate Laplace noise for a query with L1 sensitivity ``sensitivity``.

    Pure ``epsilon``-DP; ``delta = 0``; ``rho = epsilon**2 / 2`` (Bun-Steinke
    Prop. 1.4).  ``scale`` is the nominal Laplace scale Delta/epsilon; the
    realised discrete-Laplace scale (:meth:`grid_scale`) exceeds it by at most
    a factor 1 + 2**-16 plus one grid step, which pays for rounding the input
    onto the grid.
    """

    def __init__(self, epsilon: float, sensitivity: float, *, random_state: Any = None):
        self.epsilon = check_magnitude(epsilon, "epsilon")
        self.sensitivity = check_magnitude(sensitivity, "sensitivity")
        self.delta = 0.0
        self.rho = self.epsilon**2 / 2.0
        self.scale = self.sensitivity / self.epsilon
        if not math.isfinite(self.scale):
            raise InvalidParameter("Laplace scale overflows")
        self._rng = resolve_rng(random_state)

    def __repr__(self) -> str:
        return f"LaplaceMechanism(epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r})"

    def _grid(self, d: int) -> int:
        self._check_d(d)
        return _grid_exponent(self.scale, self.sensitivity, d, GRID_RESOLUTION_BITS)

    def _integer_scale(self, d: int) -> tuple[int, int]:
        e = self._grid(d)
        # integer L1 sensitivity after rounding: Delta/g + d; t >= that / epsilon
        sens_int = Fraction(self.sensitivity) / Fraction(2) ** e + d
        t = max(_ceil_fraction(sens_int / Fraction(self.epsilon)), 1)
        return e, t

    def grid_scale(self, shape: Any = 1) -> float:
        """Realised Laplace scale (grid step times integer scale) for ``shape``."""
        e, t = self._integer_scale(_size(check_shape(shape)))
        return math.ldexp(float(t), e)

    def _noise(self, n: int, d: int) -> tuple[int, np.ndarray]:
        e, t = self._integer_scale(d)
        return e, discrete_laplace(t, n * d, self._rng)


class GaussianMechanism(_Mechanism):
    """Gaussian noise for a query with L2 sensitivity ``sensitivity``.

    ``analytic=False`` uses the classic sigma = sqrt(2 ln(1.25/delta)) Delta/epsilon
    (proved for epsilon < 1, as DP-EM uses it); ``analytic=True`` the smallest
    sigma of Balle & Wang's exact condition (any epsilon > 0).  ``rho`` is
    Delta**2/(2 sigma**2).  Noise is an exact discrete Gaussian on the grid.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        sensitivity: float,
        *,
        analytic: bool = False,
        random_state: Any = None,
    ):
        epsilon = check_magnitude(epsilon, "epsilon")
        delta = check_delta(delta, allow_zero=False)
        sensitivity = check_magnitude(sensitivity, "sensitivity")
        if analytic:
            sigma = analytic_gaussian_sigma(epsilon, delta, sensitivity)
        else:
            sigma = classic_gaussian_sigma(epsilon, delta, sensitivity)
        self._setup(sigma, sensitivity, epsilon, delta, random_state)
        self.analytic = bool(analytic)
        if not analytic and self.rigorous_epsilon > epsilon:
            # never observed for epsilon < 1 (the zCDP route gives <= 0.93 epsilon); kept as a guard
            raise InvalidParameter(
                "the classic calibration is not certified by the discrete Gaussian's zCDP bound "
                f"for epsilon={epsilon}, delta={delta}; use analytic=True"
            )

    @classmethod
    def from_sigma(
        cls,
        sigma: float,
        sensitivity: float,
        *,
        delta: float = 0.0,
        random_state: Any = None,
    ) -> GaussianMechanism:
        """A mechanism with noise ``sigma`` given directly (zCDP / moments users).

        ``rho = Delta**2/(2 sigma**2)``.  With ``delta > 0`` also reports the
        tightest epsilon for that delta (exact Gaussian privacy profile, Balle-Wang);
        with ``delta == 0`` epsilon is ``inf`` (no pure-DP guarantee).
        """
        sigma = check_magnitude(sigma, "sigma")
        sensitivity = check_magnitude(sensitivity, "sensitivity")
        delta = check_delta(delta)
        eps = gaussian_epsilon(delta, sigma / sensitivity) if delta > 0 else math.inf
        self = cls.__new__(cls)
        self._setup(sigma, sensitivity, eps, delta, random_state)
        self.analytic = True
        return self

    def _setup(
        self,
        sigma: float,
        sensitivity: float,
        epsilon: float,
        delta: float,
        random_state: Any,
    ) -> None:
        self.sigma = check_magnitude(sigma, "the Gaussian noise's sigma")
        self.sensitivity = float(sensitivity)
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        # within [2^-200, 2^200]: rho = 1/(2 s²) stays a finite positive double
        self.noise_multiplier = check_magnitude(self.sigma / self.sensitivity, "the noise multiplier sigma/sensitivity")
        self.rho = self.sensitivity**2 / (2.0 * self.sigma**2)
        self._rng = resolve_rng(random_state)

    @property
    def rigorous_epsilon(self) -> float:
        """Epsilon at ``delta`` that rests only on exactly proved facts.

        The grid mechanism is rho-zCDP exactly (discrete Gaussian with the
        inflated integer sensitivity, Canonne-Kamath-Steinke); this converts
        that rho with their Prop. 12 bound.  For the classic calibration it is
        always <= ``epsilon`` (checked at construction); for the analytic
        calibration it is larger than ``epsilon``, whose justification for the
        discrete noise is CKS's comparison with the continuous Gaussian.
        ``inf`` when ``delta == 0``.
        """
        if self.delta <= 0:
            return math.inf
        return zcdp_epsilon_cks(self.rho, self.delta)

    def __repr__(self) -> str:
        return (
            f"GaussianMechanism(sigma={self.sigma!r}, sensitivity={self.sensitivity!r}, "
            f"epsilon={self.epsilon!r}, delta={self.delta!r})"
        )

    def _grid(self, d: int) -> int:
        self._check_d(d)
        return _grid_exponent(self.sigma, self.sensitivity, ceil_sqrt(d), GAUSSIAN_RESOLUTION_BITS)

    def _integer_params(self, d: int) -> tuple[int, int, int]:
        e = self._grid(d)
        sens_int = Fraction(self.sensitivity) / Fraction(2) ** e + ceil_sqrt(d)
        s_min = _ceil_fraction((Fraction(self.sigma) / Fraction(self.sensitivity) * sens_int) ** 2)
        t = math.isqrt(s_min) + 1
        q = max(-((-s_min) // t), 1)
        return e, t, q

    def grid_sigma(self, shape: Any = 1) -> float:
        """Realised standard-deviation parameter (grid step times sqrt(t q))."""
        e, t, q = self._integer_params(_size(check_shape(shape)))
        return math.ldexp(math.sqrt(t * q), e)

    def _noise(self, n: int, d: int) -> tuple[int, np.ndarray]:
        e, t, q = self._integer_params(d)
        return e, discrete_gaussian(t, q, n * d, self._rng)


class VectorMechanism(_Mechanism):
    """Noise with density proportional to exp(-epsilon ||eta||_2 / Delta_2).

    The norm is Gamma(d, Delta_2/epsilon) (d = number of entries; matrices use
    the Frobenius norm, i.e. are treated as flat vectors) and the direction is
    uniform on the sphere (normalised standard normals).  Both are drawn in
    floating point from the configured source, then snapped to the grid lattice;
    the calibration pays 2 sqrt(d) grid steps of extra sensitivity for the two
    roundings (input and noise), which makes the snapped mechanism exactly
    epsilon-DP in exact arithmetic.  See the module docstring for what remains
    approximate.
    """

    def __init__(self, epsilon: float, sensitivity: float, *, random_state: Any = None):
        self.epsilon = check_magnitude(epsilon, "epsilon")
        self.sensitivity = check_magnitude(sensitivity, "sensitivity")
        self.delta = 0.0
        self.rho = self.epsilon**2 / 2.0
        self.scale = self.sensitivity / self.epsilon
        self._rng = resolve_rng(random_state)

    def __repr__(self) -> str:
        return f"VectorMechanism(epsilon={self.epsilon!r}, sensitivity={self.sensitivity!r})"

    def _grid(self, d: int) -> int:
        self._check_d(d)
        return _grid_exponent(self.scale, self.sensitivity, 2 * ceil_sqrt(d), GRID_RESOLUTION_BITS)

    def _lattice_scale(self, d: int) -> tuple[int, float]:
        e = self._grid(d)
        sens_int = Fraction(self.sensitivity) / Fraction(2) ** e + 2 * ceil_sqrt(d)
        scale = sens_int / Fraction(self.epsilon)
        # round the float scale up so that it is never below the exact one
        s = float(scale)
        if Fraction(s) < scale:
            s = math.nextafter(s, math.inf)
        return e, s

    def _lattice_noise(self, n: int, d: int) -> tuple[int, np.ndarray]:
        e, s = self._lattice_scale(d)
        if n == 0 or d == 0:
            return e, np.zeros((n, d), dtype=np.int64)
        u = self._rng.uniform01(n * d).reshape(n, d)
        radius = -np.log(u).sum(axis=1) * s  # Gamma(d, s): sum of d Exp(s)
        g = self._rng.standard_normal(n * d).reshape(n, d)
        norms = np.sqrt(np.sum(g * g, axis=1))
        norms[norms == 0] = 1.0  # probability ~0; direction then arbitrary
        eta = g / norms[:, None] * radius[:, None]
        z = np.rint(eta)
        if np.max(np.abs(z)) < INT64_SAFE:
            return e, z.astype(np.int64)
        return e, np.array([int(v) for v in z.reshape(-1)], dtype=object).reshape(n, d)

    def _noise(self, n: int, d: int) -> tuple[int, np.ndarray]:
        e, z = self._lattice_noise(n, d)
        return e, z.reshape(-1)

    def sample_dithered(self, shape: Any) -> np.ndarray:
        """Noise with a *continuous* density, for objective perturbation: the lattice draw of ``sample``
        plus a uniform dither over its grid cell, ``2^e·(z + u)`` with u uniform on [−½, ½)^d from the same
        source.

        Objective perturbation (Chaudhuri et al. 2011, Algorithm 2; the large-margin classifier of seed 000)
        releases the exact minimiser of an objective with a linear term b: its proof maps b one-to-one onto
        the minimiser and needs a *density* for b with ν(b)/ν(b') ≤ e^ε whenever ‖b − b'‖ ≤ Δ.  A lattice b has
        no density: from the minimiser and all rows but one, b = −n·∇(the rest) is recomputed under each
        hypothesis about the last row and lies on the lattice under the true one only (a review told data sets
        apart so, 13 fits of 20 against 0 of 20).  The dithered draw has the density
        f(x) = P(z = cell(x))/2^{ed}, the average over x's cell of the continuous density exp(−‖η‖/S) that the
        lattice draw rounds (scale S = (Δ + 2⌈√d⌉2^e)/ε, the snapping's inflation included).  For ‖x − x'‖ ≤ Δ
        any point of x's cell and any point of x''s lie within Δ + 2√d·2^e of each other (a cell's diameter is
        √d·2^e), so f(x)/f(x') ≤ exp((Δ + 2√d·2^e)/S) ≤ e^ε: the property the proofs use, exactly.  The
        remaining granularity is the float64 resolution of 2^e·(z + u), far below what any solver's minimiser
        resolves.  A release of a noisy value should use ``randomise`` instead (computed on the grid)."""
        shp = check_shape(shape)
        d = _size(shp)
        e, z = self._noise(1, d)
        u = self._rng.uniform01(d) - 0.5 if d else np.zeros(0)
        return np.ldexp(np.asarray(z, dtype=np.float64) + u, e).reshape(shp)
