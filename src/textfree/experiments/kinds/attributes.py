"""Cell kind ``attribute_inference``: what PPFT payloads reveal about a prompt's attributes (PPFT Table 3, RAPT IV-A2).

The client releases PPFT slots (encoder -> k-pooling -> unit norm -> the cell's mechanism -> renormalise) of each
*evaluated* prompt. The attacker holds in-domain text with attributes (the *train* part of the PPFT split; on
Trustpilot its train file) and query access to the encoder, makes its own payloads from that text and trains an
attribute classifier (:mod:`textfree.attacks.attributes`): every combination of ``params.attackers`` (``mean``:
2-layer MLP on the mean slot; ``slots``: attention over slots) and ``params.training`` (``unaware``: trained on clean
slots; ``aware``: trained on noisy slots of the same mechanism, fresh noise every epoch, which needs
``knows_parameters`` in ``attack.threat``). Evaluated prompts are never trained on (repeated private texts dropped).

Attributes: Pri-DDX sex, age bucket (:data:`~textfree.attacks.attributes.AGE_EDGES`), symptoms and antecedents
(multi-label); Trustpilot gender and age category.

Metrics, for each attribute score ``m`` (``sex_accuracy``, ``symptoms_recall``, ``symptoms_f1``, ...):

* ``{m}_{attacker}_{training}``: one attacker, e.g. ``symptoms_recall_slots_aware``;
* ``{m}_best``: the largest over the attackers that ran (reports lead with the strongest; chosen on the evaluated
  prompts, so slightly optimistic for the attacker, which is the conservative side for an auditor);
* ``{m}_prior``: the no-input reference (training marginals); ``{m}_label``: what the task's correct answer alone
  reveals (Pri-DDX: the diagnosis; NaN where the dataset has no task label);
* ``{m}_excess``: ``{m}_best`` minus the larger reference: the leak the mechanism is responsible for.

Also the formal guarantee beside the empirical figures: ``slot_epsilon`` (one slot: 2*eps for L2-Laplace on unit
slots), ``prompt_epsilon`` (mean over prompts of slots x slot_epsilon) and ``prompt_epsilon_max``;
``slots_per_prompt``, ``cosine`` (mean clean-vs-released slot cosine), ``n_train``, ``n_test``.

Cell::

    kind: attribute_inference
    dataset: pri-ddx                  # or trustpilot
    encoder: default                  # or a PPFT run's encoder/, e.g. runs/stage1/encoder
    mechanism: {name: l2_laplace, epsilon: 75}
    params: {k: 4, attackers: [mean, slots], training: [unaware, aware], epochs: 150}
    attack: {threat: {encoder_queries: true, training_text: in_domain, knows_mechanism: true, knows_parameters: true}}
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from ...attacks.attributes import (
    ATTRIBUTE_REQUIRES,
    AttributeAttackConfig,
    age_bucket,
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    prior_predictions,
    score_attributes,
)
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...mechanisms import SlotPrivatization, mechanism_from_dict
from ...mechanisms.transforms import l2_normalize
from ...rng import seeded_generator
from ..cell import CellError
from ..inputs import load_cell_encoder, record_private_text
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat
from ._threads import torch_threads

__all__ = ["attribute_inference", "ATTRIBUTE_KINDS", "ATTRIBUTE_INFERENCE_METRICS", "ATTRIBUTE_INFERENCE_PARAMS"]

ENCODE_BATCH = 32
ATTACKERS = ("mean", "slots")
TRAINING = ("unaware", "aware")

#: The attributes of each supported dataset and their kinds.
ATTRIBUTE_KINDS: dict[str, dict[str, str]] = {
    "pri-ddx": {"sex": "categorical", "age": "categorical", "symptoms": "multilabel", "antecedents": "multilabel"},
    "trustpilot": {"gender": "categorical", "age_cat": "categorical"},
}
_ALIASES = {"ddx": "pri-ddx", "pri-ddx": "pri-ddx", "pri-ddxplus": "pri-ddx", "trustpilot": "trustpilot"}


def _scores() -> tuple[str, ...]:
    return tuple(dict.fromkeys(m for kinds in ATTRIBUTE_KINDS.values() for m in attribute_metric_names(kinds)))


ATTRIBUTE_INFERENCE_METRICS = tuple(
    f"{m}_{suffix}"
    for m in _scores()
    for suffix in [f"{a}_{t}" for a in ATTACKERS for t in TRAINING] + ["best", "prior", "label", "excess"]
) + ("slot_epsilon", "prompt_epsilon", "prompt_epsilon_max", "slots_per_prompt", "cosine", "n_train", "n_test")

ATTRIBUTE_INFERENCE_PARAMS = {
    "k": "tokens per pooled slot (integer >= 1; default 4)",
    "attackers": "attacker architectures: mean (MLP on the mean slot) and/or slots (attention over slots); default both",
    "training": "unaware (trained on clean slots) and/or aware (on noisy slots, needs knows_parameters); default both",
    "epochs": "training epochs of each attacker (default 150)",
    "hidden": "width of the attacker's 2-layer MLP (default 256)",
    "train_limit": "use at most this many attacker training prompts (default: all)",
    "threads": "torch threads while the cell runs (default: unchanged)",
}


def _dataset(cell: Any) -> str:
    name = _ALIASES.get(str(cell.dataset).lower())
    if name is None:
        raise CellError(f"attribute_inference supports datasets {sorted(ATTRIBUTE_KINDS)}, got {cell.dataset!r}", field="dataset")
    return name


def _list_param(params: dict, name: str, allowed: tuple[str, ...]) -> list[str]:
    value = params.get(name, list(allowed))
    if not isinstance(value, list) or not value or any(v not in allowed for v in value) or len(set(value)) != len(value):
        raise CellError(f"{name} must be a non-empty list of distinct values from {list(allowed)}, got {value!r}", field=f"params.{name}")
    return value


def _int_param(params: dict, name: str, default: int | None) -> int | None:
    value = params.get(name, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise CellError(f"{name} must be an integer >= 1, got {value!r}", field=f"params.{name}")
    return value


@dataclass(frozen=True)
class _Settings:
    k: int
    attackers: list[str]
    training: list[str]
    config: dict[str, int]
    train_limit: int | None
    threads: int | None
    threat: ThreatModel


def _settings(resolved: Any) -> _Settings:
    p = resolved.params
    bad = sorted(set(p) - set(ATTRIBUTE_INFERENCE_PARAMS))
    if bad:
        raise CellError(f"unknown params {bad}; attribute_inference takes {sorted(ATTRIBUTE_INFERENCE_PARAMS)}", field="params")
    training = _list_param(p, "training", TRAINING)
    needs = ATTRIBUTE_REQUIRES.union(NOISE_AWARE_REQUIRES) if "aware" in training else ATTRIBUTE_REQUIRES
    threat = granted_threat(resolved.attack, "attribute_inference", "attribute_inference", needs,
                            "; grant more in `attack.threat` or drop training 'aware'")
    return _Settings(
        k=_int_param(p, "k", 4),
        attackers=_list_param(p, "attackers", ATTACKERS),
        training=training,
        config={"epochs": _int_param(p, "epochs", 150), "hidden": _int_param(p, "hidden", 256)},
        train_limit=_int_param(p, "train_limit", None),
        threads=_int_param(p, "threads", None),
        threat=threat,
    )


def _validate(cell: Any, points: list[dict]) -> None:
    _dataset(cell)
    if cell.mechanism is None:
        raise CellError("the attribute_inference kind needs a `mechanism` (e.g. {name: l2_laplace, epsilon: 75})", field="mechanism")
    for point in points:
        _settings(cell.resolve(point))


# ------------------------------------------------------------------------------------------------- inputs
def _ddx_target(record: Any) -> dict[str, Any]:
    a = record.attributes
    return {"sex": str(a["sex"]), "age": age_bucket(a["age"]), "symptoms": list(a["symptoms"]),
            "antecedents": list(a["antecedents"])}


@dataclass
class _Part:
    texts: list[str]
    targets: list[dict[str, Any]]
    labels: list[str] | None


def _dedupe(texts: list[str], targets: list[dict], labels: list[str] | None) -> _Part:
    seen: set[str] = set()
    keep = [i for i, t in enumerate(texts) if t.strip() and not (t in seen or seen.add(t))]
    return _Part([texts[i] for i in keep], [targets[i] for i in keep], None if labels is None else [labels[i] for i in keep])


def _parts(dataset: str) -> tuple[_Part, _Part]:
    """(attacker's training part, evaluated part), repeated and empty texts dropped."""
    if dataset == "pri-ddx":
        from ...data import ppft_split

        split = ppft_split("ddx")
        parts = []
        for name in ("train", "heldout"):
            records = split[name]
            parts.append(_dedupe([record_private_text(r) for r in records], [_ddx_target(r) for r in records],
                                 [r.options[r.answer_index] for r in records]))
        return parts[0], parts[1]
    from ...data import load_dataset

    parts = []
    for name in ("train", "test"):
        records = load_dataset("trustpilot", split=name)
        parts.append(_dedupe([r.text for r in records],
                             [{"gender": str(r.attributes["gender"]), "age_cat": str(r.attributes["age_cat"])} for r in records], None))
    train, test = parts
    overlap = set(train.texts) & set(test.texts)
    if overlap:  # never evaluate on a text the attacker trained on
        keep = [i for i, t in enumerate(train.texts) if t not in overlap]
        train = _Part([train.texts[i] for i in keep], [train.targets[i] for i in keep], None)
    return train, test


def _encode(encoder: Any, texts: list[str], k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean unit slots [N, S, d] (zero padding) + slot mask [N, S]: the client's payload without noise."""
    from ...privatizer import Privatizer

    payload = Privatizer(encoder, None, k, batch_size=ENCODE_BATCH).privatize(texts)
    return payload.vectors, payload.mask


def _inputs(cell: Any, k: int, train_limit: int | None, context: RunContext):
    dataset = _dataset(cell)
    train, test = context.cached("parts", lambda: _parts(dataset))
    if train_limit is not None:
        train = _Part(train.texts[:train_limit], train.targets[:train_limit],
                      None if train.labels is None else train.labels[:train_limit])

    def encode():
        encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
        context.logger.info("attribute_inference: encoding %d + %d texts with %s, k=%d", len(train.texts), len(test.texts), encoder.name, k)
        return _encode(encoder, train.texts, k), _encode(encoder, test.texts, k)

    (train_x, train_m), (test_x, test_m) = context.cached(("slots", k, train_limit), encode)
    return dataset, train, test, (train_x, train_m), (test_x, test_m)


# ------------------------------------------------------------------------------------------------ the kind
@register_cell_kind(
    "attribute_inference",
    metrics=ATTRIBUTE_INFERENCE_METRICS,
    params=ATTRIBUTE_INFERENCE_PARAMS,
    validate=_validate,
    help="Attribute classifiers (mean MLP, slot attention; noise-unaware and noise-aware) on PPFT payloads, "
         "beside the prior and the label-only reference.",
)
def attribute_inference(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    resolved = cell.resolve(point)
    s = _settings(resolved)
    with torch_threads(s.threads):
        return _run(cell, resolved, s, seed, context)


def _run(cell: Any, resolved: Any, s: _Settings, seed: int, context: RunContext) -> dict[str, float]:
    mech = mechanism_from_dict(resolved.mechanism)
    slot_privacy = SlotPrivatization(noise=mech, k=s.k)
    dataset, train, test, (train_x, train_m), (test_x, test_m) = _inputs(cell, s.k, s.train_limit, context)
    kinds = ATTRIBUTE_KINDS[dataset]
    specs = build_specs(train.targets, kinds)

    def noise(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        return l2_normalize(mech.sample(x.to(torch.float64), generator=generator)).to(torch.float32)

    released = torch.zeros_like(test_x)
    released[test_m] = noise(test_x[test_m], seeded_generator(seed, warn=False))
    slots = test_m.sum(1).to(torch.float64)
    slot_eps = slot_privacy.slot_loss().epsilon
    out: dict[str, float] = {
        "slot_epsilon": slot_eps,
        "prompt_epsilon": float((slots * slot_eps).mean()),
        "prompt_epsilon_max": float((slots * slot_eps).max()),
        "slots_per_prompt": float(slots.mean()),
        "cosine": float((released * test_x).sum(-1)[test_m].mean()),
        "n_train": float(len(train.texts)),
        "n_test": float(len(test.texts)),
    }
    scores = attribute_metric_names(kinds)
    for attacker in s.attackers:
        for training in s.training:
            config = AttributeAttackConfig(pooling=attacker, **s.config)
            predicted = attribute_inference_attack(
                (train_x, train_m), train.targets, (released, test_m), specs, config, threat=s.threat,
                noise=noise if training == "aware" else None, generator=seeded_generator(seed + 7919, warn=False))
            for m, v in score_attributes(specs, predicted, test.targets).items():
                out[f"{m}_{attacker}_{training}"] = v
            context.logger.info("%s/%s: %s", attacker, training, {m: round(out[f"{m}_{attacker}_{training}"], 3) for m in scores})
    prior = score_attributes(specs, prior_predictions(specs, train.targets, len(test.texts)), test.targets)
    label = (score_attributes(specs, label_predictions(specs, train.targets, train.labels, test.labels), test.targets)
             if train.labels is not None else {m: math.nan for m in scores})
    for m in scores:
        out[f"{m}_best"] = max(out[f"{m}_{a}_{t}"] for a in s.attackers for t in s.training)
        out[f"{m}_prior"], out[f"{m}_label"] = prior[m], label[m]
        reference = max(prior[m], label[m]) if not math.isnan(label[m]) else prior[m]
        out[f"{m}_excess"] = out[f"{m}_best"] - reference
    return out
