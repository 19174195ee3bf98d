"""The training loop both PPFT stages (and the server's fine-tuning jobs and the learned inversion attacker) share.

:func:`fit` is written top to bottom in the nanoGPT manner on Accelerate, so ``accelerate launch`` scales it.
Checkpoints (safetensors + JSON, see :mod:`textfree.ppft.checkpoint`) hold the trainable weights, optimizer and RNG
states and the position in the data, and a run resumes from its newest one. Data order is a seeded permutation per
epoch, so a resumed run replays exactly what the uninterrupted run would have done. Around it: the run directory
(:func:`check_run_dir` refuses to resume a directory holding another run; :func:`prepare_run_dir` writes it), summary.json
(:func:`write_summary`) and the server part's optimizer and loss.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils.data import DataLoader, Subset

from .checkpoint import (
    TRAIN_CONFIG,
    InitChanged,
    latest_checkpoint,
    load_average,
    load_training_checkpoint,
    read_json,
    run_fingerprint,
    same_init,
    save_training_checkpoint,
    write_json,
)
from .ema import WeightAverage
from .train_config import LoopConfig

__all__ = ["fit", "lr_multiplier", "check_run_dir", "prepare_run_dir", "write_summary", "total_wall_s", "param_groups",
           "server_optimizer", "payload_loss", "METRICS", "SUMMARY"]

log = logging.getLogger("textfree.ppft")

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
# Fields that may change between an interrupted run and its resumption.
_RESUME_FREE = {"resume", "progress", "cpu", "log_every"}


def lr_multiplier(step: int, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen).tolist()


def check_run_dir(cfg: LoopConfig, *, init: str | None = None, fingerprint: str | None = None) -> str | None:
    """Refuse to resume a run directory that holds a different run (other settings, or another ``init``); reads only,
    writes nothing, so a run can be checked before its data and models are loaded. Returns the fingerprint of ``init``
    (``fingerprint`` when the caller has it already; None without ``init``) for :func:`prepare_run_dir`."""
    run = Path(cfg.out)
    if run.exists() and not run.is_dir():
        raise ValueError(f"the run directory {str(run)!r} is a file, not a directory")
    saved_path = run / TRAIN_CONFIG
    if init is not None and fingerprint is None:
        fingerprint = run_fingerprint(init)
    mine = {k: v for k, v in cfg.to_dict().items() if k not in _RESUME_FREE}
    if cfg.resume and saved_path.is_file() and latest_checkpoint(run) is not None:
        saved_doc = read_json(saved_path)
        # a setting added since the run was saved counts as its default: the run was trained without it
        added = {f.name: f.default for f in fields(cfg) if f.default is not dataclasses.MISSING}
        saved = {k: v for k, v in (added | saved_doc.get("config", {})).items() if k not in _RESUME_FREE}
        if saved != mine:
            diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
            raise ValueError(f"{str(run)!r} holds a run with other settings ({', '.join(diff)}); use another --out or --no-resume")
        if init is not None:
            try:
                checked = same_init(run, saved_doc.get("init_fingerprint"), init, current=fingerprint)
            except InitChanged as exc:
                raise InitChanged(f"{exc}: its checkpoints cannot be resumed; use another --out or --no-resume") from None
            if not checked:
                log.warning("%s records no fingerprint of its init run %s; resuming without checking that it is unchanged", run, init)
    return fingerprint


def prepare_run_dir(cfg: LoopConfig, *, init: str | None = None, fingerprint: str | None = None) -> Path:
    """Check the run directory (:func:`check_run_dir`), then create it and write train_config.json; without resume,
    remove its checkpoints and metrics. Call it once the run's data and models have loaded: a run that cannot start
    leaves ``cfg.out`` as it was.

    ``init`` (stage 2: the run it starts from) is fingerprinted into train_config.json, and an interrupted run is
    resumed only from the same ``init``: the config names it by path, so a rebuilt one would otherwise pass."""
    fingerprint = check_run_dir(cfg, init=init, fingerprint=fingerprint)
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        import shutil

        shutil.rmtree(run / "checkpoints", ignore_errors=True)
        (run / METRICS).unlink(missing_ok=True)
    doc = {"kind": type(cfg).__name__, "config": cfg.to_dict()}
    write_json(run / TRAIN_CONFIG, doc if init is None else doc | {"init_fingerprint": fingerprint})
    return run


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
) -> dict[str, Any]:
    """The training loop. ``epoch_examples(epoch)`` gives that epoch's examples (stage 2: fresh payloads);
    ``loss_fn(model, batch)`` the loss of a batch; ``on_step(step, loss)`` is called after every step."""
    from tqdm.auto import tqdm

    from ..accel import make_accelerator

    run = Path(cfg.out)
    accelerator = make_accelerator(cpu=cfg.cpu)
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
    bar = tqdm(total=total_steps, initial=step, desc=f"train {run.name}", unit="step", disable=not (cfg.progress and accelerator.is_main_process))
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
            DataLoader(Subset(examples, order), batch_size=cfg.batch_size, shuffle=False, collate_fn=collate,
                       generator=torch.Generator().manual_seed(cfg.seed + epoch))
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
                record = {"step": step, "epoch": epoch, "loss": sum(window) / len(window), "lr": cfg.lr * mult, "elapsed_s": round(time.time() - started, 2)}
                window = []
                log.info("step %d epoch %d loss %.4f lr %.3g", record["step"], epoch, record["loss"], record["lr"])
                if accelerator.is_main_process:
                    with open(run / METRICS, "a") as fh:
                        fh.write(json.dumps(record) + "\n")
            if step % cfg.save_every == 0 or step == total_steps:
                end_of_epoch = batch_in_epoch >= steps_per_epoch
                position = {"epoch": epoch + 1 if end_of_epoch else epoch, "batch_in_epoch": 0 if end_of_epoch else batch_in_epoch,
                            "elapsed_s": None if carried_s is None else round(time.time() - started, 2),
                            "first_loss": first_loss}
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    unwrapped = accelerator.unwrap_model(model)
                    save_training_checkpoint(run, step, _trained(unwrapped), optimizer, position, keep=cfg.keep_checkpoints,
                                             average=None if average is None else average.state())
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
        "final_loss": sum(losses[-cfg.log_every :]) / len(losses[-cfg.log_every :]) if losses else None,
        "wall_s": None if carried_s is None else round(time.time() - started, 2),
        "carried_wall_s": carried_s,
        "model": accelerator.unwrap_model(model),
    }


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
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                                  or (name == "elapsed_s" and value < 0)):
            raise ValueError(f"checkpoint {str(ckpt)!r}: trainer_state.json {name} must be a finite number"
                             f"{' >= 0' if name == 'elapsed_s' else ''} or null, got {value!r}")
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
            raise ValueError(f"checkpoint {str(ckpt)!r} holds no weight average (ema.safetensors) though ema_decay is set")
        average.load(saved, where=str(ckpt))
    return average


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop logged lines past the checkpoint we resume from (they will be logged again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


def param_groups(groups: list[tuple[list[torch.nn.Parameter], float]], weight_decay: float) -> list[dict]:
    return [{"params": params, "lr": lr, "base_lr": lr, "weight_decay": weight_decay} for params, lr in groups if params]


def server_optimizer(server: torch.nn.Module, cfg: LoopConfig) -> torch.optim.Optimizer:
    """AdamW over the server part's projection + LoRA parameters (stage 2 and fine-tuning jobs; with a trained base,
    :meth:`~textfree.ppft.server.ServerModel.train_base`, every decoder weight)."""
    params = list(server.projection.parameters()) + list(server.decoder_parameters().values())
    return torch.optim.AdamW(param_groups([(params, cfg.lr)], cfg.weight_decay))


def payload_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The server part's loss on a batch of payload rows (:func:`~textfree.ppft.batches.collate_payloads`)."""
    return model(batch["vectors"], batch["mask"], public=batch["public"], targets=batch["targets"]).loss


def total_wall_s(summary: dict[str, Any], t0: float) -> float | None:
    """This call's seconds since ``t0`` plus the training time of the sessions before it (None: unknown)."""
    carried = summary["carried_wall_s"]
    return None if carried is None else round(time.time() - t0 + carried, 2)


def write_summary(run: Path, summary: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Write summary.json (everything but the model) and return it; the stage functions add the model back."""
    data = {k: v for k, v in summary.items() if k != "model"} | extra
    write_json(run / SUMMARY, data)
    return data
