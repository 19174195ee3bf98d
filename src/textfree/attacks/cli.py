"""``textfree attacks``: commands for the attack suite (``report``: docs/results/attacks.md from result files)."""

from __future__ import annotations

from pathlib import Path
from typing import List

import typer

app = typer.Typer(no_args_is_help=True, help="Attacks on released vectors: reports generated from result files.")


@app.command("report")
def report_cmd(
    results: List[Path] = typer.Argument(..., help="Result JSON files of the token_inversion cells, or directories holding them (e.g. results/attacks)."),
    out: Path = typer.Option(Path("docs/results/attacks.md"), "--out", help="The Markdown report to write (the figure goes to <out stem>/)."),
) -> None:
    """Write the token-inversion tables, figure and target verdict from result files; nothing is recomputed."""
    from textfree.attacks.report import write_report
    from textfree.experiments import ResultsError

    missing = [str(p) for p in results if not p.exists()]
    if missing:
        typer.echo(f"error: no such file or directory: {', '.join(missing)}", err=True)
        raise typer.Exit(2)
    try:
        path = write_report(results, out)
    except ResultsError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path}")
