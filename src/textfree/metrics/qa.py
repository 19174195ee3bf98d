"""Question-answering metrics for PPFT's evaluation: 4-option accuracy, open-answer accuracy, seed spread, the
confidence interval of a mean over trainings, Welch's test between two sets of trainings.

* 4-option accuracy (PPFT Appendix D.1): a generation is correct if the normalised gold option text occurs in it
  (:func:`textfree.data.prompts.is_correct`).
* Open-answer accuracy (no options shown): the answer must name the gold label among *all* labels of the task.
  Correct iff the first label mentioned in the generation is the gold one (:func:`first_mentioned`): the earliest
  match wins, and at the same start position the longest label wins (so "cluster headache" beats "headache").
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from ..data.normalize import normalize_answer

__all__ = ["first_mentioned", "open_answer_correct", "accuracy", "seed_spread", "mean_interval", "welch_test"]


def _spans(text: str, label: str) -> list[int]:
    """Start offsets of ``label`` in ``text`` at word boundaries (both already normalised)."""
    if not label:
        return []
    return [m.start() for m in re.finditer(r"(?<!\w)" + re.escape(label) + r"(?!\w)", text)]


def first_mentioned(generation: str, labels: Sequence[str]) -> int | None:
    """Index of the label mentioned first in ``generation`` (normalised, at word boundaries), None if none.

    At one start position the longest label wins; labels equal after normalisation resolve to the first index.
    """
    text = normalize_answer(generation)
    best: tuple[int, int, int] | None = None  # (start, -length, index)
    for i, label in enumerate(labels):
        norm = normalize_answer(label)
        starts = _spans(text, norm)
        if starts:
            key = (starts[0], -len(norm), i)
            if best is None or key < best:
                best = key
    return None if best is None else best[2]


def open_answer_correct(generation: str, gold: str, labels: Sequence[str]) -> bool:
    """True iff the first label named in ``generation`` is ``gold`` (``gold`` must be one of ``labels``)."""
    norms = [normalize_answer(l) for l in labels]
    if normalize_answer(gold) not in norms:
        raise ValueError(f"gold label {gold!r} is not among the labels")
    i = first_mentioned(generation, labels)
    return i is not None and norms[i] == normalize_answer(gold)


def accuracy(correct: Sequence[bool]) -> float:
    """Fraction of True; nan for an empty list."""
    correct = list(correct)
    return sum(bool(c) for c in correct) / len(correct) if correct else math.nan


def seed_spread(values: Sequence[float]) -> dict[str, float]:
    """mean, sample standard deviation (n - 1), min and max of per-seed figures."""
    values = [float(v) for v in values]
    if not values:
        raise ValueError("seed_spread needs at least one value")
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1)) if n > 1 else math.nan
    return {"mean": mean, "std": std, "min": min(values), "max": max(values), "n": n}


def mean_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float]:
    """Two-sided Student-t confidence interval of the mean of ``values`` (independent runs, e.g. one figure per
    training): mean -/+ t_{(1+confidence)/2, n-1} * sd / sqrt(n), with the sample standard deviation (n - 1)."""
    from scipy.stats import t

    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must lie in (0, 1), got {confidence!r}")
    spread = seed_spread(values)
    if spread["n"] < 2:
        raise ValueError(f"mean_interval needs at least two values, got {spread['n']}")
    half = float(t.ppf((1.0 + confidence) / 2.0, spread["n"] - 1)) * spread["std"] / math.sqrt(spread["n"])
    return spread["mean"] - half, spread["mean"] + half


def welch_test(a: Sequence[float], b: Sequence[float]) -> dict[str, float]:
    """Welch's unequal-variances t-test of mean(a) - mean(b) (e.g. one figure per training of two recipes): ``t``,
    the Welch-Satterthwaite degrees of freedom ``df`` and the two-sided ``p``."""
    from scipy.stats import t as student

    sa, sb = seed_spread(a), seed_spread(b)
    if sa["n"] < 2 or sb["n"] < 2:
        raise ValueError(f"welch_test needs at least two values on each side, got {sa['n']} and {sb['n']}")
    va, vb = sa["std"] ** 2 / sa["n"], sb["std"] ** 2 / sb["n"]
    if va + vb == 0:
        raise ValueError("welch_test needs some spread: every value on both sides is the same")
    t = (sa["mean"] - sb["mean"]) / math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (sa["n"] - 1) + vb**2 / (sb["n"] - 1))
    return {"t": t, "df": df, "p": float(2.0 * student.sf(abs(t), df))}
