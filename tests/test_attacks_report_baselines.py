"""The attacks report's section on PPFT's Table 1 baselines (textfree.attacks.report_baselines)."""

from __future__ import annotations

import json
from pathlib import Path

from _result_files import write_result


def _with_cell_params(path: Path, params: dict) -> None:
    """A real result file carries the cell's params (the minimal writer leaves them empty)."""
    data = json.loads(path.read_text())
    data["cell"]["params"] = params
    path.write_text(json.dumps(data))


def test_the_baselines_section_puts_each_attacker_beside_the_constant_guess_and_the_paper(tmp_path):
    from textfree.attacks.report import build_report

    attacks, ppft = tmp_path / "attacks", tmp_path / "ppft"
    attacks.mkdir()
    ppft.mkdir()
    scores = {"rouge_l": 0.61, "recall_symptoms": 0.12, "recall_antecedents": 0.05, "age_accuracy": 0.2,
              "sex_accuracy": 0.6, "rouge_l_released": 0.2, "recall_symptoms_released": 0.03,
              "recall_antecedents_released": 0.01, "age_accuracy_released": 0.0, "sex_accuracy_released": 0.1,
              "rouge_l_prior": 0.64, "recall_symptoms_prior": 0.1, "recall_antecedents_prior": 0.0,
              "age_accuracy_prior": 0.01, "sex_accuracy_prior": 0.5, "n_test": 300.0}  # fmt: skip
    write_result(attacks, "paraphrase_ddx", "text_inversion", {"_dataset": None, "privatizer": "paraphrase",
                 "temperature": 1.4933, "epochs": 4}, [{}], [scores], "2026-01-01T00:00:00+00:00")  # fmt: skip
    restore = {"rouge_l": 0.70, "rouge_l_text_only": 0.69, "rouge_l_clean_meta": 0.86, "rouge_l_prior": 0.64,
               "recall_symptoms": 0.42, "recall_antecedents": 0.36, "recall_symptoms_text_only": 0.21,
               "recall_antecedents_text_only": 0.18, "recall_symptoms_clean_meta": 0.68,
               "recall_antecedents_clean_meta": 0.81, "n_test": 300.0}  # fmt: skip
    _with_cell_params(attacks / "paraphrase_ddx-2026-01-01.json", {"privatizer": "paraphrase", "temperature": 1.4933,
                                                                  "epochs": 4})  # fmt: skip
    write_result(ppft, "ppft_ddx_baseline_privacyrestore", "privacy_restore_qa", {"epsilon": 75.0}, [{}], [restore],
                 "2026-01-02T00:00:00+00:00")  # fmt: skip
    _with_cell_params(ppft / "ppft_ddx_baseline_privacyrestore-2026-01-02.json", {"epsilon": 75.0})
    text = build_report([attacks, ppft])
    section = text.split("## Attacks on PPFT's Table 1 baselines (Pri-DDX)")[1].split("\n## ")[0]
    assert "| Paraphrase | learned inverter (local decoder + LoRA, 4 epochs on the attacker's own paraphrases of the " \
           "training rows) at tau 1.4933 | 0.610 | 0.120 | 0.050 | 0.200 | 0.600 | 300 |" in section  # fmt: skip
    assert "| Paraphrase | the paraphrase read as it is | 0.200 | 0.030 | 0.010 | 0.000 | 0.100 | 300 |" in section
    assert "| Paraphrase | best constant guess | 0.640 | 0.100 | 0.000 | 0.010 | 0.500 | 300 |" in section
    restore_row = "| PrivacyRestore | matched filter on the meta vector (eps 75.0) + the masked text | 0.700 | 0.420 "
    assert restore_row + "| 0.360 | sent in clear | sent in clear | 300 |" in section
    assert "| PrivacyRestore | the same attack on noiseless meta vectors | 0.860 | 0.680 | 0.810 |" in section
    assert "PrivacyRestore symptoms 0.3552, antecedents 0.3317, sex 0.5642" in section
    alone = build_report([attacks])  # without results/ppft: the paraphrase rows only
    assert "| Paraphrase |" in alone and "| PrivacyRestore |" not in alone
