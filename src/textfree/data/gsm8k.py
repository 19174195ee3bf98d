"""GSM8K grade-school math (openai/grade-school-math) as :class:`InstructRecord`.

Files: ``<shared>/gsm8k/{train,test}.jsonl`` (7,473 / 1,319 rows) of ``{"question", "answer"}`` where
``answer`` is a worked solution ending in ``#### <final answer>``.

Mapping: ``instruction`` = question, ``input`` = ``""``, ``output`` = the final answer (the text after the last
``####``, stripped; with ``target="solution"`` the whole worked solution instead). ``attributes`` always hold
both ``final_answer`` and ``solution``. A solution without ``####`` is a ``DataError``. Ids are
``gsm8k-<split>-<n>``; the hub name ``openai/gsm8k`` needs config ``main`` (the default ``hub_config``).
"""

from __future__ import annotations

import os
from typing import Any, Literal

from ._io import field, iter_jsonl
from ._loading import build, iter_rows, load_rows
from .errors import DataError
from .paths import infer_split
from .records import InstructRecord

__all__ = ["load_gsm8k", "extract_final_answer", "GSM8K_DIR"]

GSM8K_DIR = "gsm8k"


def extract_final_answer(solution: str) -> str:
    """The text after the last ``####`` in a GSM8K solution, stripped (``ValueError`` if there is none)."""
    if "####" not in solution:
        raise ValueError("solution has no '####' final-answer marker")
    final = solution.rsplit("####", 1)[1].strip()
    if not final:
        raise ValueError("empty final answer after '####'")
    return final


def load_gsm8k(
    path_or_name: str | os.PathLike[str] | None = None,
    split: str = "test",
    limit: int | None = None,
    *,
    target: Literal["final", "solution"] = "final",
    hub_config: str | None = "main",
) -> list[InstructRecord]:
    """Load GSM8K; ``output`` is the final answer (``target="final"``) or the worked solution."""
    if target not in ("final", "solution"):
        raise ValueError(f"target must be 'final' or 'solution', got {target!r}")
    files = {"train": "train.jsonl", "test": "test.jsonl"}
    split = infer_split(path_or_name, split, files)
    counter = iter(range(10**9))

    def convert(where: str, line: int, row: dict[str, Any]) -> InstructRecord:
        question = field(row, "question", where, line)
        solution = field(row, "answer", where, line)
        try:
            final = extract_final_answer(solution)
        except ValueError as exc:
            raise DataError(str(exc), where, line) from None
        output = final if target == "final" else solution
        return build(
            InstructRecord,
            where,
            line,
            f"gsm8k-{split}-{next(counter)}",
            question,
            "",
            output,
            {"final_answer": final, "solution": solution},
        )

    rows = iter_rows(
        path_or_name,
        split=split,
        what="GSM8K",
        default_rel=GSM8K_DIR,
        files=files,
        read=iter_jsonl,
        hub_config=hub_config,
    )
    return load_rows(rows, convert, limit)
