"""What a cell kind reads: the cell's texts (inline or from a dataset) and its encoder.

The dataset side goes through ``textfree.data`` (imported here lazily, only for cells that name a dataset):
``load_dataset(name_or_path, split=None, limit=None)`` returns records; an MCQA record contributes the private
part of its prompt (``textfree.data.prompts.mcqa_prompt(record).private``), a text record its ``.text``.
"""

from __future__ import annotations

from typing import Any

__all__ = ["load_records", "load_texts", "record_private_text", "load_cell_encoder"]


def load_records(cell: Any) -> list[Any]:
    """The cell's dataset records (``cell.dataset``, ``cell.split``, ``cell.limit``)."""
    if cell.dataset is None:
        raise ValueError(f"cell {cell.name!r} names no dataset")
    try:
        from textfree.data import load_dataset
    except ImportError as exc:  # pragma: no cover - depends on the data package being present
        raise RuntimeError(
            f"cell {cell.name!r} reads dataset {cell.dataset!r}, which needs textfree.data: {exc}"
        ) from exc
    records = list(load_dataset(cell.dataset, split=cell.split, limit=cell.limit))
    if cell.limit is not None:
        records = records[: cell.limit]
    if not records:
        raise ValueError(f"cell {cell.name!r}: dataset {cell.dataset!r} (split {cell.split!r}) has no records")
    return records


def record_private_text(record: Any) -> str:
    """The private text of one record: the private prompt part of an MCQA record, or a text record's text."""
    if hasattr(record, "options") and hasattr(record, "question"):
        from textfree.data.prompts import mcqa_prompt

        return mcqa_prompt(record).private
    if hasattr(record, "text"):
        return record.text
    raise TypeError(f"cannot take a private text from a {type(record).__name__} record (no options/question or text)")


def load_texts(cell: Any) -> list[str]:
    """The cell's private texts: ``cell.texts`` (first ``limit``), or one per dataset record."""
    if cell.texts is not None:
        texts = list(cell.texts[: cell.limit] if cell.limit is not None else cell.texts)
    else:
        texts = [record_private_text(r) for r in load_records(cell)]
    for i, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise ValueError(f"cell {cell.name!r}: text {i} is empty; every private text must be a non-empty string")
    return texts


def load_cell_encoder(cell: Any, kind: str = "contextual") -> Any:
    """The cell's encoder: ``cell.encoder`` ('default' means the packaged all-MiniLM-L6-v2)."""
    from ..encoders import load_encoder

    name = None if cell.encoder == "default" else cell.encoder
    return load_encoder(name, kind=kind)
