"""``docs/results/attacks.md``: token-inversion results, generated from result files (never written by hand).

``collect(paths)`` reads the result JSON files of the ``token_inversion`` cell kind (examples/cells/attacks/) and
turns each cell into one :class:`Curve`: its mechanism, its grid axis and, per grid point, every metric's per-seed
values. When several files hold the same cell (same name), the newest file wins. ``build_report`` returns the
Markdown; ``write_report`` also draws the figure (recovery vs eps, one line per attack: the shape of BeamClean's
Fig. 3) from the same files.

How a file is classified (from the cell alone): the mechanism is ``cell.mechanism.name`` (``clipped`` names its
inner mechanism too); the x axis is the cell's first grid key (``mechanism.epsilon``, ``mechanism.sigma``, ...);
each recovery column is one metric, and estimated and oracle BeamClean are separate metrics and separate columns.
Every figure is ``mean ± sd`` over seeds (sample standard deviation).

The issue-4 target is judged by :func:`target_verdict`, from the numbers: among the grid points where the stronger
nearest neighbour recovers at most 20% of tokens (mean over seeds) and more than 0%, the target is met at a point
where BeamClean with estimated noise recovers at least 3x as many tokens (ratio of the means); the verdict also says
whether the ratio holds in every seed separately.

The cross-model prior (issue 58, BeamClean §5 / Fig. 5) is judged by the same rule on each cell whose prior is a
``causal_lm`` with ``mapping: one_to_one`` (:func:`cross_prior_section`); the table beside it pairs each such cell with
the same-tokenizer (bigram) cells on the same texts (same dataset, mechanism and scored tokens), by grid point, and
with the paper's own figure (:data:`PAPER_FIG5`).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..atomic import atomic_save_figure, atomic_write_text
from ..metrics import seed_spread

__all__ = [
    "TARGET_NN_MAX",
    "TARGET_RATIO",
    "RECOVERY_COLUMNS",
    "Curve",
    "Point",
    "TargetRow",
    "Verdict",
    "collect",
    "target_verdict",
    "build_report",
    "write_report",
    "ATTACK_KINDS",
    "attack_result_files",
    "PAPER_FIG5",
    "is_cross_prior",
    "cross_prior_section",
]

KIND = "token_inversion"
#: The cell kinds whose result files the report reads (every other kind's files are skipped).
ATTACK_KINDS = ("token_inversion", "attribute_inference", "learned_inversion", "substitution_inversion", "ner_attack",
                "text_inversion")  # fmt: skip
#: The issue-4 target: where nearest neighbour recovers at most this fraction of tokens ...
TARGET_NN_MAX = 0.20
#: ... BeamClean (estimated noise) recovers at least this many times as many.
TARGET_RATIO = 3.0

#: (metric, column title, line style in the figure), in table order.
RECOVERY_COLUMNS = (
    ("recovery_nn_l2", "NN L2", "--o"),
    ("recovery_nn_cosine", "NN cosine", ":s"),
    ("recovery_beamclean_estimated", "BeamClean, estimated noise", "-D"),
    ("recovery_beamclean_oracle", "BeamClean, oracle noise", "--x"),
    ("recovery_mlp", "MLP (black box)", "-.v"),
    ("recovery_autoencoder", "autoencoder + NN (black box)", "-.^"),
    ("pii_exact_nn_best", "PII found, NN (exact)", ":p"),
    ("pii_exact_beamclean_estimated", "PII found, BeamClean (exact)", ":*"),
)
#: BeamClean Fig. 5 (GPT-2 table, Llama-3.2-1B-Instruct prior through a restricted 1:1 token map, MRPC, Laplace
#: noise): the largest gap, at DP eps ~ 9.6 on the paper's own eps scale (not comparable with eps per unit L2 here).
PAPER_FIG5 = {"epsilon": 9.6, "nn": 0.17, "beamclean": 0.77}
_NN = "recovery_nn_best"
_BC = "recovery_beamclean_estimated"
_BC_ORACLE = "recovery_beamclean_oracle"
_MECH_TITLES = {"l2_laplace": "L2-Laplace", "gaussian": "Gaussian"}
_SURROGATE_NAMES = {
    "vmf": "von Mises-Fisher (direction-only)",
    "l2_laplace": "L2-Laplace",
    "l1_laplace": "L1-Laplace",
    "gaussian": "Gaussian",
}


@dataclass
class Point:
    """One grid point: its value on the curve's axis and each metric's per-seed values (NaN for null)."""

    x: Any
    values: dict[str, list[float]]

    def spread(self, name: str) -> dict[str, float] | None:
        vals = [v for v in self.values.get(name, []) if not math.isnan(v)]
        return seed_spread(vals) if vals else None

    def mean(self, name: str) -> float:
        s = self.spread(name)
        return math.nan if s is None else s["mean"]


@dataclass
class Curve:
    """One token_inversion cell (its newest result file): a mechanism swept along one grid axis."""

    name: str
    mechanism: dict
    axis: str | None
    points: list[Point]
    source: str
    date: str
    git: str | None
    seeds: list[int]
    attack: dict = field(default_factory=dict)
    dataset: str | None = None
    params: dict = field(default_factory=dict)
    host: dict = field(default_factory=dict)

    @property
    def family(self) -> str:
        """``l2_laplace``, ``gaussian``, or ``clipped <inner>``."""
        name = str(self.mechanism.get("name"))
        if name == "clipped":
            return f"clipped {self.mechanism.get('inner', {}).get('name')}"
        return name

    @property
    def title(self) -> str:
        """The mechanism in words (and the prior's provenance when it is not public text)."""
        if self.family.startswith("clipped"):
            inner = self.family.split(" ", 1)[1]
            title = f"{_MECH_TITLES.get(inner, inner)}, clipped to {self.mechanism.get('max_norm'):g}"
        else:
            title = _MECH_TITLES.get(self.family, self.family)
        family = (self.attack.get("beamclean") or {}).get("family", "auto")
        if family != "auto" and "beamclean" in self.attack.get("attacks", ["beamclean"]):
            title += f", BeamClean {_SURROGATE_NAMES.get(family, family)} surrogate"
        provenance = (self.attack.get("prior") or {}).get("training_text", "public")
        return title if provenance == "public" else f"{title}, {provenance.replace('_', '-')} prior"

    @property
    def axis_label(self) -> str:
        return "point" if self.axis is None else self.axis.split(".")[-1]


def _values(agg: dict[str, Any]) -> list[float]:
    return [math.nan if v is None else float(v) for v in agg.get("values", [])]


def result_files(paths: Iterable[str | Path]) -> list[Path]:
    """The files among ``paths``, directories replaced by the ``*.json`` files they hold (sorted)."""
    files: list[Path] = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.json")) if p.is_dir() else [p]
    return files


def attack_result_files(paths: Iterable[str | Path]) -> list[Path]:
    """The result files among ``paths`` (as :func:`result_files` finds them) of the :data:`ATTACK_KINDS`: the ones the
    report reads. A file that is not a result file raises :class:`~textfree.experiments.ResultsError`."""
    from ..results.files import load_results

    return [f for f in result_files(paths) if load_results(f).get("kind") in ATTACK_KINDS]


def collect(paths: Iterable[str | Path]) -> list[Curve]:
    """One :class:`Curve` per token_inversion cell in ``paths`` (files, or directories searched for ``*.json``);
    the newest file of each cell wins. Files of other kinds are skipped. Sorted by cell name."""
    from ..results.files import load_results

    curves: dict[str, Curve] = {}
    for f in result_files(paths):
        data = load_results(f)
        if data.get("kind") != KIND:
            continue
        cell = data["cell"]
        axes = list(data.get("grid_axes") or cell.get("grid") or [])
        axis = axes[0] if axes else None
        points = [
            Point(r["point"].get(axis) if axis else None, {n: _values(m) for n, m in r["metrics"].items()})
            for r in data["results"]
        ]
        curve = Curve(
            cell["name"],
            dict(cell.get("mechanism") or {}),
            axis,
            points,
            f.name,
            data["date"],
            (data.get("git") or {}).get("commit"),
            list(data["seeds"]),
            dict(cell.get("attack") or {}),
            cell.get("dataset"),
            dict(cell.get("params") or {}),
            dict(data.get("host") or {}),
        )
        old = curves.get(curve.name)
        if old is None or curve.date >= old.date:
            curves[curve.name] = curve
    return [curves[k] for k in sorted(curves)]


# ------------------------------------------------------------------------------------------------- verdict
@dataclass
class TargetRow:
    """A grid point where nearest neighbour recovers at most :data:`TARGET_NN_MAX` (and more than 0)."""

    x: Any
    epsilon_unit: float
    nn: float
    beamclean: float
    ratio: float
    seed_ratios: list[float]

    @property
    def met(self) -> bool:
        return self.ratio >= TARGET_RATIO

    @property
    def met_every_seed(self) -> bool:
        return bool(self.seed_ratios) and all(r >= TARGET_RATIO for r in self.seed_ratios)


@dataclass
class Verdict:
    """The target judged on one curve: qualifying rows, the best of them, and whether the target is met."""

    curve: str
    rows: list[TargetRow]
    reason: str = ""
    axis: str = "epsilon"

    @property
    def best(self) -> TargetRow | None:
        return max(self.rows, key=lambda r: r.ratio) if self.rows else None

    @property
    def met(self) -> bool:
        return any(r.met for r in self.rows)

    def sentence(self) -> str:
        if self.reason:
            return f"cannot be judged: {self.reason}"
        met = [r for r in self.rows if r.met]
        pick = max(met, key=lambda r: r.nn) if met else self.best
        unit = "" if self.axis == "epsilon" else f" (eps per unit distance {pick.epsilon_unit:.3g})"
        where = (
            f"at {self.axis} {pick.x:g}{unit} NN recovers {100 * pick.nn:.1f}% and BeamClean "
            f"(estimated noise) {100 * pick.beamclean:.1f}%: {pick.ratio:.2f}x"
        )
        seeds = ", ".join(f"{r:.2f}" for r in pick.seed_ratios)
        if met:
            others = [f"{self.axis} {r.x:g} ({r.ratio:.2f}x)" for r in met if r is not pick]
            tail = f"; also met at {', '.join(others)}" if others else ""
            every = "in every seed" if pick.met_every_seed else "not in every seed"
            return f"**met**: {where} ({every}: per-seed ratios {seeds}){tail}"
        return (
            f"**not met**: the best qualifying point is {where} (per-seed ratios {seeds}); {TARGET_RATIO:g}x is needed"
        )


def target_verdict(curve: Curve) -> Verdict:
    """Judge the issue-4 target on one curve, from its per-seed recoveries (see the module docstring)."""
    if not any(_BC in p.values for p in curve.points):
        return Verdict(curve.name, [], "the cell ran no BeamClean with estimated noise", curve.axis_label)
    if not any(_NN in p.values for p in curve.points):
        return Verdict(curve.name, [], "the cell ran no nearest-neighbour attack", curve.axis_label)
    rows = []
    for p in curve.points:
        nn, bc = p.mean(_NN), p.mean(_BC)
        if math.isnan(nn) or math.isnan(bc) or not 0 < nn <= TARGET_NN_MAX:
            continue
        seed_ratios = [b / n for n, b in zip(p.values[_NN], p.values[_BC]) if n > 0 and not math.isnan(b)]
        rows.append(TargetRow(p.x, p.mean("epsilon_unit"), nn, bc, bc / nn, seed_ratios))
    if not rows:
        return Verdict(
            curve.name,
            [],
            f"no grid point where nearest neighbour recovers more than 0% and at most {100 * TARGET_NN_MAX:g}%",
            curve.axis_label,
        )
    return Verdict(curve.name, rows, axis=curve.axis_label)


# ---------------------------------------------------------------------------------------------- formatting
def _pct(point: Point, name: str) -> str:
    s = point.spread(name)
    if s is None:
        return "—"
    sd = "" if s["n"] == 1 else f" ± {100 * s['std']:.1f}"
    return f"{100 * s['mean']:.1f}{sd}"


def _num(point: Point, name: str, fmt: str = ".3g") -> str:
    m = point.mean(name)
    return "—" if math.isnan(m) else format(m, fmt)


def _ratio(point: Point, num: str) -> str:
    a, b = point.mean(num), point.mean(_NN)
    if math.isnan(a) or math.isnan(b):
        return "—"
    return f"{a / b:.2f}x" if b > 0 else ("—" if a == 0 else "inf")


def _token_eps(point: Point) -> str:
    eps, delta = point.mean("token_epsilon"), point.mean("token_delta")
    if math.isnan(eps):
        return "—"
    return f"{eps:.3g}" + (f" (δ {delta:g})" if delta and not math.isnan(delta) else "")


def _table(curve: Curve) -> list[str]:
    cols = [c for c in RECOVERY_COLUMNS if any(c[0] in p.values for p in curve.points)]
    head = [curve.axis_label, "eps / unit distance", "token eps (diameter)", "noise norm"] + [c[1] for c in cols]
    ratio_cols = [
        (m, t)
        for m, t in ((_BC, "BeamClean est. / NN best"), (_BC_ORACLE, "BeamClean oracle / NN best"))
        if any(m in p.values for p in curve.points) and any(_NN in p.values for p in curve.points)
    ]
    head += [t for _, t in ratio_cols]
    extra = [
        ("scale_rel_error_estimated", "scale error (est.)", "+.1%"),
        ("autoencoder_mse", "autoencoder MSE", ".4f"),
        ("noisy_mse", "noisy MSE", ".4f"),
        ("n_pii_units", "PII units released", ".0f"),
        ("seconds_per_sequence_beamclean_estimated", "s / seq (est.)", ".2f"),
        ("seconds_per_sequence_beamclean_oracle", "s / seq (oracle)", ".2f"),
    ]
    extra = [e for e in extra if any(e[0] in p.values for p in curve.points)]
    head += [e[1] for e in extra]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p in curve.points:
        row = [
            f"{p.x:g}" if isinstance(p.x, (int, float)) else str(p.x),
            _num(p, "epsilon_unit"),
            _token_eps(p),
            _num(p, "noise_norm", ".2f"),
        ]
        row += [_pct(p, m) for m, _, _ in cols]
        row += [_ratio(p, m) for m, _ in ratio_cols]
        row += [_num(p, m, f) for m, _, f in extra]
        out.append("| " + " | ".join(row) + " |")
    return out


def _describe(curve: Curve) -> list[str]:
    a = curve.attack
    bc = a.get("beamclean") or {}
    prior = a.get("prior") or {}
    sources = ", ".join(
        s.get("dataset", "?") + (f":{s['split']}" if s.get("split") else "") for s in prior.get("sources") or []
    )
    prior_txt = {
        "bigram": f"bigram (add-{prior.get('k', 0.1):g}) on {sources or 'inline texts'} "
        f"({prior.get('training_text', 'public')} text)",
        "causal_lm": f"causal LM `{prior.get('path')}` (cross-tokenizer, "
        + (
            f"restricted one-to-one token map, unmapped mass {prior.get('unmapped_mass', 0):g})"
            if prior.get("mapping") == "one_to_one"
            else "first LM sub-token of each token)"
        ),
        "uniform": "uniform",
    }.get(prior.get("kind", "bigram"), "?")
    threat = ", ".join(k for k, v in (a.get("threat") or {}).items() if v is True and k != "payload_vectors")
    tt = (a.get("threat") or {}).get("training_text")
    n = curve.points[0].mean("n_sequences") if curve.points else math.nan
    toks = curve.points[0].mean("n_tokens") if curve.points else math.nan
    return [
        f"Cell `{curve.name}` ({curve.dataset or 'inline texts'}, {n:.0f} texts, {toks:.0f} scored tokens; seeds "
        f"{', '.join(map(str, curve.seeds))}; file `{curve.source}`). Grant: payload, {threat}"
        + (f", training text: {tt}" if tt else "")
        + ". "
        + (
            f"BeamClean: beam {bc.get('beam_width', 10)}, {bc.get('candidates', 64)} candidates, family "
            f"{bc.get('family', 'auto')}, "
            f"prior {prior_txt}. "
            if "beamclean" in a.get("attacks", ["beamclean"])
            else ""
        )
        + (
            f"Black box: the {(a.get('blackbox') or {}).get('vocab_size', 4096)} most frequent public tokens queried. "
            if {"mlp", "autoencoder"} & set(a.get("attacks", []))
            else ""
        )
        + f"Timing: {curve.params.get('threads') or curve.host.get('torch_threads', '?')} torch thread(s), "
        f"{curve.host.get('cpu_count', '?')} CPU cores.",
    ]


def build_report(paths: Iterable[str | Path], *, figures: Sequence[str] = ()) -> str:
    """Markdown for docs/results/attacks.md from the result files in ``paths`` (token inversion, then the PPFT-payload
    attacks of :mod:`.report_payloads`)."""
    paths = list(paths)
    return _markdown(collect(paths), figures) + _payload_sections(paths)


def _payload_sections(paths: list, matrix_figure: str | None = None) -> str:
    from .report_baselines import baselines_section
    from .report_matrix import collect_matrix, matrix_section
    from .report_ner import ner_section
    from .report_payloads import attribute_section, collect_kind, files_section, inversion_section, substitution_section

    cells = {
        kind: collect_kind(paths, kind)
        for kind in ("attribute_inference", "learned_inversion", "substitution_inversion", "ner_attack")
    }
    lines = attribute_section(cells["attribute_inference"])
    lines += inversion_section(cells["learned_inversion"])
    lines += substitution_section(cells["substitution_inversion"])
    lines += ner_section(cells["ner_attack"])
    lines += matrix_section(collect_matrix(paths), matrix_figure)
    lines += baselines_section(paths)
    lines += files_section([c for found in cells.values() for c in found])
    return "\n".join(lines) + "\n"


def _in_target(curve: Curve) -> bool:
    return str(curve.dataset or "").lower() == "pri-ddx" and curve.family in ("l2_laplace", "gaussian")


def _markdown(curves: Sequence[Curve], figures: Sequence[str]) -> str:
    lines = [
        "# Attacks: results",
        "",
        "<!-- generated by `textfree attacks report` from result files; do not edit by hand -->",
        "",
        "Generated by `textfree attacks report results/attacks results/ppft --out docs/results/attacks.md` from the",
        "result files of the cells in `examples/cells/attacks/` (run with `textfree run <cell> --out-dir",
        "results/attacks`; results/ppft adds the attack figures of PPFT's PrivacyRestore baseline); see",
        "docs/attacks.md for the attacks and the cell kind.",
        "",
        "## Token inversion: BeamClean vs nearest neighbour (BeamClean Fig. 3 shape)",
        "",
        "Every token of a private prompt is released as its row of the attacked model's input embedding table plus its",
        "own noise vector; the attacker maps each noisy vector back to a token. Recovery is the percentage of the",
        "prompts' own tokens recovered exactly ([CLS]/[SEP] are noised and attacked but not scored), `mean ± sd` over",
        "noise seeds. *NN* is the nearest vocabulary row by L2 and by cosine (no noise model); *BeamClean* decodes",
        "with a token prior and a surrogate noise model whose scale it **estimates** from the payload, or is **given**",
        "(oracle: the true parameter; a separate column, never mixed in). *eps / unit distance* is the mechanism's",
        "privacy loss per unit of L2 distance (the Gaussian's at its delta); *token eps* is the formal guarantee for",
        "one token: the loss at the table's exact diameter (the largest distance between two tokens).",
        "*MLP / autoencoder (black box)* (RAPT IV-A1) have no table: they query the clean vectors of the most frequent",
        "public tokens, noise them with the known mechanism and train a token classifier / a denoiser (its output",
        "mapped to the nearest queried vector); *MSE* is per coordinate against the clean vectors. *PII found* (PUPA "
        "units, Presidio spans):",
        "the share of the released PII units (those inside the first `max_tokens` tokens) whose normalised words "
        "appear",
        "in the decoded guess.",
    ]
    if not curves:
        lines += ["", "No token_inversion result files were given."]
    verdicts = [target_verdict(c) for c in curves]
    if curves:
        lines += [
            "",
            f"**Target** (issue 4): at an eps where nearest neighbour (the stronger of L2 and cosine) recovers at most "
            f"{100 * TARGET_NN_MAX:g}% of tokens, BeamClean with estimated noise recovers at least {TARGET_RATIO:g}x "
            "as many. "
            "Judged from the means over seeds, at grid points where NN recovers more than 0%:",
            "",
        ]
        lines += [f"* {c.title} (`{c.name}`): {v.sentence()}" for c, v in zip(curves, verdicts)]
        # the target names Pri-DDX prompts under L2-Laplace and Gaussian token noise; the other cells
        # (clipping, PUPA) are reported with the same rule but do not decide it
        judged = [v for c, v in zip(curves, verdicts) if not v.reason and _in_target(c)]
        overall = (
            "cannot be judged"
            if not judged
            else "met"
            if all(v.met for v in judged)
            else "met for some mechanisms only"
            if any(v.met for v in judged)
            else "not met"
        )
        lines += [
            "",
            "Overall, for the target's cells (Pri-DDX, unclipped L2-Laplace and Gaussian noise, BeamClean run): "
            f"**{overall}**.",
        ]
    for c in curves:
        lines += ["", f"### {c.title} (`{c.name}`)", ""] + _describe(c) + [""] + _table(c)
    if figures:
        lines += ["", "### Figure", ""] + [f"![{Path(f).stem}]({f})" for f in figures]
    lines += cross_prior_section(curves)
    if curves:
        lines += ["", "## Result files", "", "| cell | file | date | git commit |", "|---|---|---|---|"]
        lines += [f"| `{c.name}` | `{c.source}` | {c.date} | {(c.git or 'unknown')[:10]} |" for c in curves]
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------ cross-model prior
def is_cross_prior(curve: Curve) -> bool:
    """A cell whose BeamClean prior is an LM of another tokenizer through the restricted one-to-one map."""
    prior = curve.attack.get("prior") or {}
    return prior.get("kind") == "causal_lm" and prior.get("mapping") == "one_to_one"


def _same_texts(a: Curve, b: Curve) -> bool:
    n = lambda c: c.points[0].mean("n_tokens") if c.points else math.nan  # noqa: E731
    return a.dataset == b.dataset and a.family == b.family and n(a) == n(b) and not math.isnan(n(a))


def _same_tokenizer_baselines(cross: Curve, curves: Sequence[Curve]) -> list[Curve]:
    """The bigram-prior cells on the same texts and mechanism as ``cross``."""
    return [
        c
        for c in curves
        if c is not cross
        and (c.attack.get("prior") or {}).get("kind", "bigram") == "bigram"
        and "beamclean" in c.attack.get("attacks", ["beamclean"])
        and _same_texts(cross, c)
    ]


def _seed_means(point: Point | None, name: str) -> str:
    return "—" if point is None else _pct(point, name)


def cross_prior_section(curves: Sequence[Curve]) -> list[str]:
    """The issue-58 section: per cross-model cell, its verdict and a table of NN, same-tokenizer BeamClean and
    cross-model BeamClean per grid point, with the paper's Fig. 5 figure beside; [] when no cell has such a prior."""
    crosses = [c for c in curves if is_cross_prior(c)]
    if not crosses:
        return []
    paper = PAPER_FIG5
    lines = [
        "",
        "## Cross-model prior: BeamClean with a prior LM of another tokenizer (BeamClean §5, Fig. 5)",
        "",
        "BeamClean's prior need not share the attacked model's tokenizer: the paper attacks GPT-2 embeddings with a",
        "Llama-3.2-1B-Instruct prior through a restricted one-to-one token map and reports "
        f"{100 * paper['beamclean']:.0f}% vs {100 * paper['nn']:.0f}%",
        f"for nearest neighbour (MRPC, Laplace noise, DP eps ~ {paper['epsilon']:g} on its own scale). Here MiniLM's",
        "table is attacked with the local decoder (its own byte-level BPE) as the prior, through the same kind of map",
        "(`textfree.attacks.token_mapping`: a MiniLM token whose surface string is one decoder token gets it, no two",
        "share one; the LM's distribution is restricted to the mapped tokens and renormalised). *Same-tokenizer* is",
        "BeamClean with a bigram over MiniLM's own tokens on the same texts, noise and seeds; *coverage* is the share",
        "of scored tokens the map covers (with unmapped mass 0 the others are never decoded: it bounds the",
        "cross-model recovery). `mean ± sd` over seeds; the ratios are of the means.",
        "",
        f"**Target** (issue 58): where nearest neighbour recovers at most {100 * TARGET_NN_MAX:g}% (and more than 0%), "
        f"BeamClean with the cross-model prior (estimated noise) recovers at least {TARGET_RATIO:g}x as many.",
        "",
    ]
    for c in crosses:
        lines.append(f"* `{c.name}` ({c.dataset}): {target_verdict(c).sentence()}")
    for c in crosses:
        bases = _same_tokenizer_baselines(c, curves)
        head = [c.axis_label, "eps / unit distance", "NN best"]
        head += [f"BeamClean, same tokenizer (`{b.name}`)" for b in bases]
        head += ["BeamClean, cross-model prior", "cross-model / NN"]
        head += [f"same tokenizer / NN (`{b.name}`)" for b in bases]
        head += ["coverage", "s / seq (cross-model)"]
        lines += ["", f"### `{c.name}`", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for p in c.points:
            others = [next((q for q in b.points if q.x == p.x), None) for b in bases]
            row = [f"{p.x:g}" if isinstance(p.x, (int, float)) else str(p.x), _num(p, "epsilon_unit"), _pct(p, _NN)]
            row += [_seed_means(q, _BC) for q in others]
            row += [_pct(p, _BC), _ratio(p, _BC)]
            row += ["—" if q is None else _ratio(q, _BC) for q in others]
            row += [_num(p, "prior_coverage", ".1%"), _num(p, "seconds_per_sequence_beamclean_estimated", ".2f")]
            lines.append("| " + " | ".join(row) + " |")
        paper_row = [
            f"paper Fig. 5 (GPT-2 / Llama-3.2-1B, MRPC), DP eps ~ {paper['epsilon']:g}",
            "—",
            f"{100 * paper['nn']:.0f}",
        ]
        paper_row += ["—"] * len(bases) + [f"{100 * paper['beamclean']:.0f}"]
        paper_row += [f"{paper['beamclean'] / paper['nn']:.2f}x"]
        paper_row += ["—"] * len(bases) + ["—", "—"]
        lines.append("| " + " | ".join(paper_row) + " |")
        nn_differs = [
            b.name
            for b in bases
            for p in c.points
            for q in b.points
            if q.x == p.x and q.values.get(_NN) != p.values.get(_NN)
        ]
        if nn_differs:
            lines += [
                "",
                f"Nearest neighbour differs between `{c.name}` and {sorted(set(nn_differs))}: not the same "
                "released vectors; compare with care.",
            ]
    return lines


#: Panels per row of the token-inversion figure: three read at page width.
FIGURE_COLUMNS = 3


def _figure(curves: Sequence[Curve], path: Path) -> bool:
    """Recovery vs eps per unit distance, one panel per curve in rows of :data:`FIGURE_COLUMNS`, one line per attack
    (mean, sd error bars), one legend below for every panel; saved to ``path``; False when there is nothing to draw."""
    from matplotlib.figure import Figure

    curves = [c for c in curves if c.points]
    if not curves:
        return False
    cols = min(FIGURE_COLUMNS, len(curves))
    rows = math.ceil(len(curves) / cols)
    fig = Figure(figsize=(3.6 * cols, 3.1 * rows + 0.7), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    for ax in axes[len(curves) :]:
        ax.set_visible(False)
    legend: dict[str, Any] = {}
    for ax, c in zip(axes, curves):
        for metric, label, style in RECOVERY_COLUMNS:
            drawn = [(p.mean("epsilon_unit"), p.spread(metric)) for p in c.points if p.spread(metric) is not None]
            drawn = sorted(((x, s) for x, s in drawn if not math.isnan(x)), key=lambda xs: xs[0])
            if drawn:
                line = ax.errorbar(
                    [x for x, _ in drawn],
                    [100 * s["mean"] for _, s in drawn],
                    capsize=3,
                    markersize=4,
                    fmt=style,
                    color=f"C{[m for m, _, _ in RECOVERY_COLUMNS].index(metric)}",
                    yerr=[0.0 if math.isnan(s["std"]) else 100 * s["std"] for _, s in drawn],
                    label=label,
                )
                legend.setdefault(label, line)
        ticks = sorted({x for x in (p.mean("epsilon_unit") for p in c.points) if not math.isnan(x)})
        ax.set_xscale("log")
        ax.set_xticks(ticks, [f"{x:.3g}" for x in ticks], fontsize=7)
        ax.minorticks_off()
        ax.axhline(100 * TARGET_NN_MAX, color="grey", linewidth=0.7, linestyle=":")
        ax.set_title(f"{c.title}\n({c.name})", fontsize=8)
        ax.set(
            ylim=(-2, 102),
            ylabel="tokens recovered (%)",
            xlabel="eps per unit L2 distance"
            + (f" (delta {c.points[0].mean('token_delta'):g})" if c.family.endswith("gaussian") else ""),
        )
    fig.legend(
        list(legend.values()),
        list(legend),
        loc="outside lower center",
        ncols=min(4, len(legend)),
        fontsize=8,
        frameon=False,
    )
    atomic_save_figure(fig, path, dpi=110)
    return True


def write_report(paths: Iterable[str | Path], out: str | Path, *, figures_dir: str | Path | None = None) -> Path:
    """Write the report to ``out`` and its figures to ``<out stem>/token_inversion.png`` and ``cross_matrix.png``
    (or under ``figures_dir``).

    Raises :class:`~textfree.experiments.ResultsError`, writing nothing, when ``paths`` hold no result file of the
    :data:`ATTACK_KINDS`: an empty report would replace the real one."""
    from ..results.files import ResultsError

    paths = list(paths)
    if not attack_result_files(paths):
        raise ResultsError(
            f"no attack result files in {', '.join(map(str, paths))} (kinds {', '.join(ATTACK_KINDS)}; a "
            "directory is searched for *.json directly inside it): nothing written"
        )
    curves = collect(paths)
    out = Path(out)
    figure = (Path(figures_dir) if figures_dir else out.parent / out.stem) / "token_inversion.png"
    links = [os.path.relpath(figure, out.parent)] if _figure(curves, figure) else []
    out.parent.mkdir(parents=True, exist_ok=True)
    from .report_matrix import collect_matrix, matrix_figure

    matrix_png = figure.parent / "cross_matrix.png"
    matrix_link = os.path.relpath(matrix_png, out.parent) if matrix_figure(collect_matrix(paths), matrix_png) else None
    atomic_write_text(out, _markdown(curves, links) + _payload_sections(paths, matrix_link))
    return out
