"""A learned inverter for clients that send *text* (PPFT Appendix K, "attack on d_x-privacy and Paraphrase"): the
attacker fine-tunes a causal LM to rewrite what the server received into the original private text, on pairs it makes
itself by running the public client on public training rows, then reads the held-out releases.

The paper's attacker is GPT2-medium, 20 epochs; here the local decoder with LoRA (:mod:`textfree.lm.text_tuning`),
the epochs a setting. Besides the reconstruction's ROUGE-L, :func:`attribute_scores` reads what it names: the share of
a record's symptoms and antecedents (Pri-DDX's lists) found in it (recall), its age and its sex ("a 31-year-old
male"); :func:`medoid_text` of the training texts is the constant guess every figure is read against.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import torch

__all__ = ["attribute_scores", "generate_batched", "inversion_pairs", "names_in"]

_CUE = "\nThe original text:"
_PERSON = re.compile(r"(\d+)-year-old (\w+)")
_SEX = {"male": "M", "man": "M", "boy": "M", "female": "F", "woman": "F", "girl": "F"}


def inversion_pairs(released: Sequence[str], private: Sequence[str]) -> list[Any]:
    """(release -> original) training pairs of the inverter; a blank release becomes one word ("(empty)")."""
    from ..lm.text_tuning import TextPair

    if len(released) != len(private):
        raise ValueError(f"{len(released)} releases for {len(private)} private texts")
    return [TextPair((r.strip() or "(empty)") + _CUE, p) for r, p in zip(released, private, strict=True)]


def generate_batched(model: torch.nn.Module, tokenizer: Any, prompts: Sequence[str], *, max_new_tokens: int,
                     batch_size: int = 16) -> list[str]:  # fmt: skip
    """Greedy continuations of ``prompts`` in left-padded batches (ids without special tokens, as trained)."""
    from ..lm.generate import generate_ids

    ids = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    new = generate_ids(model, tokenizer, ids, max_new_tokens=[max_new_tokens] * len(ids), batch_size=batch_size)
    return [tokenizer.decode(row, skip_special_tokens=True).strip() for row in new]


def names_in(text: str, names: Sequence[str]) -> set[str]:
    """The ``names`` that occur in ``text`` as whole words (case-insensitive)."""
    lower = text.lower()
    return {n for n in names if re.search(r"(?<!\w)" + re.escape(n.lower()) + r"(?!\w)", lower)}


def attribute_scores(texts: Sequence[str], records: Sequence[Any], names: Sequence[str]) -> dict[str, float]:
    """Recall of each record's symptoms and antecedents among the ``names`` found in its text, and the accuracy of the
    age and sex the text states ("a 31-year-old male"; no statement: wrong)."""
    if len(texts) != len(records):
        raise ValueError(f"{len(texts)} texts for {len(records)} records")
    from .meta_vector import span_recall

    found = [names_in(t, names) for t in texts]
    out = {f"recall_{part}": span_recall([r.attributes.get(part, []) for r in records], found)
           for part in ("symptoms", "antecedents")}  # fmt: skip
    ages = sexes = 0
    for text, r in zip(texts, records, strict=True):
        m = _PERSON.search(text)
        ages += bool(m) and int(m.group(1)) == r.attributes.get("age")
        sexes += bool(m) and _SEX.get(m.group(2).lower()) == r.attributes.get("sex")
    return out | {"age_accuracy": ages / len(texts), "sex_accuracy": sexes / len(texts)}
