"""Reading a dataset the project has never seen: the column mapping (textfree.data.table) over the two layouts in
tests/fixtures/audit (a headerless TSV with a rating and a binary age; JSON Lines under other column names), the
one-line errors that name the missing column and the option that maps it, the PrivacyRestore family with its optional
fields optional (Pri-NLICE: no antecedents), and the Trustpilot loader pointing another layout at the mapping."""

import json
from pathlib import Path

import pytest

from textfree.data import (
    AttributeColumn,
    ColumnMap,
    DataError,
    load_dataset,
    load_privacyrestore,
    load_table,
    load_trustpilot,
)
from textfree.data.registry import get_dataset_spec

AUDIT = Path(__file__).parent / "fixtures" / "audit"
TSV = AUDIT / "reviews_headerless.tsv"
JSONL = AUDIT / "notes.jsonl"
DDX = Path(__file__).parent / "fixtures" / "data" / "privacyrestore" / "Pri-DDXPlus_dataset" / "test.json"
TSV_COLUMNS = ColumnMap(
    "text",
    (AttributeColumn.parse("gender:categorical"), AttributeColumn.parse("age:numeric")),
    "rating",
    names=("rating", "gender", "age", "text"),
)


def test_headerless_tsv_reads_through_its_column_names():
    records = load_table(TSV, columns=TSV_COLUMNS)
    assert len(records) == 80
    first = records[0]
    assert first.text.startswith("Bought the blender") and first.label == "2"
    assert first.attributes == {"gender": "M", "age": 1}  # numeric values are numbers, categorical ones strings
    assert {r.attributes["age"] for r in records} == {0, 1}


def test_jsonl_under_other_names_with_lists_and_pii():
    columns = ColumnMap(
        "note",
        (
            AttributeColumn.parse("sex=patient_sex:categorical"),
            AttributeColumn.parse("age=years:numeric:40,65"),
            AttributeColumn.parse("conditions:multilabel"),
        ),
        "dx",
        "names",
    )
    records = load_dataset(JSONL, columns=columns, limit=5)  # a path with a mapping goes to the table reader
    r = records[0]
    assert r.attributes["sex"] == "male" and r.attributes["age"] == 69 and r.attributes["conditions"] == ["eczema"]
    assert r.pii == ["Farid Haddad"] and r.text[slice(*r.spans[0][:2])] == "Farid Haddad"


def test_a_missing_column_is_one_line_naming_it_and_the_option():
    with pytest.raises(DataError) as info:
        load_table(JSONL, columns=ColumnMap("review"))
    message = str(info.value)
    assert "\n" not in message and "missing column 'review'" in message and "--text-column" in message
    assert "columns: note, patient_sex" in message  # what the file has
    with pytest.raises(DataError, match=r"missing column 'gender' \(attribute 'gender'.*--attribute"):
        load_table(JSONL, columns=ColumnMap("note", (AttributeColumn.parse("gender"),)))
    with pytest.raises(DataError, match=r"missing column 'text' \(the text; columns: 2, M, 1, Bought.*--columns"):
        load_table(TSV, columns=ColumnMap("text"))  # a headerless file read as headed: its first row is no header


def test_bad_values_and_formats_are_located_errors(tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("text,age\nhello,old\n")
    with pytest.raises(DataError, match=r"bad.csv, line 2: attribute 'age' \(column 'age'\): 'old' is not a number"):
        load_table(bad, columns=ColumnMap("text", (AttributeColumn.parse("age:numeric"),)))
    odd = tmp_path / "data.xlsx"
    odd.write_text("x")
    with pytest.raises(DataError, match="cannot tell the format"):
        load_table(odd, columns=ColumnMap("text"))
    array = tmp_path / "rows.json"
    array.write_text(json.dumps([{"t": "a", "g": "F"}, {"t": "b", "g": ""}]))
    rows = load_table(array, columns=ColumnMap("t", (AttributeColumn.parse("g"),)))
    assert [r.attributes["g"] for r in rows] == ["F", None]  # an empty cell is None: the attack drops the row


def test_attribute_specs_parse_and_reject():
    a = AttributeColumn.parse("age=author_age:numeric:18,30.5")
    assert (a.name, a.column, a.kind, a.edges) == ("age", "author_age", "numeric", (18, 30.5))
    assert AttributeColumn.parse(a.spec()) == a
    assert AttributeColumn.parse("gender").kind == "categorical"
    for bad, match in (
        ("age:ordinal", "kind must be one of"),
        ("age:numeric:30,18", "increasing"),
        ("age:categorical:1,2", "only a numeric attribute takes edges"),
        ("age:numeric:a,b", "edges must be numbers"),
    ):
        with pytest.raises(ValueError, match=match):
            AttributeColumn.parse(bad)
    mapping = ColumnMap.from_dict({"text": "t", "names": ["t", "g"]}, {"g": {"kind": "numeric", "edges": [1]}})
    assert ColumnMap.from_dict(**mapping.to_dict()) == mapping


def test_a_registered_name_is_not_read_through_a_mapping(monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(Path(__file__).parent / "fixtures" / "data"))
    with pytest.raises(DataError, match="registered dataset, read by its own loader"):
        load_dataset("pri-ddx", columns=ColumnMap("question_init"))
    with pytest.raises(DataError, match="map its columns: --text-column and --attribute"):
        load_dataset(TSV)


def test_nlice_rows_without_antecedents_load_and_declare_the_same_attributes(tmp_path):
    folder = tmp_path / "Pri-NLICE_dataset"
    folder.mkdir()
    rows = [json.loads(line) for line in DDX.read_text().splitlines() if line.strip()][:3]
    for row in rows:
        row.pop("antecedents")
        row.pop("restore_symptoms", None)
    (folder / "test.json").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    records = load_privacyrestore(folder / "test.json")
    assert len(records) == 3 and all("antecedents" not in r.attributes for r in records)
    assert records[0].attributes["dataset"] == "pri-nlice" and records[0].id.startswith("pri-nlice-")
    assert records[0].attributes["private_atoms"] == records[0].attributes["symptoms"]
    assert [a.name for a in get_dataset_spec("nlice").attribute_columns()] == ["sex", "age", "symptoms", "antecedents"]


def test_trustpilot_in_another_layout_names_the_mapping(tmp_path):
    other = tmp_path / "english_train.csv"
    other.write_text("review,rating,gender\nnice,5,F\n")
    with pytest.raises(DataError, match="not the MilaNLP Trustpilot layout.*--text-column / --attribute"):
        load_trustpilot(other)
    derived = tmp_path / "derived" / "english_train.csv"
    derived.parent.mkdir()
    derived.write_text("text,age,gender\nnice,70,F\n")  # no age_cat: it comes from age
    assert load_trustpilot(derived)[0].attributes["age_cat"] == "65+"


def test_parquet_reads_through_the_hub_extra(tmp_path):
    pytest.importorskip("datasets", reason="reading Parquet needs the hub extra (pip install 'textfree[hub]')")
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"t": ["a", "b"], "tags": [["x"], ["x", "y"]]}), path)
    rows = load_table(path, columns=ColumnMap("t", (AttributeColumn.parse("tags:multilabel"),)))
    assert [r.attributes["tags"] for r in rows] == [["x"], ["x", "y"]]


def test_a_hub_name_reads_through_the_same_mapping(monkeypatch):
    import sys
    import types

    calls = []

    def fake_load_dataset(*args, split):
        calls.append((args, split))
        return [{"review": "great", "stars": 5, "g": "F"}, {"review": "bad", "stars": 1, "g": "M"}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=fake_load_dataset))
    columns = ColumnMap("review", (AttributeColumn.parse("gender=g"), AttributeColumn.parse("stars:numeric")))
    records = load_dataset("someone/reviews", split="test", columns=columns)
    assert calls == [(("someone/reviews",), "test")]
    assert [(r.text, r.attributes) for r in records] == [
        ("great", {"gender": "F", "stars": 5}),
        ("bad", {"gender": "M", "stars": 1}),
    ]
