"""Spying on the noise a learner really adds: every mechanism it makes and every draw from it, so that a test
compares them with independently derived sensitivities and the privacy the fit reports (a review halved several
learners' noise and their tests still passed)."""

from __future__ import annotations

from typing import Any


def spy_mechanisms(monkeypatch: Any, module: Any) -> list[list[Any]]:
    """Replace ``module``'s LaplaceMechanism and GaussianMechanism.from_sigma (where it has them) by recording
    wrappers.  Returns the list they fill: one ``[kind, epsilon or sigma, sensitivity, draws]`` per mechanism made
    ("laplace" or "gauss"), ``draws`` counting its ``randomise`` calls."""
    made: list[list[Any]] = []

    def counted(kind: str, a: float, sensitivity: float, mech: Any) -> Any:
        entry = [kind, a, sensitivity, 0]
        made.append(entry)
        draw = mech.randomise

        def randomise(*args: Any, **kw: Any) -> Any:
            entry[3] += 1
            return draw(*args, **kw)

        mech.randomise = randomise
        return mech

    if hasattr(module, "LaplaceMechanism"):
        real_laplace = module.LaplaceMechanism

        def spy_laplace(epsilon: float, sensitivity: float, **kw: Any) -> Any:
            return counted("laplace", epsilon, sensitivity, real_laplace(epsilon, sensitivity, **kw))

        monkeypatch.setattr(module, "LaplaceMechanism", spy_laplace)
    if hasattr(module, "GaussianMechanism"):
        real_from_sigma = module.GaussianMechanism.from_sigma

        def spy_gaussian(sigma: float, sensitivity: float, **kw: Any) -> Any:
            return counted("gauss", sigma, sensitivity, real_from_sigma(sigma, sensitivity, **kw))

        monkeypatch.setattr(module.GaussianMechanism, "from_sigma", staticmethod(spy_gaussian))
    return made


def rho_of(made: list[list[Any]]) -> float:
    """The zCDP cost of every draw recorded: Δ²/(2σ²) a Gaussian draw, ε²/2 a Laplace one (Bun & Steinke)."""
    return sum(draws * (dl**2 / (2 * a**2) if kind == "gauss" else a**2 / 2) for kind, a, dl, draws in made)
