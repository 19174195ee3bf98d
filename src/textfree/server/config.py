"""``ServerConfig``: what ``textfree serve`` serves and the limits it enforces (every field has its help text)."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["ServerConfig", "DEFAULT_SYSTEMS", "LOOPBACK_HOSTS", "config_help", "is_loopback"]

LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")
FINE_TUNING_LIMITS = (
    "max_dataset_rows",
    "max_dataset_bytes",
    "max_target_chars",
    "max_concurrent_jobs",
    "max_jobs_per_tenant",
    "max_job_steps",
    "max_loaded_adapters",
)
BACKENDS = ("hf", "vllm")
# the served system of a model the config does not name one for, per table (textfree.server.registry)
DEFAULT_SYSTEMS = {"models": "ppft", "embed_models": "hf-embed"}
VLLM_DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class ServerConfig:
    """Models by id, the API-key store and the limits of one server process."""

    models: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Run directories: model id -> run directory or Hugging Face hub id (owner/name: downloaded, or "
            "read from the local cache when HF_HUB_OFFLINE=1), served by the system that recognises the run's files "
            "(or the one named in systems): a PPFT run at /v1/generate (what TextFreeLM.save writes; only its server "
            "part is loaded, never encoder/), a RAPT run at /v1/classify (textfree rapt train --out)."
        },
    )
    embed_models: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Models for /v1/embed: model id -> Hugging Face encoder directory (its transformer runs on the "
            "client's noisy token embeddings)."
        },
    )
    denoisers: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Client-side denoisers (SnD) published with embed models: embed model id -> denoiser file or "
            "directory holding denoiser.safetensors, or a hub id (owner/name) of a repository holding it. Its "
            "encoder_sha256 must be the model's weights' sha256; the card names it "
            "and GET /v1/models/{id}/denoiser serves it (public weights: train it on public data only)."
        },
    )
    systems: dict[str, str] = field(
        default_factory=dict,
        metadata={
            "help": "Served system per model id (textfree.server.registry), for models not of the default one: "
            "'ppft' for models (unless a registered system recognises the run's files, e.g. 'rapt'), 'hf-embed' for "
            "embed_models."
        },
    )
    keys_path: str | None = field(
        default=None,
        metadata={
            "help": "JSON file of hashed API keys (textfree serve --add-key TENANT writes it). Required unless auth is "
            "off."
        },
    )
    auth: bool = field(
        default=True,
        metadata={"help": "Require an API key on every /v1 route. Off only for local experiments on a loopback host."},
    )
    host: str = field(
        default="127.0.0.1",
        metadata={"help": "Address uvicorn binds (textfree serve); auth can be off only on a loopback address."},
    )
    max_body_bytes: int = field(
        default=8 * 1024 * 1024,
        metadata={"help": "Largest HTTP request body (bytes); larger bodies get 413 before they are read in full."},
    )
    max_batch_rows: int = field(
        default=32, metadata={"help": "Most prompts (payload rows) in one request; more get 413."}
    )
    max_new_tokens: int = field(
        default=64,
        metadata={
            "help": "Largest max_new_tokens a request may ask for (422 above it); requests that give none get min(32, "
            "this)."
        },
    )
    max_public_chars: int = field(
        default=16384,
        metadata={
            "help": "Longest public text per row, and longest privatized example of /v1/classify, in characters (422 "
            "above it)."
        },
    )
    max_classify_examples: int = field(
        default=64, metadata={"help": "Most privatized examples in one POST /v1/classify (413 above it)."}
    )
    max_classify_words: int = field(
        default=512,
        metadata={
            "help": "Most words (whitespace-separated, plain tokens included) in one privatized example of "
            "/v1/classify (422 above it)."
        },
    )
    rate_limit_per_minute: int = field(
        default=600,
        metadata={
            "help": "Requests per minute per tenant (token bucket, burst = this many); 0 = unlimited. Over it: 429 "
            "with Retry-After."
        },
    )
    head_timeout_s: float = field(
        default=10.0,
        metadata={
            "help": "Seconds a client has to send a whole request head, from the connection's start (or the first byte "
            "of a kept-alive connection's next request); then 408 and the connection is closed "
            "(textfree.server.transport)."
        },
    )
    body_timeout_s: float = field(
        default=30.0,
        metadata={
            "help": "Seconds a client has to send a request body after its head, plus one second per 64 KiB received "
            "(a client that keeps sending at 64 KiB/s is never cut off); then the connection is closed."
        },
    )
    batch_wait_ms: float = field(
        default=5.0,
        metadata={
            "help": "Micro-batching: how long the first queued request waits for others to share its model call."
        },
    )
    batch_max_rows: int = field(
        default=16,
        metadata={
            "help": "Micro-batching: the most rows one model call takes (a larger single request still runs alone)."
        },
    )
    sqlite_path: str | None = field(
        default=None,
        metadata={
            "help": "SQLite database of datasets, fine-tuning jobs and adapters (metadata; files go under data_dir). "
            "None: no fine-tuning routes (501)."
        },
    )
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Directory of uploaded datasets, job runs (checkpoints) and adapters. Default: 'textfree-data' "
            "beside sqlite_path."
        },
    )
    max_dataset_rows: int = field(
        default=10_000,
        metadata={"help": "Most payload rows (training examples) in one uploaded dataset (413 above it)."},
    )
    max_dataset_bytes: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "help": "Largest POST /v1/datasets body in bytes (JSON with base64: its payload is at most ~3/4 of this); "
            "413 above it."
        },
    )
    max_target_chars: int = field(
        default=4096, metadata={"help": "Longest training target per row, in characters (422 above it)."}
    )
    max_concurrent_jobs: int = field(
        default=1,
        metadata={
            "help": "Fine-tuning jobs training at once (server-wide worker threads); more jobs wait, queued, first "
            "come first served."
        },
    )
    max_jobs_per_tenant: int = field(
        default=4,
        metadata={
            "help": "Queued + running jobs one tenant may have; another POST /v1/fine_tuning/jobs gets 429 "
            "too_many_jobs."
        },
    )
    max_job_steps: int = field(
        default=100_000,
        metadata={
            "help": "Most optimizer steps one job may ask for (epochs x ceil(rows / batch_size), or max_steps); 422 "
            "above it."
        },
    )
    max_loaded_adapters: int = field(
        default=4,
        metadata={
            "help": "Fine-tuned adapters kept loaded for /v1/generate (least recently used are unloaded; each holds "
            "its own copy of the base decoder)."
        },
    )
    device: str = field(default="cpu", metadata={"help": "torch device the models run on."})
    backend: str = field(
        default="hf",
        metadata={
            "help": "Where generate models run: 'hf' (in this process, PyTorch/Hugging Face) or 'vllm' (this server is "
            "a gateway: it validates payloads, applies the projection and forwards prompt embeddings to the "
            "vLLM server at vllm_url)."
        },
    )
    vllm_url: str | None = field(
        default=None,
        metadata={
            "help": "Backend 'vllm': base URL of a vLLM OpenAI-compatible server run with --enable-prompt-embeds "
            "--enable-lora, serving each model's adapter under the model's id (--lora-modules "
            "ID=RUN_DIR/adapter). Keep it on a private network: only gateways may reach it."
        },
    )
    vllm_timeout_s: float = field(
        default=120.0, metadata={"help": "Backend 'vllm': seconds to wait for vLLM's answer to one call (then 504)."}
    )
    vllm_max_concurrent_calls: int = field(
        default=8,
        metadata={
            "help": "Backend 'vllm': calls per model in flight to vLLM at once (each carries up to batch_max_rows "
            "prompts; vLLM batches them further)."
        },
    )
    vllm_dtype: str = field(
        default="float32",
        metadata={
            "help": "Backend 'vllm': dtype of the prompt embeddings sent (float32, bfloat16 or float16); vLLM casts "
            "them to its --dtype."
        },
    )

    def __post_init__(self) -> None:
        for name in (
            "max_body_bytes",
            "max_batch_rows",
            "max_new_tokens",
            "max_public_chars",
            "max_classify_examples",
            "max_classify_words",
            "batch_max_rows",
            *FINE_TUNING_LIMITS,
        ):
            _positive_int(name, getattr(self, name))
        if (
            not isinstance(self.rate_limit_per_minute, int)
            or isinstance(self.rate_limit_per_minute, bool)
            or self.rate_limit_per_minute < 0
        ):
            raise ValueError(
                f"ServerConfig.rate_limit_per_minute must be an integer >= 0, got {self.rate_limit_per_minute!r}"
            )
        if not isinstance(self.batch_wait_ms, (int, float)) or not 0 <= self.batch_wait_ms <= 10_000:
            raise ValueError(f"ServerConfig.batch_wait_ms must lie in [0, 10000], got {self.batch_wait_ms!r}")
        for attr in ("models", "embed_models"):
            table = getattr(self, attr)
            if not isinstance(table, dict) or not all(isinstance(k, str) and _valid_id(k) for k in table):
                raise ValueError(
                    f"ServerConfig.{attr} must map model ids (letters, digits, '._-', at most 64) to directories"
                )
        self._check_systems()
        self._check_denoisers()
        clash = set(self.models) & set(self.embed_models)
        if clash:
            raise ValueError(f"model id(s) {sorted(clash)} are both a generate and an embed model")
        if not self.models and not self.embed_models:
            raise ValueError("ServerConfig needs at least one model (models or embed_models)")
        if self.backend not in BACKENDS:
            raise ValueError(f"ServerConfig.backend must be one of {BACKENDS}, got {self.backend!r}")
        if self.backend == "vllm" and not (
            isinstance(self.vllm_url, str) and self.vllm_url.startswith(("http://", "https://"))
        ):
            raise ValueError(
                f"backend 'vllm' needs vllm_url, the vLLM server's http(s):// base URL, got {self.vllm_url!r}"
            )
        for name in ("vllm_timeout_s", "head_timeout_s", "body_timeout_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
                raise ValueError(f"ServerConfig.{name} must lie in (0, 3600] seconds, got {value!r}")
        _positive_int("vllm_max_concurrent_calls", self.vllm_max_concurrent_calls)
        if self.vllm_dtype not in VLLM_DTYPES:
            raise ValueError(f"ServerConfig.vllm_dtype must be one of {VLLM_DTYPES}, got {self.vllm_dtype!r}")
        if self.data_dir is not None and self.sqlite_path is None:
            raise ValueError(
                "data_dir is set but sqlite_path is not: fine-tuning needs both (the database holds what the files are)"
            )
        if self.auth and not self.keys_path:
            raise ValueError(
                "auth is on but no keys_path is given (create keys with: textfree serve --add-key TENANT --keys FILE)"
            )
        if not self.auth and not is_loopback(self.host):
            raise ValueError(
                f"auth can be off only on a loopback host ({', '.join(LOOPBACK_HOSTS)}), not {self.host!r}"
            )

    def _check_systems(self) -> None:
        if not isinstance(self.systems, dict) or not all(isinstance(v, str) and v for v in self.systems.values()):
            raise ValueError(f"ServerConfig.systems must map model ids to served system names, got {self.systems!r}")
        unknown = sorted(set(self.systems) - set(self.models) - set(self.embed_models))
        if unknown:
            raise ValueError(f"ServerConfig.systems names model id(s) {unknown} that are not served")

    def _check_denoisers(self) -> None:
        if not isinstance(self.denoisers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) and v for k, v in self.denoisers.items()
        ):
            raise ValueError(
                f"ServerConfig.denoisers must map embed model ids to denoiser files, got {self.denoisers!r}"
            )
        unknown = sorted(set(self.denoisers) - set(self.embed_models))
        if unknown:
            raise ValueError(
                f"ServerConfig.denoisers names model id(s) {unknown} that are not embed models (embed models: "
                f"{sorted(self.embed_models) or 'none'}): a denoiser belongs to the embed model it was trained on"
            )

    def system_of(self, model_id: str) -> str:
        """The name of the served system of ``model_id``: ``systems[model_id]``, else its table's default."""
        if model_id in self.systems:
            return self.systems[model_id]
        return DEFAULT_SYSTEMS["embed_models" if model_id in self.embed_models else "models"]

    @property
    def default_new_tokens(self) -> int:
        return min(32, self.max_new_tokens)

    @property
    def keys_file(self) -> Path | None:
        return None if self.keys_path is None else Path(os.path.expanduser(self.keys_path))

    @property
    def data_path(self) -> Path | None:
        """Where dataset, job and adapter files go (None: fine-tuning is off)."""
        if self.sqlite_path is None:
            return None
        if self.data_dir is not None:
            return Path(os.path.expanduser(self.data_dir))
        return Path(os.path.expanduser(self.sqlite_path)).parent / "textfree-data"


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
