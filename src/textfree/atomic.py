"""Atomic file writes, the one way every save in textfree writes a file: a reader sees the old file or the whole new
one, never a partial file, and two processes writing the same path never share a temporary name.

* :func:`atomic_write_bytes` / :func:`atomic_write_text` / :func:`write_json`: replace ``path`` whole;
* :func:`atomic_save_tensors`: a safetensors file; :func:`atomic_save_figure`: a matplotlib figure;
* :func:`create_new_text`: a new file that never replaces one (result files: ``stem.json``, ``stem-1.json``, ...).

A directory of several files (a training checkpoint, an uploaded dataset) is written to a temporary directory and
renamed into place by its owner.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "atomic_save_tensors",
    "atomic_save_figure",
    "create_new_text",
    "write_json",
    "read_json",
]


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


def atomic_save_tensors(path: str | os.PathLike, tensors: dict, *, metadata: dict[str, str] | None = None) -> Path:
    """A safetensors file of ``tensors`` (contiguous, on the CPU), written atomically."""
    from safetensors.torch import save

    return atomic_write_bytes(path, save({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, metadata))


def atomic_save_figure(fig: Any, path: str | os.PathLike, **savefig: Any) -> Path:
    """A matplotlib figure rendered in memory (format from ``path``'s suffix unless given), written atomically."""
    import io

    buffer = io.BytesIO()
    fig.savefig(buffer, **({"format": Path(path).suffix.lstrip(".") or "png"} | savefig))
    return atomic_write_bytes(path, buffer.getvalue())


def create_new_text(directory: str | os.PathLike, stem: str, text: str, *, suffix: str = ".json") -> Path:
    """Write ``text`` to ``directory/stem{suffix}`` (or ``stem-1{suffix}``, ...) atomically, never replacing a file:
    the whole file is written under a temporary name, then hard-linked to the first free name (atomic and exclusive)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        for i in range(1000):
            final = directory / (f"{stem}{suffix}" if i == 0 else f"{stem}-{i}{suffix}")
            try:
                os.link(tmp, final)  # atomic and exclusive: fails if the name exists
                return final
            except FileExistsError:
                continue
            except OSError:  # a filesystem without hard links
                if final.exists():
                    continue
                os.replace(tmp, final)
                return final
        raise FileExistsError(f"no free file name for {stem!r} in {directory}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
    import torch

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
