"""Alpaca-style instruction data (``[{"instruction", "input", "output", ...}]``) as :class:`InstructRecord`.

Files under ``<shared>/instruct/``: ``alpaca_en_demo.json`` (999 Alpaca-GPT4-style records) and ``lima.json``
(1,029 LIMA records with an extra ``history`` list of earlier ``[user, assistant]`` turns, non-empty for 29).
Keys other than instruction/input/output (e.g. ``history``) go to ``attributes``. ``input`` may be missing
(read as ``""``); ``instruction`` must be non-empty. Ids are ``<prefix>-<n>`` in file order. Both JSON arrays
and JSON Lines files are accepted (by suffix ``.jsonl``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ._io import field, iter_json_array, iter_jsonl
from ._loading import build, iter_rows, load_rows
from .records import InstructRecord

__all__ = ["load_instruct", "load_alpaca", "load_lima", "ALPACA_PATH", "LIMA_PATH"]

ALPACA_PATH = "instruct/alpaca_en_demo.json"
LIMA_PATH = "instruct/lima.json"


def _read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    return iter_jsonl(path) if path.suffix == ".jsonl" else iter_json_array(path)


def load_instruct(
    path_or_name: str | os.PathLike[str] | None,
    split: str = "train",
    limit: int | None = None,
    *,
    prefix: str = "instruct",
    default_rel: str | None = None,
) -> list[InstructRecord]:
    """Load any alpaca-style file (or hub dataset with those columns) as :class:`InstructRecord`.

    ``split`` only matters for hub names; a local path is a single file.
    """
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> InstructRecord:
        instruction = field(row, "instruction", where, line)
        output = field(row, "output", where, line)
        value = row.get("input") or ""
        attributes = {k: v for k, v in row.items() if k not in ("instruction", "input", "output")}
        return build(
            InstructRecord, where, line, f"{prefix}-{next(counter)}", instruction, str(value), output, attributes
        )

    rows = iter_rows(
        path_or_name, split=split, what=f"instruction data ({prefix})", default_rel=default_rel, files={}, read=_read
    )
    return load_rows(rows, convert, limit)


def load_alpaca(
    path_or_name: str | os.PathLike[str] | None = None, split: str = "train", limit: int | None = None
) -> list[InstructRecord]:
    """Alpaca-GPT4 demo (999 records) from ``<shared>/instruct/alpaca_en_demo.json`` by default."""
    return load_instruct(path_or_name, split, limit, prefix="alpaca", default_rel=ALPACA_PATH)


def load_lima(
    path_or_name: str | os.PathLike[str] | None = None, split: str = "train", limit: int | None = None
) -> list[InstructRecord]:
    """LIMA (1,029 records) from ``<shared>/instruct/lima.json`` by default; ``history`` in attributes."""
    return load_instruct(path_or_name, split, limit, prefix="lima", default_rel=LIMA_PATH)
