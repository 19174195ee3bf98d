"""SnD denoiser training: the client noise, the public corpus, the training run (the denoiser beats the undenoised
embedding on held-out text and fresh noise), resumption, config checks and the ``textfree snd`` command."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from textfree.cli import app
from textfree.snd.corpus import CORPUS_SOURCES, build_corpus, evaluation_texts, normalize_text
from textfree.snd.denoiser import DENOISER_FILE, Denoiser
from textfree.snd.noise import privatize_tokens
from textfree.snd.train import DenoiserTrainConfig, train_denoiser, validation_figures

#: A tiny denoiser for the tiny (32-wide) encoder; a few seconds of training on two CPU cores.
TINY = dict(d_kv=16, n_head=2, n_layers=2, max_tokens=32, progress=False, cpu=True)


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _synthetic_texts(n: int, seed: int = 0) -> list[str]:
    """Invented sentences (no dataset), for runs whose figures do not matter."""
    rng = random.Random(seed)
    words = "the a small large red blue cat dog house tree river city walks sees finds likes quickly slowly".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + f" {i}" for i in range(n)]


# ------------------------------------------------------------------------------------------------ the noise
def test_privatize_tokens_clips_reports_the_effective_noise_and_leaves_padding_zero():
    x = torch.randn(3, 6, 8, generator=_gen(1), dtype=torch.float32)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0], [1, 0, 0, 0, 0, 0]], dtype=torch.bool)
    c = float(x[mask].norm(dim=-1).max())
    x_tilde, z = privatize_tokens(x, mask, 2.0, clip_norm=c, generator=_gen(2))
    assert x_tilde.dtype == z.dtype == torch.float32 and x_tilde.shape == z.shape == x.shape
    assert bool((x_tilde[mask].norm(dim=-1) <= c * (1 + 1e-6)).all())  # eq. 3: every sent vector within C
    assert torch.equal(z[mask], x_tilde[mask] - x[mask])  # the effective noise, after clipping
    assert not x_tilde[~mask].any() and not z[~mask].any()  # padding: nothing sent, no noise
    assert bool((z[mask].norm(dim=-1) > 0).all())
    again = privatize_tokens(x, mask, 2.0, clip_norm=c, generator=_gen(2))  # the generator decides everything
    assert torch.equal(again[0], x_tilde) and torch.equal(again[1], z)
    # at eta 2 in 8 dimensions (E||z|| = 4) unclipped vectors leave the ball; a huge eta leaves x nearly as it was
    loose, _ = privatize_tokens(x, mask, 2.0, clip_norm=None, clip=False, generator=_gen(2))
    assert float(loose[mask].norm(dim=-1).max()) > c
    close, _ = privatize_tokens(x, mask, 1e7, clip_norm=c, generator=_gen(3))
    assert torch.allclose(close[mask], x[mask], atol=1e-4)
    # one eta per row: row 0 nearly clean, row 1 noisy
    rows, _ = privatize_tokens(x, mask, [1e7, 0.5, 1e7], clip_norm=None, clip=False, generator=_gen(4))
    assert torch.allclose(rows[0], x[0], atol=1e-4) and float((rows[1] - x[1])[mask[1]].norm(dim=-1).min()) > 1.0


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(eta=0.0, clip_norm=1.0), "eta must be a finite number > 0"),
        (dict(eta=float("nan"), clip_norm=1.0), "eta must be a finite number > 0"),
        (dict(eta=[1.0, 2.0, 3.0], clip_norm=1.0), "one number or one per row"),
        (dict(eta=1.0, clip_norm=None), "clip_norm is required"),
        (dict(eta=1.0, clip_norm=-1.0), "clip_norm must be a finite number > 0"),
    ],
)
def test_privatize_tokens_refuses_bad_settings(kwargs, match):
    x, mask = torch.zeros(2, 3, 4), torch.ones(2, 3, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        privatize_tokens(x, mask, generator=_gen(), **kwargs)


# ------------------------------------------------------------------------------------------------ the corpus
@pytest.fixture(scope="module")
def corpus(shared_data):
    return build_corpus(limit_per_source=150, val_size=64, seed=0)


def test_the_corpus_is_public_text_only_and_holds_no_evaluation_text(corpus):
    from textfree.data import load_gsm8k, load_sst2

    record = corpus.record()
    assert set(record["sources"]) == set(CORPUS_SOURCES) and all(0 < n <= 150 for n in record["sources"].values())
    texts = corpus.train + corpus.val
    assert len(texts) == len({normalize_text(t) for t in texts}) == record["train"] + record["val"]
    assert not set(corpus.train) & set(corpus.val) and record["val"] == 64
    seen = {normalize_text(t) for t in texts}
    assert not seen & evaluation_texts()
    sst2_dev = {normalize_text(r.text) for r in load_sst2(split="dev")} | {
        normalize_text(r.text) for r in load_sst2(split="test")
    }
    gsm8k_test = {normalize_text(r.instruction) for r in load_gsm8k(split="test")}
    assert len(sst2_dev) > 800 and len(gsm8k_test) > 1000 and not seen & (sst2_dev | gsm8k_test)
    # deterministic: the same sample, split and hash again; another seed samples otherwise
    again = build_corpus(limit_per_source=150, val_size=64, seed=0)
    assert again.sha256 == corpus.sha256 and again.train == corpus.train
    assert build_corpus(limit_per_source=150, val_size=64, seed=1).sha256 != corpus.sha256


def test_the_qqp_source_is_opt_in_and_holds_only_the_training_part(shared_data):
    from textfree.data import load_qqp
    from textfree.data.tasks import qqp_is_test

    assert "qqp_train" not in CORPUS_SOURCES  # the default mix stays the paper-like general text
    c = build_corpus(["qqp_train"], limit_per_source=None, val_size=64, seed=0)
    records = load_qqp(split="dev")
    test_part = {normalize_text(t) for r in records if qqp_is_test(r.id) for t in (r.text_a, r.text_b)}
    train_part = {normalize_text(t) for r in records if not qqp_is_test(r.id) for t in (r.text_a, r.text_b)}
    seen = {normalize_text(t) for t in c.train + c.val}
    # every training-part question not also asked in the test part, and nothing of the test part
    assert len(test_part) > 5000 and seen == train_part - test_part and c.dropped_evaluation > 0
    assert test_part <= evaluation_texts() and not (train_part - test_part) & evaluation_texts()


def test_the_corpus_refuses_private_or_evaluation_sources_and_drops_overlap_and_duplicates():
    for source in ("pupa", "pri-ddx", "qqp"):
        with pytest.raises(ValueError, match="refused"):
            build_corpus([source], val_size=1)
    texts = ["one text", "One  text", "an evaluation sentence", "two", "three", "four"]
    c = build_corpus(texts=texts, val_size=1, exclude=["An evaluation sentence"])
    assert c.dropped_duplicates == 1 and c.dropped_evaluation == 1 and c.counts == {"texts": 4}
    assert "an evaluation sentence" not in c.train + c.val
    with pytest.raises(ValueError, match="too few"):
        build_corpus(texts=["a", "b"], val_size=2, exclude=[])


# ------------------------------------------------------------------------------------------------ training
@pytest.fixture(scope="module")
def trained(shared_data, tiny_encoder_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("snd") / "run"
    cfg = DenoiserTrainConfig(
        out=str(out), encoder=str(tiny_encoder_dir), epochs=100, max_steps=300, batch_size=32, lr=1e-3,
        warmup_steps=20, limit_per_source=150, val_size=64, **TINY,
    )  # fmt: skip
    return out, train_denoiser(cfg)


def test_the_trained_denoiser_beats_the_undenoised_embedding_on_held_out_text_and_fresh_noise(
    trained, tiny_encoder_dir, corpus
):
    """The issue's property: after 300 steps on public text, on held-out texts, the denoised e_d is closer to e_c than
    the server's e_n. Margins (fixed seeds; the run gives about 0.42x at eta 50 and 0.39x at eta 100, 0.91x at 500):
    MSE of e_d at most 0.6x that of e_n where the noise dominates (eta 50, 100; NSR 5.8 and 2.9) and below it at eta
    500 (NSR 0.58, where e_n is already close)."""
    from textfree.encoders.loading import load_hf_encoder
    from textfree.encoders.table import EmbeddingTableEncoder

    out, summary = trained
    assert summary["steps"] == 300 and summary["final_loss"] < summary["first_loss"]
    assert summary["corpus"]["sha256"] == corpus.sha256  # trained on the corpus the other tests check
    denoiser = Denoiser.from_pretrained(out, expected_sha256=summary["denoiser_sha256"])
    cfg = denoiser.config
    assert (cfg.eta_min, cfg.eta_max, cfg.encoder_id) == (50.0, 500.0, str(tiny_encoder_dir))
    assert cfg.encoder_sha256 == summary["encoder_sha256"] and cfg.use_noise and cfg.use_tokens and cfg.clip
    tokenizer, model, name, sha = load_hf_encoder(str(tiny_encoder_dir))
    table = EmbeddingTableEncoder(model.get_input_embeddings().weight, tokenizer, name=name, sha256=sha, max_length=32)
    for figures in (
        summary["validation"],  # the run's own validation noise
        validation_figures(denoiser, model.eval(), table, corpus.val, [50.0, 100.0, 500.0], noise_seed=987654),
    ):
        assert set(figures) == {"50", "100", "500"}
        for eta, f in figures.items():
            margin = 1.0 if eta == "500" else 0.6
            assert f["mse_denoised"] < margin * f["mse_noisy"], (eta, f)
            assert f["cos_denoised"] > f["cos_noisy"] or eta == "500", (eta, f)
        assert figures["50"]["nsr"] == pytest.approx(32 / 50 / figures["50"]["token_norm"])
    written = json.loads((out / "summary.json").read_text())
    assert written["validation"] == summary["validation"] and written["denoiser_sha256"] == summary["denoiser_sha256"]


class _Interrupt(Exception):
    pass


def _resume_cfg(out: Path, encoder: Path) -> DenoiserTrainConfig:
    return DenoiserTrainConfig(
        out=str(out), encoder=str(encoder), epochs=3, max_steps=9, batch_size=8, save_every=4, val_size=8,
        dropout=0.1, log_every=1, **TINY,
    )  # fmt: skip


def test_a_resumed_run_gives_the_same_weights_as_an_uninterrupted_one(tiny_encoder_dir, tmp_path):
    texts = _synthetic_texts(40)  # 32 training texts: 4 steps an epoch, so the cut (step 6) is in the second epoch
    full = train_denoiser(_resume_cfg(tmp_path / "full", tiny_encoder_dir), texts=texts)

    def stop(step, loss):
        if step == 6:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        train_denoiser(_resume_cfg(tmp_path / "cut", tiny_encoder_dir), texts=texts, on_step=stop)
    resumed = train_denoiser(_resume_cfg(tmp_path / "cut", tiny_encoder_dir), texts=texts)
    assert resumed["resumed_from_step"] == 4 and resumed["steps"] == full["steps"] == 9
    assert (tmp_path / "cut" / DENOISER_FILE).read_bytes() == (tmp_path / "full" / DENOISER_FILE).read_bytes()
    losses = [[json.loads(line)["loss"] for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
              for run in ("full", "cut")]  # fmt: skip
    assert losses[0] == losses[1]
    assert resumed["validation"] == full["validation"]
    # another setting in the same directory is refused, naming it
    with pytest.raises(ValueError, match="other settings \\(etas\\)"):
        train_denoiser(DenoiserTrainConfig(**{**_resume_cfg(tmp_path / "cut", tiny_encoder_dir).to_dict(),
                                              "etas": [10.0]}), texts=texts)  # fmt: skip


@pytest.mark.parametrize(
    "changes, named",
    [
        (dict(etas=[]), "etas"),
        (dict(etas=[50.0, -1.0]), "etas"),
        (dict(etas=[50.0, 50.0]), "etas must be distinct"),
        (dict(etas="50"), "etas"),
        (dict(max_tokens=1), "max_tokens"),
        (dict(sources=["pupa"]), "pupa"),
        (dict(limit_per_source=0), "limit_per_source"),
        (dict(val_size=0), "val_size"),
        (dict(noise_seed=-1), "noise_seed"),
        (dict(d_kv=0), "d_kv"),
        (dict(n_head=1.5), "n_head"),
        (dict(d_model=0), "d_model"),
        (dict(dropout=1.0), "dropout"),
        (dict(use_noise="yes"), "use_noise"),
        (dict(encoder=""), "encoder"),
        (dict(batch_size=0), "batch_size"),
    ],
)
def test_bad_settings_are_refused_naming_them(changes, named, tmp_path):
    with pytest.raises(ValueError, match=named):
        DenoiserTrainConfig(out=str(tmp_path / "x"), **changes)


def test_the_default_denoiser_is_table_8s_distilbert_row_at_the_encoders_width(tmp_path):
    d = DenoiserTrainConfig(out=str(tmp_path / "x")).denoiser_config(384, 384)
    assert (d.d_model, d.d_ff, d.d_kv, d.n_head, d.n_layers) == (384, 384, 240, 6, 3)
    assert (d.eta_min, d.eta_max, d.eta_input, d.max_tokens) == (50.0, 500.0, True, 64)


# ------------------------------------------------------------------------------------------------ the command
def test_the_command_trains_end_to_end_and_prints_the_validation_table(shared_data, tiny_encoder_dir, tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(
        app,
        ["snd", "train", "--model", str(tiny_encoder_dir), "--out", str(out), "--etas", "50,500",
         "--max-steps", "3", "--batch-size", "8", "--limit-per-source", "20", "--val-size", "8", "--max-tokens",
         "16", "--layers", "1", "--no-progress", "--cpu"],
    )  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "held-out validation" in r.output and "denoiser trained: 3 steps" in r.output
    assert Denoiser.from_pretrained(out).config.eta_max == 500.0
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["validation"]) == {"50", "500"} and summary["corpus"]["sources"]["sst2"] == 20


@pytest.mark.parametrize(
    "args, named",
    [
        (["--etas", "50,-1"], "--etas"),
        (["--etas", "fifty"], "--etas"),
        (["--max-tokens", "0"], "--max-tokens"),
        (["--limit-per-source", "0"], "--limit-per-source"),
        (["--batch-size", "0"], "--batch-size"),
        (["--model", "/nonexistent/encoder"], "/nonexistent/encoder"),
    ],
)
def test_the_command_refuses_a_bad_flag_with_exit_code_2(args, named, tmp_path):
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["snd", "train", "--out", str(out), "--no-progress", "--cpu", *args])
    assert r.exit_code == 2, r.output
    errors = [line for line in r.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and named in errors[0] and "Traceback" not in r.output, r.output
    assert not out.exists()


def test_a_flag_of_the_wrong_type_exits_with_code_2(tmp_path):
    r = CliRunner().invoke(app, ["snd", "train", "--out", str(tmp_path / "r"), "--epochs", "many"])
    assert r.exit_code == 2
