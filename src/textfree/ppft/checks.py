"""The names PPFT's settings are checked against, and the checks of single values: plain Python, no torch.

:class:`~textfree.ppft.train_config.Stage1Config`, :class:`~textfree.ppft.train_config.Stage2Config` and
:class:`~textfree.ppft.pipeline.PipelineConfig` validate against these, so a command builds its config and reports a
bad setting before it imports torch. The modules that use them at run time re-export them: :data:`STAGE2_TASKS`,
:data:`DEFAULT_GENERAL_SOURCES` and :data:`FORBIDDEN_STAGE1_SOURCES` (:mod:`.batches`), :data:`PROJECTION_KINDS` and
:func:`check_dropout` (:mod:`.projection`), :data:`EVAL_TASKS` (:mod:`.evaluate`, as ``TASKS``).
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "DEFAULT_GENERAL_SOURCES",
    "FORBIDDEN_STAGE1_SOURCES",
    "STAGE2_TASKS",
    "EVAL_TASKS",
    "PROJECTION_KINDS",
    "check_dropout",
]

#: Stage 1's general-domain instruction sources by default.
DEFAULT_GENERAL_SOURCES = ("alpaca", "lima", "gsm8k:train")
#: Evaluation sets that must never reach stage 1 (general-domain MCQA benchmarks and the Pri-* domains).
FORBIDDEN_STAGE1_SOURCES = frozenset(
    {
        "csqa",
        "commonsenseqa",
        "commonsense_qa",
        "arc",
        "arc-challenge",
        "pri-ddx",
        "ddx",
        "pri-ddxplus",
        "pri-slja",
        "slja",
    }
)

#: Stage 2's training prompt formats (:func:`~textfree.ppft.batches.domain_examples`).
STAGE2_TASKS = ("mcqa", "open", "restore")

#: The evaluation tasks of :func:`~textfree.ppft.evaluate.evaluate_qa` (its module docstring says what each is).
EVAL_TASKS = (
    "mcqa",
    "open",
    "blind_mcqa",
    "blind_open",
    "mcqa_rank",
    "blind_mcqa_rank",
    "open_rank",
    "blind_open_rank",
    "length_mcqa",
    "length_open",
    "open_head",
    "mcqa_head",
)

#: The kinds of the projection P_psi (:class:`~textfree.ppft.projection.ProjectionConfig`).
PROJECTION_KINDS = ("linear", "mlp")


def check_dropout(name: str, value: Any) -> None:
    """A dropout probability must be a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")
