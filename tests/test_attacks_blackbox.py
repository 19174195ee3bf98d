"""public_vocab by hand; BlackBoxConfig validation."""

import pytest
import torch

from textfree.attacks.blackbox import BlackBoxConfig, public_vocab


def test_public_vocab_by_hand():
    ids = torch.tensor([5, 3, 5, 1, 5, 3, 0, 0, 0, 0])  # counts: 0 x4, 5 x3, 3 x2, 1 x1
    vocab, freq = public_vocab(ids, 3)
    assert vocab.tolist() == [0, 5, 3] and freq.tolist() == [4.0, 3.0, 2.0]
    # excluded ids (special tokens) are dropped, also ones larger than any public id (they never occurred)
    vocab, freq = public_vocab(ids, 10, excluded=[0, 100])
    assert vocab.tolist() == [5, 3, 1] and freq.tolist() == [3.0, 2.0, 1.0]
    with pytest.raises(ValueError, match="no public tokens"):
        public_vocab(torch.tensor([], dtype=torch.int64), 3)


def test_config_is_validated():
    for bad in ({"vocab_size": 0}, {"epochs": True}, {"lr": 0}, {"lr": float("nan")}):
        with pytest.raises(ValueError, match="BlackBoxConfig"):
            BlackBoxConfig(**bad)
