"""Multiple-choice records as text pairs for a decoder, and its answers scored: the text-input side of PPFT's tasks.

A client that sends text (RAPT's PCT2T, a word-level d_chi baseline, a paraphrase) sends the *private* part of a
record's prompt transformed and its *public* part (the instruction, the options) as it is, exactly as PPFT splits
them (:mod:`textfree.data.prompts`). :func:`qa_pairs` builds those prompts with the client's transform;
:func:`score_answers` scores a decoder's answers with PPFT's rules (4-option: the gold option text in the answer,
:func:`textfree.data.is_correct`; open: the first label of the task named,
:func:`textfree.metrics.open_answer_correct`), so the figures stand beside PPFT's.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence

from ..data import MCQARecord, is_correct, mcqa_prompt, open_answer_prompt
from ..metrics import open_answer_correct
from .text_tuning import TextPair

__all__ = ["QA_TASKS", "private_parts", "qa_pairs", "qa_prompt", "score_answers"]

#: The text-input tasks: ``mcqa`` (the 4 options shown, in clear) and ``open`` (no options).
QA_TASKS = ("mcqa", "open")
_ANSWER_CUE = "Answer:"


def qa_prompt(private: str, public: str) -> str:
    """The text the server receives: the (transformed) private part, the public part, an answer cue."""
    return f"{private}\n{public}\n{_ANSWER_CUE}"


def private_parts(records: Sequence[MCQARecord]) -> list[str]:
    """The private part of each record's prompt (the same for every task): what a text client transforms."""
    return [mcqa_prompt(r).private for r in records]


def qa_pairs(records: Sequence[MCQARecord], task: str, sent: Sequence[str] | None = None) -> list[TextPair]:
    """One pair per record: the prompt of ``task`` whose private part is ``sent[i]`` (what the client made of
    :func:`private_parts`; None: the private parts as they are) and the gold option text as the answer. One
    privatized text per record serves every task: the client releases it once."""
    if task not in QA_TASKS:
        raise ValueError(f"task must be one of {QA_TASKS}, got {task!r}")
    parts = [mcqa_prompt(r) if task == "mcqa" else open_answer_prompt(r) for r in records]
    sent = [p.private for p in parts] if sent is None else list(sent)
    if len(sent) != len(parts):
        raise ValueError(f"{len(sent)} private texts for {len(parts)} records")
    return [TextPair(qa_prompt(s, p.public), r.answer) for s, p, r in zip(sent, parts, records, strict=True)]


def score_answers(
    answers: Sequence[str], records: Sequence[MCQARecord], task: str, labels: Sequence[str]
) -> dict[str, Any]:
    """accuracy, n, the majority answer's share and every prediction, scored as PPFT's evaluation scores."""
    if len(answers) != len(records):
        raise ValueError(f"{len(answers)} answers for {len(records)} records")
    if task == "mcqa":
        correct = [is_correct(a, r) for a, r in zip(answers, records, strict=True)]
    elif task == "open":
        correct = [open_answer_correct(a, r.answer, labels) for a, r in zip(answers, records, strict=True)]
    else:
        raise ValueError(f"task must be one of {QA_TASKS}, got {task!r}")
    gold = Counter(r.answer for r in records)
    return {
        "task": task,
        "n": len(records),
        "accuracy": sum(correct) / len(correct) if correct else float("nan"),
        "majority_share": gold.most_common(1)[0][1] / len(records) if records else float("nan"),
        "predictions": [
            {"id": r.id, "answer": a, "correct": c} for r, a, c in zip(records, answers, correct, strict=True)
        ],
    }
