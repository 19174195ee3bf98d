"""The audit's Markdown report: every attribute verdict beside its references and the composed formal guarantee,
with the notes that say where a figure is weaker than it looks; then token-level inversion and the learned inverter
where they ran. Built from the result files alone (:mod:`.verdicts`); nothing is recomputed here."""

from __future__ import annotations

import math
from typing import Any, Sequence

from .config import AuditConfig
from .verdicts import UNIT_EPSILONS, Verdict

__all__ = ["markdown"]

_READING = """How to read a verdict: the attacker of each attribute is **chosen on a validation part** of the
attacker's own texts (never on the evaluated ones) and its score on the evaluated texts is printed
with its binomial standard error. Beside it: the **prior** (the majority class, or the labels in
more than half of the training rows: what an attacker gets with no input), the **clean-text**
reference (TF-IDF + logistic regression on the *unprivatized* text: whether the text carries the
attribute at all), the **label** reference (what the task's answer alone reveals, where the data has
one) and the **length** reference (what the number of released units alone reveals). *Excess* is the
chosen attacker's score minus the larger of the prior and the label reference: the leak the
mechanism is responsible for. The formal guarantee is the loss of one released unit and its
composition over a prompt's units (mean and maximum over the evaluated prompts)."""


def _f(x: float, digits: int = 3) -> str:
    return "–" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _guarantee(v: Verdict) -> str:
    for key, unit in UNIT_EPSILONS:
        if key in v.guarantee:
            mean, top = (v.guarantee.get(k, math.nan) for k in ("prompt_epsilon", "prompt_epsilon_max"))
            return (
                f"one {unit}: eps {v.guarantee[key]:.3g}; a prompt composes its {unit}s: mean eps {mean:.4g}, "
                f"max {top:.4g}"
            )
    return "no formal guarantee recorded"


def _verdict_table(rows: Sequence[Verdict], beside: bool) -> list[str]:
    head = "| attribute (score) | chosen on validation | evaluated ± se | validation | prior | clean text | label "
    head += "| length | excess |"
    rule = "|---|---|---|---|---|---|---|---|---|"
    if beside:
        head += " built-in cell (prior) |"
        rule += "---|"
    lines = [head, rule]
    for v in rows:
        val = v.values
        line = (
            f"| {v.metric} | {v.chosen.replace('_', ' ')} | **{_f(val['best'])}** ± {_f(v.stderr)} "
            f"| {_f(val['best_val'])} | {_f(val['prior'])} | {_f(val['clean'])} | {_f(val['label'])} "
            f"| {_f(val['length'])} | {_f(val['excess'])} |"
        )
        if beside:
            line += f" {_f(v.beside['best']) if v.beside else '–'} ({_f(v.beside['prior']) if v.beside else '–'}) |"
        lines.append(line)
    notes = [f"* {v.metric}: {n}" for v in rows for n in v.notes]
    return lines + (["", "Notes beside these figures:", "", *notes] if notes else [])


def _attacker_table(rows: Sequence[Verdict]) -> list[str]:
    names = list(rows[0].attackers) if rows else []
    lines = [
        "| attribute (score) | " + " | ".join(n.replace("_", " ") for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for v in rows:
        cells = [f"{_f(v.attackers[n][0])} / {_f(v.attackers[n][1])}" for n in names]
        lines.append(f"| {v.metric} | " + " | ".join(cells) + " |")
    return lines


def _sizes(rows: Sequence[Verdict], dropped: float) -> str:
    if not rows:
        return ""
    v = rows[0]
    return (
        f"Sizes: the attacker trains on {v.n_train} texts and is chosen on {v.n_validation} validation texts; "
        f"{v.n_test} texts are evaluated"
        + (f"; {int(dropped)} rows dropped for an empty attribute" if dropped else "")
        + "."
    )


def _beside_line(items: Sequence[Verdict], name: str) -> str:
    there = next((v.beside for v in items if v.beside), None)
    if there is None:
        return f"Beside: `{name}`: no grid value in common with this audit."
    sizes = f"{there['n_train']:.0f} training texts, {there['n_test']:.0f} evaluated"
    if not math.isnan(there.get("n_validation", math.nan)):
        sizes += f", {there['n_validation']:.0f} validation"
    chosen = (
        "its attacker chosen on its validation part"
        if there.get("chosen_on_validation")
        else "its best attacker chosen on its own evaluated prompts (a file written before the validation part)"
    )
    return f"Beside: `{name}` (its own data parts: {sizes}; {chosen})."


def markdown(
    config: AuditConfig,
    items: Sequence[Verdict],
    *,
    x_name: str,
    figures: dict[str, str],
    meta: dict[str, Any],
    tokens: dict[str, Any] | None,
    inverter: dict[str, Any] | None,
    beside_name: str | None,
) -> str:
    """The report: setup, verdicts per grid value, per-attacker figures, token inversion, inverter, files."""
    git = (meta.get("git") or {}).get("commit") or "unknown"
    c = config
    lines = [
        f"# Privacy audit of `{c.data}`",
        "",
        f"{meta['date']} · textfree {meta['versions'].get('textfree')} · git {git[:10]}"
        + (" (uncommitted changes)" if (meta.get("git") or {}).get("dirty") else "")
        + f" · seeds {list(c.seeds)} · {meta['elapsed_s']:.0f} s",
        "",
        f"* text column `{c.columns.text}`; attributes "
        + ", ".join(f"`{a.spec()}`" for a in c.columns.attributes)
        + (f"; label column `{c.columns.label}`" if c.columns.label else "")
        + (f"; PII column `{c.columns.pii}`" if c.columns.pii else ""),
        f"* mechanism `{c.mechanism}`"
        + (f", release `{c.release}`" if c.mechanism == "l2_laplace" else "")
        + f", {x_name} {', '.join(f'{e:g}' for e in c.epsilons)}, k {c.k}, encoder `{c.encoder}`",
        f"* attackers {', '.join(c.attackers)} x {', '.join(c.training)}, {c.epochs} epochs (validation curve at "
        f"{', '.join(map(str, c.curve or ())) or 'none'}), hidden {c.hidden}; the attacker trains on at most "
        f"{c.train_limit or 'all'} texts, {c.validation:.0%} of its texts kept for validation; "
        f"{c.test_share:.0%} of the distinct texts evaluated (at most {c.limit or 'all'})",
        "",
        f"```bash\n{config.command()}\n```",
        "",
        _READING,
        "",
        "## Attribute inference",
        "",
        _sizes(items, meta.get("n_dropped", 0)),
    ]
    if beside_name:
        lines += ["", _beside_line(items, beside_name)]
    for x in sorted({v.x for v in items}):
        rows = [v for v in items if v.x == x]
        lines += ["", f"### {x_name} {x:g}", "", f"Formal guarantee: {_guarantee(rows[0])}.", ""]
        lines += _verdict_table(rows, beside_name is not None)
    for key, title in (("attributes", "Scores over the grid"), ("curves", "Validation curves")):
        if key in figures:
            lines += ["", f"![{title}]({figures[key]})"]
    lines += ["", "### Every attacker: evaluated / validation score (full epochs)"]
    for x in sorted({v.x for v in items}):
        lines += ["", f"{x_name} {x:g}:", "", *_attacker_table([v for v in items if v.x == x])]
    lines += ["", "## Token-level inversion", ""]
    if tokens is None:
        lines.append(
            "Not run: the release is not per token (pooled slots or text); the learned inverter below reads slots."
        )
    else:
        lines += [
            "| " + x_name + " | NN (L2) | NN (cosine) | PII units found (exact) | token eps |",
            "|---|---|---|---|---|",
        ]
        for row in tokens["rows"]:
            lines.append(
                f"| {row['x']:g} | {_f(row.get('recovery_nn_l2'))} | {_f(row.get('recovery_nn_cosine'))} | "
                f"{_f(row.get('pii_exact_nn_best'))} | {_f(row.get('token_epsilon'), 4)} |"
            )
        if "tokens" in figures:
            lines += ["", f"![token inversion]({figures['tokens']})"]
        if not c.columns.pii:
            lines += ["", "PII recovery: not run (map the PII strings of each text with --pii-column)."]
    lines += ["", "## Learned inverter", ""]
    if inverter is None:
        lines.append(
            "Not run. `--inverter` trains the slot-token classifier (no decoder; a few minutes on a CPU for a few "
            "hundred texts) on the attacker's texts and scores its reconstructions of the evaluated payloads."
        )
    else:
        lines += [
            f"The slot-token classifier (no decoder; width {inverter['hidden']}, {inverter['epochs']} epochs), trained "
            f"noise-aware at each epsilon on {inverter['n_train']} of the attacker's texts, reading the payloads of "
            f"{inverter['n_eval']} evaluated texts; the prior guess is the medoid of the attacker's texts.",
            "",
            f"| {x_name} | ROUGE-L | ROUGE-L of the prior guess | PII units found |",
            "|---|---|---|---|",
        ]
        for row in inverter["rows"]:
            lines.append(
                f"| {row['x']:g} | {_f(row['rouge_l'])} | {_f(row['rouge_l_prior'])} | {_f(row.get('pii_exact'))} |"
            )
    lines += [
        "",
        "## Files",
        "",
        *[f"* `{path}`: the `{name}` cell's result file" for name, path in meta["results"].items()],
        "* `audit.json`: config, versions, git, host, seeds, date, every verdict",
    ]
    return "\n".join(lines) + "\n"
