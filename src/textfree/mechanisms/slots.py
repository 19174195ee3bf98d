"""PPFT's client-side privatization of a sequence of token states: pool, normalise, noise, renormalise.

Each pooled slot is normalised to unit L2 norm, so any two slots lie at most 2 apart; a metric mechanism with
parameter epsilon therefore gives every slot a worst-case loss of ``noise.privacy_loss(2)`` (2*epsilon for
L2-Laplace), and a prompt whose s slots may all differ composes to s times that. Renormalising the noisy slot
is post-processing and costs nothing.

The *number* of slots, ceil(tokens / k), is released as it is unless ``pad_to`` is set: then every prompt is released
as exactly ``pad_to`` slots, its own followed by filler slots (the public unit vector :func:`filler_slot`) that go
through the same noise. Without padding, two prompts of different slot counts are told apart with certainty (the loss
between them is unbounded; :meth:`SlotPrivatization.count_hidden`); with it, any two prompts the client accepts differ
in at most ``pad_to`` slots, so ``pad_to`` x the slot loss bounds every pair.

With ``repeat_mean`` (beyond the paper) every slot of a prompt is replaced, before the noise, by the prompt's unit mean
slot (:func:`repeat_mean_slots`): s noisy copies of one unit vector instead of s different ones. Every slot is still
a unit vector, so the slot loss and the prompt loss (s x the slot loss) are unchanged; what changes is how much of the
prompt-level budget reaches one direction: PPFT's different slots partly cancel in their mean, copies add up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from .base import PrivacyLoss, check_positive, mechanism_from_dict, mechanism_to_dict
from .centering import center_sha256, center_slots, check_center
from .clipping import clip_l2
from .transforms import k_pool, l2_normalize

__all__ = ["SlotPrivatization", "UNIT_SLOT_DIAMETER", "filler_slot", "pad_slots", "repeat_mean_slots"]

UNIT_SLOT_DIAMETER = 2.0  # the largest L2 distance between two unit vectors


def filler_slot(dim: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The public filler slot of padded payloads: the unit vector with equal coordinates, ones(d) / sqrt(d)."""
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    return torch.full((dim,), 1.0 / dim**0.5, dtype=dtype)


def pad_slots(slots: torch.Tensor, mask: torch.Tensor, pad_to: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit slots [B, S, d] + mask [B, S] (real slots first) -> [B, pad_to, d], every row's own slots followed by
    :func:`filler_slot` up to ``pad_to``, and an all-true mask. A row with more than ``pad_to`` slots is an error
    (cutting it would silently drop private text the caller meant to send)."""
    if slots.dim() != 3 or mask.shape != slots.shape[:2]:
        raise ValueError(f"expected slots [B, S, d] and mask [B, S], got {tuple(slots.shape)} and {tuple(mask.shape)}")
    lengths = mask.sum(dim=1)
    if lengths.numel() and int(lengths.max()) > pad_to:
        row = int(lengths.argmax())
        raise ValueError(
            f"prompt {row} has {int(lengths[row])} slots, more than pad_to={pad_to}: raise pad_to or cut the "
            f"prompt to at most pad_to x k tokens"
        )
    b, s, d = slots.shape
    out = filler_slot(d, slots.dtype).expand(b, pad_to, d).clone()
    keep = min(s, pad_to)
    real = mask[:, :keep].unsqueeze(-1)
    out[:, :keep] = torch.where(real, slots[:, :keep], out[:, :keep])
    return out, torch.ones(b, pad_to, dtype=torch.bool, device=mask.device)


def repeat_mean_slots(slots: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Unit slots [B, S, d] + mask [B, S] -> each row's real slots all replaced by the unit mean of them (the
    direction of their sum), padding slots zero. A row whose slots sum to zero gets zero slots (norm <= 1 all the
    same); a row with no real slot stays zero."""
    if slots.dim() != 3 or mask.shape != slots.shape[:2]:
        raise ValueError(f"expected slots [B, S, d] and mask [B, S], got {tuple(slots.shape)} and {tuple(mask.shape)}")
    real = mask.unsqueeze(-1).to(slots.dtype)
    mean = l2_normalize((slots * real).sum(dim=1, keepdim=True))
    return mean.expand_as(slots) * real


@dataclass(frozen=True)
class SlotPrivatization:
    """k-pooling -> L2 normalise -> [centre: subtract ``center``, L2 normalise] -> [``repeat_mean``: every slot the
    prompt's unit mean slot] -> ``noise`` -> L2 renormalise (each step but pooling optional).

    ``center`` (a public vector, :mod:`textfree.mechanisms.centering`) keeps every slot a unit vector, so the
    guarantee is unchanged. A spec read from a payload header names the centre by ``center_sha256`` only and cannot
    privatize.
    """

    noise: Any | None
    k: int = 4
    normalize: bool = True
    renormalize: bool = True
    sensitivity: float | None = None
    pad_to: int | None = (
        None  # release exactly this many slots per prompt (filler after its own); None: ceil(tokens / k)
    )
    center: torch.Tensor | None = field(default=None, compare=False, repr=False)
    center_sha256: str | None = None
    repeat_mean: bool = False  # beyond the paper: release the prompt's unit mean slot once per slot (repeat_mean_slots)

    def __post_init__(self) -> None:
        if not isinstance(self.repeat_mean, bool):
            raise ValueError(f"SlotPrivatization: repeat_mean must be true or false, got {self.repeat_mean!r}")
        if self.repeat_mean and not self.normalize:
            raise ValueError(
                "SlotPrivatization: repeat_mean needs normalize=True (the repeated mean slot is a unit vector)"
            )
        if self.center is not None:
            if not self.normalize:
                raise ValueError(
                    "SlotPrivatization: center needs normalize=True (centred slots are renormalised to unit norm)"
                )
            center = check_center(self.center)
            sha = center_sha256(center)
            if self.center_sha256 is not None and self.center_sha256 != sha:
                raise ValueError(
                    f"SlotPrivatization: center_sha256 {self.center_sha256!r} is not the given centre's ({sha})"
                )
            object.__setattr__(self, "center", center)
            object.__setattr__(self, "center_sha256", sha)
        elif self.center_sha256 is not None and not (
            isinstance(self.center_sha256, str) and len(self.center_sha256) == 64
        ):
            raise ValueError(
                f"SlotPrivatization: center_sha256 must be a 64-character hex string, got {self.center_sha256!r}"
            )
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ValueError(f"SlotPrivatization: k must be an integer >= 1, got {self.k!r}")
        if self.noise is not None and not hasattr(self.noise, "privacy_loss"):
            raise ValueError(f"SlotPrivatization: noise must be a mechanism or None, got {self.noise!r}")
        if self.sensitivity is not None:
            check_positive("SlotPrivatization", "sensitivity", self.sensitivity)
            if self.normalize and self.sensitivity < UNIT_SLOT_DIAMETER:
                raise ValueError(
                    f"SlotPrivatization: unit slots lie up to {UNIT_SLOT_DIAMETER:g} apart, so a sensitivity "
                    f"below that would understate every loss; got sensitivity={self.sensitivity!r}"
                )
        if self.pad_to is not None:
            if isinstance(self.pad_to, bool) or not isinstance(self.pad_to, int) or self.pad_to < 1:
                raise ValueError(f"SlotPrivatization: pad_to must be an integer >= 1 or None, got {self.pad_to!r}")
            if not self.normalize:
                raise ValueError(
                    "SlotPrivatization: pad_to needs normalize=True (filler slots are unit vectors like the real ones)"
                )

    @property
    def count_hidden(self) -> bool:
        """Whether every payload has the same number of slots (``pad_to``), so the slot count tells nothing."""
        return self.pad_to is not None

    @property
    def input_diameter(self) -> float:
        """The largest L2 distance between two released inputs: 2 for unit slots, else ``sensitivity`` (enforced:
        without
        ``normalize`` every pooled vector is clipped to norm ``sensitivity / 2`` before the noise; with it a declared
        sensitivity must be >= 2)."""
        if self.sensitivity is not None:
            return float(self.sensitivity)
        return UNIT_SLOT_DIAMETER if self.normalize else float("inf")

    def apply(
        self, hidden: torch.Tensor, mask: torch.Tensor, *, generator: torch.Generator | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Token states [B, T, d] + mask [B, T] -> released slots [B, S, d] (float32) + slot mask [B, S]."""
        pooled, slot_mask = k_pool(hidden.to(torch.float32), mask, self.k)
        x = l2_normalize(pooled) if self.normalize else pooled
        if not self.normalize and self.sensitivity is not None:  # the declared diameter holds: any two within it
            x = clip_l2(x, self.sensitivity / 2.0)
        if self.center_sha256 is not None:
            if self.center is None:
                raise ValueError(
                    "this privatization spec names its centre by sha256 only (read from a payload header): "
                    "privatizing needs the centre vector itself"
                )
            x = center_slots(x, self.center)
        if self.repeat_mean:
            x = repeat_mean_slots(x, slot_mask)
        if self.pad_to is not None:
            x, slot_mask = pad_slots(x * slot_mask.unsqueeze(-1), slot_mask, self.pad_to)
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
        """Loss of a prompt of ``n_slots`` slots of which ``differing`` (default: all) may differ. Under
        ``repeat_mean`` one differing slot moves the mean, so every released slot may differ: any ``differing`` > 0
        costs all ``n_slots``."""
        s = n_slots if differing is None else differing
        if s < 0 or s > n_slots:
            raise ValueError(f"differing must lie in [0, {n_slots}], got {differing!r}")
        if self.repeat_mean and s:
            s = n_slots
        return self.slot_loss().scaled(s) if s else PrivacyLoss(0.0, 0.0, self.slot_loss().notion)

    def pair_loss(self) -> PrivacyLoss:
        """The loss between *any* two prompts the client accepts: ``pad_to`` x the slot loss with padding; unbounded
        without (prompts of different slot counts are told apart by the count alone)."""
        if self.pad_to is None:
            return PrivacyLoss(float("inf"), 0.0, self.slot_loss().notion)
        return self.prompt_loss(self.pad_to)

    def to_dict(self) -> dict[str, Any]:
        return (
            {
                "k": self.k,
                "normalize": self.normalize,
                "renormalize": self.renormalize,
                "sensitivity": self.sensitivity,
                "noise": None if self.noise is None else mechanism_to_dict(self.noise),
            }
            | ({"pad_to": self.pad_to} if self.pad_to is not None else {})
            | (  # headers stay as before these options existed
                {"center_sha256": self.center_sha256} if self.center_sha256 is not None else {}
            )
            | ({"repeat_mean": True} if self.repeat_mean else {})
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "SlotPrivatization":
        if not isinstance(data, dict):
            raise ValueError(f"a privatization spec must be a mapping, got {type(data).__name__}")
        known = {"k", "normalize", "renormalize", "sensitivity", "noise", "pad_to", "center_sha256", "repeat_mean"}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown privatization field(s) {sorted(unknown)}; known: {sorted(known)}")
        for flag in ("normalize", "renormalize", "repeat_mean"):
            if flag in data and not isinstance(data[flag], bool):
                raise ValueError(f"privatization.{flag} must be true or false, got {data[flag]!r}")
        noise = data.get("noise")
        return cls(
            noise=None if noise is None else mechanism_from_dict(noise),
            k=data.get("k", 4),
            normalize=data.get("normalize", True),
            renormalize=data.get("renormalize", True),
            sensitivity=data.get("sensitivity"),
            pad_to=data.get("pad_to"),
            center_sha256=data.get("center_sha256"),
            repeat_mean=data.get("repeat_mean", False),
        )
