"""Checkpoint files: safetensors for tensors, JSON for everything else; nothing is ever pickled or unpickled.

A run directory (what :meth:`TextFreeLM.save` writes, see ``docs/ppft.md``)::

    run/
      textfree_config.json      k, mechanism family, encoder id + sha256, dims, prompt template
      decoder_ref.json          the base decoder's name/path + sha256 (its weights are not copied)
      encoder/                  client encoder (save_pretrained: config.json, model.safetensors, tokenizer)
      projection/               config.json + model.safetensors
      adapter/                  PEFT LoRA (adapter_config.json + adapter_model.safetensors)
      slot_center.safetensors   only with a centring client (config center_sha256): the public slot centre
      train_config.json         the Stage1Config / Stage2Config of the run
      metrics.jsonl             one JSON line per logged step
      checkpoints/step-000040/  resumable training state (see below)

A training checkpoint (``checkpoints/step-N``) holds only what resuming needs: ``trainable.safetensors`` (the
trainable parameters by name), ``optimizer.safetensors`` + ``optimizer.json`` (the optimizer's tensors and its
plain-data state), ``rng.safetensors`` + ``rng.json`` (torch and Python RNG states) and ``trainer_state.json``
(step, epoch, batches done in the epoch). It is written to a temporary directory and renamed into place, so an
interrupted save never leaves a checkpoint that looks complete.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors.torch import load_file

from ..atomic import atomic_save_tensors, read_json
from ..training.runs import TRAIN_CONFIG, _is_fingerprint_of, run_fingerprint

__all__ = ["stage1_build", "CENTER_FILE", "save_center", "load_center", "load_center_file"]

CENTER_FILE = "slot_center.safetensors"


def stage1_build(run: str | os.PathLike) -> str | None:
    """The :func:`run_fingerprint` of the stage-1 run that ``run`` descends from: ``run`` itself for a stage-1 run;
    for a stage-2 run the build of the ``init`` it was trained from (its train_config.json), provided that ``init``
    still has the fingerprint the run recorded of it. None where the chain cannot be followed: no summary.json, no
    recorded init, or an init rebuilt since (a stage-2 run of a rebuilt stage 1 has no build to name)."""
    run = Path(run)
    summary = run / "summary.json"
    if not summary.is_file():
        return None
    if read_json(summary).get("stage") == "stage1":
        return run_fingerprint(run)
    saved = read_json(run / TRAIN_CONFIG) if (run / TRAIN_CONFIG).is_file() else {}
    init, recorded = saved.get("config", {}).get("init"), saved.get("init_fingerprint")
    if not init or not recorded or not Path(init).is_dir() or not _is_fingerprint_of(recorded, init):
        return None
    return stage1_build(init)


# --------------------------------------------------------------------------- optimizer state
# --------------------------------------------------------------------------- RNG state
# --------------------------------------------------------------------------- training checkpoints
def save_center(run: str | os.PathLike, center: torch.Tensor) -> Path:
    """Write the client's public slot centre (``slot_center.safetensors``, one float32 tensor ``center``)."""
    path = Path(run) / CENTER_FILE
    atomic_save_tensors(path, {"center": center.to(torch.float32)})
    return path


def load_center_file(run: str | os.PathLike, dim: int | None = None) -> torch.Tensor:
    """Read ``slot_center.safetensors`` of ``run`` (one finite 1-D tensor ``center``, of width ``dim`` when given)."""
    from ..mechanisms.centering import check_center

    path = Path(run) / CENTER_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{str(Path(run))!r} has no {CENTER_FILE}")
    tensors = load_file(str(path))
    if set(tensors) != {"center"}:
        raise ValueError(f"{path}: expected one tensor 'center', got {sorted(tensors)}")
    return check_center(tensors["center"], dim)


def load_center(run: str | os.PathLike, config) -> torch.Tensor | None:
    """The slot centre a run's config (a :class:`~textfree.ppft.config.TextFreeConfig`) names by ``center_sha256``, or
    None when it names none (PPFT's client); refuses a missing file, a wrong width or another vector."""
    from ..mechanisms.centering import center_sha256

    sha256, dim = config.center_sha256, config.encoder_dim
    if not sha256:
        return None
    path = Path(run) / CENTER_FILE
    if not path.is_file():
        raise FileNotFoundError(
            f"{str(Path(run))!r}: the config names a slot centre (sha256 {sha256[:12]}...) but {CENTER_FILE} is missing"
        )
    center = load_center_file(run, dim)
    if center_sha256(center) != sha256:
        raise ValueError(
            f"{path}: the centre's sha256 {center_sha256(center)[:12]}... is not the config's {sha256[:12]}..."
        )
    return center
