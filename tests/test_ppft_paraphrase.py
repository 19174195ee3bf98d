"""PPFT's Paraphrase baseline (textfree.lm.paraphrase through the rapt_qa kind, privatizer paraphrase): what its client
sends, the temperature rule, the paraphraser's training pairs and a tiny end-to-end run (no downloads)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from textfree.data import PairRecord
from textfree.lm.paraphrase import INSTRUCTION, paraphrase_prompt, qqp_pairs, split_sentences, temperature_for_budget
from textfree.lm.text_qa import private_parts

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"


def test_temperature_rule_is_the_papers_equation_7():
    assert temperature_for_budget(106, 150) == pytest.approx(1.4133, abs=1e-4)  # Table 7, Pri-DDX
    assert temperature_for_budget(72, 150) == pytest.approx(0.96)  # Pri-NLICE
    with pytest.raises(ValueError):
        temperature_for_budget(0, 150)


def test_the_cells_temperature_is_2n_over_b_with_n_the_longest_private_part_in_the_paraphrasers_tokens(shared_data):
    import yaml

    from textfree.data import load_dataset
    from textfree.lm.loading import load_decoder_tokenizer

    cell = yaml.safe_load((ROOT / "examples" / "cells" / "ppft" / "ddx_baseline_paraphrase.yaml").read_text())
    # the cell's tau is eq. 7 at the n its comment states (112 tokens of the paraphraser's tokenizer)
    assert cell["params"]["temperature"] == pytest.approx(temperature_for_budget(112, 150), abs=5e-5)
    assert cell["params"]["privatizer"] == "paraphrase" and cell["params"]["eta"] is None
    decoder = ROOT / "runs" / "pipeline-fast" / "decoder"
    if not decoder.is_dir():  # n needs the local decoder's tokenizer (textfree ppft train --out runs/pipeline-fast)
        pytest.skip(f"{decoder} not built: the cell's tau is checked, its n = 112 is not recounted")
    tok = load_decoder_tokenizer(decoder)
    n = max(len(tok(t, add_special_tokens=False).input_ids) for t in private_parts(load_dataset("pri-ddx", "test")))
    assert n == 112


def test_qqp_pairs_are_training_part_duplicates_in_both_directions():
    from textfree.data.tasks import qqp_is_test

    records = [PairRecord(str(i), f"question {i} one?", f"question {i} two?", i % 2) for i in range(200)]
    pairs = qqp_pairs(20, seed=3, records=records)
    assert len(pairs) == 20 and pairs == qqp_pairs(20, seed=3, records=records)
    ids = set()
    for p in pairs:
        assert p.prompt.startswith(INSTRUCTION + "\n") and p.prompt.endswith("\n")
        q = p.prompt.split("\n")[1]
        i = int(q.split()[1])
        ids.add(i)
        assert i % 2 == 1 and not qqp_is_test(str(i))  # duplicates of the training part only
        assert {q, p.answer} == {f"question {i} one?", f"question {i} two?"}
    directed = {(p.prompt.split("\n")[1], p.answer) for p in pairs}
    assert all((b, a) in directed for a, b in directed)  # both directions of each pair
    assert len(ids) == 10


def test_split_sentences():
    text = "A 46-year-old male has a history of x, y. He presents cough. What is the likely diagnosis?"
    assert split_sentences(text) == ["A 46-year-old male has a history of x, y.", "He presents cough.",
                                     "What is the likely diagnosis?"]  # fmt: skip
    assert split_sentences("  ") == [] and paraphrase_prompt(" Hi. ") == f"{INSTRUCTION}\nHi.\n"


def test_paraphrase_samples_at_the_temperature_and_does_not_depend_on_the_batch(tmp_path):
    from textfree.lm.loading import load_decoder, make_tiny_decoder_dir
    from textfree.lm.paraphrase import paraphrase

    model, tok = load_decoder(make_tiny_decoder_dir(tmp_path / "d", hidden=32, layers=1, heads=2, seed=0))
    texts = ["He is tired. She is pale.", "", "A cough."]
    one = paraphrase(model, tok, texts, temperature=1.5, generator=torch.Generator().manual_seed(1), batch_size=1)
    many = paraphrase(model, tok, texts, temperature=1.5, generator=torch.Generator().manual_seed(1), batch_size=8)
    assert one == many and one[1] == ""
    other = paraphrase(model, tok, texts, temperature=1.5, generator=torch.Generator().manual_seed(2))
    assert other != one
    with pytest.raises(ValueError, match="temperature"):
        paraphrase(model, tok, texts, temperature=0.0, generator=torch.Generator())


def test_the_paraphrase_client_sends_only_paraphrases_and_the_public_part_in_clear(tmp_path, monkeypatch):
    """Every prompt that leaves the client, in training and in scoring, recorded at the server's door: its private
    part is exactly what the paraphraser sampled (at the cell's temperature, from the record's private part, sentence
    by sentence) and nothing else, then the instruction and the options exactly as the record has them: the paper's
    Paraphrase client. The paraphraser is a tiny decoder trained here on a tiny QQP-like set, then reused."""
    from textfree.data import mcqa_prompt, open_answer_prompt, ppft_split
    from textfree.experiments import Cell, run_cell
    from textfree.lm import paraphrase as para
    from textfree.lm.loading import make_tiny_decoder_dir
    from textfree.lm.text_qa import qa_prompt
    from textfree.rapt import generation
    from textfree.results.files import load_results

    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    decoder = make_tiny_decoder_dir(tmp_path / "decoder", hidden=32, layers=1, heads=2, seed=0)
    qqp = [PairRecord(str(i), f"how do i learn topic {i}?", f"what is the best way to learn topic {i}?", 1)
           for i in range(40)]  # fmt: skip
    real_load = para.load_or_train_paraphraser
    monkeypatch.setattr(para, "load_or_train_paraphraser", lambda *a, **kw: real_load(*a, **kw, records=qqp))
    calls: list[tuple[list[str], float, list[str]]] = []  # (inputs, temperature, outputs) of every paraphrase call
    real_paraphrase = para.paraphrase

    def recording(model, tok, texts, *, temperature, generator, **kw):
        out = real_paraphrase(model, tok, texts, temperature=temperature, generator=generator, **kw)
        calls.append((list(texts), temperature, out))
        return out

    monkeypatch.setattr(para, "paraphrase", recording)
    sent: list[str] = []
    tune, answer = generation.tune_text_decoder, generation.answer_prompts
    monkeypatch.setattr(generation, "tune_text_decoder", lambda cfg, pairs, **kw: sent.extend(p.prompt for p in pairs)
                        or tune(cfg, pairs, **kw))  # fmt: skip
    monkeypatch.setattr(generation, "answer_prompts", lambda model, tok, prompts, **kw: sent.extend(prompts)
                        or answer(model, tok, prompts, **kw))  # fmt: skip
    params = {"decoder": str(decoder), "privatizer": "paraphrase", "temperature": 1.25, "eta": None, "pos": None,
              "paraphraser_pairs": 16, "paraphraser_out": str(tmp_path / "paraphraser"), "epochs": 1,
              "batch_size": 8, "eval_limit": 3, "max_new_tokens": 2, "out": str(tmp_path / "runs")}  # fmt: skip
    cell = {"name": "paraphrase_test", "kind": "rapt_qa", "encoder": "default", "params": params, "seeds": [0]}
    path = run_cell(Cell.from_dict(cell), tmp_path, progress=False)
    split = ppft_split("pri-ddx")
    train, heldout = split["train"], split["heldout"][:3]
    assert [c[0] for c in calls] == [private_parts(train), private_parts(heldout)]  # the private parts, nothing else
    assert all(c[1] == 1.25 for c in calls)
    train_sent, test_sent = calls[0][2], calls[1][2]
    expected = [(r, s, b) for b in (mcqa_prompt, open_answer_prompt) for r, s in zip(train, train_sent)]
    expected += [(r, s, b) for b in (mcqa_prompt, open_answer_prompt) for r, s in zip(heldout, test_sent)]
    assert len(sent) == len(expected)
    for prompt, (record, released, build) in zip(sent, expected, strict=True):
        assert prompt == qa_prompt(released, build(record).public)  # the paraphrase, then the public part as it is
        assert build(record).private not in prompt
    runs = list((tmp_path / "paraphraser").iterdir())
    assert len(runs) == 1 and (runs[0] / "paraphraser.json").is_file()  # trained once, saved, reused next time
    row = {k: v["mean"] for k, v in load_results(path)["results"][0]["metrics"].items()}
    assert row["epsilon_per_word"] == pytest.approx(2 / 1.25) and row["kept_rate"] == 0.0
    assert 0.0 <= row["mcqa"] <= 1.0 and row["n_test"] == len(heldout)


def test_the_ppft_report_fills_the_paraphrase_row_and_keeps_it_out_of_the_upper_bound(tmp_path):
    from test_ppft_baselines import _baseline_results, _result

    from textfree.ppft.report import build_report

    ppft, rapt = _baseline_results(tmp_path)
    qa = {"decoder": "runs/fast/decoder", "dataset": "pri-ddx", "eval_limit": 300, "privatizer": "paraphrase",
          "temperature": 1.4933, "eta": None, "pos": None, "paraphraser_pairs": 2000}  # fmt: skip
    _result(ppft, "ppft_ddx_baseline_paraphrase", "rapt_qa", qa, [{}], [
        {"mcqa": 0.61, "open": 0.33, "prompts_mcqa": 0.5, "prompts_open": 0.25, "epsilon_per_word": 2 / 1.4933,
         "n_test": 300.0, "length_mcqa": 0.9, "length_open": 0.4, "prior_mcqa": 0.93,
         "prior_open": 0.42}], "2026-01-03T00:00:00+00:00")  # fmt: skip
    text = build_report([ppft, rapt])
    section = text.split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| Paraphrase"))
    assert "sampled at tau 1.4933" in row and "2000 directed QQP training-part duplicate pairs" in row
    assert "n = 112 tokens): proxy 1.34 per sampled token" in row
    assert row.endswith("| 0.6100 | 0.3300 | 0.2382 | 300 | inversion ROUGE-L, attribute recall: not run |")
    assert "| 0.9500 | 0.9500 | 0.7071 (PPFT w/o noise) | 300 |" in section  # the upper bound is still clear text
    assert "| control: the paraphrase's word count and the options, no decoder |" in section
    assert "| 0.9000 | 0.4000 | — | 300 | — |" in section
    assert "- 4-option: PPFT ahead of Paraphrase (0.9570 vs 0.6100)." in section
    assert (
        "- Paraphrase on the hand-written prompts (paraphrased the same way): 0.5000 4-option, 0.2500 open." in section
    )
    assert "- Not judged (missing: PrivacyRestore): PPFT ahead of all three." in section
    verdict = "- Paraphrase's decoder scores 0.6100 4-option (below the options alone, 0.9300) and 0.3300 open (below"
    assert verdict in section
    assert "`ppft_ddx_baseline_paraphrase-2026-01-03.json`" in text


def test_the_paraphrase_row_carries_the_learned_inverters_figures(tmp_path):
    from test_ppft_baselines import _baseline_results, _result

    from textfree.ppft.report import build_report

    ppft, rapt = _baseline_results(tmp_path)
    attacks = tmp_path / "attacks"
    attacks.mkdir()
    qa = {"decoder": "runs/fast/decoder", "dataset": "pri-ddx", "eval_limit": 300, "privatizer": "paraphrase",
          "temperature": 1.4933, "eta": None, "pos": None, "paraphraser_pairs": 2000}  # fmt: skip
    _result(ppft, "ppft_ddx_baseline_paraphrase", "rapt_qa", qa, [{}], [{"mcqa": 0.61, "open": 0.33, "n_test": 300.0}],
            "2026-01-03T00:00:00+00:00")  # fmt: skip
    figures = {"rouge_l": 0.55, "rouge_l_released": 0.2, "rouge_l_prior": 0.68, "recall_symptoms": 0.11,
               "recall_symptoms_released": 0.02, "recall_symptoms_prior": 0.09, "sex_accuracy": 0.7}  # fmt: skip
    for name, tau, value in (("paraphrase_ddx", 1.4933, figures), ("paraphrase_other_tau", 0.5, {"rouge_l": 0.99})):
        _result(attacks, name, "text_inversion", {"privatizer": "paraphrase", "temperature": tau}, [{}], [value],
                "2026-01-04T00:00:00+00:00")  # fmt: skip
    section = build_report([ppft, rapt, attacks]).split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| Paraphrase"))
    expected = (
        "learned inverter (`paraphrase_ddx-2026-01-04.json`): inversion ROUGE-L 0.550 (paraphrase as it is "
        "0.200, constant guess 0.680); symptoms recall 0.110 (paraphrase as it is 0.020, constant guess 0.090)"
    )
    assert expected in row
    assert "0.990" not in row  # the cell at another temperature attacks another client
