"""PPFT prompt construction, answer normalisation and scoring."""

from __future__ import annotations

from pathlib import Path

import pytest

from textfree.data import (
    MCQA_INSTRUCTION,
    MCQARecord,
    PromptParts,
    answer_target,
    blind_prompt,
    contains_answer,
    is_correct,
    load_privacyrestore,
    mcqa_prompt,
    normalize_answer,
    open_answer_prompt,
    options_block,
    parse_options_block,
    shared_data_dir,
)

FIXTURES = Path(__file__).parent / "fixtures" / "data"
_SHARED = shared_data_dir()
requires_shared_data = pytest.mark.skipif(
    _SHARED is None or not _SHARED.is_dir(), reason="../shared/data not found (set TEXTFREE_DATA)"
)

RECORD = MCQARecord(
    id="toy-1",
    context="A 57-year-old man has a history of cluster headaches, smoking. He presents eye redness.",
    question="What is the likely diagnosis?",
    options=["Stable angina", "Cluster headache", "Sarcoidosis", "PSVT"],
    answer_index=1,
)


def test_mcqa_prompt_exact_format() -> None:
    parts = mcqa_prompt(RECORD)
    assert isinstance(parts, PromptParts)
    assert parts.private == (
        "A 57-year-old man has a history of cluster headaches, smoking. He presents eye redness. "
        "What is the likely diagnosis?"
    )
    assert parts.public == (
        "Choose the correct option and output only its text, not the label.\n"
        "Options:\nA. Stable angina\nB. Cluster headache\nC. Sarcoidosis\nD. PSVT"
    )
    assert parts.joined() == parts.private + "\n" + parts.public
    # nothing private leaks into the public part
    assert "57-year-old" not in parts.public and "cluster headaches" not in parts.public


def test_blind_and_open_prompts() -> None:
    blind = blind_prompt(RECORD)
    assert blind.private == "" and blind.public == mcqa_prompt(RECORD).public
    assert blind_prompt(RECORD, include_instruction=False).public.startswith("Options:\nA. Stable angina")
    assert blind.joined() == blind.public
    opened = open_answer_prompt(RECORD)
    assert opened.private == mcqa_prompt(RECORD).private
    assert "Options" not in opened.public and "Stable angina" not in opened.public
    public_qa = MCQARecord("q", "", "Where is milk kept?", ["fridge", "oven"], 0)
    assert mcqa_prompt(public_qa).private == "Where is milk kept?"


def test_parse_options_block_reads_back_the_options_of_an_mcqa_prompt() -> None:
    assert parse_options_block(mcqa_prompt(RECORD).public) == RECORD.options
    tricky = ["Theft. Or not", "B. Fraud", "Robbery\tarmed"]  # a label-like start and dots inside an option are text
    assert parse_options_block(options_block(tricky)) == tricky
    assert parse_options_block("Answer the question. Output only the answer.") == []
    assert parse_options_block("") == [] and parse_options_block("Options:") == []
    # the last block counts; reading stops at the first line that is not the next label
    text = "Options:\nA. old\n" + options_block(["x", "y"]) + "\nC is not an option\nD. nor this"
    assert parse_options_block(text) == ["x", "y"]
    assert parse_options_block("Options:\nB. out of order") == []
    assert parse_options_block(options_block([f"o{i}" for i in range(26)])) == [f"o{i}" for i in range(26)]


def test_answer_target_is_option_text() -> None:
    assert answer_target(RECORD) == "Cluster headache"


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("  Cluster   Headache. ", "cluster headache"),
        ("Crohn’s disease", "crohn s disease"),
        ("Crohn's disease", "crohn s disease"),
        ("ＧＥＲＤ", "gerd"),  # full-width letters (NFKC)
        ("Straße", "strasse"),  # casefold
        ("Acute COPD exacerbation / infection", "acute copd exacerbation infection"),
        ("cough,fever", "cough fever"),
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, normalised: str) -> None:
    assert normalize_answer(raw) == normalised


def test_is_correct() -> None:
    assert is_correct("Cluster headache", RECORD)
    assert is_correct("The answer is: CLUSTER HEADACHE.", RECORD)
    assert is_correct("cluster headaches", RECORD)  # containment, as in PPFT Appendix D.1
    assert not is_correct("B", RECORD)  # labels are not accepted
    assert not is_correct("Sarcoidosis", RECORD)
    assert not is_correct("", RECORD)
    listing = "Stable angina, Cluster headache, Sarcoidosis or PSVT"
    assert is_correct(listing, RECORD) and not is_correct(listing, RECORD, exclusive=True)
    nested = MCQARecord("n", "", "Q?", ["Pneumonia", "Bacterial pneumonia"], 1)
    assert is_correct("bacterial pneumonia", nested, exclusive=True)


def test_contains_answer() -> None:
    assert contains_answer(RECORD)  # "cluster headaches" in the context contains "cluster headache"
    clean = MCQARecord("c", "Fever and a stiff neck.", "What is the likely diagnosis?", ["Meningitis", "Flu"], 0)
    assert not contains_answer(clean)


def test_contains_answer_on_fixtures() -> None:
    ddx = load_privacyrestore(FIXTURES / "privacyrestore" / "Pri-DDXPlus_dataset", split="test")
    assert {r.id: contains_answer(r) for r in ddx} == {
        "pri-ddx-303": False,
        "pri-ddx-101": False,
        "pri-ddx-405": False,
        "pri-ddx-102": False,
        "pri-ddx-202": True,
        "pri-ddx-304": False,
    }
    slja = load_privacyrestore(FIXTURES / "privacyrestore" / "Pri-SLJA_dataset", split="test")
    assert [contains_answer(r) for r in slja] == [True, False, False]  # "gambling in a back room" -> Gambling


@pytest.mark.shared_data
@requires_shared_data
@pytest.mark.parametrize(
    ("dataset", "split", "leaking"),
    [("ddx", "dev", 146), ("ddx", "test", 672), ("slja", "dev", 43), ("slja", "test", 219)],
)
def test_real_answer_leak_counts(dataset: str, split: str, leaking: int) -> None:
    records = load_privacyrestore(dataset, split)
    assert sum(contains_answer(r) for r in records) == leaking
    for record in records:
        parts = mcqa_prompt(record)
        assert parts.public.startswith(MCQA_INSTRUCTION + "\nOptions:\nA. ")
        assert record.context not in parts.public
        assert is_correct(answer_target(record), record)
