"""The contextual encoder (PPFT's client): token-level hidden states of any Hugging Face encoder."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from .loading import load_hf_encoder

__all__ = ["ContextualEncoder", "EncodedBatch"]


@dataclass
class EncodedBatch:
    """hidden [B, T, d] (float32), mask [B, T] (bool), input_ids [B, T]."""

    hidden: torch.Tensor
    mask: torch.Tensor
    input_ids: torch.Tensor


class ContextualEncoder(torch.nn.Module):
    """Tokenizer + encoder model; ``encode(texts)`` returns the last hidden states and the padding mask."""

    kind = "contextual"

    def __init__(self, model, tokenizer, *, name: str, sha256: str | None, max_length: int = 512):
        super().__init__()
        self.model = model
        self.tokenizer = tokenizer
        self.name = name
        self.sha256 = sha256
        self.max_length = max_length

    @classmethod
    def from_pretrained(
        cls, name_or_path: str | os.PathLike | None = None, *, max_length: int = 512, device: str = "cpu"
    ) -> "ContextualEncoder":
        tokenizer, model, name, sha = load_hf_encoder(name_or_path)
        model.eval().to(device)
        return cls(model, tokenizer, name=name, sha256=sha, max_length=max_length)

    @property
    def dim(self) -> int:
        return int(self.model.config.hidden_size)

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def tokenize(self, texts: list[str]) -> dict[str, torch.Tensor]:
        if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of strings")
        return self.tokenizer(
            list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    def encode(self, texts: list[str]) -> EncodedBatch:
        """Encode without gradients (the client side)."""
        enc = self.tokenize(texts)
        with torch.inference_mode():
            hidden = self(enc["input_ids"], enc["attention_mask"])
        return EncodedBatch(hidden.float(), enc["attention_mask"].bool(), enc["input_ids"])
