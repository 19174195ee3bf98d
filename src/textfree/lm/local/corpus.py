"""The general-domain text the local decoder is pretrained on, assembled from the shared data directory.

Sources (train splits only, read with the loaders in :mod:`textfree.data`; see :data:`GENERAL_SOURCES`):

=============  ==========================================  ===================================================
source         file                                         document
=============  ==========================================  ===================================================
alpaca         instruct/alpaca_en_demo.json (999)           ``Question: <instruction>\\n<input>\\nAnswer: <output>``
lima           instruct/lima.json (1,029)                   the same, earlier turns (``history``) first
gsm8k-train    gsm8k/train.jsonl (7,473)                    ``Question: <question>\\nAnswer: <solution>``, the
                                                            ``<<48/2=24>>`` calculator notes removed and the final
                                                            ``#### 72`` written ``The answer is 72.``
sst2-train     glue/SST-2/train_full.tsv (67,349)           the sentence (lower-cased, tokenised phrases)
cola-train     glue/CoLA/train.tsv + val.tsv (8,551)        the sentence, acceptable ones only (label 1)
rte-train      glue/RTE/train.tsv (2,490)                   each sentence of the pair
mrpc-train     glue/MRPC/msr_paraphrase_train.txt (4,076)   each sentence of the pair
qqp            glue/QQP/qqp_dev_subset.tsv (23,497)         each question of the pair
trustpilot     trustpilot-milanlp/english_train.csv (5,004) the review (empty ones dropped)
legalbench     legalbench/<task>/train.tsv (7 tasks)        every text column (not ``index``/``answer``/``slice``)
=============  ==========================================  ===================================================

CoLA's unacceptable sentences (label 0) are left out on purpose: they are ungrammatical by construction and a
language model should not learn them. QQP is the only local QQP file (a subset of GLUE *dev*); nothing here
evaluates on QQP with this decoder, but say so if you ever do.

**Never included** (:data:`EXCLUDED`): Pri-DDXPlus and Pri-SLJA (the private evaluation domain), CommonsenseQA
dev and ARC-Challenge test (general-domain evaluation), GSM8K test, and every dev/test split above. Extra text
files (the hook below) that live under those folders of the shared data directory are refused.

Empty texts and exact duplicates (after stripping) are dropped, keeping the first occurrence in source order.
Then, with ``decontaminate=True`` (the default), any document that contains an evaluation text verbatim (case and
whitespace aside) is dropped as well: a CommonsenseQA dev / ARC test / GSM8K test question or a Pri-DDXPlus /
Pri-SLJA private context of 4 words or more, from whichever of those files the shared data directory holds
(one LIMA answer quotes an ARC question word for word). Finally the documents are shuffled with
``random.Random(seed)``. The manifest records, per source, the file,
split, number of documents and characters, and a SHA-256 of the final corpus.

Hook for in-domain *public* text (not used by default): ``build_corpus(extra_text_files=[...])`` (or
``DecoderPretrainConfig.extra_text_files``) appends documents from ``.txt`` files (one document per
blank-line-separated paragraph), ``.jsonl`` files (a ``"text"`` field per line) or ``.json`` files (a list of
strings or of ``{"text": ...}`` objects). Use it for public domain text only (e.g. medical or legal text that is
not from the evaluation sets); :func:`check_public_path` refuses the protected evaluation data.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import random
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from textfree.data import (
    load_alpaca,
    load_cola,
    load_gsm8k,
    load_lima,
    load_mrpc,
    load_qqp,
    load_rte,
    load_sst2,
    load_trustpilot,
    shared_data_dir,
)
from textfree.data.errors import DataNotFoundError
from textfree.data.glue import GLUE_DIRS
from textfree.data.gsm8k import GSM8K_DIR
from textfree.data.instruct import ALPACA_PATH, LIMA_PATH
from textfree.data.trustpilot import TRUSTPILOT_DIR

__all__ = [
    "Corpus",
    "CorpusSource",
    "CorpusError",
    "GENERAL_SOURCES",
    "EXCLUDED",
    "PROTECTED_PATHS",
    "LEGALBENCH_DIR",
    "build_corpus",
    "corpus_from_texts",
    "format_qa",
    "clean_gsm8k_solution",
    "load_text_file",
    "check_public_path",
    "evaluation_texts",
    "Decontaminator",
]

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))

LEGALBENCH_DIR = "legalbench"

#: (dataset, split) pairs that must never reach the pretraining corpus, with the reason.
EXCLUDED: dict[tuple[str, str], str] = {
    ("pri-ddx", "dev"): "private evaluation domain (PPFT medical)",
    ("pri-ddx", "test"): "private evaluation domain (PPFT medical)",
    ("pri-slja", "dev"): "private evaluation domain (PPFT legal)",
    ("pri-slja", "test"): "private evaluation domain (PPFT legal)",
    ("csqa", "dev"): "general-domain evaluation (PPFT Table 4)",
    ("arc", "test"): "general-domain evaluation (PPFT Table 4)",
    ("gsm8k", "test"): "general-domain evaluation",
}

#: Paths under the shared data directory that extra text files may not come from.
PROTECTED_PATHS: tuple[str, ...] = ("privacyrestore", "qa", "gsm8k/test.jsonl")


class CorpusError(ValueError):
    """The corpus cannot be built as asked (an excluded source, a protected file, nothing left)."""


@dataclass(frozen=True)
class CorpusSource:
    """One general-domain source: where it lives and how its records become documents.

    Attributes:
        name: the source's name in the manifest (``"gsm8k-train"``).
        dataset: the registered dataset name (``textfree.data.load_dataset``) or ``"legalbench"``.
        split: the split read; ``(dataset, split)`` must not be in :data:`EXCLUDED`.
        path: the file or folder relative to the shared data directory (for the manifest).
        documents: ``documents(data_dir) -> list[str]``.
    """

    name: str
    dataset: str
    split: str
    path: str
    documents: Callable[[Path], list[str]]


# ------------------------------------------------------------------------------------------- formatting
_CALC = re.compile(r"<<[^<>]*>>")


def format_qa(question: str, answer: str, context: str = "") -> str:
    """``"Question: <question>\\n<context>\\nAnswer: <answer>"`` (no context line when it is empty)."""
    lines = [f"Question: {question.strip()}"]
    if context.strip():
        lines.append(context.strip())
    lines.append(f"Answer: {answer.strip()}")
    return "\n".join(lines)


def clean_gsm8k_solution(solution: str) -> str:
    """Drop GSM8K's ``<<a*b=c>>`` calculator notes and write the final ``#### x`` as ``The answer is x.``"""
    text = _CALC.sub("", solution)
    if "####" in text:
        body, final = text.rsplit("####", 1)
        text = f"{body.rstrip()}\nThe answer is {final.strip()}."
    return text.strip()


def _instruct_docs(loader: Callable[..., list]) -> Callable[[Path], list[str]]:
    def documents(data_dir: Path) -> list[str]:
        path = data_dir / (ALPACA_PATH if loader is load_alpaca else LIMA_PATH)
        docs = []
        for r in loader(path):
            turns = [format_qa(str(u), str(a)) for u, a in (r.attributes.get("history") or []) if u and a]
            turns.append(format_qa(r.instruction, r.output, r.input))
            docs.append("\n\n".join(turns))
        return docs

    return documents


def _gsm8k_docs(data_dir: Path) -> list[str]:
    records = load_gsm8k(data_dir / GSM8K_DIR, split="train", target="solution")
    return [format_qa(r.instruction, clean_gsm8k_solution(r.attributes["solution"])) for r in records]


def _text_docs(loader: Callable[..., list], rel: str, split: str, keep: Callable[[Any], bool] = lambda r: True):
    def documents(data_dir: Path) -> list[str]:
        return [r.text for r in loader(data_dir / rel, split=split) if keep(r)]

    return documents


def _pair_docs(loader: Callable[..., list], rel: str, split: str):
    def documents(data_dir: Path) -> list[str]:
        return [t for r in loader(data_dir / rel, split=split) for t in (r.text_a, r.text_b)]

    return documents


_LEGALBENCH_SKIP = {"index", "answer", "label", "slice"}


def _legalbench_docs(data_dir: Path) -> list[str]:
    root = data_dir / LEGALBENCH_DIR
    if not root.is_dir():
        raise DataNotFoundError("LegalBench folder not found", root)
    docs = []
    for task in sorted(p for p in root.iterdir() if p.is_dir()):
        train = task / "train.tsv"  # test.tsv is never read
        if not train.is_file():
            continue
        with open(train, encoding="utf-8-sig", newline="") as handle:
            for row in csv.DictReader(handle, delimiter="\t"):
                docs.extend(v for k, v in row.items() if k and k.lower() not in _LEGALBENCH_SKIP and v)
    return docs


#: The default general-domain sources, in the order they are read (before the seeded shuffle).
GENERAL_SOURCES: tuple[CorpusSource, ...] = (
    CorpusSource("alpaca", "alpaca", "train", ALPACA_PATH, _instruct_docs(load_alpaca)),
    CorpusSource("lima", "lima", "train", LIMA_PATH, _instruct_docs(load_lima)),
    CorpusSource("gsm8k-train", "gsm8k", "train", f"{GSM8K_DIR}/train.jsonl", _gsm8k_docs),
    CorpusSource("sst2-train", "sst2", "train", GLUE_DIRS["sst2"], _text_docs(load_sst2, GLUE_DIRS["sst2"], "train")),
    CorpusSource(
        "cola-train",
        "cola",
        "train",
        GLUE_DIRS["cola"],
        _text_docs(load_cola, GLUE_DIRS["cola"], "train", keep=lambda r: r.label == 1),
    ),
    CorpusSource("rte-train", "rte", "train", GLUE_DIRS["rte"], _pair_docs(load_rte, GLUE_DIRS["rte"], "train")),
    CorpusSource("mrpc-train", "mrpc", "train", GLUE_DIRS["mrpc"], _pair_docs(load_mrpc, GLUE_DIRS["mrpc"], "train")),
    CorpusSource("qqp", "qqp", "dev", GLUE_DIRS["qqp"], _pair_docs(load_qqp, GLUE_DIRS["qqp"], "dev")),
    CorpusSource(
        "trustpilot-train", "trustpilot", "train", TRUSTPILOT_DIR, _text_docs(load_trustpilot, TRUSTPILOT_DIR, "train")
    ),
    CorpusSource("legalbench-train", "legalbench", "train", LEGALBENCH_DIR, _legalbench_docs),
)


# -------------------------------------------------------------------------------------------- extra text
def check_public_path(path: str | os.PathLike, data_dir: Path | None = None) -> Path:
    """``path`` resolved, or :class:`CorpusError` if it lies in a protected folder of the shared data."""
    resolved = Path(path).expanduser().resolve()
    root = data_dir if data_dir is not None else shared_data_dir()
    if root is not None:
        for rel in PROTECTED_PATHS:
            protected = (Path(root) / rel).resolve()
            if resolved == protected or protected in resolved.parents:
                raise CorpusError(f"{resolved} is evaluation / private data ({rel}) and may not be pretrained on")
    return resolved


def load_text_file(path: str | os.PathLike) -> list[str]:
    """Documents from a ``.txt`` (blank-line-separated paragraphs), ``.jsonl`` or ``.json`` file."""
    path = Path(path)
    if not path.is_file():
        raise DataNotFoundError("extra text file not found", path)
    text = path.read_text(encoding="utf-8-sig")
    if path.suffix == ".jsonl":
        items: Iterable[Any] = [json.loads(line) for line in text.splitlines() if line.strip()]
    elif path.suffix == ".json":
        items = json.loads(text)
        if not isinstance(items, list):
            raise CorpusError(f"{path}: expected a JSON list of strings or {{'text': ...}} objects")
    else:
        return [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    docs = []
    for i, item in enumerate(items):
        value = item.get("text") if isinstance(item, dict) else item
        if not isinstance(value, str):
            raise CorpusError(f"{path}: item {i} has no string 'text'")
        docs.append(value)
    return docs


# ----------------------------------------------------------------------------------------- decontamination
def evaluation_texts(data_dir: Path) -> dict[str, list[str]]:
    """The texts of every :data:`EXCLUDED` set found under ``data_dir`` (``"csqa:dev" -> questions``).

    Questions for CommonsenseQA / ARC / GSM8K, private contexts for Pri-DDXPlus / Pri-SLJA (their question is a
    fixed template). Sets whose files are absent are left out.
    """
    from textfree.data import get_dataset_spec

    out: dict[str, list[str]] = {}
    for dataset, split in EXCLUDED:
        spec = get_dataset_spec(dataset)
        try:
            records = spec.loader(data_dir / spec.default_path, split=split, limit=None)
        except DataNotFoundError:
            continue
        if dataset == "gsm8k":
            texts = [r.instruction for r in records]
        elif dataset.startswith("pri-"):
            texts = [r.context for r in records]
        else:
            texts = [r.question for r in records]
        out[f"{dataset}:{split}"] = texts
    return out


_WORD_EDGE = re.compile(r"^\W+|\W+$")


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _key_words(text: str) -> list[str]:
    return [_WORD_EDGE.sub("", w) for w in text.split()]


class Decontaminator:
    """Finds documents that contain any of a set of texts verbatim (case and whitespace aside).

    An index from each text's first :attr:`N` words (punctuation trimmed) to the text gives candidates; a
    substring test confirms them. Texts shorter than :attr:`N` words are ignored (too generic to mean a leak).
    """

    N = 4

    def __init__(self, texts_by_set: dict[str, list[str]]):
        self._index: dict[tuple[str, ...], list[tuple[str, str]]] = {}
        for name, texts in texts_by_set.items():
            for text in texts:
                norm = _norm(text)
                words = _key_words(norm)
                if len(words) >= self.N and all(words[: self.N]):
                    self._index.setdefault(tuple(words[: self.N]), []).append((name, norm))

        self.sets = {name: len(texts) for name, texts in texts_by_set.items()}

    def __len__(self) -> int:
        return sum(len(v) for v in self._index.values())

    def match(self, doc: str) -> str | None:
        """The name of the set whose text ``doc`` contains, or ``None``."""
        norm = _norm(doc)
        words = _key_words(norm)
        for i in range(len(words) - self.N + 1):
            for name, text in self._index.get(tuple(words[i : i + self.N]), ()):
                if text in norm:
                    return name
        return None


# ------------------------------------------------------------------------------------------------ corpus
@dataclass
class Corpus:
    """Shuffled documents plus the manifest that says where they came from."""

    texts: list[str]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def n_chars(self) -> int:
        return sum(len(t) for t in self.texts)


def _sha256(texts: Sequence[str]) -> str:
    h = hashlib.sha256()
    for t in texts:
        h.update(t.encode("utf-8"))
        h.update(b"\x00")
    return h.hexdigest()


def _assemble(
    named: list[tuple[dict[str, Any], list[str]]], seed: int, dedupe: bool, decontaminator: Decontaminator | None = None
) -> Corpus:
    seen: set[str] = set()
    texts: list[str] = []
    sources = []
    for info, docs in named:
        kept = dropped = 0
        chars = 0
        contaminated: dict[str, int] = {}
        for doc in docs:
            doc = doc.strip()
            if not doc or (dedupe and doc in seen):
                dropped += 1
                continue
            seen.add(doc)
            leak = decontaminator.match(doc) if decontaminator is not None else None
            if leak is not None:
                contaminated[leak] = contaminated.get(leak, 0) + 1
                continue
            texts.append(doc)
            kept += 1
            chars += len(doc)
        sources.append(
            {
                **info,
                "documents": kept,
                "characters": chars,
                "dropped_empty_or_duplicate": dropped,
                "dropped_contaminated": contaminated,
            }
        )
    if not texts:
        raise CorpusError("the corpus is empty")
    random.Random(seed).shuffle(texts)
    manifest = {
        "seed": seed,
        "dedupe": dedupe,
        "documents": len(texts),
        "characters": sum(len(t) for t in texts),
        "sha256": _sha256(texts),
        "sources": sources,
        "excluded": [f"{d}:{s} ({why})" for (d, s), why in EXCLUDED.items()],
        "decontaminated_against": None if decontaminator is None else decontaminator.sets,
    }
    return Corpus(texts, manifest)


def corpus_from_texts(texts: Sequence[str], *, seed: int = 0, dedupe: bool = False, name: str = "texts") -> Corpus:
    """A corpus from an explicit list of documents (tests, custom data); duplicates kept unless ``dedupe``."""
    if isinstance(texts, str):
        raise TypeError("texts must be a sequence of documents, not one string")
    return _assemble([({"name": name, "dataset": "explicit", "split": None, "path": None}, list(texts))], seed, dedupe)


def build_corpus(
    data_dir: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    sources: Sequence[str] | None = None,
    extra_text_files: Sequence[str | os.PathLike] = (),
    dedupe: bool = True,
    decontaminate: bool = True,
) -> Corpus:
    """The general-domain pretraining corpus from the shared data directory.

    Args:
        data_dir: the shared data directory; default :func:`textfree.data.shared_data_dir`.
        seed: seed of the document shuffle.
        sources: names from :data:`GENERAL_SOURCES` to use (default: all).
        extra_text_files: in-domain *public* text to add (see the module docstring); empty by default.
        dedupe: drop exact duplicate documents.
        decontaminate: drop documents that contain an evaluation text (see the module docstring).

    Raises:
        DataNotFoundError: no shared data directory, or a source file is missing.
        CorpusError: an unknown or excluded source, a protected extra file, an empty corpus.
    """
    root = Path(data_dir) if data_dir is not None else shared_data_dir()
    if root is None or not root.is_dir():
        raise DataNotFoundError("the shared data directory was not found (set TEXTFREE_DATA)", root)
    by_name = {s.name: s for s in GENERAL_SOURCES}
    chosen = list(GENERAL_SOURCES) if sources is None else []
    for name in sources or ():
        if name not in by_name:
            raise CorpusError(f"unknown corpus source {name!r}; known: {sorted(by_name)}")
        chosen.append(by_name[name])
    named: list[tuple[dict[str, Any], list[str]]] = []
    for src in chosen:
        if (src.dataset, src.split) in EXCLUDED:
            raise CorpusError(f"{src.dataset}:{src.split} is excluded: {EXCLUDED[(src.dataset, src.split)]}")
        info = {"name": src.name, "dataset": src.dataset, "split": src.split, "path": src.path}
        named.append((info, src.documents(root)))
    for extra in extra_text_files:
        path = check_public_path(extra, root)
        named.append(
            ({"name": f"extra:{path.name}", "dataset": "extra", "split": None, "path": str(path)}, load_text_file(path))
        )
    decontaminator = Decontaminator(evaluation_texts(root)) if decontaminate else None
    return _assemble(named, seed, dedupe, decontaminator)
