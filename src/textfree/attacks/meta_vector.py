"""Attacks on PrivacyRestore's release (PPFT Appendix K's "attack on PrivacyRestore"): the server sees the prompt with
the privacy spans removed and a noisy meta vector, the unit mix of the public bank's restoration vectors of the removed
spans (:mod:`textfree.lm.privacy_restore`).

* :func:`span_scores`: a matched filter: each span's score is the released vector's inner product with that span's
  own unit meta vector (the bank is public: the client holds it, so the attacker does too);
* :func:`fit_threshold`: the attacker's decision threshold, chosen on releases it made itself from public training
  rows (noise-aware: the same epsilon), to maximise the span F1;
* :func:`fill_spans`: the reconstruction: the spans it infers put back into the released text's lists (an antecedent
  after "history of", a symptom after "symptoms of", by the role the training rows give each span);
* :func:`span_recall`: recall of the true spans among the visible and the inferred ones.

The paper's attacker is a GPT2-medium fine-tuned on (masked text, meta vector) -> full text; this one uses the same
two inputs with no learned decoder: the dataset's template does the rest.
"""

from __future__ import annotations

import re
from typing import Sequence

import torch

__all__ = ["fill_spans", "fit_threshold", "predict_spans", "span_recall", "span_scores"]


def span_scores(released: torch.Tensor, directions: torch.Tensor) -> torch.Tensor:
    """[n, E] scores of released meta vectors [n, D] against each span's unit meta vector (``directions`` [E, D])."""
    if released.dim() != 2 or directions.dim() != 2 or released.shape[1] != directions.shape[1]:
        raise ValueError(f"span_scores: released [n, D] and directions [E, D], got {tuple(released.shape)}, "
                         f"{tuple(directions.shape)}")  # fmt: skip
    return released.double() @ directions.double().T


def predict_spans(scores: torch.Tensor, threshold: float) -> list[set[int]]:
    """The spans scoring above ``threshold`` per row; at least the best one (a release always removes one)."""
    return [set((row > threshold).nonzero().flatten().tolist()) | {int(row.argmax())} for row in scores]


def _f1(predicted: Sequence[set[int]], truth: Sequence[set[int]]) -> float:
    hit = sum(len(p & t) for p, t in zip(predicted, truth, strict=True))
    n_pred, n_true = sum(map(len, predicted)), sum(map(len, truth))
    return 0.0 if hit == 0 else 2 * hit / (n_pred + n_true)


def fit_threshold(scores: torch.Tensor, truth: Sequence[set[int]]) -> float:
    """The threshold among the quantiles of ``scores`` that maximises the span F1 on these (the attacker's own)
    releases."""
    candidates = torch.quantile(scores.flatten().float(), torch.linspace(0.5, 0.999, 60)).tolist()
    return max(candidates, key=lambda c: _f1(predict_spans(scores, c), truth))


def _append(text: str, cue: str, names: list[str], sentence: str) -> str:
    if not names:
        return text
    hit = re.search(re.escape(cue) + r"[^.]*", text)
    if hit:
        return text[: hit.end()] + ", " + ", ".join(names) + text[hit.end() :]
    return sentence.format(", ".join(names)) + " " + text


def fill_spans(text: str, spans: Sequence[str], antecedents: set[str]) -> str:
    """``text`` with ``spans`` put back: an antecedent at the end of the "history of" list, any other span at the end
    of the "symptoms of" list (a sentence of its own in front when the text has no such list)."""
    history = [s for s in spans if s in antecedents and s.lower() not in text.lower()]
    symptoms = [s for s in spans if s not in antecedents and s.lower() not in text.lower()]
    text = _append(text, "history of ", history, "The patient has a history of {}.")
    return _append(text, "symptoms of ", symptoms, "The patient presents the symptoms of {}.")


def span_recall(truth: Sequence[Sequence[str]], found: Sequence[set[str]]) -> float:
    """Share of the true spans (pooled over rows) among the spans found for their row (case-insensitive)."""
    hit = total = 0
    for spans, got in zip(truth, found, strict=True):
        got = {g.lower() for g in got}
        hit += sum(s.lower() in got for s in spans)
        total += len(spans)
    return hit / total if total else float("nan")
