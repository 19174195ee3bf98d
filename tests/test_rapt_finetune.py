"""RAPT fine-tuning through the service: a tenant's examples privatized to text on the client (PCT2T and the served
run's plain tokens) are uploaded with their labels, a job trains the chosen method with the reconstruction head, and
its adapter answers /v1/classify for that tenant only; the bytes the client sends hold no raw example text; bad
uploads and jobs get clear 4xx; a job stopped by a restart resumes from its checkpoint, bit-identical."""

import json
import time
from urllib.parse import urlparse

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file
from typer.testing import CliRunner

import textfree.ppft.service  # noqa: F401  (registers "ppft")
import textfree.rapt.service  # noqa: F401  (registers "rapt")
from textfree.cli import app as cli_app
from textfree.client import Client, ServerError
from textfree.data.tasks import TaskData
from textfree.encoders.loading import load_hf_encoder
from textfree.ppft.model import TextFreeLM
from textfree.rapt.model import encode_examples, load_classifier
from textfree.rapt.train import RaptTrainConfig, build_mechanism, train_rapt
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.models import ModelRegistry
from textfree.server.registry import ServedSystem
from textfree.server.testing import RecordingProxy, http_requests, leaked_words, serve_in_thread
from textfree.substitution.examples import privatize_examples
from textfree.substitution.plain import PLAIN_FILE, PlainTokens

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

ETA = 50.0
# the served run's own training data (the provider's)
POS = ["a great and moving film", "she loved the warm ending", "what a wonderful cast", "funny and smart"] * 3
NEG = ["a dull and boring film", "he hated the slow ending", "what a terrible cast", "flat and stupid"] * 3
# the tenant's private training data (every word in the table, at least 5 letters: with pos 'all' each one goes
# through the mechanism; none is protocol vocabulary such as "labels" or "examples")
PRIVATE = [
    ("doctor quietly prescribed strong medicine yesterday morning", 1),
    ("nurse carefully checked fever pressure before dinner", 1),
    ("teacher angrily graded history papers tonight", 0),
    ("farmer slowly harvested golden wheat during autumn", 0),
] * 4
# 16 examples, batch 4, 2 epochs: 8 steps; a checkpoint every 2
HP = {"method": "lora", "epochs": 2, "batch_size": 4, "lr": 0.05, "warmup_steps": 1, "save_every": 2, "log_every": 1,
      "seed": 0}  # fmt: skip
DONE = ("succeeded", "failed", "cancelled")


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_encoder_dir, tiny_run_dir):
    tmp = tmp_path_factory.mktemp("rapt-finetune")
    texts = [(t,) for t in POS + NEG]
    labels = [1] * len(POS) + [0] * len(NEG)
    run = tmp / "rapt-sst2"
    cfg = RaptTrainConfig(out=str(run), encoder=str(tiny_encoder_dir), eta=ETA, plain_length=4, plain_sequences=2,
                          rec_vocab_size=50, epochs=1, batch_size=8, max_length=48, progress=False)  # fmt: skip
    train_rapt(cfg, data=TaskData("sst2", texts, labels, texts[::6], labels[::6], "train", "dev"))
    keys = KeyStore(tmp / "keys.json")
    config = ServerConfig(
        models={"sst2": str(run), "twin": str(run), "ddx": str(tiny_run_dir)},
        keys_path=str(tmp / "keys.json"),
        sqlite_path=str(tmp / "main.sqlite"),
        data_dir=str(tmp / "main-data"),
        rate_limit_per_minute=0,
        max_classify_examples=4,  # a dataset may hold more: max_dataset_rows
        max_dataset_rows=20,
    )
    registry = ModelRegistry.load(config)  # loaded once, shared by every app of this module
    alice, bob = keys.add_key("alice"), keys.add_key("bob")
    app = create_app(config, registry=registry)
    with serve_in_thread(app) as url:
        yield {
            "url": url,
            "app": app,
            "config": config,
            "registry": registry,
            "run": run,
            "ppft_run": tiny_run_dir,
            "encoder": tiny_encoder_dir,
            "tmp": tmp,
            "keys": {"alice": alice, "bob": bob},
            "alice": {"Authorization": f"Bearer {alice}"},
            "bob": {"Authorization": f"Bearer {bob}"},
        }


def _client(env, cache_dir, who="alice", url=None) -> Client:
    return Client(url or env["url"], api_key=env["keys"][who], encoder=env["encoder"], cache_dir=cache_dir)


def _serve(env, **overrides) -> TestClient:
    return TestClient(create_app(ServerConfig(**{**env["config"].__dict__, **overrides}), registry=env["registry"]))


def _wait(c, env, job_id, who="alice", timeout=120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = c.get(f"/v1/fine_tuning/jobs/{job_id}", headers=env[who]).json()
        if job["status"] in DONE:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {job['status']} after {timeout} s")


def _events(c, env, job_id, who="alice") -> list[dict]:
    return c.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"limit": 1000}, headers=env[who]).json()["data"]


def _weights(run) -> dict:
    found = {f"task_head:{k}": v for k, v in load_file(str(run / "task_head.safetensors")).items()}
    return found | {f"adapter:{k}": v for k, v in load_file(str(run / "adapter" / "adapter_model.safetensors")).items()}


@pytest.fixture(scope="module")
def reference(env, tmp_path_factory):
    """One job of alice's through the client: her examples privatized here, uploaded, trained; its adapter."""
    cache = tmp_path_factory.mktemp("plain-cache")
    with _client(env, cache) as client:
        uploaded = client.upload_examples([t for t, _ in PRIVATE], [y for _, y in PRIVATE], model="sst2",
                                          name="clinic", seed=0)  # fmt: skip
        job = client.create_fine_tuning_job(model="sst2", datasets=uploaded.dataset["id"], **HP)
        done = client.wait_job(job["id"], poll=0.05, timeout=120)
        events = client.job_events(job["id"], limit=1000)["data"]
    return {"uploaded": uploaded, "job": done, "events": events, "dir": env["config"].data_path / "jobs" / job["id"]}


def _body(uploaded) -> dict:
    """The upload of ``uploaded``'s examples again, as JSON (the same privatized text and labels)."""
    return {"model": "sst2", "examples": uploaded.examples, "labels": [y for _, y in PRIVATE]}


# ---------------------------------------------------------------------------------------------------------- round trip
def test_upload_job_adapter_classify_round_trip(env, reference, tmp_path):
    uploaded, job, run = reference["uploaded"], reference["job"], reference["dir"]
    ds = uploaded.dataset
    assert ds["rows"] == len(PRIVATE) and ds["name"] == "clinic" and ds["model"] == "sst2"
    assert ds["privacy"] == {"worst_case_row": None, "mechanism": "pct2t", "eta": ETA,
                             "pos_categories": ["NOUN", "VERB", "PRON", "ADP"]}  # fmt: skip
    assert uploaded.eta == ETA and max(uploaded.words_privatized) > 0 and uploaded.privacy.epsilon > 0
    # the server stored exactly the privatized text and labels it was sent
    stored = json.loads((env["config"].data_path / "datasets" / ds["id"] / "examples.json").read_text())
    assert stored["format"] == "textfree.text_dataset"
    assert stored["examples"] == [e | {"label": y} for e, (_, y) in zip(uploaded.examples, PRIVATE)]
    # the job: queued -> running -> succeeded with an adapter; progress events; the checkpoints removed
    assert job["status"] == "succeeded", job
    assert job["progress"]["step"] == job["progress"]["total_steps"] == 8 and job["adapter"].startswith("ad_")
    kinds = [e["type"] for e in reference["events"]]
    assert kinds[:2] == ["queued", "started"] and kinds[-1] == "succeeded" and kinds.count("progress") == 8
    assert "POST /v1/classify with adapter=" in reference["events"][-1]["message"]
    assert not (run / "checkpoints").exists()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["system"] == "rapt" and summary["method"] == "lora" and summary["n_train"] == len(PRIVATE)
    config = json.loads((run / "train_config.json").read_text())["config"]
    assert config["reconstruction"] and config["plain_length"] == 4 and config["epochs"] == 2
    assert (run / PLAIN_FILE).read_bytes() == (env["run"] / PLAIN_FILE).read_bytes()
    assert set(load_file(str(run / "task_head.safetensors"))) == {"weight", "bias"}  # no reconstruction head
    # the adapter answers /v1/classify for alice, as the job's classifier loaded here does
    texts = ["doctor prescribed medicine", "farmer harvested wheat"]
    with _client(env, tmp_path) as client:
        tuned = client.classify(texts, model="sst2", adapter=job["adapter"], seed=3)
        base = client.classify(texts, model="sst2", seed=3)
        assert [a["id"] for a in client.model_card("sst2")["adapters"]] == [job["adapter"]]
        assert client.model_card("twin")["adapters"] == [] and client.model_card("ddx")["adapters"] == []
    assert tuned.examples == base.examples and tuned.usage["examples"] == 2
    plain = PlainTokens.load(env["run"])
    local = privatize_examples([(t,) for t in texts], [0, 0], build_mechanism(str(env["encoder"]), ETA, "default"),
                               plain, generator=torch.Generator().manual_seed(3))  # fmt: skip
    classifier, tokenizer, loaded_plain, cfg = load_classifier(run)
    batch = encode_examples(tokenizer, local, loaded_plain, max_length=cfg["max_length"])
    with torch.no_grad():
        probs = torch.softmax(classifier(batch)["logits"], dim=-1)
    assert tuned.labels == probs.argmax(-1).tolist()
    assert torch.allclose(torch.tensor(tuned.probabilities), probs, atol=1e-5)
    assert not torch.allclose(torch.tensor(tuned.probabilities), torch.tensor(base.probabilities), atol=1e-3)


def test_every_method_of_the_system_is_offered_and_another_one_trains(env, reference):
    assert textfree.rapt.service.RAPT_SYSTEM.methods == ("lora", "prompt_tuning", "prefix_tuning", "ia3", "full")
    with pytest.raises(ValueError, match="methods are for a system that fine-tunes"):
        ServedSystem(name="x", task="classify", payload_kind="privatized_text", load=lambda *a: None, methods=("lora",))
    with _serve(env, sqlite_path=str(env["tmp"] / "m.sqlite"), data_dir=str(env["tmp"] / "m")) as c:
        ds = c.post("/v1/datasets", json=_body(reference["uploaded"]), headers=env["alice"]).json()["id"]
        r = c.post("/v1/fine_tuning/jobs", headers=env["alice"], json={"model": "sst2", "datasets": [ds],
                   "hyperparameters": {**HP, "method": "prefix_tuning", "epochs": 1, "virtual_tokens": 3}})  # fmt: skip
        assert r.status_code == 422 and "virtual_tokens" in r.json()["error"]["message"]  # the run's shape, not a knob
        hp = {**HP, "method": "prefix_tuning", "epochs": 1}
        job = c.post("/v1/fine_tuning/jobs", json={"model": "sst2", "datasets": [ds], "hyperparameters": hp},
                     headers=env["alice"]).json()  # fmt: skip
        done = _wait(c, env, job["id"])
        assert done["status"] == "succeeded", done
        ask = {"model": "sst2", "examples": reference["uploaded"].examples[:2], "adapter": done["adapter"]}
        r = c.post("/v1/classify", json=ask, headers=env["alice"])
        assert r.status_code == 200 and r.json()["adapter"] == done["adapter"] and len(r.json()["labels"]) == 2
    run = env["tmp"] / "m" / "jobs" / job["id"]
    adapter = json.loads((run / "adapter" / "adapter_config.json").read_text())
    assert adapter["peft_type"] == "PREFIX_TUNING" and adapter["num_virtual_tokens"] == 10  # the paper's 10


# ---------------------------------------------------------------------------------------------------------- the wire
def test_only_privatized_text_and_labels_cross_the_wire(env, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps({"private": t, "label": y}) + "\n" for t, y in PRIVATE[:4]))
    target = urlparse(env["url"])
    args = ["finetune", "--system", "rapt", "--data", str(data), "--model", "sst2", "--method", "lora", "--eta", "50",
            "--pos", "all", "--epochs", "1", "--batch-size", "4", "--encoder", str(env["encoder"]), "--cache-dir",
            str(tmp_path), "--seed", "0", "--poll", "0.05"]  # fmt: skip
    with RecordingProxy(target.hostname, target.port) as proxy:
        result = CliRunner().invoke(
            cli_app, [*args, "--url", proxy.url], env={"TEXTFREE_API_KEY": env["keys"]["alice"]}
        )
    assert result.exit_code == 0, result.output
    adapter = result.stdout.strip()
    assert adapter.startswith("ad_") and "4 examples privatized here at eta 50" in result.stderr
    assert "succeeded" in result.stderr
    sent = proxy.sent.replace(env["keys"]["alice"].encode(), b"")
    requests = http_requests(sent)
    lines = [line for line, _ in requests]
    assert lines[:5] == [
        "GET /v1/models/sst2 HTTP/1.1",
        "GET /v1/models/sst2/bundle HTTP/1.1",  # the client bundle: its manifest, then the plain tokens
        "GET /v1/models/sst2/bundle/plain_tokens.json HTTP/1.1",
        "POST /v1/datasets HTTP/1.1",
        "POST /v1/fine_tuning/jobs HTTP/1.1",
    ]
    assert all(line.startswith("GET /v1/fine_tuning/jobs/") for line in lines[5:])
    upload = json.loads(requests[3][1])
    assert set(upload) == {"model", "name", "examples", "labels"} and upload["labels"] == [y for _, y in PRIVATE[:4]]
    job = json.loads(requests[4][1])
    assert job["hyperparameters"]["method"] == "lora" and job["hyperparameters"]["epochs"] == 1
    released = [w for e in upload["examples"] for w in e["parts"][0].split()]
    private = [w for t, _ in PRIVATE[:4] for w in t.split()]
    assert sum(w not in released for w in private) >= len(private) // 2, released  # the check below means something
    tokenizer = load_hf_encoder(str(env["encoder"]))[0]
    allowed = " ".join(released + [w for e in upload["examples"] for w in e["plain"]])
    assert leaked_words(sent, " ".join(t for t, _ in PRIVATE[:4]), tokenizer, allowed=allowed) == []
    assert leaked_words(sent, " ".join(released), tokenizer) != []  # the recorder sees what is sent
    # the adapter answers `textfree ask --system rapt --adapter`, as the client does
    ask = ["ask", "--system", "rapt", "doctor prescribed medicine", "--url", env["url"], "--model", "sst2", "--adapter",
           adapter, "--encoder", str(env["encoder"]), "--cache-dir", str(tmp_path), "--seed", "5"]  # fmt: skip
    out = CliRunner().invoke(cli_app, ask, env={"TEXTFREE_API_KEY": env["keys"]["alice"]})
    assert out.exit_code == 0, out.output
    with _client(env, tmp_path) as client:
        direct = client.classify("doctor prescribed medicine", model="sst2", adapter=adapter, seed=5)
    assert out.stdout.strip() == str(direct.labels[0])
    assert f"{direct.probabilities[0][0]:.4f}" in out.stderr


# ---------------------------------------------------------------------------------------------------------- bad input
def test_bad_uploads_and_jobs_get_clear_4xx_and_nothing_is_stored(env, reference, tmp_path):
    body = _body(reference["uploaded"])
    one = body["examples"][0]
    payload = TextFreeLM.load(env["ppft_run"]).privatizer(75.0).privatize(["a private prompt"], seed=0).to_base64()
    uploads = [
        (body | {"labels": [2] + body["labels"][1:]}, 422, "invalid_request", "labels[0] is 2; model 'sst2' has the "
         "labels 0 to 1"),
        (body | {"labels": [-1] + body["labels"][1:]}, 422, "invalid_request", "labels[0] is -1"),
        (body | {"labels": [True] + body["labels"][1:]}, 422, "invalid_request", "labels.0"),
        (body | {"labels": ["1"] + body["labels"][1:]}, 422, "invalid_request", "labels.0"),
        (body | {"labels": body["labels"][:3]}, 422, "invalid_request", "labels has 3 entries; there are 16"),
        (body | {"examples": [one | {"parts": ["  "]}] + body["examples"][1:]}, 422, "invalid_request",
         "examples[0] has an empty sentence"),
        (body | {"examples": [], "labels": []}, 422, "invalid_request", "examples is empty"),
        (body | {"examples": body["examples"] * 2, "labels": body["labels"] * 2}, 413, "too_many_rows",
         "at most 20 per dataset"),
        (body | {"examples": [one | {"plain": one["plain"][:2]}]}, 422, "invalid_request", "2 plain tokens"),
        ({"model": "sst2", "examples": body["examples"]}, 422, "invalid_request", "give labels"),
        (body | {"payload_b64": payload}, 422, "invalid_request", "not payload_b64"),
        ({"model": "sst2", "payload_b64": payload, "targets": ["x"]}, 422, "invalid_request",
         "trains on examples privatized to text and their labels (examples, labels), not payload_b64, targets"),
        ({"model": "ddx", "examples": [one], "labels": [0]}, 422, "invalid_request",
         "model 'ddx' trains on a payload and targets (payload_b64, targets), not examples, labels"),
        (body | {"model": "nope"}, 404, "model_not_found", "nope"),
    ]  # fmt: skip
    app = create_app(ServerConfig(**{**env["config"].__dict__, "sqlite_path": str(tmp_path / "b.sqlite"),
                                     "data_dir": str(tmp_path / "b")}), registry=env["registry"])  # fmt: skip
    c = TestClient(app)  # no lifespan: no worker runs, so jobs stay queued
    try:
        for data, status, kind, words in uploads:
            r = c.post("/v1/datasets", json=data, headers=env["alice"])
            assert r.status_code == status, (words, r.text)
            assert r.json()["error"]["type"] == kind and words in r.json()["error"]["message"], (words, r.text)
        assert c.get("/v1/datasets", headers=env["alice"]).json()["data"] == []
        assert sorted((tmp_path / "b" / "datasets").iterdir()) == []
        mine = c.post("/v1/datasets", json=body, headers=env["alice"]).json()["id"]
        ppft = c.post("/v1/datasets", json={"model": "ddx", "payload_b64": payload, "targets": ["flu"]},
                      headers=env["alice"]).json()["id"]  # fmt: skip
        twin = c.post("/v1/datasets", json=body | {"model": "twin"}, headers=env["alice"]).json()["id"]
        theirs = c.post("/v1/datasets", json=body, headers=env["bob"]).json()["id"]
        jobs = [
            ({"model": "sst2", "datasets": [mine], "hyperparameters": {"method": "bogus"}}, 422,
             "hyperparameters.method must be one of lora, prompt_tuning, prefix_tuning, ia3, full"),
            ({"model": "ddx", "datasets": [ppft], "hyperparameters": {"method": "lora"}}, 422,
             "model 'ddx' (system 'ppft') trains one way and takes no method"),
            ({"model": "sst2", "datasets": [ppft]}, 400, "dataset '" + ppft + "' was uploaded for model 'ddx'"),
            ({"model": "ddx", "datasets": [mine]}, 400, "was uploaded for model 'sst2', not 'ddx'"),
            ({"model": "sst2", "datasets": [twin]}, 400, "was uploaded for model 'twin'"),
            ({"model": "sst2", "datasets": [theirs]}, 404, "no dataset"),
        ]  # fmt: skip
        for data, status, words in jobs:
            r = c.post("/v1/fine_tuning/jobs", json=data, headers=env["alice"])
            assert r.status_code == status and words in r.json()["error"]["message"], (words, r.text)
        ok = c.post("/v1/fine_tuning/jobs", json={"model": "sst2", "datasets": [mine], "hyperparameters": HP},
                    headers=env["alice"])  # fmt: skip
        assert ok.status_code == 201 and ok.json()["hyperparameters"]["method"] == "lora"
    finally:
        app.state.store.close()


def test_an_adapter_answers_for_its_tenant_and_model_only(env, reference):
    adapter = reference["job"]["adapter"]
    examples = reference["uploaded"].examples[:1]

    def ask(c, who, model="sst2", adapter_id=adapter):
        return c.post("/v1/classify", json={"model": model, "examples": examples, "adapter": adapter_id},
                      headers=env[who])  # fmt: skip

    with httpx.Client(base_url=env["url"]) as c:  # the module's server, whose database holds alice's adapter
        assert ask(c, "alice").status_code == 200
        theirs, missing = ask(c, "bob"), ask(c, "bob", adapter_id="ad_00000000000000000000")
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["error"]["type"] == "adapter_not_found"
        assert theirs.json()["error"]["message"].replace(adapter, "X") == missing.json()["error"]["message"].replace(
            "ad_00000000000000000000", "X"
        )
        assert c.get("/v1/models/sst2", headers=env["bob"]).json()["adapters"] == []
        twin = ask(c, "alice", model="twin")
        assert twin.status_code == 404 and "trained for model 'sst2', not 'twin'" in twin.json()["error"]["message"]
    no_db = {k: v for k, v in env["config"].__dict__.items() if k not in ("sqlite_path", "data_dir")}
    with TestClient(create_app(ServerConfig(**no_db), registry=env["registry"])) as c:
        r = ask(c, "alice")
        assert r.status_code == 404 and "runs without a database" in r.json()["error"]["message"]


# ---------------------------------------------------------------------------------------------------------- restart
def test_a_job_interrupted_by_a_restart_resumes_from_its_checkpoint(env, reference, tmp_path):
    config = {"sqlite_path": str(tmp_path / "r.sqlite"), "data_dir": str(tmp_path / "r")}
    with _serve(env, **config) as c:
        jobs = c.app.state.jobs
        jobs.step_hook = lambda job_id, step: jobs.request_stop() if step == 3 else None  # the server stops at step 3
        ds = c.post("/v1/datasets", json=_body(reference["uploaded"]), headers=env["alice"]).json()["id"]
        job = c.post("/v1/fine_tuning/jobs", json={"model": "sst2", "datasets": [ds], "hyperparameters": HP},
                     headers=env["alice"]).json()  # fmt: skip
        deadline = time.monotonic() + 120
        while "interrupted" not in [e["type"] for e in _events(c, env, job["id"])]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # left as a crash leaves it: 'running' at step 3, the newest checkpoint at step 2, with the reconstruction head
    run = tmp_path / "r" / "jobs" / job["id"]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000002"]
    trained = load_file(str(run / "checkpoints" / "step-000002" / "trainable.safetensors"))
    assert any(k.startswith("head.") for k in trained) and any("lora_" in k for k in trained)
    with _serve(env, **config) as c:  # a new server on the same database and data directory
        done = _wait(c, env, job["id"])
        kinds = [e["type"] for e in _events(c, env, job["id"])]
    assert done["status"] == "succeeded" and done["progress"]["resumed_from_step"] == 2
    assert done["progress"]["step"] == 8 and kinds.count("started") == 2 and "requeued" in kinds
    # resumed, not restarted: the same weights as the uninterrupted job, bit for bit
    ref, resumed = _weights(reference["dir"]), _weights(run)
    assert ref.keys() == resumed.keys() and all(torch.equal(ref[k], resumed[k]) for k in ref)


# ---------------------------------------------------------------------------------------------------------- CLI flags
def test_finetune_cli_refuses_bad_flags_and_rows_before_sending(tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text(json.dumps({"private": "a fine film", "label": 1}) + "\n")
    base = ["finetune", "--url", "http://127.0.0.1:9", "--model", "sst2", "--data", str(data)]
    cases = [
        (["--system", "nope"], "--system must be one of ppft, rapt"),
        (["--system", "rapt", "--epsilon", "5"], "--epsilon is for --system ppft (rapt takes --eta)"),
        (["--system", "rapt", "--no-noise"], "--no-noise is for --system ppft"),
        (["--method", "lora"], "--method is for --system rapt"),
        (["--eta", "5"], "--eta is for --system rapt (ppft takes --epsilon)"),
        (["--system", "rapt", "--method", "bogus"], "--method must be one of lora, prompt_tuning"),
        (["--system", "rapt", "--eta", "-1"], "--eta must be a number > 0"),
    ]
    for extra, words in cases:
        r = CliRunner().invoke(cli_app, [*base, *extra])
        assert r.exit_code == 2 and words in r.output, (extra, r.output)
    for line, words in (
        ({"private": "a fine film", "label": "pos"}, "'label' must be an integer >= 0"),
        ({"private": "a fine film", "label": True}, "'label' must be an integer >= 0"),
        ({"private": " ", "label": 0}, "'private' must be a non-empty string"),
        ({"private": "a fine film", "target": "x"}, "keys 'private', 'label' and optionally 'pair'"),
    ):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(json.dumps(line) + "\n")
        r = CliRunner().invoke(cli_app, ["finetune", "--system", "rapt", "--url", "http://127.0.0.1:9", "--model",
                                         "sst2", "--data", str(bad), "--retries", "0"])  # fmt: skip
        assert r.exit_code == 2 and f"{bad}:1:" in r.output and words in r.output, (line, r.output)


def test_client_refuses_mismatched_labels_before_sending(env, tmp_path):
    with _client(env, tmp_path) as client:
        with pytest.raises(ValueError, match="one label per text: 2 texts, 1 labels"):
            client.upload_examples(["a", "b"], [1], model="sst2")
        with pytest.raises(ValueError, match="every label must be an int"):
            client.upload_examples(["a", "b"], [1, "0"], model="sst2")
        with pytest.raises(ServerError) as info:
            client.upload_examples(["a fine film"], [7], model="sst2", seed=0)
        assert info.value.status == 422 and "labels[0] is 7" in str(info.value)
