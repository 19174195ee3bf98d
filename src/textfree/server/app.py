"""``create_app(config)``: the FastAPI application behind ``textfree serve`` (routes and wire formats: docs/server.md).

Nothing from a request is ever unpickled or passed to ``torch.load``: payloads go through
:meth:`textfree.payload.Payload.from_bytes` (hand-checked safetensors framing, then the JSON header, then the
values), JSON through pydantic. Every failure is an :class:`~textfree.server.errors.ApiError` answered as
``{"error": {"type", "message"}}`` with a 4xx status; an unexpected exception is a bare 500 and the server stays up.

Every route is on an ``APIRouter`` and declares its answer (``response_model``, :mod:`textfree.server.schemas`) and
its errors; the API key is a declared security scheme (``Authorization: Bearer`` or ``X-API-Key``), so
``/openapi.json`` describes auth and every response.
"""

from __future__ import annotations

import base64
import binascii
import logging
import math
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Callable

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .. import __version__
from ..bundle import BundleError, check_name
from .auth import KeyStore, KeyStoreError, RateLimiter
from .batching import MicroBatcher
from .config import ServerConfig
from .errors import ApiError, error_body
from .finetune import add_fine_tuning_routes, tenant_card
from .metrics import PROMETHEUS_CONTENT_TYPE, ASGIMetrics, Metrics
from .models import Decoding, ModelRegistry, read_payload
from .public_files import DENOISER_FILE, PLAIN_TOKENS_FILE
from .schemas import (
    ClassifyRequest,
    ClassifyResponse,
    EmbedResponse,
    GenerateResponse,
    Health,
    ModelCard,
    ModelList,
    error_responses,
)

__all__ = ["create_app", "GenerateRequest", "EmbedRequest", "ClassifyRequest"]

log = logging.getLogger("textfree.server")

OCTET = "application/octet-stream"
JSON = "application/json"

#: The API key, either way a client may send it (docs/server.md, "Routes"); declared so /openapi.json shows auth.
BEARER = HTTPBearer(
    auto_error=False, scheme_name="bearerKey", description="`Authorization: Bearer tf_...` (textfree serve --add-key)."
)
API_KEY = APIKeyHeader(
    name="X-API-Key", auto_error=False, scheme_name="apiKeyHeader", description="`X-API-Key: tf_...` (the same key)."
)
#: The errors every keyed route may answer: no or a bad key, over the rate limit, key store unreadable.
AUTH_ERRORS = (401, 429, 503)


class GenerateRequest(BaseModel):
    """The JSON form of ``POST /v1/generate``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=64, description="Model id (GET /v1/models).")
    payload_b64: str = Field(description="The payload (safetensors bytes, docs/payload.md), standard base64.")
    public: list[str] | None = Field(
        None, description="Public text per payload row (overrides the payload's own 'public')."
    )
    max_new_tokens: int | None = Field(None, description="Generation length (default min(32, server limit)).")
    adapter: str | None = Field(
        None,
        max_length=64,
        description="Id of one of your fine-tuned adapters of this model (a succeeded job's 'adapter').",
    )
    temperature: float | None = Field(
        None, description="0 (default): greedy; > 0 (at most 10): sample from softmax(logits / temperature)."
    )
    top_p: float | None = Field(
        None, description="Nucleus sampling mass in (0, 1] (default 1: off); used when temperature > 0."
    )
    seed: int | None = Field(
        None, description="Sampling seed of this request (>= 0): the same request and seed give the same answers."
    )


class EmbedRequest(BaseModel):
    """The JSON form of ``POST /v1/embed``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=64, description="Embed model id (GET /v1/models).")
    payload_b64: str = Field(description="A token-level payload (kind 'token'), standard base64.")


def _inline_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of ``schema`` with its nested models inlined: a request body declared by hand
    (``openapi_extra``) cannot point into pydantic's ``$defs``, which /openapi.json does not hold."""
    found = schema.model_json_schema()
    defs = found.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                rest = {k: v for k, v in node.items() if k != "$ref"}
                return resolve({**defs[ref.rsplit("/", 1)[1]], **rest})
            return {k: resolve(v) for k, v in node.items()}
        if isinstance(node, list):
            return [resolve(v) for v in node]
        return node

    return resolve(found)


def _body_doc(schema: type[BaseModel], what: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "description": f"Either the raw payload bytes ({OCTET}; options as query parameters) or JSON ({what}).",
            "content": {
                OCTET: {"schema": {"type": "string", "format": "binary"}},
                JSON: {"schema": _inline_schema(schema)},
            },
        }
    }


async def _read_body(request: Request, limit: int) -> bytes:
    """The request body, refusing (413) anything over ``limit`` bytes before reading it in full."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ApiError(400, "bad_request", "Content-Length is not a number")
        if int(declared) > limit:
            raise ApiError(413, "body_too_large", f"the body is {declared} bytes; this server takes at most {limit}")
    chunks, total = [], 0
    try:
        async for chunk in request.stream():
            total += len(chunk)
            if total > limit:
                raise ApiError(413, "body_too_large", f"the body is over {limit} bytes, the most this server takes")
            chunks.append(chunk)
    except ClientDisconnect:
        raise ApiError(400, "bad_request", "the client disconnected before sending the whole body") from None
    return b"".join(chunks)


def _parse_json(schema: type[BaseModel], body: bytes) -> BaseModel:
    try:
        return schema.model_validate_json(body)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        if any(e.get("type") == "json_invalid" for e in errors):
            raise ApiError(400, "invalid_json", "the body is not valid JSON") from None
        raise ApiError(422, "invalid_request", _describe(errors)) from None


def _describe(errors: list[dict]) -> str:
    parts = []
    for e in errors[:5]:
        loc = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {e.get('msg', 'invalid')}")
    return "; ".join(parts)


def _b64(text: str, limit: int) -> bytes:
    if len(text) > (limit * 4) // 3 + 4:
        raise ApiError(413, "body_too_large", f"the payload is over {limit} bytes")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(400, "invalid_payload", "payload_b64 is not valid base64") from None


def _content_type(request: Request) -> str:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in (OCTET, JSON):
        raise ApiError(
            415,
            "unsupported_media_type",
            f"send {OCTET} (the payload bytes) or {JSON}; got {ctype or 'no Content-Type'!r}",
        )
    return ctype


def _decoding(max_new_tokens: int, options: dict[str, Any]) -> Decoding:
    """The batch key of a generate request; sampling options checked (422 names the bad value)."""
    t, p, seed = options.get("temperature"), options.get("top_p"), options.get("seed")
    t = 0.0 if t is None else t
    p = 1.0 if p is None else p
    if not (math.isfinite(t) and 0.0 <= t <= 10.0):
        raise ApiError(422, "invalid_request", f"temperature must lie in [0, 10], got {t}")
    if not (math.isfinite(p) and 0.0 < p <= 1.0):
        raise ApiError(422, "invalid_request", f"top_p must lie in (0, 1], got {p}")
    if seed is not None and not 0 <= seed < 2**63:
        raise ApiError(422, "invalid_request", f"seed must lie in [0, 2**63), got {seed}")
    return Decoding(max_new_tokens, float(t), float(p) if t > 0 else 1.0)


@dataclass
class _Server:
    """What the route groups share: the config, the models and their batchers, metrics and fine-tuning state."""

    config: ServerConfig
    registry: ModelRegistry
    metrics: Metrics | None = None
    batchers: dict[str, MicroBatcher] = field(default_factory=dict)
    store: Any = None
    jobs: Any = None
    adapters: Any = None

    def queue_depth(self) -> int:
        adapters = self.adapters.queue_depth if self.adapters else 0
        return sum(b.queue_depth for b in self.batchers.values()) + adapters


def create_app(config: ServerConfig, *, registry: ModelRegistry | None = None) -> FastAPI:
    """The server for ``config``. ``registry`` passes models loaded already (tests, embedding in another app)."""
    registry = registry or ModelRegistry.load(config)
    server = _Server(config, registry)
    server.metrics = Metrics(queue_depth=server.queue_depth)
    server.batchers.update(_batchers(server))
    if config.sqlite_path is not None:  # datasets, fine-tuning jobs and adapters: only with a database
        _add_fine_tuning_state(server)
    app = FastAPI(
        title="textfree",
        version=__version__,
        summary="Text-free inference: the server answers from privatized payloads and never receives the private text.",
        lifespan=_lifespan(server),
    )
    app.state.config, app.state.registry, app.state.metrics = config, registry, server.metrics
    app.state.batchers, app.state.store, app.state.jobs, app.state.adapters = (
        server.batchers,
        server.store,
        server.jobs,
        server.adapters,
    )
    app.add_middleware(
        ASGIMetrics, metrics=server.metrics, on_error=lambda exc: log.error("unhandled error: %r", exc, exc_info=exc)
    )
    _add_error_handlers(app)
    tenant = _tenant_dependency(config)
    for router in (_health_routes(server), _model_routes(server, tenant), _inference_routes(server, tenant)):
        app.include_router(router)
    add_fine_tuning_routes(app, config=config, registry=registry, tenant=tenant, store=server.store, jobs=server.jobs)
    return app


def _batchers(server: _Server) -> dict[str, MicroBatcher]:
    """One micro-batcher per served model."""
    config = server.config
    return {
        model_id: MicroBatcher(
            model.run,
            max_rows=config.batch_max_rows,
            max_wait_s=config.batch_wait_ms / 1000.0,
            on_batch=server.metrics.batch,
            max_concurrent=getattr(model, "max_concurrent_calls", 1),
        )
        for model_id, model in server.registry.models.items()
    }


def _add_fine_tuning_state(server: _Server) -> None:
    """The store, the job workers and the adapter cache (docs/server.md, "Fine-tuning")."""
    from .adapters import AdapterModels
    from .jobs import JobManager
    from .store import Store

    config, registry = server.config, server.registry

    def system_of(model_id: str):
        return registry.system(model_id, config)

    server.store = Store(config.sqlite_path, config.data_path)
    server.jobs = JobManager(server.store, config, model_dirs=config.models, system_of=system_of)
    server.adapters = AdapterModels(server.store, config, on_batch=server.metrics.batch, system_of=system_of)


def _lifespan(server: _Server):
    """Start the job workers with the app; close batchers, workers, adapters and the store when it stops."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if server.jobs is not None:
            server.jobs.start()  # queues again the jobs a stopped server left running: they resume from checkpoints
        yield
        for b in server.batchers.values():
            await b.close()
        if server.jobs is not None:
            await run_in_threadpool(server.jobs.close)
            await server.adapters.close()
            server.store.close()

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as ``{"error": {"type", "message"}}``."""

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, exc: ApiError):
        return JSONResponse(error_body(exc.type, exc.message), status_code=exc.status, headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException):
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(
            error_body(kind, str(exc.detail)), status_code=exc.status_code, headers=getattr(exc, "headers", None)
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(request: Request, exc: RequestValidationError):
        return JSONResponse(error_body("invalid_request", _describe(list(exc.errors()))), status_code=422)


def _tenant_dependency(config: ServerConfig) -> Callable[..., str]:
    """The dependency of every ``/v1`` route: the request's tenant (401 without a valid key), rate-limited (429).
    With auth on it reads the key through the declared schemes (:data:`BEARER`, :data:`API_KEY`)."""
    keys = KeyStore(config.keys_file) if config.auth else None
    limiter = RateLimiter(config.rate_limit_per_minute)

    def admit(request: Request, name: str) -> str:
        wait = limiter.acquire(name)
        if wait > 0:
            raise ApiError(
                429,
                "rate_limited",
                f"over {config.rate_limit_per_minute} requests per minute; retry in {wait:.1f} s",
                headers={"Retry-After": str(max(1, math.ceil(wait)))},
            )
        request.state.tenant = name
        return name

    if keys is None:

        def anonymous(request: Request) -> str:
            return admit(request, "anonymous")

        return anonymous

    def tenant(
        request: Request,
        bearer: HTTPAuthorizationCredentials | None = Security(BEARER),
        api_key: str | None = Security(API_KEY),
    ) -> str:
        key = bearer.credentials.strip() if bearer is not None else api_key
        return admit(request, _verified_tenant(key, keys))

    return tenant


def _verified_tenant(key: str | None, keys: KeyStore) -> str:
    """The tenant of an API key (``Authorization: Bearer`` first, else ``X-API-Key``): 401 or 503 otherwise."""
    if not key:
        raise ApiError(
            401,
            "missing_api_key",
            "send an API key: 'Authorization: Bearer <key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    try:
        name = keys.verify(key)
    except KeyStoreError as exc:
        log.error("key store: %s", exc)
        raise ApiError(503, "key_store_unavailable", "the server cannot read its key store") from None
    if name is None:
        raise ApiError(401, "invalid_api_key", "the API key is not valid", headers={"WWW-Authenticate": "Bearer"})
    return name


def _health_routes(server: _Server) -> APIRouter:
    """``/health`` and ``/metrics`` (no auth)."""
    router = APIRouter(tags=["service"])

    @router.get("/health", summary="Liveness (no auth).", response_model=Health)
    async def health() -> dict:
        return {"status": "ok", "version": __version__, "models": len(server.registry.models)}

    @router.get(
        "/metrics",
        summary="Request counts, latency, in-flight, queue depth (Prometheus text; ?format=json for JSON).",
        response_class=Response,
        responses={
            200: {
                "description": "Prometheus text exposition, or the same figures as JSON with ?format=json.",
                "content": {"text/plain": {"schema": {"type": "string"}}, JSON: {"schema": {"type": "object"}}},
            },
            **error_responses(422),
        },
    )
    async def metrics_route(format: str = Query("prometheus", pattern="^(prometheus|json)$")) -> Response:
        if format == "json":
            return JSONResponse(server.metrics.snapshot())
        return Response(server.metrics.prometheus(), media_type=PROMETHEUS_CONTENT_TYPE)

    return router


def _limits(server: _Server) -> dict:
    """The limits a client should know (``GET /v1/models``); the fine-tuning ones only with a database."""
    config = server.config
    return {
        "max_body_bytes": config.max_body_bytes,
        "max_batch_rows": config.max_batch_rows,
        "max_new_tokens": config.max_new_tokens,
        "max_public_chars": config.max_public_chars,
        "max_classify_examples": config.max_classify_examples,
        "max_classify_words": config.max_classify_words,
        "rate_limit_per_minute": config.rate_limit_per_minute,
        **(
            {
                "max_dataset_rows": config.max_dataset_rows,
                "max_dataset_bytes": config.max_dataset_bytes,
                "max_target_chars": config.max_target_chars,
                "max_concurrent_jobs": config.max_concurrent_jobs,
                "max_jobs_per_tenant": config.max_jobs_per_tenant,
                "max_job_steps": config.max_job_steps,
            }
            if server.store
            else {}
        ),
    }


def _file_responses(description: str, media_type: str, schema: dict, *errors: int) -> dict:
    """The OpenAPI responses of a public-file route: the file (ETag: its sha256), 304, and the errors."""
    return {
        200: {"description": description, "content": {media_type: {"schema": schema}}},
        304: {"description": "If-None-Match matched the ETag."},
        **error_responses(*AUTH_ERRORS, *errors),
    }


def _public_file_response(public, request: Request, media_type: str) -> Response:
    """A published file's bytes (``ETag`` its sha256; ``If-None-Match`` matching it: 304)."""
    headers = {"ETag": public.etag, "Cache-Control": "private, max-age=86400"}
    if public.etag in [t.strip() for t in request.headers.get("if-none-match", "").split(",")]:
        return Response(status_code=304, headers=headers)
    return Response(public.data, media_type=media_type, headers=headers)


def _model_routes(server: _Server, tenant: Callable) -> APIRouter:
    """``GET /v1/models``, ``GET /v1/models/{id}`` (the cards, each built by its model's served system),
    ``GET /v1/models/{id}/bundle`` (the manifest of the model's client bundle) and ``.../bundle/{file}`` (its files),
    and two members of a bundle by their own routes: ``GET /v1/models/{id}/denoiser`` (an embed model's public
    client-side denoiser file) and ``GET /v1/models/{id}/plain_tokens`` (a classify model's public plain tokens)."""
    router = APIRouter(tags=["models"])
    registry = server.registry

    def served(model_id: str) -> None:
        if model_id not in registry.models:
            raise ApiError(404, "model_not_found", f"no model {model_id!r} here; GET /v1/models lists them")

    @router.get(
        "/v1/models",
        summary="The model card of every served model.",
        response_model=ModelList,
        response_model_exclude_unset=True,
        responses=error_responses(*AUTH_ERRORS),
    )
    async def list_models(who: str = Depends(tenant)) -> dict:
        data = [tenant_card(c, who, server.store) for c in registry.cards()]
        return {"object": "list", "data": data, "limits": _limits(server)}

    @router.get(
        "/v1/models/{model_id}",
        summary="One model card.",
        response_model=ModelCard,
        response_model_exclude_unset=True,
        responses=error_responses(*AUTH_ERRORS, 404, 422),
    )
    async def get_model(model_id: str, who: str = Depends(tenant)) -> dict:
        if model_id not in registry.models:
            raise ApiError(404, "model_not_found", f"no model {model_id!r} here; GET /v1/models lists them")
        return tenant_card(registry.card(model_id), who, server.store)

    @router.get(
        "/v1/models/{model_id}/denoiser",
        summary="The embed model's client-side denoiser (safetensors; its sha256 is on the card).",
        response_class=Response,
        responses=_file_responses(
            "The denoiser file (safetensors), ETag its sha256.",
            OCTET,
            {"type": "string", "format": "binary"},
            404,
            422,
        ),
    )
    async def get_denoiser(model_id: str, request: Request, who: str = Depends(tenant)) -> Response:
        served(model_id)
        public = registry.public_file(model_id, DENOISER_FILE)
        if public is None:
            raise ApiError(
                404, "denoiser_not_found", f"model {model_id!r} is served without a denoiser (its card's 'denoiser')"
            )
        return _public_file_response(public, request, OCTET)

    @router.get(
        "/v1/models/{model_id}/plain_tokens",
        summary="The classify model's public plain tokens (JSON; its sha256 is on the card).",
        response_class=Response,
        responses=_file_responses(
            "The plain-token file (JSON: format, categories, sequences, vocabulary); ETag: its sha256.",
            JSON,
            {"type": "object"},
            404,
            422,
        ),
    )
    async def get_plain_tokens(model_id: str, request: Request, who: str = Depends(tenant)) -> Response:
        served(model_id)
        public = registry.public_file(model_id, PLAIN_TOKENS_FILE)
        if public is None:
            raise ApiError(
                404,
                "plain_tokens_not_found",
                f"model {model_id!r} is served without plain tokens (its card's 'plain_tokens')",
            )
        return _public_file_response(public, request, JSON)

    @router.get(
        "/v1/models/{model_id}/bundle",
        summary="The manifest of the model's client bundle (canonical JSON; its sha256 is the card's client_bundle).",
        response_class=Response,
        responses=_file_responses(
            "The manifest: {format, files: [{name, bytes, sha256}]}, canonical JSON; ETag: its sha256.",
            JSON,
            {"type": "object"},
            404,
            422,
        ),
    )
    async def get_bundle(model_id: str, request: Request, who: str = Depends(tenant)) -> Response:
        served(model_id)
        bundle = registry.bundles.get(model_id)
        if bundle is None:
            raise ApiError(
                404, "bundle_not_found", f"model {model_id!r} publishes no client bundle (its card's 'client_bundle')"
            )
        return _public_file_response(bundle.manifest_file, request, JSON)

    @router.get(
        "/v1/models/{model_id}/bundle/{name:path}",
        summary="One file of the model's client bundle (its size and sha256 are in the manifest).",
        response_class=Response,
        responses=_file_responses(
            "The file's bytes; ETag: its sha256.",
            OCTET,
            {"type": "string", "format": "binary"},
            400,
            404,
            422,
        ),
    )
    async def get_bundle_file(model_id: str, name: str, request: Request, who: str = Depends(tenant)) -> Response:
        served(model_id)
        try:
            check_name(name)
        except BundleError as exc:
            raise ApiError(400, "bad_request", str(exc)) from None
        public = registry.public_file(model_id, name)
        if public is None:
            raise ApiError(
                404,
                "bundle_file_not_found",
                f"model {model_id!r}'s client bundle has no file {name!r} (GET /v1/models/{model_id}/bundle lists "
                "them)",
            )
        return _public_file_response(public, request, OCTET)

    return router


async def _payload(server: _Server, request: Request, task: str, schema: type[BaseModel], query: dict[str, Any]):
    """(model, payload, prepared, options, body bytes) of a generate/embed request, validated."""
    config = server.config
    ctype = _content_type(request)
    body = await _read_body(request, config.max_body_bytes)
    if ctype == JSON:
        req = _parse_json(schema, body)
        options = req.model_dump(exclude={"payload_b64"})
        raw = _b64(req.payload_b64, config.max_body_bytes)
    else:
        options, raw = dict(query), body
    model = server.registry.get(options.get("model"), task)
    payload = await run_in_threadpool(
        read_payload, raw, max_bytes=config.max_body_bytes, max_rows=config.max_batch_rows
    )
    prepared = model.prepare(payload, options.get("public"), config)
    return model, payload, prepared, options, len(raw)


def _generate_decoding(server: _Server, options: dict[str, Any]) -> Decoding:
    """The batch key of a generate request: its length (422 outside [1, max_new_tokens]) and sampling options."""
    config = server.config
    n_new = options.get("max_new_tokens")
    n_new = config.default_new_tokens if n_new is None else n_new
    if not 1 <= n_new <= config.max_new_tokens:
        raise ApiError(422, "invalid_request", f"max_new_tokens must lie in [1, {config.max_new_tokens}], got {n_new}")
    return _decoding(n_new, options)


async def _answers(server: _Server, who: str, served, prepared, key, adapter_id: str | None):
    """(results, batch info) of a validated request from the base model's batcher or the tenant's adapter's."""
    if adapter_id is None:
        return await server.batchers[served.id].submit(key, prepared, rows=prepared.rows)
    if server.adapters is None:
        raise ApiError(
            404,
            "adapter_not_found",
            f"no adapter {adapter_id!r}: this server runs without a database, so it has no fine-tuned adapters",
        )
    # the tenant's own adapter of this model (404 otherwise), validated against the base model's card
    async with server.adapters.use(who, served.id, adapter_id) as (_, batcher):
        return await batcher.submit(key, prepared, rows=prepared.rows)


def _inference_routes(server: _Server, tenant: Callable) -> APIRouter:
    """``POST /v1/generate``, ``POST /v1/embed`` and ``POST /v1/classify``."""
    router = APIRouter(tags=["inference"])

    @router.post(
        "/v1/generate",
        summary="Answers from a payload (+ public text).",
        openapi_extra=_body_doc(GenerateRequest, "GenerateRequest"),
        response_model=GenerateResponse,
        responses=error_responses(*AUTH_ERRORS, 400, 404, 413, 415, 422, 500, 502, 504),
    )
    async def generate(
        request: Request,
        who: str = Depends(tenant),
        model: str | None = Query(None, max_length=64, description="Model id (octet-stream bodies)."),
        max_new_tokens: int | None = Query(None, description="Generation length (octet-stream bodies)."),
        adapter: str | None = Query(None, max_length=64, description="Adapter id (octet-stream bodies)."),
        temperature: float | None = Query(None, description="Sampling temperature (octet-stream bodies; 0: greedy)."),
        top_p: float | None = Query(None, description="Nucleus mass (octet-stream bodies)."),
        seed: int | None = Query(None, description="Sampling seed (octet-stream bodies)."),
    ) -> dict:
        query = {"model": model, "max_new_tokens": max_new_tokens, "adapter": adapter}
        query.update(temperature=temperature, top_p=top_p, seed=seed)
        served, payload, prepared, options, n_bytes = await _payload(
            server, request, "generate", GenerateRequest, query
        )
        adapter_id = options.get("adapter") or None
        decoding = _generate_decoding(server, options)
        prepared.seed = options.get("seed")
        (answers, n_tokens), info = await _answers(server, who, served, prepared, decoding, adapter_id)
        usage = {"rows": payload.batch_size, "slots": sum(payload.lengths), "payload_bytes": n_bytes}
        return {
            "model": served.id,
            "adapter": adapter_id,
            "answers": answers,
            "usage": {**usage, **_batch_usage(info, n_tokens)},
        }

    @router.post(
        "/v1/embed",
        summary="Sentence embeddings from noisy token embeddings (SnD-style).",
        openapi_extra=_body_doc(EmbedRequest, "EmbedRequest"),
        response_model=EmbedResponse,
        responses=error_responses(*AUTH_ERRORS, 400, 404, 413, 415, 422, 500),
    )
    async def embed(
        request: Request,
        _: str = Depends(tenant),
        model: str | None = Query(None, max_length=64, description="Embed model id (octet-stream bodies)."),
    ) -> dict:
        served, payload, prepared, _opts, n_bytes = await _payload(
            server, request, "embed", EmbedRequest, {"model": model}
        )
        embeddings, info = await server.batchers[served.id].submit("embed", prepared, rows=prepared.rows)
        return {
            "model": served.id,
            "embeddings": embeddings,
            "dim": served.card["output_dim"],
            "usage": {
                "rows": payload.batch_size,
                "tokens": sum(payload.lengths),
                "payload_bytes": n_bytes,
                "batch_rows": info.rows,
                "batch_requests": info.requests,
            },
        }

    @router.post(
        "/v1/classify",
        summary="Labels of examples privatized to text on the client (RAPT), by the model or one of your adapters.",
        openapi_extra={
            "requestBody": {
                "required": True,
                "description": "ClassifyRequest (JSON): the privatized examples.",
                "content": {JSON: {"schema": _inline_schema(ClassifyRequest)}},
            }
        },
        response_model=ClassifyResponse,
        responses=error_responses(*AUTH_ERRORS, 400, 404, 413, 415, 422, 500),
    )
    async def classify(request: Request, who: str = Depends(tenant)) -> dict:
        config = server.config
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != JSON:
            raise ApiError(
                415, "unsupported_media_type", f"/v1/classify takes {JSON} (a ClassifyRequest), got {ctype or 'none'!r}"
            )
        body = await _read_body(request, config.max_body_bytes)
        req = _parse_json(ClassifyRequest, body)
        served = server.registry.get(req.model, "classify")
        prepared = served.prepare(req.examples, None, config)  # checked against the card (check_examples)
        adapter_id = req.adapter or None
        (labels, probabilities), info = await _answers(server, who, served, prepared, "classify", adapter_id)
        words = sum(len(p.split()) for ex in req.examples for p in ex.parts) + sum(
            len(ex.plain or ()) for ex in req.examples
        )
        return {
            "model": served.id,
            "adapter": adapter_id,
            "labels": labels,
            "probabilities": probabilities,
            "usage": {
                "examples": len(req.examples),
                "words": words,
                "batch_rows": info.rows,
                "batch_requests": info.requests,
                "queue_ms": round(info.queue_s * 1000, 3),
                "compute_ms": round(info.compute_s * 1000, 3),
            },
        }

    return router


def _batch_usage(info, n_tokens: int) -> dict[str, Any]:
    """The generate usage fields after the payload's: completion tokens and how the request was batched."""
    return {
        "completion_tokens": n_tokens,
        "batch_rows": info.rows,
        "batch_requests": info.requests,
        "queue_ms": round(info.queue_s * 1000, 3),
        "compute_ms": round(info.compute_s * 1000, 3),
    }
