"""The decoder tokenizer: byte-level BPE that round-trips any text, with EOS/BOS/PAD, deterministic, loadable."""

import pytest

from textfree.lm.loading import load_decoder_tokenizer
from textfree.lm.local.tokenizer import EOS_TOKEN, PAD_TOKEN, load_tokenizer, train_tokenizer

TEXTS = [
    "The patient is a 46-year-old man with a cough and a fever of 38.5 C.",
    "Question: What is 2+2?\nAnswer: 4",
    "Natalia sold 48 clips in April and half as many in May.",
    "The court held that the contract was void.",
    "I love this product!!! Five stars :)",
] * 20


@pytest.fixture(scope="module")
def tok():
    return train_tokenizer(TEXTS, vocab_size=400, model_max_length=128)


@pytest.mark.parametrize(
    "text",
    [
        "The Patient, aged 78, has   two\tspaces and\nnewlines.",
        "Unicode: naïve café – 東京 😀",
        "Question: What is 12*7?\nAnswer: 84",
        "",
    ],
)
def test_round_trip(tok, text):
    ids = tok(text, add_special_tokens=True)["input_ids"]
    assert tok.decode(ids) == text  # cased, spacing kept, no special tokens added, nothing unknown


def test_special_tokens(tok):
    assert tok.eos_token == tok.bos_token == EOS_TOKEN and tok.pad_token == PAD_TOKEN
    assert tok.eos_token_id == 0 and tok.pad_token_id == 1 and tok.bos_token_id == 0
    assert tok.padding_side == "right" and tok.model_max_length == 128
    assert 258 < len(tok) <= 400
    batch = tok(["a", "a longer text"], padding=True)["input_ids"]
    assert batch[0][-1] == tok.pad_token_id


def test_deterministic():
    a = train_tokenizer(TEXTS, vocab_size=400).backend_tokenizer.to_str()
    b = train_tokenizer(TEXTS, vocab_size=400).backend_tokenizer.to_str()
    assert a == b


def test_save_and_load_with_the_decoder_loader(tok, tmp_path):
    tok.save_pretrained(tmp_path)
    for loaded in (load_tokenizer(tmp_path), load_decoder_tokenizer(tmp_path)):
        assert loaded.eos_token_id == tok.eos_token_id and loaded.pad_token_id == tok.pad_token_id
        assert loaded.bos_token_id == tok.bos_token_id and len(loaded) == len(tok)
        assert loaded(TEXTS[0])["input_ids"] == tok(TEXTS[0])["input_ids"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="at least 258"):
        train_tokenizer(TEXTS, vocab_size=100)
    with pytest.raises(ValueError, match="no text"):
        train_tokenizer(["", "  "])
