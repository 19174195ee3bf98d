"""Classifier heads over sets of vectors: PPFT's answer head and the attribute-inference attackers share them.

:class:`AttributeClassifier` reads a prompt's vectors (slots or token rows, zero padding masked) by their mean or by
attention over them, then a 2-layer MLP, then one head per :class:`AttributeSpec` (categorical or multi-label).
:func:`train_attribute_attacker` trains one on clean vectors, on vectors noised afresh every epoch, or on cycling
releases; :func:`predict_attributes` reads its answers.

Its trainer keeps its own few lines of loop rather than :func:`textfree.training.fit`: it trains in memory in
seconds, writes no run directory or checkpoint, and draws its batches and noise from one generator in an order that
every committed attack figure was made with (moving it onto ``fit`` would redraw them all).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

import torch

__all__: list[str] = [
    "Kind",
    "AttributeSpec",
    "AttributeAttackConfig",
    "AttributeClassifier",
    "Noise",
    "Inputs",
    "noisy_rows",
    "train_attribute_attacker",
    "predict_attributes",
]


Kind = Literal["categorical", "multilabel"]


@dataclass(frozen=True)
class AttributeSpec:
    """One attribute: its name, kind and the classes (labels) the attacker can predict (seen in training)."""

    name: str
    kind: Kind
    classes: tuple[str, ...]

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"AttributeSpec.name must be a non-empty string, got {self.name!r}")
        if self.kind not in ("categorical", "multilabel"):
            raise ValueError(
                f"AttributeSpec {self.name!r}: kind must be 'categorical' or 'multilabel', got {self.kind!r}"
            )
        if len(self.classes) < 1 or len(set(self.classes)) != len(self.classes):
            raise ValueError(
                f"AttributeSpec {self.name!r}: classes must be non-empty and distinct, got {self.classes!r}"
            )


@dataclass(frozen=True)
class AttributeAttackConfig:
    """An attribute attacker: architecture and training."""

    pooling: Literal["mean", "slots"] = "mean"  # mean of the vectors (RAPT) or attention over slots
    count: bool = (
        False  # also read the number of real vectors (one-hot, up to the training maximum) beside the pooled one
    )
    # standardise the pooled vector (LayerNorm without weights) before the trunk: the mean of many noisy unit slots is
    # short (about 1/sqrt(slots)), and an MLP reading it unscaled beside a one-hot count learns the count first
    standardize: bool = False
    hidden: int = 256  # width of the 2-layer MLP; 0: no hidden layer, a linear reader of the features
    epochs: int = 150  # passes over the attacker's training payloads (40 underfits Pri-DDX's multi-label heads)
    batch_size: int = 64
    lr: float = 2e-3  # AdamW learning rate
    weight_decay: float = 1e-4
    dropout: float = 0.1

    def __post_init__(self) -> None:
        if self.pooling not in ("mean", "slots"):
            raise ValueError(f"AttributeAttackConfig.pooling must be 'mean' or 'slots', got {self.pooling!r}")
        for name in ("count", "standardize"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"AttributeAttackConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.hidden, bool) or not isinstance(self.hidden, int) or self.hidden < 0:
            raise ValueError(f"AttributeAttackConfig.hidden must be an integer >= 0 (0: linear), got {self.hidden!r}")
        for name in ("epochs", "batch_size"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"AttributeAttackConfig.{name} must be an integer >= 1, got {v!r}")
        for name in ("lr", "weight_decay", "dropout"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise ValueError(f"AttributeAttackConfig.{name} must be a finite number >= 0, got {v!r}")
        if self.lr <= 0 or self.dropout >= 1:
            raise ValueError(
                f"AttributeAttackConfig: need lr > 0 and dropout < 1, got lr={self.lr!r}, dropout={self.dropout!r}"
            )


class AttributeClassifier(torch.nn.Module):
    """Slots [B, S, d] + mask [B, S] -> one logit vector per attribute. With ``config.count`` the trunk also reads
    the row's number of real slots, one-hot over 1..``max_count`` (larger counts share the last position). With
    ``config.standardize`` the pooled vector is standardised (zero mean, unit variance over its d coordinates)
    first."""

    def __init__(self, dim: int, specs: Sequence[AttributeSpec], config: AttributeAttackConfig, *, max_count: int = 1):
        super().__init__()
        if isinstance(max_count, bool) or not isinstance(max_count, int) or max_count < 1:
            raise ValueError(f"max_count must be an integer >= 1, got {max_count!r}")
        self.specs = list(specs)
        self.pooling = config.pooling
        self.max_count = max_count if config.count else 0
        self.standardize = config.standardize
        if self.pooling == "slots":
            self.score = torch.nn.Linear(dim, 1)
        self.hidden = config.hidden
        if config.hidden:
            self.trunk = torch.nn.Sequential(
                torch.nn.Linear(dim + self.max_count, config.hidden),
                torch.nn.GELU(),
                torch.nn.Dropout(config.dropout),
                torch.nn.Linear(config.hidden, config.hidden),
                torch.nn.GELU(),
                torch.nn.Dropout(config.dropout),
            )
        else:  # a linear reader: the heads read the features themselves
            self.trunk = torch.nn.Identity()
        width = config.hidden or dim + self.max_count
        self.heads = torch.nn.ModuleDict({s.name: torch.nn.Linear(width, len(s.classes)) for s in self.specs})

    def pool(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        m = mask.to(x.dtype).unsqueeze(-1)
        if self.pooling == "mean":
            return (x * m).sum(1) / m.sum(1).clamp_min(1.0)
        scores = self.score(x).squeeze(-1).masked_fill(~mask, float("-inf"))
        return (torch.softmax(scores, dim=1).unsqueeze(-1) * x).sum(1)

    def features(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        pooled = self.pool(x, mask)
        if self.standardize:
            pooled = torch.nn.functional.layer_norm(pooled, pooled.shape[-1:])
        if not self.max_count:
            return pooled
        n = mask.sum(1).clamp(1, self.max_count) - 1
        return torch.cat([pooled, torch.nn.functional.one_hot(n, self.max_count).to(pooled.dtype)], dim=-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> dict[str, torch.Tensor]:
        h = self.trunk(self.features(x, mask))
        return {name: head(h) for name, head in self.heads.items()}


def _encode(specs: Sequence[AttributeSpec], targets: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
    """Categorical -> class index (-1: a class unseen in training, ignored by the loss); multi-label -> multi-hot."""
    out = {}
    for s in specs:
        index = {c: i for i, c in enumerate(s.classes)}
        values = attribute_values(targets, s.name, s.kind)
        if s.kind == "categorical":
            out[s.name] = torch.tensor([index.get(v, -1) for v in values], dtype=torch.long)
        else:
            hot = torch.zeros(len(values), len(s.classes))
            for i, v in enumerate(values):
                for x in v:
                    if x in index:
                        hot[i, index[x]] = 1.0
            out[s.name] = hot
    return out


def _check_slots(slots: torch.Tensor, mask: torch.Tensor, n: int | None = None) -> None:
    if slots.ndim != 3 or mask.shape != slots.shape[:2]:
        raise ValueError(f"slots must be [B, S, d] with mask [B, S], got {tuple(slots.shape)} and {tuple(mask.shape)}")
    if mask.dtype != torch.bool or not bool(mask.any(1).all()):
        raise ValueError("mask must be boolean with at least one valid slot per row")
    if n is not None and slots.shape[0] != n:
        raise ValueError(f"{slots.shape[0]} payload rows but {n} targets")


Noise = Callable[[torch.Tensor, torch.Generator], torch.Tensor]


Inputs = tuple[torch.Tensor, torch.Tensor]  # vectors [N, S, d] (zero padding) + mask [N, S]


def noisy_rows(noise: Noise, x: torch.Tensor, mask: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """``x`` [N, S, d] with ``noise`` applied to its real rows (``mask``), float32; padding stays zero."""
    out = torch.zeros_like(x, dtype=torch.float32)
    out[mask] = noise(x[mask], generator).to(torch.float32)
    return out


def _check_variants(variants: Sequence[Inputs], n: int, dim: int) -> list[Inputs]:
    if isinstance(variants, tuple) and len(variants) == 2 and isinstance(variants[0], torch.Tensor):
        raise ValueError("variants must be a sequence of (slots, mask) pairs, got one pair")
    variants = list(variants)
    if not variants:
        raise ValueError("variants must hold at least one (slots, mask) pair")
    for i, pair in enumerate(variants):
        if not isinstance(pair, (tuple, list)) or len(pair) != 2:
            raise ValueError(f"variant {i} must be a (slots, mask) pair, got {type(pair).__name__}")
        _check_slots(*pair, n)
        if pair[0].shape[-1] != dim:
            raise ValueError(f"variant {i} has width {pair[0].shape[-1]}, the training slots {dim}")
    return [(x.to(torch.float32), m) for x, m in variants]


def train_attribute_attacker(
    slots: torch.Tensor,
    mask: torch.Tensor,
    targets: Sequence[Mapping[str, Any]],
    specs: Sequence[AttributeSpec],
    config: AttributeAttackConfig,
    *,
    noise: Noise | None,
    generator: torch.Generator,
    variants: Sequence[Inputs] | Callable[[int], Inputs] | None = None,
) -> AttributeClassifier:
    """Train on the attacker's own payloads: clean ``slots`` (noise-unaware, ``noise=None``) or, noise-aware, the
    real slots passed through ``noise(rows [n, d], generator)`` afresh every epoch (padding stays zero), or
    ``variants``: releases of the same training rows (each a ``(slots, mask)`` pair; e.g. the attacker's own T2T
    runs over its training text, re-encoded), epoch ``e`` training on ``variants[e % len(variants)]`` instead of
    ``slots``; a callable ``variants(e)`` makes epoch e's release when it is needed (fresh payloads every epoch
    without holding them all). ``noise`` and ``variants`` exclude each other. ``generator`` seeds the
    initialisation, the batches and the noise."""
    _check_slots(slots, mask, len(targets))
    if noise is not None and variants is not None:
        raise ValueError("give noise (fresh noise every epoch) or variants (releases of the rows), not both")
    release = None
    if callable(variants):

        def release(epoch: int) -> Inputs:
            return _check_variants([variants(epoch)], len(targets), slots.shape[-1])[0]
    elif variants is not None:
        cycle = _check_variants(variants, len(targets), slots.shape[-1])

        def release(epoch: int) -> Inputs:
            return cycle[epoch % len(cycle)]

    y = _encode(specs, targets)
    torch.manual_seed(int(torch.randint(0, 2**62, (1,), generator=generator)))
    model = AttributeClassifier(slots.shape[-1], specs, config, max_count=max(1, int(mask.sum(1).max())))
    opt = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    clean = slots.to(torch.float32)
    n = clean.shape[0]
    model.train()
    for epoch in range(config.epochs):
        x_all, m_all = clean, mask
        if noise is not None:  # fresh noise on the real slots only (padding stays zero)
            x_all = noisy_rows(noise, clean, mask, generator)
        elif release is not None:
            x_all, m_all = release(epoch)
        order = torch.randperm(n, generator=generator)
        for start in range(0, n, config.batch_size):
            idx = order[start : start + config.batch_size]
            logits = model(x_all[idx], m_all[idx])
            loss = torch.zeros(())
            for s in specs:
                if s.kind == "categorical":
                    target = y[s.name][idx]
                    if bool((target >= 0).any()):
                        loss = loss + torch.nn.functional.cross_entropy(logits[s.name], target, ignore_index=-1)
                else:
                    loss = loss + torch.nn.functional.binary_cross_entropy_with_logits(logits[s.name], y[s.name][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.eval()
    return model


@torch.no_grad()
def predict_attributes(
    model: AttributeClassifier,
    slots: torch.Tensor,
    mask: torch.Tensor,
    *,
    threshold: float = 0.5,
    batch_size: int = 256,
) -> list[dict[str, Any]]:
    """Per row: categorical -> the argmax class; multi-label -> the classes with probability > ``threshold``."""
    _check_slots(slots, mask)
    if not 0.0 < threshold < 1.0:
        raise ValueError(f"threshold must be in (0, 1), got {threshold!r}")
    model.eval()
    rows: list[dict[str, Any]] = [{} for _ in range(slots.shape[0])]
    for start in range(0, slots.shape[0], batch_size):
        logits = model(slots[start : start + batch_size].to(torch.float32), mask[start : start + batch_size])
        for s in model.specs:
            out = logits[s.name]
            for j in range(out.shape[0]):
                if s.kind == "categorical":
                    rows[start + j][s.name] = s.classes[int(out[j].argmax())]
                else:
                    hit = (torch.sigmoid(out[j]) > threshold).nonzero().flatten().tolist()
                    rows[start + j][s.name] = [s.classes[i] for i in hit]
    return rows


def attribute_values(targets: Sequence[Mapping[str, Any]], name: str, kind: Kind) -> list:
    out = []
    for i, t in enumerate(targets):
        if name not in t:
            raise ValueError(f"target {i} has no attribute {name!r} (has {sorted(t)})")
        v = t[name]
        if kind == "categorical" and not isinstance(v, str):
            raise ValueError(f"target {i}: categorical attribute {name!r} must be a string, got {v!r}")
        if kind == "multilabel" and (isinstance(v, str) or not all(isinstance(x, str) for x in v)):
            raise ValueError(f"target {i}: multi-label attribute {name!r} must be a list of strings, got {v!r}")
        out.append(v)
    return out
