"""Attribute inference from released slots (RAPT IV-A2; PPFT Table 3), with the two references that make it readable.

An attacker that sees payloads (one or more unit vectors per prompt) trains a classifier on payloads it made
itself from in-domain text (query access to the encoder) and predicts each prompt's attributes: categorical ones
(sex, age bucket; Trustpilot gender, age category) and multi-label ones (symptoms, antecedents).

Two architectures (:class:`AttributeAttackConfig.pooling`):

* ``"mean"``: the mean of the observed vectors -> a 2-layer MLP -> one head per attribute (RAPT IV-A2);
* ``"slots"``: attention over the slots (a learned query scores each slot; padding masked) -> the same MLP. A prompt
  says different things in different slots; the mean blurs them.

Two training regimes: *noise-unaware* (trained on clean slots, tested on noisy ones) and *noise-aware* (trained on
slots noised by the same mechanism, fresh noise every epoch, or cycling over precomputed releases of its training text
(``variants``: T2T text re-encoded by the attacker); it needs the mechanism and its parameters). Reports lead with the
strongest attacker.

What is released (``release``) decides what the attacker needs to make its own training inputs
(:data:`RELEASE_REQUIRES`): PPFT ``slots`` (query access to the encoder), noisy ``tokens`` (the embedding table's
rows, which it noises itself) or privatized ``text`` (T2T / PCT2T: it encodes the text with an encoder of its own
choosing, so it needs no access to the client's). All need in-domain text with attributes.

References (:func:`prior_predictions`, :func:`label_predictions`): what the attacker gets with *no* input (the
training marginals: majority class, labels present in more than half the training rows) and what the task's correct
answer alone reveals (the same rule within the training rows sharing the record's label: on Pri-DDX the diagnosis
implies most symptoms). The leak the mechanism is responsible for is the excess over the larger reference.

Scores (:func:`score_attributes`): accuracy for categorical attributes; micro recall (PPFT Table 3's attribute
recall), precision and F1 for multi-label ones. Recall alone rewards predicting every label; read it with F1.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any, Callable, Literal, Mapping, Sequence

import torch

from ..metrics.privacy import multilabel_prf
from .threat import NOISE_AWARE_REQUIRES, ThreatModel, check_grant, register_attack

__all__ = [
    "ATTRIBUTE_REQUIRES",
    "RELEASE_REQUIRES",
    "attribute_inference_attack",
    "AttributeSpec",
    "AttributeAttackConfig",
    "AttributeClassifier",
    "build_specs",
    "train_attribute_attacker",
    "predict_attributes",
    "prior_predictions",
    "label_predictions",
    "length_predictions",
    "noisy_rows",
    "score_attributes",
    "attribute_metric_names",
    "AGE_EDGES",
    "age_bucket",
]

Kind = Literal["categorical", "multilabel"]

#: The attacker makes its own training payloads: query access to the encoder and in-domain text with attributes.
#: Noise-aware training also needs the mechanism and its parameters.
ATTRIBUTE_REQUIRES = ThreatModel(encoder_queries=True, training_text="in_domain")

#: What the attacker needs to make its own training inputs, per kind of release (noise-aware training adds
#: :data:`~textfree.attacks.threat.NOISE_AWARE_REQUIRES`): PPFT slots need the encoder; noisy token embeddings the
#: table's rows; privatized text only text (it encodes it with an encoder it picks itself).
RELEASE_REQUIRES = {
    "slots": ATTRIBUTE_REQUIRES,
    "tokens": ThreatModel(embedding_table=True, training_text="in_domain"),
    "text": ThreatModel(training_text="in_domain"),
}

#: Age buckets for Pri-DDX (years): [0,18), [18,30), [30,45), [45,60), [60,75), [75, inf).
AGE_EDGES = (18, 30, 45, 60, 75)


def age_bucket(age: int | float, edges: Sequence[int] = AGE_EDGES) -> str:
    """The bucket label of an age, e.g. ``age_bucket(46) == "45-59"``, ``age_bucket(80) == "75+"``."""
    if isinstance(age, bool) or not isinstance(age, (int, float)) or not math.isfinite(age) or age < 0:
        raise ValueError(f"age must be a finite number >= 0, got {age!r}")
    low = 0
    for edge in edges:
        if age < edge:
            return f"{low}-{edge - 1}"
        low = edge
    return f"{low}+"


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
            raise ValueError(f"AttributeSpec {self.name!r}: kind must be 'categorical' or 'multilabel', got {self.kind!r}")
        if len(self.classes) < 1 or len(set(self.classes)) != len(self.classes):
            raise ValueError(f"AttributeSpec {self.name!r}: classes must be non-empty and distinct, got {self.classes!r}")


def _values(targets: Sequence[Mapping[str, Any]], name: str, kind: Kind) -> list:
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


def build_specs(targets: Sequence[Mapping[str, Any]], kinds: Mapping[str, Kind]) -> list[AttributeSpec]:
    """Specs from *training* targets: classes are the values seen there, most frequent first (ties by name)."""
    if not targets:
        raise ValueError("build_specs: no training targets")
    specs = []
    for name, kind in kinds.items():
        values = _values(targets, name, kind)
        counts = Counter(values) if kind == "categorical" else Counter(x for v in values for x in set(v))
        if not counts:
            raise ValueError(f"build_specs: attribute {name!r} has no label in the training targets")
        specs.append(AttributeSpec(name, kind, tuple(sorted(counts, key=lambda c: (-counts[c], c)))))
    return specs


@dataclass(frozen=True)
class AttributeAttackConfig:
    """An attribute attacker: architecture and training."""

    pooling: Literal["mean", "slots"] = "mean"  # mean of the vectors (RAPT) or attention over slots
    count: bool = False  # also read the number of real vectors (one-hot, up to the training maximum) beside the pooled one
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
            raise ValueError(f"AttributeAttackConfig: need lr > 0 and dropout < 1, got lr={self.lr!r}, dropout={self.dropout!r}")


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
                torch.nn.Linear(dim + self.max_count, config.hidden), torch.nn.GELU(), torch.nn.Dropout(config.dropout),
                torch.nn.Linear(config.hidden, config.hidden), torch.nn.GELU(), torch.nn.Dropout(config.dropout),
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
        values = _values(targets, s.name, s.kind)
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
def predict_attributes(model: AttributeClassifier, slots: torch.Tensor, mask: torch.Tensor, *, threshold: float = 0.5,
                       batch_size: int = 256) -> list[dict[str, Any]]:
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


def _rule(spec: AttributeSpec, values: list) -> Any:
    """The best constant guess from ``values``: the majority class, or the labels in more than half of the rows."""
    if spec.kind == "categorical":
        counts = Counter(values)
        return min(counts, key=lambda c: (-counts[c], c))
    counts = Counter(x for v in values for x in set(v))
    return sorted(c for c, m in counts.items() if m > len(values) / 2)


def prior_predictions(specs: Sequence[AttributeSpec], train_targets: Sequence[Mapping[str, Any]], n: int) -> list[dict[str, Any]]:
    """The no-input reference: the same constant guess for each of ``n`` rows, from the training marginals."""
    guess = {s.name: _rule(s, _values(train_targets, s.name, s.kind)) for s in specs}
    return [dict(guess) for _ in range(n)]


def label_predictions(
    specs: Sequence[AttributeSpec],
    train_targets: Sequence[Mapping[str, Any]],
    train_labels: Sequence[str],
    test_labels: Sequence[str],
) -> list[dict[str, Any]]:
    """What the task's answer alone reveals: the constant guess within the training rows of the same label
    (a label unseen in training falls back to the prior)."""
    if len(train_labels) != len(train_targets):
        raise ValueError(f"{len(train_labels)} training labels for {len(train_targets)} training targets")
    by_label: dict[str, list[int]] = defaultdict(list)
    for i, label in enumerate(train_labels):
        by_label[label].append(i)
    prior = prior_predictions(specs, train_targets, 1)[0]
    guesses = {
        label: {s.name: _rule(s, [_values([train_targets[i]], s.name, s.kind)[0] for i in rows]) for s in specs}
        for label, rows in by_label.items()
    }
    return [dict(guesses.get(label, prior)) for label in test_labels]


def length_predictions(
    specs: Sequence[AttributeSpec], train_targets: Sequence[Mapping[str, Any]], train_mask: torch.Tensor, test_mask: torch.Tensor
) -> list[dict[str, Any]]:
    """What the *number* of released units (slots, tokens: each row's count in a [N, S] mask) alone reveals: the
    constant guess within the training rows of the same count (:func:`label_predictions` with counts as labels). The
    mechanism hides each unit's content, not how many units there are."""
    counts = [[str(int(n)) for n in m.sum(dim=1).tolist()] for m in (train_mask, test_mask)]
    return label_predictions(specs, train_targets, *counts)


def score_attributes(specs: Sequence[AttributeSpec], predicted: Sequence[Mapping[str, Any]],
                     gold: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``{name}_accuracy`` per categorical attribute; ``{name}_recall``, ``_precision``, ``_f1`` (micro) per multi-label
    one. Gold labels the attacker never saw in training still count (as misses)."""
    if len(predicted) != len(gold) or not gold:
        raise ValueError(f"score_attributes: {len(predicted)} predictions for {len(gold)} gold rows (need equal, > 0)")
    out: dict[str, float] = {}
    for s in specs:
        p, g = _values(predicted, s.name, s.kind), _values(gold, s.name, s.kind)
        if s.kind == "categorical":
            out[f"{s.name}_accuracy"] = sum(a == b for a, b in zip(p, g)) / len(g)
        else:
            prf = multilabel_prf([set(x) for x in p], [set(x) for x in g])
            out[f"{s.name}_recall"], out[f"{s.name}_precision"], out[f"{s.name}_f1"] = prf.recall, prf.precision, prf.f1
    return out


def attribute_metric_names(kinds: Mapping[str, Kind]) -> tuple[str, ...]:
    """The score names :func:`score_attributes` returns for attributes of these kinds."""
    names: list[str] = []
    for name, kind in kinds.items():
        names += [f"{name}_accuracy"] if kind == "categorical" else [f"{name}_recall", f"{name}_precision", f"{name}_f1"]
    return tuple(names)


@register_attack("attribute_inference", requires=RELEASE_REQUIRES["text"],
                 description="MLP / slot-attention classifier of attributes, trained on the attacker's own releases")
def attribute_inference_attack(
    train: Inputs,
    train_targets: Sequence[Mapping[str, Any]],
    observed: Inputs,
    specs: Sequence[AttributeSpec],
    config: AttributeAttackConfig,
    *,
    threat: ThreatModel,
    noise: Noise | None,
    generator: torch.Generator,
    variants: Sequence[Inputs] | None = None,
    release: str = "slots",
) -> list[dict[str, Any]]:
    """Train on ``train`` = (clean slots, mask) made from in-domain text, then predict ``observed`` releases.

    Noise-aware when ``noise`` (fresh noise every epoch) or ``variants`` (precomputed releases of the training text,
    cycled over epochs) is given: either must be the mechanism's own, so the grant must include its parameters.
    ``release`` (``slots``, ``tokens`` or ``text``) names what the client released, hence how the attacker made its
    training inputs and what it needs (:data:`RELEASE_REQUIRES`)."""
    if release not in RELEASE_REQUIRES:
        raise ValueError(f"release must be one of {sorted(RELEASE_REQUIRES)}, got {release!r}")
    requires = RELEASE_REQUIRES[release]
    if noise is not None or variants is not None:
        requires = requires.union(NOISE_AWARE_REQUIRES)
    check_grant("attribute_inference", requires, threat)
    model = train_attribute_attacker(*train, train_targets, specs, config, noise=noise, generator=generator, variants=variants)
    return predict_attributes(model, *observed)
