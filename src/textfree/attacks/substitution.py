"""Attacks on text-to-text privatized text (T2T / PCT2T, RAPT): the attacker reads the substituted text.

* ``substitution_identity``: take the released text as the guess (what any reader of it learns; needs nothing).
* ``substitution_channel``: a noise-aware word-level inverter. The attacker runs the public mechanism (same table,
  eta and part-of-speech rule) on its own in-domain text several times, counts how often each input word came out as
  each output word, and maps every observed word to the input word that most often produced it (the maximum a
  posteriori word under its in-domain prior); an output word it never saw is kept. Needs in-domain text and the
  mechanism with its parameter.
* ``substitution_learned`` (:mod:`.substitution_learned`): a decoder trained to rewrite released text into the
  original text.

Scores: :func:`word_recovery` (share of the original words recovered at their position: T2T swaps words one for one
and keeps the layout, so positions align), :func:`aligned_word_recovery` (the same count for a guess that may have
another word count: positions come from a minimum-edit alignment) and ROUGE-L of the rejoined guess.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "SUBSTITUTION_CHANNEL_REQUIRES",
    "ChannelInverter",
    "word_recovery",
    "aligned_word_recovery",
    "substitution_identity_attack",
    "substitution_channel_attack",
]

SUBSTITUTION_CHANNEL_REQUIRES = ThreatModel(training_text="in_domain", knows_mechanism=True, knows_parameters=True)


def _key(word: str) -> str:
    return word.lower()


def word_recovery(original: Sequence[Sequence[str]], guessed: Sequence[Sequence[str]]) -> float:
    """Share of original words whose guess at the same position equals them (case-insensitive).

    >>> word_recovery([["I", "ate", "a", "burger"]], [["i", "eat", "a", "burger"]])
    0.75
    """
    if len(original) != len(guessed):
        raise ValueError(f"{len(original)} original texts but {len(guessed)} guesses")
    hits = total = 0
    for i, (o, g) in enumerate(zip(original, guessed)):
        if len(o) != len(g):
            raise ValueError(f"text {i}: {len(o)} original words but {len(g)} guessed (T2T keeps the word count)")
        hits += sum(_key(a) == _key(b) for a, b in zip(o, g))
        total += len(o)
    if total == 0:
        raise ValueError("word_recovery: no words")
    return hits / total


def _aligned_hits(original: Sequence[str], guessed: Sequence[str]) -> int:
    """Matched words of a minimum-edit (word error rate) alignment of ``guessed`` to ``original``; among the alignments
    with the fewest edits, the one with the most matches."""
    a, b = [_key(w) for w in original], [_key(w) for w in guessed]
    # cost[j] = (edits, -matches) of aligning a[:i] to b[:j], row by row
    prev = [(j, 0) for j in range(len(b) + 1)]
    for i in range(1, len(a) + 1):
        row = [(i, 0)]
        for j in range(1, len(b) + 1):
            e, m = prev[j - 1]
            diagonal = (e, m - 1) if a[i - 1] == b[j - 1] else (e + 1, m)
            up, left = prev[j], row[j - 1]
            row.append(min(diagonal, (up[0] + 1, up[1]), (left[0] + 1, left[1])))
        prev = row
    return -prev[-1][1]


def aligned_word_recovery(original: Sequence[Sequence[str]], guessed: Sequence[Sequence[str]]) -> float:
    """Share of original words recovered by a guess of any length: the words matched by a minimum-edit alignment
    (the hits of a word error rate count), case-insensitive. For a guess of the same length it is at least
    :func:`word_recovery` (the position-by-position alignment is one candidate; a shift can match more words).

    >>> aligned_word_recovery([["I", "ate", "a", "burger"]], [["i", "ate", "a", "big", "burger"]])
    1.0
    >>> aligned_word_recovery([["I", "ate", "a", "burger"]], [["i", "eat", "a", "burger"]])
    0.75
    """
    if len(original) != len(guessed):
        raise ValueError(f"{len(original)} original texts but {len(guessed)} guesses")
    total = sum(len(o) for o in original)
    if total == 0:
        raise ValueError("aligned_word_recovery: no words")
    return sum(_aligned_hits(o, g) for o, g in zip(original, guessed)) / total


@dataclass
class ChannelInverter:
    """Observed word -> the input word that most often produced it in the attacker's simulations."""

    table: dict[str, str]
    n_pairs: int

    @classmethod
    def fit(cls, mechanism: Any, texts: Sequence[str], *, rounds: int, generator: torch.Generator) -> "ChannelInverter":
        """Run ``mechanism`` (a :class:`~textfree.substitution.TextToText`) ``rounds`` times over ``texts``."""
        if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
            raise ValueError(f"rounds must be an integer >= 1, got {rounds!r}")
        from ..substitution.text import split_text

        inputs = [split_text(t)[1::2] for t in texts]
        counts: dict[str, Counter] = defaultdict(Counter)
        n = 0
        for _ in range(rounds):
            result = mechanism.privatize_detailed(list(texts), generator=generator)
            for words_in, words_out in zip(inputs, result.output_words):
                for a, b in zip(words_in, words_out):
                    counts[_key(b)][_key(a)] += 1
                    n += 1
        table = {out: min(c, key=lambda w: (-c[w], w)) for out, c in counts.items()}
        return cls(table, n)

    def invert(self, words: Sequence[str]) -> list[str]:
        return [self.table.get(_key(w), w) for w in words]


@register_attack("substitution_identity", requires=ThreatModel(), description="read the T2T output as the guess")
def substitution_identity_attack(output_words: Sequence[Sequence[str]], *, threat: ThreatModel) -> list[list[str]]:
    check_grant("substitution_identity", ThreatModel(), threat)
    return [list(w) for w in output_words]


@register_attack(
    "substitution_channel",
    requires=SUBSTITUTION_CHANNEL_REQUIRES,
    description="most likely input word per output word, from simulations on in-domain text",
)
def substitution_channel_attack(
    output_words: Sequence[Sequence[str]], inverter: ChannelInverter, *, threat: ThreatModel
) -> list[list[str]]:
    check_grant("substitution_channel", SUBSTITUTION_CHANNEL_REQUIRES, threat)
    return [inverter.invert(w) for w in output_words]
