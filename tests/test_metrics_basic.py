"""Basic metrics against values computed by hand."""

import math

import numpy as np
import pytest
import torch

from textfree.metrics import cosine_similarity_rows, mean_stderr, mse, token_recovery_rate


# ------------------------------------------------------------------------------------------------ cosine
def test_cosine_hand_values():
    # [1,0].[0,1] = 0 -> 0 ; [1,1].[2,2] = 4, norms sqrt2 * sqrt8 = 4 -> 1 ; [3,4].[4,3] = 24, norms 5*5 -> 0.96
    # [1,2].[-1,-2] = -5, norms sqrt5*sqrt5 -> -1
    a = [[1, 0], [1, 1], [3, 4], [1, 2]]
    b = [[0, 1], [2, 2], [4, 3], [-1, -2]]
    np.testing.assert_allclose(cosine_similarity_rows(a, b), [0.0, 1.0, 0.96, -1.0], atol=1e-12)


def test_cosine_zero_row_is_zero_not_nan():
    out = cosine_similarity_rows([[0.0, 0.0], [1.0, 0.0]], [[1.0, 1.0], [0.0, 0.0]])
    assert out.tolist() == [0.0, 0.0]


def test_cosine_mask_selects_rows_in_order():
    a = torch.tensor([[[1.0, 0.0], [3.0, 4.0]], [[1.0, 1.0], [5.0, 5.0]]])  # [2, 2, 2]
    b = torch.tensor([[[0.0, 1.0], [4.0, 3.0]], [[2.0, 2.0], [9.0, 9.0]]])
    mask = torch.tensor([[False, True], [True, False]])
    np.testing.assert_allclose(cosine_similarity_rows(a, b, mask), [0.96, 1.0], atol=1e-7)
    assert cosine_similarity_rows(a, b).shape == (2, 2)
    np.testing.assert_allclose(cosine_similarity_rows(a, b, [[0, 1], [1, 0]]), [0.96, 1.0], atol=1e-7)


def test_cosine_shape_errors():
    with pytest.raises(ValueError, match="same shape"):
        cosine_similarity_rows([[1.0, 0.0]], [[1.0, 0.0, 0.0]])
    with pytest.raises(ValueError, match="mask must have shape"):
        cosine_similarity_rows([[1.0, 0.0]], [[1.0, 0.0]], mask=[True, False])
    with pytest.raises(ValueError, match="boolean or 0/1"):
        cosine_similarity_rows([[1.0, 0.0]], [[1.0, 0.0]], mask=[2])


# ----------------------------------------------------------------------------------------- mean / stderr
def test_mean_stderr_hand_values():
    # [1, 2, 3]: mean 2, sample std 1, stderr 1/sqrt(3)
    m, s = mean_stderr([1.0, 2.0, 3.0])
    assert m == 2.0 and s == pytest.approx(1 / math.sqrt(3))
    # [2,4,4,4,5,5,7,9]: mean 5, squared deviations 9+1+1+1+0+0+4+16 = 32, var 32/7, stderr sqrt(32/7)/sqrt(8)
    m, s = mean_stderr([2, 4, 4, 4, 5, 5, 7, 9])
    assert m == 5.0 and s == pytest.approx(math.sqrt(32 / 7) / math.sqrt(8))
    m, s = mean_stderr(torch.tensor([1.0, 3.0]))  # std sqrt(2), stderr 1
    assert m == 2.0 and s == pytest.approx(1.0)


def test_mean_stderr_small_n():
    m, s = mean_stderr([4.5])
    assert m == 4.5 and math.isnan(s)
    m, s = mean_stderr([])
    assert math.isnan(m) and math.isnan(s)
    m, s = mean_stderr([1.0, 1.0, 1.0])
    assert (m, s) == (1.0, 0.0)
    assert mean_stderr([444.36, 444.36, 444.36]) == (444.36, 0.0)  # no float residue
    assert all(isinstance(v, float) for v in mean_stderr(np.array([1, 2])))


# --------------------------------------------------------------------------------------------------- mse
def test_mse_hand_values():
    assert mse([1.0, 2.0], [1.0, 4.0]) == 2.0  # (0 + 4) / 2
    assert mse([[1, 2], [3, 4]], np.zeros((2, 2))) == 7.5  # (1 + 4 + 9 + 16) / 4
    assert mse(torch.tensor([0.5]), torch.tensor([0.0])) == 0.25
    assert isinstance(mse([1], [1]), float)


def test_mse_errors():
    with pytest.raises(ValueError, match="same shape"):
        mse([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="empty"):
        mse([], [])


# ---------------------------------------------------------------------------------------- token recovery
def test_token_recovery_hand_values():
    assert token_recovery_rate([[1, 2, 3]], [[1, 5, 3]]) == pytest.approx(2 / 3)
    assert token_recovery_rate([[1, 2, 3]], [[1, 5, 3]], mask=[[1, 1, 0]]) == 0.5
    pred = torch.tensor([[7, 8, 9, 0], [1, 1, 1, 0]])
    true = torch.tensor([[7, 0, 9, 0], [1, 2, 1, 5]])
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    # row 0: 7=7, 8!=0, 9=9 ; row 1: 1=1, 1!=2, 1=1, 0!=5 -> 4 of 7
    assert token_recovery_rate(pred, true, mask) == pytest.approx(4 / 7)


def test_token_recovery_edge_cases():
    assert math.isnan(token_recovery_rate([[1, 2]], [[1, 2]], mask=[[0, 0]]))
    assert token_recovery_rate([[1, 2]], [[3, 4]]) == 0.0
    with pytest.raises(ValueError, match="same shape"):
        token_recovery_rate([1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="mask must have shape"):
        token_recovery_rate([1, 2], [1, 2], mask=[1])
