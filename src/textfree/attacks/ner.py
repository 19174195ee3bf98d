"""The NER attack on privatized text (RAPT section IV-A3): how many named entities (PII spans) survive T2T / PCT2T.

The attacker fine-tunes a token classifier (BIO tags over the dataset's entity types) on *clean* text with entity
spans, then runs it on the released text and extracts the entities it finds there. RAPT fine-tunes BERT-base; here the
encoder is any BERT-family model loaded through :func:`textfree.lm.loading.load_encoder` (all-MiniLM-L6-v2 by
default), trained by the one training loop (:func:`textfree.training.loop.fit`).

Words are the units of :func:`textfree.substitution.text.split_text` (``\\w+`` or one other non-space character), the
units T2T swaps one for one, so a gold span found on the original text sits at the same word positions of the
released text (:attr:`~textfree.substitution.t2t.T2TResult.output_words` is aligned word for word with the input).
Character spans become word spans (every word a span overlaps belongs to it) and BIO tags (:func:`char_spans_to_words`,
:func:`spans_to_bio`); predicted tags become word spans again (:func:`bio_to_spans`) and, on the released text,
character spans (:func:`word_spans_to_chars`). The classifier labels the first sub-token of each word.

Scores (:func:`score_entities`, micro-averaged over all texts):

* **entity** F1: a predicted span counts when it has the position and type of a gold entity *and* its words, read from
  the released text, equal the original entity's words (case-insensitive: tables such as MiniLM's are lower-case): the
  attacker has extracted the true entity string;
* **span** F1 (looser): position and type only.

RAPT's "empirical privacy" is ``1 - F1``. On clean text the two coincide (the attacker's reference).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable, Sequence

import torch

from ..training.checkpoint import CHECKPOINTS_DIR
from ..training.config import LoopConfig, _check_int
from ..training.loop import fit, param_groups
from ..training.runs import prepare_run_dir, total_wall_s, write_summary
from .threat import ThreatModel, check_grant, register_attack

__all__ = [
    "NER_REQUIRES",
    "OUTSIDE",
    "WordSpan",
    "EntityCounts",
    "NerScores",
    "NerTagger",
    "NerTrainConfig",
    "bio_labels",
    "word_offsets",
    "char_spans_to_words",
    "spans_to_bio",
    "bio_to_spans",
    "word_spans_to_chars",
    "read_spans",
    "score_entities",
    "entity_survival",
    "entity_unprotected",
    "group_split",
    "train_ner_tagger",
    "ner_attack",
]

log = logging.getLogger("textfree.attacks")

#: The attacker trains on clean text with entity annotations (a public NER corpus); it needs no mechanism knowledge.
NER_REQUIRES = ThreatModel(training_text="public")
OUTSIDE = "O"
TAGGER_DIR = "tagger"
NER_JSON = "ner.json"

#: ``(first word, end word (exclusive), entity type)``.
WordSpan = tuple[int, int, str]


# ------------------------------------------------------------------------------------------------ spans and tags
def bio_labels(entity_types: Sequence[str]) -> list[str]:
    """``["O", "B-T1", "I-T1", "B-T2", ...]`` for the entity types in the order given."""
    if isinstance(entity_types, str) or not entity_types:
        raise ValueError(f"entity_types must be a non-empty list of names, got {entity_types!r}")
    if len(set(entity_types)) != len(entity_types):
        raise ValueError(f"entity_types must be distinct, got {list(entity_types)}")
    for t in entity_types:
        if not isinstance(t, str) or not t or t == OUTSIDE or t.startswith(("B-", "I-")):
            raise ValueError(f"entity type {t!r} is not a usable name (non-empty, not 'O', no B-/I- prefix)")
    return [OUTSIDE] + [f"{p}-{t}" for t in entity_types for p in ("B", "I")]


def word_offsets(text: str) -> list[tuple[int, int]]:
    """Character ``(start, end)`` of every word of ``text`` (the words of :func:`split_text`)."""
    from ..substitution.text import split_text

    parts, offsets, at = split_text(text), [], 0
    for i, part in enumerate(parts):
        if i % 2:
            offsets.append((at, at + len(part)))
        at += len(part)
    return offsets


def char_spans_to_words(offsets: Sequence[tuple[int, int]], spans: Sequence[tuple[int, int, str]]) -> list[WordSpan]:
    """Word spans of character spans ``(start, end, type)`` (end exclusive): the words each span overlaps.

    A span that covers no word is dropped; of two spans that would share a word, the one that starts first (then the
    longer) is kept, as BIO tags cannot nest. The result is sorted."""
    out: list[WordSpan] = []
    taken = -1  # last word index already in a kept span
    for start, end, label in sorted(spans, key=lambda s: (s[0], -s[1])):
        words = [i for i, (a, b) in enumerate(offsets) if a < end and b > start]
        if words and words[0] > taken:
            out.append((words[0], words[-1] + 1, label))
            taken = words[-1]
    return out


def spans_to_bio(n_words: int, spans: Sequence[WordSpan]) -> list[str]:
    """BIO tags of ``n_words`` words from non-overlapping word spans."""
    tags = [OUTSIDE] * n_words
    for start, end, label in spans:
        if not 0 <= start < end <= n_words:
            raise ValueError(f"word span ({start}, {end}, {label!r}) outside {n_words} words")
        if any(t != OUTSIDE for t in tags[start:end]):
            raise ValueError(f"word span ({start}, {end}, {label!r}) overlaps another span")
        tags[start:end] = [f"B-{label}"] + [f"I-{label}"] * (end - start - 1)
    return tags


def bio_to_spans(tags: Sequence[str]) -> list[WordSpan]:
    """Word spans of BIO tags. ``I-T`` continues an entity of type T; an ``I-T`` after anything else starts one (the
    lenient reading of CoNLL's evaluation script)."""
    spans: list[WordSpan] = []
    start, label = None, None
    for i, tag in enumerate(list(tags) + [OUTSIDE]):
        prefix, _, kind = tag.partition("-")
        if tag != OUTSIDE and prefix not in ("B", "I"):
            raise ValueError(f"tag {tag!r} at word {i} is not O, B-<type> or I-<type>")
        continues = prefix == "I" and kind == label
        if label is not None and not continues:
            spans.append((start, i, label))
            start, label = None, None
        if tag != OUTSIDE and not continues:
            start, label = i, kind
    return spans


def word_spans_to_chars(offsets: Sequence[tuple[int, int]], spans: Sequence[WordSpan]) -> list[tuple[int, int, str]]:
    """Character spans (first word's start, last word's end, type) of word spans."""
    return [(offsets[s][0], offsets[e - 1][1], label) for s, e, label in spans]


def read_spans(words: Sequence[str], spans: Sequence[WordSpan]) -> list[tuple[str, ...]]:
    """The words at each span's positions (of a released text: what the attacker extracts there)."""
    return [tuple(words[s:e]) for s, e, _ in spans]


# ------------------------------------------------------------------------------------------------ scores
@dataclass(frozen=True)
class EntityCounts:
    """Matched, predicted and gold entities; precision, recall and F1 are 0 where their denominator is."""

    matched: int
    predicted: int
    gold: int

    @property
    def precision(self) -> float:
        return self.matched / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.matched / self.gold if self.gold else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclass(frozen=True)
class NerScores:
    """``entity``: position, type and the entity's words read from the released text; ``span``: position and type."""

    entity: EntityCounts
    span: EntityCounts


def _same_words(a: Sequence[str], b: Sequence[str]) -> bool:
    return len(a) == len(b) and all(x.lower() == y.lower() for x, y in zip(a, b))


def _check_aligned(name: str, *lists: Sequence) -> None:
    if len({len(x) for x in lists}) != 1:
        raise ValueError(f"{name}: per-text lists of different lengths {[len(x) for x in lists]}")


def score_entities(
    gold: Sequence[Sequence[WordSpan]],
    predicted: Sequence[Sequence[WordSpan]],
    original_words: Sequence[Sequence[str]],
    released_words: Sequence[Sequence[str]],
) -> NerScores:
    """Micro-averaged entity and span counts over texts (see the module docstring).

    >>> s = score_entities([[(0, 1, "PERSON")]], [[(0, 1, "PERSON")]], [["Ann", "ran"]], [["bob", "ran"]])
    >>> (s.span.f1, s.entity.f1)
    (1.0, 0.0)
    """
    _check_aligned("score_entities", gold, predicted, original_words, released_words)
    matched = exact = n_pred = n_gold = 0
    for g, p, orig, rel in zip(gold, predicted, original_words, released_words):
        if len(orig) != len(rel):
            raise ValueError(
                f"score_entities: {len(orig)} original words but {len(rel)} released (T2T keeps the count)"
            )
        gold_set = set(g)
        n_gold += len(gold_set)
        n_pred += len(set(p))
        for s, e, label in set(p) & gold_set:
            matched += 1
            exact += _same_words(rel[s:e], orig[s:e])
    return NerScores(entity=EntityCounts(exact, n_pred, n_gold), span=EntityCounts(matched, n_pred, n_gold))


def entity_survival(
    gold: Sequence[Sequence[WordSpan]], original_words: Sequence[Sequence[str]], released_words: Sequence[Sequence[str]]
) -> float:
    """Share of gold entities whose words all come out unchanged (case-insensitive): the most entity recall can be."""
    _check_aligned("entity_survival", gold, original_words, released_words)
    pairs = [(o[s:e], r[s:e]) for g, o, r in zip(gold, original_words, released_words) for s, e, _ in g]
    return sum(_same_words(a, b) for a, b in pairs) / len(pairs) if pairs else float("nan")


def entity_unprotected(gold: Sequence[Sequence[WordSpan]], privatized: Sequence[Sequence[bool]]) -> float:
    """Share of gold entities none of whose words went through the mechanism (``T2TResult.privatized``): released
    verbatim by construction (words outside the table, PCT2T's words outside the selected categories)."""
    _check_aligned("entity_unprotected", gold, privatized)
    flags = [not any(m[s:e]) for g, m in zip(gold, privatized) for s, e, _ in g]
    return sum(flags) / len(flags) if flags else float("nan")


def group_split(
    groups: Sequence[Hashable], heldout: float, *, generator: torch.Generator
) -> tuple[list[int], list[int]]:
    """Indices ``(train, held out)``: a seeded share ``heldout`` of the distinct groups (e.g. template ids) is held out
    whole, so no evaluated text shares its group with a training text. Each part keeps the input order."""
    if not isinstance(generator, torch.Generator):
        raise TypeError(f"group_split: generator must be a torch.Generator, got {type(generator).__name__}")
    if isinstance(heldout, bool) or not isinstance(heldout, (int, float)) or not 0 < heldout < 1:
        raise ValueError(f"group_split: heldout must be a number in (0, 1), got {heldout!r}")
    distinct = list(dict.fromkeys(groups))
    if len(distinct) < 2:
        raise ValueError(f"group_split: needs at least 2 distinct groups, got {len(distinct)}")
    n_held = min(max(1, round(heldout * len(distinct))), len(distinct) - 1)
    order = torch.randperm(len(distinct), generator=generator).tolist()
    held = {distinct[i] for i in order[:n_held]}
    train = [i for i, g in enumerate(groups) if g not in held]
    return train, [i for i, g in enumerate(groups) if g in held]


# ------------------------------------------------------------------------------------------------ the classifier
class NerTagger:
    """A token classifier with its tokenizer and BIO ``labels``; it tags the first sub-token of each word."""

    def __init__(self, model: Any, tokenizer: Any, labels: Sequence[str], *, max_tokens: int = 128) -> None:
        _check_int("max_tokens", max_tokens, 4)
        if not getattr(tokenizer, "is_fast", False):
            raise ValueError("NerTagger needs a fast tokenizer (its word_ids() align sub-tokens to words)")
        self.model, self.tokenizer, self.labels, self.max_tokens = model, tokenizer, list(labels), max_tokens
        self.index = {label: i for i, label in enumerate(self.labels)}

    @classmethod
    def from_encoder(cls, encoder: str, entity_types: Sequence[str], *, max_tokens: int = 128) -> "NerTagger":
        """A fresh token-classification head on ``encoder`` (a name or path; "default": all-MiniLM-L6-v2)."""
        from ..lm.loading import load_encoder

        labels = bio_labels(entity_types)
        model, tokenizer = load_encoder(encoder, head="token", num_labels=len(labels))
        model.config.id2label = dict(enumerate(labels))
        model.config.label2id = {label: i for i, label in enumerate(labels)}
        return cls(model, tokenizer, labels, max_tokens=max_tokens)

    @classmethod
    def load(cls, run: str | Path) -> "NerTagger":
        from ..atomic import read_json
        from ..lm.loading import load_encoder

        meta = read_json(Path(run) / NER_JSON)
        model, tokenizer = load_encoder(Path(run) / TAGGER_DIR, head="token", num_labels=len(meta["labels"]))
        return cls(model, tokenizer, meta["labels"], max_tokens=meta["max_tokens"])

    def save(self, run: str | Path) -> None:
        from ..atomic import write_json

        self.model.save_pretrained(Path(run) / TAGGER_DIR)
        self.tokenizer.save_pretrained(Path(run) / TAGGER_DIR)
        write_json(Path(run) / NER_JSON, {"labels": self.labels, "max_tokens": self.max_tokens})

    def encode(self, words: Sequence[str], tags: Sequence[str] | None = None) -> dict[str, list[int]]:
        """``input_ids``, ``word_ids`` (-1: no word) and, with ``tags``, ``labels`` (-100 but on first sub-tokens)."""
        enc = self.tokenizer(list(words), is_split_into_words=True, truncation=True, max_length=self.max_tokens)
        word_ids = [-1 if w is None else w for w in enc.word_ids()]
        out = {"input_ids": enc["input_ids"], "word_ids": word_ids}
        if tags is not None:
            if len(tags) != len(words):
                raise ValueError(f"{len(words)} words but {len(tags)} tags")
            unknown = sorted(set(tags) - set(self.index))
            if unknown:
                raise ValueError(f"tags {unknown} are not among the tagger's labels {self.labels}")
            out["labels"] = [
                self.index[tags[w]] if w >= 0 and (j == 0 or word_ids[j - 1] != w) else -100
                for j, w in enumerate(word_ids)
            ]
        return out

    def collate(self, examples: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
        """Right-padded ``input_ids``, ``attention_mask`` and (when the examples have them) ``labels``."""
        width = max(len(e["input_ids"]) for e in examples)

        def padded(key: str, fill: int) -> torch.Tensor:
            return torch.tensor([e[key] + [fill] * (width - len(e[key])) for e in examples])

        batch = {
            "input_ids": padded("input_ids", self.tokenizer.pad_token_id),
            "attention_mask": torch.tensor(
                [[1] * len(e["input_ids"]) + [0] * (width - len(e["input_ids"])) for e in examples]
            ),
        }
        if "labels" in examples[0]:
            batch["labels"] = padded("labels", -100)
        return batch

    @staticmethod
    def loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]).loss

    def predict_tags(self, texts: Sequence[Sequence[str]], *, batch_size: int = 32) -> list[list[str]]:
        """BIO tags of every word of every text (words past ``max_tokens`` get "O")."""
        self.model.eval()
        device = next(self.model.parameters()).device
        out: list[list[str]] = []
        for start in range(0, len(texts), batch_size):
            chunk = [self.encode(words) for words in texts[start : start + batch_size]]
            batch = self.collate(chunk)
            with torch.no_grad():
                ids = self.model(**{k: v.to(device) for k, v in batch.items()}).logits.argmax(-1).cpu().tolist()
            for words, enc, row in zip(texts[start : start + batch_size], chunk, ids):
                tags = [OUTSIDE] * len(words)
                for j, w in enumerate(enc["word_ids"]):
                    if w >= 0 and (j == 0 or enc["word_ids"][j - 1] != w):
                        tags[w] = self.labels[row[j]]
                out.append(tags)
        return out

    def predict(self, texts: Sequence[Sequence[str]], *, batch_size: int = 32) -> list[list[WordSpan]]:
        """The entity word spans found in every text."""
        return [bio_to_spans(tags) for tags in self.predict_tags(texts, batch_size=batch_size)]


# ------------------------------------------------------------------------------------------------ training
@dataclass(kw_only=True)
class NerTrainConfig(LoopConfig):
    """Fine-tune ``encoder`` with a token-classification head on clean text with entity spans (BIO over
    ``entity_types``), through the shared training loop."""

    encoder: str = field(default="default", metadata={"help": "The encoder to fine-tune ('default': MiniLM-L6)."})
    entity_types: list[str] = field(default_factory=list, metadata={"help": "The entity types (BIO labels)."})
    max_tokens: int = field(default=128, metadata={"help": "Texts are cut to this many encoder tokens."})
    data: list[str] = field(default_factory=list, metadata={"help": "Where the training texts came from (recorded)."})
    epochs: int = field(default=3, metadata={"help": "Passes over the training texts."})
    batch_size: int = field(default=16, metadata={"help": "Texts per optimizer step."})
    lr: float = field(default=1e-4, metadata={"help": "Peak learning rate (all encoder weights and the head)."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warm-up steps."})
    keep_final_checkpoint: bool = field(
        default=False, metadata={"help": "Keep checkpoints/ after the run finished (default: removed)."}
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.encoder, str) or not self.encoder.strip():
            raise ValueError(f"encoder must be a model name or path, got {self.encoder!r}")
        bio_labels(self.entity_types)
        self.entity_types = list(self.entity_types)
        _check_int("max_tokens", self.max_tokens, 4)
        _check_int("seed", self.seed, 0)
        if isinstance(self.data, str) or not all(isinstance(d, str) for d in self.data):
            raise ValueError(f"data must be a list of strings, got {self.data!r}")


def train_ner_tagger(
    cfg: NerTrainConfig,
    examples: Sequence[tuple[Sequence[str], Sequence[str]]],
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``cfg.encoder`` on ``examples`` (``(words, BIO tags)`` of clean texts), save the tagger into
    ``cfg.out`` and return the summary (+ ``"model"``: the :class:`NerTagger`)."""
    if not examples:
        raise ValueError("train_ner_tagger needs at least one training text")
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    tagger = NerTagger.from_encoder(cfg.encoder, cfg.entity_types, max_tokens=cfg.max_tokens)
    encoded = [tagger.encode(words, tags) for words, tags in examples]
    run = prepare_run_dir(cfg)
    optimizer = torch.optim.AdamW(param_groups([(list(tagger.model.parameters()), cfg.lr)], cfg.weight_decay))
    log.info("NER tagger: fine-tuning %s on %d texts, %d labels", cfg.encoder, len(encoded), len(tagger.labels))
    summary = fit(
        cfg=cfg,
        model=tagger.model,
        optimizer=optimizer,
        n_examples=len(encoded),
        epoch_examples=lambda epoch: encoded,
        collate=tagger.collate,
        loss_fn=NerTagger.loss,
        on_step=on_step,
    )
    tagger.model = summary["model"]
    tagger.save(run)
    if not cfg.keep_final_checkpoint:
        shutil.rmtree(run / CHECKPOINTS_DIR, ignore_errors=True)
    extra = {"stage": "ner_tagger", "texts": len(encoded), "total_wall_s": total_wall_s(summary, t0)}
    return write_summary(run, summary, extra) | {"model": tagger}


# ------------------------------------------------------------------------------------------------ the attack
@register_attack(
    "ner",
    requires=NER_REQUIRES,
    description="a token classifier trained on clean annotated text extracts entities from the released text",
)
def ner_attack(
    released_words: Sequence[Sequence[str]], tagger: NerTagger, *, threat: ThreatModel, batch_size: int = 32
) -> list[list[WordSpan]]:
    """The entity word spans ``tagger`` finds in each released text (read the strings with :func:`read_spans`)."""
    check_grant("ner", NER_REQUIRES, threat)
    return tagger.predict(released_words, batch_size=batch_size)
