"""Trustpilot reviews with author demographics (Hovy et al. 2015; MilaNLP release) as :class:`TextRecord`.

Files: ``<shared>/trustpilot-milanlp/english_{train,test}.csv`` (train 5,004, gender balanced; test 403), CSV
with header ``text,age,age_cat,gender`` (``age`` integer years, ``age_cat`` one of 15-24/25-54/55-64/65+,
``gender`` M/F; a file without ``age_cat`` gets it from ``age``). Every record keeps all three in ``attributes``;
``label`` is the one chosen by ``label=`` (default ``gender``). Ids are ``trustpilot-<split>-<row>``. Eight training
reviews have empty text; they are kept so that counts match the release.

Other Trustpilot releases (a rating, a binary age, no header row) are another layout: read them through a column
mapping (:func:`~textfree.data.table.load_table`; ``textfree audit FILE --columns ... --text-column ...``); a file
this loader cannot read says so and names the options.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

from ._io import iter_dict_rows
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .paths import infer_split
from .records import TextRecord

__all__ = ["load_trustpilot", "TRUSTPILOT_DIR"]

TRUSTPILOT_DIR = "trustpilot-milanlp"
_COLUMNS = ("text", "age", "gender")  # age_cat is derived from age when a file lacks it
_GENDERS = ("M", "F")
_AGE_CATS = ("15-24", "25-54", "55-64", "65+")
_OTHER_LAYOUT = (
    "not the MilaNLP Trustpilot layout (header text,age,age_cat,gender): read it through a column mapping, "
    "--text-column / --attribute (and --columns for a file without a header row)"
)


def _age_cat(age: int) -> str:
    """The release's own buckets: 15-24, 25-54, 55-64, 65+ (an author younger than 15 counts in the first)."""
    return "15-24" if age < 25 else "25-54" if age < 55 else "55-64" if age < 65 else "65+"


def _read(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    try:
        yield from iter_dict_rows(path, delimiter=",", required=_COLUMNS)
    except DataError as exc:
        if exc.line == 1 and exc.reason.startswith("missing column"):
            raise DataError(f"{exc.reason}: {_OTHER_LAYOUT}", path, 1) from None
        raise


def load_trustpilot(
    path_or_name: str | os.PathLike[str] | None = None,
    split: str = "train",
    limit: int | None = None,
    *,
    label: Literal["gender", "age_cat", "age"] = "gender",
    language: str = "english",
) -> list[TextRecord]:
    """Load Trustpilot reviews; ``label`` picks the target attribute (``gender``, ``age_cat`` or ``age``)."""
    if label not in ("gender", "age_cat", "age"):
        raise ValueError(f"label must be 'gender', 'age_cat' or 'age', got {label!r}")
    files = {"train": f"{language}_train.csv", "test": f"{language}_test.csv"}
    split = infer_split(path_or_name, split, files)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> TextRecord:
        for column in _COLUMNS:
            if column not in row:
                raise DataError(f"missing field {column!r}: {_OTHER_LAYOUT}", where, line)
        try:
            age = int(str(row["age"]).strip())
        except ValueError:
            raise DataError(f"age {row['age']!r} is not an integer", where, line) from None
        if not 0 <= age <= 130:
            raise DataError(f"age {age} is not an age in years", where, line)
        gender = str(row["gender"]).strip()
        age_cat = str(row["age_cat"]).strip() if "age_cat" in row else _age_cat(age)
        if gender not in _GENDERS:  # a stray value would become a label class of its own
            raise DataError(f"gender {gender!r} is not one of {list(_GENDERS)}", where, line)
        if age_cat not in _AGE_CATS:
            raise DataError(f"age_cat {age_cat!r} is not one of {list(_AGE_CATS)}", where, line)
        attributes = {"age": age, "age_cat": age_cat, "gender": gender}
        return build(
            TextRecord,
            where,
            line,
            f"trustpilot-{split}-{next(counter)}",
            str(row["text"]),
            attributes[label],
            attributes,
        )

    rows = iter_rows(path_or_name, split=split, what="Trustpilot", default_rel=TRUSTPILOT_DIR, files=files, read=_read)
    return load_rows(rows, convert, limit)
