"""``textfree snd ...``: Split-N-Denoise's commands (training the client's denoiser on public text)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from textfree.accel import is_main_process

app = typer.Typer(no_args_is_help=True, help="Split-N-Denoise: train the client-side denoiser on public text.")

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
    "encoder": "--model",
    "out": "--out",
}


def _fail(message: str, code: int = 2) -> None:
    from textfree.cli_common import _fail as fail

    fail(message, code)


def _flag_message(message: str) -> str:
    """``message`` with the config field it starts with (or names first) replaced by its flag."""
    for name, flag in _FLAGS.items():
        if message.startswith(f"{name} "):
            return flag + message[len(name) :]
    for name, flag in _FLAGS.items():
        if f" {name} " in f" {message} ":
            return f"{flag}: {message}"
    return message


def _parse_etas(text: str) -> list[float]:
    try:
        etas = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        _fail(f"--etas must be comma-separated numbers > 0 (e.g. 50,100,500), got {text!r}")
    if not etas:
        _fail(f"--etas must name at least one eta (e.g. 50,100,500), got {text!r}")
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
            etas=_parse_etas(etas),
            epochs=epochs,
            max_steps=max_steps,
            batch_size=batch_size,
            lr=lr,
            warmup_steps=warmup_steps,
            limit_per_source=limit_per_source,
            max_tokens=max_tokens,
            val_size=val_size,
            n_layers=layers,
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
