"""The PPFT-vs-RAPT section of docs/results/rapt.md: RAPT for generation (``rapt_qa`` result files) beside PPFT's
pipeline on the same local decoder (the ``ppft_pipeline`` result file whose ``out`` holds that decoder), Pri-DDX's
held-out records and the hand-written prompts, with the word-count controls each ``rapt_qa`` run scored (does
the released word count alone carry the diagnosis?). Nothing is recomputed; PPFT's file is read as JSON (no PPFT
code)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["QA_KIND", "PIPELINE_KIND", "Generation", "generation_section"]

QA_KIND = "rapt_qa"
PIPELINE_KIND = "ppft_pipeline"


@dataclass
class Generation:
    """The newest ``rapt_qa`` rows (one per grid point) and every ``ppft_pipeline`` run, as plain dicts;
    ``first_dates``: the date of the oldest file of each ``rapt_qa`` cell seen (a newer file of a cell re-runs it on
    the same decoder: a finished run is re-scored, not retrained)."""

    qa: list[dict[str, Any]] = field(default_factory=list)
    pipelines: list[dict[str, Any]] = field(default_factory=list)
    first_dates: dict[str, str] = field(default_factory=dict)

    def add(self, data: dict[str, Any], kind: str, file: str = "") -> None:
        rows = [
            {"cell": data["cell"]["name"], "date": data["date"], "file": file, "params": r["resolved"]["params"]}
            | {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
            for r in data["results"]
        ]
        target = self.qa if kind == QA_KIND else self.pipelines
        if kind == QA_KIND:  # the newest file of a cell replaces an older one
            name = data["cell"]["name"]
            if name not in self.first_dates or _seconds(data["date"]) < _seconds(self.first_dates[name]):
                self.first_dates[name] = data["date"]
            if any(r["cell"] == name and r["date"] > data["date"] for r in target):
                return
            target[:] = [r for r in target if r["cell"] != name]
        target.extend(rows)

    def pipeline_for(self, decoder: str | None) -> dict[str, Any] | None:
        """The pipeline run whose decoder is ``decoder`` (``<out>/decoder``) and whose date is nearest the first
        text run on it (a path names no build: a run of the same settings elsewhere, e.g. a fresh clone timing the
        pipeline, built another decoder at the same relative path; the RAPT cell runs on the decoder just built, and a
        later file of a cell re-scores its finished runs on that decoder)."""
        if not decoder or not self.qa:
            return None
        same = [p for p in self.pipelines if Path(str(p["params"].get("out", ""))) / "decoder" == Path(decoder)]
        on_it = [r for r in self.qa if r["params"].get("decoder") == decoder] or self.qa
        when = min(_seconds(self.first_dates.get(r["cell"], r["date"])) for r in on_it)
        return min(same, key=lambda p: abs(_seconds(p["date"]) - when), default=None)


def _seconds(date: str) -> float:
    return datetime.fromisoformat(date).timestamp()


def _pct(value: Any) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _eta_label(eta: Any) -> str:
    return "clear text (no privatization)" if eta is None else f"eta {eta:g}"


def _row_label(row: dict[str, Any]) -> str:
    """A ``rapt_qa`` row's release: its eta, or the paraphrase at its temperature (PPFT's Paraphrase baseline)."""
    if row["params"].get("privatizer") == "paraphrase":
        tau = row["params"].get("temperature")
        return "paraphrase" + ("" if tau is None else f" at tau {tau:g}")
    return _eta_label(row["params"].get("eta"))


def _plain_label(params: dict[str, Any]) -> str:
    """ ", m plain tokens + reconstruction head" (RAPT's +Reconstruction row), ", m plain tokens, no head" (Table VIII's
    ablation) or "" (the PCT2T row)."""
    m = params.get("plain_length") or 0
    if not m:
        return ""
    weight = params.get("rec_weight", 1.0)
    kind = " + reconstruction head" if params.get("reconstruction") else ", no head"
    if params.get("reconstruction") and weight != 1.0:
        kind += f" (loss weight {weight:g})"
    return f", {m} plain tokens{kind}"


def generation_section(gen: Generation) -> list[str]:
    lines = ["## PPFT and RAPT on one decoder (Pri-DDX, generation)", ""]
    if not gen.qa:
        return lines + ["No `rapt_qa` result files given (`examples/cells/rapt/ddx_qa.yaml`)."]
    decoder = gen.qa[0]["params"].get("decoder")
    lines += [
        f"The local decoder `{decoder}` fine-tuned two ways on PPFT's Pri-DDX training rows: PPFT (the client sends",
        "k-pooled, noised MiniLM slots; stage 1 + stage 2 of the pipeline) and RAPT (the client sends its prompt as",
        "PCT2T text, every category privatized as the paper's section IV-B asks for clinical text; LoRA on the text).",
        "The options of the 4-option task are public and sent in clear by both. Accuracy in %; *hand-written*: the",
        "48 prompts of `tests/fixtures/ppft/handwritten_ddx.jsonl` (other wording, every diagnosis, never trained on).",
        "Budget: `textfree account --dataset pri-ddx --split test --budget 150` aligns B = 150 per prompt with PPFT's",
        "eps 75 at the paper's width (28 at MiniLM's) and with a word-level d_chi eps of 0.698 (its binding row);",
        "RAPT's eta 62.7 is the eta whose word-replacement rate on MiniLM's table matches the paper's eta 125.",
        "Controls (no decoder; `textfree.lm.text_controls`, on the same released texts and rows): the answer most",
        "frequent among the training rows of the same released word count, and the most frequent training answer.",
        "",
        "| system | privatization | per-prompt loss (mean) | 4-option | open | 4-option, hand-written | open, "
        "hand-written | held-out n |",
        "|---|---|---|---|---|---|---|---|",
    ]
    pipe = gen.pipeline_for(decoder)
    if pipe is not None:
        p = pipe["params"]
        lines.append(
            f"| PPFT | slots at eps {p.get('epsilon', 28):g}, k {p.get('k', 4)} | eps {2 * p.get('epsilon', 28):g} "
            f"per slot, composed over the slots | {_pct(pipe.get('acc_mcqa'))} | {_pct(pipe.get('acc_open'))} | "
            f"{_pct(pipe.get('prompts_acc_mcqa'))} | {_pct(pipe.get('prompts_acc_open'))} | "
            f"{pipe.get('n_heldout') or 0:.0f} |"
        )
    else:
        lines.append(f"| PPFT | — (no `ppft_pipeline` result file whose decoder is `{decoder}`) | | | | | | |")
    for row in sorted(gen.qa, key=lambda r: -math.inf if r["params"].get("eta") is None else -r["params"]["eta"]):
        eta, per_word = row["params"].get("eta"), row.get("epsilon_per_word")
        words = row.get("mean_privatized_words") or 0.0
        loss = (
            "none (not private)" if eta is None else f"{per_word * words:.1f} ({per_word:.3g} per word x {words:.1f})"
        )
        scores = " | ".join(_pct(row.get(m)) for m in ("mcqa", "open", "prompts_mcqa", "prompts_open"))
        if row["params"].get("privatizer") == "paraphrase":  # PPFT's Paraphrase baseline: no eta, not clear text
            tau = row["params"].get("temperature")
            where = "tau 2n/B" if tau is None else f"tau {tau:g}"
            lines.append(f"| Paraphrase (the client's paraphraser) | {where} | no formal guarantee | {scores} | "
                         f"{row.get('n_test') or 0:.0f} |")  # fmt: skip
            continue
        pos = row["params"].get("pos", "all")
        table = row["params"].get("table") or "the encoder's table"
        system = f"RAPT (PCT2T {pos}{_plain_label(row['params'])})" if pos else f"T2T over {table}"
        if not pos and row["params"].get("oov_word"):
            system = f"word-level d_chi (T2T over {table}, every word privatized)"
        lines.append(f"| {system} | {_eta_label(eta)} | {loss} | {scores} | {row.get('n_test') or 0:.0f} |")
    return (
        lines
        + _control_rows(gen.qa)
        + [
            "",
            "PPFT's per-slot loss composes over a prompt's ceil(tokens / 4) slots, RAPT's per-word loss over its",
            "privatized words: the two are metric-DP losses of different units, aligned only through the budget B "
            "above.",
        ]
        + _control_reading(gen.qa)
    )


#: The word-count controls of a ``rapt_qa`` row (textfree.lm.text_controls): (metric stem, row label, what it reads).
_CONTROLS = (
    ("length", "control: the word count and the options, no decoder", "the released word count"),
    ("prior", "control: the options alone (most frequent training answer), no decoder", "nothing of the private part"),
)


def _control_rows(qa: list[dict[str, Any]]) -> list[str]:
    """One row per control: its figures are the same at every eta (T2T / PCT2T keep the word count), so one row;
    a row per eta if they differ."""
    lines = []
    for stem, label, reads in _CONTROLS:
        values = {}
        for row in qa:
            pair = (row.get(f"{stem}_mcqa"), row.get(f"{stem}_open"))
            if pair[0] is not None and not math.isnan(pair[0]):
                values.setdefault(pair, []).append(row)
        for (mcqa, open_), rows in values.items():
            same_everywhere = len(values) == 1 and not any(r["params"].get("privatizer") == "paraphrase" for r in rows)
            where = "every eta" if same_everywhere else ", ".join(dict.fromkeys(_row_label(r) for r in rows))
            lines.append(f"| {label} | {reads} ({where}) | — | {_pct(mcqa)} | {_pct(open_)} | — | — | "
                         f"{rows[0].get('n_test') or 0:.0f} |")  # fmt: skip
    return lines


def _control_reading(qa: list[dict[str, Any]]) -> list[str]:
    """What the length-only control shows at RAPT's smallest eta, from the figures (and, when a word-level d_chi run
    on the same decoder is among the rows, what it scores with the same word count and no verbatim word)."""
    private = [
        r
        for r in qa
        if r["params"].get("pos") and r["params"].get("eta") is not None and r.get("length_open") is not None
    ]
    if not private:
        return []
    row = min(private, key=lambda r: r["params"]["eta"])
    length, prior = row["length_open"], row.get("prior_mcqa")
    if any(v is None or math.isnan(v) for v in (length, prior, row.get("open"))):
        return []
    gap = row["open"] - length
    verdict = (
        "the released word count alone is enough to reach it"
        if abs(gap) <= 0.05
        else ("the text carries more than its word count" if gap > 0 else "the decoder does not use all of it")
    )
    kept = row.get("kept_rate")
    verbatim = (
        []
        if kept is None or math.isnan(kept) or kept == 0
        else [
            f"The same release also sends {100 * kept:.1f}% of the private words verbatim (words outside the word",
            "table go through no mechanism), which can carry the diagnosis as well: the control bounds what the count",
            "alone gives, it does not say which of the two the decoder uses.",
        ]
    )
    dchi = [r for r in qa if not r["params"].get("pos") and r["params"].get("oov_word") and r.get("open") is not None]
    if dchi:
        d = min(dchi, key=lambda r: r["params"]["eta"])
        verbatim += [
            f"The word-level d_chi baseline on the same decoder and rows ({_eta_label(d['params']['eta'])}, every word",
            f"privatized, {100 * (d.get('kept_rate') or 0.0):.1f}% verbatim, the same word count) scores "
            f"{_pct(d.get('open'))} open and {_pct(d.get('mcqa'))} 4-option.",
        ]
    return [
        "",
        f"Length-only control: at {_eta_label(row['params']['eta'])} the decoder's open-answer accuracy is "
        f"{_pct(row['open'])}; a classifier that sees only the released private part's word count (T2T and PCT2T",
        f"keep it exactly) gets {_pct(length)} on the same rows: {verdict} (difference {100 * gap:+.1f} points).",
        *verbatim,
        f"On the 4-option task the options alone give {_pct(prior)} (the gold answer is nearly always the most",
        "frequent training diagnosis among the four), so that column cannot tell a private client from a blind one.",
    ]
