"""Cell kind ``attribute_inference``: what a release reveals about a prompt's attributes (PPFT Table 3, RAPT IV-A2).

The client releases each *evaluated* prompt in one of four forms (``params.release``):

* ``slots`` (default): PPFT slots (encoder -> k-pooling -> unit norm -> the cell's ``mechanism`` -> renormalise);
  with ``params.pad_to`` the client pads every prompt to that many slots (filler slots noised like its own), so the
  count tells nothing and the ``length`` reference falls to the prior; with ``params.repeat_mean`` every slot of a
  prompt is its unit mean slot (after ``params.center``'s map), as a ``repeat_mean`` model's client sends it;
  with ``params.max_private_tokens`` each prompt is cut to that many encoder tokens first, as a PPFT run's client
  with the same setting (default: the encoder's own limit);
* ``tokens``: the SnD / RAPT client's input embeddings: every token's row of the ``encoder``'s embedding table
  (default MiniLM's), its first ``params.max_tokens`` own tokens inside the special tokens, each noised independently
  by the cell's ``mechanism`` (``l2_laplace``, ``gaussian``, ``clipped``; no renormalisation);
* ``t2t`` / ``pct2t``: privatized text (RAPT's word substitution; PCT2T keeps the part of speech), with the mechanism
  in ``params`` as in ``substitution_inversion`` (``eta``, ``pos``, ``table``, ``tagger``; no `mechanism` section).

The attacker holds in-domain text with attributes (the *train* part of the PPFT split; on Trustpilot its train file),
makes its own training inputs from it and trains an attribute classifier (:mod:`textfree.attacks.attributes`): every
combination of ``params.attackers`` (``mean``: 2-layer MLP on the mean vector; ``slots``: attention over the vectors;
``mean_count``, ``slots_count``: the same, also reading the number of vectors) and ``params.training``:

* ``unaware``: trained on clean inputs: clean slots (query access to the encoder), clean token embeddings (the
  table), or the clean slots of its training text encoded with the cell's ``encoder`` (text releases: the attacker
  encodes the released text itself with an encoder it picks, so it needs no access to the client's);
* ``aware``: trained on the same mechanism's releases of its training text: noisy slots or noisy token embeddings
  with fresh noise every epoch, or (text) ``params.rounds`` T2T runs over its training text, each encoded once, the
  epochs cycling over them. Needs ``knows_mechanism`` and ``knows_parameters`` in ``attack.threat``.

Threat (:data:`~textfree.attacks.attributes.RELEASE_REQUIRES`): in-domain training text, plus ``encoder_queries``
(slots) or ``embedding_table`` (tokens). Evaluated prompts are never trained on (repeated private texts dropped);
``limit`` keeps the first that many of them.

Attributes: Pri-DDX sex, age bucket (:data:`~textfree.attacks.attributes.AGE_EDGES`), symptoms and antecedents
(multi-label); Trustpilot gender and age category. With ``params.target: answer`` (Pri-DDX or Pri-SLJA) the one
attribute is the task's correct answer (the diagnosis, the charge): what a reader of the release learns of it, which
is both a leak (the diagnosis is the most sensitive attribute) and a measure of what a PPFT server could use at best
with a classifier of this size; there is no label-only reference then (``answer_accuracy_label`` is NaN).

Metrics, for each attribute score ``m`` (``sex_accuracy``, ``symptoms_recall``, ``symptoms_f1``, ...):

* ``{m}_{attacker}_{training}``: one attacker, e.g. ``symptoms_recall_slots_aware``;
* ``{m}_best``: the largest over the attackers that ran (reports lead with the strongest; chosen on the evaluated
  prompts, so slightly optimistic for the attacker, which is the conservative side for an auditor);
* ``{m}_prior``: the no-input reference (training marginals); ``{m}_label``: what the task's correct answer alone
  reveals (Pri-DDX: the diagnosis; NaN where the dataset has no task label); ``{m}_length``: what the *number* of
  released units (slots, tokens) alone reveals, the same rule within the training rows of that count: the mechanism
  hides the content of each unit, not how many there are (reported beside; the excess does not subtract it);
* ``{m}_excess``: ``{m}_best`` minus the larger reference: the leak the mechanism is responsible for.

Also the formal guarantee beside the empirical figures, under the name the cross matrix puts on its unit-eps axis,
and ``prompt_epsilon`` (the mean over prompts of its units x the unit's loss) and ``prompt_epsilon_max``:

* slots: ``slot_epsilon`` (one slot: 2 eps for L2-Laplace on unit slots), ``slots_per_prompt``, ``cosine`` (mean
  clean-vs-released slot cosine);
* tokens: ``token_epsilon`` / ``token_delta`` (one token: the loss at the table's diameter), ``epsilon_unit``,
  ``table_diameter``, ``tokens_per_prompt`` (the prompt's own tokens; the special tokens are the same in every prompt
  and cost nothing), ``cosine`` (mean clean-vs-released token cosine);
* t2t / pct2t: ``word_epsilon`` (eta x the table's diameter), per prompt over its substituted words,
  ``replacement_rate``, ``kept_rate`` (words outside the table, released verbatim, not covered).

And ``n_train``, ``n_test``.

Cells::

    kind: attribute_inference
    dataset: pri-ddx                  # or trustpilot
    encoder: default                  # or a PPFT run's encoder/, e.g. runs/stage1/encoder
    mechanism: {name: l2_laplace, epsilon: 75}
    params: {k: 4, attackers: [mean, slots], training: [unaware, aware], epochs: 150}
    attack: {threat: {encoder_queries: true, training_text: in_domain, knows_mechanism: true, knows_parameters: true}}

    # token noise: the table's rows, noised per token
    mechanism: {name: gaussian, sigma: 0.3, delta: 1.0e-5}
    params: {release: tokens, max_tokens: 128}
    attack: {threat: {embedding_table: true, training_text: in_domain, knows_mechanism: true, knows_parameters: true}}

    # T2T text (no mechanism section); pct2t takes pos: default or a list of categories
    params: {release: t2t, eta: 75, rounds: 3, k: 4}
    attack: {threat: {training_text: in_domain, knows_mechanism: true, knows_parameters: true}}
"""

from __future__ import annotations

import math
from typing import Any

from ...attacks.attributes import (
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    length_predictions,
    prior_predictions,
    score_attributes,
)
from ...heads.classifier import AttributeAttackConfig
from ...rng import seeded_generator
from ..registry import RunContext, register_cell_kind
from ._attribute_params import (  # noqa: F401 - re-exported: the kind's public names
    ATTRIBUTE_INFERENCE_METRICS,
    ATTRIBUTE_INFERENCE_PARAMS,
    ATTRIBUTE_KINDS,
    RELEASES,
    _dataset,
    _kinds,
    _Settings,
    _settings,
)
from ._attribute_release import _RELEASE_BUILDERS, _data
from ._builds import record_read_builds
from ._threads import torch_threads

__all__ = [
    "attribute_inference",
    "ATTRIBUTE_KINDS",
    "ATTRIBUTE_INFERENCE_METRICS",
    "ATTRIBUTE_INFERENCE_PARAMS",
    "RELEASES",
]


def _validate(cell: Any, points: list[dict]) -> None:
    for point in points:
        _dataset(cell, _settings(cell.resolve(point)).target)


# ------------------------------------------------------------------------------------------------ the kind
@register_cell_kind(
    "attribute_inference",
    metrics=ATTRIBUTE_INFERENCE_METRICS,
    params=ATTRIBUTE_INFERENCE_PARAMS,
    validate=_validate,
    help="Attribute classifiers (mean MLP, attention; noise-unaware and noise-aware) on PPFT payloads, noisy token "
    "embeddings or T2T / PCT2T text, beside the prior and the label-only reference.",
)
def attribute_inference(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    resolved = cell.resolve(point)
    s = _settings(resolved)
    record_read_builds(context, cell.encoder, dict(resolved.params))
    with torch_threads(s.threads):
        return _run(cell, resolved, s, seed, context)


def _run(cell: Any, resolved: Any, s: _Settings, seed: int, context: RunContext) -> dict[str, float]:
    dataset, train, test = _data(cell, s.target, s.train_limit, context)
    kinds = _kinds(dataset, s.target)
    specs = build_specs(train.targets, kinds)
    release = _RELEASE_BUILDERS[s.release](cell, resolved, s, train, test, seed, context)
    out: dict[str, float] = dict(release.guarantee) | {
        "n_train": float(len(train.texts)),
        "n_test": float(len(test.texts)),
    }
    scores = attribute_metric_names(kinds)
    for attacker in s.attackers:
        for training in s.training:
            config = AttributeAttackConfig(
                pooling=attacker.removesuffix("_count"), count=attacker.endswith("_count"), **s.config
            )
            aware = release.aware() if training == "aware" else {}
            predicted = attribute_inference_attack(
                release.train,
                train.targets,
                release.observed,
                specs,
                config,
                threat=s.threat,
                release=s.family,
                noise=aware.get("noise"),
                variants=aware.get("variants"),
                generator=seeded_generator(seed + 7919, warn=False),
            )
            for m, v in score_attributes(specs, predicted, test.targets).items():
                out[f"{m}_{attacker}_{training}"] = v
            context.logger.info(
                "%s %s/%s: %s",
                s.release,
                attacker,
                training,
                {m: round(out[f"{m}_{attacker}_{training}"], 3) for m in scores},
            )
    prior = score_attributes(specs, prior_predictions(specs, train.targets, len(test.texts)), test.targets)
    label = (
        score_attributes(specs, label_predictions(specs, train.targets, train.labels, test.labels), test.targets)
        if train.labels is not None
        else {m: math.nan for m in scores}
    )
    # what the number of released units (slots, tokens) alone tells: the same rule within training rows of that count
    length = score_attributes(
        specs, length_predictions(specs, train.targets, release.train[1], release.observed[1]), test.targets
    )
    for m in scores:
        out[f"{m}_best"] = max(out[f"{m}_{a}_{t}"] for a in s.attackers for t in s.training)
        out[f"{m}_prior"], out[f"{m}_label"], out[f"{m}_length"] = prior[m], label[m], length[m]
        reference = max(prior[m], label[m]) if not math.isnan(label[m]) else prior[m]
        out[f"{m}_excess"] = out[f"{m}_best"] - reference
    return out
