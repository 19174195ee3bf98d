"""Budget alignment on a real dataset: n from its private prompts, D_max from the encoder's embedding table.

Our documented choices where the PPFT paper is not explicit:

* n counts the tokens of the *private* part of each prompt (the part that is privatized) under the encoder's
  own tokenizer, without special tokens; the table reports the largest prompt (binding: the budget then holds
  for every prompt) and the mean.
* D_max is the exact largest L2 distance between two rows of the encoder's token-embedding table, i.e. the
  diameter of the space the d_chi text-to-text mechanism works in. It is cached per weights hash because it
  takes ~15 s for a 30,522-row table on 2 cores.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .atomic import atomic_write_text
from .mechanisms.accounting import alignment_from_lengths, embedding_diameter

__all__ = ["dataset_alignment", "table_diameter", "private_texts"]


def _cache_dir() -> Path:
    return Path(os.environ.get("TEXTFREE_CACHE", Path.home() / ".cache" / "textfree"))


def table_diameter(table_encoder) -> float:
    """D_max of an :class:`EmbeddingTableEncoder`, cached by its weights' sha256."""
    sha = table_encoder.sha256
    cache = _cache_dir() / f"diameter-{sha}.json" if sha else None
    if cache is not None and cache.is_file():
        try:
            return float(json.loads(cache.read_text())["d_max"])
        except (ValueError, KeyError, OSError):
            pass  # a bad cache entry is recomputed
    d_max = embedding_diameter(table_encoder.table)
    if cache is not None:
        try:
            atomic_write_text(cache, json.dumps({"d_max": d_max, "encoder": table_encoder.name}))
        except OSError:
            pass
    return d_max


def private_texts(records: list[Any]) -> list[str]:
    """The private part of each record: MCQA records through PPFT's prompt builder, text records as they are."""
    from .data.prompts import mcqa_prompt

    out = []
    for r in records:
        if hasattr(r, "options"):
            out.append(mcqa_prompt(r).private)
        elif hasattr(r, "text"):
            out.append(r.text)
        else:
            raise ValueError(f"record {type(r).__name__} has no private text")
    return out


def dataset_alignment(
    dataset: str, budget: float, *, split: str | None = None, encoder: str = "default", limit: int | None = None
) -> dict[str, Any]:
    from .data import load_dataset
    from .encoders import EmbeddingTableEncoder

    records = load_dataset(dataset, split=split, limit=limit)
    texts = private_texts(records)
    if not texts:
        raise ValueError(f"dataset {dataset!r} has no records")
    enc = EmbeddingTableEncoder.from_pretrained(None if encoder == "default" else encoder)
    lengths = [len(ids) for ids in enc.tokenizer(texts, add_special_tokens=False, truncation=False)["input_ids"]]
    lengths = [max(1, n) for n in lengths]
    result = alignment_from_lengths(budget, lengths, table_diameter(enc))
    result.update({"dataset": str(dataset), "split": split, "encoder": enc.name, "budget": budget})
    return result
