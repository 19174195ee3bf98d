"""One verb set across the systems' command groups (``textfree ppft|snd|rapt``: ``train``, ``evaluate``, ``report``
first, a system's own steps after them), the old command names kept as hidden aliases that still work, the new
``evaluate`` commands of SnD and RAPT (which reproduce the held-out figures ``train`` printed), and errors that name
the flag a user typed."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.cli_common import SYSTEM_VERBS, leading_flag_message, option_flags

runner = CliRunner()

#: The verb matrix: each system group's visible commands, in the order its help lists them.
MATRIX = {
    "ppft": [*SYSTEM_VERBS, "pretrain-decoder", "train-stage1", "train-stage2", "ask", "width-match"],
    "snd": [*SYSTEM_VERBS],
    "rapt": [*SYSTEM_VERBS],
}
#: Old name -> new name, per group: hidden, still working.
ALIASES = {("ppft", "pipeline"): "train", ("snd", "train-denoiser"): "train"}


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def listed_commands(group: str) -> list[str]:
    r = invoke(group, "--help")
    assert r.exit_code == 0, r.output
    block = r.output.split("Commands:", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\S+)", block, flags=re.M)]


def error_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if line.startswith("error: ")]


# ------------------------------------------------------------------------------------------------ the verb matrix
@pytest.mark.parametrize("group", sorted(MATRIX))
def test_every_system_lists_train_evaluate_report_first(group):
    assert listed_commands(group) == MATRIX[group]
    assert SYSTEM_VERBS == ("train", "evaluate", "report")


@pytest.mark.parametrize("group, verb", [(g, v) for g in sorted(MATRIX) for v in SYSTEM_VERBS])
def test_every_verb_has_help_without_a_type_on_flags(group, verb):
    r = invoke(group, verb, "--help")
    assert r.exit_code == 0, r.output
    assert "--help <bool>" not in r.output and "Deprecated" not in r.output


@pytest.mark.parametrize("group, old", sorted(ALIASES))
def test_an_old_name_is_hidden_but_still_has_its_help(group, old):
    new = ALIASES[(group, old)]
    assert old not in listed_commands(group)
    r = invoke(group, old, "--help")
    assert r.exit_code == 0, r.output
    assert f"Deprecated name of 'textfree {group} {new}'" in r.output
    # the same options as the new name
    options = lambda text: sorted(set(re.findall(r"^\s+(--[a-z0-9-]+)", text, flags=re.M)))  # noqa: E731
    assert options(r.output) == options(invoke(group, new, "--help").output)


# ------------------------------------------------------------------------------------------------ aliases run
def _fake_pipeline(seen: list):
    def run_pipeline(cfg):
        seen.append(cfg)
        step = {"wall_s": 1.0, "reused": False, "dir": cfg.out}
        return {"steps": {"decoder": step}, "total_wall_s": 1.0, "measured_in_one_go": True,
                "accuracy": {"mcqa": 0.5}, "n_heldout": 2}  # fmt: skip

    return run_pipeline


def test_ppft_pipeline_runs_ppft_train_with_the_same_settings_and_a_warning(monkeypatch, tmp_path):
    import textfree.ppft.pipeline as pipeline

    seen: list = []
    monkeypatch.setattr(pipeline, "run_pipeline", _fake_pipeline(seen))
    args = ["--out", tmp_path / "p", "--preset", "tiny", "--stage1-max-steps", 3, "--task", "mcqa", "--no-progress"]
    new, old = invoke("ppft", "train", *args), invoke("ppft", "pipeline", *args)
    assert new.exit_code == 0 and old.exit_code == 0, new.output + old.output
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].stage1_max_steps == 3
    assert "deprecated" not in new.output
    assert "'textfree ppft pipeline' is deprecated: it is now 'textfree ppft train'" in old.stderr
    assert old.stdout == new.stdout and "held-out pri-ddx (n=2" in old.stdout


def test_snd_train_denoiser_runs_snd_train_with_the_same_settings_and_a_warning(monkeypatch, tmp_path):
    import textfree.snd.train as train

    seen: list = []

    def fake(cfg):
        seen.append(cfg)
        return {"validation": {"50": dict.fromkeys(("nsr", "mse_noisy", "mse_denoised", "cos_noisy", "cos_denoised"),
                                                   0.5)},
                "steps": 2, "first_loss": 1.0, "final_loss": 0.5, "s_per_step": 0.1, "total_wall_s": 1.0,
                "denoiser_file": "denoiser.safetensors", "denoiser_sha256": "0" * 64}  # fmt: skip

    monkeypatch.setattr(train, "train_denoiser", fake)
    args = ["--out", tmp_path / "d", "--etas", "50", "--max-steps", 2, "--sources", "sst2", "--no-progress", "--cpu"]
    new, old = invoke("snd", "train", *args), invoke("snd", "train-denoiser", *args)
    assert new.exit_code == 0 and old.exit_code == 0, new.output + old.output
    assert len(seen) == 2 and seen[0] == seen[1] and seen[0].sources == ["sst2"]
    assert "'textfree snd train-denoiser' is deprecated: it is now 'textfree snd train'" in old.stderr
    assert "deprecated" not in new.output and "denoiser trained: 2 steps" in old.stdout


# ------------------------------------------------------------------------------------------------ errors name flags
def _fake_run(path: Path, *files: str) -> Path:
    path.mkdir()
    for name in files:
        (path / name).write_text("{}")
    return path


@pytest.mark.parametrize(
    "args, flag",
    [
        (["rapt", "evaluate", "--model", "/nonexistent/run"], "--model"),
        (["rapt", "evaluate", "--model", "RAPT", "--test-limit", "1"], "--test-limit"),
        (["rapt", "evaluate", "--model", "RAPT", "--eta", "-1"], "--eta"),
        (["rapt", "evaluate", "--model", "RAPT", "--batch-size", "0"], "--batch-size"),
        (["rapt", "evaluate", "--model", "RAPT", "--out", "/nonexistent/dir/r.json"], "--out"),
        (["snd", "evaluate", "--denoiser", "/nonexistent/run"], "--denoiser"),
        (["snd", "evaluate", "--denoiser", "SND", "--etas", "50,0"], "--etas"),
        (["snd", "evaluate", "--denoiser", "SND", "--val-size", "0"], "--val-size"),
        (["snd", "evaluate", "--denoiser", "SND", "--noise-seed", "-1"], "--noise-seed"),
        (["snd", "train", "--etas", "fifty"], "--etas"),
        (["snd", "train-denoiser", "--etas", "fifty"], "--etas"),
        (["ppft", "train", "--stage1-max-steps", "0"], "--stage1-max-steps"),
        (["ppft", "pipeline", "--epsilon", "-1"], "--epsilon"),
        (["ppft", "train", "--task", "nonsense"], "--task"),
    ],
)
def test_an_error_names_the_flag_the_user_typed(args, flag, tmp_path):
    rapt = _fake_run(tmp_path / "rapt", "train_config.json", "summary.json")
    snd = _fake_run(tmp_path / "snd", "train_config.json")
    args = [str(rapt) if a == "RAPT" else str(snd) if a == "SND" else a for a in args]
    if args[:2] == ["ppft", "train"] or args[:2] == ["ppft", "pipeline"]:
        args += ["--out", str(tmp_path / "pipeline")]
    r = invoke(*args)
    assert r.exit_code == 2, r.output
    errors = error_lines(r.output)
    assert len(errors) == 1 and errors[0].startswith(f"error: {flag}"), r.output
    assert "Traceback" not in r.output and not (tmp_path / "pipeline").exists()


def test_a_setting_named_by_the_config_is_reported_as_the_commands_flag():
    from textfree.cli_ppft import _RENAMES
    from textfree.cli_ppft import app as ppft

    flags = option_flags(ppft, _RENAMES)
    assert flags["init"] == "--from" and flags["batch_size"] == "--batch-size" and flags["resume"] == "--resume"
    assert flags["tasks"] == flags["eval_tasks"] == "--task" and flags["num_threads"] == "--threads"
    assert flags["output_dir"] == "--out" and flags["extra_text_files"] == "--extra-text"
    assert leading_flag_message("TextFreeConfig.k must be an integer >= 1, got 0", flags) == (
        "--k: TextFreeConfig.k must be an integer >= 1, got 0"
    )
    assert leading_flag_message("num_threads must be at least 1", flags) == "--threads: num_threads must be at least 1"
    assert leading_flag_message("encoder: no such directory", flags) == "--encoder: no such directory"
    assert leading_flag_message("no such file: x", flags) == "no such file: x"  # no setting named: unchanged


def test_ppft_step_errors_name_the_flag(tmp_path, tiny_run_dir):
    r = invoke("ppft", "pretrain-decoder", "--preset", "tiny", "--threads", 0, "--out", tmp_path / "d")
    assert r.exit_code == 2 and error_lines(r.output)[0].startswith("error: --threads"), r.output
    r = invoke("ppft", "train-stage2", "--from", tiny_run_dir, "--task", "foo", "--out", tmp_path / "s2")
    assert r.exit_code == 2 and error_lines(r.output)[0].startswith("error: --task"), r.output


# ------------------------------------------------------------------------------------------------ evaluate
@pytest.mark.slow
def test_rapt_evaluate_reproduces_the_accuracy_train_printed(shared_data, tiny_encoder_dir, tmp_path):
    run = tmp_path / "rapt"
    r = invoke("rapt", "train", "--out", run, "--model", tiny_encoder_dir, "--task", "sst2", "--eta", 50,
               "--train-limit", 16, "--test-limit", 12, "--max-steps", 2, "--batch-size", 8, "--plain-tokens", 4,
               "--max-length", 32, "--no-progress")  # fmt: skip
    assert r.exit_code == 0, r.output
    summary = json.loads((run / "summary.json").read_text())
    out = tmp_path / "eval.json"
    r = invoke("rapt", "evaluate", "--model", run, "--out", out, "--no-progress")
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["n_test"] == summary["n_test"] == 12
    assert result["acc"] == pytest.approx(summary["acc"]) and f"accuracy {summary['acc']:.4f}" in r.stdout
    assert result["mean_privatized_words"] == pytest.approx(summary["mean_privatized_words"])
    # other noise, another draw of the same test examples
    r = invoke("rapt", "evaluate", "--model", run, "--noise-seed", 7, "--test-limit", 4, "--no-progress")
    assert r.exit_code == 0 and "on 4 privatized test examples" in r.stdout and "noise seed 7" in r.stdout, r.output


@pytest.mark.slow
def test_snd_evaluate_reproduces_the_validation_table_train_printed(shared_data, tiny_encoder_dir, tmp_path):
    run = tmp_path / "snd"
    r = invoke("snd", "train", "--model", tiny_encoder_dir, "--out", run, "--etas", "50,500", "--sources", "sst2",
               "--limit-per-source", 60, "--val-size", 12, "--max-steps", 2, "--batch-size", 8, "--max-tokens", 16,
               "--layers", 1, "--no-progress", "--cpu")  # fmt: skip
    assert r.exit_code == 0, r.output
    summary = json.loads((run / "summary.json").read_text())
    out = tmp_path / "eval.json"
    r = invoke("snd", "evaluate", "--denoiser", run, "--out", out)
    assert r.exit_code == 0, r.output
    result = json.loads(out.read_text())
    assert result["n_texts"] == 12 and result["denoiser_sha256"] == summary["denoiser_sha256"]
    assert set(result["validation"]) == {"50", "500"}
    for eta, figures in summary["validation"].items():
        assert result["validation"][eta] == pytest.approx(figures, rel=1e-5), eta
    r = invoke("snd", "evaluate", "--denoiser", run, "--etas", "100", "--val-size", 4, "--noise-seed", 3)
    assert r.exit_code == 0 and "4 held-out texts" in r.stdout and "noise seed 3" in r.stdout, r.output
    r = invoke("snd", "evaluate", "--denoiser", run, "--val-size", 13)  # more than the run held out
    assert r.exit_code == 2 and error_lines(r.output)[0].startswith("error: --val-size"), r.output
