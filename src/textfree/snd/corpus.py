"""The public text an SnD denoiser is trained on (Mai et al. 2023, §3.4 and A.3.1: the server trains on public
corpora only, so the denoiser it hands out carries nothing of any user).

The paper mixes 20 public datasets; the offline stand-in here is the public general-domain text the project holds:

* ``alpaca`` and ``lima``: each record's prompt (instruction and input) and its response, as two texts;
* ``gsm8k``: the **train** split, each question and its worked solution (calculator notes ``<<...>>`` removed) as two
  texts;
* ``sst2``: the SST-2 **train** sentences and phrases;
* ``qqp_train`` (opt-in, not in the default mix): both questions of every pair of this project's QQP **training**
  part (the pairs :func:`textfree.data.tasks.qqp_is_test` leaves out of the test part), question-style public text
  of the kind SnD's QQP evaluation embeds.

Never PUPA, never a Pri-* set and never an evaluation split: the sources are fixed above (a source outside them is
refused), and as a second guard every text that equals (case and spacing aside) a text of an evaluation split the
project evaluates SnD on (GLUE SST-2 dev/test, CoLA dev, RTE dev, MRPC test, the QQP test part; GSM8K test) is
dropped, and the count recorded. Each source gives a seeded sample of at most ``limit_per_source`` of its texts;
the pool is de-duplicated, and a seeded ``val_size`` of it is held out for validation. :class:`Corpus` records
per-source counts and the sha256 of its texts for the run's summary.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

__all__ = [
    "CORPUS_SOURCES",
    "PUBLIC_SOURCES",
    "Corpus",
    "build_corpus",
    "evaluation_texts",
    "normalize_text",
    "source_texts",
]

log = logging.getLogger("textfree.snd")

#: The default mix of public sources (see the module docstring).
CORPUS_SOURCES = ("alpaca", "lima", "gsm8k", "sst2")
#: Every public source a denoiser may be trained on: the default mix and the opt-in ones.
PUBLIC_SOURCES = (*CORPUS_SOURCES, "qqp_train")
_CALCULATOR = re.compile(r"<<[^<>]*>>")
_SPACE = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """The form texts are compared in: case-folded, whitespace collapsed, stripped."""
    return _SPACE.sub(" ", text).strip().casefold()


def _instruct_texts(records) -> list[str]:
    out = []
    for r in records:
        prompt = r.instruction if not r.input.strip() else f"{r.instruction}\n{r.input}"
        out += [prompt, r.output]
    return out


def source_texts(source: str) -> list[str]:
    """Every text of one public ``source`` (:data:`PUBLIC_SOURCES`), in file order, empty ones left out."""
    from ..data import load_alpaca, load_gsm8k, load_lima, load_qqp, load_sst2
    from ..data.tasks import qqp_is_test

    if source == "alpaca":
        texts = _instruct_texts(load_alpaca())
    elif source == "lima":
        texts = _instruct_texts(load_lima())
    elif source == "gsm8k":
        texts = []
        for r in load_gsm8k(split="train", target="solution"):
            texts += [r.instruction, _CALCULATOR.sub("", r.output)]
    elif source == "sst2":
        texts = [r.text for r in load_sst2(split="train")]
    elif source == "qqp_train":
        texts = [t for r in load_qqp(split="dev") if not qqp_is_test(r.id) for t in (r.text_a, r.text_b)]
    else:
        raise ValueError(f"unknown corpus source {source!r}; the public sources are {', '.join(PUBLIC_SOURCES)}")
    return [t.strip() for t in texts if t.strip()]


def evaluation_texts() -> set[str]:
    """The normalised texts of the evaluation splits (see the module docstring) that are present in the shared data;
    a split whose files are absent is skipped (nothing of it can leak in either)."""
    from ..data import DataNotFoundError, load_cola, load_gsm8k, load_mrpc, load_qqp, load_rte, load_sst2
    from ..data.tasks import qqp_is_test

    def qqp_test(split: str):  # only the QQP test part is evaluated (the training part trains the classifier)
        return [r for r in load_qqp(split=split) if qqp_is_test(r.id)]

    loaders = [
        (load_sst2, "dev", ("text",)),
        (load_sst2, "test", ("text",)),
        (load_cola, "dev", ("text",)),
        (load_rte, "dev", ("text_a", "text_b")),
        (load_mrpc, "test", ("text_a", "text_b")),
        (qqp_test, "dev", ("text_a", "text_b")),
    ]
    out: set[str] = set()
    for loader, split, keys in loaders:
        try:
            records = loader(split=split)
        except DataNotFoundError:
            continue
        out.update(normalize_text(getattr(r, k)) for r in records for k in keys)
    try:
        for r in load_gsm8k(split="test", target="solution"):
            out.update((normalize_text(r.instruction), normalize_text(_CALCULATOR.sub("", r.output))))
    except DataNotFoundError:
        pass
    out.discard("")
    return out


@dataclass(frozen=True)
class Corpus:
    """Training and validation texts, with where they came from."""

    train: list[str]
    val: list[str]
    counts: dict[str, int] = field(default_factory=dict)
    dropped_duplicates: int = 0
    dropped_evaluation: int = 0

    @property
    def sha256(self) -> str:
        """sha256 of the texts (training, then validation) as JSON."""
        doc = json.dumps({"train": self.train, "val": self.val}, ensure_ascii=False, sort_keys=True)
        return hashlib.sha256(doc.encode("utf-8")).hexdigest()

    def record(self) -> dict[str, Any]:
        """What a run's summary records of its corpus."""
        return {
            "sources": dict(self.counts),
            "train": len(self.train),
            "val": len(self.val),
            "dropped_duplicates": self.dropped_duplicates,
            "dropped_evaluation_overlap": self.dropped_evaluation,
            "sha256": self.sha256,
        }


def _sample(texts: list[str], limit: int | None, seed: int, source: str) -> list[str]:
    if limit is None or len(texts) <= limit:
        return list(texts)
    # str seeds hash with sha512 in random.Random: the same sample on every machine and Python run
    picked = random.Random(f"snd-corpus:{seed}:{source}").sample(range(len(texts)), limit)
    return [texts[i] for i in sorted(picked)]


def build_corpus(
    sources: Sequence[str] = CORPUS_SOURCES,
    *,
    limit_per_source: int | None = None,
    val_size: int = 256,
    seed: int = 0,
    texts: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
) -> Corpus:
    """The denoiser's corpus: a seeded sample of at most ``limit_per_source`` texts of each source, de-duplicated
    (first occurrence kept), without any text of an evaluation split, then ``val_size`` texts held out (seeded).

    ``texts`` replaces the sources (tests; counted as source ``"texts"``); ``exclude`` replaces the evaluation texts
    to leave out (default: :func:`evaluation_texts`)."""
    if isinstance(val_size, bool) or not isinstance(val_size, int) or val_size < 1:
        raise ValueError(f"val_size must be an integer >= 1, got {val_size!r}")
    if texts is not None:
        texts = list(texts)
        if not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be strings")
        per_source = {"texts": [t.strip() for t in texts if t.strip()]}
    else:
        bad = [s for s in sources if s not in PUBLIC_SOURCES]
        if bad:
            raise ValueError(
                f"corpus source(s) {bad} refused: a denoiser trains on public text only "
                f"({', '.join(PUBLIC_SOURCES)}), never on PUPA, Pri-* or an evaluation split"
            )
        per_source = {s: _sample(source_texts(s), limit_per_source, seed, s) for s in dict.fromkeys(sources)}
    banned = set(evaluation_texts() if exclude is None else (normalize_text(t) for t in exclude))
    seen: set[str] = set()
    pool: list[str] = []
    counts: dict[str, int] = {}
    duplicates = evaluation = 0
    for source, items in per_source.items():
        counts[source] = 0
        for text in items:
            key = normalize_text(text)
            if key in banned:
                evaluation += 1
            elif key in seen:
                duplicates += 1
            else:
                seen.add(key)
                pool.append(text)
                counts[source] += 1
    if len(pool) <= val_size:
        raise ValueError(
            f"the corpus has {len(pool)} distinct texts: too few for val_size {val_size} and a training set"
        )
    order = list(range(len(pool)))
    random.Random(f"snd-corpus-val:{seed}").shuffle(order)
    held = set(order[:val_size])
    corpus = Corpus(
        train=[t for i, t in enumerate(pool) if i not in held],
        val=[t for i, t in enumerate(pool) if i in held],
        counts=counts,
        dropped_duplicates=duplicates,
        dropped_evaluation=evaluation,
    )
    log.info(
        "SnD corpus: %d training + %d validation texts (%s); %d duplicates and %d evaluation texts dropped",
        len(corpus.train),
        len(corpus.val),
        ", ".join(f"{k} {v}" for k, v in counts.items()),
        duplicates,
        evaluation,
    )
    return corpus
