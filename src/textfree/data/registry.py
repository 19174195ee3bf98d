"""One place that maps dataset names to a loader and a default path under the shared data directory.

>>> records = load_dataset("pri-ddx", split="dev")          # doctest: +SKIP
>>> records = load_dataset("sst2", split="train", limit=100)  # doctest: +SKIP

``load_dataset(name_or_path)`` accepts a registered name (case-insensitive; aliases such as ``ddx``,
``sst-2``, ``commonsenseqa``) or a local path: a path is matched to the dataset whose default location it ends
with (``.../glue/SST-2`` or ``.../glue/SST-2/dev.tsv`` -> ``sst2``). Hub names are not guessed here; call the
dataset's loader with the hub name instead (``load_gsm8k("openai/gsm8k")``). New datasets are added with
:func:`register_dataset`.

A file (or hub dataset) in any other layout is read through a column mapping:
``load_dataset("reviews.tsv", columns=ColumnMap(...))`` (or the ``params.columns`` mapping of a cell) goes to
:func:`~textfree.data.table.load_table`, whatever the path's name. A registered dataset declares the personal
attributes its records carry (``DatasetSpec.attributes``, in :meth:`~textfree.data.table.AttributeColumn.parse`
form): what an attribute attack on it reads when its cell names none.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from .errors import DataError, DataNotFoundError, UnknownDatasetError
from .glue import GLUE_DIRS, load_cola, load_mrpc, load_qqp, load_rte, load_sst2
from .gsm8k import GSM8K_DIR, load_gsm8k
from .instruct import ALPACA_PATH, LIMA_PATH, load_alpaca, load_lima
from .paths import ENV_VAR, shared_data_dir
from .presidio import PRESIDIO_DIR, load_presidio
from .privacyrestore import PRIVACYRESTORE_DIRS, load_privacyrestore
from .pupa import PUPA_DIR, load_pupa
from .qa import ARC_DIR, CSQA_DIR, load_arc, load_csqa
from .table import AttributeColumn, load_table
from .trustpilot import TRUSTPILOT_DIR, load_trustpilot

__all__ = [
    "DatasetSpec",
    "register_dataset",
    "load_dataset",
    "get_dataset_spec",
    "available_datasets",
    "is_ppft_dataset",
]

Loader = Callable[..., list[Any]]


@dataclass(frozen=True)
class DatasetSpec:
    """A registered dataset.

    Attributes:
        name: canonical name.
        loader: ``loader(path_or_name, split=..., limit=...) -> list[record]``.
        default_path: location relative to :func:`~textfree.data.paths.shared_data_dir` (file or directory).
        default_split: split used when ``load_dataset`` gets ``split=None``.
        description: one line for listings.
        attributes: the personal attributes its records carry in ``attributes``, as ``NAME:KIND[:EDGES]``
            (:meth:`~textfree.data.table.AttributeColumn.parse`); a record may lack an optional one.
    """

    name: str
    loader: Loader
    default_path: str
    default_split: str
    description: str = ""
    attributes: tuple[str, ...] = ()

    def attribute_columns(self) -> tuple[AttributeColumn, ...]:
        """:attr:`attributes` parsed."""
        return tuple(AttributeColumn.parse(a) for a in self.attributes)


_REGISTRY: dict[str, DatasetSpec] = {}
_ALIASES: dict[str, str] = {}


def register_dataset(
    name: str,
    loader: Loader,
    default_path: str,
    *,
    default_split: str = "train",
    description: str = "",
    aliases: tuple[str, ...] = (),
    overwrite: bool = False,
    attributes: tuple[str, ...] = (),
) -> DatasetSpec:
    """Register ``name`` -> ``loader`` with a default path under the shared data directory.

    Raises:
        ValueError: ``name`` or an alias is already taken and ``overwrite`` is False.
    """
    key = name.lower()
    taken = [n for n in (key, *(a.lower() for a in aliases)) if n in _REGISTRY or n in _ALIASES]
    if taken and not overwrite:
        raise ValueError(f"dataset name(s) already registered: {taken} (pass overwrite=True to replace)")
    spec = DatasetSpec(key, loader, default_path, default_split, description, tuple(attributes))
    spec.attribute_columns()  # parsed once here: a bad declaration fails at registration
    _REGISTRY[key] = spec
    for alias in aliases:
        _ALIASES[alias.lower()] = key
    return spec


def available_datasets() -> list[str]:
    """Sorted canonical names of registered datasets."""
    return sorted(_REGISTRY)


def get_dataset_spec(name: str) -> DatasetSpec:
    """The spec for a registered name or alias (:class:`UnknownDatasetError`, a ``KeyError``, otherwise)."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in _REGISTRY:
        raise UnknownDatasetError(f"unknown dataset {name!r}; registered: {', '.join(available_datasets())}")
    return _REGISTRY[key]


def _spec_for_path(path: Path) -> DatasetSpec | None:
    parts = PurePosixPath(path.resolve().as_posix()).parts
    best: tuple[int, DatasetSpec] | None = None
    for spec in _REGISTRY.values():
        rel = PurePosixPath(spec.default_path).parts
        for candidate in (parts, parts[:-1]):
            if len(candidate) >= len(rel) and tuple(candidate[-len(rel) :]) == rel:
                score = len(rel) * 2 + (candidate is parts)
                if best is None or score > best[0]:
                    best = (score, spec)
    return None if best is None else best[1]


def load_dataset(
    name_or_path: str | os.PathLike[str], split: str | None = None, limit: int | None = None, **kwargs: Any
) -> list[Any]:
    """Load a registered dataset by name (from the shared data directory) or a recognisable local path.

    Args:
        name_or_path: registered name/alias, or a path ending in a registered default location.
        split: split name; ``None`` uses the dataset's default split.
        limit: keep only the first ``limit`` records.
        **kwargs: passed to the loader (e.g. ``label="age_cat"`` for Trustpilot); ``columns`` (a
            :class:`~textfree.data.table.ColumnMap` or a cell's ``params.columns`` mapping) reads a file or hub
            dataset in any layout with :func:`~textfree.data.table.load_table` instead.

    Raises:
        DataNotFoundError: no shared data directory / missing files.
        DataError: a path that matches no registered dataset (and no ``columns``).
        UnknownDatasetError: an unknown name (a ``DataError`` and a ``KeyError``).
    """
    registered = isinstance(name_or_path, str) and name_or_path.lower() in {*_REGISTRY, *_ALIASES}
    if kwargs.get("columns") is not None:
        if registered:
            raise DataError(
                f"{name_or_path!r} is a registered dataset, read by its own loader; a column mapping is for a file or "
                "a hub dataset in another layout (give its path)"
            )
        columns = kwargs.pop("columns")
        if kwargs:
            raise TypeError(f"load_dataset with columns takes no other options, got {sorted(kwargs)}")
        return load_table(name_or_path, split=split or "train", limit=limit, columns=columns)
    if registered:
        spec = get_dataset_spec(name_or_path)
        root = shared_data_dir()
        if root is None:
            raise DataNotFoundError(
                f"dataset {spec.name!r} is read from the shared data directory, which was not found; set {ENV_VAR} "
                "(e.g. ../shared/data) or pass a path to the dataset's loader"
            )
        return spec.loader(root / spec.default_path, split=split or spec.default_split, limit=limit, **kwargs)
    path = Path(name_or_path).expanduser()
    if not path.exists():
        if isinstance(name_or_path, str) and os.sep not in name_or_path and "." not in name_or_path:
            raise UnknownDatasetError(
                f"unknown dataset {name_or_path!r}; registered: {', '.join(available_datasets())}"
            )
        raise DataNotFoundError("no such file or directory", path)
    spec = _spec_for_path(path)
    if spec is None:
        raise DataError(
            f"cannot tell which dataset this path holds (registered: {', '.join(available_datasets())}); map its "
            "columns: --text-column and --attribute (a cell: params.columns, params.attributes)",
            path,
        )
    return spec.loader(path, split=split or spec.default_split, limit=limit, **kwargs)


_MEDICAL = ("sex:categorical", "age:numeric:18,30,45,60,75", "symptoms:multilabel", "antecedents:multilabel")
#: The personal attributes each built-in dataset's records carry (the ages of Pri-DDX in the buckets of PPFT's table).
_ATTRIBUTES = {
    "pri-ddx": _MEDICAL,
    "pri-nlice": _MEDICAL,
    "trustpilot": ("gender:categorical", "age_cat:categorical"),
}


def _register_builtins() -> None:
    builtins: list[tuple[str, Loader, str, str, str, tuple[str, ...]]] = [
        (
            "pri-ddx",
            load_privacyrestore,
            PRIVACYRESTORE_DIRS["ddx"],
            "test",
            "Pri-DDXPlus medical diagnosis MCQA (dev 309 / test 1549)",
            ("ddx", "pri-ddxplus"),
        ),
        (
            "pri-nlice",
            load_privacyrestore,
            PRIVACYRESTORE_DIRS["nlice"],
            "test",
            "Pri-NLICE medical diagnosis MCQA (no antecedents; not in the shared data)",
            ("nlice",),
        ),
        (
            "pri-slja",
            load_privacyrestore,
            PRIVACYRESTORE_DIRS["slja"],
            "test",
            "Pri-SLJA criminal-charge MCQA (dev 130 / test 654)",
            ("slja",),
        ),
        (
            "sst2",
            load_sst2,
            GLUE_DIRS["sst2"],
            "train",
            "SST-2 sentiment (train 67,349 / dev 872 / test 1,821)",
            ("sst-2",),
        ),
        ("cola", load_cola, GLUE_DIRS["cola"], "train", "CoLA acceptability (train 8,551 / dev 1,043)", ()),
        ("rte", load_rte, GLUE_DIRS["rte"], "train", "RTE entailment (train 2,490 / dev 277)", ()),
        ("mrpc", load_mrpc, GLUE_DIRS["mrpc"], "train", "MRPC paraphrase (train 4,076 / test 1,725)", ()),
        ("qqp", load_qqp, GLUE_DIRS["qqp"], "dev", "QQP duplicate questions (dev subset 23,497)", ()),
        ("trustpilot", load_trustpilot, TRUSTPILOT_DIR, "train", "Trustpilot reviews + age/gender (5,004 / 403)", ()),
        ("pupa", load_pupa, PUPA_DIR, "new", "PUPA user queries with PII units (664)", ()),
        (
            "presidio",
            load_presidio,
            PRESIDIO_DIR,
            "synth",
            "Presidio synthetic PII spans (1,500 / 2,109)",
            ("presidio-synth",),
        ),
        ("alpaca", load_alpaca, ALPACA_PATH, "train", "Alpaca-GPT4 demo instructions (999)", ()),
        ("lima", load_lima, LIMA_PATH, "train", "LIMA instructions (1,029)", ()),
        ("csqa", load_csqa, CSQA_DIR, "dev", "CommonsenseQA dev (1,221)", ("commonsenseqa", "commonsense_qa")),
        ("arc", load_arc, ARC_DIR, "test", "ARC-Challenge test (1,172)", ("arc-challenge",)),
        ("gsm8k", load_gsm8k, GSM8K_DIR, "test", "GSM8K math word problems (train 7,473 / test 1,319)", ()),
    ]
    for name, loader, path, split, description, aliases in builtins:
        register_dataset(
            name,
            loader,
            path,
            default_split=split,
            description=description,
            aliases=aliases,
            attributes=_ATTRIBUTES.get(name, ()),
        )


_register_builtins()


def is_ppft_dataset(name: str) -> bool:
    """A Pri-* dataset name (pri-ddx, pri-slja and their short names): one with a PPFT train / held-out split."""
    return str(name).lower().startswith(("pri-", "ddx", "slja"))
