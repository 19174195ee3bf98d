"""The server's routes with tiny models (FastAPI TestClient): health, model cards, generate (both wire formats),
embed, micro-batching of concurrent requests, metrics."""

import base64
import json
import shutil
import threading
from pathlib import Path

import pytest
import torch
from fastapi.testclient import TestClient
from openapi_spec_validator import validate as validate_spec
from prometheus_client.parser import text_string_to_metric_families

from textfree.encoders import EmbeddingTableEncoder
from textfree.mechanisms import Clipped, L2Laplace
from textfree.ppft.testing import make_tiny_run
from textfree.privatizer import Privatizer
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.metrics import Metrics
from textfree.server.models import ModelRegistry
from textfree.server.testing import json_leaves

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_run_dir, tiny_encoder_dir):
    keys = tmp_path_factory.mktemp("keys") / "keys.json"
    key = KeyStore(keys).add_key("alice")
    config = ServerConfig(
        models={"tiny": str(tiny_run_dir)}, embed_models={"tiny-embed": str(tiny_encoder_dir)}, keys_path=str(keys)
    )
    registry = ModelRegistry.load(config)
    server = registry.models["tiny"].server  # warm up (the first generation in a process is slow)
    server.generate(torch.zeros(1, 1, 32), torch.ones(1, 1, dtype=torch.bool), max_new_tokens=2)
    return config, registry, {"Authorization": f"Bearer {key}"}


def client_for(setup, **overrides):
    config, registry, _ = setup
    fields = {**config.__dict__, **overrides}
    return TestClient(create_app(ServerConfig(**fields), registry=registry))


def test_health_needs_no_key(setup):
    with client_for(setup) as c:
        r = c.get("/health")
        assert r.status_code == 200 and r.json()["status"] == "ok"


def test_model_cards_state_what_a_client_needs(setup, tiny_lm):
    _, _, auth = setup
    with client_for(setup) as c:
        listing = c.get("/v1/models", headers=auth).json()
        cards = {card["id"]: card for card in listing["data"]}
        one = c.get("/v1/models/tiny", headers=auth).json()
    card = cards["tiny"]
    assert card == one
    assert card["task"] == "generate" and card["payload_kind"] == "pooled"
    assert card["encoder_sha256"] == tiny_lm.encoder.sha256 == tiny_lm.config.encoder_sha256
    assert card["encoder_dim"] == 32 and card["k"] == 4 and card["mechanism"] == "l2_laplace"
    assert card["epsilon"] == 75.0 and card["stage"] == "stage2"
    assert card["encoder_id"] == Path(tiny_lm.config.encoder_id).name  # the encoder's name, not the server's path
    assert card["decoder"]["sha256"] == tiny_lm.server.decoder_ref["sha256"] and card["decoder"]["name"] == "decoder"
    assert "/" not in card["decoder"]["name"]  # no server file paths in a card
    embed = cards["tiny-embed"]
    assert embed["task"] == "embed" and embed["payload_kind"] == "token" and embed["k"] == 1 and embed["clip_norm"] > 0
    assert listing["limits"]["max_batch_rows"] == 32


def test_generate_answers_a_batch_of_two_in_both_wire_formats(setup, tiny_lm):
    _, registry, auth = setup
    payload = tiny_lm.privatizer(75.0).privatize(
        ["the first private prompt", "a second one, longer than the first"],
        public=["Options: A. yes B. no", ""],
        seed=0,
    )
    expected = registry.models["tiny"].server.answer(payload, max_new_tokens=2)
    with client_for(setup) as c:
        raw = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 2},
            content=payload.to_bytes(),
            headers={**auth, **OCTET},
        )
        js = c.post(
            "/v1/generate",
            json={"model": "tiny", "payload_b64": payload.to_base64(), "max_new_tokens": 2},
            headers=auth,
        )
    for r in (raw, js):
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["model"] == "tiny" and body["answers"] == expected
        assert body["usage"]["rows"] == 2 and body["usage"]["slots"] == sum(payload.lengths)
    # JSON 'public' overrides the payload's own public parts
    with client_for(setup) as c:
        r = c.post(
            "/v1/generate",
            json={"model": "tiny", "payload_b64": payload.to_base64(), "public": ["x", "y"], "max_new_tokens": 2},
            headers=auth,
        )
    assert r.json()["answers"] == registry.models["tiny"].server.answer(payload, public=["x", "y"], max_new_tokens=2)


def test_concurrent_requests_are_answered_correctly_and_share_a_batch(setup, tiny_lm):
    _, registry, auth = setup
    payloads = [
        tiny_lm.privatizer(75.0).privatize([text], seed=i) for i, text in enumerate(["alpha beta gamma", "delta"])
    ]
    expected = [registry.models["tiny"].server.answer(p, max_new_tokens=2) for p in payloads]
    results = [None, None]
    with client_for(setup, batch_wait_ms=3000.0, batch_max_rows=2) as c:

        def send(i):
            results[i] = c.post(
                "/v1/generate",
                params={"model": "tiny", "max_new_tokens": 2},
                content=payloads[i].to_bytes(),
                headers={**auth, **OCTET},
            )

        threads = [threading.Thread(target=send, args=(i,)) for i in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        metrics = c.get("/metrics", params={"format": "json"}).json()
    for i in range(2):
        assert results[i].status_code == 200, results[i].text
        assert results[i].json()["answers"] == expected[i]
        assert results[i].json()["usage"]["batch_requests"] == 2  # one model call served both
    assert metrics["batches"] == {"calls": 1, "requests": 2, "rows": 2}


def test_embed_returns_the_mean_pooled_embedding_of_noisy_tokens(setup, tiny_encoder_dir):
    config, registry, auth = setup
    table = EmbeddingTableEncoder.from_pretrained(tiny_encoder_dir)
    card = registry.models["tiny-embed"].card
    noise = Clipped(L2Laplace(50.0), max_norm=card["clip_norm"])
    payload = Privatizer(table, noise, k=1, normalize=False, renormalize=False).privatize(
        ["one two three", "four"], seed=0
    )
    model = registry.models["tiny-embed"].model
    with torch.no_grad():
        hidden = model(inputs_embeds=payload.vectors, attention_mask=payload.mask.long()).last_hidden_state
    m = payload.mask.unsqueeze(-1).float()
    expected = (hidden * m).sum(1) / m.sum(1)
    with client_for(setup) as c:
        raw = c.post("/v1/embed", params={"model": "tiny-embed"}, content=payload.to_bytes(), headers={**auth, **OCTET})
        js = c.post(
            "/v1/embed",
            json={"model": "tiny-embed", "payload_b64": base64.b64encode(payload.to_bytes()).decode()},
            headers=auth,
        )
        wrong_route = c.post(
            "/v1/generate", params={"model": "tiny-embed"}, content=payload.to_bytes(), headers={**auth, **OCTET}
        )
    for r in (raw, js):
        assert r.status_code == 200, r.text
        got = torch.tensor(r.json()["embeddings"])
        assert got.shape == (2, card["output_dim"]) and r.json()["dim"] == card["output_dim"]
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)
    assert wrong_route.status_code == 404 and "/v1/embed" in wrong_route.json()["error"]["message"]


def test_metrics_count_requests_by_route_and_status(setup):
    _, _, auth = setup
    with client_for(setup) as c:
        c.get("/health")
        c.get("/v1/models", headers=auth)
        c.get("/v1/models")  # 401
        c.get("/no/such/path")
        for method in ("QWERTY1", "QWERTY2"):  # invented methods: counted, but never as new label values
            c.request(method, "/no/such/path")
        snap = c.get("/metrics", params={"format": "json"}).json()
        text = c.get("/metrics").text
    counts = {(r["route"], r["status"]): r["count"] for r in snap["requests"]}
    assert counts[("/health", 200)] == 1 and counts[("/v1/models", 200)] == 1 and counts[("/v1/models", 401)] == 1
    by_method = {(r["route"], r["method"], r["status"]): r["count"] for r in snap["requests"]}
    assert by_method[("other", "GET", 404)] == 1 and by_method[("other", "other", 404)] == 2
    assert {r["method"] for r in snap["requests"]} == {"GET", "other"} and "QWERTY" not in text
    assert (
        snap["latency_s"]["/v1/models"]["window"] == 2
        and snap["latency_s"]["/v1/models"]["p99"] >= snap["latency_s"]["/v1/models"]["p50"] > 0
    )
    assert snap["in_flight"] == 1 and snap["queue_depth"] == 0  # the /metrics request itself
    families = {f.name: f for f in text_string_to_metric_families(text)}
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families.values() for s in f.samples}
    assert samples[("textfree_requests_total", (("method", "GET"), ("route", "/v1/models"), ("status", "401")))] == 1
    assert ("textfree_request_latency_seconds", (("quantile", "0.99"), ("route", "/health"))) in samples
    assert families["textfree_batch_queue_depth"].samples[0].value == 0


def test_prometheus_text_parses_and_the_latency_summary_counts_since_start():
    """A summary's _count and _sum are running totals (Prometheus' summary type); the quantiles cover the window."""
    metrics = Metrics(window=2)
    for seconds in (0.1, 0.2, 0.4):
        metrics.begin()
        metrics.end("/v1/generate", "POST", 200, seconds)
    families = {f.name: f for f in text_string_to_metric_families(metrics.prometheus())}
    summary = families["textfree_request_latency_seconds"]
    assert summary.type == "summary"
    values = {(s.name, s.labels.get("quantile")): s.value for s in summary.samples}
    assert values[("textfree_request_latency_seconds_count", None)] == 3  # all three, not the window of two
    assert values[("textfree_request_latency_seconds_sum", None)] == pytest.approx(0.7)
    assert values[("textfree_request_latency_seconds", "0.5")] == 0.2  # the window: 0.2 and 0.4
    histogram = families["textfree_request_duration_seconds"]
    buckets = {s.labels["le"]: s.value for s in histogram.samples if s.name.endswith("_bucket")}
    assert histogram.type == "histogram" and buckets["0.25"] == 2 and buckets["+Inf"] == 3
    assert families["textfree_requests"].type == "counter"


def test_openapi_schema_is_valid_and_declares_auth_and_every_answer(setup):
    """The schema validates (OpenAPI 3.1); the key is a declared security scheme on every /v1 route; every route
    declares its 2xx answer with a schema and its errors with the one error shape (never FastAPI's default 422)."""
    with client_for(setup) as c:
        spec = c.get("/openapi.json").json()
    validate_spec(spec)
    body = spec["paths"]["/v1/generate"]["post"]["requestBody"]["content"]
    assert {"application/octet-stream", "application/json"} <= set(body)
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearerKey"] == {**schemes["bearerKey"], "type": "http", "scheme": "bearer"}
    assert schemes["apiKeyHeader"] == {**schemes["apiKeyHeader"], "type": "apiKey", "in": "header", "name": "X-API-Key"}
    assert "HTTPValidationError" not in json.dumps(spec)
    error_ref = "#/components/schemas/ErrorResponse"
    operations = [(path, method, op) for path, item in spec["paths"].items() for method, op in item.items()]
    assert len(operations) >= 15
    for path, method, op in operations:
        where = f"{method.upper()} {path}"
        answers = op["responses"]
        ok = [code for code in answers if code.startswith("2")]
        assert ok, where
        for code in ok:
            assert any("schema" in media for media in answers[code]["content"].values()), (where, code)
        for code, answer in answers.items():
            if code[0] in "45":
                assert answer["content"]["application/json"]["schema"] == {"$ref": error_ref}, (where, code)
        if path.startswith("/v1/"):
            assert {"401", "429"} <= set(answers), where
            assert op["security"] == [{"bearerKey": []}, {"apiKeyHeader": []}], where
        else:
            assert "security" not in op, where
    post = spec["paths"]["/v1/generate"]["post"]["responses"]
    assert post["200"]["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/GenerateResponse"}
    assert {"400", "404", "413", "415", "422"} <= set(post)


def test_cards_of_models_loaded_from_deep_local_paths_carry_names_and_hashes_only(tmp_path, tiny_encoder_dir):
    """No field of any card holds the server's path of a model, its encoder or its decoder, or any absolute path."""
    deep = tmp_path / "srv" / "models" / "tenant-a" / "2024" / "ppft"
    encoder = shutil.copytree(tiny_encoder_dir, deep / "encoders" / "enc-v1")
    run = make_tiny_run(deep / "runs", encoder)
    config = ServerConfig(models={"deep": str(run)}, embed_models={"deep-embed": str(encoder)}, auth=False)
    with TestClient(create_app(config)) as c:
        cards = c.get("/v1/models").json()["data"] + [c.get(f"/v1/models/{m}").json() for m in ("deep", "deep-embed")]
    assert {card["id"] for card in cards} == {"deep", "deep-embed"}
    assert {card["encoder_id"] for card in cards} == {"enc-v1"}
    for card in cards:
        for where, value in json_leaves(card):
            text = str(value)
            assert str(tmp_path) not in text and "/srv/models" not in text, (card["id"], where, text)
            if where.endswith((".route", ".url")):  # the server's own URL paths (/v1/...)
                assert text.startswith("/v1/"), (card["id"], where, text)
                continue
            assert not (isinstance(value, str) and (text.startswith(("/", "~", "\\")) or text[1:3] == ":\\")), (
                card["id"],
                where,
                text,
            )


def test_sampling_options_are_validated_and_a_seed_reproduces_the_answers(setup, tiny_lm):
    _, registry, auth = setup
    payload = tiny_lm.privatizer(75.0).privatize(["the first private prompt", "another one"], seed=0)
    body = {"model": "tiny", "payload_b64": payload.to_base64(), "max_new_tokens": 6, "temperature": 1.5, "seed": 11}
    with client_for(setup) as c:
        first = c.post("/v1/generate", json=body, headers=auth).json()["answers"]
        again = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 6, "temperature": 1.5, "seed": 11},
            content=payload.to_bytes(),
            headers={**auth, **OCTET},
        ).json()["answers"]
        other = [
            c.post("/v1/generate", json={**body, "seed": s}, headers=auth).json()["answers"] for s in range(12, 16)
        ]
        greedy = c.post("/v1/generate", json={**body, "temperature": 0}, headers=auth).json()["answers"]
        bad = [
            c.post("/v1/generate", json={**body, **b}, headers=auth)
            for b in ({"temperature": -1}, {"temperature": 11}, {"top_p": 0}, {"top_p": 1.5}, {"seed": -3})
        ]
    assert first == again  # the same request and seed, either wire format
    assert any(o != first for o in other)  # other seeds sample other answers (the tiny decoder is random)
    assert greedy == registry.models["tiny"].server.answer(payload, max_new_tokens=6)
    for r in bad:
        assert r.status_code == 422 and r.json()["error"]["type"] == "invalid_request", r.text
