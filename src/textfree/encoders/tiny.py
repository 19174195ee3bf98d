"""Tiny random encoders built from a config, for fast tests; saved and reloaded through ``from_pretrained``."""

from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import AutoTokenizer, BertConfig, BertModel

from .loading import resolve_encoder_path

__all__ = ["make_tiny_encoder_dir"]


def make_tiny_encoder_dir(
    out_dir: str | os.PathLike, *, hidden: int = 32, layers: int = 2, heads: int = 2, seed: int = 0
) -> Path:
    """Write a randomly initialised BERT of width ``hidden`` with MiniLM's WordPiece tokenizer to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = AutoTokenizer.from_pretrained(resolve_encoder_path(None))
    config = BertConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        intermediate_size=hidden * 2,
        max_position_embeddings=512,
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
