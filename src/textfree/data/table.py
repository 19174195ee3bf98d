"""Any table of texts with attributes, read through a column mapping: the layout of a dataset the project has never
seen (CSV, TSV, JSON Lines, a JSON array, Parquet, or a Hugging Face hub dataset by name).

:class:`ColumnMap` says which column holds the text, which hold the attributes (:class:`AttributeColumn`: a name, a
kind and the column it is read from), and optionally the task's label, the PII strings of each text, and the column
names of a file without a header row. :func:`load_table` returns one :class:`~textfree.data.records.TextRecord` per
row (a :class:`~textfree.data.records.PIIRecord` when a PII column is mapped), its attributes keyed by attribute
name, raw as the file holds them (an empty cell is ``None``; multi-label values split on ``|`` when the file holds a
string). A column the mapping names and the file lacks is a one-line :class:`~textfree.data.errors.DataError` that
names the column and the option that maps it (``--text-column``, ``--attribute``, ...; in a cell ``params.columns``
and ``params.attributes``).

The file format follows the suffix: ``.csv`` (comma), ``.tsv`` / ``.tab`` (tab), ``.jsonl`` / ``.ndjson``, ``.json``
(a JSON array, or JSON Lines as the Pri-* files are), ``.parquet`` (needs the ``hub`` extra); a name that is not a local
path is taken as a hub dataset (``split`` picks its split).
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ._io import iter_delimited, iter_json_array, iter_jsonl
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .records import PIIRecord, TextRecord

__all__ = ["ATTRIBUTE_KINDS", "AttributeColumn", "ColumnMap", "load_table", "TABLE_SUFFIXES"]

#: An attribute is one class per row (categorical), a number (numeric: bucketed by the attack), or a set of labels.
ATTRIBUTE_KINDS = ("categorical", "numeric", "multilabel")
TABLE_SUFFIXES = (".csv", ".tsv", ".tab", ".jsonl", ".ndjson", ".json", ".parquet")

#: How a user maps each role: the CLI option, then the cell field.
_OPTIONS = {
    "text": "--text-column (a cell: params.columns.text)",
    "attribute": "--attribute NAME=COLUMN:KIND (a cell: params.attributes.NAME.column)",
    "label": "--label-column (a cell: params.columns.label)",
    "pii": "--pii-column (a cell: params.columns.pii)",
}


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{what} must be a non-empty column name, got {value!r}")
    return value.strip()


@dataclass(frozen=True)
class AttributeColumn:
    """One attribute of the rows: its name (in reports and metric names), kind, source column and numeric edges."""

    name: str = field(metadata={"help": "The attribute's name in the report and in metric names (sex, age, ...)."})
    kind: str = field(default="categorical", metadata={"help": "categorical, numeric or multilabel."})
    column: str = field(default="", metadata={"help": "The column it is read from (default: its name)."})
    edges: tuple[float, ...] | None = field(
        default=None,
        metadata={"help": "numeric: bucket edges (default: quartiles of the attacker's training part)."},
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "name", _name(self.name, "an attribute name"))
        object.__setattr__(self, "column", _name(self.column or self.name, f"attribute {self.name!r}'s column"))
        if self.kind not in ATTRIBUTE_KINDS:
            raise ValueError(f"attribute {self.name!r}: kind must be one of {list(ATTRIBUTE_KINDS)}, got {self.kind!r}")
        if self.edges is not None:
            if self.kind != "numeric":
                raise ValueError(f"attribute {self.name!r}: only a numeric attribute takes edges")
            edges = tuple(self.edges)
            ok = edges and all(
                isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) for e in edges
            )
            if not ok or list(edges) != sorted(set(edges)):
                raise ValueError(
                    f"attribute {self.name!r}: edges must be increasing finite numbers, got {self.edges!r}"
                )
            object.__setattr__(self, "edges", edges)

    @classmethod
    def parse(cls, text: str) -> "AttributeColumn":
        """``NAME[=COLUMN][:KIND[:EDGE,EDGE,...]]``, e.g. ``gender:categorical``, ``age=author_age:numeric:18,30,45``,
        ``symptoms:multilabel``; the kind defaults to categorical."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"an attribute is NAME[=COLUMN]:KIND, got {text!r}")
        head, _, rest = text.strip().partition(":")
        kind, _, edges = rest.partition(":")
        name, _, column = head.partition("=")
        try:
            parsed = tuple(float(e) if "." in e else int(e) for e in edges.split(",")) if edges else None
        except ValueError:
            raise ValueError(f"attribute {text!r}: edges must be numbers separated by commas, got {edges!r}") from None
        return cls(name, kind or "categorical", column, parsed)

    @classmethod
    def from_value(cls, name: str, value: Any) -> "AttributeColumn":
        """A cell's ``params.attributes`` entry: ``KIND[:EDGES]`` or ``{kind, column, edges}``."""
        if isinstance(value, str):
            return cls.parse(f"{name}:{value}")
        if isinstance(value, Mapping) and set(value) <= {"kind", "column", "edges"}:
            edges = value.get("edges")
            return cls(
                name, value.get("kind", "categorical"), value.get("column", ""), None if edges is None else edges
            )
        raise ValueError(
            f"attribute {name!r} must be a kind such as 'categorical' or {{kind, column, edges}}, got {value!r}"
        )

    def spec(self) -> str:
        """The form :meth:`parse` reads back."""
        head = self.name if self.column == self.name else f"{self.name}={self.column}"
        edges = "" if self.edges is None else ":" + ",".join(f"{e:g}" for e in self.edges)
        return f"{head}:{self.kind}{edges}"


@dataclass(frozen=True)
class ColumnMap:
    """Which column holds what; every column but the text is optional."""

    text: str = field(default="text", metadata={"help": "The column holding each row's (private) text."})
    attributes: tuple[AttributeColumn, ...] = field(default=(), metadata={"help": "The attributes to read."})
    label: str | None = field(default=None, metadata={"help": "The task's label (the label-only reference)."})
    pii: str | None = field(default=None, metadata={"help": "The PII strings in each text (a list, or '|'-joined)."})
    names: tuple[str, ...] | None = field(
        default=None, metadata={"help": "The column names of a CSV/TSV file without a header row, in order."}
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "text", _name(self.text, "the text column"))
        object.__setattr__(self, "attributes", tuple(self.attributes))
        if not all(isinstance(a, AttributeColumn) for a in self.attributes):
            raise ValueError("attributes must be AttributeColumn entries")
        seen = [a.name for a in self.attributes]
        if len(set(seen)) != len(seen):
            raise ValueError(f"attribute names must be distinct, got {seen}")
        for role in ("label", "pii"):
            if getattr(self, role) is not None:
                object.__setattr__(self, role, _name(getattr(self, role), f"the {role} column"))
        if self.names is not None:
            names = tuple(_name(n, "a column name") for n in self.names)
            if not names or len(set(names)) != len(names):
                raise ValueError(f"the column names of a headerless file must be distinct, got {list(self.names)}")
            object.__setattr__(self, "names", names)

    @classmethod
    def from_dict(cls, columns: Mapping[str, Any] | None, attributes: Mapping[str, Any] | None = None) -> "ColumnMap":
        """A cell's ``params.columns`` (``text``, ``label``, ``pii``, ``names``) and ``params.attributes``."""
        columns = dict(columns or {})
        unknown = sorted(set(columns) - {"text", "label", "pii", "names"})
        if unknown:
            raise ValueError(f"columns takes text, label, pii and names, not {unknown}")
        names = columns.get("names")
        if names is not None and (not isinstance(names, (list, tuple)) or not names):
            raise ValueError(f"columns.names must be a list of column names, got {names!r}")
        attrs = tuple(AttributeColumn.from_value(n, v) for n, v in (attributes or {}).items())
        return cls(columns.get("text", "text"), attrs, columns.get("label"), columns.get("pii"), names and tuple(names))

    def to_dict(self) -> dict[str, Any]:
        """``{"columns": ..., "attributes": ...}`` as a cell's params hold them (:meth:`from_dict` reads them back)."""
        columns: dict[str, Any] = {"text": self.text}
        columns |= {k: v for k, v in (("label", self.label), ("pii", self.pii)) if v is not None}
        if self.names is not None:
            columns["names"] = list(self.names)
        return {"columns": columns, "attributes": {a.name: _attribute_dict(a) for a in self.attributes}}

    def roles(self) -> list[tuple[str, str, str]]:
        """(column, what it is for, the option that maps it) for every column the mapping reads."""
        out = [(self.text, "the text", _OPTIONS["text"])]
        out += [(a.column, f"attribute {a.name!r}", _OPTIONS["attribute"]) for a in self.attributes]
        out += [(c, role, _OPTIONS[role]) for role, c in (("label", self.label), ("pii", self.pii)) if c is not None]
        return out


def _attribute_dict(a: AttributeColumn) -> dict[str, Any]:
    out: dict[str, Any] = {"kind": a.kind}
    if a.column != a.name:
        out["column"] = a.column
    if a.edges is not None:
        out["edges"] = list(a.edges)
    return out


# ------------------------------------------------------------------------------------------------- readers
def _read_delimited(delimiter: str, names: tuple[str, ...] | None):
    def read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        rows = iter_delimited(path, delimiter=delimiter)
        header = list(names) if names is not None else None
        for line, row in rows:
            if header is None:
                header = [h.strip() for h in row]
                continue
            if len(row) != len(header):
                hint = "" if names is not None else " (a file without a header row: give its column names, --columns)"
                raise DataError(
                    f"expected {len(header)} fields ({', '.join(header)}), got {len(row)}{hint}", path, line
                )
            yield line, dict(zip(header, row))

    return read


def _read_json(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        head = fh.read(4096).lstrip()
    return iter_json_array(path) if head.startswith("[") else iter_jsonl(path)


def _read_parquet(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parquet rows through the hub extra's ``datasets`` (the reader the hub path uses; it brings pyarrow)."""
    try:
        import datasets  # noqa: PLC0415 - optional dependency, imported lazily on purpose
    except ImportError:
        raise DataError(
            "reading Parquet needs the optional datasets package: pip install 'textfree[hub]'", path
        ) from None
    for index, row in enumerate(datasets.Dataset.from_parquet(str(path))):
        yield index + 1, dict(row)


def _reader(path: Path, names: tuple[str, ...] | None):
    suffix = path.suffix.lower()
    if suffix in (".tsv", ".tab"):
        return _read_delimited("\t", names)
    if suffix == ".csv":
        return _read_delimited(",", names)
    if names is not None:
        raise DataError(f"column names (--columns) are for a CSV/TSV file without a header, not a {suffix} file", path)
    if suffix in (".jsonl", ".ndjson"):
        return iter_jsonl
    if suffix == ".json":
        return _read_json
    if suffix == ".parquet":
        return _read_parquet
    raise DataError(f"cannot tell the format of this file: its name should end in one of {list(TABLE_SUFFIXES)}", path)


# ------------------------------------------------------------------------------------------------- values
def _missing(value: Any) -> bool:
    return (
        value is None
        or (isinstance(value, str) and not value.strip())
        or (isinstance(value, float) and math.isnan(value))
    )


def _attribute(a: AttributeColumn, value: Any, where: str, line: int) -> Any:
    """A raw attribute value in its kind's form: a string, a number or a list of strings; ``None`` when empty."""
    if _missing(value):
        return None
    if a.kind == "multilabel":
        items = value.split("|") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise DataError(
                f"attribute {a.name!r} (column {a.column!r}) should be a list or '|'-joined text", where, line
            )
        return [str(x).strip() for x in items if str(x).strip()]
    if a.kind == "numeric":
        try:
            number = float(value) if not isinstance(value, (int, float)) or isinstance(value, bool) else value
        except (TypeError, ValueError):
            raise DataError(
                f"attribute {a.name!r} (column {a.column!r}): {value!r} is not a number", where, line
            ) from None
        if isinstance(number, bool) or not math.isfinite(number):
            raise DataError(
                f"attribute {a.name!r} (column {a.column!r}): {value!r} is not a finite number", where, line
            )
        return int(number) if float(number).is_integer() else float(number)
    if isinstance(value, (list, dict)):
        raise DataError(
            f"attribute {a.name!r} (column {a.column!r}) is categorical, the file holds a {type(value).__name__} "
            "(a list is --attribute NAME:multilabel)",
            where,
            line,
        )
    return str(value).strip()


def _pii(value: Any, column: str, where: str, line: int) -> list[str]:
    if _missing(value):
        return []
    items = value.split("|") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        raise DataError(f"the PII column {column!r} should hold a list or '|'-joined strings", where, line)
    return [str(x).strip() for x in items if str(x).strip()]


def _check_columns(columns: ColumnMap, row: Mapping[str, Any], where: str, line: int) -> None:
    headed = columns.names is None and where.lower().endswith((".csv", ".tsv", ".tab"))
    for column, what, option in columns.roles():
        if column not in row:
            have = ", ".join(map(str, row)) or "none"
            hint = "; a file without a header row names its columns with --columns" if headed else ""
            raise DataError(
                f"missing column {column!r} ({what}; columns: {have}): map it with {option}{hint}", where, line
            )


def load_table(
    path_or_name: str | os.PathLike[str],
    split: str = "train",
    limit: int | None = None,
    *,
    columns: ColumnMap | Mapping[str, Any],
) -> list[TextRecord | PIIRecord]:
    """The rows of a table as records, read through ``columns`` (a :class:`ColumnMap`, or the mapping a cell's
    ``params.columns`` holds). Ids are ``<file stem>-<row>``; ``split`` matters only for a hub dataset.

    Raises:
        DataError: a missing column (naming it and the option that maps it), a bad value, an unknown format;
        DataNotFoundError: no such file (and not a hub name).
    """
    if not isinstance(columns, ColumnMap):
        columns = ColumnMap.from_dict(columns)
    if isinstance(path_or_name, (str, os.PathLike)) and Path(path_or_name).is_dir():
        raise DataError("a column mapping reads one data file, got a directory (name the file)", path_or_name)
    stem = Path(str(path_or_name)).stem or "row"

    def read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
        return _reader(path, columns.names)(path)

    def convert(where: str, line: int, row: dict[str, Any]) -> TextRecord | PIIRecord:
        _check_columns(columns, row, where, line)
        text = row[columns.text]
        text = "" if _missing(text) else str(text)
        attributes = {a.name: _attribute(a, row[a.column], where, line) for a in columns.attributes}
        label = None if columns.label is None or _missing(row[columns.label]) else str(row[columns.label]).strip()
        record_id = f"{stem}-{line}"
        if columns.pii is None:
            return build(TextRecord, where, line, record_id, text, label, attributes)
        from .pupa import find_spans

        units = _pii(row[columns.pii], columns.pii, where, line)
        attributes["label"] = label
        return build(PIIRecord, where, line, record_id, text, units, find_spans(text, units), attributes)

    rows = iter_rows(path_or_name, split=split, what="the table", default_rel=None, files={}, read=read)
    return load_rows(rows, convert, limit)
