"""Encoder loading names the real problem with a local path: from_pretrained reads a missing local path as a
malformed hub id ("Repo id must be in the form ..."), which sends the user looking in the wrong place."""

import pytest

from textfree.encoders import ContextualEncoder, EmbeddingTableEncoder, EncoderLoadError
from textfree.encoders.loading import local_model_problem


def test_a_missing_or_wrong_local_path_is_named(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the relative paths below are judged from here
    missing = tmp_path / "no" / "such" / "encoder"
    afile = tmp_path / "weights.bin"
    afile.write_bytes(b"\0")
    empty = tmp_path / "empty"
    empty.mkdir()
    for loader in (ContextualEncoder.from_pretrained, EmbeddingTableEncoder.from_pretrained):
        with pytest.raises(EncoderLoadError, match=r"no such directory .*encoder"):
            loader(missing)
        with pytest.raises(EncoderLoadError, match="is a file, not a model directory"):
            loader(afile)
        with pytest.raises(EncoderLoadError, match=r"not a model directory \(no config.json"):
            loader(empty)
    assert local_model_problem("sentence-transformers/all-MiniLM-L6-v2") is None  # a hub name goes to from_pretrained
    assert local_model_problem("./enc") == "no such directory './enc'"
    assert local_model_problem("runs/stage1/encoder") == "no such directory 'runs/stage1/encoder'"


def test_a_real_local_encoder_still_loads(tiny_encoder_dir):
    assert local_model_problem(tiny_encoder_dir) is None
    assert ContextualEncoder.from_pretrained(tiny_encoder_dir).dim > 0


def test_the_packaged_default_is_named_by_its_hub_id_whichever_way_it_is_given(tmp_path):
    """`serve --embed-model minilm=default` resolves "default" to the package's directory before the card is made:
    the card and the payload headers must still name sentence-transformers/all-MiniLM-L6-v2, not the folder."""
    from textfree.encoders.loading import DEFAULT_ENCODER_ID, encoder_id, resolve_encoder_path

    assert encoder_id(resolve_encoder_path(None)) == DEFAULT_ENCODER_ID == encoder_id("default") == encoder_id(None)
    assert encoder_id(str(tmp_path)) == str(tmp_path)  # any other directory: as given
