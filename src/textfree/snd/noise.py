"""SnD's client-side noise (Mai et al. 2023, §3.3, eq. 2-3): d_chi (L2-Laplace) noise on every real token embedding,
the noisy vector clipped to the norm bound C, and the effective noise the denoiser reads.

:func:`privatize_tokens` is the one function that denoiser training, its evaluation and the client library use, so a
denoiser is trained on exactly the noise a client adds. Each real token gets its own noise vector (one Gamma radius
per vector, :class:`~textfree.mechanisms.L2Laplace`), drawn in float64 from the caller's generator; the noisy vector
is clipped to ``clip_norm`` (:class:`~textfree.mechanisms.Clipped`'s post-processing, which keeps eta d_chi-privacy),
and ``z = x~ - x`` is what was really added (:func:`~textfree.mechanisms.clipping.effective_noise`). Padding positions
get no noise: they are zero in both outputs.

torch and the mechanisms are imported by the functions that draw noise: :func:`check_eta` checks a config without
them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    import torch

__all__ = ["privatize_tokens", "check_eta"]


def check_eta(eta: float, what: str = "eta") -> float:
    """``eta`` as a float when it is a finite number > 0; ``ValueError`` naming it otherwise."""
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not math.isfinite(eta) or not eta > 0:
        raise ValueError(f"{what} must be a finite number > 0, got {eta!r}")
    return float(eta)


def _row_etas(eta: float | Sequence[float] | torch.Tensor, b: int) -> list[float]:
    """One eta per row: a number for every row, or one per row."""
    import torch

    if torch.is_tensor(eta):
        eta = eta.detach().cpu().reshape(-1).tolist()
        eta = eta[0] if len(eta) == 1 else eta
    if isinstance(eta, (int, float)) and not isinstance(eta, bool):
        return [check_eta(eta)] * b
    values = list(eta)
    if len(values) != b:
        raise ValueError(f"eta must be one number or one per row ({b}), got {len(values)} values")
    return [check_eta(v) for v in values]


def privatize_tokens(
    x: torch.Tensor,
    mask: torch.Tensor,
    eta: float | Sequence[float] | torch.Tensor,
    *,
    clip_norm: float | None,
    clip: bool = True,
    generator: torch.Generator,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x_tilde, z)`` for token embeddings ``x`` [B, n, d] and ``mask`` [B, n] (True: a real token).

    Every real token gets L2-Laplace noise at ``eta`` (one number, or one per row), then with ``clip`` its noisy
    vector is scaled down to norm ``clip_norm`` (SnD's C, the largest clean embedding norm:
    :meth:`~textfree.encoders.EmbeddingTableEncoder.max_norm`). ``z = x_tilde - x`` is the effective noise (after
    clipping). Both come back in ``x``'s dtype on ``x``'s device; padding positions are zero in both. Noise is drawn on
    the CPU from ``generator``, rows with the same eta together, in increasing order of eta: the same generator state
    gives the same noise."""
    import torch

    from ..mechanisms import L2Laplace
    from ..mechanisms.clipping import clip_l2, effective_noise

    if not isinstance(generator, torch.Generator):
        raise TypeError(f"generator must be a torch.Generator, got {type(generator).__name__}")
    if x.dim() != 3 or mask.shape != x.shape[:2]:
        raise ValueError(f"x must be [B, n, d] and mask [B, n], got {tuple(x.shape)} and {tuple(mask.shape)}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor, got {mask.dtype}")
    if clip:
        clip_norm = check_eta(clip_norm, "clip_norm") if clip_norm is not None else None
        if clip_norm is None:
            raise ValueError("clip_norm is required when clip is on (SnD's C: the largest clean embedding norm)")
    b, _, d = x.shape
    etas = _row_etas(eta, b)
    mask_cpu = mask.detach().cpu()
    noisy = x.detach().cpu().to(torch.float64).clone()
    for value in sorted(set(etas)):
        rows = torch.tensor([i for i, e in enumerate(etas) if e == value], dtype=torch.long)
        where = torch.zeros_like(mask_cpu)
        where[rows] = mask_cpu[rows]
        count = int(where.sum())
        if count:
            noisy[where] += L2Laplace(value).noise(count, d, generator=generator)
    if clip:
        noisy = clip_l2(noisy, clip_norm)
    x_tilde = noisy.to(x.dtype).to(x.device)
    x_tilde = torch.where(mask.unsqueeze(-1), x_tilde, torch.zeros_like(x_tilde))
    z = effective_noise(x, x_tilde)
    z = torch.where(mask.unsqueeze(-1), z, torch.zeros_like(z))
    return x_tilde, z
