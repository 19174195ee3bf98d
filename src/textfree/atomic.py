"""Atomic file writes: a reader sees the old file or the whole new one, never a partial file."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

__all__ = ["atomic_write_bytes", "atomic_write_text", "write_json", "read_json"]


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> Path:
    """Write ``data`` to a temporary file beside ``path``, fsync it, then rename it over ``path``.

    ``mode`` (e.g. ``0o600`` for secrets) is set on the temporary file before any byte is written.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | os.PathLike, text: str, *, mode: int | None = None) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def write_json(path: str | os.PathLike, data: Any) -> Path:
    """Write ``data`` as indented, key-sorted JSON to ``path`` through :func:`atomic_write_text` (a unique temporary
    name beside it, so two processes writing the same file never share one)."""
    return atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise FileNotFoundError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON: {exc}") from None


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (Path, torch.dtype, torch.device)):
        return str(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
