"""The word-level d_chi baseline of PPFT's Table 1 (Feyisetan et al. 2020; PPFT Appendix C.2): the client replaces
every word of a prompt's private part by a word of an embedding table drawn around it (T2T: L2-Laplace noise on the
word's vector, the nearest table word released; no part-of-speech constraint) and sends that text; the public part
(the instruction, the options) goes as it is, as with every text client (:mod:`.text_qa`).

Out-of-table words. The paper's table, ``glove.840B.300d`` (2.2M cased words, punctuation included), holds nearly
every word of a prompt. A small table misses many: the shared GloVe Twitter 25-d subset (11,925 lower-case words, no
punctuation, no digits) misses about 39% of Pri-DDX's words (punctuation, ages, the rarer clinical terms). T2T's
default releases such words verbatim, outside its guarantee. This client instead maps each of them to one fixed table
word (:func:`fold_out_of_table`) before the mechanism, so every word goes through it: any two words' inputs are then
at most D_max apart and the accounting n * eta * D_max covers the whole private part. The cost is utility only
(out-of-table words become indistinguishable from each other before any noise).

Budget alignment (Appendix E/F, eq. 6): eps_dchi = B / (n * D_max), n the words of the longest private part (the
mechanism's unit: one release per word, punctuation included) and D_max the table's diameter
(:func:`word_alignment`). ``textfree account`` computes the same row for an encoder's sub-word tokenizer and token
table; a word table has no tokenizer, so n is counted in T2T's words here. The per-word loss eps_dchi * D_max = B / n
does not depend on the table's scale: only on n.
"""

from __future__ import annotations

from typing import Sequence

from ..mechanisms.accounting import alignment_from_lengths
from ..substitution.embeddings import WordEmbeddingTable
from ..substitution.text import rejoin, split_text, words_of

__all__ = ["fold_out_of_table", "word_alignment"]


def _check_word(table: WordEmbeddingTable, word: str) -> None:
    if not isinstance(word, str) or len(words_of(split_text(word))) != 1 or split_text(word)[1] != word:
        raise ValueError(f"oov_word must be one word (no spaces, one token of T2T's splitter), got {word!r}")
    if int(table.lookup([word])[0]) < 0:
        raise ValueError(f"oov_word {word!r} is not a word of the table {table.name!r}")


def fold_out_of_table(texts: Sequence[str], table: WordEmbeddingTable, word: str) -> list[str]:
    """``texts`` with every word ``table`` lacks (looked up as T2T looks it up: as written, then in lower case)
    replaced by ``word`` (a table word); the layout is kept and each text keeps its number of words."""
    _check_word(table, word)
    parts = [split_text(t) for t in texts]
    flat = [w for p in parts for w in words_of(p)]
    rows = table.lookup(flat).tolist() if flat else []
    return rejoin(parts, [w if r >= 0 else word for w, r in zip(flat, rows, strict=True)])


def word_alignment(texts: Sequence[str], table: WordEmbeddingTable, budget: float) -> dict[str, object]:
    """PPFT's budget-alignment rows (:func:`~textfree.mechanisms.accounting.alignment_from_lengths`) with n counted in
    T2T's words of each private text and D_max the diameter of ``table``; ``at_n_max`` is the binding row."""
    lengths = [max(1, len(words_of(split_text(t)))) for t in texts]
    result = alignment_from_lengths(budget, lengths, table.diameter())
    result.update({"table": table.name, "budget": float(budget), "unit": "words (T2T's splitter)"})
    return result
