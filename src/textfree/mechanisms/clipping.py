"""L2 norm clipping after noise (Split-N-Denoise).

SnD clips each *noisy* token embedding to the norm bound C (by default the largest norm of a clean vocabulary
embedding), so the server never sees vectors outside the clean range. Clipping is post-processing of the
inner mechanism's output, so the privacy map is the inner one's. The noise the client should hand its
denoiser is the *effective* noise y - x, not the noise drawn before clipping: :func:`effective_noise`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .base import PrivacyLoss, check_positive, register_mechanism

__all__ = ["Clipped", "clip_l2", "effective_noise"]


def clip_l2(y: torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale each vector (last dimension) down to norm <= max_norm; shorter ones are left alone."""
    norms = y.norm(dim=-1, keepdim=True)
    factor = (max_norm / norms.clamp_min(torch.finfo(y.dtype).tiny)).clamp(max=1.0)
    return y * factor


def effective_noise(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """What was really added: the released vector minus the clean one."""
    return y - x


@register_mechanism("clipped")
@dataclass(frozen=True)
class Clipped:
    """``inner`` noise, then clip the noisy vector to L2 norm ``max_norm``."""

    inner: Any
    max_norm: float

    def __post_init__(self) -> None:
        check_positive("Clipped", "max_norm", self.max_norm)
        if not hasattr(self.inner, "sample") or not hasattr(self.inner, "privacy_loss"):
            raise ValueError(f"Clipped: inner must be a mechanism, got {self.inner!r}")

    def sample(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        y = self.inner.sample(x.to(torch.float64), generator=generator)
        return clip_l2(y, self.max_norm).to(x.dtype)

    def privacy_loss(self, d_in: float) -> PrivacyLoss:
        return self.inner.privacy_loss(d_in)
