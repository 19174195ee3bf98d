"""API keys per tenant, stored hashed, and a per-tenant rate limit.

A key is ``tf_<key_id>.<secret>``: ``key_id`` (12 hex digits) names the stored entry, ``secret`` is 32 random bytes
(URL-safe base64). The store keeps only ``sha256(salt || secret)`` with a random 16-byte salt per key, never the key.
A slow KDF (scrypt, bcrypt) protects low-entropy passwords; these secrets have 256 bits of entropy, so a salted
sha256 is as strong and keeps the check cheap on every request. Comparison is constant-time (``hmac.compare_digest``).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from ..atomic import atomic_write_text

__all__ = ["KeyStore", "KeyStoreError", "RateLimiter", "KEY_PREFIX", "TENANT_PATTERN"]

KEYS_FORMAT = "textfree.server.keys"
KEYS_VERSION = 1
KEY_PREFIX = "tf_"
TENANT_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_KEY_PATTERN = re.compile(r"^tf_([0-9a-f]{12})\.([A-Za-z0-9_-]{43})$")
_DUMMY_SALT = bytes(16)


class KeyStoreError(ValueError):
    """The keys file is unreadable or malformed, or a tenant name is invalid."""


def _digest(salt: bytes, secret: str) -> str:
    return hashlib.sha256(salt + secret.encode("ascii")).hexdigest()


@dataclass(frozen=True)
class _Entry:
    tenant: str
    salt: bytes
    digest: str


class KeyStore:
    """A JSON file of hashed keys. The file is re-read when it changes, so keys added or revoked while the server
    runs take effect on the next request."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._entries: dict[str, _Entry] = {}

    # ------------------------------------------------------------------ file
    def _read(self) -> dict:
        if not self.path.exists():
            return {"format": KEYS_FORMAT, "format_version": KEYS_VERSION, "keys": {}}
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise KeyStoreError(f"cannot read the keys file {str(self.path)!r}: {exc}") from None
        if (
            not isinstance(data, dict)
            or data.get("format") != KEYS_FORMAT
            or data.get("format_version") != KEYS_VERSION
        ):
            raise KeyStoreError(f"{str(self.path)!r} is not a {KEYS_FORMAT} v{KEYS_VERSION} file")
        if not isinstance(data.get("keys"), dict):
            raise KeyStoreError(f"{str(self.path)!r}: 'keys' must be a mapping")
        return data

    def _write(self, data: dict) -> None:
        atomic_write_text(self.path, json.dumps(data, indent=2, sort_keys=True) + "\n", mode=0o600)

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp and (stamp is not None or not self._entries):
            return
        entries = {}
        for key_id, e in self._read()["keys"].items():
            try:
                entries[key_id] = _Entry(e["tenant"], bytes.fromhex(e["salt"]), e["sha256"])
            except (KeyError, TypeError, ValueError):
                raise KeyStoreError(f"{str(self.path)!r}: malformed entry {key_id!r}") from None
        self._entries, self._stamp = entries, stamp

    # ------------------------------------------------------------------ management
    def add_key(self, tenant: str) -> str:
        """Create a key for ``tenant``; returns the key (the only time it exists in clear)."""
        if not isinstance(tenant, str) or not TENANT_PATTERN.match(tenant):
            raise KeyStoreError(f"tenant must match {TENANT_PATTERN.pattern} (letters, digits, '._-'), got {tenant!r}")
        with self._lock:
            data = self._read()
            key_id = secrets.token_hex(6)
            while key_id in data["keys"]:  # pragma: no cover - 48 random bits
                key_id = secrets.token_hex(6)
            secret = secrets.token_urlsafe(32)
            salt = secrets.token_bytes(16)
            data["keys"][key_id] = {
                "tenant": tenant,
                "salt": salt.hex(),
                "sha256": _digest(salt, secret),
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            }
            self._write(data)
            self._stamp = None
        return f"{KEY_PREFIX}{key_id}.{secret}"

    def revoke(self, key_id: str) -> bool:
        """Remove the key ``key_id`` (the 12 hex digits after ``tf_``); True when it existed."""
        with self._lock:
            data = self._read()
            found = data["keys"].pop(key_id, None) is not None
            if found:
                self._write(data)
                self._stamp = None
        return found

    def tenants(self) -> dict[str, str]:
        """key_id -> tenant (no secrets, no hashes)."""
        with self._lock:
            self._refresh()
            return {k: e.tenant for k, e in self._entries.items()}

    # ------------------------------------------------------------------ checking
    def verify(self, key: str | None) -> str | None:
        """The tenant of ``key``, or None. The digest comparison is constant-time, and a well-formed key with an
        unknown id is hashed and compared too, so timing says nothing about the secret."""
        if not isinstance(key, str):
            return None
        m = _KEY_PATTERN.match(key)
        if not m:
            return None
        key_id, secret = m.groups()
        with self._lock:
            self._refresh()
            entry = self._entries.get(key_id)
        salt, want = (entry.salt, entry.digest) if entry else (_DUMMY_SALT, "0" * 64)
        ok = hmac.compare_digest(_digest(salt, secret), want)
        return entry.tenant if entry and ok else None


class RateLimiter:
    """Token bucket per tenant: ``per_minute`` requests per minute, bursts up to ``per_minute``; 0 = unlimited."""

    def __init__(self, per_minute: int, *, clock=time.monotonic):
        self.per_minute = per_minute
        self._clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, tenant: str) -> float:
        """0.0 when the request may go ahead, else the seconds until it may (for Retry-After)."""
        if self.per_minute <= 0:
            return 0.0
        rate = self.per_minute / 60.0
        with self._lock:
            now = self._clock()
            tokens, last = self._buckets.get(tenant, (float(self.per_minute), now))
            tokens = min(float(self.per_minute), tokens + (now - last) * rate)
            if tokens >= 1.0:
                self._buckets[tenant] = (tokens - 1.0, now)
                return 0.0
            self._buckets[tenant] = (tokens, now)
            return (1.0 - tokens) / rate
