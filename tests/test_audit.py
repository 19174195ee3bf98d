"""``textfree audit``: a file the project has never seen (tests/fixtures/audit: a headerless TSV, JSON Lines under other
column names) audited with one command; every verdict prints its clean-text reference; the attacker is chosen on the
validation part, never on the evaluated one; bad flags fail in one line naming the flag, before anything runs."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.audit import AuditConfig, AuditError
from textfree.cli import app
from textfree.data import AttributeColumn, ColumnMap

AUDIT = Path(__file__).parent / "fixtures" / "audit"
runner = CliRunner()
QUICK = ["--epochs", "4", "--hidden", "8", "--attackers", "mean", "--threads", "1", "--quiet"]


def _audit(*args) -> object:
    return runner.invoke(app, ["audit", *map(str, args)])


def test_headerless_tsv_audit_writes_report_json_and_figures(tiny_encoder_dir, tmp_path):
    out = tmp_path / "report"
    r = _audit(
        AUDIT / "reviews_headerless.tsv",
        "--columns", "rating,gender,age,text",
        "--text-column", "text",
        "--attribute", "gender:categorical",
        "--attribute", "age:numeric",
        "--label-column", "rating",
        "--epsilon", "28,75",
        "--encoder", tiny_encoder_dir,
        "--inverter", "--inverter-epochs", "1",
        "--out", out,
        *QUICK,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    report = (out / "report.md").read_text()
    data = json.loads((out / "audit.json").read_text())
    # provenance: config, versions, git, seed, date; the result files of the cells it ran
    assert data["config"]["columns"]["columns"]["names"] == ["rating", "gender", "age", "text"]
    assert {"versions", "git", "host", "seeds", "date"} <= set(data) and data["seeds"] == [0]
    assert data["versions"]["textfree"] and (out / data["results"]["audit_attributes"]).is_file()
    verdicts = data["verdicts"]
    assert {(v["metric"], v["x"]) for v in verdicts} == {
        (m, x) for m in ("gender_accuracy", "age_accuracy") for x in (28.0, 75.0)
    }
    for v in verdicts:  # every verdict carries the clean-text reference and the prior
        assert 0.0 <= v["values"]["clean"] <= 1.0 and 0.0 <= v["values"]["prior"] <= 1.0
        assert v["chosen"].startswith("mean_") and v["n_test"] > 10
    # the fixture's husband/wife words carry gender: the clean-text reader finds it
    assert max(v["values"]["clean"] for v in verdicts if v["metric"] == "gender_accuracy") > 0.8
    assert (
        report.count("| gender_accuracy |") >= 2 and "clean text" in report and "Formal guarantee: one slot" in report
    )
    assert "chosen on validation" in report and "![Scores over the grid](attributes.png)" in report
    for png in ("attributes.png", "validation_curves.png"):
        assert (out / png).stat().st_size > 10_000
    # the learned inverter (slot-token classifier), one row per epsilon beside the constant guess's ROUGE-L
    inverter = data["inverter"]
    assert [row["x"] for row in inverter["rows"]] == [28.0, 75.0] and inverter["epochs"] == 1
    assert all(0.0 <= row["rouge_l"] <= 1.0 and row["rouge_l_prior"] > 0.2 for row in inverter["rows"])
    assert "| epsilon | ROUGE-L | ROUGE-L of the prior guess |" in report


def test_jsonl_audit_with_token_release_runs_token_inversion_and_pii(tiny_encoder_dir, tmp_path):
    out = tmp_path / "notes"
    r = _audit(
        AUDIT / "notes.jsonl",
        "--text-column", "note",
        "--attribute", "sex=patient_sex:categorical",
        "--attribute", "conditions:multilabel",
        "--pii-column", "names",
        "--release", "tokens",
        "--epsilon", "1000",
        "--encoder", tiny_encoder_dir,
        "--out", out,
        *QUICK,
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    data = json.loads((out / "audit.json").read_text())
    (row,) = data["tokens"]["rows"]
    assert row["n_pii_units"] > 50 and row["recovery_nn_l2"] > 0.9  # near-clean tokens: read back, names and all
    assert row["pii_exact_nn_best"] > 0.9
    assert {v["metric"] for v in data["verdicts"]} == {"sex_accuracy", "conditions_f1"}
    assert "## Token-level inversion" in (out / "report.md").read_text() and (out / "token_inversion.png").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--attribute", "gender:ordinal"], "--attribute: .*kind must be one of"),
        (["--attribute", "gender", "--epsilon", "0,75"], "--epsilon: must be numbers > 0"),
        (["--attribute", "gender", "--epsilon", "a"], "--epsilon: expected numbers"),
        (["--attribute", "gender", "--mechanism", "gauss"], "--mechanism: must be one of l2_laplace, t2t, pct2t"),
        (["--attribute", "gender", "--mechanism", "t2t", "--release", "tokens"], "--release: applies to l2_laplace"),
        (["--attribute", "gender", "--validation", "1.5"], r"--validation: must be a number in \(0, 1\)"),
        (["--attribute", "gender", "--epochs", "8", "--curve", "2,8"], r"--curve: epoch counts must lie in \[1"),
        (["--attribute", "gender", "--attackers", "mlp"], "--attackers: must be distinct values"),
        ([], "--attribute: name at least one attribute"),
        (["--attribute", "gender", "--release", "tokens", "--inverter"], "--inverter: the slot-token inverter"),
        (["--attribute", "gender", "--text-column", "review"], "missing column 'review' .*--text-column"),
        (["--attribute", "gender", "--beside", "nowhere.json"], "--beside: no such result file"),
    ],
)
def test_bad_flags_fail_in_one_line_before_anything_runs(args, message, tmp_path):
    out = tmp_path / "never"
    r = _audit(AUDIT / "notes.jsonl", "--text-column", "note", *args, "--out", out)
    assert r.exit_code == 2
    import re

    assert re.search(message, " ".join(r.output.split())), r.output
    assert not (out / "report.md").exists()


def test_config_round_trips_through_its_json():
    config = AuditConfig(
        data="x.csv",
        columns=ColumnMap("t", (AttributeColumn.parse("age:numeric:18,30"),), names=("t", "age")),
        out=Path("o"),
        epochs=40,
    )
    assert config.curve == (10, 20)  # a quarter and a half of the epochs
    assert AuditConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config
    with pytest.raises(AuditError, match="^--k: must be an integer >= 1"):
        AuditConfig(data="x.csv", columns=config.columns, out=Path("o"), k=0)


def test_attack_kinds_take_a_path_with_a_column_mapping_and_check_it():
    from textfree.experiments import Cell, CellError

    token = {
        "name": "t",
        "kind": "token_inversion",
        "dataset": str(AUDIT / "notes.jsonl"),
        "mechanism": {"name": "l2_laplace", "epsilon": 50},
        "params": {"columns": {"text": "note", "pii": "names"}},
        "attack": {"threat": {"embedding_table": True, "training_text": "public"}, "attacks": ["nn_l2"]},
    }
    Cell.from_dict(token)
    with pytest.raises(CellError, match="columns takes text, label, pii and names") as info:
        Cell.from_dict(token | {"params": {"columns": {"txt": "note"}}})
    assert info.value.field == "params.columns"
    learned = {
        "name": "l",
        "kind": "learned_inversion",
        "dataset": str(AUDIT / "notes.jsonl"),
        "params": {"variant": "restoration", "model": "runs/x", "columns": {"text": ""}},
        "attack": {"threat": {"encoder_queries": True, "training_text": "public"}},
    }
    with pytest.raises(CellError, match="the text column must be a non-empty column name") as info:
        Cell.from_dict(learned)
    assert info.value.field == "params.columns"
