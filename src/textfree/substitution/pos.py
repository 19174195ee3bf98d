"""Offline part-of-speech tagging into the 12 universal tags (Petrov, Das and McDonald 2012), for PCT2T.

* :class:`TextBlobTagger`: TextBlob's ``PatternTagger`` (Pattern's Brill-style tagger and lexicon ship inside
  the textblob package: nothing to download). Penn Treebank tags are mapped with the built-in
  :data:`PTB_TO_UNIVERSAL`, so it needs no data directory.
* :class:`NltkPerceptronTagger`: NLTK's averaged perceptron, loaded from ``data_dir`` (the JSON files NLTK
  >= 3.9 reads, ``taggers/averaged_perceptron_tagger_eng/``) and mapped with NLTK's own ``en-ptb`` map
  (``taggers/universal_tagset/``, from the same directory). Nothing is downloaded.

Taggers tag a pre-split word list *in context* (:meth:`tag`) or every word on its own (:meth:`tag_isolated`).
The candidate vocabulary of PCT2T is tagged in isolation, once: a word gets the category of its most common
reading with no context ("run" may be a VERB in the vocabulary and a NOUN in a sentence), so a word's in-text
category need not be its vocabulary category (see docs/substitution.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, Sequence, runtime_checkable

import torch

__all__ = [
    "UNIVERSAL_TAGS",
    "PTB_TO_UNIVERSAL",
    "ptb_to_universal",
    "Tagger",
    "TextBlobTagger",
    "NltkPerceptronTagger",
    "get_tagger",
    "TAGGERS",
    "category_masks",
]

UNIVERSAL_TAGS = ("NOUN", "VERB", "PRON", "ADP", "ADJ", "ADV", "DET", "NUM", "PRT", "CONJ", ".", "X")

#: Penn Treebank -> universal tags; the same mapping as NLTK's universal_tagset/en-ptb.map (Petrov et al.),
#: plus the tags Pattern emits that the map lacks (-LRB-/-RRB- variants and quotes). Anything else is "X".
PTB_TO_UNIVERSAL: dict[str, str] = {
    "!": ".",
    "#": ".",
    "$": ".",
    "''": ".",
    "(": ".",
    ")": ".",
    ",": ".",
    "-LRB-": ".",
    "-RRB-": ".",
    ".": ".",
    ":": ".",
    "?": ".",
    "``": ".",
    '"': ".",
    "CC": "CONJ",
    "CD": "NUM",
    "DT": "DET",
    "EX": "DET",
    "FW": "X",
    "IN": "ADP",
    "JJ": "ADJ",
    "JJR": "ADJ",
    "JJS": "ADJ",
    "LS": "X",
    "MD": "VERB",
    "NN": "NOUN",
    "NNP": "NOUN",
    "NNPS": "NOUN",
    "NNS": "NOUN",
    "NP": "NOUN",
    "PDT": "DET",
    "POS": "PRT",
    "PRP": "PRON",
    "PRP$": "PRON",
    "PRT": "PRT",
    "RB": "ADV",
    "RBR": "ADV",
    "RBS": "ADV",
    "RN": "X",
    "RP": "PRT",
    "SYM": "X",
    "TO": "PRT",
    "UH": "X",
    "VB": "VERB",
    "VBD": "VERB",
    "VBG": "VERB",
    "VBN": "VERB",
    "VBP": "VERB",
    "VBZ": "VERB",
    "VP": "VERB",
    "WDT": "DET",
    "WH": "X",
    "WP": "PRON",
    "WP$": "PRON",
    "WRB": "ADV",
}


_SENTENCE_END = frozenset({".", "!", "?"})
_BATCH = 400


def _sentence_batches(words: list[str], size: int) -> list[list[str]]:
    """Consecutive batches of at most ``size`` words, cut after sentence-final punctuation where possible."""
    batches: list[list[str]] = []
    start = 0
    while start < len(words):
        stop = min(start + size, len(words))
        if stop < len(words):
            cut = max((i + 1 for i in range(start, stop) if words[i] in _SENTENCE_END), default=stop)
            stop = cut
        batches.append(words[start:stop])
        start = stop
    return batches


def ptb_to_universal(tag: str) -> str:
    """Map one Penn Treebank tag with the built-in table ("X" when unknown)."""
    return PTB_TO_UNIVERSAL.get(tag, "X")


@runtime_checkable
class Tagger(Protocol):
    """Tags a list of words with universal tags, one tag per word."""

    name: str

    def tag(self, words: Sequence[str]) -> list[str]: ...

    def tag_isolated(self, words: Sequence[str]) -> list[str]: ...


def _check_words(owner: str, words: Sequence[str]) -> list[str]:
    if isinstance(words, str):
        raise TypeError(f"{owner}: pass a list of words, not a string")
    words = list(words)
    for w in words:
        if not isinstance(w, str) or not w or any(c.isspace() for c in w):
            raise ValueError(f"{owner}: every word must be a non-empty string without whitespace, got {w!r}")
    return words


@dataclass(frozen=True)
class TextBlobTagger:
    """TextBlob's PatternTagger (bundled lexicon, no download), PTB tags mapped to universal tags."""

    name: str = field(default="textblob", init=False)

    def tag_ptb(self, words: Sequence[str]) -> list[str]:
        """Penn Treebank tags of ``words`` tagged together as one sentence."""
        from textblob.en import tag as pattern_tag

        words = _check_words("TextBlobTagger", words)
        if not words:
            return []
        # tokenize=False: Pattern splits on the whitespace we put in, so it sees exactly our words. Pattern's
        # parse time grows faster than linearly with the length of its input (10,000 words in one call:
        # 0.16 s), so we feed it batches of whole sentences of at most _BATCH words (a sentence longer than
        # that is cut, which only loses context at the cut).
        tags: list[str] = []
        for batch in _sentence_batches(words, _BATCH):
            tagged = pattern_tag(" ".join(batch), tokenize=False)
            if len(tagged) != len(batch):  # pragma: no cover - Pattern keeps whitespace-separated tokens
                raise RuntimeError(f"TextBlobTagger: Pattern returned {len(tagged)} tags for {len(batch)} words")
            tags.extend(t for _, t in tagged)
        return tags

    def tag(self, words: Sequence[str]) -> list[str]:
        return [ptb_to_universal(t) for t in self.tag_ptb(words)]

    def tag_isolated(self, words: Sequence[str]) -> list[str]:
        return [self.tag([w])[0] for w in _check_words("TextBlobTagger", words)]


@dataclass(frozen=True)
class NltkPerceptronTagger:
    """NLTK's averaged-perceptron English tagger read from ``data_dir`` (no download).

    ``data_dir`` must hold ``taggers/averaged_perceptron_tagger_eng/*.json`` and ``taggers/universal_tagset``.
    It is prepended to ``nltk.data.path`` (process-wide), which is how NLTK finds both.
    """

    data_dir: str | os.PathLike
    name: str = field(default="nltk", init=False)
    _state: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root = Path(self.data_dir)
        tagger_dir = root / "taggers" / "averaged_perceptron_tagger_eng"
        tagset = root / "taggers" / "universal_tagset" / "en-ptb.map"
        if not tagger_dir.is_dir() or not any(tagger_dir.glob("*.json")):
            raise ValueError(f"NltkPerceptronTagger: no averaged perceptron JSON files in {tagger_dir}")
        if not tagset.is_file():
            raise ValueError(f"NltkPerceptronTagger: universal tag map missing: {tagset}")
        object.__setattr__(self, "data_dir", str(root.resolve()))

    def _tagger(self):
        if "tagger" not in self._state:
            import nltk
            from nltk.tag.perceptron import PerceptronTagger

            if self.data_dir not in nltk.data.path:
                nltk.data.path.insert(0, self.data_dir)
            self._state["tagger"] = PerceptronTagger(lang="eng")
        return self._state["tagger"]

    def tag_ptb(self, words: Sequence[str]) -> list[str]:
        words = _check_words("NltkPerceptronTagger", words)
        return [t for _, t in self._tagger().tag(words)] if words else []

    def tag(self, words: Sequence[str]) -> list[str]:
        from nltk.tag.mapping import map_tag

        ptb = self.tag_ptb(words)
        return [map_tag("en-ptb", "universal", t) for t in ptb]

    def tag_isolated(self, words: Sequence[str]) -> list[str]:
        return [self.tag([w])[0] for w in _check_words("NltkPerceptronTagger", words)]


TAGGERS = ("textblob", "nltk")


def get_tagger(name: str = "textblob", data_dir: str | os.PathLike | None = None) -> Tagger:
    """A tagger by name: "textblob" (no data needed) or "nltk" (needs ``data_dir``)."""
    if name == "textblob":
        return TextBlobTagger()
    if name == "nltk":
        if data_dir is None:
            raise ValueError("get_tagger('nltk') needs data_dir (a directory holding taggers/...)")
        return NltkPerceptronTagger(data_dir)
    raise ValueError(f"unknown tagger {name!r}; known: {list(TAGGERS)}")


def category_masks(tags: Sequence[str], categories: Sequence[str]) -> dict[str, torch.Tensor]:
    """For each category, a bool mask [len(tags)] of the vocabulary words tagged with it."""
    unknown = [c for c in categories if c not in UNIVERSAL_TAGS]
    if unknown:
        raise ValueError(f"unknown universal tag(s) {unknown}; known: {list(UNIVERSAL_TAGS)}")
    import numpy as np

    arr = np.array(list(tags), dtype=str)
    return {c: torch.from_numpy(arr == c) for c in categories}
