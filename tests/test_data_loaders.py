"""Loaders, records, paths and the registry: tiny fixtures (always) and the real shared data (when present)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from textfree.data import (
    DataError,
    DataNotFoundError,
    HubUnavailableError,
    InstructRecord,
    MCQARecord,
    PairRecord,
    PIIRecord,
    TextRecord,
    available_datasets,
    find_answer_index,
    load_alpaca,
    load_arc,
    load_cola,
    load_csqa,
    load_dataset,
    load_gsm8k,
    load_lima,
    load_mrpc,
    load_presidio,
    load_privacyrestore,
    load_pupa,
    load_qqp,
    load_rte,
    load_sst2,
    load_trustpilot,
    register_dataset,
    shared_data_dir,
    split_question,
)
from textfree.data import registry as registry_module

FIXTURES = Path(__file__).parent / "fixtures" / "data"
DDX_DIR = FIXTURES / "privacyrestore" / "Pri-DDXPlus_dataset"
SLJA_DIR = FIXTURES / "privacyrestore" / "Pri-SLJA_dataset"

_SHARED = shared_data_dir()
requires_shared_data = pytest.mark.skipif(
    _SHARED is None or not _SHARED.is_dir(), reason="../shared/data not found (set TEXTFREE_DATA)"
)


@pytest.fixture
def fixture_data(monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point TEXTFREE_DATA at the fixture tree so registry names resolve to the tiny files."""
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    return FIXTURES


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------- records


def test_mcqa_record_validation_and_answer() -> None:
    record = MCQARecord("r1", "ctx", "Q?", ["a", "b"], 1, {"k": 1})
    assert record.answer == "b"
    with pytest.raises(AttributeError):
        record.answer_index = 0  # type: ignore[misc]
    for bad in (
        dict(options=["only"]),
        dict(answer_index=2),
        dict(answer_index=-1),
        dict(answer_index=True),
        dict(options=["a", " "]),
        dict(question=""),
        dict(id=""),
    ):
        kwargs = dict(id="r1", context="", question="Q?", options=["a", "b"], answer_index=0) | bad
        with pytest.raises(ValueError):
            MCQARecord(**kwargs)  # type: ignore[arg-type]
    assert MCQARecord("r2", "", "Q?", ("x", "y"), 0).options == ["x", "y"]  # type: ignore[arg-type]


def test_other_records_validate() -> None:
    assert TextRecord("t", "", None).label is None
    assert PairRecord("p", "a", "b", 1).label == 1
    assert InstructRecord("i", "do it", "", "done").input == ""
    pii = PIIRecord("x", "Ann at 5", ["Ann"], [(7, 8, "NUM"), (0, 3, "PERSON")])
    assert pii.spans == [(0, 3, "PERSON"), (7, 8, "NUM")]
    assert pii.span_texts() == ["Ann", "5"]
    with pytest.raises(ValueError):
        TextRecord("t", "x", 1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        PIIRecord("x", "abc", [], [(2, 9, "X")])
    with pytest.raises(ValueError):
        InstructRecord("i", "", "", "out")


# ----------------------------------------------------------------------------------------------- paths


def test_shared_data_dir_env_var(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TEXTFREE_DATA", str(tmp_path))
    assert shared_data_dir() == tmp_path
    monkeypatch.setenv("TEXTFREE_DATA", "")
    found = shared_data_dir()
    assert found is None or found.is_dir()


def test_shared_data_dir_falls_back_to_cwd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from textfree.data import paths

    monkeypatch.delenv("TEXTFREE_DATA", raising=False)
    data = tmp_path / "shared" / "data"
    data.mkdir(parents=True)
    (tmp_path / "repo").mkdir()
    monkeypatch.chdir(tmp_path / "repo")
    fake_source = tmp_path / "a" / "b" / "elsewhere" / "src" / "textfree" / "data" / "paths.py"
    monkeypatch.setattr(paths, "__file__", str(fake_source))  # <repo>/../shared/data does not exist
    assert paths.shared_data_dir() == data.resolve()
    data.rmdir()
    assert paths.shared_data_dir() is None


# -------------------------------------------------------------------------------- PrivacyRestore fixtures


def test_privacyrestore_ddx_fixture() -> None:
    dev = load_privacyrestore(DDX_DIR, split="dev")
    test = load_privacyrestore(DDX_DIR, split="test")
    assert len(dev) == 2 and len(test) == 6
    first = dev[0]
    assert first.id == "pri-ddx-101"
    assert first.question == "What is the likely diagnosis?"
    assert first.context == (
        "A 34-year-old female has a history of frequent colds, seasonal allergies. "
        "The 34-year-old female presents the symptoms of ear pain, fever, sore throat."
    )
    assert first.options == ["Acute otitis media", "Anemia", "GERD", "Myocarditis"]
    assert first.answer_index == 0 and first.answer == "Acute otitis media"
    attrs = first.attributes
    assert attrs["age"] == 34 and attrs["sex"] == "F" and attrs["dataset"] == "pri-ddx"
    assert attrs["symptoms"] == ["ear pain", "fever", "sore throat"]
    assert attrs["antecedents"] == ["frequent colds", "seasonal allergies"]
    assert attrs["private_atoms"] == ["ear pain", "frequent colds"]
    # dev rows are copies of test rows and get the same id
    assert {r.id for r in dev} <= {r.id for r in test}
    assert load_privacyrestore(DDX_DIR, split="test", limit=2) == test[:2]
    assert load_privacyrestore(DDX_DIR / "dev.json") == dev  # a file path: kind detected from the rows


def test_privacyrestore_slja_fixture() -> None:
    dev = load_privacyrestore(SLJA_DIR, split="dev")
    (record,) = dev
    assert record.id.startswith("pri-slja-") and len(record.id) == len("pri-slja-") + 16
    assert record.question == "What crime is being committed in this case?"
    assert record.context.startswith("The social relationships protected by criminal law")
    assert record.options == ["Theft", "Arson", "Bribery", "Fraud"] and record.answer == "Theft"
    assert record.attributes["option_labels"] == ["A", "B", "C", "D"]
    assert record.attributes["private_atoms"] == [
        "property of others",
        "taking a bicycle from a yard",
        "a person with full criminal responsibility",
        "to obtain money",
    ]
    assert record.attributes["non_private_atoms"] == ["public order", "general subject", "intentional"]
    test = load_privacyrestore(SLJA_DIR, split="test")
    assert record.id in {r.id for r in test}


def test_privacyrestore_short_names_use_shared_dir(fixture_data: Path) -> None:
    assert len(load_privacyrestore("ddx", "dev")) == 2
    assert len(load_privacyrestore("pri-slja", "test")) == 3
    assert len(load_dataset("ddx", split="validation")) == 2


def test_find_answer_index_rules() -> None:
    options = ["Acute otitis media", "Crohn's disease", "A", "GERD"]
    assert find_answer_index(options, "GERD") == 3  # exact text
    assert find_answer_index(options, "A") == 2  # exact text beats the label
    assert find_answer_index(["x", "y"], "b", labels=["A", "B"]) == 1  # label
    assert find_answer_index(options, "  acute OTITIS media ") == 0  # normalised
    assert find_answer_index(options, "Crohn’s Disease") == 1  # typographic apostrophe
    with pytest.raises(ValueError, match="not found"):
        find_answer_index(options, "Influenza")
    with pytest.raises(ValueError, match="ambiguous"):
        find_answer_index(["Flu", "flu."], "FLU")


def test_split_question() -> None:
    assert split_question("Facts here. More facts. What is it?", "D?") == ("Facts here. More facts.", "What is it?")
    assert split_question("No question mark.", "Default?") == ("No question mark.", "Default?")


# ------------------------------------------------------------------------------------- other fixtures


def test_glue_fixtures() -> None:
    sst = load_sst2(FIXTURES / "glue" / "SST-2")
    assert [(r.text, r.label) for r in sst] == [
        ('a gentle , "quiet" film', 1),
        ("nothing works here", 0),
        ("funny and warm", 1),
    ]
    assert [r.id for r in load_sst2(FIXTURES / "glue" / "SST-2", split="validation")] == ["sst2-dev-0", "sst2-dev-1"]
    assert load_sst2(FIXTURES / "glue" / "SST-2" / "test-labeled.tsv")[0].id == "sst2-test-0"  # split from file name
    cola = load_cola(FIXTURES / "glue" / "CoLA")  # train = train.tsv + val.tsv
    assert [r.label for r in cola] == [1, 0, 1] and cola[2].text == 'She said "hello" twice.'
    assert cola[1].attributes == {"source": "ab01", "mark": "*"}
    assert load_cola(FIXTURES / "glue" / "CoLA", split="dev")[0].attributes["mark"] == "?*"
    rte = load_rte(FIXTURES / "glue" / "RTE")
    assert rte[0].text_a == 'The firm said it found "extensive" damage.' and rte[0].label == 0
    mrpc = load_mrpc(FIXTURES / "glue" / "MRPC")
    assert mrpc[0].text_a == 'He called it "the plan".' and mrpc[0].attributes == {"id1": "11", "id2": "12"}
    assert [r.label for r in mrpc] == [1, 0]
    qqp = load_qqp(FIXTURES / "glue" / "QQP")
    assert qqp[0].text_b == "What is the capital of Peru?" and qqp[0].label == 0  # repaired tab
    assert qqp[1].text_b == 'Why does the sky look "blue"?' and qqp[1].id == "qqp-8"


def test_trustpilot_fixture() -> None:
    records = load_trustpilot(FIXTURES / "trustpilot-milanlp")
    assert [r.label for r in records] == ["M", "F", "M"]
    assert records[1].text == "Good prices, slow support." and records[1].attributes == {
        "age": 67,
        "age_cat": "65+",
        "gender": "F",
    }
    assert records[2].text == ""  # empty reviews are kept
    assert [r.label for r in load_trustpilot(FIXTURES / "trustpilot-milanlp", label="age_cat")] == [
        "25-54",
        "65+",
        "15-24",
    ]
    assert len(load_trustpilot(FIXTURES / "trustpilot-milanlp", split="test")) == 1


def test_pii_fixtures() -> None:
    pupa = load_pupa(FIXTURES / "pupa")
    assert pupa[0].pii == ["jane roe", "example university", "acme corp"]
    assert pupa[0].span_texts() == ["Jane Roe", "Example University", "Acme Corp"]
    # "_____" (a redaction mark: no word once normalised) is dropped
    assert pupa[1].pii == ["bob", "zeta project", "missing unit"] and pupa[1].span_texts() == ["Bob", "Zeta project"]
    assert pupa[0].attributes["conversation_hash"] == pupa[1].attributes["conversation_hash"] == "h1"
    assert pupa[0].id != pupa[1].id
    presidio = load_presidio(FIXTURES / "presidio-synth")
    assert presidio[0].spans == [(5, 12, "PERSON"), (16, 24, "PHONE_NUMBER")]
    assert presidio[0].pii == ["Ann Lee", "555-0100"] and presidio[1].spans == []
    assert len(load_presidio(FIXTURES / "presidio-synth", split="large")) == 1


def test_instruct_qa_gsm8k_fixtures() -> None:
    alpaca = load_alpaca(FIXTURES / "instruct" / "alpaca_en_demo.json")
    assert alpaca[1] == InstructRecord("alpaca-1", "Translate to French.", "Good morning", "Bonjour.", {})
    lima = load_lima(FIXTURES / "instruct" / "lima.json")
    assert lima[1].attributes["history"] == [["What is a haiku?", "A short poem."]]
    (csqa,) = load_csqa(FIXTURES / "qa" / "commonsenseqa")
    assert csqa.context == "" and csqa.answer_index == 1 and csqa.answer == "fridge"  # duplicate option texts ok
    (arc,) = load_arc(FIXTURES / "qa" / "arc")
    assert arc.id == "arc-Toy_1" and arc.options == ["Iron", "Water", "Salt"] and arc.answer == "Water"
    (gsm,) = load_gsm8k(FIXTURES / "gsm8k")
    assert gsm.output == "7" and gsm.attributes["solution"].endswith("#### 7")
    train = load_gsm8k(FIXTURES / "gsm8k", split="train", target="solution")
    assert train[1].output.startswith("1200 - 200") and train[1].attributes["final_answer"] == "1,000"


def test_limit() -> None:
    assert len(load_sst2(FIXTURES / "glue" / "SST-2", limit=2)) == 2
    assert load_sst2(FIXTURES / "glue" / "SST-2", limit=0) == []
    with pytest.raises(ValueError):
        load_sst2(FIXTURES / "glue" / "SST-2", limit=-1)


# ------------------------------------------------------------------------------------------ malformed


def test_truncated_json_line_names_file_and_line(tmp_path: Path) -> None:
    lines = (DDX_DIR / "test.json").read_text(encoding="utf-8").splitlines()
    bad = write(tmp_path / "test.json", "\n".join([lines[0], lines[1], lines[2][:40]]) + "\n")
    with pytest.raises(DataError) as info:
        load_privacyrestore(bad)
    assert info.value.line == 3 and info.value.path == str(bad)
    assert f"{bad}, line 3" in str(info.value) and "invalid JSON" in str(info.value)


def test_missing_field_and_unknown_answer(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in (DDX_DIR / "dev.json").read_text(encoding="utf-8").splitlines()]
    del rows[1]["correct_answer"]
    bad = write(tmp_path / "dev.json", "".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"line 2: .*correct_answer"):
        load_privacyrestore(bad)
    rows = [json.loads(line) for line in (DDX_DIR / "dev.json").read_text(encoding="utf-8").splitlines()]
    rows[0]["correct_answer"] = "Influenza"
    bad = write(tmp_path / "dev2.json", "\n" + "".join(json.dumps(r) + "\n" for r in rows))  # blank first line
    with pytest.raises(DataError, match=r"dev2\.json, line 2: answer 'Influenza' not found"):
        load_privacyrestore(bad)


def test_missing_column_tsv_and_csv(tmp_path: Path) -> None:
    tsv = write(tmp_path / "SST-2" / "train_full.tsv", "sentence\tlabel\nfine\t1\nno label here\n")
    with pytest.raises(DataError) as info:
        load_sst2(tmp_path / "SST-2")
    assert info.value.line == 3 and str(tsv) in str(info.value) and "expected 2 fields" in str(info.value)
    csv_file = write(tmp_path / "tp" / "english_train.csv", "text,age,rating\nhi,30,5\n")
    with pytest.raises(DataError, match=r"line 1: missing column\(s\) \['gender'\].*not the MilaNLP Trustpilot layout"):
        load_trustpilot(csv_file.parent)  # another layout: the message points at the column mapping
    write(tmp_path / "tp2" / "english_train.csv", "text,age,age_cat,gender\nok,30,25-54,F\nshort,31,25-54\n")
    with pytest.raises(DataError, match=r"english_train\.csv, line 3: expected 4 fields"):
        load_trustpilot(tmp_path / "tp2")
    write(tmp_path / "q" / "qqp_dev_subset.tsv", "1\t2\t3\tonly a question\n")
    with pytest.raises(DataError, match=r"line 1: expected 6 fields"):
        load_qqp(tmp_path / "q")
    write(tmp_path / "c" / "dev.tsv", "src\t1\t\tok\nsrc\tX\t\tbad label\n")
    with pytest.raises(DataError, match=r"line 2: label 'X' is not an integer"):
        load_cola(tmp_path / "c", split="dev")


def test_pri_fields_of_the_wrong_type_name_the_line(tmp_path: Path) -> None:
    """restore_symptoms of the wrong type was a TypeError (an int) or silently became characters (a string); an empty
    prompt was a record with no private text."""
    rows = [json.loads(line) for line in (DDX_DIR / "dev.json").read_text(encoding="utf-8").splitlines()]
    for i, (key, value, words) in enumerate(
        (
            ("restore_symptoms", 5, "restore_symptoms"),
            ("restore_symptoms", "abc", "restore_symptoms"),
            ("question_init", "", "is empty"),
            ("question_init", "   ", "is empty"),
        )
    ):
        edited = [dict(r) for r in rows]
        edited[1][key] = value
        bad = write(tmp_path / f"ddx{i}.json", "".join(json.dumps(r) + "\n" for r in edited))
        with pytest.raises(DataError, match=rf"ddx{i}\.json, line 2: .*{words}"):
            load_privacyrestore(bad)
    rows = [json.loads(line) for line in (SLJA_DIR / "dev.json").read_text(encoding="utf-8").splitlines()]
    for i, (key, value, words) in enumerate(
        (
            ("restore_evidences", 5, "restore_evidences"),
            ("keep_evidences", "abc", "keep_evidences"),
            ("minor_premise_atoms", ["a"], "minor_premise_atoms"),
            ("question_init", " ", "is empty"),
        )
    ):
        edited = [dict(r) for r in rows]
        edited[0][key] = value
        bad = write(tmp_path / f"slja{i}.json", "".join(json.dumps(r) + "\n" for r in edited))
        with pytest.raises(DataError, match=rf"slja{i}\.json, line 1: .*{words}"):
            load_privacyrestore(bad)


def test_a_file_that_is_not_utf8_names_the_file_and_line(tmp_path: Path) -> None:
    lines = (DDX_DIR / "dev.json").read_text(encoding="utf-8").splitlines()
    bad = tmp_path / "dev.json"
    bad.write_bytes((lines[0] + "\n").encode() + b"\xff" + (lines[1] + "\n").encode())
    with pytest.raises(DataError, match=r"dev\.json, line 2: not valid UTF-8 text \(byte 0xff\)"):
        load_privacyrestore(bad)
    tp = tmp_path / "tp" / "english_train.csv"
    tp.parent.mkdir()
    tp.write_bytes(b"text,age,age_cat,gender\nok,30,25-54,F\nbad \xe9t\xe9,31,25-54,M\n")
    with pytest.raises(DataError, match=r"english_train\.csv, line 3: not valid UTF-8"):
        load_trustpilot(tp.parent)
    arr = tmp_path / "instruct" / "lima.json"
    arr.parent.mkdir()
    arr.write_bytes(b'[{"instruction": "\xff"}]')
    with pytest.raises(DataError, match=r"lima\.json, line 1: not valid UTF-8"):
        load_lima(arr)


def test_trustpilot_labels_outside_the_release_are_refused(tmp_path: Path) -> None:
    """A stray gender (or an empty one) would become a label class of its own."""
    for i, (row, words) in enumerate(
        (
            ("x,30,25-54,Q", "gender 'Q'"),
            ("x,30,25-54,", "gender ''"),
            ("x,-5,25-54,M", "age -5"),
            ("x,30,bogus,F", "age_cat 'bogus'"),
        )
    ):
        write(tmp_path / f"tp{i}" / "english_train.csv", f"text,age,age_cat,gender\nok,30,25-54,F\n{row}\n")
        with pytest.raises(DataError, match=rf"line 3: {words}"):
            load_trustpilot(tmp_path / f"tp{i}")


def test_malformed_json_array(tmp_path: Path) -> None:
    text = (FIXTURES / "presidio-synth" / "synth_dataset_v2.json").read_text(encoding="utf-8")
    truncated = write(tmp_path / "trunc.json", text[: len(text) // 2])
    with pytest.raises(DataError) as info:
        load_presidio(truncated)
    assert info.value.path == str(truncated) and info.value.line is not None and info.value.line > 1
    records = json.loads(text)
    records[1]["spans"] = [{"entity_type": "X", "entity_value": "No", "start_position": 1, "end_position": 3}]
    bad = write(tmp_path / "spans.json", json.dumps(records, indent=2))
    second_line = bad.read_text(encoding="utf-8").splitlines().index("  {", 2) + 1
    with pytest.raises(DataError, match=rf"spans\.json, line {second_line}: spans\[0\] offsets"):
        load_presidio(bad)
    bad = write(tmp_path / "alpaca.json", '[{"instruction": "x", "output": "y"},\n {"instruction": "z"}]')
    with pytest.raises(DataError, match=r"alpaca\.json, line 2: missing field 'output'"):
        load_alpaca(bad)
    bad = write(tmp_path / "g.jsonl", '{"question": "q", "answer": "no marker"}\n')
    with pytest.raises(DataError, match=r"g\.jsonl, line 1: .*####"):
        load_gsm8k(bad)


def test_missing_path_is_file_not_found(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "test.json"
    with pytest.raises(DataNotFoundError) as info:
        load_privacyrestore(missing)
    assert isinstance(info.value, FileNotFoundError) and isinstance(info.value, DataError)
    assert str(missing) in str(info.value)
    with pytest.raises(FileNotFoundError, match="file for split 'test' not found"):
        load_sst2(FIXTURES / "glue" / "CoLA", split="test")
    with pytest.raises(DataError, match="unknown split 'bogus'"):
        load_sst2(FIXTURES / "glue" / "SST-2", split="bogus")


def test_no_shared_dir_gives_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "shared_data_dir", lambda: None)
    with pytest.raises(DataNotFoundError, match="TEXTFREE_DATA"):
        load_dataset("sst2")
    monkeypatch.setenv("TEXTFREE_DATA", "/definitely/not/here")
    with pytest.raises(DataNotFoundError, match="default location"):
        load_sst2()


# ---------------------------------------------------------------------------------------------- hub


def test_hub_name_without_datasets_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    with pytest.raises(HubUnavailableError, match=r"pip install textfree\[hub\]") as info:
        load_gsm8k("openai/gsm8k")
    assert isinstance(info.value, ImportError)


def test_hub_rows_go_through_the_same_converters(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def fake_load_dataset(*args: str, split: str) -> list[dict]:
        calls.append((args, split))
        if args[0] == "openai/gsm8k":
            return [{"question": "1+1?", "answer": "1 + 1 = 2\n#### 2"}]
        if args[0] == "nyu-mll/glue":
            return [{"sentence": "great", "label": 1, "idx": 0}, {"sentence": "hidden", "label": -1, "idx": 1}]
        return [
            {
                "id": "Mercury_1",
                "question": "Q?",
                "choices": {"text": ["a", "b"], "label": ["1", "2"]},
                "answerKey": "2",
            }
        ]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))
    assert load_gsm8k("openai/gsm8k")[0].output == "2"
    sst = load_sst2("nyu-mll/glue", split="dev")
    assert [r.label for r in sst] == [1, None]
    assert load_arc("allenai/ai2_arc")[0].answer == "b"
    assert calls == [
        (("openai/gsm8k", "main"), "test"),
        (("nyu-mll/glue", "sst2"), "validation"),
        (("allenai/ai2_arc", "ARC-Challenge"), "test"),
    ]


# ------------------------------------------------------------------------------------------ registry


def test_registry_names_and_aliases(fixture_data: Path) -> None:
    expected = {
        "pri-ddx",
        "pri-slja",
        "sst2",
        "cola",
        "rte",
        "mrpc",
        "qqp",
        "trustpilot",
        "pupa",
        "presidio",
        "alpaca",
        "lima",
        "csqa",
        "arc",
        "gsm8k",
    }
    assert expected <= set(available_datasets())
    for name in expected:
        assert load_dataset(name, limit=1), name
    assert load_dataset("SST-2", split="dev") == load_sst2(FIXTURES / "glue" / "SST-2", split="dev")
    assert len(load_dataset("commonsenseqa")) == 1
    assert load_dataset("trustpilot", label="age")[0].label == 42


def test_registry_paths_and_errors(tmp_path: Path) -> None:
    assert len(load_dataset(FIXTURES / "glue" / "RTE", split="dev")) == 1
    assert load_dataset(FIXTURES / "glue" / "SST-2" / "dev.tsv")[0].id == "sst2-dev-0"
    assert len(load_dataset(str(SLJA_DIR), split="dev")) == 1
    with pytest.raises(KeyError, match="unknown dataset 'nope'") as info:
        load_dataset("nope")
    assert isinstance(info.value, DataError) and str(info.value).startswith("unknown dataset 'nope'")
    with pytest.raises(DataError, match="cannot tell which dataset"):
        load_dataset(FIXTURES / "README.md")


def test_register_dataset(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "_REGISTRY", dict(registry_module._REGISTRY))
    monkeypatch.setattr(registry_module, "_ALIASES", dict(registry_module._ALIASES))
    monkeypatch.setenv("TEXTFREE_DATA", str(tmp_path))
    write(tmp_path / "mine" / "x.txt", "a\nb\n")

    def load_lines(path: Path, split: str = "all", limit: int | None = None) -> list[TextRecord]:
        lines = Path(path, "x.txt").read_text().split()
        return [TextRecord(f"mine-{i}", t, split) for i, t in enumerate(lines)][:limit]

    register_dataset("mine", load_lines, "mine", default_split="all", aliases=("my-data",))
    assert [r.text for r in load_dataset("MY-DATA")] == ["a", "b"]
    with pytest.raises(ValueError, match="already registered"):
        register_dataset("mine", load_lines, "mine")
    register_dataset("mine", load_lines, "mine", default_split="other", overwrite=True)
    assert load_dataset("mine", limit=1)[0].label == "other"


# -------------------------------------------------------------------------------------- real data


@pytest.mark.shared_data
@requires_shared_data
@pytest.mark.parametrize(
    ("name", "split", "count"),
    [
        ("pri-ddx", "dev", 309),
        ("pri-ddx", "test", 1549),
        ("pri-slja", "dev", 130),
        ("pri-slja", "test", 654),
        ("sst2", "train", 67349),
        ("sst2", "dev", 872),
        ("sst2", "test", 1821),
        ("cola", "train", 8551),
        ("cola", "dev", 1043),
        ("rte", "train", 2490),
        ("rte", "dev", 277),
        ("mrpc", "train", 4076),
        ("mrpc", "test", 1725),
        ("qqp", "dev", 23497),
        ("trustpilot", "train", 5004),
        ("trustpilot", "test", 403),
        ("pupa", "new", 664),
        ("presidio", "synth", 1500),
        ("presidio", "large", 2109),
        ("alpaca", "train", 999),
        ("lima", "train", 1029),
        ("csqa", "dev", 1221),
        ("arc", "test", 1172),
        ("gsm8k", "train", 7473),
        ("gsm8k", "test", 1319),
    ],
)
def test_real_row_counts_and_unique_ids(name: str, split: str, count: int) -> None:
    records = load_dataset(name, split=split)
    assert len(records) == count
    assert len({r.id for r in records}) == count


@pytest.mark.shared_data
@requires_shared_data
@pytest.mark.parametrize("name", ["pri-ddx", "pri-slja", "csqa", "arc"])
def test_real_mcqa_answers_are_options(name: str) -> None:
    for split in {"pri-ddx": ("dev", "test"), "pri-slja": ("dev", "test"), "csqa": ("dev",), "arc": ("test",)}[name]:
        for record in load_dataset(name, split=split):
            assert record.answer in record.options
            assert record.options[record.answer_index] == record.answer
            if name.startswith("pri-"):
                assert len(record.options) == 4 and record.context and record.question.endswith("?")


@pytest.mark.shared_data
@requires_shared_data
def test_real_privacyrestore_first_records() -> None:
    ddx = load_privacyrestore("ddx", "dev", limit=1)[0]
    assert ddx.id == "pri-ddx-20748"
    assert ddx.context == (
        "A 31-year-old male has a history of antipsychotic medication usage, nausea, stimulant drug use. "
        "The 31-year-old male presents the symptoms of involuntary eye movement, jaw pain, muscle spasms, ptosis, "
        "shortness of breath."
    )
    assert ddx.question == "What is the likely diagnosis?"
    assert ddx.options == ["Spontaneous pneumothorax", "PSVT", "Unstable angina", "Acute dystonic reactions"]
    assert ddx.answer_index == 3
    assert (ddx.attributes["age"], ddx.attributes["sex"]) == (31, "M")
    assert ddx.attributes["antecedents"] == ["antipsychotic medication usage", "nausea", "stimulant drug use"]
    slja = load_privacyrestore("slja", "dev", limit=1)[0]
    assert slja.options == [
        "Fraud",
        "Allowing others to take drugs",
        "Illegal Detention",
        "Illegal Business Operation Crime",
    ]
    assert slja.answer_index == 1 and slja.question == "What crime is being committed in this case?"
    assert slja.attributes["private_atoms"] == [
        "a person with full criminal responsibility",
        "allowing others to take drugs",
        "physical health rights and life safety",
        "to satisfy his own and others' drug needs",
    ]
    test_ids = {r.id for r in load_privacyrestore("ddx", "test")}
    assert {r.id for r in load_privacyrestore("ddx", "dev")} <= test_ids  # dev is a subset of test


@pytest.mark.shared_data
@requires_shared_data
def test_real_first_records_of_other_datasets() -> None:
    sst = load_dataset("sst2", limit=1)[0]
    assert (sst.text, sst.label) == ("hide new secretions from the parental units", 0)
    tp = load_dataset("trustpilot", limit=1)[0]
    assert (tp.text, tp.label, tp.attributes["age"], tp.attributes["age_cat"]) == (
        "Not the best overall service.",
        "M",
        42,
        "25-54",
    )
    qqp = load_dataset("qqp", limit=1)[0]  # the row whose label tab is a space in the file
    assert (qqp.id, qqp.text_b, qqp.label) == (
        "qqp-133273",
        "Which level of prepration is enough for the exam jlpt5?",
        0,
    )
    mrpc = load_dataset("mrpc", limit=1)[0]
    assert mrpc.text_a.startswith("Amrozi accused his brother") and mrpc.label == 1
    rte = load_dataset("rte", split="train")
    assert sum(r.label for r in rte) == 1241  # 1,249 entailment / 1,241 not_entailment
    csqa = load_dataset("csqa", limit=1)[0]
    assert csqa.answer == "bank" and csqa.attributes["question_concept"] == "revolving door"
    arc = load_dataset("arc", limit=1)[0]
    assert arc.id == "arc-Mercury_7175875" and arc.answer == "Planetary days will become shorter."
    assert load_dataset("gsm8k", limit=1)[0].output == "18"
    presidio = load_dataset("presidio", limit=1)[0]
    assert presidio.spans == [(15, 22, "ORGANIZATION"), (26, 83, "STREET_ADDRESS")]
    pupa = load_dataset("pupa")
    assert pupa[0].pii[0] == "presidio_anonymized_url"  # WildChat placeholders count as PII units
    located = sum(all(any(r.text[s:e].lower() == u.lower() for s, e, _ in r.spans) for u in r.pii) for r in pupa)
    assert located == 644  # every PII unit found in the query for 644 of 664 rows
    lima = load_dataset("lima")
    assert sum(bool(r.attributes["history"]) for r in lima) == 29
