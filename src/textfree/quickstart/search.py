"""Semantic search over the FAQ answers: cosine similarity of each question's sentence embedding to every answer's,
and how often the right answer is first (top-1) or among the first three (top-3)."""

from __future__ import annotations

import torch

__all__ = ["rank_answers", "accuracy"]


def rank_answers(queries: torch.Tensor, answers: torch.Tensor, k: int = 3) -> torch.Tensor:
    """The indices [N, k] of the ``k`` answers [M, d] most cosine-similar to each of the ``queries`` [N, d], best
    first."""
    if queries.dim() != 2 or answers.dim() != 2 or queries.shape[1] != answers.shape[1]:
        raise ValueError(f"queries [N, d] and answers [M, d] must share d, got {tuple(queries.shape)}, "
                         f"{tuple(answers.shape)}")  # fmt: skip
    q = torch.nn.functional.normalize(queries.double(), dim=1)
    a = torch.nn.functional.normalize(answers.double(), dim=1)
    return (q @ a.T).topk(min(k, a.shape[0]), dim=1).indices


def accuracy(ranked: torch.Tensor, labels: list[int]) -> dict[str, float]:
    """``top1`` and ``top3``: the share of rows of ``ranked`` (from :func:`rank_answers`) whose first, or any of
    first three, entries is the row's label."""
    y = torch.tensor(labels, dtype=torch.long).unsqueeze(1)
    if ranked.shape[0] != y.shape[0] or ranked.shape[0] == 0:
        raise ValueError(f"need one label per ranked row, got {ranked.shape[0]} rows and {y.shape[0]} labels")
    return {
        "top1": float((ranked[:, :1] == y).any(dim=1).double().mean()),
        "top3": float((ranked[:, :3] == y).any(dim=1).double().mean()),
    }
