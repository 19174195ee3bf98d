"""Offline part-of-speech tagging into universal tags."""

import os
from pathlib import Path

import pytest
import torch

from textfree.substitution import (
    PTB_TO_UNIVERSAL,
    UNIVERSAL_TAGS,
    NltkPerceptronTagger,
    TextBlobTagger,
    category_masks,
    get_tagger,
    ptb_to_universal,
)
from textfree.substitution.pos import _sentence_batches

DATA = Path(os.environ.get("TEXTFREE_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
NLTK_DATA = DATA / "nltk_data"
needs_data = pytest.mark.skipif(
    not (NLTK_DATA / "taggers" / "universal_tagset").is_dir(), reason="../shared/data not found (set TEXTFREE_DATA)"
)

SENTENCE = "She gave the old book to him in the garden and smiled twice .".split()


def test_textblob_tags_universal():
    tags = TextBlobTagger().tag(SENTENCE)
    assert len(tags) == len(SENTENCE) and set(tags) <= set(UNIVERSAL_TAGS)
    got = dict(zip(SENTENCE, tags))
    assert got["She"] == "PRON" and got["book"] == "NOUN" and got["gave"] == "VERB" and got["to"] in ("ADP", "PRT")
    assert got["in"] == "ADP" and got["the"] == "DET" and got["and"] == "CONJ" and got["."] == "."
    assert TextBlobTagger().tag([]) == []
    assert TextBlobTagger().tag_isolated(["garden", "quickly"]) == ["NOUN", "ADV"]


def test_textblob_long_input_is_batched_without_changing_counts():
    words = (SENTENCE * 80)[:-1] + ["no", "end"]
    assert len(TextBlobTagger().tag(words)) == len(words)
    assert _sentence_batches("a b . c d e . f".split(), 4) == [["a", "b", "."], ["c", "d", "e", "."], ["f"]]
    assert _sentence_batches("a b c d e".split(), 2) == [["a", "b"], ["c", "d"], ["e"]]


def test_tagger_input_checks():
    with pytest.raises(TypeError):
        TextBlobTagger().tag("a sentence")
    with pytest.raises(ValueError, match="without whitespace"):
        TextBlobTagger().tag(["two words"])
    with pytest.raises(ValueError, match="unknown tagger"):
        get_tagger("spacy")
    with pytest.raises(ValueError, match="data_dir"):
        get_tagger("nltk")
    with pytest.raises(ValueError, match="averaged perceptron"):
        NltkPerceptronTagger("/nonexistent")


def test_ptb_map_and_category_masks():
    assert ptb_to_universal("NNS") == "NOUN" and ptb_to_universal("PRP$") == "PRON" and ptb_to_universal("??") == "X"
    assert set(PTB_TO_UNIVERSAL.values()) <= set(UNIVERSAL_TAGS)
    masks = category_masks(["NOUN", "VERB", "NOUN", "."], ["NOUN", "ADP"])
    assert masks["NOUN"].tolist() == [True, False, True, False] and not masks["ADP"].any()
    assert masks["NOUN"].dtype == torch.bool
    with pytest.raises(ValueError, match="unknown universal tag"):
        category_masks(["NOUN"], ["NN"])


@pytest.mark.shared_data
@needs_data
def test_builtin_map_agrees_with_nltk_en_ptb_map():
    rows = (NLTK_DATA / "taggers" / "universal_tagset" / "en-ptb.map").read_text().split("\n")
    nltk_map = dict(line.split("\t") for line in rows if line.strip())
    for tag, universal in nltk_map.items():
        if "|" not in tag and tag != "JJRJR":
            assert PTB_TO_UNIVERSAL[tag] == universal, tag


@pytest.mark.shared_data
@needs_data
def test_nltk_perceptron_tagger_offline():
    tagger = get_tagger("nltk", data_dir=NLTK_DATA)
    tags = tagger.tag(SENTENCE)
    assert len(tags) == len(SENTENCE) and set(tags) <= set(UNIVERSAL_TAGS)
    got = dict(zip(SENTENCE, tags))
    assert got["She"] == "PRON" and got["book"] == "NOUN" and got["gave"] == "VERB" and got["in"] == "ADP"
    assert tagger.tag_isolated(["garden"]) == ["NOUN"]
    assert tagger.tag([]) == []
