"""Held-out MCQA accuracy of a PPFT model, measured the way it is used: client privatizes, server answers.

Scoring is :func:`textfree.data.is_correct` (normalised gold option text contained in the generation, PPFT
Appendix D.1); ``accuracy_exclusive`` also rejects generations that contain another option's text, and
``accuracy_no_leak`` is on the records whose private text does not name the answer (docs/data.md).
``majority_baseline`` is the accuracy of always answering the most frequent training answer among the options.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Sequence


from ..data import MCQARecord, contains_answer, is_correct, mcqa_prompt, normalize_answer
from ..rng import resolve_generator

__all__ = ["evaluate_mcqa", "majority_baseline"]


def evaluate_mcqa(
    lm,
    records: Sequence[MCQARecord],
    *,
    epsilon: float | None,
    k: int | None = None,
    mechanism: str | None = None,
    seed: int | None = 0,
    batch_size: int = 32,
    max_new_tokens: int = 24,
    progress: bool = False,
) -> dict[str, Any]:
    """Accuracy of ``lm`` (a :class:`TextFreeLM`) on ``records`` at ``epsilon`` (None: clean payloads)."""
    from tqdm.auto import tqdm

    privatizer = lm.privatizer(epsilon, k=k, mechanism=mechanism)
    gen = resolve_generator(None, seed) if epsilon is not None else None
    predictions = []
    for start in tqdm(range(0, len(records), batch_size), desc="evaluate", unit="batch", disable=not progress):
        chunk = records[start : start + batch_size]
        parts = [mcqa_prompt(r) for r in chunk]
        payload = privatizer.privatize([p.private for p in parts], generator=gen, public=[p.public for p in parts])
        answers = lm.server.answer(payload, max_new_tokens=max_new_tokens, batch_size=batch_size)
        for record, answer in zip(chunk, answers):
            predictions.append(
                {"id": record.id, "answer": answer, "gold": record.answer, "correct": is_correct(answer, record),
                 "correct_exclusive": is_correct(answer, record, exclusive=True), "leaks": contains_answer(record)}
            )
    n = len(predictions)
    no_leak = [p for p in predictions if not p["leaks"]]
    return {
        "n": n,
        "accuracy": sum(p["correct"] for p in predictions) / n if n else float("nan"),
        "accuracy_exclusive": sum(p["correct_exclusive"] for p in predictions) / n if n else float("nan"),
        "n_no_leak": len(no_leak),
        "accuracy_no_leak": sum(p["correct"] for p in no_leak) / len(no_leak) if no_leak else float("nan"),
        "epsilon": epsilon,
        "k": k or lm.config.k,
        "predictions": predictions,
    }


def majority_baseline(train: Sequence[MCQARecord], test: Sequence[MCQARecord]) -> float:
    """Accuracy of answering, among each test record's options, the one that was most often gold in ``train``."""
    counts = Counter(normalize_answer(r.answer) for r in train)
    hits = 0
    for r in test:
        best = max(range(len(r.options)), key=lambda i: (counts.get(normalize_answer(r.options[i]), 0), -i))
        hits += best == r.answer_index
    return hits / len(test) if test else float("nan")
