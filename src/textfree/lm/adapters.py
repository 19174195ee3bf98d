"""One adapter setting for every parameter-efficient method of the ``peft`` library, and full fine-tuning.

:class:`AdapterSettings` names the method (``lora``, ``prompt_tuning``, ``prefix_tuning``, ``ia3`` or ``full``) and
its sizes; :func:`peft_config` turns it into the ``peft`` config for a task type (``CAUSAL_LM`` for a decoder,
``SEQ_CLS`` / ``TOKEN_CLS`` / ``FEATURE_EXTRACTION`` for an encoder) and :func:`apply_adapter` wraps a model with it
(``full``: every weight trains, no wrapper). The settings are saved as JSON beside the weights; a dict written before
``method`` existed (LoRA's four fields) reads as LoRA.
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # annotations only: the settings are checked without torch (peft is imported where it is used)
    import torch

__all__ = [
    "ADAPTER_METHODS",
    "TASK_TYPES",
    "AdapterSettings",
    "peft_config",
    "apply_adapter",
    "trainable_parameters",
    "quiet_peft",
    "lora_config",
]

#: The methods an :class:`AdapterSettings` may name (``full``: fine-tune every weight, no ``peft`` wrapper).
ADAPTER_METHODS = ("lora", "prompt_tuning", "prefix_tuning", "ia3", "full")
#: ``peft`` task types the adapters are made for.
TASK_TYPES = ("CAUSAL_LM", "SEQ_CLS", "TOKEN_CLS", "FEATURE_EXTRACTION")


@dataclass(frozen=True)
class AdapterSettings:
    """Which weights train and how: a ``peft`` method and its sizes, or full fine-tuning."""

    method: str = field(default="lora", metadata={"help": f"One of {', '.join(ADAPTER_METHODS)}."})
    r: int = field(default=16, metadata={"help": "LoRA rank."})
    alpha: int = field(default=32, metadata={"help": "LoRA alpha (scaling alpha / r)."})
    dropout: float = field(default=0.05, metadata={"help": "Dropout on the LoRA path."})
    target_modules: str | list[str] = field(
        default="all-linear",
        metadata={
            "help": "LoRA / IA3: 'all-linear' (every linear layer but the output head) or a list of module names; IA3 "
            "takes null for peft's defaults."
        },
    )
    num_virtual_tokens: int = field(
        default=20, metadata={"help": "Prompt and prefix tuning: virtual tokens (RAPT: 150 prompt, 10 prefix)."}
    )

    def __post_init__(self) -> None:
        if self.method not in ADAPTER_METHODS:
            raise ValueError(f"adapter method must be one of {', '.join(ADAPTER_METHODS)}, got {self.method!r}")
        for name in ("r", "num_virtual_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"adapter {name} must be an integer >= 1, got {value!r}")
        if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) or not self.alpha > 0:
            raise ValueError(f"adapter alpha must be a number > 0, got {self.alpha!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ValueError(f"adapter dropout must be in [0, 1), got {self.dropout!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> AdapterSettings:
        if not isinstance(data, dict):
            raise ValueError(f"adapter settings must be a mapping, got {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown adapter setting(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


@contextlib.contextmanager
def quiet_peft():
    """peft 0.21 calls a transformers 5.23 method that warns about its own deprecation; hide only that."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
        yield


def peft_config(settings: AdapterSettings, task_type: str = "CAUSAL_LM"):
    """The ``peft`` config of ``settings`` for ``task_type``; None for full fine-tuning."""
    if task_type not in TASK_TYPES:
        raise ValueError(f"task_type must be one of {', '.join(TASK_TYPES)}, got {task_type!r}")
    import peft

    if settings.method == "full":
        return None
    if settings.method == "lora":
        return peft.LoraConfig(
            r=settings.r,
            lora_alpha=settings.alpha,
            lora_dropout=settings.dropout,
            target_modules=settings.target_modules,
            task_type=task_type,
            bias="none",
        )
    if settings.method == "ia3":
        targets = None if settings.target_modules in (None, "all-linear") else settings.target_modules
        return peft.IA3Config(target_modules=targets, feedforward_modules=[] if targets else None, task_type=task_type)
    kind = peft.PromptTuningConfig if settings.method == "prompt_tuning" else peft.PrefixTuningConfig
    return kind(num_virtual_tokens=settings.num_virtual_tokens, task_type=task_type)


def lora_config(settings: AdapterSettings):
    """PPFT's decoder adapter: the ``peft`` LoRA config for a causal LM (PPFT trains LoRA only)."""
    if settings.method != "lora":
        raise ValueError(f"PPFT's decoder takes a LoRA adapter, got method {settings.method!r}")
    return peft_config(settings, "CAUSAL_LM")


def apply_adapter(model: torch.nn.Module, settings: AdapterSettings, task_type: str = "CAUSAL_LM") -> torch.nn.Module:
    """``model`` wrapped for training with ``settings``: a ``peft`` model whose adapter alone trains, or (``full``) the
    model itself with every parameter trainable."""
    config = peft_config(settings, task_type)
    if config is None:
        for p in model.parameters():
            p.requires_grad_(True)
        return model
    from peft import get_peft_model

    with quiet_peft():
        return get_peft_model(model, config)


def trainable_parameters(model: torch.nn.Module) -> dict[str, int]:
    """How many parameters train and how many there are (tied weights once)."""
    params = list(model.parameters())
    return {"trainable": sum(p.numel() for p in params if p.requires_grad), "total": sum(p.numel() for p in params)}
