"""Settings are checked before the heavy imports: the config modules of the training commands import no torch (nor
transformers, peft, Accelerate), and a command given a bad value exits with one error line naming the flag before
torch is imported (issue 61: it took seconds of imports to say that ``--stage1-max-steps -1`` is wrong).

Each check runs in a fresh interpreter: this one has torch imported already (``conftest.py``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PRI_DDX = ROOT / "tests" / "fixtures" / "data" / "privacyrestore" / "Pri-DDXPlus_dataset"
#: What a config module must not import: the training stack.
HEAVY = ("torch", "transformers", "peft", "accelerate", "safetensors", "tokenizers")
_REPORT_HEAVY = f"import sys; print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))"


def _run(code: str, cwd: Path | None = None) -> str:
    """``code`` in a fresh interpreter; its stdout."""
    env = dict(os.environ, OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1")
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _heavy_after(code: str, cwd: Path | None = None) -> list[str]:
    """The heavy modules imported once ``code`` ran (its last stdout line)."""
    return json.loads(_run(f"import json\n{code}\n{_REPORT_HEAVY}", cwd).splitlines()[-1])


@pytest.mark.parametrize(
    "module",
    [
        "textfree.ppft.pipeline",
        "textfree.ppft.train_config",
        "textfree.ppft.checks",
        "textfree.snd.train_config",
        "textfree.lm.local.config",
        "textfree.training.config",
        "textfree.training.runs",
        "textfree.training.checkpoint",
        "textfree.rapt.config",
        "textfree.model_paths",
    ],
)
def test_config_modules_import_no_torch(module):
    assert _heavy_after(f"import {module}") == []


def test_valid_configs_are_built_without_torch(tmp_path):
    """Every check of a default config is plain Python, but Stage1Config's noise family (the mechanism registry:
    checked last, see test_a_bad_value_is_reported_before_torch); a non-default encoder path of PipelineConfig too."""
    code = f"""
from textfree.lm.local.config import DecoderPretrainConfig
from textfree.ppft.pipeline import PipelineConfig
from textfree.ppft.train_config import Stage2Config
from textfree.rapt.config import RaptTrainConfig
from textfree.snd.train_config import DenoiserTrainConfig

PipelineConfig()
PipelineConfig(encoder="./enc")  # a model directory: checked without torch (a missing one is an error)
Stage2Config(init="stage1", out="stage2", dataset={str(PRI_DDX)!r}, slot_insert=0.5, center_mu=1.0)
DecoderPretrainConfig.from_preset("small")
DenoiserTrainConfig(out="snd")
RaptTrainConfig(out="rapt")
"""
    (tmp_path / "enc").mkdir()
    (tmp_path / "enc" / "config.json").write_text("{}")
    assert _heavy_after(code, tmp_path) == []


def test_the_light_modules_are_the_ones_the_heavy_ones_use():
    """One definition each: the heavy modules re-export the light names, they do not copy them."""
    from textfree.ppft import batches, checks, evaluate, projection, train
    from textfree.snd import train as snd_train
    from textfree.snd import train_config as snd_train_config
    from textfree.training import average, config

    assert batches.STAGE2_TASKS is checks.STAGE2_TASKS
    assert batches.DEFAULT_GENERAL_SOURCES is checks.DEFAULT_GENERAL_SOURCES
    assert batches.FORBIDDEN_STAGE1_SOURCES is checks.FORBIDDEN_STAGE1_SOURCES
    assert projection.PROJECTION_KINDS is checks.PROJECTION_KINDS
    assert projection.check_dropout is checks.check_dropout
    assert evaluate.TASKS is checks.EVAL_TASKS
    assert average.check_ema_decay is config.check_ema_decay
    assert snd_train.DenoiserTrainConfig is snd_train_config.DenoiserTrainConfig
    assert train.Stage1Config.__module__ == "textfree.ppft.train_config"


_CLI = """
from typer.testing import CliRunner
from textfree.cli import app
r = CliRunner().invoke(app, {args!r})
print(json.dumps({{"code": r.exit_code, "output": r.output}}))
"""


def _cli(args: list[str], cwd: Path) -> tuple[dict, list[str]]:
    """(exit code and output, heavy modules imported) of ``textfree ARGS`` run in a fresh interpreter."""
    lines = _run(f"import json\n{_CLI.format(args=args)}\n{_REPORT_HEAVY}", cwd).splitlines()
    return json.loads(lines[-2]), json.loads(lines[-1])


def _stage1_run(tmp_path: Path) -> Path:
    run = tmp_path / "stage1"
    run.mkdir()
    (run / "textfree_config.json").write_text("{}")
    return run


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["ppft", "train", "--stage1-max-steps", "-1"], "--stage1-max-steps"),
        (["ppft", "train", "--task", "nonsense"], "--task"),
        (["ppft", "train", "--encoder", "./nope"], "--encoder"),
        (["ppft", "train-stage1", "--decoder", "d", "--max-steps", "-1"], "--max-steps"),
        (["ppft", "train-stage1", "--decoder", "d", "--data", "csqa"], "--data"),
        (["ppft", "train-stage2", "--from", "{stage1}", "--batch-size", "0"], "--batch-size"),
        (["ppft", "train-stage2", "--from", "{stage1}", "--dataset", str(PRI_DDX), "--slot-drop", "2"], "--slot-drop"),
        (["ppft", "pretrain-decoder", "--max-steps", "-1"], "--max-steps"),
        (["snd", "train", "--max-steps", "-1"], "--max-steps"),
        (["rapt", "train", "--out", "rapt", "--max-steps", "-1"], "--max-steps"),
    ],
)
def test_a_bad_value_is_reported_before_torch(tmp_path, args, flag):
    args = [a.replace("{stage1}", str(_stage1_run(tmp_path))) if a == "{stage1}" else a for a in args]
    result, heavy = _cli(args, tmp_path)
    errors = [line for line in result["output"].splitlines() if line.startswith("error:")]
    assert result["code"] == 2 and len(errors) == 1 and flag in errors[0], result["output"]
    assert heavy == [], f"imported before the error: {heavy}"
