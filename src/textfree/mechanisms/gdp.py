"""What one noisy slot actually reveals: its privacy loss distribution, Gaussian DP's mu, and eps across widths.

A metric mechanism's pure bound (``privacy_loss``: eps * d_in) is the *worst case* of the privacy loss random
variable. For the isotropic L2-Laplace mechanism in high dimension the loss concentrates far below that bound.
Take inputs x, x' at distance delta and the output y = x + R u (R ~ Gamma(d, 1/eps), u uniform on the sphere):

    L(y) = log p(y | x) - log p(y | x') = eps * (||y - x'|| - ||y - x||)
         = eps * (sqrt(R^2 + 2 R delta u_1 + delta^2) - R)              (u_1: u's coordinate along x - x')
        ~= eps * (delta u_1 + delta^2 / (2R)),   u_1 ~= N(0, 1/d),  R ~= d / eps,

so L ~= N(mu^2 / 2, mu^2) with **mu = eps * delta / sqrt(d)**: the loss distribution of mu-Gaussian DP (Dong,
Roth & Su 2019), which is exactly that of the Gaussian mechanism with sigma = delta / mu. The optimal test between
x and x' at equal priors then errs with probability Phi(-mu / 2), while the pure bound (eps * delta, 2*eps per unit
slot: 150 at eps 75) promises nothing useful. The approximation error is O(1/sqrt(d)); :func:`l2_laplace_loss_samples`
draws the exact loss, and the tests measure the gap.

Consequence for comparing encoders of different widths (PPFT issue: MiniLM d = 384 against the paper's
ModernBERT-large d = 1024): at equal eps, the wider encoder's slots are *more* private (mu falls as 1/sqrt(d)).

* ``rule="norm"`` keeps the expected noise norm d / eps: eps' = eps * d' / d (75 -> 28.1). MiniLM's slots are then
  more private than the paper's (mu 2.87 against 4.69; 2.86 at the eps 28 actually run): a stricter setting.
* ``rule="gdp"`` keeps mu, i.e. the slot's loss distribution and every test's power: eps' = eps * sqrt(d' / d)
  (75 -> 45.9). This is also the setting at which a linear reader (the projection P_psi) sees the same
  signal-to-noise ratio per direction, sqrt(d) / eps per coordinate against unit slots.

The Gaussian mechanism's mu is exact: delta / sigma. Matched by noise norm (sigma = sqrt(d) / eps), it has the
L2-Laplace's mu; matched by the formal (2*eps, delta)-DP budget, it has a much larger one (7.2 against 2.86 at
eps 28, d 384), because the L2-Laplace's pure bound is loose in high dimension.
"""

from __future__ import annotations

import math

import torch

from .base import check_positive
from .gaussian import Gaussian
from .laplace import L2Laplace, sample_gamma, sample_unit_directions
from .slots import UNIT_SLOT_DIAMETER

__all__ = [
    "MATCH_RULES",
    "l2_laplace_mu",
    "gaussian_mu",
    "mechanism_mu",
    "gdp_equal_error",
    "matched_epsilon",
    "l2_laplace_loss_samples",
    "width_match_rows",
]

MATCH_RULES = ("norm", "gdp")


def _check_dim(owner: str, dim: int) -> None:
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"{owner}: dim must be an integer >= 1, got {dim!r}")


def _check_distance(owner: str, distance: float) -> None:
    ok = isinstance(distance, (int, float)) and not isinstance(distance, bool) and 0 <= distance < math.inf
    if not ok:
        raise ValueError(f"{owner}: distance must be a finite number >= 0, got {distance!r}")


def l2_laplace_mu(epsilon: float, dim: int, distance: float = UNIT_SLOT_DIAMETER) -> float:
    """mu = eps * distance / sqrt(dim): the Gaussian-DP parameter the L2-Laplace loss approaches in high dimension."""
    check_positive("l2_laplace_mu", "epsilon", epsilon)
    _check_dim("l2_laplace_mu", dim)
    _check_distance("l2_laplace_mu", distance)
    return epsilon * distance / math.sqrt(dim)


def gaussian_mu(sigma: float, distance: float = UNIT_SLOT_DIAMETER) -> float:
    """mu = distance / sigma: the Gaussian mechanism is exactly mu-GDP for inputs ``distance`` apart."""
    check_positive("gaussian_mu", "sigma", sigma)
    _check_distance("gaussian_mu", distance)
    return distance / sigma


def mechanism_mu(noise: object, dim: int, distance: float = UNIT_SLOT_DIAMETER) -> float:
    """mu of a slot mechanism (:class:`L2Laplace`: high-dimension limit; :class:`Gaussian`: exact)."""
    if isinstance(noise, L2Laplace):
        return l2_laplace_mu(noise.epsilon, dim, distance)
    if isinstance(noise, Gaussian):
        return gaussian_mu(noise.sigma, distance)
    raise TypeError(f"mechanism_mu: no mu for {type(noise).__name__} (L2Laplace or Gaussian), got {noise!r}")


def gdp_equal_error(mu: float) -> float:
    """Phi(-mu / 2): the error of the best test between two mu-GDP neighbours at equal priors (0.5: no leak)."""
    if isinstance(mu, bool) or not isinstance(mu, (int, float)) or not mu >= 0:
        raise ValueError(f"gdp_equal_error: mu must be a number >= 0, got {mu!r}")
    return 0.5 * math.erfc(mu / 2.0 / math.sqrt(2.0))


def matched_epsilon(epsilon: float, from_dim: int, to_dim: int, rule: str = "gdp") -> float:
    """The eps at width ``to_dim`` matching ``epsilon`` at ``from_dim``: ``gdp`` (same mu) or ``norm`` (same d/eps)."""
    check_positive("matched_epsilon", "epsilon", epsilon)
    _check_dim("matched_epsilon", from_dim)
    _check_dim("matched_epsilon", to_dim)
    if rule == "norm":
        return epsilon * to_dim / from_dim
    if rule == "gdp":
        return epsilon * math.sqrt(to_dim / from_dim)
    raise ValueError(f"matched_epsilon: rule must be one of {MATCH_RULES}, got {rule!r}")


def _first_coordinate_of_unit_directions(n: int, dim: int, *, generator: torch.Generator) -> torch.Tensor:
    """u_1 of ``n`` directions uniform on S^(dim-1), exactly: g_1 / sqrt(g_1^2 + chi^2_(dim-1)) with g_1 ~ N(0, 1) and
    chi^2_(dim-1) = 2 Gamma((dim-1)/2, 1), independent (the squared norm of the other dim-1 normals). Three random
    numbers per draw instead of dim; below dim 3 (Gamma shape < 1) the whole direction is drawn."""
    if dim < 3:
        return sample_unit_directions(n, dim, generator=generator)[:, 0]
    g1 = torch.randn(n, generator=generator, dtype=torch.float64)
    rest = 2.0 * sample_gamma((dim - 1) / 2.0, 1.0, n, generator=generator)
    return g1 / torch.sqrt(g1**2 + rest)


def l2_laplace_loss_samples(
    epsilon: float,
    dim: int,
    n: int,
    *,
    generator: torch.Generator,
    distance: float = UNIT_SLOT_DIAMETER,
    chunk: int = 4096,
) -> torch.Tensor:
    """``n`` exact draws (float64) of the L2-Laplace privacy loss L between inputs ``distance`` apart, under x.

    y = x + R u with R ~ Gamma(dim, 1/eps) and u uniform (only u's coordinate along x - x' matters: see
    :func:`_first_coordinate_of_unit_directions`); L = eps * (||y - x'|| - R)
    with ||y - x'||^2 = R^2 + 2 R distance u_1 + distance^2, computed as eps * a / (sqrt(R^2 + a) + R) with
    a = 2 R distance u_1 + distance^2 (no cancellation). Always |L| <= eps * distance (the pure bound).
    """
    check_positive("l2_laplace_loss_samples", "epsilon", epsilon)
    _check_dim("l2_laplace_loss_samples", dim)
    _check_distance("l2_laplace_loss_samples", distance)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"l2_laplace_loss_samples: n must be an integer >= 1, got {n!r}")
    if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
        raise ValueError(f"l2_laplace_loss_samples: chunk must be an integer >= 1, got {chunk!r}")
    out = []
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        radius = sample_gamma(dim, 1.0 / epsilon, m, generator=generator)
        u1 = _first_coordinate_of_unit_directions(m, dim, generator=generator)
        a = 2.0 * radius * distance * u1 + distance**2
        out.append(epsilon * a / (torch.sqrt(radius**2 + a) + radius))
    return torch.cat(out)


def width_match_rows(
    epsilon: float, from_dim: int, to_dim: int, *, samples: int, generator: torch.Generator
) -> list[dict[str, float | int | str]]:
    """The L2-Laplace slot at (``from_dim``, ``epsilon``) and at ``to_dim`` with the same eps and each matching rule.

    Each row: setting, dim, epsilon, expected noise norm d/eps, the pure per-slot bound 2*eps, mu (high-dimension
    limit), the best equal-prior test error Phi(-mu/2), and the same error and mean loss measured on ``samples``
    exact draws of the loss between antipodal unit slots (:func:`l2_laplace_loss_samples`).
    """
    settings = [
        ("reference", from_dim, float(epsilon)),
        ("same eps", to_dim, float(epsilon)),
        ("norm-matched", to_dim, matched_epsilon(epsilon, from_dim, to_dim, "norm")),
        ("gdp-matched", to_dim, matched_epsilon(epsilon, from_dim, to_dim, "gdp")),
    ]
    rows = []
    for name, dim, eps in settings:
        mu = l2_laplace_mu(eps, dim)
        loss = l2_laplace_loss_samples(eps, dim, samples, generator=generator)
        rows.append(
            {
                "setting": name,
                "dim": dim,
                "epsilon": eps,
                "noise_norm": dim / eps,
                "pure_bound": UNIT_SLOT_DIAMETER * eps,
                "mu": mu,
                "error_limit": gdp_equal_error(mu),
                "error_measured": (loss < 0).double().mean().item(),
                "mean_loss_limit": mu**2 / 2,
                "mean_loss_measured": loss.mean().item(),
            }
        )
    return rows
