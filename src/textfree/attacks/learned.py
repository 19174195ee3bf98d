"""Learned inversion and the restoration instruction against PPFT payloads (PPFT Appendix H/I/J and L).

Both make a PPFT-shaped model (projection + decoder) generate text from a payload with the public instruction
:data:`~textfree.ppft.batches.RESTORE_INSTRUCTION`:

* ``learned_inversion``: the attacker trained that model itself to regenerate prompts from payloads of its own
  in-domain text (stage 2 with the ``restore`` task: frozen encoder + pooling, learnable projection, LoRA decoder),
  noise-unaware (trained on clean payloads), noise-aware (trained on payloads of the same mechanism) or from the
  stage-1-aligned decoder. It needs query access to the encoder and text to train on: at least public text
  (:data:`LEARNED_INVERSION_REQUIRES`); an attacker trained on in-domain text needs ``training_text="in_domain"``
  and a noise-aware one the mechanism's parameters (the cell kind adds both).
* ``restoration``: the server simply asks its *served* PPFT model to restore the prompt; it needs nothing but the
  payload and the model it already has.

:func:`score_reconstructions` turns reconstructions into the suite's numbers: mean ROUGE-L F1 (PPFT's inversion
metric), corpus BLEU, and attribute recall read off the text (an attribute counts as recovered when its normalised
words appear in the reconstruction, PPFT Table 3). :func:`medoid_text` is the no-input reference: the attacker's best
constant guess.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from ..metrics.privacy import attribute_recall
from ..metrics.text import corpus_bleu, rouge_l
from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "LEARNED_INVERSION_REQUIRES",
    "RESTORATION_REQUIRES",
    "learned_inversion_attack",
    "restoration_attack",
    "reconstruct",
    "score_reconstructions",
    "medoid_text",
]

#: The least a learned inverter needs; the cell kind adds in-domain text or mechanism knowledge when it uses them.
LEARNED_INVERSION_REQUIRES = ThreatModel(encoder_queries=True, training_text="public")
RESTORATION_REQUIRES = ThreatModel()


def reconstruct(
    model: Any, payload: Any, *, instruction: str, max_new_tokens: int = 160, batch_size: int = 16
) -> list[str]:
    """Generate one reconstruction per payload row; ``payload.public`` must carry ``instruction``, the restore
    instruction of the attacked system (PPFT's: ``textfree.ppft.batches.RESTORE_INSTRUCTION``), on every row."""
    public = payload.public
    if public is None or any(p != instruction for p in public):
        raise ValueError(f"every payload row's public text must be the restore instruction {instruction!r}")
    return model.answer(payload, max_new_tokens=max_new_tokens, batch_size=batch_size)


@register_attack(
    "learned_inversion",
    requires=LEARNED_INVERSION_REQUIRES,
    description="a projection + decoder the attacker trained to regenerate prompts from payloads",
)
def learned_inversion_attack(model: Any, payload: Any, *, threat: ThreatModel, **kwargs: Any) -> list[str]:
    check_grant("learned_inversion", LEARNED_INVERSION_REQUIRES, threat)
    return reconstruct(model, payload, **kwargs)


@register_attack(
    "restoration",
    requires=RESTORATION_REQUIRES,
    description="the served PPFT model asked to restore the prompt (no training)",
)
def restoration_attack(model: Any, payload: Any, *, threat: ThreatModel, **kwargs: Any) -> list[str]:
    check_grant("restoration", RESTORATION_REQUIRES, threat)
    return reconstruct(model, payload, **kwargs)


def score_reconstructions(
    reconstructions: Sequence[str],
    references: Sequence[str],
    attributes: dict[str, Sequence[Sequence[str]]] | None = None,
) -> dict[str, float]:
    """``rouge_l`` (mean per-text ROUGE-L F1), ``rouge_l_recall`` (mean), ``bleu`` (corpus BLEU-4), and
    ``{name}_recall_text`` (micro attribute recall read off the text) for each of ``attributes``."""
    if len(reconstructions) != len(references) or not references:
        raise ValueError(f"{len(reconstructions)} reconstructions for {len(references)} references (need equal, > 0)")
    scores = [rouge_l(p, r) for p, r in zip(reconstructions, references)]
    out = {
        "rouge_l": math.fsum(s.f1 for s in scores) / len(scores),
        "rouge_l_recall": math.fsum(s.recall for s in scores) / len(scores),
        "bleu": corpus_bleu(list(reconstructions), list(references)).score,
    }
    for name, gold in (attributes or {}).items():
        if len(gold) != len(references):
            raise ValueError(f"attribute {name!r}: {len(gold)} gold rows for {len(references)} references")
        rows = [(g, t) for g, t in zip(gold, reconstructions) if g]
        out[f"{name}_recall_text"] = (
            attribute_recall([g for g, _ in rows], [t for _, t in rows])["micro"] if rows else math.nan
        )
    return out


def medoid_text(texts: Sequence[str], n: int = 100) -> str:
    """The attacker's best constant guess: the medoid (highest summed ROUGE-L F1 to the others) of ``n`` of its own
    ``texts`` (distinct, in order), drawn with ``random.Random(0)``. Pri-* prompts share a template, so this scores
    far above 0 against any prompt: read reconstructions against it."""
    import random

    texts = list(dict.fromkeys(texts))
    if not texts:
        raise ValueError("medoid_text needs at least one text")
    sample = random.Random(0).sample(texts, min(n, len(texts)))
    return max(sample, key=lambda t: sum(rouge_l(t, u).f1 for u in sample))
