"""Errors raised by the data loaders.

Every problem with a data file is a :class:`DataError` (a ``ValueError``) whose message starts with the file
path and, where it is known, the 1-based line number, e.g. ``/data/dev.json, line 12: invalid JSON ...``.
A missing file or directory is a :class:`DataNotFoundError`, which is both a ``DataError`` and a
``FileNotFoundError`` so either ``except`` clause catches it. An unregistered dataset name is an
:class:`UnknownDatasetError` (both ``DataError`` and ``KeyError``). A hub name given while the optional ``datasets``
package is absent is a :class:`HubUnavailableError` (both ``DataError`` and ``ImportError``).
"""

from __future__ import annotations

import os

__all__ = ["DataError", "DataNotFoundError", "HubUnavailableError", "UnknownDatasetError"]


class DataError(ValueError):
    """Malformed or unusable dataset input.

    Attributes:
        path: the offending file, if known.
        line: the 1-based line number in ``path``, if known.
        reason: the message without the location prefix.
    """

    def __init__(self, message: str, path: str | os.PathLike[str] | None = None, line: int | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.line = line
        self.reason = message
        where = ""
        if self.path is not None:
            where = self.path if line is None else f"{self.path}, line {line}"
            where += ": "
        super().__init__(where + message)


class DataNotFoundError(DataError, FileNotFoundError):
    """A dataset file or directory that does not exist (or no data directory could be found)."""


class HubUnavailableError(DataError, ImportError):
    """A Hugging Face hub name was given but the optional ``datasets`` package is not installed."""


class UnknownDatasetError(DataError, KeyError):
    """A dataset name that is not registered (see :func:`textfree.data.registry.load_dataset`)."""

    def __str__(self) -> str:  # KeyError would repr-quote the message
        return ValueError.__str__(self)
