"""The whole default PPFT pipeline in one call (textfree.ppft.pipeline), its CLI and its cell kind, on tiny models
and the hand-written fixtures: every step runs and is timed, finished steps are reused (and then flagged), a
step directory holding other settings is refused, and bad settings are refused before anything runs."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.experiments import Cell, CellError, run_cell
from textfree.ppft.pipeline import PIPELINE_JSON, STEPS, PipelineConfig, run_pipeline

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "data"


@pytest.fixture
def fixture_data(monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    return FIXTURES


@pytest.fixture
def pretrain_texts(tmp_path) -> Path:
    """A small .txt corpus for the tiny decoder (the fixtures hold no pretraining corpus)."""
    words = (
        "patient fever cough pain chest history male female year old reports days weeks treatment answer question "
        "the a of and with has no is was in for on to"
    ).split()
    paragraphs = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(40)) for i in range(60)]
    path = tmp_path / "pretrain.txt"
    path.write_text("\n\n".join(paragraphs), encoding="utf-8")
    return path


def _tiny(out: Path, encoder: Path, texts: Path, **changes) -> PipelineConfig:
    settings = dict(
        out=str(out),
        encoder=str(encoder),
        pretrain_texts=str(texts),
        preset="tiny",
        pretrain_steps=4,
        stage1_limit_per_source=8,
        stage1_max_steps=1,
        stage2_epochs=1,
        stage2_max_steps=2,
        eval_limit=2,
        progress=False,
    )
    return PipelineConfig(**settings | changes)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"epsilon": 0}, "epsilon must be a positive number, got 0"),
        ({"epsilon": None}, "epsilon must be a positive number, got None"),
        ({"k": 0}, "k must be >= 1, got 0"),
        ({"stage2_epochs": 0}, "stage2_epochs must be >= 1, got 0"),
        ({"eval_limit": 0}, "eval_limit must be >= 1 or null, got 0"),
        ({"pretrain_steps": -3}, "pretrain_steps must be >= 1 or null, got -3"),
        ({"eval_tasks": ["mcqa", "essay"]}, "eval_tasks must be a non-empty list"),
        ({"eval_tasks": []}, "eval_tasks must be a non-empty list"),
        ({"out": ""}, "out (the pipeline's root directory) is required"),
        ({"pretrain_texts": "/no/such/corpus.txt"}, "pretrain_texts '/no/such/corpus.txt' is not a file"),
        ({"eval_prompts": "/no/prompts.jsonl"}, "eval_prompts '/no/prompts.jsonl' is not a file"),
    ],
)
def test_config_refuses_bad_settings_naming_them(change, message):
    with pytest.raises(ValueError) as info:
        PipelineConfig(**change)
    assert message in str(info.value)


def test_defaults_are_the_cells_settings():
    cfg = PipelineConfig()
    assert (cfg.dataset, cfg.epsilon, cfg.k, cfg.stage2_epochs, cfg.eval_tasks) == (
        "pri-ddx",
        28.0,
        4,
        12,
        ["mcqa", "open"],
    )
    assert (cfg.preset, cfg.stage1_max_steps, cfg.stage1_limit_per_source, cfg.max_private_tokens) == (
        "small",
        250,
        1000,
        128,
    )


def test_pipeline_runs_every_step_then_reuses_finished_ones(fixture_data, tmp_path, tiny_encoder_dir, pretrain_texts):
    cfg = _tiny(tmp_path / "pipe", tiny_encoder_dir, pretrain_texts)
    first = run_pipeline(cfg)
    root = tmp_path / "pipe"

    # every step ran here, in its own directory, and was timed
    assert list(first["steps"]) == list(STEPS)
    assert first["measured_in_one_go"] is True and not any(s["reused"] for s in first["steps"].values())
    for name in ("decoder", "stage1", "stage2"):
        assert (root / name).is_dir(), name
    assert json.loads((root / "stage1" / "summary.json").read_text())["steps"] == 1
    s2 = json.loads((root / "stage2" / "summary.json").read_text())
    assert (s2["steps"], s2["epsilon"], s2["k"], s2["dataset"]) == (2, 28.0, 4, "pri-ddx")
    assert json.loads((root / "stage2" / "train_config.json").read_text())["config"]["init"] == str(root / "stage1")
    assert all(s["wall_s"] > 0 for s in first["steps"].values())
    assert first["total_wall_s"] == pytest.approx(sum(s["wall_s"] for s in first["steps"].values()), abs=0.02)
    assert first["this_call_wall_s"] >= first["total_wall_s"] - 0.05
    assert set(first["accuracy"]) == {"mcqa", "open"} and all(0.0 <= a <= 1.0 for a in first["accuracy"].values())
    assert first["n_heldout"] == 1  # the fixture holds out one Pri-DDX row
    assert json.loads((root / PIPELINE_JSON).read_text()) == json.loads(json.dumps(first))
    assert json.loads((root / "eval.json").read_text())["accuracy"] == first["accuracy"]

    # the same call again: the three training steps are reused, with the times recorded when they ran
    again = run_pipeline(cfg)
    assert again["measured_in_one_go"] is False
    assert [again["steps"][s]["reused"] for s in STEPS] == [True, True, True, False]
    assert again["steps"]["stage2"]["wall_s"] == s2["total_wall_s"]
    assert again["accuracy"] == first["accuracy"]  # the same model and the same evaluation noise seed

    # a changed stage-2 setting is refused before anything runs, naming it; the finished stage 2 is kept
    before = (root / "stage2" / "summary.json").read_bytes()
    with pytest.raises(ValueError, match=r"holds a stage2 run with other settings \(max_steps\); use another out"):
        run_pipeline(_tiny(tmp_path / "pipe", tiny_encoder_dir, pretrain_texts, stage2_max_steps=3))
    assert (root / "stage2" / "summary.json").read_bytes() == before
    # ... and so is a changed stage-1 setting
    with pytest.raises(ValueError, match=r"holds a stage1 run with other settings \(limit_per_source\)"):
        run_pipeline(_tiny(tmp_path / "pipe", tiny_encoder_dir, pretrain_texts, stage1_limit_per_source=7))

    # a finished stage 2 over a stage 1 rebuilt since (same path, other weights) is refused, not reused; so is a
    # finished stage above a step that would run anew; nothing is overwritten
    import shutil

    from safetensors.torch import load_file, save_file

    from textfree.training.runs import InitChanged

    (weights,) = (root / "stage1" / "projection").glob("*.safetensors")
    original = weights.read_bytes()
    save_file({k: v + 0.01 for k, v in load_file(weights).items()}, weights)
    with pytest.raises(InitChanged, match=r"was trained from another .*stage1.*remove .*stage2"):
        run_pipeline(cfg)
    assert (root / "stage2" / "summary.json").read_bytes() == before
    weights.write_bytes(original)
    shutil.rmtree(root / "decoder")
    with pytest.raises(
        ValueError, match=r"stage1' holds a finished run, but .*decoder' below it is missing or unfinished"
    ):
        run_pipeline(cfg)
    assert not (root / "decoder").exists() and (root / "stage1" / "summary.json").is_file()


def test_a_decoder_of_other_settings_is_an_error_not_reused(fixture_data, tmp_path, tiny_encoder_dir, pretrain_texts):
    run_pipeline(_tiny(tmp_path / "pipe", tiny_encoder_dir, pretrain_texts, stage2_max_steps=1))
    with pytest.raises(ValueError, match="pretrained with other settings"):
        run_pipeline(_tiny(tmp_path / "pipe", tiny_encoder_dir, pretrain_texts, preset="small", pretrain_steps=1))


def test_cli_prints_each_step_and_refuses_bad_flags(fixture_data, tmp_path, tiny_encoder_dir, pretrain_texts):
    runner = CliRunner()
    args = [
        "ppft",
        "pipeline",
        "--out",
        str(tmp_path / "cli"),
        "--encoder",
        str(tiny_encoder_dir),
        "--preset",
        "tiny",
        "--pretrain-steps",
        "3",
        "--pretrain-texts",
        str(pretrain_texts),
        "--stage1-max-steps",
        "1",
        "--stage1-limit-per-source",
        "8",
        "--stage2-epochs",
        "1",
        "--stage2-max-steps",
        "1",
        "--eval-limit",
        "1",
        "--task",
        "mcqa",
        "--no-progress",
    ]
    result = runner.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    for name in STEPS:
        assert name in result.output
    assert "total" in result.output and "held-out pri-ddx (n=1, epsilon 28, k 4): mcqa" in result.output
    saved = json.loads((tmp_path / "cli" / PIPELINE_JSON).read_text())
    assert saved["config"]["eval_tasks"] == ["mcqa"] and set(saved["accuracy"]) == {"mcqa"}
    bad = runner.invoke(app, ["ppft", "pipeline", "--out", str(tmp_path / "bad"), "--k", "0"])
    assert bad.exit_code == 2 and "k must be >= 1, got 0" in bad.output
    assert not (tmp_path / "bad" / "decoder").exists()  # refused before any step ran


def test_cell_kind_runs_the_pipeline_and_reports_step_times(fixture_data, tmp_path, tiny_encoder_dir, pretrain_texts):
    handwritten = Path(__file__).parent / "fixtures" / "ppft" / "handwritten_ddx.jsonl"
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("\n".join(handwritten.read_text().splitlines()[:2]) + "\n")
    cell = {
        "name": "tiny_pipeline",
        "kind": "ppft_pipeline",
        "dataset": "pri-ddx",
        "params": {
            "out": str(tmp_path / "cell"),
            "encoder": str(tiny_encoder_dir),
            "preset": "tiny",
            "pretrain_steps": 3,
            "pretrain_texts": str(pretrain_texts),
            "stage1_max_steps": 1,
            "stage1_limit_per_source": 8,
            "stage2_epochs": 1,
            "stage2_max_steps": 1,
            "eval_limit": 1,
            "eval_tasks": ["mcqa"],
            "eval_prompts": str(prompts),
        },
        "seeds": [0],
    }
    data = json.loads(run_cell(cell, tmp_path / "results", progress=False).read_text())
    m = data["results"][0]["metrics"]
    assert m["n_prompts"]["values"] == [2.0] and 0.0 <= m["prompts_acc_mcqa"]["values"][0] <= 1.0  # hand-written
    assert m["measured_in_one_go"]["values"] == [1.0] and m["n_heldout"]["values"] == [1.0]
    steps = [m[f"{s}_wall_s"]["values"][0] for s in STEPS]
    assert all(t > 0 for t in steps) and m["total_wall_s"]["values"][0] == pytest.approx(sum(steps), abs=0.02)
    assert 0.0 <= m["acc_mcqa"]["values"][0] <= 1.0 and "acc_open" not in m


@pytest.mark.parametrize(
    "change, field, message",
    [
        ({"params": {"k": 0}}, "params", "k must be >= 1, got 0"),
        ({"params": {"bogus": 1}}, "params", "bogus"),
        ({"params": {"seed": 1}}, "params", "seed"),  # the cell's seeds are the training seeds
        ({"mechanism": {"name": "l2_laplace", "epsilon": 28}}, "mechanism", "params"),
    ],
)
def test_cell_kind_refuses_bad_cells(change, field, message):
    cell = {"name": "p", "kind": "ppft_pipeline", "dataset": "pri-ddx", "params": {}, "seeds": [0]} | change
    with pytest.raises(CellError) as info:
        Cell.from_dict(cell)
    assert info.value.field == field and message in str(info.value)


def test_stage2_prompt_variants_reach_the_stage2_config():
    from textfree.ppft.pipeline import _stage2_config

    cfg = PipelineConfig(stage2_prompt_variants=0.5, stage2_prompt_variant_drop=0.1, stage2_prompt_variant_rephrase=0.7)
    variants = _stage2_config(cfg, "runs/pipeline/stage1").variants()
    assert (variants.prob, variants.drop, variants.rephrase, variants.shuffle) == (0.5, 0.1, 0.7, True)
    assert not _stage2_config(PipelineConfig(), "runs/pipeline/stage1").variants().active  # PPFT's client by default
