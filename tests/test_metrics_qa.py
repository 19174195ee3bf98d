import math

import pytest

from textfree.metrics import accuracy, first_mentioned, open_answer_correct, seed_spread

LABELS = ["Cluster headache", "Migraine", "Anemia", "Headache", "Acute otitis media"]


def test_first_mentioned_earliest_and_longest_at_same_start():
    assert first_mentioned("It is a migraine, not anemia.", LABELS) == 1
    # "cluster headache" and "headache": "cluster headache" starts earlier
    assert first_mentioned("Probably cluster headache.", LABELS) == 0
    # word boundaries: "anemias" is not "anemia"; plural "headaches" does not match "headache"
    assert first_mentioned("anemias everywhere", LABELS) is None
    assert first_mentioned("The answer is: acute otitis media!", LABELS + ["Otitis"]) == 4
    assert first_mentioned("", LABELS) is None


def test_first_mentioned_duplicate_labels_resolve_to_the_first():
    assert first_mentioned("flu", ["Cold", "Flu", "flu"]) == 1


def test_open_answer_correct_hand_cases():
    assert open_answer_correct("The diagnosis is Migraine.", "Migraine", LABELS)
    assert not open_answer_correct("Anemia, or maybe migraine", "Migraine", LABELS)
    assert not open_answer_correct("no idea", "Migraine", LABELS)
    # gold "Headache" loses to the longer label starting at the same place only if that one starts earlier
    assert not open_answer_correct("cluster headache", "Headache", LABELS)
    assert open_answer_correct("headache", "Headache", LABELS)
    with pytest.raises(ValueError, match="not among"):
        open_answer_correct("x", "Flu", LABELS)


def test_accuracy_and_seed_spread_hand_values():
    assert accuracy([True, False, True, True]) == 0.75
    assert math.isnan(accuracy([]))
    s = seed_spread([0.5, 0.7, 0.6])
    # mean 0.6; sample std sqrt(((-0.1)^2 + 0.1^2 + 0) / 2) = 0.1
    assert s["mean"] == pytest.approx(0.6) and s["std"] == pytest.approx(0.1)
    assert s["min"] == 0.5 and s["max"] == 0.7 and s["n"] == 3
    assert math.isnan(seed_spread([0.4])["std"])


def test_mean_interval_hand_values():
    from textfree.metrics import mean_interval

    # mean 0.85, sample sd 0.05, n 3: half-width t_{0.975, 2} * 0.05 / sqrt(3) = 4.302653 * 0.0288675 = 0.124207
    lo, hi = mean_interval([0.80, 0.85, 0.90])
    assert lo == pytest.approx(0.85 - 0.124207, abs=1e-6) and hi == pytest.approx(0.85 + 0.124207, abs=1e-6)
    # 90%: t_{0.95, 2} = 2.919986 -> half-width 0.084293
    lo, hi = mean_interval([0.80, 0.85, 0.90], confidence=0.90)
    assert hi - 0.85 == pytest.approx(0.084293, abs=1e-6)
    assert mean_interval([0.5, 0.5, 0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="at least two values, got 1"):
        mean_interval([0.4])
    with pytest.raises(ValueError, match="confidence must lie in"):
        mean_interval([0.4, 0.5], confidence=1.0)


def test_welch_test_hand_values():
    from textfree.metrics import welch_test

    # a: mean 2, var 1, n 3; b: mean 5.5, var 5/3, n 4. se^2 = 1/3 + (5/3)/4 = 0.75, t = -3.5 / sqrt(0.75) = -4.041452;
    # df = 0.75^2 / ((1/3)^2 / 2 + (5/12)^2 / 3) = 0.5625 / 0.113426 = 4.959184
    w = welch_test([1, 2, 3], [4, 5, 6, 7])
    assert w["t"] == pytest.approx(-4.041452, abs=1e-6) and w["df"] == pytest.approx(4.959184, abs=1e-6)
    assert w["p"] == pytest.approx(
        0.0100769, abs=1e-6
    )  # the t distribution's two-sided tail (scipy's ttest_ind agrees)
    assert welch_test([4, 5, 6, 7], [1, 2, 3])["t"] == pytest.approx(4.041452, abs=1e-6)
    with pytest.raises(ValueError, match="at least two values on each side, got 1 and 3"):
        welch_test([1], [1, 2, 3])
    with pytest.raises(ValueError, match="needs some spread"):
        welch_test([1, 1], [1, 1])
