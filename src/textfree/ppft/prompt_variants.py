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

``rephrase`` also says the same case in another sentence frame (:data:`DDX_FRAMES`: a clinical note, a first-person
account, a telegraphic line, the history after the symptoms or left out), so a model trained on one template still
reads prompts that people write in other words. The frames reuse the prompt's own items: no fact is added.

Rewriters are registered per dataset (:data:`REWRITERS`); a dataset without one cannot use variants.
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .slot_augment import _check_fraction

__all__ = ["DDX_FRAMES", "PromptVariants", "REWRITERS", "rewrite_ddx", "rewriter_for"]

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


_WHO = re.compile(r"(?P<age>\d+)-year-old (?P<sex>\w+)")
_FEMALE = {"female", "woman", "girl"}

#: Sentence frames of a Pri-DDX case: {age}, {sex} (as the prompt says it), {person} (man/woman), {mf} (M/F),
#: {symptoms} and {history} (the prompt's own items, "a, b and c"); a frame without {history} leaves it out.
DDX_FRAMES = (
    "A {age}-year-old {sex} with a history of {history} presents with {symptoms}.",
    "{age}-year-old {sex}. History: {history}. Symptoms: {symptoms}.",
    "{age}{mf}, {history}; now {symptoms}.",
    "I am a {age} year old {person}. I have {symptoms}. In the past I had {history}.",
    "The patient is a {age}-year-old {sex} who reports {symptoms}. Past history includes {history}.",
    "A {age}-year-old {sex} presents the symptoms of {symptoms}.",
    "{age}-year-old {person} with {symptoms}.",
    "I'm {age}, {person}, and I have {symptoms}.",
)


def _items(items: str, rng: random.Random, *, shuffle: bool, drop: float) -> list[str]:
    parts = items.split(", ")
    kept = [p for p in parts if rng.random() >= drop] if drop > 0 else list(parts)
    if not kept:  # a list is never emptied: keep one item, drawn uniformly
        kept = [parts[rng.randrange(len(parts))]]
    if shuffle:
        rng.shuffle(kept)
    return kept


def _spoken(items: list[str]) -> str:
    return ", ".join(items) if len(items) < 2 else f"{', '.join(items[:-1])} and {items[-1]}"


def _reframe(who: str, history: list[str] | None, symptoms: list[str], tail: str, rng: random.Random) -> str:
    """The case in a frame drawn from :data:`DDX_FRAMES` (one that needs a history only when there is one)."""
    m = _WHO.fullmatch(who)
    frames = [f for f in DDX_FRAMES if history or "{history}" not in f]
    female = m["sex"].lower() in _FEMALE
    said = rng.choice(frames).format(
        age=m["age"],
        sex=m["sex"],
        person="woman" if female else "man",
        mf="F" if female else "M",
        symptoms=_spoken(symptoms),
        history=_spoken(history or []),
    )
    return said + tail


def rewrite_ddx(text: str, rng: random.Random, *, shuffle: bool, drop: float, rephrase: float = 0.0) -> str | None:
    """A Pri-DDX private prompt with the items of its history and symptom lists reordered (``shuffle``) and each
    left out with probability ``drop`` (at least one per list kept), said in another frame of :data:`DDX_FRAMES`
    with probability ``rephrase``. None if ``text`` is not in the dataset's template (then the caller keeps it)."""
    m = _DDX_HISTORY.fullmatch(text)
    if m is not None:
        history = _items(m["history"], rng, shuffle=shuffle, drop=drop)
        symptoms = _items(m["symptoms"], rng, shuffle=shuffle, drop=drop)
        if rephrase > 0 and rng.random() < rephrase:
            return _reframe(m["who"], history, symptoms, m["tail"], rng)
        return f"{m['head']} has a history of {', '.join(history)}. {m['mid']} {', '.join(symptoms)}.{m['tail']}"
    m = _DDX_SYMPTOMS.fullmatch(text)
    if m is not None:
        symptoms = _items(m["symptoms"], rng, shuffle=shuffle, drop=drop)
        if rephrase > 0 and rng.random() < rephrase:
            who = _WHO.search(m["mid"])
            return _reframe(who[0], None, symptoms, m["tail"], rng)
        return f"{m['mid']} {', '.join(symptoms)}.{m['tail']}"
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
    * ``rephrase``: a rewrite says the case in another sentence frame with this probability.
    """

    prob: float = 0.0
    shuffle: bool = True
    drop: float = 0.0
    rephrase: float = 0.0

    def __post_init__(self) -> None:
        _check_fraction("prompt_variants", self.prob, 1.0)
        _check_fraction("prompt_variant_drop", self.drop, 0.9)
        _check_fraction("prompt_variant_rephrase", self.rephrase, 1.0)
        if not isinstance(self.shuffle, bool):
            raise ValueError(f"prompt_variant_shuffle must be true or false, got {self.shuffle!r}")
        if self.prob > 0 and not self.shuffle and self.drop == 0 and self.rephrase == 0:
            raise ValueError(
                "prompt_variants > 0 with neither shuffling, prompt_variant_drop nor prompt_variant_rephrase would "
                "send the prompts unchanged"
            )

    @property
    def active(self) -> bool:
        return self.prob > 0

    def to_dict(self) -> dict | None:
        """What a run's summary records: None when inactive (PPFT's training)."""
        if not self.active:
            return None
        out = {"prob": self.prob, "shuffle": self.shuffle, "drop": self.drop}
        return out | ({"rephrase": self.rephrase} if self.rephrase else {})  # older summaries have no rephrase

    def epoch_rewrites(self, texts: Sequence[str], rewriter: Rewriter, *, seed: int) -> dict[int, str]:
        """Index -> rewritten text for the examples rewritten this epoch (``seed`` fixes the draw, so a resumed
        epoch replays it). Texts outside the rewriter's template, and rewrites equal to the text, are left out."""
        rng = random.Random(seed)
        out: dict[int, str] = {}
        for i, text in enumerate(texts):
            if rng.random() >= self.prob:
                continue
            extra = {"rephrase": self.rephrase} if self.rephrase else {}
            new = rewriter(text, rng, shuffle=self.shuffle, drop=self.drop, **extra)
            if new is not None and new != text:
                out[i] = new
        return out
