"""RAPT as a service: a RAPT run served at /v1/classify (detected from its files), its card (names and hashes only)
and public plain tokens, the client that privatizes here and sends only the privatized text (a recording proxy sees
every byte), bad input, damaged plain tokens, and ``textfree ask --system rapt``."""

import hashlib
import json
import shutil
import subprocess
import sys
import threading
import tomllib
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import textfree.rapt.service  # noqa: F401  (registers "rapt")
from textfree.cli import app as cli_app
from textfree.client import Client, ClientError, ModelMismatchError
from textfree.data.tasks import TaskData
from textfree.encoders.loading import load_hf_encoder
from textfree.rapt.model import encode_examples, load_classifier
from textfree.rapt.train import RaptTrainConfig, build_mechanism, train_rapt
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.models import ModelRegistry
from textfree.server.public_files import Bundle, PublicFile
from textfree.server.registry import get_system
from textfree.server.testing import RecordingProxy, http_requests, json_leaves, leaked_words, serve_in_thread
from textfree.substitution.examples import privatize_examples
from textfree.substitution.plain import PLAIN_FILE, PlainTokens

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

ROOT = Path(__file__).resolve().parents[1]
POS = ["a great and moving film", "she loved the warm ending", "what a wonderful cast", "funny and smart"] * 3
NEG = ["a dull and boring film", "he hated the slow ending", "what a terrible cast", "flat and stupid"] * 3
ETA = 50.0
#: every word in the table and at least 5 letters: with pos 'all' each one goes through the mechanism
SECRET = "doctor quietly prescribed strong medicine yesterday morning"
LIMITS = {"max_classify_examples": 4, "max_classify_words": 40}


@pytest.fixture(scope="module")
def rapt(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("rapt-service")
    texts = [(t,) for t in POS + NEG]
    labels = [1] * len(POS) + [0] * len(NEG)
    data = TaskData("sst2", texts, labels, texts[::6], labels[::6], "train", "dev")
    run = tmp / "srv" / "models" / "tenant-a" / "2024" / "rapt-sst2"  # a deep server path the card must not show
    cfg = RaptTrainConfig(out=str(run), encoder=str(tiny_encoder_dir), eta=ETA, plain_length=4, plain_sequences=2,
                          rec_vocab_size=50, epochs=1, batch_size=8, max_length=48, progress=False)  # fmt: skip
    train_rapt(cfg, data=data)
    key = KeyStore(tmp / "keys.json").add_key("alice")
    config = ServerConfig(
        models={"sst2": str(run)},
        embed_models={"emb": str(tiny_encoder_dir)},
        keys_path=str(tmp / "keys.json"),
        **LIMITS,
    )
    app = create_app(config)  # no --system: the run is recognised as RAPT's from its files
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "app": app, "run": run, "encoder": tiny_encoder_dir, "tmp": tmp}


def _auth(rapt) -> dict:
    return {"Authorization": f"Bearer {rapt['key']}"}


def _client(rapt, cache_dir, url=None, **kwargs) -> Client:
    return Client(url or rapt["url"], api_key=rapt["key"], encoder=rapt["encoder"], cache_dir=cache_dir, **kwargs)


def _proxy(rapt) -> RecordingProxy:
    target = urlparse(rapt["url"])
    return RecordingProxy(target.hostname, target.port)


def _example(**over) -> dict:
    return {"parts": ["a good film"], "plain": ["w", "x", "y", "z"], "sequence": 0} | over


# ---------------------------------------------------------------------------------------------------------- server
def test_the_run_is_detected_and_its_card_carries_names_and_hashes_only(rapt, tmp_path):
    run = rapt["run"]
    assert rapt["app"].state.registry.systems["sst2"] is get_system("rapt")
    with _client(rapt, tmp_path) as client:
        card = client.model_card("sst2")
        listing = client._request("GET", "/v1/models")
    plain = (run / PLAIN_FILE).read_bytes()
    adapter = (run / "adapter" / "adapter_model.safetensors").read_bytes()
    assert card["task"] == "classify" and card["route"] == "/v1/classify" and card["system"] == "rapt"
    assert card["encoder_id"] == Path(rapt["encoder"]).name  # the encoder's name, not the server's path
    assert card["encoder_sha256"] == load_hf_encoder(str(rapt["encoder"]))[3]
    head = (run / "task_head.safetensors").read_bytes()
    assert card["weights"] == {
        "kind": "adapter",
        "sha256": hashlib.sha256(adapter).hexdigest(),
        "task_head_sha256": hashlib.sha256(head).hexdigest(),
    }
    assert card["plain_tokens"] == {
        "sha256": hashlib.sha256(plain).hexdigest(),
        "bytes": len(plain),
        "length": 4,
        "sequences": 2,
        "url": "/v1/models/sst2/plain_tokens",
    }
    assert card["mechanism"] == "pct2t" and card["eta"] == ETA
    assert card["pos_categories"] == ["NOUN", "VERB", "PRON", "ADP"]
    assert card["num_labels"] == 2 and card["sentences"] == 1 and card["epsilon_per_word"] > 0
    assert not {"k", "encoder_kind", "max_slots"} & set(card)  # payload fields belong to payload routes
    assert {c["id"]: c for c in listing["data"]}["sst2"] == card
    assert listing["limits"]["max_classify_examples"] == 4 and listing["limits"]["max_classify_words"] == 40
    base = str(rapt["tmp"].parent)
    for where, value in json_leaves(card):
        text = str(value)
        assert base not in text and "/srv/models" not in text, (where, text)
        if where.endswith((".route", ".url")):
            assert text.startswith("/v1/"), (where, text)
            continue
        assert not (isinstance(value, str) and (text.startswith(("/", "~", "\\")) or text[1:3] == ":\\")), (where, text)


def test_the_plain_tokens_are_served_with_their_sha256(rapt):
    data = (rapt["run"] / PLAIN_FILE).read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    with httpx.Client(base_url=rapt["url"]) as http:
        r = http.get("/v1/models/sst2/plain_tokens", headers=_auth(rapt))
        assert r.status_code == 200 and r.content == data and r.headers["etag"] == f'"{sha}"'
        assert r.headers["content-type"].startswith("application/json")
        again = http.get("/v1/models/sst2/plain_tokens", headers={**_auth(rapt), "If-None-Match": f'"{sha}"'})
        assert again.status_code == 304 and again.content == b""
        none = http.get("/v1/models/emb/plain_tokens", headers=_auth(rapt))
        assert none.status_code == 404 and none.json()["error"]["type"] == "plain_tokens_not_found"
        unknown = http.get("/v1/models/nope/plain_tokens", headers=_auth(rapt))
        assert unknown.status_code == 404 and unknown.json()["error"]["type"] == "model_not_found"
        assert http.get("/v1/models/sst2/plain_tokens").status_code == 401


def test_bad_requests_get_clear_4xx_errors(rapt):
    def post(body=None, *, model="sst2", content=None, headers=None):
        return http.post(
            "/v1/classify",
            json=None if body is None else {"model": model, "examples": body},
            content=content,
            headers={**_auth(rapt), **(headers or {})},
        )

    with httpx.Client(base_url=rapt["url"]) as http:
        assert post([_example()]).status_code == 200
        cases = [
            (post([_example()], model="nope"), 404, "model_not_found", "no model 'nope'"),
            (post([_example()], model="emb"), 404, "model_not_found", "serves /v1/embed"),
            (post([_example()] * 5), 413, "too_many_rows", "at most 4 per request"),
            (post([_example(parts=[" ".join(["word"] * 37)])]), 422, "invalid_request", "41 words"),
            (post([_example(parts=[])]), 422, "invalid_request", "examples.0.parts"),
            (post([_example(parts=["a", "b"])]), 422, "invalid_request", "2 sentence(s); model 'sst2' takes 1"),
            (post([_example(parts=["a", "b", "c"])]), 422, "invalid_request", "examples.0.parts"),
            (post([_example(parts=["  "])]), 422, "invalid_request", "empty sentence"),
            (post([_example(plain=["w", "x"])]), 422, "invalid_request", "2 plain tokens; model 'sst2' takes 4"),
            (post([_example(plain=["w", "x y", "y", "z"])]), 422, "invalid_request", "one non-empty word"),
            (post([_example(plain=None, sequence=None)]), 422, "invalid_request", "needs its privatized plain"),
            (post([_example(sequence=2)]), 422, "invalid_request", "sequence 2 is not one of"),
            (post([_example(sequence=-1)]), 422, "invalid_request", "examples.0.sequence"),
            (post([_example(label=1)]), 422, "invalid_request", "label"),
            (post([]), 422, "invalid_request", "examples"),
            (post(content=b"{not json", headers={"Content-Type": "application/json"}), 400, "invalid_json", "JSON"),
            (
                post(content=b"\0" * 8, headers={"Content-Type": "application/octet-stream"}),
                415,
                None,
                "application/json",
            ),
        ]
        for r, status, kind, words in cases:
            assert r.status_code == status, (words, r.text)
            error = r.json()["error"]
            assert (kind is None or error["type"] == kind) and words in error["message"], (words, error)
        # a classify model is not a payload model, and a request without a key is refused
        gen = http.post(
            "/v1/generate?model=sst2", content=b"x", headers={**_auth(rapt), "Content-Type": "application/octet-stream"}
        )
        assert gen.status_code == 404 and "serves /v1/classify" in gen.json()["error"]["message"]
        assert http.post("/v1/classify", json={"model": "sst2", "examples": [_example()]}).status_code == 401
        assert http.get("/health").json()["status"] == "ok"


def test_the_openapi_schema_declares_the_route_and_its_body_whole(rapt):
    spec = httpx.get(f"{rapt['url']}/openapi.json").json()
    assert "#/$defs/" not in json.dumps(spec)  # every $ref resolves inside the document
    post = spec["paths"]["/v1/classify"]["post"]
    body = post["requestBody"]["content"]["application/json"]["schema"]
    assert set(body["properties"]["examples"]["items"]["properties"]) == {"parts", "plain", "sequence"}
    assert post["responses"]["200"]["content"]["application/json"]["schema"]["$ref"].endswith("/ClassifyResponse")
    assert {"401", "404", "413", "415", "422"} <= set(post["responses"])
    assert "/v1/models/{model_id}/plain_tokens" in spec["paths"]


def test_concurrent_requests_share_a_model_call_and_get_their_own_answers(rapt):
    registry = rapt["app"].state.registry
    config = ServerConfig(models=dict(rapt["app"].state.config.models), auth=False, batch_wait_ms=400)
    from fastapi.testclient import TestClient

    bodies = [[_example(parts=["a great film"]), _example(parts=["a dull film"], sequence=1)], [_example()]]
    with TestClient(create_app(config, registry=ModelRegistry({"sst2": registry.models["sst2"]}))) as c:
        alone = [c.post("/v1/classify", json={"model": "sst2", "examples": b}).json() for b in bodies]
        out = [None, None]

        def send(i):
            out[i] = c.post("/v1/classify", json={"model": "sst2", "examples": bodies[i]}).json()

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    for got, want in zip(out, alone):
        assert got["labels"] == want["labels"]
        assert torch.allclose(torch.tensor(got["probabilities"]), torch.tensor(want["probabilities"]), atol=1e-5)
    assert {o["usage"]["batch_requests"] for o in out} == {2} and out[0]["usage"]["batch_rows"] == 3


def test_a_damaged_or_missing_plain_token_file_is_refused_at_startup(rapt, tmp_path):
    run = Path(shutil.copytree(rapt["run"], tmp_path / "copy", ignore=shutil.ignore_patterns("checkpoints")))
    (run / PLAIN_FILE).write_text('{"format": "textfree-rapt-plain-tokens", "sequences": [["a"]]')
    with pytest.raises(ValueError, match=r"model 'm'.*plain tokens .* are damaged"):
        ModelRegistry.load(ServerConfig(models={"m": str(run)}, auth=False))
    (run / PLAIN_FILE).unlink()
    with pytest.raises(ValueError, match="trained with 4 plain tokens but has no plain_tokens.json"):
        ModelRegistry.load(ServerConfig(models={"m": str(run)}, auth=False))


def test_an_unknown_system_is_a_clear_error(rapt):
    with pytest.raises(ValueError, match=r"model 'm'.*no served system 'nope' is registered \(registered: .*rapt"):
        ModelRegistry.load(ServerConfig(models={"m": str(rapt["run"])}, systems={"m": "nope"}, auth=False))
    result = CliRunner().invoke(cli_app, ["serve", "--no-auth", "--model", f"m={rapt['run']}", "--system", "m=nope"])
    assert result.exit_code == 2 and "no served system 'nope'" in result.output
    result = CliRunner().invoke(cli_app, ["ask", "hi", "--model", "sst2", "--system", "nope"])
    assert result.exit_code == 2 and "--system must be one of ppft, rapt" in result.output


def test_serve_detects_the_run_and_the_entry_point_is_declared(rapt):
    from textfree.cli_service import _server_app

    _, app = _server_app(Path("keys.json"), True, model=[f"x={rapt['run']}"], embed_model=None, system=None,
                         fields={"host": "127.0.0.1"})  # fmt: skip
    assert app.state.registry.systems["x"].name == "rapt" and app.state.registry.card("x")["task"] == "classify"
    points = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["textfree.systems"]
    assert points["rapt"] == "textfree.rapt.service" and get_system("rapt").task == "classify"
    # what the registry does with that entry point, in a fresh interpreter: loading it registers "rapt", cheaply
    code = (
        "import sys\n"
        "from importlib.metadata import EntryPoint\n"
        "from textfree.server.registry import get_system\n"
        f"EntryPoint('rapt', {points['rapt']!r}, 'textfree.systems').load()\n"
        "heavy = ('transformers', 'peft', 'textfree.rapt.model')\n"
        "print(get_system('rapt').task, any(m in sys.modules for m in heavy))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["classify", "False"]


# ---------------------------------------------------------------------------------------------------------- client
def test_classify_equals_the_local_classifier_on_the_same_privatized_examples(rapt, tmp_path):
    texts = ["a wonderful and moving film", "he hated the boring ending", "what a cast"]
    with _client(rapt, tmp_path) as client:
        result = client.classify(texts, model="sst2", seed=3)
    assert result.eta == ETA and result.pos_categories == ["NOUN", "VERB", "PRON", "ADP"]
    assert len(result.labels) == 3 and all(len(p) == 2 for p in result.probabilities)
    # the client privatizes exactly as the library's RAPT client does (same generator, same plain tokens)
    mechanism = build_mechanism(str(rapt["encoder"]), ETA, "default")
    plain = PlainTokens.load(rapt["run"])
    local = privatize_examples(
        [(t,) for t in texts], [0] * 3, mechanism, plain, generator=torch.Generator().manual_seed(3)
    )
    assert result.examples == [{"parts": list(e.parts), "plain": list(e.plain), "sequence": e.sequence} for e in local]
    assert result.words_privatized == [e.words_privatized for e in local] and max(result.words_privatized) > 0
    assert result.privacy.epsilon == pytest.approx(mechanism.privacy_loss(max(result.words_privatized)).epsilon)
    # the served model answers as the run's classifier does, loaded here (load_classifier: no head)
    classifier, tokenizer, plain_loaded, config = load_classifier(rapt["run"])
    assert classifier.head is None
    batch = encode_examples(tokenizer, local, plain_loaded, max_length=config["max_length"])
    with torch.no_grad():
        probs = torch.softmax(classifier(batch)["logits"], dim=-1)
    assert result.labels == classifier.predict(batch).tolist()
    assert torch.allclose(torch.tensor(result.probabilities), probs, atol=1e-5)


def test_only_the_privatized_text_crosses_the_wire(rapt, tmp_path):
    with _proxy(rapt) as proxy:
        with _client(rapt, tmp_path, url=proxy.url) as client:
            result = client.classify(SECRET, model="sst2", pos="all", seed=0)
    sent = proxy.sent.replace(rapt["key"].encode(), b"")
    requests = http_requests(sent)
    assert [line for line, _ in requests] == [
        "GET /v1/models/sst2 HTTP/1.1",
        "GET /v1/models/sst2/bundle HTTP/1.1",  # the client bundle: its manifest, then the plain tokens
        f"GET /v1/models/sst2/bundle/{PLAIN_FILE} HTTP/1.1",
        "POST /v1/classify HTTP/1.1",
    ]
    body = requests[3][1]
    assert json.loads(body) == {"model": "sst2", "examples": result.examples} and len(body) == result.bytes_sent
    released = result.examples[0]["parts"][0]
    assert result.words_privatized == [len(SECRET.split())]  # pos 'all': every word went through the mechanism
    replaced = [w for w in SECRET.split() if w not in released.split()]
    assert len(replaced) >= 4, released  # most words were replaced: the check below means something
    tokenizer = load_hf_encoder(str(rapt["encoder"]))[0]
    allowed = " ".join([released, *result.examples[0]["plain"]])
    assert leaked_words(sent, SECRET, tokenizer, allowed=allowed) == []
    assert leaked_words(sent, released, tokenizer) != []  # the recorder sees what is sent


def test_plain_tokens_are_downloaded_once_and_a_damaged_copy_is_never_used(rapt, tmp_path):
    with _proxy(rapt) as proxy:
        for _ in range(2):  # two clients, one cache: one download
            with _client(rapt, tmp_path, url=proxy.url) as client:
                client.classify("a fine film", model="sst2", seed=0)
                bundle = client.model_card("sst2")["client_bundle"]["sha256"]
    assert proxy.sent.count(f"GET /v1/models/sst2/bundle/{PLAIN_FILE} ".encode()) == 1
    assert [p.name for p in tmp_path.iterdir()] == [bundle]  # the client bundle's directory
    cached = tmp_path / bundle / PLAIN_FILE
    data = cached.read_bytes()
    cached.write_bytes(data.replace(b'"', b"'", 1)[: len(data)])
    with _proxy(rapt) as proxy:
        with _client(rapt, tmp_path, url=proxy.url) as client:
            with pytest.raises(ClientError, match="is damaged .*removed from the cache and not used"):
                client.classify("a fine film", model="sst2", seed=0)
    assert not cached.exists() and b"POST /v1/classify" not in proxy.sent
    with _client(rapt, tmp_path) as client:  # the next call downloads a fresh copy
        assert len(client.classify("a fine film", model="sst2", seed=0).labels) == 1
    assert cached.read_bytes() == data


def test_a_server_sending_other_plain_tokens_than_the_card_names_is_refused(rapt, tmp_path):
    registry = rapt["app"].state.registry
    bundle = registry.bundles["sst2"]
    real = bundle.files[PLAIN_FILE]
    other = json.loads(real.data)
    other["sequences"] = other["sequences"][::-1]
    forged = PublicFile.of(json.dumps(other).encode()[: real.size])  # the card and the manifest name the real one
    registry.bundles["sst2"] = Bundle({PLAIN_FILE: forged}, bundle.manifest, bundle.manifest_file)
    try:
        with _proxy(rapt) as proxy:
            with _client(rapt, tmp_path, url=proxy.url) as client:
                with pytest.raises(ClientError, match="is refused: .*not the manifest's .*nothing cached"):
                    client.classify("a fine film", model="sst2", seed=0)
    finally:
        registry.bundles["sst2"] = bundle
    assert list(tmp_path.iterdir()) == [] and b"POST /v1/classify" not in proxy.sent


def test_client_refusals_before_anything_is_sent(rapt, tmp_path, monkeypatch, tmp_path_factory):
    from textfree.encoders import make_tiny_encoder_dir

    with _client(rapt, tmp_path) as client:
        sent = []
        real = client._request
        monkeypatch.setattr(
            client, "_request", lambda method, path, **kw: (sent.append(path), real(method, path, **kw))[1]
        )
        with pytest.raises(ValueError, match="privatizes fewer words.*NOUN, PRON, VERB"):
            client.classify("a fine film", model="sst2", pos="adp")
        with pytest.raises(ValueError, match="unknown categories"):
            client.classify("a fine film", model="sst2", pos="noun,verb,pron,adp,bogus")
        with pytest.raises(ValueError, match="takes one non-empty text per example"):
            client.classify([("a", "b")], model="sst2")
        with pytest.raises(ValueError, match="eta must be"):
            client.classify("a fine film", model="sst2", eta=-1.0)
        with pytest.raises(ModelMismatchError, match=r"use classify\(\)"):
            client.generate("a fine film", model="sst2")
        with pytest.raises(ModelMismatchError, match="serves 'embed', not classify"):
            client.classify("a fine film", model="emb")
        assert "/v1/classify" not in sent
    with _client(rapt, tmp_path, max_epsilon=10.0) as capped:
        with pytest.raises(ClientError, match=r"eta 50 \(the model card's\) is above this client's max_epsilon 10"):
            capped.classify("a fine film", model="sst2")
    other = make_tiny_encoder_dir(tmp_path_factory.mktemp("other-encoder"), hidden=32, layers=1, heads=2, seed=1)
    with Client(rapt["url"], api_key=rapt["key"], encoder=other, cache_dir=tmp_path) as client:
        with pytest.raises(ModelMismatchError, match="is not the one model 'sst2' was trained with"):
            client.classify("a fine film", model="sst2")


# ---------------------------------------------------------------------------------------------------------- CLI
def _ask(rapt, tmp_path, *extra, text="a wonderful film"):
    args = ["ask", "--system", "rapt", text, "--url", rapt["url"], "--model", "sst2", "--encoder", str(rapt["encoder"])]
    return CliRunner().invoke(
        cli_app, [*args, "--cache-dir", str(tmp_path), *extra], env={"TEXTFREE_API_KEY": rapt["key"]}
    )


def test_ask_cli_classifies_privatized_text(rapt, tmp_path):
    result = _ask(rapt, tmp_path, "--eta", "62.7", "--seed", "5")
    assert result.exit_code == 0, result.output
    with _client(rapt, tmp_path) as client:
        direct = client.classify("a wonderful film", model="sst2", eta=62.7, seed=5)
    assert result.stdout.strip() == str(direct.labels[0])
    assert "privacy:" in result.stderr and "at eta 62.7" in result.stderr
    assert f"sent: {direct.examples[0]['parts'][0]}" in result.stderr
    for extra, words in (
        (["--epsilon", "5"], "--epsilon is not for --system rapt (it takes --eta)"),
        (["--public", "x"], "--public is not for --system rapt"),
        (["--eta", "-1"], "--eta must be a number > 0"),
        (["--pos", "noun"], "--pos: pos 'noun' privatizes fewer words"),
        (["--pair", "a second sentence"], "takes one non-empty text per example"),
    ):
        bad = _ask(rapt, tmp_path, *extra)
        assert bad.exit_code in (1, 2) and words in bad.output, (extra, bad.output)
    ppft = CliRunner().invoke(cli_app, ["ask", "hi", "--model", "sst2", "--eta", "5"])
    assert ppft.exit_code == 2 and "--eta is for --system rapt (ppft takes --epsilon)" in ppft.output


_TEXT = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30) | st.sampled_from(
    ["\ud800", "a\udfffb", "", "   ", "x y"]
)
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False) | _TEXT,
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(["parts", "plain", "sequence", "x"]), inner, max_size=3)
    ),
    max_leaves=8,
)
_EXAMPLE = st.fixed_dictionaries(
    {
        "parts": st.lists(_TEXT, min_size=0, max_size=3),
        "plain": st.none() | st.lists(_TEXT, max_size=5),
        "sequence": st.none() | st.integers(-2, 3),
    }
)


@settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(examples=st.lists(_EXAMPLE | _JSON, min_size=0, max_size=6), model=st.sampled_from(["sst2", "emb", "nope"]))
def test_random_classify_requests_get_4xx_or_answers_never_5xx(rapt, examples, model):
    """Random examples (right and wrong shapes, lone surrogates, empty text, too many) are answered 200 or 4xx."""
    body = json.dumps({"model": model, "examples": examples}).encode()
    with httpx.Client(base_url=rapt["url"]) as http:
        r = http.post("/v1/classify", content=body, headers={**_auth(rapt), "Content-Type": "application/json"})
    assert r.status_code == 200 or 400 <= r.status_code < 500, (examples, r.text)
    if r.status_code == 200:
        assert len(r.json()["labels"]) == len(examples)
    else:
        assert set(r.json()["error"]) == {"type", "message"}
