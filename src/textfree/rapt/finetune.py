"""RAPT fine-tuning jobs of the service: a tenant's examples, privatized to text on their device, trained on the server.

A client privatizes every example locally (T2T / PCT2T over its own copy of the served run's word table, the run's
public plain tokens prepended and privatized with it) and uploads only that text and the labels; a job
(:mod:`textfree.server.jobs`) then calls :func:`train_on_uploaded`, which trains the chosen PEFT method (``method``:
lora, prompt_tuning, prefix_tuning, ia3 or full; default the served run's) with a fresh task head and RAPT's
reconstruction head on those examples, through the same :func:`~textfree.rapt.train.fit_classifier` as ``textfree rapt
train`` (the project's one loop: checkpoints every ``save_every`` steps, so a job started again resumes). The server
privatizes nothing and holds no text.

What the job starts from is the served run's *recipe*: its base encoder (its bundled ``base_encoder/`` copy when it
has one), its plain tokens (the ones the client privatized with: the reconstruction targets), its number of labels,
head sizes, LoRA shape and ``max_length``. The job's run directory is a complete RAPT run (``adapter/`` or ``model/``,
``task_head.safetensors``, ``tokenizer/``, ``plain_tokens.json``, ``train_config.json``, ``summary.json``; the
checkpoints are removed once it succeeds): ``/v1/classify`` with ``adapter=<id>`` loads it with
:class:`~textfree.rapt.service.RaptModel`, and ``textfree serve --model ID=<that directory>`` would serve it alone.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ..substitution.examples import PrivatizedExample
from ..substitution.plain import PLAIN_FILE, PlainTokens
from ..training.checkpoint import CHECKPOINTS_DIR
from ..training.runs import check_run_dir, total_wall_s, write_summary
from .config import RaptTrainConfig

__all__ = ["job_config", "privatized_examples", "train_on_uploaded"]

log = logging.getLogger("textfree.rapt")

#: The job's hyperparameters that set the loop's fields of the same name.
_LOOP_FIELDS = ("epochs", "lr", "batch_size", "max_steps", "warmup_steps", "weight_decay", "grad_clip", "ema_decay",
                "seed", "save_every", "log_every")  # fmt: skip


def _base_config(base: Path) -> dict[str, Any]:
    """The served run's RAPT settings (``train_config.json``), with its bundled base encoder when it has one."""
    from ..atomic import read_json
    from .model import BASE_ENCODER_DIR

    try:
        config = dict(read_json(base / "train_config.json")["config"])
    except (FileNotFoundError, KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"the served run has no readable train_config.json: {exc}") from None
    if (base / BASE_ENCODER_DIR).is_dir():
        config["encoder"] = str(base / BASE_ENCODER_DIR)
    return config


def job_config(base: str | Path, run_dir: str | Path, hyperparameters: dict[str, Any], *, cpu: bool) -> RaptTrainConfig:
    """The settings of a job on the served run ``base``: its recipe (see the module docstring), the job's method and
    loop hyperparameters, written to ``run_dir``. Prompt / prefix tuning take the run's number of virtual tokens when
    the method is the run's, else the paper's."""
    config = _base_config(Path(base))
    known = {f.name for f in dataclasses.fields(RaptTrainConfig)}
    config = {k: v for k, v in config.items() if k in known}
    method = hyperparameters.get("method") or config.get("method", "lora")
    if method != config.get("method"):
        config["virtual_tokens"] = None
    loop = {name: hyperparameters[name] for name in _LOOP_FIELDS if name in hyperparameters}
    return RaptTrainConfig(**{**config, **loop, "out": str(run_dir), "method": method, "cpu": cpu, "progress": False,
                              "resume": True, "train_limit": None, "test_limit": None})  # fmt: skip


def privatized_examples(rows: Sequence[Any], plain: PlainTokens | None, n_labels: int) -> list[PrivatizedExample]:
    """The uploaded rows (``TextTrainingRow``: text privatized on the client, and a label) as the batch builder reads
    them; ValueError for a row the served run cannot train on (a label outside its labels, plain tokens that are not
    its own shape): the upload's checks, again, on what was read back."""
    out = []
    for i, row in enumerate(rows):
        if not hasattr(row, "parts") or not hasattr(row, "label"):
            raise TypeError("a RAPT job trains on examples privatized to text and their labels, nothing else")
        if not 0 <= row.label < n_labels:
            raise ValueError(f"row {i}: label {row.label} is not one of the run's {n_labels} labels")
        if plain is None and row.plain is not None:
            raise ValueError(f"row {i} carries plain tokens; the served run has none")
        if plain is not None and (row.plain is None or len(row.plain) != plain.length or row.sequence is None
                                  or not 0 <= row.sequence < len(plain.sequences)):  # fmt: skip
            raise ValueError(f"row {i}: its plain tokens are not one of the served run's sequences of {plain.length}")
        out.append(PrivatizedExample(tuple(row.parts), int(row.label), row.plain, row.sequence))
    if not out:
        raise ValueError("a RAPT job needs at least one example")
    return out


def train_on_uploaded(
    base: str | Path,
    cfg: RaptTrainConfig,
    rows: Sequence[Any],
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Train ``cfg`` (see :func:`job_config`) on the uploaded ``rows`` with the served run ``base``'s plain tokens and
    labels, save the run into ``cfg.out`` and return its summary (``steps``, ``final_loss``, ``resumed_from_step``,
    ...). ``on_step(step, loss)`` may raise to stop: a call with the same arguments resumes from the newest
    checkpoint."""
    from ..accel import make_accelerator
    from ..atomic import read_json
    from ..lm.adapters import trainable_parameters
    from .train import fit_classifier

    base = Path(base)
    check_run_dir(cfg)
    base_summary = read_json(base / "summary.json")
    n_labels = int(base_summary["num_labels"])
    plain = PlainTokens.load(base) if (base / PLAIN_FILE).is_file() else None
    examples = privatized_examples(rows, plain, n_labels)
    accelerator = make_accelerator(cpu=cfg.cpu)
    torch.manual_seed(cfg.seed)  # before the model: PEFT and the heads draw their initial weights from it
    t0 = time.time()
    fitted = fit_classifier(cfg, examples, plain, n_labels, on_step=on_step, accelerator=accelerator)
    summary = fitted.summary
    run = Path(cfg.out)
    if accelerator.is_main_process:
        shutil.rmtree(run / CHECKPOINTS_DIR, ignore_errors=True)  # the job succeeded: the adapter stays
    extra = {
        "system": "rapt",
        "task": cfg.task,
        "method": cfg.method,
        "eta": cfg.eta,
        "pos": cfg.pos,
        "num_labels": n_labels,
        "n_train": len(examples),
        "epsilon_per_word": base_summary.get("epsilon_per_word"),
        "trainable_parameters": trainable_parameters(fitted.classifier.model)["trainable"],
        "s_per_step": round(fitted.fit_s / max(summary["steps"] - summary["resumed_from_step"], 1), 4),
        "total_wall_s": total_wall_s(summary, t0),
    }
    log.info("RAPT job %s: %d steps on %d uploaded examples, final loss %s", cfg.method, summary["steps"],
             len(examples), summary["final_loss"])  # fmt: skip
    return write_summary(run, summary, extra)
