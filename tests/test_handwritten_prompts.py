"""The hand-written Pri-DDX prompts (tests/fixtures/ppft/handwritten_ddx.jsonl): prompts a person would type, in the
dataset's label set, scored by `textfree ppft evaluate --prompts` and never trained on."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from textfree.data import load_privacyrestore

FIXTURE = Path(__file__).parent / "fixtures" / "ppft" / "handwritten_ddx.jsonl"


def _rows() -> list[dict]:
    return [json.loads(line) for line in FIXTURE.read_text().splitlines() if line.strip()]


def test_fixture_loads_as_pri_ddx_records_with_varied_wording():
    records = load_privacyrestore(FIXTURE)
    rows = _rows()
    assert len(records) == len(rows) >= 40
    assert len({r.id for r in records}) == len(records)
    for record, row in zip(records, rows, strict=True):
        assert record.options[record.answer_index] == row["correct_answer"]
        assert len(record.options) == 4 and len(set(record.options)) == 4
    styles = collections.Counter(row["style"] for row in rows)
    assert len(styles) >= 4 and styles["template"] <= len(rows) / 2  # mostly not the dataset's own template
    lengths = [len(row["question_init"].split()) for row in rows]
    assert min(lengths) <= 15 and max(lengths) >= 45  # short notes and long first-person accounts


@pytest.mark.shared_data
def test_fixture_covers_every_diagnosis_and_copies_no_dataset_prompt():
    dataset = load_privacyrestore("pri-ddx", split="dev") + load_privacyrestore("pri-ddx", split="test")
    labels = {r.options[r.answer_index] for r in dataset}
    rows = _rows()
    assert {row["correct_answer"] for row in rows} == labels  # every diagnosis of the label set, no other
    per_label = collections.Counter(row["correct_answer"] for row in rows)
    assert min(per_label.values()) >= 2
    seen = {r.context.strip().lower() for r in dataset}
    for record in load_privacyrestore(FIXTURE):
        assert record.context.strip().lower() not in seen, record.id
