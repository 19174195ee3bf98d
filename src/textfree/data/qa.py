"""Public multiple-choice QA (CommonsenseQA, ARC-Challenge) as :class:`MCQARecord` with an empty context.

* CommonsenseQA dev (``<shared>/qa/commonsenseqa/dev_rand_split.jsonl``, 1,221 rows; split ``"dev"``):
  ``{"id", "question", "question_concept", "choices": {"label": [...], "text": [...]}, "answerKey"}``.
  24 rows repeat an option text; the gold is located by label, so this is harmless.
* ARC-Challenge test (``<shared>/qa/arc/arc_challenge_test.jsonl``, 1,172 rows; split ``"test"``):
  ``{"index", "id", "question", "options": [{"label", "text"}], "answer"}`` with 3-5 options. The hub
  layout (``choices``/``answerKey``, as in ``allenai/ai2_arc``) is accepted too.

The gold option is the one whose label equals the answer key; labels are kept in
``attributes["option_labels"]``. The whole question is public text, so ``context`` is ``""``.
"""

from __future__ import annotations

import os
from typing import Any

from ._io import field, iter_jsonl
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .paths import normalize_split
from .records import MCQARecord

__all__ = ["load_csqa", "load_arc", "CSQA_DIR", "ARC_DIR"]

CSQA_DIR = "qa/commonsenseqa"
ARC_DIR = "qa/arc"


def _choices(row: dict[str, Any], where: str, line: int) -> tuple[list[str], list[str]]:
    """(labels, texts) from either ``choices: {label: [...], text: [...]}`` or ``options: [{label, text}]``."""
    if "choices" in row:
        choices = field(row, "choices", where, line, dict)
        labels, texts = choices.get("label"), choices.get("text")
        if not isinstance(labels, list) or not isinstance(texts, list) or len(labels) != len(texts):
            raise DataError("field 'choices' needs equal-length 'label' and 'text' lists", where, line)
        return [str(x) for x in labels], [str(x) for x in texts]
    options = field(row, "options", where, line, list)
    if not all(isinstance(o, dict) and "label" in o and "text" in o for o in options):
        raise DataError("field 'options' should be a list of {label, text} objects", where, line)
    return [str(o["label"]) for o in options], [str(o["text"]) for o in options]


def _convert(prefix: str, where: str, line: int, row: dict[str, Any]) -> MCQARecord:
    labels, texts = _choices(row, where, line)
    key_name = "answerKey" if "answerKey" in row else "answer"
    key = str(field(row, key_name, where, line, (str, int))).strip()
    if labels.count(key) != 1:
        raise DataError(f"answer key {key!r} is not exactly one of the option labels {labels}", where, line)
    attributes: dict[str, Any] = {"dataset": prefix, "option_labels": labels}
    if "question_concept" in row:
        attributes["question_concept"] = row["question_concept"]
    record_id = str(field(row, "id", where, line, (str, int)))
    return build(
        MCQARecord,
        where,
        line,
        f"{prefix}-{record_id}",
        "",
        field(row, "question", where, line),
        texts,
        labels.index(key),
        attributes,
    )


def load_csqa(
    path_or_name: str | os.PathLike[str] | None = None, split: str = "dev", limit: int | None = None
) -> list[MCQARecord]:
    """CommonsenseQA (local: dev only) as :class:`MCQARecord` with ids ``csqa-<id>``."""
    files = {"dev": "dev_rand_split.jsonl"}
    split = normalize_split(split, files)
    rows = iter_rows(
        path_or_name, split=split, what="CommonsenseQA", default_rel=CSQA_DIR, files=files, read=iter_jsonl
    )
    return load_rows(rows, lambda w, n, r: _convert("csqa", w, n, r), limit)


def load_arc(
    path_or_name: str | os.PathLike[str] | None = None,
    split: str = "test",
    limit: int | None = None,
    *,
    hub_config: str | None = "ARC-Challenge",
) -> list[MCQARecord]:
    """ARC-Challenge (local: test only) as :class:`MCQARecord` with ids ``arc-<id>``."""
    files = {"test": "arc_challenge_test.jsonl"}
    rows = iter_rows(
        path_or_name,
        split=split,
        what="ARC-Challenge",
        default_rel=ARC_DIR,
        files=files,
        read=iter_jsonl,
        hub_config=hub_config,
    )
    return load_rows(rows, lambda w, n, r: _convert("arc", w, n, r), limit)
