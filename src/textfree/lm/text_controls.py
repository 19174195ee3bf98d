"""Controls for a text client's accuracy: what a server answers from the released prompt's *word count* and the public
options alone, without reading one of its words.

T2T, PCT2T and the word-level d_chi baseline swap words one for one (:mod:`textfree.substitution.text`), so the number
of words of the released private part is the original's exactly, at every eta: none of them hides it. If that count
goes with the answer (a diagnosis whose template lists more symptoms), a decoder can score well on text whose every
word was replaced. :func:`length_controls` measures how well:

* ``length``: the Bayes classifier of that one feature on the training rows: each held-out row gets the answer most
  frequent among the training rows whose released private part has the same word count (ties: the more frequent
  answer overall, then the first candidate), among the row's four options for the 4-option task and among the task's
  labels for the open one; a count no training row has falls back to the prior;
* ``prior``: the same without the word count (the most frequent training answer among the candidates): the options
  (4-option) or nothing (open) alone.

Both are scored by :func:`~textfree.lm.text_qa.score_answers` (PPFT's rules), on the same rows as the decoder.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Sequence

from ..data import MCQARecord
from ..substitution.text import split_text, words_of
from .text_qa import QA_TASKS, score_answers

__all__ = ["CONTROLS", "word_count", "length_controls"]

#: The controls :func:`length_controls` scores, in report order.
CONTROLS = ("length", "prior")


def word_count(text: str) -> int:
    """Words of ``text`` as T2T splits them (a run of word characters or one other non-space character)."""
    return len(words_of(split_text(text)))


def length_controls(
    train_records: Sequence[MCQARecord],
    train_texts: Sequence[str],
    test_records: Sequence[MCQARecord],
    test_texts: Sequence[str],
    labels: Sequence[str],
) -> dict[str, dict[str, float]]:
    """{control: {task: accuracy}} of the ``length`` and ``prior`` controls (module docstring): fitted on
    ``train_texts`` (the released private part of each training record) and scored on ``test_texts`` (of each test
    record); ``labels``: the open task's label set (:func:`textfree.data.task_labels`)."""
    for records, texts, part in ((train_records, train_texts, "train"), (test_records, test_texts, "test")):
        if len(records) != len(texts):
            raise ValueError(f"length_controls: {len(texts)} {part} texts for {len(records)} records")
    if not train_records or not test_records:
        raise ValueError("length_controls needs training and test records")
    prior = Counter(r.answer for r in train_records)
    by_count: dict[int, Counter] = defaultdict(Counter)
    for text, record in zip(train_texts, train_records, strict=True):
        by_count[word_count(text)][record.answer] += 1
    empty: Counter = Counter()

    def answer(candidates: Sequence[str], seen: Counter) -> str:
        return max(candidates, key=lambda y: (seen[y], prior[y]))

    out: dict[str, dict[str, float]] = {}
    for control in CONTROLS:
        seen = [by_count.get(word_count(t), empty) if control == "length" else empty for t in test_texts]
        out[control] = {}
        for task in QA_TASKS:
            candidates = [r.options if task == "mcqa" else labels for r in test_records]
            answers = [answer(c, s) for c, s in zip(candidates, seen, strict=True)]
            out[control][task] = score_answers(answers, test_records, task, labels)["accuracy"]
    return out
