"""Per-iteration budget of DP-EM for a Gaussian mixture (Park et al. 2017, section 5).

This encodes DP-EM's release schedule -- per iteration the weights, K means and
K covariances, Laplace or Gaussian by scenario -- and solves the largest
per-release epsilon_i whose composition stays within a total (epsilon, delta).
It belongs to the learner, not to the generic accountants it uses, and imports
no scikit-learn, so ``smcdp.dp.learners.dpem_budget`` is cheap to import.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from scipy import optimize

from smcdp.dp.accountants import PrivacyAccountant
from smcdp.dp.conversions import (
    step_until,
    zcdp_epsilon_cks,
    zcdp_epsilon_classic,
    zcdp_rho_classic,
)
from smcdp.dp.events import GaussianEvent, LaplaceEvent
from smcdp.dp.validation import (
    InvalidParameter,
    check_choice,
    check_delta,
    check_epsilon,
    check_positive,
)

__all__ = ["DPEMBudget", "solve_dpem_budget"]


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
    rho:
        zCDP cost of all releases, n_laplace eps_i**2/2 + n_gaussian/(2 sigma**2): a
        second description of the same mechanism, valid whatever the composition
        method (what a zCDP-rule budget is charged).
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
    rho: float

    def as_dict(self) -> dict[str, Any]:
        """Every field by name (for JSON reports)."""
        return asdict(self)


def _dpem_counts(J: int, K: int, scenario: str) -> tuple[int, int]:
    if scenario == "LLG":
        return J * (K + 1), J * K
    return 0, J * (2 * K + 1)


def _dpem_rho(eps_i: float, delta_i: float, n_l: int, n_g: int) -> float:
    s = math.sqrt(2.0 * (math.log(1.25) - math.log(delta_i))) / eps_i  # classic noise multiplier
    return n_l * eps_i**2 / 2.0 + n_g / s / (2.0 * s)  # not s**2, which overflows for s ~ 1e154


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
    if method == "linear":
        return (n_l + n_g) * eps_i
    if method == "advanced":
        n = n_l + n_g
        if eps_i > 700:  # e^eps_i overflows: the bound is infinite (the solver's bracket reaches here)
            return math.inf
        return math.sqrt(2.0 * n * -math.log(delta_prime)) * eps_i + n * eps_i * math.expm1(eps_i)
    if method == "zcdp":
        rho = _dpem_rho(eps_i, delta_i, n_l, n_g)
        return zcdp_epsilon_cks(rho, delta) if conversion == "cks" else zcdp_epsilon_classic(rho, delta)
    s = math.sqrt(2.0 * (math.log(1.25) - math.log(delta_i))) / eps_i  # classic noise multiplier
    acc = PrivacyAccountant("rdp", conversion=conversion)  # type: ignore[abstract]  # the base class's __new__ is a factory returning a concrete subclass
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
    epsilon = check_epsilon(epsilon, allow_inf=False)  # finite: in [2^-200, 2^200]
    delta = check_delta(delta, allow_zero=False)
    J = check_positive(iterations, "iterations", integer=True)
    K = check_positive(n_components, "n_components", integer=True)
    check_choice(scenario, "scenario", ("LLG", "GGG"))
    if method == "rdp":
        method = "moments"
    check_choice(method, "method", ("linear", "advanced", "zcdp", "moments"))
    check_choice(conversion, "conversion", ("cks", "classic"))
    if not (isinstance(delta_split, float | int) and 0 < delta_split < 1):
        raise InvalidParameter(f"delta_split must lie in (0, 1), got {delta_split!r}")
    n_l, n_g = _dpem_counts(J, K, scenario)
    delta_prime = 0.0
    if method == "linear":
        delta_i = delta / n_g
        eps_i = epsilon / (n_l + n_g)
    elif method == "advanced":
        delta_prime = (1.0 - delta_split) * delta
        delta_i = delta_split * delta / n_g
    else:
        delta_i = check_delta(
            calibration_delta if calibration_delta is not None else delta,
            "calibration_delta",
            allow_zero=False,
        )
    if not delta_i >= 2.0**-1000:  # δ/n_g of a subnormal δ underflows (ZeroDivisionError in the calibration)
        source = {"linear": f"delta/{n_g}", "advanced": f"delta_split·delta/{n_g}"}.get(
            method, "calibration_delta (default: delta)"
        )
        raise InvalidParameter(f"the per-step delta {delta_i!r} ({source}) is below 2^-1000: choose a larger one")
    if method == "zcdp" and conversion == "classic":
        # closed form: the classic bound inverted, rho = c eps_i**2
        rho = zcdp_rho_classic(epsilon, delta)
        c = n_l / 2.0 + n_g / (4.0 * (math.log(1.25) - math.log(delta_i)))
        eps_i = math.sqrt(rho / c)
    elif method != "linear":
        f = lambda e: _dpem_total(e, delta_i, n_l, n_g, method, delta, delta_prime, conversion) - epsilon
        hi = epsilon
        while f(hi) < 0:
            hi *= 2.0
        lo = hi
        while f(lo) > 0:
            lo /= 2.0
            if lo < 1e-300:
                raise InvalidParameter("cannot solve the DP-EM budget for these parameters")
        eps_i = optimize.brentq(f, lo, hi, xtol=1e-300, rtol=1e-13, maxiter=500)
        eps_i = step_until(lambda e: f(e) <= 0, eps_i, up=False, first=1e-13)  # never exceed the budget
    if method in ("linear", "advanced") and eps_i >= 1:
        raise InvalidParameter(
            f"per-iteration epsilon {eps_i:.4g} >= 1: the classic Gaussian calibration DP-EM uses is "
            "only proved for epsilon_i < 1; lower the budget or raise iterations"
        )
    sigma = math.sqrt(2.0 * (math.log(1.25) - math.log(delta_i))) / eps_i
    achieved = _dpem_total(eps_i, delta_i, n_l, n_g, method, delta, delta_prime, conversion)
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
        rho=_dpem_rho(eps_i, delta_i, n_l, n_g),
    )
