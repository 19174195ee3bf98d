"""Fine-tuning jobs: the request schema, the JSON a tenant sees, and ``JobManager``, the background workers.

A job adapts a served model (its served system's ``fine_tune``: PPFT's is stage 2, projection + LoRA, on payload rows
+ targets; RAPT's trains a PEFT method with the reconstruction head on examples privatized to text + labels; never
private text) to the tenant's uploaded datasets and produces an adapter that the model's route (``/v1/generate``,
``/v1/classify``) serves with ``adapter=<id>``. ``max_concurrent_jobs`` worker threads take queued jobs oldest first;
the rest wait, queued. Everything a job does is in the database (status, step, loss, events), so:

* a job whose server stops (crash, kill, shutdown) is left ``running`` in the database; the next server on the same
  database and data directory queues it again and it resumes from its newest checkpoint (``checkpoints/step-N``
  in its run directory), not from step 0;
* cancelling a queued job is immediate; a running job stops after its current optimizer step.

Worker threads share the process's global torch RNG (LoRA dropout): one job alone is bit-reproducible, and so is
its resumption; jobs that run concurrently are not.
"""

from __future__ import annotations

import logging
import math
import threading
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, Field

from .config import ServerConfig
from .registry import FineTuneJob, ServedSystem, get_system
from .store import Store, new_id

__all__ = ["Hyperparameters", "JobRequest", "JobManager", "job_view", "total_steps"]

log = logging.getLogger("textfree.server.jobs")


class Hyperparameters(BaseModel):
    """Optimisation settings of a job (the adapter's shape is the base model's)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    method: str | None = Field(
        None,
        max_length=32,
        description="The fine-tuning method, for a system that offers several (RAPT: lora, prompt_tuning, "
        "prefix_tuning, ia3, full; default: the served run's). A system that trains one way (PPFT) takes none.",
    )
    epochs: int = Field(3, ge=1, le=1000, description="Passes over the uploaded rows.")
    lr: float = Field(1e-3, gt=0, le=1, description="Peak learning rate of the projection and LoRA parameters.")
    batch_size: int = Field(8, ge=1, le=512, description="Rows per optimizer step.")
    max_steps: int | None = Field(None, ge=1, description="Stop after this many steps (default: all epochs).")
    warmup_steps: int = Field(20, ge=0, le=1_000_000, description="Linear warm-up steps, then cosine decay.")
    weight_decay: float = Field(0.0, ge=0, le=1, description="AdamW weight decay.")
    grad_clip: float = Field(1.0, ge=0, le=1e6, description="Gradient-norm clip (0: none).")
    ema_decay: float | None = Field(
        None,
        gt=0,
        lt=1,
        description="Save an exponential moving average of the trained weights (this decay per step) instead of the "
        "last step's (default: none).",
    )
    seed: int = Field(0, ge=0, le=2**31 - 1, description="Initialisation, dropout and data order.")
    save_every: int = Field(
        50,
        ge=1,
        le=1_000_000,
        description="Checkpoint every this many steps: a restarted server resumes from the newest.",
    )
    log_every: int = Field(10, ge=1, le=1_000_000, description="A progress event (mean loss) every this many steps.")


class JobRequest(BaseModel):
    """The body of ``POST /v1/fine_tuning/jobs``."""

    model_config = ConfigDict(extra="forbid")
    model: str = Field(max_length=64, description="The model to adapt (GET /v1/models; its system fine-tunes).")
    datasets: list[str] = Field(
        min_length=1, max_length=64, description="Ids of your datasets (POST /v1/datasets), uploaded for this model."
    )
    hyperparameters: Hyperparameters = Field(default_factory=Hyperparameters)


def total_steps(rows: int, hp: dict[str, Any]) -> int:
    """Optimizer steps of a job (one process): epochs x ceil(rows / batch_size), capped by max_steps."""
    steps = hp["epochs"] * math.ceil(rows / hp["batch_size"])
    return min(steps, hp["max_steps"]) if hp.get("max_steps") else steps


def job_view(row: dict[str, Any]) -> dict[str, Any]:
    """What the API shows of a job."""
    return {
        "id": row["id"],
        "object": "fine_tuning.job",
        "model": row["model"],
        "datasets": row["datasets"],
        "hyperparameters": row["hyperparameters"],
        "status": row["status"],
        "progress": {
            "step": row["step"],
            "total_steps": row["total_steps"],
            "loss": row["loss"],
            "resumed_from_step": row["resumed_from_step"],
        },
        "adapter": row["adapter"],
        "error": row["error"],
        "cancel_requested": bool(row["cancel_requested"]),
        "created_at": row["created_at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
    }


def _finite(x: float | None) -> float | None:
    """A loss for JSON: NaN or infinite (a diverged run) becomes null."""
    return x if x is not None and math.isfinite(x) else None


class _Stop(Exception):
    """The server is stopping: leave the job 'running' in the database so the next start resumes it."""


class _Cancel(Exception):
    """The tenant cancelled the job."""


class JobManager:
    """``max_concurrent_jobs`` worker threads running queued jobs. ``start()`` queues again the jobs an earlier
    process left running and starts the workers; ``close()`` stops them after their current step.

    ``step_hook(job_id, step)``, when set, runs after every step (tests use it to stop a job at a known step).
    ``system_of(model_id)`` is the served system that trains a model (default: the one ``config`` names)."""

    def __init__(
        self,
        store: Store,
        config: ServerConfig,
        *,
        model_dirs: dict[str, str],
        system_of: Callable[[str], ServedSystem] | None = None,
    ):
        self.store = store
        self.config = config
        self.model_dirs = dict(model_dirs)
        self.system_of = system_of or (lambda model_id: get_system(config.system_of(model_id)))
        self.step_hook: Callable[[str, int], None] | None = None
        self._stop = threading.Event()
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        if self._threads:
            return
        for job_id in self.store.requeue_orphans():
            log.info("job %s was interrupted by a restart: queued again, resumes from its last checkpoint", job_id)
        self._stop.clear()
        for i in range(self.config.max_concurrent_jobs):
            t = threading.Thread(target=self._work, name=f"textfree-job-worker-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def notify(self) -> None:
        """A job was queued: wake a worker."""
        with self._wake:
            self._wake.notify_all()

    def request_stop(self) -> None:
        """Ask the workers to stop: a running job stops after its current step and stays 'running' (to resume)."""
        self._stop.set()
        self.notify()

    def close(self, timeout: float = 60.0) -> None:
        """:meth:`request_stop`, then wait for the workers to end."""
        self.request_stop()
        for t in self._threads:
            t.join(timeout)
            if t.is_alive():  # pragma: no cover - a step longer than the timeout
                log.warning("worker %s is still finishing a step after %.0f s", t.name, timeout)
        self._threads = []

    # ------------------------------------------------------------------ worker
    def _work(self) -> None:
        while not self._stop.is_set():
            job = self.store.claim_next_job()
            if job is None:
                with self._wake:
                    self._wake.wait(timeout=1.0)
                continue
            self._run(job)

    def _run(self, job: dict[str, Any]) -> None:
        job_id = job["id"]
        if job["cancel_requested"]:
            self._finish(job_id, "cancelled", "cancelled")
            return
        try:
            self._train(job)
        except _Stop:
            step = self.store.job(job_id)["step"]
            self.store.add_event(
                job_id,
                "interrupted",
                f"the server is stopping at step {step}; the job resumes from its last checkpoint at the next start",
            )
        except _Cancel:
            self._finish(job_id, "cancelled", "cancelled by the tenant")
        except Exception as exc:  # the job fails; the worker and the server keep going
            log.exception("job %s failed", job_id)  # the details (paths, values) stay in the server's log
            from .datasets import DatasetFileError

            if isinstance(exc, DatasetFileError):  # path-free by construction: the tenant may read it
                message = f"training failed: {exc}"[:500]
            else:
                message = f"training failed ({type(exc).__name__}); the server log has the details (job {job_id})"
            self._finish(job_id, "failed", message, error=True)

    def _finish(self, job_id: str, status: str, message: str, *, error: bool = False) -> None:
        self.store.finish_job(job_id, status, message, error=error)

    def _train(self, job: dict[str, Any]) -> None:
        from .datasets import load_rows

        job_id = job["id"]
        run = self.store.job_dir(job_id)
        init = self.model_dirs.get(job["model"])
        if init is None:
            raise ValueError(f"model {job['model']!r} is no longer served by this server")
        system = self.system_of(job["model"])
        if system.fine_tune is None:
            raise ValueError(f"model {job['model']!r} is served by system {system.name!r}, which does not fine-tune")
        self._announce_start(job_id, run)
        summary = system.fine_tune(
            FineTuneJob(
                run_dir=run,
                init=init,
                dataset_ids=list(job["datasets"]),
                rows=load_rows(self.store, job["datasets"]),
                hyperparameters=dict(job["hyperparameters"]),
                device=self.config.device,
                on_step=self._step_callback(job),
            )
        )
        self._succeed(job, summary)

    def _announce_start(self, job_id: str, run) -> None:
        """Record where the job starts: from its newest checkpoint (a resumed job) or from step 0."""
        from ..training.checkpoint import latest_checkpoint

        ckpt = latest_checkpoint(run)
        resumed = int(ckpt.name.split("-")[1]) if ckpt is not None else None
        self.store.update_job(job_id, resumed_from_step=resumed)
        self.store.add_event(
            job_id,
            "started",
            "resuming from checkpoint step %d" % resumed if resumed else "training started",
            {"resumed_from_step": resumed},
        )

    def _step_callback(self, job: dict[str, Any]) -> Callable[[int, float], None]:
        """``on_step(step, loss)``: progress and checkpoint events, the test hook, then stop or cancel if asked."""
        job_id, hp, total = job["id"], job["hyperparameters"], job["total_steps"]
        window: list[float] = []

        def on_step(step: int, loss: float) -> None:
            window.append(loss)
            self.store.update_job(job_id, step=step, loss=_finite(loss))
            if step % hp["log_every"] == 0 or step == total:
                mean = _finite(sum(window) / len(window))
                self.store.add_event(
                    job_id,
                    "progress",
                    f"step {step}/{total}: loss " + ("not finite" if mean is None else f"{mean:.4f}"),
                    {"step": step, "total_steps": total, "loss": mean},
                )
                window.clear()
            if step % hp["save_every"] == 0 and step != total:
                self.store.add_event(job_id, "checkpoint", f"checkpoint at step {step}", {"step": step})
            if self.step_hook is not None:
                self.step_hook(job_id, step)
            if self._stop.is_set():
                raise _Stop
            if self.store.cancel_requested(job_id):
                raise _Cancel

        return on_step

    def _succeed(self, job: dict[str, Any], summary: dict[str, Any]) -> None:
        adapter = {"id": new_id("ad_"), "tenant": job["tenant"], "model": job["model"]}
        route = f"/v1/{self.system_of(job['model']).task}"
        self.store.finish_job(
            job["id"],
            "succeeded",
            f"adapter {adapter['id']} is ready: POST {route} with adapter={adapter['id']}",
            adapter=adapter,
            data={
                "adapter": adapter["id"],
                "steps": summary["steps"],
                "final_loss": _finite(summary["final_loss"]),
                "resumed_from_step": summary["resumed_from_step"],
            },
        )
