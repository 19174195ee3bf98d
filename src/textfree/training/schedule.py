"""The one learning-rate schedule: linear warm-up, then cosine decay to a floor (nanoGPT's, computed per step)."""

from __future__ import annotations

import math

__all__: list[str] = ["lr_multiplier"]


def lr_multiplier(step: int, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))
