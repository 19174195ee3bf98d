"""The isotropic L2-Laplace mechanism (metric / d_chi privacy in Euclidean space).

Noise density p(z) ∝ exp(-epsilon * ||z||_2) in R^d. Written in polar form the radius r = ||z|| has density
∝ r^(d-1) exp(-epsilon r), i.e. r ~ Gamma(shape=d, scale=1/epsilon), and the direction is uniform on the
sphere, independent of r. One radius per *vector*: the public reference code of SnD and BeamClean draws one
Gamma radius per coordinate, which is a different (and not metric-DP) distribution; the tests catch it.

Privacy map: for inputs x, x' at L2 distance d_in, the output densities differ by at most a factor
exp(epsilon * d_in) (triangle inequality), so ``privacy_loss(d_in) = epsilon * d_in`` (metric privacy).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .base import PrivacyLoss, add_noise, check_positive, register_mechanism

__all__ = ["L2Laplace", "sample_gamma", "sample_gamma_integer_shape", "sample_unit_directions"]


def sample_unit_directions(n: int, d: int, *, generator: torch.Generator, device=None) -> torch.Tensor:
    """``n`` directions uniform on the unit sphere S^(d-1), float64: normalised standard normals."""
    g = torch.randn(n, d, generator=generator, dtype=torch.float64, device=device)
    norms = g.norm(dim=-1, keepdim=True)
    # A zero vector has probability 0 in float64; guard anyway so no NaN can ever be released.
    return g / norms.clamp_min(torch.finfo(torch.float64).tiny)


def sample_gamma_integer_shape(
    shape: int, scale: float, n: int, *, generator: torch.Generator, device=None
) -> torch.Tensor:
    """``n`` draws of Gamma(shape, scale) for an integer shape, exactly, in float64.

    Gamma(d, 1) is the sum of d independent Exp(1) variables, and Exp(1) = -log(1 - U) for U ~ U[0, 1).
    torch's own gamma sampler cannot take a generator, which our randomness policy requires.
    """
    if not isinstance(shape, int) or shape < 1:
        raise ValueError(f"gamma shape must be an integer >= 1, got {shape!r}")
    u = torch.rand(n, shape, generator=generator, dtype=torch.float64, device=device)
    # log(1 - u), not log1p(-u): same values for u in [0, 1) at float64, and log1p is ~30x slower on CPU here.
    return (-torch.log(1.0 - u)).sum(dim=-1) * scale


def sample_gamma(shape: float, scale: float, n: int, *, generator: torch.Generator, device=None) -> torch.Tensor:
    """``n`` draws of Gamma(shape, scale), shape >= 1, in float64, by Marsaglia and Tsang's rejection method (2000).

    With a = shape - 1/3 and c = 1 / sqrt(9a): propose v = (1 + c x)^3 for x ~ N(0, 1), accept when v > 0 and
    log u < x^2 / 2 + a - a v + a log v for u ~ U[0, 1); then a v ~ Gamma(shape, 1) exactly (a rejection sampler,
    not an approximation). Acceptance is above 0.95 for every shape >= 1 and above 0.9999 at shape 384, so a
    draw costs about two random numbers instead of the ``shape`` uniforms of
    :func:`sample_gamma_integer_shape` (which stays as the plain reference the tests compare against).
    Rejected positions are redrawn from the same generator until all are accepted: the output is a
    deterministic function of the generator state.
    """
    if isinstance(shape, bool) or not isinstance(shape, (int, float)) or not shape >= 1 or shape == float("inf"):
        raise ValueError(f"gamma shape must be a finite number >= 1, got {shape!r}")
    a = float(shape) - 1.0 / 3.0
    c = 1.0 / (9.0 * a) ** 0.5
    out = torch.empty(n, dtype=torch.float64, device=device)
    todo = torch.arange(n, device=device)
    while todo.numel():
        m = todo.numel()
        x = torch.randn(m, generator=generator, dtype=torch.float64, device=device)
        u = torch.rand(m, generator=generator, dtype=torch.float64, device=device)
        v = (1.0 + c * x) ** 3
        positive = v > 0
        log_v = torch.log(torch.where(positive, v, torch.ones_like(v)))
        ok = positive & (torch.log(u) < 0.5 * x * x + a - a * v + a * log_v)
        out[todo[ok]] = a * v[ok]
        todo = todo[~ok]
    return out * scale


@register_mechanism("l2_laplace")
@dataclass(frozen=True)
class L2Laplace:
    """Isotropic L2-Laplace noise with parameter ``epsilon`` (per unit of L2 distance)."""

    epsilon: float

    def __post_init__(self) -> None:
        check_positive("L2Laplace", "epsilon", self.epsilon)

    def noise(self, n: int, d: int, *, generator: torch.Generator, device=None) -> torch.Tensor:
        """``n`` noise vectors of dimension ``d`` (float64)."""
        radius = sample_gamma(d, 1.0 / self.epsilon, n, generator=generator, device=device)
        return sample_unit_directions(n, d, generator=generator, device=device) * radius[:, None]

    def sample(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """x + noise, one independent noise vector per vector in the last dimension; returns x's dtype."""
        return add_noise(self, x, generator=generator)

    def expected_noise_norm(self, d: int) -> float:
        """E||z|| = d / epsilon (mean of Gamma(d, 1/epsilon))."""
        return d / self.epsilon

    def privacy_loss(self, d_in: float) -> PrivacyLoss:
        if d_in < 0:
            raise ValueError(f"L2Laplace.privacy_loss: d_in must be >= 0, got {d_in!r}")
        return PrivacyLoss(self.epsilon * d_in, 0.0, "metric")
