"""Server-side slot-count augmentation (textfree.ppft.slot_augment): what it does to a row, in distribution."""

import math

import pytest
import torch
from scipy import stats

from textfree.ppft.batches import PayloadExample
from textfree.ppft.slot_augment import SlotCountAugment


def _row(n: int, d: int = 16, seed: int = 0) -> torch.Tensor:
    v = torch.randn(n, d, generator=torch.Generator().manual_seed(seed))
    return v / v.norm(dim=-1, keepdim=True)


def _subsequence_positions(row: torch.Tensor, out: torch.Tensor) -> list[int]:
    """Where each row vector sits in ``out`` (exact matches, in order); fails if one is missing."""
    pos, j = [], 0
    for v in row:
        while j < out.shape[0] and not torch.equal(out[j], v):
            j += 1
        assert j < out.shape[0], "a slot of the row is missing or out of order"
        pos.append(j)
        j += 1
    return pos


def test_insert_keeps_every_slot_in_order_and_adds_uniformly_many_random_unit_slots():
    """n = 10, insert 0.5: m is uniform on 0..5 (chi-square, alpha 1e-6, 6,000 draws, seed 0); the row's slots keep
    their order; the extra slots are unit vectors with no preferred direction (their mean is near 0)."""
    aug, row, gen = SlotCountAugment(insert=0.5), _row(10), torch.Generator().manual_seed(0)
    counts = torch.zeros(6)
    extras = []
    for _ in range(6000):
        out = aug.apply_row(row, generator=gen)
        m = out.shape[0] - 10
        counts[m] += 1
        pos = _subsequence_positions(row, out)
        extra = out[[i for i in range(out.shape[0]) if i not in pos]]
        extras.append(extra)
    assert stats.chisquare(counts.numpy()).pvalue > 1e-6
    assert counts.min() > 0  # 0 and the maximum ceil(0.5 * 10) = 5 both occur
    extras = torch.cat(extras)
    torch.testing.assert_close(extras.norm(dim=-1), torch.ones(extras.shape[0]), atol=1e-5, rtol=0)
    # a uniform direction in 16 dimensions: each coordinate of the mean has sd 1/sqrt(16 N); 6 sd is far beyond it
    assert extras.mean(0).abs().max() < 6 / math.sqrt(16 * extras.shape[0])


def test_inserted_slots_land_at_every_position():
    aug, row, gen = SlotCountAugment(insert=0.3), _row(4), torch.Generator().manual_seed(1)
    seen = set()
    for _ in range(500):
        out = aug.apply_row(row, generator=gen)
        pos = set(_subsequence_positions(row, out))
        seen |= {i for i in range(out.shape[0]) if i not in pos}
    assert seen == set(range(6))  # ceil(0.3 * 4) = 2 extras at most: positions 0..5


def test_drop_removes_each_slot_with_its_probability_and_keeps_one():
    """30 slots x 400 draws at drop 0.3: the dropped count is Binomial(12,000, 0.3) (two-sided, alpha 1e-6);
    kept slots keep their order; a one-slot row always keeps its slot."""
    aug, row, gen = SlotCountAugment(drop=0.3), _row(30), torch.Generator().manual_seed(2)
    dropped = 0
    for _ in range(400):
        out = aug.apply_row(row, generator=gen)
        assert 1 <= out.shape[0] <= 30
        positions = [next(i for i in range(30) if torch.equal(row[i], v)) for v in out]
        assert positions == sorted(positions)
        dropped += 30 - out.shape[0]
    assert stats.binomtest(dropped, 12_000, 0.3).pvalue > 1e-6
    one = _row(1)
    for _ in range(50):
        assert torch.equal(SlotCountAugment(drop=0.9).apply_row(one, generator=gen), one)


def test_drop_then_insert_and_the_inactive_and_empty_cases():
    gen = torch.Generator().manual_seed(3)
    row = _row(8)
    assert SlotCountAugment().apply_row(row, generator=gen) is row
    assert not SlotCountAugment().active and SlotCountAugment().to_dict() is None
    assert SlotCountAugment(0.5, 0.25).to_dict() == {"insert": 0.5, "drop": 0.25}
    empty = torch.zeros(0, 16)
    assert SlotCountAugment(0.5, 0.5).apply_row(empty, generator=gen) is empty
    sizes = {SlotCountAugment(insert=1.0, drop=0.5).apply_row(row, generator=gen).shape[0] for _ in range(300)}
    assert min(sizes) < 8 and max(sizes) > 8 and max(sizes) <= 16  # the drop comes first: at most ceil(1.0 * 8) + 8
    examples = [PayloadExample(row, "pub", "t"), PayloadExample(empty, "pub2", "u")]
    out = SlotCountAugment(insert=1.0).apply(examples, generator=gen)
    assert [(e.public, e.target) for e in out] == [("pub", "t"), ("pub2", "u")] and out[1].vectors.shape == (0, 16)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"insert": -0.1}, "slot_insert must be a number in [0, 4.0], got -0.1"),
        ({"insert": float("nan")}, "slot_insert must be a number in [0, 4.0], got nan"),
        ({"insert": True}, "slot_insert must be a number in [0, 4.0], got True"),
        ({"insert": "0.5"}, "slot_insert must be a number in [0, 4.0], got '0.5'"),
        ({"drop": 0.95}, "slot_drop must be a number in [0, 0.9], got 0.95"),
        ({"drop": -1}, "slot_drop must be a number in [0, 0.9], got -1"),
    ],
)
def test_bad_settings_are_refused_with_their_value(kwargs, message):
    with pytest.raises(ValueError) as err:
        SlotCountAugment(**kwargs)
    assert str(err.value) == message
