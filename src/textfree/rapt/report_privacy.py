"""The Fig. 4 section of docs/results/rapt.md: empirical privacy (1 - X, RAPT section IV-A) per attack on the T2T and
PCT2T releases, per eta, in one table and one figure.

Read from the attack cells' result files (``results/attacks``), through the attacks report's readers
(:func:`~textfree.attacks.report_payloads.collect_kind`: the newest file of each cell;
:func:`~textfree.attacks.report_payloads.attribute_release`), nothing recomputed:

* ``substitution_inversion`` (word-level inversion of the released text): X = the share of the original words
  recovered at their position by the best of the inverters the cell ran; reading the text and the channel inverter
  (run at every eta) make one row, the learned decoder (where a cell ran it) another, so the learned row's etas are
  only those it was run at; where a cell ran the black-box readers (``blackbox: true``), the MLP and the autoencoder
  make a row each (X: their word recovery; the autoencoder's MSE figures go into its row's description);
* ``ner_attack``: X = entity F1 of the tagger (the NER section's figure);
* ``attribute_inference`` with ``release: t2t`` / ``pct2t`` (not ``target: answer``): X = the best attacker's
  symptoms recall, and its sex accuracy (the files' ``*_best``: the attacker chosen on the attacker's own validation
  part; older files, the strongest on the held-out prompts).

A release is T2T (``pos`` null) or PCT2T over the default categories; other category sets are Fig. 6's question
(:mod:`.report_pos`) and stay out. When several cells measure one point (the same attack, release, texts and eta), the
strongest attack (the largest X) is kept. References, where the files hold them: *no privatization* (X on the clear
text: Fig. 4's dashed line; every word for the word readers, the tagger's clean-text F1, the attribute attackers'
clean-text reader) and *no input* (X of the best guess without the release: the medoid text, the training marginals).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..atomic import atomic_save_figure
from .report_pos import pos_key

__all__ = ["PRIVACY_KINDS", "ATTACKS", "PrivacyRow", "collect_privacy", "privacy_section", "privacy_figure"]

#: The cell kinds the section reads.
PRIVACY_KINDS = ("substitution_inversion", "ner_attack", "attribute_inference")
#: (key, row title, what X is), in table order.
ATTACKS = (
    (
        "words",
        "word inversion: read / channel",
        "the share of the original words recovered at their position by the better of reading the released text "
        "and the channel inverter (each released word mapped to the input word that most often produced it in the "
        "attacker's own runs of the mechanism on in-domain text); reading the text is RAPT's white-box nearest-"
        "neighbour attack on a text release (T2T already outputs the word nearest the noisy vector)",
    ),
    (
        "words_learned",
        "word inversion: + learned decoder",
        "the same share for the best of reading, the channel inverter and a decoder fine-tuned to rewrite the "
        "mechanism's outputs into their inputs (noise-aware; only the etas it was run at)",
    ),
    (
        "words_mlp",
        "word inversion: MLP (black box)",
        "the share of the original words recovered by an MLP from each released word's vector in the public table to "
        "an original word, trained on the attacker's own runs of the mechanism over in-domain text (RAPT IV-A1's MLP "
        "attack on a text release; a released word outside the table is read as it is)",
    ),
    (
        "words_autoencoder",
        "word inversion: autoencoder (black box)",
        "the same share for a denoising autoencoder of each released word's vector, trained by mean squared error "
        "towards the original word's vector on the same runs and mapped to the nearest table word (RAPT IV-A1's "
        "autoencoder attack)",
    ),
    ("ner", "NER", "entity F1 of a token classifier trained on clean annotated text"),
    (
        "symptoms",
        "attribute inference: symptoms",
        "symptoms recall of the best attacker (chosen on the attacker's validation part)",
    ),
    ("sex", "attribute inference: sex", "sex accuracy of the best attacker (chosen on the attacker's validation part)"),
)
_TITLES = {key: title for key, title, _ in ATTACKS}
_ORDER = {key: i for i, (key, _, _) in enumerate(ATTACKS)}
_RELEASES = {"t2t": "T2T", "pct2t": "PCT2T"}
#: The word-inversion rows' labels in the figure's shared panel, and their line styles.
_SHORT = {
    "words": "read / channel",
    "words_learned": "+ learned",
    "words_mlp": "MLP",
    "words_autoencoder": "autoencoder",
}
_STYLES = {"words": ("-", "o"), "words_learned": (":", "^"), "words_mlp": ("--", "s"), "words_autoencoder": ("-.", "d")}
#: The figure's panels: (title, the attacks drawn in it).
_PANELS = (
    ("word inversion (Pri-DDX)", ("words", "words_learned", "words_mlp", "words_autoencoder")),
    ("NER", ("ner",)),
    ("attribute inference: symptoms recall", ("symptoms",)),
    ("attribute inference: sex accuracy", ("sex",)),
)


def _nan(value: Any) -> float:
    return math.nan if value is None else float(value)


@dataclass
class PrivacyRow:
    """One attack on one release of one dataset: X (the attack's success) per eta and its references."""

    attack: str  # a key of ATTACKS
    release: str  # t2t | pct2t
    dataset: str
    points: dict[float, tuple[float, str]] = field(default_factory=dict)  # eta -> (X, cell)
    clean: float = math.nan  # X on the clear text (no privatization)
    prior: float = math.nan  # X without the release (no input)
    label: float = math.nan  # X from the task's correct answer alone (attribute inference on Pri-DDX: the diagnosis)
    texts: float = math.nan  # evaluated texts
    kept: list[float] = field(default_factory=list)  # share of words released verbatim, per point
    mse: dict[float, tuple[float, float]] = field(default_factory=dict)  # autoencoder: eta -> (its MSE, released MSE)

    def add(self, eta: float, x: float, cell: str) -> None:
        if not math.isnan(x) and (eta not in self.points or x > self.points[eta][0]):
            self.points[eta] = (x, cell)

    def privacy(self, eta: float) -> float:
        """Empirical privacy 1 - X at ``eta`` (NaN where not measured)."""
        return 1.0 - self.points[eta][0] if eta in self.points else math.nan

    @property
    def etas(self) -> list[float]:
        return sorted(self.points)

    @property
    def title(self) -> str:
        return _TITLES[self.attack]


def _release(pos: Any) -> str | None:
    key = pos_key(pos)
    return "t2t" if key is None else "pct2t" if key == "default" else None


def _point_param(cell: Any, point: dict, name: str) -> Any:
    return point.get(f"params.{name}", (cell.cell.get("params") or {}).get(name))


def _other_client(c: Any, point: dict) -> bool:
    """A release over another table than the encoder's, or with out-of-table words folded (PPFT's d_chi baseline
    client, GloVe): not RAPT's T2T / PCT2T on MiniLM's table, so not in this figure."""
    return bool(_point_param(c, point, "table") or _point_param(c, point, "oov_word"))


def collect_privacy(files: Sequence[str | Path]) -> tuple[list[PrivacyRow], list[tuple[str, str, str, str]]]:
    """The rows from the result ``files`` of :data:`PRIVACY_KINDS` (other kinds are skipped), in table order, and the
    files they read: (file, cell, kind, date)."""
    from ..attacks.report_payloads import attribute_release, collect_kind

    rows: dict[tuple[str, str, str], PrivacyRow] = {}
    used: dict[str, tuple[str, str, str, str]] = {}

    def row(attack: str, release: str, c: Any) -> PrivacyRow:
        dataset = str(c.cell.get("dataset") or "?")
        used[c.source] = (c.source, c.name, c.cell.get("kind", ""), c.date)
        return rows.setdefault((attack, release, dataset), PrivacyRow(attack, release, dataset))

    files = [str(f) for f in files]
    for c in collect_kind(files, "substitution_inversion"):
        for point, p in c.points:
            release = _release(_point_param(c, point, "pos"))
            if release is None or _other_client(c, point):
                continue
            eta = float(_point_param(c, point, "eta"))
            readers = [p.mean(f"word_recovery_{a}") for a in ("identity", "channel")]
            learned = p.mean("word_recovery_learned")
            for attack, values in (("words", readers), ("words_learned", readers + [learned])):
                values = [v for v in values if not math.isnan(v)]
                if not values or (attack == "words_learned" and math.isnan(learned)):
                    continue
                r = row(attack, release, c)
                r.add(eta, max(values), c.name)
                r.clean = 1.0  # the clear text is the original: reading it recovers every word
                r.prior = _first(r.prior, p.mean("word_recovery_prior"))
                r.texts = _first(r.texts, p.mean("n_texts"))
                if not math.isnan(p.mean("kept_rate")):
                    r.kept.append(p.mean("kept_rate"))
            _blackbox_rows(row, c, p, release, eta)
    for c in collect_kind(files, "ner_attack"):
        for point, p in c.points:
            release = _release(_point_param(c, point, "pos"))
            if release is None or _other_client(c, point):
                continue
            r = row("ner", release, c)
            r.add(float(_point_param(c, point, "eta")), p.mean("entity_f1"), c.name)
            r.clean = _first(r.clean, p.mean("clean_entity_f1"))
            r.texts = _first(r.texts, p.mean("n_texts"))
    for c in collect_kind(files, "attribute_inference"):
        params = c.cell.get("params") or {}
        if attribute_release(c) not in _RELEASES or params.get("target", "attributes") == "answer":
            continue
        for point, p in c.points:
            release = attribute_release(c)
            if release == "pct2t" and _release(_point_param(c, point, "pos") or "default") != "pct2t":
                continue  # PCT2T over another category set than the default one
            if _other_client(c, point):
                continue
            eta = float(_point_param(c, point, "eta"))
            for attack, metric in (("symptoms", "symptoms_recall"), ("sex", "sex_accuracy")):
                if math.isnan(p.mean(f"{metric}_best")):
                    continue
                r = row(attack, release, c)
                r.add(eta, p.mean(f"{metric}_best"), c.name)
                r.prior = _first(r.prior, p.mean(f"{metric}_prior"))
                r.label = _first(r.label, p.mean(f"{metric}_label"))
                r.clean = _first(r.clean, p.mean(f"{metric}_clean"))
                r.texts = _first(r.texts, p.mean("n_test"))
    ordered = sorted(rows.values(), key=lambda r: (_ORDER[r.attack], r.dataset, r.release != "t2t"))
    return [r for r in ordered if r.points], sorted(used.values())


def _blackbox_rows(row: Any, c: Any, p: Any, release: str, eta: float) -> None:
    """The black-box readers' rows from one point of a ``substitution_inversion`` file (where it ran them)."""
    for attack, reader in (("words_mlp", "mlp"), ("words_autoencoder", "autoencoder")):
        x = p.mean(f"word_recovery_{reader}")
        if math.isnan(x):
            continue
        r = row(attack, release, c)
        r.add(eta, x, c.name)
        if attack == "words_autoencoder" and r.points[eta] == (x, c.name):
            r.mse[eta] = (p.mean("mse_autoencoder"), p.mean("mse_released"))
        r.clean = 1.0
        r.prior = _first(r.prior, p.mean("word_recovery_prior"))
        r.texts = _first(r.texts, p.mean("n_texts"))


def _mse_note(rows: Sequence[PrivacyRow]) -> str:
    """The autoencoder's MSE against the original words' vectors beside the raw released vectors', per release and
    eta (empty without MSE figures)."""
    parts = [
        f"{_RELEASES[r.release]} "
        + ", ".join(f"eta {e:g} {m:.3g} ({raw:.3g})" for e, (m, raw) in sorted(r.mse.items()))
        for r in rows
        if r.attack == "words_autoencoder" and r.mse
    ]
    if not parts:
        return ""
    return (
        "; its mean squared error per coordinate against the original words' vectors (the raw released vectors' in "
        "brackets, over the words of both in the table): " + "; ".join(parts)
    )


def _first(old: float, new: float) -> float:
    return new if math.isnan(old) else old


# ----------------------------------------------------------------------------------------------------- markdown
def _pct(value: float) -> str:
    return "—" if math.isnan(value) else f"{100 * value:.1f}"


def _dataset(name: str) -> str:
    return {"pri-ddx": "Pri-DDX", "presidio": "presidio-synth"}.get(name.lower(), name)


def _trend(row: PrivacyRow) -> str:
    """``81.7 at eta 25 to 0.2 at eta 150`` and whether it falls at every step."""
    etas = row.etas
    values = [row.privacy(e) for e in etas]
    falls = all(b <= a + 1e-12 for a, b in zip(values, values[1:]))
    span = f"{_pct(values[0])} at eta {etas[0]:g} to {_pct(values[-1])} at eta {etas[-1]:g}"
    return span + ("" if len(etas) < 3 else ", falling at every step" if falls else ", not falling at every step")


def _below_guess(row: PrivacyRow) -> str:
    """Where the attack does worse than the guess without the release (its privacy above the no-input column)."""
    if math.isnan(row.prior):
        return ""
    above = [e for e in row.etas if row.privacy(e) > 1 - row.prior]
    if not above:
        return ""
    return (
        f" (above its no-input reference at eta {', '.join(f'{e:g}' for e in above)}: there the guess without the "
        "release recovers more)"
    )


def _gap(t2t: PrivacyRow, pct2t: PrivacyRow) -> str | None:
    """T2T minus PCT2T privacy over the etas both measure, in points (None without a shared eta)."""
    shared = sorted(set(t2t.points) & set(pct2t.points))
    if not shared:
        return None
    gaps = [100 * (t2t.privacy(e) - pct2t.privacy(e)) for e in shared]
    lo, hi = min(gaps), max(gaps)
    where = f"{lo:+.1f}" if len(gaps) == 1 else f"{lo:+.1f} to {hi:+.1f}"
    return f"T2T minus PCT2T {where} points at eta {', '.join(f'{e:g}' for e in shared)}"


def privacy_section(rows: Sequence[PrivacyRow], figure: str | None = None) -> list[str]:
    lines = ["## Empirical privacy per attack (Fig. 4 shape)", ""]
    if not rows:
        return lines + [
            "No `substitution_inversion`, `ner_attack` or T2T / PCT2T `attribute_inference` result files given",
            "(`examples/cells/attacks/`).",
        ]
    etas = sorted({e for r in rows for e in r.points})
    lines += [
        "Empirical privacy 1 - X in % (RAPT section IV-A: X is the attack's success) per attack on the released",
        "text, T2T (every word) and PCT2T (the default categories NOUN, VERB, PRON, ADP), per eta on MiniLM's table",
        "(the match to the paper's etas is in the Table III section). RAPT's client releases the PCT2T text of the",
        "example (the plain tokens are public and sent as their own words), so every attack on the released text",
        "sees the same distribution and RAPT's empirical privacy equals PCT2T's row of this table and of the NER",
        "table above by construction. *no privatization*: the same attack on the clear text (Fig. 4's dashed",
        "line; — where not measured); *no input*: the best guess without the release (the attacker's medoid text,",
        "the training marginals; — where none applies). Each value is the mean over the cell's noise seeds (the",
        "spread is in docs/results/attacks.md); where several cells measure a point the strongest attack is kept.",
        "",
    ]
    head = ["attack", "release", "texts (n)"] + [f"eta {e:g}" for e in etas] + ["no privatization", "no input"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        texts = f"{_dataset(r.dataset)}, {r.texts:.0f}" if not math.isnan(r.texts) else _dataset(r.dataset)
        cells = [_pct(r.privacy(e)) for e in etas]
        lines.append(
            f"| {r.title} | {_RELEASES[r.release]} | {texts} | "
            + " | ".join(cells)
            + f" | {_pct(1 - r.clean)} | {_pct(1 - r.prior)} |"
        )
    present = {r.attack for r in rows}
    lines += ["", "X per row:", ""]
    lines += [
        f"* *{title}*: X = {what}{_mse_note(rows) if key == 'words_autoencoder' else ''}."
        for key, title, what in ATTACKS
        if key in present
    ]
    missing = [
        f"{_TITLES[a]} on {_RELEASES[rel]}"
        for a in _TITLES
        if a in present
        for rel in _RELEASES
        if not any(r.attack == a and r.release == rel for r in rows)
    ]
    if missing:
        lines += [f"* Not run: {'; '.join(missing)}."]
    labels = {r.title: r.label for r in rows if not math.isnan(r.label)}
    if labels:
        lines += [
            "* Another reference for the attribute rows: the privacy left by the task's correct answer alone (the "
            "diagnosis, which the server is meant to learn), "
            + ", ".join(f"{title} {_pct(1 - value)}" for title, value in labels.items())
            + " (the attacks report's *label* column)."
        ]
    lines += ["", "Ours, per attack (privacy from the smallest eta to the largest):", ""]
    for key, title, _ in ATTACKS:
        mine = [r for r in rows if r.attack == key]
        if not mine:
            continue
        parts = [f"{_RELEASES[r.release]} {_trend(r)}{_below_guess(r)}" for r in mine]
        for dataset in sorted({r.dataset for r in mine}):
            pair = {r.release: r for r in mine if r.dataset == dataset}
            gap = _gap(pair["t2t"], pair["pct2t"]) if len(pair) == 2 else None
            if gap:
                parts.append(gap)
        lines.append(f"* {title}: " + "; ".join(parts) + ".")
    kept = {(r.release, r.dataset): sum(r.kept) / len(r.kept) for r in rows if r.attack == "words" and r.kept}
    lines += [
        "",
        "The paper's Fig. 4 (BERT-base and Qwen2.5-3B on TP-UK; the attacks of its section IV-A: white-box nearest",
        "neighbour, MLP and autoencoder inversion, attribute inference, NER; its values are not in its text) reads:",
        "without privatization privacy is low; with T2T or PCT2T it rises substantially as eta falls; T2T and PCT2T",
        "are comparable at every eta (the POS constraint weakens privacy at most slightly); the reconstruction",
        "objective does not lower it (here: equal by construction, above).",
        _verdict(rows, kept),
    ]
    if figure:
        lines += ["", f"![empirical privacy per attack]({figure})"]
    return lines


#: T2T and PCT2T count as comparable at an eta when their privacy differs by at most this many points.
COMPARABLE_POINTS = 5.0


def _verdict(rows: Sequence[PrivacyRow], kept: dict[tuple[str, str], float]) -> str:
    """Ours against the paper's two readings, from the numbers: does privacy fall as eta grows in every row (with
    three etas or more), and is PCT2T within :data:`COMPARABLE_POINTS` of T2T at every shared eta, per attack."""
    rising = [r for r in rows if len(r.points) >= 3]
    broken = [f"{r.title} ({_RELEASES[r.release]})" for r in rising if "not falling" in _trend(r)]
    out = (
        "Ours: privacy falls as eta grows in every row with three etas or more"
        if not broken
        else f"Ours: privacy does not fall at every step as eta grows in {', '.join(broken)}"
    )
    worst: dict[str, tuple[float, float]] = {}
    for r in rows:
        other = next((o for o in rows if (o.attack, o.dataset, o.release) == (r.attack, r.dataset, "pct2t")), None)
        if r.release != "t2t" or other is None:
            continue
        for e in sorted(set(r.points) & set(other.points)):
            gap = 100 * (r.privacy(e) - other.privacy(e))
            if r.title not in worst or abs(gap) > abs(worst[r.title][0]):
                worst[r.title] = (gap, e)
    if worst:
        close = [t for t, (g, _) in worst.items() if abs(g) <= COMPARABLE_POINTS + 1e-9]
        far = [f"{t} ({g:+.1f} at eta {e:g})" for t, (g, e) in worst.items() if abs(g) > COMPARABLE_POINTS + 1e-9]
        if close:
            out += f"; PCT2T is within {COMPARABLE_POINTS:g} points of T2T at every shared eta for {', '.join(close)}"
        if far:
            out += (
                f"; {'for every attack ' if not close else ''}PCT2T and T2T differ by more than "
                f"{COMPARABLE_POINTS:g} points at some eta (largest T2T minus PCT2T): {', '.join(far)}"
            )
    out += "."
    for dataset in sorted({d for _, d in kept}):
        if ("t2t", dataset) in kept and ("pct2t", dataset) in kept:
            out += (
                f" On {_dataset(dataset)} the default PCT2T categories release {100 * kept['pct2t', dataset]:.1f}% of "
                f"the words verbatim (the words outside the categories or the table) against "
                f"{100 * kept['t2t', dataset]:.1f}% for T2T (as the word readers' files record)."
            )
    if any(r.dataset.lower() == "pri-ddx" and r.release == "pct2t" for r in rows):
        out += (
            " The paper's section IV-B asks for every category on clinical text; the Pri-DDX PCT2T cells here use the "
            "default set."
        )
    return out


# ------------------------------------------------------------------------------------------------------- figure
def privacy_figure(rows: Sequence[PrivacyRow], path: Path) -> bool:
    """Empirical privacy (%) vs eta, one panel per attack (word inversion's two rows share one), T2T and PCT2T
    (= RAPT's release) in two colours, the references as grey lines; False when there is nothing to draw."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    panels = [(title, keys) for title, keys in _PANELS if any(r.attack in keys for r in rows)]
    if not panels:
        return False
    cols = min(2, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig = Figure(figsize=(4.8 * cols, 3.3 * nrows + 0.6), layout="constrained")
    axes = fig.subplots(nrows, cols, squeeze=False).flatten()
    for ax in axes[len(panels) :]:
        ax.set_visible(False)
    colours = {"t2t": "C0", "pct2t": "C1"}
    for ax, (title, keys) in zip(axes, panels):
        mine = [r for r in rows if r.attack in keys]
        drawn: set[tuple[str, float]] = set()
        for r in mine:
            style, marker = _STYLES.get(r.attack, ("-", "o"))
            label = _RELEASES[r.release] + (" (= RAPT)" if r.release == "pct2t" else "")
            if len(keys) > 1:
                label += ", " + _SHORT[r.attack]
            ax.plot(
                r.etas,
                [100 * r.privacy(e) for e in r.etas],
                linestyle=style,
                marker=marker,
                markersize=4,
                color=colours[r.release],
                label=label,
            )
            for kind, value, line in (("clean", r.clean, "--"), ("prior", r.prior, "-.")):
                ref = round(100 * (1 - value), 6)
                if math.isnan(value) or (kind, ref) in drawn:
                    continue
                drawn.add((kind, ref))
                ax.axhline(ref, color="grey", linewidth=1, linestyle=line)
        handles, labels = ax.get_legend_handles_labels()
        if any(k == "clean" for k, _ in drawn):
            handles.append(Line2D([], [], color="grey", linestyle="--"))
            labels.append("no privatization")
        if any(k == "prior" for k, _ in drawn):
            handles.append(Line2D([], [], color="grey", linestyle="-."))
            labels.append("no input")
        ax.legend(handles, labels, fontsize=7, loc="best")
        datasets = sorted({_dataset(r.dataset) for r in mine})
        ax.set_title(f"{title} ({', '.join(datasets)})" if len(keys) == 1 else title, fontsize=9)
        ticks = sorted({e for r in mine for e in r.points})
        ax.set_xticks(ticks, [f"{e:g}" for e in ticks], fontsize=8)
        ax.set(ylim=(-3, 103), xlabel="eta (MiniLM table)", ylabel="empirical privacy 1 - X (%)")
        ax.grid(alpha=0.3)
    atomic_save_figure(fig, path, dpi=110)
    return True
