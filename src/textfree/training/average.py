"""An exponential moving average of the trained parameters (Polyak averaging), kept beside the training loop.

After every optimizer step ``avg <- decay * avg + (1 - decay) * param``, starting from the parameters as they were
before the first step. The training loop keeps it in float32 on the parameters' device, saves it with each
resumable checkpoint (``ema.safetensors``) and, at the end, writes it into the model, so the saved weights are the
average instead of the last step's. With noisy stage-2 payloads the last step's weights follow the last few
batches' noise; the average over the last ~1/(1 - decay) steps does not.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from .config import check_ema_decay  # defined beside LoopConfig, which checks it without torch


@dataclass
class WeightAverage:
    """The running average of named parameters; ``decay`` per update."""

    decay: float
    average: dict[str, torch.Tensor] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.decay is None:
            raise ValueError("ema_decay must be a number strictly between 0 and 1, got None")
        check_ema_decay(self.decay)

    @classmethod
    def start(cls, decay: float, params: Mapping[str, torch.Tensor]) -> WeightAverage:
        """An average that starts at the current values of ``params``."""
        return cls(decay, {n: p.detach().to(torch.float32).clone() for n, p in params.items()})

    @torch.no_grad()
    def update(self, params: Mapping[str, torch.Tensor]) -> None:
        """One step: move every average towards its parameter by ``1 - decay``."""
        self._check_names(params, "update")
        for name, p in params.items():
            self.average[name].lerp_(p.detach().to(torch.float32), 1.0 - self.decay)

    @torch.no_grad()
    def copy_to(self, params: Mapping[str, torch.Tensor]) -> None:
        """Write the averages into ``params`` (in their own dtype and device)."""
        self._check_names(params, "copy_to")
        for name, p in params.items():
            p.copy_(self.average[name].to(p.device, p.dtype))

    def state(self) -> dict[str, torch.Tensor]:
        """The averages as CPU tensors (for safetensors)."""
        return {n: t.detach().contiguous().cpu() for n, t in self.average.items()}

    def load(self, tensors: Mapping[str, torch.Tensor], *, where: str) -> None:
        """Replace the averages by ``tensors`` (a saved :meth:`state`); names and shapes must match."""
        if set(tensors) != set(self.average):
            raise ValueError(
                f"{where}: the saved weight average does not match the trained parameters "
                f"(missing {sorted(set(self.average) - set(tensors))[:5]}, "
                f"extra {sorted(set(tensors) - set(self.average))[:5]})"
            )
        for name, t in tensors.items():
            if tuple(t.shape) != tuple(self.average[name].shape):
                raise ValueError(
                    f"{where}: the saved average of {name!r} has shape {tuple(t.shape)}, "
                    f"the parameter {tuple(self.average[name].shape)}"
                )
            self.average[name] = t.to(self.average[name].device, torch.float32).clone()

    def _check_names(self, params: Mapping[str, torch.Tensor], what: str) -> None:
        if set(params) != set(self.average):
            raise ValueError(
                f"WeightAverage.{what}: parameters {sorted(set(params) ^ set(self.average))[:5]} "
                "are not the averaged ones"
            )
