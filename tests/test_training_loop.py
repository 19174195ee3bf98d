"""The shared training loop's pure pieces: the learning-rate schedule, hand-checked."""

import math

import pytest

from textfree.training.schedule import lr_multiplier


@pytest.mark.parametrize("step, expected", [(0, 0.25), (1, 0.5), (3, 1.0)])
def test_warm_up_rises_linearly_to_one_over_the_warmup_steps(step, expected):
    assert lr_multiplier(step, total=100, warmup=4, min_ratio=0.1) == pytest.approx(expected)


def test_cosine_decay_starts_at_one_passes_the_midpoint_and_ends_at_the_floor():
    # warm-up 10, total 110: the decay runs over steps 10..110
    assert lr_multiplier(10, total=110, warmup=10, min_ratio=0.1) == pytest.approx(1.0)
    # halfway: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 2)) = 0.55
    assert lr_multiplier(60, total=110, warmup=10, min_ratio=0.1) == pytest.approx(0.55)
    # a quarter: 0.1 + 0.9 * 0.5 * (1 + cos(pi / 4)) = 0.1 + 0.45 * 1.70711 = 0.868198
    assert lr_multiplier(35, total=110, warmup=10, min_ratio=0.1) == pytest.approx(0.1 + 0.45 * (1 + math.sqrt(0.5)))
    assert lr_multiplier(110, total=110, warmup=10, min_ratio=0.1) == pytest.approx(0.1)


def test_past_the_end_the_rate_stays_at_the_floor_and_without_warmup_it_starts_at_one():
    assert lr_multiplier(500, total=110, warmup=10, min_ratio=0.2) == pytest.approx(0.2)
    assert lr_multiplier(0, total=10, warmup=0, min_ratio=0.0) == pytest.approx(1.0)
    # min_ratio 1: a constant rate after warm-up
    assert all(lr_multiplier(s, total=50, warmup=5, min_ratio=1.0) == pytest.approx(1.0) for s in range(5, 60))
