"""Result files: what ``textfree run`` writes and every report reads (``results/<cell>-<UTC time>.json``).

A result file holds the cell that made it, one row per grid point (each metric's mean, stderr and per-seed values),
the seeds, the package versions, the git commit, the host and the date. :func:`load_results` reads one back and
checks its shape; :class:`ResultsError` names the file and the bad field.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any, Mapping

from .cell import Cell, CellError

__all__: list[str] = [
    "RESULTS_FORMAT",
    "RESULTS_VERSION",
    "REQUIRED_KEYS",
    "ResultsError",
    "load_results",
    "format_results_table",
]


RESULTS_FORMAT = "textfree.results"


RESULTS_VERSION = 1


REQUIRED_KEYS = ("format", "format_version", "cell", "results", "versions", "git", "seeds", "date", "host")


class ResultsError(ValueError):
    """A result file is missing, not JSON, or not in the results format; the message names file and field."""


def _fail(path: Any, field: str | None, msg: str) -> ResultsError:
    return ResultsError(f"{path}: " + (f"field '{field}': " if field else "") + msg)


def _is_num_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read a result file and check its shape; :class:`ResultsError` names the file and the bad field.

    Returns the parsed JSON (numbers that were NaN/inf are None).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(p, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(p, None, f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise _fail(p, None, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _fail(p, None, f"must hold a JSON object, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise _fail(p, key, "is missing")
    if data["format"] != RESULTS_FORMAT:
        raise _fail(p, "format", f"must be {RESULTS_FORMAT!r}, got {data['format']!r}")
    if not isinstance(data["format_version"], int) or not 1 <= data["format_version"] <= RESULTS_VERSION:
        raise _fail(
            p, "format_version", f"must be an integer in [1, {RESULTS_VERSION}], got {data['format_version']!r}"
        )
    try:
        cell = Cell.from_dict(data["cell"], strict=False)
    except CellError as exc:
        raise _fail(p, f"cell.{exc.field}" if exc.field else "cell", exc.message) from None
    seeds = data["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise _fail(p, "seeds", f"must be a non-empty list of integers, got {seeds!r}")
    for key in ("versions", "host"):
        if not isinstance(data[key], dict):
            raise _fail(p, key, f"must be an object, got {type(data[key]).__name__}")
    if data["git"] is not None and not isinstance(data["git"], dict):
        raise _fail(p, "git", f"must be an object or null, got {type(data['git']).__name__}")
    if not isinstance(data["date"], str):
        raise _fail(p, "date", "must be an ISO date string")
    try:
        _dt.datetime.fromisoformat(data["date"])
    except ValueError:
        raise _fail(p, "date", f"is not an ISO date: {data['date']!r}") from None
    results = data["results"]
    if not isinstance(results, list) or not results:
        raise _fail(p, "results", "must be a non-empty list")
    axes = list(cell.grid)
    for i, row in enumerate(results):
        where = f"results[{i}]"
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("point"), dict)
            or not isinstance(row.get("metrics"), dict)
        ):
            raise _fail(p, where, "must be an object with 'point' and 'metrics' objects")
        prov = row.get("provenance", {})
        if not isinstance(prov, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prov.items()):
            raise _fail(p, f"{where}.provenance", "must be an object of strings")
        if sorted(row["point"]) != sorted(axes):
            raise _fail(p, f"{where}.point", f"keys {sorted(row['point'])} do not match the grid axes {sorted(axes)}")
        for name, agg in row["metrics"].items():
            mwhere = f"{where}.metrics.{name}"
            if not isinstance(agg, dict) or not {"mean", "stderr", "values"} <= set(agg):
                raise _fail(p, mwhere, "must be an object with mean, stderr and values")
            if not _is_num_or_null(agg["mean"]) or not _is_num_or_null(agg["stderr"]):
                raise _fail(p, mwhere, "mean and stderr must be numbers or null")
            vals = agg["values"]
            if not isinstance(vals, list) or len(vals) != len(seeds) or not all(_is_num_or_null(v) for v in vals):
                raise _fail(p, f"{mwhere}.values", f"must be a list of {len(seeds)} numbers (one per seed)")
    return data


def format_results_table(data: Mapping[str, Any], metrics: list[str] | None = None) -> str:
    """A plain-text table of a result file's means ± stderr, one line per grid point (for terminals and logs)."""
    rows = data["results"]
    names = metrics or list(rows[0]["metrics"])
    axes = list(data["cell"].get("grid", {}))
    header = [a.split(".")[-1] for a in axes] + names

    def fmt(agg: Mapping[str, Any] | None) -> str:
        if agg is None or agg.get("mean") is None:
            return "nan"
        s = f"{agg['mean']:.4g}"
        return s + (f" ± {agg['stderr']:.2g}" if agg.get("stderr") is not None else "")

    table = [header] + [[str(r["point"][a]) for a in axes] + [fmt(r["metrics"].get(n)) for n in names] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in table)
