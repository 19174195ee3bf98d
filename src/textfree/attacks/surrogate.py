"""BeamClean's surrogate noise model (:mod:`textfree.attacks.beamclean`): the densities it fits to the residuals
between observed noisy embeddings and candidate table rows (Gaussian, L1-Laplace, L2-Laplace, von Mises-Fisher on
the direction), the vMF concentration's closed-form fit, and the mechanism's true parameter as an *oracle* surrogate
(decoding with it needs ``knows_parameters``; BeamClean never does it silently)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ..mechanisms import Clipped, Gaussian, L2Laplace

__all__ = [
    "FAMILIES",
    "SurrogateNoise",
    "family_of",
    "oracle_noise",
    "log_bessel_iv",
    "vmf_kappa",
    "vmf_log_normalizer",
]

FAMILIES = ("gaussian", "l1_laplace", "l2_laplace", "vmf")

_LOG_2PI = math.log(2.0 * math.pi)


@dataclass(frozen=True, eq=False)
class SurrogateNoise:
    """A zero-mean (or ``mean``-shifted) noise density on R^d: ``family`` with scale ``scale``.

    * ``"gaussian"``: N(mu, scale^2 I).
    * ``"l1_laplace"``: independent Laplace(mu_i, scale) coordinates: log p = -||r||_1 / b - d log(2b).
    * ``"l2_laplace"``: density proportional to exp(-||r||_2 / s) (radius ~ Gamma(d, s), direction uniform):
      log p = -||r|| / s - d log s - log Gamma(d) - log(2 pi^(d/2) / Gamma(d/2)).
    * ``"vmf"``: von Mises-Fisher on the unit sphere S^(d-1) with kappa = 1/scale, for *unit* vectors (the decoder
      normalises observations and table rows): r = y^ - x^, ||r||^2 = 2 - 2 cos, log p = kappa cos + log C_d(kappa),
      C_d(kappa) = kappa^(d/2-1) / ((2 pi)^(d/2) I_{d/2-1}(kappa)). No mean shift.
    """

    family: str
    scale: float
    mean: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"SurrogateNoise: family must be one of {FAMILIES}, got {self.family!r}")
        s = self.scale
        if isinstance(s, bool) or not isinstance(s, (int, float)) or not (s > 0 and math.isfinite(s)):
            raise ValueError(f"SurrogateNoise: scale must be a finite number > 0, got {s!r}")
        if self.mean is not None and (not isinstance(self.mean, torch.Tensor) or self.mean.dim() != 1):
            raise ValueError(f"SurrogateNoise: mean must be a 1-D tensor or None, got {self.mean!r}")
        if self.family == "vmf" and self.mean is not None:
            raise ValueError("SurrogateNoise: the vmf family has no mean shift (it models directions), got a mean")

    def statistic(self, residual: torch.Tensor) -> torch.Tensor:
        """The family's sufficient distance of ``residual - mean`` (last dimension): ||.||^2, ||.||_1 or ||.||_2."""
        r = residual if self.mean is None else residual - self.mean.to(residual.dtype)
        return _statistic(self.family, r)

    def log_prob_from_statistic(self, stat: torch.Tensor, d: int) -> torch.Tensor:
        s = self.scale
        if self.family == "gaussian":
            return -stat / (2.0 * s * s) - d * math.log(s) - 0.5 * d * _LOG_2PI
        if self.family == "l1_laplace":
            return -stat / s - d * math.log(2.0 * s)
        if self.family == "vmf":
            kappa = 1.0 / s
            return kappa * (1.0 - 0.5 * stat) + vmf_log_normalizer(d, kappa)
        log_norm = math.lgamma(d) + math.log(2.0) + 0.5 * d * math.log(math.pi) - math.lgamma(d / 2.0)
        return -stat / s - d * math.log(s) - log_norm

    def log_prob(self, residual: torch.Tensor) -> torch.Tensor:
        """log pi(residual) for residuals y - x in the last dimension."""
        return self.log_prob_from_statistic(self.statistic(residual), residual.shape[-1])

    @classmethod
    def fit(
        cls,
        family: str,
        residuals: torch.Tensor,
        weights: torch.Tensor | None = None,
        *,
        estimate_mean: bool = False,
        mean: torch.Tensor | None = None,
        min_scale: float = 1e-12,
    ) -> "SurrogateNoise":
        """Weighted closed-form MLE from residuals [B, t, d] with one weight per path (summing to 1).

        ``estimate_mean``: also fit the mean (weighted mean residual); otherwise ``mean`` (None: zero) is kept fixed.
        """
        if residuals.dim() != 3 or residuals.shape[1] < 1:
            raise ValueError(f"SurrogateNoise.fit: residuals must be [B, t >= 1, d], got {tuple(residuals.shape)}")
        n_paths, t, d = residuals.shape
        r = residuals.to(torch.float64)
        w = torch.full((n_paths,), 1.0 / n_paths, dtype=torch.float64) if weights is None else weights.to(torch.float64)
        if family == "vmf":
            if estimate_mean or mean is not None:
                raise ValueError("SurrogateNoise.fit: the vmf family has no mean to estimate or keep")
            cosine = 1.0 - 0.5 * float((w * _statistic(family, r).sum(dim=1)).sum()) / t
            return cls(family, max(1.0 / vmf_kappa(d, cosine), min_scale))
        if estimate_mean:
            mean = (w[:, None] * r.mean(dim=1)).sum(dim=0)
        if mean is not None:
            r = r - mean.to(torch.float64)
        per_coord = float((w * _statistic(family, r).sum(dim=1)).sum()) / (t * d)
        scale = math.sqrt(per_coord) if family == "gaussian" else per_coord
        return cls(family, max(scale, min_scale), mean)

    def to_dict(self) -> dict[str, Any]:
        return {"family": self.family, "scale": self.scale, "mean": None if self.mean is None else self.mean.tolist()}


def log_bessel_iv(v: float, z: float) -> float:
    """log I_v(z) for order v >= 0.5 and z > 0: scipy's exponentially scaled ``ive`` where it is representable,
    else (large order, small z, where ``ive`` underflows) the uniform asymptotic (Debye) expansion with two
    correction terms (O(v^-3): its log differs from scipy's by 1e-9 at order 191, i.e. d = 384, and 5e-8 at order
    40)."""
    if not (v >= 0.5 and z > 0 and math.isfinite(v) and math.isfinite(z)):
        raise ValueError(f"log_bessel_iv: need v >= 0.5 and finite z > 0, got v={v!r}, z={z!r}")
    from scipy.special import ive

    scaled = float(ive(v, z))
    if 1e-290 < scaled < math.inf:
        return math.log(scaled) + z
    x = z / v
    root = math.sqrt(1.0 + x * x)
    p = 1.0 / root
    eta = root + math.log(x / (1.0 + root))
    u1 = (3.0 * p - 5.0 * p**3) / 24.0
    u2 = (81.0 * p**2 - 462.0 * p**4 + 385.0 * p**6) / 1152.0
    return -0.5 * math.log(2.0 * math.pi * v) + v * eta - 0.5 * math.log(root) + math.log1p(u1 / v + u2 / (v * v))


def vmf_log_normalizer(d: int, kappa: float) -> float:
    """log C_d(kappa) of the von Mises-Fisher density on S^(d-1), d >= 3."""
    if d < 3:
        raise ValueError(f"vmf_log_normalizer: d must be >= 3, got {d!r}")
    v = d / 2.0 - 1.0
    return v * math.log(kappa) - 0.5 * d * _LOG_2PI - log_bessel_iv(v, kappa)


def _bessel_ratio(d: int, kappa: float) -> float:
    """A_d(kappa) = I_{d/2}(kappa) / I_{d/2-1}(kappa): the mean cosine of a vMF with concentration kappa."""
    v = d / 2.0 - 1.0
    return math.exp(log_bessel_iv(v + 1.0, kappa) - log_bessel_iv(v, kappa))


def vmf_kappa(d: int, mean_cosine: float, *, newton_steps: int = 4) -> float:
    """Maximum-likelihood concentration of a vMF on S^(d-1) whose mean cosine to the mean direction is
    ``mean_cosine``: solves A_d(kappa) = R from Banerjee et al.'s start R (d - R^2) / (1 - R^2) by Newton steps
    (A_d'(kappa) = 1 - A_d^2 - (d-1)/kappa A_d). R is clamped to [1e-6, 1 - 1e-9]: R <= 0 means "no signal", a
    nearly flat density."""
    if d < 3:
        raise ValueError(f"vmf_kappa: d must be >= 3, got {d!r}")
    r = min(max(float(mean_cosine), 1e-6), 1.0 - 1e-9)
    kappa = r * (d - r * r) / (1.0 - r * r)
    for _ in range(newton_steps):
        a = _bessel_ratio(d, kappa)
        slope = 1.0 - a * a - (d - 1.0) / kappa * a
        if slope <= 0:
            break
        kappa = max(kappa - (a - r) / slope, kappa / 10.0)
    return kappa


def _statistic(family: str, r: torch.Tensor) -> torch.Tensor:
    if family == "gaussian" or family == "vmf":
        return r.square().sum(dim=-1)
    if family == "l1_laplace":
        return r.abs().sum(dim=-1)
    return r.norm(dim=-1)


def family_of(mechanism: Any) -> str:
    """The surrogate family that matches a mechanism (clipping is ignored: it has no surrogate of its own)."""
    inner = mechanism.inner if isinstance(mechanism, Clipped) else mechanism
    if isinstance(inner, Gaussian):
        return "gaussian"
    if isinstance(inner, L2Laplace):
        return "l2_laplace"
    raise ValueError(f"no surrogate noise family matches mechanism {mechanism!r}")


def oracle_noise(mechanism: Any, family: str | None = None) -> SurrogateNoise:
    """The true noise parameter of ``mechanism`` as a surrogate: Gaussian sigma, or L2-Laplace s = 1/epsilon.

    For a :class:`Clipped` mechanism this is the inner noise's parameter (the clipped noise follows no surrogate
    family exactly). ``family``, when given, must be the mechanism's own.
    """
    own = family_of(mechanism)
    if family is not None and family != own:
        raise ValueError(f"oracle noise for family {family!r} is undefined: the mechanism's noise is {own!r}")
    inner = mechanism.inner if isinstance(mechanism, Clipped) else mechanism
    return (
        SurrogateNoise("gaussian", float(inner.sigma))
        if own == "gaussian"
        else SurrogateNoise("l2_laplace", 1.0 / float(inner.epsilon))
    )
