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
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from ...attacks.attributes import (
    RELEASE_REQUIRES,
    AttributeAttackConfig,
    age_bucket,
    attribute_inference_attack,
    attribute_metric_names,
    build_specs,
    label_predictions,
    length_predictions,
    noisy_rows,
    prior_predictions,
    score_attributes,
)
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...mechanisms import SlotPrivatization, center_slots, mechanism_from_dict
from ...mechanisms.slots import pad_slots, repeat_mean_slots
from ...mechanisms.transforms import l2_normalize
from ...rng import seeded_generator
from ..cell import CellError
from ..inputs import load_cell_encoder, record_private_text
from ..registry import RunContext, register_cell_kind
from ._builds import record_read_builds
from ._grant import granted_threat
from ._t2t import T2T_PARAMS, check_t2t_params, t2t_guarantee, t2t_mechanism
from ._threads import torch_threads
from ._tokens import token_guarantee, token_sequences, token_table

__all__ = ["attribute_inference", "ATTRIBUTE_KINDS", "ATTRIBUTE_INFERENCE_METRICS", "ATTRIBUTE_INFERENCE_PARAMS", "RELEASES"]

ENCODE_BATCH = 32
#: Attacker architectures: the pooling, and with ``_count`` also the number of real vectors (slots, tokens) one-hot.
ATTACKERS = ("mean", "slots", "mean_count", "slots_count")
DEFAULT_ATTACKERS = ("mean", "slots")
TRAINING = ("unaware", "aware")
#: What the client releases; t2t and pct2t release text.
RELEASES = ("slots", "tokens", "t2t", "pct2t")
TEXT_RELEASES = ("t2t", "pct2t")

#: The attributes of each supported dataset and their kinds.
ATTRIBUTE_KINDS: dict[str, dict[str, str]] = {
    "pri-ddx": {"sex": "categorical", "age": "categorical", "symptoms": "multilabel", "antecedents": "multilabel"},
    "trustpilot": {"gender": "categorical", "age_cat": "categorical"},
}
#: ``params.target: answer``: the task's correct answer is the one attribute (Pri-DDX: the diagnosis; Pri-SLJA: the charge).
ANSWER_KINDS: dict[str, str] = {"answer": "categorical"}
ANSWER_DATASETS = ("pri-ddx", "pri-slja")
TARGETS = ("attributes", "answer")
_ALIASES = {"ddx": "pri-ddx", "pri-ddx": "pri-ddx", "pri-ddxplus": "pri-ddx", "trustpilot": "trustpilot",
            "slja": "pri-slja", "pri-slja": "pri-slja"}


def _scores() -> tuple[str, ...]:
    every = [*ATTRIBUTE_KINDS.values(), ANSWER_KINDS]
    return tuple(dict.fromkeys(m for kinds in every for m in attribute_metric_names(kinds)))


ATTRIBUTE_INFERENCE_METRICS = tuple(
    f"{m}_{suffix}"
    for m in _scores()
    for suffix in [f"{a}_{t}" for a in ATTACKERS for t in TRAINING] + ["best", "prior", "label", "length", "excess"]
) + ("slot_epsilon", "token_epsilon", "token_delta", "epsilon_unit", "table_diameter", "word_epsilon",
     "prompt_epsilon", "prompt_epsilon_max", "slots_per_prompt", "tokens_per_prompt", "replacement_rate", "kept_rate",
     "cosine", "n_train", "n_test")

ATTRIBUTE_INFERENCE_PARAMS = {
    "release": "what the client releases: slots (PPFT payloads, default), tokens (noisy input embeddings), t2t or pct2t (privatized text)",
    "k": "slots, t2t, pct2t: tokens per pooled slot (the client's; for text the attacker's own encoding) (integer >= 1; default 4)",
    "max_tokens": "tokens: cut each prompt to this many of its own tokens before the special tokens (integer >= 1; default 128)",
    **{name: f"t2t, pct2t: {text}" for name, text in T2T_PARAMS.items()},
    "rounds": "t2t, pct2t: aware training's T2T runs over the training text, each encoded once, cycled over epochs (default 3)",
    "attackers": "attacker architectures: mean (MLP on the mean vector), slots (attention over the vectors), and "
                 "mean_count / slots_count (the same, also reading the number of vectors, one-hot); default [mean, slots]",
    "center": "slots: a PPFT run directory whose public slot centre (slot_center.safetensors) the client subtracts from every "
              "unit slot before the noise, as that model's client does; the attacker knows it (default: none, as PPFT)",
    "repeat_mean": "slots: every slot of a prompt replaced by the prompt's unit mean slot (after the centre's map) before "
                   "the noise, as a repeat_mean model's client does (true or false; default false, as PPFT)",
    "max_private_tokens": "slots: the client cuts each prompt to this many encoder tokens (special tokens included) before "
                          "encoding, as a PPFT run's client with the same max_private_tokens (integer >= 1; default: the "
                          "encoder's own limit)",
    "pad_to": "slots: the client pads every prompt to this many slots (public filler slots, noised like its own), hiding "
              "its length (default: none, ceil(tokens / k) slots); a longer prompt is an error",
    "training": "unaware (trained on clean inputs) and/or aware (on the mechanism's releases, needs knows_parameters); default both",
    "epochs": "training epochs of each attacker (default 150)",
    "hidden": "width of the attacker's 2-layer MLP (default 256); 0: a linear reader (the PPFT answer head's answer_head_hidden: 0)",
    "standardize": "standardise the pooled vector (zero mean, unit variance over its coordinates) before the MLP: the mean of "
                   "many noisy unit slots is short, and an MLP reading it unscaled beside the count learns the count first "
                   "(true or false; default false, the attackers before 2026-11-25)",
    "target": "attributes (default: the dataset's attributes) or answer (the task's correct answer as one categorical "
              "attribute, pri-ddx or pri-slja: how much of the answer a reader of the release gets, what a PPFT server could at best use)",
    "train_limit": "use at most this many attacker training prompts (default: all)",
    "threads": "torch threads while the cell runs (default: unchanged)",
}
_COMMON = {"release", "target", "attackers", "training", "epochs", "hidden", "standardize", "train_limit", "threads"}
_RELEASE_PARAMS = {"slots": {"k", "pad_to", "center", "repeat_mean", "max_private_tokens"}, "tokens": {"max_tokens"}, "t2t": {"k", "rounds", *T2T_PARAMS}, "pct2t": {"k", "rounds", *T2T_PARAMS}}


def _dataset(cell: Any, target: str = "attributes") -> str:
    name = _ALIASES.get(str(cell.dataset).lower())
    supported = ANSWER_DATASETS if target == "answer" else tuple(ATTRIBUTE_KINDS)
    if name not in supported:
        raise CellError(f"attribute_inference with target {target!r} supports datasets {sorted(supported)}, got {cell.dataset!r}",
                        field="dataset")
    return name


def _kinds(dataset: str, target: str) -> dict[str, str]:
    return ANSWER_KINDS if target == "answer" else ATTRIBUTE_KINDS[dataset]


def _list_param(params: dict, name: str, allowed: tuple[str, ...], default: tuple[str, ...] | None = None) -> list[str]:
    value = params.get(name, list(allowed if default is None else default))
    if not isinstance(value, list) or not value or any(v not in allowed for v in value) or len(set(value)) != len(value):
        raise CellError(f"{name} must be a non-empty list of distinct values from {list(allowed)}, got {value!r}", field=f"params.{name}")
    return value


def _bool_param(params: dict, name: str) -> bool:
    value = params.get(name, False)
    if not isinstance(value, bool):
        raise CellError(f"{name} must be true or false, got {value!r}", field=f"params.{name}")
    return value


def _int_param(params: dict, name: str, default: int | None, least: int = 1) -> int | None:
    value = params.get(name, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
        raise CellError(f"{name} must be an integer >= {least}, got {value!r}", field=f"params.{name}")
    return value


@dataclass(frozen=True)
class _Settings:
    release: str
    target: str
    k: int
    pad_to: int | None
    center: str | None
    repeat_mean: bool
    max_private_tokens: int | None
    max_tokens: int
    rounds: int
    text: dict  # t2t / pct2t: eta, pos, table, tagger
    attackers: list[str]
    training: list[str]
    config: dict[str, int]
    train_limit: int | None
    threads: int | None
    threat: ThreatModel

    @property
    def family(self) -> str:
        return _family(self.release)


def _family(release: str) -> str:
    """The release family of :data:`~textfree.attacks.attributes.RELEASE_REQUIRES`: slots, tokens or text."""
    return "text" if release in TEXT_RELEASES else release


def _release(resolved: Any) -> str:
    p = resolved.params
    bad = sorted(set(p) - set(ATTRIBUTE_INFERENCE_PARAMS))
    if bad:
        raise CellError(f"unknown params {bad}; attribute_inference takes {sorted(ATTRIBUTE_INFERENCE_PARAMS)}", field="params")
    release = p.get("release", "slots")
    if release not in RELEASES:
        raise CellError(f"release must be one of {list(RELEASES)}, got {release!r}", field="params.release")
    extra = sorted(set(p) - _COMMON - _RELEASE_PARAMS[release])
    if extra:
        raise CellError(f"params {extra} do not apply to release {release!r} (it takes {sorted(_RELEASE_PARAMS[release])} "
                        "beside the common ones)", field=f"params.{extra[0]}")
    if release in TEXT_RELEASES and resolved.mechanism is not None:
        raise CellError(f"release {release!r} takes its mechanism in params (eta, pos, table, tagger), not `mechanism`",
                        field="mechanism")
    if release not in TEXT_RELEASES and resolved.mechanism is None:
        raise CellError(f"release {release!r} needs a `mechanism` (e.g. {{name: l2_laplace, epsilon: 75}})", field="mechanism")
    return release


def _text_params(p: dict, release: str) -> dict:
    text = {name: p[name] for name in T2T_PARAMS if name in p}
    if release == "pct2t":
        text.setdefault("pos", "default")
        if text["pos"] is None:
            raise CellError("release pct2t needs pos: 'default' or a list of categories, got None", field="params.pos")
    elif text.get("pos") is not None:
        raise CellError(f"release t2t takes no pos (PCT2T is release pct2t), got {text['pos']!r}", field="params.pos")
    check_t2t_params(text)
    return text


def _settings(resolved: Any) -> _Settings:
    p = resolved.params
    release = _release(resolved)
    training = _list_param(p, "training", TRAINING)
    base = RELEASE_REQUIRES[_family(release)]
    needs = base.union(NOISE_AWARE_REQUIRES) if "aware" in training else base
    threat = granted_threat(resolved.attack, "attribute_inference", "attribute_inference", needs,
                            "; grant more in `attack.threat` or drop training 'aware'")
    target = p.get("target", "attributes")
    if target not in TARGETS:
        raise CellError(f"target must be one of {list(TARGETS)}, got {target!r}", field="params.target")
    return _Settings(
        release=release,
        target=target,
        k=_int_param(p, "k", 4),
        pad_to=_int_param(p, "pad_to", None),
        center=_center_param(p),
        repeat_mean=_bool_param(p, "repeat_mean"),
        max_private_tokens=_int_param(p, "max_private_tokens", None),
        max_tokens=_int_param(p, "max_tokens", 128),
        rounds=_int_param(p, "rounds", 3),
        text=_text_params(p, release) if release in TEXT_RELEASES else {},
        attackers=_list_param(p, "attackers", ATTACKERS, DEFAULT_ATTACKERS),
        training=training,
        config={"epochs": _int_param(p, "epochs", 150), "hidden": _int_param(p, "hidden", 256, least=0), "standardize": _bool_param(p, "standardize")},
        train_limit=_int_param(p, "train_limit", None),
        threads=_int_param(p, "threads", None),
        threat=threat,
    )


def _center_param(p: dict) -> str | None:
    center = p.get("center")
    if center is None:
        return None
    if not isinstance(center, str) or not center:
        raise CellError(f"center must be a PPFT run directory, got {center!r}", field="params.center")
    return center


def _client_map(run: str, width: int) -> tuple[torch.Tensor, int]:
    """The run's client slot map (``slot_center.safetensors``): the centre [d], or the centre and its class subspace
    [1 + m, d]; and the subspace's rank m (0: a centre alone)."""
    from ...ppft.checkpoint import load_center_file

    try:
        smap = load_center_file(run, width)
    except (OSError, ValueError) as exc:
        raise CellError(f"params.center: {exc}", field="params.center") from None
    return smap, (smap.shape[0] - 1 if smap.dim() == 2 else 0)


def _map_slots(smap: torch.Tensor, x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """Clean unit slots [N, S, d] mapped as the run's client does: unit(slot - centre), projected onto the class
    subspace when the map has one, on real slots; zeros elsewhere."""
    return center_slots(x, smap) * m.unsqueeze(-1)


def _validate(cell: Any, points: list[dict]) -> None:
    for point in points:
        _dataset(cell, _settings(cell.resolve(point)).target)


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


def _parts(dataset: str, target: str) -> tuple[_Part, _Part]:
    """(attacker's training part, evaluated part), repeated and empty texts dropped. With ``target="answer"`` the one
    attribute is the record's correct answer (and there is no label-only reference: the label is the target)."""
    if dataset in ANSWER_DATASETS:
        from ...data import ppft_split

        split = ppft_split(dataset)
        parts = []
        for name in ("train", "heldout"):
            records = split[name]
            answers = [r.options[r.answer_index] for r in records]
            if target == "answer":
                parts.append(_dedupe([record_private_text(r) for r in records], [{"answer": a} for a in answers], None))
            else:
                parts.append(_dedupe([record_private_text(r) for r in records], [_ddx_target(r) for r in records], answers))
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
        train = _Part([train.texts[i] for i in keep], [train.targets[i] for i in keep],
                      None if train.labels is None else [train.labels[i] for i in keep])
    return train, test


def _data(cell: Any, target: str, train_limit: int | None, context: RunContext) -> tuple[str, _Part, _Part]:
    """(dataset, the attacker's training part cut to ``train_limit``, the evaluated part cut to ``cell.limit``)."""
    dataset = _dataset(cell, target)
    train, test = context.cached(("parts", target), lambda: _parts(dataset, target))
    if train_limit is not None:
        train = _Part(train.texts[:train_limit], train.targets[:train_limit],
                      None if train.labels is None else train.labels[:train_limit])
    if cell.limit is not None:
        test = _Part(test.texts[: cell.limit], test.targets[: cell.limit], None if test.labels is None else test.labels[: cell.limit])
    return dataset, train, test


def _encode(encoder: Any, texts: list[str], k: int, max_length: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Clean unit slots [N, S, d] (zero padding) + slot mask [N, S]: the client's payload without noise; with
    ``max_length`` each text cut to that many encoder tokens first (a PPFT client's ``max_private_tokens``)."""
    from ...privatizer import Privatizer

    own = encoder.max_length
    if max_length is not None:
        encoder.max_length = max_length  # the encoder is shared within the run: restored below
    try:
        payload = Privatizer(encoder, None, k, batch_size=ENCODE_BATCH).privatize(texts)
    finally:
        encoder.max_length = own
    return payload.vectors, payload.mask


def _clean_slots(cell: Any, part: str, texts: list[str], k: int, train_limit: int | None, context: RunContext,
                 max_length: int | None = None):
    """The clean slots of the training or evaluated texts (cached per run)."""

    def encode():
        encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
        context.logger.info("attribute_inference: encoding %d %s texts with %s, k=%d, at most %s tokens", len(texts), part,
                            encoder.name, k, max_length or encoder.max_length)
        return _encode(encoder, texts, k, max_length)

    return context.cached(("slots", part, k, train_limit, max_length), encode)


def _token_rows(cell: Any, part: str, texts: list[str], max_tokens: int, train_limit: int | None, context: RunContext):
    """Clean token embeddings [N, S, d] (zero padding), the position mask [N, S] and each text's own-token count."""

    def build():
        tt = token_table(cell, context)
        seqs, own = token_sequences(tt.tokenizer, texts, max_tokens)
        width = max(len(q) for q in seqs)
        x = torch.zeros(len(seqs), width, tt.table.shape[1])
        mask = torch.zeros(len(seqs), width, dtype=torch.bool)
        for i, q in enumerate(seqs):
            x[i, : len(q)] = tt.table[q]
            mask[i, : len(q)] = True
        context.logger.info("attribute_inference: %d %s texts, %d tokens (table %s)", len(texts), part, int(mask.sum()), tuple(tt.table.shape))
        return x, mask, torch.tensor([int(o.sum()) for o in own], dtype=torch.float64)

    return context.cached(("tokens", part, max_tokens, train_limit), build)


@dataclass
class _Release:
    """What one (point, seed) gives the attackers: the clean training inputs, the observed releases, how aware training
    sees the mechanism (``noise`` or ``variants``, made on first use), and the formal guarantee."""

    train: tuple[torch.Tensor, torch.Tensor]
    observed: tuple[torch.Tensor, torch.Tensor]
    guarantee: dict[str, float]
    make_aware: Callable[[], dict]
    _aware: dict | None = field(default=None, repr=False)

    def aware(self) -> dict:
        if self._aware is None:
            self._aware = self.make_aware()
        return self._aware


def _row_noise(mech: Any, *, normalize: bool) -> Callable[[torch.Tensor, torch.Generator], torch.Tensor]:
    """The client's noise on rows [n, d]: the mechanism's sample (then renormalised for PPFT slots), float32."""

    def noise(x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        y = mech.sample(x.to(torch.float64), generator=generator)
        return (l2_normalize(y) if normalize else y).to(torch.float32)

    return noise


def _cosine(released: torch.Tensor, clean: torch.Tensor, mask: torch.Tensor) -> float:
    return float(torch.nn.functional.cosine_similarity(released[mask], clean[mask], dim=-1).mean())


def _slots_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    train_x, train_m = _clean_slots(cell, "train", train.texts, s.k, s.train_limit, context, s.max_private_tokens)
    test_x, test_m = _clean_slots(cell, "test", test.texts, s.k, s.train_limit, context, s.max_private_tokens)
    subspace_rank = None
    if s.center is not None:  # as the run's client: unit(slot - centre), projected onto its subspace if it has one
        smap, subspace_rank = _client_map(s.center, train_x.shape[-1])
        train_x, test_x = _map_slots(smap, train_x, train_m), _map_slots(smap, test_x, test_m)
    if s.repeat_mean:  # as a repeat_mean client: each prompt's unit mean slot in place of every one of its slots
        train_x, test_x = repeat_mean_slots(train_x, train_m), repeat_mean_slots(test_x, test_m)
    if s.pad_to is not None:  # the client hides the count: filler slots up to pad_to, noised like the prompt's own
        try:
            (train_x, train_m), (test_x, test_m) = pad_slots(train_x, train_m, s.pad_to), pad_slots(test_x, test_m, s.pad_to)
        except ValueError as exc:
            raise CellError(str(exc), field="params.pad_to") from None

    noise = _row_noise(mech, normalize=True)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
    slots = test_m.sum(1).to(torch.float64)
    slot_eps = SlotPrivatization(noise=mech, k=s.k, pad_to=s.pad_to, repeat_mean=s.repeat_mean).slot_loss().epsilon
    guarantee = {"slot_epsilon": slot_eps, "prompt_epsilon": float((slots * slot_eps).mean()),
                 "prompt_epsilon_max": float((slots * slot_eps).max()), "slots_per_prompt": float(slots.mean()),
                 "cosine": float((released * test_x).sum(-1)[test_m].mean())}
    if subspace_rank is not None:  # the run's map: 0 for a centre alone, else the rank of its class subspace
        guarantee["subspace_rank"] = subspace_rank
    return _Release((train_x, train_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _tokens_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = mechanism_from_dict(resolved.mechanism)
    train_x, train_m, _ = _token_rows(cell, "train", train.texts, s.max_tokens, s.train_limit, context)
    test_x, test_m, own = _token_rows(cell, "test", test.texts, s.max_tokens, s.train_limit, context)

    noise = _row_noise(mech, normalize=False)
    released = noisy_rows(noise, test_x, test_m, seeded_generator(seed, warn=False))
    guarantee = token_guarantee(mech, token_table(cell, context).diameter)
    eps = guarantee["token_epsilon"]
    guarantee |= {"prompt_epsilon": float((own * eps).mean()), "prompt_epsilon_max": float((own * eps).max()),
                  "tokens_per_prompt": float(own.mean()), "cosine": _cosine(released, test_x, test_m)}
    return _Release((train_x, train_m), (released, test_m), guarantee, lambda: {"noise": noise})


def _text_release(cell, resolved, s, train, test, seed, context) -> _Release:
    mech = t2t_mechanism(s.text, context)
    encoder = context.cached("encoder", lambda: load_cell_encoder(cell, "contextual"))
    released = mech.privatize_detailed(test.texts, generator=seeded_generator(seed, warn=False))

    def variants() -> dict:
        generator = seeded_generator(seed + 104_729, warn=False)
        runs = []
        for r in range(s.rounds):
            context.logger.info("attribute_inference: %s eta=%s, the attacker's run %d/%d over %d training texts",
                                s.release, s.text["eta"], r + 1, s.rounds, len(train.texts))
            runs.append(_encode(encoder, mech.privatize(train.texts, generator=generator), s.k))
        return {"variants": runs}

    return _Release(_clean_slots(cell, "train", train.texts, s.k, s.train_limit, context),
                    _encode(encoder, released.texts, s.k), t2t_guarantee(mech, released), variants)


_RELEASE_BUILDERS = {"slots": _slots_release, "tokens": _tokens_release, "t2t": _text_release, "pct2t": _text_release}


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
    out: dict[str, float] = dict(release.guarantee) | {"n_train": float(len(train.texts)), "n_test": float(len(test.texts))}
    scores = attribute_metric_names(kinds)
    for attacker in s.attackers:
        for training in s.training:
            config = AttributeAttackConfig(pooling=attacker.removesuffix("_count"), count=attacker.endswith("_count"), **s.config)
            aware = release.aware() if training == "aware" else {}
            predicted = attribute_inference_attack(
                release.train, train.targets, release.observed, specs, config, threat=s.threat, release=s.family,
                noise=aware.get("noise"), variants=aware.get("variants"), generator=seeded_generator(seed + 7919, warn=False))
            for m, v in score_attributes(specs, predicted, test.targets).items():
                out[f"{m}_{attacker}_{training}"] = v
            context.logger.info("%s %s/%s: %s", s.release, attacker, training, {m: round(out[f"{m}_{attacker}_{training}"], 3) for m in scores})
    prior = score_attributes(specs, prior_predictions(specs, train.targets, len(test.texts)), test.targets)
    label = (score_attributes(specs, label_predictions(specs, train.targets, train.labels, test.labels), test.targets)
             if train.labels is not None else {m: math.nan for m in scores})
    # what the number of released units (slots, tokens) alone tells: the same rule within training rows of that count
    length = score_attributes(specs, length_predictions(specs, train.targets, release.train[1], release.observed[1]), test.targets)
    for m in scores:
        out[f"{m}_best"] = max(out[f"{m}_{a}_{t}"] for a in s.attackers for t in s.training)
        out[f"{m}_prior"], out[f"{m}_label"], out[f"{m}_length"] = prior[m], label[m], length[m]
        reference = max(prior[m], label[m]) if not math.isnan(label[m]) else prior[m]
        out[f"{m}_excess"] = out[f"{m}_best"] - reference
    return out
