"""docs/results/rapt.md from synthetic result files: Table II with the paper's rows at matched etas, the targets'
verdicts (worked out by hand below), Table VIII, the matched-eta and NER sections, and refusal of an empty folder."""

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.rapt.report import build_report, collect, write_report
from textfree.results.files import ResultsError


def _result(directory, name, kind, base, points, metric_rows, cell=None, date="2026-01-01T00:00:00+00:00"):
    """A result file in the runner's format: ``points`` [{param: value}], ``metric_rows`` [{metric: mean}]; ``cell``:
    more cell fields (the dataset), ``date``: the run's (the file name follows it)."""
    axes = sorted({k for p in points for k in p})
    grid = {f"params.{a}": list(dict.fromkeys(p[a] for p in points)) for a in axes}
    results = [{"point": {f"params.{k}": v for k, v in p.items()}, "resolved": {"mechanism": None,
                "params": base | p, "attack": None}, "metrics": {m: {"mean": v, "stderr": None, "values": [v]}
                for m, v in mr.items()}} for p, mr in zip(points, metric_rows)]  # fmt: skip
    data = {"format": "textfree.results", "format_version": 1, "cell": {"name": name, "kind": kind,
            "encoder": "default", "params": base, "grid": grid, "seeds": [0]}, "cell_source": None, "kind": kind,
            "grid_axes": list(grid), "seeds": [0], "results": results, "versions": {}, "git": None,
            "date": date, "host": {}}  # fmt: skip
    data["cell"] |= cell or {}
    stamp = date[:19].replace("-", "").replace(":", "")
    (Path(directory) / f"{name}-{stamp}Z.json").write_text(json.dumps(data))


def _results(directory, rapt_accs=(0.60, 0.75, 0.85)):
    etas = [38.0, 62.7, 85.5]
    lora = {"task": "sst2", "method": "lora"}
    _result(
        directory,
        "t2t",
        "rapt_finetune",
        lora | {"pos": None, "plain_length": 0, "reconstruction": False},
        [{"eta": None}] + [{"eta": e} for e in etas],
        [{"acc": a} for a in (0.90, 0.52, 0.60, 0.70)],
    )
    _result(
        directory,
        "pct2t",
        "rapt_finetune",
        lora | {"pos": "default", "plain_length": 0, "reconstruction": False},
        [{"eta": e} for e in etas],
        [{"acc": a} for a in (0.55, 0.70, 0.80)],
    )
    _result(
        directory,
        "rapt",
        "rapt_finetune",
        lora | {"pos": "default", "plain_length": 40},
        [{"eta": None}] + [{"eta": e} for e in etas],
        [{"acc": a} for a in (0.91, *rapt_accs)],
    )
    _result(
        directory,
        "norec",
        "rapt_finetune",
        lora | {"pos": "default", "plain_length": 40, "reconstruction": False},
        [{"eta": 62.7}],
        [{"acc": 0.65}],
    )
    rows = [
        {"mechanism": "pct2t", "paper_eta": p, "paper_rate": r, "rate_at_paper_eta": 0.1, "matched_eta": e}
        for p, r, e in ((75, 0.85, 38.0), (125, 0.45, 62.7), (150, 0.14, 85.5))
    ]
    (Path(directory) / "matched_eta.json").write_text(
        json.dumps({"format": "textfree.rapt.matched_eta", "table": "default", "sentences": 872, "rows": rows})
    )
    return directory


def test_tables_and_verdicts(tmp_path):
    res = collect([_results(tmp_path)])
    text = build_report(res)
    # Table II: our rows, the paper's rows at the matched etas (paper 75 / 125 / 150 and inf)
    assert "| row | eta 38 (paper 75) | eta 62.7 (paper 125) | eta 85.5 (paper 150) | eta = inf |" in text
    assert "| +T2T | 52.0 | 60.0 | 70.0 | 90.0 |" in text
    assert "| +PCT2T | 55.0 | 70.0 | 80.0 | 90.0 |" in text  # no privatization: PCT2T is T2T
    assert "| +Reconstruction (RAPT) | 60.0 | 75.0 | 85.0 | 91.0 |" in text
    assert "| *paper, BERT-base: +T2T* | 53.1 | 68.9 | 76.9 | 91.4 |" in text
    # ordering holds at every eta: met; gain over T2T at eta 62.7 (paper 125): 75 - 60 = +15.0 >= +12.2: met
    assert "T2T < PCT2T < +Reconstruction at every eta | eta 38: 52.0 / 55.0 / 60.0" in text
    assert "| +15.0 points | +12.2 (BERT-base) | met |" in text
    # at eta 38 (paper 75): 60 - 52 = +8.0 >= 62.4 - 53.1 = +9.3? no: not met
    assert "| +8.0 points | +9.3 (BERT-base) | not met |" in text
    # Table VIII at 62.7: RAPT 75 > without plain tokens (PCT2T) 70 > without reconstruction 65: met
    assert "| 75.0 / 70.0 / 65.0 | 85.1 / 82.7 / 80.8 (Qwen2.5-3B, eta 75) | met |" in text
    assert "## eta across embedding tables (Table III)" in text and "No `ner_attack` result files" in text


def test_ordering_broken_is_not_met(tmp_path):
    text = build_report(collect([_results(tmp_path, rapt_accs=(0.60, 0.69, 0.85))]))
    assert "at every eta | eta 38: 52.0 / 55.0 / 60.0; eta 62.7: 60.0 / 70.0 / 69.0" in text
    line = next(l for l in text.splitlines() if "at every eta" in l)
    assert line.endswith("| not met |")


def test_write_report_cli_and_refusal(tmp_path):
    from textfree.cli import app

    (tmp_path / "results").mkdir()
    directory = _results(tmp_path / "results")
    out = tmp_path / "docs" / "rapt.md"
    r = CliRunner().invoke(app, ["rapt", "report", str(directory), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (
        out.read_text().startswith("# RAPT: results") and (tmp_path / "docs" / "rapt" / "acc.png").stat().st_size > 1000
    )
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ResultsError, match="no rapt_finetune result files"):
        write_report([empty], tmp_path / "x.md")
    assert not (tmp_path / "x.md").exists()


def test_plain_length_rows_stay_out_of_table_ii(tmp_path):
    directory = _results(tmp_path)
    base = {"task": "sst2", "method": "lora", "pos": "default"}
    _result(
        directory,
        "plainlen",
        "rapt_finetune",
        base,
        [{"eta": 62.7, "plain_length": m} for m in (5, 80)],
        [{"acc": 0.71}, {"acc": 0.78}],
    )
    text = build_report(collect([directory]))
    assert "| +Reconstruction (RAPT) | 60.0 | 75.0 | 85.0 | 91.0 |" in text  # the 40-token row, unchanged
    section = text[text.index("## Plain-token length") :]
    for m, acc in ((0, "70.0"), (5, "71.0"), (40, "75.0"), (80, "78.0")):
        assert f"| sst2 LoRA, eta 62.7 (paper 125) | {m} | {acc} |" in section


def test_runs_at_another_training_size_stay_out_of_the_tables_and_fill_the_budget_section(tmp_path):
    directory = _results(tmp_path)
    base = {"task": "sst2", "method": "lora", "pos": "default", "plain_length": 40, "eta": 62.7, "train_limit": 1600}
    _result(
        directory, "budget", "rapt_finetune", base, [{"reconstruction": r} for r in (False, True)],
        [{"acc": 0.70}, {"acc": 0.66}],
    )  # fmt: skip
    text = build_report(collect([directory]))
    assert "| +Reconstruction (RAPT) | 60.0 | 75.0 | 85.0 | 91.0 |" in text  # the 800-example rows, unchanged
    assert "| 75.0 / 70.0 / 65.0 | 85.1 / 82.7 / 80.8 (Qwen2.5-3B, eta 75) | met |" in text
    section = text[text.index("## Training budget") : text.index("## Plain-token length")]
    # 800 examples: RAPT 75.0 against 65.0 without the loss (+10.0), 200 steps; 1,600: 66.0 against 70.0 (-4.0)
    assert (
        "| sst2 LoRA, eta 62.7 (paper 125) | 800 (84x fewer than the paper's) | 200 | 65.0 | 75.0 | +10.0 |" in section
    )
    assert (
        "| sst2 LoRA, eta 62.7 (paper 125) | 1,600 (42x fewer than the paper's) | 400 | 70.0 | 66.0 | -4.0 |" in section
    )
    (tmp_path / "plain").mkdir()
    assert "No budget cell given" in build_report(collect([_results(tmp_path / "plain")]))


def test_the_papers_eta_used_unchanged_is_its_own_column_without_the_papers_figure(tmp_path):
    directory = _results(tmp_path)
    lora = {"task": "sst2", "method": "lora", "plain_length": 0, "reconstruction": False}
    _result(directory, "literal", "rapt_finetune", lora | {"pos": None}, [{"eta": 125}], [{"acc": 0.88}])
    text = build_report(collect([directory]))
    header = "| row | eta 38 (paper 75) | eta 62.7 (paper 125) | eta 85.5 (paper 150) |"
    assert header + " eta 125 (the paper's value itself) | eta = inf |" in text
    assert "| +T2T | 52.0 | 60.0 | 70.0 | 88.0 | 90.0 |" in text
    assert "| *paper, BERT-base: +T2T* | 53.1 | 68.9 | 76.9 | — | 91.4 |" in text


def test_several_seeds_show_their_mean_and_standard_deviation(tmp_path):
    directory = _results(tmp_path)
    for name in ("t2t", "pct2t", "rapt"):
        f = next(directory.glob(f"{name}-*.json"))
        data = json.loads(f.read_text())
        data["seeds"] = data["cell"]["seeds"] = [0, 1, 2]
        for r in data["results"]:
            acc = r["metrics"]["acc"]
            acc["values"] = [acc["mean"] - 0.01, acc["mean"], acc["mean"] + 0.01]
        f.write_text(json.dumps(data))
    text = build_report(collect([directory]))
    assert "| +Reconstruction (RAPT) | 60.0 ± 1.0 | 75.0 ± 1.0 | 85.0 ± 1.0 | 91.0 ± 1.0 |" in text
    assert "eta 38: 52.0 / 55.0 / 60.0 (mean of 3 seeds)" in text
    assert "| 75.0 / 70.0 / 65.0 |" in text  # the verdicts read the means


def test_generation_section_puts_ppft_beside_rapt_on_the_same_decoder(tmp_path):
    _results(tmp_path)
    qa = {"decoder": "runs/fast/decoder", "pos": "all", "dataset": "pri-ddx"}
    rows = [
        {"mcqa": 0.9, "open": 0.6, "prompts_mcqa": 0.5, "prompts_open": 0.25, "epsilon_per_word": math.nan,
         "mean_privatized_words": 0.0, "n_test": 300.0},
        {"mcqa": 0.4, "open": 0.3, "prompts_mcqa": 0.3, "prompts_open": 0.1, "epsilon_per_word": 2.0,
         "mean_privatized_words": 50.0, "n_test": 300.0},
    ]  # fmt: skip
    _result(tmp_path, "qa", "rapt_qa", qa, [{"eta": None}, {"eta": 0.7}], rows)
    for name, rec in (("qa_rapt", True), ("qa_plain", False)):  # +Reconstruction and Table VIII's ablation
        _result(tmp_path, name, "rapt_qa", qa | {"plain_length": 40, "reconstruction": rec}, [{"eta": 0.7}], rows[1:])
    _result(tmp_path, "qa_rapt_mean", "rapt_qa", qa | {"plain_length": 40, "reconstruction": True, "rec_weight": 0.025},
            [{"eta": 0.7}], rows[1:])  # fmt: skip
    pipe = {"out": "runs/fast", "epsilon": 28, "k": 4}
    _result(tmp_path, "pipe", "ppft_pipeline", pipe, [{}], [{"acc_mcqa": 0.95, "acc_open": 0.8, "n_heldout": 582.0,
            "prompts_acc_mcqa": 0.7, "prompts_acc_open": 0.4}])  # fmt: skip
    _result(tmp_path, "other", "ppft_pipeline", {"out": "runs/other"}, [{}], [{"acc_mcqa": 0.1}])
    later = json.loads((tmp_path / "pipe-20260101T000000Z.json").read_text())  # the same path, built elsewhere later
    later["date"], later["results"][0]["metrics"]["acc_mcqa"]["mean"] = "2026-03-01T00:00:00+00:00", 0.11
    (tmp_path / "pipe-20260301T000000Z.json").write_text(json.dumps(later))
    text = build_report(collect([tmp_path]))
    section = text.split("## PPFT and RAPT on one decoder")[1]
    assert (
        "| PPFT | slots at eps 28, k 4 | eps 56 per slot, composed over the slots | 95.0 | 80.0 | 70.0 | 40.0 | 582 |"
        in section
    )
    assert "| RAPT (PCT2T all) | eta 0.7 | 100.0 (2 per word x 50.0) | 40.0 | 30.0 | 30.0 | 10.0 | 300 |" in section
    assert "| RAPT (PCT2T all, 40 plain tokens + reconstruction head) | eta 0.7 | 100.0 (2 per word" in section
    assert "| RAPT (PCT2T all, 40 plain tokens, no head) | eta 0.7 |" in section
    assert "| RAPT (PCT2T all, 40 plain tokens + reconstruction head (loss weight 0.025)) | eta 0.7 |" in section
    assert (
        "| RAPT (PCT2T all) | clear text (no privatization) | none (not private) | 90.0 | 60.0 | 50.0 | 25.0 |"
        in section
    )
    assert "`pipe-20260101T000000Z.json`" in text and "other-20260101T000000Z" not in text  # only the PPFT run used
    assert "pipe-20260301T000000Z" not in text and "| 11.0 |" not in section  # the run nearest the RAPT cell's date


def test_generation_section_never_calls_the_paraphrase_baseline_clear_text(tmp_path):
    _results(tmp_path)
    qa = {"decoder": "runs/fast/decoder", "pos": None, "dataset": "pri-ddx", "privatizer": "paraphrase",
          "temperature": 1.49}  # fmt: skip
    row = {"mcqa": 0.41, "open": 0.15, "prompts_mcqa": 0.08, "prompts_open": 0.06, "epsilon_per_word": math.nan,
           "mean_privatized_words": 0.0, "n_test": 300.0, "length_mcqa": 0.93, "length_open": 0.5}  # fmt: skip
    _result(tmp_path, "para", "rapt_qa", qa, [{"eta": None}], [row])
    section = build_report(collect([tmp_path])).split("## PPFT and RAPT on one decoder")[1]
    assert (
        "| Paraphrase (the client's paraphraser) | tau 1.49 | no formal guarantee | 41.0 | 15.0 | 8.0 | 6.0 | 300 |"
        in (section)
    )
    assert "(paraphrase at tau 1.49)" in section and "clear text" not in section


# ------------------------------------------------------------------------------------------------ Fig. 6 (POS sets)
def _pos_results(directory):
    """The Table II cells (T2T and PCT2T replaced by runs at eta inf / 62.7 only), a POS-set cell at eta 62.7 (NOUN,
    DET, every category) and a NER cell over the same sets; the default-set and T2T runs carry no release figures
    (older runs): their shares come from their privatized words per sentence over the POS cell's words per sentence
    (20)."""
    _results(directory)
    _result(directory, "t2t", "rapt_finetune", {"task": "sst2", "method": "lora", "pos": None, "plain_length": 0,
            "reconstruction": False}, [{"eta": None}, {"eta": 62.7}],
            [{"acc": 0.90, "mean_privatized_words": 0.0, "seconds": 300.0},
             {"acc": 0.60, "mean_privatized_words": 18.0, "seconds": 360.0}])  # fmt: skip
    _result(directory, "pct2t", "rapt_finetune", {"task": "sst2", "method": "lora", "pos": "default",
            "plain_length": 0, "reconstruction": False}, [{"eta": 62.7}],
            [{"acc": 0.70, "mean_privatized_words": 10.0, "seconds": 330.0}])  # fmt: skip
    rows = [
        {"acc": 0.78, "privatized_share": 0.20, "replaced_share": 0.10, "mean_words": 20.0, "seconds": 420.0},
        {"acc": 0.85, "privatized_share": 0.10, "replaced_share": 0.03, "mean_words": 20.0, "seconds": 390.0},
        {"acc": 0.62, "privatized_share": 0.93, "replaced_share": 0.35, "mean_words": 20.0, "seconds": 450.0},
    ]
    base = {"task": "sst2", "method": "lora", "eta": 62.7, "plain_length": 0, "reconstruction": False}
    _result(directory, "pos", "rapt_finetune", base, [{"pos": p} for p in ("noun", "det", "all")], rows)
    ner = [
        {"entity_survival": s, "empirical_privacy": e, "clean_empirical_privacy": 0.46}
        for s, e in ((0.70, 0.62), (0.80, 0.55), (0.95, 0.47), (0.75, 0.58), (0.60, 0.66))
    ]
    points = [{"pos": p} for p in (None, "noun", "det", "default", "all")]
    _result(directory, "ner_pos", "ner_attack", {"eta": 62.7}, points, ner)
    inv = {"dataset": "pri-ddx"}
    recovered = [{"word_recovery_best": w} for w in (0.10, 0.50, 0.80, 0.40, 0.20)]
    _result(directory, "sub_pos", "substitution_inversion", {"eta": 62.7}, points, recovered, cell=inv,
            date="2026-02-01T00:00:00+00:00")  # fmt: skip
    older = [{"word_recovery_best": 0.99}] * 5  # an older file of the same points: the newer one is read
    _result(directory, "sub_old", "substitution_inversion", {"eta": 62.7}, points, older, cell=inv)
    attrs = [{"symptoms_recall_best": v} for v in (0.30, 0.10)]  # NOUN, every category; the other sets not run
    _result(directory, "attr_pos", "attribute_inference", {"eta": 62.7, "release": "pct2t"},
            [{"pos": "noun"}, {"pos": "all"}], attrs, cell=inv)  # fmt: skip
    _result(directory, "attr_slots", "attribute_inference", {"eta": 62.7}, [{"pos": "det"}], [{"symptoms_recall_best":
            0.5}], cell=inv)  # another release (the kind's default: slots) is not Fig. 6's  # fmt: skip
    return directory


def test_pos_key_reads_every_spelling():
    from textfree.rapt.report_pos import pos_key, pos_title

    assert pos_key(None) is None and pos_key("default") == "default" and pos_key("ALL") == "all"
    assert pos_key(["NOUN", "VERB", "PRON", "ADP"]) == "default" == pos_key("verb,noun,preposition,pronoun")
    assert pos_key(["NOUN", "VERB", "PRON", "ADP", "ADJ", "ADV", "DET", "NUM", "PRT", "CONJ", ".", "X"]) == "all"
    assert pos_key("Noun, verb") == "noun,verb" and pos_key(["DET"]) == "det"
    assert pos_title("noun,verb") == "NOUN, VERB" and pos_title(None).startswith("T2T")


def test_pos_section_puts_the_sets_beside_the_default_set_and_t2t(tmp_path):
    res = collect([_pos_results(tmp_path)])
    assert {r.row for r in res.rows if r.cell == "pos"} == {"pos"}
    text = build_report(res)
    # the POS-set rows (78.0 / 85.0 / 62.0 at 62.7) stay out of Table II: PCT2T at 62.7 is the default-set run's
    assert "| +PCT2T | — | 70.0 | — | 90.0 |" in text
    section = text[text.index("## Part-of-speech categories") : text.index("## PPFT and RAPT")]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    # clean, then the sets by share privatized (DET 10 %, NOUN 20 %, all 93 %), the default set, T2T; the default
    # set's and T2T's shares: 10 / 20 and 18 / 20 words, replaced not recorded
    # inversion privacy: 1 - the newer substitution file's recovery (T2T 0.10, NOUN 0.50, DET 0.80, default 0.40,
    # all 0.20); symptoms privacy: 1 - the PCT2T attribute file's recall (NOUN 0.30, all 0.10; not DET: the slots
    # file's); none for the clean row
    assert lines[1:] == [
        "| none (no privatization) | 0.0 | 0.0 | — | — | — | — | 90.0 | — |",
        "| DET | 10.0 | 3.0 | 95.0 | 47.0 | 20.0 | — | 85.0 | relatively weak privacy; kept for syntax |",
        "| NOUN | 20.0 | 10.0 | 80.0 | 55.0 | 50.0 | 70.0 | 78.0 | effective for privacy (in the paper's set) |",
        "| all categories | 93.0 | 35.0 | 60.0 | 66.0 | 80.0 | 90.0 | 62.0 | the 'All' bar (every tag) |",
        "| NOUN, VERB, PRON, ADP (default) | 50.0 | — | 75.0 | 58.0 | 60.0 | — | 70.0 | the paper's set in "
        "every experiment |",
        "| T2T (every word, any category) | 90.0 | — | 70.0 | 62.0 | 90.0 | — | 60.0 | not in Fig. 6 (Fig. 4: "
        "privacy comparable to PCT2T's) |",
    ]
    assert "### SST2, LoRA, eta 62.7 (paper 125)" in section and "attacker's reference): 46.0." in section
    # the NER section names each set
    assert "| PCT2T (NOUN) | 62.7 |" in text and "| PCT2T (all categories) | 62.7 |" in text


def test_pos_section_and_figure_are_absent_without_pos_rows(tmp_path):
    text = build_report(collect([_results(tmp_path)]))
    assert "No POS-set cell given (`examples/cells/rapt/sst2_lora_pos.yaml`)." in text
    write_report([tmp_path], tmp_path / "out" / "rapt.md")
    assert not (tmp_path / "out" / "rapt" / "pos.png").exists()


def test_write_report_draws_the_pos_figure(tmp_path):
    (tmp_path / "results").mkdir()
    out = write_report([_pos_results(tmp_path / "results")], tmp_path / "docs" / "rapt.md")
    assert "![POS categories: privacy and accuracy](rapt/pos.png)" in out.read_text()
    assert (tmp_path / "docs" / "rapt" / "pos.png").stat().st_size > 1000


def test_the_pos_cells_load_with_the_pos_set_as_their_grid_axis():
    from textfree.experiments import load_cell
    from textfree.experiments.kinds.ner import _settings

    root = Path(__file__).resolve().parents[1] / "examples" / "cells"
    rapt = load_cell(root / "rapt" / "sst2_lora_pos.yaml")
    fig6 = ["noun", "verb", "pron", "adp", "adj", "det", "conj", "."]  # the paper's bars ("." : symbols), and All
    assert rapt.kind == "rapt_finetune" and rapt.grid == {"params.pos": fig6 + ["all"]}
    assert rapt.params["eta"] == 62.7 and rapt.params["plain_length"] == 0 and not rapt.params["reconstruction"]
    ner = load_cell(root / "attacks" / "ner_pos.yaml")
    assert ner.grid == {"params.pos": [None] + fig6 + ["default", "all"]} and ner.params["eta"] == 62.7
    # the NER kind reads a comma string as its list of categories
    settings = [_settings(ner, p)[0]["pos"] for p in ner.points()]
    assert settings == [None] + [[c] for c in fig6] + ["default", ["all"]]


def test_the_substitution_pos_cell_reads_each_comma_string_as_its_categories():
    from textfree.experiments import Cell, CellError, load_cell
    from textfree.experiments.kinds._t2t import check_t2t_params

    cell = load_cell(Path(__file__).resolve().parents[1] / "examples" / "cells" / "attacks" / "substitution_pos.yaml")
    assert cell.kind == "substitution_inversion" and cell.params["eta"] == 62.7
    assert cell.grid["params.pos"][:3] == [None, "noun", "verb"] and "." in cell.grid["params.pos"]
    check_t2t_params({"eta": 1.0, "pos": "noun, verb"})  # a comma string: its categories
    bad = {"name": "s", "kind": "substitution_inversion", "dataset": "pri-ddx", "split": "heldout",
           "params": {"eta": 50, "pos": "noun,banana"}, "attack": {"threat": {"training_text": "in_domain",
           "knows_mechanism": True, "knows_parameters": True}}}  # fmt: skip
    with pytest.raises(CellError, match="unknown categories") as info:
        Cell.from_dict(bad)
    assert info.value.field == "params.pos"


def test_ner_kind_refuses_an_unknown_category_in_a_comma_string():
    from textfree.experiments import Cell, CellError

    cell = {"name": "ner_x", "kind": "ner_attack", "dataset": "presidio", "split": "synth", "params": {"eta": 50},
            "attack": {"threat": {"training_text": "public"}}, "grid": {"params.pos": ["noun,banana"]}}  # fmt: skip
    with pytest.raises(CellError, match="unknown categories") as info:
        Cell.from_dict(cell)
    assert info.value.field == "params.pos"


def test_rapt_kind_release_shares(monkeypatch):
    """The kind's release figures: words per example, shares privatized / replaced, from one release of the test
    sentences with the run's test noise seed (a stand-in task and mechanism)."""
    import torch

    from textfree.data.tasks import TaskData
    from textfree.experiments.kinds import rapt as kind
    from textfree.rapt.config import RaptTrainConfig
    from textfree.substitution.embeddings import WordEmbeddingTable
    from textfree.substitution.t2t import TextToText

    data = TaskData(task="sst2", train_texts=[("a b",), ("c d",)], train_labels=[0, 1], train_split="train",
                    test_texts=[("good film ,",), ("bad film",)], test_labels=[1, 0], test_split="dev")  # fmt: skip
    monkeypatch.setattr("textfree.data.tasks.load_task", lambda *a, **k: data)
    table = WordEmbeddingTable(["good", "bad", "film"], torch.tensor([[0.0, 0.0], [0.0, 1.0], [5.0, 5.0]]))
    seen = {}

    def build(encoder, eta, pos):
        seen["args"] = (encoder, eta, pos)
        return None if eta is None else TextToText(table, eta)

    monkeypatch.setattr("textfree.rapt.train.build_mechanism", build)
    cfg = RaptTrainConfig(out="unused", eta=1e-3, pos=None, plain_length=0, reconstruction=False, seed=3)
    shares = kind.release_shares(cfg)
    # 5 words; 4 in the table (',' is not); at eta 1e-3 nearly every privatized word moves
    assert shares["mean_words"] == 2.5 and shares["privatized_share"] == 0.8
    assert shares["replaced_share"] == pytest.approx(0.8 * shares["replacement_rate"])
    assert seen["args"] == ("default", 1e-3, None)
    clean = kind.release_shares(RaptTrainConfig(out="unused", eta=None, plain_length=0, reconstruction=False))
    assert clean["privatized_share"] == clean["replaced_share"] == 0.0 and math.isnan(clean["replacement_rate"])
    assert "privatized_share" in kind.RAPT_METRICS and "replaced_share" in kind.RAPT_METRICS


# ------------------------------------------------------------------------------------- Fig. 4 (privacy per attack)
def _attack_results(directory):
    """Every attack on T2T / PCT2T text at eta 25 and 75: word readers (one cell with a learned decoder, an older file
    of it that must lose, a PCT2T cell over another category set that stays out), NER, attribute inference (a
    ``target: answer`` cell that stays out)."""
    ddx = {"dataset": "pri-ddx"}
    words = [{"word_recovery_identity": i, "word_recovery_channel": c, "word_recovery_prior": 0.60, "n_texts": 100.0,
              "kept_rate": k} for i, c, k in ((0.10, 0.20, 0.1), (0.50, 0.60, 0.1))]  # fmt: skip
    _result(directory, "sub_t2t", "substitution_inversion", {"eta": 75}, [{"eta": 25}, {"eta": 75}], words, ddx)
    learned = [{"word_recovery_identity": 0.11, "word_recovery_channel": 0.25, "word_recovery_learned": 0.90,
                "word_recovery_prior": 0.60, "n_texts": 100.0, "kept_rate": 0.1}]  # fmt: skip
    _result(directory, "sub_t2t_learned", "substitution_inversion", {"eta": 25}, [{"eta": 25}], learned, ddx)
    older = [learned[0] | {"word_recovery_channel": 0.95, "word_recovery_learned": 0.50}]
    _result(directory, "sub_t2t_learned", "substitution_inversion", {"eta": 25}, [{"eta": 25}], older, ddx,
            date="2025-12-01T00:00:00+00:00")  # fmt: skip
    pct2t = [{"word_recovery_identity": 0.50, "word_recovery_channel": c, "word_recovery_prior": 0.60,
              "n_texts": 100.0, "kept_rate": 0.5} for c in (0.55, 0.90)]  # fmt: skip
    base = {"eta": 75, "pos": "default"}
    _result(directory, "sub_pct2t", "substitution_inversion", base, [{"eta": 25}, {"eta": 75}], pct2t, ddx)
    noun = [{"word_recovery_identity": 0.99, "word_recovery_channel": 0.99}]
    _result(directory, "sub_noun", "substitution_inversion", {"pos": "noun"}, [{"eta": 25}], noun, ddx)
    ner = {"dataset": "presidio"}
    for name, pos, f1 in (("ner_t2t", None, 0.10), ("ner_pct2t", "default", 0.30)):
        rows = [{"entity_f1": f1, "clean_entity_f1": 0.55, "n_texts": 200.0}]
        _result(directory, name, "ner_attack", {"eta": 75, "pos": pos}, [{"eta": 25}], rows, ner)
    for name, release, sex, symptoms in (("attr_t2t", "t2t", 0.56, 0.80), ("attr_pct2t", "pct2t", 0.80, 0.85)):
        rows = [{"sex_accuracy_best": sex, "sex_accuracy_prior": 0.54, "symptoms_recall_best": symptoms,
                 "symptoms_recall_prior": 0.17, "symptoms_recall_label": 0.98, "n_test": 526.0}]  # fmt: skip
        params = {"release": release, "eta": 75} | ({"pos": "default"} if release == "pct2t" else {})
        _result(directory, name, "attribute_inference", params, [{"eta": 25}], rows, ddx)
    answer = [{"sex_accuracy_best": 1.0, "symptoms_recall_best": 1.0}]
    params = {"release": "t2t", "eta": 75, "target": "answer"}
    _result(directory, "attr_answer", "attribute_inference", params, [{"eta": 25}], answer, ddx)
    # PPFT's d_chi client (GloVe, out-of-table words folded): another client than RAPT's T2T, stays out
    dchi = {"release": "t2t", "eta": 0.13, "table": "glove:x.txt", "oov_word": "unknown"}
    _result(directory, "attr_dchi", "attribute_inference", dchi, [{"eta": 0.13}], answer, ddx)
    _result(directory, "sub_dchi", "substitution_inversion", dchi, [{"eta": 0.13}], noun, ddx)
    return directory


def test_privacy_section_puts_every_attack_on_t2t_and_pct2t_per_eta(tmp_path):
    text = build_report(collect([_attack_results(_results(tmp_path))]))
    section = text[text.index("## Empirical privacy per attack") : text.index("## Part-of-speech")]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    # 1 - X in %: T2T word readers at 25 = 1 - max(0.20, 0.25 of the newest learned-decoder file) = 75.0 (the older
    # file's channel 0.95 would give 5.0), at 75 = 1 - 0.60; with the learned decoder 1 - 0.90; PCT2T 1 - 0.55 and
    # 1 - 0.90; no privatization: 0 for the word readers (the clear text is the original), 1 - 0.55 for NER; no input:
    # 1 - prior
    assert lines == [
        "| attack | release | texts (n) | eta 25 | eta 75 | no privatization | no input |",
        "| word inversion: read / channel | T2T | Pri-DDX, 100 | 75.0 | 40.0 | 0.0 | 40.0 |",
        "| word inversion: read / channel | PCT2T | Pri-DDX, 100 | 45.0 | 10.0 | 0.0 | 40.0 |",
        "| word inversion: + learned decoder | T2T | Pri-DDX, 100 | 10.0 | — | 0.0 | 40.0 |",
        "| NER | T2T | presidio-synth, 200 | 90.0 | — | 45.0 | — |",
        "| NER | PCT2T | presidio-synth, 200 | 70.0 | — | 45.0 | — |",
        "| attribute inference: symptoms | T2T | Pri-DDX, 526 | 20.0 | — | — | 83.0 |",
        "| attribute inference: symptoms | PCT2T | Pri-DDX, 526 | 15.0 | — | — | 83.0 |",
        "| attribute inference: sex | T2T | Pri-DDX, 526 | 44.0 | — | — | 46.0 |",
        "| attribute inference: sex | PCT2T | Pri-DDX, 526 | 20.0 | — | — | 46.0 |",
    ]
    assert "* Not run: word inversion: + learned decoder on PCT2T." in section
    assert "(the diagnosis, which the server is meant to learn), attribute inference: symptoms 2.0 (the" in section
    assert "T2T 75.0 at eta 25 to 40.0 at eta 75 (above its no-input reference at eta 25:" in section
    # T2T minus PCT2T: symptoms 20 - 15 = 5.0 points (within 5), the others further apart
    assert "within 5 points of T2T at every shared eta for attribute inference: symptoms;" in section
    far = "word inversion: read / channel (+30.0 at eta 25), NER (+20.0 at eta 25), attribute inference: sex (+24.0"
    assert far in section
    assert "release 50.0% of the words verbatim (the words outside the categories or the table) against 10.0%" in (
        section
    )
    assert "RAPT's empirical privacy equals PCT2T's row" in section and text.count("by construction") == 2
    assert "`sub_t2t_learned-20260101T000000Z.json`" in text and "sub_t2t_learned-20251201" not in text
    assert "sub_noun" not in text and "attr_answer" not in text and "dchi" not in text and "eta 0.13" not in text


def test_privacy_section_and_figure(tmp_path):
    (tmp_path / "results").mkdir()
    bare = write_report([_results(tmp_path / "results")], tmp_path / "bare" / "rapt.md").read_text()
    assert "No `substitution_inversion`, `ner_attack` or T2T / PCT2T `attribute_inference` result files" in bare
    assert not (tmp_path / "bare" / "rapt" / "privacy.png").exists()
    out = write_report([_attack_results(tmp_path / "results")], tmp_path / "docs" / "rapt.md")
    assert "![empirical privacy per attack](rapt/privacy.png)" in out.read_text()
    assert (tmp_path / "docs" / "rapt" / "privacy.png").stat().st_size > 1000


def test_a_control_row_names_each_release_once():
    from textfree.rapt.report_generation import _control_rows

    def row(eta, plain):
        return {"params": {"eta": eta, "plain_length": plain}, "length_mcqa": 0.9, "length_open": 0.8, "n_test": 3}

    lines = _control_rows([row(0.7, 0), row(0.7, 40), row(None, 0), row(0.7, 40) | {"length_open": 0.5}])
    assert "(eta 0.7, clear text (no privatization)) |" in lines[0]  # the two eta 0.7 runs of equal figures: once
    assert "(eta 0.7) | — | 90.0 | 50.0 |" in lines[1]
