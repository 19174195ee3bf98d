"""The server's answers as pydantic models: what each route declares as its ``response_model`` (so ``/openapi.json``
describes every answer), the one error shape, and :func:`error_responses`, the 4xx/5xx entries of a route.

Models whose objects have task- or system-specific fields (a model card, the limits) declare the common ones and
allow more (``extra="allow"``); routes answer them with ``response_model_exclude_unset``, so a card carries exactly the
fields its system built, nothing added.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "AdapterEntry",
    "BundleEntry",
    "ClassifyExample",
    "ClassifyRequest",
    "ClassifyResponse",
    "ClassifyUsage",
    "DatasetList",
    "DatasetView",
    "DecoderInfo",
    "DenoiserEntry",
    "EmbedResponse",
    "EmbedUsage",
    "ERROR_DESCRIPTIONS",
    "ErrorDetail",
    "ErrorResponse",
    "GenerateResponse",
    "GenerateUsage",
    "Health",
    "JobEvent",
    "JobEventList",
    "JobList",
    "JobProgress",
    "JobView",
    "Limits",
    "ModelCard",
    "ModelList",
    "PlainTokensEntry",
    "error_responses",
]


class ErrorDetail(BaseModel):
    type: str = Field(description="A stable, machine-readable word (model_not_found, invalid_payload, ...).")
    message: str = Field(description="One line saying what is wrong.")


class ErrorResponse(BaseModel):
    """Every error: ``{"error": {"type", "message"}}``."""

    error: ErrorDetail


ERROR_DESCRIPTIONS = {
    400: "Malformed body or payload (invalid_payload, invalid_json, payload_mismatch, bad_request).",
    401: "No API key or an invalid one (missing_api_key, invalid_api_key).",
    404: "Unknown model, adapter, dataset, job, client bundle or bundle file, denoiser or plain tokens (each id of "
    "another tenant answers the same).",
    408: "The request head did not arrive in time (request_timeout; the connection is closed).",
    413: "Body over max_body_bytes, or more payload rows than the server takes (body_too_large, too_many_rows).",
    415: "Neither application/octet-stream nor application/json (unsupported_media_type).",
    422: "A field or option out of range or of the wrong type (invalid_request).",
    429: "Over the tenant's rate limit (rate_limited, with Retry-After) or job limit (too_many_jobs).",
    500: "An unexpected failure (internal_error; no detail is given).",
    501: "Fine-tuning routes on a server without a database (fine_tuning_disabled).",
    502: "The vLLM backend refused the request or answered nonsense (backend_error).",
    503: "The key store or the vLLM backend is unavailable (key_store_unavailable, backend_unavailable).",
    504: "The vLLM backend did not answer in time (backend_timeout).",
}


def error_responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The ``responses`` entries of a route's errors: each code with :class:`ErrorResponse` and what it means."""
    return {code: {"model": ErrorResponse, "description": ERROR_DESCRIPTIONS[code]} for code in codes}


class Health(BaseModel):
    status: Literal["ok"]
    version: str
    models: int = Field(description="How many models this server serves.")


class _Open(BaseModel):
    """An object with the declared fields and possibly more (a system's own card fields)."""

    model_config = ConfigDict(extra="allow")


class DecoderInfo(_Open):
    name: str | None = Field(None, description="Hub id, or only the last component of a local path.")
    sha256: str | None = None
    model_type: str | None = None
    hidden_size: int | None = None


class AdapterEntry(_Open):
    id: str
    job: str
    created_at: float


class DenoiserEntry(_Open):
    sha256: str
    bytes: int
    eta_min: float
    eta_max: float
    token_dim: int
    output_dim: int
    url: str


class PlainTokensEntry(_Open):
    sha256: str = Field(description="sha256 of the plain-token file (GET url).")
    bytes: int
    length: int = Field(description="Words per plain-token sequence (m).")
    sequences: int = Field(description="How many public sequences; an example names the one it privatized.")
    url: str


class BundleEntry(_Open):
    sha256: str = Field(description="sha256 of the bundle's manifest (GET url): it names every file's sha256.")
    bytes: int = Field(description="The files' total size.")
    files: int = Field(description="How many files the bundle holds.")
    url: str


#: The fields a card of a payload route (generate, embed) must carry: what a client privatizes from.
PAYLOAD_CARD_FIELDS = (
    "payload_format_version",
    "encoder_sha256",
    "encoder_dim",
    "encoder_kind",
    "k",
    "normalize",
    "renormalize",
    "mechanism",
    "max_slots",
)
#: The fields a card of /v1/classify must carry.
CLASSIFY_CARD_FIELDS = ("num_labels", "sentences", "mechanism", "eta", "pos_categories", "plain_tokens")


class ModelCard(_Open):
    """What a client needs to privatize for a model (docs/server.md, "The model card"): names and hashes, never a
    path of the server's file system. A payload model's card (generate, embed) carries the payload fields
    (encoder, k, mechanism, ...); a classify model's card (RAPT) the text privatization's (mechanism, eta,
    categories, plain tokens) and its labels."""

    id: str
    object: Literal["model"]
    task: Literal["generate", "embed", "classify"]
    route: str
    payload_format_version: int | None = None
    payload_kind: str
    system: str | None = Field(None, description="The served system (ppft, rapt, hf-embed, ...).")
    encoder_id: str | None = Field(None, description="The client encoder's hub id or directory name.")
    encoder_sha256: str | None = None
    encoder_dim: int | None = None
    encoder_kind: str | None = None
    k: int | None = None
    normalize: bool | None = None
    renormalize: bool | None = None
    mechanism: str | None = None
    max_slots: int | None = None
    epsilon: float | None = Field(None, description="The noise level the model was trained at (null: no noise).")
    stage: str | None = None
    decoder: DecoderInfo | None = None
    adapters: list[AdapterEntry] = Field(default_factory=list, description="Your fine-tuned adapters of it.")
    noise_match: str | None = None
    max_private_tokens: int | None = None
    max_public_tokens: int | None = None
    fixed_slots: bool | None = None
    repeat_mean: bool | None = None
    center_sha256: str | None = None
    center_mu: float | None = None
    center: Any = Field(None, description="The public slot centre ([d], or [1 + m, d]); null without one.")
    clip_norm: float | None = None
    output_dim: int | None = None
    pooling: str | None = None
    denoiser: DenoiserEntry | None = None
    eta: float | None = Field(None, description="classify: the T2T / PCT2T eta the model was trained at (null: none).")
    pos_categories: list[str] | None = Field(
        None, description="classify: the PCT2T categories privatized (null: plain T2T, every word)."
    )
    num_labels: int | None = Field(None, description="classify: how many classes the model answers.")
    sentences: int | None = Field(None, description="classify: sentences per example (1, or 2 for a pair task).")
    plain_tokens: PlainTokensEntry | None = Field(
        None, description="classify: the public plain tokens every example is privatized with (null: none)."
    )
    client_bundle: BundleEntry | None = Field(
        None,
        description="Every public file a client holds for this model (client encoder, slot centre, denoiser, plain "
        "tokens), named by its manifest's sha256 (null: none).",
    )

    @model_validator(mode="after")
    def _task_fields(self) -> "ModelCard":
        wanted = CLASSIFY_CARD_FIELDS if self.task == "classify" else PAYLOAD_CARD_FIELDS
        missing = [name for name in wanted if name not in self.model_fields_set]
        if missing:
            raise ValueError(f"a {self.task} card needs {', '.join(missing)}")
        required = ("num_labels", "sentences") if self.task == "classify" else PAYLOAD_CARD_FIELDS
        nulls = [n for n in required if getattr(self, n) is None and n not in ("encoder_sha256", "mechanism")]
        if nulls:
            raise ValueError(f"a {self.task} card needs a value for {', '.join(nulls)}")
        return self


class Limits(_Open):
    max_body_bytes: int
    max_batch_rows: int
    max_new_tokens: int
    max_public_chars: int
    rate_limit_per_minute: int


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]
    limits: Limits


class GenerateUsage(BaseModel):
    rows: int
    slots: int
    payload_bytes: int
    completion_tokens: int
    batch_rows: int = Field(description="Rows of the model call that served this request.")
    batch_requests: int = Field(description="Requests that shared that call.")
    queue_ms: float
    compute_ms: float


class GenerateResponse(BaseModel):
    model: str
    adapter: str | None
    answers: list[str]
    usage: GenerateUsage


class EmbedUsage(BaseModel):
    rows: int
    tokens: int
    payload_bytes: int
    batch_rows: int
    batch_requests: int


class EmbedResponse(BaseModel):
    model: str
    embeddings: list[list[float]]
    dim: int
    usage: EmbedUsage


class ClassifyExample(BaseModel):
    """One example privatized to text on the client (RAPT): its sentence(s) and the privatized plain tokens."""

    model_config = ConfigDict(extra="forbid")
    parts: list[str] = Field(
        min_length=1, max_length=2, description="The privatized sentence (two for a sentence-pair task)."
    )
    plain: list[str] | None = Field(
        None, description="The privatized plain tokens (one word each; null for a model without plain tokens)."
    )
    sequence: int | None = Field(
        None, ge=0, description="Which public plain-token sequence 'plain' privatizes (its index in the file)."
    )


class ClassifyRequest(BaseModel):
    """``POST /v1/classify``: examples privatized on the client; the server never sees the original text."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=64, description="Model id (GET /v1/models; task 'classify').")
    examples: list[ClassifyExample] = Field(min_length=1, description="The privatized examples, in order.")
    adapter: str | None = Field(
        None,
        max_length=64,
        description="Id of one of your fine-tuned adapters of this model (a succeeded job's 'adapter').",
    )


class ClassifyUsage(BaseModel):
    examples: int
    words: int = Field(description="Words received (sentences and plain tokens).")
    batch_rows: int = Field(description="Examples of the model call that served this request.")
    batch_requests: int = Field(description="Requests that shared that call.")
    queue_ms: float
    compute_ms: float


class ClassifyResponse(BaseModel):
    model: str
    adapter: str | None = Field(None, description="The adapter that answered (null: the served model).")
    labels: list[int] = Field(description="The predicted class of each example.")
    probabilities: list[list[float]] = Field(description="Each example's class probabilities (softmax), per label.")
    usage: ClassifyUsage


class DatasetView(BaseModel):
    id: str
    object: Literal["dataset"]
    name: str | None
    model: str
    rows: int = Field(description="Payload rows, or (a classify model's dataset) examples.")
    slots: int = Field(
        description="Payload slots, or (a classify model's dataset) words received, plain tokens included."
    )
    bytes: int
    sha256: str
    privacy: dict[str, Any] = Field(
        description="Payload: the worst-case loss of a row. Privatized text: the card's settings it was checked "
        "against (worst_case_row null: only the client knows which words it privatized)."
    )
    created_at: float


class DatasetList(BaseModel):
    object: Literal["list"]
    data: list[DatasetView]


class JobProgress(BaseModel):
    step: int | None
    total_steps: int | None
    loss: float | None
    resumed_from_step: int | None


class JobView(BaseModel):
    id: str
    object: Literal["fine_tuning.job"]
    model: str
    datasets: list[str]
    hyperparameters: dict[str, Any]
    status: str
    progress: JobProgress
    adapter: str | None
    error: str | None
    cancel_requested: bool
    created_at: float
    started_at: float | None
    finished_at: float | None


class JobList(BaseModel):
    object: Literal["list"]
    data: list[JobView]


class JobEvent(BaseModel):
    object: Literal["fine_tuning.job.event"]
    seq: int
    created_at: float
    type: str
    message: str
    data: Any


class JobEventList(BaseModel):
    object: Literal["list"]
    data: list[JobEvent]
    has_more: bool
    status: str
