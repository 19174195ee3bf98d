"""PPFT as a served system: registers ``"ppft"`` with the server (:mod:`textfree.server.registry`) when imported.

Everything the server needs of PPFT is here: loading a run's server part into a generate handler (in process, or
through the vLLM gateway with ``ServerConfig(backend="vllm")``), the model card, and fine-tuning jobs (PPFT stage 2,
:func:`textfree.ppft.adapt.train_adapter`, on uploaded payload rows). The handlers live in
:mod:`textfree.ppft.serving`; they load lazily, so importing this module stays cheap.
"""

from __future__ import annotations

from typing import Any

from ..server.config import ServerConfig
from ..server.registry import FineTuneJob, ServedModel, ServedSystem, register_system

__all__ = ["PPFT_SYSTEM", "fine_tune", "load_adapter", "load_model"]


def load_model(model_id: str, source: str, config: ServerConfig) -> ServedModel:
    """The generate handler of the PPFT run at ``source``: in process, or a vLLM gateway model (``backend="vllm"``)."""
    from .serving import GenerateModel, VllmGenerateModel

    if config.backend == "vllm":  # a gateway: validates and projects here, generates on a vLLM server
        return VllmGenerateModel.load(model_id, source, config=config, device=config.device)
    return GenerateModel.load(model_id, source, device=config.device)


def load_adapter(model_id: str, run_dir: str, device: str) -> ServedModel:
    """What a finished job wrote (a PPFT run directory), as an in-process generate handler of ``model_id``."""
    from .serving import GenerateModel

    return GenerateModel.load(model_id, run_dir, device=device)


def fine_tune(job: FineTuneJob) -> dict[str, Any]:
    """PPFT stage 2 on the job's payload rows: adapts the base run's projection + LoRA into ``job.run_dir``."""
    from .adapt import AdaptConfig, train_adapter
    from .batches import PayloadExample

    hp = job.hyperparameters
    cfg = AdaptConfig(
        out=str(job.run_dir),
        init=job.init,
        data=list(job.dataset_ids),
        epochs=hp["epochs"],
        max_steps=hp.get("max_steps"),
        batch_size=hp["batch_size"],
        lr=hp["lr"],
        warmup_steps=hp["warmup_steps"],
        weight_decay=hp["weight_decay"],
        grad_clip=hp["grad_clip"],
        ema_decay=hp.get("ema_decay"),
        seed=hp["seed"],
        log_every=hp["log_every"],
        save_every=hp["save_every"],
        cpu=job.device == "cpu",
        progress=False,
    )
    examples = [PayloadExample(row.vectors, row.public, row.target) for row in job.rows]
    return train_adapter(cfg, examples, on_step=job.on_step)


PPFT_SYSTEM = register_system(
    ServedSystem(
        name="ppft",
        task="generate",
        payload_kind="pooled",
        load=load_model,
        fine_tune=fine_tune,
        load_adapter=load_adapter,
    )
)
