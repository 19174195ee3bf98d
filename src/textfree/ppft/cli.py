"""``textfree ppft ...``: PPFT's pipeline commands (decoder pretraining, stage 1, stage 2, ask, evaluate)."""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="PPFT: text-free alignment, noisy domain adaptation, text-free answers.")
