"""Answer-string normalisation shared by loaders (finding the gold option) and scoring (``is_correct``).

:func:`normalize_answer` applies, in order:

1. Unicode NFKC normalisation (full-width letters, ligatures, compatibility forms);
2. ``str.casefold`` (aggressive lower-casing);
3. every Unicode punctuation character (category ``P*``: ``.,;:!?'"()-`` and their typographic variants
   such as ``’`` or ``–``) replaced by a space, so ``"Crohn's disease"`` -> ``"crohn s disease"`` on both sides
   of a comparison and ``"cough,fever"`` does not fuse into one word;
4. runs of whitespace collapsed to one space, and leading/trailing space removed.

Symbols (``+``, ``$``, ``%``) and digits are kept.
"""

from __future__ import annotations

import re
import unicodedata

__all__ = ["normalize_answer", "contains_normalized"]

_WS_RE = re.compile(r"\s+")


def normalize_answer(text: str) -> str:
    """Normalise ``text`` for answer comparison: NFKC, casefold, punctuation -> space, collapse whitespace."""
    text = unicodedata.normalize("NFKC", text).casefold()
    text = "".join(" " if unicodedata.category(ch)[0] == "P" else ch for ch in text)
    return _WS_RE.sub(" ", text).strip()


def contains_normalized(haystack: str, needle: str) -> bool:
    """True if normalised ``needle`` is a (non-empty) substring of normalised ``haystack``."""
    norm_needle = normalize_answer(needle)
    return bool(norm_needle) and norm_needle in normalize_answer(haystack)
