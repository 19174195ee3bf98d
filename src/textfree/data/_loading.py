"""The loop every loader shares: resolve the source, read rows, convert them, honour ``limit`` (internal)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

from ._hub import iter_hub_rows
from ._io import take
from .errors import DataError
from .paths import pick_split_files, resolve_source

__all__ = ["Row", "iter_rows", "load_rows", "build"]

T = TypeVar("T")

#: (where, line, row): ``where`` is the file path or ``hf://name``; ``line`` is 1-based.
Row = tuple[str, int, dict[str, Any]]


def iter_rows(
    path_or_name: str | os.PathLike[str] | None,
    *,
    split: str,
    what: str,
    default_rel: str | None,
    files: Mapping[str, str | tuple[str, ...]],
    read: Callable[[Path], Iterator[tuple[int, dict[str, Any]]]],
    hub_config: str | None = None,
) -> Iterator[Row]:
    """Yield ``(where, line, row)`` from local split file(s) or from the hub."""
    source = resolve_source(path_or_name, default_rel, what)
    if source.kind == "hub":
        assert source.name is not None
        where = f"hf://{source.name}[{split}]"
        for index, row in iter_hub_rows(source.name, split, hub_config):
            yield where, index + 1, row
        return
    assert source.path is not None
    for file in pick_split_files(source.path, split, files, what):
        for line, row in read(file):
            yield str(file), line, row


def load_rows(
    rows: Iterator[Row], convert: Callable[[str, int, dict[str, Any]], T | None], limit: int | None
) -> list[T]:
    """Convert rows to records (``convert`` may return ``None`` to skip a row) and keep at most ``limit``."""
    converted = (convert(where, line, row) for where, line, row in rows)
    return list(take((record for record in converted if record is not None), limit))


def build(factory: Callable[..., T], where: str, line: int, /, *args: Any, **kwargs: Any) -> T:
    """Construct a record, turning its validation ``ValueError`` into a located :class:`DataError`."""
    try:
        return factory(*args, **kwargs)
    except DataError:
        raise
    except (ValueError, TypeError) as exc:
        raise DataError(str(exc), where, line) from exc
