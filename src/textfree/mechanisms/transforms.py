"""Deterministic transforms around the noise: k-pooling and L2 (re)normalisation (PPFT)."""

from __future__ import annotations

import torch

__all__ = ["k_pool", "l2_normalize", "n_slots"]


def n_slots(n_tokens: int | torch.Tensor, k: int) -> int | torch.Tensor:
    """How many pooled slots ``n_tokens`` valid tokens make: ceil(n / k)."""
    return (n_tokens + k - 1) // k


def k_pool(hidden: torch.Tensor, mask: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Non-overlapping block means of ``k`` consecutive *valid* tokens.

    hidden: [B, T, d]; mask: [B, T] (1 for real tokens). Valid tokens need not be contiguous (left or right
    padding both work): each row's valid tokens are packed in order, then cut into blocks of k; the last block
    of a row may be shorter and is the mean of what it holds. Returns (pooled [B, S, d], slot_mask [B, S]) with
    S = max over rows of ceil(n_valid / k); padded slots are zero and masked out.
    """
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if hidden.dim() != 3 or mask.shape != hidden.shape[:2]:
        raise ValueError(
            f"expected hidden [B, T, d] and mask [B, T], got {tuple(hidden.shape)} and {tuple(mask.shape)}"
        )
    b, t, d = hidden.shape
    valid = mask.to(torch.bool)
    lengths = valid.sum(dim=1)  # [B]
    # Position of each valid token among its row's valid tokens; its block is that position // k.
    rank = valid.long().cumsum(dim=1) - 1
    block = torch.where(valid, rank // k, torch.zeros_like(rank))
    s = int(n_slots(lengths.max(), k).item()) if b and t else 0
    pooled = hidden.new_zeros(b, s, d)
    counts = hidden.new_zeros(b, s)
    if s:
        weights = valid.to(hidden.dtype)
        pooled.scatter_add_(1, block.unsqueeze(-1).expand(b, t, d), hidden * weights.unsqueeze(-1))
        counts.scatter_add_(1, block, weights)
    slot_mask = counts > 0
    pooled = pooled / counts.clamp_min(1.0).unsqueeze(-1)
    return pooled, slot_mask


def l2_normalize(x: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """Each vector (last dimension) scaled to unit L2 norm; an all-zero vector stays zero."""
    return x / x.norm(dim=-1, keepdim=True).clamp_min(eps)
