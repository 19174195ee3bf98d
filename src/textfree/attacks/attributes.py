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
attacker chosen on a *validation part* carved from the attacker's own training text (:func:`validation_mask`,
:func:`select_attacker`): never on the evaluated prompts.

Attributes come from the data (:class:`~textfree.data.table.AttributeColumn`): categorical values, lists of labels,
or numbers, which :func:`attribute_targets` buckets (given edges, or the quartiles of the attacker's training part:
never of the evaluated part) into a categorical attribute.

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
from typing import Any, Mapping, Sequence

import torch

from ..data.splits import stable_unit_interval
from ..data.table import AttributeColumn
from ..heads.classifier import (  # shared with PPFT's answer head; re-exported as this attack's API
    AttributeAttackConfig,
    AttributeClassifier,
    AttributeSpec,
    Inputs,
    Kind,
    Noise,
    attribute_values,
    noisy_rows,
    predict_attributes,
    train_attribute_attacker,
)
from ..metrics.privacy import multilabel_prf
from .threat import NOISE_AWARE_REQUIRES, ThreatModel, check_grant, register_attack

__all__ = [
    "AttributeSpec",
    "AttributeAttackConfig",
    "AttributeClassifier",
    "train_attribute_attacker",
    "predict_attributes",
    "noisy_rows",
    "ATTRIBUTE_REQUIRES",
    "RELEASE_REQUIRES",
    "attribute_inference_attack",
    "build_specs",
    "prior_predictions",
    "label_predictions",
    "length_predictions",
    "score_attributes",
    "attribute_metric_names",
    "AGE_EDGES",
    "age_bucket",
    "numeric_bucket",
    "numeric_edges",
    "attribute_targets",
    "complete_rows",
    "validation_mask",
    "selection_metric",
    "select_attacker",
]

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


def numeric_bucket(value: int | float, edges: Sequence[float]) -> str:
    """The bucket of a number between increasing ``edges``: integer edges name buckets as :func:`age_bucket` does
    (``"18-29"``, ``"75+"``; below the first edge ``"<18"``); other edges ``"[0.5, 1.5)"``, ``"<0.5"``, ``">=2.5"``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"a numeric attribute's value must be a finite number, got {value!r}")
    integral = all(float(e).is_integer() for e in edges)
    if value < edges[0]:
        return f"<{edges[0]:g}"
    for low, high in zip(edges, edges[1:]):
        if value < high:
            return f"{low:g}-{high - 1:g}" if integral else f"[{low:g}, {high:g})"
    return f"{edges[-1]:g}+" if integral else f">={edges[-1]:g}"


def numeric_edges(values: Sequence[int | float], bins: int = 4) -> tuple[float, ...] | None:
    """Bucket edges at the quantiles of ``values`` (the attacker's training part), ``bins`` buckets at most; None when
    the values take at most ``bins`` distinct values (a binary age, a 1-5 rating): each value is then its own class."""
    distinct = sorted(set(values))
    if len(distinct) <= bins:
        return None
    ordered = sorted(values)
    cuts = [ordered[min(len(ordered) - 1, (len(ordered) * q) // bins)] for q in range(1, bins)]
    edges = tuple(sorted(set(cuts) - {distinct[0]}))
    return edges or (distinct[len(distinct) // 2],)


def attribute_targets(
    columns: Sequence[AttributeColumn], train: Sequence[Mapping[str, Any]], *others: Sequence[Mapping[str, Any]]
) -> tuple[dict[str, Kind], list[list[dict[str, Any]]]]:
    """Raw attribute values (rows with every attribute present: :func:`complete_rows`) -> the attack's targets.

    Categorical values stay strings, multi-label ones lists of strings; numeric ones become buckets: the column's
    ``edges``, else :func:`numeric_edges` of the *training* rows (``train``), applied to every part. Returns the kinds
    (numeric is categorical once bucketed) and ``[train targets, *other parts' targets]``."""
    kinds: dict[str, Kind] = {}
    convert = {}
    for a in columns:
        kinds[a.name] = "multilabel" if a.kind == "multilabel" else "categorical"
        if a.kind == "numeric":
            edges = a.edges or numeric_edges([row[a.name] for row in train])
            convert[a.name] = (lambda v: f"{v:g}") if edges is None else (lambda v, e=edges: numeric_bucket(v, e))
        elif a.kind == "multilabel":
            convert[a.name] = lambda v: [str(x) for x in v]
        else:
            convert[a.name] = str
    parts = [[{name: f(row[name]) for name, f in convert.items()} for row in part] for part in (train, *others)]
    return kinds, parts


def complete_rows(rows: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[int]:
    """Indices of the rows that hold a value for every attribute in ``names`` (``None``: the file's cell was empty)."""
    return [i for i, row in enumerate(rows) if all(row.get(n) is not None for n in names)]


def validation_mask(texts: Sequence[str], share: float, salt: str = "textfree-attribute-validation") -> list[bool]:
    """Which of the attacker's training texts form its validation part: those whose stable hash falls below ``share``
    (the same text always lands on the same side; repeated texts never straddle the parts)."""
    if not 0.0 < share < 1.0:
        raise ValueError(f"the validation share must be in (0, 1), got {share!r}")
    return [stable_unit_interval(t, salt) < share for t in texts]


def selection_metric(spec: AttributeSpec) -> str:
    """The score an attacker is chosen on for one attribute: accuracy (categorical) or micro F1 (multi-label)."""
    return f"{spec.name}_accuracy" if spec.kind == "categorical" else f"{spec.name}_f1"


def select_attacker(scores: Mapping[str, Mapping[str, float]], metric: str) -> str:
    """The attacker (a key of ``scores``: attacker name -> its *validation* scores) with the highest ``metric``; ties
    go to the first in order. The evaluated prompts never enter the choice."""
    if not scores:
        raise ValueError("select_attacker: no attackers")
    best = None
    for name, s in scores.items():
        v = s[metric]
        if best is None or (not math.isnan(v) and (math.isnan(best[1]) or v > best[1])):
            best = (name, v)
    return best[0]


def build_specs(targets: Sequence[Mapping[str, Any]], kinds: Mapping[str, Kind]) -> list[AttributeSpec]:
    """Specs from *training* targets: classes are the values seen there, most frequent first (ties by name)."""
    if not targets:
        raise ValueError("build_specs: no training targets")
    specs = []
    for name, kind in kinds.items():
        values = attribute_values(targets, name, kind)
        counts = Counter(values) if kind == "categorical" else Counter(x for v in values for x in set(v))
        if not counts:
            raise ValueError(f"build_specs: attribute {name!r} has no label in the training targets")
        specs.append(AttributeSpec(name, kind, tuple(sorted(counts, key=lambda c: (-counts[c], c)))))
    return specs


def _rule(spec: AttributeSpec, values: list) -> Any:
    """The best constant guess from ``values``: the majority class, or the labels in more than half of the rows."""
    if spec.kind == "categorical":
        counts = Counter(values)
        return min(counts, key=lambda c: (-counts[c], c))
    counts = Counter(x for v in values for x in set(v))
    return sorted(c for c, m in counts.items() if m > len(values) / 2)


def prior_predictions(
    specs: Sequence[AttributeSpec], train_targets: Sequence[Mapping[str, Any]], n: int
) -> list[dict[str, Any]]:
    """The no-input reference: the same constant guess for each of ``n`` rows, from the training marginals."""
    guess = {s.name: _rule(s, attribute_values(train_targets, s.name, s.kind)) for s in specs}
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
        label: {
            s.name: _rule(s, [attribute_values([train_targets[i]], s.name, s.kind)[0] for i in rows]) for s in specs
        }
        for label, rows in by_label.items()
    }
    return [dict(guesses.get(label, prior)) for label in test_labels]


def length_predictions(
    specs: Sequence[AttributeSpec],
    train_targets: Sequence[Mapping[str, Any]],
    train_mask: torch.Tensor,
    test_mask: torch.Tensor,
) -> list[dict[str, Any]]:
    """What the *number* of released units (slots, tokens: each row's count in a [N, S] mask) alone reveals: the
    constant guess within the training rows of the same count (:func:`label_predictions` with counts as labels). The
    mechanism hides each unit's content, not how many units there are."""
    counts = [[str(int(n)) for n in m.sum(dim=1).tolist()] for m in (train_mask, test_mask)]
    return label_predictions(specs, train_targets, *counts)


def score_attributes(
    specs: Sequence[AttributeSpec], predicted: Sequence[Mapping[str, Any]], gold: Sequence[Mapping[str, Any]]
) -> dict[str, float]:
    """``{name}_accuracy`` per categorical attribute; ``{name}_recall``, ``_precision``, ``_f1`` (micro) per multi-label
    one. Gold labels the attacker never saw in training still count (as misses)."""
    if len(predicted) != len(gold) or not gold:
        raise ValueError(f"score_attributes: {len(predicted)} predictions for {len(gold)} gold rows (need equal, > 0)")
    out: dict[str, float] = {}
    for s in specs:
        p, g = attribute_values(predicted, s.name, s.kind), attribute_values(gold, s.name, s.kind)
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
        names += (
            [f"{name}_accuracy"] if kind == "categorical" else [f"{name}_recall", f"{name}_precision", f"{name}_f1"]
        )
    return tuple(names)


@register_attack(
    "attribute_inference",
    requires=RELEASE_REQUIRES["text"],
    description="MLP / slot-attention classifier of attributes, trained on the attacker's own releases",
)
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
    model = train_attribute_attacker(
        *train, train_targets, specs, config, noise=noise, generator=generator, variants=variants
    )
    return predict_attributes(model, *observed)
