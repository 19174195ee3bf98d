"""``textfree snd ...``: Split-N-Denoise's commands: ``train`` (the client's denoiser, on public text), ``evaluate``
(a trained denoiser on the run's held-out public text) and ``report``; ``train-denoiser`` is the old name of
``train``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from textfree.accel import is_main_process
from textfree.cli_common import command_group, deprecated_alias, spinner, verbs_first

app = command_group(
    "Split-N-Denoise: train the client-side denoiser on public text, evaluate it on held-out text, write the report."
)

#: Config field -> the flag that sets it, so that an error names what the user typed.
_FLAGS = {
    "etas": "--etas",
    "epochs": "--epochs",
    "max_steps": "--max-steps",
    "batch_size": "--batch-size",
    "limit_per_source": "--limit-per-source",
    "sources": "--sources",
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


@app.command("train")
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
    sources: str = typer.Option(
        "alpaca,lima,gsm8k,sst2",
        "--sources",
        help="Public corpus sources, comma-separated: alpaca, lima, gsm8k, sst2, qqp_train (QQP's training part).",
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
    from textfree.snd.train_config import DenoiserTrainConfig  # no torch: a bad value is reported at once

    parsed_etas = _parse_etas(etas)
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
            sources=[x.strip() for x in sources.split(",") if x.strip()],
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
    with spinner("loading ...", enabled=progress):  # torch and transformers: seconds
        _quiet_transformers()
        setup_logging(True)
        from textfree.data import DataError
        from textfree.encoders.loading import EncoderLoadError
        from textfree.snd.denoiser import DenoiserError
        from textfree.snd.train import train_denoiser
    try:
        with spinner("loading the encoder, building the public corpus ...",
                     between="validating the denoiser on held-out texts ...", enabled=progress):  # fmt: skip
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


deprecated_alias(app, "train-denoiser", "train", train_denoiser_cmd, prefix="textfree snd")


@app.command("evaluate")
def evaluate_cmd(
    denoiser: Path = typer.Option(
        ..., "--denoiser", help="A denoiser run directory (what 'textfree snd train --out' wrote)."
    ),
    etas: Optional[str] = typer.Option(
        None,
        "--etas",
        help="Noise levels eta, comma-separated (default: the etas the run trained on; outside their range the "
        "denoiser extrapolates).",
    ),
    val_size: Optional[int] = typer.Option(
        None, "--val-size", help="Score the first N of the run's held-out texts (default: all it held out)."
    ),
    noise_seed: Optional[int] = typer.Option(
        None,
        "--noise-seed",
        help="Seed of the evaluation noise (default: the run's, which reproduces the table 'train' printed).",
    ),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the figures to this JSON file."),
) -> None:
    """Score a trained denoiser on its run's held-out public texts (never trained on): per eta, MSE and cosine of e_n
    (TokEmbPriv) and of e_d (SnD) to the clean e_c; the validation table 'train' prints. Downstream task accuracy is
    the snd_downstream experiment cell's (textfree run)."""
    from textfree.cli_common import _quiet_transformers, console, setup_logging

    # every flag before the heavy imports: a wrong one is reported at once
    if not (denoiser / "train_config.json").is_file():
        _fail(
            f"--denoiser {str(denoiser)!r} is not a denoiser run directory (no train_config.json; 'textfree snd train "
            "--out' writes one)"
        )
    parsed_etas = None if etas is None else _parse_etas(etas)
    if val_size is not None and val_size < 1:
        _fail(f"--val-size must be >= 1, got {val_size}")
    if noise_seed is not None and noise_seed < 0:
        _fail(f"--noise-seed must be >= 0, got {noise_seed}")
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        _fail(f"--out {str(out)!r} is a directory" if out.is_dir() else f"--out {str(out)!r}: no such directory")

    with spinner("loading ..."):  # torch and transformers: seconds
        _quiet_transformers()
        setup_logging(True)
        from textfree.atomic import write_json
        from textfree.data import DataError
        from textfree.encoders.loading import EncoderLoadError
        from textfree.snd.denoiser import Denoiser, DenoiserError
        from textfree.snd.train import validation_figures
        from textfree.snd.update import base_run_settings, load_server, public_split

    try:
        base = base_run_settings(denoiser)
        eta_list = parsed_etas or [float(e) for e in base["etas"]]
        seed = noise_seed if noise_seed is not None else base.get("noise_seed")
        seed = int(base.get("seed", 0) if seed is None else seed)
        with spinner(f"loading the denoiser of {denoiser} and its encoder ..."):
            model = Denoiser.from_pretrained(denoiser).eval()
            table, encoder = load_server(base.get("encoder", "default"), int(base.get("max_tokens", 64)))
        with spinner("rebuilding the run's public corpus to find its held-out texts ..."):
            _, texts = public_split(denoiser, val_size=val_size or int(base["val_size"]))
        with spinner(f"denoising {len(texts)} held-out texts at {len(eta_list)} eta(s) ..."):
            figures = validation_figures(
                model, encoder, table, texts, eta_list, noise_seed=seed, clip=bool(base.get("clip", True))
            )
    except DenoiserError as exc:
        _fail(f"--denoiser {str(denoiser)!r}: {exc}")
    except (EncoderLoadError, DataError, FileNotFoundError, KeyError) as exc:
        _fail(f"--denoiser {str(denoiser)!r}: cannot evaluate this run: {exc}")
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    console.print(_validation_table({"validation": figures}))
    typer.echo(f"{len(texts)} held-out texts of {denoiser} (never trained on), noise seed {seed}")
    if out is not None:
        result = {"denoiser": str(denoiser), "denoiser_sha256": model.sha256, "n_texts": len(texts)}
        write_json(out, result | {"noise_seed": seed, "validation": figures})
        typer.echo(f"wrote {out}")


def _parse_roles(values: list[str]) -> dict[str, str]:
    """``PATH_OR_SHA=full|small|in_domain`` flags -> the report's denoiser roles."""
    roles = {}
    for value in values:
        key, sep, role = value.rpartition("=")
        if not sep or not key or role not in ("full", "small", "in_domain"):
            _fail(f"--denoiser-role must be PATH_OR_SHA256=full, =small or =in_domain, got {value!r}")
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
        help="Which denoiser is the full, the small and the in-domain one: PATH_OR_SHA256=full|small|in_domain "
        "(repeatable; default: a path containing 'small' is the small one, 'qqp' the in-domain one).",
    ),
) -> None:
    """Write SnD's result tables (docs/results/snd.md) and figures from result files; nothing is recomputed."""
    from functools import partial

    from textfree.results.report_command import run_report_command
    from textfree.snd.report import write_report

    roles = _parse_roles(denoiser_role)
    typer.echo(f"wrote {run_report_command(results, out, partial(write_report, roles=roles or None), _fail)}")


verbs_first(app)
