"""Client-side rewrites of stage-2 training prompts (beyond the paper; training rows only, off by default).

At eps 28 a Pri-DDX decoder trained on PPFT's payloads learns the table from slot count to diagnosis more than it
reads the slots (docs/ppft-experiments.md, "What PPFT reads at eps 28"). Its training set has one private text per
training row (833 distinct prompts), so every epoch shows it the same pooled slots under new noise.
:class:`PromptVariants` rewrites a training prompt into another prompt of the same case: the items of each of its
lists (antecedents, symptoms) in another order, and optionally some of them left out. The rewrite happens on the
*client*, on the client's own training rows, before encoding; the server still receives payloads only. Unlike the
server's slot-count augmentation (:mod:`textfree.ppft.slot_augment`), the slot count and the slots' content stay
consistent: a shorter prompt has fewer slots because it says less.

Privacy: each epoch already releases one payload per training row; with variants some of those releases are of a
rewritten prompt instead of the original, so the per-epoch releases and their guarantee per slot are unchanged.

Rewriters are registered per dataset (:data:`REWRITERS`); a dataset without one cannot use variants.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .slot_augment import _check_fraction

__all__ = ["PromptVariants", "REWRITERS", "rewrite_ddx", "rewriter_for"]

# "A 46-year-old male has a history of a, b. The 46-year-old male presents the symptoms of c, d. <question>"
_DDX_HISTORY = re.compile(
    r"(?P<head>A (?P<who>\d+-year-old \w+)) has a history of (?P<history>[^.]+)\. "
    r"(?P<mid>The (?P=who) presents the symptoms of) (?P<symptoms>[^.]+)\.(?P<tail>.*)",
    re.DOTALL,
)
# "A 14-year-old woman presents the symptoms of c, d. <question>"
_DDX_SYMPTOMS = re.compile(
    r"(?P<mid>A \d+-year-old \w+ presents the symptoms of) (?P<symptoms>[^.]+)\.(?P<tail>.*)", re.DOTALL
)


def _rewrite_items(items: str, rng: random.Random, *, shuffle: bool, drop: float) -> str:
    parts = items.split(", ")
    kept = [p for p in parts if rng.random() >= drop] if drop > 0 else list(parts)
    if not kept:  # a list is never emptied: keep one item, drawn uniformly
        kept = [parts[rng.randrange(len(parts))]]
    if shuffle:
        rng.shuffle(kept)
    return ", ".join(kept)


def rewrite_ddx(text: str, rng: random.Random, *, shuffle: bool, drop: float) -> str | None:
    """A Pri-DDX private prompt with the items of its history and symptom lists reordered (``shuffle``) and each
    left out with probability ``drop`` (at least one per list kept). None if ``text`` is not in the dataset's
    template (then the caller keeps it as it is)."""
    m = _DDX_HISTORY.fullmatch(text)
    if m is not None:
        history = _rewrite_items(m["history"], rng, shuffle=shuffle, drop=drop)
        symptoms = _rewrite_items(m["symptoms"], rng, shuffle=shuffle, drop=drop)
        return f"{m['head']} has a history of {history}. {m['mid']} {symptoms}.{m['tail']}"
    m = _DDX_SYMPTOMS.fullmatch(text)
    if m is not None:
        return f"{m['mid']} {_rewrite_items(m['symptoms'], rng, shuffle=shuffle, drop=drop)}.{m['tail']}"
    return None


Rewriter = Callable[..., "str | None"]

#: Dataset name (as :func:`textfree.data.ppft_split` takes it, lower case; a data directory is looked up by its
#: base name without ``_dataset``) -> rewriter of its private prompts.
REWRITERS: dict[str, Rewriter] = {
    "pri-ddx": rewrite_ddx,
    "ddx": rewrite_ddx,
    "pri-ddxplus": rewrite_ddx,
    "ddxplus": rewrite_ddx,
}


def rewriter_for(dataset: str) -> Rewriter:
    """The registered rewriter of ``dataset``; a clear error naming the ones there are."""
    key = (
        os.path.basename(os.path.normpath(str(dataset))).lower().removesuffix("_dataset")
    )  # a name or the data directory
    if key not in REWRITERS:
        raise ValueError(f"no prompt rewriter for dataset {dataset!r}; prompt variants exist for {sorted(REWRITERS)}")
    return REWRITERS[key]


@dataclass(frozen=True)
class PromptVariants:
    """Per epoch, each training prompt is replaced by a fresh rewrite of itself with probability ``prob``.

    * ``prob``: chance, per training example and epoch, that the client sends a rewrite instead of the prompt.
    * ``shuffle``: a rewrite reorders the items of each list.
    * ``drop``: a rewrite leaves out each item with this probability (at least one per list kept).
    """

    prob: float = 0.0
    shuffle: bool = True
    drop: float = 0.0

    def __post_init__(self) -> None:
        _check_fraction("prompt_variants", self.prob, 1.0)
        _check_fraction("prompt_variant_drop", self.drop, 0.9)
        if not isinstance(self.shuffle, bool):
            raise ValueError(f"prompt_variant_shuffle must be true or false, got {self.shuffle!r}")
        if self.prob > 0 and not self.shuffle and self.drop == 0:
            raise ValueError(
                "prompt_variants > 0 with neither shuffling nor prompt_variant_drop would send the prompts unchanged"
            )

    @property
    def active(self) -> bool:
        return self.prob > 0

    def to_dict(self) -> dict | None:
        """What a run's summary records: None when inactive (PPFT's training)."""
        return {"prob": self.prob, "shuffle": self.shuffle, "drop": self.drop} if self.active else None

    def epoch_rewrites(self, texts: Sequence[str], rewriter: Rewriter, *, seed: int) -> dict[int, str]:
        """Index -> rewritten text for the examples rewritten this epoch (``seed`` fixes the draw, so a resumed
        epoch replays it). Texts outside the rewriter's template, and rewrites equal to the text, are left out."""
        rng = random.Random(seed)
        out: dict[int, str] = {}
        for i, text in enumerate(texts):
            if rng.random() >= self.prob:
                continue
            new = rewriter(text, rng, shuffle=self.shuffle, drop=self.drop)
            if new is not None and new != text:
                out[i] = new
        return out
