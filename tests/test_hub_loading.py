"""Runs load like Hugging Face models: ``save_pretrained`` -> ``from_pretrained`` round trips (PPFT, SnD denoiser,
RAPT) give the same outputs anywhere; hub ids resolve through ``snapshot_download`` (mocked: no network), and the
server serves a run by hub id; ``push_to_hub`` uploads a folder holding the run (``HfApi`` mocked); a missing local
path and an id not in the cache offline are clear errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import torch

import textfree.ppft.service  # noqa: F401  (registers "ppft")
import textfree.rapt.service  # noqa: F401  (registers "rapt")
from textfree.data.tasks import TaskData
from textfree.lm.hub import PretrainedNotFound, is_hub_id, resolve_pretrained
from textfree.ppft.model import TextFreeLM
from textfree.ppft.server import CONFIG_NAME
from textfree.rapt.model import RaptClassifier, encode_examples, load_classifier
from textfree.rapt.model import push_to_hub as push_rapt
from textfree.rapt.model import save_pretrained as save_rapt
from textfree.rapt.train import RaptTrainConfig, build_mechanism, train_rapt
from textfree.server import ServerConfig
from textfree.server.models import ModelRegistry
from textfree.snd.denoiser import DENOISER_FILE, Denoiser, DenoiserConfig, DenoiserError
from textfree.substitution.examples import privatize_examples
from textfree.substitution.plain import PlainTokens

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PROMPT = "Bartholomew smuggled saffron through Reykjavik harbour"


class FakeSnapshots:
    """``snapshot_download`` of a hub with the given repositories (id -> local folder); records every call."""

    def __init__(self, repos: dict[str, Path]):
        self.repos, self.calls = repos, []

    def __call__(self, repo_id, **kwargs):
        self.calls.append((repo_id, kwargs))
        if repo_id not in self.repos:
            import httpx

            response = httpx.Response(404, request=httpx.Request("GET", f"https://huggingface.co/{repo_id}"))
            raise huggingface_hub.errors.RepositoryNotFoundError(f"404: {repo_id}", response=response)
        return str(self.repos[repo_id])


class FakeApi:
    """``HfApi`` that records create_repo / upload_folder and what the uploaded folder held."""

    instances: list = []

    def __init__(self, token=None):
        self.token, self.created, self.uploads = token, [], []
        FakeApi.instances.append(self)

    def create_repo(self, **kwargs):
        self.created.append(kwargs)

    def upload_folder(self, *, repo_id, folder_path, **kwargs):
        folder = Path(folder_path)
        files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        self.uploads.append({"repo_id": repo_id, "files": files, **kwargs})
        return "commit-info"


@pytest.fixture
def hub(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    fake = FakeSnapshots({})
    monkeypatch.setattr(huggingface_hub, "snapshot_download", fake)
    return fake


@pytest.fixture
def api(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    FakeApi.instances = []
    monkeypatch.setattr(huggingface_hub, "HfApi", FakeApi)
    return FakeApi


# --------------------------------------------------------------------------- the resolver
def test_hub_ids_are_owner_slash_name_and_never_an_existing_path(tmp_path, monkeypatch):
    assert is_hub_id("acme/tiny-run") and is_hub_id("Org_1/run.v2")
    assert not is_hub_id("tiny-run") and not is_hub_id("/abs/run") and not is_hub_id("a/b/c")
    assert not is_hub_id("./run") and not is_hub_id("../run") and not is_hub_id("~/run")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "run").mkdir(parents=True)
    assert not is_hub_id("acme/run")  # an existing local path is local


def test_a_missing_local_path_or_a_non_run_is_a_clear_error(tmp_path):
    with pytest.raises(PretrainedNotFound, match=r"no PPFT run at .*nowhere.*no such local file or directory"):
        TextFreeLM.from_pretrained(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PretrainedNotFound, match=rf"empty.* is not a PPFT run \(it holds no {CONFIG_NAME}\)"):
        TextFreeLM.from_pretrained(tmp_path / "empty")
    with pytest.raises(DenoiserError, match="no denoiser at"):
        Denoiser.from_pretrained(tmp_path / "empty")


def test_an_unknown_id_offline_says_it_is_not_in_the_local_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "cache"))
    with pytest.raises(PretrainedNotFound, match=r"'nobody-xyz/no-run'.* not in the local Hugging Face cache"):
        TextFreeLM.from_pretrained("nobody-xyz/no-run")
    with pytest.raises(DenoiserError, match="not in the local Hugging Face cache"):
        Denoiser.from_pretrained("nobody-xyz/no-denoiser")
    with pytest.raises(PretrainedNotFound, match="not in the local Hugging Face cache"):
        load_classifier("nobody-xyz/no-rapt")


def test_an_unknown_id_online_names_it(hub):
    with pytest.raises(PretrainedNotFound, match=r"no hub repository 'acme/missing'"):
        resolve_pretrained("acme/missing")
    assert hub.calls[0][0] == "acme/missing" and hub.calls[0][1]["local_files_only"] is False


# --------------------------------------------------------------------------- PPFT
@pytest.fixture(scope="module")
def published_ppft(tmp_path_factory, tiny_lm):
    """A save_pretrained copy of the tiny run, its source decoder moved away (the copy must hold its own)."""
    out = tmp_path_factory.mktemp("ppft-pub") / "published"
    tiny_lm.save_pretrained(out)
    return out


def test_ppft_save_pretrained_round_trip_answers_the_same(published_ppft, tiny_lm, hub):
    assert (published_ppft / "decoder" / "model.safetensors").is_file()  # the local base decoder travels with it
    assert (published_ppft / "decoder_ref.json").read_text().count('"name_or_path": "decoder"') == 1
    hub.repos["acme/tiny-run"] = published_ppft
    for source in (published_ppft, "acme/tiny-run"):
        lm = TextFreeLM.from_pretrained(source)
        assert lm.ask(PROMPT, epsilon=None, max_new_tokens=6) == tiny_lm.ask(PROMPT, epsilon=None, max_new_tokens=6)
        assert lm.config == tiny_lm.config
    assert [c[0] for c in hub.calls] == ["acme/tiny-run"]


def test_ppft_published_run_loads_after_being_moved(published_ppft, tmp_path, tiny_lm):
    moved = Path(shutil.copytree(published_ppft, tmp_path / "elsewhere"))
    lm = TextFreeLM.from_pretrained(moved)
    assert str(moved) in lm.server.decoder_ref["name_or_path"]
    x = torch.nn.functional.normalize(torch.randn(1, 2, tiny_lm.encoder.dim), dim=-1)
    mask = torch.ones(1, 2, dtype=torch.bool)
    with torch.no_grad():
        a = lm.server(x, mask, public=["q"], targets=["an answer"]).loss
        b = tiny_lm.server(x, mask, public=["q"], targets=["an answer"]).loss
    assert torch.allclose(a, b)


def test_ppft_save_pretrained_refuses_to_replace_unrelated_files(tmp_path, tiny_lm):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("keep me")
    with pytest.raises(FileExistsError, match="not a run directory"):
        tiny_lm.save_pretrained(tmp_path / "notes")
    assert (tmp_path / "notes" / "todo.txt").read_text() == "keep me"


def test_ppft_push_to_hub_uploads_a_folder_holding_the_run(tiny_lm, api):
    assert tiny_lm.push_to_hub("acme/tiny-run", private=True, token="t0k") == "commit-info"
    (inst,) = api.instances
    assert inst.token == "t0k" and inst.created == [
        {"repo_id": "acme/tiny-run", "repo_type": "model", "private": True, "exist_ok": True}
    ]
    (upload,) = inst.uploads
    assert upload["repo_id"] == "acme/tiny-run"
    files = set(upload["files"])
    assert {CONFIG_NAME, "decoder_ref.json", "encoder/config.json", "decoder/model.safetensors"} <= files
    assert any(f.startswith("adapter/") for f in files) and any(f.startswith("projection/") for f in files)


def test_the_server_serves_a_run_by_hub_id(published_ppft, hub):
    hub.repos["acme/tiny-run"] = published_ppft
    registry = ModelRegistry.load(ServerConfig(models={"tiny": "acme/tiny-run"}, auth=False))
    assert hub.calls and hub.calls[0][0] == "acme/tiny-run"
    assert registry.card("tiny")["task"] == "generate" and registry.systems["tiny"].name == "ppft"
    with pytest.raises(ValueError, match=r"cannot load generate model 'gone'.*'acme/gone'"):
        ModelRegistry.load(ServerConfig(models={"gone": "acme/gone"}, auth=False))


def test_serve_flags_take_a_hub_id_for_runs_and_denoisers():
    import typer

    from textfree.cli_service import _id_dirs, _id_files

    assert _id_dirs(["m=acme/tiny-run"], "--model") == {"m": "acme/tiny-run"}
    assert _id_files(["m=acme/denoiser"], "--denoiser") == {"m": "acme/denoiser"}
    with pytest.raises(typer.Exit):
        _id_dirs(["m=./missing/run"], "--model")


# --------------------------------------------------------------------------- SnD denoiser
def _tiny_denoiser(sha: str) -> Denoiser:
    torch.manual_seed(0)
    cfg = DenoiserConfig(
        token_dim=32,
        output_dim=32,
        d_model=16,
        d_ff=16,
        d_kv=8,
        n_head=2,
        n_layers=1,
        encoder_sha256=sha,
        eta_min=50,
        eta_max=500,
    )
    return Denoiser(cfg)


def test_denoiser_round_trip_by_path_and_hub_id(tmp_path, hub, tiny_encoder_dir, api):
    from textfree.encoders.loading import load_hf_encoder

    sha = load_hf_encoder(str(tiny_encoder_dir))[3]
    model = _tiny_denoiser(sha)
    model.save_pretrained(tmp_path / "den")
    hub.repos["acme/den"] = tmp_path / "den"
    e_n, x = torch.randn(2, 32), torch.randn(2, 5, 32)
    z, mask = torch.randn(2, 5, 32) * 0.1, torch.ones(2, 5, dtype=torch.bool)
    want = model.denoise(e_n, x, z, mask, 100.0)
    for source in (tmp_path / "den", "acme/den"):
        loaded = Denoiser.from_pretrained(source, expected_sha256=model.sha256)
        assert torch.equal(loaded.denoise(e_n, x, z, mask, 100.0), want)
    assert model.push_to_hub("acme/den") == "commit-info"
    assert api.instances[-1].uploads[0]["files"] == [DENOISER_FILE]
    assert api.instances[-1].uploads[0]["repo_id"] == "acme/den"
    # the server publishes a denoiser by hub id with its embed model
    registry = ModelRegistry.load(
        ServerConfig(embed_models={"emb": str(tiny_encoder_dir)}, denoisers={"emb": "acme/den"}, auth=False)
    )
    assert registry.card("emb")["denoiser"]["sha256"] == model.sha256
    assert [c[0] for c in hub.calls] == ["acme/den", "acme/den"]


# --------------------------------------------------------------------------- RAPT
@pytest.fixture(scope="module")
def rapt_run(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("rapt-hub")
    pos = ["a great and moving film", "she loved the warm ending", "what a wonderful cast", "funny and smart"] * 2
    neg = ["a dull and boring film", "he hated the slow ending", "what a terrible cast", "flat and stupid"] * 2
    texts, labels = [(t,) for t in pos + neg], [1] * len(pos) + [0] * len(neg)
    data = TaskData("sst2", texts, labels, texts[::4], labels[::4], "train", "dev")
    encoder = Path(shutil.copytree(tiny_encoder_dir, tmp / "encoder"))  # a base encoder that can be removed
    cfg = RaptTrainConfig(out=str(tmp / "run"), encoder=str(encoder), eta=50.0, plain_length=4, plain_sequences=2,
                          rec_vocab_size=50, epochs=1, batch_size=8, max_length=48, progress=False)  # fmt: skip
    train_rapt(cfg, data=data)
    return {"run": tmp / "run", "encoder": encoder, "tmp": tmp}


def _logits(source, examples):
    classifier, tokenizer, plain, config = load_classifier(source)
    batch = encode_examples(tokenizer, examples, plain, max_length=config["max_length"])
    with torch.no_grad():
        return classifier(batch)["logits"]


def test_rapt_round_trip_by_path_and_hub_id_without_the_base_encoder(rapt_run, hub, api):
    run = rapt_run["run"]
    mechanism = build_mechanism(str(rapt_run["encoder"]), 50.0, "default")
    examples = privatize_examples(
        [("a moving film",), ("a boring cast",)], [0, 0], mechanism, PlainTokens.load(run),
        generator=torch.Generator().manual_seed(1),
    )  # fmt: skip
    want = _logits(run, examples)
    published = save_rapt(run, rapt_run["tmp"] / "published")
    assert (published / "base_encoder" / "config.json").is_file() and not (published / "checkpoints").exists()
    config = json.loads((published / "train_config.json").read_text())["config"]
    assert config["out"] == "." and config["encoder"] == "base_encoder"  # no path of the publisher's machine
    assert not [v for v in config.values() if isinstance(v, str) and (v.startswith("/") or str(run) in v)]
    hub.repos["acme/rapt"] = published
    shutil.move(rapt_run["encoder"], rapt_run["tmp"] / "encoder-gone")  # the published run needs no local encoder
    try:
        for source in (published, "acme/rapt"):
            assert torch.allclose(_logits(source, examples), want, atol=1e-6)
        classifier = RaptClassifier.from_pretrained("acme/rapt")
        assert classifier.head is None and classifier.plain is not None and classifier.tokenizer is not None
        registry = ModelRegistry.load(ServerConfig(models={"sst2": "acme/rapt"}, auth=False))
        assert registry.systems["sst2"].name == "rapt" and registry.card("sst2")["task"] == "classify"
    finally:
        shutil.move(rapt_run["tmp"] / "encoder-gone", rapt_run["encoder"])
    assert push_rapt(run, "acme/rapt") == "commit-info"
    (upload,) = api.instances[-1].uploads
    assert upload["repo_id"] == "acme/rapt"
    assert {"task_head.safetensors", "train_config.json", "summary.json", "base_encoder/config.json"} <= set(
        upload["files"]
    )
