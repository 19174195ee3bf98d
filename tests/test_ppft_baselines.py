"""PPFT's word-level d_chi baseline (textfree.lm.dchi through the rapt_qa kind): what its client sends, its budget
alignment, the word-count controls (textfree.lm.text_controls) and the baselines table of docs/results/ppft.md."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from _result_files import write_result

from textfree.data import MCQARecord
from textfree.lm.dchi import fold_out_of_table, word_alignment
from textfree.lm.text_controls import length_controls, word_count
from textfree.lm.text_qa import private_parts
from textfree.substitution.embeddings import WordEmbeddingTable
from textfree.substitution.text import split_text, words_of

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"
#: Table words that occur in the fixture prompts (so some private words are in the table) and others that do not.
_TABLE_WORDS = ["the", "of", "a", "has", "history", "male", "female", "and", "symptoms", "presents", "is", "what"] + [
    f"filler{i}" for i in range(40)
] + ["unknown"]  # fmt: skip


def _glove_file(directory: Path, words=_TABLE_WORDS, dim: int = 6) -> Path:
    gen = torch.Generator().manual_seed(0)
    vectors = torch.randn(len(words), dim, generator=gen)
    path = directory / "tiny_glove.txt"
    path.write_text("".join(f"{w} {' '.join(f'{x:.5f}' for x in v.tolist())}\n" for w, v in zip(words, vectors)))
    return path


def _record(i: int, context: str, answer: str) -> MCQARecord:
    options = ["anemia", "gerd", "sarcoidosis", "panic attack"]
    return MCQARecord(f"r{i}", context, "What is the likely diagnosis?", options, options.index(answer))


def test_fold_out_of_table_keeps_the_layout_and_the_word_count(tmp_path):
    table = WordEmbeddingTable.from_glove(_glove_file(tmp_path))
    texts = ["A 46-year-old male has a history of pancreatitis, diabetes.", "", "The male."]
    folded = fold_out_of_table(texts, table, "unknown")
    assert (
        folded[0] == "A unknown unknown unknown unknown unknown male has a history of unknown unknown unknown unknown"
    )
    assert folded[1] == "" and folded[2] == "The male unknown"
    assert [word_count(t) for t in folded] == [word_count(t) for t in texts]
    for bad, message in (("fillerx", "not a word of the table"), ("two words", "must be one word"), ("", "one word")):
        with pytest.raises(ValueError, match=message):
            fold_out_of_table(texts, table, bad)


def test_word_alignment_is_the_papers_equation_6_in_words(tmp_path):
    table = WordEmbeddingTable.from_glove(_glove_file(tmp_path))
    texts = ["a b c d", "a, b."]  # 4 and 4 words (punctuation is a word: the mechanism releases it)
    row = word_alignment(texts, table, 150.0)
    assert row["n_max"] == 4 and row["at_n_max"]["d_max"] == pytest.approx(table.diameter())
    assert row["at_n_max"]["eps_dchi"] == pytest.approx(150.0 / (4 * table.diameter()))
    assert row["unit"].startswith("words")


def test_the_cells_eta_is_the_budget_aligned_one_for_the_shared_glove_table(shared_data):
    """examples/cells/ppft/ddx_baseline_dchi.yaml's eta = B / (n_max D_max) over Pri-DDX's test file (B = 150)."""
    import yaml

    from textfree.data import load_dataset

    glove = shared_data / "embeddings" / "glove_twitter_25d_12k.txt"
    if not glove.is_file():
        pytest.skip(f"{glove} not found")
    cell = yaml.safe_load((ROOT / "examples" / "cells" / "ppft" / "ddx_baseline_dchi.yaml").read_text())
    row = word_alignment(
        private_parts(load_dataset("pri-ddx", split="test")), WordEmbeddingTable.from_glove(glove), 150
    )
    assert row["n_max"] == 75
    assert cell["params"]["eta"] == pytest.approx(row["at_n_max"]["eps_dchi"], abs=5e-5)
    assert cell["params"]["pos"] is None and cell["params"]["oov_word"] == "unknown"


def test_the_dchi_client_sends_only_table_words_for_its_private_part_and_the_public_part_in_clear(
    tmp_path, monkeypatch
):
    """Every prompt that leaves the client, in training and in scoring, recorded at the server's door: its private
    part is words of the table only (each word privatized, none sent verbatim, the word count kept), then the
    instruction and the options exactly as the record has them: the paper's d_chi client."""
    from textfree.data import mcqa_prompt, open_answer_prompt, ppft_split
    from textfree.experiments import Cell, run_cell
    from textfree.lm.loading import make_tiny_decoder_dir
    from textfree.lm.text_qa import qa_prompt
    from textfree.rapt import generation
    from textfree.results.files import load_results

    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    decoder = make_tiny_decoder_dir(tmp_path / "decoder", hidden=32, layers=1, heads=2, seed=0)
    glove = _glove_file(tmp_path)
    sent: list[str] = []
    tune, answer = generation.tune_text_decoder, generation.answer_prompts
    monkeypatch.setattr(generation, "tune_text_decoder", lambda cfg, pairs, **kw: sent.extend(p.prompt for p in pairs)
                        or tune(cfg, pairs, **kw))  # fmt: skip
    monkeypatch.setattr(generation, "answer_prompts", lambda model, tok, prompts, **kw: sent.extend(prompts)
                        or answer(model, tok, prompts, **kw))  # fmt: skip
    cell = {"name": "dchi_test", "kind": "rapt_qa", "encoder": "default",
            "params": {"decoder": str(decoder), "table": f"glove:{glove}", "pos": None, "oov_word": "unknown",
                       "eta": 1e-3, "epochs": 1, "batch_size": 8, "eval_limit": 3, "max_new_tokens": 2,
                       "out": str(tmp_path / "runs")},
            "seeds": [0]}  # fmt: skip
    path = run_cell(Cell.from_dict(cell), tmp_path, progress=False)
    split = ppft_split("pri-ddx")
    train, heldout = split["train"], split["heldout"][:3]
    expected = [(r, build) for r in train for build in (mcqa_prompt,)] + [(r, open_answer_prompt) for r in train]
    expected += [(r, build) for build in (mcqa_prompt, open_answer_prompt) for r in heldout]
    assert len(sent) == len(expected)
    table = set(_TABLE_WORDS)
    for prompt, (record, build) in zip(sent, expected, strict=True):
        public = build(record).public
        released = prompt.split("\n")[0]
        assert prompt == qa_prompt(released, public)  # the public part (instruction, options) as it is, once
        words = words_of(split_text(released))
        original = words_of(split_text(build(record).private))
        assert len(words) == len(original) and set(words) <= table  # one table word per word, nothing else
        assert not {w.lower() for w in original if w.lower() not in table} & set(words)  # none sent verbatim
    row = {k: v["mean"] for k, v in load_results(path)["results"][0]["metrics"].items()}
    assert row["kept_rate"] == 0.0  # every word went through the mechanism
    assert row["mean_privatized_words"] == pytest.approx(sum(map(word_count, private_parts(heldout))) / len(heldout))
    assert row["epsilon_per_word"] == pytest.approx(1e-3 * WordEmbeddingTable.from_glove(glove).diameter())
    for name in ("length_mcqa", "length_open", "prior_mcqa", "prior_open"):
        assert 0.0 <= row[name] <= 1.0


def test_length_controls_answer_from_the_word_count_alone():
    short, long = "He is tired.", "He is tired and pale and short of breath today."
    train = [_record(0, short, "anemia"), _record(1, short, "anemia"), _record(2, long, "gerd")]
    train += [_record(3, long, "gerd"), _record(4, long, "gerd")]
    test = [_record(5, "She is pale.", "anemia"), _record(6, "She is pale and tired and short of breath now.", "gerd")]
    test += [_record(7, "A b c d e f g h i j k l m n o p q r s t u.", "anemia")]  # a count no training row has
    labels = ["anemia", "gerd", "sarcoidosis", "panic attack"]
    train_texts, test_texts = private_parts(train), private_parts(test)
    out = length_controls(train, train_texts, test, test_texts, labels)
    assert out["length"] == {"mcqa": pytest.approx(2 / 3), "open": pytest.approx(2 / 3)}  # the last: prior (gerd)
    assert out["prior"] == {"mcqa": pytest.approx(1 / 3), "open": pytest.approx(1 / 3)}  # gerd, the majority
    # the words themselves are never read: any text of the same word count answers the same
    scrambled = [" ".join(["x"] * word_count(t)) for t in test_texts]
    assert length_controls(train, train_texts, test, scrambled, labels) == out
    with pytest.raises(ValueError, match="2 train texts for 5 records"):
        length_controls(train, train_texts[:2], test, test_texts, labels)


_result = write_result


_CONTROLS = {"length_mcqa": 0.97, "length_open": 0.85, "prior_mcqa": 0.93, "prior_open": 0.42}


def _baseline_results(tmp_path: Path) -> tuple[Path, Path]:
    ppft, rapt = tmp_path / "ppft", tmp_path / "rapt"
    ppft.mkdir()
    rapt.mkdir()
    qa = {"decoder": "runs/fast/decoder", "dataset": "pri-ddx", "eval_limit": 300}
    dchi = qa | {"pos": None, "table": "glove:t.txt", "oov_word": "unknown"}
    _result(ppft, "ppft_ddx_baseline_dchi", "rapt_qa", dchi, [{"eta": 0.1296}], [
        {"mcqa": 0.90, "open": 0.80, "epsilon_per_word": 2.0, "mean_privatized_words": 51.0, "n_test": 300.0}
        | _CONTROLS], "2026-01-02T00:00:00+00:00")  # fmt: skip
    _result(ppft, "pipe", "ppft_pipeline", {"_dataset": "pri-ddx", "out": "runs/fast", "epsilon": 28, "k": 4}, [{}],
            [{"acc_mcqa": 0.957, "acc_open": 0.7938, "n_heldout": 582.0}], "2026-01-01T00:00:00+00:00")  # fmt: skip
    _result(rapt, "rapt_ddx_qa", "rapt_qa", qa | {"pos": "all"}, [{"eta": None}, {"eta": 0.698}], [
        {"mcqa": 0.95, "open": 0.95, "n_test": 300.0, "mean_privatized_words": 0.0} | _CONTROLS,
        {"mcqa": 0.857, "open": 0.86, "n_test": 300.0, "epsilon_per_word": 1.63, "mean_privatized_words": 46.1,
             "kept_rate": 0.103}
        | _CONTROLS], "2026-01-01T00:00:00+00:00")  # fmt: skip
    # the same pipeline timed later on a fresh clone: another decoder at the same path, never fine-tuned here
    clone = {"acc_mcqa": 0.111, "acc_open": 0.222, "n_heldout": 582.0}
    _result(ppft, "pipe_clone", "ppft_pipeline", {"_dataset": "pri-ddx", "out": "runs/fast", "epsilon": 28, "k": 4},
            [{}], [clone], "2026-01-01T05:00:00+00:00")  # fmt: skip
    (rapt / "matched_eta.json").write_text(json.dumps({"format": "textfree.rapt.matched_eta", "rows": []}))
    return ppft, rapt


def test_the_ppft_report_puts_the_baselines_beside_the_papers_1b_figures(tmp_path):
    from textfree.ppft.report import build_report

    ppft, rapt = _baseline_results(tmp_path)
    text = build_report([ppft, rapt])
    section = text.split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0]
    dchi = next(line for line in section.splitlines() if line.startswith("| d_chi"))
    assert "eta 0.1296 per unit distance: 2 per word, 102.0 per prompt" in dchi
    assert "| 0.9000 | 0.8000 | 0.3176 | 300 |" in dchi and "not run" in dchi
    assert "| Paraphrase (Utpala et al.) | not built | — | — | — | 0.2382 |" in section  # no paraphrase file here
    missing = "| PrivacyRestore (Zeng et al.) | not run (no `privacy_restore_qa` result on this decoder) | — | — | — |"
    assert missing + " 0.5150 |" in section
    assert "- Not judged (missing: Paraphrase, PrivacyRestore): PPFT ahead of all three." in section
    assert "| 0.9570 | 0.7938 | 0.4537 | 582 |" in section  # PPFT, the fast pipeline on the same decoder
    assert "0.1110" not in section  # not the later run of the same path elsewhere
    assert "| 0.9500 | 0.9500 | 0.7071 (PPFT w/o noise) | 300 |" in section  # the clear-text run on it
    assert "| 0.9700 | 0.8500 | — | 300 |" in section and "| 0.9300 | 0.4200 | — | 300 |" in section
    assert "- 4-option: PPFT ahead of d_chi (0.9570 vs 0.9000)." in section
    assert "d_chi's decoder scores 0.9000, below the options alone." in section
    assert "d_chi's decoder scores 0.8000:\n  between the two: above what no text gives, below what" in section
    assert "- open: not ahead of" not in section and "- open: PPFT not ahead of d_chi (0.7938 vs 0.8000)." in section
    assert "`ppft_ddx_baseline_dchi-2026-01-02.json`" in text and "`rapt_ddx_qa-2026-01-01.json`" in text
    alone = build_report([ppft])  # without results/rapt: no upper bound, and it says where it is
    assert "no clear-text `rapt_qa` run on `runs/fast/decoder` among the paths: pass results/rapt" in alone


def test_the_rapt_generation_section_shows_the_length_control_and_what_it_shows(tmp_path):
    from textfree.rapt.report_generation import Generation, generation_section

    _, rapt = _baseline_results(tmp_path)
    gen = Generation()
    gen.add(json.loads((rapt / "rapt_ddx_qa-2026-01-01.json").read_text()), "rapt_qa", "rapt_ddx_qa.json")
    dchi = tmp_path / "ppft" / "ppft_ddx_baseline_dchi-2026-01-02.json"
    gen.add(json.loads(dchi.read_text()), "rapt_qa", dchi.name)
    rerun = json.loads((rapt / "rapt_ddx_qa-2026-01-01.json").read_text()) | {"date": "2026-01-03T00:00:00+00:00"}
    gen.add(rerun, "rapt_qa", "rapt_ddx_qa-rerun.json")  # re-scored later: the PPFT run stays the first one's
    for f in ("pipe-2026-01-01.json", "pipe_clone-2026-01-01.json"):
        gen.add(json.loads((tmp_path / "ppft" / f).read_text()), "ppft_pipeline", f)
    text = "\n".join(generation_section(gen))
    assert ("| control: the word count and the options, no decoder | the released word count (every eta) | — | 97.0 "
            "| 85.0 | — | — | 300 |") in text  # fmt: skip
    assert "| control: the options alone (most frequent training answer), no decoder |" in text
    assert "at eta 0.698 the decoder's open-answer accuracy is 86.0" in text
    assert "gets 85.0 on the same rows: the released word count alone is enough to reach it (difference +1.0" in text
    assert "| control: the options alone (most frequent training answer), no decoder | nothing of the private" in text
    assert "| PPFT | slots at eps 28, k 4 | eps 56 per slot, composed over the slots | 95.7 | 79.4 |" in text
    assert [r["file"] for r in gen.qa if r["cell"] == "rapt_ddx_qa"] == ["rapt_ddx_qa-rerun.json"] * 2
    assert "also sends 10.3% of the private words verbatim" in text  # the reading is RAPT's, at its smallest eta
    assert "| word-level d_chi (T2T over glove:t.txt, every word privatized) | eta 0.1296 | 102.0 (2 per word x" in text
    assert "(eta 0.1296, every word\nprivatized, 0.0% verbatim, the same word count) scores 80.0 open and 90.0" in text
    assert not math.isnan(gen.qa[0]["length_open"])


def test_the_privacyrestore_row_shows_accuracy_attack_and_its_control_and_the_target_is_judged(tmp_path):
    from textfree.ppft.report import build_report
    from textfree.ppft.report.baselines import baseline_sources

    ppft, rapt = _baseline_results(tmp_path)
    qa = {"decoder": "runs/fast/decoder", "dataset": "pri-ddx", "eval_limit": 300}
    _result(ppft, "ppft_ddx_baseline_paraphrase", "rapt_qa", qa | {"privatizer": "paraphrase", "temperature": 1.49,
            "eta": None, "pos": None}, [{}], [{"mcqa": 0.41, "open": 0.15, "n_test": 300.0} | _CONTROLS],
            "2026-01-02T00:00:00+00:00")  # fmt: skip
    attack = {"rouge_l_prior": 0.64, "rouge_l": 0.71, "rouge_l_text_only": 0.69, "rouge_l_clean_meta": 0.86,
              "recall_symptoms": 0.42,
              "recall_antecedents": 0.36, "recall_symptoms_text_only": 0.21, "recall_antecedents_text_only": 0.18,
              "recall_symptoms_clean_meta": 0.68, "recall_antecedents_clean_meta": 0.81}  # fmt: skip
    _result(ppft, "ppft_ddx_baseline_privacyrestore", "privacy_restore_qa", qa | {"epsilon": 75.0, "heads": 4}, [{}],
            [{"mcqa": 0.96, "open": 0.70, "n_test": 300.0, "meta_dim": 256.0, "cos_released_clean": 0.29,
              "length_mcqa": 0.9, "length_open": 0.5} | attack], "2026-01-03T00:00:00+00:00")  # fmt: skip
    section = build_report([ppft, rapt]).split("### Pri-DDX: Baselines (Table 1)")[1].split("\n## ")[0]
    row = next(line for line in section.splitlines() if line.startswith("| PrivacyRestore"))
    assert "a 256-d meta vector" in row and "on 4 heads" in row and "mean cosine to the clean one 0.290" in row
    assert "eps 75 on one unit vector: 150 per prompt (eq. 3)" in row
    assert "| 0.9600 | 0.7000 | 0.5150 | 300 |" in row
    assert (
        "inversion ROUGE-L 0.710 (the masked text alone 0.690; the same attack on noiseless meta vectors 0.860; the "
        "best constant guess 0.640)" in row
    )
    assert "recall symptoms 0.420, antecedents 0.360 (text alone 0.210, 0.180; noiseless 0.680, 0.810)" in row
    assert "symptoms 0.3552, antecedents 0.3317, sex 0.5642" in row
    assert "| the word count of PrivacyRestore's masked text | — | 0.9000 | 0.5000 | — | 300 | — |" in section
    assert "- 4-option: PPFT not ahead of PrivacyRestore (0.9570 vs 0.9600)." in section
    assert "- open: PPFT ahead of PrivacyRestore (0.7938 vs 0.7000)." in section
    assert "- Target not met: PPFT is not ahead of d_chi open, PrivacyRestore 4-option." in section
    files = [f for f, _ in baseline_sources([ppft, rapt])]
    assert "ppft_ddx_baseline_privacyrestore-2026-01-03.json" in files


def test_the_target_line_when_ppft_leads_names_the_options_alone_reference():
    from textfree.ppft.report.baselines import _target

    class Pipe:
        def mean(self, name):
            return {"acc_mcqa": 0.9553, "acc_open": 0.7938}[name]

    rows = [
        {"mcqa": 0.77, "open": 0.59, "prior_mcqa": 0.9333},
        {"mcqa": 0.41, "open": 0.15},
        {"mcqa": 0.6, "open": 0.61},
    ]
    line = _target(*rows[:1], Pipe(), *rows[1:])
    assert line.startswith("- Target met: PPFT ahead of all three baselines on both tasks.")
    assert "the options alone give 0.9333: every baseline scores below that and PPFT +0.0220 above it" in line
    assert _target(rows[0], Pipe(), None, rows[2]) == "- Not judged (missing: Paraphrase): PPFT ahead of all three."
