"""Fine-tuning jobs end to end with a tiny model: a job adapts projection + LoRA on an uploaded dataset in a background
worker and yields an adapter that /v1/generate serves for its tenant only; events, cancel, limits, failure; and a
job stopped mid-way (server stopped) resumes on a new server from its checkpoint, bit-identical to an uninterrupted
job."""

import json
import threading
import time

import pytest
import torch
from fastapi.testclient import TestClient
from safetensors.torch import load_file

from textfree.ppft.model import TextFreeLM
from textfree.ppft.server import ServerModel
from textfree.ppft.serving import GenerateModel
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server.models import ModelRegistry
from textfree.server.testing import tenant_headers

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PRIVATE = [
    "the patient reports chest pain",
    "a rash after hiking",
    "fever and cough for a week",
    "sudden loss of vision",
    "pain in the lower back",
    "itching between the fingers",
]
PUBLIC = ["Options: angina, gout"] * 3 + [""] * 3
TARGETS = ["angina", "lyme disease", "influenza", "retinal detachment", "sciatica", "scabies"]
# 6 rows, batch 2, 2 epochs: 6 steps; a checkpoint every 2
HP = {
    "epochs": 2,
    "batch_size": 2,
    "lr": 0.05,
    "warmup_steps": 1,
    "save_every": 2,
    "log_every": 1,
    "seed": 0,
    "ema_decay": 0.5,
}
OCTET = {"Content-Type": "application/octet-stream"}


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("finetune")
    run = make_tiny_run(tmp, tiny_encoder_dir)
    config = ServerConfig(
        models={"tiny": str(run), "twin": str(run)},
        keys_path=str(tmp / "keys.json"),
        sqlite_path=str(tmp / "main.sqlite"),
        data_dir=str(tmp / "main-data"),
        rate_limit_per_minute=0,
        max_concurrent_jobs=1,
        max_jobs_per_tenant=2,
        max_job_steps=500,
    )
    tiny = GenerateModel.load("tiny", str(run))
    registry = ModelRegistry({"tiny": tiny, "twin": GenerateModel("twin", tiny.server)})  # two ids, one model in memory
    lm = TextFreeLM.load(run)
    payload = lm.privatizer(75.0).privatize(PRIVATE, seed=0, public=PUBLIC)
    return {
        "config": config,
        "registry": registry,
        "lm": lm,
        "run": run,
        "tmp": tmp,
        "payload": payload,
        **tenant_headers(tmp / "keys.json", "alice", "bob"),
    }


def serve(env, **overrides):
    return TestClient(create_app(ServerConfig(**{**env["config"].__dict__, **overrides}), registry=env["registry"]))


def upload(c, env, who="alice", model="tiny"):
    r = c.post(
        "/v1/datasets",
        json={"model": model, "payload_b64": env["payload"].to_base64(), "targets": TARGETS},
        headers=env[who],
    )
    assert r.status_code == 201, r.text
    return r.json()["id"]


def start(c, env, datasets, who="alice", **hp):
    r = c.post(
        "/v1/fine_tuning/jobs",
        json={"model": "tiny", "datasets": datasets, "hyperparameters": {**HP, **hp}},
        headers=env[who],
    )
    assert r.status_code == 201, r.text
    return r.json()


def wait_for(c, env, job_id, statuses, who="alice", timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = c.get(f"/v1/fine_tuning/jobs/{job_id}", headers=env[who]).json()
        if job["status"] in statuses:
            return job
        time.sleep(0.05)
    raise AssertionError(f"job {job_id} still {job['status']} after {timeout} s")


def events(c, env, job_id, who="alice"):
    return c.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"limit": 1000}, headers=env[who]).json()["data"]


def weights(run) -> dict:
    return {
        f"{rel}:{k}": v
        for rel in ("projection/model.safetensors", "adapter/adapter_model.safetensors")
        for k, v in load_file(str(run / rel)).items()
    }


@pytest.fixture(scope="module")
def reference(env):
    """One uninterrupted job of alice's, on the module's database."""
    with serve(env) as c:
        dataset = upload(c, env)
        job = start(c, env, [dataset])
        assert job["status"] == "queued" and job["progress"]["total_steps"] == 6 and job["id"].startswith("ftjob_")
        job = wait_for(c, env, job["id"], ("succeeded", "failed", "cancelled"))
        return {
            "job": job,
            "dataset": dataset,
            "events": events(c, env, job["id"]),
            "dir": env["config"].data_path / "jobs" / job["id"],
        }


def test_a_job_trains_an_adapter_that_generate_serves(env, reference):
    job = reference["job"]
    assert job["status"] == "succeeded", job
    assert job["progress"]["step"] == job["progress"]["total_steps"] == 6 and job["adapter"].startswith("ad_")
    kinds = [e["type"] for e in reference["events"]]
    assert kinds[:2] == ["queued", "started"] and kinds[-1] == "succeeded" and kinds.count("progress") == 6
    assert kinds.count("checkpoint") == 2  # steps 2 and 4 (step 6 is the end)
    losses = [e["data"]["loss"] for e in reference["events"] if e["type"] == "progress"]
    assert all(isinstance(x, float) and x > 0 for x in losses)
    # the adapter: the server part only, trained (projection + LoRA moved), checkpoints removed
    run = reference["dir"]
    assert (run / "adapter").is_dir() and (run / "projection").is_dir()
    assert not (run / "encoder").exists() and not (run / "checkpoints").exists()
    assert (
        json.loads((run / "train_config.json").read_text())["config"]["ema_decay"] == 0.5
    )  # the saved weights are the average
    base, tuned = weights(env["run"]), weights(run)
    assert base.keys() == tuned.keys() and all(
        not torch.equal(base[k], tuned[k]) for k in base if "lora_B" in k or "projection" in k
    )
    adapted = ServerModel.load(run)
    probe = (
        env["lm"].privatizer(75.0).privatize(["chest pain again", "a new rash"], seed=5, public=["Options: angina", ""])
    )
    with serve(env) as c:
        cards = {m["id"]: m for m in c.get("/v1/models", headers=env["alice"]).json()["data"]}
        assert [a["id"] for a in cards["tiny"]["adapters"]] == [job["adapter"]] and cards["twin"]["adapters"] == []
        assert [a["id"] for a in c.get("/v1/models/tiny", headers=env["alice"]).json()["adapters"]] == [job["adapter"]]
        raw = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 3, "adapter": job["adapter"]},
            content=probe.to_bytes(),
            headers={**env["alice"], **OCTET},
        )
        js = c.post(
            "/v1/generate",
            json={"model": "tiny", "payload_b64": probe.to_base64(), "max_new_tokens": 3, "adapter": job["adapter"]},
            headers=env["alice"],
        )
        plain = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 3},
            content=probe.to_bytes(),
            headers={**env["alice"], **OCTET},
        )
        twin = c.post(
            "/v1/generate",
            params={"model": "twin", "max_new_tokens": 3, "adapter": job["adapter"]},
            content=probe.to_bytes(),
            headers={**env["alice"], **OCTET},
        )
    expected = adapted.answer(probe, max_new_tokens=3)
    for r in (raw, js):
        assert r.status_code == 200, r.text
        assert r.json()["answers"] == expected and r.json()["adapter"] == job["adapter"]
    assert plain.json()["answers"] == env["registry"].models["tiny"].server.answer(probe, max_new_tokens=3)
    assert twin.status_code == 404 and "trained for model 'tiny'" in twin.json()["error"]["message"]


def test_tenants_cannot_see_or_use_each_others_jobs_datasets_or_adapters(env, reference):
    job = reference["job"]
    probe = env["payload"].to_bytes()
    with serve(env) as c:
        bob = env["bob"]
        assert c.get("/v1/fine_tuning/jobs", headers=bob).json()["data"] == []
        assert [j["id"] for j in c.get("/v1/fine_tuning/jobs", headers=env["alice"]).json()["data"]] == [job["id"]]
        for path in (f"/v1/fine_tuning/jobs/{job['id']}", f"/v1/fine_tuning/jobs/{job['id']}/events"):
            theirs, missing = (
                c.get(path, headers=bob),
                c.get(path.replace(job["id"], "ftjob_00000000000000000000"), headers=bob),
            )
            assert theirs.status_code == missing.status_code == 404
            assert theirs.json()["error"]["message"].replace(job["id"], "X") == missing.json()["error"][
                "message"
            ].replace("ftjob_00000000000000000000", "X")
        assert c.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=bob).status_code == 404
        # bob cannot train on alice's dataset, nor generate with alice's adapter, nor see it on a card
        r = c.post("/v1/fine_tuning/jobs", json={"model": "tiny", "datasets": [reference["dataset"]]}, headers=bob)
        assert r.status_code == 404 and r.json()["error"]["type"] == "dataset_not_found"
        r = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 2, "adapter": job["adapter"]},
            content=probe,
            headers={**bob, **OCTET},
        )
        missing = c.post(
            "/v1/generate",
            params={"model": "tiny", "max_new_tokens": 2, "adapter": "ad_00000000000000000000"},
            content=probe,
            headers={**bob, **OCTET},
        )
        assert r.status_code == missing.status_code == 404 and r.json()["error"]["type"] == "adapter_not_found"
        assert r.json()["error"]["message"].replace(job["adapter"], "X") == missing.json()["error"]["message"].replace(
            "ad_00000000000000000000", "X"
        )
        assert c.get("/v1/models/tiny", headers=bob).json()["adapters"] == []
        assert c.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=env["alice"]).status_code == 200


def test_events_page_and_stream_as_server_sent_events(env, reference):
    job_id = reference["job"]["id"]
    with serve(env) as c:
        page = c.get(
            f"/v1/fine_tuning/jobs/{job_id}/events", params={"after": 2, "limit": 2}, headers=env["alice"]
        ).json()
        assert [e["seq"] for e in page["data"]] == [3, 4] and page["has_more"] and page["status"] == "succeeded"
        last = c.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"after": 2**63 - 1}, headers=env["alice"])
        assert last.status_code == 200 and last.json()["data"] == []
        for after in (2**63, 10**20):  # beyond SQLite's INTEGER: a 422, not an OverflowError's 500
            r = c.get(f"/v1/fine_tuning/jobs/{job_id}/events", params={"after": after}, headers=env["alice"])
            assert r.status_code == 422, r.text
        with c.stream(
            "GET", f"/v1/fine_tuning/jobs/{job_id}/events", params={"stream": "true"}, headers=env["alice"]
        ) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            text = "".join(r.iter_text())
    blocks = [dict(line.split(": ", 1) for line in b.splitlines()) for b in text.strip().split("\n\n")]
    assert [b["event"] for b in blocks] == [e["type"] for e in reference["events"]] + ["end"]
    assert json.loads(blocks[-1]["data"])["status"] == "succeeded"


def test_job_validation_limits_queue_cancel_and_idempotency(env, reference, tmp_path):
    # no lifespan: no worker runs, so jobs stay queued
    app = create_app(
        ServerConfig(
            **{**env["config"].__dict__, "sqlite_path": str(tmp_path / "q.sqlite"), "data_dir": str(tmp_path / "q")}
        ),
        registry=env["registry"],
    )
    c = TestClient(app)
    try:
        ds = upload(c, env)
        twin = upload(c, env, model="twin")
        bad = [
            ({"model": "tiny", "datasets": [ds], "hyperparameters": {"epochs": 0}}, 422, "epochs"),
            ({"model": "tiny", "datasets": [ds], "hyperparameters": {"lr": -1}}, 422, "lr"),
            ({"model": "tiny", "datasets": [ds], "hyperparameters": {"learning_rate": 0.1}}, 422, "learning_rate"),
            ({"model": "tiny", "datasets": [ds], "hyperparameters": {"ema_decay": 1}}, 422, "ema_decay"),
            (
                {"model": "tiny", "datasets": [ds], "hyperparameters": {"epochs": 100, "batch_size": 1}},
                422,
                "600 steps",
            ),
            ({"model": "tiny", "datasets": [ds, ds]}, 422, "listed twice"),
            ({"model": "tiny", "datasets": []}, 422, "datasets"),
            ({"model": "tiny", "datasets": [twin]}, 400, "uploaded for model 'twin'"),
            ({"model": "nope", "datasets": [ds]}, 404, "nope"),
        ]
        for data, status, words in bad:
            r = c.post("/v1/fine_tuning/jobs", json=data, headers=env["alice"])
            assert r.status_code == status and words in r.json()["error"]["message"], r.text
        first = start(c, env, [ds])
        key = {**env["alice"], "Idempotency-Key": "job-2"}
        second = c.post("/v1/fine_tuning/jobs", json={"model": "tiny", "datasets": [ds]}, headers=key)
        retry = c.post("/v1/fine_tuning/jobs", json={"model": "tiny", "datasets": [ds]}, headers=key)
        assert (second.status_code, retry.status_code) == (201, 200) and retry.json()["id"] == second.json()["id"]
        over = c.post("/v1/fine_tuning/jobs", json={"model": "tiny", "datasets": [ds]}, headers=env["alice"])
        assert over.status_code == 429 and over.json()["error"]["type"] == "too_many_jobs"
        assert start(c, env, [upload(c, env, who="bob")], who="bob")["status"] == "queued"  # a per-tenant limit
        cancelled = c.post(f"/v1/fine_tuning/jobs/{first['id']}/cancel", headers=env["alice"]).json()
        assert cancelled["status"] == "cancelled" and cancelled["finished_at"] is not None
        assert [e["type"] for e in events(c, env, first["id"])] == ["queued", "cancelled"]
        assert start(c, env, [ds])["status"] == "queued"  # room again
        assert (
            c.post(f"/v1/fine_tuning/jobs/{first['id']}/cancel", headers=env["alice"]).json()["status"] == "cancelled"
        )
    finally:
        app.state.store.close()


def test_cancel_a_running_job_and_a_failing_job(env, reference, tmp_path):
    config = {"sqlite_path": str(tmp_path / "c.sqlite"), "data_dir": str(tmp_path / "c")}
    reached, release = threading.Event(), threading.Event()

    def hook(job_id, step):
        if step == 2:
            reached.set()
            release.wait(30)

    with serve(env, **config) as c:
        c.app.state.jobs.step_hook = hook
        ds = upload(c, env)
        job = start(c, env, [ds])
        assert reached.wait(60)
        r = c.post(f"/v1/fine_tuning/jobs/{job['id']}/cancel", headers=env["alice"]).json()
        assert r["status"] == "running" and r["cancel_requested"]
        release.set()
        done = wait_for(c, env, job["id"], ("succeeded", "failed", "cancelled"))
        assert done["status"] == "cancelled" and done["progress"]["step"] == 2 and done["adapter"] is None
        assert [e["type"] for e in events(c, env, job["id"])][-2:] == ["cancel_requested", "cancelled"]
        # a job whose data cannot be read fails with a message; the server and the worker keep going
        broken = upload(c, env)
        (tmp_path / "c" / "datasets" / broken / "rows.json").write_text('{"format": "something else"}')
        failed = wait_for(c, env, start(c, env, [broken])["id"], ("succeeded", "failed", "cancelled"))
        assert failed["status"] == "failed" and "not a textfree.dataset v1 file" in failed["error"]
        assert c.get("/health").status_code == 200


def test_a_job_interrupted_by_a_restart_resumes_from_its_checkpoint(env, reference, tmp_path):
    config = {"sqlite_path": str(tmp_path / "r.sqlite"), "data_dir": str(tmp_path / "r")}
    with serve(env, **config) as c:
        jobs = c.app.state.jobs
        jobs.step_hook = lambda job_id, step: (
            jobs.request_stop() if step == 3 else None
        )  # the server stops after step 3
        job = start(c, env, [upload(c, env)])
        deadline = time.monotonic() + 120
        while "interrupted" not in [e["type"] for e in events(c, env, job["id"])]:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    # left as a crash leaves it: 'running' at step 3 in the database, the newest checkpoint at step 2
    run = tmp_path / "r" / "jobs" / job["id"]
    assert [p.name for p in (run / "checkpoints").iterdir()] == ["step-000002"]
    with serve(env, **config) as c:  # a new server on the same database and data directory
        interrupted = c.get(f"/v1/fine_tuning/jobs/{job['id']}", headers=env["alice"]).json()
        done = wait_for(c, env, job["id"], ("succeeded", "failed", "cancelled"))
        kinds = [e["type"] for e in events(c, env, job["id"])]
    assert interrupted["progress"]["step"] >= 3
    assert (
        done["status"] == "succeeded" and done["progress"]["resumed_from_step"] == 2 and done["progress"]["step"] == 6
    )
    assert kinds.count("started") == 2 and "interrupted" in kinds and "requeued" in kinds
    assert json.loads((run / "summary.json").read_text())["resumed_from_step"] == 2
    # resumed, not restarted: the same weights as the uninterrupted job, bit for bit
    ref, resumed = weights(reference["dir"]), weights(run)
    assert ref.keys() == resumed.keys() and all(torch.equal(ref[k], resumed[k]) for k in ref)


def test_an_unexpected_failure_does_not_leak_server_details(env, tmp_path):
    config = {"sqlite_path": str(tmp_path / "f.sqlite"), "data_dir": str(tmp_path / "f")}

    def hook(job_id, step):
        raise RuntimeError("cannot write /srv/textfree/secret/checkpoint")

    with serve(env, **config) as c:
        c.app.state.jobs.step_hook = hook
        job = start(c, env, [upload(c, env)])
        failed = wait_for(c, env, job["id"], ("succeeded", "failed", "cancelled"))
        assert failed["status"] == "failed" and "RuntimeError" in failed["error"] and job["id"] in failed["error"]
        assert "/srv" not in failed["error"] and "secret" not in failed["error"]
