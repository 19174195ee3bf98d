"""PPFT's client-side privatization of a sequence of token states: pool, normalise, noise, renormalise.

Each pooled slot is normalised to unit L2 norm, so any two slots lie at most 2 apart; a metric mechanism with
parameter epsilon therefore gives every slot a worst-case loss of ``noise.privacy_loss(2)`` (2*epsilon for
L2-Laplace), and a prompt whose s slots may all differ composes to s times that. Renormalising the noisy slot
is post-processing and costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from .base import PrivacyLoss, check_positive, mechanism_from_dict, mechanism_to_dict
from .transforms import k_pool, l2_normalize

__all__ = ["SlotPrivatization", "UNIT_SLOT_DIAMETER"]

UNIT_SLOT_DIAMETER = 2.0  # the largest L2 distance between two unit vectors


@dataclass(frozen=True)
class SlotPrivatization:
    """k-pooling -> L2 normalise -> ``noise`` -> L2 renormalise (each step but pooling optional)."""

    noise: Any | None
    k: int = 4
    normalize: bool = True
    renormalize: bool = True
    sensitivity: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"SlotPrivatization: k must be an integer >= 1, got {self.k!r}")
        if self.noise is not None and not hasattr(self.noise, "privacy_loss"):
            raise ValueError(f"SlotPrivatization: noise must be a mechanism or None, got {self.noise!r}")
        if self.sensitivity is not None:
            check_positive("SlotPrivatization", "sensitivity", self.sensitivity)

    @property
    def input_diameter(self) -> float:
        """The largest L2 distance between two released inputs: 2 for unit slots, else ``sensitivity``."""
        if self.sensitivity is not None:
            return float(self.sensitivity)
        return UNIT_SLOT_DIAMETER if self.normalize else float("inf")

    def apply(
        self, hidden: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states [B, T, d] + mask [B, T] -> released slots [B, S, d] (float32) + slot mask [B, S]."""
        pooled, slot_mask = k_pool(hidden.to(torch.float32), mask, self.k)
        x = l2_normalize(pooled) if self.normalize else pooled
        if self.noise is not None:
            if generator is None:
                raise ValueError("a generator is required to add noise (use textfree.rng.secure_generator())")
            x = self.noise.sample(x.to(torch.float64), generator=generator)
            if self.renormalize:
                x = l2_normalize(x)
        x = x.to(torch.float32) * slot_mask.unsqueeze(-1)
        return x, slot_mask

    def slot_loss(self) -> PrivacyLoss:
        """Worst-case loss of releasing one slot (unbounded without noise or without a bounded input domain)."""
        if self.noise is None or self.input_diameter == float("inf"):
            return PrivacyLoss(float("inf"), 0.0, "metric")
        return self.noise.privacy_loss(self.input_diameter)

    def prompt_loss(self, n_slots: int, differing: int | None = None) -> PrivacyLoss:
        """Loss of a prompt of ``n_slots`` slots of which ``differing`` (default: all) may differ."""
        s = n_slots if differing is None else differing
        if s < 0 or s > n_slots:
            raise ValueError(f"differing must lie in [0, {n_slots}], got {differing!r}")
        return self.slot_loss().scaled(s) if s else PrivacyLoss(0.0, 0.0, self.slot_loss().notion)

    def to_dict(self) -> dict[str, Any]:
        return {
            "k": self.k,
            "normalize": self.normalize,
            "renormalize": self.renormalize,
            "sensitivity": self.sensitivity,
            "noise": None if self.noise is None else mechanism_to_dict(self.noise),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SlotPrivatization":
        if not isinstance(data, dict):
            raise ValueError(f"a privatization spec must be a mapping, got {type(data).__name__}")
        known = {"k", "normalize", "renormalize", "sensitivity", "noise"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown privatization field(s) {sorted(unknown)}; known: {sorted(known)}")
        for flag in ("normalize", "renormalize"):
            if flag in data and not isinstance(data[flag], bool):
                raise ValueError(f"privatization.{flag} must be true or false, got {data[flag]!r}")
        noise = data.get("noise")
        return cls(
            noise=None if noise is None else mechanism_from_dict(noise),
            k=data.get("k", 4),
            normalize=data.get("normalize", True),
            renormalize=data.get("renormalize", True),
            sensitivity=data.get("sensitivity"),
        )
