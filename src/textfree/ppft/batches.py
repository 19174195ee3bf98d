"""Training examples and batches for both stages, and the client-side cache that turns prompts into payloads.

* :class:`TextExample` (private, public, target): what the *client* (data owner) holds. Stage 1 trains on
  these directly (general-domain data, no noise, the encoder is part of the model being trained).
* :class:`PayloadExample` (vectors, public, target): what the *server* is given in stage 2. It has no field
  for private text; ``vectors`` are one privatized payload row.
* :class:`ClientCache`: stage 2's client side. It encodes every private prompt once (clean token states,
  kept on the client) and, every epoch, privatizes them afresh with a seeded generator into
  :class:`~textfree.payload.Payload` objects (validated like any payload), whose rows become PayloadExamples.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

import torch

from ..data import (
    InstructRecord,
    MCQARecord,
    answer_target,
    load_dataset,
    mcqa_prompt,
    open_answer_prompt,
)
from ..payload import Payload
from ..privatizer import Privatizer
from .checks import DEFAULT_GENERAL_SOURCES, FORBIDDEN_STAGE1_SOURCES, STAGE2_TASKS

__all__ = [
    "TextExample",
    "PayloadExample",
    "ClientCache",
    "general_examples",
    "add_restore_examples",
    "restore_examples",
    "public_restore_examples",
    "mcqa_examples",
    "domain_examples",
    "blind_payload_examples",
    "STAGE2_TASKS",
    "collate_text",
    "collate_payloads",
    "require_payload_examples",
    "RESTORE_INSTRUCTION",
    "DEFAULT_GENERAL_SOURCES",
    "FORBIDDEN_STAGE1_SOURCES",
    "payload_loss",
]

RESTORE_INSTRUCTION = "Repeat the private prompt word for word."


@dataclass(frozen=True)
class TextExample:
    """A client-side example: ``private`` is privatized, ``public`` is sent in clear, ``target`` is the answer."""

    private: str
    public: str
    target: str


@dataclass(frozen=True)
class PayloadExample:
    """What the server trains on in stage 2: one payload row [n_slots, d_e], its public text and target."""

    vectors: torch.Tensor
    public: str
    target: str


# --------------------------------------------------------------------------- stage 1 data
def instruct_example(record: InstructRecord) -> TextExample:
    """private = instruction (+ newline + input); no public part; target = output."""
    private = record.instruction.strip()
    if record.input.strip():
        private = f"{private}\n{record.input.strip()}"
    return TextExample(private=private, public="", target=record.output.strip())


def general_examples(
    sources: Iterable[str] = DEFAULT_GENERAL_SOURCES, *, limit_per_source: int | None = None
) -> list[TextExample]:
    """General-domain instruction data from ``textfree.data`` (``name`` or ``name:split``; instruct records only).

    CommonsenseQA, ARC and the Pri-* sets are refused: they are evaluation / domain data, never stage-1 data.
    """
    out: list[TextExample] = []
    for source in sources:
        name, _, split = source.partition(":")
        if name.lower() in FORBIDDEN_STAGE1_SOURCES:
            raise ValueError(f"{name!r} is evaluation or domain data and may not be used for stage 1")
        records = load_dataset(name, split=split or None, limit=limit_per_source)
        bad = [r for r in records if not isinstance(r, InstructRecord)]
        if bad:
            raise ValueError(
                f"stage 1 takes instruction data (instruction/input/output); {source!r} holds {type(bad[0]).__name__}"
            )
        out += [ex for ex in map(instruct_example, records) if ex.private and ex.target]
    return out


def add_restore_examples(examples: Sequence[TextExample], fraction: float, *, seed: int) -> list[TextExample]:
    """``examples`` plus, for a seeded random ``fraction`` of them, a "restore the prompt" copy
    (public = :data:`RESTORE_INSTRUCTION`, target = the private text)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"restore fraction must be in [0, 1], got {fraction}")
    rng = random.Random(seed)
    picked = rng.sample(range(len(examples)), round(fraction * len(examples))) if fraction else []
    extra = [TextExample(examples[i].private, RESTORE_INSTRUCTION, examples[i].private) for i in sorted(picked)]
    return list(examples) + extra


# --------------------------------------------------------------------------- stage 2 data
def mcqa_examples(records: Sequence[MCQARecord]) -> list[TextExample]:
    """PPFT MCQA: private = context + question; public = instruction + options block; target = gold option text."""
    out = []
    for record in records:
        parts = mcqa_prompt(record)
        out.append(TextExample(private=parts.private, public=parts.public, target=answer_target(record)))
    return out


def domain_examples(records: Sequence[MCQARecord], tasks: Sequence[str] = ("mcqa",)) -> list[TextExample]:
    """Stage-2 examples of the training records, one per (task, record), tasks in the given order.

    ``"mcqa"``: :func:`mcqa_examples`; ``"open"``: private = context + question, public = the open-answer
    instruction (no options), target = the gold label. Both come from the same training rows (augmentation from
    training rows only). ``"restore"``: private = context + question, public = :data:`RESTORE_INSTRUCTION`, target =
    the private text itself, once per distinct private text: what a *learned inversion attacker* trains on (its
    own in-domain text), never part of a PPFT deployment's training."""
    tasks = list(tasks)
    bad = [t for t in tasks if t not in STAGE2_TASKS]
    if bad or not tasks or len(set(tasks)) != len(tasks):
        raise ValueError(f"stage-2 tasks must be distinct names from {STAGE2_TASKS}, got {tasks}")
    out: list[TextExample] = []
    for task in tasks:
        if task == "mcqa":
            out += mcqa_examples(records)
        elif task == "restore":
            out += restore_examples(mcqa_prompt(r).private for r in records)
        else:
            for record in records:
                parts = open_answer_prompt(record)
                out.append(TextExample(private=parts.private, public=parts.public, target=answer_target(record)))
    return out


def restore_examples(texts: Iterable[str]) -> list[TextExample]:
    """One "restore the prompt" example per distinct text (public = :data:`RESTORE_INSTRUCTION`, target = the text)."""
    return [TextExample(private=p, public=RESTORE_INSTRUCTION, target=p) for p in dict.fromkeys(texts)]


def public_restore_examples(
    sources: Iterable[str], *, limit_per_source: int | None = None, fits: Callable[[str], bool] | None = None
) -> list[TextExample]:
    """Restore examples of *public* text (``name`` or ``name:split`` instruction sources, as
    :func:`general_examples`; the private part: instruction + input): what a learned inversion attacker trains on
    when its own text is public. ``fits`` keeps only the texts it accepts (e.g. those the payload covers whole, so
    the target never holds text the payload does not carry)."""
    texts = [ex.private for ex in general_examples(sources, limit_per_source=limit_per_source)]
    return restore_examples(t for t in texts if fits is None or fits(t))


def blind_payload_examples(examples: Sequence[TextExample], dim: int) -> list[PayloadExample]:
    """The blind control: the same public text and targets with zero slots (no private prefix; nothing is encoded)."""
    return [PayloadExample(torch.zeros(0, dim), ex.public, ex.target) for ex in examples]


class ClientCache:
    """Client side of stage 2: clean token states of each private prompt, computed once and kept locally.

    ``privatize(privatizer, generator=...)`` pools, normalises and noises them into validated payloads and returns
    one :class:`PayloadExample` per prompt: the only thing the server's training loop receives.
    """

    def __init__(self, encoder, examples: Sequence[TextExample], *, batch_size: int = 32, progress: bool = False):
        self.encoder = encoder
        self.private = [ex.private for ex in examples]
        self.public = [ex.public for ex in examples]
        self.targets = [ex.target for ex in examples]
        self.hidden = _encode(encoder, self.private, batch_size=batch_size, progress=progress)

    def __len__(self) -> int:
        return len(self.hidden)

    def replaced(self, texts: dict[int, str], *, batch_size: int = 32) -> "ClientCache":
        """A copy in which example ``i`` carries ``texts[i]`` as its private text (encoded now); public texts,
        targets and every other example's states are shared with this cache (client side: prompt variants)."""
        bad = [i for i in texts if not 0 <= i < len(self.hidden)]
        if bad:
            raise IndexError(f"no cached examples at {bad[:5]} (the cache has {len(self.hidden)})")
        copy = object.__new__(ClientCache)
        copy.encoder, copy.public, copy.targets = self.encoder, self.public, self.targets
        copy.private, copy.hidden = list(self.private), list(self.hidden)
        order = sorted(texts)
        for i, h in zip(order, _encode(self.encoder, [texts[i] for i in order], batch_size=batch_size, progress=False)):
            copy.private[i], copy.hidden[i] = texts[i], h
        return copy

    def privatize(
        self, privatizer: Privatizer, *, generator: torch.Generator | None, batch_size: int = 64
    ) -> list[PayloadExample]:
        """Fresh payloads for every cached prompt (one noise draw each from ``generator``)."""
        if privatizer.encoder is not self.encoder:
            raise ValueError("the privatizer must use the encoder the cache was built with")
        out: list[PayloadExample] = []
        for start in range(0, len(self.hidden), batch_size):
            chunk = self.hidden[start : start + batch_size]
            t = max(h.shape[0] for h in chunk)
            hidden = torch.zeros(len(chunk), t, chunk[0].shape[-1])
            mask = torch.zeros(len(chunk), t, dtype=torch.bool)
            for i, h in enumerate(chunk):
                hidden[i, : h.shape[0]] = h
                mask[i, : h.shape[0]] = True
            vectors, slot_mask = privatizer.privatization.apply(hidden, mask, generator=generator)
            payload = Payload(
                vectors,
                slot_mask,
                privatizer.encoder_info,
                privatizer.privatization,
                public=self.public[start : start + batch_size],
            )
            for i, n in enumerate(payload.lengths):
                out.append(PayloadExample(payload.vectors[i, :n].clone(), payload.public[i], self.targets[start + i]))
        return out


def _encode(encoder, texts: Sequence[str], *, batch_size: int, progress: bool) -> list[torch.Tensor]:
    """Clean token states [tokens, d] of each text (client side), in order."""
    from tqdm.auto import tqdm

    out: list[torch.Tensor] = []
    starts = range(0, len(texts), batch_size)
    for start in tqdm(starts, desc="client: encoding prompts", unit="batch", disable=not progress):
        batch = encoder.encode(list(texts[start : start + batch_size]))
        for h, m in zip(batch.hidden, batch.mask):
            out.append(h[m].detach().cpu().clone())
    return out


# --------------------------------------------------------------------------- collation
def collate_text(tokenize: Callable[[list[str]], dict]) -> Callable[[list[TextExample]], dict]:
    """Stage 1: client-side tokenisation of the private texts; public and targets stay strings."""

    def collate(examples: list[TextExample]) -> dict:
        enc = tokenize([ex.private for ex in examples])
        return {
            "input_ids": enc["input_ids"].cpu(),
            "attention_mask": enc["attention_mask"].cpu(),
            "public": [ex.public for ex in examples],
            "targets": [ex.target for ex in examples],
        }

    return collate


def require_payload_examples(rows: Sequence[PayloadExample], where: str) -> list[PayloadExample]:
    """The server side's guard: ``rows`` as a list, refused with a ``TypeError`` unless every row is a
    :class:`PayloadExample` (no text example, no client cache, nothing that holds private text)."""
    if isinstance(rows, (str, bytes)) or not isinstance(rows, (list, tuple)):
        raise TypeError(f"{where} takes a list of PayloadExamples (privatized rows), got {type(rows).__name__}")
    bad = next((row for row in rows if not isinstance(row, PayloadExample)), None)
    if bad is not None:
        raise TypeError(f"{where} takes PayloadExamples only (privatized rows, never text), got a {type(bad).__name__}")
    return list(rows)


def collate_payloads(examples: list[PayloadExample]) -> dict:
    """Stage 2: pad payload rows into (vectors [B, S, d], mask [B, S]); public and targets stay strings."""
    examples = require_payload_examples(examples, "the stage-2 server batches")
    s = max(ex.vectors.shape[0] for ex in examples)
    d = examples[0].vectors.shape[-1]
    vectors = torch.zeros(len(examples), s, d)
    mask = torch.zeros(len(examples), s, dtype=torch.bool)
    for i, ex in enumerate(examples):
        vectors[i, : ex.vectors.shape[0]] = ex.vectors
        mask[i, : ex.vectors.shape[0]] = True
    return {
        "vectors": vectors,
        "mask": mask,
        "public": [ex.public for ex in examples],
        "targets": [ex.target for ex in examples],
    }


def payload_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The server part's loss on a batch of payload rows (:func:`~textfree.ppft.batches.collate_payloads`)."""
    return model(batch["vectors"], batch["mask"], public=batch["public"], targets=batch["targets"]).loss
