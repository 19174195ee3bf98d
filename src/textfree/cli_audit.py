"""``textfree audit DATA ...``: the auditor's path, a standard battery of attacks on the user's own file
(docs/audit.md)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from textfree.cli_common import _fail, _quiet_transformers, app, console, spinner


def _numbers(text: str, flag: str, kind: type = float) -> tuple:
    try:
        return tuple(kind(x) for x in text.split(",") if x.strip())
    except ValueError:
        _fail(f"{flag}: expected numbers separated by commas, got {text!r}")


def _names(text: str | None) -> tuple[str, ...] | None:
    return None if text is None else tuple(x.strip() for x in text.split(","))


@app.command("audit")
def audit(
    data: str = typer.Argument(..., help="A CSV/TSV/JSON Lines/JSON/Parquet file, or a Hugging Face dataset name."),
    text_column: str = typer.Option("text", "--text-column", help="The column holding each row's private text."),
    attribute: List[str] = typer.Option(
        [],
        "--attribute",
        help="An attribute to attack, NAME[=COLUMN]:KIND[:EDGES] (repeat it): categorical, numeric (bucketed at EDGES, "
        "default the attacker's training quartiles) or multilabel (a list, or '|'-joined text).",
    ),
    label_column: Optional[str] = typer.Option(
        None, "--label-column", help="The task's label: the label-only reference (what the answer alone reveals)."
    ),
    pii_column: Optional[str] = typer.Option(
        None, "--pii-column", help="The PII strings in each text (a list or '|'-joined): PII recovery (tokens)."
    ),
    columns: Optional[str] = typer.Option(
        None, "--columns", help="A CSV/TSV file without a header row: its column names in order, comma-separated."
    ),
    split: Optional[str] = typer.Option(None, "--split", help="A hub dataset's split (default train)."),
    mechanism: str = typer.Option("l2_laplace", "--mechanism", help="l2_laplace, t2t or pct2t."),
    release: str = typer.Option("slots", "--release", help="l2_laplace: slots (PPFT payloads) or tokens."),
    epsilon: str = typer.Option("28,75", "--epsilon", help="The grid: epsilon per unit distance (t2t/pct2t: eta)."),
    k: int = typer.Option(4, "--k", help="Tokens pooled per slot."),
    encoder: str = typer.Option("default", "--encoder", help="The client's encoder ('default': all-MiniLM-L6-v2)."),
    max_tokens: int = typer.Option(128, "--max-tokens", help="tokens: each text cut to this many of its tokens."),
    limit: int = typer.Option(300, "--limit", help="Evaluate at most this many texts (0: all)."),
    train_limit: int = typer.Option(600, "--train-limit", help="The attacker trains on at most this many (0: all)."),
    test_share: float = typer.Option(0.3, "--test-share", help="Share of the distinct texts evaluated."),
    validation: float = typer.Option(0.2, "--validation", help="Share of the attacker's texts kept to choose on."),
    epochs: int = typer.Option(60, "--epochs", help="Training epochs of each attribute attacker."),
    hidden: int = typer.Option(128, "--hidden", help="Width of the attackers' MLP (0: linear)."),
    attackers: str = typer.Option("mean,slots", "--attackers", help="mean, slots, mean_count, slots_count."),
    training: str = typer.Option("unaware,aware", "--training", help="unaware and/or aware."),
    curve: Optional[str] = typer.Option(
        None, "--curve", help="Validation-curve epochs below --epochs (default: a quarter and a half)."
    ),
    seed: str = typer.Option("0", "--seed", help="Seeds, comma-separated (each reruns the noise and attackers)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="Torch threads while the attacks run."),
    inverter: bool = typer.Option(False, "--inverter", help="slots: also train the slot-token inverter (minutes)."),
    inverter_epochs: int = typer.Option(4, "--inverter-epochs", help="Epochs of the slot-token inverter."),
    beside: Optional[Path] = typer.Option(
        None, "--beside", help="An attribute_inference result file whose figures are shown beside the audit's."
    ),
    out: Path = typer.Option(Path("report"), "--out", help="The report folder (report.md, figures, audit.json)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bars."),
) -> None:
    """Audit a mechanism on your own data: attribute inference (noise-unaware and aware, chosen on a validation part)
    beside the prior, clean-text, label and length references and the formal guarantee; token-level inversion where the
    release is per token; a report with figures and a result JSON."""
    from textfree.audit import AuditConfig, AuditError, run_audit
    from textfree.data import AttributeColumn, ColumnMap

    try:
        mapping = ColumnMap(
            text_column,
            tuple(AttributeColumn.parse(a) for a in attribute),
            label_column,
            pii_column,
            _names(columns),
        )
    except ValueError as exc:
        flag = (
            "--columns" if "column names" in str(exc) else "--attribute" if "attribute" in str(exc) else "--text-column"
        )
        _fail(f"{flag}: {exc}")
    try:
        config = AuditConfig(
            data=data,
            columns=mapping,
            out=out,
            split=split,
            mechanism=mechanism,
            release=release,
            epsilons=_numbers(epsilon, "--epsilon"),
            k=k,
            encoder=encoder,
            max_tokens=max_tokens,
            limit=limit or None,
            train_limit=train_limit or None,
            test_share=test_share,
            validation=validation,
            epochs=epochs,
            hidden=hidden,
            attackers=_names(attackers) or (),
            training=_names(training) or (),
            curve=None if curve is None else _numbers(curve, "--curve", int),
            seeds=_numbers(seed, "--seed", int),
            threads=threads,
            inverter=inverter,
            inverter_epochs=inverter_epochs,
            beside=beside,
        )
    except AuditError as exc:
        _fail(str(exc))
    try:
        with spinner("reading the data, loading the encoder ...", between="writing the report and its figures ...",
                     enabled=not quiet):  # fmt: skip
            _quiet_transformers()
            report = run_audit(config, progress=not quiet)
    except (ValueError, OSError) as exc:  # AuditError, DataError, CellError and the kinds' own checks: one line
        _fail(str(exc))
    console.print(f"wrote {report}")
