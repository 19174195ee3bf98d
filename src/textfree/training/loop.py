"""The training loop both PPFT stages (and the server's fine-tuning jobs and the learned inversion attacker) share.

:func:`fit` is written top to bottom in the nanoGPT manner on Accelerate, so ``accelerate launch`` scales it.
Checkpoints (safetensors + JSON, see :mod:`textfree.ppft.checkpoint`) hold the trainable weights, optimizer and RNG
states and the position in the data, and a run resumes from its newest one. Data order is a seeded permutation per
epoch, so a resumed run replays exactly what the uninterrupted run would have done. Around it: the run directory
(:func:`check_run_dir` refuses to resume a directory holding another run; :func:`prepare_run_dir` writes it),
summary.json (:func:`write_summary`) and the server part's optimizer and loss.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils.data import DataLoader, Subset

from .average import WeightAverage
from .checkpoint import (
    latest_checkpoint,
    load_average,
    load_training_checkpoint,
    save_training_checkpoint,
)
from .config import LoopConfig
from .runs import (
    METRICS,
    _truncate_metrics,
    logged_loss,
)
from .schedule import lr_multiplier

__all__ = ["fit", "param_groups"]

log = logging.getLogger("textfree.training")


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen).tolist()


def fit(
    *,
    cfg: LoopConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    n_examples: int,
    epoch_examples: Callable[[int], Sequence[Any]],
    collate: Callable[[list[Any]], dict],
    loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor],
    on_step: Callable[[int, float], None] | None = None,
    accelerator=None,
) -> dict[str, Any]:
    """The training loop. ``epoch_examples(epoch)`` gives that epoch's examples (stage 2: fresh payloads);
    ``loss_fn(model, batch)`` the loss of a batch; ``on_step(step, loss)`` is called after every step.

    ``accelerator``: the trainer's own, when it needed the device before the loop (else one is made for ``cfg.cpu``).
    Under ``accelerate launch`` every process runs this; each step takes ``cfg.batch_size`` examples per process from
    one shared seeded order, and only the main process writes metrics.jsonl and checkpoints."""
    from tqdm.auto import tqdm

    from ..accel import make_accelerator

    run = Path(cfg.out)
    accelerator = accelerator or make_accelerator(cpu=cfg.cpu)
    world = accelerator.num_processes
    steps_per_epoch = math.ceil(n_examples / (cfg.batch_size * world))
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    trainable = [p for p in model.parameters() if p.requires_grad]

    # -- resume: weights, optimizer, RNG and position in the data from the newest checkpoint
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0}
    ckpt = latest_checkpoint(run) if cfg.resume else None
    if ckpt is not None:
        state = load_training_checkpoint(ckpt, model, optimizer)
        if accelerator.is_main_process:
            log.info("resumed from %s (step %d)", ckpt, state["step"])
            _truncate_metrics(run / METRICS, state["step"])
    carried_s, first_loss = _carried_record(state, ckpt)
    model, optimizer = accelerator.prepare(model, optimizer)
    # after prepare: the average lives where the parameters now are (on a GPU, not where they were loaded)
    average = _start_average(cfg, accelerator.unwrap_model(model), ckpt)

    step = state["step"]
    losses: list[float] = []
    window: list[float] = []
    started = time.time() - (carried_s or 0.0)  # the clock runs on from the checkpoint's (its training time so far)
    bar = tqdm(
        total=total_steps,
        initial=step,
        desc=f"train {run.name}",
        unit="step",
        disable=not (cfg.progress and accelerator.is_main_process),
    )
    model.train()
    for epoch in range(state["epoch"], cfg.epochs):
        if step >= total_steps:
            break
        examples = epoch_examples(epoch)
        order = _epoch_order(len(examples), cfg.seed, epoch)
        batch_in_epoch = state["batch_in_epoch"] if epoch == state["epoch"] else 0
        order = order[batch_in_epoch * cfg.batch_size * world :]
        # (its own generator: creating the iterator must not draw from the global RNG that dropout uses)
        loader = accelerator.prepare_data_loader(
            DataLoader(
                Subset(examples, order),
                batch_size=cfg.batch_size,
                shuffle=False,
                collate_fn=collate,
                generator=torch.Generator().manual_seed(cfg.seed + epoch),
            )
        )
        for batch in loader:
            # learning rate for this step (nanoGPT: computed, not a scheduler object)
            mult = lr_multiplier(step, total_steps, cfg.warmup_steps, cfg.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = group["base_lr"] * mult
            # forward, backward, update
            loss = loss_fn(model, batch)
            accelerator.backward(loss)
            if cfg.grad_clip > 0:
                accelerator.clip_grad_norm_(trainable, cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if average is not None:
                average.update(_trained(accelerator.unwrap_model(model)))
            step += 1
            batch_in_epoch += 1
            # bookkeeping: log, checkpoint
            value = accelerator.reduce(loss.detach(), "mean").item()
            losses.append(value)
            if state["step"] == 0 and len(losses) == 1:
                first_loss = value
            window.append(value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", epoch=epoch)
            if step % cfg.log_every == 0 or step == total_steps:
                record = {
                    "step": step,
                    "epoch": epoch,
                    "loss": sum(window) / len(window),
                    "lr": cfg.lr * mult,
                    "elapsed_s": round(time.time() - started, 2),
                }
                window = []
                if accelerator.is_main_process:
                    log.info("step %d epoch %d loss %.4f lr %.3g", record["step"], epoch, record["loss"], record["lr"])
                    with open(run / METRICS, "a") as fh:
                        fh.write(json.dumps(record) + "\n")
            if step % cfg.save_every == 0 or step == total_steps:
                end_of_epoch = batch_in_epoch >= steps_per_epoch
                position = {
                    "epoch": epoch + 1 if end_of_epoch else epoch,
                    "batch_in_epoch": 0 if end_of_epoch else batch_in_epoch,
                    "elapsed_s": None if carried_s is None else round(time.time() - started, 2),
                    "first_loss": first_loss,
                    "final_loss": _final_loss(losses, cfg.log_every, state, run),
                }
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    unwrapped = accelerator.unwrap_model(model)
                    save_training_checkpoint(
                        run,
                        step,
                        _trained(unwrapped),
                        optimizer,
                        position,
                        keep=cfg.keep_checkpoints,
                        average=None if average is None else average.state(),
                    )
            if on_step is not None:
                on_step(step, value)
            if step >= total_steps:
                break
    bar.close()
    accelerator.wait_for_everyone()
    if average is not None:
        # the run's weights are the average (the checkpoints keep the last step's, to resume from)
        average.copy_to(_trained(accelerator.unwrap_model(model)))
    return {
        "steps": step,
        "total_steps": total_steps,
        "resumed_from_step": state["step"],
        "first_loss": first_loss,
        "final_loss": _final_loss(losses, cfg.log_every, state, run),
        "wall_s": None if carried_s is None else round(time.time() - started, 2),
        "carried_wall_s": carried_s,
        "model": accelerator.unwrap_model(model),
    }


def _final_loss(losses: list[float], log_every: int, state: dict[str, Any], run: Path) -> float | None:
    """The mean loss of the last ``log_every`` steps; a run resumed at its end trains nothing now, and reports the
    final loss its checkpoint recorded (a checkpoint written before it was recorded: the loss logged at that step)."""
    if losses:
        return sum(losses[-log_every:]) / len(losses[-log_every:])
    recorded = state.get("final_loss")
    if isinstance(recorded, (int, float)) and not isinstance(recorded, bool) and math.isfinite(recorded):
        return float(recorded)
    return logged_loss(run / METRICS, state["step"]) if state["step"] else None


def _carried_record(state: dict[str, Any], ckpt: Path | None) -> tuple[float | None, float | None]:
    """(training seconds, first loss) of the sessions before this one: ``(0.0, None)`` for a fresh run, else what the
    checkpoint resumed from recorded, so that a resumed run reports the whole run's time and first loss. A checkpoint
    written before these were recorded (or one that recorded them unknown) gives None: unknown, never the resumed
    part's figure passed off as the run's."""
    if ckpt is None:
        return 0.0, None
    if "elapsed_s" not in state:
        log.warning("checkpoint %s records no training time or first loss: this run reports both as unknown", ckpt)
        return None, None
    carried, first = state["elapsed_s"], state.get("first_loss")
    for name, value in (("elapsed_s", carried), ("first_loss", first)):
        if value is not None and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or (name == "elapsed_s" and value < 0)
        ):
            raise ValueError(
                f"checkpoint {str(ckpt)!r}: trainer_state.json {name} must be a finite number"
                f"{' >= 0' if name == 'elapsed_s' else ''} or null, got {value!r}"
            )
    return (None if carried is None else float(carried)), (None if first is None else float(first))


def _trained(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _start_average(cfg: LoopConfig, model: torch.nn.Module, ckpt: Path | None) -> WeightAverage | None:
    """The weight average of ``cfg.ema_decay`` (None when off): the checkpoint's when resuming, else the weights now."""
    if cfg.ema_decay is None:
        return None
    average = WeightAverage.start(cfg.ema_decay, _trained(model))
    if ckpt is not None:
        saved = load_average(ckpt)
        if saved is None:
            raise ValueError(
                f"checkpoint {str(ckpt)!r} holds no weight average (ema.safetensors) though ema_decay is set"
            )
        average.load(saved, where=str(ckpt))
    return average


def param_groups(groups: list[tuple[list[torch.nn.Parameter], float]], weight_decay: float) -> list[dict]:
    return [
        {"params": params, "lr": lr, "base_lr": lr, "weight_decay": weight_decay} for params, lr in groups if params
    ]
