"""The client bundle: every public file a client holds for a model (a PPFT run's client encoder, SnD's denoiser,
RAPT's plain tokens and base encoder), published by the server beside the card and named there by one sha256; the
client fetches it once, caches it atomically, checks every byte, and refuses a damaged or mismatched one."""

import hashlib
import json
import shutil
import socket
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import torch
from typer.testing import CliRunner

import textfree.rapt.service  # noqa: F401  (registers "rapt")
from textfree.bundle import (
    ENCODER_DIR,
    FORMAT,
    MANIFEST_NAME,
    BundleError,
    BundleFile,
    Manifest,
    check_name,
    install,
    verify_dir,
)
from textfree.cli import app as cli_app
from textfree.client import Client, ClientError
from textfree.data.tasks import TaskData
from textfree.encoders.loading import load_hf_encoder
from textfree.ppft.testing import make_tiny_run
from textfree.rapt.model import BASE_ENCODER_DIR
from textfree.rapt.train import RaptTrainConfig, train_rapt
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.public_files import Bundle, PublicFile, PublicFileError, public_dir
from textfree.server.testing import RecordingProxy, http_requests, serve_in_thread
from textfree.snd.denoiser import Denoiser, DenoiserConfig

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PROMPT = "Bartholomew smuggled saffron through Reykjavik harbour"
ENCODER_FILES = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]


@pytest.fixture(scope="module")
def served(tmp_path_factory, tiny_encoder_dir):
    """One server: a PPFT run (``tiny``), an embed model with a denoiser (``emb``) and one without (``plain``)."""
    tmp = tmp_path_factory.mktemp("bundle")
    run = make_tiny_run(tmp, tiny_encoder_dir)
    torch.manual_seed(0)
    sha = load_hf_encoder(str(tiny_encoder_dir))[3]
    config = DenoiserConfig(token_dim=32, output_dim=32, d_model=16, d_ff=16, d_kv=8, n_head=2, n_layers=1,
                            encoder_sha256=sha, eta_min=50, eta_max=500)  # fmt: skip
    Denoiser(config).save_pretrained(tmp / "denoiser")
    key = KeyStore(tmp / "keys.json").add_key("alice")
    app = create_app(
        ServerConfig(
            models={"tiny": str(run)},
            embed_models={"emb": str(tiny_encoder_dir), "plain": str(tiny_encoder_dir)},
            denoisers={"emb": str(tmp / "denoiser")},
            keys_path=str(tmp / "keys.json"),
        )
    )
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "app": app, "run": run, "encoder": tiny_encoder_dir,
               "denoiser": tmp / "denoiser"}  # fmt: skip


def _auth(env) -> dict:
    return {"Authorization": f"Bearer {env['key']}"}


def _client(env, cache, url=None, **kwargs) -> Client:
    return Client(url or env["url"], api_key=env["key"], cache_dir=cache, **kwargs)


def _proxy(env) -> RecordingProxy:
    target = urlparse(env["url"])
    return RecordingProxy(target.hostname, target.port)


def _lines(proxy, key) -> list[str]:
    return [line for line, _ in http_requests(proxy.sent.replace(key.encode(), b""))]


def _ask(env, cache, *extra):
    args = ["ask", PROMPT, "--url", env["url"], "--api-key", env["key"], "--model", "tiny", "--seed", "3"]
    return CliRunner().invoke(cli_app, [*args, "--max-new-tokens", "3", "--cache-dir", str(cache), *extra])


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ------------------------------------------------------------------------------------------------- the manifest maths
def test_names_and_formats_a_bundle_may_hold():
    for name in ("encoder/config.json", "denoiser.safetensors", "encoder/vocab.txt", "plain_tokens.json"):
        assert check_name(name) == name
    refused = ["encoder/pytorch_model.bin", "weights.pt", "x.pkl", "../secret.json", "/etc/passwd.json",
               "encoder/../x.json", ".hidden.json", "a/b/c/d.json", "", MANIFEST_NAME, "encoder\\x.json"]  # fmt: skip
    for name in refused:
        with pytest.raises(BundleError):
            check_name(name)
    with pytest.raises(BundleError, match="never a pickle"):
        check_name("encoder/pytorch_model.bin")


def test_the_manifest_is_canonical_and_names_the_bundle():
    files = {"b.json": (2, _sha(b"{}")), "a.safetensors": (3, _sha(b"abc"))}
    manifest = Manifest.of(files)
    raw = manifest.to_bytes()
    assert [f.name for f in manifest.files] == ["a.safetensors", "b.json"]
    assert json.loads(raw)["format"] == FORMAT and Manifest.from_bytes(raw) == manifest
    assert manifest.sha256 == _sha(raw) and manifest.total_bytes == 5
    spaced = json.dumps(json.loads(raw), indent=1).encode()  # the same content, another form: another name
    with pytest.raises(BundleError, match="canonical"):
        Manifest.from_bytes(spaced)
    with pytest.raises(BundleError, match="never a pickle"):
        Manifest((BundleFile("model.bin", 1, _sha(b"x")),))
    with pytest.raises(BundleError, match="sha256"):
        manifest.check("b.json", b"[]")


def test_install_is_atomic_and_verify_finds_damage(tmp_path):
    blobs = {"encoder/config.json": b"{}", "denoiser.safetensors": b"\0" * 16}
    raw = Manifest.of({n: (len(b), _sha(b)) for n, b in blobs.items()}).to_bytes()

    def failing(f):  # the second file never arrives: nothing may look installed
        if f.name == "encoder/config.json":
            raise OSError("connection lost")
        return blobs[f.name]

    with pytest.raises(OSError):
        install(tmp_path, raw, failing)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(BundleError, match="sha256"):  # a file other than the manifest's
        install(tmp_path, raw, lambda f: blobs[f.name][:-1] + b"x")
    assert list(tmp_path.iterdir()) == []
    target = install(tmp_path, raw, lambda f: blobs[f.name])
    assert target == tmp_path / _sha(raw) and [p.name for p in tmp_path.iterdir()] == [target.name]
    assert verify_dir(target, _sha(raw)).total_bytes == 18
    (target / "encoder" / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(BundleError, match="does not list"):
        verify_dir(target, _sha(raw))


def test_a_directory_of_pickled_weights_is_never_published(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "pytorch_model.bin").write_bytes(b"pickle")
    with pytest.raises(PublicFileError, match="no safetensors weights .*pytorch_model.bin"):
        public_dir(tmp_path, ENCODER_DIR)
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 8)
    (tmp_path / "README.md").write_text("not published")
    assert sorted(public_dir(tmp_path, ENCODER_DIR)) == ["encoder/config.json", "encoder/model.safetensors"]
    with pytest.raises(PublicFileError, match="never a pickle"):
        Bundle.of({"encoder/pytorch_model.bin": PublicFile.of(b"pickle")})


# ---------------------------------------------------------------------------------------------------------- the server
def test_the_card_names_the_bundle_and_the_routes_serve_it(served):
    run = served["run"]
    with httpx.Client(base_url=served["url"], headers=_auth(served)) as http:
        card = http.get("/v1/models/tiny").json()
        entry = card["client_bundle"]
        raw = http.get(entry["url"])
        assert raw.status_code == 200 and _sha(raw.content) == entry["sha256"] == raw.headers["etag"].strip('"')
        manifest = Manifest.from_bytes(raw.content)
        assert [f.name for f in manifest.files] == [f"encoder/{n}" for n in ENCODER_FILES]  # no slot centre: none used
        assert (entry["files"], entry["bytes"]) == (4, manifest.total_bytes)
        for f in manifest.files:
            got = http.get(f"{entry['url']}/{f.name}")
            assert got.status_code == 200 and got.content == (run / f.name).read_bytes()
            again = http.get(f"{entry['url']}/{f.name}", headers={"If-None-Match": f'"{f.sha256}"'})
            assert again.status_code == 304
        emb = http.get("/v1/models/emb").json()
        emb_manifest = Manifest.from_bytes(http.get(emb["client_bundle"]["url"]).content)
        assert [(f.name, f.sha256) for f in emb_manifest.files] == [("denoiser.safetensors", emb["denoiser"]["sha256"])]
        # the denoiser's own route serves the bundle's bytes
        via_route = http.get("/v1/models/emb/denoiser").content
        assert via_route == http.get("/v1/models/emb/bundle/denoiser.safetensors").content
        assert http.get("/v1/models/plain").json()["client_bundle"] is None
        none = http.get("/v1/models/plain/bundle")
        assert none.status_code == 404 and none.json()["error"]["type"] == "bundle_not_found"
        assert http.get("/v1/models/nope/bundle").json()["error"]["type"] == "model_not_found"
    assert httpx.get(f"{served['url']}/v1/models/tiny/bundle").status_code == 401  # a key, as for the card


def _raw_get(url: str, path: str, key: str) -> tuple[int, bytes]:
    """GET ``path`` exactly as written (no client normalises its dot segments)."""
    target = urlparse(url)
    with socket.create_connection((target.hostname, target.port), timeout=10) as sock:
        sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {key}\r\nConnection: close\r\n\r\n"
                     .encode())  # fmt: skip
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body


@pytest.mark.parametrize(
    "path",
    [
        "../textfree_config.json",
        "..%2Ftextfree_config.json",
        "%2e%2e/%2e%2e/textfree_config.json",
        "encoder/../textfree_config.json",
        "encoder/..%2F..%2Ftextfree_config.json",
        "%2Fetc%2Fpasswd",
        "projection/model.safetensors",  # a file of the run that is not public
        "encoder/pytorch_model.bin",
        "textfree_config.json",
    ],
)
def test_path_traversal_in_a_bundle_file_name_is_refused(served, path):
    secret = (served["run"] / "textfree_config.json").read_bytes()
    status, body = _raw_get(served["url"], f"/v1/models/tiny/bundle/{path}", served["key"])
    assert status in (400, 404) and secret not in body and b"safetensors" not in body[:8]


def test_the_server_never_loads_the_client_encoder(served, tmp_path, monkeypatch, tiny_encoder_dir):
    """Only the encoder's bytes are read (to publish them); no loader is ever given its directory."""
    import transformers

    import textfree.encoders.loading as loading
    import textfree.ppft.model as ppft_model

    run = make_tiny_run(tmp_path, tiny_encoder_dir, seed=1)
    opened = []
    for cls in (transformers.AutoModel, transformers.AutoTokenizer, transformers.AutoConfig):
        real = cls.from_pretrained

        def spy(path, *args, _real=real, **kwargs):
            opened.append(str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(cls, "from_pretrained", spy)
    for module, name in ((loading, "load_hf_encoder"), (ppft_model.ContextualEncoder, "from_pretrained")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("the server loaded an encoder"))
    app = create_app(ServerConfig(models={"tiny": str(run)}, auth=False))
    local = [Path(p).resolve() for p in opened if Path(p).exists()]
    assert (tmp_path / "decoder").resolve() in local  # the spies see what loads (the decoder's tokenizer, ...)
    assert not any(p.is_relative_to((run / "encoder").resolve()) for p in local)
    model = app.state.registry.models["tiny"]
    encoder_keys = set(load_hf_encoder(str(tiny_encoder_dir))[1].state_dict())
    assert not any(name.endswith(tuple(encoder_keys)) for name, _ in model.server.named_parameters())
    assert (
        app.state.registry.bundles["tiny"].file("encoder/model.safetensors").data
        == (run / "encoder" / "model.safetensors").read_bytes()
    )


def test_a_run_whose_encoder_is_not_its_configs_is_refused_at_startup(tmp_path, tiny_encoder_dir):
    run = make_tiny_run(tmp_path, tiny_encoder_dir, seed=2)
    weights = run / "encoder" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(ValueError, match="encoder sha256 .*another model"):
        create_app(ServerConfig(models={"tiny": str(run)}, auth=False))


# ---------------------------------------------------------------------------------------------------------- the client
def test_ask_without_encoder_equals_ask_with_it(served, tmp_path):
    with_encoder = _ask(served, tmp_path / "none", "--encoder", str(served["run"] / "encoder"))
    assert with_encoder.exit_code == 0, with_encoder.output
    assert not (tmp_path / "none").exists()  # an override: no bundle fetched
    without = _ask(served, tmp_path / "cache")
    assert without.exit_code == 0, without.output
    assert without.stdout.splitlines()[0] == with_encoder.stdout.splitlines()[0]
    assert "downloading the client bundle of model 'tiny' (4 files" in without.stderr
    sha = _client(served, tmp_path).model_card("tiny")["client_bundle"]["sha256"]
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [sha]
    cached = tmp_path / "cache" / sha / "encoder"
    assert sorted(p.name for p in cached.iterdir()) == ENCODER_FILES
    again = _ask(served, tmp_path / "cache")  # from the cache: the same answer, nothing downloaded
    assert again.exit_code == 0 and again.stdout == without.stdout and "downloading" not in again.stderr


def test_finetune_privatizes_with_the_bundles_encoder(served, tmp_path):
    """``textfree finetune`` without --encoder: the rows are privatized with the bundle's encoder and uploaded (this
    server has no database, so the upload is refused after it: 501)."""
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"private": PROMPT, "target": "Cluster headache"}) + "\n")
    args = ["finetune", "--url", served["url"], "--api-key", served["key"], "--model", "tiny", "--data", str(data)]
    result = CliRunner().invoke(cli_app, [*args, "--cache-dir", str(tmp_path / "cache"), "--seed", "0"])
    assert result.exit_code == 1 and "501 fine_tuning_disabled" in result.stderr, result.output
    assert "downloading the client bundle of model 'tiny'" in result.stderr


def test_a_second_call_uses_the_cache(served, tmp_path):
    with _proxy(served) as proxy:
        for _ in range(2):  # two clients (two processes' worth), one cache
            with _client(served, tmp_path, url=proxy.url) as client:
                client.generate("private words", model="tiny", seed=0, max_new_tokens=1)
                client.generate("more private words", model="tiny", seed=1, max_new_tokens=1)
    lines = _lines(proxy, served["key"])
    assert lines.count("GET /v1/models/tiny/bundle HTTP/1.1") == 1
    assert [line for line in lines if "/bundle/" in line] == [
        f"GET /v1/models/tiny/bundle/encoder/{n} HTTP/1.1" for n in ENCODER_FILES
    ]
    assert lines.count("POST /v1/generate?model=tiny&max_new_tokens=1 HTTP/1.1") == 4


def _cached_bundle(env, cache) -> Path:
    with _client(env, cache) as client:
        client.generate("private words", model="tiny", seed=0, max_new_tokens=1)
        return client.bundle("tiny")


@pytest.mark.parametrize("damage", ["flip-weights", "truncate-tokenizer", "edit-manifest", "add-file", "remove-file"])
def test_a_damaged_cached_bundle_is_refused_removed_and_never_used(served, tmp_path, damage):
    directory = _cached_bundle(served, tmp_path)
    if damage == "flip-weights":
        path = directory / "encoder" / "model.safetensors"
        data = path.read_bytes()
        path.write_bytes(data[:-5] + bytes([data[-5] ^ 1]) + data[-4:])
    elif damage == "truncate-tokenizer":
        path = directory / "encoder" / "tokenizer.json"
        path.write_bytes(path.read_bytes()[:-10])
    elif damage == "edit-manifest":  # a manifest that names another weights file, and that file
        manifest = Manifest.from_bytes((directory / MANIFEST_NAME).read_bytes())
        forged = b"\0" * 64
        files = {f.name: (f.bytes, f.sha256) for f in manifest.files}
        files["encoder/model.safetensors"] = (len(forged), _sha(forged))
        (directory / MANIFEST_NAME).write_bytes(Manifest.of(files).to_bytes())
        (directory / "encoder" / "model.safetensors").write_bytes(forged)
    elif damage == "add-file":
        (directory / "encoder" / "special_tokens_map.json").write_text("{}")
    else:
        (directory / "encoder" / "config.json").unlink()
    with _proxy(served) as proxy:
        with _client(served, tmp_path, url=proxy.url) as client:
            with pytest.raises(ClientError, match="cached client bundle .* is damaged .*removed from the cache"):
                client.generate(PROMPT, model="tiny", seed=0, max_new_tokens=1)
    assert not directory.exists()
    assert not any("/v1/generate" in line for line in _lines(proxy, served["key"]))  # nothing private was sent
    result = _ask(served, tmp_path)  # the next call downloads a fresh copy
    assert result.exit_code == 0, result.output
    assert verify_dir(directory, directory.name)


def test_the_cli_reports_a_damaged_bundle_in_one_line(served, tmp_path):
    directory = _cached_bundle(served, tmp_path)
    (directory / "encoder" / "tokenizer.json").write_text("{}")
    result = _ask(served, tmp_path)
    assert result.exit_code == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "is damaged" in result.stderr


@pytest.mark.parametrize("sent", ["other-file", "longer-file", "other-manifest"])
def test_a_server_sending_other_bytes_than_the_card_names_is_refused(served, tmp_path, sent):
    registry = served["app"].state.registry
    real = registry.bundles["tiny"]
    with _client(served, tmp_path) as client:
        client.model_card("tiny")  # the card names the real bundle
        if sent == "other-manifest":
            forged = Manifest((BundleFile("encoder/config.json", 2, _sha(b"{}")),))
            registry.bundles["tiny"] = Bundle(real.files, forged, PublicFile.of(forged.to_bytes()))
            words = "manifest of sha256 .*not the card's"
        else:
            name = "encoder/tokenizer.json"
            data = real.files[name].data
            data = data.replace(b"[UNK]", b"[UNX]") if sent == "other-file" else data + b" "
            registry.bundles["tiny"] = Bundle({**real.files, name: PublicFile.of(data)}, real.manifest,
                                              real.manifest_file)  # fmt: skip
            words = "tokenizer.json.* not the manifest's" if sent == "other-file" else "more than the"
        try:
            with pytest.raises(ClientError, match=words):
                client.generate(PROMPT, model="tiny", seed=0, max_new_tokens=1)
        finally:
            registry.bundles["tiny"] = real
    assert list(tmp_path.iterdir()) == []  # nothing cached, no partial directory left


def test_a_card_naming_another_bundle_than_the_cached_one_is_never_satisfied_by_it(served, tmp_path):
    """The cache is keyed by the card's sha256: a bundle whose manifest does not hash to it is never used."""
    directory = _cached_bundle(served, tmp_path)
    with _client(served, tmp_path) as client:
        card = client.model_card("tiny")
        other = "ab" * 32
        shutil.copytree(directory, tmp_path / other)
        client._cards["tiny"] = {**card, "client_bundle": {**card["client_bundle"], "sha256": other}}
        with pytest.raises(ClientError, match="its manifest has sha256 .*removed from the cache"):
            client.generate(PROMPT, model="tiny", seed=0, max_new_tokens=1)
    assert not (tmp_path / other).exists() and directory.exists()


def test_the_cache_directory_comes_from_the_environment(served, tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTFREE_BUNDLE_CACHE", str(tmp_path / "env"))
    with Client(served["url"], api_key=served["key"]) as client:
        assert client.cache_dir == tmp_path / "env"
        assert client.bundle("tiny").parent == tmp_path / "env"
        assert client.bundle("plain") is None


# ------------------------------------------------------------------------------------------ SnD and RAPT, the same way
def test_snd_embed_gets_its_denoiser_from_the_bundle(served, tmp_path):
    with _proxy(served) as proxy:
        for _ in range(2):
            with _client(served, tmp_path, url=proxy.url, encoder=served["encoder"]) as client:
                result = client.embed(PROMPT, model="emb", epsilon=100.0, seed=0, denoise=True)
    card = _client(served, tmp_path).model_card("emb")
    assert result.denoised and result.denoiser_sha256 == card["denoiser"]["sha256"]
    lines = _lines(proxy, served["key"])
    assert lines.count("GET /v1/models/emb/bundle HTTP/1.1") == 1
    assert lines.count("GET /v1/models/emb/bundle/denoiser.safetensors HTTP/1.1") == 1
    assert not any(line.startswith("GET /v1/models/emb/denoiser") for line in lines)
    cached = tmp_path / card["client_bundle"]["sha256"] / "denoiser.safetensors"
    assert cached.read_bytes() == (served["denoiser"] / "denoiser.safetensors").read_bytes()


def test_snd_refuses_a_bundle_without_the_cards_denoiser(served, tmp_path):
    with _client(served, tmp_path, encoder=served["encoder"]) as client:
        card = client.model_card("emb")
        client._cards["emb"] = {**card, "denoiser": {**card["denoiser"], "sha256": "cd" * 32}}
        with pytest.raises(ClientError, match="denoiser in the client bundle .* not the card's"):
            client.embed(PROMPT, model="emb", epsilon=100.0, seed=0, denoise=True)
        client._cards["emb"] = {**card, "client_bundle": None}
        with pytest.raises(ClientError, match="no client bundle"):
            client.embed(PROMPT, model="emb", epsilon=100.0, seed=0, denoise=True)


@pytest.fixture(scope="module")
def rapt(tmp_path_factory, tiny_encoder_dir):
    """A RAPT run that carries its base encoder (as a published run does): the client needs no --encoder."""
    tmp = tmp_path_factory.mktemp("bundle-rapt")
    texts = [("a great and moving film",), ("a dull and boring film",)] * 4
    labels = [1, 0] * 4
    run = tmp / "rapt-run"
    cfg = RaptTrainConfig(out=str(run), encoder=str(tiny_encoder_dir), eta=50.0, plain_length=4, plain_sequences=2,
                          rec_vocab_size=50, epochs=1, batch_size=8, max_length=32, progress=False)  # fmt: skip
    train_rapt(cfg, data=TaskData("sst2", texts, labels, texts[:2], labels[:2], "train", "dev"))
    shutil.copytree(tiny_encoder_dir, run / BASE_ENCODER_DIR)
    key = KeyStore(tmp / "keys.json").add_key("alice")
    app = create_app(ServerConfig(models={"sst2": str(run)}, keys_path=str(tmp / "keys.json")))
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "app": app, "run": run, "encoder": tiny_encoder_dir}


def test_rapt_classify_gets_its_plain_tokens_and_encoder_from_the_bundle(rapt, tmp_path):
    with _proxy(rapt) as proxy:
        with _client(rapt, tmp_path, url=proxy.url) as client:  # no encoder=: the card names "base_encoder"
            card = client.model_card("sst2")
            result = client.classify("a great and moving film", model="sst2", seed=0)
        with _client(rapt, tmp_path / "override", url=proxy.url, encoder=rapt["encoder"]) as client:
            same = client.classify("a great and moving film", model="sst2", seed=0)
    assert card["encoder_id"] == BASE_ENCODER_DIR and result.examples == same.examples
    assert result.labels == same.labels and result.examples[0]["plain"] is not None
    manifest = Manifest.from_bytes(httpx.get(f"{rapt['url']}/v1/models/sst2/bundle", headers=_auth(rapt)).content)
    assert manifest.get("plain_tokens.json").sha256 == card["plain_tokens"]["sha256"]
    assert manifest.get("encoder/model.safetensors").sha256 == card["encoder_sha256"]
    lines = _lines(proxy, rapt["key"])
    assert lines.count("GET /v1/models/sst2/bundle HTTP/1.1") == 2  # one per cache
    assert not any(line.startswith("GET /v1/models/sst2/plain_tokens") for line in lines)
    with httpx.Client(base_url=rapt["url"], headers=_auth(rapt)) as http:  # the old route: the bundle's bytes
        assert http.get("/v1/models/sst2/plain_tokens").content == (rapt["run"] / "plain_tokens.json").read_bytes()
