"""Sections of ``docs/results/attacks.md`` beyond token inversion: attribute inference and learned inversion /
restoration of PPFT payloads, and the readers of T2T / PCT2T text.

Generated from the result files of the ``attribute_inference``, ``learned_inversion`` and ``substitution_inversion``
cell kinds (newest file per cell name wins), never by hand. Figures are ``mean ± sd`` over seeds (one seed: the mean
alone). The formal guarantee
is printed beside every empirical figure: the loss of one released unit (``slot eps``; attribute inference on token
noise ``token eps``, on T2T text ``word eps``) and ``prompt eps`` (the mean prompt's composed worst case, units x
unit eps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from .report import Point, result_files

__all__ = [
    "PayloadCell",
    "collect_kind",
    "files_section",
    "attribute_section",
    "attribute_release",
    "token_noise_label",
    "inversion_section",
    "substitution_section",
    "PAPER_ATTRIBUTE_RECALL",
    "PAPER_AWARE_ROUGE_L",
    "TARGET_UNAWARE_ROUGE_L",
    "TARGET_CLEAN_ROUGE_L",
]

#: PPFT Table 3 (attribute recall of its attacker at eps 75, k 4): sex, symptoms, antecedents.
PAPER_ATTRIBUTE_RECALL = {"sex": 0.59, "symptoms": 0.10, "antecedents": 0.012}
#: PPFT's noise-aware inversion ROUGE-L at eps 75, k 4 (the figure the issue asks to report beside ours).
PAPER_AWARE_ROUGE_L = 0.4397
#: Issue 4 target: noise-unaware ROUGE-L below this at eps 75, k 4.
TARGET_UNAWARE_ROUGE_L = 0.25
#: Issue 58: an inverter whose verdict on PUPA means something first reaches this ROUGE-L on clean payloads.
TARGET_CLEAN_ROUGE_L = 0.5


@dataclass
class PayloadCell:
    name: str
    cell: dict
    points: list[tuple[dict, Point]]  # (grid point, its metrics)
    source: str
    date: str
    git: str | None = None
    builds: tuple[str, ...] = ()  # the stage-1 builds its points recorded (provenance ``stage1_build``), sorted


def collect_kind(paths: Iterable[str | Path], kind: str) -> list[PayloadCell]:
    """The newest result file of each cell of ``kind`` among ``paths`` (files or directories of ``*.json``)."""
    from ..results.files import load_results

    cells: dict[str, PayloadCell] = {}
    for f in result_files(paths):
        data = load_results(f)
        if data.get("kind") != kind:
            continue
        points = [
            (
                r["point"],
                Point(
                    None,
                    {
                        n: [math.nan if v is None else float(v) for v in m.get("values", [])]
                        for n, m in r["metrics"].items()
                    },
                ),
            )
            for r in data["results"]
        ]
        recorded = [r.get("provenance", {}).get("stage1_build") or "" for r in data["results"]]
        builds = tuple(
            sorted({b for value in recorded for b in value.split(", ") if b})
        )  # a point may read runs of several
        c = PayloadCell(
            data["cell"]["name"],
            data["cell"],
            points,
            f.name,
            data["date"],
            (data.get("git") or {}).get("commit"),
            builds,
        )
        if c.name not in cells or c.date >= cells[c.name].date:
            cells[c.name] = c
    return [cells[k] for k in sorted(cells)]


def _fmt(point: Point, name: str, pct: bool = False) -> str:
    """``mean ± sd`` over seeds (percent when ``pct``); the mean alone for one seed or a constant."""
    s = point.spread(name)
    if s is None:
        return "–"
    scale = 100 if pct else 1
    body = f"{scale * s['mean']:.1f}" if pct else f"{s['mean']:.3f}"
    if s.get("n", 1) > 1 and not math.isnan(s["std"]) and s["std"] > 0:
        body += f" ± {scale * s['std']:.1f}" if pct else f" ± {s['std']:.3f}"
    return body


def _num(point: Point, name: str) -> str:
    """A deterministic quantity (a guarantee, a count): its mean, 4 significant digits."""
    mean = point.mean(name)
    return "–" if math.isnan(mean) else f"{mean:.4g}"


def _eps(cell: PayloadCell, point: dict) -> Any:
    mech = dict(cell.cell.get("mechanism") or {})
    params = dict(cell.cell.get("params") or {})
    for key, value in point.items():
        section, _, name = key.partition(".")
        (mech if section == "mechanism" else params)[name] = value
    return mech.get("epsilon", params.get("epsilon")), params.get("k", 4)


# ------------------------------------------------------------------------------------------ attribute inference
_ATTR_ROWS = (
    ("sex_accuracy", "sex (accuracy)"),
    ("age_accuracy", "age bucket (accuracy)"),
    ("symptoms_recall", "symptoms recall"),
    ("symptoms_f1", "symptoms F1"),
    ("antecedents_recall", "antecedents recall"),
    ("antecedents_f1", "antecedents F1"),
    ("gender_accuracy", "gender (accuracy)"),
    ("age_cat_accuracy", "age category (accuracy)"),
    ("answer_accuracy", "the task's answer (accuracy)"),
)
_VARIANTS = (
    ("mean_unaware", "MLP, unaware"),
    ("mean_aware", "MLP, aware"),
    ("slots_unaware", "slots, unaware"),
    ("slots_aware", "slots, aware"),
    ("mean_count_unaware", "MLP + count, unaware"),
    ("mean_count_aware", "MLP + count, aware"),
    ("slots_count_unaware", "slots + count, unaware"),
    ("slots_count_aware", "slots + count, aware"),
)
#: The guarantee of one released unit, per release: (column title, metric).
_UNIT_EPS = {
    "slots": ("slot eps", "slot_epsilon"),
    "tokens": ("token eps", "token_epsilon"),
    "t2t": ("word eps", "word_epsilon"),
    "pct2t": ("word eps", "word_epsilon"),
}


def attribute_release(c: PayloadCell) -> str:
    """What an ``attribute_inference`` cell attacks: ``slots`` (PPFT payloads; cells before ``release`` existed),
    ``tokens``, ``t2t`` or ``pct2t``."""
    return (c.cell.get("params") or {}).get("release", "slots")


def token_noise_label(mech: dict) -> str:
    """The cross matrix's name of a token-noise mechanism, e.g. ``token noise, L2-Laplace``."""
    name = mech.get("name")
    return {"l2_laplace": "token noise, L2-Laplace", "gaussian": "token noise, Gaussian"}.get(
        name, f"clipped token noise ({(mech.get('inner') or {}).get('name')}, C = {mech.get('max_norm')})"
    )


def _release_title(c: PayloadCell) -> str:
    release = attribute_release(c)
    if release == "tokens":
        return (
            f"release: {token_noise_label(c.cell.get('mechanism') or {})}, max "
            f"{(c.cell.get('params') or {}).get('max_tokens', 128)} tokens"
        )
    if release == "slots":
        params = c.cell.get("params") or {}
        pad_to, center = params.get("pad_to"), params.get("center")
        return (
            "release: PPFT slots"
            + (f", padded to {pad_to} slots (count hidden)" if pad_to else "")
            + (f", centred on the slot centre of `{center}`" if center else "")
            + (", each prompt's mean slot repeated" if params.get("repeat_mean") is True else "")
        )
    pos = (c.cell.get("params") or {}).get("pos", "default")
    return (
        "release: T2T text"
        if release == "t2t"
        else f"release: PCT2T text ({pos if isinstance(pos, str) else ', '.join(pos)})"
    )


def _lead(c: PayloadCell, point: dict, p: Point | None = None) -> tuple[list[str], list[str]]:
    """The columns that say which mechanism setting a row is: (titles, values); ``p``: the row's metrics."""
    release = attribute_release(c)
    if release == "slots":
        eps, k = _eps(c, point)
        if "params.train_limit" in point:  # a learning curve: the attacker's training rows are a grid axis
            return ["eps", "k", "training rows"], [str(eps), str(k), str(point["params.train_limit"])]
        if "params.center" in point:  # the client with and without a slot centre, side by side
            rank = 0 if p is None or math.isnan(p.mean("subspace_rank")) else int(p.mean("subspace_rank"))
            client = (
                "PPFT (as encoded)"
                if not point["params.center"]
                else f"slots centred, class subspace (m {rank})"
                if rank
                else "slots centred"
            )
            return ["eps", "k", "client"], [str(eps), str(k), client]
        if "params.repeat_mean" in point:  # the client with and without each prompt's mean slot repeated, side by side
            return ["eps", "k", "client"], [
                str(eps),
                str(k),
                "each prompt's mean slot repeated" if point["params.repeat_mean"] else "its own slots (as PPFT)",
            ]
        return ["eps", "k"], [str(eps), str(k)]
    if release in ("t2t", "pct2t"):
        return ["eta"], [str(point.get("params.eta", (c.cell.get("params") or {}).get("eta")))]
    axes = [key for key in point if key.startswith("mechanism.")]
    if not axes:
        mech = c.cell.get("mechanism") or {}
        return ["mechanism"], [", ".join(f"{k} {v}" for k, v in mech.items() if k != "name")]
    return [key.removeprefix("mechanism.") for key in axes], [str(point[key]) for key in axes]


def attribute_section(cells: list[PayloadCell]) -> list[str]:
    lines = [
        "",
        "## Attribute inference (PPFT Table 3 shape)",
        "",
        "The attacker trains on releases it makes itself from in-domain text (the Pri-DDX PPFT train part) and "
        "predicts",
        "each held-out prompt's attributes from its release: PPFT payloads (*slots*; it queries the encoder), noisy",
        "token embeddings (*token noise*; it holds the table) or T2T / PCT2T text (*text*; it encodes the text with",
        "an encoder of its own, k-pooled unit slots). The attackers: a 2-layer MLP on the mean vector or attention",
        "over the vectors (*+ count*: also reading the number of vectors), trained on clean inputs (*unaware*) or on",
        "the same mechanism's releases (*aware*: fresh noise every epoch; for text, a few T2T runs over its training",
        "text, cycled); a cell shows the ones it ran. **best** is the one chosen on a validation part of the",
        "attacker's own texts (result files written before 2026-11-29: the strongest on the held-out prompts);",
        "*clean text* is a TF-IDF + logistic-regression reader of the unprivatized text (whether the text carries the",
        "attribute at all; older files show –);",
        "*prior* is the best guess without any input (training marginals); *label* is what the task's correct",
        "answer (the diagnosis) alone reveals; *length* is what the number of released units (slots, tokens) alone",
        "reveals, by the same rule within training rows of that count (the mechanism hides each unit's content, not",
        "their number; cells run before it existed show –); **excess** = best minus the larger of prior and label: the",
        "leak the mechanism is responsible for. Percentages of held-out prompts (accuracy) or of gold attributes "
        "(recall; F1 guards",
        "against predicting every label). The unit eps column is one released unit's worst case (a slot, a token at",
        "the table's diameter, a word at the table's diameter); prompt eps composes it over the prompt's units.",
        "Cells with `target: answer` predict the task's correct answer itself (the diagnosis, the charge) from the",
        "release: a leak of the most sensitive attribute, and what a PPFT server reading the same payloads could at "
        "best",
        "recover with a classifier of this size (there is no label reference then: the label is the target).",
        "PPFT Table 3 reports recall",
        f"{PAPER_ATTRIBUTE_RECALL['sex']} / {PAPER_ATTRIBUTE_RECALL['symptoms']} / "
        f"{PAPER_ATTRIBUTE_RECALL['antecedents']}"
        " (sex / symptoms / antecedents) at eps 75, k 4 with a weaker attacker.",
    ]
    if not cells:
        return lines + ["", "No attribute_inference result files were given."]
    for c in cells:
        encoder = c.cell.get("encoder", "default")
        unit_title, unit_metric = _UNIT_EPS[attribute_release(c)]
        params = c.cell.get("params") or {}
        scaled = "; attackers read the pooled vector standardised" if params.get("standardize") else ""
        scaled += "; linear attackers (no hidden layer)" if params.get("hidden") == 0 else ""
        lines += ["", f"### `{c.name}` ({c.cell.get('dataset')}, encoder `{encoder}`; {_release_title(c)}{scaled})", ""]
        present = [(m, label) for m, label in _ATTR_ROWS if any(p.spread(f"{m}_best") for _, p in c.points)]
        variants = [
            (v, label) for v, label in _VARIANTS if any(p.spread(f"{m}_{v}") for m, _ in present for _, p in c.points)
        ]
        titles = _lead(c, c.points[0][0])[0] if c.points else []
        lines += [
            "| "
            + " | ".join(titles)
            + f" | {unit_title} | prompt eps (mean) | attribute | prior | clean text | label | length | "
            + " | ".join(v for _, v in variants)
            + " | **best** | **excess** |",
            "|" + "---|" * (len(titles) + 7) + "---|" * len(variants) + "---|---|",
        ]
        for point, p in c.points:
            values = _lead(c, point, p)[1]
            for i, (m, label) in enumerate(present):
                head = (
                    "| " + " | ".join(values) + f" | {_num(p, unit_metric)} | {_num(p, 'prompt_epsilon')} "
                    if i == 0
                    else "| " * (len(values) + 2)
                )
                cols = [_fmt(p, f"{m}_prior", True), _fmt(p, f"{m}_clean", True)]
                cols += [_fmt(p, f"{m}_label", True), _fmt(p, f"{m}_length", True)]
                cols += [_fmt(p, f"{m}_{v}", True) for v, _ in variants]
                cols += [f"**{_fmt(p, f'{m}_best', True)}**", f"**{_fmt(p, f'{m}_excess', True)}**"]
                lines.append(head + f"| {label} | " + " | ".join(cols) + " |")
    return lines


# ------------------------------------------------------------------------------------------ learned inversion
_INIT_LABELS = {0.0: "", 1.0: ", stage-1-aligned init", 2.0: ", init from the served stage-2 model"}


def _variant(c: PayloadCell, p: Point) -> str:
    params = c.cell.get("params") or {}
    v = params.get("variant")
    if v == "restoration":
        return "restoration instruction (served PPFT model)"
    if params.get("inverter") == "slot_tokens":
        return f"slot-token classifier (no decoder), noise-{v}"
    if params.get("inverter") == "iterative":
        point = next((pt for pt, q in c.points if q is p), {})
        budget = {k: point.get(f"params.{k}", params.get(k, d)) for k, d in (("rounds", 6), ("candidates", 16))}
        return (f"iterative search re-encoding hypotheses (PPFT App. K; nothing trained; {budget['rounds']} rounds of "
                f"{budget['candidates']} candidates)")  # fmt: skip
    if p.spread("init_stage") is not None:  # recorded: what the decoder started from (a grid over params.init too)
        init = _INIT_LABELS[p.mean("init_stage")]
    else:  # results from before init_stage existed: a string init was a stage-1 run
        init = _INIT_LABELS[1.0 if isinstance(params.get("init"), str) else 0.0]
    return f"learned, noise-{v}" + init + (", full fine-tuning" if params.get("train_decoder") else "")


def _attack_label(c: PayloadCell, p: Point) -> str:
    """The variant, and the fixed slot count when the payloads were padded (the count hidden: another mechanism), and
    whether the client centred its slots (another client)."""
    n = p.mean("padded_slots")  # NaN: unpadded, or a result from before padded_slots existed
    return (
        _variant(c, p)
        + ("" if math.isnan(n) else f", payloads padded to {n:g} slots")
        + (", slots centred by the client" if centred(p) else "")
    )


def centred(p: Point) -> bool:
    """An inversion result on payloads whose client centred its slots (results from before ``centred`` existed: no)."""
    return p.spread("centred") is not None and p.mean("centred") == 1.0


def _attacker_text(c: PayloadCell) -> str:
    params = c.cell.get("params") or {}
    if params.get("variant") == "restoration":
        return "none"
    text = params.get("train_text")
    return "in-domain (Pri-* train part)" if not text else "public: " + ", ".join(text)


def _is_free_text(c: PayloadCell) -> bool:
    """A cell on free text with PII units (PUPA, Presidio) rather than a templated Pri-* dataset."""
    from ..data.registry import is_ppft_dataset

    return not is_ppft_dataset(c.cell.get("dataset", ""))


_Column = tuple[str, Callable[[PayloadCell, Any, Any, Point], str]]
_LEAD: list[_Column] = [("cell", lambda c, e, k, p: f"`{c.name}`"), ("attack", lambda c, e, k, p: _attack_label(c, p))]
_GUARANTEE: list[_Column] = [
    ("eps (eval)", lambda c, e, k, p: "clean" if e is None else str(e)),
    ("k", lambda c, e, k, p: str(k)),
    ("slot eps", lambda c, e, k, p: _num(p, "slot_epsilon")),
    ("prompt eps (mean)", lambda c, e, k, p: _num(p, "prompt_epsilon")),
    ("ROUGE-L", lambda c, e, k, p: _fmt(p, "rouge_l")),
    ("no-input ROUGE-L", lambda c, e, k, p: _fmt(p, "rouge_l_prior")),
    ("ROUGE-L gain over no input", lambda c, e, k, p: _gain(p)),
    ("BLEU", lambda c, e, k, p: _fmt(p, "bleu")),
]
_TEMPLATED_COLUMNS: list[_Column] = (
    _LEAD
    + _GUARANTEE
    + [
        ("symptoms recall", lambda c, e, k, p: _fmt(p, "symptoms_recall_text", True)),
        ("no-input symptoms recall", lambda c, e, k, p: _fmt(p, "symptoms_recall_text_prior", True)),
        ("antecedents recall", lambda c, e, k, p: _fmt(p, "antecedents_recall_text", True)),
        ("n", lambda c, e, k, p: _num(p, "n_eval")),
    ]
)
_FREE_TEXT_COLUMNS: list[_Column] = (
    _LEAD
    + [("attacker's text", lambda c, e, k, p: _attacker_text(c))]
    + _GUARANTEE
    + [
        ("PII exact", lambda c, e, k, p: _fmt(p, "pii_exact", True)),
        ("PII fuzzy", lambda c, e, k, p: _fmt(p, "pii_fuzzy", True)),
        ("no-input PII exact", lambda c, e, k, p: _fmt(p, "pii_exact_prior", True)),
        ("PII units", lambda c, e, k, p: _num(p, "n_pii_units")),
        ("n", lambda c, e, k, p: _num(p, "n_eval")),
    ]
)


def _gain(p: Point) -> str:
    """:func:`~textfree.metrics.score_gain` of the mean ROUGE-L over the mean no-input ROUGE-L ("–" without both)."""
    from ..metrics import score_gain

    value, prior = p.mean("rouge_l"), p.mean("rouge_l_prior")
    if math.isnan(value) or math.isnan(prior) or prior >= 1.0:
        return "–"
    return f"{score_gain(value, prior):+.3f}"


def _inversion_table(cells: list[PayloadCell], columns: list[_Column]) -> tuple[list[str], list[tuple]]:
    """A markdown table, one row per (cell, point), and the (cell, eps, k, point) of each row."""
    lines = ["| " + " | ".join(h for h, _ in columns) + " |", "|" + "---|" * len(columns)]
    seen = []
    for c in cells:
        for point, p in c.points:
            eps, k = _eps(c, point)
            lines.append("| " + " | ".join(cell(c, eps, k, p) for _, cell in columns) + " |")
            seen.append((c, eps, k, p))
    return lines, seen


def inversion_section(cells: list[PayloadCell]) -> list[str]:
    lines = [
        "",
        "## Learned inversion and restoration of PPFT payloads (PPFT Fig. 3 / Tables 8, 11 shape)",
        "",
        "An inverter (the client's encoder + pooling, a learnable projection, a LoRA decoder) is trained on payloads "
        "of",
        "the attacker's own text to regenerate the prompt, then inverts held-out payloads (greedy decoding).",
        "*noise-unaware*: trained on clean payloads; *noise-aware*: on payloads of the evaluated mechanism;",
        "*iterative search* (PPFT Appendix K, `textfree.attacks.iterative`): no inverter is trained; token sequences "
        "are",
        "searched whose own payload, made with the client's encoder (query access), is closest to the observed one;",
        "*stage-1-aligned*: starts from the PPFT stage-1 model; *init from the served stage-2 model*: starts from the",
        "server's own trained stage-2 model (the server attacks with the model it serves); *restoration*: the served",
        "PPFT model is asked to restore the prompt, no training. ROUGE-L is the mean per-prompt F1; attribute recall "
        "is read off the text.",
        "*ROUGE-L gain over no input* = (ROUGE-L - no-input ROUGE-L) / (1 - no-input ROUGE-L): the share of the room",
        "above one constant guess that the payload gave the attacker (0: no better than the guess; negative: worse).",
        "Only texts the client sends whole (at most the model's private-token limit) are evaluated.",
    ]
    if not cells:
        return lines + ["", "No learned_inversion result files were given."]
    templated, free = [c for c in cells if not _is_free_text(c)], [c for c in cells if _is_free_text(c)]
    verdict = []
    if templated:
        rows, seen = _inversion_table(templated, _TEMPLATED_COLUMNS)
        lines += [
            "",
            "*no-input reference*: one constant guess, the medoid of the attacker's own training prompts (Pri-* "
            "prompts",
            "share a template, so ROUGE-L is far from 0 without any payload); read ROUGE-L against it.",
            "",
        ] + rows
        verdict += seen
    if free:
        rows, seen = _inversion_table(free, _FREE_TEXT_COLUMNS)
        lines += [
            "",
            "### Free text with PII units (PUPA user queries)",
            "",
            "No template here: the no-input reference (the medoid of the attacker's training texts) scores little, so",
            "ROUGE-L measures what the payload gives away. PII columns: the share of the evaluated texts' PII units",
            "(PUPA `pii_units`) found in the reconstructions, verbatim (*exact*, normalised tokens) or at similarity "
            ">= 0.8",
            "(*fuzzy*); *no-input* = found in the constant guess.",
            "",
        ] + rows
        verdict += seen
    lines += [""]
    for c, eps, k, p in verdict:
        if (c.cell.get("params") or {}).get("inverter") == "iterative":
            lines.append(_iterative_line(c, eps, p))
        variant, value, prior = (c.cell.get("params") or {}).get("variant"), p.mean("rouge_l"), p.mean("rouge_l_prior")
        if eps != 75 or k != 4 or variant not in ("unaware", "aware") or math.isnan(value) or centred(p):
            continue
        ref = "" if math.isnan(prior) else f" (no-input reference {prior:.3f})"
        clean = [q.mean("rouge_l") for point, q in c.points if _eps(c, point)[0] is None]
        if clean and not math.isnan(clean[0]):
            ref += f" (the same inverter on clean payloads: {clean[0]:.3f})"
        where = f"on {c.cell.get('dataset')}, attacker's text {_attacker_text(c)}"
        if variant == "unaware":
            ok = "met" if value < TARGET_UNAWARE_ROUGE_L else "NOT met"
            gain = _gain(p)
            if gain != "–":
                ref += f" (gain over the no-input reference {gain})"
            lines.append(
                f"* Target (issue 4): {_variant(c, p)} ROUGE-L < {TARGET_UNAWARE_ROUGE_L} at eps 75, k 4, {where}: "
                f"{value:.3f}{ref}, **{ok}**."
            )
        else:
            lines.append(
                f"* {_attack_label(c, p)} at eps 75, k 4, {where}: ROUGE-L {value:.3f}{ref} (PPFT reports "
                f"{PAPER_AWARE_ROUGE_L} for its noise-aware attacker)."
            )
    return lines


def _clean_rouge_l(c: PayloadCell) -> float:
    """The cell's ROUGE-L on clean payloads (NaN without a clean point)."""
    clean = [q.mean("rouge_l") for point, q in c.points if _eps(c, point)[0] is None]
    return clean[0] if clean else math.nan


def _iterative_line(c: PayloadCell, eps: Any, p: Point) -> str:
    """One point of the iterative search: its ROUGE-L beside its start, the no-input reference and the clean figure,
    and what bounds it: the mean slot cosine of its text with the payload against that of the true text (a search that
    stops below the truth's fit is bounded by the search; one above it has found text the payload fits better than
    the truth, so the noise bounds it). On clean payloads, the issue-58 target (ROUGE-L >= 0.5)."""
    value, found, truth = p.mean("rouge_l"), p.mean("search_cosine"), p.mean("true_cosine")
    where = "clean payloads" if eps is None else f"eps {eps}"
    figures = (
        f"ROUGE-L {value:.3f} (its start, each slot's nearest tokens: {p.mean('start_rouge_l'):.3f}; no-input "
        f"reference {p.mean('rouge_l_prior'):.3f}"
    )
    clean = _clean_rouge_l(c)
    figures += ")" if eps is None or math.isnan(clean) else f"; the same search on clean payloads: {clean:.3f})"
    if math.isnan(found) or math.isnan(truth):
        bound = ""
    elif found < truth - 1e-4:
        bound = (
            f"; mean slot cosine with the payload {found:.3f}, the true text's {truth:.3f}: the search stops short "
            "of the truth, so the search bounds it"
        )
    else:
        bound = (
            f"; mean slot cosine with the payload {found:.3f} against the true text's {truth:.3f}: the search finds "
            "text the payload fits at least as well as the truth, so the noise bounds it"
        )
    line = f"* {_attack_label(c, p)}, `{c.name}` on {c.cell.get('dataset')}, {where}: {figures}{bound}"
    line += f"; {p.mean('s_per_text'):.1f} s per text."
    if eps is None:
        ok = "met" if value >= TARGET_CLEAN_ROUGE_L else "NOT met"
        line += f" Target (issue 58): ROUGE-L >= {TARGET_CLEAN_ROUGE_L} on clean payloads: **{ok}**."
    return line


# ------------------------------------------------------------------------------------------ T2T / PCT2T readers
_READERS = (("identity", "identity"), ("channel", "channel"), ("learned", "learned"), ("prior", "no input"))


def substitution_section(cells: list[PayloadCell]) -> list[str]:
    lines = [
        "",
        "## Readers of T2T / PCT2T text",
        "",
        "The released text is read as it is (*identity*), mapped word by word to the input word that most often",
        "produced each output word in the attacker's own runs of the mechanism on in-domain text (*channel*), or",
        "rewritten by a decoder fine-tuned on the attacker's own runs of the mechanism (*learned*, noise-aware,",
        "greedy decoding). *no input*: one constant guess, the medoid of the attacker's training texts (Pri-* prompts",
        "share a template: read the others against it). Word recovery: original words recovered at their position",
        "(%; a learned guess may have another word count, so its positions come from a minimum-edit alignment);",
        "*kept*: words outside the table, released verbatim and not covered by the guarantee; *word eps*: one",
        "word's worst case (eta x table diameter).",
    ]
    if not cells:
        return lines + ["", "No substitution_inversion result files were given."]
    for c in cells:
        pos = (c.cell.get("params") or {}).get("pos")
        readers = [(a, label) for a, label in _READERS if any(p.spread(f"word_recovery_{a}") for _, p in c.points)]
        lines += [
            "",
            f"### `{c.name}` ({'PCT2T, ' + (pos if isinstance(pos, str) else ', '.join(pos)) if pos else 'T2T'})",
            "",
            "| eta | word eps | prompt eps (mean) | replaced | kept | "
            + " | ".join(f"recovery, {label}" for _, label in readers)
            + " | "
            + " | ".join(f"ROUGE-L, {label}" for _, label in readers)
            + " |",
            "|---|---|---|---|---|" + "---|" * (2 * len(readers)),
        ]
        for point, p in c.points:
            eta = point.get("params.eta", (c.cell.get("params") or {}).get("eta"))
            lines.append(
                f"| {eta} | {_num(p, 'word_epsilon')} | {_num(p, 'prompt_epsilon')} | "
                f"{_fmt(p, 'replacement_rate', True)} | "
                f"{_fmt(p, 'kept_rate', True)} | "
                + " | ".join(_fmt(p, f"word_recovery_{a}", True) for a, _ in readers)
                + " | "
                + " | ".join(_fmt(p, f"rouge_l_{a}") for a, _ in readers)
                + " |"
            )
    return lines


def files_section(cells: list[PayloadCell]) -> list[str]:
    """The result files behind the PPFT-payload sections: cell, kind, file, date, commit and the stage-1 builds of
    the PPFT runs its points read (the encoder, the served or init run; "not recorded" before 2026-11-25 and for
    cells that read no PPFT run)."""
    if not cells:
        return []
    lines = [
        "",
        "## Result files of the payload attacks",
        "",
        '"Stage-1 build": the fingerprint of the stage-1 run the PPFT runs a cell read descend from (its encoder,',
        "the served model or the inverter's init; `runs/stage1` rebuilt is another build at the same path), recorded",
        "since 2026-11-25. Compare rows of one build with docs/results/ppft.md's rows of the same build.",
        "",
        "| cell | kind | file | date | git commit | stage-1 build |",
        "|---|---|---|---|---|---|",
    ]
    for c in sorted(cells, key=lambda c: (c.cell.get("kind", ""), c.name)):
        build = ", ".join(b[:12] for b in c.builds) or "not recorded"
        lines.append(
            f"| `{c.name}` | {c.cell.get('kind', '')} | `{c.source}` | {c.date} | {(c.git or 'unknown')[:10]} | "
            f"{build} |"
        )
    return lines
