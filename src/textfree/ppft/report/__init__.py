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
* ``rapt_qa`` (a decoder fine-tuned on text its client sent; not a ``ppft_*`` kind) -> only the baselines table
  (:mod:`.baselines`): the word-level d_chi baseline (``pos`` null, ``oov_word`` set), and the clear-text run on the
  same decoder as its upper bound (results/rapt holds it: pass that folder too, ``textfree ppft report results/ppft
  results/rapt``; without it the row says so).

When several files hold the same point, the newest file wins. A beyond-the-paper section shows PPFT's layout at
the stage-2 lengths its variants were trained for (the newest PPFT run only when none of those lengths was run).

The parts: :mod:`.entries` (reading and matching points), :mod:`.layouts` (the beyond-the-paper sections),
:mod:`.verdicts` (the targets), :mod:`.tables`, :mod:`.selection` (model selection on validation), :mod:`.timing`
(the pipeline time), :mod:`.figures`, :mod:`.baselines` (Table 1's baselines).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Sequence

from ...atomic import atomic_write_text
from .baselines import baseline_sources, table_baselines
from .entries import (
    GDP_MATCHED,
    PAPER_ENCODER_DIM,
    PAPER_EPSILON,
    PAPER_TABLE1,
    WIDTH_MATCHED,
    Entry,
    _build,
    collect,
)
from .figures import _figure_k, _figure_mu
from .layouts import _LAYOUT_SECTIONS
from .selection import (
    _SELECTION_INTRO,
    selected_recipe,
    split_selection,
    table_selection,
)
from .tables import (
    _MU_INTRO,
    _NOISE_INTRO,
    Table1Row,
    _table1,
    _table_epochs,
    _table_general,
    _table_k,
    _table_layouts,
    _table_mu,
    _table_noise,
    _table_train_seeds,
    table1_rows,
)
from .timing import _table_time

__all__ = [
    "PAPER_TABLE1",
    "WIDTH_MATCHED",
    "GDP_MATCHED",
    "PAPER_EPSILON",
    "Entry",
    "collect",
    "table1_summary",
    "build_report",
    "write_report",
]

_EPOCHS_INTRO = [
    "Table 1 shows the newest run of each row (PPFT's eps-28 row: at the length selected on validation,",
    "where lengths were compared there; the upper bound: at the PPFT row's length where it was run); the",
    "verdicts use those. Runs with another number of stage-2 epochs stay listed here.",
]
_SEEDS_INTRO = [
    "Every other table shows training seed 0, and its ± is over evaluation noise seeds of that one training.",
    "Here the same row is trained again with another training seed (initialisation of the new weights, dropout,",
    "data order, training noise).",
]

#: The datasets of Table 1's shape, in report order: (dataset name as cells spell it, lower-case; title).
TABLE1_DATASETS = (("pri-ddx", "Pri-DDX"), ("pri-slja", "Pri-SLJA"))

#: How docs/results/ppft.md is generated: the command a report names unless it was written from other paths.
DEFAULT_COMMAND = "textfree ppft report results/ppft results/rapt results/attacks --out docs/results/ppft.md"


def build_report(paths: Iterable[str | Path], *, figures: Sequence[str] = (), command: str = DEFAULT_COMMAND) -> str:
    """Markdown for docs/results/ppft.md from the ppft_* result files in ``paths``; ``command``: the one that
    generates it, named in its header."""
    paths = list(paths)
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
        "gsm8k; stage 2 on the training part of each Pri-* split (epochs per dataset below), trained on both prompt "
        "formats (4-option",
        "and open-answer) of the same training rows; evaluation on the held-out part. Accuracies are `mean ± sd (n)`",
        "over evaluation noise seeds (one trained model per row; clean and blind rows are deterministic).",
        "",
        f"**Which epsilon is which.** The paper's eps = {PAPER_EPSILON:g} is for ModernBERT-large (d = "
        f"{PAPER_ENCODER_DIM}): expected",
        f"noise norm d/eps = {PAPER_ENCODER_DIM / PAPER_EPSILON:.1f} against unit-norm slots. MiniLM at eps 75 gets "
        "only",
        f"{384 / PAPER_EPSILON:.1f}; the width-matched eps = 75 * 384/1024 = 28.1 (run as {WIDTH_MATCHED:g}) gives "
        "13.7, the paper's noise",
        "level. Every table shows both, labelled.",
        "",
        "Scoring: 4-option = the normalised gold option text is contained in the answer (PPFT Appendix D.1);",
        "open-answer = no options shown, and the first task label (any option of any record) the answer names must be",
        'the gold one. "No name" columns are on the held-out records whose private text does not contain the answer',
        "string. *Ranked* (not the paper's metric) = the same 4-option prompts, answered by the option the model is "
        "most",
        "likely to generate in full (lm-evaluation-harness style likelihood scoring) instead of free generation: it",
        'separates "cannot follow the answer format" (a free answer naming no option scores 0) from "does not know".',
        "*Label-ranked* open-answer (not the paper's metric either) = the open-answer prompts (no options shown), "
        "answered by",
        "the label of the whole task (every option of every record: 49 diagnoses, 42 charges) the model is most likely "
        "to",
        "generate in full: decoding constrained to the task's public label set.",
    ]
    for ds, title in TABLE1_DATASETS:
        if not any(e.dataset.lower() == ds for e in entries):
            continue
        chosen_on = frozenset(b for e in selection if e.dataset.lower() == ds and (b := _build(e)))
        lines += ["", f"## {title}: Table 1 shape (held-out split)", ""] + _table1(
            entries, ds, selected_recipe(selection, ds), chosen_on
        )
        baselines = table_baselines(paths, everything, ds)
        if baselines:
            lines += ["", f"### {title}: Baselines (Table 1)", ""] + baselines
        sections = [
            ("every stage-2 length run for these rows", _EPOCHS_INTRO, _table_epochs(entries, ds)),
            ("training seeds (the spread over trainings)", _SEEDS_INTRO, _table_train_seeds(entries, ds)),
            ("pooling k (Table 5 shape)", [], _table_k(entries, ds)),
            *(
                (f"{heading} (beyond the paper)", intro, _table_layouts(entries, ds, key, name))
                for key, name, heading, intro in _LAYOUT_SECTIONS
            ),
            (
                "model selection on a validation part of the training rows",
                _SELECTION_INTRO,
                table_selection(selection, entries, ds),
            ),
            ("the paper's privacy level at MiniLM's width (beyond the issue)", _MU_INTRO, _table_mu(entries, ds)),
            ("noise type", _NOISE_INTRO, _table_noise(entries, ds)),
        ]
        for heading, intro, rows in sections:
            if rows:
                lines += ["", f"### {title}: {heading}", ""] + intro + ([""] if intro else []) + rows
    general = _table_general(entries)
    if general:
        lines += ["", "## General-domain MCQA after domain adaptation (Table 4 shape)", ""] + general
    timing = _table_time(entries)
    if timing:
        lines += ["", "## Default pipeline time (2 CPU cores)", ""] + timing
    if figures:
        lines += ["", "## Figures", ""] + [f"![{Path(f).stem}]({f})" for f in figures]
    lines += [
        "",
        "## Result files",
        "",
        '"Stage-1 build": the fingerprint of the stage-1 run the file\'s models descend from (weights and configs;',
        "`runs/stage1` rebuilt is another build at the same path), recorded since 2026-11-25. A verdict whose",
        "upper bound comes from another recorded build says so.",
        "",
        "| file | date | git commit | stage-1 build |",
        "|---|---|---|---|",
    ]
    lines += [f"| `{s}` | {d} | {(g or 'unknown')[:10]} | {', '.join(sorted(builds[s]))} |" for s, d, g in sources]
    text_files = [s for ds, _ in TABLE1_DATASETS for s in baseline_sources(paths, ds)]
    if text_files:
        lines += ["", "Text baselines (`rapt_qa` files):", ""] + [f"- `{f}` ({d})" for f, d in text_files]
    return "\n".join(lines) + "\n"


def table1_summary(paths: Iterable[str | Path]) -> dict[str, list[Table1Row]]:
    """Table 1's rows (:func:`~.tables.table1_rows`) per dataset title, for each Pri-* dataset the result files in
    ``paths`` hold, read as :func:`build_report` reads them (runs with a validation part only select the recipe)."""
    entries, selection = split_selection(collect(paths))
    return {
        title: table1_rows(entries, ds, selected_recipe(selection, ds))
        for ds, title in TABLE1_DATASETS
        if any(e.dataset.lower() == ds for e in entries)
    }


def write_report(paths: Iterable[str | Path], out: str | Path, *, figures_dir: str | Path | None = None) -> Path:
    """Write the report to ``out`` (and the figures next to it, in ``<out stem>/`` unless ``figures_dir``).

    Raises :class:`~textfree.experiments.ResultsError`, writing nothing, when ``paths`` hold no PPFT result point: an
    empty report would replace the real one."""
    from ...results.files import ResultsError

    paths = list(paths)
    out = Path(out)
    fig_dir = Path(figures_dir) if figures_dir else out.parent / out.stem
    figs = []
    everything = collect(paths)
    if not everything:
        raise ResultsError(
            f"no PPFT result files (of ppft_* cells) in {', '.join(str(p) for p in paths)}: nothing written"
        )
    entries, _ = split_selection(everything)  # like the tables: validation runs only in their own section
    for draw, path in ((_figure_k, fig_dir / "accuracy_vs_k.png"), (_figure_mu, fig_dir / "accuracy_vs_mu.png")):
        fig = draw(entries, path)
        if fig is None:  # nothing to draw from these files: an earlier report's figure there would be stale
            path.unlink(missing_ok=True)
        else:
            figs.append(str(fig.relative_to(out.parent)) if fig.is_relative_to(out.parent) else str(fig))
    out.parent.mkdir(parents=True, exist_ok=True)
    command = " ".join(["textfree ppft report", *(Path(p).as_posix() for p in paths), "--out", out.as_posix()])
    atomic_write_text(out, build_report(paths, figures=figs, command=command))
    return out
