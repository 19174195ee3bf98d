"""GLUE tasks used by RAPT and Split-N-Denoise: SST-2, CoLA, RTE, MRPC and a QQP dev subset.

Default locations are under ``<shared>/glue/<TASK>/``; formats follow each folder's ``SOURCE.txt``:

=========  =====================================================  ===============================  ==========
task       files (split -> file)                                  format                           quoting
=========  =====================================================  ===============================  ==========
SST-2      train -> train_full.tsv (67,349), dev -> dev.tsv       header ``sentence  label``        none
           (872), test -> test-labeled.tsv (1,821)
CoLA       train -> train.tsv + val.tsv (7,250 + 1,301 = GLUE     no header: ``source  label       none
           train 8,551), dev -> dev.tsv (1,043)                   mark  sentence``
RTE        train -> train.tsv (2,490), dev -> dev.tsv (277)       header ``sentence1 sentence2     CSV-style
                                                                  label idx`` (HF export)          (``""``)
MRPC       train -> msr_paraphrase_train.txt (4,076),             MSRP: BOM, header ``Quality      none
           test -> msr_paraphrase_test.txt (1,725)                #1 ID #2 ID #1 String #2 String``
QQP        dev -> qqp_dev_subset.tsv (23,497 of GLUE dev)          no header: ``id qid1 qid2        CSV-style
                                                                  question1 question2 is_duplicate``
=========  =====================================================  ===============================  ==========

"none" means ``csv.QUOTE_NONE``: the SST-2, CoLA and MRPC files contain literal ``"`` characters that are part
of the text. RTE and QQP were written by pandas and quote fields containing ``"`` (doubling inner quotes),
so they are read with standard CSV quoting.

Labels: SST-2 1 = positive; CoLA 1 = acceptable; RTE 0 = entailment, 1 = not_entailment (HF convention);
MRPC 1 = paraphrase; QQP 1 = duplicate. Texts are stripped of surrounding whitespace.

Known data quirk, repaired: the first QQP row has a space instead of a tab before its label
(``"... exam jlpt5? 0"``). A QQP row with 5 fields whose last field ends in whitespace + ``0``/``1`` is split
there; any other wrong field count is a ``DataError``. GLUE's MRPC train/dev partition (by an ID list) is not
reproduced: ``train`` is the whole MSRP training file.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

from ._io import iter_delimited
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .paths import infer_split
from .records import PairRecord, TextRecord

__all__ = ["load_sst2", "load_cola", "load_rte", "load_mrpc", "load_qqp", "GLUE_DIRS"]

GLUE_DIRS = {"sst2": "glue/SST-2", "cola": "glue/CoLA", "rte": "glue/RTE", "mrpc": "glue/MRPC", "qqp": "glue/QQP"}
_QQP_TAIL = re.compile(r"^(.*?)\s+([01])$", re.DOTALL)

PathOrName = str | os.PathLike[str] | None


def _hub_config(path_or_name: PathOrName, task: str, hub_config: str | None) -> str | None:
    if hub_config is not None:
        return hub_config
    if isinstance(path_or_name, str) and path_or_name.rstrip("/").split("/")[-1] == "glue":
        return task
    return None


def _int_label(value: Any, where: str, line: int, allowed: tuple[int, ...] = (0, 1)) -> int | None:
    """Parse a 0/1 label; ``-1`` (hidden test labels on the hub) becomes ``None``."""
    try:
        label = int(str(value).strip())
    except ValueError:
        raise DataError(f"label {value!r} is not an integer", where, line) from None
    if label == -1:
        return None
    if label not in allowed:
        raise DataError(f"label {label} not in {allowed}", where, line)
    return label


def _read_header_rows(path: Path, *, quoting: int, columns: tuple[str, ...]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Rows of a TSV with a header that must start with ``columns``."""
    rows = iter_delimited(path, delimiter="\t", quoting=quoting)
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError("empty file (no header)", path, 1) from None
    header = [h.strip() for h in header]
    if tuple(header[: len(columns)]) != columns:
        raise DataError(f"expected header columns {list(columns)}, got {header}", path, 1)
    for line, row in rows:
        if len(row) != len(header):
            raise DataError(f"expected {len(header)} fields ({', '.join(header)}), got {len(row)}", path, line)
        yield line, dict(zip(header, row))


def _read_cola(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, row in iter_delimited(path, delimiter="\t", quoting=csv.QUOTE_NONE, n_fields=4):
        yield line, {"source": row[0], "label": row[1], "mark": row[2], "sentence": row[3], "_file": path.name}


def _read_qqp(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, row in iter_delimited(path, delimiter="\t"):
        if len(row) == 5 and (match := _QQP_TAIL.match(row[4])):
            row = row[:4] + [match.group(1), match.group(2)]
        if len(row) != 6:
            raise DataError(
                f"expected 6 fields (id, qid1, qid2, question1, question2, is_duplicate), got {len(row)}", path, line
            )
        yield line, dict(zip(("id", "qid1", "qid2", "question1", "question2", "is_duplicate"), row))


def _text(row: dict[str, Any], key: str, where: str, line: int) -> str:
    if key not in row or row[key] is None:
        raise DataError(f"missing field {key!r}", where, line)
    return str(row[key]).strip()


def load_sst2(
    path_or_name: PathOrName = None, split: str = "train", limit: int | None = None, *, hub_config: str | None = None
) -> list[TextRecord]:
    """SST-2 sentences with sentiment labels (1 = positive) as :class:`TextRecord` (ids ``sst2-<split>-<n>``)."""
    files = {"train": "train_full.tsv", "dev": "dev.tsv", "test": "test-labeled.tsv"}
    split = infer_split(path_or_name, split, files)
    read = partial(_read_header_rows, quoting=csv.QUOTE_NONE, columns=("sentence", "label"))
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> TextRecord:
        return build(
            TextRecord,
            where,
            line,
            f"sst2-{split}-{next(counter)}",
            _text(row, "sentence", where, line),
            _int_label(row.get("label"), where, line),
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="SST-2",
        default_rel=GLUE_DIRS["sst2"],
        files=files,
        read=read,
        hub_config=_hub_config(path_or_name, "sst2", hub_config),
    )
    return load_rows(rows, convert, limit)


def load_cola(
    path_or_name: PathOrName = None, split: str = "train", limit: int | None = None, *, hub_config: str | None = None
) -> list[TextRecord]:
    """CoLA sentences with acceptability labels (1 = acceptable); ``attributes``: ``source``, ``mark``."""
    files = {"train": ("train.tsv", "val.tsv"), "dev": "dev.tsv"}
    split = infer_split(path_or_name, split, files)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> TextRecord:
        attributes = {k: row[k] for k in ("source", "mark") if k in row}
        return build(
            TextRecord,
            where,
            line,
            f"cola-{split}-{next(counter)}",
            _text(row, "sentence", where, line),
            _int_label(row.get("label"), where, line),
            attributes,
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="CoLA",
        default_rel=GLUE_DIRS["cola"],
        files=files,
        read=_read_cola,
        hub_config=_hub_config(path_or_name, "cola", hub_config),
    )
    return load_rows(rows, convert, limit)


def load_rte(
    path_or_name: PathOrName = None, split: str = "train", limit: int | None = None, *, hub_config: str | None = None
) -> list[PairRecord]:
    """RTE premise/hypothesis pairs (0 = entailment, 1 = not_entailment) as :class:`PairRecord`."""
    files = {"train": "train.tsv", "dev": "dev.tsv"}
    split = infer_split(path_or_name, split, files)
    read = partial(_read_header_rows, quoting=csv.QUOTE_MINIMAL, columns=("sentence1", "sentence2", "label"))
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> PairRecord:
        idx = row.get("idx", next(counter))
        return build(
            PairRecord,
            where,
            line,
            f"rte-{split}-{str(idx).strip()}",
            _text(row, "sentence1", where, line),
            _text(row, "sentence2", where, line),
            _int_label(row.get("label"), where, line),
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="RTE",
        default_rel=GLUE_DIRS["rte"],
        files=files,
        read=read,
        hub_config=_hub_config(path_or_name, "rte", hub_config),
    )
    return load_rows(rows, convert, limit)


def load_mrpc(
    path_or_name: PathOrName = None, split: str = "train", limit: int | None = None, *, hub_config: str | None = None
) -> list[PairRecord]:
    """MRPC sentence pairs (1 = paraphrase); ``attributes``: ``id1``, ``id2`` (MSRP sentence ids)."""
    files = {"train": "msr_paraphrase_train.txt", "test": "msr_paraphrase_test.txt"}
    split = infer_split(path_or_name, split, files)
    columns = ("Quality", "#1 ID", "#2 ID", "#1 String", "#2 String")
    read = partial(_read_header_rows, quoting=csv.QUOTE_NONE, columns=columns)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> PairRecord:
        n = next(counter)
        if "#1 String" in row:  # local MSRP format
            a, b = _text(row, "#1 String", where, line), _text(row, "#2 String", where, line)
            label = _int_label(row.get("Quality"), where, line)
            attributes = {"id1": row["#1 ID"].strip(), "id2": row["#2 ID"].strip()}
        else:  # hub GLUE format
            a, b = _text(row, "sentence1", where, line), _text(row, "sentence2", where, line)
            label = _int_label(row.get("label"), where, line)
            attributes = {}
        return build(PairRecord, where, line, f"mrpc-{split}-{n}", a, b, label, attributes)

    rows = iter_rows(
        path_or_name,
        split=split,
        what="MRPC",
        default_rel=GLUE_DIRS["mrpc"],
        files=files,
        read=read,
        hub_config=_hub_config(path_or_name, "mrpc", hub_config),
    )
    return load_rows(rows, convert, limit)


def load_qqp(
    path_or_name: PathOrName = None, split: str = "dev", limit: int | None = None, *, hub_config: str | None = None
) -> list[PairRecord]:
    """QQP question pairs (1 = duplicate); local data is a 23,497-row subset of GLUE dev (``split="dev"``)."""
    files = {"dev": "qqp_dev_subset.tsv"}
    split = infer_split(path_or_name, split, files)

    def convert(where: str, line: int, row: dict[str, Any]) -> PairRecord:
        label_key = "is_duplicate" if "is_duplicate" in row else "label"
        attributes = {k: str(row[k]).strip() for k in ("qid1", "qid2") if k in row}
        record_id = str(row.get("id", row.get("idx", line))).strip()
        return build(
            PairRecord,
            where,
            line,
            f"qqp-{record_id}",
            _text(row, "question1", where, line),
            _text(row, "question2", where, line),
            _int_label(row.get(label_key), where, line),
            attributes,
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="QQP",
        default_rel=GLUE_DIRS["qqp"],
        files=files,
        read=_read_qqp,
        hub_config=_hub_config(path_or_name, "qqp", hub_config),
    )
    return load_rows(rows, convert, limit)
