"""The ``params`` of cell kind ``attribute_inference`` (:mod:`.attributes`): the releases, targets and attackers it
knows, each param's help, and their validation into :class:`_Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...attacks.attributes import RELEASE_REQUIRES, attribute_metric_names
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...results.cell import CellError
from ._grant import granted_threat
from ._t2t import T2T_PARAMS, check_t2t_params

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
#: ``params.target: answer``: the task's correct answer is the one attribute (Pri-DDX: the diagnosis; Pri-SLJA: the
#: charge).
ANSWER_KINDS: dict[str, str] = {"answer": "categorical"}
ANSWER_DATASETS = ("pri-ddx", "pri-slja")
TARGETS = ("attributes", "answer")
_ALIASES = {
    "ddx": "pri-ddx",
    "pri-ddx": "pri-ddx",
    "pri-ddxplus": "pri-ddx",
    "trustpilot": "trustpilot",
    "slja": "pri-slja",
    "pri-slja": "pri-slja",
}


def _scores() -> tuple[str, ...]:
    every = [*ATTRIBUTE_KINDS.values(), ANSWER_KINDS]
    return tuple(dict.fromkeys(m for kinds in every for m in attribute_metric_names(kinds)))


ATTRIBUTE_INFERENCE_METRICS = tuple(
    f"{m}_{suffix}"
    for m in _scores()
    for suffix in [f"{a}_{t}" for a in ATTACKERS for t in TRAINING] + ["best", "prior", "label", "length", "excess"]
) + (
    "slot_epsilon",
    "token_epsilon",
    "token_delta",
    "epsilon_unit",
    "table_diameter",
    "word_epsilon",
    "prompt_epsilon",
    "prompt_epsilon_max",
    "slots_per_prompt",
    "tokens_per_prompt",
    "replacement_rate",
    "kept_rate",
    "cosine",
    "n_train",
    "n_test",
)

ATTRIBUTE_INFERENCE_PARAMS = {
    "release": "what the client releases: slots (PPFT payloads, default), tokens (noisy input embeddings), t2t or "
    "pct2t (privatized text)",
    "k": "slots, t2t, pct2t: tokens per pooled slot (the client's; for text the attacker's own encoding) (integer >= "
    "1; default 4)",
    "max_tokens": "tokens: cut each prompt to this many of its own tokens before the special tokens (integer >= 1; "
    "default 128)",
    **{name: f"t2t, pct2t: {text}" for name, text in T2T_PARAMS.items()},
    "rounds": "t2t, pct2t: aware training's T2T runs over the training text, each encoded once, cycled over epochs "
    "(default 3)",
    "attackers": "attacker architectures: mean (MLP on the mean vector), slots (attention over the vectors), and "
    "mean_count / slots_count (the same, also reading the number of vectors, one-hot); default [mean, slots]",
    "center": "slots: a PPFT run directory whose public slot centre (slot_center.safetensors) the client subtracts "
    "from every "
    "unit slot before the noise, as that model's client does; the attacker knows it (default: none, as PPFT)",
    "repeat_mean": "slots: every slot of a prompt replaced by the prompt's unit mean slot (after the centre's map) "
    "before "
    "the noise, as a repeat_mean model's client does (true or false; default false, as PPFT)",
    "max_private_tokens": "slots: the client cuts each prompt to this many encoder tokens (special tokens included) "
    "before "
    "encoding, as a PPFT run's client with the same max_private_tokens (integer >= 1; default: the "
    "encoder's own limit)",
    "pad_to": "slots: the client pads every prompt to this many slots (public filler slots, noised like its own), "
    "hiding "
    "its length (default: none, ceil(tokens / k) slots); a longer prompt is an error",
    "training": "unaware (trained on clean inputs) and/or aware (on the mechanism's releases, needs knows_parameters); "
    "default both",
    "epochs": "training epochs of each attacker (default 150)",
    "hidden": "width of the attacker's 2-layer MLP (default 256); 0: a linear reader (the PPFT answer head's "
    "answer_head_hidden: 0)",
    "standardize": "standardise the pooled vector (zero mean, unit variance over its coordinates) before the MLP: the "
    "mean of "
    "many noisy unit slots is short, and an MLP reading it unscaled beside the count learns the count first "
    "(true or false; default false, the attackers before 2026-11-25)",
    "target": "attributes (default: the dataset's attributes) or answer (the task's correct answer as one categorical "
    "attribute, pri-ddx or pri-slja: how much of the answer a reader of the release gets, what a PPFT server could at "
    "best use)",
    "train_limit": "use at most this many attacker training prompts (default: all)",
    "threads": "torch threads while the cell runs (default: unchanged)",
}
_COMMON = {"release", "target", "attackers", "training", "epochs", "hidden", "standardize", "train_limit", "threads"}
_RELEASE_PARAMS = {
    "slots": {"k", "pad_to", "center", "repeat_mean", "max_private_tokens"},
    "tokens": {"max_tokens"},
    "t2t": {"k", "rounds", *T2T_PARAMS},
    "pct2t": {"k", "rounds", *T2T_PARAMS},
}


def _dataset(cell: Any, target: str = "attributes") -> str:
    name = _ALIASES.get(str(cell.dataset).lower())
    supported = ANSWER_DATASETS if target == "answer" else tuple(ATTRIBUTE_KINDS)
    if name not in supported:
        raise CellError(
            f"attribute_inference with target {target!r} supports datasets {sorted(supported)}, got {cell.dataset!r}",
            field="dataset",
        )
    return name


def _kinds(dataset: str, target: str) -> dict[str, str]:
    return ANSWER_KINDS if target == "answer" else ATTRIBUTE_KINDS[dataset]


def _list_param(params: dict, name: str, allowed: tuple[str, ...], default: tuple[str, ...] | None = None) -> list[str]:
    value = params.get(name, list(allowed if default is None else default))
    if (
        not isinstance(value, list)
        or not value
        or any(v not in allowed for v in value)
        or len(set(value)) != len(value)
    ):
        raise CellError(
            f"{name} must be a non-empty list of distinct values from {list(allowed)}, got {value!r}",
            field=f"params.{name}",
        )
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
        raise CellError(
            f"unknown params {bad}; attribute_inference takes {sorted(ATTRIBUTE_INFERENCE_PARAMS)}", field="params"
        )
    release = p.get("release", "slots")
    if release not in RELEASES:
        raise CellError(f"release must be one of {list(RELEASES)}, got {release!r}", field="params.release")
    extra = sorted(set(p) - _COMMON - _RELEASE_PARAMS[release])
    if extra:
        raise CellError(
            f"params {extra} do not apply to release {release!r} (it takes {sorted(_RELEASE_PARAMS[release])} "
            "beside the common ones)",
            field=f"params.{extra[0]}",
        )
    if release in TEXT_RELEASES and resolved.mechanism is not None:
        raise CellError(
            f"release {release!r} takes its mechanism in params (eta, pos, table, tagger), not `mechanism`",
            field="mechanism",
        )
    if release not in TEXT_RELEASES and resolved.mechanism is None:
        raise CellError(
            f"release {release!r} needs a `mechanism` (e.g. {{name: l2_laplace, epsilon: 75}})", field="mechanism"
        )
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
    threat = granted_threat(
        resolved.attack,
        "attribute_inference",
        "attribute_inference",
        needs,
        "; grant more in `attack.threat` or drop training 'aware'",
    )
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
        config={
            "epochs": _int_param(p, "epochs", 150),
            "hidden": _int_param(p, "hidden", 256, least=0),
            "standardize": _bool_param(p, "standardize"),
        },
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
