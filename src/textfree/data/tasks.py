"""Labelled GLUE tasks as (training, test) example lists, for downstream evaluation and fine-tuning (SnD A.4, RAPT).

Splits (:data:`TASK_SPLITS`): GLUE dev is the test split where its labels exist (SST-2, CoLA, RTE); MRPC's is the
labelled MSRP test file (GLUE's MRPC dev is carved out of MSRP train by an id list this project does not hold); QQP is
a 23,497-row subset of GLUE dev, split here by :func:`qqp_is_test` (sha256 of the pair id: about 20% test).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:  # the task names are read without torch (config checks); _subsample imports it
    import torch

__all__ = ["TASKS", "PAIR_TASKS", "TASK_SPLITS", "TaskData", "qqp_is_test", "load_task"]

TASKS = ("cola", "sst2", "mrpc", "rte", "qqp")
PAIR_TASKS = ("mrpc", "rte", "qqp")
#: task -> (training split, test split) of the task's loader in :mod:`textfree.data.glue` (QQP: see qqp_is_test).
TASK_SPLITS = {
    "cola": ("train", "dev"),
    "sst2": ("train", "dev"),
    "rte": ("train", "dev"),
    "mrpc": ("train", "test"),
    "qqp": ("dev[sha256(id)[0] >= 52]", "dev[sha256(id)[0] < 52]"),
}
_QQP_TEST_BYTE = 52  # 52 / 256 = 20.3% of the pairs


@dataclass(frozen=True)
class TaskData:
    """One task's examples: ``train_texts[i]`` / ``test_texts[i]`` a tuple of one (CoLA, SST-2) or two sentences."""

    task: str
    train_texts: list[tuple[str, ...]]
    train_labels: list[int]
    test_texts: list[tuple[str, ...]]
    test_labels: list[int]
    train_split: str
    test_split: str


def qqp_is_test(record_id: str) -> bool:
    """Whether a QQP pair belongs to this project's test split: the first byte of sha256(id) is below 52 (about 20%
    of the 23,497 pairs, ~4,770; the rest is the training split). Stable under any order, limit or file copy."""
    return hashlib.sha256(str(record_id).encode("utf-8")).digest()[0] < _QQP_TEST_BYTE


def _records_to_examples(records: Sequence[Any]) -> tuple[list[tuple[str, ...]], list[int]]:
    texts, labels = [], []
    for r in records:
        if r.label is None:
            continue
        texts.append((r.text_a, r.text_b) if hasattr(r, "text_b") else (r.text,))
        labels.append(int(r.label))
    return texts, labels


def _subsample(
    texts: list, labels: list, limit: int | None, generator: torch.Generator
) -> tuple[list[tuple[str, ...]], list[int]]:
    if limit is None or limit >= len(texts):
        return texts, labels
    import torch

    keep = sorted(torch.randperm(len(texts), generator=generator)[:limit].tolist())
    return [texts[i] for i in keep], [labels[i] for i in keep]


def load_task(
    task: str,
    *,
    root: str | Path | None = None,
    train_limit: int | None = None,
    test_limit: int | None = None,
    generator: torch.Generator,
) -> TaskData:
    """The labelled training and test examples of a GLUE ``task`` (:data:`TASKS`; splits: :data:`TASK_SPLITS`, see
    the module docstring), read from ``root`` (the shared data directory; None: ``$TEXTFREE_DATA``). With a limit,
    a uniformly drawn subset of that size (from ``generator``, training split first), in file order."""
    from . import glue

    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; known: {list(TASKS)}")
    for name, value in (("train_limit", train_limit), ("test_limit", test_limit)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 2):
            raise ValueError(f"{name} must be an integer >= 2 or null, got {value!r}")
    loader = getattr(glue, f"load_{task}")
    path = None if root is None else Path(root) / glue.GLUE_DIRS[task]
    if task == "qqp":
        records = loader(path, split="dev")
        train = _records_to_examples([r for r in records if not qqp_is_test(r.id)])
        test = _records_to_examples([r for r in records if qqp_is_test(r.id)])
    else:
        train_split, test_split = TASK_SPLITS[task]
        train = _records_to_examples(loader(path, split=train_split))
        test = _records_to_examples(loader(path, split=test_split))
    train = _subsample(*train, train_limit, generator)
    test = _subsample(*test, test_limit, generator)
    for name, (texts, _), least in (("training", train, 2), ("test", test, 1)):
        if len(texts) < least:
            raise ValueError(f"task {task!r}: the {name} split has {len(texts)} labelled examples; at least {least} "
                             "needed")  # fmt: skip
    return TaskData(task, train[0], train[1], test[0], test[1], *TASK_SPLITS[task])
