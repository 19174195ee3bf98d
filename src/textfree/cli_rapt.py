"""``textfree rapt ...``: RAPT's commands (fine-tuning a classifier on privatized text with token reconstruction)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from textfree.accel import is_main_process
from textfree.cli_common import command_group

app = command_group("RAPT: fine-tune on T2T / PCT2T-privatized text with token reconstruction.")

#: Config field -> the flag that sets it, so that an error names what the user typed.
_FLAGS = {
    "encoder": "--model",
    "task": "--task",
    "method": "--method",
    "eta": "--eta",
    "pos": "--pos",
    "plain_length": "--plain-tokens",
    "plain_sequences": "--plain-sequences",
    "rec_vocab_size": "--rec-vocab-size",
    "rec_hidden": "--rec-hidden",
    "rec_weight": "--rec-weight",
    "reconstruction": "--reconstruction",
    "virtual_tokens": "--virtual-tokens",
    "train_limit": "--train-limit",
    "test_limit": "--test-limit",
    "max_length": "--max-length",
    "epochs": "--epochs",
    "max_steps": "--max-steps",
    "batch_size": "--batch-size",
    "lr": "--lr",
    "seed": "--seed",
    "out": "--out",
}


def _fail(message: str, code: int = 2) -> None:
    from textfree.cli_common import _fail as fail

    fail(message, code)


def _flag_message(message: str) -> str:
    from textfree.cli_common import flag_message

    return flag_message(message, _FLAGS)


@app.command("train")
def train_cmd(
    out: Path = typer.Option(..., "--out", help="Run directory (adapter or model, plain tokens, summary)."),
    model: str = typer.Option("default", "--model", help="The served model: 'default' (all-MiniLM-L6-v2) or HF name."),
    task: str = typer.Option("sst2", help="GLUE task: sst2, qqp, mrpc, rte or cola (from ../shared/data/glue)."),
    method: str = typer.Option("lora", help="lora, prompt_tuning, prefix_tuning, ia3 or full."),
    eta: Optional[float] = typer.Option(None, help="T2T / PCT2T eta; leave out for no privatization."),
    pos: str = typer.Option("default", help="PCT2T categories ('default', 'all', a comma list) or 'none' for T2T."),
    plain_tokens: int = typer.Option(40, "--plain-tokens", help="Plain tokens prepended (0: none)."),
    plain_sequences: int = typer.Option(1, "--plain-sequences", help="Plain-token sequences, one drawn per example."),
    reconstruction: bool = typer.Option(
        True, "--reconstruction/--no-reconstruction", help="Train with the privatized-token reconstruction loss."
    ),
    rec_vocab_size: Optional[int] = typer.Option(
        None, help="Reconstruction vocabulary (default: every eligible word)."
    ),
    rec_hidden: int = typer.Option(96, help="The reconstruction head's hidden size c."),
    rec_weight: float = typer.Option(1.0, help="Weight of the reconstruction loss."),
    virtual_tokens: Optional[int] = typer.Option(None, help="Prompt / prefix tuning tokens (default: 150 / 10)."),
    train_limit: Optional[int] = typer.Option(2000, help="A seeded subset of the training split."),
    test_limit: Optional[int] = typer.Option(872, help="A seeded subset of the test split."),
    max_length: int = typer.Option(128, help="Tokens per example, plain tokens included."),
    epochs: int = typer.Option(4, help="Passes over the privatized training set (the paper: 4)."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many optimizer steps."),
    batch_size: int = typer.Option(16, help="Examples per step."),
    lr: float = typer.Option(5e-4, help="Peak learning rate (AdamW)."),
    seed: int = typer.Option(0, help="Seed (init, data order, privatization noise: experiments only)."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the newest checkpoint in --out."),
) -> None:
    """Privatize a GLUE task's examples (client side), fine-tune on them with reconstruction (server side), and print
    the accuracy on privatized test examples."""
    from textfree.cli_common import _fail, _quiet_transformers, setup_logging

    if eta is not None and not (math.isfinite(eta) and eta > 0):  # before the heavy imports: reported at once
        _fail(f"--eta must be a finite number > 0 or null, got {eta}")

    _quiet_transformers()
    setup_logging(True)
    from textfree.data import DataError
    from textfree.encoders.loading import EncoderLoadError
    from textfree.rapt.train import RaptTrainConfig, train_rapt

    try:
        cfg = RaptTrainConfig(
            out=str(out), encoder=model, task=task, method=method, eta=eta, pos=None if pos == "none" else pos,
            plain_length=plain_tokens, plain_sequences=plain_sequences, reconstruction=reconstruction,
            rec_vocab_size=rec_vocab_size, rec_hidden=rec_hidden, rec_weight=rec_weight, virtual_tokens=virtual_tokens,
            train_limit=train_limit, test_limit=test_limit, max_length=max_length, epochs=epochs, max_steps=max_steps,
            batch_size=batch_size, lr=lr, seed=seed, progress=progress, resume=resume,
        )  # fmt: skip
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    try:
        summary = train_rapt(cfg)
    except (EncoderLoadError, DataError, FileNotFoundError) as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    if is_main_process():
        eps = summary["epsilon_per_word"]
        bound = "no privatization" if eps is None else f"{eps:.4g} per privatized word (eta * D_max)"
        typer.echo(
            f"RAPT {method} on {task}: accuracy {summary['acc']:.4f} on {summary['n_test']} privatized test examples; "
            f"{summary['steps']} steps, {summary['total_wall_s']} s; privacy: {bound}, "
            f"{summary['mean_privatized_words']:.1f} privatized words per test example; run in {out}"
        )


@app.command("report")
def report_cmd(
    results: list[Path] = typer.Argument(
        ...,
        help="Result JSON files of the rapt_finetune cells (and, optionally, ner_attack results and the matched-eta "
        "JSON of benchmarks/rapt_matched_eta.py, rapt_qa results and PPFT's pipeline run of the same decoder), or "
        "directories holding them (e.g. results/rapt results/attacks results/ppft).",
    ),
    out: Path = typer.Option(
        Path("docs/results/rapt.md"), "--out", help="The Markdown report to write (its figure goes to <out stem>/)."
    ),
) -> None:
    """Write RAPT's result tables (docs/results/rapt.md) and figure from result files; nothing is recomputed."""
    from textfree.rapt.report import write_report
    from textfree.results.report_command import run_report_command

    typer.echo(f"wrote {run_report_command(results, out, write_report, _fail)}")
