"""``Store``: the server's persistent state. SQLite (stdlib ``sqlite3``) for datasets, fine-tuning jobs, their events
and adapters; files under a data directory::

    data_dir/
      .lock                     held (flock) by the one server process using this store
      tmp/                      uploads being written (emptied at start)
      datasets/<id>/            payload.safetensors + rows.json of an uploaded dataset
      jobs/<id>/                a job's run directory: checkpoints while it trains, then the adapter

Every row carries its tenant and every read filters on it: a tenant cannot see another tenant's rows, and an id that
belongs to someone else reads exactly like one that does not exist. A database row is written only after its files
are complete (renamed into place), so a row always names whole files; files without a row (a crash mid-upload) are
removed at start.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

__all__ = ["Store", "StoreError", "new_id", "ACTIVE", "TERMINAL"]

SCHEMA_VERSION = 1
ACTIVE = ("queued", "running")
TERMINAL = ("succeeded", "failed", "cancelled")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS datasets (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, name TEXT, model TEXT NOT NULL, encoder_sha256 TEXT,
    rows INTEGER NOT NULL, slots INTEGER NOT NULL, bytes INTEGER NOT NULL, sha256 TEXT NOT NULL,
    privacy TEXT NOT NULL, idempotency_key TEXT, created_at REAL NOT NULL);
CREATE UNIQUE INDEX IF NOT EXISTS datasets_idem ON datasets (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, model TEXT NOT NULL, datasets TEXT NOT NULL,
    hyperparameters TEXT NOT NULL, status TEXT NOT NULL, step INTEGER NOT NULL DEFAULT 0, total_steps INTEGER NOT NULL,
    loss REAL, resumed_from_step INTEGER, adapter TEXT, error TEXT, cancel_requested INTEGER NOT NULL DEFAULT 0,
    idempotency_key TEXT, created_at REAL NOT NULL, started_at REAL, finished_at REAL);
CREATE UNIQUE INDEX IF NOT EXISTS jobs_idem ON jobs (tenant, idempotency_key) WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS jobs_status ON jobs (status, created_at);
CREATE TABLE IF NOT EXISTS events (
    job TEXT NOT NULL, seq INTEGER NOT NULL, created_at REAL NOT NULL, type TEXT NOT NULL, message TEXT NOT NULL,
    data TEXT, PRIMARY KEY (job, seq));
CREATE TABLE IF NOT EXISTS adapters (
    id TEXT PRIMARY KEY, tenant TEXT NOT NULL, model TEXT NOT NULL, job TEXT NOT NULL, created_at REAL NOT NULL);
"""


class StoreError(RuntimeError):
    """The database or data directory cannot be used (locked by another process, unknown schema, unwritable)."""


def new_id(prefix: str) -> str:
    """A random id: ``prefix`` + 20 hex digits (80 bits: not guessable, no counter to leak how many exist)."""
    return f"{prefix}{secrets.token_hex(10)}"


def _row(r: sqlite3.Row | None) -> dict[str, Any] | None:
    if r is None:
        return None
    out = dict(r)
    for key in ("datasets", "hyperparameters", "privacy", "data"):
        if isinstance(out.get(key), str):
            out[key] = json.loads(out[key])
    return out


class Store:
    """One SQLite connection (guarded by a lock: sqlite3 objects are not shared across threads otherwise)."""

    def __init__(self, sqlite_path: str | os.PathLike, data_dir: str | os.PathLike):
        self.path = Path(sqlite_path)
        self.data_dir = Path(data_dir)
        self._lock = threading.RLock()
        self._db: sqlite3.Connection | None = None
        self._lock_fd: int | None = None
        try:
            for sub in ("tmp", "datasets", "jobs"):
                (self.data_dir / sub).mkdir(parents=True, exist_ok=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create the data directory {str(self.data_dir)!r}: {exc.strerror}") from None
        self._lock_fd = os.open(self.data_dir / ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(self._lock_fd)
            raise StoreError(
                f"{str(self.data_dir)!r} is in use by another server process (one process per data directory)"
            ) from None
        try:
            self._db = sqlite3.connect(str(self.path), check_same_thread=False, timeout=30.0)
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            with self._db:
                self._db.executescript(_SCHEMA)
                found = self._db.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                if found is None:
                    self._db.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                elif found[0] != str(SCHEMA_VERSION):
                    raise StoreError(
                        f"{str(self.path)!r} has schema version {found[0]}; this server knows {SCHEMA_VERSION}"
                    )
        except (sqlite3.Error, StoreError) as exc:
            self.close()
            raise (
                exc
                if isinstance(exc, StoreError)
                else StoreError(f"cannot open the database {str(self.path)!r}: {exc}")
            ) from None
        self._sweep()

    def close(self) -> None:
        with self._lock:
            if self._db is not None:
                self._db.close()
                self._db = None
            if self._lock_fd is not None:
                os.close(self._lock_fd)  # releases the flock
                self._lock_fd = None

    # ------------------------------------------------------------------ files
    def dataset_dir(self, dataset_id: str) -> Path:
        return self.data_dir / "datasets" / dataset_id

    def job_dir(self, job_id: str) -> Path:
        return self.data_dir / "jobs" / job_id

    def tmp_dir(self) -> Path:
        return self.data_dir / "tmp"

    def _sweep(self) -> None:
        """Remove what a crash left: upload temporaries, and dataset directories no row names."""
        for p in self.tmp_dir().iterdir():
            if p.is_dir():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)
        known = {r[0] for r in self._query("SELECT id FROM datasets")}
        for p in (self.data_dir / "datasets").iterdir():
            if p.name not in known:
                shutil.rmtree(p, ignore_errors=True)

    # ------------------------------------------------------------------ SQL
    def _query(self, sql: str, args: tuple = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _one(self, sql: str, args: tuple = ()) -> dict[str, Any] | None:
        rows = self._query(sql, args)
        return _row(rows[0]) if rows else None

    def _write(self, sql: str, args: tuple = ()) -> int:
        with self._lock, self._db:
            return self._db.execute(sql, args).rowcount

    def _insert(self, table: str, values: dict[str, Any]) -> None:
        """INSERT inside the caller's transaction (the caller holds the lock)."""
        cols = ", ".join(values)
        marks = ", ".join("?" for _ in values)
        args = tuple(json.dumps(v) if isinstance(v, (dict, list)) else v for v in values.values())
        self._db.execute(f"INSERT INTO {table} ({cols}) VALUES ({marks})", args)

    # ------------------------------------------------------------------ datasets
    def add_dataset(self, values: dict[str, Any]) -> dict[str, Any]:
        with self._lock, self._db:
            self._insert("datasets", {**values, "created_at": time.time()})
        return self._one("SELECT * FROM datasets WHERE id = ?", (values["id"],))

    def get_dataset(self, tenant: str, dataset_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM datasets WHERE tenant = ? AND id = ?", (tenant, dataset_id))

    def list_datasets(self, tenant: str) -> list[dict[str, Any]]:
        return [
            _row(r)
            for r in self._query("SELECT * FROM datasets WHERE tenant = ? ORDER BY created_at DESC, id", (tenant,))
        ]

    def by_idempotency_key(self, table: str, tenant: str, key: str) -> dict[str, Any] | None:
        if table not in ("datasets", "jobs"):
            raise ValueError(table)
        return self._one(f"SELECT * FROM {table} WHERE tenant = ? AND idempotency_key = ?", (tenant, key))

    # ------------------------------------------------------------------ jobs
    def add_job(self, values: dict[str, Any]) -> dict[str, Any]:
        with self._lock, self._db:
            self._insert("jobs", {**values, "status": "queued", "created_at": time.time()})
            self._event(values["id"], "queued", "job queued")
        return self.job(values["id"])

    def job(self, job_id: str) -> dict[str, Any] | None:
        """A job by id, whoever owns it (the worker's view; routes use :meth:`get_job`)."""
        return self._one("SELECT * FROM jobs WHERE id = ?", (job_id,))

    def get_job(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM jobs WHERE tenant = ? AND id = ?", (tenant, job_id))

    def list_jobs(self, tenant: str) -> list[dict[str, Any]]:
        return [
            _row(r) for r in self._query("SELECT * FROM jobs WHERE tenant = ? ORDER BY created_at DESC, id", (tenant,))
        ]

    def active_jobs(self, tenant: str) -> int:
        return self._query("SELECT COUNT(*) FROM jobs WHERE tenant = ? AND status IN (?, ?)", (tenant, *ACTIVE))[0][0]

    def claim_next_job(self) -> dict[str, Any] | None:
        """The oldest queued job, now marked running (atomically: two workers never claim the same job)."""
        with self._lock, self._db:
            r = self._db.execute(
                "SELECT id FROM jobs WHERE status = 'queued' ORDER BY created_at, id LIMIT 1"
            ).fetchone()
            if r is None:
                return None
            self._db.execute(
                "UPDATE jobs SET status = 'running', started_at = COALESCE(started_at, ?) WHERE id = ?",
                (time.time(), r[0]),
            )
        return self.job(r[0])

    def requeue_orphans(self) -> list[str]:
        """Jobs left 'running' by a process that stopped (crash, kill, shutdown): queued again, to resume."""
        ids = [r[0] for r in self._query("SELECT id FROM jobs WHERE status = 'running' ORDER BY created_at, id")]
        for job_id in ids:
            with self._lock, self._db:
                self._db.execute("UPDATE jobs SET status = 'queued' WHERE id = ? AND status = 'running'", (job_id,))
                self._event(
                    job_id, "requeued", "the server restarted while this job ran; it resumes from its last checkpoint"
                )
        return ids

    def update_job(self, job_id: str, **values: Any) -> None:
        sets = ", ".join(f"{k} = ?" for k in values)
        self._write(f"UPDATE jobs SET {sets} WHERE id = ?", (*values.values(), job_id))

    def request_cancel(self, tenant: str, job_id: str) -> dict[str, Any] | None:
        """Cancel a queued job now; flag a running one (its worker stops at the next step). None: no such job."""
        with self._lock, self._db:
            job = self._db.execute("SELECT status FROM jobs WHERE tenant = ? AND id = ?", (tenant, job_id)).fetchone()
            if job is None:
                return None
            if job[0] == "queued":
                self._db.execute(
                    "UPDATE jobs SET status = 'cancelled', finished_at = ? WHERE id = ?", (time.time(), job_id)
                )
                self._event(job_id, "cancelled", "cancelled before it started")
            elif job[0] == "running":
                self._db.execute("UPDATE jobs SET cancel_requested = 1 WHERE id = ?", (job_id,))
                self._event(job_id, "cancel_requested", "cancellation requested; the job stops after its current step")
        return self.job(job_id)

    def cancel_requested(self, job_id: str) -> bool:
        return bool(self._query("SELECT cancel_requested FROM jobs WHERE id = ?", (job_id,))[0][0])

    def finish_job(
        self,
        job_id: str,
        status: str,
        message: str,
        *,
        error: bool = False,
        adapter: dict[str, Any] | None = None,
        data: dict[str, Any] | None = None,
    ) -> None:
        """Mark a job terminal with its last event (``message``; also its error when ``error``); with ``adapter`` (a
        succeeded job) insert the adapter. One transaction: whoever sees the status also sees the event and adapter."""
        if status not in TERMINAL:
            raise ValueError(f"not a terminal status: {status!r}")
        now = time.time()
        with self._lock, self._db:
            if adapter is not None:
                self._db.execute(
                    "INSERT INTO adapters (id, tenant, model, job, created_at) VALUES (?, ?, ?, ?, ?)",
                    (adapter["id"], adapter["tenant"], adapter["model"], job_id, now),
                )
            self._db.execute(
                "UPDATE jobs SET status = ?, error = ?, adapter = ?, finished_at = ? WHERE id = ?",
                (status, message if error else None, adapter["id"] if adapter else None, now, job_id),
            )
            self._event(job_id, status, message, data)

    # ------------------------------------------------------------------ events
    def add_event(self, job_id: str, type: str, message: str, data: dict[str, Any] | None = None) -> int:
        with self._lock, self._db:
            return self._event(job_id, type, message, data)

    def _event(self, job_id: str, type: str, message: str, data: dict[str, Any] | None = None) -> int:
        """Append an event inside the caller's transaction (the caller holds the lock)."""
        seq = self._db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM events WHERE job = ?", (job_id,)).fetchone()[0]
        self._db.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?)",
            (job_id, seq, time.time(), type, message, None if data is None else json.dumps(data)),
        )
        return seq

    def events(self, job_id: str, *, after: int = 0, limit: int = 100) -> list[dict[str, Any]]:
        rows = self._query(
            "SELECT * FROM events WHERE job = ? AND seq > ? ORDER BY seq LIMIT ?", (job_id, after, limit)
        )
        return [_row(r) for r in rows]

    # ------------------------------------------------------------------ adapters
    def get_adapter(self, tenant: str, adapter_id: str) -> dict[str, Any] | None:
        return self._one("SELECT * FROM adapters WHERE tenant = ? AND id = ?", (tenant, adapter_id))

    def list_adapters(self, tenant: str, model: str | None = None) -> list[dict[str, Any]]:
        if model is None:
            rows = self._query("SELECT * FROM adapters WHERE tenant = ? ORDER BY created_at, id", (tenant,))
        else:
            rows = self._query(
                "SELECT * FROM adapters WHERE tenant = ? AND model = ? ORDER BY created_at, id", (tenant, model)
            )
        return [_row(r) for r in rows]
