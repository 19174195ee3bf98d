"""Where the real data lives, and how a loader argument is resolved to a local file or a hub name.

Real datasets are never copied into the repository or downloaded at run time. They are read by path from the
shared data directory, found by :func:`shared_data_dir`:

1. ``$TEXTFREE_DATA`` if set (and non-empty), returned as given even if it does not exist;
2. else ``<repo>/../shared/data`` relative to this source tree, if it exists;
3. else ``./../shared/data`` relative to the current working directory, if it exists;
4. else ``None``.

Loader arguments (``path_or_name``) are resolved by :func:`resolve_source`:

* ``None`` -> the dataset's default path under :func:`shared_data_dir`;
* an existing file or directory (``str`` or ``os.PathLike``) -> that local path;
* a string that does not exist locally but looks like a hub id (``name`` or ``owner/name``, no file suffix,
  not absolute, not starting with ``.`` or ``~``) -> a Hugging Face hub dataset name;
* anything else -> :class:`~textfree.data.errors.DataNotFoundError`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .errors import DataError, DataNotFoundError

__all__ = [
    "shared_data_dir",
    "Source",
    "resolve_source",
    "looks_like_hub_name",
    "normalize_split",
    "infer_split",
    "pick_split_files",
]

ENV_VAR = "TEXTFREE_DATA"
_DATA_SUFFIXES = (".json", ".jsonl", ".tsv", ".csv", ".txt", ".parquet", ".gz", ".zip")
_HUB_RE = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")


def shared_data_dir() -> Path | None:
    """Return the shared real-data directory, or ``None`` if none is configured or found."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    source = Path(__file__).resolve()
    candidates = [Path.cwd() / ".." / "shared" / "data"]
    if len(source.parents) > 3:  # <repo>/src/textfree/data/paths.py -> <repo>
        candidates.insert(0, source.parents[3] / ".." / "shared" / "data")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate.resolve()
    return None


@dataclass(frozen=True)
class Source:
    """A resolved loader argument: a local ``path`` or a hub ``name``."""

    kind: Literal["local", "hub"]
    path: Path | None = None
    name: str | None = None


def looks_like_hub_name(value: str) -> bool:
    """True if ``value`` is shaped like a Hugging Face hub id (``name`` or ``owner/name``)."""
    if value.startswith((".", "~", "/")) or value.lower().endswith(_DATA_SUFFIXES):
        return False
    return bool(_HUB_RE.match(value))


def _missing_shared_dir(what: str) -> DataNotFoundError:
    return DataNotFoundError(
        f"no path given for {what} and the shared data directory was not found: set {ENV_VAR} to the folder "
        "holding the datasets (e.g. ../shared/data) or pass a path"
    )


def resolve_source(path_or_name: str | os.PathLike[str] | None, default_rel: str | None, what: str) -> Source:
    """Resolve a loader's ``path_or_name`` argument (see the module docstring for the rules).

    Args:
        path_or_name: ``None``, a local path, or a hub name.
        default_rel: the dataset's default path relative to :func:`shared_data_dir`, used when ``None``.
        what: a human-readable dataset name for error messages.

    Raises:
        DataNotFoundError: a path that does not exist, or ``None`` with no shared data directory.
    """
    if path_or_name is None:
        if default_rel is None:
            raise DataNotFoundError(f"no path given for {what} and it has no default location")
        root = shared_data_dir()
        if root is None:
            raise _missing_shared_dir(what)
        path = root / default_rel
        if not path.exists():
            raise DataNotFoundError(f"{what} not found at its default location (set {ENV_VAR}?)", path)
        return Source("local", path=path)
    if isinstance(path_or_name, os.PathLike):
        path = Path(path_or_name).expanduser()
        if not path.exists():
            raise DataNotFoundError(f"{what}: no such file or directory", path)
        return Source("local", path=path)
    if not isinstance(path_or_name, str):
        raise TypeError(f"path_or_name must be str, os.PathLike or None, not {type(path_or_name).__name__}")
    path = Path(path_or_name).expanduser()
    if path.exists():
        return Source("local", path=path)
    if looks_like_hub_name(path_or_name):
        return Source("hub", name=path_or_name)
    raise DataNotFoundError(f"{what}: no such file or directory", path)


_SPLIT_ALIASES = {"validation": "dev", "val": "dev", "valid": "dev", "dev": "validation"}


def normalize_split(split: str, known: Collection[str]) -> str:
    """Map ``validation``/``val``/``valid`` to ``dev`` (and back) when only the other name is known."""
    if split in known:
        return split
    alias = _SPLIT_ALIASES.get(split)
    return alias if alias is not None and alias in known else split


def infer_split(path_or_name: object, split: str, files: Mapping[str, str | tuple[str, ...]]) -> str:
    """The split whose file ``path_or_name`` is (when it is an existing split file), else ``split``.

    Keeps record ids honest when a loader is given e.g. ``.../SST-2/dev.tsv`` with the default split.
    """
    if isinstance(path_or_name, str | os.PathLike) and Path(path_or_name).is_file():
        name = Path(path_or_name).name
        for key, names in files.items():
            if name == names or (isinstance(names, tuple) and name in names):
                return key
    return normalize_split(split, set(files))


def pick_split_files(path: Path, split: str, files: Mapping[str, str | tuple[str, ...]], what: str) -> list[Path]:
    """Return the file(s) for ``split``: ``[path]`` if ``path`` is a file, else ``path / files[split]``.

    ``files`` maps split names to one file name or a tuple of names read in order (CoLA's train split is
    ``train.tsv`` + ``val.tsv``). ``validation``/``val`` are accepted for ``dev`` and vice versa.

    Raises:
        DataError: unknown split.
        DataNotFoundError: a split file is absent from the directory.
    """
    if path.is_file():
        return [path]
    if not files:
        raise DataError(f"{what}: expected a data file, got a directory", path)
    split = normalize_split(split, set(files))
    if split not in files:
        raise DataError(f"{what}: unknown split {split!r}; expected one of {sorted(files)}", path)
    names = files[split]
    targets = [path / name for name in ((names,) if isinstance(names, str) else names)]
    for target in targets:
        if not target.is_file():
            raise DataNotFoundError(f"{what}: file for split {split!r} not found", target)
    return targets
