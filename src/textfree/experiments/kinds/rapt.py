"""Cell kind ``rapt_finetune``: RAPT's utility tables (Li et al., Tables II and VIII, Fig. 5b): one classifier
fine-tuned on privatized text per grid point and seed (:func:`textfree.rapt.train.train_rapt`), its accuracy on
privatized test examples.

``params`` are :class:`~textfree.rapt.train.RaptTrainConfig` fields (``task``, ``method``, ``eta`` (null: no
privatization), ``pos`` (null: T2T), ``plain_length``, ``reconstruction``, ``train_limit``, ``epochs``, ...) plus
``out``: the directory under which each point's run goes (``<out>/<cell name>/<point>-s<seed>``; a finished run is
resumed, not retrained). The seed seeds initialisation, data order and the privatization noise. The cell names no
``dataset``, ``texts``, ``mechanism`` or ``limit``.

Metrics: ``acc``, ``epsilon_per_word`` (eta * D_max; null without privatization), ``mean_privatized_words`` (per
test example), ``final_loss`` (task + reconstruction), ``n_train``, ``n_test``, ``seconds``.
"""

from __future__ import annotations

import dataclasses
import math
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from ...rapt.config import RaptTrainConfig
from ..registry import RunContext, register_cell_kind
from .snd import validate_own_inputs

__all__ = ["rapt_finetune", "RAPT_METRICS"]

RAPT_METRICS = ("acc", "epsilon_per_word", "mean_privatized_words", "final_loss", "n_train", "n_test", "seconds")
_DEFAULT_OUT = "runs/rapt"
#: Every RaptTrainConfig field but those the kind sets itself, plus ``out``.
RAPT_PARAMS = {"out": f"directory of the runs (default {_DEFAULT_OUT})"} | {
    f.name: f.metadata.get("help", "")
    for f in dataclasses.fields(RaptTrainConfig)
    if f.name not in {"out", "resume", "cpu", "progress", "seed", "noise_seed", "encoder"}
}


def _config(cell: Any, params: dict, seed: int, out: str | None = None) -> RaptTrainConfig:
    settings = {k: v for k, v in params.items() if k != "out"}
    return RaptTrainConfig(out=out or "unused", encoder=cell.encoder, seed=seed, progress=False, **settings)


def config_problem(params: dict, known: Iterable[str], build: Callable[[dict], Any]) -> tuple[str, str] | None:
    """(param, message) of what ``build(params)`` (a config made of the params) refuses, naming the param its message
    starts with; None when it builds. ``out`` must be a directory path."""
    out = params.get("out", "default")
    if not isinstance(out, str) or not out.strip():
        return "out", f"out must be a directory path, got {out!r}"
    try:
        build(params)
    except (ValueError, TypeError) as exc:
        message = str(exc)
        name = next((f for f in sorted(known, key=len, reverse=True) if message.startswith(f"{f} ")), None)
        return name or next(iter(params), "params"), message
    return None


def point_run(cell: Any, point: dict, seed: int, check: Callable[[dict], Any], default_out: str) -> tuple[dict, Path]:
    """(params, run directory ``<out>/<cell name>/<point>-s<seed>``) of one grid point; its params checked first."""
    params = cell.resolve(point).params
    problem = check(params)
    if problem:
        raise ValueError(f"params.{problem[0]}: {problem[1]}")
    return params, Path(params.get("out", default_out)) / cell.name / f"{_slug(point)}-s{seed}"


def _check_params(cell: Any, params: dict) -> tuple[str, str] | None:
    return config_problem(params, RAPT_PARAMS, lambda p: _config(cell, p, 0))


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(
        cell,
        points,
        why="reads its task from params.task and privatizes with params.eta / params.pos",
        limit_hint="params.train_limit and params.test_limit",
        check=lambda params: _check_params(cell, params),
    )


def _slug(point: dict) -> str:
    parts = [f"{k.split('.')[-1]}={v}" for k, v in sorted(point.items())] or ["point"]
    return re.sub(r"[^A-Za-z0-9_.=,-]", "_", ",".join(parts))


@register_cell_kind(
    "rapt_finetune",
    metrics=RAPT_METRICS,
    params=RAPT_PARAMS,
    validate=_validate,
    help="RAPT: a classifier fine-tuned on privatized text (with plain-token reconstruction); accuracy per point.",
    takes_attack=False,
)
def rapt_finetune(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Train (or resume a finished) RAPT run for one point and seed; its accuracy and privacy figures."""
    from ...rapt.train import train_rapt

    started = time.perf_counter()
    params, run = point_run(cell, point, seed, lambda p: _check_params(cell, p), _DEFAULT_OUT)
    summary = train_rapt(_config(cell, params, seed, str(run)))
    return {
        "acc": summary["acc"],
        "epsilon_per_word": math.nan if summary["epsilon_per_word"] is None else summary["epsilon_per_word"],
        "mean_privatized_words": summary["mean_privatized_words"],
        "final_loss": math.nan if summary["final_loss"] is None else summary["final_loss"],
        "n_train": float(summary["n_train"]),
        "n_test": float(summary["n_test"]),
        "seconds": time.perf_counter() - started,
    }
