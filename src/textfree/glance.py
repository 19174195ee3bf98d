"""``docs/results/index.md``: every system's headline figures at a glance, the paper's beside them, generated from the
result files (never written by hand) by ``textfree report glance``.

One small table per system, each read through that system's own report module, so that a figure here is the figure
on its detail page: PPFT's Table 1 rows (:func:`textfree.ppft.report.table1_summary`), SnD's targets
(:func:`textfree.snd.report.summary_targets`), RAPT's Table II accuracies and its summary's verdicts
(:mod:`textfree.rapt.report`), and BeamClean against nearest neighbour per token-inversion cell
(:func:`textfree.attacks.report.target_verdict`). The input is one folder holding each system's result folder
(``results/ppft``, ``results/snd``, ``results/rapt``, ``results/attacks``: the ones the detail pages are generated
from); the detail pages are linked as files beside the page written (``docs/results/``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Callable, Iterable, Sequence

import typer

from .atomic import atomic_write_text
from .cli_common import command_group

__all__ = ["SYSTEMS", "DEFAULT_COMMAND", "build_glance", "write_glance", "app"]

#: (system, its result folder under the results root, its detail page beside the glance page, section title).
SYSTEMS = (
    ("ppft", "ppft", "ppft.md", "PPFT: held-out accuracy (Table 1 shape)"),
    ("snd", "snd", "snd.md", "Split-N-Denoise: the targets"),
    ("rapt", "rapt", "rapt.md", "RAPT: accuracy on privatized test examples (Table II shape)"),
    ("attacks", "attacks", "attacks.md", "Attacks: BeamClean against nearest neighbour (token inversion)"),
)

#: How docs/results/index.md is generated: the command the page names unless it was written from other paths.
DEFAULT_COMMAND = "textfree report glance results --out docs/results/index.md"

_DASH = "—"


def _table(header: Sequence[str], body: Iterable[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(row) + " |" for row in body
    ]


def _num(value: float, spec: str = ".3f") -> str:
    return _DASH if value is None or math.isnan(value) else format(value, spec)


def _has_json(folder: Path) -> bool:
    return folder.is_dir() and any(folder.glob("*.json"))


# ------------------------------------------------------------------------------------------------------- systems
def _ppft(folder: Path, page: str) -> list[str]:
    from .ppft.report import table1_summary

    summary = table1_summary([folder])
    if not summary:
        return []
    body = []
    for title, rows in summary.items():
        for label, paper, entry, stems in rows:
            means = [math.nan if entry is None else entry.mean(f"acc_{stem}") for stem in stems]
            body.append([title, label, *(_num(m) for m in means), paper or _DASH])
    return (
        [
            f"Held-out accuracy, the mean over evaluation noise seeds ([detail, with spreads and verdicts]({page})).",
            "Ours: all-MiniLM-L6-v2 client (d = 384) and a 6.8M-parameter local decoder; the paper's: ModernBERT-large",
            "(d = 1024) and Llama-3.2-1B at eps 75, so eps 28 is ours at the paper's noise level (width-matched).",
            "",
        ]
        + _table(["dataset", "row", "4-option", "open-answer", "paper 4-option"], body)
        + _ppft_baselines(folder, page)
    )


def _ppft_baselines(folder: Path, page: str) -> list[str]:
    """PPFT beside its three baselines on one local decoder (Pri-DDX), from the files the PPFT page reads them from
    (``ppft``, ``rapt`` and ``attacks`` beside ``folder``)."""
    from .ppft.report import collect
    from .ppft.report.baselines import baselines_glance

    paths = [p for p in (folder, folder.parent / "rapt", folder.parent / "attacks") if _has_json(p)]
    rows, target = baselines_glance(paths, collect(paths))
    if not rows:
        return []
    body = [[name, _num(m), _num(o), _DASH if paper is None else f"{paper:.4f}"] for name, m, o, paper in rows]
    return (
        [
            "",
            f"PPFT's Table 1 baselines, Pri-DDX, one decoder, B = 150 per prompt ([detail]({page})):",
            "",
        ]
        + _table(["row", "4-option", "open-answer", "paper 4-option (Llama-3.2-1B)"], body)
        + ["", target.lstrip("- ").split(" On the 4-option")[0]]
    )


def _snd(folder: Path, page: str) -> list[str]:
    from .snd.report import collect, summary_targets

    res = collect([folder])
    if not res.rows:
        return []
    targets = summary_targets(res)
    body = [[t.name, t.paper, t.measured, f"**{t.verdict}**"] for t in targets]
    met = sum(t.verdict == "met" for t in targets)
    return [
        f"{met} of {len(targets)} targets met ([detail]({page})). Ours: all-MiniLM-L6-v2 (d = 384) with a denoiser",
        "trained on public text; the paper's: BERT-family models (d = 768).",
        "",
    ] + _table(["target", "paper", "ours", "verdict"], body)


def _rapt_verdicts(summary_lines: Sequence[str]) -> list[str]:
    """The verdict (last cell) of each row of the RAPT report's summary table."""
    rows = [line for line in summary_lines if line.startswith("| ")][1:]  # the first is the header
    return [row.rstrip().rstrip("|").rsplit("|", 1)[-1].strip() for row in rows]


def _rapt(folder: Path, page: str) -> list[str]:
    from .rapt.report import INF, METHOD_TITLES, PAPER_ETAS, PAPER_SST2, _summary, collect, run_or_clean

    res = collect([folder])
    if not res.rows:
        return []
    body = []
    rows = ("t2t", "pct2t", "rapt")
    for task, method in sorted({(r.task, r.method) for r in res.rows}):
        paper_rows = PAPER_SST2.get(method) if task == "sst2" else None
        for eta in res.etas(task, method) + [INF]:
            paper_eta = INF if eta == INF else res.paper_eta(eta)
            at = "inf" if eta == INF else f"{eta:g}" + (f" (paper {paper_eta})" if paper_eta else "")
            if paper_eta is None and eta in PAPER_ETAS:
                at += " (the paper's value itself)"
            runs = [run_or_clean(res, task, method, row, eta) for row in rows]
            ours = " / ".join(_DASH if r is None else f"{100 * r.acc:.1f}" for r in runs)
            paper = _DASH
            if paper_rows is not None and paper_eta in PAPER_ETAS:
                paper = " / ".join(f"{paper_rows[row][PAPER_ETAS.index(paper_eta)]:.1f}" for row in rows)
            if all(r is None for r in runs) and paper == _DASH:
                continue  # not run and not in the paper: the detail page has it
            body.append([f"{task} {METHOD_TITLES.get(method, method)}", at, ours, paper])
    verdicts = _rapt_verdicts(_summary(res))
    met = sum(v == "met" for v in verdicts)
    return [
        f"Accuracy (%) on privatized test examples; {met} of {len(verdicts)} targets met ([detail]({page}), its",
        f"[summary]({page}#summary-the-targets)). Ours: all-MiniLM-L6-v2 on 800 training examples; the paper's:",
        "BERT-base, at the eta whose word-replacement rate ours matches.",
        "",
    ] + _table(["task, method", "eta", "ours: T2T / PCT2T / +Reconstruction", "paper (BERT-base), the same rows"], body)


def _attacks(folder: Path, page: str) -> list[str]:
    from .attacks.report import TARGET_NN_MAX, TARGET_RATIO, _in_target, collect, target_verdict

    curves = collect([folder])
    if not curves:
        return []
    judged = [(c, v) for c in curves if not (v := target_verdict(c)).reason]
    body = []
    for c, v in judged:
        met = [r for r in v.rows if r.met]
        pick = max(met, key=lambda r: r.nn) if met else v.best  # the point the detail page's verdict names
        body.append(
            [
                f"{c.title} (`{c.name}`)",
                f"{v.axis} {pick.x:g}",
                f"{100 * pick.nn:.1f}%",
                f"{100 * pick.beamclean:.1f}%",
                f"{pick.ratio:.2f}x",
                f"**{'met' if v.met else 'not met'}**",
                "yes" if _in_target(c) else "no",
            ]
        )
    lines = [
        f"Tokens recovered from noisy token embeddings, the mean over noise seeds ([detail]({page})). The bar:",
        f"where nearest neighbour (NN) recovers at most {100 * TARGET_NN_MAX:g}%, BeamClean with the noise estimated",
        f"from the payload recovers at least {TARGET_RATIO:g}x as many (the point shown is the one the detail page's",
        "verdict names). The detail page follows BeamClean's Fig. 3 shape; its cells run other models than the",
        "paper's.",
        "",
    ]
    if not body:
        return lines + ["No token-inversion cell here ran both nearest neighbour and BeamClean with estimated noise."]
    header = ["noise (cell)", "point", "NN", "BeamClean", "ratio", "verdict", "decides the target"]
    return lines + _table(header, body)


_SECTIONS: dict[str, Callable[[Path, str], list[str]]] = {
    "ppft": _ppft,
    "snd": _snd,
    "rapt": _rapt,
    "attacks": _attacks,
}


# --------------------------------------------------------------------------------------------------------- page
def build_glance(results: str | os.PathLike, *, command: str = DEFAULT_COMMAND) -> str:
    """Markdown for docs/results/index.md from the result folders under ``results`` (see the module docstring).

    Raises :class:`~textfree.results.files.ResultsError` when no system has result files there (an empty page
    would replace the real one), or when a result file is malformed."""
    from .results.files import ResultsError

    root = Path(results)
    lines = [
        "# Results at a glance",
        "",
        "<!-- generated by `textfree report glance` from result files; do not edit by hand -->",
        "",
        "Each system's headline figures, read from the committed result files by the code that writes its detail",
        "page, with the paper's figure beside ours where the paper has one. Our models are far smaller than the",
        "papers': compare the shape, not the digits. Every figure has its spread, its setup and its result file on",
        f"the detail page. Generated by `{command}`.",
    ]
    found = 0
    for system, sub, page, title in SYSTEMS:
        folder = root / sub
        section = _SECTIONS[system](folder, page) if _has_json(folder) else []
        found += bool(section)
        lines += ["", f"## {title}", ""]
        lines += section or [f"No result files in `{folder.as_posix()}` ([detail page]({page}))."]
    if not found:
        raise ResultsError(f"no result files of any system under {root} ({', '.join(s[1] for s in SYSTEMS)}/)")
    return "\n".join(lines) + "\n"


def write_glance(paths: Sequence[str | os.PathLike], out: str | os.PathLike) -> Path:
    """Write :func:`build_glance` of the one results folder in ``paths`` to ``out``; nothing is written on error."""
    (root,) = paths
    out = Path(out)
    command = f"textfree report glance {Path(root).as_posix()} --out {out.as_posix()}"
    text = build_glance(root, command=command)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, text)
    return out


# ---------------------------------------------------------------------------------------------------------- CLI
app = command_group("Pages generated across systems from result files.")


@app.command("glance")
def glance_cmd(
    results: Path = typer.Argument(
        Path("results"), help="The folder holding each system's result folder (ppft/, snd/, rapt/, attacks/)."
    ),
    out: Path = typer.Option(Path("docs/results/index.md"), "--out", help="The Markdown page to write."),
) -> None:
    """Write the results-at-a-glance page (docs/results/index.md): one small table per system, the paper's figures
    beside ours, links to the detail pages; nothing is recomputed."""
    from .results.report_command import run_report_command

    def fail(message: str):
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2)

    if not results.is_dir():
        fail(f"RESULTS {str(results)!r} is not a directory: give the folder holding ppft/, snd/, rapt/, attacks/")
    typer.echo(f"wrote {run_report_command([results], out, write_glance, fail)}")
