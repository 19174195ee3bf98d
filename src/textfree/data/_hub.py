"""Optional Hugging Face hub access for online users (internal).

``datasets`` is imported lazily inside :func:`iter_hub_rows` so the package works without it; tests and
benchmarks only ever use local paths. Rows come back as plain dicts and are converted by the same row
converters as local files.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .errors import HubUnavailableError

__all__ = ["iter_hub_rows", "hub_split"]

_HUB_SPLITS = {"dev": "validation", "val": "validation", "valid": "validation"}


def hub_split(split: str) -> str:
    """Hub datasets call the development split ``validation``."""
    return _HUB_SPLITS.get(split, split)


def iter_hub_rows(name: str, split: str, config: str | None = None) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(row_index, row)`` from ``datasets.load_dataset(name, config, split=...)``.

    Raises:
        HubUnavailableError: ``datasets`` is not installed.
    """
    try:
        import datasets  # noqa: PLC0415 - optional dependency, imported lazily on purpose
    except ImportError as exc:
        raise HubUnavailableError(
            f"{name!r} is not an existing local file or directory, so it was taken as a Hugging Face hub "
            "dataset name, but the optional 'datasets' package is not installed. Install it with "
            "`pip install textfree[hub]`, or pass a local path (or set TEXTFREE_DATA)."
        ) from exc
    args: tuple[str, ...] = (name,) if config is None else (name, config)
    dataset = datasets.load_dataset(*args, split=hub_split(split))
    for index, row in enumerate(dataset):
        yield index, dict(row)
