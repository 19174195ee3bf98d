"""Cell kind ``rapt_finetune``: RAPT's utility tables (Li et al., Tables II and VIII, Fig. 5b): one classifier
fine-tuned on privatized text per grid point and seed (:func:`textfree.rapt.train.train_rapt`), its accuracy on
privatized test examples.

``params`` are :class:`~textfree.rapt.train.RaptTrainConfig` fields (``task``, ``method``, ``eta`` (null: no
privatization), ``pos`` (null: T2T), ``plain_length``, ``reconstruction``, ``train_limit``, ``epochs``, ...) plus
``out``: the directory under which each point's run goes (``<out>/<cell name>/<point>-s<seed>``; a finished run is
resumed, not retrained). The seed seeds initialisation, data order and the privatization noise. The cell names no
``dataset``, ``texts``, ``mechanism`` or ``limit``.

Metrics: ``acc``, ``epsilon_per_word`` (eta * D_max; null without privatization), ``mean_privatized_words`` (per
test example), ``final_loss`` (task + reconstruction), ``n_train``, ``n_test``, ``seconds`` (the run's wall time: a
resumed run counts its earlier training sessions too, so a re-scored run keeps its cost), and what the release does
to the test sentences' words (RAPT Fig. 6's question: which POS categories to privatize), measured on one release of
the test sentences drawn with the test split's noise seed (the very release that is classified when there are no plain
tokens; with plain tokens, a draw of the same mechanism): ``mean_words`` (words per test example), ``privatized_share``
(words that went through the mechanism: in a selected category and in the table), ``replaced_share`` (words that came
out as another word) and ``replacement_rate`` (replaced / privatized; the shape of the paper's Table III); 0, 0 and
null without privatization.
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

RAPT_METRICS = ("acc", "epsilon_per_word", "mean_privatized_words", "final_loss", "n_train", "n_test", "seconds",
                "mean_words", "privatized_share", "replaced_share", "replacement_rate")  # fmt: skip
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


def release_shares(cfg: RaptTrainConfig) -> dict[str, float]:
    """``mean_words``, ``privatized_share``, ``replaced_share`` and ``replacement_rate`` of one release of ``cfg``'s
    test sentences (see the module docstring): the same subset and the same noise seed as the run's test split."""
    from ...data.tasks import load_task
    from ...rapt.train import build_mechanism
    from ...rng import seeded_generator
    from ...substitution.text import split_text

    data = load_task(cfg.task, train_limit=cfg.train_limit, test_limit=cfg.test_limit,
                     generator=seeded_generator(cfg.data_seed, warn=False))  # fmt: skip
    texts = [s for example in data.test_texts for s in example]
    n_examples = max(len(data.test_texts), 1)
    mechanism = build_mechanism(cfg.encoder, cfg.eta, cfg.pos)
    if mechanism is None:
        n_words = sum(len(split_text(t)[1::2]) for t in texts)
        return {"mean_words": n_words / n_examples, "privatized_share": 0.0, "replaced_share": 0.0,
                "replacement_rate": math.nan}  # fmt: skip
    released = mechanism.privatize_detailed(
        texts, generator=seeded_generator(cfg.effective_noise_seed * 2 + 1, warn=False)
    )
    n_words = max(released.n_words, 1)
    return {
        "mean_words": released.n_words / n_examples,
        "privatized_share": released.n_substituted / n_words,
        "replaced_share": released.n_replaced / n_words,
        "replacement_rate": released.replacement_rate,
    }


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
    cfg = _config(cell, params, seed, str(run))
    summary = train_rapt(cfg)
    shares = release_shares(cfg)
    return {
        "acc": summary["acc"],
        "epsilon_per_word": math.nan if summary["epsilon_per_word"] is None else summary["epsilon_per_word"],
        "mean_privatized_words": summary["mean_privatized_words"],
        "final_loss": math.nan if summary["final_loss"] is None else summary["final_loss"],
        "n_train": float(summary["n_train"]),
        "n_test": float(summary["n_test"]),
        # the run's cost: its training sessions, carried through a resume, and this call (else this call alone)
        "seconds": summary.get("total_wall_s") or time.perf_counter() - started,
        **shares,
    }
