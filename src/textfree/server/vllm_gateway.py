"""The vLLM gateway backend (``ServerConfig(backend="vllm")``, ``textfree serve --backend vllm --vllm-url URL``).

The gateway is an ordinary textfree server (auth, limits, payload validation, model cards, micro-batching) whose
generate models do not hold a decoder: per batch, a served system's gateway model (PPFT's:
:class:`textfree.ppft.serving.VllmGenerateModel`) projects the payload's slots and embeds BOS + public tokens,
and :class:`VllmClient` sends the rows as ``prompt_embeds`` to
``POST {vllm_url}/v1/completions`` of a vLLM OpenAI-compatible server (``vllm serve DECODER --enable-prompt-embeds
--enable-lora --lora-modules ID=RUN_DIR/adapter``), with the model's LoRA name as ``model``. Greedy by default
(temperature 0), so the answers are those of the in-process backend.

vLLM failures are the gateway's, not the client's, and never a bare 500: unreachable or overloaded -> 503
``backend_unavailable``, no answer in ``vllm_timeout_s`` -> 504 ``backend_timeout``, any refusal or malformed answer
-> 502 ``backend_error`` with vLLM's message (cut to 300 characters). vLLM's address is logged, never sent to clients.
``TEXTFREE_VLLM_API_KEY``, when set, is sent as the bearer key vLLM's ``--api-key`` expects.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

import httpx
import torch

from .errors import ApiError
from .prompt_embeds import encode_embeds

__all__ = ["SamplingParams", "completion_request", "VllmClient", "API_KEY_ENV"]

log = logging.getLogger("textfree.server.vllm")

API_KEY_ENV = "TEXTFREE_VLLM_API_KEY"
MESSAGE_CHARS = 300


@dataclass(frozen=True)
class SamplingParams:
    """How vLLM decodes (the OpenAI completions fields of the same meaning)."""

    max_new_tokens: int = field(metadata={"help": "Most tokens to generate per row ('max_tokens')."})
    temperature: float = field(default=0.0, metadata={"help": "0 = greedy, the in-process backend's decoding."})
    top_p: float = field(default=1.0, metadata={"help": "Nucleus sampling mass (1 = off)."})
    seed: int | None = field(default=None, metadata={"help": "vLLM's per-request sampling seed (null: none sent)."})

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if not 0.0 <= self.temperature <= 10.0 or not 0.0 < self.top_p <= 1.0:
            raise ValueError(
                f"SamplingParams needs temperature in [0, 10] and top_p in (0, 1], got {self.temperature}, {self.top_p}"
            )


def completion_request(
    lora: str, rows: list[torch.Tensor], sampling: SamplingParams, *, dtype: str = "float32"
) -> dict[str, Any]:
    """The JSON body of ``POST /v1/completions``: one ``prompt_embeds`` item per row, the LoRA name as ``model``."""
    body: dict[str, Any] = {
        "model": lora,
        "prompt_embeds": [encode_embeds(r, dtype) for r in rows],
        "max_tokens": sampling.max_new_tokens,
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "n": 1,
        "stream": False,
        "skip_special_tokens": True,
    }
    if sampling.seed is not None:
        body["seed"] = sampling.seed
    return body


def _vllm_message(response: httpx.Response) -> str:
    try:
        data = response.json()
        message = data.get("error", {}).get("message") if isinstance(data.get("error"), dict) else data.get("message")
    except (ValueError, AttributeError):
        message = None
    return str(message or response.text or response.reason_phrase)[:MESSAGE_CHARS]


class VllmClient:
    """Sends completions to one vLLM server; maps every failure to a 502/503/504 :class:`ApiError`."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = 120.0,
        max_connections: int = 8,
        transport: httpx.BaseTransport | None = None,
    ):
        key = os.environ.get(API_KEY_ENV)
        self.url = url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.url,
            transport=transport,
            headers={"Authorization": f"Bearer {key}"} if key else None,
            timeout=httpx.Timeout(timeout_s, connect=min(5.0, timeout_s)),
            limits=httpx.Limits(max_connections=max_connections),
        )

    def close(self) -> None:
        self._http.close()

    def complete(self, body: dict[str, Any]) -> list[str]:
        """The generated text of each prompt, in the order of ``body['prompt_embeds']``."""
        n = len(body["prompt_embeds"])
        try:
            response = self._http.post("/v1/completions", json=body)
        except httpx.ConnectTimeout as exc:
            raise self._unavailable(exc) from None
        except httpx.TimeoutException as exc:
            log.error("vLLM at %s: no answer in time: %r", self.url, exc)
            raise ApiError(504, "backend_timeout", "the vLLM backend did not answer in time; retry later") from None
        except httpx.TransportError as exc:
            raise self._unavailable(exc) from None
        if response.status_code >= 400:
            message = _vllm_message(response)
            log.error("vLLM at %s answered %d: %s", self.url, response.status_code, message)
            if response.status_code == 503:
                raise ApiError(
                    503, "backend_unavailable", f"the vLLM backend is overloaded or starting (503): {message}"
                )
            raise ApiError(
                502, "backend_error", f"the vLLM backend refused the request ({response.status_code}): {message}"
            )
        return self._texts(response, n)

    def _unavailable(self, exc: Exception) -> ApiError:
        log.error("vLLM at %s is unreachable: %r", self.url, exc)
        return ApiError(
            503,
            "backend_unavailable",
            f"the vLLM backend is unreachable ({type(exc).__name__}); the gateway is up, retry later",
        )

    def _texts(self, response: httpx.Response, n: int) -> list[str]:
        try:
            choices = response.json()["choices"]
            by_index = {int(c["index"]): str(c["text"]) for c in choices}
        except (ValueError, KeyError, TypeError) as exc:
            log.error("vLLM at %s: malformed completion (%r): %s", self.url, exc, response.text[:MESSAGE_CHARS])
            raise ApiError(
                502,
                "backend_error",
                "the vLLM backend answered with a malformed completion (no list of choices with index and text)",
            ) from None
        if sorted(by_index) != list(range(n)):
            raise ApiError(
                502, "backend_error", f"the vLLM backend answered choices {sorted(by_index)[:8]} for {n} prompts"
            )
        return [by_index[i] for i in range(n)]
