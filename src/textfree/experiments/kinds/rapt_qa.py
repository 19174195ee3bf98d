"""Cell kind ``rapt_qa``: RAPT for generation (:mod:`textfree.rapt.generation`): a decoder fine-tuned on privatized
Pri-* prompts, its 4-option and open-answer accuracy on privatized held-out prompts (and on the records of
``params.prompts``, e.g. the hand-written ones), beside PPFT's on the same decoder and split.

``params`` are :class:`~textfree.rapt.generation.RaptQAConfig` fields (``decoder`` (required), ``eta`` (null: no
privatization), ``pos``, ``table``, ``oov_word``, ``epochs``, ``eval_limit``, ``prompts``, ...) plus ``out``: the
directory under which each point's run goes (``<out>/<cell name>/<point>-s<seed>``; a finished run is resumed, not
retrained). With ``pos`` null, a word ``table`` and ``oov_word``, it is PPFT's word-level d_chi baseline
(examples/cells/ppft/ddx_baseline_dchi.yaml). With ``plain_length`` and ``reconstruction`` it is RAPT with plain
tokens and the reconstruction head on the decoder (examples/cells/rapt/ddx_qa_rapt.yaml; the head's final loss is in
the run's summary.json, not a metric).

Metrics: ``mcqa``, ``open`` (held-out accuracy), ``prompts_mcqa``, ``prompts_open`` (nan without ``prompts``),
``epsilon_per_word``, ``mean_privatized_words``, ``kept_rate`` (share of the held-out private words sent verbatim,
without the mechanism; 1 for clear text), ``n_train``, ``n_test``, ``seconds``, and the word-count controls
(:mod:`textfree.lm.text_controls`) on the same released texts and held-out rows: ``length_mcqa``, ``length_open``
(the answer most frequent among training rows of the same word count), ``prior_mcqa``, ``prior_open`` (the most
frequent training answer: the options alone).
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from ...rapt.generation import RaptQAConfig
from ..registry import RunContext, register_cell_kind
from .rapt import config_problem, point_run
from .snd import validate_own_inputs

__all__ = ["rapt_qa", "RAPT_QA_METRICS"]

RAPT_QA_METRICS = ("mcqa", "open", "prompts_mcqa", "prompts_open", "epsilon_per_word", "mean_privatized_words",
                   "n_train", "n_test", "seconds", "kept_rate", "length_mcqa", "length_open", "prior_mcqa",
                   "prior_open")  # fmt: skip
_DEFAULT_OUT = "runs/rapt-qa"
RAPT_QA_PARAMS = {"out": f"directory of the runs (default {_DEFAULT_OUT})"} | {
    f.name: f.metadata.get("help", "")
    for f in dataclasses.fields(RaptQAConfig)
    if f.name not in {"out", "resume", "cpu", "progress", "seed", "encoder"}
}


def _config(cell: Any, params: dict, seed: int, out: str = "unused") -> RaptQAConfig:
    settings = {k: v for k, v in params.items() if k != "out"}
    return RaptQAConfig(out=out, encoder=cell.encoder, seed=seed, progress=False, **settings)


def _check_params(cell: Any, params: dict) -> tuple[str, str] | None:
    if "decoder" not in params:
        return "decoder", "params.decoder (the decoder to fine-tune: an HF name or a local directory) is required"
    return config_problem(params, RAPT_QA_PARAMS, lambda p: _config(cell, p, 0))


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(cell, points, why="reads its dataset from params.dataset and privatizes with params.eta",
                        limit_hint="params.eval_limit", check=lambda params: _check_params(cell, params))  # fmt: skip


def _accuracy(scores: dict, part: str, task: str) -> float:
    return scores[part][task]["accuracy"] if part in scores else math.nan


@register_cell_kind(
    "rapt_qa",
    metrics=RAPT_QA_METRICS,
    params=RAPT_QA_PARAMS,
    validate=_validate,
    help="RAPT for generation: a decoder fine-tuned on privatized Pri-* prompts; held-out 4-option / open accuracy.",
    takes_attack=False,
)
def rapt_qa(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Train (or resume a finished) run for one point and seed; its accuracies and privacy figures."""
    from ...rapt.generation import train_rapt_qa

    started = time.perf_counter()
    params, run = point_run(cell, point, seed, lambda p: _check_params(cell, p), _DEFAULT_OUT)
    summary = train_rapt_qa(_config(cell, params, seed, str(run)))
    scores = summary["scores"]
    return {
        "mcqa": _accuracy(scores, "heldout", "mcqa"),
        "open": _accuracy(scores, "heldout", "open"),
        "prompts_mcqa": _accuracy(scores, "prompts", "mcqa"),
        "prompts_open": _accuracy(scores, "prompts", "open"),
        "epsilon_per_word": math.nan if summary["epsilon_per_word"] is None else summary["epsilon_per_word"],
        "mean_privatized_words": summary["mean_privatized_words"],
        "n_train": float(summary["n_train"]),
        "n_test": float(scores["heldout"]["mcqa"]["n"]),
        "seconds": time.perf_counter() - started,
        "kept_rate": summary["kept_rate"],
    } | {f"{control}_{task}": acc for control, tasks in summary["controls"].items() for task, acc in tasks.items()}
