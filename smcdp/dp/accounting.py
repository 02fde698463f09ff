"""Privacy accounting: linear, advanced, zCDP and the moments accountant (RDP).

Vocabulary
----------
Events describe one release each:

* :class:`LaplaceEvent` -- Laplace noise with scale ``b`` per unit L1
  sensitivity (``noise_multiplier = b``); pure ``1/b``-DP.
* :class:`GaussianEvent` -- Gaussian noise with ``sigma`` per unit L2
  sensitivity (``noise_multiplier = sigma/Delta``); ``1/(2 s**2)``-zCDP.
* :class:`PureDPEvent` -- any ``epsilon``-DP mechanism.
* :class:`ApproxDPEvent` -- any ``(epsilon, delta)``-DP mechanism (linear and
  advanced composition only; it has no RDP / zCDP description).

Composition methods
-------------------
``linear``
    Dwork-Roth Thm 3.16: epsilons and deltas add.  A Gaussian event is first
    turned into an ``(eps_i, delta_i)`` pair by its exact privacy profile
    (Balle-Wang), the Gaussian events sharing the delta left over equally.
``advanced``
    Dwork-Roth Thm 3.20 in its heterogeneous form: for events that are
    ``(eps_i, delta_i)``-DP, the composition is ``(sqrt(2 ln(1/delta') sum eps_i**2)
    + sum eps_i (e**eps_i - 1), delta' + sum delta_i)``-DP.  With Gaussian events
    the split of delta between delta' and the Gaussians is optimised.
``zcdp``
    Bun-Steinke: eps-DP -> eps**2/2-zCDP (Prop. 1.4), Gaussian -> Delta**2/(2 sigma**2)
    (Prop. 1.6), rhos add (Lemma 1.7).  Conversion to (eps, delta) either by
    ``rho + 2 sqrt(rho ln(1/delta))`` (Prop. 1.3, "classic") or by
    Canonne-Kamath-Steinke Prop. 12 / Asoodeh et al. ("cks", tighter):
    ``eps = min_{alpha>1} alpha rho + log(1 - 1/alpha) - (log delta + log alpha)/(alpha-1)``.
``rdp`` (moments accountant)
    Rényi DP of order ``alpha = lambda + 1`` composes additively; the Laplace
    and Gaussian curves are DP-EM (Park et al. 2017) eqs. (19)-(20) divided by
    ``lambda``.  Orders are real: a dense log grid in (1, 1e8] followed by a
    bounded scalar refinement.  Conversion "cks" (as Google's dp-accounting) or
    "classic" (eq. (3) of DP-EM: ``eps = min rdp + log(1/delta)/(alpha-1)``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import optimize

from smcdp.dp.mechanisms import gaussian_epsilon
from smcdp.errors import InvalidMessage, PreconditionFailed

__all__ = [
    "METHODS",
    "ApproxDPEvent",
    "BudgetAccountant",
    "BudgetExceeded",
    "DPEMBudget",
    "GaussianEvent",
    "LaplaceEvent",
    "PrivacyAccountant",
    "PureDPEvent",
    "account",
    "advanced_composition",
    "gaussian_rdp",
    "laplace_rdp",
    "rdp_to_epsilon",
    "solve_dpem_budget",
    "zcdp_delta_cks",
    "zcdp_epsilon_cks",
    "zcdp_epsilon_classic",
]

METHODS = ("linear", "advanced", "zcdp", "rdp")


class BudgetExceeded(PreconditionFailed):
    """A spend would exceed the privacy budget; nothing was recorded."""


# ---------------------------------------------------------------------------
# events
# ---------------------------------------------------------------------------


def _pos(name: str, v: Any) -> float:
    if isinstance(v, (bool, np.bool_)):
        raise InvalidMessage(f"{name} must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InvalidMessage(f"{name} must be a number, got {v!r}") from None
    if not (math.isfinite(f) and f > 0):
        raise InvalidMessage(f"{name} must be positive and finite, got {v!r}")
    return f


def _delta(v: Any, *, allow_zero: bool = True, name: str = "delta") -> float:
    if isinstance(v, (bool, np.bool_)):
        raise InvalidMessage(f"{name} must be a number, got {v!r}")
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise InvalidMessage(f"{name} must be a number, got {v!r}") from None
    ok = (f >= 0 if allow_zero else f > 0) and f < 1 and math.isfinite(f)
    if not ok:
        raise InvalidMessage(
            f"{name} must lie in {'[0, 1)' if allow_zero else '(0, 1)'}, got {v!r}"
        )
    return f


@dataclass(frozen=True)
class LaplaceEvent:
    """Laplace noise of scale ``noise_multiplier`` per unit L1 sensitivity."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "noise_multiplier", _pos("Laplace scale b", self.noise_multiplier)
        )

    @property
    def epsilon(self) -> float:
        return 1.0 / self.noise_multiplier


@dataclass(frozen=True)
class GaussianEvent:
    """Gaussian noise with sigma = ``noise_multiplier`` per unit L2 sensitivity."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        object.__setattr__(
            self,
            "noise_multiplier",
            _pos("Gaussian noise multiplier", self.noise_multiplier),
        )

    @property
    def rho(self) -> float:
        return 1.0 / (2.0 * self.noise_multiplier**2)


@dataclass(frozen=True)
class PureDPEvent:
    epsilon: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _pos("epsilon", self.epsilon))


@dataclass(frozen=True)
class ApproxDPEvent:
    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", _pos("epsilon", self.epsilon))
        object.__setattr__(self, "delta", _delta(self.delta))


Event = LaplaceEvent | GaussianEvent | PureDPEvent | ApproxDPEvent


# ---------------------------------------------------------------------------
# RDP curves and conversions
# ---------------------------------------------------------------------------


def laplace_rdp(orders: Any, epsilon: float) -> np.ndarray:
    """RDP of the epsilon-DP Laplace mechanism at real orders alpha > 1.

    DP-EM eq. (19) gives the log-moment ``a(lambda) = log[(lambda+1)/(2 lambda+1)
    e^{lambda eps} + lambda/(2 lambda+1) e^{-eps(lambda+1)}]``; the RDP is
    ``a(alpha-1)/(alpha-1)``.  Evaluated as ``eps + log1p(-lambda (1 - e^{-eps(2 lambda+1)})
    / (2 lambda+1)) / lambda`` to stay finite for large orders.
    """
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise InvalidMessage("RDP orders must exceed 1")
    lam = a - 1.0
    inner = -lam * (-np.expm1(-epsilon * (2.0 * lam + 1.0))) / (2.0 * lam + 1.0)
    return epsilon + np.log1p(inner) / lam


def gaussian_rdp(orders: Any, noise_multiplier: float) -> np.ndarray:
    """RDP of the Gaussian mechanism: alpha / (2 s**2) (DP-EM eq. (20) / lambda)."""
    a = np.asarray(orders, dtype=np.float64)
    if np.any(a <= 1):
        raise InvalidMessage("RDP orders must exceed 1")
    return a / (2.0 * noise_multiplier**2)


def pure_dp_rdp(orders: Any, epsilon: float) -> np.ndarray:
    """An RDP bound for any epsilon-DP mechanism: min(eps, alpha eps**2 / 2)."""
    a = np.asarray(orders, dtype=np.float64)
    return np.minimum(epsilon, a * epsilon**2 / 2.0)


_ORDER_GRID = 1.0 + np.logspace(-3, 8, 1800)


def _conversion_eps(
    orders: np.ndarray, rdp: np.ndarray, delta: float, conversion: str
) -> np.ndarray:
    lam = orders - 1.0
    if conversion == "cks":
        return rdp + np.log1p(-1.0 / orders) - (math.log(delta) + np.log(orders)) / lam
    if conversion == "classic":
        return rdp - math.log(delta) / lam
    raise InvalidMessage(f"conversion must be 'cks' or 'classic', got {conversion!r}")


def rdp_to_epsilon(
    rdp_fn: Callable[[np.ndarray], np.ndarray],
    delta: float,
    *,
    conversion: str = "cks",
    orders: Sequence[float] | None = None,
) -> tuple[float, float]:
    """(epsilon, optimal order) for an RDP curve ``rdp_fn`` and target delta.

    Without ``orders`` the minimum is taken over all real orders: a dense grid
    locates the basin and ``scipy.optimize.minimize_scalar`` refines it.  The
    returned epsilon is the value of the conversion at a real order, so it is
    a valid bound whatever the optimiser's accuracy.
    """
    delta = _delta(delta, allow_zero=False)
    grid = np.asarray(orders if orders is not None else _ORDER_GRID, dtype=np.float64)
    rdp = np.asarray(rdp_fn(grid), dtype=np.float64)
    # (0, delta)-DP when total variation <= sqrt(1 - e^-KL) <= delta (as dp-accounting)
    if np.any(delta**2 + np.expm1(-rdp) > 0):
        return 0.0, float(grid[int(np.argmax(delta**2 + np.expm1(-rdp) > 0))])
    eps = _conversion_eps(grid, rdp, delta, conversion)
    eps = np.where(np.isfinite(eps), eps, np.inf)
    i = int(np.argmin(eps))
    best_a, best_e = float(grid[i]), float(eps[i])
    if orders is None:
        lo = float(grid[max(i - 1, 0)])
        hi = float(grid[min(i + 1, grid.size - 1)])
        if hi > lo:

            def f(a: float) -> float:
                v = _conversion_eps(
                    np.array([a]), np.asarray(rdp_fn(np.array([a]))), delta, conversion
                )[0]
                return float(v) if math.isfinite(v) else math.inf

            res = optimize.minimize_scalar(
                f, bounds=(lo, hi), method="bounded", options={"xatol": 1e-10 * hi}
            )
            if res.success and res.fun < best_e:
                best_a, best_e = float(res.x), float(res.fun)
    return max(best_e, 0.0), best_a


def zcdp_epsilon_classic(rho: float, delta: float) -> float:
    """Bun-Steinke Prop. 1.3: rho-zCDP => (rho + 2 sqrt(rho ln(1/delta)), delta)-DP."""
    delta = _delta(delta, allow_zero=False)
    if rho < 0:
        raise InvalidMessage("rho must be >= 0")
    return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))


def zcdp_epsilon_cks(rho: float, delta: float) -> float:
    """Canonne-Kamath-Steinke Prop. 12 conversion of rho-zCDP, minimised over real alpha > 1."""
    delta = _delta(delta, allow_zero=False)
    if rho < 0:
        raise InvalidMessage("rho must be >= 0")
    if rho == 0:
        return 0.0
    eps, _ = rdp_to_epsilon(lambda a: a * rho, delta, conversion="cks")
    return eps


def zcdp_delta_cks(rho: float, epsilon: float) -> float:
    """delta(eps) of rho-zCDP by CKS Prop. 12: inf_alpha e^{(a-1)(a rho - eps)} (1-1/a)^a / (a-1)."""
    if rho < 0 or epsilon < 0:
        raise InvalidMessage("rho and epsilon must be >= 0")

    def logd(a: np.ndarray) -> np.ndarray:
        return (a - 1) * (a * rho - epsilon) + a * np.log1p(-1.0 / a) - np.log(a - 1)

    grid = _ORDER_GRID
    v = logd(grid)
    i = int(np.argmin(v))
    lo, hi = float(grid[max(i - 1, 0)]), float(grid[min(i + 1, grid.size - 1)])
    res = optimize.minimize_scalar(
        lambda a: float(logd(np.array([a]))[0]), bounds=(lo, hi), method="bounded"
    )
    best = min(float(v[i]), float(res.fun))
    return min(1.0, math.exp(best))


def advanced_composition(epsilons: Sequence[float], delta_prime: float) -> float:
    """Dwork-Roth Thm 3.20 (heterogeneous form): epsilon of the composition.

    ``sqrt(2 ln(1/delta') sum eps_i**2) + sum eps_i (exp(eps_i) - 1)``; the
    composition's delta is ``delta' + sum delta_i`` (added by the caller).
    For k equal epsilons this is exactly the theorem's
    ``sqrt(2k ln(1/delta')) eps + k eps (e**eps - 1)``.
    """
    delta_prime = _delta(delta_prime, allow_zero=False, name="delta'")
    e = np.asarray(list(epsilons), dtype=np.float64)
    if e.size == 0:
        return 0.0
    return float(
        math.sqrt(2.0 * math.log(1.0 / delta_prime) * float(np.sum(e * e)))
        + float(np.sum(e * np.expm1(e)))
    )


# ---------------------------------------------------------------------------
# accountant
# ---------------------------------------------------------------------------


class PrivacyAccountant:
    """Accumulates events and reports the composed guarantee by one method.

    >>> acc = PrivacyAccountant("rdp")
    >>> acc.compose(GaussianEvent(4.0), count=100)
    >>> eps = acc.get_epsilon(1e-5)
    """

    def __init__(self, method: str = "rdp", *, conversion: str = "cks"):
        if method == "moments":
            method = "rdp"
        if method not in METHODS:
            raise InvalidMessage(
                f"method must be one of {', '.join(METHODS)}; got {method!r}"
            )
        if conversion not in ("cks", "classic"):
            raise InvalidMessage(
                f"conversion must be 'cks' or 'classic', got {conversion!r}"
            )
        self.method = method
        self.conversion = conversion
        self._events: list[tuple[Event, int]] = []

    def compose(self, event: Event, count: int = 1) -> PrivacyAccountant:
        if not isinstance(
            event, (LaplaceEvent, GaussianEvent, PureDPEvent, ApproxDPEvent)
        ):
            raise InvalidMessage(f"unknown privacy event {event!r}")
        if (
            isinstance(count, (bool, np.bool_))
            or not isinstance(count, (int, np.integer))
            or count < 1
        ):
            raise InvalidMessage(f"count must be a positive integer, got {count!r}")
        if self.method in ("zcdp", "rdp") and isinstance(event, ApproxDPEvent):
            raise InvalidMessage(
                f"an (epsilon, delta) event has no {self.method} description; use linear or advanced"
            )
        self._events.append((event, int(count)))
        return self

    @property
    def events(self) -> list[tuple[Event, int]]:
        return list(self._events)

    # -- zCDP / RDP --------------------------------------------------------
    def get_rho(self) -> float:
        """Total zCDP rho (pure eps -> eps**2/2; Gaussian -> 1/(2 s**2))."""
        rho = 0.0
        for ev, c in self._events:
            if isinstance(ev, GaussianEvent):
                rho += c * ev.rho
            elif isinstance(ev, (LaplaceEvent, PureDPEvent)):
                rho += c * ev.epsilon**2 / 2.0
            else:
                raise InvalidMessage(
                    "an (epsilon, delta) event has no zCDP description"
                )
        return rho

    def rdp(self, orders: Any) -> np.ndarray:
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
                raise InvalidMessage("an (epsilon, delta) event has no RDP description")
        return total

    # -- (eps, delta) ----------------------------------------------------------
    def _fixed_delta(self) -> float:
        return sum(
            c * ev.delta for ev, c in self._events if isinstance(ev, ApproxDPEvent)
        )

    def _gaussians(self) -> list[tuple[GaussianEvent, int]]:
        return [(ev, c) for ev, c in self._events if isinstance(ev, GaussianEvent)]

    def _pure_eps(self) -> list[tuple[float, int]]:
        out = []
        for ev, c in self._events:
            if isinstance(ev, (LaplaceEvent, PureDPEvent, ApproxDPEvent)):
                out.append((ev.epsilon, c))
        return out

    def get_epsilon(self, delta: float) -> float:
        """Smallest epsilon this method certifies for total ``delta``."""
        delta = _delta(delta, allow_zero=True)
        if not self._events:
            return 0.0
        if self.method == "zcdp":
            rho = self.get_rho()
            if delta == 0:
                return 0.0 if rho == 0 else math.inf
            return (
                zcdp_epsilon_cks(rho, delta)
                if self.conversion == "cks"
                else zcdp_epsilon_classic(rho, delta)
            )
        if self.method == "rdp":
            if delta == 0:
                return math.inf
            eps, _ = rdp_to_epsilon(self.rdp, delta, conversion=self.conversion)
            return eps
        fixed = self._fixed_delta()
        if fixed > delta * (1 + 1e-12):
            raise InvalidMessage(
                f"delta {delta} is below the deltas of the composed (eps, delta) events ({fixed})"
            )
        rest = max(delta - fixed, 0.0)
        gauss = self._gaussians()
        n_g = sum(c for _, c in gauss)
        pure = self._pure_eps()
        if self.method == "linear":
            if n_g and rest <= 0:
                return math.inf
            eps = sum(e * c for e, c in pure)
            for ev, c in gauss:
                eps += c * gaussian_epsilon(rest / n_g, ev.noise_multiplier)
            return eps
        # advanced
        if rest <= 0:
            return math.inf

        def adv(frac: float) -> float:
            dprime = rest * (1 - frac) if n_g else rest
            eps_list: list[float] = []
            counts: list[int] = []
            for e, c in pure:
                eps_list.append(e)
                counts.append(c)
            for ev, c in gauss:
                eps_list.append(
                    gaussian_epsilon(rest * frac / n_g, ev.noise_multiplier)
                )
                counts.append(c)
            e_arr = np.asarray(eps_list)
            c_arr = np.asarray(counts, dtype=np.float64)
            return float(
                math.sqrt(
                    2.0 * math.log(1.0 / dprime) * float(np.sum(c_arr * e_arr**2))
                )
                + float(np.sum(c_arr * e_arr * np.expm1(e_arr)))
            )

        if not n_g:
            return adv(0.0)
        fracs = np.linspace(0.01, 0.99, 99)
        vals = [adv(float(f)) for f in fracs]
        i = int(np.argmin(vals))
        lo, hi = float(fracs[max(i - 1, 0)]), float(fracs[min(i + 1, len(fracs) - 1)])
        res = optimize.minimize_scalar(
            adv, bounds=(lo, hi), method="bounded", options={"xatol": 1e-6}
        )
        return float(min(vals[i], res.fun))

    def summary(self, delta: float) -> dict[str, Any]:
        out: dict[str, Any] = {
            "method": self.method,
            "epsilon": self.get_epsilon(delta),
            "delta": float(delta),
        }
        if self.method == "zcdp":
            rho = self.get_rho()
            out["rho"] = rho
            out["conversion"] = self.conversion
            if delta > 0:
                out["epsilon_classic"] = zcdp_epsilon_classic(rho, delta)
                out["epsilon_cks"] = zcdp_epsilon_cks(rho, delta)
        if self.method == "rdp":
            out["conversion"] = self.conversion
            if delta > 0 and self._events:
                _, order = rdp_to_epsilon(self.rdp, delta, conversion=self.conversion)
                out["optimal_order"] = order
        if (
            self.method == "linear"
            and not self._gaussians()
            and not self._fixed_delta()
        ):
            out["delta"] = 0.0
        return out


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
    acc = PrivacyAccountant(method, conversion=conversion)
    for s, c in gaussian:
        acc.compose(GaussianEvent(s), c)
    for b, c in laplace:
        acc.compose(LaplaceEvent(b), c)
    if not acc.events:
        raise InvalidMessage(
            "nothing to account: give at least one --gaussian or --laplace step"
        )
    out = acc.summary(delta)
    out["steps"] = {
        "gaussian": [
            {"noise_multiplier": ev.noise_multiplier, "count": c}
            for ev, c in acc.events
            if isinstance(ev, GaussianEvent)
        ],
        "laplace": [
            {"scale": ev.noise_multiplier, "count": c}
            for ev, c in acc.events
            if isinstance(ev, LaplaceEvent)
        ],
    }
    return out


# ---------------------------------------------------------------------------
# in-memory budget accountant
# ---------------------------------------------------------------------------


class BudgetAccountant:
    """A total (epsilon, delta) budget that refuses spends exceeding it.

    Rule ``linear`` (basic composition, exact): spends are ``(epsilon, delta)``
    pairs whose sums must stay within the budget.  Rule ``zcdp``: spends carry a
    ``rho`` (pure eps-DP spends count as eps**2/2) and the budget holds while the
    CKS conversion of the total rho at the budget's delta stays within epsilon.
    The persistent variant is :class:`smcdp.dp.ledger.Ledger`.
    """

    def __init__(self, epsilon: float, delta: float = 0.0, *, rule: str = "linear"):
        self.epsilon = _pos("epsilon budget", epsilon)
        self.delta = _delta(delta)
        if rule not in ("linear", "zcdp"):
            raise InvalidMessage(f"rule must be 'linear' or 'zcdp', got {rule!r}")
        if rule == "zcdp" and self.delta == 0:
            raise InvalidMessage("the zcdp rule needs a budget delta > 0")
        self.rule = rule
        self.spends: list[tuple[float, float, float | None]] = []

    def spent(self) -> dict[str, float]:
        eps = math.fsum(s[0] for s in self.spends)
        dlt = math.fsum(s[1] for s in self.spends)
        out = {"epsilon": eps, "delta": dlt}
        if self.rule == "zcdp":
            rho = math.fsum(s[2] or 0.0 for s in self.spends)
            out["rho"] = rho
            out["epsilon"] = zcdp_epsilon_cks(rho, self.delta) if rho > 0 else 0.0
        return out

    def check(
        self, epsilon: float, delta: float = 0.0, rho: float | None = None
    ) -> None:
        """Raise :class:`BudgetExceeded` if the spend does not fit."""
        _check_spend_fits(
            self.rule,
            self.epsilon,
            self.delta,
            [(e, d, r) for e, d, r in self.spends],
            epsilon,
            delta,
            rho,
        )

    def spend(
        self, epsilon: float, delta: float = 0.0, rho: float | None = None
    ) -> None:
        epsilon = _pos("epsilon", epsilon)
        delta = _delta(delta)
        self.check(epsilon, delta, rho)
        self.spends.append((epsilon, delta, _spend_rho(self.rule, epsilon, delta, rho)))

    def remaining(self) -> dict[str, float]:
        return _remaining(self.rule, self.epsilon, self.delta, self.spends)


def _spend_rho(
    rule: str, epsilon: float, delta: float, rho: float | None
) -> float | None:
    if rule != "zcdp":
        return rho
    if rho is not None:
        return _pos("rho", rho)
    if delta > 0:
        raise InvalidMessage(
            "the zcdp rule needs rho for a spend with delta > 0 (give rho = Delta**2/(2 sigma**2))"
        )
    return epsilon**2 / 2.0


def _rho_capacity(epsilon: float, delta: float) -> float:
    """Largest rho whose CKS conversion at delta stays <= epsilon."""
    f = lambda r: zcdp_epsilon_cks(r, delta) - epsilon
    hi = max(epsilon, 1e-12)
    while f(hi) < 0:
        hi *= 2
    lo = 0.0
    r = optimize.brentq(f, lo, hi, xtol=1e-15, rtol=1e-13)
    while f(r) > 0:
        r *= 1 - 1e-12
    return r


def _remaining(
    rule: str,
    eps_b: float,
    delta_b: float,
    spends: Sequence[tuple[float, float, float | None]],
) -> dict[str, float]:
    if rule == "linear":
        return {
            "epsilon": max(eps_b - math.fsum(s[0] for s in spends), 0.0),
            "delta": max(delta_b - math.fsum(s[1] for s in spends), 0.0),
        }
    cap = _rho_capacity(eps_b, delta_b)
    used = math.fsum(s[2] or 0.0 for s in spends)
    rem = max(cap - used, 0.0)
    return {"rho": rem, "epsilon": math.sqrt(2 * rem), "delta": delta_b}


def _check_spend_fits(
    rule: str,
    eps_b: float,
    delta_b: float,
    spends: Sequence[tuple[float, float, float | None]],
    epsilon: float,
    delta: float,
    rho: float | None,
) -> None:
    epsilon = _pos("epsilon", epsilon)
    delta = _delta(delta)
    if rule == "linear":
        e_tot = math.fsum([s[0] for s in spends] + [epsilon])
        d_tot = math.fsum([s[1] for s in spends] + [delta])
        if e_tot > eps_b * (1 + 1e-12) or d_tot > delta_b * (1 + 1e-12):
            rem = _remaining(rule, eps_b, delta_b, spends)
            raise BudgetExceeded(
                f"spend of epsilon={epsilon:g}, delta={delta:g} refused: remaining budget is "
                f"epsilon={rem['epsilon']:g}, delta={rem['delta']:g}"
            )
        return
    r = _spend_rho(rule, epsilon, delta, rho)
    used = math.fsum(s[2] or 0.0 for s in spends)
    if zcdp_epsilon_cks(used + r, delta_b) > eps_b * (1 + 1e-12):
        rem = _remaining(rule, eps_b, delta_b, spends)
        raise BudgetExceeded(
            f"spend of rho={r:g} refused: remaining budget is rho={rem['rho']:g} "
            f"(total epsilon={eps_b:g} at delta={delta_b:g})"
        )


# ---------------------------------------------------------------------------
# DP-EM budget solver (Park et al. 2017, section 5)
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class DPEMBudget:
    """Per-iteration privacy budget and noise scales for DP-EM on a mixture of Gaussians.

    Noise scales are *per unit sensitivity*: multiply by the sensitivity of
    DP-EM section 4.2 (Delta pi = 2/N, Delta_1 mu_k = 2 sqrt(d)/N_k, Delta_2 mu_k =
    2/N_k, Delta Sigma_k = 2/N_k) to get the scale to use.

    Fields
    ------
    epsilon, delta:
        the total budget the solver was asked for.
    iterations, n_components, scenario, method, conversion:
        J, K, "LLG"/"GGG", "linear"/"advanced"/"zcdp"/"moments", and the
        zCDP/RDP-to-(eps, delta) conversion ("cks" or the paper's "classic").
    eps_per_iter:
        epsilon_i, the per-release epsilon of every perturbation in one iteration.
    delta_per_iter:
        delta_i, used (with epsilon_i) to calibrate each Gaussian release by the
        classic formula sigma = sqrt(2 ln(1.25/delta_i)) / epsilon_i.  Under linear
        and advanced composition it is part of the total delta; under zcdp and
        moments only sigma enters the accounting (delta_i is a calibration
        parameter, by default the total delta).
    laplace_scale_weights, laplace_scale_means:
        LLG: Laplace scale 1/epsilon_i for the mixing weights and each mean;
        None under GGG.
    sigma_weights, sigma_means:
        GGG: Gaussian sigma per unit L2 sensitivity for weights and means; None under LLG.
    sigma_covariances:
        Gaussian sigma per unit (Frobenius) sensitivity for each covariance
        (Analyze Gauss, DP-EM eq. (16): beta = sigma**2).
    n_laplace, n_gaussian:
        number of Laplace / Gaussian releases over all J iterations.
    delta_prime:
        advanced composition slack delta' (0 otherwise).
    achieved_epsilon, achieved_delta:
        the total guarantee recomputed from eps_per_iter with the same method
        (equal to the budget to ~1e-9 relative).
    """

    epsilon: float
    delta: float
    iterations: int
    n_components: int
    scenario: str
    method: str
    conversion: str
    eps_per_iter: float
    delta_per_iter: float
    laplace_scale_weights: float | None
    laplace_scale_means: float | None
    sigma_weights: float | None
    sigma_means: float | None
    sigma_covariances: float
    n_laplace: int
    n_gaussian: int
    delta_prime: float
    achieved_epsilon: float
    achieved_delta: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _dpem_counts(J: int, K: int, scenario: str) -> tuple[int, int]:
    if scenario == "LLG":
        return J * (K + 1), J * K
    return 0, J * (2 * K + 1)


def _dpem_total(
    eps_i: float,
    delta_i: float,
    n_l: int,
    n_g: int,
    method: str,
    delta: float,
    delta_prime: float,
    conversion: str,
) -> float:
    """Total epsilon of the DP-EM composition for per-iteration eps_i."""
    s = math.sqrt(2.0 * math.log(1.25 / delta_i)) / eps_i  # classic noise multiplier
    if method == "linear":
        return (n_l + n_g) * eps_i
    if method == "advanced":
        n = n_l + n_g
        return math.sqrt(
            2.0 * n * math.log(1.0 / delta_prime)
        ) * eps_i + n * eps_i * math.expm1(eps_i)
    if method == "zcdp":
        rho = n_l * eps_i**2 / 2.0 + n_g / (2.0 * s**2)
        return (
            zcdp_epsilon_cks(rho, delta)
            if conversion == "cks"
            else zcdp_epsilon_classic(rho, delta)
        )
    acc = PrivacyAccountant("rdp", conversion=conversion)
    if n_l:
        acc.compose(LaplaceEvent(1.0 / eps_i), n_l)
    acc.compose(GaussianEvent(s), n_g)
    return acc.get_epsilon(delta)


def solve_dpem_budget(
    epsilon: float,
    delta: float,
    iterations: int,
    n_components: int,
    scenario: str,
    method: str,
    *,
    conversion: str = "cks",
    calibration_delta: float | None = None,
    delta_split: float = 0.5,
) -> DPEMBudget:
    """Per-iteration budget (eps_i, delta_i) and noise scales of DP-EM (Park et al. 2017, sec. 5).

    LLG: J(K+1) Laplace releases (weights, K means) and JK Gaussian releases
    (covariances); GGG: J(2K+1) Gaussian releases.  Each release gets eps_i, and
    the Gaussian ones are calibrated with sigma = sqrt(2 ln(1.25/delta_i))/eps_i.
    eps_i is the largest value whose composition by ``method`` stays within the
    total ``(epsilon, delta)``:

    * linear: (J(2K+1) eps_i, n_G delta_i) -- closed form;
    * advanced: Dwork-Roth 3.20 with delta' = (1 - delta_split) delta and
      n_G delta_i = delta_split * delta;
    * zcdp: rho = J(K+1) eps_i**2/2 + n_G/(2 s**2) (LLG), n_G/(2 s**2) (GGG), converted
      with ``conversion`` ("classic" is the paper's rho + 2 sqrt(rho ln 1/delta));
    * moments: RDP of eqs. (19)-(20) summed, minimised over real orders.

    Under zcdp / moments ``calibration_delta`` (default: ``delta``) fixes delta_i.
    Solved by Brent's method to 1e-12 relative; the total is monotone in eps_i.
    """
    epsilon = _pos("epsilon", epsilon)
    delta = _delta(delta, allow_zero=False)
    for name, v in (("iterations", iterations), ("n_components", n_components)):
        if (
            isinstance(v, (bool, np.bool_))
            or not isinstance(v, (int, np.integer))
            or v < 1
        ):
            raise InvalidMessage(f"{name} must be a positive integer, got {v!r}")
    J, K = int(iterations), int(n_components)
    if scenario not in ("LLG", "GGG"):
        raise InvalidMessage(f"scenario must be 'LLG' or 'GGG', got {scenario!r}")
    if method == "rdp":
        method = "moments"
    if method not in ("linear", "advanced", "zcdp", "moments"):
        raise InvalidMessage(
            f"method must be linear, advanced, zcdp or moments; got {method!r}"
        )
    if conversion not in ("cks", "classic"):
        raise InvalidMessage(
            f"conversion must be 'cks' or 'classic', got {conversion!r}"
        )
    if not (0 < delta_split < 1):
        raise InvalidMessage("delta_split must lie in (0, 1)")
    n_l, n_g = _dpem_counts(J, K, scenario)
    delta_prime = 0.0
    if method == "linear":
        delta_i = delta / n_g
        eps_i = epsilon / (n_l + n_g)
    elif method == "advanced":
        delta_prime = (1.0 - delta_split) * delta
        delta_i = delta_split * delta / n_g
    else:
        delta_i = _delta(
            calibration_delta if calibration_delta is not None else delta,
            allow_zero=False,
            name="calibration_delta",
        )
    if method == "zcdp" and conversion == "classic":
        # closed form: rho = (sqrt(L + eps) - sqrt(L))**2 with L = ln(1/delta), rho = c eps_i**2
        L = math.log(1.0 / delta)
        rho = (math.sqrt(L + epsilon) - math.sqrt(L)) ** 2
        c = n_l / 2.0 + n_g / (4.0 * math.log(1.25 / delta_i))
        eps_i = math.sqrt(rho / c)
    elif method != "linear":
        f = lambda e: (
            _dpem_total(e, delta_i, n_l, n_g, method, delta, delta_prime, conversion)
            - epsilon
        )
        hi = epsilon
        while f(hi) < 0:
            hi *= 2.0
        lo = hi
        while f(lo) > 0:
            lo /= 2.0
            if lo < 1e-300:
                raise InvalidMessage(
                    "cannot solve the DP-EM budget for these parameters"
                )
        eps_i = optimize.brentq(f, lo, hi, xtol=1e-300, rtol=1e-13, maxiter=500)
        # never exceed the budget
        while f(eps_i) > 0:
            eps_i *= 1 - 1e-13
    if method in ("linear", "advanced") and eps_i >= 1:
        raise InvalidMessage(
            f"per-iteration epsilon {eps_i:.4g} >= 1: the classic Gaussian calibration DP-EM uses is "
            "only proved for epsilon_i < 1; lower the budget or raise iterations"
        )
    sigma = math.sqrt(2.0 * math.log(1.25 / delta_i)) / eps_i
    achieved = _dpem_total(
        eps_i, delta_i, n_l, n_g, method, delta, delta_prime, conversion
    )
    if method == "linear":
        achieved_delta = n_g * delta_i
    elif method == "advanced":
        achieved_delta = delta_prime + n_g * delta_i
    else:
        achieved_delta = delta
    llg = scenario == "LLG"
    return DPEMBudget(
        epsilon=epsilon,
        delta=delta,
        iterations=J,
        n_components=K,
        scenario=scenario,
        method=method,
        conversion=conversion,
        eps_per_iter=eps_i,
        delta_per_iter=delta_i,
        laplace_scale_weights=1.0 / eps_i if llg else None,
        laplace_scale_means=1.0 / eps_i if llg else None,
        sigma_weights=None if llg else sigma,
        sigma_means=None if llg else sigma,
        sigma_covariances=sigma,
        n_laplace=n_l,
        n_gaussian=n_g,
        delta_prime=delta_prime,
        achieved_epsilon=achieved,
        achieved_delta=achieved_delta,
    )
