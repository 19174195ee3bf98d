"""``textfree rapt ...``: RAPT's commands: ``train`` (fine-tune a classifier on privatized text with token
reconstruction), ``evaluate`` (a trained run on privatized test examples) and ``report``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Optional

import typer

from textfree.accel import is_main_process
from textfree.cli_common import command_group, spinner, verbs_first

app = command_group(
    "RAPT: fine-tune on T2T / PCT2T-privatized text with token reconstruction, evaluate the run, write the report."
)

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

    from textfree.rapt.config import RaptTrainConfig  # no torch: a bad value is reported at once

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
    with spinner("loading ...", enabled=progress):  # torch and transformers: seconds
        _quiet_transformers()
        setup_logging(True)
        from textfree.data import DataError
        from textfree.encoders.loading import EncoderLoadError
        from textfree.rapt.train import train_rapt
    try:
        with spinner(f"loading {task} and the word table, privatizing the examples (client side) ...",
                     between="classifying the privatized test examples ...", enabled=progress):  # fmt: skip
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


@app.command("evaluate")
def evaluate_cmd(
    model: Path = typer.Option(..., "--model", help="A RAPT run directory (what 'textfree rapt train --out' wrote)."),
    eta: Optional[float] = typer.Option(
        None,
        "--eta",
        help="Privatize the test examples at this eta (default: the run's; none if it trained on clear text).",
    ),
    test_limit: Optional[int] = typer.Option(
        None, "--test-limit", help="A seeded subset of the task's test split (default: the run's)."
    ),
    noise_seed: Optional[int] = typer.Option(
        None,
        "--noise-seed",
        help="Seed of the test examples' privatization (default: the run's, which reproduces the accuracy 'train' "
        "printed; experiments only).",
    ),
    batch_size: int = typer.Option(64, "--batch-size", help="Test examples per forward pass."),
    out: Optional[Path] = typer.Option(None, "--out", help="Also write the result to this JSON file."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show the progress bar."),
) -> None:
    """Score a trained RAPT run on its task's test split (never trained on): the client privatizes each test example
    as in training (T2T / PCT2T at the run's eta, its plain tokens prepended), the served classifier labels it."""
    from textfree.cli_common import _quiet_transformers, err, setup_logging

    # every flag before the heavy imports: a wrong one is reported at once
    if not ((model / "train_config.json").is_file() and (model / "summary.json").is_file()):
        _fail(
            f"--model {str(model)!r} is not a finished RAPT run directory (no train_config.json and summary.json; "
            "'textfree rapt train --out' writes one)"
        )
    if eta is not None and not (math.isfinite(eta) and eta > 0):
        _fail(f"--eta must be a finite number > 0, got {eta}")
    for flag, value, low in (("--test-limit", test_limit, 2), ("--noise-seed", noise_seed, 0), ("--batch-size",
                             batch_size, 1)):  # fmt: skip
        if value is not None and value < low:
            _fail(f"{flag} must be >= {low}, got {value}")
    if out is not None and (out.is_dir() or not out.parent.is_dir()):
        _fail(f"--out {str(out)!r} is a directory" if out.is_dir() else f"--out {str(out)!r}: no such directory")

    with spinner("loading ...", enabled=progress):  # torch and transformers: seconds
        _quiet_transformers()
        setup_logging(True)
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        from textfree.atomic import write_json
        from textfree.data import DataError
        from textfree.data.tasks import load_task
        from textfree.encoders.loading import EncoderLoadError
        from textfree.rapt.model import BASE_ENCODER_DIR, load_classifier
        from textfree.rapt.train import build_mechanism, evaluate_classifier
        from textfree.rng import seeded_generator
        from textfree.substitution.examples import privatize_examples

    try:
        with spinner(f"loading the RAPT run {model} ...", enabled=progress):
            classifier, tokenizer, plain, config = load_classifier(model)
    except (ValueError, OSError, EncoderLoadError) as exc:
        _fail(f"--model {str(model)!r}: {exc}")
    try:
        run_eta = config.get("eta") if eta is None else eta
        bundled = model / BASE_ENCODER_DIR  # a published run carries its base encoder (and so its word table)
        encoder = str(bundled) if bundled.is_dir() else config["encoder"]
        limit = config.get("test_limit") if test_limit is None else test_limit
        with spinner(f"reading {config['task']}'s test split and building the word table ...", enabled=progress):
            data = load_task(config["task"], train_limit=config.get("train_limit"), test_limit=limit,
                             generator=seeded_generator(int(config.get("data_seed", 0)), warn=False))  # fmt: skip
            mechanism = build_mechanism(encoder, run_eta, config.get("pos"))
        seed = noise_seed
        if seed is None:  # the run's own test noise (rapt.train: noise seed x 2 + 1)
            seed = int(config["seed"] if config.get("noise_seed") is None else config["noise_seed"]) * 2 + 1
        with spinner(f"privatizing {len(data.test_texts)} test examples (client side) ...", enabled=progress):
            examples = privatize_examples(data.test_texts, data.test_labels, mechanism, plain,
                                          generator=seeded_generator(seed, warn=False))  # fmt: skip
        correct = 0.0
        bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       console=err, disable=not progress, transient=True)  # fmt: skip
        with bar:
            task = bar.add_task("classifying privatized test examples", total=len(examples))
            for start in range(0, len(examples), batch_size):
                chunk = examples[start : start + batch_size]
                scores = evaluate_classifier(classifier, tokenizer, chunk, plain, max_length=int(config["max_length"]),
                                             batch_size=batch_size)  # fmt: skip
                correct += scores["acc"] * len(chunk)
                bar.advance(task, len(chunk))
    except (EncoderLoadError, DataError, FileNotFoundError, KeyError) as exc:
        _fail(f"--model {str(model)!r}: cannot evaluate this run: {exc}")
    except ValueError as exc:
        _fail(_flag_message(str(exc)))
    acc = correct / max(len(examples), 1)
    words = sum(ex.words_privatized for ex in examples) / max(len(examples), 1)
    per_word = None if mechanism is None else mechanism.privacy_loss_per_word().epsilon
    bound = "no privatization" if per_word is None else f"{per_word:.4g} per privatized word (eta * D_max)"
    typer.echo(
        f"RAPT {config['method']} on {config['task']}: accuracy {acc:.4f} on {len(examples)} privatized test examples "
        f"(eta {run_eta}, noise seed {seed}); privacy: {bound}, {words:.1f} privatized words per test example"
    )
    if out is not None:
        write_json(out, {"system": "rapt", "model": str(model), "task": config["task"], "method": config["method"],
                         "eta": run_eta, "acc": acc, "n_test": len(examples), "noise_seed": seed,
                         "epsilon_per_word": per_word, "mean_privatized_words": words})  # fmt: skip
        typer.echo(f"wrote {out}")


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


verbs_first(app)
