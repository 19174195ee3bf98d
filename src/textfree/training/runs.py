"""Run directories: what a training run writes beside its weights and how a later call recognises it.

``train_config.json`` (the loop config, and the fingerprint of the run it started from), ``metrics.jsonl`` (one line
per logged step) and ``summary.json`` (how the training went). :func:`check_run_dir` refuses to resume a directory
holding another run and :func:`prepare_run_dir` writes it; :func:`run_fingerprint` hashes a saved run's weights and
configs so that a run started from it can tell a rebuilt one apart (:func:`same_init`); :func:`finished_run` says
whether a directory already holds the finished run a caller would make. Only the main process writes.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import fields
from pathlib import Path
from typing import Any

from ..accel import is_main_process, wait_for_everyone
from ..atomic import _sha256_file, atomic_write_text, read_json, write_json
from .checkpoint import CHECKPOINTS_DIR, latest_checkpoint
from .config import LoopConfig

log = logging.getLogger("textfree.training")

__all__: list[str] = [
    "METRICS",
    "SUMMARY",
    "check_run_dir",
    "prepare_run_dir",
    "write_summary",
    "total_wall_s",
    "TRAIN_CONFIG",
    "differing_settings",
    "finished_run",
    "run_fingerprint",
    "InitChanged",
    "same_init",
]


METRICS = "metrics.jsonl"


SUMMARY = "summary.json"


# Fields that may change between an interrupted run and its resumption.
_RESUME_FREE = {"resume", "progress", "cpu", "log_every"}


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
            raise ValueError(
                f"{str(run)!r} holds a run with other settings ({', '.join(diff)}); use another --out or --no-resume"
            )
        if init is not None:
            try:
                checked = same_init(run, saved_doc.get("init_fingerprint"), init, current=fingerprint)
            except InitChanged as exc:
                raise InitChanged(
                    f"{exc}: its checkpoints cannot be resumed; use another --out or --no-resume"
                ) from None
            if not checked:
                log.warning(
                    "%s records no fingerprint of its init run %s; resuming without checking that it is unchanged",
                    run,
                    init,
                )
    return fingerprint


def prepare_run_dir(cfg: LoopConfig, *, init: str | None = None, fingerprint: str | None = None) -> Path:
    """Check the run directory (:func:`check_run_dir`), then create it and write train_config.json; without resume,
    remove its checkpoints and metrics. Call it once the run's data and models have loaded: a run that cannot start
    leaves ``cfg.out`` as it was.

    ``init`` (stage 2: the run it starts from) is fingerprinted into train_config.json, and an interrupted run is
    resumed only from the same ``init``: the config names it by path, so a rebuilt one would otherwise pass."""
    fingerprint = check_run_dir(cfg, init=init, fingerprint=fingerprint)
    run = Path(cfg.out)
    wait_for_everyone()  # every process has checked the directory before the main one changes it
    if is_main_process():
        _write_run_dir(cfg, run, init, fingerprint)
    wait_for_everyone()  # and none reads it (checkpoints, metrics) before it is written
    return run


def _write_run_dir(cfg: LoopConfig, run: Path, init: str | None, fingerprint: str | None) -> None:
    """Create ``run`` and write train_config.json; without resume, remove its checkpoints and metrics."""
    run.mkdir(parents=True, exist_ok=True)
    if not cfg.resume:
        import shutil

        shutil.rmtree(run / "checkpoints", ignore_errors=True)
        (run / METRICS).unlink(missing_ok=True)
    doc = {"kind": type(cfg).__name__, "config": cfg.to_dict()}
    write_json(run / TRAIN_CONFIG, doc if init is None else doc | {"init_fingerprint": fingerprint})


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop logged lines past the checkpoint we resume from (they will be logged again); the main process calls it."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    atomic_write_text(path, "".join(line + "\n" for line in kept))


def logged_loss(path: Path, step: int) -> float | None:
    """The loss logged at ``step`` in a run's metrics.jsonl (the mean over the window that ended there), or None."""
    if not path.is_file():
        return None
    for line in path.read_text().splitlines():
        record = json.loads(line) if line.strip() else {}
        if record.get("step") == step and isinstance(record.get("loss"), (int, float)):
            return float(record["loss"])
    return None


def total_wall_s(summary: dict[str, Any], t0: float) -> float | None:
    """This call's seconds since ``t0`` plus the training time of the sessions before it (None: unknown)."""
    carried = summary["carried_wall_s"]
    return None if carried is None else round(time.time() - t0 + carried, 2)


def write_summary(run: Path, summary: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Write summary.json (everything but the model; the main process only, the others wait for it) and return it on
    every process; the stage functions add the model back."""
    data = {k: v for k, v in summary.items() if k != "model"} | extra
    if is_main_process():
        write_json(run / SUMMARY, data)
    wait_for_everyone()
    return data


#: A run's training config (beside its weights), with the fingerprint of the run it started from.
TRAIN_CONFIG = "train_config.json"


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
    return (
        (run / "summary.json").is_file()
        and (run / "train_config.json").is_file()
        and not differing_settings(run, config, volatile)
    )


#: The file of a run that records how its training went (times, losses, steps), not what the run is: left out of
#: its fingerprint, so a run rebuilt with the same weights and configs (a deterministic rebuild, a resumed one)
#: keeps it.
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
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file()
        and p.suffix in {".safetensors", ".json"}
        and CHECKPOINTS_DIR not in p.relative_to(root).parts
        and (legacy or p.relative_to(root).as_posix() != _OUTCOME_FILE)
    )
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


def _is_fingerprint_of(recorded: str, init: str | os.PathLike, current: str | None = None) -> bool:
    """Whether ``recorded`` is ``init``'s fingerprint (``current``, when the caller has it already), or its legacy
    one (with summary.json) for a run that recorded it before 2026-11-27."""
    return recorded == (current or run_fingerprint(init)) or recorded == run_fingerprint(init, legacy=True)


class InitChanged(ValueError):
    """A run's init run was rebuilt at the same path after the run started from it."""


def same_init(
    run: str | os.PathLike, recorded: str | None, init: str | os.PathLike, *, current: str | None = None
) -> bool:
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
        raise InitChanged(
            f"{str(run)!r} was trained from another {str(init)!r} "
            f"(init fingerprint {recorded[:12]}, now {current[:12]})"
        )
    return True
