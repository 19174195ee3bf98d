"""RAPT's client side (the client's maths: no model, no server): each example privatized locally with T2T / PCT2T, the
plain tokens prepended and privatized with it (Li et al., section III-B2, Fig. 2); only the privatized text, the
privatized plain tokens, the index of the public plain-token sequence and the label leave the device.

The plain tokens go through the same mechanism as the example, as their own text (tagged in their own context): they
are public, so their words do not count in the example's privacy loss, which composes over the example's own
privatized words only (:attr:`PrivatizedExample.words_privatized`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ..substitution.plain import PlainTokens
from .t2t import TextToText

__all__ = ["PrivatizedExample", "privatize_examples"]


@dataclass(frozen=True)
class PrivatizedExample:
    """What the client sends for one example."""

    parts: tuple[str, ...]  # the privatized sentence(s): one, or two for a sentence-pair task
    label: Any
    plain: tuple[str, ...] | None = None  # the privatized plain tokens (None: no plain tokens)
    sequence: int | None = None  # which public plain-token sequence they privatize (the reconstruction targets)
    words_privatized: int = 0  # the example's own words that went through the mechanism (its privacy loss: n * eps)

    def __post_init__(self) -> None:
        if not self.parts or len(self.parts) > 2 or not all(isinstance(p, str) for p in self.parts):
            raise ValueError(f"PrivatizedExample: parts must be one or two strings, got {self.parts!r}")
        if (self.plain is None) != (self.sequence is None):
            raise ValueError("PrivatizedExample: plain tokens and their sequence index come together")

    def to_dict(self) -> dict[str, Any]:
        return {"parts": list(self.parts), "label": self.label, "plain": None if self.plain is None else
                list(self.plain), "sequence": self.sequence, "words_privatized": self.words_privatized}  # fmt: skip


def privatize_examples(
    examples: Sequence[Sequence[str]],
    labels: Sequence[Any],
    mechanism: TextToText | None,
    plain: PlainTokens | None,
    *,
    generator: torch.Generator | None,
) -> list[PrivatizedExample]:
    """Privatize every example (a tuple of one or two sentences) with ``mechanism`` (None: no privatization, the
    eta = infinity column) and prepend ``plain`` tokens (a sequence drawn per example from ``generator``), privatized
    with the same mechanism. One mechanism call for the whole batch (one tagger pass)."""
    if len(examples) != len(labels):
        raise ValueError(f"privatize_examples: {len(examples)} examples but {len(labels)} labels")
    if plain is not None and not isinstance(generator, torch.Generator):
        raise TypeError("privatize_examples: plain tokens are drawn per example: pass a torch.Generator")
    widths = {len(e) for e in examples}
    if widths - {1, 2} or len(widths) > 1:
        raise ValueError(f"privatize_examples: every example must have the same 1 or 2 sentences, got {sorted(widths)}")
    width = widths.pop() if widths else 1
    picks = (
        [None] * len(examples)
        if plain is None
        else torch.randint(len(plain.sequences), (len(examples),), generator=generator).tolist()
    )
    texts = [s for e in examples for s in e]
    plain_texts = [] if plain is None else [" ".join(plain.sequences[k]) for k in picks]
    if mechanism is None:
        out_texts, out_plain = texts, [t.split(" ") for t in plain_texts]
        counts = [0] * len(texts)
    else:
        result = mechanism.privatize_detailed(texts + plain_texts, generator=generator)
        out_texts = result.texts[: len(texts)]
        out_plain = result.output_words[len(texts) :]
        counts = list(result.substituted_per_text[: len(texts)])
    out = []
    for i, label in enumerate(labels):
        span = slice(i * width, (i + 1) * width)
        out.append(
            PrivatizedExample(
                parts=tuple(out_texts[span]),
                label=label,
                plain=None if plain is None else tuple(out_plain[i]),
                sequence=picks[i],
                words_privatized=int(sum(counts[span])),
            )
        )
    return out
