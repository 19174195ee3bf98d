"""Training checkpoints without pickle: model and optimizer tensors in safetensors, everything else in JSON.

A checkpoint is a directory::

    checkpoint/
      model.safetensors        the (unwrapped) model's weights (tied embeddings stored once)
      optimizer.safetensors    every tensor of optimizer.state_dict()["state"] as "state.<param>.<key>";
                               the param_groups and non-tensor state as JSON in the file's metadata
      trainer_state.json       step, tokens seen, planned steps, time spent, loss history, fingerprints

It is written to ``checkpoint.tmp/`` and renamed into place, so an interruption while writing leaves the previous
checkpoint intact. Loading reads only safetensors and JSON (never ``torch.load``).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import load_model, save_file, save_model

__all__ = [
    "save_checkpoint",
    "load_checkpoint",
    "read_trainer_state",
    "optimizer_state_to_tensors",
    "optimizer_state_from_tensors",
    "CHECKPOINT_DIR",
    "TRAINER_STATE",
]

CHECKPOINT_DIR = "checkpoint"
TRAINER_STATE = "trainer_state.json"


def optimizer_state_to_tensors(state_dict: dict[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """``(tensors, metadata)`` for safetensors from ``optimizer.state_dict()``."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, entry in state_dict["state"].items():
        for key, value in entry.items():
            if torch.is_tensor(value):
                tensors[f"state.{pid}.{key}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[key] = value
    meta = {"param_groups": json.dumps(state_dict["param_groups"]), "scalars": json.dumps(scalars)}
    return tensors, meta


def optimizer_state_from_tensors(tensors: dict[str, torch.Tensor], meta: dict[str, str]) -> dict[str, Any]:
    """The inverse of :func:`optimizer_state_to_tensors`: a dict for ``optimizer.load_state_dict``."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for pid, entries in json.loads(meta.get("scalars", "{}")).items():
        state.setdefault(int(pid), {}).update(entries)
    return {"state": state, "param_groups": json.loads(meta["param_groups"])}


def save_checkpoint(
    directory: str | os.PathLike,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
) -> Path:
    """Write ``directory/checkpoint`` atomically (see the module docstring); returns its path."""
    root = Path(directory)
    final, tmp = root / CHECKPOINT_DIR, root / f"{CHECKPOINT_DIR}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir(parents=True)
    save_model(model, str(tmp / "model.safetensors"))
    tensors, meta = optimizer_state_to_tensors(optimizer.state_dict())
    save_file(tensors, str(tmp / "optimizer.safetensors"), metadata=meta)
    (tmp / TRAINER_STATE).write_text(json.dumps(trainer_state, indent=1) + "\n")
    old = root / f"{CHECKPOINT_DIR}.old"
    if final.exists():
        if old.exists():
            shutil.rmtree(old)
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old)
    return final


def read_trainer_state(directory: str | os.PathLike) -> dict[str, Any] | None:
    """The trainer state of ``directory/checkpoint``, or ``None`` when there is no complete checkpoint."""
    path = Path(directory) / CHECKPOINT_DIR / TRAINER_STATE
    return json.loads(path.read_text()) if path.is_file() else None


def load_checkpoint(
    directory: str | os.PathLike, model: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Load ``directory/checkpoint`` into ``model`` and ``optimizer`` (in place); returns the trainer state."""
    ckpt = Path(directory) / CHECKPOINT_DIR
    state = read_trainer_state(directory)
    if state is None:
        raise FileNotFoundError(f"no checkpoint in {directory}")
    missing, unexpected = load_model(model, str(ckpt / "model.safetensors"), strict=True)
    del missing, unexpected
    with safe_open(str(ckpt / "optimizer.safetensors"), framework="pt") as handle:
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}
        meta = handle.metadata() or {}
    optimizer.load_state_dict(optimizer_state_from_tensors(tensors, meta))
    return state
