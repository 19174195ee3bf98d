"""Stage 2 on payloads a client already privatized: what a fine-tuning job of the service runs.

:func:`train_stage2` privatizes the domain prompts itself (it holds the client's encoder, fresh noise every
epoch). A server holds no encoder and no text: a client uploads its payload rows (+ public text + targets) once, and
:func:`train_adapter` adapts the projection + LoRA of an existing run (normally a served stage-1/stage-2 model) to
those rows, epoch after epoch over the same noisy vectors (post-processing: no further privacy cost). It runs the
same loop (:func:`~textfree.training.loop.fit`): checkpoints every ``save_every`` steps, and a job started again on its
run directory resumes from the newest checkpoint.

The run directory it writes holds the server part only (projection/, adapter/, decoder_ref.json,
textfree_config.json; no encoder/), which :meth:`ServerModel.load` (and so ``/v1/generate``) loads.
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..accel import make_accelerator
from ..training.checkpoint import CHECKPOINTS_DIR
from ..training.config import LoopConfig
from ..training.loop import fit
from ..training.runs import prepare_run_dir, total_wall_s, write_summary
from .batches import PayloadExample, collate_payloads, payload_loss
from .server import ServerModel, server_optimizer

__all__ = ["AdaptConfig", "train_adapter"]

log = logging.getLogger("textfree.ppft")


@dataclass(kw_only=True)
class AdaptConfig(LoopConfig):
    """Adapt the projection + LoRA of ``init`` to uploaded payload rows (encoder-free; the examples are given)."""

    init: str = field(
        metadata={"help": "The run directory whose server part (projection, LoRA, base decoder reference) is adapted."}
    )
    data: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Names of the example sources (dataset ids); recorded so a resumed run is checked to train on the "
            "same data."
        },
    )
    decoder: str | None = field(
        default=None,
        metadata={"help": "Where the base decoder is, if it moved since the init run (its sha256 must still match)."},
    )
    epochs: int = field(
        default=3, metadata={"help": "Passes over the uploaded payload rows (the same noisy vectors each pass)."}
    )
    save_every: int = field(
        default=50, metadata={"help": "Write a resumable checkpoint every this many steps (and at the end)."}
    )
    keep_final_checkpoint: bool = field(
        default=False,
        metadata={"help": "Keep checkpoints/ after the run finished (default: removed, the adapter is saved)."},
    )


def train_adapter(
    cfg: AdaptConfig, examples: Sequence[PayloadExample], *, on_step: Callable[[int, float], None] | None = None
) -> dict[str, Any]:
    """Train, save the adapted server part into ``cfg.out`` and return the summary (+ ``"model"``: the ServerModel).

    ``on_step(step, loss)`` runs after every optimizer step; raising from it stops the run, which resumes from its
    newest checkpoint when started again with the same config."""
    if not examples:
        raise ValueError("train_adapter needs at least one example")
    if not all(isinstance(ex, PayloadExample) for ex in examples):
        raise TypeError("train_adapter takes PayloadExamples (privatized rows) only, never text")
    accelerator = make_accelerator(cpu=cfg.cpu)  # before the run directory: only its main process writes there
    run = prepare_run_dir(cfg)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)  # before loading: PEFT draws from the global RNG while it builds LoRA layers
    t0 = time.time()
    server = ServerModel.load(cfg.init, trainable=True, decoder=cfg.decoder)
    log.info("adapting %s on %d payload rows from %s", cfg.init, len(examples), cfg.data or "given examples")
    summary = fit(
        cfg=cfg,
        model=server,
        optimizer=server_optimizer(server, cfg),
        n_examples=len(examples),
        epoch_examples=lambda epoch: examples,
        collate=collate_payloads,
        loss_fn=payload_loss,
        on_step=on_step,
        accelerator=accelerator,
    )
    server = summary["model"]
    server.config = server.config.replace(stage="stage2")
    if accelerator.is_main_process:  # the others wait for it in write_summary
        server.save(run)
        if not cfg.keep_final_checkpoint:
            shutil.rmtree(run / CHECKPOINTS_DIR, ignore_errors=True)
    extra = {
        "stage": "adapt",
        "examples": len(examples),
        "data": list(cfg.data),
        "total_wall_s": total_wall_s(summary, t0),
    }
    data = write_summary(run, summary, extra)
    if accelerator.is_main_process:
        log.info("adapt done: %d steps, final loss %s; model in %s", data["steps"], data["final_loss"], run)
    return data | {"model": server}
