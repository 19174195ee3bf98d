"""docs/results/rapt.md from result files: RAPT's utility tables beside the paper's (Li et al., Tables II, III, VIII),
the NER attack's empirical privacy, the empirical privacy of every attack on the T2T / PCT2T text per eta (Fig. 4
shape, :mod:`.report_privacy`), the POS categories against privacy and utility (Fig. 6 shape, :mod:`.report_pos`) and
figures, with a summary of the targets first.

Reads ``rapt_finetune`` result files (the newest file of each cell), the matched-eta measurement
(``benchmarks/rapt_matched_eta.py``), ``ner_attack``, ``substitution_inversion`` and ``attribute_inference`` result
files, and ``rapt_qa`` result files with the ``ppft_pipeline`` file of the same decoder (:mod:`.report_generation`).
Nothing is recomputed.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..atomic import atomic_save_figure, atomic_write_text
from .report_budget import budget_section
from .report_generation import PIPELINE_KIND, QA_KIND, Generation, generation_section
from .report_pos import pos_figure, pos_key, pos_section, pos_title
from .report_privacy import PRIVACY_KINDS, PrivacyRow, collect_privacy, privacy_figure, privacy_section

__all__ = ["RaptResults", "collect", "build_report", "write_report", "PAPER_SST2"]

KIND = "rapt_finetune"
NER_KIND = "ner_attack"
INVERSION_KIND = "substitution_inversion"
ATTRIBUTE_KIND = "attribute_inference"
MATCHED_FORMAT = "textfree.rapt.matched_eta"
INF = math.inf
#: A cell's eta stands for the paper's eta whose matched eta is within this fraction of it (the cells' etas were
#: measured on 300 SST-2 dev sentences, the matched-eta file on all 872: they agree within 1.4%).
MATCH_TOLERANCE = 0.02
#: The cells' training budget (examples): the tables compare runs at it; other budgets are the budget section's.
TABLE_TRAIN = 800
#: Table II, SST-2, BERT-base: method -> row -> accuracy at paper eta 25, 75, 125, 150, 175, inf.
PAPER_ETAS = (25, 75, 125, 150, 175, INF)
PAPER_SST2 = {
    "prompt_tuning": {
        "t2t": (46.3, 47.1, 55.6, 56.3, 68.8, 88.3),
        "pct2t": (51.8, 52.4, 60.5, 60.8, 72.9, 88.2),
        "rapt": (53.3, 53.6, 62.1, 63.1, 73.1, 88.5),
    },
    "prefix_tuning": {
        "t2t": (49.2, 50.4, 60.7, 64.9, 71.5, 90.7),
        "pct2t": (55.4, 58.2, 76.8, 84.1, 84.7, 90.7),
        "rapt": (56.4, 59.4, 78.9, 84.3, 84.8, 90.8),
    },
    "lora": {
        "t2t": (49.2, 53.1, 68.9, 76.9, 79.3, 91.4),
        "pct2t": (58.3, 60.6, 80.2, 88.1, 89.8, 91.9),
        "rapt": (59.7, 62.4, 81.1, 89.6, 89.9, 91.8),
    },
    "full": {
        "t2t": (49.9, 55.2, 79.6, 85.9, 89.7, 92.4),
        "pct2t": (65.6, 70.4, 85.2, 89.5, 91.0, 92.5),
        "rapt": (66.0, 71.9, 90.5, 90.9, 91.4, 92.8),
    },
}
#: Table VIII (Qwen2.5-3B, prefix tuning, SST-2 at eta 75 / 125).
PAPER_TABLE_VIII = {"rapt": (85.1, 93.8), "no_rec": (80.8, 90.1), "pct2t": (82.7, 92.5)}
ROW_TITLES = {"t2t": "+T2T", "pct2t": "+PCT2T", "rapt": "+Reconstruction (RAPT)", "no_rec": "PCT2T + plain, no rec.",
              "pos": "PCT2T, other POS set"}  # fmt: skip
METHOD_TITLES = {
    "lora": "LoRA",
    "prompt_tuning": "prompt tuning",
    "prefix_tuning": "prefix tuning",
    "full": "full",
    "ia3": "IA3",
}


@dataclass
class RaptRow:
    cell: str
    task: str
    method: str
    row: str  # t2t, pct2t, rapt, no_rec; pos: PCT2T over another POS set than the default (Fig. 6 only)
    eta: float  # INF without privatization
    acc: float
    metrics: dict[str, Any]
    plain: int = 40  # plain tokens (Fig. 5b varies it; the tables use the paper's 40)
    params: dict[str, Any] = field(default_factory=dict)  # the point's resolved params
    accs: tuple[float, ...] = ()  # the accuracy of every seed (acc is their mean)

    @property
    def train(self) -> int | None:
        """Training examples (``train_limit``): the tables compare runs at :data:`TABLE_TRAIN`."""
        value = self.params.get("train_limit", TABLE_TRAIN)
        return None if value is None else int(value)


@dataclass
class RaptResults:
    rows: list[RaptRow]
    matched: dict[str, Any] | None
    ner: list[dict[str, Any]]
    files: list[tuple[str, str, str, str]] = field(default_factory=list)  # (file, cell, kind, date)
    generation: Generation = field(default_factory=Generation)
    privacy: list[PrivacyRow] = field(default_factory=list)  # Fig. 4: every attack on T2T / PCT2T text, per eta
    inversion: list[dict[str, Any]] = field(default_factory=list)  # word-inversion points, oldest first (Fig. 6)
    attributes: list[dict[str, Any]] = field(default_factory=list)  # attribute-inference points, likewise

    def find(self, task: str, method: str, row: str, eta: float, plain: int = 40, train: int = TABLE_TRAIN):
        """The run of one Table II row (plain-token rows at ``plain`` tokens, ``train`` training examples), or None."""
        for r in self.rows:
            same_plain = r.row in ("t2t", "pct2t") or r.plain == plain
            key = (r.task, r.method, r.row, r.train)
            if key == (task, method, row, train) and _same(r.eta, eta) and same_plain:
                return r
        return None

    def acc(self, task: str, method: str, row: str, eta: float, plain: int = 40, train: int = TABLE_TRAIN) -> float:
        """The accuracy of one Table II row (its mean over seeds); NaN when not run."""
        r = self.find(task, method, row, eta, plain, train)
        return math.nan if r is None else r.acc

    def etas(self, task: str, method: str) -> list[float]:
        return sorted(
            {r.eta for r in self.rows if (r.task, r.method, r.train) == (task, method, TABLE_TRAIN) and r.eta != INF}
        )

    def paper_eta(self, eta: float) -> int | None:
        """The paper's eta whose replacement rate our ``eta`` matches (PCT2T), from the matched-eta measurement."""
        for row in (self.matched or {}).get("rows", []):
            if row["mechanism"] == "pct2t" and abs(row["matched_eta"] - eta) <= MATCH_TOLERANCE * eta:
                return int(row["paper_eta"])
        return None


def _same(a: float, b: float) -> bool:
    return a == b or (math.isfinite(a) and math.isfinite(b) and abs(a - b) <= 1e-9 * max(abs(a), 1.0))


def _row_kind(params: dict) -> str:
    """The Table II row of a run's settings (its eta aside): t2t, pct2t, rapt, or no_rec (plain tokens, no loss); pos:
    PCT2T over another POS set than the default one (Fig. 6's question, kept out of the tables)."""
    if params.get("pos") is None:
        return "t2t"
    if pos_key(params["pos"]) != "default":
        return "pos"
    plain = params.get("plain_length", 40)
    if plain and params.get("reconstruction", True):
        return "rapt"
    return "no_rec" if plain else "pct2t"


def _json_files(paths: Iterable[str | os.PathLike]) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        out += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return out


def collect(paths: Iterable[str | os.PathLike]) -> RaptResults:
    """Read ``paths`` (files or directories of them); see the module docstring."""
    from ..results.files import load_results

    newest: dict[str, tuple[dict, Path]] = {}
    ner: dict[str, tuple[dict, Path]] = {}
    matched = None
    generation, files, attack_files, inversion, attributes = Generation(), [], [], [], []
    for f in _json_files(paths):
        try:
            raw = json.loads(f.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            raw = None
        if isinstance(raw, dict) and raw.get("format") == MATCHED_FORMAT:
            matched = raw | {"_path": str(f)}
            continue
        raw_kind = (raw.get("kind") or (raw.get("cell") or {}).get("kind")) if isinstance(raw, dict) else None
        if raw_kind in PRIVACY_KINDS:
            attack_files.append(f)  # the Fig. 4 section's (NER files are read below as well)
        if raw_kind == INVERSION_KIND:  # and Fig. 6's inversion panel
            inversion += _attack_rows(load_results(f))
        if raw_kind == ATTRIBUTE_KIND:  # and its attribute panel (the kind's default release: slots)
            attributes += _attack_rows(load_results(f), default_release="slots")
        if raw_kind not in (KIND, NER_KIND, QA_KIND, PIPELINE_KIND):
            continue  # another kind's file (results/ppft holds many): not read further
        data = load_results(f)
        kind = data.get("kind") or data["cell"].get("kind")
        if kind in (QA_KIND, PIPELINE_KIND):
            generation.add(data, kind, f.name)
            files.append((f.name, data["cell"]["name"], kind, data["date"]))
            continue
        target = newest if kind == KIND else ner if kind == NER_KIND else None
        name = data["cell"]["name"]
        if target is not None and (name not in target or data["date"] >= target[name][0]["date"]):
            target[name] = (data, f)
    rows = []
    for name, (data, f) in sorted(newest.items()):
        files.append((f.name, name, KIND, data["date"]))
        for r in data["results"]:
            params = r["resolved"]["params"]
            means = {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
            eta = INF if params.get("eta") is None else float(params["eta"])
            acc = math.nan if means.get("acc") is None else float(means["acc"])
            accs = tuple(float(v) for v in (r["metrics"].get("acc") or {}).get("values") or ())
            rows.append(
                RaptRow(
                    name,
                    params.get("task", "sst2"),
                    params.get("method", "lora"),
                    _row_kind(params),
                    eta,
                    acc,
                    means,
                    int(params.get("plain_length", 40)),
                    dict(params),
                    accs,
                )
            )
    ner_rows = []
    for name, (data, f) in sorted(ner.items()):
        files.append((f.name, name, NER_KIND, data["date"]))
        for r in data["results"]:
            params = r["resolved"]["params"]
            ner_rows.append(
                {"cell": name, "pos": params.get("pos"), "eta": params.get("eta")}
                | {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
            )
    privacy, privacy_files = collect_privacy(attack_files)
    listed = {f[0] for f in files}
    files += [f for f in privacy_files if f[0] not in listed]
    if matched is not None:
        files.append((Path(matched["_path"]).name, "matched eta", "benchmark", str(matched.get("date"))))
    used = generation.pipeline_for(generation.qa[0]["params"].get("decoder")) if generation.qa else None
    files = [f for f in files if f[2] != PIPELINE_KIND or (used and f[0] == used["file"])]  # only the PPFT run used
    inversion.sort(key=lambda r: r["date"])
    attributes.sort(key=lambda r: r["date"])
    return RaptResults(rows, matched, ner_rows, files, generation, privacy, inversion, attributes)


def _attack_rows(data: dict, default_release: str | None = None) -> list[dict[str, Any]]:
    """One row per point of an attack's result file on a T2T / PCT2T release: its cell, date, pos (None: T2T), eta and
    metric means (an attribute cell's other releases are skipped)."""
    rows = []
    for r in data["results"]:
        params = dict(r["resolved"]["params"])
        release = params.get("release", default_release)
        if release not in (None, "t2t", "pct2t"):
            continue
        if release == "t2t":
            params["pos"] = None
        means = {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
        rows.append({"cell": data["cell"]["name"], "date": data["date"], "pos": params.get("pos"),
                     "eta": params.get("eta")} | means)  # fmt: skip
    return rows


# --------------------------------------------------------------------------------------------------- formatting
def _f(value: Any, spec: str = ".1f") -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _table(header: Sequence[str], body: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in body]


def run_or_clean(res: RaptResults, task: str, method: str, row: str, eta: float) -> RaptRow | None:
    """The run of ``row`` at ``eta``; without privatization PCT2T is T2T (no word is privatized either way)."""
    r = res.find(task, method, row, eta)
    if r is None and eta == INF and row == "pct2t":
        r = res.find(task, method, "t2t", INF)
    return r


def _acc_or_clean(res: RaptResults, task: str, method: str, row: str, eta: float) -> str:
    """``row``'s accuracy at ``eta`` in %, with the standard deviation over seeds where several ran."""
    r = run_or_clean(res, task, method, row, eta)
    return "—" if r is None else _acc_text(r)


def _acc_text(r: RaptRow) -> str:
    if len(r.accs) < 2:
        return _f(100 * r.acc)
    return f"{100 * r.acc:.1f} ± {100 * statistics.stdev(r.accs):.1f}"


def _eta_title(res: RaptResults, eta: float) -> str:
    if eta == INF:
        return "eta = inf"
    paper = res.paper_eta(eta)
    if paper is None and eta in PAPER_ETAS:
        return f"eta {eta:g} (the paper's value itself)"
    return f"eta {eta:g}" + (f" (paper {paper})" if paper else "")


def _gain_checks(res: RaptResults, task: str, method: str) -> tuple[list[bool], list[str]]:
    checks, notes = [], []
    for eta in res.etas(task, method):
        a, b, c = (res.acc(task, method, row, eta) for row in ("t2t", "pct2t", "rapt"))
        if any(math.isnan(v) for v in (a, b, c)):
            continue
        checks.append(a < b < c)
        seeds = min(max(len(res.find(task, method, row, eta).accs), 1) for row in ("t2t", "pct2t", "rapt"))
        note = f"eta {eta:g}: {100 * a:.1f} / {100 * b:.1f} / {100 * c:.1f}"
        notes.append(note + (f" (mean of {seeds} seeds)" if seeds > 1 else ""))
    return checks, notes


def _summary(res: RaptResults) -> list[str]:
    lines = ["## Summary: the targets", "", "| target | ours | paper | verdict |", "|---|---|---|---|"]
    for task, method in sorted({(r.task, r.method) for r in res.rows}):
        checks, notes = _gain_checks(res, task, method)
        verdict = "met" if checks and all(checks) else "not met" if checks else "not measured"
        lines.append(
            f"| {task} {METHOD_TITLES.get(method, method)}: T2T < PCT2T < +Reconstruction at every eta | "
            f"{'; '.join(notes) or '—'} | holds in Table II | {verdict} |"
        )
        paper_rows = PAPER_SST2.get(method)
        for eta in res.etas(task, method):
            paper = res.paper_eta(eta)
            if paper is None or paper_rows is None or task != "sst2":
                continue
            k = PAPER_ETAS.index(paper)
            ours = 100 * (res.acc(task, method, "rapt", eta) - res.acc(task, method, "t2t", eta))
            theirs = paper_rows["rapt"][k] - paper_rows["t2t"][k]
            verdict = "not measured" if math.isnan(ours) else "met" if ours >= theirs else "not met"
            lines.append(
                f"| {task} {METHOD_TITLES.get(method, method)}: +Reconstruction over T2T at eta {eta:g} "
                f"(paper {paper}) | {_f(ours, '+.1f')} points | {theirs:+.1f} (BERT-base) | {verdict} |"
            )
    for eta in sorted({r.eta for r in res.rows if r.row == "no_rec"}):
        task, method = next((r.task, r.method) for r in res.rows if r.row == "no_rec" and _same(r.eta, eta))
        vals = [res.acc(task, method, row, eta) for row in ("rapt", "pct2t", "no_rec")]
        held = None if any(math.isnan(v) for v in vals) else vals[0] > vals[1] > vals[2]
        lines.append(
            f"| Table VIII order at eta {eta:g}: RAPT > without plain tokens > without reconstruction | "
            f"{' / '.join(_f(100 * v) for v in vals)} | 85.1 / 82.7 / 80.8 (Qwen2.5-3B, eta 75) | "
            f"{'not measured' if held is None else 'met' if held else 'not met'} |"
        )
    return lines


def _utility_section(res: RaptResults) -> list[str]:
    lines = ["## Accuracy on privatized test examples (Table II shape)", ""]
    for task, method in sorted({(r.task, r.method) for r in res.rows}):
        etas = res.etas(task, method) + [INF]
        lines += [f"### {task.upper()}, {METHOD_TITLES.get(method, method)}", ""]
        body = [
            [ROW_TITLES[row]] + [_acc_or_clean(res, task, method, row, eta) for eta in etas]
            for row in ("t2t", "pct2t", "rapt")
        ]
        paper = PAPER_SST2.get(method) if task == "sst2" else None
        if paper:
            for row in ("t2t", "pct2t", "rapt"):
                cells = []
                for eta in etas:
                    p = INF if eta == INF else res.paper_eta(eta)
                    cells.append(_f(paper[row][PAPER_ETAS.index(p)]) if p in PAPER_ETAS else "—")
                body.append([f"*paper, BERT-base: {ROW_TITLES[row]}*"] + cells)
        lines += _table(["row"] + [_eta_title(res, e) for e in etas], body) + [""]
    lines += [
        "eta = inf: no privatization (the T2T and PCT2T rows share one run; RAPT's keeps the plain tokens and",
        "the head). Paper columns: the paper's eta whose replacement rate ours matches (see below); *the paper's",
        "value itself*: the paper's eta used unchanged on our table, where it replaces far fewer words (Table III",
        "below), so the paper's figure there is not comparable and is not shown. a ± b: the mean and standard",
        "deviation over the cell's seeds (each seed draws its own initialisation, data order and privatization",
        "noise; the sentences are the same); a bare number: one seed (0).",
    ]
    return lines


def _matched_section(res: RaptResults) -> list[str]:
    lines = ["## eta across embedding tables (Table III)", ""]
    if not res.matched:
        return lines + ["No matched-eta measurement given (`python benchmarks/rapt_matched_eta.py --out ...`)."]
    m = res.matched
    lines += [
        f"Word replacement probability on {m['sentences']} SST-2 dev sentences with table `{m['table']}` at the",
        "paper's eta, and the eta at which ours matches the paper's Table III (BERT-base):",
        "",
    ]
    body = [
        [
            r["mechanism"].upper(),
            str(r["paper_eta"]),
            _f(r["paper_rate"], ".2f"),
            _f(r["rate_at_paper_eta"], ".3f"),
            _f(r["matched_eta"], ".2f"),
        ]
        for r in m["rows"]
    ]
    return lines + _table(["mechanism", "paper eta", "paper's rate", "ours at that eta", "our matched eta"], body)


def _ner_section(res: RaptResults) -> list[str]:
    lines = ["## Empirical privacy under the NER attack (Fig. 4's quantity)", ""]
    if not res.ner:
        return lines + ["No `ner_attack` result files given (`examples/cells/attacks/ner_*.yaml`)."]
    lines += [
        "1 - entity F1 of a token classifier trained on clean annotated text (presidio-synth), run on the",
        "privatized text; the clean-text row is the attacker's reference.",
        "",
    ]
    body = []
    order = {None: "0", "default": "1"}  # T2T, the default set, then the other sets (Fig. 6) by name
    for r in sorted(res.ner, key=lambda r: (order.get(pos_key(r["pos"]), f"2{pos_key(r['pos'])}"), r["eta"] or 0)):
        key = pos_key(r["pos"])
        name = "T2T" if key is None else "PCT2T" if key == "default" else f"PCT2T ({pos_title(key)})"
        f1 = r.get("entity_f1")
        body.append(
            [
                name,
                _f(r["eta"], "g"),
                _f(f1, ".3f"),
                _f(None if f1 is None else 1 - f1, ".3f"),
                _f(r.get("clean_entity_f1"), ".3f"),
            ]
        )
    return lines + _table(["release", "eta", "entity F1", "empirical privacy", "clean-text F1"], body)


def _plain_length_section(res: RaptResults) -> list[str]:
    lines = ["## Plain-token length (Fig. 5b shape)", ""]
    groups = sorted({(r.task, r.method, r.eta) for r in res.rows if r.row == "rapt" and r.plain != 40})
    if not groups:
        return lines + ["No plain-length cell given (`examples/cells/rapt/sst2_lora_plain_length.yaml`)."]
    body = []
    for task, method, eta in groups:
        lengths = sorted(
            {r.plain for r in res.rows if (r.task, r.method, r.row) == (task, method, "rapt") and _same(r.eta, eta)}
            | {0}
        )
        for m in lengths:
            value = res.acc(task, method, "pct2t", eta) if m == 0 else res.acc(task, method, "rapt", eta, plain=m)
            body.append(
                [f"{task} {METHOD_TITLES.get(method, method)}, {_eta_title(res, eta)}", str(m), _f(100 * value)]
            )
    lines += [
        "RAPT's accuracy against the number of plain tokens (0: the PCT2T row, no plain tokens). The paper",
        "(Fig. 5b, BERT-base, SST-2): longer plain tokens score higher.",
        "",
    ]
    return lines + _table(["setting", "plain tokens", "accuracy"], body)


def _table_viii(res: RaptResults) -> list[str]:
    lines = ["## Ablation (Table VIII shape)", ""]
    etas = sorted({r.eta for r in res.rows if r.row == "no_rec"})
    if not etas:
        return lines + ["No ablation cell given (`examples/cells/rapt/sst2_lora_plain_no_rec.yaml`)."]
    body = []
    for eta in etas:
        task, method = next((r.task, r.method) for r in res.rows if r.row == "no_rec" and _same(r.eta, eta))
        body.append(
            [f"{task} {METHOD_TITLES.get(method, method)}, {_eta_title(res, eta)}"]
            + [_f(100 * res.acc(task, method, row, eta)) for row in ("rapt", "no_rec", "pct2t")]
        )
    body.append(
        ["*paper: Qwen2.5-3B prefix tuning, SST-2 eta 75*"]
        + [_f(PAPER_TABLE_VIII[k][0]) for k in ("rapt", "no_rec", "pct2t")]
    )
    return lines + _table(["setting", "RAPT", "without reconstruction", "without plain tokens"], body)


def build_report(
    res: RaptResults,
    figure: str | None = None,
    pos_figure_link: str | None = None,
    privacy_figure_link: str | None = None,
) -> str:
    lines = [
        "# RAPT: results",
        "",
        "<!-- generated by `textfree rapt report` from result files; do not edit by hand -->",
        "",
        "RAPT (Li et al.): the client privatizes text word by word (T2T, or PCT2T: nouns, verbs, pronouns and",
        "prepositions only, each within its category), prepends public plain tokens, and the server fine-tunes a PEFT",
        "method with a head that reconstructs the plain tokens. Ours: all-MiniLM-L6-v2 (the offline BERT-family",
        "stand-in for BERT-base) with the paper's task head (eq. 7); the paper's rows are BERT-base: read them as the",
        "shape. Our cells train 4 epochs on 800 examples (the paper: 4 epochs on the whole task); at that budget the",
        "paper's summed reconstruction loss competes with the task (the measurements are in docs/rapt.md).",
        "",
    ]
    lines += _summary(res) + [""] + _utility_section(res)
    if figure:
        lines += ["", f"![accuracy per eta]({figure})"]
    lines += (
        [""]
        + _table_viii(res)
        + [""]
        + budget_section(
            res,
            TABLE_TRAIN,
            lambda r: "—" if r is None else _acc_text(r),
            lambda eta: _eta_title(res, eta),
            lambda m: METHOD_TITLES.get(m, m),
        )
        + [""]
        + _plain_length_section(res)
        + [""]
        + _matched_section(res)
        + [""]
        + _ner_section(res)
        + [""]
        + privacy_section(res.privacy, privacy_figure_link)
        + [""]
        + pos_section(res, _same, lambda eta: _eta_title(res, eta), lambda m: METHOD_TITLES.get(m, m), pos_figure_link)
        + [""]
        + generation_section(res.generation)
    )
    lines += ["", "## Files", "", "| file | cell | kind | date |", "|---|---|---|---|"]
    lines += [f"| `{f}` | `{c}` | {k} | {d} |" for f, c, k, d in res.files]
    return "\n".join(lines) + "\n"


def _figure(res: RaptResults, png: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted({(r.task, r.method) for r in res.rows})
    if not groups:
        return False
    cols = min(2, len(groups))
    rows = math.ceil(len(groups) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.8 * rows), squeeze=False)
    for ax, (task, method) in zip(axes.flat, groups):
        etas = res.etas(task, method)
        for row, style in (("t2t", "o--"), ("pct2t", "s-."), ("rapt", "^-")):
            ax.plot(etas, [100 * res.acc(task, method, row, e) for e in etas], style, label=ROW_TITLES[row])
        clean = res.acc(task, method, "t2t", INF)
        if not math.isnan(clean):
            ax.axhline(100 * clean, color="grey", lw=1, label="no privatization")
        ax.set_title(f"{task.upper()}, {METHOD_TITLES.get(method, method)}")
        ax.set_xlabel("eta (MiniLM table)")
        ax.set_ylabel("accuracy (%)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(groups) :]:
        ax.axis("off")
    fig.tight_layout()
    atomic_save_figure(fig, png, dpi=110)
    plt.close(fig)
    return True


def write_report(paths: Iterable[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Write the report to ``out`` and its figures to ``<out stem>/acc.png``, (with POS-set rows) ``<out
    stem>/pos.png`` and (with attack rows) ``<out stem>/privacy.png``; refuses (writing nothing) when ``paths`` hold no
    ``rapt_finetune`` result file."""
    from ..results.files import ResultsError

    paths = [str(p) for p in paths]
    res = collect(paths)
    if not res.rows:
        raise ResultsError(f"no {KIND} result files in {', '.join(paths) or '(nothing given)'}: nothing written")
    out = Path(out)
    png = out.parent / out.stem / "acc.png"
    link = os.path.relpath(png, out.parent) if _figure(res, png) else None
    pos_png = out.parent / out.stem / "pos.png"
    pos_link = os.path.relpath(pos_png, out.parent) if pos_figure(res, _same, pos_png) else None
    privacy_png = out.parent / out.stem / "privacy.png"
    privacy_link = os.path.relpath(privacy_png, out.parent) if privacy_figure(res.privacy, privacy_png) else None
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, build_report(res, link, pos_link, privacy_link))
    return out
