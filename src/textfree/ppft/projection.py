"""P_psi: the server-side map from the client's slot space (d_e) to the decoder's embedding space (d_d).

A plain ``Linear(d_e, d_d)`` by default (PPFT's choice); ``kind="mlp"`` is a 2-layer MLP
``Linear(d_e, h) -> GELU -> Linear(h, d_d)``. Saved as ``config.json`` + ``model.safetensors`` (no pickle).

Beyond the paper, ``count_vectors=N`` adds a learned decoder-space vector per slot count (1..N; larger counts share
the N-th) that the server puts before a row's slots (:func:`~textfree.ppft.server.slot_prefix`). The count is in the
payload anyway (unless the client pads to a fixed count); this states it to the decoder outright, where rotary
positions leave it implicit. Post-processing of the payload: the client and its guarantee do not change.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file

__all__ = ["ProjectionConfig", "Projection", "PROJECTION_KINDS", "check_dropout"]

PROJECTION_KINDS = ("linear", "mlp")
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def check_dropout(name: str, value: Any) -> None:
    """A dropout probability must be a number in [0, 1)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
        raise ValueError(f"{name} must be a number in [0, 1), got {value!r}")


@dataclass(frozen=True)
class ProjectionConfig:
    """Shape of P_psi."""

    in_dim: int = field(metadata={"help": "Width d_e of the client's slots (the encoder's hidden size; 384 for MiniLM)."})
    out_dim: int = field(metadata={"help": "Width d_d of the decoder's input embeddings."})
    kind: str = field(default="linear", metadata={"help": "'linear' (one Linear layer, PPFT) or 'mlp' (Linear -> GELU -> Linear)."})
    hidden_dim: int | None = field(default=None, metadata={"help": "MLP only: the hidden width (default: max(in_dim, out_dim))."})
    count_vectors: int = field(default=0, metadata={"help": "Beyond the paper: a learned vector per slot count 1..N (larger counts share the N-th) put before a row's slots; 0: none (PPFT)."})
    count_dropout: float = field(default=0.0, metadata={"help": "Training only: the probability that a row's count vector is replaced by zeros, so the decoder must also read the slots (never at inference)."})

    def __post_init__(self) -> None:
        for name in ("in_dim", "out_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ProjectionConfig.{name} must be an integer >= 1, got {v!r}")
        if self.kind not in PROJECTION_KINDS:
            raise ValueError(f"ProjectionConfig.kind must be one of {PROJECTION_KINDS}, got {self.kind!r}")
        if self.hidden_dim is not None and (not isinstance(self.hidden_dim, int) or self.hidden_dim < 1):
            raise ValueError(f"ProjectionConfig.hidden_dim must be null or an integer >= 1, got {self.hidden_dim!r}")
        if not isinstance(self.count_vectors, int) or isinstance(self.count_vectors, bool) or self.count_vectors < 0:
            raise ValueError(f"ProjectionConfig.count_vectors must be an integer >= 0, got {self.count_vectors!r}")
        check_dropout("ProjectionConfig.count_dropout", self.count_dropout)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProjectionConfig":
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise ValueError(f"a projection config must be a mapping with fields {sorted(known)}, got {data!r}"[:300])
        return cls(**data)


class Projection(torch.nn.Module):
    """``forward(x [..., d_e]) -> [..., d_d]``."""

    def __init__(self, config: ProjectionConfig):
        super().__init__()
        self.config = config
        if config.kind == "linear":
            self.net = torch.nn.Linear(config.in_dim, config.out_dim)
        else:
            h = config.hidden_dim or max(config.in_dim, config.out_dim)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(config.in_dim, h), torch.nn.GELU(), torch.nn.Linear(h, config.out_dim)
            )

        if config.count_vectors:  # zero at first: a new count vector starts as an empty position
            self.count = torch.nn.Parameter(torch.zeros(config.count_vectors, config.out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def count_vector(self, n: int) -> torch.Tensor | None:
        """[1, d_d]: the learned vector of a row of ``n`` >= 1 slots (None without ``count_vectors`` or for n = 0); in
        training mode zeros with probability ``count_dropout``."""
        if not self.config.count_vectors or n < 1:
            return None
        vector = self.count[min(n, self.config.count_vectors) - 1].unsqueeze(0)
        if self.training and self.config.count_dropout and float(torch.rand(())) < self.config.count_dropout:
            return torch.zeros_like(vector)  # dropped (torch's seeded RNG, like nn.Dropout): the slots must carry the answer
        return vector

    def with_count_vectors(self, n: int, dropout: float | None = None) -> "Projection":
        """A copy of this projection with ``n`` count vectors (the existing weights kept; new count vectors zero) and
        ``dropout`` (default: unchanged)."""
        config = replace(self.config, count_vectors=n, count_dropout=self.config.count_dropout if dropout is None else dropout)
        out = Projection(config).to(next(self.parameters()).device)
        state = {k: v for k, v in self.state_dict().items() if k != "count"}
        out.load_state_dict(state, strict=False)
        if n and self.config.count_vectors:
            keep = min(n, self.config.count_vectors)
            with torch.no_grad():
                out.count[:keep] = self.count[:keep]
        return out

    def save(self, directory: str | os.PathLike) -> Path:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        (out / CONFIG_NAME).write_text(json.dumps(self.config.to_dict(), indent=2) + "\n")
        save_file({k: v.detach().contiguous().cpu() for k, v in self.state_dict().items()}, str(out / WEIGHTS_NAME))
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike, *, device: str | torch.device = "cpu") -> "Projection":
        d = Path(directory)
        try:
            config = ProjectionConfig.from_dict(json.loads((d / CONFIG_NAME).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the projection config in {str(d)!r}: {exc}") from exc
        proj = cls(config)
        proj.load_state_dict(load_file(str(d / WEIGHTS_NAME), device=str(device)), strict=True)
        return proj.to(device)
