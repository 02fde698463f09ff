"""Privacy events: what one release costs, in the vocabulary the accountants compose.

* :class:`LaplaceEvent` -- Laplace noise with scale ``b`` per unit L1
  sensitivity (``noise_multiplier = b``); pure ``1/b``-DP.
* :class:`GaussianEvent` -- Gaussian noise with ``sigma`` per unit L2
  sensitivity (``noise_multiplier = sigma/Delta``); ``1/(2 s**2)``-zCDP.
* :class:`PureDPEvent` -- any ``epsilon``-DP mechanism.
* :class:`ApproxDPEvent` -- any ``(epsilon, delta)``-DP mechanism (linear and
  advanced composition only; it has no RDP / zCDP description).
"""

from __future__ import annotations

from dataclasses import dataclass

from smcdp.dp.validation import check_delta, check_epsilon, check_positive

__all__ = ["EVENT_TYPES", "ApproxDPEvent", "Event", "GaussianEvent", "LaplaceEvent", "PureDPEvent"]


@dataclass(frozen=True)
class LaplaceEvent:
    """Laplace noise of scale ``noise_multiplier`` per unit L1 sensitivity."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive(self.noise_multiplier, "Laplace scale b"))

    @property
    def epsilon(self) -> float:
        return 1.0 / self.noise_multiplier


@dataclass(frozen=True)
class GaussianEvent:
    """Gaussian noise with sigma = ``noise_multiplier`` per unit L2 sensitivity."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "noise_multiplier", check_positive(self.noise_multiplier, "Gaussian noise multiplier"))

    @property
    def rho(self) -> float:
        return 0.5 / self.noise_multiplier / self.noise_multiplier  # not s**2, which overflows for s ~ 1e154


@dataclass(frozen=True)
class PureDPEvent:
    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, allow_inf=False))


@dataclass(frozen=True)
class ApproxDPEvent:
    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", check_epsilon(self.epsilon, allow_inf=False))
        object.__setattr__(self, "delta", check_delta(self.delta))


Event = LaplaceEvent | GaussianEvent | PureDPEvent | ApproxDPEvent
EVENT_TYPES = (LaplaceEvent, GaussianEvent, PureDPEvent, ApproxDPEvent)
