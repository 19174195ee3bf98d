"""The routes of datasets and fine-tuning jobs (docs/server.md, "Fine-tuning"), added to the app by ``create_app``.

Every route needs a key and sees only its tenant's datasets, jobs and adapters: an id of another tenant is answered
404 exactly like an id that does not exist, so ids leak nothing. POSTs accept an ``Idempotency-Key`` header (at most
128 printable ASCII characters): a repeated POST with the same key from the same tenant returns what the first one
created (200 instead of 201), so a client may retry an upload or a job submission safely.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sqlite3
from dataclasses import dataclass
from typing import Any, Callable

from fastapi import APIRouter, Depends, FastAPI, Query, Request, Response
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from .config import ServerConfig
from .datasets import DatasetUpload, dataset_view, validate_upload, write_dataset
from .errors import ApiError
from .jobs import JobManager, JobRequest, job_view, total_steps
from .schemas import DatasetList, DatasetView, JobEventList, JobList, JobView, error_responses
from .store import TERMINAL, Store, new_id

__all__ = ["add_fine_tuning_routes", "tenant_card", "STREAM_POLL_S"]

STREAM_POLL_S = 0.5
#: What every fine-tuning route may answer besides its own errors: auth, rate limit, no database (501).
COMMON_ERRORS = (401, 429, 501, 503)


def _repeated(model: type) -> dict[int, dict[str, Any]]:
    """The 200 of a POST repeated with the same Idempotency-Key (what the first one created)."""
    return {
        200: {"model": model, "description": "A POST with this Idempotency-Key created it earlier: the same object."}
    }


def tenant_card(card: dict[str, Any], tenant: str, store: Store | None) -> dict[str, Any]:
    """A model card with ``adapters``: the requesting tenant's adapters of that model (nobody else's)."""
    if store is None:  # (a model whose system does not fine-tune has none: an empty list)
        return card
    mine = [
        {"id": a["id"], "job": a["job"], "created_at": a["created_at"]} for a in store.list_adapters(tenant, card["id"])
    ]
    return {**card, "adapters": mine}


def _event_view(e: dict[str, Any]) -> dict[str, Any]:
    return {
        "object": "fine_tuning.job.event",
        "seq": e["seq"],
        "created_at": e["created_at"],
        "type": e["type"],
        "message": e["message"],
        "data": e["data"],
    }


def _idempotency_key(request: Request) -> str | None:
    key = request.headers.get("idempotency-key")
    if key is None:
        return None
    if not 1 <= len(key) <= 128 or not all(33 <= ord(c) <= 126 for c in key):
        raise ApiError(400, "bad_request", "Idempotency-Key must be 1 to 128 printable ASCII characters without spaces")
    return key


def add_fine_tuning_routes(
    app: FastAPI, *, config: ServerConfig, registry, tenant: Callable, store: Store | None, jobs: JobManager | None
) -> None:
    """The dataset and fine-tuning job routes of ``app``, every one answering 501 when ``store`` is None (no --db)."""
    # the /v1/generate and /v1/classify card checks, with the dataset row limit in place of the per-request ones
    limits = dataclasses.replace(
        config, max_batch_rows=config.max_dataset_rows, max_classify_examples=config.max_dataset_rows
    )
    ft = _FineTuning(config, registry, store, jobs, limits)
    for router in (_dataset_routes(ft, tenant), _job_routes(ft, tenant), _job_event_routes(ft, tenant)):
        app.include_router(router)


@dataclass
class _FineTuning:
    """What the fine-tuning routes share: the config, the models, the store and job workers (None without --db)."""

    config: ServerConfig
    registry: Any
    store: Store | None
    jobs: JobManager | None
    limits: ServerConfig

    def db(self) -> Store:
        """The store, or 501 on a server without a database."""
        if self.store is None:
            raise ApiError(
                501,
                "fine_tuning_disabled",
                "this server runs without a database: start it with --db "
                "(ServerConfig.sqlite_path) to store datasets and run fine-tuning jobs",
            )
        return self.store

    def begin_post(
        self, request: Request, response: Response, table: str, who: str
    ) -> tuple[str | None, dict[str, Any] | None]:
        """(Idempotency-Key, what an earlier POST with that key created: answered 200) of a JSON-only POST."""
        from .app import JSON, _content_type

        st = self.db()
        if _content_type(request) != JSON:
            raise ApiError(415, "unsupported_media_type", f"{request.method} {request.url.path} takes {JSON}")
        key = _idempotency_key(request)
        done = st.by_idempotency_key(table, who, key) if key is not None else None
        if done is not None:
            response.status_code = 200
        return key, done

    def dataset_or_404(self, who: str, dataset_id: str) -> dict[str, Any]:
        """The tenant's dataset ``dataset_id`` (404 if it has none by that id)."""
        row = self.db().get_dataset(who, dataset_id)
        if row is None:
            raise ApiError(
                404, "dataset_not_found", f"no dataset {dataset_id!r} for this API key (GET /v1/datasets lists yours)"
            )
        return row

    def job_or_404(self, who: str, job_id: str) -> dict[str, Any]:
        """The tenant's job ``job_id`` (404 if it has none by that id)."""
        row = self.db().get_job(who, job_id)
        if row is None:
            raise ApiError(
                404,
                "job_not_found",
                f"no fine-tuning job {job_id!r} for this API key (GET /v1/fine_tuning/jobs lists yours)",
            )
        return row


def _list_and_get(
    router: APIRouter,
    tenant: Callable,
    path: str,
    what: str,
    rows: Callable,
    one: Callable,
    view: Callable,
    models: tuple[type, type],
) -> None:
    """GET ``path`` (the tenant's rows, newest first) and GET ``path/{item_id}`` (one of them, else 404);
    ``models``: the response models of the list and of one item."""

    @router.get(
        path,
        summary=f"Your {what}, newest first.",
        name=f"list {what}",
        response_model=models[0],
        responses=error_responses(*COMMON_ERRORS),
    )
    async def listing(who: str = Depends(tenant)) -> dict:
        return {"object": "list", "data": [view(r) for r in rows(who)]}

    @router.get(
        path + "/{item_id}",
        summary=f"One of your {what}.",
        name=f"get one of {what}",
        response_model=models[1],
        responses=error_responses(*COMMON_ERRORS, 404, 422),
    )
    async def item(item_id: str, who: str = Depends(tenant)) -> dict:
        return view(one(who, item_id))


def _dataset_routes(ft: _FineTuning, tenant: Callable) -> APIRouter:
    """``POST /v1/datasets`` (upload), ``GET /v1/datasets`` and ``GET /v1/datasets/{id}``."""
    router = APIRouter(tags=["fine-tuning"])
    config = ft.config

    @router.post(
        "/v1/datasets",
        status_code=201,
        summary="Upload a dataset: a privatized payload + one target text per row (generate models), or examples "
        "privatized to text + one label each (classify models).",
        response_model=DatasetView,
        responses={**_repeated(DatasetView), **error_responses(*COMMON_ERRORS, 400, 404, 413, 415, 422)},
    )
    async def create_dataset(request: Request, response: Response, who: str = Depends(tenant)) -> dict:
        from .app import _parse_json, _read_body

        key, done = ft.begin_post(request, response, "datasets", who)
        if done is not None:
            return dataset_view(done)
        upload = _parse_json(DatasetUpload, await _read_body(request, config.max_dataset_bytes))
        dataset = await run_in_threadpool(validate_upload, upload, ft.registry, ft.limits)
        row = await run_in_threadpool(
            lambda: write_dataset(ft.db(), dataset, tenant=who, name=upload.name, idempotency_key=key)
        )
        return dataset_view(row)

    _list_and_get(
        router,
        tenant,
        "/v1/datasets",
        "datasets",
        lambda who: ft.db().list_datasets(who),
        ft.dataset_or_404,
        dataset_view,
        (DatasetList, DatasetView),
    )
    return router


def _job_routes(ft: _FineTuning, tenant: Callable) -> APIRouter:
    """``POST /v1/fine_tuning/jobs`` (create), list, get one and ``POST .../{job_id}/cancel``."""
    router = APIRouter(tags=["fine-tuning"])

    @router.post(
        "/v1/fine_tuning/jobs",
        status_code=201,
        summary="Start a fine-tuning job on your datasets (the model's served system trains it) -> job id.",
        response_model=JobView,
        responses={**_repeated(JobView), **error_responses(*COMMON_ERRORS, 400, 404, 413, 415, 422)},
    )
    async def create_job(request: Request, response: Response, who: str = Depends(tenant)) -> dict:
        from .app import _parse_json, _read_body

        key, done = ft.begin_post(request, response, "jobs", who)
        if done is not None:
            return job_view(done)
        st = ft.db()
        req = _parse_json(JobRequest, await _read_body(request, ft.config.max_body_bytes))
        values = _job_values(ft, st, who, req, key)
        row = _add_job(st, values, response)
        if ft.jobs is not None:
            ft.jobs.notify()
        return job_view(row)

    # a job: its status (queued, running, succeeded, failed, cancelled) and progress
    _list_and_get(
        router,
        tenant,
        "/v1/fine_tuning/jobs",
        "fine-tuning jobs",
        lambda who: ft.db().list_jobs(who),
        ft.job_or_404,
        job_view,
        (JobList, JobView),
    )

    @router.post(
        "/v1/fine_tuning/jobs/{job_id}/cancel",
        summary="Cancel a job (a queued one at once, a running one after its current step).",
        response_model=JobView,
        responses=error_responses(*COMMON_ERRORS, 404, 422),
    )
    async def cancel_job(job_id: str, who: str = Depends(tenant)) -> dict:
        ft.job_or_404(who, job_id)
        return job_view(ft.db().request_cancel(who, job_id))

    return router


def _job_values(ft: _FineTuning, st: Store, who: str, req: JobRequest, key: str | None) -> dict[str, Any]:
    """The row of a new job, checked: a model that fine-tunes (with the method asked for), the tenant's datasets of
    it, the step and job limits."""
    config = ft.config
    model, system = _fine_tunable(ft, req.model)
    hp = req.hyperparameters.model_dump()
    _check_method(model, system, hp["method"])
    rows = _dataset_rows(ft, who, model, req.datasets)
    steps = total_steps(rows, hp)
    if steps > config.max_job_steps:
        raise ApiError(
            422,
            "invalid_request",
            f"this job would run {steps} steps ({rows} rows, {hp['epochs']} epochs, batch {hp['batch_size']}); "
            f"the limit is {config.max_job_steps} (set hyperparameters.max_steps)",
        )
    if st.active_jobs(who) >= config.max_jobs_per_tenant:
        raise ApiError(
            429,
            "too_many_jobs",
            f"you have {config.max_jobs_per_tenant} queued or running jobs, the most this server allows; "
            "wait for one to finish or cancel one",
        )
    return {
        "id": new_id("ftjob_"),
        "tenant": who,
        "model": model.id,
        "datasets": list(req.datasets),
        "hyperparameters": hp,
        "total_steps": steps,
        "idempotency_key": key,
    }


def _fine_tunable(ft: _FineTuning, model_id: str):
    """(model, served system) of a job's model: 404 for an unknown one, 422 for one whose system does not fine-tune."""
    known = ft.registry.models.get(model_id)
    model = ft.registry.get(model_id, known.task if known is not None else "generate")
    system = ft.registry.system(model.id, ft.config)
    if not system.fine_tunes:
        raise ApiError(
            422,
            "invalid_request",
            f"model {model.id!r} is served by system {system.name!r}, which does not fine-tune",
        )
    return model, system


def _check_method(model, system, method: str | None) -> None:
    """422 for a method the model's system does not train (one that trains one way takes none)."""
    if method is None or method in system.methods:
        return
    if not system.methods:
        raise ApiError(
            422,
            "invalid_request",
            f"hyperparameters.method: model {model.id!r} (system {system.name!r}) trains one way and takes no method",
        )
    raise ApiError(
        422,
        "invalid_request",
        f"hyperparameters.method must be one of {', '.join(system.methods)} for model {model.id!r}, got {method!r}",
    )


def _dataset_rows(ft: _FineTuning, who: str, model, datasets: list[str]) -> int:
    """The rows of a job's datasets: each listed once, the tenant's, uploaded for ``model`` with its encoder."""
    if len(set(datasets)) != len(datasets):
        raise ApiError(422, "invalid_request", "datasets: an id is listed twice")
    rows = 0
    for dataset_id in datasets:
        ds = ft.dataset_or_404(who, dataset_id)
        if ds["model"] != model.id:
            raise ApiError(
                400,
                "dataset_model_mismatch",
                f"dataset {dataset_id!r} was uploaded for model {ds['model']!r}, not {model.id!r}",
            )
        want = model.card.get("encoder_sha256")
        if want and ds["encoder_sha256"] != want:
            raise ApiError(
                400,
                "payload_mismatch",
                f"dataset {dataset_id!r} was made by another encoder than model {model.id!r} now takes "
                f"(sha256 {str(ds['encoder_sha256'])[:12]}... != {want[:12]}...)",
            )
        rows += ds["rows"]
    return rows


def _add_job(st: Store, values: dict[str, Any], response: Response) -> dict[str, Any]:
    """The stored job; a concurrent retry with the same Idempotency-Key that won gets its job, answered 200."""
    try:
        return st.add_job(values)
    except sqlite3.IntegrityError:  # a concurrent retry with the same Idempotency-Key won
        key = values["idempotency_key"]
        row = st.by_idempotency_key("jobs", values["tenant"], key) if key else None
        if row is None:
            raise
        response.status_code = 200
        return row


def _job_event_routes(ft: _FineTuning, tenant: Callable) -> APIRouter:
    """``GET /v1/fine_tuning/jobs/{job_id}/events``: a page of events, or Server-Sent Events with ?stream=true."""
    router = APIRouter(tags=["fine-tuning"])

    @router.get(
        "/v1/fine_tuning/jobs/{job_id}/events",
        summary="A job's events (progress with loss, checkpoints, status changes); ?stream=true for Server-Sent "
        "Events.",
        response_model=JobEventList,
        responses={
            200: {
                "description": "A page of events; with ?stream=true, Server-Sent Events until the job ends.",
                "content": {"text/event-stream": {"schema": {"type": "string"}}},
            },
            **error_responses(*COMMON_ERRORS, 404, 422),
        },
    )
    async def job_events(
        request: Request,
        job_id: str,
        who: str = Depends(tenant),
        after: int = Query(0, ge=0, le=2**63 - 1, description="Only events with seq > after."),
        limit: int = Query(100, ge=1, le=1000, description="At most this many events (not streaming)."),
        stream: bool = Query(False, description="Server-Sent Events until the job ends."),
    ) -> Any:
        st = ft.db()
        job = ft.job_or_404(who, job_id)
        if not stream:
            found = st.events(job_id, after=after, limit=limit + 1)
            return {
                "object": "list",
                "data": [_event_view(e) for e in found[:limit]],
                "has_more": len(found) > limit,
                "status": job["status"],
            }
        return StreamingResponse(
            _event_stream(st, request, job_id, after),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )

    return router


async def _event_stream(st: Store, request: Request, job_id: str, after: int):
    """The job's events after ``after`` as Server-Sent Events, polled until the job ends or the client leaves."""
    last = after
    while True:
        status = st.job(job_id)["status"]  # read before the events: no event of a finished job is missed
        found = st.events(job_id, after=last, limit=1000)
        for e in found:
            last = e["seq"]
            yield f"id: {e['seq']}\nevent: {e['type']}\ndata: {json.dumps(_event_view(e))}\n\n"
        if status in TERMINAL and len(found) < 1000:
            yield f"event: end\ndata: {json.dumps(job_view(st.job(job_id)))}\n\n"
            return
        if await request.is_disconnected():
            return
        await asyncio.sleep(STREAM_POLL_S)
