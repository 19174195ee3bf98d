"""``textfree snd ...``: Split-N-Denoise's commands (training the client's denoiser on public text)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from textfree.accel import is_main_process
from textfree.cli_common import command_group

app = command_group("Split-N-Denoise: train the client-side denoiser on public text.")

#: Config field -> the flag that sets it, so that an error names what the user typed.
_FLAGS = {
    "etas": "--etas",
    "epochs": "--epochs",
    "max_steps": "--max-steps",
    "batch_size": "--batch-size",
    "limit_per_source": "--limit-per-source",
    "max_tokens": "--max-tokens",
    "val_size": "--val-size",
    "noise_seed": "--noise-seed",
    "seed": "--seed",
    "save_every": "--save-every",
    "lr": "--lr",
    "warmup_steps": "--warmup-steps",
    "n_layers": "--layers",
    "d_model": "--d-model",
    "d_ff": "--d-ff",
    "d_kv": "--d-kv",
    "n_head": "--heads",
    "encoder": "--model",
    "out": "--out",
}


def _fail(message: str, code: int = 2) -> None:
    from textfree.cli_common import _fail as fail

    fail(message, code)


def _flag_message(message: str) -> str:
    from textfree.cli_common import flag_message

    return flag_message(message, _FLAGS)


def _parse_etas(text: str) -> list[float]:
    try:
        etas = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        _fail(f"--etas must be comma-separated numbers > 0 (e.g. 50,100,500), got {text!r}")
    if not etas:
        _fail(f"--etas must name at least one eta (e.g. 50,100,500), got {text!r}")
    bad = [e for e in etas if not (math.isfinite(e) and e > 0)]
    if bad:
        _fail(f"--etas: every entry must be a finite number > 0, got {bad[0]:g}")
    return etas


def _validation_table(summary: dict):
    from rich.table import Table

    table = Table(title="held-out validation: e_n (TokEmbPriv) and e_d (SnD) against e_c")
    for column in ("eta", "E||z|| / ||x||", "MSE e_n", "MSE e_d", "cos e_n", "cos e_d"):
        table.add_column(column, justify="right")
    for eta, f in summary["validation"].items():
        table.add_row(
            eta,
            f"{f['nsr']:.3g}",
            f"{f['mse_noisy']:.4g}",
            f"{f['mse_denoised']:.4g}",
            f"{f['cos_noisy']:.4f}",
            f"{f['cos_denoised']:.4f}",
        )
    return table


@app.command("train-denoiser")
def train_denoiser_cmd(
    model: str = typer.Option(
        "default", "--model", help="The served encoder: 'default' (all-MiniLM-L6-v2, offline) or an HF name/path."
    ),
    out: Path = typer.Option(Path("runs/snd-minilm"), "--out", help="Run directory (denoiser, summary, checkpoints)."),
    etas: str = typer.Option("50,100,500", "--etas", help="Noise levels eta, comma-separated; one model covers them."),
    epochs: int = typer.Option(2, help="Passes over the corpus (fresh noise each; the paper trains 2)."),
    max_steps: Optional[int] = typer.Option(None, help="Stop after this many optimizer steps."),
    batch_size: int = typer.Option(32, help="Texts per step."),
    lr: float = typer.Option(3e-4, help="Peak learning rate (AdamW)."),
    warmup_steps: int = typer.Option(50, help="Linear warm-up steps."),
    limit_per_source: Optional[int] = typer.Option(
        5000, help="A seeded sample of at most this many texts per source (the paper: up to 5000)."
    ),
    max_tokens: int = typer.Option(64, help="Cut every text to this many tokens."),
    val_size: int = typer.Option(256, help="Held-out validation texts."),
    layers: int = typer.Option(3, "--layers", help="Denoiser blocks (Table 8's L)."),
    d_model: Optional[int] = typer.Option(None, "--d-model", help="Denoiser width (default: the encoder's)."),
    d_ff: Optional[int] = typer.Option(None, "--d-ff", help="Feed-forward width (default: the encoder's)."),
    d_kv: int = typer.Option(240, "--d-kv", help="Width of each attention head (Table 8's d_kv)."),
    heads: int = typer.Option(6, "--heads", help="Attention heads (Table 8's n_head)."),
    noise_input: bool = typer.Option(
        True, "--noise-input/--no-noise-input", help="The denoiser reads the noise Z (off: ablation)."
    ),
    token_input: bool = typer.Option(
        True, "--token-input/--no-token-input", help="The denoiser reads the noisy tokens X~ (off: ablation)."
    ),
    clip: bool = typer.Option(True, "--clip/--no-clip", help="Clip noisy token embeddings to C (SnD eq. 3)."),
    seed: int = typer.Option(0, help="Seed (init, data order, corpus sample)."),
    noise_seed: Optional[int] = typer.Option(None, help="Seed of the training noise (default: --seed)."),
    save_every: int = typer.Option(200, help="Checkpoint every N steps."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar."),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="Continue from the newest checkpoint in --out."),
    cpu: bool = typer.Option(False, "--cpu", help="Force the CPU."),
) -> None:
    """Train SnD's denoiser D(e_n, X~, Z, eta) -> e_c on public text; print its held-out validation table."""
    from textfree.cli_common import _quiet_transformers, console, setup_logging

    parsed_etas = _parse_etas(etas)  # before the heavy imports: a bad --etas is reported at once

    _quiet_transformers()
    setup_logging(True)
    from textfree.data import DataError
    from textfree.encoders.loading import EncoderLoadError
    from textfree.snd.denoiser import DenoiserError
    from textfree.snd.train import DenoiserTrainConfig, train_denoiser

    try:
        cfg = DenoiserTrainConfig(
            out=str(out),
            encoder=model,
            etas=parsed_etas,
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            lr=lr,
            warmup_steps=warmup_steps,
            limit_per_source=limit_per_source,
            max_tokens=max_tokens,
            val_size=val_size,
            n_layers=layers,
            d_model=d_model,
            d_ff=d_ff,
            d_kv=d_kv,
            n_head=heads,
            use_noise=noise_input,
            use_tokens=token_input,
            clip=clip,
            seed=seed,
            noise_seed=noise_seed,
            save_every=save_every,
            progress=progress,
            resume=resume,
            cpu=cpu,
        )
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    try:
        summary = train_denoiser(cfg)
    except (EncoderLoadError, DenoiserError, DataError, FileNotFoundError) as exc:
        _fail(str(exc))
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    if is_main_process():
        console.print(_validation_table(summary))

        def fmt(value, spec: str = ".4g") -> str:
            return "unknown" if value is None else format(value, spec)

        typer.echo(
            f"denoiser trained: {summary['steps']} steps, loss {fmt(summary['first_loss'])} -> "
            f"{fmt(summary['final_loss'])}, {fmt(summary['s_per_step'])} s/step, "
            f"{fmt(summary['total_wall_s'], '.0f')} s; "
            f"{out / summary['denoiser_file']} (sha256 {summary['denoiser_sha256'][:16]})"
        )


def _parse_roles(values: list[str]) -> dict[str, str]:
    """``PATH_OR_SHA=full|small`` flags -> the report's denoiser roles."""
    roles = {}
    for value in values:
        key, sep, role = value.rpartition("=")
        if not sep or not key or role not in ("full", "small"):
            _fail(f"--denoiser-role must be PATH_OR_SHA256=full or PATH_OR_SHA256=small, got {value!r}")
        roles[key] = role
    return roles


@app.command("report")
def report_cmd(
    results: list[Path] = typer.Argument(
        ...,
        help="Result JSON files of the snd_downstream cells (and, optionally, clipped token_inversion results and "
        "the client-cost benchmark's JSON), or directories holding them (e.g. results/snd).",
    ),
    out: Path = typer.Option(
        Path("docs/results/snd.md"), "--out", help="The Markdown report to write (figures go to <out stem>/)."
    ),
    denoiser_role: list[str] = typer.Option(
        [],
        "--denoiser-role",
        help="Which denoiser is the full and which the small one: PATH_OR_SHA256=full|small (repeatable; default: "
        "a path containing 'small' is the small one).",
    ),
) -> None:
    """Write SnD's result tables (docs/results/snd.md) and figures from result files; nothing is recomputed."""
    from functools import partial

    from textfree.results.report_command import run_report_command
    from textfree.snd.report import write_report

    roles = _parse_roles(denoiser_role)
    typer.echo(f"wrote {run_report_command(results, out, partial(write_report, roles=roles or None), _fail)}")
