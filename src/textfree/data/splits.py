"""The deterministic PPFT train / held-out split for Pri-DDXPlus and Pri-SLJA.

PrivacyRestore's ``train_finetune.json`` is not available, so training data is built from ``dev`` plus a
fixed part of ``test``; the rest of ``test`` is held out from training, augmentation and model selection.

Two facts about the real files shape the rule (both measured by :func:`ppft_split`'s manifest):

* **dev is a subset of test.** Every dev row is byte-for-byte a test row (DDX 309/309, SLJA 130/130), so
  records are pooled by id first; a naive "dev + half of test" would put dev records in the held-out set.
* **test repeats private contexts.** The same patient description / case facts occur in several rows with
  different distractor options and the same gold answer (DDX: 154 groups of 2-4 rows, 344 test rows; SLJA:
  3 pairs), and some test-only rows share their context with a dev row (DDX 61, SLJA 2). Splitting row by
  row would let the model train on the exact private text it is later evaluated on.

The rule (``group_by="context"``, the default):

1. pool dev and test by record id (dev order first, then test-only rows in file order);
2. group records by their whitespace-normalised private text (``context + " " + question``);
3. a group containing any dev record goes to **train**;
4. any other group goes to **train** iff ``u(key) < fraction`` where
   ``u(key) = int(sha256(f"{salt}:{key}").hexdigest()[:16], 16) / 2**64`` and ``key`` is the group's
   normalised private text; otherwise to **heldout**.

Membership therefore depends only on record content, never on file order or Python's randomised ``hash``.
``group_by="id"`` hashes each record's id instead (no grouping; dev ids still go to train).

Model selection (which layout, how many epochs) must not look at the held-out part. ``validation=v`` moves the
train groups with ``u'(key) < v`` to a **validation** part, ``u'`` the same hash under the salt
``f"{salt}:validation"``: it is carved from the training rows only (held-out membership does not change), and its
groups are disjoint from what remains in train. ``validation=0`` (the default) leaves train as it was.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal, TypedDict

from .errors import DataError
from .paths import resolve_source
from .privacyrestore import load_privacyrestore, privacyrestore_dir
from .records import MCQARecord

__all__ = ["ppft_split", "check_validation", "stable_unit_interval", "private_key", "SPLIT_SALT", "PPFTSplit"]

#: Salt mixed into every hash; change it (and document why) only to draw a different fixed split.
SPLIT_SALT = "textfree-ppft-split-v1"
_WS = re.compile(r"\s+")


class PPFTSplit(TypedDict):
    """Return type of :func:`ppft_split`."""

    train: list[MCQARecord]
    validation: list[MCQARecord]
    heldout: list[MCQARecord]
    manifest: dict[str, Any]


def stable_unit_interval(key: str, salt: str = SPLIT_SALT) -> float:
    """Map ``key`` to ``[0, 1)`` with sha256 (stable across processes, platforms and Python versions)."""
    digest = hashlib.sha256(f"{salt}:{key}".encode()).hexdigest()
    return int(digest[:16], 16) / 2**64


def private_key(record: MCQARecord) -> str:
    """The whitespace-normalised private text (``context + " " + question``) used to group records."""
    return _WS.sub(" ", f"{record.context} {record.question}").strip()


def check_validation(value: Any, *, nullable: bool = False) -> None:
    """A validation share (:func:`ppft_split`'s ``validation``): a number in ``[0, 1)``, or None when ``nullable``."""
    if nullable and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"validation must be a number in [0, 1){' or null' if nullable else ''}, got {value!r}")


def _sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def ppft_split(
    dataset: str | os.PathLike[str] = "ddx",
    fraction: float = 0.5,
    *,
    group_by: Literal["context", "id"] = "context",
    salt: str = SPLIT_SALT,
    validation: float = 0.0,
) -> PPFTSplit:
    """Split a Pri-* dataset into ``train`` (dev + a fixed part of test) and ``heldout`` (the rest of test).

    Args:
        dataset: ``"ddx"``, ``"slja"`` (aliases ``pri-ddx``, ``pri-slja``) or a directory holding
            ``dev.json`` and ``test.json``.
        fraction: share of the test-only groups that go to train, in ``[0, 1]``.
        group_by: ``"context"`` (default; rows with the same private text stay together) or ``"id"``.
        salt: hash salt (see :data:`SPLIT_SALT`).
        validation: share of the train groups moved to a validation part for model selection, in ``[0, 1)``.

    Returns:
        ``{"train": [...], "validation": [...], "heldout": [...], "manifest": {...}}``; the manifest records the
        counts, the rule, the fraction, the salt and the sha256 of the input files.
    """
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must be in [0, 1], got {fraction}")
    check_validation(validation)
    if group_by not in ("context", "id"):
        raise ValueError(f"group_by must be 'context' or 'id', got {group_by!r}")
    default_rel = privacyrestore_dir(dataset) if isinstance(dataset, str) else None
    source = resolve_source(None if default_rel else dataset, default_rel, "Pri-* dataset")
    if source.kind != "local" or source.path is None or not source.path.is_dir():
        raise DataError("ppft_split needs a local directory with dev.json and test.json", source.path or dataset)
    directory = source.path
    dev = load_privacyrestore(directory, split="dev")
    test = load_privacyrestore(directory, split="test")

    dev_ids = {r.id for r in dev}
    if len(dev_ids) != len(dev):
        raise DataError("duplicate record ids within dev", directory / "dev.json")
    test_ids = [r.id for r in test]
    if len(set(test_ids)) != len(test_ids):
        raise DataError("duplicate record ids within test", directory / "test.json")
    pool: OrderedDict[str, MCQARecord] = OrderedDict((r.id, r) for r in dev)
    for record in test:
        pool.setdefault(record.id, record)

    def key_of(record: MCQARecord) -> str:
        return private_key(record) if group_by == "context" else record.id

    groups: dict[str, list[str]] = {}
    for record_id, record in pool.items():
        groups.setdefault(key_of(record), []).append(record_id)
    train_keys = {key for key, ids in groups.items() if any(i in dev_ids for i in ids)}
    dev_group_keys = set(train_keys)
    hashed_keys = [key for key in groups if key not in dev_group_keys]
    train_keys |= {key for key in hashed_keys if stable_unit_interval(key, salt) < fraction}

    validation_keys = {key for key in train_keys if stable_unit_interval(key, f"{salt}:validation") < validation}
    train = [r for r in pool.values() if key_of(r) in train_keys - validation_keys]
    validation_part = [r for r in pool.values() if key_of(r) in validation_keys]
    heldout = [r for r in pool.values() if key_of(r) not in train_keys]
    test_only = [r for r in test if r.id not in dev_ids]
    name = dataset if isinstance(dataset, str) and default_rel else str(directory)
    manifest: dict[str, Any] = {
        "dataset": name,
        "directory": str(directory),
        "files_sha256": {f: _sha256_file(directory / f) for f in ("dev.json", "test.json")},
        "rule": (
            "pool dev+test by record id; group by "
            + ("normalised private text (context + question)" if group_by == "context" else "record id")
            + "; groups containing a dev record -> train; other groups -> train iff "
            "int(sha256(f'{salt}:{key}')[:16], 16) / 2**64 < fraction, else heldout"
            + (
                "; train groups with the same hash under f'{salt}:validation' < validation -> validation"
                if validation
                else ""
            )
        ),
        "group_by": group_by,
        "fraction": fraction,
        "validation": validation,
        "salt": salt,
        "counts": {
            "dev": len(dev),
            "test": len(test),
            "dev_in_test": len(dev_ids & set(test_ids)),
            "unique": len(pool),
            "test_only": len(test_only),
            "groups": len(groups),
            "groups_with_dev": len(dev_group_keys),
            "test_only_sharing_dev_context": sum(1 for r in test_only if key_of(r) in dev_group_keys),
            "train": len(train),
            "train_from_dev_groups": sum(1 for r in train if key_of(r) in dev_group_keys),
            "train_from_hash": sum(1 for r in train if key_of(r) not in dev_group_keys),
            "validation": len(validation_part),
            "heldout": len(heldout),
        },
    }
    return {"train": train, "validation": validation_part, "heldout": heldout, "manifest": manifest}
