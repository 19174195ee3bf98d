"""The training loop's settings (:class:`LoopConfig`), validated at construction and saved as JSON beside the run.

Plain Python, no torch: a command builds and checks its config before the heavy imports, so a bad setting is reported
at once."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

__all__: list[str] = ["LoopConfig", "check_ema_decay"]


@dataclass(kw_only=True)
class LoopConfig:
    """Optimisation and bookkeeping shared by both stages."""

    out: str = field(metadata={"help": "Run directory: the model, train_config.json, metrics.jsonl, checkpoints/."})
    epochs: int = field(default=1, metadata={"help": "Passes over the training examples."})
    max_steps: int | None = field(
        default=None,
        metadata={"help": "Stop after this many optimizer steps (null: all epochs). Sets the LR schedule's length."},
    )
    batch_size: int = field(default=8, metadata={"help": "Examples per optimizer step and process."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate of the projection and the LoRA parameters."})
    warmup_steps: int = field(default=20, metadata={"help": "Linear warm-up steps."})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "Cosine decay ends at lr * min_lr_ratio."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    grad_clip: float = field(default=1.0, metadata={"help": "Clip the gradient norm to this (0: no clipping)."})
    ema_decay: float | None = field(
        default=None,
        metadata={
            "help": "Keep an exponential moving average of the trained parameters (this decay per step; e.g. 0.999 "
            "averages over the last ~1000 steps), save it with each checkpoint and make it the run's weights "
            "at the end. Null: the last step's weights."
        },
    )
    seed: int = field(
        default=0,
        metadata={"help": "Seeds initialisation, dropout, data order (and stage-2 noise unless noise_seed is set)."},
    )
    log_every: int = field(
        default=10, metadata={"help": "Log the mean loss every this many steps (metrics.jsonl + log)."}
    )
    save_every: int = field(
        default=200, metadata={"help": "Write a resumable checkpoint every this many steps (and at the end)."}
    )
    keep_checkpoints: int = field(default=1, metadata={"help": "How many checkpoints to keep."})
    resume: bool = field(
        default=True, metadata={"help": "Continue from the newest checkpoint in `out` if there is one."}
    )
    cpu: bool = field(default=False, metadata={"help": "Force the CPU even when an accelerator is present."})
    progress: bool = field(default=True, metadata={"help": "Show tqdm progress bars."})

    def __post_init__(self) -> None:
        if not self.out:
            raise ValueError("out (the run directory) is required")
        for name in ("epochs", "batch_size", "log_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or null, got {self.max_steps}")
        _check_optimiser(self)
        check_ema_decay(self.ema_decay)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_ema_decay(value: object) -> None:
    """``value`` must be null or a number strictly between 0 and 1 (the decay of
    :class:`~textfree.training.average.WeightAverage`)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not 0 < value < 1:
        raise ValueError(f"ema_decay must be a number strictly between 0 and 1 (e.g. 0.999) or null, got {value!r}")


def _check_optimiser(cfg: LoopConfig) -> None:
    """The optimiser settings of a training loop: finite, the learning rates > 0, the rest in range."""
    checks = (
        ("lr", lambda v: v > 0, "a number > 0"),
        ("weight_decay", lambda v: v >= 0, "a number >= 0"),
        ("grad_clip", lambda v: v >= 0, "a number >= 0 (0: no clipping)"),
        ("min_lr_ratio", lambda v: 0 <= v <= 1, "a number in [0, 1]"),
        ("encoder_lr", lambda v: v >= 0, "a number >= 0"),
    )
    for name, ok, what in checks:
        if not hasattr(cfg, name):  # encoder_lr: stage 1 only
            continue
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
            raise ValueError(f"{name} must be {what}, got {value!r}")
    if isinstance(cfg.warmup_steps, bool) or not isinstance(cfg.warmup_steps, int) or cfg.warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0, got {cfg.warmup_steps!r}")


def _check_optional_int(name: str, value: Any, low: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        raise ValueError(f"{name} must be an integer >= {low} or null, got {value!r}")


def _check_fraction(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1], got {value!r}")


def _check_int(name: str, value: Any, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
