"""Server-side slot-count augmentation for stage 2 (beyond the paper; training only).

A PPFT payload has ceil(tokens / k) slots and the mechanism releases that count as it is. At the width-matched eps
(28 for MiniLM) a Pri-DDX decoder learns the table from count to diagnosis and barely reads the slots
(docs/ppft-experiments.md, "What PPFT reads at eps 28"). :class:`SlotCountAugment` blurs the count *in the server's
training rows only*: it inserts random unit slots at random positions and/or drops slots, so the count stops naming
the answer on its own and the decoder has to read what the slots carry. It works on payloads the client already
privatized (post-processing: the client, its payloads and their guarantee are PPFT's) and is never applied when
answering.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:  # the settings are checked without torch (Stage2Config); the methods import it
    import torch

    from .batches import PayloadExample

__all__ = ["SlotCountAugment"]


def _check_fraction(name: str, value: float, high: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0 <= value <= high
    ):
        raise ValueError(f"{name} must be a number in [0, {high}], got {value!r}")


@dataclass(frozen=True)
class SlotCountAugment:
    """Blur a training row's slot count.

    * ``insert``: a row of n slots gets m extra slots, m uniform in 0..ceil(insert * n), each a uniformly random
      unit vector (what a slot looks like under heavy noise) placed at a random position; the row's own slots keep
      their order.
    * ``drop``: each of the row's own slots is dropped with this probability (at least one is kept).

    Drops happen before inserts. Rows with no slots (the blind control) are returned as they are.
    """

    insert: float = 0.0
    drop: float = 0.0

    def __post_init__(self) -> None:
        _check_fraction("slot_insert", self.insert, 4.0)
        _check_fraction("slot_drop", self.drop, 0.9)

    @property
    def active(self) -> bool:
        return self.insert > 0 or self.drop > 0

    def to_dict(self) -> dict[str, float] | None:
        """What a run's summary records: None when inactive (PPFT's training)."""
        return {"insert": self.insert, "drop": self.drop} if self.active else None

    def apply_row(self, vectors: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
        """One row [n, d] -> [n', d]."""
        import torch

        n, d = vectors.shape
        if n == 0 or not self.active:
            return vectors
        if self.drop > 0:
            keep = torch.rand(n, generator=generator) >= self.drop
            if not keep.any():
                keep[torch.randint(n, (1,), generator=generator)] = True
            vectors = vectors[keep]
        extra = int(torch.randint(math.ceil(self.insert * n) + 1, (1,), generator=generator)) if self.insert > 0 else 0
        if extra == 0:
            return vectors
        total = vectors.shape[0] + extra
        noise = torch.randn(extra, d, generator=generator, dtype=vectors.dtype)
        noise = noise / noise.norm(dim=-1, keepdim=True)
        is_extra = torch.zeros(total, dtype=torch.bool)
        is_extra[torch.randperm(total, generator=generator)[:extra]] = True
        out = torch.empty(total, d, dtype=vectors.dtype)
        out[~is_extra] = vectors
        out[is_extra] = noise
        return out

    def apply(self, examples: Sequence[PayloadExample], *, generator: torch.Generator) -> list[PayloadExample]:
        """Every row augmented independently; public text and targets unchanged."""
        from .batches import PayloadExample

        return [
            PayloadExample(self.apply_row(ex.vectors, generator=generator), ex.public, ex.target) for ex in examples
        ]
