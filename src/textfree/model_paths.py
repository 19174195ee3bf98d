"""Whether a model argument names a local directory that is not there: a torch-free check, so a command line can
report a mistyped path at once, before torch and transformers load (``textfree.encoders.loading`` re-exports it)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["local_model_problem"]


def local_model_problem(name_or_path: str | os.PathLike) -> str | None:
    """What is wrong with ``name_or_path`` as a local model directory, or None when it is one or may be a hub name.

    ``from_pretrained`` reads a missing local path as a malformed hub id ("Repo id must be in the form ..."), which
    names the wrong problem; a path that is absolute, starts with ``.`` or ``~``, or exists is judged here instead."""
    text = str(name_or_path)
    path = Path(text).expanduser()
    looks_local = path.exists() or path.is_absolute() or text.startswith((".", "~")) or text.count("/") > 1
    if not looks_local:
        return None  # a hub name such as "sentence-transformers/all-MiniLM-L6-v2"
    if not path.exists():
        return f"no such directory {text!r}"
    if not path.is_dir():
        return f"{text!r} is a file, not a model directory"
    if not (path / "config.json").is_file():
        return f"{text!r} is not a model directory (no config.json in it)"
    return None
