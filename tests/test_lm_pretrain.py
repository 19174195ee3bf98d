"""Local decoder pretraining: it learns, it resumes exactly, and the result loads like any HF decoder."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from textfree.lm.generate import generate_text
from textfree.lm.loading import load_decoder
from textfree.lm.local import DecoderPretrainConfig, corpus_from_texts, finished_pretraining, pretrain_decoder
from textfree.lm.local.config import PRESETS
from textfree.lm.local.pretrain import build_llama_config, lr_at
from textfree.training.checkpoint import latest_checkpoint, load_training_checkpoint
from textfree.training.schedule import lr_multiplier

ROOT = Path(__file__).resolve().parents[1]

TEXTS = [
    "The cat sat on the mat and looked at the bird.",
    "A dog ran in the park with a red ball.",
    "The patient has a fever, a cough and a sore throat.",
    "Question: What is 2+2?\nAnswer: 4",
    "The sun rises in the east and sets in the west.",
    "Question: What is the capital of France?\nAnswer: Paris",
] * 30


def tiny(out, **overrides):
    overrides.setdefault("num_threads", 1)  # tiny models gain nothing from threads; spare a shared machine
    return DecoderPretrainConfig.from_preset("tiny", output_dir=str(out), **overrides)


def heldout_loss(model, tok, texts) -> float:
    """Mean next-token loss of ``model`` over ``texts`` (each with EOS), computed here, not by the trainer."""
    total, n = 0.0, 0
    model.eval()
    with torch.no_grad():
        for text in texts:
            ids = torch.tensor([tok(text)["input_ids"] + [tok.eos_token_id]])
            loss = model(input_ids=ids, labels=ids).loss.item()
            total += loss * (ids.shape[1] - 1)
            n += ids.shape[1] - 1
    return total / n


@pytest.fixture(scope="module")
def run_a(tmp_path_factory):
    out = tmp_path_factory.mktemp("decoder-a")
    return pretrain_decoder(tiny(out), texts=TEXTS, progress=False)


def test_tiny_pretraining_reduces_heldout_loss(run_a):
    cfg = tiny(run_a)
    corpus = corpus_from_texts(TEXTS, seed=cfg.seed)
    n_heldout = json.loads((run_a / "corpus_manifest.json").read_text())["heldout_documents"]
    heldout = corpus.texts[:n_heldout]
    trained, tok = load_decoder(run_a)
    torch.manual_seed(cfg.seed)
    untrained = type(trained)(build_llama_config(cfg, tok))
    before, after = heldout_loss(untrained, tok, heldout), heldout_loss(trained, tok, heldout)
    assert after < 0.7 * before, (before, after)  # > 30 % lower
    metrics = json.loads((run_a / "metrics.json").read_text())
    assert metrics["heldout_loss"] < 0.7 * metrics["initial_heldout_loss"]
    assert metrics["steps"] == cfg.max_steps and metrics["tokens_seen"] == cfg.max_steps * 8 * 64
    assert metrics["train_loss"] < metrics["evals"][0]["heldout_loss"]


def test_saved_dir_loads_with_load_decoder_and_generates(run_a):
    for name in (
        "config.json",
        "model.safetensors",
        "tokenizer.json",
        "pretrain_config.json",
        "metrics.json",
        "corpus_manifest.json",
        "tokens.safetensors",
        "train_log.jsonl",
    ):
        assert (run_a / name).is_file(), name
    model, tok = load_decoder(run_a)
    assert model.config.model_type == "llama" and model.config.tie_word_embeddings
    assert model.config.max_position_embeddings == 64 and model.config.vocab_size == len(tok)
    assert model.config.eos_token_id == tok.eos_token_id and model.config.pad_token_id == tok.pad_token_id
    assert DecoderPretrainConfig.load(run_a) == tiny(run_a)
    assert torch.get_num_threads() == 2  # conftest's setting, restored after the 1-thread run
    ids = tok("The cat", return_tensors="pt").input_ids
    gen = model.generate(
        ids, attention_mask=torch.ones_like(ids), max_new_tokens=8, do_sample=False, pad_token_id=tok.pad_token_id
    )
    assert gen.shape[1] > ids.shape[1]
    cat, capital = generate_text(model, tok, ["The cat", "Question: What is the capital of France?\nAnswer:"], 10)
    assert cat.startswith(" sat on the mat") and "Paris" in capital  # it learned its (tiny, repeated) corpus


def test_resume_continues_and_equals_an_uninterrupted_run(run_a, tmp_path):
    cfg = tiny(tmp_path / "b")
    out = pretrain_decoder(cfg, texts=TEXTS, progress=False, stop_after_steps=25)
    checkpoint = latest_checkpoint(out)
    assert checkpoint == out / "checkpoints" / "step-000025"  # the shared training checkpoint format
    state = json.loads((checkpoint / "trainer_state.json").read_text())
    assert state["step"] == 25 and state["tokens_seen"] == 25 * 8 * 64
    assert DecoderPretrainConfig.from_dict(state["config"]) == cfg and not finished_pretraining(cfg)
    assert not (out / "model.safetensors").exists() and not (out / "metrics.json").exists()
    pretrain_decoder(cfg, texts=TEXTS, progress=False)  # resumes at step 25
    a, b = load_file(run_a / "model.safetensors"), load_file(out / "model.safetensors")
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=1e-5, atol=1e-6)
    ma, mb = (json.loads((d / "metrics.json").read_text()) for d in (run_a, out))
    assert mb["steps"] == ma["steps"] and mb["tokens_seen"] == ma["tokens_seen"]
    assert mb["heldout_loss"] == pytest.approx(ma["heldout_loss"], rel=1e-5)
    steps = [json.loads(line)["step"] for line in (out / "train_log.jsonl").read_text().splitlines()]
    assert steps.count(0) == 1 and steps[-1] == 60  # one initial evaluation; the log goes on from step 25


def test_rerun_with_more_steps_extends_the_run(run_a, tmp_path):
    out = tmp_path / "ext"
    shutil.copytree(run_a, out)
    pretrain_decoder(tiny(out, max_steps=80), texts=TEXTS, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 80 and metrics["tokens_seen"] == 80 * 8 * 64
    assert [e["step"] for e in metrics["evals"]] == [0, 20, 40, 60, 80]


def test_resume_refuses_another_architecture(run_a, tmp_path):
    out = tmp_path / "other"
    shutil.copytree(run_a, out)
    with pytest.raises(ValueError, match="hidden_size"):
        pretrain_decoder(tiny(out, hidden_size=32), texts=TEXTS, progress=False)


def test_time_budget_mode_sets_the_step_count(tmp_path, monkeypatch):
    import textfree.lm.local.pretrain as pretrain_module

    clock = iter(range(10**9))  # a fake clock: every reading is 0.05 s later, whatever the machine's load
    monkeypatch.setattr(pretrain_module, "_now", lambda: 0.05 * next(clock))
    cfg = tiny(tmp_path / "t", max_steps=None, minutes=0.1, calibration_steps=3, log_every=5)
    out = pretrain_decoder(cfg, texts=TEXTS, progress=False)
    metrics = json.loads((out / "metrics.json").read_text())
    assert 10 <= metrics["steps"] <= metrics["planned_steps"] < 60
    assert metrics["stopped_by"] in ("max_steps", "time") and metrics["loop_seconds"] <= 0.1 * 60 + 1
    pretrain_decoder(cfg.replace(minutes=0.2), texts=TEXTS, progress=False)  # a larger budget extends the run
    more = json.loads((out / "metrics.json").read_text())
    assert more["steps"] > metrics["steps"] + 10 and more["planned_steps"] > metrics["planned_steps"]
    assert more["loop_seconds"] <= 0.2 * 60 + 1


def test_lr_schedule():
    cfg = tiny("x", learning_rate=1e-3, warmup_steps=10, min_lr_ratio=0.1)
    assert lr_at(0, cfg, 100) == pytest.approx(1e-4) and lr_at(9, cfg, 100) == pytest.approx(1e-3)
    assert lr_at(10, cfg, 100) == pytest.approx(1e-3) and lr_at(100, cfg, 100) == pytest.approx(1e-4)
    assert lr_at(55, cfg, 100) == pytest.approx(0.55e-3)
    assert lr_at(50, cfg, None) == 1e-3  # time-budget calibration: peak until the length is known
    assert lr_at(4, cfg, None) == lr_at(4, cfg, 100) == pytest.approx(0.5e-3)  # warm-up needs no length
    for step in range(101):  # the one schedule of textfree.training, scaled by the peak rate
        assert lr_at(step, cfg, 100) == 1e-3 * lr_multiplier(step, 100, 10, 0.1)


def test_checkpoint_round_trips_into_a_fresh_model(run_a):
    cfg = tiny(run_a)
    checkpoint = latest_checkpoint(run_a)
    assert checkpoint.name == f"step-{cfg.max_steps:06d}" and len(list((run_a / "checkpoints").iterdir())) == 1
    trained, tok = load_decoder(run_a)
    model = type(trained)(build_llama_config(cfg, tok))
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    vectors = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": matrices}, {"params": vectors}], lr=0.5)  # pretraining's two groups
    state = load_training_checkpoint(checkpoint, model, optimizer)
    assert state["step"] == cfg.max_steps and state["evals"][-1]["step"] == cfg.max_steps
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight  # still tied
    for name, value in trained.state_dict().items():
        torch.testing.assert_close(model.state_dict()[name], value, rtol=0, atol=0)
    assert len(optimizer.state) == len(list(model.parameters())) and tuple(optimizer.param_groups[0]["betas"]) == (
        cfg.beta1,
        cfg.beta2,
    )


def test_without_checkpoints_or_with_an_old_one_a_run_is_not_resumed(tmp_path):
    out = pretrain_decoder(tiny(tmp_path / "nock", max_steps=12, keep_checkpoint=False), texts=TEXTS, progress=False)
    assert not (out / "checkpoints").exists() and finished_pretraining(tiny(out, max_steps=12, keep_checkpoint=False))
    with pytest.raises(ValueError, match="without a checkpoint"):
        pretrain_decoder(tiny(out, max_steps=20), texts=TEXTS, progress=False)
    old = tmp_path / "old"
    (old / "checkpoint").mkdir(parents=True)
    (old / "checkpoint" / "trainer_state.json").write_text('{"step": 5}')
    with pytest.raises(ValueError, match="format before checkpoints/step-N"):
        pretrain_decoder(tiny(old), texts=TEXTS, progress=False)


def test_config_presets_help_and_files(tmp_path):
    assert set(PRESETS) == {"tiny", "small", "gpu"}
    helps = DecoderPretrainConfig.field_help()
    assert all(h.strip() for h in helps.values()), [k for k, h in helps.items() if not h.strip()]
    small = DecoderPretrainConfig.from_preset("small")
    assert small.vocab_size == 8192 and 256 <= small.hidden_size <= 384 and 4 <= small.num_layers <= 6
    gpu = DecoderPretrainConfig.from_preset("gpu")
    assert gpu.hidden_size == 768 and gpu.num_layers == 12
    small.save(tmp_path)
    assert DecoderPretrainConfig.load(tmp_path) == small
    with pytest.raises(ValueError, match="unknown preset"):
        DecoderPretrainConfig.from_preset("huge")
    with pytest.raises(ValueError, match="divisible"):
        DecoderPretrainConfig.from_preset("tiny", num_heads=3)
    with pytest.raises(ValueError, match="max_steps, minutes"):
        DecoderPretrainConfig.from_preset("tiny", max_steps=None)
    (tmp_path / "c.yaml").write_text("preset: tiny\nmax_steps: null\nminutes: 2\nseed: 3\n")
    cfg = DecoderPretrainConfig.from_file(tmp_path / "c.yaml", seed=7)
    assert cfg.preset == "tiny" and cfg.max_steps is None and cfg.minutes == 2 and cfg.seed == 7
    (tmp_path / "bad.yaml").write_text("hiden_size: 3\n")
    with pytest.raises(ValueError, match="hiden_size"):
        DecoderPretrainConfig.from_file(tmp_path / "bad.yaml")
    assert small.mismatches(small.replace(max_steps=5, output_dir="elsewhere")) == {}
    assert set(small.mismatches(small.replace(seed=1))) == {"seed"}


@pytest.mark.parametrize(
    "path", sorted((ROOT / "examples" / "cells").glob("ppft_pretrain*.yaml")), ids=lambda p: p.name
)
def test_example_configs_load(path):
    cfg = DecoderPretrainConfig.from_file(path)
    assert cfg.preset in PRESETS


def test_cli_pretrain_decoder(tmp_path):
    from textfree.cli import app

    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(TEXTS))
    out = tmp_path / "cli"
    r = CliRunner().invoke(
        app,
        [
            "ppft",
            "pretrain-decoder",
            "--preset",
            "tiny",
            "--texts",
            str(docs),
            "--out",
            str(out),
            "--max-steps",
            "30",
            "--seed",
            "1",
            "--threads",
            "1",
            "--no-progress",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "held-out loss" in r.output and "'The patient' ->" in r.output
    cfg = DecoderPretrainConfig.load(out)
    assert cfg.preset == "tiny" and cfg.max_steps == 30 and cfg.seed == 1 and cfg.num_threads == 1
    r = CliRunner().invoke(app, ["ppft", "pretrain-decoder", "--preset", "nope", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "unknown preset" in r.output
