"""make_accelerator: a run's Accelerate settings never depend on what an earlier run in the same process asked for."""

import pytest

from textfree.accel import make_accelerator


def test_settings_are_those_asked_for_whatever_ran_before(monkeypatch):
    monkeypatch.delenv("ACCELERATE_MIXED_PRECISION", raising=False)
    assert make_accelerator(cpu=True, mixed_precision="bf16").mixed_precision == "bf16"  # e.g. pretraining
    after = make_accelerator(cpu=True)  # e.g. stage 1, which asks for none: a plain Accelerator would keep bf16
    assert after.mixed_precision == "no" and after.device.type == "cpu"
    assert make_accelerator(cpu=True, mixed_precision="bf16").mixed_precision == "bf16"  # a plain one would raise
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "bf16")  # what `accelerate launch --mixed_precision bf16` sets
    assert make_accelerator(cpu=True).mixed_precision == "bf16"


def test_a_plain_accelerator_would_have_kept_or_refused_the_earlier_settings():
    """The behaviour make_accelerator exists for (so this test fails if Accelerate ever changes it)."""
    from accelerate import Accelerator

    make_accelerator(cpu=True, mixed_precision="bf16")
    assert Accelerator(cpu=True).mixed_precision == "bf16"
    with pytest.raises(ValueError, match="already been initialized"):
        Accelerator(cpu=True, mixed_precision="fp16")
    make_accelerator(cpu=True)  # leave the process as a fresh one would be
