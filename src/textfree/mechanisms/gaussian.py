"""The Gaussian mechanism: x + N(0, sigma^2 I).

Calibration from (epsilon, delta, sensitivity Delta_2):

* ``analytic`` (Balle & Wang 2018; the default): the exact smallest epsilon for given sigma, delta and
  sensitivity, from delta(eps) = Phi(D/(2s) - eps*s/D) - e^eps * Phi(-D/(2s) - eps*s/D), solved by bisection.
  Valid for every epsilon.
* ``classic`` (Dwork & Roth 2014, Thm. A.1; BeamClean Appendix C uses it): sigma = Delta_2 *
  sqrt(2 ln(1.25/delta)) / epsilon. The theorem is proved for epsilon < 1, and above about 8.4 (at delta 1e-5)
  the formula is false: the exact loss is larger (sigma 0.1 at sensitivity 1: the formula says 48.4, the exact
  figure is 91.8). So a ``classic`` Gaussian's ``privacy_loss`` states max(formula, exact): the formula's figure
  wherever it holds, never less than the exact loss; and ``from_epsilon_delta(..., calibration="classic")``
  refuses epsilon >= 1, where the formula is not proved to give the epsilon asked for.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .base import PrivacyLoss, add_noise, check_positive, check_probability, register_mechanism

__all__ = ["Gaussian", "classic_sigma", "analytic_sigma", "analytic_delta", "analytic_epsilon", "sigma_for_noise_norm"]


def classic_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    check_positive("classic_sigma", "epsilon", epsilon)
    check_probability("classic_sigma", "delta", delta)
    check_positive("classic_sigma", "sensitivity", sensitivity)
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def _phi(t: float) -> float:
    return 0.5 * math.erfc(-t / math.sqrt(2.0))


def analytic_delta(epsilon: float, sigma: float, sensitivity: float) -> float:
    """The exact delta of the Gaussian mechanism at ``epsilon`` (Balle & Wang 2018, Thm. 8)."""
    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    second = math.exp(epsilon + math.log(_phi(-a - b))) if _phi(-a - b) > 0 else 0.0
    return max(0.0, _phi(a - b) - second)


def analytic_epsilon(sigma: float, delta: float, sensitivity: float, *, tol: float = 1e-10) -> float:
    """The smallest epsilon with analytic_delta(epsilon) <= delta, by bisection."""
    check_positive("analytic_epsilon", "sigma", sigma)
    check_probability("analytic_epsilon", "delta", delta)
    check_positive("analytic_epsilon", "sensitivity", sensitivity)
    if analytic_delta(0.0, sigma, sensitivity) <= delta:
        return 0.0
    lo, hi = 0.0, 1.0
    while analytic_delta(hi, sigma, sensitivity) > delta:
        hi *= 2.0
        if hi > 1e15:
            return math.inf
    while hi - lo > tol * max(1.0, hi):
        mid = 0.5 * (lo + hi)
        if analytic_delta(mid, sigma, sensitivity) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def analytic_sigma(epsilon: float, delta: float, sensitivity: float, *, tol: float = 1e-12) -> float:
    """The smallest sigma whose exact (Balle & Wang) delta at ``epsilon`` is <= ``delta``, by bisection.

    Valid for every epsilon > 0 (the classic formula is proved only below 1).
    """
    check_positive("analytic_sigma", "epsilon", epsilon)
    check_probability("analytic_sigma", "delta", delta)
    check_positive("analytic_sigma", "sensitivity", sensitivity)
    lo, hi = 0.0, sensitivity
    while analytic_delta(epsilon, hi, sensitivity) > delta:
        hi *= 2.0
    while hi - lo > tol * hi:
        mid = 0.5 * (lo + hi)
        if mid > 0 and analytic_delta(epsilon, mid, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
    return hi


def sigma_for_noise_norm(norm: float, d: int) -> float:
    """The sigma whose d-dimensional noise has expected L2 norm ``norm`` (inverse of ``expected_noise_norm``)."""
    check_positive("sigma_for_noise_norm", "norm", norm)
    if not isinstance(d, int) or d < 1:
        raise ValueError(f"sigma_for_noise_norm: d must be an integer >= 1, got {d!r}")
    return norm / (math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2)))


@register_mechanism("gaussian")
@dataclass(frozen=True)
class Gaussian:
    """Isotropic Gaussian noise with standard deviation ``sigma`` per coordinate.

    ``delta`` is the delta at which ``privacy_loss`` states epsilon; ``calibration`` picks the accountant
    (``analytic``: exact; ``classic``: Dwork & Roth's formula where it holds, else the exact figure).
    """

    sigma: float
    delta: float = 1e-5
    calibration: str = "analytic"

    def __post_init__(self) -> None:
        check_positive("Gaussian", "sigma", self.sigma)
        check_probability("Gaussian", "delta", self.delta)
        if self.calibration not in ("classic", "analytic"):
            raise ValueError(f"Gaussian: calibration must be 'classic' or 'analytic', got {self.calibration!r}")

    @classmethod
    def from_epsilon_delta(
        cls, epsilon: float, delta: float, sensitivity: float, *, calibration: str = "analytic"
    ) -> "Gaussian":
        """sigma from (epsilon, delta, Delta_2): the exact analytic one (default), or the classic formula (BeamClean
        Appendix C), which is proved only for epsilon < 1 and so refuses a larger one."""
        if calibration == "classic":
            if epsilon >= 1.0:
                raise ValueError(
                    f"Gaussian.from_epsilon_delta: the classic formula is proved only for epsilon < 1 "
                    f"(Dwork & Roth Thm. A.1), got epsilon={epsilon!r}; use calibration='analytic'"
                )
            return cls(sigma=classic_sigma(epsilon, delta, sensitivity), delta=delta, calibration="classic")
        if calibration == "analytic":
            return cls(sigma=analytic_sigma(epsilon, delta, sensitivity), delta=delta, calibration="analytic")
        raise ValueError(
            f"Gaussian.from_epsilon_delta: calibration must be 'classic' or 'analytic', got {calibration!r}"
        )

    def noise(self, n: int, d: int, *, generator: torch.Generator, device=None) -> torch.Tensor:
        return torch.randn(n, d, generator=generator, dtype=torch.float64, device=device) * self.sigma

    def sample(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        return add_noise(self, x, generator=generator)

    def expected_noise_norm(self, d: int) -> float:
        """E||z|| = sigma * sqrt(2) * Gamma((d+1)/2) / Gamma(d/2)."""
        return self.sigma * math.sqrt(2.0) * math.exp(math.lgamma((d + 1) / 2) - math.lgamma(d / 2))

    def privacy_loss(self, d_in: float) -> PrivacyLoss:
        if d_in < 0:
            raise ValueError(f"Gaussian.privacy_loss: d_in must be >= 0, got {d_in!r}")
        if d_in == 0:
            return PrivacyLoss(0.0, 0.0, "approx")
        eps = analytic_epsilon(self.sigma, self.delta, d_in)
        if self.calibration == "classic":  # the formula's figure where it holds; never below the exact loss
            eps = max(eps, d_in * math.sqrt(2.0 * math.log(1.25 / self.delta)) / self.sigma)
        return PrivacyLoss(eps, self.delta, "approx")
