"""Uploaded training datasets: validation, all-or-nothing storage, and the rows a job trains on.

A dataset is bound to the model it was uploaded for, and its kind is that model's task's:

* a **generate** model (PPFT): one privatized payload (pooled slots of the tenant's private prompts, validated against
  the model card exactly like a ``/v1/generate`` payload) plus one target text per row (the answer to train towards,
  sent in clear by the tenant's choice) and optional public text per row. On disk (``data_dir/datasets/<id>/``):
  ``payload.safetensors`` (the validated payload, re-serialised, with the effective public text in its header) and
  ``rows.json`` (``{"format": "textfree.dataset", "format_version": 1, "targets": [...]}``);
* a **classify** model (RAPT): examples privatized to text on the client, exactly as ``/v1/classify`` takes them
  (checked against the card the same way), plus one label per example in the card's label set. On disk:
  ``examples.json`` (``{"format": "textfree.text_dataset", "format_version": 1, "examples": [{"parts", "plain",
  "sequence", "label"}, ...]}``).

The files are written into a fresh directory under ``data_dir/tmp``, fsynced, and the directory is renamed into
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
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, Strict

from ..atomic import atomic_write_bytes
from ..payload import Payload
from .config import ServerConfig
from .errors import ApiError
from .models import read_payload
from .registry import TextTrainingRow, TrainingRow
from .schemas import ClassifyExample
from .store import Store, new_id

__all__ = [
    "DatasetFileError",
    "DatasetUpload",
    "PayloadDataset",
    "TextDataset",
    "validate_upload",
    "write_dataset",
    "dataset_view",
    "load_rows",
    "DATASET_FORMAT",
    "TEXT_DATASET_FORMAT",
]

DATASET_FORMAT = "textfree.dataset"
TEXT_DATASET_FORMAT = "textfree.text_dataset"


class DatasetFileError(ValueError):
    """A stored dataset cannot be read back; the message names the dataset id and the problem, never a path."""


DATASET_VERSION = 1
PAYLOAD_FILE = "payload.safetensors"
ROWS_FILE = "rows.json"
TEXT_FILE = "examples.json"
#: The upload fields of each task's datasets (the other task's fields are refused).
_FIELDS = {"generate": ("payload_b64", "targets", "public"), "classify": ("examples", "labels")}


class DatasetUpload(BaseModel):
    """The body of ``POST /v1/datasets`` (JSON): ``payload_b64`` + ``targets`` (+ ``public``) for a generate model,
    ``examples`` + ``labels`` for a classify model."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(
        max_length=64,
        description="The model the data was privatized for (generate: its card's encoder, k, mechanism; classify: its "
        "card's word table, eta, categories and plain tokens).",
    )
    name: str | None = Field(None, max_length=64, description="A label of your choice (not unique).")
    payload_b64: str | None = Field(
        None,
        description="Generate models: a pooled payload (safetensors bytes, docs/payload.md), standard base64: one row "
        "per training example.",
    )
    targets: list[str] | None = Field(
        None, description="Generate models: one target text per payload row: what the model should answer (in clear)."
    )
    public: list[str] | None = Field(
        None, description="Generate models: public text per row (overrides the payload's own 'public')."
    )
    examples: list[ClassifyExample] | None = Field(
        None, description="Classify models: the examples privatized to text on the client, as /v1/classify takes them."
    )
    labels: list[Annotated[int, Strict()]] | None = Field(
        None, description="Classify models: one label per example, in [0, the card's num_labels)."
    )


@dataclass(frozen=True)
class PayloadDataset:
    """A validated upload for a generate model: the payload (with its effective public text) and the targets."""

    model: Any
    payload: Payload
    targets: list[str]

    def files(self) -> dict[str, bytes]:
        rows = {"format": DATASET_FORMAT, "format_version": DATASET_VERSION, "targets": self.targets}
        return {PAYLOAD_FILE: self.payload.to_bytes(), ROWS_FILE: json.dumps(rows, ensure_ascii=False).encode("utf-8")}

    def values(self, files: dict[str, bytes]) -> dict[str, Any]:
        data = files[PAYLOAD_FILE]
        return {
            "encoder_sha256": self.payload.encoder.sha256,
            "rows": self.payload.batch_size,
            "slots": sum(self.payload.lengths),
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            "privacy": {"worst_case_row": _finite(self.payload.worst_case_loss().to_dict())},
        }


@dataclass(frozen=True)
class TextDataset:
    """A validated upload for a classify model: the privatized examples, each with its label."""

    model: Any
    examples: list[dict[str, Any]]  # {"parts", "plain", "sequence", "label"}

    def files(self) -> dict[str, bytes]:
        doc = {"format": TEXT_DATASET_FORMAT, "format_version": DATASET_VERSION, "examples": self.examples}
        return {TEXT_FILE: json.dumps(doc, ensure_ascii=False).encode("utf-8")}

    def values(self, files: dict[str, bytes]) -> dict[str, Any]:
        data, card = files[TEXT_FILE], self.model.card
        words = sum(len(p.split()) for ex in self.examples for p in ex["parts"])
        words += sum(len(ex["plain"] or ()) for ex in self.examples)
        return {
            "encoder_sha256": card.get("encoder_sha256"),
            "rows": len(self.examples),
            "slots": words,
            "bytes": len(data),
            "sha256": hashlib.sha256(data).hexdigest(),
            # only the client knows which words it privatized: the server records what it checked against
            "privacy": {
                "worst_case_row": None,
                "mechanism": card.get("mechanism"),
                "eta": card.get("eta"),
                "pos_categories": card.get("pos_categories"),
            },
        }


def validate_upload(upload: DatasetUpload, registry, limits: ServerConfig) -> PayloadDataset | TextDataset:
    """The validated dataset of the model ``upload`` names, or an ApiError naming what is wrong.

    ``limits`` is the server config with ``max_batch_rows`` and ``max_classify_examples`` set to ``max_dataset_rows``
    (the card checks of ``/v1/generate`` and ``/v1/classify`` then apply unchanged)."""
    known = registry.models.get(upload.model)
    task = known.task if known is not None and known.task in _FIELDS else "generate"
    model = registry.get(upload.model, task)  # 404 for an unknown model or one that takes no datasets
    _check_fields(upload, model)
    if task == "classify":
        return _validate_text(upload, model, limits)
    return _validate_payload(upload, model, limits)


def _check_fields(upload: DatasetUpload, model) -> None:
    """422 when the upload carries another task's fields, or lacks its own."""
    own = _FIELDS[model.task]
    given = {name for name in upload.model_fields_set if getattr(upload, name) is not None}
    other = sorted(name for fields in _FIELDS.values() for name in fields if name in given and name not in own)
    kind = "examples privatized to text and their labels" if model.task == "classify" else "a payload and targets"
    if other:
        raise ApiError(
            422,
            "invalid_request",
            f"model {model.id!r} trains on {kind} ({', '.join(own[:2])}), not {', '.join(other)}",
        )
    missing = [name for name in own[:2] if name not in given]
    if missing:
        raise ApiError(422, "invalid_request", f"model {model.id!r} trains on {kind}: give {' and '.join(missing)}")


def _validate_payload(upload: DatasetUpload, model, limits: ServerConfig) -> PayloadDataset:
    """A generate model's dataset: the payload checked like a ``/v1/generate`` payload, one target per row."""
    from .app import _b64

    raw = _b64(upload.payload_b64, limits.max_dataset_bytes)
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
    return PayloadDataset(model, dataclasses.replace(payload, public=prepared.public), list(targets))


def _validate_text(upload: DatasetUpload, model, limits: ServerConfig) -> TextDataset:
    """A classify model's dataset: the examples checked like a ``/v1/classify`` request's, one label per example in
    the card's label set."""
    examples, labels = upload.examples, upload.labels
    if not examples:
        raise ApiError(422, "invalid_request", "examples is empty: a dataset needs at least one example")
    if len(examples) > limits.max_dataset_rows:
        raise ApiError(
            413,
            "too_many_rows",
            f"the dataset has {len(examples)} examples; this server takes at most {limits.max_dataset_rows} per "
            "dataset",
        )
    model.prepare(examples, None, limits)  # the card's checks of /v1/classify, per example (422 naming it)
    if len(labels) != len(examples):
        raise ApiError(
            422,
            "invalid_request",
            f"labels has {len(labels)} entries; there are {len(examples)} examples (one label per example)",
        )
    n_labels = int(model.card["num_labels"])
    for i, label in enumerate(labels):
        if not 0 <= label < n_labels:
            raise ApiError(
                422,
                "invalid_request",
                f"labels[{i}] is {label}; model {model.id!r} has the labels 0 to {n_labels - 1}",
            )
    rows = [
        {"parts": list(ex.parts), "plain": None if ex.plain is None else list(ex.plain), "sequence": ex.sequence,
         "label": int(label)}
        for ex, label in zip(examples, labels)
    ]  # fmt: skip
    return TextDataset(model, rows)


def _finite(loss: dict[str, Any]) -> dict[str, Any]:
    """A privacy loss for JSON: an infinite epsilon (a clean, non-private payload) becomes null."""
    eps = loss["epsilon"]
    return {**loss, "epsilon": None if math.isinf(eps) else eps}


def write_dataset(
    store: Store,
    dataset: PayloadDataset | TextDataset,
    *,
    tenant: str,
    name: str | None,
    idempotency_key: str | None,
) -> dict[str, Any]:
    """Store the dataset whole (files renamed into place, then the row) or not at all; returns its row."""
    dataset_id = new_id("ds_")
    files = dataset.files()
    tmp = Path(tempfile.mkdtemp(dir=store.tmp_dir(), prefix=f"{dataset_id}."))
    final = store.dataset_dir(dataset_id)
    try:
        for file_name, data in files.items():
            atomic_write_bytes(tmp / file_name, data)
        os.replace(tmp, final)
        _fsync_dir(final.parent)
        return store.add_dataset(
            {
                "id": dataset_id,
                "tenant": tenant,
                "name": name,
                "model": dataset.model.id,
                **dataset.values(files),
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


def load_rows(store: Store, dataset_ids: list[str]) -> list[TrainingRow] | list[TextTrainingRow]:
    """The rows of stored datasets, in order (a job's training data): :class:`~textfree.server.registry.TrainingRow`
    of payload datasets, :class:`~textfree.server.registry.TextTrainingRow` of text datasets."""
    rows: list = []
    for dataset_id in dataset_ids:
        d = store.dataset_dir(dataset_id)
        rows += _text_rows(d, dataset_id) if (d / TEXT_FILE).is_file() else _payload_rows(d, dataset_id)
    return rows


def _payload_rows(d: Path, dataset_id: str) -> list[TrainingRow]:
    payload = Payload.load(d / PAYLOAD_FILE, max_bytes=(d / PAYLOAD_FILE).stat().st_size)
    rows = json.loads((d / ROWS_FILE).read_text(encoding="utf-8"))
    if rows.get("format") != DATASET_FORMAT or rows.get("format_version") != DATASET_VERSION:
        raise DatasetFileError(f"dataset {dataset_id}: {ROWS_FILE} is not a {DATASET_FORMAT} v{DATASET_VERSION} file")
    targets = rows["targets"]
    if len(targets) != payload.batch_size:
        raise DatasetFileError(f"dataset {dataset_id}: {len(targets)} targets for {payload.batch_size} payload rows")
    public = payload.public or [""] * payload.batch_size
    return [TrainingRow(payload.vectors[i, :n].float().clone(), public[i], targets[i]) for i, n in
            enumerate(payload.lengths)]  # fmt: skip


def _text_rows(d: Path, dataset_id: str) -> list[TextTrainingRow]:
    try:
        doc = json.loads((d / TEXT_FILE).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise DatasetFileError(f"dataset {dataset_id}: {TEXT_FILE} is not JSON") from None
    if not isinstance(doc, dict) or (doc.get("format"), doc.get("format_version")) != (
        TEXT_DATASET_FORMAT,
        DATASET_VERSION,
    ):
        raise DatasetFileError(f"dataset {dataset_id}: {TEXT_FILE} is not a {TEXT_DATASET_FORMAT} v1 file")
    try:
        return [_text_row(ex) for ex in doc["examples"]]
    except (KeyError, TypeError, ValueError):
        raise DatasetFileError(f"dataset {dataset_id}: {TEXT_FILE} holds a malformed example") from None


def _text_row(ex: dict[str, Any]) -> TextTrainingRow:
    parts, plain, sequence, label = ex["parts"], ex["plain"], ex["sequence"], ex["label"]
    if not (isinstance(parts, list) and parts and all(isinstance(p, str) for p in parts)):
        raise ValueError("parts")
    if plain is not None and not all(isinstance(w, str) for w in plain):
        raise ValueError("plain")
    for value in (sequence, label):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise ValueError("an index")
    if label is None:
        raise ValueError("label")
    return TextTrainingRow(tuple(parts), None if plain is None else tuple(plain), sequence, label)
