"""Split-N-Denoise as a service: the server publishes an embed model's client-side denoiser (card entry + download
route), refuses one trained for another encoder, and the client denoises locally with a cached, checked copy while
sending nothing but the noisy token embeddings X~ (a recording proxy sees every byte)."""

import hashlib
import json
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import torch
from typer.testing import CliRunner

from textfree.cli import app as cli_app
from textfree.client import Client, ClientError
from textfree.encoders import load_encoder
from textfree.encoders.loading import load_hf_encoder
from textfree.mechanisms import Clipped, L2Laplace
from textfree.privatizer import Privatizer
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.models import ModelRegistry
from textfree.server.public_files import Bundle, PublicFile, PublicFileError, safetensors_metadata
from textfree.server.testing import RecordingProxy, http_requests, leaked_words, serve_in_thread
from textfree.snd.denoiser import DENOISER_FILE, Denoiser, DenoiserConfig, denoiser_sha256

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PROMPT = "Bartholomew smuggled saffron through Reykjavik harbour disguised as a lighthouse keeper"
EPS = 100.0


def _denoiser(sha: str, *, token_dim: int = 32, output_dim: int = 32, seed: int = 0) -> Denoiser:
    torch.manual_seed(seed)
    config = DenoiserConfig(
        token_dim=token_dim,
        output_dim=output_dim,
        d_model=16,
        d_ff=16,
        d_kv=8,
        n_head=2,
        n_layers=1,
        encoder_sha256=sha,
        eta_min=50,
        eta_max=500,
    )
    model = Denoiser(config)
    with torch.no_grad():  # every weight random (a fresh denoiser starts near the identity on e_n, ignoring X~ and Z)
        for param in model.parameters():
            param.normal_(0.0, 0.2)
    return model


@pytest.fixture(scope="module")
def snd(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("snd-service")
    sha = load_hf_encoder(str(tiny_encoder_dir))[3]
    run = tmp / "snd-run"
    _denoiser(sha).save_pretrained(run)
    key = KeyStore(tmp / "keys.json").add_key("alice")
    config = ServerConfig(
        embed_models={"emb": str(tiny_encoder_dir), "plain": str(tiny_encoder_dir)},
        denoisers={"emb": str(run)},
        keys_path=str(tmp / "keys.json"),
    )
    app = create_app(config)
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "app": app, "encoder": tiny_encoder_dir, "run": run, "sha": sha, "tmp": tmp}


def _client(snd, cache_dir, url=None, **kwargs) -> Client:
    return Client(url or snd["url"], api_key=snd["key"], encoder=snd["encoder"], cache_dir=cache_dir, **kwargs)


def _proxy(snd) -> RecordingProxy:
    target = urlparse(snd["url"])
    return RecordingProxy(target.hostname, target.port)


def _local_release(snd, card, texts, seed):
    """(payload, X, Z, mask) made here with the card's settings: what the client should have made and kept."""
    enc = load_encoder(snd["encoder"], "embedding_table")
    enc.name = card["encoder_id"]
    noise, clip = Clipped(L2Laplace(EPS), max_norm=card["clip_norm"]), card["clip_norm"]
    priv = Privatizer(enc, noise, k=1, normalize=False, renormalize=False, sensitivity=2 * clip)
    payload = priv.privatize(texts, seed=seed)
    batch = enc.encode(texts)
    mask = payload.mask.bool()
    x = batch.hidden.float()[:, : payload.vectors.shape[1]] * mask.unsqueeze(-1)
    z = (payload.vectors.float() - x) * mask.unsqueeze(-1)
    return payload, x, z, mask


# ---------------------------------------------------------------------------------------------------------- server
def test_the_card_names_the_denoiser_and_its_eta_range(snd, tmp_path):
    with _client(snd, tmp_path) as client:
        card = client.model_card("emb")
        plain = client.model_card("plain")
        listed = {c["id"]: c for c in client.models()}
    file = snd["run"] / DENOISER_FILE
    assert card["denoiser"] == {
        "sha256": denoiser_sha256(snd["run"]),
        "bytes": file.stat().st_size,
        "eta_min": 50.0,
        "eta_max": 500.0,
        "token_dim": 32,
        "output_dim": 32,
        "url": "/v1/models/emb/denoiser",
    }
    assert card["encoder_sha256"] == snd["sha"] and listed["emb"]["denoiser"] == card["denoiser"]
    assert plain["denoiser"] is None and listed["plain"]["denoiser"] is None
    assert str(snd["tmp"]) not in json.dumps(card)  # no server path on the card


def test_get_serves_the_file_and_404s_without_one(snd):
    auth = {"Authorization": f"Bearer {snd['key']}"}
    data = (snd["run"] / DENOISER_FILE).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    with httpx.Client(base_url=snd["url"]) as http:
        r = http.get("/v1/models/emb/denoiser", headers=auth)
        assert r.status_code == 200 and r.content == data
        assert r.headers["content-type"] == "application/octet-stream" and r.headers["etag"] == f'"{sha}"'
        again = http.get("/v1/models/emb/denoiser", headers={**auth, "If-None-Match": f'"{sha}"'})
        assert again.status_code == 304 and again.content == b""
        none = http.get("/v1/models/plain/denoiser", headers=auth)
        assert none.status_code == 404 and none.json()["error"]["type"] == "denoiser_not_found"
        assert "'plain'" in none.json()["error"]["message"]
        unknown = http.get("/v1/models/nope/denoiser", headers=auth)
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "model_not_found"
        assert http.get("/v1/models/emb/denoiser").status_code == 401  # as every /v1/models route: a key


def test_a_denoiser_for_another_encoder_is_refused_at_startup(snd, tmp_path, tiny_encoder_dir):
    other = "ab" * 32
    _denoiser(other).save_pretrained(tmp_path / "other")
    config = ServerConfig(
        embed_models={"emb": str(tiny_encoder_dir)}, denoisers={"emb": str(tmp_path / "other")}, auth=False
    )
    with pytest.raises(ValueError, match=f"{other[:16]}.*{snd['sha'][:16]}.*another model"):
        create_app(config)
    # widths, a damaged file, another file format, a missing file, a model that is not an embed model
    _denoiser(snd["sha"], token_dim=48).save_pretrained(tmp_path / "wide")
    damaged = tmp_path / "damaged.safetensors"
    damaged.write_bytes((snd["run"] / DENOISER_FILE).read_bytes()[:-5])
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(tmp_path / "plain.safetensors"), metadata={"format": "pt"})
    for path, words in (
        (tmp_path / "wide", "token_dim 48"),
        (damaged, "damaged"),
        (tmp_path / "plain.safetensors", "not a denoiser file"),
        (tmp_path / "missing", "no denoiser at"),
    ):
        config = ServerConfig(embed_models={"emb": str(tiny_encoder_dir)}, denoisers={"emb": str(path)}, auth=False)
        with pytest.raises(ValueError, match=f"embed model 'emb'.*{words}"):
            ModelRegistry.load(config)
    with pytest.raises(ValueError, match=r"denoisers names model id\(s\) \['gen'\] that are not embed models"):
        ServerConfig(embed_models={"emb": str(tiny_encoder_dir)}, denoisers={"gen": str(snd["run"])}, auth=False)


def test_serve_cli_refuses_a_denoiser_for_another_encoder(tmp_path, tiny_encoder_dir):
    _denoiser("cd" * 32).save_pretrained(tmp_path / "other")
    args = ["serve", "--no-auth", "--embed-model", f"emb={tiny_encoder_dir}", "--denoiser", f"emb={tmp_path}/other"]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 2 and "another model" in result.output
    result = CliRunner().invoke(cli_app, args[:-1] + ["emb"])
    assert result.exit_code == 2 and "takes ID=PATH" in result.output
    result = CliRunner().invoke(cli_app, args[:-1] + [f"emb={tmp_path}/nothing"])
    assert result.exit_code == 2 and "no such file" in result.output


def test_the_safetensors_reader_checks_the_framing(snd):
    data = (snd["run"] / DENOISER_FILE).read_bytes()
    assert json.loads(safetensors_metadata(data)["config"])["encoder_sha256"] == snd["sha"]
    for bad in (data[:4], data[:-1], data + b"\0", b"\xff" * 8 + data[8:]):
        with pytest.raises(PublicFileError):
            safetensors_metadata(bad)


# ---------------------------------------------------------------------------------------------------------- client
def test_the_denoised_result_equals_the_denoiser_run_locally_on_the_same_noise(snd, tmp_path):
    texts = ["some private words", "a second, longer private sentence here"]
    with _client(snd, tmp_path) as client:
        result = client.embed(texts, model="emb", epsilon=EPS, seed=3, denoise=True)
        card = client.model_card("emb")
    assert result.denoised and result.epsilon == EPS and result.denoiser_sha256 == card["denoiser"]["sha256"]
    payload, _, z, mask = _local_release(snd, card, texts, seed=3)
    assert result.payload_bytes == len(payload.to_bytes())
    # each token costs at most eta * 2C (the table's rows have norm <= C): a finite worst case, not an unbounded one
    assert result.privacy.epsilon == pytest.approx(EPS * 2 * card["clip_norm"] * max(payload.lengths))
    # the server's e_n of this very payload
    with httpx.Client(base_url=snd["url"]) as http:
        r = http.post(
            "/v1/embed",
            params={"model": "emb"},
            content=payload.to_bytes(),
            headers={"Authorization": f"Bearer {snd['key']}", "Content-Type": "application/octet-stream"},
        )
    e_n = torch.tensor(r.json()["embeddings"])
    assert torch.allclose(torch.tensor(result.raw_embeddings), e_n, atol=1e-5)
    expected = Denoiser.from_pretrained(snd["run"]).denoise(e_n, payload.vectors.float(), z, mask, eta=EPS)
    got = torch.tensor(result.embeddings)
    assert got.shape == (2, 32) and torch.allclose(got, expected, atol=1e-5)
    assert not torch.allclose(got, e_n, atol=1e-3)  # it did denoise
    # and with this very noise: the same denoiser without Z, or on another draw of it, answers otherwise
    local = Denoiser.from_pretrained(snd["run"])
    assert not torch.allclose(got, local.denoise(e_n, payload.vectors.float(), torch.zeros_like(z), mask, eta=EPS))
    other, _, z_other, _ = _local_release(snd, card, texts, seed=4)
    assert not torch.allclose(got, local.denoise(e_n, other.vectors.float(), z_other, mask, eta=EPS), atol=1e-4)
    plain = _client(snd, tmp_path).embed(texts, model="emb", epsilon=EPS, seed=3)
    assert not plain.denoised and plain.raw_embeddings is None
    assert torch.allclose(torch.tensor(plain.embeddings), e_n, atol=1e-5)


def test_nothing_but_the_payload_leaves_the_client(snd, tmp_path):
    with _proxy(snd) as proxy:
        with _client(snd, tmp_path, url=proxy.url) as client:
            result = client.embed(PROMPT, model="emb", epsilon=EPS, seed=0, denoise=True)
            card = client.model_card("emb")
    sent = proxy.sent.replace(snd["key"].encode(), b"")
    requests = http_requests(sent)
    lines = [line for line, _ in requests]
    assert lines == [
        "GET /v1/models/emb HTTP/1.1",
        "GET /v1/models/emb/bundle HTTP/1.1",  # the client bundle: its manifest, then the denoiser
        f"GET /v1/models/emb/bundle/{DENOISER_FILE} HTTP/1.1",
        "POST /v1/embed?model=emb HTTP/1.1",
        "GET /v1/models/emb HTTP/1.1",
    ]
    payload, x, z, mask = _local_release(snd, card, [PROMPT], seed=0)
    bodies = [body for _, body in requests]
    assert sum(len(b) for b in bodies) == result.payload_bytes == len(bodies[3])
    assert bodies[3] == payload.to_bytes()  # the one body is exactly the payload made here (X~ and its header)
    tokenizer = load_encoder(snd["encoder"], "embedding_table").tokenizer
    assert leaked_words(sent, PROMPT, tokenizer) == []
    rows = [t for t in range(int(mask[0].sum()))]
    # the recorder sees X~'s float32 values; never Z's (the noise) nor X's (the clean token embeddings)
    assert all(payload.vectors[0, t].numpy().tobytes() in sent for t in rows)
    assert not any(z[0, t].numpy().tobytes() in sent for t in rows)
    assert not any(x[0, t].numpy().tobytes() in sent for t in rows)
    for t in rows:  # nor any 8-byte run of Z's or X's values
        for value in (z[0, t], x[0, t]):
            raw = value.numpy().tobytes()
            assert not any(raw[i : i + 8] in sent for i in range(0, len(raw) - 8, 4))


def test_the_denoiser_is_downloaded_once(snd, tmp_path):
    with _proxy(snd) as proxy:
        for _ in range(2):  # two clients, one cache: one download
            with _client(snd, tmp_path, url=proxy.url) as client:
                client.embed(["one", "two"], model="emb", epsilon=60.0, seed=0, denoise=True)
                client.embed("three", model="emb", epsilon=400.0, seed=1, denoise=True)
    assert proxy.sent.count(f"GET /v1/models/emb/bundle/{DENOISER_FILE} ".encode()) == 1
    assert proxy.sent.count(b"POST /v1/embed") == 4
    assert [p.name for p in tmp_path.iterdir()] == [_bundle_sha(snd)]  # the client bundle's directory


def _bundle_sha(snd) -> str:
    with _client(snd, None) as client:
        return client.model_card("emb")["client_bundle"]["sha256"]


def test_the_cache_directory_comes_from_the_environment(snd, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_BUNDLE_CACHE", str(tmp_path / "env-cache"))
    with Client(snd["url"], api_key=snd["key"], encoder=snd["encoder"]) as client:
        assert client.cache_dir == tmp_path / "env-cache"
        assert client.denoiser("emb").sha256 == denoiser_sha256(snd["run"])
    assert (tmp_path / "env-cache" / _bundle_sha(snd) / DENOISER_FILE).is_file()


@pytest.mark.parametrize("damage", ["flip", "truncate", "other-denoiser"])
def test_a_damaged_cached_file_is_an_error_removed_and_never_used(snd, tmp_path, damage):
    with _client(snd, tmp_path) as client:
        client.denoiser("emb")
    cached = tmp_path / _bundle_sha(snd) / DENOISER_FILE
    data = cached.read_bytes()
    if damage == "flip":
        data = data[:-3] + bytes([data[-3] ^ 1]) + data[-2:]
    elif damage == "truncate":
        data = data[:-10]
    else:  # a valid denoiser file, but not the one the card names (same size: another random init)
        data = _denoiser(snd["sha"], seed=1).to_bytes()
        assert len(data) == cached.stat().st_size
    cached.write_bytes(data)
    with _proxy(snd) as proxy:
        with _client(snd, tmp_path, url=proxy.url) as client:
            with pytest.raises(ClientError, match="is damaged .*removed from the cache and not used"):
                client.embed(PROMPT, model="emb", epsilon=EPS, seed=0, denoise=True)
    assert not cached.exists()
    assert b"POST /v1/embed" not in proxy.sent  # refused before anything private was sent
    with _client(snd, tmp_path) as client:  # the next call downloads a fresh copy
        assert client.embed(PROMPT, model="emb", epsilon=EPS, seed=0, denoise=True).denoised
    assert cached.read_bytes() == (snd["run"] / DENOISER_FILE).read_bytes()


@pytest.mark.parametrize("served", ["other-bytes", "too-many-bytes"])
def test_a_server_sending_other_bytes_than_the_card_names_is_refused(snd, tmp_path, served):
    registry = snd["app"].state.registry
    bundle = registry.bundles["emb"]
    real = bundle.files[DENOISER_FILE]
    data = _denoiser(snd["sha"], seed=2).to_bytes() if served == "other-bytes" else real.data + b"\0" * 64
    # the card and the manifest still name the real one
    registry.bundles["emb"] = Bundle({DENOISER_FILE: PublicFile.of(data)}, bundle.manifest, bundle.manifest_file)
    try:
        with _client(snd, tmp_path) as client:
            words = "not the manifest's" if served == "other-bytes" else "more than the"
            with pytest.raises(ClientError, match=words):
                client.embed(PROMPT, model="emb", epsilon=EPS, seed=0, denoise=True)
    finally:
        registry.bundles["emb"] = bundle
    assert list(tmp_path.iterdir()) == []  # never cached


def test_a_denoiser_for_another_model_is_refused_by_the_client(snd, tmp_path):
    with _client(snd, tmp_path) as client:
        card = client.model_card("emb")
        client._cards["emb"] = {**card, "encoder_sha256": "ef" * 32}
        with pytest.raises(ClientError, match="another model"):
            client.denoiser("emb")
        client._cards["emb"] = {**card, "denoiser": {**card["denoiser"], "eta_max": 900.0}}
        with pytest.raises(ClientError, match=r"eta \[50, 500\], not the card's \[50, 900\]"):
            client.denoiser("emb")


def test_denoise_refusals_before_anything_is_sent(snd, tmp_path, monkeypatch):
    with _client(snd, tmp_path) as client:
        sent = []
        real = client._request
        monkeypatch.setattr(
            client, "_request", lambda method, path, **kw: (sent.append(path), real(method, path, **kw))[1]
        )
        with pytest.raises(ClientError, match="model 'plain' has no denoiser"):
            client.embed(PROMPT, model="plain", epsilon=EPS, denoise=True)
        for eps in (10.0, 1000.0):
            with pytest.raises(ClientError, match=rf"epsilon {eps!r} is outside \[50, 500\].*nothing was sent"):
                client.embed(PROMPT, model="emb", epsilon=eps, denoise=True)
        with pytest.raises(ClientError, match="needs noise"):
            client.embed(PROMPT, model="emb", no_noise=True, denoise=True)
        assert "/v1/embed" not in sent
        # without an epsilon: the denoiser's eta_min, the most private level it was trained for
        assert client.embed(PROMPT, model="emb", seed=0, denoise=True).epsilon == 50.0
    with _client(snd, tmp_path, max_epsilon=60.0) as capped:
        with pytest.raises(ClientError, match="above this client's max_epsilon"):
            capped.embed(PROMPT, model="emb", epsilon=100.0, denoise=True)


# ---------------------------------------------------------------------------------------------------------- CLI
def _embed_cli(snd, tmp_path, *extra, url=None):
    args = ["embed", PROMPT, "--url", url or snd["url"], "--model", "emb", "--encoder", str(snd["encoder"])]
    args += ["--cache-dir", str(tmp_path), "--seed", "0", *extra]
    return CliRunner().invoke(cli_app, args, env={"TEXTFREE_API_KEY": snd["key"]})


def test_embed_cli(snd, tmp_path):
    with _proxy(snd) as proxy:
        result = _embed_cli(snd, tmp_path, "--epsilon", "100", "--json", url=proxy.url)
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert out["denoised"] and out["dim"] == 32 and len(out["embeddings"]) == 1 and len(out["raw_embeddings"]) == 1
    assert out["epsilon"] == 100.0 and out["payload_bytes"] > 0
    # d_chi privacy at eta per unit L2 distance per token: at most eta * 2C per token, summed over the text's tokens
    with _client(snd, tmp_path) as client:
        clip = client.model_card("emb")["clip_norm"]
    n_tokens = len(load_encoder(snd["encoder"], "embedding_table").tokenizer(PROMPT)["input_ids"])
    assert out["privacy"]["delta"] == 0.0 and out["privacy"]["notion"] == "metric"
    assert out["privacy"]["epsilon"] == pytest.approx(100 * 2 * clip * n_tokens)
    sent = proxy.sent.replace(snd["key"].encode(), b"")
    tokenizer = load_encoder(snd["encoder"], "embedding_table").tokenizer
    assert leaked_words(sent, PROMPT, tokenizer) == []
    with _client(snd, tmp_path) as client:
        direct = client.embed(PROMPT, model="emb", epsilon=100.0, seed=0, denoise=True)
    assert torch.allclose(torch.tensor(out["embeddings"]), torch.tensor(direct.embeddings), atol=1e-5)
    # the summary: one line per text on stdout, bytes sent and privacy on stderr
    summary = _embed_cli(snd, tmp_path, "--epsilon", "100")
    assert summary.exit_code == 0, summary.output
    assert summary.stdout.startswith("[0] denoised embedding, dim 32")
    assert "payload bytes sent" in summary.stderr and "privacy: d_chi privacy at eta 100" in summary.stderr
    raw = _embed_cli(snd, tmp_path, "--epsilon", "100", "--no-denoise", "--json")
    assert raw.exit_code == 0 and json.loads(raw.stdout)["denoised"] is False


def test_embed_cli_errors(snd, tmp_path):
    for extra, words in (
        (["--epsilon", "-1"], "--epsilon must be"),
        (["--epsilon", "nan"], "--epsilon must be"),
        (["--timeout", "0"], "--timeout must be"),
        (["--retries", "-1"], "--retries must be"),
        (["--denoise", "--no-such-flag"], "No such option"),
    ):
        result = _embed_cli(snd, tmp_path, *extra)
        assert result.exit_code == 2 and words in result.output, (extra, result.output)
    result = CliRunner().invoke(cli_app, ["embed", PROMPT, "--url", snd["url"]])
    assert result.exit_code == 2 and "--model" in result.output
    result = CliRunner().invoke(cli_app, ["embed", "  ", "--url", snd["url"], "--model", "emb"])
    assert result.exit_code == 2 and "non-empty" in result.output
    out_of_range = _embed_cli(snd, tmp_path, "--epsilon", "5")
    assert out_of_range.exit_code == 1 and "outside [50, 500]" in out_of_range.output
    no_denoiser = CliRunner().invoke(
        cli_app,
        ["embed", PROMPT, "--url", snd["url"], "--model", "plain", "--encoder", str(snd["encoder"]), "--denoise"],
        env={"TEXTFREE_API_KEY": snd["key"]},
    )
    assert no_denoiser.exit_code == 1 and "has no denoiser" in no_denoiser.output
    assert not Path(tmp_path / "nothing").exists()
