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

Data (``dataset``): a registered name, read by its own loader (a Pri-* dataset: the attacker's text is the *train*
part of the PPFT split, the evaluated prompts its held-out part; trustpilot: its train and test files), or a path / hub
dataset in any layout with ``params.columns`` (``{text, label, pii, names}``; :class:`~textfree.data.table.ColumnMap`):
its distinct texts split by a stable hash, ``params.test_share`` evaluated. The attacked attributes are
``params.attributes`` (``NAME: KIND[:EDGES]``: categorical, numeric or multilabel; numeric ones bucketed at the edges or
the quartiles of the attacker's part), else those the registered dataset declares
(:attr:`~textfree.data.registry.DatasetSpec.attributes`: Pri-DDX sex, age in PPFT's buckets, symptoms, antecedents;
Pri-NLICE the same where its rows have them; Trustpilot gender and age category); rows without a value for one of
them are dropped (``n_dropped``). ``params.validation`` of the attacker's texts are set aside as its *validation part*.

The attacker holds in-domain text with attributes (its part above, less the validation part), makes its own training
inputs from it and trains an attribute classifier (:mod:`textfree.attacks.attributes`): every
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

With ``params.target: answer`` (a Pri-* dataset, or a table's ``columns.label``) the one attribute is the task's
correct answer (the diagnosis, the charge): what a reader of the release learns of it, which
is both a leak (the diagnosis is the most sensitive attribute) and a measure of what a PPFT server could use at best
with a classifier of this size; there is no label-only reference then (``answer_accuracy_label`` is NaN).

Metrics, for each attribute score ``m`` (``sex_accuracy``, ``symptoms_recall``, ``symptoms_f1``, ...):

* ``{m}_{attacker}_{training}``: one attacker on the evaluated prompts, e.g. ``symptoms_recall_slots_aware``, and
  ``{m}_{attacker}_{training}_val`` on the validation part; with ``params.curve`` also at those epoch counts
  (``_e{n}``, ``_val_e{n}``: the attacker's validation curve; e epochs are the first e of a longer run);
* ``{m}_best``: the attacker of the attribute **chosen on the validation part** (its accuracy, or micro F1 for a
  multi-label attribute; over every attacker, training and curve point), scored on the evaluated prompts;
  ``{m}_best_val`` its validation score; ``{attribute}_choice`` its index in (attackers x training x [curve,
  epochs]). The evaluated prompts never enter the choice;
* ``{m}_clean``: a TF-IDF + logistic-regression reader of the *clean* text (:mod:`textfree.attacks.clean_text`),
  trained on the attacker's texts: whether the text carries the attribute at all (NaN with ``clean_reference:
  false``);
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

And ``n_train``, ``n_validation``, ``n_test``, ``n_dropped``.

Cells::

    kind: attribute_inference
    dataset: pri-ddx                  # or trustpilot, or a path / hub name with params.columns
    encoder: default                  # or a PPFT run's encoder/, e.g. runs/stage1/encoder
    mechanism: {name: l2_laplace, epsilon: 75}
    params: {k: 4, attackers: [mean, slots], training: [unaware, aware], epochs: 150}
    attack: {threat: {encoder_queries: true, training_text: in_domain, knows_mechanism: true, knows_parameters: true}}

    # token noise: the table's rows, noised per token
    mechanism: {name: gaussian, sigma: 0.3, delta: 1.0e-5}
    params: {release: tokens, max_tokens: 128}
    attack: {threat: {embedding_table: true, training_text: in_domain, knows_mechanism: true, knows_parameters: true}}

    # a file in another layout: its columns and attributes
    dataset: reviews.tsv
    params: {columns: {text: review, names: [rating, gender, age, review]},
             attributes: {gender: categorical, age: numeric, rating: numeric}, test_share: 0.3}

    # T2T text (no mechanism section); pct2t takes pos: default or a list of categories
    params: {release: t2t, eta: 75, rounds: 3, k: 4}
    attack: {threat: {training_text: in_domain, knows_mechanism: true, knows_parameters: true}}
"""

from __future__ import annotations

import math
from typing import Any

import torch

from ...attacks.attributes import (
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    length_predictions,
    prior_predictions,
    score_attributes,
    select_attacker,
    selection_metric,
)
from ...heads.classifier import AttributeAttackConfig
from ...rng import seeded_generator
from ..registry import RunContext, register_cell_kind
from ._attribute_params import (  # noqa: F401 - re-exported: the kind's public names
    ATTRIBUTE_INFERENCE_PARAMS,
    RELEASES,
    _Settings,
    _settings,
)
from ._attribute_release import _RELEASE_BUILDERS, _data
from ._builds import record_read_builds
from ._threads import torch_threads

__all__ = ["attribute_inference", "ATTRIBUTE_INFERENCE_PARAMS", "RELEASES", "candidate_name"]


def _validate(cell: Any, points: list[dict]) -> None:
    for point in points:
        _settings(cell.resolve(point), cell)


def candidate_name(attacker: str, training: str, epochs: int, full: int) -> str:
    """The metric infix of one candidate: ``slots_aware``, or ``slots_aware_e40`` at a curve point of 40 epochs."""
    return f"{attacker}_{training}" + ("" if epochs == full else f"_e{epochs}")


# ------------------------------------------------------------------------------------------------ the kind
@register_cell_kind(
    "attribute_inference",
    metrics=None,  # the names follow the attacked attributes, which come from the cell or the data
    params=ATTRIBUTE_INFERENCE_PARAMS,
    validate=_validate,
    help="Attribute classifiers (mean MLP, attention; noise-unaware and noise-aware) on PPFT payloads, noisy token "
    "embeddings or T2T / PCT2T text, chosen on a validation part, beside the prior, the clean-text reader and the "
    "label-only reference.",
)
def attribute_inference(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    resolved = cell.resolve(point)
    s = _settings(resolved, cell)
    record_read_builds(context, cell.encoder, dict(resolved.params))
    with torch_threads(s.threads):
        return _run(cell, resolved, s, seed, context)


def _stack(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]):
    """Two sets of inputs as one (rows of ``a`` then ``b``, padded to the wider), so one call predicts both."""
    width = max(a[0].shape[1], b[0].shape[1])

    def pad(x: torch.Tensor, m: torch.Tensor):
        extra = width - x.shape[1]
        return (
            torch.nn.functional.pad(x.to(torch.float32), (0, 0, 0, extra)),
            torch.nn.functional.pad(m, (0, extra), value=False),
        )

    (xa, ma), (xb, mb) = pad(*a), pad(*b)
    return torch.cat([xa, xb]), torch.cat([ma, mb])


def _run(cell: Any, resolved: Any, s: _Settings, seed: int, context: RunContext) -> dict[str, float]:
    data = _data(cell, s, context)
    train, validation, test = data.train, data.validation, data.test
    specs = build_specs(train.targets, data.kinds)
    release = _RELEASE_BUILDERS[s.release](cell, resolved, s, train, validation, test, seed, context)
    out: dict[str, float] = dict(release.guarantee) | {
        "n_train": float(len(train.texts)),
        "n_validation": float(len(validation.texts)),
        "n_test": float(len(test.texts)),
        "n_dropped": float(data.dropped),
    }
    scores = attribute_metric_names(data.kinds)
    both = _stack(release.validation, release.observed)
    n_val = len(validation.texts)
    full = s.config["epochs"]
    val_scores: dict[str, dict[str, float]] = {}
    test_scores: dict[str, dict[str, float]] = {}
    for attacker, training, epochs in s.candidates():
        name = candidate_name(attacker, training, epochs, full)
        config = AttributeAttackConfig(
            pooling=attacker.removesuffix("_count"),
            count=attacker.endswith("_count"),
            **(s.config | {"epochs": epochs}),
        )
        aware = release.aware() if training == "aware" else {}
        predicted = attribute_inference_attack(
            release.train,
            train.targets,
            both,
            specs,
            config,
            threat=s.threat,
            release=s.family,
            noise=aware.get("noise"),
            variants=aware.get("variants"),
            generator=seeded_generator(seed + 7919, warn=False),  # the same draws: e epochs are the first e of more
        )
        val_scores[name] = score_attributes(specs, predicted[:n_val], validation.targets)
        test_scores[name] = score_attributes(specs, predicted[n_val:], test.targets)
        suffix = "" if epochs == full else f"_e{epochs}"
        for m in scores:
            out[f"{m}_{attacker}_{training}{suffix}"] = test_scores[name][m]
            out[f"{m}_{attacker}_{training}_val{suffix}"] = val_scores[name][m]
        context.logger.info(
            "%s %s: validation %s, evaluated %s",
            s.release,
            name,
            {m: round(val_scores[name][m], 3) for m in scores},
            {m: round(test_scores[name][m], 3) for m in scores},
        )
    names = [candidate_name(a, t, e, full) for a, t, e in s.candidates()]
    for spec in specs:  # the attacker of each attribute is chosen on the validation part, never on the evaluated one
        chosen = select_attacker(val_scores, selection_metric(spec))
        out[f"{spec.name}_choice"] = float(names.index(chosen))
        for m in attribute_metric_names({spec.name: spec.kind}):
            out[f"{m}_best"], out[f"{m}_best_val"] = test_scores[chosen][m], val_scores[chosen][m]
    out |= _references(s, specs, data, release, context)
    for m in scores:
        label = out[f"{m}_label"]
        reference = max(out[f"{m}_prior"], label) if not math.isnan(label) else out[f"{m}_prior"]
        out[f"{m}_excess"] = out[f"{m}_best"] - reference
    return out


def _references(s: _Settings, specs: list, data: Any, release: Any, context: RunContext) -> dict[str, float]:
    """``{m}_prior``, ``{m}_label`` (NaN without task labels), ``{m}_length`` and ``{m}_clean`` (NaN when
    ``clean_reference`` is off) for every score ``m``."""
    from ...attacks.clean_text import clean_text_reference

    train, validation, test = data.train, data.validation, data.test
    scores = attribute_metric_names(data.kinds)
    prior = score_attributes(specs, prior_predictions(specs, train.targets, len(test.texts)), test.targets)
    label = (
        score_attributes(specs, label_predictions(specs, train.targets, train.labels, test.labels), test.targets)
        if train.labels is not None and test.labels is not None
        else {m: math.nan for m in scores}
    )
    # what the number of released units (slots, tokens) alone tells: the same rule within training rows of that count
    length = score_attributes(
        specs, length_predictions(specs, train.targets, release.train[1], release.observed[1]), test.targets
    )
    if s.clean_reference:
        key = ("clean", s.target, hash(tuple(train.texts)), hash(tuple(test.texts)))
        clean = context.cached(
            key,
            lambda: clean_text_reference(
                specs, train.texts, train.targets, validation.texts, validation.targets, test.texts, test.targets
            ),
        )
    else:
        clean = {m: math.nan for m in scores}
    out = {}
    for m in scores:
        out |= {f"{m}_prior": prior[m], f"{m}_label": label[m], f"{m}_length": length[m], f"{m}_clean": clean[m]}
    return out
