"""Presidio synthetic PII texts (microsoft/presidio-research) as :class:`PIIRecord` with gold spans.

Files under ``<shared>/presidio-synth/``: split ``"synth"`` -> ``synth_dataset_v2.json`` (1,500 records),
``"large"`` -> ``generated_large.json`` (2,109). Each is a JSON list of
``{full_text, masked, spans: [{entity_type, entity_value, start_position, end_position}], template_id, metadata}``.

Character offsets become ``spans = [(start_position, end_position, entity_type), ...]`` (end exclusive), sorted
by offset; ``pii`` lists the entity values in that order. A span whose offsets do not cut out its
``entity_value`` from ``full_text`` is a ``DataError``. ``attributes``: ``masked``, ``template_id``,
``metadata``. Ids are ``presidio-<split>-<n>``.
"""

from __future__ import annotations

import os
from typing import Any

from ._io import field, iter_json_array
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .paths import infer_split
from .records import PIIRecord

__all__ = ["load_presidio", "PRESIDIO_DIR"]

PRESIDIO_DIR = "presidio-synth"


def load_presidio(
    path_or_name: str | os.PathLike[str] | None = None, split: str = "synth", limit: int | None = None
) -> list[PIIRecord]:
    """Load Presidio synthetic records with character-offset PII spans."""
    files = {"synth": "synth_dataset_v2.json", "large": "generated_large.json"}
    split = infer_split(path_or_name, split, files)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> PIIRecord:
        text = field(row, "full_text", where, line)
        raw_spans = field(row, "spans", where, line, list)
        spans: list[tuple[int, int, str, str]] = []
        for i, span in enumerate(raw_spans):
            if not isinstance(span, dict):
                raise DataError(f"spans[{i}] should be an object", where, line)
            start = field(span, "start_position", where, line, int)
            end = field(span, "end_position", where, line, int)
            label = field(span, "entity_type", where, line)
            value = field(span, "entity_value", where, line)
            if not 0 <= start <= end <= len(text) or text[start:end] != value:
                raise DataError(f"spans[{i}] offsets ({start}, {end}) do not match entity_value {value!r}", where, line)
            spans.append((start, end, label, value))
        spans.sort()
        attributes = {k: row.get(k) for k in ("masked", "template_id", "metadata")}
        return build(
            PIIRecord,
            where,
            line,
            f"presidio-{split}-{next(counter)}",
            text,
            [s[3] for s in spans],
            [s[:3] for s in spans],
            attributes,
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="Presidio synthetic PII",
        default_rel=PRESIDIO_DIR,
        files=files,
        read=iter_json_array,
    )
    return load_rows(rows, convert, limit)
