"""Token-embedding releases (SnD / RAPT / BeamClean client), shared by the kinds that noise them: ``token_inversion``
and ``attribute_inference`` with ``release: tokens``.

The client tokenizes a text with the embedding table's tokenizer, cuts it to ``max_tokens`` of its own tokens, wraps
it in the tokenizer's special tokens (MiniLM: ``[CLS] ... [SEP]``) and releases every position's table row plus
independent mechanism noise. Special tokens sit at fixed positions and are the same in every prompt: they are
released (and noised) but reveal nothing, so they are neither scored nor counted in a prompt's privacy loss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..inputs import load_cell_encoder
from ..registry import RunContext

__all__ = ["TokenTable", "token_table", "token_sequences", "token_guarantee"]


@dataclass(frozen=True)
class TokenTable:
    """The cell encoder's input embedding table, its tokenizer and its exact diameter."""

    table: torch.Tensor  # [V, d] float32
    tokenizer: Any
    diameter: float  # the largest L2 distance between two rows: one token's worst case


def token_table(cell: Any, context: RunContext) -> TokenTable:
    """The table of ``cell.encoder`` (``default``: all-MiniLM-L6-v2, 30,522 x 384), loaded once per run."""

    def build() -> TokenTable:
        from ...geometry import max_pairwise_distance

        encoder = load_cell_encoder(cell, "embedding_table")
        table = encoder.table.detach().to(torch.float32)
        return TokenTable(table, encoder.tokenizer, max_pairwise_distance(table))

    return context.cached("token_table", build)


def token_sequences(tokenizer: Any, texts: list[str], max_tokens: int) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Per text: the released token ids (its first ``max_tokens`` own tokens inside the special tokens) and a bool
    mask that is True at the text's own tokens (False at special tokens)."""
    special = set(tokenizer.all_special_ids)
    seqs, own = [], []
    enc = tokenizer(texts, add_special_tokens=True, return_special_tokens_mask=True)
    for ids, added in zip(enc["input_ids"], enc["special_tokens_mask"]):
        content = torch.tensor(added).eq(0).cumsum(0)  # 1, 2, ... over the text's own tokens
        keep = torch.tensor(added).eq(1) | (content <= max_tokens)
        full = torch.tensor(ids)[keep]
        seqs.append(full)
        own.append(torch.tensor([int(i) not in special for i in full], dtype=torch.bool))
    return seqs, own


def token_guarantee(mech: Any, diameter: float) -> dict[str, float]:
    """The formal guarantee of one released token: ``epsilon_unit`` (the loss per unit L2 distance), ``token_epsilon``
    / ``token_delta`` (the loss at the table's diameter: any two tokens are at most that far apart) and
    ``table_diameter``. A prompt of n tokens composes to n x ``token_epsilon`` (and n x ``token_delta``)."""
    unit, token = mech.privacy_loss(1.0), mech.privacy_loss(diameter)
    return {
        "epsilon_unit": unit.epsilon,
        "token_epsilon": token.epsilon,
        "token_delta": token.delta,
        "table_diameter": diameter,
    }
