"""POST/GET /v1/datasets: uploads validated like /v1/generate payloads, stored whole or not at all (SQLite + files),
persistent across a restart, idempotent with an Idempotency-Key, and visible to their tenant only."""

import base64
import json
import sqlite3

import pytest
from fastapi.testclient import TestClient

from textfree.encoders import make_tiny_encoder_dir
from textfree.payload import Payload
from textfree.ppft.model import TextFreeLM
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server import datasets as datasets_module
from textfree.server.models import ModelRegistry
from textfree.server.store import Store, StoreError
from textfree.server.testing import tenant_headers

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

PRIVATE = ["a first private prompt", "the second one", "third and last"]
TARGETS = ["alpha", "beta", "gamma"]
PUBLIC = ["Options: alpha, beta", "Options: beta, gamma", ""]


@pytest.fixture(scope="module")
def env(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("datasets")
    run = make_tiny_run(tmp, tiny_encoder_dir)
    config = ServerConfig(
        models={"tiny": str(run)},
        keys_path=str(tmp / "keys.json"),
        sqlite_path=str(tmp / "db" / "textfree.sqlite"),
        max_dataset_rows=4,
        max_dataset_bytes=64 * 1024,
        rate_limit_per_minute=0,
    )
    return {
        "config": config,
        "registry": ModelRegistry.load(config),
        "lm": TextFreeLM.load(run),
        "tmp": tmp,
        **tenant_headers(tmp / "keys.json", "alice", "bob"),
    }


def serve(env, **overrides):
    config = ServerConfig(**{**env["config"].__dict__, **overrides})
    return TestClient(create_app(config, registry=env["registry"]))


def body(env, texts=PRIVATE, targets=TARGETS, public=None, **extra):
    payload = env["lm"].privatizer(75.0).privatize(list(texts), seed=0, public=(PUBLIC * 2)[: len(texts)])
    return {"model": "tiny", "payload_b64": payload.to_base64(), "targets": list(targets), "public": public, **extra}


def stored_dirs(env):
    data = env["config"].data_path
    return sorted(p.name for p in (data / "datasets").iterdir()), sorted(p.name for p in (data / "tmp").iterdir())


def test_upload_list_get_persist_and_idempotency(env):
    with serve(env) as c:
        r = c.post("/v1/datasets", json=body(env, name="my-set"), headers=env["alice"])
        assert r.status_code == 201, r.text
        ds = r.json()
        assert (
            ds["object"] == "dataset"
            and ds["id"].startswith("ds_")
            and ds["name"] == "my-set"
            and ds["model"] == "tiny"
        )
        assert ds["rows"] == 3 and ds["privacy"]["worst_case_row"]["epsilon"] > 0
        assert c.get(f"/v1/datasets/{ds['id']}", headers=env["alice"]).json() == ds
        assert [d["id"] for d in c.get("/v1/datasets", headers=env["alice"]).json()["data"]] == [ds["id"]]
        # a retry with the same Idempotency-Key returns the same dataset and stores nothing new
        again = c.post("/v1/datasets", json=body(env), headers={**env["alice"], "Idempotency-Key": "k-1"})
        retry = c.post("/v1/datasets", json=body(env), headers={**env["alice"], "Idempotency-Key": "k-1"})
        assert (again.status_code, retry.status_code) == (201, 200) and retry.json()["id"] == again.json()["id"]
        assert len(c.get("/v1/datasets", headers=env["alice"]).json()["data"]) == 2
    # on disk: the validated payload (public text in its header) and the targets; nothing pickled
    d = env["config"].data_path / "datasets" / ds["id"]
    payload = Payload.load(d / "payload.safetensors")
    assert (
        payload.batch_size == 3
        and payload.public == PUBLIC
        and json.loads((d / "rows.json").read_text())["targets"] == TARGETS
    )
    assert ds["bytes"] == (d / "payload.safetensors").stat().st_size
    # a new server process on the same database and directory sees the same datasets
    with serve(env) as c:
        listed = c.get("/v1/datasets", headers=env["alice"]).json()["data"]
        assert {x["id"] for x in listed} == {ds["id"], again.json()["id"]}
        # JSON 'public' overrides the payload's own, as for /v1/generate
        r = c.post("/v1/datasets", json=body(env, public=["x", "y", "z"]), headers=env["alice"])
    assert Payload.load(env["config"].data_path / "datasets" / r.json()["id"] / "payload.safetensors").public == [
        "x",
        "y",
        "z",
    ]


def test_uploads_are_checked_like_generate_payloads_and_nothing_bad_is_stored(env, tmp_path):
    other = TextFreeLM.load(
        make_tiny_run(tmp_path, make_tiny_encoder_dir(tmp_path / "enc", hidden=32, layers=2, heads=2, seed=1))
    )
    alien = other.privatizer(75.0).privatize(PRIVATE, seed=0).to_base64()
    k8 = env["lm"].privatizer(75.0, k=8).privatize(PRIVATE, seed=0).to_base64()
    raw = base64.b64decode(body(env)["payload_b64"])
    five = body(env, texts=PRIVATE + ["four", "five"], targets=TARGETS + ["d", "e"])
    cases = [
        ({**body(env), "payload_b64": alien}, 400, "payload_mismatch", "sha256"),
        ({**body(env), "payload_b64": k8}, 400, "payload_mismatch", "k=8"),
        ({**body(env), "payload_b64": "not base64!"}, 400, "invalid_payload", "base64"),
        ({**body(env), "payload_b64": base64.b64encode(raw[:-9]).decode()}, 400, "invalid_payload", "truncated"),
        (body(env, targets=["only one"]), 422, "invalid_request", "1 entries; the payload has 3 rows"),
        (body(env, targets=["a", " ", "c"]), 422, "invalid_request", "targets[1] is empty"),
        (body(env, targets=["a", "b", "c" * 5000]), 422, "invalid_request", "targets[2] has 5000 characters"),
        (five, 413, "too_many_rows", "at most 4"),
        ({**body(env), "model": "nope"}, 404, "model_not_found", "nope"),
        ({**body(env), "surprise": 1}, 422, "invalid_request", "surprise"),
        ({**body(env), "public": ["too", "few"]}, 422, "invalid_request", "public must be a list of 3"),
    ]
    with serve(env, sqlite_path=str(tmp_path / "db.sqlite"), data_dir=None) as c:
        for data, status, kind, words in cases:
            r = c.post("/v1/datasets", json=data, headers=env["bob"])
            assert r.status_code == status, (kind, r.text)
            assert r.json()["error"]["type"] == kind and words in r.json()["error"]["message"], r.text
        big = c.post(
            "/v1/datasets",
            content=b"{" + b" " * 70_000 + b"}",
            headers={**env["bob"], "Content-Type": "application/json"},
        )
        assert big.status_code == 413 and big.json()["error"]["type"] == "body_too_large"
        octet = c.post("/v1/datasets", content=raw, headers={**env["bob"], "Content-Type": "application/octet-stream"})
        assert octet.status_code == 415
        assert c.get("/v1/datasets", headers=env["bob"]).json()["data"] == []
        assert c.get("/health").status_code == 200
    data = tmp_path / "textfree-data"  # data_dir defaults to beside the database
    assert (
        sorted(p.name for p in (data / "datasets").iterdir()) == []
        and sorted(p.name for p in (data / "tmp").iterdir()) == []
    )


def test_an_upload_is_stored_whole_or_not_at_all(env, tmp_path, monkeypatch):
    config = {"sqlite_path": str(tmp_path / "db.sqlite"), "data_dir": str(tmp_path / "data")}
    real_write = datasets_module.atomic_write_bytes

    def fail_on_rows(path, data, **kw):  # the payload file is written, then the disk "fills up"
        if path.name == "rows.json":
            raise OSError(28, "No space left on device")
        return real_write(path, data, **kw)

    with serve(env, **config) as c:
        monkeypatch.setattr(datasets_module, "atomic_write_bytes", fail_on_rows)
        r = c.post("/v1/datasets", json=body(env), headers=env["alice"])
        assert r.status_code == 500 and r.json()["error"]["type"] == "internal_error"
        monkeypatch.setattr(datasets_module, "atomic_write_bytes", real_write)
        store = c.app.state.store
        monkeypatch.setattr(
            store, "add_dataset", lambda values: (_ for _ in ()).throw(sqlite3.OperationalError("disk I/O error"))
        )
        r = c.post("/v1/datasets", json=body(env), headers=env["alice"])
        assert r.status_code == 500
        monkeypatch.undo()
        assert c.get("/v1/datasets", headers=env["alice"]).json()["data"] == []
        assert (
            sorted((tmp_path / "data" / "datasets").iterdir()) == []
            and sorted((tmp_path / "data" / "tmp").iterdir()) == []
        )
        ok = c.post("/v1/datasets", json=body(env), headers=env["alice"]).json()["id"]
    # what a crash mid-upload leaves (a temporary, a directory no row names) is removed at the next start
    (tmp_path / "data" / "tmp" / "ds_x.partial").mkdir()
    (tmp_path / "data" / "datasets" / "ds_orphan").mkdir()
    with serve(env, **config) as c:
        assert [d["id"] for d in c.get("/v1/datasets", headers=env["alice"]).json()["data"]] == [ok]
    assert [p.name for p in (tmp_path / "data" / "datasets").iterdir()] == [ok] and not any(
        (tmp_path / "data" / "tmp").iterdir()
    )


def test_tenants_see_only_their_own_datasets(env, tmp_path):
    with serve(env, sqlite_path=str(tmp_path / "db.sqlite"), data_dir=str(tmp_path / "data")) as c:
        mine = c.post("/v1/datasets", json=body(env), headers=env["alice"]).json()["id"]
        assert c.get("/v1/datasets", headers=env["bob"]).json()["data"] == []
        theirs = c.get(f"/v1/datasets/{mine}", headers=env["bob"])
        missing = c.get("/v1/datasets/ds_00000000000000000000", headers=env["bob"])
        assert theirs.status_code == missing.status_code == 404
        assert theirs.json()["error"]["type"] == missing.json()["error"]["type"] == "dataset_not_found"
        # the same answer, whether the id exists for someone else or not at all
        assert theirs.json()["error"]["message"].replace(mine, "ID") == missing.json()["error"]["message"].replace(
            "ds_00000000000000000000", "ID"
        )
        assert c.get(f"/v1/datasets/{mine}", headers=env["alice"]).status_code == 200
        assert c.get("/v1/datasets").status_code == 401


def test_without_a_database_the_routes_are_501_and_a_data_dir_is_locked(env, tmp_path):
    with serve(env, sqlite_path=None) as c:
        r = c.post("/v1/datasets", json=body(env), headers=env["alice"])
        assert (
            r.status_code == 501
            and r.json()["error"]["type"] == "fine_tuning_disabled"
            and "--db" in r.json()["error"]["message"]
        )
        assert c.get("/v1/fine_tuning/jobs", headers=env["alice"]).status_code == 501
    first = Store(tmp_path / "a.sqlite", tmp_path / "data")
    with pytest.raises(StoreError, match="in use by another server process"):
        Store(tmp_path / "b.sqlite", tmp_path / "data")
    first.close()
    Store(tmp_path / "a.sqlite", tmp_path / "data").close()  # released on close
    with pytest.raises(ValueError, match="data_dir is set but sqlite_path is not"):
        ServerConfig(models={"tiny": "x"}, auth=False, data_dir=str(tmp_path))


def test_serve_cli_passes_db_and_data_dir_and_reports_a_locked_directory(env, tmp_path):
    from typer.testing import CliRunner

    from textfree.cli import app as cli_app

    held = Store(tmp_path / "other.sqlite", tmp_path / "data")
    try:
        result = CliRunner().invoke(
            cli_app,
            [
                "serve",
                "--model",
                f"tiny={env['config'].models['tiny']}",
                "--no-auth",
                "--db",
                str(tmp_path / "db.sqlite"),
                "--data-dir",
                str(tmp_path / "data"),
                "--max-concurrent-jobs",
                "2",
            ],
        )
    finally:
        held.close()
    assert result.exit_code == 2 and "in use by another server process" in " ".join(result.stderr.split())
    result = CliRunner().invoke(
        cli_app,
        [
            "serve",
            "--model",
            f"tiny={env['config'].models['tiny']}",
            "--no-auth",
            "--db",
            str(tmp_path / "db.sqlite"),
            "--max-concurrent-jobs",
            "0",
        ],
    )
    assert result.exit_code == 2 and "max_concurrent_jobs must be an integer >= 1" in result.stderr
