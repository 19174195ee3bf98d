"""The embedding-table encoder (SnD / RAPT / BeamClean client): only a model's token-embedding layer."""

from __future__ import annotations

import os

import torch

from .contextual import EncodedBatch
from .loading import load_hf_encoder

__all__ = ["EmbeddingTableEncoder"]


class EmbeddingTableEncoder(torch.nn.Module):
    """Maps token ids to rows of a model's input-embedding matrix; nothing else of the model runs."""

    kind = "embedding_table"

    def __init__(self, table: torch.Tensor, tokenizer, *, name: str, sha256: str | None, max_length: int = 512):
        super().__init__()
        if table.dim() != 2:
            raise ValueError(f"an embedding table must be [vocab, d], got {tuple(table.shape)}")
        self.table = torch.nn.Parameter(table.detach().float().clone(), requires_grad=False)
        self.tokenizer = tokenizer
        self.name = name
        self.sha256 = sha256
        self.max_length = max_length

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike | None = None, *, max_length: int = 512
    ) -> "EmbeddingTableEncoder":
        tokenizer, model, name, sha = load_hf_encoder(name_or_path)
        return cls(model.get_input_embeddings().weight, tokenizer, name=name, sha256=sha, max_length=max_length)

    @property
    def dim(self) -> int:
        return int(self.table.shape[1])

    @property
    def vocab_size(self) -> int:
        return int(self.table.shape[0])

    def max_norm(self) -> float:
        """The largest row norm: SnD's default clipping bound C."""
        return float(self.table.norm(dim=1).max())

    def encode(self, texts: list[str]) -> EncodedBatch:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of strings")
        enc = self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        )
        ids = enc["input_ids"]
        return EncodedBatch(self.table[ids].detach(), enc["attention_mask"].bool(), ids)
