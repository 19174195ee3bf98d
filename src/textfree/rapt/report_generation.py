"""The PPFT-vs-RAPT section of docs/results/rapt.md: RAPT for generation (``rapt_qa`` result files) beside PPFT's
pipeline on the same local decoder (the ``ppft_pipeline`` result file whose ``out`` holds that decoder), Pri-DDX's
held-out records and the hand-written prompts. Nothing is recomputed; PPFT's file is read as JSON (no PPFT code)."""

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
    """The newest ``rapt_qa`` rows (one per grid point) and every ``ppft_pipeline`` run, as plain dicts."""

    qa: list[dict[str, Any]] = field(default_factory=list)
    pipelines: list[dict[str, Any]] = field(default_factory=list)

    def add(self, data: dict[str, Any], kind: str, file: str = "") -> None:
        rows = [
            {"cell": data["cell"]["name"], "date": data["date"], "file": file, "params": r["resolved"]["params"]}
            | {k: (v or {}).get("mean") for k, v in r["metrics"].items()}
            for r in data["results"]
        ]
        target = self.qa if kind == QA_KIND else self.pipelines
        if kind == QA_KIND:  # the newest file of a cell replaces an older one
            name = data["cell"]["name"]
            if any(r["cell"] == name and r["date"] > data["date"] for r in target):
                return
            target[:] = [r for r in target if r["cell"] != name]
        target.extend(rows)

    def pipeline_for(self, decoder: str | None) -> dict[str, Any] | None:
        """The pipeline run whose decoder is ``decoder`` (``<out>/decoder``) and whose date is nearest the RAPT
        runs' (a path names no build: a run of the same settings elsewhere, e.g. a fresh clone timing the pipeline,
        built another decoder at the same relative path; the RAPT cell runs on the decoder just built)."""
        if not decoder or not self.qa:
            return None
        same = [p for p in self.pipelines if Path(str(p["params"].get("out", ""))) / "decoder" == Path(decoder)]
        when = _seconds(self.qa[0]["date"])
        return min(same, key=lambda p: abs(_seconds(p["date"]) - when), default=None)


def _seconds(date: str) -> float:
    return datetime.fromisoformat(date).timestamp()


def _pct(value: Any) -> str:
    return "—" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{100 * value:.1f}"


def _eta_label(eta: Any) -> str:
    return "clear text (no privatization)" if eta is None else f"eta {eta:g}"


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
        pos = row["params"].get("pos", "all")
        lines.append(f"| RAPT (PCT2T {pos}) | {_eta_label(eta)} | {loss} | {scores} | {row.get('n_test') or 0:.0f} |")
    return lines + [
        "",
        "PPFT's per-slot loss composes over a prompt's ceil(tokens / 4) slots, RAPT's per-word loss over its",
        "privatized words: the two are metric-DP losses of different units, aligned only through the budget B above.",
    ]
