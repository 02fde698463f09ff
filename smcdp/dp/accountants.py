"""Privacy accountants: one class per composition method.

Each accountant collects privacy events (:mod:`smcdp.dp.events`) with
:meth:`~PrivacyAccountant.compose` and reports the composed guarantee with
:meth:`~PrivacyAccountant.get_epsilon`.  ``PrivacyAccountant(method)`` is the
factory: it returns the class below that implements ``method``.

``linear`` -- :class:`LinearAccountant`
    Dwork-Roth Thm 3.16: epsilons and deltas add.  A Gaussian event is first
    turned into an ``(eps_i, delta_i)`` pair by its privacy profile (Balle-Wang;
    an upper bound in floating point), the Gaussian events sharing the delta left over equally.
``advanced`` -- :class:`AdvancedAccountant`
    Dwork-Roth Thm 3.20 in its heterogeneous form: for events that are
    ``(eps_i, delta_i)``-DP, the composition is ``(sqrt(2 ln(1/delta') sum eps_i**2)
    + sum eps_i (e**eps_i - 1), delta' + sum delta_i)``-DP.  With Gaussian events
    the split of delta between delta' and the Gaussians is optimised.
``zcdp`` -- :class:`ZCDPAccountant`
    Bun-Steinke: eps-DP -> eps**2/2-zCDP (Prop. 1.4), Gaussian -> Delta**2/(2 sigma**2)
    (Prop. 1.6), rhos add (Lemma 1.7).  Conversion to (eps, delta) either by
    ``rho + 2 sqrt(rho ln(1/delta))`` (Prop. 1.3, "classic") or by
    Canonne-Kamath-Steinke Prop. 12 / Asoodeh et al. ("cks", tighter).
``rdp`` (moments accountant) -- :class:`RDPAccountant`
    Renyi DP of order ``alpha = lambda + 1`` composes additively; the Laplace
    and Gaussian curves are DP-EM (Park et al. 2017) eqs. (19)-(20) divided by
    ``lambda``.  Orders are real: a dense log grid in (1, 1e8] followed by a
    bounded scalar refinement.  Conversion "cks" (as Google's dp-accounting) or
    "classic" (eq. (3) of DP-EM: ``eps = min rdp + log(1/delta)/(alpha-1)``).

:func:`account` composes Gaussian / Laplace steps for the ``smcdp account`` CLI.
The conversions themselves live in :mod:`smcdp.dp.conversions`.
scipy is imported where it is used, as there (start-up cost of every party process).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, ClassVar

import numpy as np

from smcdp.dp.conversions import (
    advanced_composition,
    gaussian_epsilon,
    gaussian_rdp,
    laplace_rdp,
    pure_dp_rdp,
    rdp_to_epsilon,
    zcdp_epsilon_cks,
    zcdp_epsilon_classic,
)
from smcdp.dp.events import (
    EVENT_TYPES,
    ApproxDPEvent,
    Event,
    GaussianEvent,
    LaplaceEvent,
    PureDPEvent,
)
from smcdp.dp.validation import (
    InvalidParameter,
    check_choice,
    check_delta,
    check_positive,
)

__all__ = [
    "CONVERSIONS",
    "METHODS",
    "AdvancedAccountant",
    "LinearAccountant",
    "PrivacyAccountant",
    "RDPAccountant",
    "ZCDPAccountant",
    "account",
]

METHODS = ("linear", "advanced", "zcdp", "rdp")
CONVERSIONS = ("cks", "classic")


class PrivacyAccountant(ABC):
    """Accumulates events and reports their composition by one method.

    Calling the base class is the factory: ``PrivacyAccountant("rdp")`` returns
    an :class:`RDPAccountant` (``"moments"`` is an alias of ``"rdp"``).

    >>> acc = PrivacyAccountant("rdp")
    >>> acc.compose(GaussianEvent(4.0), count=100)
    RDPAccountant(conversion='cks', events=1)
    >>> eps = acc.get_epsilon(1e-5)
    """

    method: ClassVar[str]
    #: whether (epsilon, delta) events can be composed by this method
    takes_approx_events: ClassVar[bool] = True

    def __new__(cls, method: str | None = None, *, conversion: str = "cks") -> PrivacyAccountant:
        if cls is PrivacyAccountant:
            cls = _CLASSES[_method_name(method)]
        return super().__new__(cls)

    def __init__(self, method: str | None = None, *, conversion: str = "cks"):
        if method is not None and _method_name(method) != self.method:
            raise InvalidParameter(f"{type(self).__name__} composes by {self.method!r}, not {method!r}")
        self.conversion = check_choice(conversion, "conversion", CONVERSIONS)
        self._events: list[tuple[Event, int]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(conversion={self.conversion!r}, events={len(self._events)})"

    def compose(self, event: Event, count: int = 1) -> PrivacyAccountant:
        """Add ``count`` repetitions of ``event`` to the composition; returns the accountant (chainable)."""
        if not isinstance(event, EVENT_TYPES):
            raise InvalidParameter(f"unknown privacy event {event!r}")
        count = check_positive(count, "count", integer=True)
        if isinstance(event, ApproxDPEvent) and not self.takes_approx_events:
            raise InvalidParameter(
                f"an (epsilon, delta) event has no {self.method} description; use linear or advanced"
            )
        self._events.append((event, count))
        return self

    @property
    def events(self) -> list[tuple[Event, int]]:
        """The composed events with their counts, in order."""
        return list(self._events)

    # -- descriptions of the composed events, whatever the method -------------
    def get_rho(self) -> float:
        """Total zCDP rho (pure eps -> eps**2/2; Gaussian -> 1/(2 s**2))."""
        rho = 0.0
        for ev, c in self._events:
            if isinstance(ev, GaussianEvent):
                rho += c * ev.rho
            elif isinstance(ev, (LaplaceEvent, PureDPEvent)):
                rho += c * ev.epsilon**2 / 2.0
            else:
                raise InvalidParameter("an (epsilon, delta) event has no zCDP description")
        return rho

    def rdp(self, orders: Any) -> np.ndarray:
        """Total Renyi DP at ``orders`` (real numbers > 1)."""
        a = np.asarray(orders, dtype=np.float64)
        total = np.zeros_like(a)
        for ev, c in self._events:
            if isinstance(ev, GaussianEvent):
                total = total + c * gaussian_rdp(a, ev.noise_multiplier)
            elif isinstance(ev, LaplaceEvent):
                total = total + c * laplace_rdp(a, ev.epsilon)
            elif isinstance(ev, PureDPEvent):
                total = total + c * pure_dp_rdp(a, ev.epsilon)
            else:
                raise InvalidParameter("an (epsilon, delta) event has no RDP description")
        return total

    # -- the guarantee -----------------------------------------------------------
    def get_epsilon(self, delta: float) -> float:
        """Smallest epsilon this method certifies for total ``delta``."""
        delta = check_delta(delta)
        if not self._events:
            return 0.0
        return self._epsilon(delta)

    @abstractmethod
    def _epsilon(self, delta: float) -> float:
        """get_epsilon for a non-empty composition and a validated delta."""

    def summary(self, delta: float) -> dict[str, Any]:
        """JSON-ready: method, epsilon, delta, and what the method adds."""
        return {"method": self.method, "epsilon": self.get_epsilon(delta), "delta": float(delta)}


class _ApproxDPAccountant(PrivacyAccountant):
    """Shared by linear and advanced composition: events as (eps_i, delta_i) pairs."""

    def _fixed_delta(self) -> float:
        return sum(c * ev.delta for ev, c in self._events if isinstance(ev, ApproxDPEvent))

    def _gaussians(self) -> list[tuple[GaussianEvent, int]]:
        return [(ev, c) for ev, c in self._events if isinstance(ev, GaussianEvent)]

    def _pure_eps(self) -> list[tuple[float, int]]:
        return [(ev.epsilon, c) for ev, c in self._events if isinstance(ev, (LaplaceEvent, PureDPEvent, ApproxDPEvent))]

    def _delta_left(self, delta: float) -> float:
        """The delta not taken by the (epsilon, delta) events (what the Gaussians may use)."""
        fixed = self._fixed_delta()
        if fixed > delta * (1 + 1e-12):
            raise InvalidParameter(f"delta {delta} is below the deltas of the composed (eps, delta) events ({fixed})")
        return max(delta - fixed, 0.0)


class LinearAccountant(_ApproxDPAccountant):
    """Basic composition (Dwork-Roth Thm 3.16)."""

    method = "linear"

    def _epsilon(self, delta: float) -> float:
        rest = self._delta_left(delta)
        gauss = self._gaussians()
        n_g = sum(c for _, c in gauss)
        if n_g and rest <= 0:
            return math.inf
        eps = sum(e * c for e, c in self._pure_eps())
        for ev, c in gauss:
            eps += c * gaussian_epsilon(rest / n_g, ev.noise_multiplier)
        return eps

    def summary(self, delta: float) -> dict[str, Any]:
        out = super().summary(delta)
        if not self._gaussians() and not self._fixed_delta():
            out["delta"] = 0.0  # a purely Laplace / pure-DP composition uses no delta
        return out


class AdvancedAccountant(_ApproxDPAccountant):
    """Advanced composition (Dwork-Roth Thm 3.20, heterogeneous form)."""

    method = "advanced"

    def _epsilon(self, delta: float) -> float:
        rest = self._delta_left(delta)
        if rest <= 0:
            return math.inf
        gauss = self._gaussians()
        n_g = sum(c for _, c in gauss)
        pure = self._pure_eps()

        def adv(frac: float) -> float:
            # frac of the remaining delta goes to the Gaussians, the rest is delta'
            eps_list = [e for e, _ in pure]
            counts = [c for _, c in pure]
            for ev, c in gauss:
                eps_list.append(gaussian_epsilon(rest * frac / n_g, ev.noise_multiplier))
                counts.append(c)
            return advanced_composition(eps_list, rest * (1 - frac) if n_g else rest, counts=counts)

        if not n_g:
            return adv(0.0)
        fracs = np.linspace(0.01, 0.99, 99)
        vals = [adv(float(f)) for f in fracs]
        i = int(np.argmin(vals))
        lo, hi = float(fracs[max(i - 1, 0)]), float(fracs[min(i + 1, len(fracs) - 1)])
        from scipy import optimize  # lazily: the module docstring says why

        res = optimize.minimize_scalar(adv, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6})
        return float(min(vals[i], res.fun))


class ZCDPAccountant(PrivacyAccountant):
    """Zero-concentrated DP (Bun-Steinke), converted at the end."""

    method = "zcdp"
    takes_approx_events = False

    def _epsilon(self, delta: float) -> float:
        rho = self.get_rho()
        if delta == 0:
            return 0.0 if rho == 0 else math.inf
        if self.conversion == "cks":
            return zcdp_epsilon_cks(rho, delta)
        return zcdp_epsilon_classic(rho, delta)

    def summary(self, delta: float) -> dict[str, Any]:
        out = super().summary(delta)
        rho = self.get_rho()
        out["rho"] = rho
        out["conversion"] = self.conversion
        if delta > 0:
            out["epsilon_classic"] = zcdp_epsilon_classic(rho, delta)
            out["epsilon_cks"] = zcdp_epsilon_cks(rho, delta)
        return out


class RDPAccountant(PrivacyAccountant):
    """Renyi DP over real orders (the moments accountant)."""

    method = "rdp"
    takes_approx_events = False

    def _epsilon(self, delta: float) -> float:
        if delta == 0:
            return math.inf
        eps, _ = rdp_to_epsilon(self.rdp, delta, conversion=self.conversion)
        return eps

    def summary(self, delta: float) -> dict[str, Any]:
        out = super().summary(delta)
        out["conversion"] = self.conversion
        if delta > 0 and self._events:
            _, order = rdp_to_epsilon(self.rdp, delta, conversion=self.conversion)
            out["optimal_order"] = order
        return out


_CLASSES: dict[str, type[PrivacyAccountant]] = {
    c.method: c for c in (LinearAccountant, AdvancedAccountant, ZCDPAccountant, RDPAccountant)
}


def _method_name(method: Any) -> str:
    if method == "moments":
        return "rdp"
    if method not in METHODS:
        raise InvalidParameter(f"method must be one of {', '.join(METHODS)}; got {method!r}")
    return method


def account(
    method: str,
    delta: float,
    *,
    gaussian: Iterable[tuple[float, int]] = (),
    laplace: Iterable[tuple[float, int]] = (),
    conversion: str = "cks",
) -> dict[str, Any]:
    """Compose Gaussian (noise multiplier, count) and Laplace (scale b, count) steps.

    Returns a JSON-ready dict with at least ``epsilon`` and ``delta`` (and
    ``rho`` for zCDP).  ``method`` is linear | advanced | zcdp | rdp.
    """
    # the factory that PrivacyAccountant(method) calls, spelt out: type checkers refuse to call the abstract base
    acc = _CLASSES[_method_name(method)](method, conversion=conversion)
    for s, c in gaussian:
        acc.compose(GaussianEvent(s), c)
    for b, c in laplace:
        acc.compose(LaplaceEvent(b), c)
    if not acc.events:
        raise InvalidParameter("nothing to account: give at least one --gaussian or --laplace step")
    out = acc.summary(delta)
    out["steps"] = {
        "gaussian": [
            {"noise_multiplier": ev.noise_multiplier, "count": c}
            for ev, c in acc.events
            if isinstance(ev, GaussianEvent)
        ],
        "laplace": [{"scale": ev.noise_multiplier, "count": c} for ev, c in acc.events if isinstance(ev, LaplaceEvent)],
    }
    return out
