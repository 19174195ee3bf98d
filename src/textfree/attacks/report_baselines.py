"""The attacks report's section on PPFT's Table 1 baselines (Pri-DDX): the learned text inverter against the
Paraphrase client (``text_inversion`` files) and the attack on PrivacyRestore's release (the attack figures of the
``privacy_restore_qa`` files, when their folder is among the report's paths), beside the paper's Table 3. The d_chi
client's rows are the ``substitution_dchi`` and ``attributes_ddx_dchi`` sections. Files are read as JSON only."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

from .report_payloads import PayloadCell, collect_kind

__all__ = ["BASELINE_KINDS", "PAPER_TABLE3", "baselines_section"]

BASELINE_KINDS = ("text_inversion", "privacy_restore_qa")
#: PPFT paper, Table 3 (Pri-DDX): reconstruction of each attribute; age: "-" for PrivacyRestore.
PAPER_TABLE3 = {"PrivacyRestore": {"sex": 0.5642, "symptoms": 0.3552, "antecedents": 0.3317},
                "PPFT": {"age": 0.0071, "sex": 0.5894, "symptoms": 0.1001, "antecedents": 0.0115}}  # fmt: skip


def _f(cell: PayloadCell, name: str) -> str:
    values = [p.mean(name) for _, p in cell.points]
    v = values[0] if values else math.nan
    return "—" if math.isnan(v) else f"{v:.3f}"


def _n(cell: PayloadCell) -> str:
    values = [p.mean("n_test") for _, p in cell.points]
    return "—" if not values or math.isnan(values[0]) else f"{values[0]:.0f}"


def _paraphrase_rows(cell: PayloadCell) -> list[str]:
    params = cell.cell.get("params") or {}
    what = (f"learned inverter (local decoder + LoRA, {params.get('epochs', '—')} epochs on the attacker's own "
            f"paraphrases of the training rows) at tau {params.get('temperature', '—')}")  # fmt: skip
    rows = []
    for label, suffix in ((what, ""), ("the paraphrase read as it is", "_released"), ("best constant guess", "_prior")):
        figures = " | ".join(_f(cell, f"{m}{suffix}") for m in ("rouge_l", "recall_symptoms", "recall_antecedents",
                                                                 "age_accuracy", "sex_accuracy"))  # fmt: skip
        rows.append(f"| Paraphrase | {label} | {figures} | {_n(cell)} | `{cell.source}` |")
    return rows


def _restore_rows(cell: PayloadCell) -> list[str]:
    params = cell.cell.get("params") or {}
    eps = params.get("epsilon", "—")
    rows = []
    for label, suffix in ((f"matched filter on the meta vector (eps {eps}) + the masked text", ""),
                          ("the masked text alone", "_text_only"),
                          ("the same attack on noiseless meta vectors", "_clean_meta")):  # fmt: skip
        figures = f"{_f(cell, f'rouge_l{suffix}')} | {_f(cell, f'recall_symptoms{suffix}')} | " + _f(
            cell, f"recall_antecedents{suffix}"
        )
        rows.append(f"| PrivacyRestore | {label} | {figures} | sent in clear | sent in clear | "
                    f"{_n(cell)} | `{cell.source}` |")  # fmt: skip
    rows.append(f"| PrivacyRestore | best constant guess | {_f(cell, 'rouge_l_prior')} | — | — | — | — | "
                f"{_n(cell)} | `{cell.source}` |")  # fmt: skip
    return rows


def baselines_section(paths: Iterable[str | Path]) -> list[str]:
    """Markdown lines of the section; [] when ``paths`` hold neither kind."""
    paths = list(paths)
    para = [c for c in collect_kind(paths, "text_inversion") if (c.cell.get("params") or {}).get("privatizer",
            "paraphrase") == "paraphrase"]  # fmt: skip
    restore = collect_kind(paths, "privacy_restore_qa")
    if not para and not restore:
        return []
    paper = PAPER_TABLE3
    lines = [
        "## Attacks on PPFT's Table 1 baselines (Pri-DDX)",
        "",
        "What an attacker recovers of the private part from what each baseline's server receives: ROUGE-L against the",
        "private part, recall of the record's symptoms and antecedents among the names the reconstruction states, its",
        "age and sex. Every attacker is read against the best constant guess (the medoid training prompt: Pri-DDX",
        "prompts share a template). The d_chi client's rows are the `substitution_dchi` and `attributes_ddx_dchi`",
        "sections above. Paper (Table 3, a GPT2-medium attacker): PrivacyRestore symptoms "
        f"{paper['PrivacyRestore']['symptoms']}, antecedents {paper['PrivacyRestore']['antecedents']}, sex "
        f"{paper['PrivacyRestore']['sex']}; PPFT symptoms {paper['PPFT']['symptoms']}, antecedents "
        f"{paper['PPFT']['antecedents']}, age {paper['PPFT']['age']}, sex {paper['PPFT']['sex']}.",
        "",
        "| client | attacker | ROUGE-L | symptoms recall | antecedents recall | age | sex | n | file |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for cell in para:
        lines += _paraphrase_rows(cell)
    for cell in restore:
        lines += _restore_rows(cell)
    return lines + [""]
