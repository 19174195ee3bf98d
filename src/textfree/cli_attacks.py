"""``textfree attacks``: commands for the attack suite (``report``: docs/results/attacks.md from result files)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

from textfree.cli_common import command_group

app = command_group("Attacks on released vectors: reports generated from result files.")


@app.command("report")
def report_cmd(
    results: List[Path] = typer.Argument(
        ...,
        help="Result JSON files of the attack cells (token_inversion, attribute_inference, learned_inversion, "
        "substitution_inversion), or directories holding them (e.g. results/attacks).",
    ),
    out: Path = typer.Option(
        Path("docs/results/attacks.md"), "--out", help="The Markdown report to write (the figures go to <out stem>/)."
    ),
) -> None:
    """Write the attack tables, figures, target verdicts and cross matrix from result files; nothing is recomputed."""
    from textfree.attacks.report import write_report
    from textfree.results.report_command import run_report_command

    def fail(message: str):
        typer.echo(f"error: {message}", err=True)
        raise typer.Exit(2)

    typer.echo(f"wrote {run_report_command(results, out, write_report, fail)}")
