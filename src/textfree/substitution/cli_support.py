"""What the ``textfree substitute`` command builds: a T2T / PCT2T mechanism from flags, and the replacement table."""

from __future__ import annotations

import os
from typing import Sequence

import torch

from .embeddings import WordEmbeddingTable
from .nn import DEFAULT_SHORTLIST
from .pos import UNIVERSAL_TAGS, get_tagger
from .t2t import DEFAULT_POS_CATEGORIES, TextToText

__all__ = ["build_t2t", "default_corpus", "replacement_rows", "parse_pos"]

POS_ALIASES = {
    "noun": "NOUN",
    "verb": "VERB",
    "pron": "PRON",
    "pronoun": "PRON",
    "adp": "ADP",
    "prep": "ADP",
    "preposition": "ADP",
    "adj": "ADJ",
    "adv": "ADV",
    "det": "DET",
    "num": "NUM",
    "conj": "CONJ",
    "prt": "PRT",
}

# Used when no corpus is given and ../shared/data is absent: plain sentences, nothing private.
FALLBACK_CORPUS = [
    "I would like to eat a burger with my friends tonight.",
    "The film was slow at first but the ending made it worth watching.",
    "She walked to the station in the rain and missed the last train.",
    "We asked the doctor about the results and she told us to wait.",
    "He keeps his old books on a shelf above the kitchen table.",
    "They moved to a small town near the sea after their children left home.",
    "The weather was cold, so we stayed inside and played cards all afternoon.",
    "You can find the report on my desk next to the blue folder.",
]


def parse_pos(pos: str | None) -> tuple[str, ...] | None:
    """'noun,verb,pron,adp' -> ('NOUN', 'VERB', 'PRON', 'ADP'); 'all' -> every universal category (RAPT's rule for
    clinical or legal text); 'default' -> RAPT's NOUN, VERB, PRON, ADP; None or '' -> None (plain T2T)."""
    if not pos:
        return None
    if pos.strip().lower() == "all":
        return tuple(UNIVERSAL_TAGS)
    if pos.strip().lower() == "default":
        return tuple(DEFAULT_POS_CATEGORIES)
    out = []
    for item in (p.strip() for p in pos.split(",")):
        if not item:
            continue
        tag = POS_ALIASES.get(item.lower(), item.upper())
        out.append(tag)
    if not out:
        return None
    return tuple(out)


def build_t2t(
    *,
    table: str = "default",
    eta: float,
    pos: str | None = None,
    tagger: str = "textblob",
    nltk_data: str | os.PathLike | None = None,
    search: str = "exact",
    shortlist: int = DEFAULT_SHORTLIST,
) -> TextToText:
    """``table``: 'default' (all-MiniLM-L6-v2's input embeddings), an HF name/path, or 'glove:PATH'.

    ``search``: 'exact' (default) or 'approximate' (int8 pass + float64 re-rank of ``1 + shortlist`` words;
    same privacy accounting, see docs/substitution.md).
    """
    if table.startswith("glove:"):
        words = WordEmbeddingTable.from_glove(table[len("glove:") :])
    else:
        words = WordEmbeddingTable.from_hf_model(None if table == "default" else table)
    categories = parse_pos(pos)
    tag = get_tagger(tagger, nltk_data) if categories else None
    return TextToText(words, eta, pos_categories=categories, tagger=tag, search=search, shortlist=shortlist)


def default_corpus(limit: int = 500) -> list[str]:
    """SST-2 dev sentences from the shared data when present, else a few built-in sentences."""
    try:
        from ..data import load_dataset

        records = load_dataset("sst2", split="dev", limit=limit)
        texts = [r.text for r in records if r.text.strip()]
        if texts:
            return texts
    except (ValueError, FileNotFoundError, OSError, ImportError):
        pass
    return list(FALLBACK_CORPUS)


def replacement_rows(
    mech: TextToText, sentences: Sequence[str], etas: Sequence[float], *, generator: torch.Generator
) -> list[tuple[float, float]]:
    """[(eta, P(word replaced))] in the order given (common random numbers across etas)."""
    rates = mech.replacement_rate(list(sentences), list(etas), generator=generator)
    return [(float(e), rates[e]) for e in etas]
