"""SnD's evaluation (textfree.snd.evaluate) and the ``snd_downstream`` cell kind, on the tiny random encoder (32 wide,
serving as both the client's table and the server's model) and tiny random denoisers."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from textfree.encoders import EmbeddingTableEncoder
from textfree.encoders.loading import load_hf_encoder
from textfree.experiments import Cell, CellError, load_cell, run_cell
from textfree.lm.embed import pooled_embeddings
from textfree.results.files import load_results
from textfree.snd import evaluate as ev
from textfree.snd.denoiser import Denoiser, DenoiserConfig

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "data"
EXAMPLES = ROOT / "examples" / "cells" / "snd"

TEXTS = [
    "the cat sat on the mat",
    "a short one",
    "how do i learn to play chess well?",
    "what is the capital city of peru",
    "rain is expected tomorrow afternoon in the north",
    "she sells sea shells",
    "the patient reports a mild headache",
    "why is the sky blue during the day?",
]

_SETTINGS = {
    "snd": {},
    "server_denoiser": {"use_noise": False, "eta_input": False},
    "no_clip": {"clip": False},
    "snd_no_noise": {"use_noise": False},
    "snd_no_tokens": {"use_tokens": False},
}


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


@pytest.fixture(scope="module")
def models(tiny_encoder_dir):
    table = EmbeddingTableEncoder.from_pretrained(tiny_encoder_dir)
    _, server, _, _ = load_hf_encoder(tiny_encoder_dir)
    from textfree.substitution.cli_support import build_t2t

    _PCT2T["mechanism"] = build_t2t(table=str(tiny_encoder_dir), eta=1.0, pos="default")
    return table, server.eval()


def _denoiser(pipeline: str, seed: int = 0) -> Denoiser:
    torch.manual_seed(seed)
    cfg = DenoiserConfig(token_dim=32, output_dim=32, d_model=16, d_ff=16, d_kv=8, n_head=2, n_layers=1, max_tokens=64)
    return Denoiser(cfg.replace(**_SETTINGS[pipeline])).eval()


#: The pipeline ``pct2t``'s mechanism over the tiny encoder's word table, built by the ``models`` fixture.
_PCT2T: dict = {}


@pytest.fixture(scope="module")
def pct2t_mechanism(models):
    return _PCT2T["mechanism"]


def _embed(models, pipeline, eta, seed=0, texts=TEXTS, **kw):
    table, server = models
    denoiser = _denoiser(pipeline) if pipeline in ev.DENOISING_PIPELINES else None
    if pipeline == "pct2t":
        kw.setdefault("text_mechanism", _PCT2T["mechanism"])
    return ev.embed_texts(texts, pipeline=pipeline, eta=eta, table_encoder=table, server_model=server,
                          denoiser=denoiser, generator=_gen(seed), batch_size=3, max_tokens=16, **kw)  # fmt: skip


# ------------------------------------------------------------------------------------------------ pipelines
@pytest.mark.parametrize("pipeline", ev.PIPELINES)
def test_every_pipeline_runs_with_agreeing_shapes_and_is_reproducible(models, pipeline):
    eta = None if pipeline == "clean" else 100.0
    emb, clean = _embed(models, pipeline, eta)
    assert emb.shape == clean.shape == (len(TEXTS), 32) and emb.dtype == torch.float32
    assert torch.isfinite(emb).all()
    again, _ = _embed(models, pipeline, eta)
    assert torch.equal(emb, again), "the same generator state must give the same embeddings"
    if pipeline != "clean":
        other, _ = _embed(models, pipeline, eta, seed=1)
        assert not torch.equal(emb, other)


def test_clean_is_the_servers_embedding_in_text_order_with_cos_1_and_mse_0(models):
    table, server = models
    emb, clean = _embed(models, "clean", None)
    assert torch.equal(emb, clean)
    assert ev.similarity(emb, clean) == pytest.approx({"mse": 0.0, "cos": 1.0})
    ids = table.tokenizer([TEXTS[2]], return_tensors="pt", truncation=True, max_length=16)["input_ids"]
    mask = torch.ones_like(ids, dtype=torch.bool)
    direct = pooled_embeddings(server, table.table[ids].detach(), mask)
    assert torch.allclose(emb[2], direct[0], atol=1e-5), "batching by length must not change a text's embedding"


def test_noise_lowers_cosine_monotonically_in_eta(models):
    # tiny table rows have norm ~0.11 and d = 32, so E||z|| = 32/eta spans 3.2 .. 0.0011 over these etas.
    # Mean cosine to clean over 8 texts x 3 seeds (0-2) must rise strictly with eta and end near 1 (> 0.99).
    etas = [10.0, 100.0, 1000.0, 30000.0]
    cos = [
        np.mean([ev.similarity(*_embed(models, "tokembpriv", eta, seed=s))["cos"] for s in range(3)]) for eta in etas
    ]
    assert all(a < b for a, b in zip(cos, cos[1:])), cos
    assert cos[-1] > 0.99


def test_stats_and_noise_to_signal(models):
    table, _ = models
    stats = {}
    _embed(models, "tokembpriv", 50.0, stats=stats)
    ids = ev.tokenize(table.tokenizer, TEXTS, 16)
    assert stats["n_tokens"] == sum(len(i) for i in ids)
    norms = torch.cat([table.table[torch.tensor(i)].norm(dim=1) for i in ids])
    assert stats["token_norm_sum"] == pytest.approx(float(norms.sum()), rel=1e-5)
    assert ev.noise_to_signal(50.0, 32, 0.1) == pytest.approx(32 / 50 / 0.1)
    assert ev.noise_to_signal(None, 32, 0.1) == 0.0
    # clipped noise: ||x~|| <= C and ||x|| <= C, so every effective ||z|| <= 2C
    assert stats["noise_norm_sum"] / stats["n_tokens"] <= 2 * table.max_norm() + 1e-6


def test_text2text_returns_table_tokens(models):
    table, _ = models
    rows = torch.tensor([5, 1000, 2045, 7])
    noisy = table.table[rows].detach() + 1e-4 * torch.randn(4, 32, generator=_gen(0))
    assert ev.nearest_tokens(noisy, table.table.detach(), chunk=3).tolist() == rows.tolist()
    assert ev.nearest_tokens(noisy.reshape(2, 2, 32), table.table.detach()).tolist() == [[5, 1000], [2045, 7]]
    # at a huge eta every noisy token's nearest row is its own: text2text gives exactly the clean embedding
    emb, clean = _embed(models, "text2text", 1e9)
    assert torch.allclose(emb, clean, atol=1e-6)
    # at a small eta tokens are swapped for other table rows: a real token sequence, not a noisy vector
    emb, clean = _embed(models, "text2text", 5.0)
    assert ev.similarity(emb, clean)["cos"] < 0.999


def test_pct2t_pipeline_embeds_the_privatized_text(models, pct2t_mechanism, monkeypatch):
    # at a huge eta PCT2T changes no word: the clean embedding; at a small one the server embeds other words, and the
    # text it receives keeps every word outside RAPT's categories (the, on, a, ...)
    emb, clean = _embed(models, "pct2t", 1e9)
    assert torch.allclose(emb, clean, atol=1e-6)
    seen = []
    real = ev.tokenize
    monkeypatch.setattr(ev, "tokenize", lambda tok, texts, n: seen.append(list(texts)) or real(tok, texts, n))
    stats = {}
    emb, clean = _embed(models, "pct2t", 0.5, stats=stats)
    assert ev.similarity(emb, clean)["cos"] < 0.999
    sent = seen[0]
    assert sent != TEXTS and [t.split()[0] for t in sent][0] == "the"  # "the cat sat ...": "the" is a DET: kept
    assert stats["words_replaced"] > 0 and stats["words_privatized"] < sum(len(t.split()) for t in TEXTS)
    with pytest.raises(ValueError, match="needs a PCT2T TextToText"):
        _embed(models, "pct2t", 1.0, text_mechanism=None)
    with pytest.raises(ValueError, match="privatizes no text"):
        _embed(models, "tokembpriv", 1.0, text_mechanism=pct2t_mechanism)


def test_server_denoiser_never_sees_the_noise(models, monkeypatch):
    seen = []
    real = Denoiser.denoise

    def spy(self, e_n, x_tilde, z, mask, eta=None, **kw):
        seen.append(bool(z.abs().sum() == 0))
        return real(self, e_n, x_tilde, z, mask, eta, **kw)

    monkeypatch.setattr(Denoiser, "denoise", spy)
    _embed(models, "server_denoiser", 100.0)
    assert seen and all(seen)
    seen.clear()
    _embed(models, "snd", 100.0)
    assert seen and not any(seen)


def test_denoiser_checks(models):
    with pytest.raises(ValueError, match="needs a denoiser trained with use_noise=True"):
        ev.check_denoiser("snd", _denoiser("snd_no_noise"))
    with pytest.raises(ValueError, match="clip=False"):
        ev.check_denoiser("no_clip", _denoiser("snd"))
    with pytest.raises(ValueError, match="use_tokens=False"):
        ev.check_denoiser("snd_no_tokens", _denoiser("snd"))
    with pytest.raises(ValueError, match="runs no denoiser"):
        ev.check_denoiser("tokembpriv", _denoiser("snd"))
    with pytest.raises(ValueError, match="needs a Denoiser, got NoneType"):
        ev.check_denoiser("snd", None)
    with pytest.raises(ValueError, match="the embedding table is 16 wide"):
        ev.check_denoiser("snd", _denoiser("snd"), token_dim=16)
    with pytest.raises(ValueError, match="over the denoiser's 64"):
        ev.check_denoiser("snd", _denoiser("snd"), max_tokens=128)
    with pytest.raises(ValueError, match="unknown pipeline 'rapt'"):
        ev.check_pipeline("rapt")
    table, server = models
    with pytest.raises(TypeError, match="pass a torch.Generator"):
        ev.embed_texts(TEXTS, pipeline="tokembpriv", eta=10.0, table_encoder=table, server_model=server, generator=None)
    with pytest.raises(ValueError, match="eta must be a finite number > 0"):
        ev.embed_texts(TEXTS, pipeline="tokembpriv", eta=0, table_encoder=table, server_model=server, generator=_gen())


def test_pairs_are_concatenated(models):
    table, server = models
    pairs = [(TEXTS[0], TEXTS[1]), (TEXTS[2], TEXTS[3]), (TEXTS[4], TEXTS[5])]
    kw = dict(pipeline="clean", eta=None, table_encoder=table, server_model=server, generator=None, max_tokens=16)
    feats, clean, sent, sent_clean = ev.embed_task_texts(pairs, **kw)
    assert feats.shape == clean.shape == (3, 64) and sent.shape == sent_clean.shape == (6, 32)
    single, _ = _embed(models, "clean", None, texts=[TEXTS[2], TEXTS[3]])
    assert torch.allclose(feats[1], torch.cat([single[0], single[1]]), atol=1e-5)


# ------------------------------------------------------------------------------------------------------ probe
def test_roc_auc_by_hand():
    # pairs (pos, neg): (0.35, 0.1) yes, (0.35, 0.4) no, (0.8, 0.1) yes, (0.8, 0.4) yes -> 3/4
    assert ev.roc_auc([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1]) == pytest.approx(0.75)
    # a tie between a positive and a negative counts one half: pairs (0.5, 0.5) 1/2, (0.5, 0.2) 1 -> 3/4
    assert ev.roc_auc([0.5, 0.5, 0.2], [1, 0, 0]) == pytest.approx(0.75)
    assert ev.roc_auc([3.0, 2.0, 1.0], [1, 1, 0]) == 1.0 and ev.roc_auc([1.0, 2.0], [1, 0]) == 0.0
    with pytest.raises(ValueError, match="both classes"):
        ev.roc_auc([0.1, 0.2], [1, 1])
    with pytest.raises(ValueError, match="0 or 1"):
        ev.roc_auc([0.1, 0.2], [1, 2])


def test_probe_learns_a_separable_set_and_not_random_labels():
    # two Gaussian blobs in 16-d, means 3 apart along one axis (Bayes accuracy ~0.93); seed 0.
    g = _gen(0)
    n = 600
    y = torch.randint(0, 2, (n,), generator=g)
    x = torch.randn(n, 16, generator=g)
    x[:, 0] += 3.0 * y
    probe = ev.train_probe(x[:400], y[:400].tolist(), generator=_gen(1))
    scores = ev.evaluate_probe(probe, x[400:], y[400:].tolist())
    assert scores["acc"] > 0.85 and scores["auc"] > 0.93, scores
    # labels independent of the features: AUC near 0.5 (200 test rows: std ~0.04, tolerance 0.15)
    random_probe = ev.train_probe(x[:400], torch.randint(0, 2, (400,), generator=g).tolist(), generator=_gen(2))
    noise = ev.evaluate_probe(random_probe, x[400:], torch.randint(0, 2, (200,), generator=g).tolist())
    assert abs(noise["auc"] - 0.5) < 0.15
    again = ev.train_probe(x[:400], y[:400].tolist(), generator=_gen(1))
    assert ev.evaluate_probe(again, x[400:], y[400:].tolist()) == scores, "a fixed seed gives the same probe"


def test_probe_architecture_and_tiny_training_sets():
    probe = ev.train_probe(torch.randn(4, 6, generator=_gen(0)), [0, 1, 0, 1], generator=_gen(0))
    linear = [m for m in probe.net if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(6, 6), (6, 2)]
    assert math.isnan(ev.evaluate_probe(probe, torch.randn(2, 6), [1, 1])["auc"])  # one class: AUC undefined
    with pytest.raises(ValueError, match="N >= 2"):
        ev.train_probe(torch.randn(1, 6), [0], generator=_gen(0))


# ------------------------------------------------------------------------------------------------------ tasks
def test_load_task_on_the_fixtures():
    sst2 = ev.load_task("sst2", root=FIXTURES, generator=_gen(0))
    assert sst2.train_split == "train" and sst2.test_split == "dev"
    assert len(sst2.train_texts) == 3 and len(sst2.test_texts) == 2 and all(len(t) == 1 for t in sst2.train_texts)
    rte = ev.load_task("rte", root=FIXTURES, generator=_gen(0))
    assert all(len(t) == 2 for t in rte.train_texts + rte.test_texts)
    mrpc = ev.load_task("mrpc", root=FIXTURES, train_limit=2, generator=_gen(0))
    assert mrpc.test_split == "test" and len(mrpc.train_texts) == 2
    with pytest.raises(ValueError, match="unknown task 'mnli'"):
        ev.load_task("mnli", root=FIXTURES, generator=_gen(0))
    with pytest.raises(ValueError, match="train_limit must be an integer >= 2"):
        ev.load_task("sst2", root=FIXTURES, train_limit=1, generator=_gen(0))


def test_qqp_split_is_by_id_hash():
    ids = [str(i) for i in range(20_000)]
    share = np.mean([ev.qqp_is_test(i) for i in ids])
    assert share == pytest.approx(52 / 256, abs=0.01)  # binomial std 0.003
    assert ev.qqp_is_test("7") == ev.qqp_is_test("7")


@pytest.mark.shared_data
def test_qqp_split_on_the_shared_subset(shared_data):
    data = ev.load_task("qqp", root=shared_data, generator=_gen(0))
    n_test, n_train = len(data.test_texts), len(data.train_texts)
    assert n_test + n_train == 23_497 and 0.18 < n_test / (n_test + n_train) < 0.23
    assert set(data.train_labels) == set(data.test_labels) == {0, 1}


# ------------------------------------------------------------------------------------------------- cell kind
def _cell(encoder, **params) -> dict:
    base = {"task": "sst2", "pipeline": "tokembpriv", "train_limit": None, "test_limit": None, "batch_size": 4,
            "max_tokens": 16, "mi_samples": 10, "probe_epochs": 2}  # fmt: skip
    return {"name": "snd_test", "kind": "snd_downstream", "encoder": str(encoder), "params": base | params,
            "grid": {"params.eta": [100, 1000]}, "seeds": [0]}  # fmt: skip


def _metrics(path) -> list[dict[str, float]]:
    return [{k: v["mean"] for k, v in r["metrics"].items()} for r in load_results(path)["results"]]


def test_cell_kind_runs_on_the_glue_fixtures(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    rows = _metrics(run_cell(_cell(tiny_encoder_dir), tmp_path, progress=False))
    assert len(rows) == 2
    for row, eta in zip(rows, (100, 1000)):
        assert row["n_train"] == 3 and row["n_test"] == 2
        assert 0 <= row["acc"] <= 1 and -1 <= row["cos"] <= 1 and row["mse"] >= 0
        assert row["seconds"] > 0 and row["mi_kl"] is not None
        # noise_to_signal = (d / eta) / mean ||x|| with d = 32
        assert row["noise_to_signal"] == pytest.approx(32 / eta / (32 / 100 / rows[0]["noise_to_signal"]))
    assert rows[0]["noise_to_signal"] == pytest.approx(10 * rows[1]["noise_to_signal"])
    assert rows[0]["cos"] < rows[1]["cos"]


def test_cell_kind_with_a_denoiser_and_clean(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    _denoiser("snd").save_pretrained(tmp_path / "den")
    cell = _cell(tiny_encoder_dir, task="rte", pipeline="snd", denoiser=str(tmp_path / "den"))
    rows = _metrics(run_cell(cell, tmp_path, progress=False))
    assert [r["n_train"] for r in rows] == [2, 2] and [r["n_test"] for r in rows] == [1, 1]
    assert all(r["auc"] is None for r in rows)  # one test example: AUC undefined (NaN, written as null)
    cell = _cell(tiny_encoder_dir, pipeline="clean")
    cell["grid"] = {}
    (clean,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert clean["cos"] == pytest.approx(1.0) and clean["mse"] == pytest.approx(0.0, abs=1e-9)
    assert clean["noise_to_signal"] == 0.0 and clean["mi_kl"] is None  # NaN is written as null


def test_cell_kind_runs_pct2t(tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(FIXTURES))
    cell = _cell(tiny_encoder_dir, pipeline="pct2t")
    cell["grid"] = {"params.eta": [1e9]}
    (row,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert row["cos"] == pytest.approx(1.0) and row["n_train"] == 3
    assert row["mi_kl"] is None and row["effective_noise_to_signal"] is None  # word noise: no token-level figures


@pytest.mark.shared_data
def test_cell_kind_on_a_shared_sst2_sample(shared_data, tiny_encoder_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_DATA", str(shared_data))
    cell = _cell(tiny_encoder_dir, train_limit=60, test_limit=30, mi_samples=200)
    cell["grid"] = {"params.eta": [1e5]}
    (row,) = _metrics(run_cell(cell, tmp_path, progress=False))
    assert row["n_train"] == 60 and row["n_test"] == 30 and row["cos"] > 0.99
    assert row["mi_kl"] > 0  # almost no noise: X~ is nearly X, far more spread than Z


def test_cell_validation_names_the_field(tiny_encoder_dir):
    def field(cell) -> str:
        with pytest.raises(CellError) as info:
            Cell.from_dict(cell)
        return info.value.field

    assert field(_cell(tiny_encoder_dir, pipeline="snd")) == "params.denoiser"
    assert field(_cell(tiny_encoder_dir, denoiser="runs/x")) == "params.denoiser"
    assert field(_cell(tiny_encoder_dir, task="mnli")) == "params.task"
    assert field(_cell(tiny_encoder_dir, pipeline="snd2")) == "params.pipeline"
    assert field(_cell(tiny_encoder_dir, train_limit=1)) == "params.train_limit"
    assert field(_cell(tiny_encoder_dir, max_tokens=0)) == "params.max_tokens"
    bad_eta = _cell(tiny_encoder_dir)
    bad_eta["grid"] = {"params.eta": [100, -1]}
    assert field(bad_eta) == "grid.params.eta"
    no_eta = _cell(tiny_encoder_dir)
    no_eta["grid"] = {}
    assert field(no_eta) == "params.eta"
    assert field(_cell(tiny_encoder_dir) | {"dataset": "sst2"}) == "dataset"
    assert field(_cell(tiny_encoder_dir) | {"mechanism": {"name": "l2_laplace", "epsilon": 1}}) == "mechanism"
    assert field(_cell(tiny_encoder_dir, k=3)) == "params"
    assert field(_cell(tiny_encoder_dir) | {"metrics": ["rouge"]}) == "metrics"


#: The downstream cells (the folder also holds the model-update and the attack cells, of other kinds).
DOWNSTREAM = sorted(p for p in EXAMPLES.glob("*.yaml") if load_cell(p).kind == "snd_downstream")


@pytest.mark.parametrize("path", DOWNSTREAM, ids=lambda p: p.name)
def test_example_cells_load(path):
    cell = load_cell(path)
    assert cell.params["task"] in ev.TASKS
    assert cell.grid.get("params.eta") == [50, 100, 500] or cell.params["pipeline"] == "clean"


def test_example_cells_cover_every_task():
    assert len(DOWNSTREAM) >= 15
    assert {load_cell(p).params["task"] for p in DOWNSTREAM} == set(ev.TASKS)
