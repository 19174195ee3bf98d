"""The vLLM gateway backend: the prompt embeddings it builds (same rows as the in-process server), the exact
completions request, answers through a fake vLLM (httpx MockTransport), and every vLLM failure mapped to 502/503/504.
The end-to-end test against a real vLLM server runs only where vLLM is installed."""

import base64
import io
import json
import sys

import httpx
import pytest
import torch
from fastapi.testclient import TestClient

from textfree.heads.classifier import AttributeAttackConfig, AttributeClassifier, AttributeSpec
from textfree.lm.loading import DecoderLoadError, load_input_embeddings
from textfree.ppft.model import TextFreeLM
from textfree.ppft.serving import PromptEmbedder, VllmGenerateModel
from textfree.server import ServerConfig, create_app
from textfree.server.models import ModelRegistry
from textfree.server.prompt_embeds import encode_embeds
from textfree.server.testing import free_port, subprocess_server
from textfree.server.vllm_gateway import SamplingParams

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

OCTET = {"Content-Type": "application/octet-stream"}
PUBLIC = ["Options: A. yes B. no", ""]


@pytest.fixture(scope="module")
def payload(tiny_lm):
    return tiny_lm.privatizer(75.0).privatize(
        ["the first private prompt", "a second one, longer than the first by far"], public=PUBLIC, seed=0
    )


def decode(item: str) -> torch.Tensor:
    """What vLLM does with a prompt_embeds item (here, in the TEST only, on bytes the gateway made)."""
    return torch.load(io.BytesIO(base64.b64decode(item, validate=True)), weights_only=True)


class FakeVllm:
    """A vLLM completions endpoint: records each body, answers ' answer i ' per prompt, choices in reverse order."""

    def __init__(self, status: int = 200, body=None):
        self.bodies, self.status, self.body = [], status, body

    def __call__(self, request: httpx.Request) -> httpx.Response:
        assert request.url.path == "/v1/completions"
        body = json.loads(request.content)
        self.bodies.append(body)
        if self.body is not None:
            return httpx.Response(self.status, **self.body)
        n = len(body["prompt_embeds"])
        choices = [{"index": i, "text": f" answer {i} ", "finish_reason": "stop"} for i in reversed(range(n))]
        return httpx.Response(200, json={"object": "text_completion", "model": body["model"], "choices": choices})


def gateway_client(
    tiny_run_dir, transport: httpx.BaseTransport | None = None, url: str = "http://vllm.internal:8000", **fields
):
    config = ServerConfig(models={"tiny": str(tiny_run_dir)}, auth=False, backend="vllm", vllm_url=url, **fields)
    registry = ModelRegistry(
        {"tiny": VllmGenerateModel.load("tiny", str(tiny_run_dir), config=config, transport=transport)}
    )
    return TestClient(create_app(config, registry=registry))


def test_prompt_rows_are_the_in_process_servers_rows(tiny_run_dir, tiny_lm, payload, tmp_path):
    embedder = PromptEmbedder.load(tiny_run_dir)
    n = max(payload.lengths)
    vectors, mask = payload.vectors[:, :n].float(), payload.mask[:, :n]
    for public in (PUBLIC, None):
        ours = embedder.rows(vectors, mask, public)
        theirs, _ = tiny_lm.server._rows(vectors, mask, public, None)
        assert [tuple(r.shape) for r in ours] == [tuple(r.shape) for r in theirs]
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
    # a run with server-side summary vectors: the gateway lays them out as the in-process server does
    saved, plain = tiny_lm.server.config, embedder.rows(vectors, mask, PUBLIC)
    try:
        tiny_lm.server.config = embedder.config = saved.replace(summary_slots=2)
        ours, (theirs, _) = embedder.rows(vectors, mask, PUBLIC), tiny_lm.server._rows(vectors, mask, PUBLIC, None)
        assert [r.shape[0] for r in ours] == [r.shape[0] + min(2, n) for r, n in zip(plain, payload.lengths)]
        assert [tuple(r.shape) for r in ours] == [tuple(r.shape) for r in theirs]
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
        # ... in place of the slots (summary_only): the same rows as the server's, the slots left out
        tiny_lm.server.config = embedder.config = saved.replace(summary_slots=1, summary_only=True)
        ours, (theirs, _) = embedder.rows(vectors, mask, PUBLIC), tiny_lm.server._rows(vectors, mask, PUBLIC, None)
        assert [r.shape[0] for r in ours] == [r.shape[0] + 1 - n for r, n in zip(plain, payload.lengths)]
        assert [tuple(r.shape) for r in ours] == [tuple(r.shape) for r in theirs]
        for a, b in zip(ours, theirs):
            torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
    finally:
        tiny_lm.server.config = saved
    # a run with count vectors, saved and loaded by the gateway: the same rows again, one vector longer
    lm = TextFreeLM.load(tiny_run_dir)
    lm.server.projection = lm.server.projection.with_count_vectors(4)
    with torch.no_grad():
        lm.server.projection.count.normal_()
    embedder = PromptEmbedder.load(lm.save(tmp_path / "count-run"))
    ours, (theirs, _) = embedder.rows(vectors, mask, PUBLIC), lm.server._rows(vectors, mask, PUBLIC, None)
    assert [r.shape[0] for r in ours] == [r.shape[0] + 1 for r in plain]
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
    # ... and an answer head too: one more vector, which the gateway computes from the slots as the server does
    spec = AttributeSpec("answer", "categorical", ("flu", "cold", "otitis"))
    head = AttributeClassifier(vectors.shape[-1], [spec], AttributeAttackConfig(count=True, hidden=8), max_count=4)
    lm.server.projection = lm.server.projection.with_answer_head(
        head, torch.randn(3, lm.server.projection.config.out_dim)
    )
    embedder = PromptEmbedder.load(lm.save(tmp_path / "answer-run"))
    ours, (theirs, _) = embedder.rows(vectors, mask, PUBLIC), lm.server._rows(vectors, mask, PUBLIC, None)
    assert [r.shape[0] for r in ours] == [r.shape[0] + 2 for r in plain]
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
    # ... weighed over the options shown, with a public text the template cuts: the gateway weighs as the server does,
    # over the options of the whole text and over every class for the cut row
    from textfree.data import options_block

    lm.server.projection = lm.server.projection.with_answer_head(
        head, lm.server.projection.answer_embed.detach(), options=True
    )
    shown = [options_block(["Cold", "otitis"]), "a long preamble " * 40 + "\n" + options_block(["flu", "cold"])]
    lm.server.config = lm.server.config.replace(template=lm.server.config.template.__class__(max_public_tokens=64))
    embedder = PromptEmbedder.load(lm.save(tmp_path / "options-run"))
    ours, (theirs, _) = embedder.rows(vectors, mask, shown), lm.server._rows(vectors, mask, shown, None)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b.float(), rtol=0, atol=1e-6)
    proj = lm.server.projection
    for i, public in enumerate([shown[0], None]):  # row 1 is cut: weighed over all classes
        n_i = int(mask[i].sum())
        torch.testing.assert_close(
            ours[i][2], proj.answer_vector(vectors[i, :n_i], public)[0].detach(), rtol=0, atol=1e-6
        )
    for i, public in enumerate(shown):  # the weighing matters for both rows, so the checks above can fail
        n_i = int(mask[i].sum())
        assert not torch.allclose(proj.answer_vector(vectors[i, :n_i], public), proj.answer_vector(vectors[i, :n_i]))


def test_only_the_embedding_table_is_read_and_it_is_the_decoders(tiny_run_dir, tiny_lm, tmp_path):
    table = load_input_embeddings(tiny_lm.server.decoder_ref["name_or_path"])
    torch.testing.assert_close(table, tiny_lm.server.decoder.get_input_embeddings().weight.float())
    with pytest.raises(DecoderLoadError, match="not a local decoder directory"):
        load_input_embeddings(tmp_path)


def test_completion_request_fields_shapes_dtype_and_round_trip(tiny_run_dir, payload):
    fake = FakeVllm()
    model = gateway_client(tiny_run_dir, httpx.MockTransport(fake)).app.state.registry.models["tiny"]
    n = max(payload.lengths)
    vectors, mask = payload.vectors[:, :n].float(), payload.mask[:, :n]
    body = model.request(vectors, mask, PUBLIC, SamplingParams(7))
    assert set(body) == {
        "model",
        "prompt_embeds",
        "max_tokens",
        "temperature",
        "top_p",
        "n",
        "stream",
        "skip_special_tokens",
    }
    assert body["model"] == "tiny" and body["max_tokens"] == 7 and body["temperature"] == 0.0 and body["top_p"] == 1.0
    assert body["n"] == 1 and body["stream"] is False and body["skip_special_tokens"] is True
    assert json.loads(json.dumps(body)) == body  # plain JSON
    tok, tpl = model.server.tokenizer, model.server.config.template
    suffix = len(tok(tpl.public_suffix, add_special_tokens=False)["input_ids"])
    expected_rows = model.server.rows(vectors, mask, PUBLIC)
    for i, item in enumerate(body["prompt_embeds"]):
        t = decode(item)
        n_public = len(tok(PUBLIC[i], add_special_tokens=False)["input_ids"]) + suffix
        assert tuple(t.shape) == (1 + payload.lengths[i] + n_public, 32)  # BOS + slots + public tokens, decoder width
        assert t.dtype == torch.float32
        assert t.untyped_storage().nbytes() == t.numel() * t.element_size()  # its own storage: no other row rides along
        torch.testing.assert_close(t, expected_rows[i], rtol=0, atol=0)
    seeded = model.request(vectors, mask, None, SamplingParams(3, temperature=0.7, top_p=0.9, seed=5))
    assert (seeded["seed"], seeded["temperature"], seeded["top_p"]) == (5, 0.7, 0.9)
    view = torch.randn(10, 32)[2:4]  # a view of a larger tensor: only its own 2 rows may be serialised
    assert decode(encode_embeds(view)).untyped_storage().nbytes() == 2 * 32 * 4
    model.dtype = "bfloat16"
    assert decode(model.request(vectors, mask, None, SamplingParams(1))["prompt_embeds"][0]).dtype == torch.bfloat16


def test_gateway_answers_through_vllm_with_the_cards_and_checks_of_the_server(tiny_run_dir, tiny_lm, payload):
    fake = FakeVllm()
    with gateway_client(tiny_run_dir, httpx.MockTransport(fake)) as c:
        card = c.get("/v1/models/tiny").json()
        r = c.post(
            "/v1/generate", params={"model": "tiny", "max_new_tokens": 5}, content=payload.to_bytes(), headers=OCTET
        )
        js = c.post("/v1/generate", json={"model": "tiny", "payload_b64": payload.to_base64(), "public": ["x", "y"]})
        wrong = tiny_lm.privatizer(75.0, k=2).privatize(["hello"], seed=1)
        bad = c.post("/v1/generate", params={"model": "tiny"}, content=wrong.to_bytes(), headers=OCTET)
    assert (
        card["encoder_sha256"] == tiny_lm.config.encoder_sha256
        and card["k"] == 4
        and card["decoder"]["name"] == "decoder"
    )
    assert r.status_code == 200, r.text
    assert r.json()["answers"] == [
        "answer 0",
        "answer 1",
    ]  # stripped, in prompt order although vLLM answered in reverse
    assert r.json()["usage"]["completion_tokens"] == 4 and r.json()["usage"]["rows"] == 2
    assert js.status_code == 200 and js.json()["answers"] == ["answer 0", "answer 1"]
    assert fake.bodies[0]["max_tokens"] == 5 and fake.bodies[1]["max_tokens"] == 32  # the server's default
    assert (
        bad.status_code == 400
        and bad.json()["error"]["type"] == "payload_mismatch"
        and "k=2" in bad.json()["error"]["message"]
    )
    assert len(fake.bodies) == 2  # the refused payload never reached vLLM


def test_vllm_down_is_503_with_a_clear_message_and_the_gateway_stays_up(tiny_run_dir, payload):
    with gateway_client(tiny_run_dir, url=f"http://127.0.0.1:{free_port()}") as c:  # nobody listens on that port
        r = c.post("/v1/generate", params={"model": "tiny"}, content=payload.to_bytes(), headers=OCTET)
        health = c.get("/health")
    assert r.status_code == 503, r.text
    err = r.json()["error"]
    assert err["type"] == "backend_unavailable" and "vLLM backend is unreachable" in err["message"]
    assert "127.0.0.1" not in err["message"]  # vLLM's address stays on the server
    assert health.status_code == 200


def raising(exc):
    def handler(request):
        raise exc

    return handler


@pytest.mark.parametrize(
    "transport, status, kind, words",
    [
        (
            FakeVllm(404, {"json": {"error": {"message": "The model `tiny` does not exist.", "code": 404}}}),
            502,
            "backend_error",
            "The model `tiny` does not exist",
        ),
        (
            FakeVllm(400, {"json": {"message": "prompt_embeds hidden_size 32 does not match 64"}}),
            502,
            "backend_error",
            "hidden_size 32",
        ),
        (FakeVllm(500, {"text": "Internal Server Error"}), 502, "backend_error", "refused the request (500)"),
        (FakeVllm(503, {"text": "starting"}), 503, "backend_unavailable", "overloaded or starting"),
        (FakeVllm(200, {"text": "<html>not json</html>"}), 502, "backend_error", "malformed completion"),
        (
            FakeVllm(200, {"json": {"choices": [{"index": 0, "text": "only one"}]}}),
            502,
            "backend_error",
            "choices [0] for 2 prompts",
        ),
        (raising(httpx.ReadTimeout("slow")), 504, "backend_timeout", "did not answer in time"),
        (raising(httpx.ConnectError("refused")), 503, "backend_unavailable", "ConnectError"),
        (raising(httpx.RemoteProtocolError("peer closed")), 503, "backend_unavailable", "RemoteProtocolError"),
    ],
)
def test_vllm_failures_map_to_gateway_errors_not_500(tiny_run_dir, payload, transport, status, kind, words):
    with gateway_client(tiny_run_dir, httpx.MockTransport(transport)) as c:
        r = c.post("/v1/generate", params={"model": "tiny"}, content=payload.to_bytes(), headers=OCTET)
    assert r.status_code == status, r.text
    assert r.json()["error"]["type"] == kind and words in r.json()["error"]["message"]


def test_gateway_refuses_another_base_decoder(tiny_run_dir, tmp_path):
    from textfree.lm.loading import make_tiny_decoder_dir

    other = make_tiny_decoder_dir(tmp_path / "other", hidden=32, layers=2, heads=2, seed=1)
    with pytest.raises(ValueError, match="sha256"):
        PromptEmbedder.load(tiny_run_dir, decoder=other)
    assert not torch.equal(
        PromptEmbedder.load(tiny_run_dir, decoder=other, check_decoder_sha=False).table,
        PromptEmbedder.load(tiny_run_dir).table,
    )


def test_serve_cli_checks_the_backend(tiny_run_dir):
    from typer.testing import CliRunner

    from textfree.cli import app

    r = CliRunner().invoke(app, ["serve", "--model", f"tiny={tiny_run_dir}", "--no-auth", "--backend", "vllm"])
    assert r.exit_code == 2 and "needs vllm_url" in r.stderr
    r = CliRunner().invoke(
        app,
        ["serve", "--model", f"tiny={tiny_run_dir}", "--no-auth", "--backend", "tgi", "--vllm-url", "http://v:8000"],
    )
    assert r.exit_code == 2 and "backend must be one of" in r.stderr


def test_backend_vllm_loads_gateway_models_with_concurrent_batchers(tiny_run_dir, tiny_encoder_dir):
    config = ServerConfig(
        models={"tiny": str(tiny_run_dir)},
        embed_models={"emb": str(tiny_encoder_dir)},
        auth=False,
        backend="vllm",
        vllm_url="http://127.0.0.1:9",
        vllm_max_concurrent_calls=3,
        vllm_dtype="bfloat16",
    )
    app = create_app(config)
    model = app.state.registry.models["tiny"]
    assert isinstance(model, VllmGenerateModel) and model.lora == "tiny" and model.dtype == "bfloat16"
    assert not hasattr(model.server, "decoder")  # no decoder in a gateway
    assert app.state.batchers["tiny"].max_concurrent == 3 and app.state.batchers["emb"].max_concurrent == 1


def test_backend_config_is_checked():
    with pytest.raises(ValueError, match="backend must be one of"):
        ServerConfig(models={"m": "x"}, auth=False, backend="tgi")
    with pytest.raises(ValueError, match="needs vllm_url"):
        ServerConfig(models={"m": "x"}, auth=False, backend="vllm")
    with pytest.raises(ValueError, match="vllm_dtype"):
        ServerConfig(models={"m": "x"}, auth=False, backend="vllm", vllm_url="http://v:8000", vllm_dtype="int8")


@pytest.mark.timeout(900)
def test_end_to_end_with_a_real_vllm_server(tmp_path, tiny_encoder_dir):
    pytest.importorskip(
        "vllm",
        reason="vLLM is not installed here: the end-to-end gateway test needs a vLLM server (pip install vllm; a GPU)",
    )
    from textfree.lm.loading import make_tiny_decoder_dir

    decoder = make_tiny_decoder_dir(
        tmp_path / "decoder", hidden=64, layers=2, heads=1, seed=0
    )  # head size 64: every backend has it
    built = TextFreeLM.build(decoder, encoder=tiny_encoder_dir, k=4, seed=0)
    run = built.save(tmp_path / "run")
    url = f"http://127.0.0.1:{free_port()}"
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(decoder),
        "--host",
        "127.0.0.1",
        "--port",
        url.rsplit(":", 1)[1],
        "--enable-prompt-embeds",
        "--enable-lora",
        "--lora-modules",
        f"tiny={run}/adapter",
        "--max-lora-rank",
        "16",
        "--dtype",
        "float32",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--gpu-memory-utilization",
        "0.2",
    ]
    with subprocess_server(cmd, url, log_path=tmp_path / "vllm.log", env={"HF_HUB_OFFLINE": "1"}, ready_timeout_s=600):
        payload = built.privatizer(75.0).privatize(
            ["the first private prompt", "another, longer private prompt"], public=PUBLIC, seed=0
        )
        expected = built.server.answer(payload, max_new_tokens=4)
        with gateway_client(run, url=url) as c:
            r = c.post(
                "/v1/generate", params={"model": "tiny", "max_new_tokens": 4}, content=payload.to_bytes(), headers=OCTET
            )
    assert r.status_code == 200, r.text
    assert [" ".join(a.split()) for a in r.json()["answers"]] == [
        " ".join(a.split()) for a in expected
    ]  # greedy: same answers


def test_gateway_forwards_the_sampling_options(tiny_run_dir, payload):
    fake = FakeVllm()
    with gateway_client(tiny_run_dir, httpx.MockTransport(fake)) as c:
        r = c.post(
            "/v1/generate",
            json={"model": "tiny", "payload_b64": payload.to_base64(), "temperature": 0.7, "top_p": 0.9, "seed": 5},
        )
        g = c.post("/v1/generate", json={"model": "tiny", "payload_b64": payload.to_base64(), "top_p": 0.5})
    assert r.status_code == 200 and g.status_code == 200
    assert (fake.bodies[0]["temperature"], fake.bodies[0]["top_p"], fake.bodies[0]["seed"]) == (0.7, 0.9, 5)
    assert (fake.bodies[1]["temperature"], fake.bodies[1]["top_p"]) == (0.0, 1.0) and "seed" not in fake.bodies[
        1
    ]  # greedy
