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

import hashlib
import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

from ..encoders.loading import state_dict_sha256

#: A run's training config (beside its weights), with the fingerprint of the run it started from.
TRAIN_CONFIG = "train_config.json"

__all__ = [
    "TRAIN_CONFIG",
    "stage1_build",
    "write_json",
    "read_json",
    "finished_run",
    "run_fingerprint",
    "same_init",
    "InitChanged",
    "decoder_sha256",
    "decoder_ref",
    "verify_decoder_sha",
    "save_optimizer_state",
    "load_optimizer_state",
    "rng_state",
    "set_rng_state",
    "save_training_checkpoint",
    "load_training_checkpoint",
    "load_average",
    "latest_checkpoint",
    "CHECKPOINTS_DIR",
    "CENTER_FILE",
    "save_center",
    "load_center",
    "load_center_file",
]

CHECKPOINTS_DIR = "checkpoints"
CENTER_FILE = "slot_center.safetensors"
EMA_FILE = "ema.safetensors"
_STEP_DIR = re.compile(r"^step-(\d+)$")


def write_json(path: str | os.PathLike, data: Any) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True, default=_json_default) + "\n")
    os.replace(tmp, path)
    return path


def read_json(path: str | os.PathLike) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except OSError as exc:
        raise FileNotFoundError(f"cannot read {str(path)!r}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{str(path)!r} is not valid JSON: {exc}") from None


def differing_settings(run: str | os.PathLike, config: dict[str, Any], volatile: set[str]) -> list[str]:
    """The settings in which the training config saved in ``run`` (``train_config.json``) differs from ``config``,
    ignoring ``volatile`` keys and fields added to the config later and left at None; empty when none is saved."""
    saved = Path(run) / "train_config.json"
    if not saved.is_file():
        return []
    old = {k: v for k, v in read_json(saved).get("config", {}).items() if k not in volatile}
    new = {k: v for k, v in config.items() if k not in volatile and (k in old or v is not None)}
    return sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))


def finished_run(run: str | os.PathLike, config: dict[str, Any], volatile: set[str]) -> bool:
    """True when ``run`` finished (summary.json) under the same training config (see :func:`differing_settings`)."""
    run = Path(run)
    return (run / "summary.json").is_file() and (run / "train_config.json").is_file() \
        and not differing_settings(run, config, volatile)


#: The file of a run that records how its training went (times, losses, steps), not what the run is: left out of
#: its fingerprint, so a run rebuilt with the same weights and configs (a deterministic rebuild, a resumed one) keeps it.
_OUTCOME_FILE = "summary.json"
#: Where a run records its base decoder (name or absolute path + weights' hash): fingerprinted by what it names.
_DECODER_REF_FILE = "decoder_ref.json"


def run_fingerprint(run: str | os.PathLike, *, legacy: bool = False) -> str:
    """sha256 over a saved run's weights and configs: every ``.safetensors`` and ``.json`` file outside
    ``checkpoints/``, by relative path, but the top-level ``summary.json`` (its training times differ between two
    builds of the same weights), and ``decoder_ref.json`` without the local decoder's path where its weights' hash is
    recorded (:func:`_decoder_ref_sha256`: a clone elsewhere builds the same run). A run started from ``run`` records
    it, so a rebuilt ``run`` at the same path is told apart from the one it was trained from when its weights or
    configs differ. ``legacy``: the fingerprint as recorded until 2026-11-27, every file's bytes with ``summary.json``
    (:func:`same_init` accepts either)."""
    root = Path(run).resolve()
    files = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in {".safetensors", ".json"}
                   and CHECKPOINTS_DIR not in p.relative_to(root).parts
                   and (legacy or p.relative_to(root).as_posix() != _OUTCOME_FILE))
    h = hashlib.sha256()
    for path in files:
        rel = path.relative_to(root).as_posix()
        digest = _sha256_file(path) if legacy or rel != _DECODER_REF_FILE else _decoder_ref_sha256(path)
        h.update(f"{rel}\0{digest}\n".encode())
    return h.hexdigest()


def _decoder_ref_sha256(path: Path) -> str:
    """sha256 of a decoder_ref.json as what it names, not where: a local decoder is recorded by its absolute path, so
    the same decoder at another path (a clone elsewhere, a copied runs/ folder) is left out where the weights' hash
    identifies it; a hub name without a hash is kept, as it is the only identity there is."""
    ref = read_json(path)
    if not isinstance(ref, dict):
        return _sha256_file(path)
    if ref.get("sha256"):
        ref = {key: value for key, value in ref.items() if key != "name_or_path"}
    return hashlib.sha256(json.dumps(ref, sort_keys=True).encode()).hexdigest()


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


def _is_fingerprint_of(recorded: str, init: str | os.PathLike, current: str | None = None) -> bool:
    """Whether ``recorded`` is ``init``'s fingerprint (``current``, when the caller has it already), or its legacy
    one (with summary.json) for a run that recorded it before 2026-11-27."""
    return recorded == (current or run_fingerprint(init)) or recorded == run_fingerprint(init, legacy=True)


class InitChanged(ValueError):
    """A run's init run was rebuilt at the same path after the run started from it."""


def same_init(run: str | os.PathLike, recorded: str | None, init: str | os.PathLike, *, current: str | None = None) -> bool:
    """Whether ``init`` still is the run that ``run`` started from, by the fingerprint ``run`` recorded of it.

    True when :func:`run_fingerprint` of ``init`` (``current``, when the caller has it already) is ``recorded`` (or
    its legacy fingerprint, for a run that recorded one before 2026-11-27);
    False when ``recorded`` is None (a run from before fingerprints were recorded: unchecked, the caller says so);
    raises :class:`InitChanged` otherwise. Configs name ``init`` by path only, so without this a rebuilt ``init``
    would pass for the old one."""
    if recorded is None:
        return False
    current = current or run_fingerprint(init)
    if not _is_fingerprint_of(recorded, init, current):
        raise InitChanged(f"{str(run)!r} was trained from another {str(init)!r} (init fingerprint {recorded[:12]}, now {current[:12]})")
    return True


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (Path, torch.dtype, torch.device)):
        return str(obj)
    if isinstance(obj, tuple):
        return list(obj)
    raise TypeError(f"{type(obj).__name__} is not JSON serialisable")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def decoder_sha256(name_or_path: str | os.PathLike, model: torch.nn.Module | None = None) -> str | None:
    """sha256 of a local decoder's weights: the ``model.safetensors`` file, the shards listed in its index (hash of
    the shard hashes), else of the given model's state dict; None when nothing can be hashed."""
    path = Path(name_or_path)
    if path.is_dir():
        single = path / "model.safetensors"
        if single.is_file():
            return _sha256_file(single)
        index = path / "model.safetensors.index.json"
        if index.is_file():
            shards = sorted(set(read_json(index).get("weight_map", {}).values()))
            h = hashlib.sha256()
            for shard in shards:
                h.update(_sha256_file(path / shard).encode())
            return h.hexdigest()
    return state_dict_sha256(model) if model is not None else None


def decoder_ref(name_or_path: str | os.PathLike, model: torch.nn.Module | None = None) -> dict[str, Any]:
    """What ``decoder_ref.json`` holds: where the base decoder is (absolute path if local) and its hash."""
    path = Path(name_or_path)
    location = str(path.resolve()) if path.exists() else str(name_or_path)
    config = getattr(model, "config", None)
    return {
        "name_or_path": location,
        "sha256": decoder_sha256(name_or_path, model),
        "model_type": getattr(config, "model_type", None),
        "hidden_size": getattr(config, "hidden_size", None),
        "vocab_size": getattr(config, "vocab_size", None),
    }


# --------------------------------------------------------------------------- optimizer state
def verify_decoder_sha(location: str, ref: dict[str, Any], where: str | os.PathLike, model=None) -> None:
    """Refuse a base decoder whose weights' sha256 differs from the one ``ref`` (a decoder_ref.json) records."""
    if not ref.get("sha256"):
        return
    sha = decoder_sha256(location, model)
    if sha != ref["sha256"]:
        raise ValueError(
            f"base decoder {location!r} has sha256 {sha}, but {where} records {ref['sha256']}: "
            "the adapter was trained on other weights (pass check_decoder_sha=False to override)"
        )


def save_optimizer_state(optimizer: torch.optim.Optimizer, directory: Path) -> None:
    """``optimizer.safetensors`` (every tensor of ``state``) + ``optimizer.json`` (param groups, other state)."""
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


# --------------------------------------------------------------------------- RNG state
def rng_state() -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """(tensors, plain data) capturing torch's CPU (and CUDA) and Python's global RNGs."""
    tensors = {"torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"torch_cuda_{i}"] = s
    version, internal, gauss = random.getstate()
    return tensors, {"python": [version, list(internal), gauss]}


def set_rng_state(tensors: dict[str, torch.Tensor], plain: dict[str, Any]) -> None:
    torch.set_rng_state(tensors["torch_cpu"])
    cuda = [tensors[k] for k in sorted(tensors) if k.startswith("torch_cuda_")]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)
    version, internal, gauss = plain["python"]
    random.setstate((version, tuple(internal), gauss))


# --------------------------------------------------------------------------- training checkpoints
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
    weight average of the trained parameters (:mod:`textfree.ppft.ema`), written to ``ema.safetensors``."""
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
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))] if root.is_dir() else []
    return [p for _, p in sorted(found)]


def latest_checkpoint(run_dir: str | os.PathLike) -> Path | None:
    """The newest complete ``checkpoints/step-N`` directory of a run, or None."""
    dirs = [d for d in _checkpoint_dirs(Path(run_dir) / CHECKPOINTS_DIR) if (d / "trainer_state.json").is_file()]
    return dirs[-1] if dirs else None


def load_training_checkpoint(
    directory: str | os.PathLike, module: torch.nn.Module, optimizer: torch.optim.Optimizer
) -> dict[str, Any]:
    """Restore trainable parameters, optimizer and RNG states from ``directory``; return the trainer state."""
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
    path = Path(directory) / EMA_FILE
    return load_file(str(path)) if path.is_file() else None


def save_center(run: str | os.PathLike, center: torch.Tensor) -> Path:
    """Write the client's public slot centre (``slot_center.safetensors``, one float32 tensor ``center``)."""
    path = Path(run) / CENTER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file({"center": center.detach().to("cpu", torch.float32).contiguous()}, str(path))
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
        raise FileNotFoundError(f"{str(Path(run))!r}: the config names a slot centre (sha256 {sha256[:12]}...) but {CENTER_FILE} is missing")
    center = load_center_file(run, dim)
    if center_sha256(center) != sha256:
        raise ValueError(f"{path}: the centre's sha256 {center_sha256(center)[:12]}... is not the config's {sha256[:12]}...")
    return center
