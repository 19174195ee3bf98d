"""The ``params`` of cell kind ``attribute_inference`` (:mod:`.attributes`): the releases, targets and attackers it
knows, where its data comes from (:class:`_Source`: a registered name, or a path / hub name with a column mapping),
each param's help, and their validation into :class:`_Settings`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...attacks.attributes import RELEASE_REQUIRES
from ...attacks.threat import NOISE_AWARE_REQUIRES, ThreatModel
from ...data.registry import get_dataset_spec, is_ppft_dataset
from ...data.table import AttributeColumn, ColumnMap
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

#: ``params.target: answer``: the task's correct answer is the one attribute (Pri-DDX: the diagnosis; Pri-SLJA: the
#: charge; a table: its label column).
ANSWER = AttributeColumn("answer", "categorical")
TARGETS = ("attributes", "answer")
#: Default shares: of a table's distinct texts, evaluated (the rest is the attacker's); of the attacker's texts, its
#: validation part (attackers and the clean-text reader are chosen there, never on the evaluated prompts).
TEST_SHARE = 0.3
VALIDATION_SHARE = 0.2

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
    "attribute: a Pri-* dataset's, or a table's columns.label; how much of the answer a reader of the release gets, "
    "what a PPFT server could at best use)",
    "columns": "a path or hub dataset in any layout: {text: COLUMN, label: COLUMN, pii: COLUMN, names: [...]} (names: "
    "the columns of a CSV/TSV file without a header row); the CLI's --text-column, --label-column, --columns",
    "attributes": "the attributes to attack, NAME: KIND[:EDGES] or NAME: {kind, column, edges} (kind categorical, "
    "numeric or multilabel; numeric is bucketed at edges, default the attacker's training quartiles); default: those "
    "a registered dataset declares (pri-ddx: sex, age, symptoms, antecedents; trustpilot: gender, age_cat)",
    "test_share": "a table (params.columns): the share of its distinct texts evaluated, by a stable hash of the text "
    f"(default {TEST_SHARE}); the rest is the attacker's",
    "validation": "the share of the attacker's texts set aside to choose the attacker (and the clean-text reader's "
    f"regularisation) on, never the evaluated prompts (default {VALIDATION_SHARE})",
    "curve": "epoch counts below `epochs` at which each attacker's validation (and evaluated) score is also measured: "
    "its validation curve; the choice runs over every (attacker, epochs) (default: none; each point costs its epochs)",
    "clean_reference": "score a TF-IDF + logistic-regression reader of the clean text beside the attackers (true or "
    "false; default true)",
    "train_limit": "use at most this many attacker training prompts (default: all)",
    "threads": "torch threads while the cell runs (default: unchanged)",
}
_COMMON = {
    "release",
    "target",
    "attackers",
    "training",
    "epochs",
    "hidden",
    "standardize",
    "train_limit",
    "threads",
    "columns",
    "attributes",
    "test_share",
    "validation",
    "curve",
    "clean_reference",
}
_RELEASE_PARAMS = {
    "slots": {"k", "pad_to", "center", "repeat_mean", "max_private_tokens"},
    "tokens": {"max_tokens"},
    "t2t": {"k", "rounds", *T2T_PARAMS},
    "pct2t": {"k", "rounds", *T2T_PARAMS},
}


@dataclass(frozen=True)
class _Source:
    """Where the cell's rows come from and what is attacked in them.

    ``dataset``: the registered name (canonical) or the path / hub name as given; ``columns``: the mapping of a path
    or hub name (None for a registered dataset, read by its own loader); ``attributes``: the attacked attributes
    (for ``target: answer`` the one :data:`ANSWER`)."""

    dataset: str
    columns: ColumnMap | None
    attributes: tuple[AttributeColumn, ...]

    @property
    def ppft(self) -> bool:
        """A Pri-* dataset: its PPFT train / held-out split gives the attacker's and the evaluated texts."""
        return self.columns is None and is_ppft_dataset(self.dataset)


def _attribute_columns(p: dict, declared: tuple[AttributeColumn, ...]) -> tuple[AttributeColumn, ...]:
    value = p.get("attributes")
    if value is None:
        return declared
    if not isinstance(value, dict) or not value:
        raise CellError(f"attributes must be a mapping NAME: KIND, got {value!r}", field="params.attributes")
    try:
        return tuple(AttributeColumn.from_value(n, v) for n, v in value.items())
    except ValueError as exc:
        raise CellError(str(exc), field="params.attributes") from None


def _source(cell: Any, p: dict, target: str) -> _Source:
    """The cell's :class:`_Source`; a :class:`CellError` naming the field for a dataset it cannot attack."""
    if cell.dataset is None:
        raise CellError(
            "attribute_inference needs a `dataset`: a registered name (pri-ddx, trustpilot, ...) or a path / hub "
            "dataset with params.columns",
            field="dataset",
        )
    try:
        spec = get_dataset_spec(cell.dataset)
    except KeyError:
        spec = None
    if p.get("columns") is not None:
        if spec is not None:
            raise CellError(
                f"{cell.dataset!r} is a registered dataset, read by its own loader; params.columns is for a path or a "
                "hub dataset in another layout",
                field="params.columns",
            )
        if not isinstance(p["columns"], dict):
            raise CellError(f"columns must be a mapping, got {p['columns']!r}", field="params.columns")
        try:
            columns = ColumnMap.from_dict(p["columns"], p.get("attributes") or {})
        except ValueError as exc:
            field = "params.attributes" if "attribute" in str(exc) else "params.columns"
            raise CellError(str(exc), field=field) from None
        if target == "answer":
            if columns.label is None:
                raise CellError(
                    "target answer on a table needs its answer column: columns.label", field="params.columns"
                )
            return _Source(cell.dataset, columns, (ANSWER,))
        if not columns.attributes:
            raise CellError(
                "a table's attributes must be named: params.attributes (the CLI's --attribute)",
                field="params.attributes",
            )
        return _Source(cell.dataset, columns, columns.attributes)
    if spec is None:
        raise CellError(
            f"{cell.dataset!r} is not a registered dataset: map its columns with params.columns and params.attributes "
            "(the CLI's --text-column and --attribute)",
            field="dataset",
        )
    if target == "answer":
        if not is_ppft_dataset(spec.name):
            raise CellError(
                f"target 'answer' needs a Pri-* dataset (its MCQA answer) or a table with columns.label, got "
                f"{cell.dataset!r}",
                field="dataset",
            )
        return _Source(spec.name, None, (ANSWER,))
    attributes = _attribute_columns(p, spec.attribute_columns())
    if not attributes:
        raise CellError(
            f"dataset {spec.name!r} declares no personal attributes: name them in params.attributes", field="dataset"
        )
    if not is_ppft_dataset(spec.name) and spec.name != "trustpilot":
        raise CellError(
            f"a registered dataset is attacked on its PPFT split (Pri-*) or its train / test files (trustpilot); read "
            f"{spec.name!r} as a table instead (its path with params.columns)",
            field="dataset",
        )
    return _Source(spec.name, None, attributes)


def _share(p: dict, name: str, default: float) -> float:
    value = p.get(name, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value < 1.0:
        raise CellError(f"{name} must be a number in (0, 1), got {value!r}", field=f"params.{name}")
    return float(value)


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


def _bool_param(params: dict, name: str, default: bool = False) -> bool:
    value = params.get(name, default)
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
    source: _Source
    test_share: float
    validation: float
    curve: tuple[int, ...]
    clean_reference: bool

    @property
    def family(self) -> str:
        return _family(self.release)

    def candidates(self) -> list[tuple[str, str, int]]:
        """Every (attacker, training, epochs) the choice runs over, in order: ties go to the first."""
        epochs = [*self.curve, self.config["epochs"]]
        return [(a, t, e) for a in self.attackers for t in self.training for e in epochs]


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


def _curve(p: dict, epochs: int) -> tuple[int, ...]:
    value = p.get("curve", [])
    if (
        not isinstance(value, list)
        or any(isinstance(e, bool) or not isinstance(e, int) or not 1 <= e < epochs for e in value)
        or sorted(set(value)) != value
    ):
        raise CellError(
            f"curve must be an increasing list of epoch counts in [1, epochs={epochs}), got {value!r}",
            field="params.curve",
        )
    return tuple(value)


def _settings(resolved: Any, cell: Any) -> _Settings:
    """The resolved params of one grid point checked (``cell``: its dataset)."""
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
    epochs = _int_param(p, "epochs", 150)
    source = _source(cell, p, target)
    if source.columns is None and "test_share" in p:
        raise CellError(
            "test_share splits a table (params.columns); a registered dataset has its own parts",
            field="params.test_share",
        )
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
            "epochs": epochs,
            "hidden": _int_param(p, "hidden", 256, least=0),
            "standardize": _bool_param(p, "standardize"),
        },
        train_limit=_int_param(p, "train_limit", None),
        threads=_int_param(p, "threads", None),
        threat=threat,
        source=source,
        test_share=_share(p, "test_share", TEST_SHARE),
        validation=_share(p, "validation", VALIDATION_SHARE),
        curve=_curve(p, epochs),
        clean_reference=_bool_param(p, "clean_reference", True),
    )


def _center_param(p: dict) -> str | None:
    center = p.get("center")
    if center is None:
        return None
    if not isinstance(center, str) or not center:
        raise CellError(f"center must be a PPFT run directory, got {center!r}", field="params.center")
    return center
