"""Cell kind ``privacy_restore_qa``: PPFT's PrivacyRestore baseline (:mod:`textfree.ppft.privacy_restore`): a decoder
and its restoration bank trained on Pri-DDX prompts with the privacy spans removed, scored on held-out releases (the
masked text and a noisy meta vector) and the same releases attacked.

``params`` are :class:`~textfree.ppft.privacy_restore.PrivacyRestoreQAConfig` fields (``decoder`` (required),
``epsilon``, ``heads``, ``epochs``, ``eval_limit``, ...) plus ``out``: the directory under which each point's run goes
(``<out>/<cell name>/<point>-s<seed>``; a finished run is resumed, not retrained).

Metrics: ``mcqa``, ``open`` (held-out accuracy), the word-count controls of the masked text (``length_mcqa``,
``length_open``, ``prior_mcqa``, ``prior_open``), the attack (``rouge_l``, ``recall_symptoms``,
``recall_antecedents``; with ``_text_only``: from the masked text alone; with ``_clean_meta``: the same attack on
noiseless meta vectors; ``rouge_l_prior``: the attacker's best constant guess, the medoid training prompt),
``epsilon_per_release`` (2 epsilon), ``meta_dim``, ``cos_released_clean``, ``n_train``, ``n_test``, ``seconds``.
"""

from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

from ...ppft.privacy_restore import PrivacyRestoreQAConfig
from ..registry import RunContext, register_cell_kind
from .rapt import config_problem, point_run
from .snd import validate_own_inputs

__all__ = ["privacy_restore_qa", "PRIVACY_RESTORE_METRICS"]

_ATTACK = tuple(f"{m}{suffix}" for m in ("rouge_l", "recall_symptoms", "recall_antecedents")
                for suffix in ("", "_text_only", "_clean_meta")) + ("rouge_l_prior",)  # fmt: skip
PRIVACY_RESTORE_METRICS = ("mcqa", "open", "length_mcqa", "length_open", "prior_mcqa", "prior_open") + _ATTACK + (
    "epsilon_per_release", "meta_dim", "cos_released_clean", "n_train", "n_test", "seconds")  # fmt: skip
_DEFAULT_OUT = "runs/privacy-restore"
PARAMS = {"out": f"directory of the runs (default {_DEFAULT_OUT})"} | {
    f.name: f.metadata.get("help", "")
    for f in dataclasses.fields(PrivacyRestoreQAConfig)
    if f.name not in {"out", "resume", "cpu", "progress", "seed"}
}


def _config(params: dict, seed: int, out: str = "unused") -> PrivacyRestoreQAConfig:
    settings = {k: v for k, v in params.items() if k != "out"}
    return PrivacyRestoreQAConfig(out=out, seed=seed, progress=False, **settings)


def _check_params(params: dict) -> tuple[str, str] | None:
    if "decoder" not in params:
        return "decoder", "params.decoder (the decoder to fine-tune: an HF name or a local directory) is required"
    return config_problem(params, PARAMS, lambda p: _config(p, 0))


def _validate(cell: Any, points: list[dict]) -> None:
    validate_own_inputs(cell, points, why="reads its dataset from params.dataset and noises with params.epsilon",
                        limit_hint="params.eval_limit", check=_check_params)  # fmt: skip


@register_cell_kind(
    "privacy_restore_qa",
    metrics=PRIVACY_RESTORE_METRICS,
    params=PARAMS,
    validate=_validate,
    help="PPFT's PrivacyRestore baseline: masked Pri-DDX prompts + a noisy meta vector; accuracy and attack figures.",
    takes_attack=False,
)
def privacy_restore_qa(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Train (or resume a finished) run for one point and seed; its accuracies, controls and attack figures."""
    from ...ppft.privacy_restore import train_privacy_restore_qa

    started = time.perf_counter()
    params, run = point_run(cell, point, seed, _check_params, _DEFAULT_OUT)
    summary = train_privacy_restore_qa(_config(params, seed, str(run)))
    scores = summary["scores"]["heldout"]
    controls = {f"{c}_{t}": acc for c, tasks in summary["controls"].items() for t, acc in tasks.items()}
    attack = {k: summary["attack"].get(k, math.nan) for k in _ATTACK}
    eps = summary["epsilon_per_release"]
    return {"mcqa": scores["mcqa"]["accuracy"], "open": scores["open"]["accuracy"]} | controls | attack | {
        "epsilon_per_release": math.nan if eps is None else eps,
        "meta_dim": float(summary["meta_dim"]),
        "cos_released_clean": summary["cos_released_clean"],
        "n_train": float(summary["n_train"]),
        "n_test": float(scores["mcqa"]["n"]),
        "seconds": time.perf_counter() - started,
    }  # fmt: skip
