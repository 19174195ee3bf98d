"""The decoder's pretraining corpus: general-domain train splits only, never the evaluation sets; deterministic."""

import json
import random

import pytest

from textfree.data import shared_data_dir
from textfree.lm.local.corpus import (
    EXCLUDED,
    GENERAL_SOURCES,
    CorpusError,
    Decontaminator,
    build_corpus,
    check_public_path,
    clean_gsm8k_solution,
    corpus_from_texts,
    evaluation_texts,
    format_qa,
    load_text_file,
)

SHARED = shared_data_dir()
needs_shared = pytest.mark.skipif(
    SHARED is None or not SHARED.is_dir(), reason="../shared/data not found (set TEXTFREE_DATA)"
)


# ------------------------------------------------------------------------------------------ no shared data
def test_explicit_texts_keep_duplicates_and_shuffle_with_seed():
    texts = [f"doc {i}" for i in range(20)] + ["doc 0"]
    a = corpus_from_texts(texts, seed=1)
    b = corpus_from_texts(texts, seed=1)
    c = corpus_from_texts(texts, seed=2)
    assert a.texts == b.texts and a.manifest["sha256"] == b.manifest["sha256"]
    assert sorted(a.texts) == sorted(texts) and a.texts != c.texts
    assert a.manifest["documents"] == 21 and a.manifest["characters"] == sum(map(len, texts))
    assert corpus_from_texts(texts, dedupe=True).manifest["documents"] == 20
    with pytest.raises(TypeError):
        corpus_from_texts("one string")
    with pytest.raises(CorpusError):
        corpus_from_texts(["  ", ""])


def test_formatting():
    assert format_qa("What is 2+2?", "4") == "Question: What is 2+2?\nAnswer: 4"
    assert format_qa("Translate.", "Bonjour", "Hello") == "Question: Translate.\nHello\nAnswer: Bonjour"
    sol = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nSo 48+24 = <<48+24=72>>72.\n#### 72"
    assert clean_gsm8k_solution(sol) == "Natalia sold 48/2 = 24 clips in May.\nSo 48+24 = 72.\nThe answer is 72."


def test_decontaminator_finds_verbatim_eval_text_only():
    d = Decontaminator({"arc:test": ["What is the largest organ in the human body?", "Too short"]})
    assert len(d) == 1  # "Too short" has fewer than 4 words: ignored
    assert d.match("Fun facts.\n7. What is the largest organ in the\nhuman body? The skin.") == "arc:test"
    assert d.match('He asked: "what is the LARGEST organ in the human body?"') == "arc:test"
    assert d.match("What is the largest organ in a cat?") is None


def test_extra_text_files(tmp_path):
    (tmp_path / "a.txt").write_text("First paragraph\nstill first.\n\n\nSecond one.\n")
    (tmp_path / "b.jsonl").write_text('{"text": "x y"}\n\n{"text": "z"}\n')
    (tmp_path / "c.json").write_text(json.dumps(["p", {"text": "q"}]))
    assert load_text_file(tmp_path / "a.txt") == ["First paragraph\nstill first.", "Second one."]
    assert load_text_file(tmp_path / "b.jsonl") == ["x y", "z"]
    assert load_text_file(tmp_path / "c.json") == ["p", "q"]
    (tmp_path / "bad.json").write_text(json.dumps([{"body": "no text key"}]))
    with pytest.raises(CorpusError):
        load_text_file(tmp_path / "bad.json")


def test_protected_paths_are_refused(tmp_path):
    root = tmp_path / "data"
    (root / "privacyrestore" / "Pri-DDXPlus_dataset").mkdir(parents=True)
    (root / "gsm8k").mkdir()
    (root / "public").mkdir()
    for bad in (
        root / "privacyrestore" / "Pri-DDXPlus_dataset" / "test.json",
        root / "gsm8k" / "test.jsonl",
        root / "qa" / "arc" / "arc_challenge_test.jsonl",
    ):
        with pytest.raises(CorpusError, match="may not be pretrained on"):
            check_public_path(bad, root)
    assert check_public_path(root / "public" / "notes.txt", root).name == "notes.txt"
    assert check_public_path(root / "gsm8k" / "train.jsonl", root).name == "train.jsonl"


def test_sources_never_name_an_excluded_split():
    for src in GENERAL_SOURCES:
        assert (src.dataset, src.split) not in EXCLUDED
        assert not src.path.startswith(("privacyrestore", "qa")) and "test" not in src.path
    excluded = {d for d, _ in EXCLUDED}
    assert {"pri-ddx", "pri-slja", "csqa", "arc", "gsm8k"} <= excluded


# --------------------------------------------------------------------------------------------- shared data
@pytest.fixture(scope="module")
def corpus():
    if SHARED is None or not SHARED.is_dir():
        pytest.skip("../shared/data not found (set TEXTFREE_DATA)")
    return build_corpus(SHARED, seed=0)


@pytest.mark.shared_data
@needs_shared
def test_corpus_manifest_lists_the_general_sources(corpus):
    m = corpus.manifest
    names = [s["name"] for s in m["sources"]]
    assert names == [s.name for s in GENERAL_SOURCES]
    by = {s["name"]: s for s in m["sources"]}
    assert by["gsm8k-train"]["documents"] == 7473 and by["alpaca"]["documents"] > 900
    assert by["lima"]["documents"] > 1000 and by["sst2-train"]["documents"] > 60000
    assert by["cola-train"]["documents"] < 8551  # unacceptable sentences left out
    assert m["documents"] == len(corpus.texts) and m["characters"] == corpus.n_chars > 10_000_000
    assert all(s["split"] in ("train", "dev") for s in m["sources"])
    assert set(m["decontaminated_against"]) == {f"{d}:{s}" for d, s in EXCLUDED}
    assert by["lima"]["dropped_contaminated"] == {"arc:test": 1}  # a LIMA answer quotes an ARC question


@pytest.mark.shared_data
@needs_shared
def test_corpus_contains_no_evaluation_text(corpus):
    """Independent of the decontaminator: plain substring search for a sample of every excluded set."""
    blob = "\n".join(corpus.texts)
    rng = random.Random(0)
    evals = evaluation_texts(SHARED)
    assert set(evals) == {f"{d}:{s}" for d, s in EXCLUDED}
    for name, texts in evals.items():
        sample = rng.sample([t.strip() for t in texts if len(t.split()) >= 4], 25)
        leaked = [t for t in sample if t in blob]
        assert not leaked, f"{name} text in the pretraining corpus: {leaked[:2]}"
    # GSM8K test questions are not there, while train questions are
    from textfree.data import load_gsm8k

    train_q = load_gsm8k(SHARED / "gsm8k", split="train", limit=5)
    assert all(f"Question: {r.instruction.strip()}" in blob for r in train_q)


@pytest.mark.shared_data
@needs_shared
def test_corpus_is_deterministic(corpus):
    again = build_corpus(SHARED, seed=0, sources=["alpaca", "legalbench-train"], decontaminate=False)
    again2 = build_corpus(SHARED, seed=0, sources=["alpaca", "legalbench-train"], decontaminate=False)
    other = build_corpus(SHARED, seed=1, sources=["alpaca", "legalbench-train"], decontaminate=False)
    assert again.texts == again2.texts and again.manifest["sha256"] == again2.manifest["sha256"]
    assert sorted(again.texts) == sorted(other.texts) and again.texts != other.texts
    assert corpus.manifest["sha256"] == build_corpus(SHARED, seed=0).manifest["sha256"]


@pytest.mark.shared_data
@needs_shared
def test_unknown_source_and_protected_extra_file_are_refused():
    with pytest.raises(CorpusError, match="unknown corpus source"):
        build_corpus(SHARED, sources=["pri-ddx"])
    with pytest.raises(CorpusError, match="may not be pretrained on"):
        build_corpus(
            SHARED,
            sources=["legalbench-train"],
            extra_text_files=[SHARED / "privacyrestore" / "Pri-DDXPlus_dataset" / "dev.json"],
        )


@pytest.mark.shared_data
@needs_shared
def test_extra_text_hook_adds_documents(tmp_path):
    extra = tmp_path / "public_medical.txt"
    extra.write_text("Influenza is a viral infection of the respiratory tract.\n\nAspirin thins the blood.\n")
    c = build_corpus(SHARED, sources=["legalbench-train"], extra_text_files=[extra], decontaminate=False)
    assert "Aspirin thins the blood." in c.texts
    assert c.manifest["sources"][-1]["name"] == "extra:public_medical.txt"
    assert c.manifest["sources"][-1]["documents"] == 2
