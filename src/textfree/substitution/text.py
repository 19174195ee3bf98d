"""Splitting text into words while keeping its layout, and putting it back together.

A *word* is a run of word characters (``\\w+``: letters, digits, underscore, any script) or a single other
non-space character (punctuation, symbols), the way BERT's basic tokenizer cuts text. Everything between words
(spaces, tabs, newlines) is kept verbatim, so ``rejoin([split_text(t)], words_of(split_text(t)))`` gives ``t``
back. One exception when words are substituted: where two words touched with no gap ("good" + "," in
"good,") and their replacements would fuse into one word ("good" + "and" -> "goodand"), :func:`rejoin` puts
one space between them, so the output splits into exactly as many words as the input.
"""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

__all__ = ["WORD_PATTERN", "split_text", "words_of", "rejoin"]

WORD_PATTERN = re.compile(r"(\w+|[^\w\s])")


def split_text(text: str) -> list[str]:
    """``[gap_0, word_0, gap_1, word_1, ..., gap_n]``: the words sit at the odd positions."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return WORD_PATTERN.split(text)


def words_of(parts: list[str]) -> list[str]:
    return parts[1::2]


def _word_char(chars: np.ndarray) -> np.ndarray:
    """Elementwise: is the single character a regex ``\\w`` character (alphanumeric or underscore)?"""
    return np.char.isalnum(chars) | (chars == "_")


def rejoin(parts_per_text: Sequence[list[str]], words: Sequence[str]) -> list[str]:
    """Put ``words`` (all texts' words, flat, in order) into the gaps of each text's ``split_text`` parts.

    Vectorised over words: first and last characters come from numpy's fixed-width string arrays.
    """
    counts = [len(p) // 2 for p in parts_per_text]
    total = sum(counts)
    if len(words) != total:
        raise ValueError(f"rejoin: expected {total} words, got {len(words)}")
    flat = np.asarray(list(words), dtype=str)
    # gaps[i] sits between word i and word i+1 of the flat sequence ("|" where they belong to different texts).
    gaps: list[str] = []
    for parts, n in zip(parts_per_text, counts):
        if n:
            gaps.extend(parts[2:-1:2])
            gaps.append("|")
    gap_arr = np.asarray(gaps[:-1] if gaps else [], dtype=object)
    if total > 1:
        width = flat.dtype.itemsize // 4
        codes = flat.view(np.uint32).reshape(total, width)
        last = codes[np.arange(total), np.maximum(np.char.str_len(flat) - 1, 0)].view("<U1")
        first = flat.astype("<U1")
        fuse = _word_char(last[:-1]) & _word_char(first[1:]) & (gap_arr == "")
        gap_arr[fuse] = " "
    out: list[str] = []
    start = 0
    for parts, n in zip(parts_per_text, counts):
        parts = list(parts)
        parts[1::2] = flat[start : start + n].tolist()
        if n > 1:
            parts[2:-1:2] = gap_arr[start : start + n - 1].tolist()
        out.append("".join(parts))
        start += n
    return out
