"""The server's input layout for one prompt: the private prefix built from a payload's slots, and the public tokens
after it. The one place it is built, for :class:`~textfree.ppft.server.ServerModel` and the vLLM gateway's
:class:`~textfree.ppft.serving.PromptEmbedder`; docs/ppft.md, "Sequence layout", draws it."""

from __future__ import annotations

import torch

from .config import PromptTemplate
from .projection import Projection

__all__ = ["public_rows", "slot_prefix", "summary_vectors"]


def public_rows(
    tokenizer, template: PromptTemplate, public: list[str] | None, b: int
) -> tuple[list[list[int]], list[str | None]]:
    """Per row, the token ids after the slots (the public text cut to ``max_public_tokens``, then the public suffix),
    and the public text the answer head may read options from: the row's whole text, or None where the cut dropped
    part of it (the head then weighs over no options block the decoder may not see in full)."""
    suffix = tokenizer(template.public_suffix, add_special_tokens=False)["input_ids"] if template.public_suffix else []
    if public is None:
        return [list(suffix) for _ in range(b)], [None] * b
    bodies = tokenizer(public, add_special_tokens=False)["input_ids"]
    ids = [list(body[: template.max_public_tokens]) + list(suffix) for body in bodies]
    seen = [text if len(body) <= template.max_public_tokens else None for text, body in zip(public, bodies)]
    return ids, seen


def summary_vectors(slots: torch.Tensor, groups: int) -> torch.Tensor:
    """The unit-normalised means of ``slots`` [S, d] cut into ``min(groups, S)`` contiguous groups (sizes differ by at
    most one, the first ones larger): [min(groups, S), d]. One global mean for ``groups=1``.

    Averaging n noisy unit slots shrinks the noise's share of the mean by about sqrt(n) where the clean slots agree,
    so a summary vector reads the gist of a prompt better than any one slot at a low epsilon."""
    if slots.dim() != 2 or slots.shape[0] == 0:
        raise ValueError(f"summary_vectors needs a non-empty [S, d] tensor, got {tuple(slots.shape)}")
    if not isinstance(groups, int) or groups < 1:
        raise ValueError(f"summary_vectors: groups must be an integer >= 1, got {groups!r}")
    means = torch.stack([g.mean(dim=0) for g in torch.tensor_split(slots, min(groups, slots.shape[0]))])
    return means / means.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def slot_prefix(
    projection: Projection,
    slots: torch.Tensor,
    summary_slots: int,
    public: str | None = None,
    *,
    summary_only: bool = False,
) -> torch.Tensor:
    """One row's private prefix: the projection's count vector of n (with ``count_vectors``), its answer vector (with
    an answer head; both none for a row without slots), then P_psi of its ``summary_slots`` summary vectors and of
    its real slots [n, d_e], in that order: [c + a + min(summary_slots, n) + n, d_d], c = 1 with a count vector,
    a = 1 with an answer head; with ``summary_only`` the slots are left out ([c + a + min(summary_slots, n), d_d]).
    The answer head, if any, weighs over the classes named in the row's ``public`` options block with
    ``answer_options``; pass None for a public text the decoder sees cut, as :func:`public_rows` does. The one
    place the layout is built, for :class:`ServerModel` and the vLLM gateway's
    :class:`~textfree.ppft.serving.PromptEmbedder`."""
    slots = slots.to(torch.float32)
    n = slots.shape[0]
    answer = projection.answer_vector(slots, public)
    if summary_only and not summary_slots:
        raise ValueError("slot_prefix: summary_only needs summary_slots >= 1")
    if summary_slots and n:
        summary = summary_vectors(slots, summary_slots)
        slots = summary if summary_only else torch.cat([summary, slots], dim=0)
    parts = [projection.count_vector(n), answer, projection(slots)]
    return torch.cat([p.to(parts[-1].dtype) for p in parts if p is not None], dim=0)
