"""An experiment cell is data: a YAML file that names a cell kind, its inputs, a grid and seeds.

``load_cell(path)`` reads and validates one; every problem is a :class:`CellError` that names the file and the
field. The runner (:mod:`.runner`) expands ``grid`` into points (the cartesian product, in the order the keys
are written) and calls the kind once per (point, seed). See ``docs/experiments.md`` for the format.
"""

from __future__ import annotations

import copy
import difflib
import itertools
import math
import os
import re
from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping

__all__ = [
    "Cell",
    "CellError",
    "Resolved",
    "load_cell",
    "expand_grid",
    "GRID_SECTIONS",
    "DEFAULT_ENCODER",
    "MAX_GRID_POINTS",
]

DEFAULT_ENCODER = "default"
GRID_SECTIONS = ("mechanism", "params", "attack")
MAX_GRID_POINTS = 10_000
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
_SCALARS = (bool, int, float, str, type(None))


class CellError(ValueError):
    """A cell is invalid. ``source`` is the file (or None), ``field`` the offending field (or None)."""

    def __init__(self, message: str, *, field: str | None = None, source: str | os.PathLike | None = None):
        self.message = message
        self.field = field
        self.source = None if source is None else str(source)
        where = f"{self.source}: " if self.source else ""
        what = f"field '{field}': " if field else ""
        super().__init__(f"{where}{what}{message}")

    def with_source(self, source: str | os.PathLike | None) -> "CellError":
        return CellError(self.message, field=self.field, source=source)


#: How a strict check finds a cell's kind (name -> kind), installed by :mod:`textfree.experiments.registry`, which
#: holds the kinds; this module sits below the systems and the runner, so it cannot import them.
_kind_lookup: Callable[[str], Any] | None = None


def set_kind_lookup(lookup: Callable[[str], Any]) -> None:
    """Install the lookup strict checks use to find a cell's kind (:func:`textfree.experiments.get_cell_kind`)."""
    global _kind_lookup
    _kind_lookup = lookup


@dataclass(frozen=True)
class Resolved:
    """A cell's mechanism, params and attack with one grid point's values put in."""

    mechanism: dict | None
    params: dict
    attack: dict | None


@dataclass
class Cell:
    """One experiment: a cell kind applied to a dataset (or inline texts) over a grid of settings and seeds."""

    name: str = field(
        metadata={
            "help": "Identifier; names the result file <name>-<UTC time>.json and the plots. Letters, digits, '_', "
            "'.', '-'."
        }
    )
    kind: str = field(
        metadata={
            "help": "The registered cell kind that computes the metrics (see "
            "textfree.experiments.available_cell_kinds())."
        }
    )
    dataset: str | None = field(
        default=None, metadata={"help": "Dataset name or path for textfree.data.load_dataset; null to use `texts`."}
    )
    split: str | None = field(default=None, metadata={"help": "Dataset split (e.g. 'test'); only with `dataset`."})
    limit: int | None = field(
        default=None, metadata={"help": "Use at most this many records (or texts); null for all."}
    )
    texts: list[str] | None = field(
        default=None, metadata={"help": "Inline list of texts, used instead of a dataset (tests, small demos)."}
    )
    encoder: str = field(
        default=DEFAULT_ENCODER,
        metadata={
            "help": "Client encoder: a Hugging Face name or local path, or 'default' (all-MiniLM-L6-v2, offline)."
        },
    )
    mechanism: dict | None = field(
        default=None,
        metadata={
            "help": "The noise mechanism as plain data: {name: l2_laplace, epsilon: 75}; grid keys 'mechanism.<param>' "
            "override its params."
        },
    )
    params: dict = field(
        default_factory=dict,
        metadata={"help": "Parameters of the cell kind, e.g. {k: 4}; grid keys 'params.<name>' override them."},
    )
    grid: dict = field(
        default_factory=dict,
        metadata={
            "help": "Grid: dotted key -> list of values, e.g. {'mechanism.epsilon': [10, 75], 'params.k': [4, 8]}; the "
            "runner runs the cartesian product."
        },
    )
    attack: dict | None = field(
        default=None,
        metadata={
            "help": "Attack settings for attack kinds (plain data), or null; grid keys 'attack.<name>' override them."
        },
    )
    metrics: list[str] = field(
        default_factory=list, metadata={"help": "Metric names to keep; empty for every metric the kind computes."}
    )
    seeds: list[int] = field(
        default_factory=lambda: [0, 1, 2],
        metadata={
            "help": "Seeds; every grid point runs once per seed and each metric is aggregated over seeds (mean, "
            "stderr)."
        },
    )
    notes: str = field(default="", metadata={"help": "Free text: what the cell is for, what to expect."})

    # ----------------------------------------------------------------------------------------------- helpers
    def to_dict(self) -> dict[str, Any]:
        """Plain data (deep copy) that :meth:`from_dict` turns back into an equal cell."""
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """Field name -> help text (the documentation of the cell format)."""
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}

    def points(self) -> list[dict[str, Any]]:
        """The grid points, in run order (see :func:`expand_grid`)."""
        return expand_grid(self.grid)

    def resolve(self, point: Mapping[str, Any]) -> Resolved:
        """The mechanism, params and attack with ``point``'s values written into them (copies)."""
        sections = {
            "mechanism": copy.deepcopy(self.mechanism),
            "params": copy.deepcopy(self.params),
            "attack": copy.deepcopy(self.attack),
        }
        for key, value in point.items():
            section, *path = key.split(".")
            target = sections.get(section)
            if section not in sections or not path:
                raise CellError(
                    f"grid key must look like '<{'|'.join(GRID_SECTIONS)}>.<name>', got {key!r}", field="grid"
                )
            if target is None:
                raise CellError(f"grid key {key!r} needs a `{section}` mapping in the cell", field="grid")
            for part in path[:-1]:
                nxt = target.get(part)
                if not isinstance(nxt, dict):
                    raise CellError(f"grid key {key!r}: `{section}` has no mapping at {part!r}", field="grid")
                target = nxt
            target[path[-1]] = value
        return Resolved(sections["mechanism"], sections["params"], sections["attack"])

    @classmethod
    def from_dict(cls, data: Any, *, source: str | os.PathLike | None = None, strict: bool = True) -> "Cell":
        """Validate plain data and build a cell.

        ``strict`` (default) also checks the kind is registered and accepts the metrics and params, that every
        grid point builds a valid mechanism, and runs the kind's own validation. ``strict=False`` checks the
        format only (used to read result files written by kinds this process may not have).
        """
        try:
            cell = cls._from_dict(data)
            if strict:
                cell._check_semantics()
        except CellError as exc:
            raise exc.with_source(source) from None
        return cell

    # ---------------------------------------------------------------------------------------------- checks
    @classmethod
    def _from_dict(cls, data: Any) -> "Cell":
        if not isinstance(data, Mapping):
            raise CellError(f"a cell must be a mapping of fields, got {type(data).__name__}")
        known = [f.name for f in fields(cls)]
        for key in data:
            if key not in known:
                hint = difflib.get_close_matches(str(key), known, n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else ""
                raise CellError(f"unknown field{extra}; known fields: {', '.join(known)}", field=str(key))
        for f in fields(cls):
            if f.default is MISSING and f.default_factory is MISSING and f.name not in data:
                raise CellError("is required", field=f.name)
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = _CHECKS[f.name](data[f.name])
        cell = cls(**copy.deepcopy(values))
        cell._check_combinations()
        return cell

    def _check_combinations(self) -> None:
        if self.dataset is not None and self.texts is not None:
            raise CellError("give either `dataset` or `texts`, not both", field="texts")
        if self.split is not None and self.dataset is None:
            raise CellError("a split needs a `dataset`", field="split")
        for key in self.grid:
            section, *path = key.split(".")
            if section not in GRID_SECTIONS or not path or not all(path):
                raise CellError(
                    f"grid key must look like '<{'|'.join(GRID_SECTIONS)}>.<name>', got {key!r}", field="grid"
                )
            if section != "params" and getattr(self, section) is None:
                raise CellError(f"grid key {key!r} needs a `{section}` mapping in the cell", field="grid")
        n_points = math.prod(len(v) for v in self.grid.values()) if self.grid else 1
        if n_points > MAX_GRID_POINTS:
            raise CellError(f"the grid has {n_points} points; at most {MAX_GRID_POINTS} are allowed", field="grid")
        if self.grid:
            self.resolve(self.points()[0])  # path errors (e.g. into a non-mapping) surface at load time

    def _check_semantics(self) -> None:
        if _kind_lookup is None:
            raise CellError(
                "no cell kinds are loaded: import textfree.experiments to check a cell's kind", field="kind"
            )
        try:
            kind = _kind_lookup(self.kind)
        except ValueError as exc:
            raise CellError(str(exc), field="kind") from None
        if self.attack is not None and not kind.takes_attack:
            raise CellError(
                f"kind {self.kind!r} runs no attack, so an `attack` section would be ignored; remove it", field="attack"
            )
        if kind.metrics is not None:
            bad = [m for m in self.metrics if m not in kind.metrics]
            if bad:
                raise CellError(
                    f"kind {self.kind!r} does not compute {bad}; it computes {list(kind.metrics)}", field="metrics"
                )
        points = self.points()
        if kind.params is not None:
            names = set(self.params) | {k.split(".", 1)[1].split(".")[0] for k in self.grid if k.startswith("params.")}
            bad = sorted(n for n in names if n not in kind.params)
            if bad:
                where = "params" if any(b in self.params for b in bad) else "grid"
                raise CellError(
                    f"kind {self.kind!r} takes no parameter(s) {bad}; it takes {sorted(kind.params)}", field=where
                )
        if self.mechanism is not None:
            from ..mechanisms import mechanism_from_dict

            for point in points:
                spec = self.resolve(point).mechanism
                try:
                    mechanism_from_dict(spec)
                except (ValueError, TypeError) as exc:
                    at = f" at grid point {_fmt_point(point)}" if point else ""
                    raise CellError(f"invalid mechanism{at}: {exc}", field="mechanism") from None
        if kind.validate is not None:
            try:
                kind.validate(self, points)
            except CellError:
                raise
            except (ValueError, TypeError) as exc:
                raise CellError(str(exc), field="kind") from None


# -------------------------------------------------------------------------------------------- field checks
def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _check_name(v: Any) -> str:
    if not isinstance(v, str) or not _NAME_RE.match(v):
        raise CellError(
            f"must be 1-128 letters, digits, '_', '.' or '-' (starting with a letter or digit), got {v!r}", field="name"
        )
    return v


def _nonempty_str(name: str, allow_none: bool):
    def check(v: Any) -> str | None:
        if v is None and allow_none:
            return None
        if not isinstance(v, str) or not v.strip():
            kind = "a non-empty string or null" if allow_none else "a non-empty string"
            raise CellError(f"must be {kind}, got {_type_name(v)} {v!r}", field=name)
        return v

    return check


def _check_limit(v: Any) -> int | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise CellError(f"must be an integer >= 1 or null, got {_type_name(v)} {v!r}", field="limit")
    return v


def _check_texts(v: Any) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not v:
        raise CellError(f"must be a non-empty list of strings or null, got {_type_name(v)}", field="texts")
    for i, t in enumerate(v):
        if not isinstance(t, str) or not t.strip():
            raise CellError(f"entry {i} must be a non-empty string, got {_type_name(t)} {t!r}", field="texts")
    return list(v)


def _check_plain(value: Any, where: str) -> None:
    """Only YAML/JSON data: mappings with string keys, lists, scalars; finite numbers."""
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise CellError(f"keys must be strings, got {k!r}", field=where)
            _check_plain(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_plain(v, f"{where}[{i}]")
    elif isinstance(value, float) and not math.isfinite(value):
        raise CellError(f"numbers must be finite, got {value!r}", field=where)
    elif not isinstance(value, _SCALARS):
        raise CellError(
            f"must be plain data (mapping, list, string, number, bool, null), got {_type_name(value)}", field=where
        )


def _check_mechanism(v: Any) -> dict | None:
    if v is None:
        return None
    if not isinstance(v, dict):
        raise CellError(
            f"must be a mapping like {{name: l2_laplace, epsilon: 75}} or null, got {_type_name(v)}", field="mechanism"
        )
    if not isinstance(v.get("name"), str) or not v["name"]:
        raise CellError("needs a 'name' (e.g. l2_laplace, gaussian)", field="mechanism.name")
    _check_plain(v, "mechanism")
    return dict(v)


def _mapping(name: str, allow_none: bool):
    def check(v: Any) -> dict | None:
        if v is None and allow_none:
            return None
        if not isinstance(v, dict):
            kind = "a mapping or null" if allow_none else "a mapping"
            raise CellError(f"must be {kind}, got {_type_name(v)}", field=name)
        _check_plain(v, name)
        return dict(v)

    return check


def _check_grid(v: Any) -> dict:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise CellError(f"must be a mapping of dotted key -> list of values, got {_type_name(v)}", field="grid")
    out = {}
    for key, values in v.items():
        where = f"grid.{key}"
        if not isinstance(key, str):
            raise CellError(f"keys must be strings, got {key!r}", field="grid")
        if not isinstance(values, list) or not values:
            raise CellError(f"must be a non-empty list of values, got {_type_name(values)} {values!r}", field=where)
        for i, item in enumerate(values):
            if not isinstance(item, _SCALARS):
                raise CellError(
                    f"entry {i} must be a scalar (number, string, bool, null), got {_type_name(item)}", field=where
                )
            if isinstance(item, float) and not math.isfinite(item):
                raise CellError(f"entry {i} must be finite, got {item!r}", field=where)
        seen: list[tuple[bool, Any]] = []  # compared by value (75 == 75.0), a bool never equal to an int
        for item in values:
            value = (isinstance(item, bool), item)
            if value in seen:
                same = values[seen.index(value)]
                also = f" ({same!r} and {item!r} are the same value)" if repr(same) != repr(item) else ""
                raise CellError(f"values must be distinct, got {values!r}{also}", field=where)
            seen.append(value)
        out[key] = list(values)
    return out


def _check_metrics(v: Any) -> list[str]:
    if v is None:
        return []
    if not isinstance(v, list) or not all(isinstance(m, str) and m for m in v):
        raise CellError(f"must be a list of metric names, got {v!r}", field="metrics")
    if len(set(v)) != len(v):
        raise CellError(f"names must be distinct, got {v!r}", field="metrics")
    return list(v)


def _check_seeds(v: Any) -> list[int]:
    if not isinstance(v, list) or not v:
        raise CellError(f"must be a non-empty list of integers >= 0, got {_type_name(v)} {v!r}", field="seeds")
    for s in v:
        if isinstance(s, bool) or not isinstance(s, int) or s < 0:
            raise CellError(f"must be a non-empty list of integers >= 0, got entry {s!r}", field="seeds")
    if len(set(v)) != len(v):
        raise CellError(f"seeds must be distinct, got {v!r}", field="seeds")
    return list(v)


def _check_notes(v: Any) -> str:
    if v is None:
        return ""
    if not isinstance(v, str):
        raise CellError(f"must be a string, got {_type_name(v)}", field="notes")
    return v


_CHECKS = {
    "name": _check_name,
    "kind": _nonempty_str("kind", allow_none=False),
    "dataset": _nonempty_str("dataset", allow_none=True),
    "split": _nonempty_str("split", allow_none=True),
    "limit": _check_limit,
    "texts": _check_texts,
    "encoder": _nonempty_str("encoder", allow_none=False),
    "mechanism": _check_mechanism,
    "params": _mapping("params", allow_none=False),
    "grid": _check_grid,
    "attack": _mapping("attack", allow_none=True),
    "metrics": _check_metrics,
    "seeds": _check_seeds,
    "notes": _check_notes,
}


# ------------------------------------------------------------------------------------------------ grid + io
def expand_grid(grid: Mapping[str, list]) -> list[dict[str, Any]]:
    """The cartesian product of ``grid``'s value lists, as a list of points (dicts), the last key varying
    fastest. An empty grid is one empty point.

    >>> expand_grid({"a": [1, 2], "b": ["x", "y"]})
    [{'a': 1, 'b': 'x'}, {'a': 1, 'b': 'y'}, {'a': 2, 'b': 'x'}, {'a': 2, 'b': 'y'}]
    """
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def _fmt_point(point: Mapping[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {v!r}" for k, v in point.items()) + "}"


def _yaml_loader():
    import yaml

    class Loader(yaml.SafeLoader):
        """SafeLoader that reads 1e-5 as a float (YAML 1.2) and rejects duplicate keys."""

    Loader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"""^(?:[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+
            |[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?)$""",
            re.X,
        ),
        list("-+0123456789."),
    )

    def construct_mapping(loader, node, deep=False):
        seen = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if key in seen:
                raise CellError(f"duplicate key {key!r} (line {key_node.start_mark.line + 1})", field=str(key))
            seen.add(key)
        return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)

    Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping)
    return Loader, yaml


def load_cell(path: str | os.PathLike) -> Cell:
    """Read and validate a cell YAML file; :class:`CellError` names the file and the bad field."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CellError("no such file", source=p) from None
    except OSError as exc:
        raise CellError(f"cannot read: {exc}", source=p) from None
    except UnicodeDecodeError as exc:
        raise CellError(f"not valid UTF-8 text (byte {exc.start}): a cell is a UTF-8 YAML file", source=p) from None
    loader, yaml = _yaml_loader()
    try:
        data = yaml.load(text, Loader=loader)  # noqa: S506 - a SafeLoader subclass
    except CellError as exc:
        raise exc.with_source(p) from None
    except yaml.YAMLError as exc:
        raise CellError(f"not valid YAML: {exc}", source=p) from None
    if data is None:
        raise CellError("the file is empty", source=p)
    return Cell.from_dict(data, source=p)
