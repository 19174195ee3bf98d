"""textfree.client.Client and `textfree ask` against a real server on loopback: model cards, local privatization,
refusal of a mismatched encoder, retries, and NO TEXT ON THE WIRE (a recording TCP proxy sees every byte sent)."""

import os
import re
import socket
from urllib.parse import urlparse

import httpx
import pytest
from typer.testing import CliRunner

from textfree.cli import app as cli_app
from textfree.client import Client, ClientError, ModelMismatchError, ServerError
from textfree.encoders import ContextualEncoder, make_tiny_encoder_dir
from textfree.ppft.model import TextFreeLM
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.testing import RecordingProxy, leaked_words, serve_in_thread

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PROMPT = "Bartholomew smuggled saffron through Reykjavik harbour disguised as a lighthouse keeper"
PUBLIC = "Options: A. Quokka B. Narwhal"


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("client")
    run = make_tiny_run(tmp, tiny_encoder_dir)
    key = KeyStore(tmp / "keys.json").add_key("alice")
    config = ServerConfig(
        models={"tiny": str(run)}, embed_models={"emb": str(tiny_encoder_dir)}, keys_path=str(tmp / "keys.json")
    )
    app = create_app(config)
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "run": run, "app": app, "encoder": tiny_encoder_dir}


def test_models_cards_and_generate_over_http(server):
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        assert client.health()["status"] == "ok"
        ids = {card["id"] for card in client.models()}
        assert ids == {"tiny", "emb"}
        card = client.model_card("tiny")
        result = client.generate(
            ["first private prompt", "second"], public=["Options: A. x", ""], model="tiny", seed=3, max_new_tokens=2
        )
    # the same payload, made here, answered by the same server part
    lm = TextFreeLM.load(server["run"])
    payload = lm.privatizer(card["epsilon"], k=card["k"]).privatize(
        ["first private prompt", "second"], public=["Options: A. x", ""], seed=3
    )
    assert result.answers == server["app"].state.registry.models["tiny"].server.answer(payload, max_new_tokens=2)
    assert (
        result.model == "tiny" and result.usage["rows"] == 2 and result.payload_bytes == result.usage["payload_bytes"]
    )
    assert result.privacy.epsilon == payload.worst_case_loss().epsilon > 0


def test_max_epsilon_refuses_a_weak_release_before_anything_is_sent(server, monkeypatch):
    """Without an explicit epsilon the card picks it; a client cap refuses a card eps above it, a clean payload, and an
    explicit eps above it, with nothing sent; an eps at or below the cap is released."""
    sent = []
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as probe:
        card_eps = probe.model_card("tiny")["epsilon"]
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"], max_epsilon=card_eps / 2) as client:
        real = client._request
        monkeypatch.setattr(
            client, "_request", lambda method, path, **kw: (sent.append(path), real(method, path, **kw))[1]
        )
        for kwargs, words in (
            ({}, "(the model card's)"),
            ({"no_noise": True}, "a clean payload"),
            ({"epsilon": card_eps}, f"epsilon {card_eps:g} is"),
        ):
            with pytest.raises(ClientError, match=f"refused: .*{re.escape(words)}.*nothing was sent"):
                client.generate("private words", model="tiny", seed=0, max_new_tokens=1, **kwargs)
        assert "/v1/generate" not in sent
        ok = client.generate("private words", model="tiny", epsilon=card_eps / 2, seed=0, max_new_tokens=1)
        assert sent[-1] == "/v1/generate" and len(ok.answers) == 1
    monkeypatch.setenv("TEXTFREE_MAX_EPSILON", "1.5")
    assert Client(server["url"]).max_epsilon == 1.5  # the environment's cap by default
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="max_epsilon must be a number > 0"):
            Client(server["url"], max_epsilon=bad)


def test_embed_over_http(server):
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        out = client.embed(["some private words", "more"], model="emb", epsilon=50.0, seed=0)
    assert len(out.embeddings) == 2 and len(out.embeddings[0]) == 32 and out.usage["rows"] == 2


def test_client_refuses_a_card_that_does_not_match_its_encoder(server, tmp_path):
    other = make_tiny_encoder_dir(tmp_path / "other", hidden=32, layers=2, heads=2, seed=1)
    assert (
        ContextualEncoder.from_pretrained(other).sha256 != ContextualEncoder.from_pretrained(server["encoder"]).sha256
    )
    with Client(server["url"], api_key=server["key"], encoder=other) as client:
        with pytest.raises(ModelMismatchError, match="sha256"):
            client.generate("anything private", model="tiny")
    wide = make_tiny_encoder_dir(tmp_path / "wide", hidden=48, layers=1, heads=2, seed=0)
    with Client(server["url"], api_key=server["key"], encoder=wide) as client:
        with pytest.raises(ModelMismatchError, match="width 48"):
            client.generate("anything private", model="tiny")
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        with pytest.raises(ModelMismatchError, match="k=8"):
            client.generate("anything private", model="tiny", k=8)
        client._cards["tiny"] = {**client.model_card("tiny"), "epsilon": None}
        with pytest.raises(ModelMismatchError, match="without noise"):
            client.generate("anything private", model="tiny")
        with pytest.raises(ServerError) as info:
            client.model_card("nope")
        assert info.value.status == 404 and info.value.type == "model_not_found"
    with Client(server["url"], api_key="tf_000000000000." + "A" * 43, encoder=server["encoder"], retries=0) as client:
        with pytest.raises(ServerError, match="401"):
            client.models()


def _mock(statuses, calls):
    def handler(request):
        calls.append(request)
        status = statuses[min(len(calls), len(statuses)) - 1]
        if status == "drop":
            raise httpx.ConnectError("connection refused", request=request)
        headers = {"Retry-After": "0"} if status == 429 else {}
        body = {"object": "list", "data": []} if status == 200 else {"error": {"type": "x", "message": "y"}}
        return httpx.Response(status, json=body, headers=headers)

    return httpx.Client(transport=httpx.MockTransport(handler))


def test_retries_with_backoff_on_5xx_429_and_connection_errors():
    calls = []
    with Client("http://svc", http_client=_mock(["drop", 503, 429, 200], calls), retries=3, backoff=0.0) as c:
        assert c.models() == []
    assert len(calls) == 4
    calls = []
    with Client("http://svc", http_client=_mock([400, 200], calls), retries=3, backoff=0.0) as c:
        with pytest.raises(ServerError, match="400"):
            c.models()
    assert len(calls) == 1  # a 4xx is not retried
    calls = []
    with Client("http://svc", http_client=_mock(["drop"], calls), retries=2, backoff=0.0) as c:
        with pytest.raises(ClientError, match="ConnectError"):
            c.models()
    assert len(calls) == 3


def test_a_misbehaving_server_gives_client_errors_not_tracebacks():
    """A 2xx reply that is JSON but not an object, and a Retry-After that str.isdigit() accepts but float() does not."""

    def replying(status, body, headers=None):
        return httpx.Client(
            transport=httpx.MockTransport(lambda request: httpx.Response(status, json=body, headers=headers or {}))
        )

    for body in ([1, 2], "text", 3):
        with Client("http://svc", http_client=replying(200, body), retries=0) as c:
            with pytest.raises(ClientError, match="not a JSON object"):
                c.models()
    with Client(
        "http://svc",
        http_client=replying(
            429, {"error": {"type": "rate_limited", "message": "slow"}}, {"Retry-After": b"\xb2"}
        ),  # latin-1 "²"
        retries=1,
        backoff=0.0,
    ) as c:
        with pytest.raises(ServerError, match="429"):
            c.models()


def test_a_malformed_card_or_reply_is_a_client_error_naming_what_is_wrong(server):
    """A card missing a field the client privatizes from (or with a wrong type), a model listing without cards, and a
    generate or embed reply without one answer per row: each a ClientError, never a KeyError or a misread setting."""
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as real:
        good = {"tiny": real.model_card("tiny"), "emb": real.model_card("emb")}

    def fake(card_edit=None, reply=None, listing=None):
        def handler(request):
            path = request.url.path
            if path == "/v1/models":
                return httpx.Response(200, json=listing)
            if path.startswith("/v1/models/"):
                name = path.rsplit("/", 1)[1]
                return httpx.Response(200, json={**good[name], **(card_edit or {})})
            return httpx.Response(200, json=reply)

        return Client(
            "http://svc",
            http_client=httpx.Client(transport=httpx.MockTransport(handler)),
            retries=0,
            encoder=server["encoder"],
        )

    ok = {"model": "tiny", "answers": ["a", "b"]}
    for edit, words in (
        ({"k": None}, "'k' is None"),
        ({"k": True}, "'k' is True"),
        ({"k": 0}, "'k' must be"),
        ({"max_slots": "64"}, "'max_slots'"),
        ({"encoder_dim": 3.5}, "'encoder_dim'"),
        ({"epsilon": -5.0}, "'epsilon' must be"),
        ({"fixed_slots": "yes"}, "'fixed_slots'"),
    ):
        with fake(edit, ok) as c, pytest.raises(ClientError, match=re.escape(words)):
            c.generate(["one", "two"], model="tiny", seed=0)
    bare = {k: v for k, v in good["tiny"].items() if k != "encoder_dim"}  # a required field missing
    with fake(None, ok) as c:
        c._cards["tiny"] = bare
        with pytest.raises(ClientError, match="no 'encoder_dim'"):
            c.generate("one", model="tiny", seed=0)
    with fake(None, ok) as c:
        assert c.generate(["one", "two"], model="tiny", seed=0).answers == ["a", "b"]  # the fake itself works
    for reply in (
        {"model": "tiny"},
        {"model": "tiny", "answers": ["only one"]},
        {"model": "tiny", "answers": [1, 2]},
        {"answers": ["a", "b"]},
        {"model": "tiny", "answers": "ab"},
    ):
        with fake(None, reply) as c, pytest.raises(ClientError, match="list of 2 str 'answers'"):
            c.generate(["one", "two"], model="tiny", seed=0)
    with (
        fake(None, {"model": "emb", "embeddings": [[0.0]]}) as c,
        pytest.raises(ClientError, match="list of 2 list 'embeddings'"),
    ):
        c.embed(["one", "two"], model="emb", epsilon=50.0, seed=0)
    with fake(None, {"model": "emb", "embeddings": [[0.0], [1.0]]}) as c:
        assert c.embed(["one", "two"], model="emb", epsilon=50.0, seed=0).embeddings == [[0.0], [1.0]]
    with fake({"clip_norm": -1.0}, None) as c, pytest.raises(ClientError, match="'clip_norm' must be"):
        c.embed("one", model="emb", epsilon=50.0, seed=0)
    for listing in ({"object": "list"}, {"data": [{"task": "generate"}]}, {"data": "tiny"}):
        with fake(listing=listing) as c, pytest.raises(ClientError, match="no list of model cards"):
            c.models()


def test_a_key_store_that_is_not_utf8_is_a_key_store_error(tmp_path):
    from textfree.server.auth import KeyStore, KeyStoreError

    path = tmp_path / "keys.json"
    path.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(KeyStoreError, match="cannot read the keys file"):
        KeyStore(path).add_key("alice")


# ---------------------------------------------------------------------------------------------- no text on the wire
def _proxy_for(server):
    target = urlparse(server["url"])
    return RecordingProxy(target.hostname, target.port)


def test_no_text_on_the_wire_client(server):
    tokenizer = ContextualEncoder.from_pretrained(server["encoder"]).tokenizer
    with _proxy_for(server) as proxy:
        with Client(proxy.url, api_key=server["key"], encoder=server["encoder"]) as client:
            result = client.generate(PROMPT, public=PUBLIC, model="tiny", seed=0, max_new_tokens=2)
    assert len(result.answers) == 1 and proxy.connections >= 1
    sent = proxy.sent.replace(server["key"].encode(), b"")  # the random API key is not prompt text
    assert b"POST /v1/generate" in sent and len(sent) > result.payload_bytes
    assert leaked_words(sent, PROMPT, tokenizer) == []
    # the recorder works: the public text, sent in clear by design, is in the bytes
    assert b"quokka" in sent.lower() and b"narwhal" in sent.lower()
    assert leaked_words(sent, PUBLIC, tokenizer)  # the same check flags text that is sent


def test_no_text_on_the_wire_ask_cli(server):
    tokenizer = ContextualEncoder.from_pretrained(server["encoder"]).tokenizer
    with _proxy_for(server) as proxy:
        result = CliRunner().invoke(
            cli_app,
            [
                "ask",
                PROMPT,
                "--url",
                proxy.url,
                "--model",
                "tiny",
                "--public",
                PUBLIC,
                "--encoder",
                str(server["encoder"]),
                "--seed",
                "0",
                "--max-new-tokens",
                "2",
            ],
            env={"TEXTFREE_API_KEY": server["key"]},
        )
    assert result.exit_code == 0, result.output
    assert "privacy: worst-case loss" in result.stderr
    sent = proxy.sent.replace(server["key"].encode(), b"")
    assert b"POST /v1/generate" in sent
    assert leaked_words(sent, PROMPT, tokenizer) == []
    assert b"quokka" in sent.lower()


def test_ask_cli_reports_server_errors(server):
    result = CliRunner().invoke(
        cli_app,
        [
            "ask",
            "private words",
            "--url",
            server["url"],
            "--model",
            "nope",
            "--api-key",
            server["key"],
            "--encoder",
            str(server["encoder"]),
            "--retries",
            "0",
        ],
    )
    assert result.exit_code == 1 and "model_not_found" in result.stderr


def test_real_server_survives_garbage(server):
    url, auth = server["url"], {"Authorization": f"Bearer {server['key']}"}
    target = urlparse(url)
    for raw in (
        b"GARBAGE\r\n\r\n",
        b"POST /v1/generate HTTP/1.1\r\nContent-Length: 99999999999\r\n\r\nxx",
        os.urandom(512),
    ):
        with socket.create_connection((target.hostname, target.port), timeout=1) as sock:
            sock.sendall(raw)
            try:
                sock.recv(4096)
            except OSError:
                pass
    octet = {**auth, "Content-Type": "application/octet-stream"}
    codes = [
        httpx.post(f"{url}/v1/generate", params={"model": "tiny"}, content=os.urandom(3000), headers=octet).status_code,
        httpx.post(
            f"{url}/v1/generate", params={"model": "tiny"}, content=b"\x10" + b"\x00" * 7 + b"{}", headers=octet
        ).status_code,
        httpx.post(f"{url}/v1/generate", json={"model": "tiny", "payload_b64": "AAAA"}, headers=auth).status_code,
    ]
    assert codes == [400, 400, 400]
    assert httpx.get(f"{url}/health").json()["status"] == "ok"


def test_ask_cli_samples_reproducibly_and_checks_the_sampling_flags(server):
    args = [
        "ask",
        "private words",
        "--url",
        server["url"],
        "--model",
        "tiny",
        "--api-key",
        server["key"],
        "--encoder",
        str(server["encoder"]),
        "--seed",
        "0",
        "--max-new-tokens",
        "6",
        "--temperature",
        "1.5",
    ]
    runs = [CliRunner().invoke(cli_app, args + ["--sampling-seed", "4"]) for _ in range(2)]
    assert all(r.exit_code == 0 for r in runs), runs[0].output
    assert runs[0].stdout == runs[1].stdout  # the same payload noise seed and sampling seed: the same answer
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        direct = client.generate(
            "private words", model="tiny", seed=0, max_new_tokens=6, temperature=1.5, sampling_seed=4
        )
    assert runs[0].stdout.strip() == direct.answers[0]
    for bad in (["--temperature", "-1"], ["--top-p", "1.5"], ["--sampling-seed", "-2"]):
        r = CliRunner().invoke(cli_app, args[:-2] + bad)
        assert r.exit_code == 2, (bad, r.output)
