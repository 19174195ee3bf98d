"""Uploaded training datasets: validation, all-or-nothing storage, and the payload rows a job trains on.

A dataset is one privatized payload (pooled slots of the tenant's private prompts, validated against the model card
exactly like a ``/v1/generate`` payload) plus one target text per row (the answer to train towards, sent in clear by
the tenant's choice) and optional public text per row. On disk (``data_dir/datasets/<id>/``):

* ``payload.safetensors``: the validated payload, re-serialised, with the effective public text in its header;
* ``rows.json``: ``{"format": "textfree.dataset", "format_version": 1, "targets": [...]}``.

Both files are written into a fresh directory under ``data_dir/tmp``, fsynced, and the directory is renamed into
place before the database row is inserted: a crash or an error at any point leaves no dataset, never half of one.
Nothing is unpickled: the payload goes through :meth:`Payload.from_bytes`, the rest through pydantic / ``json``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..atomic import atomic_write_bytes
from ..payload import Payload
from .config import ServerConfig
from .errors import ApiError
from .models import read_payload
from .registry import TrainingRow
from .store import Store, new_id

__all__ = [
    "DatasetFileError",
    "DatasetUpload",
    "validate_upload",
    "write_dataset",
    "dataset_view",
    "load_rows",
    "DATASET_FORMAT",
]

DATASET_FORMAT = "textfree.dataset"


class DatasetFileError(ValueError):
    """A stored dataset cannot be read back; the message names the dataset id and the problem, never a path."""


DATASET_VERSION = 1
PAYLOAD_FILE = "payload.safetensors"
ROWS_FILE = "rows.json"


class DatasetUpload(BaseModel):
    """The body of ``POST /v1/datasets`` (JSON)."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        max_length=64, description="The generate model the payload was made for (its card's encoder, k, mechanism)."
    )
    name: str | None = Field(None, max_length=64, description="A label of your choice (not unique).")
    payload_b64: str = Field(
        description="A pooled payload (safetensors bytes, docs/payload.md), standard base64: one row per training "
        "example."
    )
    targets: list[str] = Field(
        description="One target text per payload row: what the model should answer (sent in clear)."
    )
    public: list[str] | None = Field(None, description="Public text per row (overrides the payload's own 'public').")


def validate_upload(
    upload: DatasetUpload, raw: bytes, registry, limits: ServerConfig
) -> tuple[Any, Payload, list[str]]:
    """(model, payload with its effective public text, targets), or an ApiError naming what is wrong.

    ``limits`` is the server config with ``max_batch_rows`` set to ``max_dataset_rows`` (the card checks of
    ``/v1/generate`` then apply unchanged)."""
    model = registry.get(upload.model, "generate")
    payload = read_payload(raw, max_bytes=limits.max_dataset_bytes, max_rows=limits.max_batch_rows)
    prepared = model.prepare(payload, upload.public, limits)
    targets = upload.targets
    if len(targets) != payload.batch_size:
        raise ApiError(
            422,
            "invalid_request",
            f"targets has {len(targets)} entries; the payload has {payload.batch_size} rows (one target per row)",
        )
    for i, t in enumerate(targets):
        if not t.strip():
            raise ApiError(422, "invalid_request", f"targets[{i}] is empty")
        if len(t) > limits.max_target_chars:
            raise ApiError(
                422, "invalid_request", f"targets[{i}] has {len(t)} characters; the limit is {limits.max_target_chars}"
            )
        try:
            t.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, "invalid_request", f"targets[{i}] is not valid Unicode (lone surrogate)") from None
    return model, dataclasses.replace(payload, public=prepared.public), list(targets)


def _finite(loss: dict[str, Any]) -> dict[str, Any]:
    """A privacy loss for JSON: an infinite epsilon (a clean, non-private payload) becomes null."""
    eps = loss["epsilon"]
    return {**loss, "epsilon": None if math.isinf(eps) else eps}


def write_dataset(
    store: Store,
    *,
    tenant: str,
    model_id: str,
    payload: Payload,
    targets: list[str],
    name: str | None,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """Store the dataset whole (files renamed into place, then the row) or not at all; returns its row."""
    dataset_id = new_id("ds_")
    data = payload.to_bytes()
    rows = {"format": DATASET_FORMAT, "format_version": DATASET_VERSION, "targets": targets}
    tmp = Path(tempfile.mkdtemp(dir=store.tmp_dir(), prefix=f"{dataset_id}."))
    final = store.dataset_dir(dataset_id)
    try:
        atomic_write_bytes(tmp / PAYLOAD_FILE, data)
        atomic_write_bytes(tmp / ROWS_FILE, json.dumps(rows, ensure_ascii=False).encode("utf-8"))
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        return store.add_dataset(
            {
                "id": dataset_id,
                "tenant": tenant,
                "name": name,
                "model": model_id,
                "encoder_sha256": payload.encoder.sha256,
                "rows": payload.batch_size,
                "slots": sum(payload.lengths),
                "bytes": len(data),
                "sha256": hashlib.sha256(data).hexdigest(),
                "privacy": {"worst_case_row": _finite(payload.worst_case_loss().to_dict())},
                "idempotency_key": idempotency_key,
            }
        )
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(final, ignore_errors=True)
        if isinstance(exc, sqlite3.IntegrityError) and idempotency_key:  # a concurrent retry stored it first
            existing = store.by_idempotency_key("datasets", tenant, idempotency_key)
            if existing is not None:
                return existing
        raise


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def dataset_view(row: dict[str, Any]) -> dict[str, Any]:
    """What the API shows of a dataset (never the vectors, targets or public text: the tenant has them)."""
    return {
        "id": row["id"],
        "object": "dataset",
        "name": row["name"],
        "model": row["model"],
        "rows": row["rows"],
        "slots": row["slots"],
        "bytes": row["bytes"],
        "sha256": row["sha256"],
        "privacy": row["privacy"],
        "created_at": row["created_at"],
    }


def load_rows(store: Store, dataset_ids: list[str]) -> list[TrainingRow]:
    """The :class:`~textfree.server.registry.TrainingRow` rows of stored datasets, in order (a job's training data)."""
    examples = []
    for dataset_id in dataset_ids:
        d = store.dataset_dir(dataset_id)
        payload = Payload.load(d / PAYLOAD_FILE, max_bytes=(d / PAYLOAD_FILE).stat().st_size)
        rows = json.loads((d / ROWS_FILE).read_text(encoding="utf-8"))
        if rows.get("format") != DATASET_FORMAT or rows.get("format_version") != DATASET_VERSION:
            raise DatasetFileError(
                f"dataset {dataset_id}: {ROWS_FILE} is not a {DATASET_FORMAT} v{DATASET_VERSION} file"
            )
        targets = rows["targets"]
        if len(targets) != payload.batch_size:
            raise DatasetFileError(
                f"dataset {dataset_id}: {len(targets)} targets for {payload.batch_size} payload rows"
            )
        public = payload.public or [""] * payload.batch_size
        for i, n in enumerate(payload.lengths):
            examples.append(TrainingRow(payload.vectors[i, :n].float().clone(), public[i], targets[i]))
    return examples
