"""The pipeline-time table of the PPFT report: one timed ``ppft_pipeline`` run, or composed from the stages' runs."""

from __future__ import annotations

import math
from typing import Sequence

from .entries import WIDTH_MATCHED, Entry, _latest

# PipelineConfig.stage2_epochs' default (not imported: the pipeline module pulls in the trainers; a test checks they
# agree)
PIPELINE_STAGE2_EPOCHS = 12


def _table_pipeline(pipe: Entry) -> list[str]:
    """The pipeline-time table of one ``ppft_pipeline`` run: every step timed in the same call."""
    p = pipe.params
    eps, k, epochs = p.get("epsilon", 28.0), p.get("k", 4), p.get("stage2_epochs", 12)
    parts = [
        (f"decoder pretraining ({p.get('preset', 'small')} preset)", "pretrain"),
        (f"stage 1 (alignment, {p.get('stage1_max_steps', 250)} steps)", "stage1"),
        (f"stage 2 ({pipe.dataset or 'pri-ddx'}, eps {eps:g}, k {k}, {epochs} epochs)", "stage2"),
        (
            "evaluation (held-out split, " + ", ".join(p.get("eval_tasks") or ["mcqa", "open"]) + ", one noise seed)",
            "evaluate",
        ),
    ]
    out = ["| step | wall time (s) |", "|---|---|"]
    for label, step in parts:
        secs = pipe.mean(f"{step}_wall_s")
        out.append(f"| {label} | {'—' if math.isnan(secs) else f'{secs:.0f}'} |")
    total = pipe.mean("total_wall_s")
    one_go = pipe.mean("measured_in_one_go") == 1.0
    out.append(
        f"| **total** | **{total:.0f}** ({total / 60:.1f} min; target < 60 min: "
        f"**{'met' if total < 3600 and one_go else 'NOT met'}**) |"
    )
    accuracy = "; ".join(f"{task} {pipe.mean(f'acc_{task}'):.4f}" for task in (p.get("eval_tasks") or ["mcqa", "open"]))
    out += [
        "",
        f"`textfree ppft train` (cell `{pipe.source}`), "
        + (
            "every step run in the same call"
            if one_go
            else "**some steps were reused from earlier runs** (their recorded times)"
        )
        + f"; its held-out accuracy (n = {pipe.mean('n_heldout'):.0f}): {accuracy}.",
    ]
    if pipe.values("n_prompts"):  # the hand-written prompts (tests/fixtures/ppft/handwritten_ddx.jsonl)
        tasks = p.get("eval_tasks") or ["mcqa", "open"]
        written = "; ".join(f"{task} {pipe.mean(f'prompts_acc_{task}'):.4f}" for task in tasks)
        out[-1] += (
            f" On {pipe.mean('n_prompts'):.0f} prompts written by hand (`{p.get('eval_prompts')}`: other wording, "
            f"every diagnosis, never trained on), at the same noise: {written}."
        )
    return out


def _cell_of(entry: Entry) -> str:
    """The cell name of a result file (``<cell>-<time>.json``)."""
    return entry.source.rsplit("-", 1)[0]


def _other_pipelines(pipe: Sequence[Entry]) -> list[str]:
    """One row per other ``ppft_pipeline`` cell (its newest run): its settings, time and accuracies."""
    newest: dict[str, Entry] = {}
    for e in pipe:
        newest[_cell_of(e)] = e
    rows = []
    for cell, e in sorted(newest.items()):
        p = e.params
        total, one_go = e.mean("total_wall_s"), e.mean("measured_in_one_go") == 1.0
        written = (
            f"{e.mean('prompts_acc_mcqa'):.4f} / {e.mean('prompts_acc_open'):.4f}" if e.values("n_prompts") else "—"
        )
        rows.append(
            f"| `{cell}` | {p.get('pretrain_steps') or 'preset'} / {p.get('stage1_max_steps', 250)} / "
            f"{p.get('stage2_epochs', PIPELINE_STAGE2_EPOCHS)}"
            + (f", prompt variants {p['stage2_prompt_variants']:g}" if p.get("stage2_prompt_variants") else "")
            + f" | {total / 60:.1f} min{'' if one_go else ' (steps reused: their recorded times)'} | "
            f"{e.mean('acc_mcqa'):.4f} / {e.mean('acc_open'):.4f} | {written} |"
        )
    if not rows:
        return []
    return [
        "",
        "Other pipeline settings (newest run of each cell; times of steps run while other jobs shared the cores are "
        "not the pipeline's time on an idle machine):",
        "",
        "| cell | pretraining steps / stage-1 steps / stage-2 epochs | total | held-out 4-option / open | hand-written "
        "4-option / open |",
        "|---|---|---|---|---|",
    ] + rows


def _table_time(entries: Sequence[Entry]) -> list[str]:
    pipe = [e for e in entries if e.kind == "ppft_pipeline"]
    if pipe:
        default = [e for e in pipe if _cell_of(e) == "ppft_pipeline"] or pipe
        return _table_pipeline(default[-1]) + _other_pipelines([e for e in pipe if e not in default])
    pre = _latest([e for e in entries if e.kind == "ppft_pretrain"])
    s1 = _latest([e for e in entries if e.kind == "ppft_stage1"])
    # stage 2 as the pipeline runs it: PPFT's settings at its default length (a longer run is not the pipeline's time)
    s2 = _latest(
        [e for e in entries if e.kind == "ppft_stage2"],
        dataset="pri-ddx",
        family="l2_laplace",
        epsilon=WIDTH_MATCHED,
        k=4,
        epochs=PIPELINE_STAGE2_EPOCHS,
    )
    if not (pre or s1 or s2):
        return []
    parts = [
        ("decoder pretraining (small preset)", pre.mean("wall_s") if pre else math.nan, pre),
        ("stage 1 (alignment)", s1.mean("train_wall_s") if s1 else math.nan, s1),
        (
            f"stage 2 (Pri-DDX, eps 28, k 4, {PIPELINE_STAGE2_EPOCHS} epochs)",
            s2.mean("train_wall_s") if s2 else math.nan,
            s2,
        ),
        (
            "evaluation (Pri-DDX held-out, the cell's tasks, one noise seed; mean over seeds)",
            s2.mean("eval_wall_s") if s2 else math.nan,
            None,
        ),
    ]
    out = ["| step | wall time (s) | note |", "|---|---|---|"]
    total = 0.0
    for label, secs, e in parts:
        reused = e is not None and e.mean("reused") == 1.0  # evaluation (e None) is always measured afresh
        out.append(
            f"| {label} | {'—' if math.isnan(secs) else f'{secs:.0f}'} | "
            f"{'recorded by the run the cell reused' if reused else ''} |"
        )
        total += 0.0 if math.isnan(secs) else secs
    missing = [label.split(" (")[0] for label, secs, _ in parts if math.isnan(secs)]
    if missing:  # a sum over some steps is no pipeline time
        out.append(
            f"| **total** | — | not measured: no {', no '.join(missing)} in these result files; the steps above add up "
            f"to {total:.0f} s |"
        )
    else:
        out.append(f"| **total** | **{total:.0f}** ({total / 60:.1f} min; target < 60 min) | |")
    return out
