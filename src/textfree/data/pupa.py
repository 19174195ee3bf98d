"""PUPA (PAPILLON, Li et al. 2025) user queries with their PII strings, as :class:`PIIRecord`.

File: ``<shared>/pupa/PUPA_New.csv`` (664 rows; split ``"new"``; ``"tnb"`` -> ``PUPA_TNB.csv`` if present),
CSV header ``conversation_hash,predicted_category,user_query,target_response,pii_units,redacted_query``.

* ``text`` = ``user_query``; ``pii`` = ``pii_units`` split on ``||``, stripped, empty parts dropped (order and
  repeats kept; the units are lower-case in the release). Parts with no word once normalised
  (:func:`~textfree.data.normalize.normalize_answer`: punctuation only, such as the redaction mark ``_____``) name
  nothing a reconstruction could contain and are dropped too.
* ``spans`` are DERIVED, not gold: every case-insensitive, non-overlapping occurrence of each PII unit in the
  query, labelled ``"PII"``. Spans of different units may overlap (``"arab open university"`` inside
  ``"arab open university-dammam"``). Units that never occur in the query (about 3% of rows) get no span.
* ``attributes``: ``conversation_hash``, ``category``, ``target_response``, ``redacted_query``.
* ``conversation_hash`` is not unique (one WildChat conversation can give several rows), so ids are
  ``pupa-<row>`` in file order.

Some queries (and PII units) are WildChat placeholders such as ``<PRESIDIO_ANONYMIZED_PERSON>`` /
``presidio_anonymized_person`` rather than real PII.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._io import iter_dict_rows
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .normalize import normalize_answer
from .paths import infer_split
from .records import PIIRecord

__all__ = ["load_pupa", "PUPA_DIR", "find_spans"]

PUPA_DIR = "pupa"
_COLUMNS = ("user_query", "pii_units")


def _read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    return iter_dict_rows(path, delimiter=",", required=_COLUMNS)


def find_spans(text: str, units: list[str], label: str = "PII") -> list[tuple[int, int, str]]:
    """All case-insensitive, non-overlapping occurrences of each unit in ``text`` as ``(start, end, label)``."""
    spans = set()
    for unit in units:
        for match in re.finditer(re.escape(unit), text, flags=re.IGNORECASE):
            spans.add((match.start(), match.end(), label))
    return sorted(spans)


def load_pupa(
    path_or_name: str | os.PathLike[str] | None = None, split: str = "new", limit: int | None = None
) -> list[PIIRecord]:
    """Load PUPA queries as :class:`PIIRecord` (see the module docstring for fields and derived spans)."""
    files = {"new": "PUPA_New.csv", "tnb": "PUPA_TNB.csv"}
    split = infer_split(path_or_name, split, files)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> PIIRecord:
        for column in _COLUMNS:
            if row.get(column) is None:
                raise DataError(f"missing field {column!r}", where, line)
        text = str(row["user_query"])
        raw = row["pii_units"]
        units = list(raw) if isinstance(raw, list) else [u.strip() for u in str(raw).split("||")]
        units = [u for u in units if normalize_answer(u).split()]
        attributes = {
            "conversation_hash": row.get("conversation_hash"),
            "category": row.get("predicted_category"),
            "target_response": row.get("target_response"),
            "redacted_query": row.get("redacted_query"),
            "spans_derived": True,
        }
        return build(PIIRecord, where, line, f"pupa-{next(counter)}", text, units, find_spans(text, units), attributes)

    rows = iter_rows(path_or_name, split=split, what="PUPA", default_rel=PUPA_DIR, files=files, read=_read)
    return load_rows(rows, convert, limit)
