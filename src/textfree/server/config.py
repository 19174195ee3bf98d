"""``ServerConfig``: what ``textfree serve`` serves and the limits it enforces (every field has its help text)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["ServerConfig", "LOOPBACK_HOSTS", "config_help", "is_loopback"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


@dataclass
class ServerConfig:
    """Models by id, the API-key store and the limits of one server process."""

    models: dict[str, str] = field(default_factory=dict, metadata={"help": "PPFT models for /v1/generate: model id -> run directory (what TextFreeLM.save writes; only its server part is loaded, never encoder/)."})
    embed_models: dict[str, str] = field(default_factory=dict, metadata={"help": "Models for /v1/embed: model id -> Hugging Face encoder directory (its transformer runs on the client's noisy token embeddings)."})
    keys_path: str | None = field(default=None, metadata={"help": "JSON file of hashed API keys (textfree serve --add-key TENANT writes it). Required unless auth is off."})
    auth: bool = field(default=True, metadata={"help": "Require an API key on every /v1 route. Off only for local experiments on a loopback host."})
    host: str = field(default="127.0.0.1", metadata={"help": "Address uvicorn binds (textfree serve); auth can be off only on a loopback address."})
    max_body_bytes: int = field(default=8 * 1024 * 1024, metadata={"help": "Largest HTTP request body (bytes); larger bodies get 413 before they are read in full."})
    max_batch_rows: int = field(default=32, metadata={"help": "Most prompts (payload rows) in one request; more get 413."})
    max_new_tokens: int = field(default=64, metadata={"help": "Largest max_new_tokens a request may ask for (422 above it); requests that give none get min(32, this)."})
    max_public_chars: int = field(default=16384, metadata={"help": "Longest public text per row, in characters (422 above it)."})
    rate_limit_per_minute: int = field(default=600, metadata={"help": "Requests per minute per tenant (token bucket, burst = this many); 0 = unlimited. Over it: 429 with Retry-After."})
    batch_wait_ms: float = field(default=5.0, metadata={"help": "Micro-batching: how long the first queued request waits for others to share its model call."})
    batch_max_rows: int = field(default=16, metadata={"help": "Micro-batching: the most rows one model call takes (a larger single request still runs alone)."})
    sqlite_path: str | None = field(default=None, metadata={"help": "NOT USED YET (next slice): the SQLite database for datasets and fine-tuning jobs."})
    device: str = field(default="cpu", metadata={"help": "torch device the models run on."})

    def __post_init__(self) -> None:
        for name in ("max_body_bytes", "max_batch_rows", "max_new_tokens", "max_public_chars", "batch_max_rows"):
            _positive_int(name, getattr(self, name))
        if not isinstance(self.rate_limit_per_minute, int) or isinstance(self.rate_limit_per_minute, bool) or self.rate_limit_per_minute < 0:
            raise ValueError(f"ServerConfig.rate_limit_per_minute must be an integer >= 0, got {self.rate_limit_per_minute!r}")
        if not isinstance(self.batch_wait_ms, (int, float)) or not 0 <= self.batch_wait_ms <= 10_000:
            raise ValueError(f"ServerConfig.batch_wait_ms must lie in [0, 10000], got {self.batch_wait_ms!r}")
        for attr in ("models", "embed_models"):
            table = getattr(self, attr)
            if not isinstance(table, dict) or not all(isinstance(k, str) and _valid_id(k) for k in table):
                raise ValueError(f"ServerConfig.{attr} must map model ids (letters, digits, '._-', at most 64) to directories")
        clash = set(self.models) & set(self.embed_models)
        if clash:
            raise ValueError(f"model id(s) {sorted(clash)} are both a generate and an embed model")
        if not self.models and not self.embed_models:
            raise ValueError("ServerConfig needs at least one model (models or embed_models)")
        if self.auth and not self.keys_path:
            raise ValueError("auth is on but no keys_path is given (create keys with: textfree serve --add-key TENANT --keys FILE)")
        if not self.auth and not is_loopback(self.host):
            raise ValueError(f"auth can be off only on a loopback host ({', '.join(LOOPBACK_HOSTS)}), not {self.host!r}")

    @property
    def default_new_tokens(self) -> int:
        return min(32, self.max_new_tokens)

    @property
    def keys_file(self) -> Path | None:
        return None if self.keys_path is None else Path(os.path.expanduser(self.keys_path))


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _valid_id(name: str) -> bool:
    return 0 < len(name) <= 64 and all(c.isascii() and (c.isalnum() or c in "._-") for c in name)


def _positive_int(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"ServerConfig.{name} must be an integer >= 1, got {value!r}")


def config_help() -> dict[str, str]:
    """Field name -> help text (for docs and the CLI)."""
    return {f.name: f.metadata.get("help", "") for f in fields(ServerConfig)}
