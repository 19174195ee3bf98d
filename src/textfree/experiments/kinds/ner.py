"""Cell kind ``ner_attack``: how many named entities (PII spans) a NER attacker extracts from T2T / PCT2T text
(RAPT section IV-A3, Fig. 4 and Fig. 6).

The dataset holds texts with gold character spans (``presidio``: Presidio's synthetic PII texts). Its texts are split
by template (``attributes.template_id``; a record without one is its own group): a seeded share ``params.heldout`` of
the templates is held out whole (``params.split_seed``), so no evaluated text shares its template with a training
text. The attacker fine-tunes ``params.encoder`` with a token-classification head on at most ``params.train_limit``
clean training texts (BIO tags over the dataset's entity types; :mod:`textfree.attacks.ner`), once per training config
into ``params.out``, reused by every grid point and by a later run with the same config (a T2T and a PCT2T cell share
it). The client privatizes at most ``cell.limit`` held-out texts with T2T (``params.pos`` null) or PCT2T at
``params.eta`` (grid it; :mod:`._t2t`), with the cell seed, and the attacker tags the released text. ``params.pos`` may
also be one string of comma-separated categories (``noun``, ``noun,verb``, ``all``): a grid can vary the POS set
(RAPT Fig. 6).

Metrics: ``entity_{f1,precision,recall}`` (a predicted entity counts when its position and type are a gold entity's
and its words, read from the released text, equal the original entity's words, case-insensitive),
``span_{f1,precision,recall}`` (position and type only), ``empirical_privacy`` = 1 - entity F1 and
``span_empirical_privacy`` = 1 - span F1 (RAPT's measure), the attacker on the clean held-out texts
``clean_{entity,span}_f1`` and ``clean_empirical_privacy`` (the reference without privatization), ``entity_survival``
(gold entities whose words all come out unchanged: the most entity recall can be), ``entity_unprotected`` (gold
entities none of whose words went through the mechanism: digits and words outside the table, PCT2T's words outside its
categories), the release figures of :func:`._t2t.t2t_guarantee`, ``n_texts``, ``n_entities``, ``n_train_texts`` and
the training figures (``train_*``, ``reused``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ...attacks.ner import (
    NER_REQUIRES,
    NerScores,
    NerTagger,
    char_spans_to_words,
    entity_survival,
    entity_unprotected,
    group_split,
    ner_attack,
    score_entities,
    spans_to_bio,
    word_offsets,
)
from ...attacks.threat import ThreatModel
from ...results.cell import CellError
from ...rng import seeded_generator
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat
from ._t2t import T2T_PARAMS, check_t2t_params, positive, t2t_guarantee, t2t_mechanism
from ._threads import torch_threads
from .ppft import _TRAIN

__all__ = ["ner_attack_kind", "NER_METRICS", "NER_PARAMS"]

NER_METRICS = (
    "entity_f1",
    "entity_precision",
    "entity_recall",
    "span_f1",
    "span_precision",
    "span_recall",
    "empirical_privacy",
    "span_empirical_privacy",
    "clean_entity_f1",
    "clean_span_f1",
    "clean_empirical_privacy",
    "entity_survival",
    "entity_unprotected",
    "replacement_rate",
    "kept_rate",
    "word_epsilon",
    "prompt_epsilon",
    "prompt_epsilon_max",
    "n_texts",
    "n_entities",
    "n_train_texts",
) + _TRAIN
#: Training params and their defaults.
_TRAINING = {
    "encoder": "default",
    "out": "runs/attacks/ner-tagger",
    "heldout": 0.2,
    "split_seed": 0,
    "train_limit": None,
    "epochs": 3,
    "batch_size": 16,
    "lr": 1e-4,
    "train_seed": 0,
    "max_tokens": 128,
}
NER_PARAMS = {
    **T2T_PARAMS,
    "encoder": "the attacker's encoder, fine-tuned with a token-classification head (default: all-MiniLM-L6-v2)",
    "out": "run directory of the tagger; a finished run with the same training config is reused "
    "(default runs/attacks/ner-tagger)",
    "heldout": "share of the templates held out for evaluation (default 0.2)",
    "columns": "a path or hub dataset in any layout: {text: COLUMN, pii: COLUMN, names: [...]} (the CLI's "
    "--text-column, --pii-column, --columns); each PII string's occurrences in its text are its spans (type PII)",
    "split_seed": "seed of the template split and of the training subsample (default 0)",
    "train_limit": "at most this many training texts, a seeded sample (default all)",
    "epochs": "passes over the training texts (default 3)",
    "batch_size": "texts per optimizer step (default 16)",
    "lr": "peak learning rate (default 1e-4)",
    "train_seed": "seed of the head's initialisation and the data order (default 0)",
    "max_tokens": "texts are cut to this many encoder tokens (default 128)",
    "threads": "torch threads while the cell runs (default: unchanged)",
}
_INTS = {"split_seed": 0, "epochs": 1, "batch_size": 1, "train_seed": 0, "max_tokens": 4}


def _settings(cell: Any, point: dict) -> tuple[dict, ThreatModel]:
    resolved = cell.resolve(point)
    p = dict(resolved.params)
    pos = p.get("pos")
    if isinstance(pos, str) and pos != "default":  # 'noun', 'noun,verb', 'all': a POS set as one grid value
        p["pos"] = [c.strip() for c in pos.split(",") if c.strip()] or pos
    check_t2t_params(p)
    for name, default in _TRAINING.items():
        p.setdefault(name, default)
    for name in ("encoder", "out"):
        if not isinstance(p[name], str) or not p[name].strip():
            raise CellError(f"{name} must be a non-empty string, got {p[name]!r}", field=f"params.{name}")
    for name, low in _INTS.items():
        v = p[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < low:
            raise CellError(f"{name} must be an integer >= {low}, got {v!r}", field=f"params.{name}")
    for name in ("train_limit", "threads"):
        v = p.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CellError(f"{name} must be an integer >= 1 or null, got {v!r}", field=f"params.{name}")
    if not positive(p["heldout"]) or p["heldout"] >= 1:
        raise CellError(f"heldout must be a number in (0, 1), got {p['heldout']!r}", field="params.heldout")
    if not positive(p["lr"]):
        raise CellError(f"lr must be a finite number > 0, got {p['lr']!r}", field="params.lr")
    threat = granted_threat(
        resolved.attack, "ner_attack", "ner", NER_REQUIRES, "; grant `training_text: public` in `attack.threat`"
    )
    return p, threat


def _columns(cell: Any):
    """The cell's column mapping (``params.columns``: a table with a PII column), or None for a registered dataset."""
    from ...data.table import ColumnMap

    columns = (cell.params or {}).get("columns")
    if columns is None:
        return None
    try:
        mapping = ColumnMap.from_dict(columns)
    except (ValueError, TypeError) as exc:
        raise CellError(str(exc), field="params.columns") from None
    if getattr(mapping, "pii", None) is None:
        raise CellError("ner_attack needs entity spans: map a PII column (params.columns.pii)", field="params.columns")
    return mapping


def _validate(cell: Any, points: list[dict]) -> None:
    _columns(cell)
    if cell.dataset is None:
        raise CellError("ner_attack needs a dataset with entity spans (e.g. presidio), got none", field="dataset")
    if cell.mechanism is not None:
        raise CellError(
            "ner_attack takes the mechanism in params (eta, pos, table), not `mechanism`", field="mechanism"
        )
    specs: dict[str, dict] = {}
    for point in points:
        p, _ = _settings(cell, point)
        spec = {k: p[k] for k in _TRAINING}
        if specs.setdefault(p["out"], spec) != spec:
            raise CellError(
                f"two grid points would train different taggers into {p['out']!r}; grid no training param",
                field="params.out",
            )


@dataclass(frozen=True)
class _Texts:
    """Words and gold word spans of some texts."""

    texts: list[str]
    words: list[list[str]]
    gold: list[list[tuple[int, int, str]]]


@dataclass(frozen=True)
class _Data:
    train: _Texts
    heldout: _Texts
    entity_types: list[str]


def _texts(records: list) -> _Texts:
    from ...substitution.text import split_text

    words = [split_text(r.text)[1::2] for r in records]
    gold = [char_spans_to_words(word_offsets(r.text), r.spans) for r in records]
    return _Texts([r.text for r in records], words, gold)


def _data(cell: Any, p: dict) -> _Data:
    """The template split of the cell's dataset: training texts (at most ``train_limit``, a seeded sample) and
    held-out texts (at most ``cell.limit``, a seeded sample), with the entity types of the whole dataset."""
    import torch

    from ...data import load_dataset

    columns = _columns(cell)
    extra = {} if columns is None else {"columns": columns}
    records = load_dataset(cell.dataset, split=cell.split, **extra)
    if not records or not all(hasattr(r, "spans") for r in records):
        raise CellError(f"ner_attack needs records with entity spans; {cell.dataset!r} has none", field="dataset")
    groups = [(r.attributes or {}).get("template_id", f"record:{r.id}") for r in records]
    gen = seeded_generator(p["split_seed"], warn=False)
    train, held = group_split(groups, p["heldout"], generator=gen)

    def sample(idx: list[int], limit: int | None) -> list:
        keep = sorted(idx[i] for i in torch.randperm(len(idx), generator=gen).tolist()[: limit or len(idx)])
        return [records[i] for i in keep]

    types = sorted({label for r in records for _, _, label in r.spans})
    if not types:
        raise CellError(f"{cell.dataset!r} holds no entity spans", field="dataset")
    return _Data(_texts(sample(train, p["train_limit"])), _texts(sample(held, cell.limit)), types)


def _train_spec(cell: Any, p: dict, data: _Data) -> dict:
    """The tagger's training config as plain data (:class:`~textfree.attacks.ner.NerTrainConfig`)."""
    split = f"{cell.dataset}:{cell.split or 'default'}"
    return {
        "out": p["out"],
        "encoder": p["encoder"],
        "entity_types": data.entity_types,
        "max_tokens": p["max_tokens"],
        "data": [
            f"{split} template split heldout={p['heldout']} seed={p['split_seed']} train[:{len(data.train.texts)}]"
        ],
        "epochs": p["epochs"],
        "batch_size": p["batch_size"],
        "lr": float(p["lr"]),
        "seed": p["train_seed"],
    }


def _tagger(cell: Any, p: dict, data: _Data, context: RunContext) -> tuple[NerTagger, dict[str, float]]:
    """(tagger, training metrics): a finished run with the same config is reused, else trained; once per config."""
    spec = _train_spec(cell, p, data)

    def train_or_reuse():
        from ...atomic import read_json
        from ...attacks.ner import NerTrainConfig, train_ner_tagger
        from .ppft import _reusable, _train_metrics

        cfg = NerTrainConfig(**spec, progress=False)
        run = Path(cfg.out)
        if _reusable(run, cfg.to_dict(), {"progress", "resume", "cpu", "log_every"}):
            context.logger.info("%s: reusing the finished NER tagger %s", cell.name, run)
            return NerTagger.load(run), _train_metrics(read_json(run / "summary.json"), True)
        examples = [(w, spans_to_bio(len(w), g)) for w, g in zip(data.train.words, data.train.gold)]
        summary = train_ner_tagger(cfg, examples)
        return summary.pop("model"), _train_metrics(summary, False)

    return context.cached(("ner_tagger", json.dumps(spec, sort_keys=True)), train_or_reuse)


def _scores(prefix: str, scores: NerScores) -> dict[str, float]:
    out = {}
    for level in ("entity", "span"):
        counts = getattr(scores, level)
        out |= {f"{prefix}{level}_{m}": getattr(counts, m) for m in ("f1", "precision", "recall")}
    return out


@register_cell_kind(
    "ner_attack",
    metrics=NER_METRICS,
    params=NER_PARAMS,
    validate=_validate,
    help="Entity-level F1 and empirical privacy (1 - F1) of a NER tagger, trained on clean annotated text, on "
    "T2T / PCT2T text (RAPT IV-A3).",
)
def ner_attack_kind(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    p, threat = _settings(cell, point)
    with torch_threads(p.get("threads")):
        return _run(cell, p, threat, seed, context)


def _run(cell: Any, p: dict, threat: ThreatModel, seed: int, context: RunContext) -> dict[str, float]:
    from ...substitution.text import split_text

    key = json.dumps({k: p[k] for k in ("heldout", "split_seed", "train_limit")}, sort_keys=True)
    data = context.cached(("ner_data", key), lambda: _data(cell, p))
    tagger, training = _tagger(cell, p, data, context)
    held = data.heldout
    clean = context.cached(
        ("ner_clean", key, p["out"]),
        lambda: score_entities(held.gold, ner_attack(held.words, tagger, threat=threat), held.words, held.words),
    )
    mech = t2t_mechanism(p, context)
    released = mech.privatize_detailed(held.texts, generator=seeded_generator(seed, warn=False))
    read = [split_text(t)[1::2] for t in released.texts]  # what the attacker reads: the released text itself
    if [len(w) for w in read] != [len(w) for w in held.words]:
        raise RuntimeError("the released texts do not split into as many words as the originals")
    scores = score_entities(held.gold, ner_attack(read, tagger, threat=threat), held.words, read)
    out = _scores("", scores) | {k: v for k, v in _scores("clean_", clean).items() if k.endswith("_f1")}
    out |= {
        "empirical_privacy": 1.0 - scores.entity.f1,
        "span_empirical_privacy": 1.0 - scores.span.f1,
        "clean_empirical_privacy": 1.0 - clean.entity.f1,
        "entity_survival": entity_survival(held.gold, held.words, read),
        "entity_unprotected": entity_unprotected(held.gold, released.privatized),
        "n_texts": float(len(held.texts)),
        "n_entities": float(scores.entity.gold),
        "n_train_texts": float(len(data.train.texts)),
    }
    return out | t2t_guarantee(mech, released) | training
