"""Held-out accuracy of a PPFT model, measured the way it is used: the client privatizes, the server answers.

Tasks (``task=``):

* ``"mcqa"`` (PPFT Appendix B.6 / D.1): private = context + question, public = instruction + 4 options; correct if
  the normalised gold option text is contained in the generation (:func:`textfree.data.is_correct`);
  ``accuracy_exclusive`` also rejects generations that contain another option's text.
* ``"open"``: no options shown (public = :data:`~textfree.data.prompts.OPEN_INSTRUCTION`); correct iff the first
  label of the whole task the generation names is the gold one (:func:`textfree.metrics.open_answer_correct`).
  ``labels`` is the task's label set (:func:`task_labels`: every option of every record).
* ``"blind_mcqa"`` / ``"blind_open"``: the same public parts and **no private prefix at all** (zero slots, nothing
  private is sent): what the decoder answers from the options (or the instruction) alone.
* ``"mcqa_rank"`` / ``"blind_mcqa_rank"``: the prompts of ``"mcqa"`` / ``"blind_mcqa"``, answered by ranking the four
  options by the probability that the model answers each in full (:meth:`ServerModel.choose`, multiple choice
  scored as lm-evaluation-harness does) instead of by free generation; scored like ``"mcqa"``. A generation that
  names no option counts as wrong under ``"mcqa"``; ranking always picks one, so the two separate "the model cannot
  follow the format" from "the model does not know".
* ``"open_rank"`` / ``"blind_open_rank"``: the prompts of ``"open"`` / ``"blind_open"`` (no options shown), answered by
  ranking **every label of the task** (``labels``) the same way: a decoding constrained to the label set, which the
  server knows (it is public, like the options). Scored like ``"open"``. Not the paper's metric; reported beside it.
* ``"length_mcqa"`` / ``"length_open"``: a control for what the payload's **slot count** alone tells the model. The
  client privatizes as in ``"mcqa"`` / ``"open"``, then every slot is replaced by a random unit vector (drawn from the
  evaluation generator): the same number of slots, no content. PPFT's mechanism does not hide the count (it is
  ceil(tokens / k)), and on templated prompts the length says much about the answer; with a ``fixed_slots`` model
  every payload has the same count, and the control is a random prefix of that length.
* ``"open_head"``: the prompts and payloads of ``"open"``, answered by the model's **answer head** alone (beyond the
  paper; :mod:`textfree.ppft.answer_head`): its most probable class, no decoder. Scored like ``"open"``. Beside the
  ``"open"`` row it says how much of what the head reads the decoder passes on. Needs a model with an answer head.
* ``"mcqa_head"``: the prompts and payloads of ``"mcqa"``, answered by the answer head alone among the four options
  shown: the option its class probabilities rank highest (an option's probability sums its classes of the same
  normalised text; 0 outside its classes; ties go to the first option). Scored like ``"mcqa"``. Beside ``"mcqa"``
  it says how much of the head's reading the decoder turns into 4-option answers.

Every result also reports ``accuracy_no_leak``: the accuracy on the records whose private text does not name the
answer (docs/data.md). ``majority_baseline`` is the accuracy of always answering the most frequent training answer
among the options.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, Sequence

import torch

from ..data import (
    MCQARecord,
    blind_prompt,
    contains_answer,
    is_correct,
    mcqa_prompt,
    normalize_answer,
    open_answer_prompt,
    task_labels,
)
from ..data.prompts import OPEN_INSTRUCTION
from ..metrics import open_answer_correct
from ..rng import resolve_generator
from .checks import EVAL_TASKS as TASKS

__all__ = [
    "TASKS",
    "evaluate_qa",
    "evaluate_mcqa",
    "head_answers",
    "majority_baseline",
    "random_unit_slots",
    "task_labels",
]


def _parts(record: MCQARecord, task: str):
    task = task.removesuffix("_rank").removesuffix("_head").removeprefix("length_")
    if task == "mcqa":
        return mcqa_prompt(record)
    if task == "open":
        return open_answer_prompt(record)
    if task == "blind_mcqa":
        return blind_prompt(record)
    return type(blind_prompt(record))(private="", public=OPEN_INSTRUCTION)


def evaluate_qa(
    lm,
    records: Sequence[MCQARecord],
    *,
    task: str = "mcqa",
    epsilon: float | None,
    k: int | None = None,
    mechanism: str | None = None,
    match: str | None = None,
    labels: Sequence[str] | None = None,
    seed: int | None = 0,
    batch_size: int = 32,
    max_new_tokens: int = 24,
    progress: bool = False,
) -> dict[str, Any]:
    """Accuracy of ``lm`` (a :class:`TextFreeLM`) on ``records`` for ``task`` at ``epsilon`` (None: clean payloads)."""
    from tqdm.auto import tqdm

    labels = _check_task(lm, records, task, labels)
    open_task = _is_open(task)
    blind = task.startswith("blind")
    privatizer = None if blind else lm.privatizer(epsilon, k=k, mechanism=mechanism, match=match)
    gen = resolve_generator(None, seed) if (epsilon is not None and not blind) else None
    started = time.time()
    predictions = []
    for start in tqdm(range(0, len(records), batch_size), desc=f"evaluate {task}", unit="batch", disable=not progress):
        chunk = records[start : start + batch_size]
        parts = [_parts(r, task) for r in chunk]
        options = [list(labels) if open_task else list(r.options) for r in chunk]
        answers = _answers(
            lm, task, parts, options, privatizer, gen, batch_size=batch_size, max_new_tokens=max_new_tokens
        )
        predictions += [_prediction(record, answer, open_task, labels) for record, answer in zip(chunk, answers)]
    return {
        "task": task,
        **_accuracies(predictions),
        "epsilon": None if blind else epsilon,
        "k": None if blind else (k or lm.config.k),
        "n_labels": len(labels) if open_task else None,
        "wall_s": round(time.time() - started, 2),
        "predictions": predictions,
    }


def _is_open(task: str) -> bool:
    """Whether ``task`` shows no options and is scored against the task's whole label set."""
    return task.removesuffix("_rank").removesuffix("_head").endswith("open")


def _check_task(lm, records: Sequence[MCQARecord], task: str, labels: Sequence[str] | None) -> Sequence[str] | None:
    """Refuse an unknown task, a head task on a model without an answer head, and open-answer labels that miss a gold
    answer. Returns the labels an open task scores against (default: :func:`task_labels` of ``records``), else
    ``labels`` as given."""
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}, got {task!r}")
    if task.endswith("_head") and not lm.server.projection.config.answer_classes:
        raise ValueError(f"task {task!r} needs a model with an answer head (Stage2Config.answer_head)")
    if _is_open(task):
        labels = list(labels) if labels is not None else task_labels(records)
        missing = [r.answer for r in records if normalize_answer(r.answer) not in {normalize_answer(l) for l in labels}]
        if missing:
            raise ValueError(f"open-answer labels miss the gold answer {missing[0]!r}")
    return labels


def _answers(
    lm, task: str, parts, options: list[list[str]], privatizer, gen, *, batch_size: int, max_new_tokens: int
) -> list[str]:
    """One batch's answers: the client privatizes the private parts (a blind task sends nothing), the server answers
    the way ``task`` says (generation, ranking ``options``, the answer head, or from the slot count alone)."""
    public = [p.public for p in parts]
    if task.startswith("blind"):  # nothing private is sent: zero slots
        empty = torch.zeros(len(parts), 0, lm.config.encoder_dim)
        no_slots = torch.zeros(len(parts), 0, dtype=torch.bool)
        if task.endswith("_rank"):
            return lm.server.rank_options(empty, no_slots, public=public, options=options)
        return lm.server.generate(empty, no_slots, public=public, max_new_tokens=max_new_tokens)
    payload = privatizer.privatize([p.private for p in parts], generator=gen, public=public)
    if task.startswith("length_"):  # keep the slot count, drop the content
        return lm.server.generate(
            random_unit_slots(payload.mask, lm.config.encoder_dim, gen),
            payload.mask,
            public=public,
            max_new_tokens=max_new_tokens,
        )
    if task.endswith("_head"):
        return head_answers(lm.server.projection, payload, None if _is_open(task) else options)
    if task.endswith("_rank"):
        return lm.server.choose(payload, options)
    return lm.server.answer(payload, max_new_tokens=max_new_tokens, batch_size=batch_size)


def _prediction(record: MCQARecord, answer: str, open_task: bool, labels: Sequence[str] | None) -> dict[str, Any]:
    """One record's scored answer: correct (and correct naming no other option), and whether its private text leaks
    the answer."""
    if open_task:
        correct = exclusive = open_answer_correct(answer, record.answer, labels)
    else:
        correct, exclusive = is_correct(answer, record), is_correct(answer, record, exclusive=True)
    return {
        "id": record.id,
        "answer": answer,
        "gold": record.answer,
        "correct": correct,
        "correct_exclusive": exclusive,
        "leaks": contains_answer(record),
    }


def _accuracies(predictions: list[dict[str, Any]]) -> dict[str, Any]:
    """The counts and accuracies of scored predictions, overall and on the records that do not leak the answer."""
    n = len(predictions)
    no_leak = [p for p in predictions if not p["leaks"]]
    return {
        "n": n,
        "accuracy": sum(p["correct"] for p in predictions) / n if n else float("nan"),
        "accuracy_exclusive": sum(p["correct_exclusive"] for p in predictions) / n if n else float("nan"),
        "n_no_leak": len(no_leak),
        "accuracy_no_leak": sum(p["correct"] for p in no_leak) / len(no_leak) if no_leak else float("nan"),
    }


def head_answers(projection, payload, options: Sequence[Sequence[str]] | None = None) -> list[str]:
    """Per payload row, the answer head's most probable class; with ``options`` (one list per row), the row's option
    the head ranks highest: an option's probability is the sum over the classes with its normalised text (training
    targets may differ in case only: "Theft", "theft"), 0 when none; ties go to the first option."""
    if options is None:
        return [projection.answer_class(payload.vectors[i, :n].float()) for i, n in enumerate(payload.lengths)]
    index: dict[str, list[int]] = {}
    for j, c in enumerate(projection.config.answer_classes):
        index.setdefault(normalize_answer(c), []).append(j)
    out = []
    with torch.no_grad():
        for i, n in enumerate(payload.lengths):
            p = projection.answer_probabilities(payload.vectors[i, :n].float().to(projection.answer_embed.device))
            scores = [
                0.0 if p is None else float(sum(p[j] for j in index.get(normalize_answer(o), []))) for o in options[i]
            ]
            out.append(options[i][max(range(len(scores)), key=lambda j: (scores[j], -j))])
    return out


def random_unit_slots(mask: torch.Tensor, dim: int, generator: torch.Generator | None) -> torch.Tensor:
    """Random unit vectors [B, S, dim] where ``mask`` marks a slot (zeros elsewhere): a payload's shape, no content."""
    x = torch.randn(*mask.shape, dim, generator=generator, dtype=torch.float32).to(mask.device)
    return x / x.norm(dim=-1, keepdim=True) * mask.unsqueeze(-1).to(x.dtype)


def evaluate_mcqa(lm, records: Sequence[MCQARecord], **kwargs) -> dict[str, Any]:
    """:func:`evaluate_qa` with ``task="mcqa"`` (4-option accuracy)."""
    return evaluate_qa(lm, records, task="mcqa", **kwargs)


def majority_baseline(train: Sequence[MCQARecord], test: Sequence[MCQARecord]) -> float:
    """Accuracy of answering, among each test record's options, the one that was most often gold in ``train``."""
    counts = Counter(normalize_answer(r.answer) for r in train)
    hits = 0
    for r in test:
        best = max(range(len(r.options)), key=lambda i: (counts.get(normalize_answer(r.options[i]), 0), -i))
        hits += best == r.answer_index
    return hits / len(test) if test else float("nan")
