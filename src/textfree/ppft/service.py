"""PPFT as a served system: registers ``"ppft"`` with the server (:mod:`textfree.server.registry`) when imported.

Everything the server needs of PPFT is here: loading a run's server part into a generate handler (in process, or
through the vLLM gateway with ``ServerConfig(backend="vllm")``), the model card, the public files a client holds
(:func:`client_files`: the run's client encoder and slot centre, published as the model's client bundle), and
fine-tuning jobs (PPFT stage 2, :func:`textfree.ppft.adapt.train_adapter`, on uploaded payload rows). The handlers
live in :mod:`textfree.ppft.serving`; they load lazily, so importing this module stays cheap.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..server.config import ServerConfig
from ..server.registry import FineTuneJob, ServedModel, ServedSystem, register_system

__all__ = ["PPFT_SYSTEM", "client_files", "fine_tune", "load_adapter", "load_model"]


def load_model(model_id: str, source: str, config: ServerConfig) -> ServedModel:
    """The generate handler of the PPFT run at ``source``: in process, or a vLLM gateway model (``backend="vllm"``),
    publishing the run's :func:`client_files`."""
    from .serving import GenerateModel, VllmGenerateModel

    if config.backend == "vllm":  # a gateway: validates and projects here, generates on a vLLM server
        handler = VllmGenerateModel.load(model_id, source, config=config, device=config.device)
    else:
        handler = GenerateModel.load(model_id, source, device=config.device)
    handler.public_files = client_files(source, handler.card)
    return handler


def client_files(run: str | Path, card: dict[str, Any]) -> dict:
    """The public files a client of the PPFT run at ``run`` holds, by bundle name: the client encoder as the run
    saved it (``encoder/``: config, tokenizer files, safetensors weights; only its bytes are read, never loaded as a
    model) and, for a centring client, the slot centre (``slot_center.safetensors``: the centre, or the centre +
    subspace map, the values the card carries). ValueError for an encoder whose weights are not the card's
    ``encoder_sha256``, or one that cannot be published (pickled weights only). A run saved without ``encoder/``
    publishes none: its clients pass their own (``--encoder``)."""
    from ..bundle import CENTER_FILE, ENCODER_DIR
    from ..server.public_files import PublicFileError, public_dir, read_public_file
    from .checkpoint import CENTER_FILE as RUN_CENTER_FILE
    from .model import ENCODER_DIR as RUN_ENCODER_DIR

    run = Path(run)
    files = {}
    try:
        if (run / RUN_ENCODER_DIR).is_dir():
            files = public_dir(run / RUN_ENCODER_DIR, ENCODER_DIR)
            weights = files.get(f"{ENCODER_DIR}/model.safetensors")
            want = card.get("encoder_sha256")
            if want and (weights is None or weights.sha256 != want):
                raise ValueError(
                    f"the run's {RUN_ENCODER_DIR}/ holds no model.safetensors of its config's encoder sha256 "
                    f"{want[:16]}...: its clients would privatize for another model"
                )
        if card.get("center_sha256"):
            files[CENTER_FILE] = read_public_file(run / RUN_CENTER_FILE, "the slot centre")
    except PublicFileError as exc:
        raise ValueError(f"cannot publish the run's client files: {exc}") from None
    return files


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
