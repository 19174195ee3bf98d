"""``docs/results/ppft.md``: PPFT's tables at this scale, generated from result files (never written by hand).

``build_report(paths)`` reads the result JSON files of the ``ppft_*`` cell kinds (examples/cells/ppft/), sorts
each grid point into the table it belongs to, and returns Markdown; ``write_report`` also draws the figures from
the same files. Every figure is a mean over evaluation noise seeds with its sample standard deviation
(``mean ± sd (n seeds)``); clean and blind rows are deterministic and run with one seed.

How a point is classified (from the cell's kind, dataset and resolved params, nothing else):

* ``ppft_stage2`` with ``summary_slots`` > 0 (server-side summary vectors, beyond the paper) -> only the summary
  table, with ``count_vectors`` > 0 only the count-vector table, with ``answer_head`` only the answer-head table,
  with ``center_mu`` (the client centres its slots) only the centring table, with ``slot_insert`` / ``slot_drop``
  (the server blurs the slot count of its training rows) only the augmentation table, and
  with ``fixed_slots`` (the client pads to a fixed slot count) only the slot-count table, each beside
  PPFT's layout; every other table shows PPFT's layout (slots only, the count released).
* ``ppft_stage2`` with ``train_seed`` other than 0 (a second training of a row) -> only the training-seed table.
* ``ppft_stage2`` with ``blind: true`` -> the blind row; ``epsilon: null`` -> the upper bound (no noise);
  ``mechanism: gaussian`` -> the noise-type table; otherwise an L2-Laplace PPFT run (Table 1 at k=4, Table 5).
* ``ppft_evaluate`` on a Pri-* dataset -> the lower bound (a stage-1 model answering from payloads); on another
  dataset (csqa, arc) -> the general-domain table (Table 4 shape).
* ``ppft_pipeline`` (the whole pipeline timed in one call) -> the pipeline-time table; without one, the table is
  composed from ``ppft_pretrain`` / ``ppft_stage1`` and the eps-28 Pri-DDX stage-2 run.

When several files hold the same point, the newest file wins. A beyond-the-paper section shows PPFT's layout at
the stage-2 lengths its variants were trained for (the newest PPFT run only when none of those lengths was run).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from ..metrics import mean_interval, seed_spread, welch_test

__all__ = ["PAPER_TABLE1", "WIDTH_MATCHED", "GDP_MATCHED", "PAPER_EPSILON", "Entry", "collect", "build_report", "write_report"]

#: PPFT paper, Table 1 (Llama-3.2-1B decoder, ModernBERT-large encoder, eps=75, k=4): lower / PPFT / upper.
PAPER_TABLE1 = {"pri-ddx": (0.3707, 0.4537, 0.7071), "pri-slja": (0.4648, 0.7693, 0.9003)}
PAPER_EPSILON = 75.0
PAPER_ENCODER_DIM = 1024
#: eps giving MiniLM (d=384) the paper's expected noise norm d/eps: 75 * 384 / 1024 = 28.125, run as 28.
WIDTH_MATCHED = 28.0
#: eps giving MiniLM the paper's slot privacy loss (textfree.mechanisms.gdp): mu = 2 eps / sqrt(d) kept,
#: 75 * sqrt(384 / 1024) = 45.9, run as 46. Beyond the issue, which judges its targets at WIDTH_MATCHED.
GDP_MATCHED = 46.0
ENCODER_DIM = 384
_TARGET_RETENTION = 0.85
_CLEAR_MARGIN = 0.02  # absolute accuracy by which PPFT must beat the blind row and the lower bound


@dataclass
class Entry:
    """One grid point of one result file."""

    kind: str
    dataset: str
    params: dict[str, Any]
    metrics: dict[str, dict[str, Any]]
    source: str
    date: str
    git: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def values(self, name: str) -> list[float]:
        m = self.metrics.get(name)
        if not m:
            return []
        return [math.nan if v is None else float(v) for v in m.get("values", [])]

    def mean(self, name: str) -> float:
        v = [x for x in self.values(name) if not math.isnan(x)]
        return sum(v) / len(v) if v else math.nan


def collect(paths: Iterable[str | Path]) -> list[Entry]:
    """Every grid point of the given result files (directories are searched for ``*.json``), oldest file first."""
    from ..experiments import load_results

    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    entries = []
    for f in files:
        data = load_results(f)
        if not str(data.get("kind", "")).startswith("ppft_"):
            continue
        cell = data["cell"]
        git = (data.get("git") or {}).get("commit")
        for r in data["results"]:
            build = r.get("provenance", {}).get("stage1_build")
            entries.append(Entry(data["kind"], str(cell.get("dataset") or ""), dict(r["resolved"]["params"]), r["metrics"],
                                 f.name, data["date"], git, {"split": cell.get("split"), "build": build}))
    entries.sort(key=lambda e: e.date)
    return entries


# ------------------------------------------------------------------------------------------------ formatting
def _fmt(entry: Entry | None, name: str, digits: int = 3) -> str:
    if entry is None:
        return "—"
    vals = [v for v in entry.values(name) if not math.isnan(v)]
    if not vals:
        return "—"
    s = seed_spread(vals)
    if s["n"] == 1 or s["std"] == 0:
        return f"{s['mean']:.{digits}f}" + ("" if s["n"] == 1 else f" ({s['n']} seeds, all equal)")
    return f"{s['mean']:.{digits}f} ± {s['std']:.{digits}f} ({s['n']})"


def _epochs(entry: Entry | None) -> str:
    """Stage-2 epochs, and the client's private-token limit when the cell changed it from the init run's."""
    epochs = None if entry is None else entry.params.get("epochs")
    if epochs is None:
        return "—"
    tokens = entry.params.get("max_private_tokens")
    return f"{epochs}" + (f" ({tokens} private tokens)" if tokens else "")


def _eps_label(eps: float | None) -> str:
    if eps is None:
        return "none"
    if float(eps) == PAPER_EPSILON:
        return f"{eps:g} (paper's)"
    if float(eps) == WIDTH_MATCHED:
        return f"{eps:g} (width-matched)"
    if float(eps) == GDP_MATCHED:
        return f"{eps:g} (GDP-matched)"
    return f"{eps:g}"


#: PPFT's own layout: no server-side summary vectors, the slot count released as it is (no padding).
_PPFT_LAYOUT = {"summary": 0, "fixed": False, "count": (0, 0.0), "answer": False, "center": None, "subspace": None, "augment": (0.0, 0.0, 0),
                "ema": None, "variants": None, "optim": (1e-3, 0.0), "train_seed": 0}  # every table but the training-seed one shows training seed 0
_TABLE1_PPFT = dict(family="l2_laplace", blind=False, epsilon=WIDTH_MATCHED, k=4)  # Table 1's PPFT row at the target point
_LAYOUT_HEADER = {"summary": "server layout", "ema": "server training", "optim": "server training", "fixed": "client", "count": "server layout", "answer": "server layout", "center": "client",
                  "augment": "server training", "variants": "client training", "center+augment": "client + server training",
                  "center+answer": "client + server layout", "center+subspace": "client",
                  "center+subspace+answer": "client + server layout"}


def _layout_default(key: str) -> Any:
    """PPFT's value of a layout key; of a combined key ("center+answer") the tuple of its parts' values."""
    parts = key.split("+")
    return _PPFT_LAYOUT[key] if len(parts) == 1 else tuple(_PPFT_LAYOUT[p] for p in parts)


def _expand(want: dict[str, Any]) -> dict[str, Any]:
    """``want`` with each combined key ("center+answer": (1.0, True)) split into its parts."""
    out: dict[str, Any] = {}
    for k, v in want.items():
        out |= dict(zip(k.split("+"), v)) if "+" in k else {k: v}
    return out


def _latest(entries: Sequence[Entry], **want: Any) -> Entry | None:
    """The newest entry matching ``want``; PPFT's own layout (:data:`_PPFT_LAYOUT`) unless ``want`` names another."""
    want = _PPFT_LAYOUT | _expand(want)
    hit = None
    for e in entries:
        if all(_get(e, k) == v for k, v in want.items()):
            hit = e
    return hit


def _get(e: Entry, key: str) -> Any:
    if "+" in key:  # a combined layout: the tuple of its parts
        return tuple(_get(e, part) for part in key.split("+"))
    if key == "kind":
        return e.kind
    if key == "dataset":
        return e.dataset.lower()
    if key == "family":
        return e.params.get("mechanism") or "l2_laplace"
    if key == "blind":
        return bool(e.params.get("blind", False))
    if key == "k":
        return e.params.get("k") or 4
    if key == "summary":
        return int(e.params.get("summary_slots") or 0)
    if key == "fixed":
        return bool(e.params.get("fixed_slots") or False)
    if key == "answer":  # the server's answer head: False none (PPFT); else (linear, standardised, over the options, width)
        if not e.params.get("answer_head"):
            return False
        hidden = int(e.params.get("answer_head_hidden", 256))
        return hidden == 0, bool(e.params.get("answer_head_standardize")), bool(e.params.get("answer_head_options")), hidden
    if key == "center":  # the client's slot centre: the mu of its private estimate, None without one
        mu = e.params.get("center_mu")
        return None if mu is None else float(mu)
    if key == "subspace":  # the client's class subspace: the passes of fresh payloads it was fitted from, None without one
        n = e.params.get("subspace_epochs")
        return None if n is None else int(n)
    if key == "augment":  # the server's training-only slot-count augmentation: (slot_insert, slot_drop, its epochs; 0: all)
        return float(e.params.get("slot_insert") or 0.0), float(e.params.get("slot_drop") or 0.0), int(e.params.get("slot_augment_epochs") or 0)
    if key == "variants":  # the client's training-only prompt rewrites: (prob, shuffle, drop), None without (PPFT)
        prob = e.params.get("prompt_variants")
        if not prob:
            return None
        return float(prob), bool(e.params.get("prompt_variant_shuffle", True)), float(e.params.get("prompt_variant_drop") or 0.0)
    if key == "ema":  # the decay of the weight average the run saved, None: the last step's weights (PPFT)
        decay = e.params.get("ema_decay")
        return None if decay is None else float(decay)
    if key == "optim":  # stage 2's optimiser: (peak lr, weight decay), PPFT's (Stage2Config's defaults) unless set
        lr, wd = e.params.get("lr"), e.params.get("weight_decay")
        return float(_PPFT_LAYOUT["optim"][0] if lr is None else lr), float(wd or 0.0)
    if key == "train_seed":  # the server's training seed (the cell's seeds are evaluation noise seeds)
        return int(e.params.get("train_seed") or 0)
    if key == "count":  # (count vectors, their training dropout)
        return int(e.params.get("count_vectors") or 0), float(e.params.get("count_dropout") or 0.0)
    if key == "epsilon":
        eps = e.params.get("epsilon", "missing")
        return None if eps is None else (float(eps) if eps != "missing" else "missing")
    return e.params.get(key)


def _ratio(a: float, b: float) -> str:
    return "—" if (math.isnan(a) or math.isnan(b) or b == 0) else f"{a / b:.1%}"


# ------------------------------------------------------------------------------------------------ tables
def _table1_ppft(stage2: Sequence[Entry], recipe: tuple[Any, dict[str, Any]] | None = None
                 ) -> tuple[Entry | None, Entry | None, dict[str, Any]]:
    """(Table 1's PPFT row at the targets' point, its upper bound, the optimisation settings they were trained with:
    ``{}`` for PPFT's defaults). ``recipe``: the (stage-2 length, optimisation settings) selected on validation
    (:func:`~textfree.ppft.report_selection.selected_recipe`). The row: the newest run of that recipe when it was run
    on every training row and has its own upper bound; else, with PPFT's default settings, the newest run at that
    length when one was run, else the newest run. Its bound: the newest clean run of the row's settings and length,
    else (default settings only) the newest clean run."""
    length, layout = recipe or (None, {})
    if layout:
        ppft = _latest(stage2, **_TABLE1_PPFT, epochs=length, **layout)
        upper = _latest(stage2, blind=False, epsilon=None, epochs=length, **layout) if ppft is not None else None
        if ppft is not None and upper is not None:
            return ppft, upper, layout
    ppft = (_latest(stage2, **_TABLE1_PPFT, epochs=length) if length is not None else None) or _latest(stage2, **_TABLE1_PPFT)
    upper = _latest(stage2, blind=False, epsilon=None, epochs=ppft.params.get("epochs")) if ppft is not None else None
    return ppft, upper or _latest(stage2, blind=False, epsilon=None), {}


def settings_name(layout: dict[str, Any]) -> str:
    """"stage-2 lr 0.0005" for one optimisation setting of PPFT's own layout (``{"optim": (5e-4, 0.0)}``)."""
    (key, value), = layout.items()
    return next(n for k, n, _, _ in _LAYOUT_SECTIONS if k == key)(value).removeprefix("PPFT, ")


def _table1(entries: Sequence[Entry], ds: str, recipe: tuple[Any, dict[str, Any]] | None = None) -> list[str]:
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    lower = [e for e in entries if e.kind == "ppft_evaluate" and e.dataset.lower() == ds]
    blind = _latest(stage2, blind=True)
    target, upper, settings = _table1_ppft(stage2, recipe)
    length = recipe[0] if recipe else None
    ppft_at = {PAPER_EPSILON: _latest(stage2, **_TABLE1_PPFT | {"epsilon": PAPER_EPSILON}), WIDTH_MATCHED: target}
    rows: list[tuple[str, str, Entry | None, tuple[str, str]]] = []
    paper = PAPER_TABLE1.get(ds, (None, None, None))
    rows.append(("blind (public options only, no private prefix)", "—", blind, ("blind_mcqa", "blind_open")))
    for eps in (PAPER_EPSILON, WIDTH_MATCHED):
        rows.append((f"lower bound (stage 1 only), eps {_eps_label(eps)}", "{:.4f}".format(paper[0]) if paper[0] and eps == PAPER_EPSILON else "",
                     _latest(lower, epsilon=eps, k=4), ("mcqa", "open")))
    for eps in (PAPER_EPSILON, WIDTH_MATCHED):
        rows.append((f"PPFT, eps {_eps_label(eps)}, k=4" + (f" ({settings_name(settings)})" if settings and eps == WIDTH_MATCHED else ""),
                     "{:.4f}".format(paper[1]) if paper[1] and eps == PAPER_EPSILON else "", ppft_at[eps], ("mcqa", "open")))
    for eps in (PAPER_EPSILON, WIDTH_MATCHED):
        e = ppft_at[eps]
        if e is not None and e.values("acc_length_open"):
            rows.append((f"slot count only: the eps {eps:g} PPFT model given random unit slots, the payload's count", "", e,
                         ("length_mcqa", "length_open")))
    rows.append((f"upper bound (stage 2 without noise{', ' + settings_name(settings) if settings else ''})",
                 "{:.4f}".format(paper[2]) if paper[2] else "", upper, ("mcqa", "open")))
    out = [
        "| row | stage-2 epochs | 4-option acc | 4-option, prompt does not name the answer | 4-option, ranked | open-answer acc | open-answer, no name | open-answer, label-ranked | paper 4-option (Llama-3.2-1B) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, paper_cell, e, (t4, to) in rows:
        out.append(f"| {label} | {_epochs(e)} | {_fmt(e, f'acc_{t4}')} | {_fmt(e, f'acc_{t4}_no_leak')} | {_fmt(e, f'acc_{t4}_rank')} | "
                   f"{_fmt(e, f'acc_{to}')} | {_fmt(e, f'acc_{to}_no_leak')} | {_fmt(e, f'acc_{to}_rank')} | {paper_cell or '—'} |")
    ref = next((e for e in stage2 + lower if e.values("majority_baseline")), None)
    out.append("")
    out.append("Stage-2 epochs are passes over the training rows (both prompt formats); the lower bound has no stage 2. "
               "\"(N private tokens)\": the client cut private text at N encoder tokens instead of stage 1's limit.")
    if ref is not None:
        out.append("")
        out.append(f"Held-out records: {int(ref.mean('n_heldout'))} ({int(ref.mean('n_no_leak'))} whose private text does not "
                   f"name the answer). Majority-answer baseline (the option most often gold in training): "
                   f"{ref.mean('majority_baseline'):.4f}.")
    if settings:
        out += ["", f"PPFT's eps-{WIDTH_MATCHED:g} row is read at {length} stage-2 epochs with {settings_name(settings)} "
                "instead of PPFT's default stage-2 optimisation settings: the recipe of PPFT's own client and layout selected on the "
                "validation part (the model-selection section below); the upper bound is that recipe's own. The client, "
                "payloads, layout and answering path are PPFT's. The verdicts use those; the same length at the default "
                "settings is judged below them."]
    elif length is not None and target is not None and target.params.get("epochs") == length:
        out += ["", f"PPFT's eps-{WIDTH_MATCHED:g} row is read at {length} stage-2 epochs, the length of PPFT's own layout "
                "selected on the validation part (the model-selection section below), and the upper bound at the same "
                "length where it was run; the verdicts use those."]
    out += _targets(stage2, target, blind, upper, lower, settings)
    return out


def _targets(stage2, ppft, blind, upper, lower, settings: dict[str, Any]) -> list[str]:
    low = _latest(lower, epsilon=WIDTH_MATCHED, k=4)
    if ppft is None or upper is None:
        return []
    lines = ["", f"Targets at the width-matched eps {WIDTH_MATCHED:g}, k=4 (issue: keep >= {_TARGET_RETENTION:.0%} of the upper bound, "
             f"beat the blind row and the lower bound clearly, read here as by at least {_CLEAR_MARGIN:.2f}):", ""]
    lines += _verdicts("", ppft, upper, blind, low)
    epochs = ppft.params.get("epochs")
    lines += _training_verdicts("", _trainings(stage2, epochs, **settings), upper, blind, low)
    default_upper = _latest(stage2, blind=False, epsilon=None, epochs=epochs) if settings else None
    if default_upper is not None:  # the row Table 1 would read without the selection, judged the same way
        trainings = _trainings(stage2, epochs)
        lr, decay = _PPFT_LAYOUT["optim"]
        head = (f"- at PPFT's default stage-2 optimisation settings instead (stage-2 lr {lr:g}, weight decay {decay:g}, the "
                f"last step's weights), {epochs} epochs, against their own upper bound, over {len(trainings)} training(s):")
        lines += _training_verdicts("", trainings, default_upper, blind, low, header=head, at_least=1)
        lines += _welch_lines(_trainings(stage2, epochs, **settings), trainings)
    if ppft.values("acc_length_open"):
        n, p = ppft.mean("acc_length_open"), ppft.mean("acc_open")
        lines.append(f"- the slot count alone (the same model given random unit slots with each payload's count): open-answer "
                     f"{n:.4f}, so the slots' content adds {p - n:+.4f} to PPFT's {p:.4f}. The mechanism does not hide the count "
                     "(a client with `fixed_slots` does: the slot-count table below, when it was run).")
    met = _layouts_meeting_targets(stage2, blind, low)
    tuned = [text for key, value, text in met if key in _OPTIMISATION_KEYS and settings != {key: value}]  # not Table 1's own
    beyond = [text for key, _, text in met if key not in _OPTIMISATION_KEYS]
    if tuned:
        lines.append("- PPFT's own client, payloads and layout with other stage-2 optimisation settings, that meet both the "
                     "4-option and the open-answer target against their own upper bound (4-option / open-answer; their "
                     "sections below): " + "; ".join(tuned) + ".")
    if beyond:
        lines.append("- beyond the paper, layouts that meet both the 4-option and the open-answer target against their own upper "
                     "bound (4-option / open-answer; their sections below): " + "; ".join(beyond) + ".")
    return lines


def _build(e: Entry | None) -> str | None:
    """The fingerprint of the stage-1 run ``e``'s model descends from (None: not recorded, as in files before
    2026-11-25)."""
    return None if e is None else e.extra.get("build")


def _bound_of_another_build(row: Entry, upper: Entry | None) -> str:
    """" (the upper bound from another stage-1 build)" when ``upper``'s recorded build differs from ``row``'s; ""
    when they agree or either was not recorded."""
    differs = _build(row) and _build(upper) and _build(upper) != _build(row)
    return " (the upper bound from another stage-1 build)" if differs else ""


def _meets(p: float, u: float, b: float, lo: float) -> bool:
    """The issue's target: keep >= 85% of the upper bound ``u`` and beat the blind row ``b`` and the lower bound
    ``lo`` by the clear margin (a missing control fails)."""
    keep = (p / u) if u else math.nan
    clear = all(not math.isnan(ref) and p - ref >= _CLEAR_MARGIN for ref in (b, lo))
    return not math.isnan(keep) and keep >= _TARGET_RETENTION and clear


#: Layout keys that change only how stage 2 optimises (the peak lr and weight decay, a weight average), not what the
#: client sends, how the server reads it or what it trains on: rows of PPFT itself with other hyperparameters.
_OPTIMISATION_KEYS = frozenset({"optim", "ema"})


def _layouts_meeting_targets(stage2: Sequence[Entry], blind: Entry | None, low: Entry | None) -> list[tuple[str, Any, str]]:
    """(layout key, its value, description) of each layout section's row whose width-matched run meets the 4-option and the
    open-answer target against its own upper bound (over the trainings of the run when it was trained more than
    once)."""
    names = []
    for key, name, _, _ in _LAYOUT_SECTIONS:
        for v in _layout_values([e for e in stage2 if not _get(e, "blind")], key):
            noisy = _latest(stage2, family="l2_laplace", epsilon=WIDTH_MATCHED, k=4, **{key: v})
            upper = _latest(stage2, epsilon=None, **{key: v})
            if noisy is None or upper is None or blind is None or low is None:
                continue
            trainings = _trainings(stage2, noisy.params.get("epochs"), **{key: v})
            means = {t: _training_means(trainings, f"acc_{t}") for t in ("mcqa", "open")}
            acc = {t: None if m is None else sum(m) / len(m) for t, m in means.items()}
            if all(a is not None and _meets(a, upper.mean(f"acc_{t}"), blind.mean(f"acc_blind_{t}"), low.mean(f"acc_{t}"))
                   for t, a in acc.items()):
                names.append((key, v, f"{name(v)} ({acc['mcqa']:.4f} / {acc['open']:.4f} of "
                             f"{upper.mean('acc_mcqa'):.4f} / {upper.mean('acc_open'):.4f}"
                             + (f", over {len(trainings)} trainings)" if len(trainings) > 1 else ", one training)")))
    return names


def _verdicts(prefix: str, ppft: Entry, upper: Entry, blind: Entry | None, low: Entry | None) -> list[str]:
    """One line per task: PPFT's share of the upper bound and its margins over the blind row and the lower bound."""
    lines = []
    for task, blind_task, name in (("mcqa", "blind_mcqa", "4-option"), ("open", "blind_open", "open-answer"),
                                   ("mcqa_rank", "blind_mcqa_rank", "4-option, ranked (not the paper's metric)"),
                                   ("open_rank", "blind_open_rank", "label-ranked open-answer (not the paper's metric)")):
        if not ppft.values(f"acc_{task}"):
            continue
        p, u = ppft.mean(f"acc_{task}"), upper.mean(f"acc_{task}")
        b = blind.mean(f"acc_{blind_task}") if blind else math.nan
        lo = low.mean(f"acc_{task}") if low else math.nan
        verdict = "met" if _meets(p, u, b, lo) else "NOT met"
        lines.append(f"- {prefix + ', ' if prefix else ''}{name}: PPFT {p:.4f} = {_ratio(p, u)} of the upper bound {u:.4f}; "
                     f"blind {_control(b)}; lower bound {_control(lo)} -> **{verdict}**"
                     + (" (a control not measured is not beaten)" if math.isnan(b) or math.isnan(lo) else "")
                     + _bound_of_another_build(ppft, upper))
    return lines


def _control(value: float) -> str:
    """A control's accuracy for a verdict line, or that it was not measured (no result file, or not for this task)."""
    return "not measured" if math.isnan(value) else f"{value:.4f}"


def _training_means(trainings: Sequence[Entry], metric: str) -> list[float] | None:
    """Each training's mean ``metric`` over its noise seeds (None unless every training measured it)."""
    means = [e.mean(metric) for e in trainings if e.values(metric)]
    return means if trainings and len(means) == len(trainings) else None


def _training_verdicts(prefix: str, trainings: Sequence[Entry], upper: Entry, blind: Entry | None, low: Entry | None,
                       *, judged: bool = True, header: str | None = None, at_least: int = 2) -> list[str]:
    """When a row was trained at least ``at_least`` times (by default more than once): the 4-option and open-answer
    verdicts over its trainings (the verdicts of :func:`_verdicts` are training seed 0's). ``judged``: a row the
    targets are judged on (the width-matched one, listed in the training-seed table); else an informative row.
    ``header``: the line before the verdicts, instead of the one that says what they add to seed 0's."""
    if len(trainings) < max(at_least, 1):
        return []
    where = ("trainings of this row (the training-seed table), which is what the targets are judged on:" if judged
             else "trainings of this row:")
    lines = [header or f"- {prefix + ': ' if prefix else ''}the verdicts above are one training's (training seed 0). Over the {len(trainings)} {where}"]
    for task, name in (("mcqa", "4-option"), ("open", "open-answer")):
        means = _training_means(trainings, f"acc_{task}")
        if means is None:
            continue
        p, u = sum(means) / len(means), upper.mean(f"acc_{task}")
        b = blind.mean(f"acc_blind_{task}") if blind else math.nan
        lo = low.mean(f"acc_{task}") if low else math.nan
        lines.append(f"  - {name}: PPFT {p:.4f} (trainings: {', '.join(f'{m:.4f}' for m in means)}) = {_ratio(p, u)} of the upper "
                     f"bound {u:.4f} -> **{'met' if _meets(p, u, b, lo) else 'NOT met'}**"
                     + next((note for note in (_bound_of_another_build(t, upper) for t in trainings) if note), "")
                     + _mixed_builds(trainings))
        if len(means) >= 3:
            lines.append(_interval_line(means, u))
    return lines


def _welch_lines(selected: Sequence[Entry], default: Sequence[Entry]) -> list[str]:
    """Per task, whether the selected settings' trainings differ from the default settings' ones: Welch's t-test
    over the per-training means (two or more trainings on each side), at the 0.05 level."""
    lines = []
    for task, name in (("mcqa", "4-option"), ("open", "open-answer")):
        a, b = _training_means(selected, f"acc_{task}"), _training_means(default, f"acc_{task}")
        if a is None or b is None or len(a) < 2 or len(b) < 2 or len(set(a) | set(b)) < 2:
            continue
        w = welch_test(a, b)
        lines.append(f"- the selected settings against the default ones, {name}: {sum(a) / len(a) - sum(b) / len(b):+.4f} over "
                     f"{len(a)} and {len(b)} trainings; Welch t {w['t']:.2f} (df {w['df']:.1f}), two-sided p {w['p']:.3f}: "
                     + ("significant at 0.05" if w["p"] < 0.05 else "not significant at 0.05"))
    return lines


def _interval_line(means: Sequence[float], u: float) -> str:
    """Where the issue's bar (85% of the upper bound ``u``, the bound taken as fixed: it is one deterministic
    training) lies against the 95% t-interval of the mean over the trainings' ``means``."""
    lo, hi = mean_interval(means, 0.95)
    bar = _TARGET_RETENTION * u
    where = ("below it: the bar is met with 95% confidence" if bar < lo else
             "above it: the bar is missed with 95% confidence" if bar > hi else
             "inside it: the mean meets the bar, but not with 95% confidence" if sum(means) / len(means) >= bar else
             "inside it: the mean misses the bar, but not with 95% confidence")
    return (f"    - 95% t-interval of the mean over the {len(means)} trainings: {lo:.4f} to {hi:.4f} ({_ratio(lo, u)} to "
            f"{_ratio(hi, u)} of the bound); the {_TARGET_RETENTION:.0%} bar {bar:.4f} lies {where}")


def _mixed_builds(trainings: Sequence[Entry]) -> str:
    """A note when ``trainings`` do not all record the same stage-1 build (a file that records none counts as
    another: it may come from any build)."""
    builds = {_build(t) for t in trainings}
    return "" if len(builds) == 1 else " (the trainings do not all record the same stage-1 build: see the training-seed table)"


def _layout_values(entries: Sequence[Entry], key: str) -> list[Any]:
    """The values of layout ``key`` ("center", or combined: "center+answer") among the ``entries`` that keep PPFT's
    value of every other layout key, each part differing from PPFT's, sorted: a run that changes two keys belongs to
    their combined section, not to either key's own."""
    others = {k: v for k, v in _PPFT_LAYOUT.items() if k not in key.split("+")}
    found = {_get(e, key) for e in entries if all(_get(e, k) == v for k, v in others.items())}
    return sorted(v for v in found if _differs_from_ppft(key, v))


def _differs_from_ppft(key: str, value: Any) -> bool:
    """Whether ``value`` of layout ``key`` is not PPFT's; of a combined key, whether every part differs."""
    default = _layout_default(key)
    return all(x != d for x, d in zip(value, default)) if "+" in key else value != default


def _table_layouts(entries: Sequence[Entry], ds: str, key: str, name: Callable[[Any], str]) -> list[str]:
    """Beyond the paper: runs whose ``key`` layout (``summary``: server-side summary vectors; ``count``: count vectors
    and their dropout; ``answer``: an answer head; ``fixed``: the client pads every payload to a fixed slot count)
    differs from PPFT's, each compared with its own no-noise upper bound, beside PPFT's layout at the stage-2 lengths
    the variants were trained for, at the width-matched eps and k=4. ``name(value)`` names a layout. "Answer head alone"
    columns (open-answer, 4-option) appear when a row measured them. A variant run at the GDP-matched eps too (k=4,
    the width-matched row's length, training seed 0) gets a row beside it and informative verdicts after the judged
    ones, over its trainings where there are several."""
    every = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    stage2 = [e for e in every if not _get(e, "blind")]
    values = _layout_values(stage2, key)
    if not values:
        return []
    blind = _latest(every, blind=True)
    evaluations = [e for e in entries if e.kind == "ppft_evaluate" and e.dataset.lower() == ds]
    low, gdp_low = (_latest(evaluations, epsilon=eps, k=4) for eps in (WIDTH_MATCHED, GDP_MATCHED))

    def row_at(v: Any, **length: Any) -> tuple[Any, Entry | None, Entry | None]:
        return v, _latest(stage2, **_TABLE1_PPFT, **{key: v}, **length), _latest(stage2, epsilon=None, **{key: v}, **length)

    def gdp_row(v: Any, noisy: Entry | None) -> Entry | None:
        """The variant's run at the GDP-matched eps and the width-matched row's length, when there is one."""
        length = {} if noisy is None else {"epochs": noisy.params.get("epochs")}
        return _latest(stage2, **(_TABLE1_PPFT | {"epsilon": GDP_MATCHED}), **{key: v}, **length)

    variants = [row_at(v) for v in values]
    # PPFT at each stage-2 length the variants were trained for, so each variant is read beside PPFT at its own
    # length, not beside whichever PPFT run is newest; the newest PPFT run when none of those lengths was run
    lengths = sorted({e.params.get("epochs") for _, *pair in variants for e in pair if e is not None} - {None})
    reference = [r for r in (row_at(_layout_default(key), epochs=n) for n in lengths) if r[1] is not None or r[2] is not None]
    rows = (reference or [row_at(_layout_default(key))]) + variants
    head = [(m, h) for m, h in (("acc_open_head", "open, answer head alone"), ("acc_mcqa_head", "4-option, answer head alone"))
            if any(e is not None and e.values(m) for _, *pair in rows for e in pair)]  # when a row measured it
    out = [f"| {_LAYOUT_HEADER[key]} | row | stage-2 epochs | 4-option acc | 4-option, ranked | open-answer acc | open, no name | "
           "open, label-ranked | open, random slots (count only) |" + "".join(f" {h} |" for _, h in head),
           "|---|---|---|---|---|---|---|---|---|" + "---|" * len(head)]
    verdicts, informative = [], []
    for v, noisy, upper in rows:
        layout = name(v)
        gdp = gdp_row(v, noisy) if v != _layout_default(key) else None
        labelled = [(f"eps {_eps_label(WIDTH_MATCHED)}, k=4", noisy)] + ([(f"eps {_eps_label(GDP_MATCHED)}, k=4", gdp)] if gdp else [])
        for label, e in labelled + [("upper bound (no noise)", upper)]:
            out.append(f"| {layout} | {label} | {_epochs(e)} | {_fmt(e, 'acc_mcqa')} | {_fmt(e, 'acc_mcqa_rank')} | {_fmt(e, 'acc_open')} | "
                       f"{_fmt(e, 'acc_open_no_leak')} | {_fmt(e, 'acc_open_rank')} | {_fmt(e, 'acc_length_open')} |"
                       + "".join(f" {_fmt(e, m)} |" for m, _ in head))
        if v != _layout_default(key) and noisy is not None and upper is not None:
            verdicts += _verdicts(f"{layout}: eps {WIDTH_MATCHED:g}", noisy, upper, blind, low)
            verdicts += _training_verdicts(layout, _trainings(stage2, noisy.params.get("epochs"), **{key: v}), upper, blind, low)
        if gdp is not None and upper is not None:
            informative += _verdicts(f"{layout}: eps {GDP_MATCHED:g}", gdp, upper, blind, gdp_low)
            informative += _training_verdicts(f"{layout}, eps {GDP_MATCHED:g}", _trainings(
                stage2, gdp.params.get("epochs"), epsilon=GDP_MATCHED, **{key: v}), upper, blind, gdp_low, judged=False)
    if verdicts:
        out += ["", "Each layout against its own upper bound (same criteria as the targets above):", ""] + verdicts
    if informative:
        out += ["", f"The same criteria at the GDP-matched eps {GDP_MATCHED:g} (the paper's privacy level at MiniLM's width; "
                f"informative only: the issue judges its targets at eps {WIDTH_MATCHED:g}):", ""] + informative
    return out


def _count_layout(value: tuple[int, float]) -> str:
    n, dropout = value
    if not n:
        return "PPFT (slots only)"
    return f"count vector (1..{n})" + (f", training dropout {dropout:g}" if dropout else "") + " + slots"


def _augment_layout(value: tuple[float, float, int]) -> str:
    insert, drop, epochs = value
    parts = ([f"drops slots (p {drop:g})"] if drop else []) + ([f"inserts up to {insert:g} n random slots"] if insert else [])
    if not parts:
        return "PPFT (training rows as sent)"
    return "server " + ", then ".join(parts) + (f" in the first {epochs} training epochs" if epochs else " in training")


def _variants_layout(value: tuple[float, bool, float] | None) -> str:
    if value is None:
        return "PPFT (training prompts as written)"
    prob, shuffle, drop = value
    how = " and ".join((["list items reordered"] if shuffle else []) + ([f"each item left out with p {drop:g}"] if drop else []))
    return f"client sends {prob:.0%} of training prompts rewritten ({how})"


def _optim_layout(value: tuple[float, float]) -> str:
    lr, wd = value
    parts = ([f"stage-2 lr {lr:g}"] if lr != _PPFT_LAYOUT["optim"][0] else []) + ([f"weight decay {wd:g}"] if wd else [])
    return "PPFT, " + ", ".join(parts) if parts else "PPFT (stage-2 lr 0.001, no weight decay)"


def _answer_layout(v: tuple[bool, bool, bool, int]) -> str:
    """Name of an answer-head layout (linear, standardised, weighed over the options shown, MLP width)."""
    linear, standardised, options, hidden = v
    words = (["standardised"] if standardised else []) + (["linear"] if linear else [])
    if hidden not in (0, 256):
        words.append(f"{hidden}-wide")
    head = f"{' '.join(words)} head" if words else ""
    if options:
        head += (", " if head else "") + "over the options shown"
    return "answer vector" + (f" ({head})" if head else "")


def _subspace_layout(v: tuple[Any, Any]) -> str:
    """Name of a (centre mu, subspace passes) client."""
    return f"slots centred (centre {v[0]:g}-GDP) on the class subspace ({v[1]} passes)"

_SELECTION_INTRO = [
    "Every other table was read off the held-out part, so a layout or a length chosen from them was chosen on the",
    "data it is judged on. Here candidates are trained on the training rows minus a validation part (whole",
    "private-text groups, `ppft_split(..., validation=v)`; the held-out part is untouched) and compared on that",
    "part only. The choice is the candidate with the highest validation open-answer accuracy; its held-out figure is",
    "the one of the same row trained on every training row, from the tables above.",
]

#: The beyond-the-paper layout sections: (layout key, name of a layout value, heading, introduction lines).
_LAYOUT_SECTIONS: list[tuple[str, Callable[[Any], str], str, list[str]]] = [
    ("summary", lambda n: "PPFT (slots only)" if n == 0 else f"{n} summary vector{'s' if n > 1 else ''} + slots",
     "server-side summary vectors",
     ["The server puts the unit-normalised mean of a payload's slots (cut into N contiguous groups) before the",
      "slots, through the same P_psi: averaging n noisy unit slots shrinks the noise's share by about sqrt(n)",
      "where the clean slots agree. Post-processing of the payload: the client and its guarantee are unchanged.",
      "The tables above use PPFT's layout (slots only)."]),
    ("count", _count_layout, "a count vector before the slots",
     ["The server puts a learned vector for the payload's slot count before the slots (`count_vectors`): the",
      "count is in the payload anyway, and rotary positions leave it implicit to the decoder. With training",
      "dropout, a row's count vector is zeroed with that probability in training (never at inference).",
      "Post-processing of the payload: the client and its guarantee are unchanged. The tables above use",
      "PPFT's layout."]),
    ("fixed", lambda fixed: "pads to a fixed slot count" if fixed else "PPFT (count released)", "the client hides the slot count",
     ["PPFT releases ceil(tokens / k) slots, and the count is not noised: prompts of different lengths are told",
      "apart with certainty. With `fixed_slots` the client pads every payload to ceil(max_private_tokens / k)",
      "slots, public filler slots after the prompt's own, noised like them, so any two prompts differ in at most",
      "that many slots. \"Random slots\": the same model given random unit slots at each payload's count (with",
      "padding: at the fixed count), what the count alone gives it. The tables above release the count."]),
    ("center", lambda mu: "PPFT (slots as encoded)" if mu is None else f"slots centred (centre {mu:g}-GDP)", "the client centres its slots",
     ["MiniLM's unit slots share a common direction (on Pri-SLJA the mean slot has norm 0.63), so typical slots lie",
      "closer together than unit vectors can. The client subtracts a public centre from every unit slot and",
      "renormalises before the noise (`center_mu`; textfree.mechanisms.centering): the centre is the mean slot of the",
      "training prompts, released once with Gaussian noise that makes it mu-GDP per prompt, and ships with the",
      "model. Every slot stays a unit vector, so the per-slot guarantee (2 eps) and the slot's mu are PPFT's; what",
      "changes is how far apart real prompts' slots lie, for the server and for an attacker alike (the attack",
      "report measures the second). The tables above use PPFT's client."]),
    ("answer", lambda on: _answer_layout(on) + " + slots" if on else "PPFT (slots only)", "an answer head before the slots",
     ["Stage 2 first trains an answer head on fresh payloads of the training rows (the attribute attacker's",
      "classifier: the mean of the noisy slots and the one-hot slot count, a 2-layer MLP; classes: the distinct",
      "training targets), then puts its class vectors, weighted by its probabilities, before the slots and",
      "trains P_psi + LoRA as PPFT does (`answer_head`). \"Answer head alone\": its most probable class on the",
      "open-answer payloads, or the option it ranks highest on the 4-option ones, no decoder. Post-processing of",
      "the payload: the client and its guarantee are unchanged. \"Standardised head\": the head standardises the mean",
      "slot before its MLP (`answer_head_standardize`); \"linear head\": no hidden layer (`answer_head_hidden: 0`);",
      "\"over the options shown\": on a 4-option prompt the class vectors are weighed by the head's probabilities",
      "renormalised over the classes its public options block names (`answer_head_options`), in training and at",
      "inference.",
      "The tables above use PPFT's layout."]),
    ("augment", _augment_layout, "the server blurs the slot count in training",
     ["At eps 28 PPFT's decoder answers open questions mostly from the slot count (see \"random slots\"). In",
      "stage 2 the server drops slots of its training rows and/or inserts random unit slots at random positions,",
      "fresh every epoch (`slot_drop`, `slot_insert`; textfree.ppft.slot_augment), so the count no longer names the",
      "answer alone (with `slot_augment_epochs`: in the first epochs only). Training only, on payloads the client",
      "already privatized: the client, its payloads, their guarantee and the answering path are PPFT's. The tables",
      "above use PPFT's training rows as sent."]),
    ("variants", _variants_layout, "the client rewrites its training prompts",
     ["In stage 2 the client sends, for each training example and epoch with probability p, a fresh rewrite of its",
      "private prompt instead of the prompt (`prompt_variants`; textfree.ppft.prompt_variants): the items of each of",
      "its lists in another order and, with `prompt_variant_drop`, some of them left out, so the slot count and the",
      "slots' content stay consistent. From the training rows themselves, before encoding; the server still gets",
      "payloads only, the layout and the answering path are PPFT's, and each epoch still releases one payload per",
      "training example. Training only: questions are answered as written. The tables above use the prompts as",
      "written."]),
    ("ema", lambda d: "PPFT (last step's weights)" if d is None else f"PPFT, weights averaged (decay {d:g})",
     "the server averages its weights in training",
     ["The client, the payloads, the layout and the answering path are PPFT's; only stage 2's training recipe",
      "changes: the server keeps an exponential moving average of the projection and LoRA weights over its steps",
      "(`ema_decay`; textfree.ppft.ema) and saves it instead of the last step's weights, which follow the last",
      "batches' noise. The tables above use the last step's weights."]),
    ("optim", _optim_layout, "the server's stage-2 optimiser settings",
     ["The client, the payloads, the layout and the answering path are PPFT's; only stage 2's optimiser changes: its",
      "peak learning rate for the projection and LoRA (`lr`, default 1e-3) or AdamW's weight decay (`weight_decay`,",
      "default 0). The tables above use the defaults."]),
    ("center+augment", lambda v: "PPFT (slots as encoded, training rows as sent)" if v == (None, (0.0, 0.0, 0))
     else f"slots centred (centre {v[0]:g}-GDP) + " + _augment_layout(v[1]), "centred slots and a count-blurring curriculum",
     ["Both at once: the client centres its slots (above), and the server blurs the slot count of its training rows",
      "(above). The tables above use PPFT's client and training rows as sent."]),
    ("center+answer", lambda v: "PPFT (slots as encoded, slots only)" if v == (None, False) else f"slots centred (centre {v[0]:g}-GDP) + " + _answer_layout(v[1]),
     "centred slots and an answer head",
     ["Both of the sections above at once: the client centres its slots, and the server's answer head, trained on",
      "the centred payloads, puts its answer vector before them. The tables above use PPFT's client and layout."]),
    ("center+subspace", lambda v: "PPFT (slots as encoded)" if v == (None, None) else _subspace_layout(v),
     "centred slots projected onto the class subspace",
     ["After centring, the client projects every slot onto a public class subspace and renormalises it before the",
      "noise (`subspace_epochs`; textfree.mechanisms.subspace): the span of the training targets' mean payload slots,",
      "which the server fits from that many passes of fresh centred payloads of the training prompts and which ships",
      "with the centre. The noise is isotropic, so the share of a slot's unit norm outside the answers' directions",
      "is lost to a reader of the answer; projected, the slot spends all of it there. Every slot stays a unit vector:",
      "the per-slot guarantee (2 eps) and the slot's mu are PPFT's; the fit reads that many more releases of each",
      "training prompt. The server is PPFT's (slots only). The tables above use PPFT's client."]),
    ("center+subspace+answer", lambda v: "PPFT (slots as encoded, slots only)" if v == (None, None, False)
     else _subspace_layout(v[:2]) + " + " + _answer_layout(v[2]), "centred slots on the class subspace and an answer head",
     ["The client of the section above, and the server's answer head (trained on the projected payloads) before the",
      "slots. The tables above use PPFT's client and layout."]),
]



def _table_epochs(entries: Sequence[Entry], ds: str) -> list[str]:
    """Every stage-2 length that was run for the Table 1 rows (the newest file per length): Table 1 shows only the
    newest run of each row, this shows what the others scored, so no run is hidden by a later one."""
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    rows = [("blind", dict(blind=True), ("blind_mcqa", "blind_open"))]
    rows += [(f"PPFT, eps {_eps_label(eps)}, k=4", dict(family="l2_laplace", blind=False, epsilon=eps, k=4), ("mcqa", "open"))
             for eps in (PAPER_EPSILON, WIDTH_MATCHED)]
    rows.append(("upper bound", dict(blind=False, epsilon=None), ("mcqa", "open")))
    out = ["| row | stage-2 epochs | 4-option acc | open-answer acc | result file |", "|---|---|---|---|---|"]
    lengths = 0
    for label, want, (t4, to) in rows:
        runs = _per_length(stage2, **want)
        lengths = max(lengths, len(runs))
        for e in runs:
            out.append(f"| {label} | {_epochs(e)} | {_fmt(e, f'acc_{t4}')} | {_fmt(e, f'acc_{to}')} | `{e.source}` |")
    return out if lengths > 1 else []


def _trainings(stage2: Sequence[Entry], epochs: Any, *, epsilon: float = WIDTH_MATCHED, **layout: Any) -> list[Entry]:
    """Every training (``train_seed``) of the k=4 row of ``layout`` (PPFT's unless given) at ``epsilon`` (the
    width-matched one unless given) and ``epochs`` stage-2 epochs, the newest run per training seed, seed 0 first."""
    row = _PPFT_LAYOUT | _expand(layout) | _TABLE1_PPFT | {"epsilon": epsilon, "epochs": epochs}
    newest: dict[int, Entry] = {}
    for e in stage2:  # oldest first: a later run of the same training seed replaces an earlier one
        if all(_get(e, k) == v for k, v in row.items() if k != "train_seed"):
            newest[_get(e, "train_seed")] = e
    return [newest[s] for s in sorted(newest)]


def _table_train_seeds(entries: Sequence[Entry], ds: str) -> list[str]:
    """The width-matched k=4 rows (PPFT's layout and the beyond-the-paper ones) trained more than once
    (``train_seed``), per stage-2 length with two or more trainings: each training's figures over its evaluation
    noise seeds, then the mean ± sd over the trainings' means (the spread a ± over noise seeds of one training does
    not show)."""
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    rows: list[tuple[str, dict[str, Any]]] = [("PPFT", {})]
    rows += [(name(v), {key: v}) for key, name, _, _ in _LAYOUT_SECTIONS for v in _layout_values([e for e in stage2 if not _get(e, "blind")], key)]
    metrics = ("acc_mcqa", "acc_open", "acc_open_no_leak", "acc_length_open")
    out = ["| row | stage-2 epochs | training seed | 4-option acc | open-answer acc | open, no name | open, random slots (count only) | "
           "stage-1 build | result file |", "|---|---|---|---|---|---|---|---|---|"]
    found = False
    for row, layout in rows:
        label = f"{row}, eps {_eps_label(WIDTH_MATCHED)}, k=4"
        for n in sorted({e.params.get("epochs") for e in stage2} - {None}):
            trainings = _trainings(stage2, n, **layout)
            if len(trainings) < 2:
                continue
            found = True
            for e in trainings:
                out.append(f"| {label} | {n} | {_get(e, 'train_seed')} | " + " | ".join(_fmt(e, m) for m in metrics)
                           + f" | {(_build(e) or 'not recorded')[:12]} | `{e.source}` |")
            means = [_over_trainings(trainings, m) for m in metrics]
            out.append(f"| {label} | {n} | mean over {len(trainings)} trainings | " + " | ".join(means) + " | | |")
    return out if found else []


def _over_trainings(trainings: Sequence[Entry], metric: str) -> str:
    """Mean ± sd over trainings of each training's mean over its noise seeds ("—" unless every training has it)."""
    means = _training_means(trainings, metric)
    if means is None:
        return "—"
    s = seed_spread(means)
    return f"{s['mean']:.3f} ± {s['std']:.3f} ({s['n']} trainings)"


def _table_k(entries: Sequence[Entry], ds: str) -> list[str]:
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds and not _get(e, "blind")
              and _get(e, "family") == "l2_laplace" and _get(e, "epsilon") is not None]
    out = ["| eps | k | stage-2 epochs | 4-option acc | 4-option, ranked | open-answer acc | open, no name | open, label-ranked | worst-case loss of a mean prompt |",
           "|---|---|---|---|---|---|---|---|---|"]
    found = False
    for eps in (PAPER_EPSILON, WIDTH_MATCHED):
        for k in (4, 8, 16):
            for e in _per_length(stage2, epsilon=eps, k=k):
                found = True
                out.append(f"| {_eps_label(eps)} | {k} | {_epochs(e)} | {_fmt(e, 'acc_mcqa')} | {_fmt(e, 'acc_mcqa_rank')} | {_fmt(e, 'acc_open')} | {_fmt(e, 'acc_open_no_leak')} | "
                           f"{_fmt(e, 'acc_open_rank')} | {e.mean('prompt_epsilon'):.0f} |")
    return out if found else []


def _per_length(entries: Sequence[Entry], **want: Any) -> list[Entry]:
    """The newest entry matching ``want`` for each number of stage-2 epochs, fewest epochs first (PPFT's layout unless
    ``want`` names another)."""
    want = _PPFT_LAYOUT | want
    matching = [e for e in entries if all(_get(e, k) == v for k, v in want.items())]
    lengths = sorted({e.params.get("epochs") for e in matching}, key=lambda x: (x is None, x or 0))
    return [_latest(matching, epochs=n) for n in lengths]


def _table_noise(entries: Sequence[Entry], ds: str) -> list[str]:
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds and not _get(e, "blind")]
    out = ["| noise | eps | expected noise norm | per-slot guarantee | slot mu (GDP) | stage-2 epochs | 4-option acc | 4-option, ranked | open-answer acc | open, no name |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    found = False
    for eps in (PAPER_EPSILON, WIDTH_MATCHED):
        rows = [("L2-Laplace", e, "l2_laplace", "budget") for e in _per_length(stage2, family="l2_laplace", epsilon=eps, k=4)]
        for match in ("budget", "norm"):
            rows += [(f"Gaussian, {match}-matched", g, "gaussian", match)
                     for g in _per_length(stage2, family="gaussian", epsilon=eps, k=4, noise_match=match)]
        for label, e, family, match in rows:
            if e is None:
                continue
            found = True
            slot = e.mean("slot_epsilon")
            guarantee = f"{slot:.3g}" + (" (pure)" if label == "L2-Laplace" else ", delta 1e-5")
            norm, mu = _noise_norm_and_mu(family, eps, match)
            out.append(f"| {label} | {_eps_label(eps)} | {norm:.2f} | {guarantee} | {mu:.2f} | {_epochs(e)} | {_fmt(e, 'acc_mcqa')} | {_fmt(e, 'acc_mcqa_rank')} | "
                       f"{_fmt(e, 'acc_open')} | {_fmt(e, 'acc_open_no_leak')} |")
    for upper in _per_length(stage2, epsilon=None, blind=False) if found else []:
        out.append(f"| no noise (upper bound) | — | 0 | none | — | {_epochs(upper)} | {_fmt(upper, 'acc_mcqa')} | {_fmt(upper, 'acc_mcqa_rank')} | {_fmt(upper, 'acc_open')} | "
                   f"{_fmt(upper, 'acc_open_no_leak')} |")
    return out if found else []


_MU_INTRO = [
    "The width-matched eps keeps the expected noise norm. What an observer can learn from a slot is set by",
    "its privacy loss distribution instead, which in high dimension is that of mu-Gaussian DP with",
    "mu = 2 eps / sqrt(d) between two antipodal unit slots (`textfree.mechanisms.gdp`; `textfree ppft width-match`",
    "prints it and checks it on exact draws of the loss). Keeping mu gives eps = 75 * sqrt(384/1024) = 45.9",
    f"(run as {GDP_MATCHED:g}): there MiniLM's slots leak what the paper's leak, and the width-matched eps 28",
    "is a stricter setting than the paper's. The pure bound (2 eps per slot) is far from both.",
]
_NOISE_INTRO = [
    "Gaussian matched to L2-Laplace at the same eps two ways: *budget* = the same formal per-slot guarantee",
    "(L2-Laplace gives 2*eps-DP per unit slot; the Gaussian's sigma is the exact analytic calibration of",
    "(2*eps, 1e-5)-DP at sensitivity 2), *norm* = the same expected noise norm d/eps. *Slot mu*: what the",
    "slot actually leaks (mu-Gaussian DP between antipodal unit slots, `textfree.mechanisms.gdp`; the",
    "L2-Laplace's is its high-dimension limit, the Gaussian's exact). Norm matching gives both noises",
    "the same mu; budget matching gives the Gaussian a larger one, because the L2-Laplace's pure bound is",
    "loose in high dimension: at the same formal budget the Gaussian slot leaks more.",
]


def _table_mu(entries: Sequence[Entry], ds: str) -> list[str]:
    """PPFT (L2-Laplace, k=4) at the norm-matched, GDP-matched and paper's eps, each with its slot mu, and the
    issue's target criteria applied at the GDP-matched eps (informative: the issue judges its targets at eps 28)."""
    from ..mechanisms import gdp_equal_error

    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    lower = [e for e in entries if e.kind == "ppft_evaluate" and e.dataset.lower() == ds]
    gdp = _latest(stage2, family="l2_laplace", blind=False, epsilon=GDP_MATCHED, k=4)
    if gdp is None:
        return []
    # every row and the upper bound at the GDP-matched row's length where they were run there (else their newest)
    length = {"epochs": gdp.params.get("epochs"), "max_private_tokens": gdp.params.get("max_private_tokens")}
    paper_mu = _paper_mu()
    out = ["| eps | expected noise norm | slot mu | best-test error, antipodal slots | stage-2 epochs | 4-option acc | open-answer acc | open, no name | result file |",
           "|---|---|---|---|---|---|---|---|---|",
           f"| the paper: {PAPER_EPSILON:g} at d = {PAPER_ENCODER_DIM} | {PAPER_ENCODER_DIM / PAPER_EPSILON:.2f} | {paper_mu:.2f} | {gdp_equal_error(paper_mu):.4f} | — | — | — | — | — |"]
    for eps in (WIDTH_MATCHED, GDP_MATCHED, PAPER_EPSILON):
        e = _latest(stage2, family="l2_laplace", blind=False, epsilon=eps, k=4, **length) or _latest(stage2, family="l2_laplace", blind=False, epsilon=eps, k=4)
        if e is None:
            continue
        norm, mu = _noise_norm_and_mu("l2_laplace", eps)
        out.append(f"| {_eps_label(eps)} | {norm:.2f} | {mu:.2f} | {gdp_equal_error(mu):.4f} | {_epochs(e)} | {_fmt(e, 'acc_mcqa')} | "
                   f"{_fmt(e, 'acc_open')} | {_fmt(e, 'acc_open_no_leak')} | `{e.source}` |")
    upper = _latest(stage2, blind=False, epsilon=None, **length) or _latest(stage2, blind=False, epsilon=None)
    if upper is not None:
        out.append(f"| no noise (upper bound) | 0 | — | — | {_epochs(upper)} | {_fmt(upper, 'acc_mcqa')} | {_fmt(upper, 'acc_open')} | "
                   f"{_fmt(upper, 'acc_open_no_leak')} | `{upper.source}` |")
        out += ["", f"The issue's criteria applied at the GDP-matched eps {GDP_MATCHED:g} (informative only: the issue's targets are "
                f"judged at eps {WIDTH_MATCHED:g}, above):", ""]
        out += _verdicts(f"eps {GDP_MATCHED:g}", gdp, upper, _latest(stage2, blind=True),
                         _latest(lower, epsilon=GDP_MATCHED, k=4))
    return out


def _noise_norm_and_mu(family: str, eps: float, match: str = "budget", d: int = ENCODER_DIM) -> tuple[float, float]:
    """Expected noise norm and slot mu (textfree.mechanisms.gdp) of the client's mechanism at ``eps``."""
    from ..mechanisms import mechanism_mu
    from .model import make_noise

    noise = make_noise(family, eps, dim=d, match=match)
    return noise.expected_noise_norm(d), mechanism_mu(noise, d)


def _table_general(entries: Sequence[Entry]) -> list[str]:
    gen = [e for e in entries if e.kind == "ppft_evaluate" and not e.dataset.lower().startswith("pri-")]
    if not gen:
        return []
    out = ["| model (Pri-DDX stage 2) | payloads | dataset | n | 4-option acc | 4-option, ranked |", "|---|---|---|---|---|---|"]
    for e in gen:
        model = str(e.params.get("model", "?"))
        eps = e.params.get("epsilon", "the model's")
        out.append(f"| `{model}` | eps {eps if eps is not None else 'none (clean)'} | {e.dataset} | {int(e.mean('n_heldout'))} | {_fmt(e, 'acc_mcqa')} | {_fmt(e, 'acc_mcqa_rank')} |")
    out.append("")
    out.append("Chance is 0.20 on CommonsenseQA (5 options) and about 0.25 on ARC-Challenge (mostly 4 options).")
    return out


def _table_pipeline(pipe: Entry) -> list[str]:
    """The pipeline-time table of one ``ppft_pipeline`` run: every step timed in the same call."""
    p = pipe.params
    eps, k, epochs = p.get("epsilon", 28.0), p.get("k", 4), p.get("stage2_epochs", 12)
    parts = [
        (f"decoder pretraining ({p.get('preset', 'small')} preset)", "pretrain"),
        (f"stage 1 (alignment, {p.get('stage1_max_steps', 250)} steps)", "stage1"),
        (f"stage 2 ({pipe.dataset or 'pri-ddx'}, eps {eps:g}, k {k}, {epochs} epochs)", "stage2"),
        ("evaluation (held-out split, " + ", ".join(p.get("eval_tasks") or ["mcqa", "open"]) + ", one noise seed)", "evaluate"),
    ]
    out = ["| step | wall time (s) |", "|---|---|"]
    for label, step in parts:
        secs = pipe.mean(f"{step}_wall_s")
        out.append(f"| {label} | {'—' if math.isnan(secs) else f'{secs:.0f}'} |")
    total = pipe.mean("total_wall_s")
    one_go = pipe.mean("measured_in_one_go") == 1.0
    out.append(f"| **total** | **{total:.0f}** ({total / 60:.1f} min; target < 60 min: **{'met' if total < 3600 and one_go else 'NOT met'}**) |")
    accuracy = "; ".join(f"{task} {pipe.mean(f'acc_{task}'):.4f}" for task in (p.get("eval_tasks") or ["mcqa", "open"]))
    out += ["", f"`textfree ppft pipeline` (cell `{pipe.source}`), "
            + ("every step run in the same call" if one_go else "**some steps were reused from earlier runs** (their recorded times)")
            + f"; its held-out accuracy (n = {pipe.mean('n_heldout'):.0f}): {accuracy}."]
    return out


def _table_time(entries: Sequence[Entry]) -> list[str]:
    pipe = [e for e in entries if e.kind == "ppft_pipeline"]
    if pipe:
        return _table_pipeline(pipe[-1])
    pre = _latest([e for e in entries if e.kind == "ppft_pretrain"])
    s1 = _latest([e for e in entries if e.kind == "ppft_stage1"])
    s2 = _latest([e for e in entries if e.kind == "ppft_stage2"], dataset="pri-ddx", family="l2_laplace", epsilon=WIDTH_MATCHED, k=4)
    if not (pre or s1 or s2):
        return []
    parts = [
        ("decoder pretraining (small preset)", pre.mean("wall_s") if pre else math.nan, pre),
        ("stage 1 (alignment)", s1.mean("train_wall_s") if s1 else math.nan, s1),
        ("stage 2 (Pri-DDX, eps 28, k 4)", s2.mean("train_wall_s") if s2 else math.nan, s2),
        ("evaluation (Pri-DDX held-out, the cell's tasks, one noise seed; mean over seeds)", s2.mean("eval_wall_s") if s2 else math.nan, None),
    ]
    out = ["| step | wall time (s) | note |", "|---|---|---|"]
    total = 0.0
    for label, secs, e in parts:
        reused = e is not None and e.mean("reused") == 1.0  # evaluation (e None) is always measured afresh
        out.append(f"| {label} | {'—' if math.isnan(secs) else f'{secs:.0f}'} | {'recorded by the run the cell reused' if reused else ''} |")
        total += 0.0 if math.isnan(secs) else secs
    missing = [label.split(" (")[0] for label, secs, _ in parts if math.isnan(secs)]
    if missing:  # a sum over some steps is no pipeline time
        out.append(f"| **total** | — | not measured: no {', no '.join(missing)} in these result files; the steps above add up to {total:.0f} s |")
    else:
        out.append(f"| **total** | **{total:.0f}** ({total / 60:.1f} min; target < 60 min) | |")
    return out


#: How docs/results/ppft.md is generated: the command a report names unless it was written from other paths.
DEFAULT_COMMAND = "textfree ppft report results/ppft --out docs/results/ppft.md"


def build_report(paths: Iterable[str | Path], *, figures: Sequence[str] = (), command: str = DEFAULT_COMMAND) -> str:
    """Markdown for docs/results/ppft.md from the ppft_* result files in ``paths``; ``command``: the one that
    generates it, named in its header."""
    from .report_selection import selected_recipe, split_selection, table_selection

    everything = collect(paths)
    entries, selection = split_selection(everything)  # runs that held back a validation part: their own section only
    sources = sorted({(e.source, e.date, e.git) for e in everything})
    builds: dict[str, set[str]] = {}
    for e in everything:
        builds.setdefault(e.source, set()).add((_build(e) or "not recorded")[:12])
    lines = [
        "# PPFT at this scale: results",
        "",
        "<!-- generated by `textfree ppft report` from result files; do not edit by hand -->",
        "",
        f"Generated by `{command}` from the result files of the cells in",
        "`examples/cells/ppft/` (run with `textfree run <cell> --out-dir results/ppft`). Setup: client encoder",
        "all-MiniLM-L6-v2 (d = 384), k-pooling, L2-Laplace noise; server: the small local Llama decoder",
        "(`runs/decoder-small`, 6.8M parameters) with a linear projection and LoRA (r 16); stage 1 on alpaca / lima /",
        "gsm8k; stage 2 on the training part of each Pri-* split (epochs per dataset below), trained on both prompt formats (4-option",
        "and open-answer) of the same training rows; evaluation on the held-out part. Accuracies are `mean ± sd (n)`",
        "over evaluation noise seeds (one trained model per row; clean and blind rows are deterministic).",
        "",
        f"**Which epsilon is which.** The paper's eps = {PAPER_EPSILON:g} is for ModernBERT-large (d = {PAPER_ENCODER_DIM}): expected",
        f"noise norm d/eps = {PAPER_ENCODER_DIM / PAPER_EPSILON:.1f} against unit-norm slots. MiniLM at eps 75 gets only",
        f"{384 / PAPER_EPSILON:.1f}; the width-matched eps = 75 * 384/1024 = 28.1 (run as {WIDTH_MATCHED:g}) gives 13.7, the paper's noise",
        "level. Every table shows both, labelled.",
        "",
        "Scoring: 4-option = the normalised gold option text is contained in the answer (PPFT Appendix D.1);",
        "open-answer = no options shown, and the first task label (any option of any record) the answer names must be",
        "the gold one. \"No name\" columns are on the held-out records whose private text does not contain the answer",
        "string. *Ranked* (not the paper's metric) = the same 4-option prompts, answered by the option the model is most",
        "likely to generate in full (lm-evaluation-harness style likelihood scoring) instead of free generation: it",
        "separates \"cannot follow the answer format\" (a free answer naming no option scores 0) from \"does not know\".",
        "*Label-ranked* open-answer (not the paper's metric either) = the open-answer prompts (no options shown), answered by",
        "the label of the whole task (every option of every record: 49 diagnoses, 42 charges) the model is most likely to",
        "generate in full: decoding constrained to the task's public label set.",
    ]
    for ds, title in (("pri-ddx", "Pri-DDX"), ("pri-slja", "Pri-SLJA")):
        if not any(e.dataset.lower() == ds for e in entries):
            continue
        lines += ["", f"## {title}: Table 1 shape (held-out split)", ""] + _table1(entries, ds, selected_recipe(selection, ds))
        epoch_rows = _table_epochs(entries, ds)
        if epoch_rows:
            lines += ["", f"### {title}: every stage-2 length run for these rows", "",
                      "Table 1 shows the newest run of each row (PPFT's eps-28 row: at the length selected on validation,",
                      "where lengths were compared there; the upper bound: at the PPFT row's length where it was run); the",
                      "verdicts use those. Runs with another number of stage-2 epochs stay listed here.", ""] + epoch_rows
        seed_rows = _table_train_seeds(entries, ds)
        if seed_rows:
            lines += ["", f"### {title}: training seeds (the spread over trainings)", "",
                      "Every other table shows training seed 0, and its ± is over evaluation noise seeds of that one training.",
                      "Here the same row is trained again with another training seed (initialisation of the new weights, dropout,",
                      "data order, training noise).", ""] + seed_rows
        k_rows = _table_k(entries, ds)
        if k_rows:
            lines += ["", f"### {title}: pooling k (Table 5 shape)", ""] + k_rows
        for key, name, heading, intro in _LAYOUT_SECTIONS:
            rows = _table_layouts(entries, ds, key, name)
            if rows:
                lines += ["", f"### {title}: {heading} (beyond the paper)", ""] + intro + [""] + rows
        rows = table_selection(selection, entries, ds)
        if rows:
            lines += ["", f"### {title}: model selection on a validation part of the training rows", ""] + _SELECTION_INTRO + [""] + rows
        for heading, intro, rows in (("the paper's privacy level at MiniLM's width (beyond the issue)", _MU_INTRO, _table_mu(entries, ds)),
                                     ("noise type", _NOISE_INTRO, _table_noise(entries, ds))):
            if rows:
                lines += ["", f"### {title}: {heading}", ""] + intro + [""] + rows
    general = _table_general(entries)
    if general:
        lines += ["", "## General-domain MCQA after domain adaptation (Table 4 shape)", ""] + general
    timing = _table_time(entries)
    if timing:
        lines += ["", "## Default pipeline time (2 CPU cores)", ""] + timing
    if figures:
        lines += ["", "## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures]
    lines += ["", "## Result files", "",
              "\"Stage-1 build\": the fingerprint of the stage-1 run the file's models descend from (weights and configs;",
              "`runs/stage1` rebuilt is another build at the same path), recorded since 2026-11-25. A verdict whose",
              "upper bound comes from another recorded build says so.", "",
              "| file | date | git commit | stage-1 build |", "|---|---|---|---|"]
    lines += [f"| `{s}` | {d} | {(g or 'unknown')[:10]} | {', '.join(sorted(builds[s]))} |" for s, d, g in sources]
    return "\n".join(lines) + "\n"


def _seed_mean_sd(e: Entry | None, metric: str) -> tuple[float, float] | None:
    """(mean, sample sd; 0 for one seed) of ``metric`` over ``e``'s seeds, NaN seeds left out; None when none is left."""
    vals = [v for v in (e.values(metric) if e else []) if not math.isnan(v)]
    if not vals:
        return None
    s = seed_spread(vals)
    return s["mean"], 0.0 if math.isnan(s["std"]) else s["std"]


def _two_panel_figure(path: Path, draw: Callable[[Any, str], bool], title: Callable[[str], str], xlabel: str,
                      legend_size: int, title_size: int | None = None) -> Path | None:
    """Pri-DDX beside Pri-SLJA, accuracy on [0, 1]; ``draw(ax, dataset)`` plots one panel and says whether it drew
    anything. Nothing drawn: no file, None."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2))
    drawn = False
    for ax, (ds, name) in zip(fig.subplots(1, 2), (("pri-ddx", "Pri-DDX"), ("pri-slja", "Pri-SLJA"))):
        drawn = draw(ax, ds) or drawn
        ax.set_title(title(name), **({"fontsize": title_size} if title_size else {}))
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, 1)
        ax.set_ylabel("held-out accuracy")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size)
    if not drawn:
        return None
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _figure_k(entries: Sequence[Entry], path: Path) -> Path | None:
    def draw(ax, ds: str) -> bool:
        drawn = False
        noisy = [x for x in entries if x.kind == "ppft_stage2" and x.dataset.lower() == ds and not _get(x, "blind")
                 and _get(x, "family") == "l2_laplace"]
        for eps, style in ((PAPER_EPSILON, "-o"), (WIDTH_MATCHED, "--s")):
            for task in ("mcqa", "open"):
                pts = [(k, ms) for k in (4, 8, 16) if (ms := _seed_mean_sd(_latest(noisy, epsilon=eps, k=k), f"acc_{task}"))]
                if pts:
                    drawn = True
                    ax.errorbar([k for k, _ in pts], [m for _, (m, _) in pts], yerr=[sd for _, (_, sd) in pts], fmt=style,
                                capsize=3, label=f"{'4-option' if task == 'mcqa' else 'open'}, eps {eps:g}")
        ax.set_xscale("log", base=2)
        ax.set_xticks([4, 8, 16], ["4", "8", "16"])
        return drawn

    return _two_panel_figure(path, draw, lambda name: name, "k (tokens per slot)", 7)


def _mu_points(entries: Sequence[Entry], ds: str, task: str) -> dict[str, list[tuple[float, float, float]]]:
    """(slot mu, mean, sd) of every k=4 noise row of PPFT's layout, newest run per (noise, eps), by noise label; only
    runs trained like the dataset's Table 1 PPFT row (same stage-2 epochs and private-token cut), so a line joins
    like with like."""
    ref = _latest([e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds],
                  family="l2_laplace", blind=False, epsilon=WIDTH_MATCHED, k=4)
    if ref is None:
        return {}
    stage2 = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds and not _get(e, "blind")
              and _get(e, "epsilon") not in (None, "missing") and e.params.get("epochs") == ref.params.get("epochs")
              and e.params.get("max_private_tokens") == ref.params.get("max_private_tokens")]
    series: dict[str, list[tuple[float, float, float]]] = {}
    for family, match, label in (("l2_laplace", None, "L2-Laplace"), ("gaussian", "budget", "Gaussian, budget-matched"),
                                 ("gaussian", "norm", "Gaussian, norm-matched")):
        want = {"family": family, "k": 4} | ({"noise_match": match} if match else {})
        for eps in sorted({float(_get(e, "epsilon")) for e in stage2 if all(_get(e, k) == v for k, v in want.items())}):
            ms = _seed_mean_sd(_latest(stage2, epsilon=eps, **want), f"acc_{task}")
            if ms:
                series.setdefault(label, []).append((_noise_norm_and_mu(family, eps, match or "budget")[1], *ms))
    return series


_NOISE_COLORS = {"L2-Laplace": "C0", "Gaussian, budget-matched": "C1", "Gaussian, norm-matched": "C2"}


def _figure_mu(entries: Sequence[Entry], path: Path) -> Path | None:
    """Held-out accuracy against the slot's mu (what a slot leaks), every noise row at k=4, both datasets."""
    def draw(ax, ds: str) -> bool:
        drawn = False
        for task, style in (("mcqa", "-"), ("open", "--")):
            for label, pts in _mu_points(entries, ds, task).items():
                pts.sort()
                drawn = True
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], fmt=style + "o", capsize=3,
                            color=_NOISE_COLORS[label], label=f"{'4-option' if task == 'mcqa' else 'open'}, {label}")
        ax.axvline(_paper_mu(), color="grey", lw=0.8, ls=":")
        return drawn

    return _two_panel_figure(path, draw, lambda name: f"{name} (k 4, Table 1 training; dotted: the paper's mu)",
                             "slot mu = what one slot leaks (Gaussian DP)", 6, title_size=9)


def _paper_mu() -> float:
    """The paper's slot mu: eps 75 at d 1024 (4.69)."""
    from ..mechanisms import l2_laplace_mu

    return l2_laplace_mu(PAPER_EPSILON, PAPER_ENCODER_DIM)


def write_report(paths: Iterable[str | Path], out: str | Path, *, figures_dir: str | Path | None = None) -> Path:
    """Write the report to ``out`` (and the figures next to it, in ``<out stem>/`` unless ``figures_dir``)."""
    paths = list(paths)
    out = Path(out)
    fig_dir = Path(figures_dir) if figures_dir else out.parent / out.stem
    figs = []
    entries = collect(paths)
    for fig in (_figure_k(entries, fig_dir / "accuracy_vs_k.png"), _figure_mu(entries, fig_dir / "accuracy_vs_mu.png")):
        if fig is not None:
            figs.append(str(fig.relative_to(out.parent)) if fig.is_relative_to(out.parent) else str(fig))
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["textfree ppft report", *(Path(p).as_posix() for p in paths), "--out", out.as_posix()])
    out.write_text(build_report(paths, figures=figs, command=command))
    return out
