"""Word embedding tables: validation, lookup, diameter, GloVe loading and the MiniLM table."""

import os
from pathlib import Path

import pytest
import torch

from textfree.substitution import WordEmbeddingTable, default_whole_words

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "substitution" / "tiny_glove.txt"
DATA = Path(os.environ.get("TEXTFREE_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")
REAL_GLOVE = DATA / "embeddings" / "glove_twitter_25d_12k.txt"
needs_data = pytest.mark.skipif(not REAL_GLOVE.is_file(), reason="../shared/data not found (set TEXTFREE_DATA)")


def test_table_validation():
    v = torch.randn(3, 4)
    with pytest.raises(ValueError, match="duplicate word 'a' at positions 0 and 2"):
        WordEmbeddingTable(["a", "b", "a"], v)
    with pytest.raises(ValueError, match="without whitespace"):
        WordEmbeddingTable(["a", "b c", "d"], v)
    with pytest.raises(ValueError, match="shape"):
        WordEmbeddingTable(["a", "b"], v)
    bad = v.clone()
    bad[1, 2] = float("inf")
    with pytest.raises(ValueError, match="word 'b' \\(row 1\\) is not finite"):
        WordEmbeddingTable(["a", "b", "c"], bad)
    with pytest.raises(ValueError, match="empty"):
        WordEmbeddingTable([], torch.empty(0, 4))
    with pytest.raises(ValueError, match="floating"):
        WordEmbeddingTable(["a", "b", "c"], torch.ones(3, 4, dtype=torch.int64))
    table = WordEmbeddingTable(["a", "b", "c"], v.double())
    assert table.vectors.dtype == torch.float32 and isinstance(table.words, tuple) and len(table) == 3


def test_lookup_and_index_of():
    table = WordEmbeddingTable(["the", "cat", "The", ","], torch.randn(4, 3))
    assert table.index_of("cat") == 1
    with pytest.raises(KeyError, match="'dog' is not in the table"):
        table.index_of("dog")
    rows = table.lookup(["The", "CAT", "dog", ",", "the"])
    assert rows.tolist() == [2, 1, -1, 3, 0]  # exact spelling first, then lower case
    assert table.lookup(["CAT"], fold_case=False).tolist() == [-1]
    assert table.lookup([]).tolist() == []


def test_glove_fixture_loads():
    table = WordEmbeddingTable.from_glove(FIXTURE)
    assert len(table) == 46 and table.dim == 6
    assert table.words[:3] == ("the", "of", "and")
    assert table.vectors[0, 1].item() == pytest.approx(0.29875)
    assert len(WordEmbeddingTable.from_glove(FIXTURE, limit=5)) == 5
    assert table.diameter() == pytest.approx(float(torch.pdist(table.vectors.double()).max()), rel=1e-12)


@pytest.mark.parametrize(
    "lines, message",
    [
        (["a 1 2", "b 1", "c 3 4"], r":2: word 'b' has 1 numbers, expected 2"),
        (["a 1 2", "b 1 x2"], r":2: 'x2' \(for word 'b'\) is not a number"),
        (["a 1 2", "", "c 1 2"], r":2: empty line"),
        (["a 1 2", "b 1 2", "a 3 4"], r":3: duplicate word 'a' \(first on line 1\)"),
        (["a 1 2", "b nan 2"], r":2: word 'b' has a non-finite value"),
        (["lonely"], r":1: expected a word followed by numbers"),
    ],
)
def test_glove_rejects_malformed_lines(tmp_path, lines, message):
    path = tmp_path / "bad.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=message) as info:
        WordEmbeddingTable.from_glove(path)
    assert str(path) in str(info.value)


def test_glove_other_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        WordEmbeddingTable.from_glove(tmp_path / "missing.txt")
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(ValueError, match="no vectors"):
        WordEmbeddingTable.from_glove(tmp_path / "empty.txt")
    (tmp_path / "latin1.txt").write_bytes(b"a 1\ncaf\xe9 2\n")
    with pytest.raises(ValueError, match=r"latin1.txt:2: not valid UTF-8"):
        WordEmbeddingTable.from_glove(tmp_path / "latin1.txt")
    with pytest.raises(ValueError, match="limit"):
        WordEmbeddingTable.from_glove(FIXTURE, limit=0)


@pytest.mark.shared_data
@needs_data
def test_real_glove_twitter():
    table = WordEmbeddingTable.from_glove(REAL_GLOVE)
    assert len(table) == 11925 and table.dim == 25
    assert table.words[0] == "the"
    assert 5.0 < table.diameter() < 50.0


@pytest.fixture(scope="module")
def minilm_table():
    return WordEmbeddingTable.from_hf_model()


def test_minilm_table(minilm_table):
    table = minilm_table
    assert table.dim == 384 and table.name == "sentence-transformers/all-MiniLM-L6-v2"
    assert 20_000 < len(table) < 25_000  # 21,777 whole-word tokens of 30,522
    for special in ("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]", "[unused0]", "##s"):
        assert special not in table
    assert {"the", "movie", ",", "."} <= set(table.words)
    assert all(w.isalpha() or len(w) == 1 for w in table.words)
    tok = table.subword.tokenizer
    # A whole-word token's vector is its own embedding row; another word's is the mean of its sub-tokens.
    the_id = tok.convert_tokens_to_ids("the")
    assert torch.equal(table.vectors[table.index_of("the")], table.subword.token_vectors[the_id])
    vec, ok = table.embed_oov(["unbelievablyx"])
    ids = tok("unbelievablyx", add_special_tokens=False)["input_ids"]
    assert ok.all() and len(ids) > 1
    assert torch.allclose(vec[0], table.subword.token_vectors[ids].mean(0), atol=1e-6)
    assert default_whole_words(tok) == list(table.words)


def test_minilm_custom_vocabulary(minilm_table):
    table = WordEmbeddingTable.from_hf_model(vocabulary=["cat", "dog", "unbelievablyx"])
    assert table.words == ("cat", "dog", "unbelievablyx")
    assert torch.equal(table.vectors[0], minilm_table.vectors[minilm_table.index_of("cat")])
