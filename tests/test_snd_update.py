"""SnD after a model update (textfree.snd.update, the ``snd_model_update`` cell kind), on the tiny random encoder
(32 wide) and a tiny denoiser trained for a few steps: the encoder update, the stale denoiser measured against the
updated encoder, the denoiser's fine-tuning, and the cell kind."""

from __future__ import annotations

import json
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from textfree.encoders.loading import load_hf_encoder
from textfree.experiments import Cell, CellError, load_cell, run_cell
from textfree.results.files import load_results
from textfree.snd import update as up
from textfree.snd.denoiser import Denoiser
from textfree.snd.train import DenoiserTrainConfig, train_denoiser

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "cells" / "snd" / "model_update.yaml"
TINY = dict(d_kv=16, n_head=2, n_layers=2, max_tokens=32, progress=False, cpu=True)
ENCODER = dict(batch_size=8, lr=1e-3, cpu=True)  # a visible change in a few steps of the tiny encoder


def _texts(n: int, seed: int = 0) -> list[str]:
    """Invented sentences (no dataset), for runs whose figures do not matter."""
    rng = random.Random(seed)
    words = "the a small large red blue cat dog house tree river city walks sees finds likes quickly slowly".split()
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) + f" {i}" for i in range(n)]


RECORDS = [SimpleNamespace(text=t, label=i % 2) for i, t in enumerate(_texts(64, seed=1))]


@pytest.fixture(scope="module")
def stale(tiny_encoder_dir, tmp_path_factory) -> Path:
    """A tiny denoiser run for the tiny encoder (a few steps on invented text)."""
    out = tmp_path_factory.mktemp("snd-update") / "stale"
    cfg = DenoiserTrainConfig(out=str(out), encoder=str(tiny_encoder_dir), epochs=1, max_steps=4, batch_size=16,
                              lr=1e-3, warmup_steps=0, val_size=16, **TINY)  # fmt: skip
    train_denoiser(cfg, texts=_texts(120))
    return out


@pytest.fixture(scope="module")
def updated(tiny_encoder_dir, tmp_path_factory) -> dict:
    return up.update_encoder(str(tiny_encoder_dir), 32, out=tmp_path_factory.mktemp("upd") / "enc", seed=0,
                             records=RECORDS, **ENCODER)  # fmt: skip


def _weights(path) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in load_hf_encoder(str(path))[1].state_dict().items()}


# ------------------------------------------------------------------------------------------------ the encoder
def test_the_updated_encoder_loads_by_path_differs_and_keeps_the_clients_table(tiny_encoder_dir, updated):
    old, new = _weights(tiny_encoder_dir), _weights(updated["path"])
    assert set(old) == set(new) and updated["steps"] == 4 and updated["samples"] == 32
    changed = [k for k in old if not torch.equal(old[k], new[k])]
    assert any("encoder.layer" in k for k in changed)  # the server's part moved
    assert torch.equal(old["embeddings.word_embeddings.weight"], new["embeddings.word_embeddings.weight"])
    assert updated["encoder_sha256"] != updated["base_encoder_sha256"]
    config = json.loads((Path(updated["path"]) / "config.json").read_text())
    assert config["architectures"] == ["BertModel"]  # the served encoder, without the classification head


def test_the_update_can_train_the_table_too_and_zero_samples_is_no_update(tiny_encoder_dir, tmp_path):
    out = up.update_encoder(str(tiny_encoder_dir), 16, out=tmp_path / "enc", seed=0, records=RECORDS,
                            freeze_embeddings=False, **ENCODER)  # fmt: skip
    old, new = _weights(tiny_encoder_dir), _weights(out["path"])
    assert not torch.equal(old["embeddings.word_embeddings.weight"], new["embeddings.word_embeddings.weight"])
    none = up.update_encoder(str(tiny_encoder_dir), 0, out=tmp_path / "none", seed=0, records=RECORDS)
    assert none["path"] == str(tiny_encoder_dir) and none["steps"] == 0 and not (tmp_path / "none").exists()


def test_the_update_is_seeded_reused_when_finished_and_checks_its_settings(tiny_encoder_dir, updated, tmp_path):
    again = up.update_encoder(str(tiny_encoder_dir), 32, out=Path(updated["path"]), seed=0, records=RECORDS,
                              **ENCODER)  # fmt: skip
    assert again["encoder_sha256"] == updated["encoder_sha256"] and again["wall_s"] == updated["wall_s"]  # reused
    rebuilt = up.update_encoder(str(tiny_encoder_dir), 32, out=tmp_path / "enc", seed=0, records=RECORDS, **ENCODER)
    first, second = _weights(rebuilt["path"]), _weights(updated["path"])
    assert all(torch.equal(first[k], second[k]) for k in first)  # seeded: the same weights again
    # one seeded order of every sentence: an update of N takes its first N, so a smaller one's are in a larger one
    order = up.sst2_order(0, RECORDS)
    assert order == up.sst2_order(0, RECORDS) != up.sst2_order(1, RECORDS)
    assert sorted(order) == sorted((r.text, r.label) for r in RECORDS)
    with pytest.raises(ValueError, match="sst2_samples 100 is above the 64"):
        up.update_encoder(str(tiny_encoder_dir), 100, out=tmp_path / "big", seed=0, records=RECORDS)
    with pytest.raises(ValueError, match="sst2_samples must be an integer >= 0, got -1"):
        up.update_encoder(str(tiny_encoder_dir), -1, out=tmp_path / "neg", seed=0)


# ------------------------------------------------------------------------------------------------ the denoiser
def test_the_stale_denoisers_figures_are_against_the_updated_encoder(tiny_encoder_dir, stale, updated):
    denoiser = Denoiser.from_pretrained(stale)
    val = _texts(16, seed=3)
    old = up.update_figures(denoiser, up.load_server(str(tiny_encoder_dir), 32), val, [100.0], noise_seed=0)["100"]
    new = up.update_figures(denoiser, up.load_server(updated["path"], 32), val, [100.0], noise_seed=0)["100"]
    assert set(new) >= {"mse_denoised", "cos_denoised", "mse_noisy", "cos_noisy"}
    # the same table and noise, another server: e_c and e_n both change
    assert new["mse_noisy"] != old["mse_noisy"] and new["mse_denoised"] != old["mse_denoised"]
    assert new["noise_norm"] == old["noise_norm"]  # frozen table: the client sent the same vectors


def test_denoiser_finetuning_changes_the_weights_and_zero_samples_is_the_stale_one(stale, updated, tmp_path):
    pool, val = _texts(80, seed=4), _texts(8, seed=5)
    before = Denoiser.from_pretrained(stale)
    tuned = up.finetune_denoiser(stale, updated["path"], 24, out=tmp_path / "d24", seed=0, pool=pool, val_texts=val,
                                 cpu=True)  # fmt: skip
    model = tuned["model"]
    assert tuned["examples"] == 24 and tuned["steps"] == 2  # one epoch of 24 texts, the base run's batch of 16
    assert any(not torch.equal(a, b) for a, b in zip(before.state_dict().values(), model.state_dict().values()))
    assert model.config.encoder_sha256 == updated["encoder_sha256"] != before.config.encoder_sha256
    assert model.config.replace(encoder_id=None, encoder_sha256=None) == before.config.replace(
        encoder_id=None, encoder_sha256=None
    )  # the same architecture, continued
    assert Denoiser.from_pretrained(tmp_path / "d24").sha256 == model.sha256
    reused = up.finetune_denoiser(stale, updated["path"], 24, out=tmp_path / "d24", seed=0, pool=pool, val_texts=val)
    assert reused["model"].sha256 == model.sha256 and reused["wall_s"] == tuned["wall_s"]
    zero = up.finetune_denoiser(stale, updated["path"], 0, out=tmp_path / "d0", seed=0, pool=pool, val_texts=val)
    assert zero["steps"] == 0 and zero["model"].sha256 == before.sha256 and not (tmp_path / "d0").exists()
    with pytest.raises(ValueError, match="samples 100 is above the 80 public texts"):
        up.finetune_denoiser(stale, updated["path"], 100, out=tmp_path / "d100", seed=0, pool=pool, val_texts=val)


def test_init_must_fit_the_encoder(stale, tmp_path):
    from textfree.encoders import make_tiny_encoder_dir

    wide = make_tiny_encoder_dir(tmp_path / "wide", hidden=48, layers=1, heads=2, seed=0)
    cfg = DenoiserTrainConfig(out=str(tmp_path / "run"), encoder=str(wide), init=str(stale), max_steps=1,
                              val_size=4, **TINY)  # fmt: skip
    with pytest.raises(ValueError, match="widths \\(32, 32\\)"):
        train_denoiser(cfg, texts=_texts(20))
    assert not (tmp_path / "run").exists()
    with pytest.raises(ValueError, match="init must be the path of a denoiser run"):
        DenoiserTrainConfig(out=str(tmp_path / "run"), init="  ")


def test_the_grid_has_a_row_per_point_and_reuses_its_runs(tiny_encoder_dir, stale, tmp_path):
    kw = dict(work_dir=tmp_path, val_size=8, texts=_texts(120), records=RECORDS, encoder_settings=ENCODER, cpu=True)
    rows = up.model_update_grid(str(tiny_encoder_dir), stale, [0, 16], [0, 16], [100.0, 1000.0], **kw)
    assert [(r["base_samples"], r["denoiser_samples"], r["eta"]) for r in rows] == [
        (b, d, e) for b in (0, 16) for d in (0, 16) for e in (100.0, 1000.0)
    ]
    stale_sha = Denoiser.from_pretrained(stale).sha256
    assert {r["denoiser_sha256"] for r in rows if r["denoiser_samples"] == 0} == {stale_sha}
    assert len({r["denoiser_sha256"] for r in rows}) == 3
    by = {(r["base_samples"], r["denoiser_samples"], r["eta"]): r for r in rows}
    assert by[(16, 0, 100.0)]["mse_noisy"] == by[(16, 16, 100.0)]["mse_noisy"]  # the same noise for every denoiser
    assert by[(0, 0, 100.0)]["mse_noisy"] > by[(0, 0, 1000.0)]["mse_noisy"]
    again = up.model_update_grid(str(tiny_encoder_dir), stale, [0, 16], [0, 16], [100.0, 1000.0], **kw)
    assert [r["mse_denoised"] for r in again] == [r["mse_denoised"] for r in rows]
    with pytest.raises(ValueError, match="base_samples must be a non-empty list"):
        up.model_update_grid(str(tiny_encoder_dir), stale, [], [0], [100.0], **kw)
    with pytest.raises(ValueError, match="val_size 32 is above the 16 texts"):
        up.model_update_grid(str(tiny_encoder_dir), stale, [0], [0], [100.0], **(kw | {"val_size": 32}))


# ------------------------------------------------------------------------------------------------ the cell kind
def _cell(encoder, run, out, **params) -> dict:
    base = {"denoiser": str(run), "base_samples": 16, "denoiser_samples": 16, "eta": 100, "val_size": 8,
            "out": str(out), "encoder_lr": 1e-3, "encoder_batch_size": 8}  # fmt: skip
    return {"name": "snd_update_test", "kind": "snd_model_update", "encoder": str(encoder), "params": base | params,
            "seeds": [0]}  # fmt: skip


def test_cell_validation_names_the_field(tiny_encoder_dir, stale, tmp_path):
    def field(cell) -> str:
        with pytest.raises(CellError) as info:
            Cell.from_dict(cell)
        return info.value.field

    cell = _cell(tiny_encoder_dir, stale, tmp_path)
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, denoiser=None)) == "params.denoiser"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, base_samples=-1)) == "params.base_samples"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, denoiser_samples=1.5)) == "params.denoiser_samples"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, eta=0)) == "params.eta"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, val_size=0)) == "params.val_size"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, encoder_lr="fast")) == "params.encoder_lr"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, freeze_embeddings="yes")) == "params.freeze_embeddings"
    assert field(cell | {"grid": {"params.base_samples": [0, -5]}}) == "grid.params.base_samples"
    assert field(cell | {"dataset": "sst2"}) == "dataset"
    assert field(cell | {"limit": 3}) == "limit"
    assert field(_cell(tiny_encoder_dir, stale, tmp_path, k=3)) == "params"
    assert field(cell | {"metrics": ["auc"]}) == "metrics"


@pytest.mark.shared_data
def test_cell_kind_runs_one_tiny_point(shared_data, tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(shared_data))
    # a base run on a small sample of the real public corpus, so that the cell rebuilds its held-out texts
    run = tmp_path / "stale"
    cfg = DenoiserTrainConfig(out=str(run), encoder=str(tiny_encoder_dir), epochs=1, max_steps=2, batch_size=16,
                              limit_per_source=40, val_size=16, **TINY)  # fmt: skip
    train_denoiser(cfg)
    results = run_cell(_cell(tiny_encoder_dir, run, tmp_path / "work"), tmp_path, progress=False)
    (row,) = load_results(results)["results"]
    metrics = {k: v["mean"] for k, v in row["metrics"].items()}
    assert set(metrics) == {"mse_denoised", "cos_denoised", "mse_noisy", "cos_noisy", "seconds"}
    assert metrics["mse_noisy"] > 0 and -1 <= metrics["cos_denoised"] <= 1 and metrics["seconds"] > 0
    assert (tmp_path / "work" / "encoder-b16-s0" / "model.safetensors").is_file()
    assert (tmp_path / "work" / "denoiser-b16-d16-s0" / "denoiser.safetensors").is_file()


def test_the_example_cell_loads():
    cell = load_cell(EXAMPLE)
    assert cell.kind == "snd_model_update" and cell.params["denoiser"] == "runs/snd-minilm"
    assert 0 in cell.grid["params.base_samples"] and 0 in cell.grid["params.denoiser_samples"]
