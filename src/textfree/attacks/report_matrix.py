"""The cross matrix of ``docs/results/attacks.md``: every applicable attack against every mechanism, one table, one
plot.

Mechanisms (rows) and the result files that measure them:

* token noise (L2-Laplace, Gaussian) and clipped token noise: ``token_inversion`` cells (per-token vectors) and
  ``attribute_inference`` cells with ``release: tokens`` (same mechanism label: same row);
* pooled PPFT slots: ``learned_inversion`` cells (unaware / aware / stage-1-aligned inverters, the slot-token
  classifier, restoration) and
  ``attribute_inference`` cells attacking slots (k 4);
* T2T and PCT2T text: ``substitution_inversion`` cells (``pos`` null / set): read the text, the channel inverter and
  the noise-aware learned inverter (its ROUGE-L in the "learned inverter, aware" row), and ``attribute_inference``
  cells with ``release: t2t`` / ``pct2t``.

Attacks (columns) report what they recover of the private text: tokens or words at their position (%), or ROUGE-L
(x100) for generated reconstructions; attribute inference reports sex accuracy (best attacker, %). An attack that
cannot observe what a mechanism releases is ``n/a`` with the reason. A matrix cell gives the range over the grid with
the grid's range of the formal worst-case loss of *one released unit* (a token at the table's diameter, a unit slot,
a word at the table's diameter): the common x axis of the plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from ..atomic import atomic_save_figure
from .report_payloads import PayloadCell, attribute_release, centred, collect_kind, token_noise_label

__all__ = ["MatrixRow", "collect_matrix", "matrix_section", "matrix_figure", "COLUMNS"]

#: (column label, unit) in display order.
COLUMNS = (
    ("NN (L2)", "%"),
    ("NN (cosine)", "%"),
    ("BeamClean (estimated noise)", "%"),
    ("MLP, black box", "%"),
    ("autoencoder + NN, black box", "%"),
    ("read the text", "%"),
    ("channel inverter", "%"),
    ("learned inverter, unaware", "ROUGE-L"),
    ("learned inverter, aware", "ROUGE-L"),
    ("learned inverter, stage-1-aligned", "ROUGE-L"),
    ("slot-token classifier", "ROUGE-L"),
    ("restoration instruction", "ROUGE-L"),
    ("attributes: sex (best)", "%"),
)
_NA = {
    "token": {
        "read the text": "no text is released",
        "channel inverter": "no text is released",
        "learned inverter, unaware": "not run on token noise",
        "learned inverter, aware": "not run on token noise",
        "learned inverter, stage-1-aligned": "not run on token noise",
        "restoration instruction": "no PPFT model",
        "slot-token classifier": "no slots: per-token rows (see MLP, black box)",
    },
    "pooled": {
        "NN (L2)": "slots are pooled, not token rows",
        "NN (cosine)": "slots are pooled, not token rows",
        "MLP, black box": "slots are pooled, not token rows",
        "autoencoder + NN, black box": "slots are pooled, not token rows",
        "BeamClean (estimated noise)": "slots are pooled, not token rows",
        "read the text": "no text is released",
        "channel inverter": "no text is released",
    },
    "text": {
        "NN (L2)": "the attacker sees words, not vectors",
        "NN (cosine)": "the attacker sees words, not vectors",
        "MLP, black box": "the attacker sees words, not vectors",
        "autoencoder + NN, black box": "the attacker sees words, not vectors",
        "BeamClean (estimated noise)": "the attacker sees words, not vectors",
        "learned inverter, unaware": "trained on clean text it learns the identity: read the text",
        "learned inverter, stage-1-aligned": "no PPFT model reads text",
        "restoration instruction": "no PPFT model",
        "slot-token classifier": "no slots: words are released",
    },
}


@dataclass
class MatrixRow:
    mechanism: str
    family: str  # token | pooled | text
    # column -> [(unit loss, value, source cell)]
    points: dict[str, list[tuple[float, float, str]]] = field(default_factory=dict)

    def add(self, column: str, loss: float, value: float, source: str) -> None:
        """Record a point; when several cells measure the same attack at the same unit loss (e.g. BeamClean with
        two surrogate families), keep the strongest."""
        if math.isnan(value):
            return
        points = self.points.setdefault(column, [])
        same = [i for i, (x, _, _) in enumerate(points) if math.isclose(x, loss, rel_tol=1e-9)]
        if not same:
            points.append((loss, value, source))
        elif value > points[same[0]][1]:
            points[same[0]] = (loss, value, source)


def _pri_ddx(c: PayloadCell) -> bool:
    """The matrix is about Pri-DDX prompts (PUPA's PII sweep and Trustpilot's authors have their own tables)."""
    return str(c.cell.get("dataset", "pri-ddx")).lower() == "pri-ddx"


def _add_attributes(row: MatrixRow, c: PayloadCell, unit_eps: str) -> None:
    for _, p in c.points:
        row.add("attributes: sex (best)", p.mean(unit_eps), 100 * p.mean("sex_accuracy_best"), c.name)


def _token_rows(cells: list[PayloadCell], attributes: list[PayloadCell]) -> list[MatrixRow]:
    rows: dict[str, MatrixRow] = {}
    for c in filter(_pri_ddx, cells):
        label = token_noise_label(c.cell.get("mechanism") or {})
        row = rows.setdefault(label, MatrixRow(label, "token"))
        for _, p in c.points:
            loss = p.mean("token_epsilon")
            row.add("NN (L2)", loss, 100 * p.mean("recovery_nn_l2"), c.name)
            row.add("NN (cosine)", loss, 100 * p.mean("recovery_nn_cosine"), c.name)
            row.add("BeamClean (estimated noise)", loss, 100 * p.mean("recovery_beamclean_estimated"), c.name)
            row.add("MLP, black box", loss, 100 * p.mean("recovery_mlp"), c.name)
            row.add("autoencoder + NN, black box", loss, 100 * p.mean("recovery_autoencoder"), c.name)
    for c in attributes:
        if _pri_ddx(c) and attribute_release(c) == "tokens":
            label = token_noise_label(c.cell.get("mechanism") or {})
            _add_attributes(rows.setdefault(label, MatrixRow(label, "token")), c, "token_epsilon")
    return list(rows.values())


def _pooled_row(
    inversion: list[PayloadCell], attributes: list[PayloadCell], *, padded: bool = False
) -> MatrixRow | None:
    """PPFT's pooled slots (the count released), or with ``padded`` slots from a client that pads every payload to a
    fixed count (attribute cells with ``pad_to``; inversion results with ``padded_slots``): another mechanism."""
    row = MatrixRow("pooled slots padded to a fixed count (k = 4)" if padded else "pooled PPFT slots (k = 4)", "pooled")
    for c in inversion:
        params = c.cell.get("params") or {}
        if params.get("k", 4) != 4 or not _pri_ddx(c):
            continue  # the matrix compares mechanisms on Pri-DDX prompts
        variant = params.get("variant")
        column = (
            "restoration instruction"
            if variant == "restoration"
            else "slot-token classifier"
            if params.get("inverter") == "slot_tokens"
            else "learned inverter, stage-1-aligned"
            if isinstance(params.get("init"), str)
            else f"learned inverter, {variant}"
        )
        for point, p in c.points:
            eps = point.get("params.epsilon", params.get("epsilon"))
            if eps is None or _padded(p) != padded or centred(p):
                continue  # clean payloads: no mechanism; or the other row's; a centring client is not PPFT's
            row.add(column, p.mean("slot_epsilon"), 100 * p.mean("rouge_l"), c.name)
    _add_slot_attributes(row, attributes, padded=padded)
    return row if row.points else None


def _padded(p) -> bool:
    """An inversion result on payloads padded to a fixed slot count (results before ``padded_slots`` existed: no)."""
    return p.spread("padded_slots") is not None


def _add_slot_attributes(row: MatrixRow, attributes: list[PayloadCell], *, padded: bool) -> None:
    for c in attributes:
        params = c.cell.get("params") or {}
        if attribute_release(c) != "slots" or bool(params.get("pad_to")) != padded:
            continue
        for point, p in c.points:
            k = point.get("params.k", params.get("k", 4))
            repeated = point.get("params.repeat_mean", params.get("repeat_mean"))
            if (
                k == 4 and not point.get("params.center", params.get("center")) and not repeated
            ):  # a centring or repeating client is not PPFT's
                row.add("attributes: sex (best)", p.mean("slot_epsilon"), 100 * p.mean("sex_accuracy_best"), c.name)


def _text_rows(cells: list[PayloadCell], attributes: list[PayloadCell]) -> list[MatrixRow]:
    rows: dict[str, MatrixRow] = {}
    for c in attributes:
        if _pri_ddx(c) and attribute_release(c) in ("t2t", "pct2t"):
            label = "PCT2T text" if attribute_release(c) == "pct2t" else "T2T text"
            _add_attributes(rows.setdefault(label, MatrixRow(label, "text")), c, "word_epsilon")
    for c in cells:
        label = "PCT2T text" if (c.cell.get("params") or {}).get("pos") else "T2T text"
        row = rows.setdefault(label, MatrixRow(label, "text"))
        for _, p in c.points:
            loss = p.mean("word_epsilon")
            row.add("read the text", loss, 100 * p.mean("word_recovery_identity"), c.name)
            row.add("channel inverter", loss, 100 * p.mean("word_recovery_channel"), c.name)
            row.add("learned inverter, aware", loss, 100 * p.mean("rouge_l_learned"), c.name)
    return [rows[k] for k in sorted(rows, reverse=True)]


def collect_matrix(paths: Iterable[str | Path]) -> list[MatrixRow]:
    paths = list(paths)
    attributes = [
        c
        for c in collect_kind(paths, "attribute_inference")
        if (c.cell.get("params") or {}).get("target", "attributes") != "answer"
    ]
    rows = _token_rows(collect_kind(paths, "token_inversion"), attributes)
    inversion = collect_kind(paths, "learned_inversion")
    rows += [r for r in (_pooled_row(inversion, attributes), _pooled_row(inversion, attributes, padded=True)) if r]
    return rows + _text_rows(collect_kind(paths, "substitution_inversion"), attributes)


def _cell_text(row: MatrixRow, column: str, unit: str) -> str:
    pts = row.points.get(column)
    if not pts:
        return f"n/a ({_NA[row.family][column]})" if column in _NA[row.family] else "not measured"
    values = [v for _, v, _ in pts]
    losses = [x for x, _, _ in pts]
    fmt = (lambda v: f"{v:.1f}%") if unit == "%" else (lambda v: f"{v / 100:.3f}")
    lo, hi = min(values), max(values)
    span = fmt(lo) if lo == hi else f"{fmt(lo)}–{fmt(hi)}"
    eps = f"{min(losses):.3g}" if min(losses) == max(losses) else f"{min(losses):.3g}–{max(losses):.3g}"
    return f"{span} (unit eps {eps})"


def matrix_section(rows: list[MatrixRow], figure: str | None = None) -> list[str]:
    lines = [
        "",
        "## Cross matrix: every applicable attack against every mechanism",
        "",
        "Each cell: the range of the attack's result over the mechanism's grid (tokens/words recovered at their",
        "position in %, ROUGE-L of generated reconstructions, sex accuracy of the best attribute attacker), with",
        "the range of the formal worst-case loss of one released unit (*unit eps*: one token at the table's",
        "diameter, one unit slot, one word at the table's diameter); a prompt composes this over its units.",
        "Where several cells measure an attack at the same point, the strongest result is kept.",
        "Per-point figures are in the sections above; the plot puts every attack on the unit-eps axis.",
        "",
    ]
    if not rows:
        return lines + ["No result files for the cross matrix were given."]
    lines += ["| attack \\ mechanism | " + " | ".join(r.mechanism for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for column, unit in COLUMNS:
        lines.append(f"| {column} ({unit}) | " + " | ".join(_cell_text(r, column, unit) for r in rows) + " |")
    if figure:
        lines += ["", f"![cross matrix]({figure})"]
    return lines


#: The panels of the cross-matrix plot: one per family of mechanisms, in this order.
_PANELS = (("token", "per-token noise"), ("pooled", "pooled slots"), ("text", "privatized text"))
_STYLES = ("-", "--", ":", "-.")


def _short(mechanism: str) -> str:
    """A mechanism's label inside its family's panel (the family is the panel's title)."""
    for prefix in ("token noise, ", "pooled "):
        if mechanism.startswith(prefix):
            return mechanism[len(prefix) :]
    return mechanism.replace("clipped token noise ", "clipped ")


def matrix_figure(rows: list[MatrixRow], path: Path) -> bool:
    """Recovery (%) and ROUGE-L (x100) vs unit eps (log): one panel per family of mechanisms (per-token noise, pooled
    slots, text), one colour per attack and one line style per mechanism of the panel (one legend below, in
    columns: the mechanisms first, then the attacks); False when empty."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D
    from matplotlib.ticker import NullFormatter

    panels = [(family, title) for family, title in _PANELS if any(r.family == family for r in rows)]
    if not panels:
        return False
    fig = Figure(figsize=(3.9 * len(panels), 4.4), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colours = {
        column: f"C{i % 10}" if i < 10 else ("black", "navy", "magenta")[i - 10]
        for i, (column, _) in enumerate(COLUMNS)
    }
    markers = dict(zip((c for c, _ in COLUMNS), "osD^v<>px*hH+"))
    used: dict[str, str] = {}
    styles = []
    for ax, (family, title) in zip(axes, panels):
        for style, row in zip(_STYLES * 3, [r for r in rows if r.family == family]):
            for column, unit in COLUMNS:
                pts = sorted((x, v) for x, v, _ in row.points.get(column, []) if x > 0 and math.isfinite(x))
                if pts:
                    ax.plot(
                        [x for x, _ in pts],
                        [v for _, v in pts],
                        linestyle=style,
                        color=colours[column],
                        marker=markers[column],
                        markersize=4,
                        linewidth=1.2,
                    )
                    used[column] = unit
            styles.append(Line2D([], [], color="dimgrey", linestyle=style, label=f"{title}: {_short(row.mechanism)}"))
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set(title=title, xlabel="formal loss of one released unit (eps)", ylim=(-2, 102))
    axes[0].set_ylabel("recovered (%) / ROUGE-L x100")
    handles = [
        Line2D(
            [],
            [],
            color=colours[c],
            marker=markers[c],
            markersize=4,
            label=c + (" (ROUGE-L x100)" if u == "ROUGE-L" else ""),
        )
        for c, u in COLUMNS
        if c in used
    ]
    fig.legend(
        handles=styles + handles,
        loc="outside lower center",
        ncols=4,
        fontsize=7,
        frameon=False,
        title="line style: the mechanism in its panel; colour: the attack",
        title_fontsize=8,
    )
    atomic_save_figure(fig, path, dpi=110)
    return True
