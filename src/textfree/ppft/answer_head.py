"""Stage 2's answer head (beyond the paper): a classifier of the answer trained on the server's own payloads.

Why: at a low epsilon PPFT's decoder reads little of the slots' content. On Pri-DDX at eps 28 it answers the open
question for 0.810 of the held-out prompts, 0.758 of that from the slot count alone, while the attribute attacker's
classifier (mean of the noisy slots + one-hot slot count -> 2-layer MLP), trained on 150 fresh noise draws of the
same training rows, names the diagnosis of 87.3%. Stage 2 gives the decoder 12 draws per row; the classifier is
cheap enough for a hundred. So the server trains that classifier first, on its own stage-2 payloads (fresh noise
each pass, exactly what the decoder is later trained on), its classes the distinct training targets (by normalised
text), and puts the class vectors, weighted by its probabilities, before each row's slots
(:meth:`~textfree.ppft.projection.Projection.answer_vector`). The decoder still writes the answer.

The server sees payloads and targets only, as in the rest of stage 2. It suits domains whose answers come from a
closed set (diagnoses, charges, labels); :func:`answer_classes` refuses training targets that are mostly unique.
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import torch

from ..data import normalize_answer
from ..heads.classifier import (
    AttributeAttackConfig,
    AttributeClassifier,
    AttributeSpec,
    train_attribute_attacker,
)
from .batches import PayloadExample, collate_payloads, require_payload_examples

__all__ = ["answer_classes", "class_vectors", "train_answer_head", "head_accuracy"]

log = logging.getLogger(__name__)


def answer_classes(targets: Sequence[str]) -> list[str]:
    """The distinct training targets by normalised text, most frequent first (ties: alphabetical). Spellings that
    differ only in case, spacing or punctuation ("Theft", "theft") are one class, named by its most frequent
    spelling, so the head does not split one answer's probability over them. Refused when fewer than 2 classes,
    or when more than half the targets are alone in their class (free text, not a closed answer set: an answer
    head would learn nothing)."""
    spellings: dict[str, dict[str, int]] = {}
    for t in targets:
        by = spellings.setdefault(normalize_answer(t), {})
        by[t] = by.get(t, 0) + 1
    if len(spellings) < 2:
        raise ValueError(f"an answer head needs at least 2 distinct training targets, got {len(spellings)}")
    counts = {key: sum(by.values()) for key, by in spellings.items()}
    singletons = sum(1 for c in counts.values() if c == 1)
    if singletons > len(targets) / 2:
        raise ValueError(
            f"{singletons} of {len(targets)} training targets occur once: the answers are free text, not a closed set;"
            " an answer head needs repeated answers (labels)"
        )
    names = {key: min(by, key=lambda s: (-by[s], s)) for key, by in spellings.items()}
    return [names[key] for key in sorted(spellings, key=lambda key: (-counts[key], names[key]))]


def class_vectors(server, classes: Sequence[str]) -> torch.Tensor:
    """[C, d_d] initial class vectors: the mean decoder input embedding of each class text's tokens, so the answer
    vector starts near the words of the likely answers."""
    embed = server.decoder.get_input_embeddings()
    ids = server.tokenizer(list(classes), add_special_tokens=False)["input_ids"]
    with torch.no_grad():
        rows = [
            embed(torch.tensor(i or [server.tokenizer.eos_token_id], device=server.device)).float().mean(0) for i in ids
        ]
    return torch.stack(rows).cpu()


def _release(payloads: Sequence[PayloadExample]) -> tuple[torch.Tensor, torch.Tensor]:
    batch = collate_payloads(list(payloads))
    return batch["vectors"], batch["mask"]


def train_answer_head(
    payloads: Callable[[int], Sequence[PayloadExample]],
    *,
    epochs: int,
    generator: torch.Generator,
    hidden: int = 256,
    standardize: bool = False,
) -> AttributeClassifier:
    """The answer head, trained for ``epochs`` passes over fresh payloads: ``payloads(epoch)`` is the client's release
    for pass ``epoch`` (its prompts privatized with fresh noise, in the same order every pass), and the server side
    reads only those payload rows and their targets. ``generator`` seeds the head's initialisation and batches.
    ``standardize``: standardise the mean slot before the MLP (the short mean slot otherwise loses to the one-hot
    count; at eps 28 on Pri-SLJA's class-subspace client the stage-2 head's held-out reading rose from 0.437 to
    0.504, docs/ppft.md). ``hidden``: the MLP's width; 0 makes the head one linear map of the mean slot and the
    count."""
    if isinstance(epochs, bool) or not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"answer head epochs must be an integer >= 1, got {epochs!r}")
    rows = require_payload_examples(payloads(0), "the answer head")
    labels = [row.target for row in rows]
    classes = answer_classes(labels)  # refuses free-text targets
    named = {normalize_answer(c): c for c in classes}
    targets = [{"answer": named[normalize_answer(t)]} for t in labels]
    specs = [AttributeSpec("answer", "categorical", tuple(classes))]
    first = _release(rows)

    def release(epoch: int) -> tuple[torch.Tensor, torch.Tensor]:
        if epoch == 0:
            return first
        fresh = require_payload_examples(payloads(epoch), "the answer head")
        if [row.target for row in fresh] != labels:
            raise ValueError(
                f"the answer head's pass {epoch} holds other rows than pass 0: a release must keep the rows' order"
            )
        return _release(fresh)

    log.info("answer head: %d classes, %d payload rows, %d passes with fresh noise", len(classes), len(targets), epochs)
    config = AttributeAttackConfig(pooling="mean", count=True, hidden=hidden, epochs=epochs, standardize=standardize)
    return train_attribute_attacker(*first, targets, specs, config, noise=None, generator=generator, variants=release)


def head_accuracy(projection, payloads: Sequence[PayloadExample]) -> float:
    """Share of ``payloads`` whose target is the answer head's most probable class."""
    payloads = require_payload_examples(payloads, "head_accuracy")
    if not payloads:
        raise ValueError("head_accuracy needs at least one payload")
    return sum(
        normalize_answer(projection.answer_class(ex.vectors) or "") == normalize_answer(ex.target) for ex in payloads
    ) / len(payloads)
