"""PrivacyRestore's client (Zeng et al., ACL 2025; PPFT Appendix C.4 / E / F): the third baseline of PPFT's Table 1.

The user marks the privacy spans of a prompt (Pri-DDX ships them: ``restore_symptoms``, the symptoms and antecedents
its ``question_mask`` leaves out). The client

1. sends the prompt with those spans removed (Pri-DDX's ``question_mask``) in clear;
2. weights the removed spans by how much attention a small client-side encoder (MiniLM here; the repository uses a
   BERT) pays to each of them in the full prompt, a softmax over the spans (attention-aware weighted aggregation,
   :func:`span_weights`), with a multiplier: the mean attention of the removed spans over that of the kept ones;
3. mixes the server's restoration vectors of those spans with the weights (the bank is public: the client holds a
   copy), L2-normalises the result (the meta vector, :meth:`~textfree.lm.restoration.RestorationBank.meta`) and adds
   L2-Laplace noise at ``epsilon`` (:func:`noisy_meta`), one radius for the whole vector;
4. sends the noisy meta vector and the multiplier.

Accounting (PPFT eq. 3 / 8): a unit meta vector has L2 sensitivity 2, so the release costs ``2 * epsilon``; the budget
B = 150 gives eps_PR = 75. Outside the guarantee, as in the repository's code: the kept text (every word the user
did not mark) and the multiplier (one scalar). :class:`Release` is the whole message; ``tests`` record it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

__all__ = ["Release", "noisy_meta", "span_index", "span_weights"]


@dataclass(frozen=True)
class Release:
    """What the PrivacyRestore client sends for one prompt: the text with the spans removed, the noisy meta vector,
    the multiplier."""

    text: str
    meta: torch.Tensor
    multiplier: float

    def __post_init__(self) -> None:
        if not isinstance(self.text, str) or not self.text.strip():
            raise ValueError(f"Release.text must be a non-empty string, got {self.text!r}")
        if self.meta.dim() != 1 or not torch.isfinite(self.meta).all():
            raise ValueError(f"Release.meta must be one finite vector, got shape {tuple(self.meta.shape)}")
        if not (self.multiplier > 0 and torch.isfinite(torch.tensor(self.multiplier))):
            raise ValueError(f"Release.multiplier must be a finite number > 0, got {self.multiplier!r}")


def span_index(spans: Sequence[str]) -> dict[str, int]:
    """{span: row of the bank} of the public span list (its order), spans lower-cased; duplicates are an error."""
    index = {}
    for i, span in enumerate(spans):
        key = span.strip().lower()
        if not key or key in index:
            raise ValueError(f"the span list must hold distinct non-empty spans, got {span!r} at {i}")
        index[key] = i
    return index


def _token_range(offsets: list[tuple[int, int]], start: int, end: int) -> list[int]:
    return [t for t, (a, b) in enumerate(offsets) if b > a and a < end and b > start]


def _attention_mass(attentions: Sequence[torch.Tensor], tokens: list[int]) -> float:
    """Attention paid to ``tokens``: per layer summed over them and over the queries, averaged over the heads; then
    averaged over the layers (the repository's ``get_attention_diff``)."""
    per_layer = [a[0][:, :, tokens].sum(dim=(-1, -2)).mean() for a in attentions]
    return float(torch.stack(per_layer).mean())


@torch.no_grad()
def span_weights(encoder: Any, tokenizer: Any, text: str, removed: Sequence[str],
                 kept: Sequence[str] = ()) -> tuple[list[float], float]:  # fmt: skip
    """(softmax weights of the ``removed`` spans, multiplier) from ``encoder``'s attentions on the full ``text``; the
    multiplier is the removed spans' mean attention mass over the kept spans' (1 without kept spans). A span must
    occur in ``text`` (case-insensitive)."""
    if not removed:
        raise ValueError("span_weights needs at least one removed span")
    batch = tokenizer(text, return_tensors="pt", return_offsets_mapping=True, truncation=True)
    offsets = [tuple(map(int, o)) for o in batch.pop("offset_mapping")[0].tolist()]
    attentions = encoder(**batch, output_attentions=True).attentions
    lower = text.lower()

    def mass(span: str) -> float:
        start = lower.find(span.lower())
        tokens = _token_range(offsets, start, start + len(span)) if start >= 0 else []
        if not tokens:
            raise ValueError(f"span {span!r} does not occur in the prompt {text[:80]!r}")
        return _attention_mass(attentions, tokens)

    masses = torch.tensor([mass(s) for s in removed])
    weights = torch.softmax(masses, dim=0).tolist()
    kept_masses = [mass(s) for s in kept if s.lower() in lower]
    multiplier = float(masses.mean()) / (sum(kept_masses) / len(kept_masses)) if kept_masses else 1.0
    return weights, multiplier


def noisy_meta(meta: torch.Tensor, epsilon: float | None, *, generator: torch.Generator) -> torch.Tensor:
    """Unit meta vectors [b, D] plus L2-Laplace noise at ``epsilon`` (one radius per vector: Gamma(D, 1/epsilon)
    times a uniform direction, :func:`textfree.mechanisms.make_noise`); None: no noise."""
    from ..mechanisms import make_noise

    mechanism = make_noise("l2_laplace", epsilon)
    return meta if mechanism is None else mechanism.sample(meta.double(), generator=generator).float()
