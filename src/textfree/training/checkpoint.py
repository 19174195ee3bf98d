"""Resumable training checkpoints: safetensors for tensors, JSON for everything else; nothing is pickled.

A checkpoint ``checkpoints/step-N`` of a run holds only what resuming needs: ``trainable.safetensors`` (the
trainable parameters by name), ``optimizer.safetensors`` + ``optimizer.json`` (the optimizer's tensors and its
plain-data state), ``rng.safetensors`` + ``rng.json`` (torch and Python RNG states), ``trainer_state.json`` (the
loop's position: step, epoch, batches done, and whatever else the trainer records) and, with a weight average,
``ema.safetensors``. It is written to a temporary directory and renamed into place, so an interrupted save never
leaves a checkpoint that looks complete.

torch and safetensors are imported by the functions that save and load: finding a run's checkpoints
(:func:`latest_checkpoint`, :data:`CHECKPOINTS_DIR`) stays light, for the commands that check a run directory before
their heavy imports.
"""

from __future__ import annotations

import os
import random
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..atomic import read_json, write_json

if TYPE_CHECKING:
    import torch

__all__: list[str] = [
    "CHECKPOINTS_DIR",
    "EMA_FILE",
    "save_optimizer_state",
    "load_optimizer_state",
    "rng_state",
    "set_rng_state",
    "save_training_checkpoint",
    "latest_checkpoint",
    "load_training_checkpoint",
    "load_average",
]


CHECKPOINTS_DIR = "checkpoints"


EMA_FILE = "ema.safetensors"


_STEP_DIR = re.compile(r"^step-(\d+)$")


def save_optimizer_state(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    """``optimizer.safetensors`` (every tensor of ``state``) + ``optimizer.json`` (param groups, other state)."""
    import torch
    from safetensors.torch import save_file

    sd = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    plain_state: dict[str, dict[str, Any]] = {}
    for idx, entry in sd["state"].items():
        for name, value in entry.items():
            if isinstance(value, torch.Tensor):
                tensors[f"state.{idx}.{name}"] = value.detach().contiguous().cpu()
            else:
                plain_state.setdefault(str(idx), {})[name] = value
    save_file(tensors, str(directory / "optimizer.safetensors"))
    write_json(directory / "optimizer.json", {"param_groups": sd["param_groups"], "plain_state": plain_state})


def load_optimizer_state(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    from safetensors.torch import load_file

    meta = read_json(directory / "optimizer.json")
    tensors = load_file(str(directory / "optimizer.safetensors"))
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        _, idx, name = key.split(".", 2)
        state.setdefault(int(idx), {})[name] = value
    for idx, entry in meta.get("plain_state", {}).items():
        state.setdefault(int(idx), {}).update(entry)
    groups = meta["param_groups"]
    for group in groups:
        if isinstance(group.get("betas"), list):
            group["betas"] = tuple(group["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, plain data) capturing torch's CPU (and CUDA) and Python's global RNGs."""
    import torch

    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    version, internal, gauss = random.getstate()
    return tensors, {"python": [version, list(internal), gauss]}


def set_rng_state(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> None:
    import torch

    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda_")]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = plain["python"]
    random.setstate((version, tuple(internal), gauss))


def save_training_checkpoint(
    run_dir: str | os.PathLike,
    step: int,
    trainable: dict[str, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    trainer_state: dict[str, Any],
    *,
    keep: int = 1,
    average: dict[str, torch.Tensor] | None = None,
) -> Path:
    """Write ``checkpoints/step-<step>`` atomically; keep only the newest ``keep`` checkpoints. ``average``: the
    weight average of the trained parameters (:mod:`textfree.training.average`), written to ``ema.safetensors``."""
    from safetensors.torch import save_file

    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"step-{step:06d}"
    tmp = root / f".step-{step:06d}.tmp"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    save_file({k: v.detach().contiguous().cpu() for k, v in trainable.items()}, str(tmp / "trainable.safetensors"))
    save_optimizer_state(optimizer, tmp)
    if average is not None:
        save_file(average, str(tmp / EMA_FILE))
    tensors, plain = rng_state()
    save_file(tensors, str(tmp / "rng.safetensors"))
    write_json(tmp / "rng.json", plain)
    write_json(tmp / "trainer_state.json", {**trainer_state, "step": step})
    if final.exists():
        shutil.rmtree(final)
    os.replace(tmp, final)
    for old in _checkpoint_dirs(root)[:-keep] if keep > 0 else []:
        shutil.rmtree(old, ignore_errors=True)
    return final


def _checkpoint_dirs(root: Path) -> list[Path]:
    found = (
        [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]
        if root.is_dir()
        else []
    )
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete ``checkpoints/step-N`` directory of a run, or None."""
    dirs = [d for d in _checkpoint_dirs(Path(run_dir) / CHECKPOINTS_DIR) if (d / "trainer_state.json").is_file()]
    return dirs[-1] if dirs else None


def load_training_checkpoint(
    directory: str | os.PathLike, module: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore trainable parameters, optimizer and RNG states from ``directory``; return the trainer state."""
    import torch
    from safetensors.torch import load_file

    d = Path(directory)
    trainable = load_file(str(d / "trainable.safetensors"))
    params = dict(module.named_parameters())
    missing = [k for k in trainable if k not in params]
    if missing:
        raise ValueError(f"checkpoint {str(d)!r} has parameters the model lacks: {missing[:5]}")
    expected = {k for k, p in params.items() if p.requires_grad}
    if set(trainable) != expected:
        raise ValueError(
            f"checkpoint {str(d)!r} does not match the model's trainable parameters "
            f"(missing {sorted(expected - set(trainable))[:5]}, extra {sorted(set(trainable) - expected)[:5]})"
        )
    with torch.no_grad():
        for k, v in trainable.items():
            params[k].copy_(v.to(params[k].device, params[k].dtype))
    load_optimizer_state(optimizer, d)
    set_rng_state(load_file(str(d / "rng.safetensors")), read_json(d / "rng.json"))
    return read_json(d / "trainer_state.json")


def load_average(directory: str | os.PathLike) -> dict[str, torch.Tensor] | None:
    """The weight average saved with a training checkpoint (``ema.safetensors``), or None when it has none."""
    from safetensors.torch import load_file

    path = Path(directory) / EMA_FILE
    return load_file(str(path)) if path.is_file() else None
