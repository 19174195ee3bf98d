"""``DecoderPretrainConfig``: everything that defines a local decoder pretraining run, with presets.

Presets (:data:`PRESETS`; ``DecoderPretrainConfig.from_preset(name, **overrides)``):

* ``tiny``: a 2-layer, 64-wide model with a 512-token vocabulary and 64-token context, 60 steps. For tests:
  runs in a few seconds on one CPU core.
* ``small`` (default): 6 layers, hidden 256, 4 heads, SwiGLU 688, 8,192-token vocabulary, 256-token context,
  6.8M parameters (4.7M outside the tied embedding), 1,800 steps of 8 x 256 tokens (3.7M tokens, ~0.8 of an epoch
  of the general corpus), bf16 autocast where the CPU supports it: about 11-12 minutes on 2 free CPU cores
  (5,400 tokens/s measured). On a shared machine use ``minutes=12`` (steps from the measured speed) and
  ``num_threads=1``. See ``docs/decoder.md`` for the measurements behind these choices.
* ``gpu``: 12 layers, hidden 768, 12 heads (a GPT-2-small-sized Llama, 91M parameters), 1,024-token context,
  bf16. For users with a GPU; on the ~4.6M-token local corpus it overfits after a few epochs, so add text
  (``extra_text_files``) or, better, use a real pretrained decoder (``--decoder meta-llama/Llama-3.2-1B-Instruct``).

The config is saved as ``pretrain_config.json`` beside the weights (:meth:`save` / :meth:`load`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ...atomic import atomic_write_text

__all__ = ["DecoderPretrainConfig", "PRESETS", "CONFIG_NAME", "RESUMABLE_FIELDS", "resolve_mixed_precision"]

CONFIG_NAME = "pretrain_config.json"

#: Fields that may change between an interrupted run and its resumption (all others must match the checkpoint;
#: the corpus and tokenizer are checked separately by their SHA-256).
RESUMABLE_FIELDS = frozenset(
    {
        "preset",
        "output_dir",
        "data_dir",
        "max_steps",
        "minutes",
        "calibration_steps",
        "log_every",
        "eval_every",
        "checkpoint_every",
        "keep_checkpoint",
        "mixed_precision",
        "num_threads",
    }
)

_MIXED = ("auto", "no", "bf16", "fp16")


@dataclass
class DecoderPretrainConfig:
    """One pretraining run of the local Llama-architecture decoder (see the module docstring for presets)."""

    # ---- run
    preset: str = field(default="small", metadata={"help": "Preset these values started from (informational)."})
    output_dir: str = field(
        default="runs/decoder",
        metadata={
            "help": "Output directory: final model + tokenizer + pretrain_config.json + metrics.json, the token cache "
            "and checkpoints/. Rerunning with the same directory resumes."
        },
    )
    seed: int = field(
        default=0,
        metadata={"help": "Seed of every random choice: corpus shuffle, held-out split, weight init, batch order."},
    )
    # ---- data
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Shared data directory; null = textfree.data.shared_data_dir() ($TEXTFREE_DATA or ../shared/data)."
        },
    )
    sources: list[str] | None = field(
        default=None,
        metadata={"help": "Corpus sources (names in textfree.lm.local.corpus.GENERAL_SOURCES); null = all."},
    )
    extra_text_files: list[str] = field(
        default_factory=list,
        metadata={
            "help": "In-domain PUBLIC text to add (.txt paragraphs, .jsonl/.json with 'text'); empty by default. "
            "Evaluation data is refused."
        },
    )
    decontaminate: bool = field(
        default=True, metadata={"help": "Drop corpus documents that contain an evaluation question/context verbatim."}
    )
    eval_fraction: float = field(
        default=0.01,
        metadata={
            "help": "Fraction of documents held out (a fixed slice of the shuffled corpus) for the held-out loss."
        },
    )
    max_eval_blocks: int = field(
        default=64, metadata={"help": "Held-out loss is computed on at most this many context-length blocks."}
    )
    # ---- tokenizer
    vocab_size: int = field(
        default=8192, metadata={"help": "Byte-level BPE vocabulary size (including 2 special tokens and 256 bytes)."}
    )
    tokenizer_min_frequency: int = field(
        default=2, metadata={"help": "A BPE merge needs a pair seen at least this often."}
    )
    # ---- model (LlamaConfig)
    hidden_size: int = field(default=256, metadata={"help": "Model width."})
    num_layers: int = field(default=6, metadata={"help": "Transformer blocks."})
    num_heads: int = field(default=4, metadata={"help": "Attention heads (hidden_size must divide by it)."})
    num_kv_heads: int | None = field(
        default=None, metadata={"help": "Key/value heads (grouped-query attention); null = num_heads."}
    )
    intermediate_size: int = field(
        default=688, metadata={"help": "SwiGLU MLP width (~8/3 of hidden, a multiple of 16)."}
    )
    context_length: int = field(
        default=256, metadata={"help": "Tokens per training block; also max_position_embeddings of the saved model."}
    )
    rope_theta: float = field(default=10000.0, metadata={"help": "RoPE base."})
    # ---- optimisation
    batch_size: int = field(
        default=8,
        metadata={
            "help": "Blocks per optimizer step per process (accelerate launch multiplies it by the number of "
            "processes)."
        },
    )
    learning_rate: float = field(default=2e-3, metadata={"help": "Peak AdamW learning rate."})
    min_lr_ratio: float = field(
        default=0.1, metadata={"help": "The cosine schedule ends at learning_rate * min_lr_ratio."}
    )
    warmup_steps: int = field(default=50, metadata={"help": "Linear warm-up steps."})
    weight_decay: float = field(default=0.1, metadata={"help": "AdamW weight decay on matrices (not on norms)."})
    beta1: float = field(default=0.9, metadata={"help": "AdamW beta1."})
    beta2: float = field(default=0.95, metadata={"help": "AdamW beta2."})
    grad_clip: float = field(default=1.0, metadata={"help": "Clip the gradient norm to this (0 = off)."})
    mixed_precision: str = field(
        default="auto",
        metadata={"help": "'auto' (bf16 where the CPU/GPU supports it, else no), 'no', 'bf16' or 'fp16' (GPU)."},
    )
    num_threads: int | None = field(
        default=None,
        metadata={
            "help": "torch CPU threads (torch.set_num_threads); null = torch's default. Use fewer than the cores when "
            "other jobs share the machine."
        },
    )
    # ---- length
    max_steps: int | None = field(
        default=1800,
        metadata={
            "help": "Optimizer steps; the cosine schedule spans them. null = derive from `minutes` after calibration."
        },
    )
    minutes: float | None = field(
        default=None,
        metadata={
            "help": "Wall-clock budget of the training loop (steps, evaluations, checkpoints; all sessions of a "
            "resumed run together). With max_steps: a hard stop. Alone: the step count is set from the speed "
            "measured over the first calibration_steps steps and re-planned at every log step."
        },
    )
    calibration_steps: int = field(
        default=10, metadata={"help": "Steps timed to derive max_steps from `minutes` (time-budget mode only)."}
    )
    # ---- logging and checkpoints
    log_every: int = field(default=20, metadata={"help": "Log the mean train loss every N steps."})
    eval_every: int = field(
        default=200, metadata={"help": "Compute the held-out loss every N steps (and at the start and the end)."}
    )
    checkpoint_every: int = field(
        default=200,
        metadata={"help": "Write checkpoints/step-N (model + optimizer as safetensors, state as JSON) every N steps."},
    )
    keep_checkpoint: bool = field(
        default=True,
        metadata={"help": "Keep checkpoints/ after the run (needed to extend it later with a larger max_steps)."},
    )

    # --------------------------------------------------------------------------------------------- helpers
    @classmethod
    def from_preset(cls, name: str = "small", **overrides: Any) -> "DecoderPretrainConfig":
        """The preset's values with ``overrides`` applied (every given value, ``None`` included)."""
        if name not in PRESETS:
            raise ValueError(f"unknown preset {name!r}; known: {sorted(PRESETS)}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(overrides) - known)
        if unknown:
            raise ValueError(f"unknown pretraining config fields {unknown}")
        config = cls(**{**PRESETS[name], "preset": name, **overrides})
        config.validate()
        return config

    @classmethod
    def field_help(cls) -> dict[str, str]:
        """Field name -> help text."""
        return {f.name: f.metadata.get("help", "") for f in fields(cls)}

    def validate(self) -> None:
        """``ValueError`` naming the first inconsistent field."""
        positive = [
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "context_length",
            "batch_size",
            "log_every",
            "eval_every",
            "checkpoint_every",
            "max_eval_blocks",
        ]
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.context_length < 2:
            raise ValueError("context_length must be at least 2")
        if self.hidden_size % self.num_heads:
            raise ValueError(f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}")
        kv = self.num_kv_heads or self.num_heads
        if self.num_heads % kv:
            raise ValueError(f"num_heads {self.num_heads} is not divisible by num_kv_heads {kv}")
        if not 0 < self.eval_fraction < 1:
            raise ValueError(f"eval_fraction must be in (0, 1), got {self.eval_fraction}")
        if self.max_steps is None and self.minutes is None:
            raise ValueError("set max_steps, minutes, or both")
        if self.max_steps is not None and self.max_steps <= 0:
            raise ValueError(f"max_steps must be positive, got {self.max_steps}")
        if self.minutes is not None and self.minutes <= 0:
            raise ValueError(f"minutes must be positive, got {self.minutes}")
        if self.learning_rate <= 0 or not 0 <= self.min_lr_ratio <= 1 or self.warmup_steps < 0:
            raise ValueError("need learning_rate > 0, 0 <= min_lr_ratio <= 1 and warmup_steps >= 0")
        if self.mixed_precision not in _MIXED:
            raise ValueError(f"mixed_precision must be one of {_MIXED}, got {self.mixed_precision!r}")
        if self.calibration_steps < 1:
            raise ValueError("calibration_steps must be at least 1")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be at least 1, got {self.num_threads}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, directory: str | os.PathLike) -> Path:
        """Write ``pretrain_config.json`` into ``directory``."""
        path = Path(directory) / CONFIG_NAME
        atomic_write_text(path, json.dumps(self.to_dict(), indent=2) + "\n")
        return path

    @classmethod
    def load(cls, path: str | os.PathLike) -> "DecoderPretrainConfig":
        """From ``pretrain_config.json`` (or the directory holding it); unknown keys are an error."""
        path = Path(path)
        if path.is_dir():
            path = path / CONFIG_NAME
        return cls.from_dict(json.loads(path.read_text()), source=str(path))

    @classmethod
    def from_dict(cls, data: dict[str, Any], *, source: str = "config") -> "DecoderPretrainConfig":
        """From :meth:`to_dict`'s output (``source`` names where it came from in errors); unknown keys are an
        error."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{source}: unknown pretraining config fields {unknown}")
        config = cls(**data)
        config.validate()
        return config

    @classmethod
    def from_file(cls, path: str | os.PathLike, **overrides: Any) -> "DecoderPretrainConfig":
        """From a YAML or JSON file of field values; a ``preset`` key (default ``small``) supplies the rest.

        ``overrides`` win over the file, the file over the preset (``None`` / ``null`` values included).
        """
        path = Path(path)
        text = path.read_text()
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text) or {}
        else:
            data = json.loads(text)
        if not isinstance(data, dict):
            raise ValueError(f"{path}: expected a mapping of pretraining config fields")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{path}: unknown pretraining config fields {unknown}; known: {sorted(known)}")
        preset = overrides.pop("preset", None) or data.pop("preset", None) or "small"
        data.pop("preset", None)
        return cls.from_preset(preset, **{**data, **overrides})

    def replace(self, **changes: Any) -> "DecoderPretrainConfig":
        config = replace(self, **changes)
        config.validate()
        return config

    def mismatches(self, other: "DecoderPretrainConfig") -> dict[str, tuple[Any, Any]]:
        """Fields outside :data:`RESUMABLE_FIELDS` whose values differ (``name -> (self, other)``)."""
        a, b = self.to_dict(), other.to_dict()
        return {k: (a[k], b[k]) for k in a if k not in RESUMABLE_FIELDS and a[k] != b[k]}


#: Preset name -> field values (anything not listed takes the dataclass default).
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        num_layers=2,
        num_heads=2,
        intermediate_size=176,
        context_length=64,
        batch_size=8,
        learning_rate=3e-3,
        warmup_steps=10,
        max_steps=60,
        eval_fraction=0.1,
        max_eval_blocks=16,
        log_every=10,
        eval_every=20,
        checkpoint_every=20,
        mixed_precision="no",
    ),
    "small": dict(),  # the dataclass defaults
    "gpu": dict(
        hidden_size=768,
        num_layers=12,
        num_heads=12,
        intermediate_size=2048,
        context_length=1024,
        batch_size=32,
        learning_rate=6e-4,
        warmup_steps=200,
        max_steps=3000,
        eval_every=250,
        checkpoint_every=500,
        max_eval_blocks=128,
        mixed_precision="auto",
    ),
}


def resolve_mixed_precision(value: str) -> str:
    """``'auto'`` -> ``'bf16'`` on a GPU or CPU with native bf16 support, else ``'no'``; other values unchanged."""
    if value != "auto":
        return value
    import torch

    if torch.cuda.is_available():
        return "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    try:
        return "bf16" if torch.ops.mkldnn._is_mkldnn_bf16_supported() else "no"
    except (AttributeError, RuntimeError):  # pragma: no cover - older or unusual builds
        return "no"
