"""Line-numbered readers for JSON Lines, JSON arrays and delimited text (internal).

Every reader yields ``(line, item)`` pairs where ``line`` is the 1-based line on which the item starts, so
loaders can raise :class:`~textfree.data.errors.DataError` naming file and line. Readers never load more
than needed when the caller stops early (``limit``), except JSON arrays, which are read whole.
"""

from __future__ import annotations

import contextlib
import csv
import json
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import DataError, DataNotFoundError

__all__ = ["iter_jsonl", "iter_json_array", "iter_delimited", "iter_dict_rows", "field", "take"]

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


def _open_text(path: Path):
    if not path.is_file():
        raise DataNotFoundError("no such file", path)
    # utf-8-sig drops a leading byte-order mark (the MRPC files carry one).
    return open(path, encoding="utf-8-sig", newline="")


@contextlib.contextmanager
def _utf8(path: Path):
    """A file that is not UTF-8 text is a :class:`DataError` naming the file and the line of the first bad byte
    (text files decode in chunks, so the reader's own line count may be lines short of it)."""
    try:
        yield
    except UnicodeDecodeError as exc:
        data = path.read_bytes()
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as first:
            raise DataError(
                f"not valid UTF-8 text (byte {data[first.start]:#04x})", path, data.count(b"\n", 0, first.start) + 1
            ) from None
        raise DataError(f"not valid UTF-8 text ({exc.reason})", path) from None


def iter_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, object)`` for each non-blank line of a JSON Lines file; objects must be JSON objects."""
    with _open_text(path) as handle, _utf8(path):
        for line_no, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataError(f"invalid JSON ({exc.msg} at column {exc.colno})", path, line_no) from exc
            if not isinstance(obj, dict):
                raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, line_no)
            yield line_no, obj


def iter_json_array(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line, object)`` for each element of a top-level JSON array of objects."""
    with _open_text(path) as handle, _utf8(path):
        text = handle.read()
    decoder = json.JSONDecoder()
    n = len(text)

    def skip_ws(i: int) -> int:
        while i < n and text[i] in " \t\r\n":
            i += 1
        return i

    line_at_pos = [0, 1]  # incremental line counting: [position, line at position]

    def line_of(pos: int) -> int:
        line_at_pos[1] += text.count("\n", line_at_pos[0], pos)
        line_at_pos[0] = pos
        return line_at_pos[1]

    i = skip_ws(0)
    if i >= n or text[i] != "[":
        raise DataError("expected a JSON array of objects", path, line_of(min(i, n)))
    i = skip_ws(i + 1)
    if i < n and text[i] == "]":
        return
    while True:
        line = line_of(i)
        try:
            obj, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise DataError(f"invalid JSON ({exc.msg})", path, exc.lineno) from exc
        if not isinstance(obj, dict):
            raise DataError(f"expected a JSON object, got {type(obj).__name__}", path, line)
        yield line, obj
        i = skip_ws(end)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            if skip_ws(i + 1) != n:
                raise DataError("unexpected data after the JSON array", path, line_of(skip_ws(i + 1)))
            return
        raise DataError(
            "invalid JSON (expected ',' or ']' after an array element; file truncated?)", path, line_of(min(i, n))
        )


def iter_delimited(
    path: Path,
    *,
    delimiter: str,
    quoting: int = csv.QUOTE_MINIMAL,
    n_fields: int | None = None,
    skip_header: bool = False,
) -> Iterator[tuple[int, list[str]]]:
    """Yield ``(line, fields)`` for each non-empty record of a delimited file.

    Args:
        delimiter: field separator (``"\\t"`` or ``","``).
        quoting: a ``csv`` quoting constant; GLUE-style files that carry literal quotes need ``QUOTE_NONE``.
        n_fields: if given, every record must have exactly this many fields.
        skip_header: drop the first record.
    """
    with _open_text(path) as handle, _utf8(path):
        reader = csv.reader(handle, delimiter=delimiter, quoting=quoting, strict=True)
        start = 1
        first = True
        while True:
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as exc:
                raise DataError(f"malformed delimited record ({exc})", path, start) from exc
            line, start = start, reader.line_num + 1
            if first and skip_header:
                first = False
                continue
            first = False
            if not row:
                continue
            if n_fields is not None and len(row) != n_fields:
                raise DataError(f"expected {n_fields} fields, got {len(row)}", path, line)
            yield line, row


def iter_dict_rows(
    path: Path, *, delimiter: str = ",", required: Sequence[str] = (), quoting: int = csv.QUOTE_MINIMAL
) -> Iterator[tuple[int, dict[str, str]]]:
    """Yield ``(line, row)`` for a delimited file with a header; ``required`` columns must be in the header."""
    rows = iter_delimited(path, delimiter=delimiter, quoting=quoting)
    try:
        _, header = next(rows)
    except StopIteration:
        raise DataError("empty file (no header)", path, 1) from None
    header = [h.strip() for h in header]
    missing = [c for c in required if c not in header]
    if missing:
        raise DataError(f"missing column(s) {missing} in header {header}", path, 1)
    for line, row in rows:
        if len(row) != len(header):
            raise DataError(f"expected {len(header)} fields ({', '.join(header)}), got {len(row)}", path, line)
        yield line, dict(zip(header, row))


def field(row: Mapping[str, Any], key: str, path: Path | str | None, line: int | None, kind: type | tuple = str) -> Any:
    """Return ``row[key]``, raising :class:`DataError` if it is absent or not of type ``kind``."""
    if key not in row:
        raise DataError(f"missing field {key!r}", path, line)
    value = row[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise DataError(f"field {key!r} should be {names}, got {type(value).__name__}", path, line)
    return value


def take(items: Iterator[Any], limit: int | None) -> Iterator[Any]:
    """Yield at most ``limit`` items (all if ``limit`` is None); rejects negative limits."""
    if limit is None:
        yield from items
        return
    if limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if limit == 0:
        return
    for count, item in enumerate(items, start=1):
        yield item
        if count >= limit:
            return
