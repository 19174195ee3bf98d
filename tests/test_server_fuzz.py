"""A short, reproducible Hypothesis fuzz (derandomized, fixed example counts: a few seconds) of the payload parser and
of every route: a valid payload of any shape, dtype and mechanism round-trips and is refused over a row limit; a
corrupted one is a PayloadError or a valid payload; any request to any route, in either wire format, with or without a
key, is answered below 500 with the one error shape. The long version is benchmarks/fuzz_server.py."""

import base64
import json

import pytest
import torch
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from textfree.encoders import EmbeddingTableEncoder
from textfree.mechanisms import Clipped, Gaussian, L2Laplace, SlotPrivatization
from textfree.payload import EncoderInfo, Payload, PayloadError, PayloadTooLarge
from textfree.ppft.model import TextFreeLM
from textfree.privatizer import Privatizer
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

FUZZ = settings(
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
OCTET = "application/octet-stream"
NOISES = [None, L2Laplace(40.0), Gaussian(0.3), Clipped(L2Laplace(30.0), 1.5)]


@st.composite
def payloads(draw) -> Payload:
    """A valid payload: 1-4 rows of 0-5 slots, width 1-8, any vector dtype, any of the mechanisms."""
    noise = draw(st.sampled_from(NOISES))
    lengths = draw(st.lists(st.integers(0, 5), min_size=1, max_size=4))
    d = draw(st.integers(1, 8))
    dtype = draw(st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
    s = max(lengths)
    mask = torch.arange(s).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    seed = draw(st.integers(0, 2**16))
    clipped = isinstance(noise, Clipped)
    vectors = torch.randn(len(lengths), s, d, generator=torch.Generator().manual_seed(seed))
    vectors = vectors / vectors.norm(dim=-1, keepdim=True).clamp_min(1e-6) * (1.0 if not clipped else 1.2)
    vectors = (vectors * mask.unsqueeze(-1)).to(dtype)
    priv = SlotPrivatization(noise, k=1, normalize=not clipped, renormalize=not clipped)
    public = draw(st.none() | st.lists(st.text(max_size=12), min_size=len(lengths), max_size=len(lengths)))
    return Payload(
        vectors, mask, EncoderInfo("fuzz/enc", None, d), priv, kind="token" if clipped else "pooled", public=public
    )


@settings(FUZZ, max_examples=60)
@given(payloads(), st.integers(1, 5))
def test_fuzz_valid_payloads_round_trip_and_row_limits_hold(payload, max_rows):
    data = payload.to_bytes()
    if payload.batch_size > max_rows:
        with pytest.raises(PayloadTooLarge):
            Payload.from_bytes(data, max_rows=max_rows)
        return
    back = Payload.from_bytes(data, max_rows=max_rows)
    assert back.header() == payload.header()
    assert torch.equal(back.vectors, payload.vectors) and torch.equal(back.mask, payload.mask)


@settings(FUZZ, max_examples=120)
@given(payloads(), st.lists(st.tuples(st.integers(0), st.integers(0, 255)), min_size=1, max_size=6), st.data())
def test_fuzz_corrupted_payloads_are_payload_errors_or_valid(payload, edits, data):
    blob = bytearray(payload.to_bytes())
    for pos, value in edits:
        blob[pos % len(blob)] = value
    if data.draw(st.booleans()):
        blob = blob[: data.draw(st.integers(0, len(blob)))]
    try:
        parsed = Payload.from_bytes(bytes(blob), max_rows=data.draw(st.integers(1, 8)))
    except PayloadError:
        return
    parsed.validate()  # whatever parses is a whole, consistent payload


# ---------------------------------------------------------------------------------------------- routes
@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_run_dir, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("fuzz")
    keys = tmp / "keys.json"
    key = KeyStore(keys).add_key("alice")
    config = ServerConfig(
        models={"tiny": str(tiny_run_dir)},
        embed_models={"emb": str(tiny_encoder_dir)},
        keys_path=str(keys),
        sqlite_path=str(tmp / "db.sqlite"),
        max_body_bytes=64 * 1024,
        max_batch_rows=4,
        max_new_tokens=1,
        batch_wait_ms=0,
        rate_limit_per_minute=0,
    )
    valid = TextFreeLM.load(tiny_run_dir).privatizer(75.0).privatize(["a fuzzed prompt"], seed=0).to_bytes()
    with TestClient(create_app(config)) as client:
        yield client, key, valid


ROUTES = [
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/tiny"),
    ("GET", "/v1/models/emb/denoiser"),
    ("POST", "/v1/generate"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/datasets"),
    ("GET", "/v1/datasets"),
    ("GET", "/v1/datasets/ds_x"),
    ("POST", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/fine_tuning/jobs/ftjob_x"),
    ("GET", "/v1/fine_tuning/jobs/ftjob_x/events"),
    ("POST", "/v1/fine_tuning/jobs/ftjob_x/cancel"),
]
TEXT = st.text(max_size=16)
JSON_BODIES = st.dictionaries(
    st.sampled_from(["model", "payload_b64", "public", "max_new_tokens", "temperature", "datasets", "targets", "x"]),
    st.none() | st.integers(-3, 2**40) | st.floats() | TEXT | st.lists(TEXT, max_size=3),
    max_size=5,
)


def _body(draw, valid: bytes) -> tuple[str, bytes]:
    """(content type, body): raw bytes, a valid payload (possibly corrupted), or JSON of random fields."""
    kind = draw(st.sampled_from(["raw", "payload", "json", "json-payload"]))
    if kind == "raw":
        return draw(st.sampled_from(["application/octet-stream", "text/plain", ""])), draw(st.binary(max_size=256))
    if kind == "payload":
        blob = bytearray(valid)
        for pos, value in draw(st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3)):
            blob[pos % len(blob)] = value
        return "application/octet-stream", bytes(blob)
    body = {"model": draw(st.sampled_from(["tiny", "emb", "nope"])), **draw(JSON_BODIES)}
    if kind == "json-payload":
        body = {**body, "payload_b64": base64.b64encode(valid).decode()}
    return "application/json", json.dumps(body, allow_nan=True).encode()


@pytest.mark.parametrize("method,path", ROUTES, ids=[f"{m} {p}" for m, p in ROUTES])
@settings(FUZZ, max_examples=25)
@given(data=st.data())
def test_fuzz_every_route_answers_below_500_with_the_error_shape(server, method, path, data):
    client, key, valid = server
    method = data.draw(st.sampled_from([method] * 6 + ["PUT", "DELETE"]))
    ctype, body = _body(data.draw, valid)
    headers = {"Content-Type": ctype} if ctype else {}
    auth = data.draw(st.sampled_from(["bearer", "bearer", "x-api-key", "none", "bad"]))
    if auth == "bearer":
        headers["Authorization"] = f"Bearer {key}"
    elif auth == "x-api-key":
        headers["X-API-Key"] = key
    elif auth == "bad":
        headers["Authorization"] = "Bearer tf_000000000000." + "A" * 43
    params = {"model": data.draw(st.sampled_from(["tiny", "emb", "nope"]))}
    params.update(
        data.draw(st.dictionaries(st.sampled_from(["max_new_tokens", "format", "stream", "x"]), TEXT, max_size=1))
    )
    r = client.request(method, path, params=params, content=body if method != "GET" else None, headers=headers)
    assert r.status_code < 500, (method, path, r.status_code, r.text[:300])
    if r.status_code >= 400:
        error = r.json()["error"]
        assert error["type"] and error["message"], r.text


@settings(FUZZ, max_examples=40)
@given(
    route=st.sampled_from(["/v1/generate", "/v1/embed"]),
    wire=st.sampled_from(["raw", "json"]),
    edits=st.lists(st.tuples(st.integers(0), st.integers(0, 255)), max_size=3),
)
def test_fuzz_inference_payloads_are_answered_or_refused(server, embed_payload, route, wire, edits):
    """Keyed requests to the right model, valid payloads with up to three corrupted bytes: 200 or a 4xx."""
    client, key, valid = server
    model, blob = ("tiny", bytearray(valid)) if route == "/v1/generate" else ("emb", bytearray(embed_payload))
    for pos, value in edits:
        blob[pos % len(blob)] = value
    headers = {"Authorization": f"Bearer {key}"}
    if wire == "raw":
        r = client.post(route, params={"model": model}, content=bytes(blob), headers={**headers, "Content-Type": OCTET})
    else:
        r = client.post(route, json={"model": model, "payload_b64": base64.b64encode(blob).decode()}, headers=headers)
    assert r.status_code == 200 or 400 <= r.status_code < 500, (route, r.status_code, r.text[:300])
    if not edits:
        assert r.status_code == 200, r.text


@pytest.fixture(scope="module")
def embed_payload(tiny_encoder_dir):
    table = EmbeddingTableEncoder.from_pretrained(tiny_encoder_dir)
    noise = Clipped(L2Laplace(50.0), max_norm=table.max_norm())
    return Privatizer(table, noise, k=1, normalize=False, renormalize=False).privatize(["one two"], seed=0).to_bytes()
