"""Flags at their boundaries: every bad value is one error line (exit status 2), never a traceback, and never after
the work is done or silently ignored."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.experiments import register_cell_kind, registry

ROOT = Path(__file__).resolve().parents[1]
FIXTURE_DATA = ROOT / "tests" / "fixtures" / "data"
DDX_DEV = FIXTURE_DATA / "privacyrestore" / "Pri-DDXPlus_dataset" / "dev.json"
GLOVE = ROOT / "tests" / "fixtures" / "substitution" / "tiny_glove.txt"
runner = CliRunner()


def one_error_line(args, fragment, **kwargs):
    r = runner.invoke(app, [str(a) for a in args], **kwargs)
    errors = [line for line in r.output.splitlines() if line.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and fragment in errors[0], r.output
    assert isinstance(r.exception, SystemExit) and "Traceback" not in r.output
    return errors[0]


# -------------------------------------------------------------------------------------------------- run
@pytest.fixture
def counted_kind(monkeypatch):
    """A cell kind that records its calls, registered in a scratch copy of the registry."""
    registry.available_cell_kinds()  # the built-in kinds register in the real registry first
    monkeypatch.setattr(registry, "_KINDS", dict(registry._KINDS))
    calls = []

    @register_cell_kind("counted_cli")
    def counted(cell, point, seed, context):
        calls.append(seed)
        return {"v": 1.0}

    return calls


def test_run_refuses_a_bad_out_dir_before_running_anything(counted_kind, tmp_path):
    cell = tmp_path / "cell.yaml"
    cell.write_text("name: c\nkind: counted_cli\nseeds: [0, 1]\n", encoding="utf-8")
    afile = tmp_path / "afile"
    afile.write_text("x")
    one_error_line(["run", cell, "--out-dir", afile], "is not a directory")
    one_error_line(["run", cell, "--out-dir", afile / "sub"], "cannot create the results directory")
    assert counted_kind == [] and afile.read_text() == "x"


def test_run_says_where_the_results_could_not_be_written(counted_kind, tmp_path, monkeypatch):
    from textfree.experiments import runner as experiments_runner

    def full_disk(out_dir, stem, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(experiments_runner, "_write_new_json", full_disk)
    cell = tmp_path / "cell.yaml"
    cell.write_text("name: c\nkind: counted_cli\nseeds: [0]\n", encoding="utf-8")
    line = one_error_line(["run", cell, "--out-dir", tmp_path / "res"], "could not write the results of cell 'c'")
    assert str(tmp_path / "res") in line


def test_run_with_an_encoder_that_cannot_load_is_one_error_line(tmp_path):
    cell = tmp_path / "cell.yaml"
    cell.write_text(
        f"name: e\nkind: privatization\nencoder: {tmp_path / 'no-such-encoder'}\ntexts: ['a cough']\n"
        "mechanism: {name: l2_laplace, epsilon: 10}\nparams: {k: 2}\nseeds: [0]\n",
        encoding="utf-8",
    )
    one_error_line(["run", cell, "--out-dir", tmp_path / "res"], "no-such-encoder")


def test_run_names_a_cell_file_that_is_not_utf8(tmp_path):
    cell = tmp_path / "latin1.yaml"
    cell.write_bytes("name: x\nkind: privatization\nnotes: caf\xe9\n".encode("latin-1"))
    line = one_error_line(["run", cell, "--out-dir", tmp_path / "res"], "not valid UTF-8")
    assert str(cell) in line


# ---------------------------------------------------------------------------------------------- account
def test_account_with_an_encoder_that_cannot_load_is_one_error_line(tmp_path):
    one_error_line(
        ["account", "--dataset", "pri-ddx", "--split", "dev", "--encoder", tmp_path / "no-such-encoder"],
        "no-such-encoder",
        env={"TEXTFREE_DATA": str(FIXTURE_DATA)},
    )


def test_account_never_claims_a_split_of_a_dataset_file(tiny_encoder_dir):
    one_error_line(
        ["account", "--dataset", DDX_DEV, "--split", "test", "--encoder", tiny_encoder_dir, "--json"], "--split 'test'"
    )
    r = runner.invoke(app, ["account", "--dataset", str(DDX_DEV), "--encoder", str(tiny_encoder_dir), "--json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)
    assert res["dataset"] == str(DDX_DEV) and res["split"] is None  # the file is what was read
    r = runner.invoke(
        app,
        ["account", "--dataset", str(DDX_DEV.parent), "--split", "dev", "--encoder", str(tiny_encoder_dir), "--json"],
    )  # a dataset's directory still takes a split
    assert r.exit_code == 0 and json.loads(r.output)["split"] == "dev", r.output


# ------------------------------------------------------------------------------------------- substitute
@pytest.mark.parametrize(
    "args,fragment",
    [
        (["--replacement-table", "--etas", "-5,0"], "--etas must be finite numbers > 0, got -5"),
        (["--replacement-table", "--etas", ","], "--etas ',' lists no eta"),
        (["--replacement-table", "--etas", "1,inf"], "--etas must be finite numbers > 0, got inf"),
        (["--replacement-table", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["the cat", "--seed", "-1"], "--seed must be >= 0, got -1"),
        (["the cat", "--pos", ""], "--pos '' lists no POS category"),
        (["the cat", "--pos", " , "], "lists no POS category"),
        (["the cat", "--tagger", "bogus"], "--tagger must be one of textblob, nltk, got 'bogus'"),
        (["the cat", "--tagger", "nltk"], "--tagger nltk needs --nltk-data"),
        (["the cat", "--tagger", "nltk", "--nltk-data", "/no/such/nltk_data"], "is not a directory"),
        (["the cat", "--pos", "noun", "--nltk-data", "/no/such/nltk_data"], "is not a directory"),
        (["the cat", "--tagger", "nltk", "--nltk-data", ROOT / "tests"], "has no effect without --pos"),
        (["the cat", "--pos", "noun", "--nltk-data", ROOT / "tests"], "--nltk-data is only used by --tagger nltk"),
        (["   "], "give a text to substitute"),
        (["the cat", "--replacement-table"], "not over TEXT"),
        (["the cat", "--eta", "1.7e308"], "is not a finite privacy loss: this eta promises no privacy"),
    ],
)
def test_substitute_bad_values_are_one_error_line(args, fragment):
    one_error_line(["substitute", *args, "--table", f"glove:{GLOVE}"], fragment)


def test_substitute_corpus_errors_are_one_error_line(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n  \n", encoding="utf-8")
    one_error_line(
        ["substitute", "--replacement-table", "--corpus", empty, "--table", f"glove:{GLOVE}"], "holds no sentence"
    )
    unknown = tmp_path / "unknown.txt"
    unknown.write_text("zzxq qqxz\n", encoding="utf-8")
    one_error_line(
        ["substitute", "--replacement-table", "--corpus", unknown, "--table", f"glove:{GLOVE}"],
        "no word that the table can substitute",
    )


def test_substitute_with_a_table_that_cannot_load_is_one_error_line(tmp_path):
    one_error_line(["substitute", "the cat", "--table", tmp_path / "no-such-table"], "no-such-table")
