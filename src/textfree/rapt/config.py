"""The settings of a RAPT classification run (:class:`RaptTrainConfig`), saved as JSON beside the run."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..data.tasks import TASKS
from ..lm.adapters import ADAPTER_METHODS, AdapterSettings
from ..training.config import LoopConfig, _check_int, _check_optional_int

__all__ = ["RaptTrainConfig", "PAPER_VIRTUAL_TOKENS"]

#: The paper's sizes per method (section V-A): prompt tuning 150 virtual tokens, prefix tuning 10, LoRA r 16 alpha 32.
PAPER_VIRTUAL_TOKENS = {"prompt_tuning": 150, "prefix_tuning": 10}


@dataclass(kw_only=True)
class RaptTrainConfig(LoopConfig):
    """A RAPT classification run: the loop's settings, the model and method, the privatization and the head."""

    epochs: int = field(default=4, metadata={"help": "Passes over the privatized training set (the paper: 4)."})
    batch_size: int = field(default=16, metadata={"help": "Examples per optimizer step and process."})
    lr: float = field(default=5e-4, metadata={"help": "Peak learning rate (AdamW)."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warm-up steps."})
    encoder: str = field(
        default="default", metadata={"help": "The served model: 'default' (all-MiniLM-L6-v2) or an HF name/path."}
    )
    task: str = field(default="sst2", metadata={"help": f"GLUE task, one of {', '.join(TASKS)}."})
    train_limit: int | None = field(default=2000, metadata={"help": "A seeded subset of the training split."})
    test_limit: int | None = field(default=872, metadata={"help": "A seeded subset of the test split."})
    data_seed: int = field(default=0, metadata={"help": "Seeds the subsets (and the plain tokens)."})
    method: str = field(default="lora", metadata={"help": f"One of {', '.join(ADAPTER_METHODS)}."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank (the paper: 16)."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha (the paper: 32)."})
    virtual_tokens: int | None = field(
        default=None, metadata={"help": "Prompt / prefix tuning's virtual tokens (null: the paper's 150 / 10)."}
    )
    eta: float | None = field(default=None, metadata={"help": "T2T / PCT2T eta (null: no privatization)."})
    pos: str | None = field(
        default="default",
        metadata={"help": "PCT2T categories ('default': noun,verb,pron,adp; 'all'; a comma list); null: plain T2T."},
    )
    plain_length: int = field(default=40, metadata={"help": "m: plain tokens prepended (0: none, the ablation)."})
    plain_sequences: int = field(default=1, metadata={"help": "Plain-token sequences, one drawn per example."})
    rec_vocab_size: int | None = field(
        default=None, metadata={"help": "Reconstruction vocabulary size (null: every eligible table word)."}
    )
    rec_hidden: int = field(default=96, metadata={"help": "The reconstruction head's hidden size c (the paper: 96)."})
    rec_weight: float = field(default=1.0, metadata={"help": "Weight of the reconstruction loss."})
    reconstruction: bool = field(default=True, metadata={"help": "Train with the reconstruction loss."})
    max_length: int = field(default=128, metadata={"help": "Tokens per example, plain tokens included."})
    noise_seed: int | None = field(default=None, metadata={"help": "Seeds the privatization noise (null: seed)."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got {self.task!r}")
        if self.method not in ADAPTER_METHODS:
            raise ValueError(f"method must be one of {', '.join(ADAPTER_METHODS)}, got {self.method!r}")
        if self.eta is not None and not (
            isinstance(self.eta, (int, float)) and math.isfinite(self.eta) and self.eta > 0
        ):
            raise ValueError(f"eta must be a finite number > 0 or null, got {self.eta!r}")
        _check_optional_int("train_limit", self.train_limit, 2)
        _check_optional_int("test_limit", self.test_limit, 1)
        _check_optional_int("virtual_tokens", self.virtual_tokens, 1)
        _check_optional_int("rec_vocab_size", self.rec_vocab_size, 2)
        _check_optional_int("noise_seed", self.noise_seed, 0)
        for name, low in (("plain_length", 0), ("plain_sequences", 1), ("rec_hidden", 1), ("max_length", 8),
                          ("lora_r", 1), ("lora_alpha", 1), ("data_seed", 0)):  # fmt: skip
            _check_int(name, getattr(self, name), low)
        if not (isinstance(self.rec_weight, (int, float)) and self.rec_weight >= 0):
            raise ValueError(f"rec_weight must be a number >= 0, got {self.rec_weight!r}")
        if self.reconstruction and self.plain_length == 0:
            raise ValueError("plain_length must be > 0 with reconstruction on: it reconstructs the plain tokens")
        if self.plain_length >= self.max_length - 4:
            raise ValueError(f"plain_length {self.plain_length} leaves no room in max_length {self.max_length}")

    @property
    def effective_noise_seed(self) -> int:
        return self.seed if self.noise_seed is None else self.noise_seed

    def adapter(self) -> AdapterSettings:
        tokens = self.virtual_tokens or PAPER_VIRTUAL_TOKENS.get(self.method, 20)
        return AdapterSettings(method=self.method, r=self.lora_r, alpha=self.lora_alpha, num_virtual_tokens=tokens)
