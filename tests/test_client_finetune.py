"""Client.upload_dataset / create_fine_tuning_job / wait_job and `textfree finetune` against a real server on loopback,
and NO PRIVATE TEXT ON THE WIRE during a fine-tuning run (a recording TCP proxy sees every byte the client sends; the
targets and public text are sent in clear by design, so only the private words that are not also in them count)."""

import base64
import json
import re
from urllib.parse import urlparse

import pytest
from typer.testing import CliRunner

from textfree.cli import app as cli_app
from textfree.client import Client, ServerError
from textfree.encoders import ContextualEncoder
from textfree.ppft.testing import make_tiny_run
from textfree.server import ServerConfig, create_app
from textfree.server.auth import KeyStore
from textfree.server.testing import RecordingProxy, leaked_words, serve_in_thread

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

# (no private word is also protocol vocabulary such as the events poll's "after" parameter)
ROWS = [
    {
        "private": "Bartholomew coughed saffron dust near the Reykjavik lighthouse",
        "target": "saffron lung",
        "public": "Options: saffron lung, flu",
    },
    {"private": "Wilhelmina sneezed beside marmalade crates in Tbilisi", "target": "marmalade allergy"},
    {
        "private": "Ezekiel's kneecap clicked during the trampoline marathon",
        "target": "trampoline knee",
        "public": "Options: trampoline knee",
    },
    {"private": "Philippa saw zigzag lights before a thunderous migraine", "target": "migraine aura"},
]
FAST = {"epochs": 1, "batch_size": 2, "lr": 0.05, "warmup_steps": 1, "log_every": 1}


@pytest.fixture(scope="module")
def server(tmp_path_factory, tiny_encoder_dir):
    tmp = tmp_path_factory.mktemp("client-finetune")
    run = make_tiny_run(tmp, tiny_encoder_dir)
    key = KeyStore(tmp / "keys.json").add_key("alice")
    config = ServerConfig(
        models={"tiny": str(run)}, keys_path=str(tmp / "keys.json"), sqlite_path=str(tmp / "db.sqlite")
    )
    app = create_app(config)
    with serve_in_thread(app) as url:
        yield {"url": url, "key": key, "encoder": tiny_encoder_dir, "tmp": tmp}


def test_client_uploads_trains_waits_and_generates_with_the_adapter(server):
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        ds = client.upload_dataset(
            [r["private"] for r in ROWS],
            [r["target"] for r in ROWS],
            [r.get("public", "") for r in ROWS],
            model="tiny",
            name="clinic",
            seed=0,
        )
        assert ds["rows"] == 4 and ds["name"] == "clinic" and client.dataset(ds["id"]) == ds
        assert ds["id"] in [d["id"] for d in client.datasets()]
        job = client.create_fine_tuning_job(model="tiny", datasets=ds["id"], **FAST)
        seen = []
        done = client.wait_job(job["id"], poll=0.05, timeout=120, on_event=seen.append)
        assert done["status"] == "succeeded" and done["progress"]["step"] == 2
        assert [e["type"] for e in seen][0] == "queued" and [e["type"] for e in seen][-1] == "succeeded"
        assert sum(e["type"] == "progress" for e in seen) == 2 and job["id"] in [j["id"] for j in client.jobs()]
        assert done["adapter"] in [a["id"] for a in client.model_card("tiny")["adapters"]]
        answer = client.generate(
            "a new private question", model="tiny", adapter=done["adapter"], seed=0, max_new_tokens=2
        )
        assert len(answer.answers) == 1 and answer.usage["rows"] == 1
        with pytest.raises(ServerError) as info:
            client.generate("another one", model="tiny", adapter="ad_00000000000000000000", max_new_tokens=2)
        assert info.value.status == 404 and info.value.type == "adapter_not_found"
        with pytest.raises(ValueError, match="one target per text"):
            client.upload_dataset(["a", "b"], ["only one"], model="tiny")


def test_no_private_text_on_the_wire_finetune_cli(server, tmp_path):
    data = tmp_path / "train.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    tokenizer = ContextualEncoder.from_pretrained(server["encoder"]).tokenizer
    target = urlparse(server["url"])
    with RecordingProxy(target.hostname, target.port) as proxy:
        result = CliRunner().invoke(
            cli_app,
            [
                "finetune",
                "--data",
                str(data),
                "--url",
                proxy.url,
                "--model",
                "tiny",
                "--encoder",
                str(server["encoder"]),
                "--seed",
                "0",
                "--epochs",
                "1",
                "--batch-size",
                "2",
                "--lr",
                "0.05",
                "--poll",
                "0.05",
            ],
            env={"TEXTFREE_API_KEY": server["key"]},
        )
    assert result.exit_code == 0, result.output
    assert result.stdout.strip().startswith("ad_") and "uploaded" in result.stderr and "succeeded" in result.stderr
    sent = proxy.sent.replace(server["key"].encode(), b"")
    assert b"POST /v1/datasets" in sent and b"POST /v1/fine_tuning/jobs" in sent
    # the payload travels as base64 in JSON: check the bytes it stands for (random base64 spells short words by chance)
    sent, n = re.subn(
        rb'"payload_b64":\s*"([A-Za-z0-9+/=]+)"', lambda m: b'"payload_b64": ' + base64.b64decode(m.group(1)), sent
    )
    assert n == 1
    clear = " ".join(r["target"] + " " + r.get("public", "") for r in ROWS)  # sent in clear by design
    private = " ".join(r["private"] for r in ROWS)
    assert leaked_words(sent, private, tokenizer, allowed=clear) == []
    # the recorder works and the check would flag text: the targets are in the bytes
    assert b"marmalade allergy" in sent and leaked_words(sent, "marmalade trampoline", tokenizer)


def test_finetune_cli_refuses_bad_flags_and_data(server, tmp_path):
    runner = CliRunner()
    base = [
        "finetune",
        "--url",
        server["url"],
        "--model",
        "tiny",
        "--encoder",
        str(server["encoder"]),
        "--retries",
        "0",
    ]
    env = {"TEXTFREE_API_KEY": server["key"]}
    good = tmp_path / "ok.jsonl"
    good.write_text(json.dumps(ROWS[0]) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROWS[0]) + "\n" + json.dumps({"private": "no target here"}) + "\n")
    cases = [
        (["--data", str(good), "--epochs", "0"], "--epochs must be >= 1"),
        (["--data", str(good), "--lr", "-1"], "--lr must be a number > 0"),
        (["--data", str(good), "--batch-size", "0"], "--batch-size must be >= 1"),
        (["--data", str(good), "--epsilon", "5", "--no-noise"], "not both"),
        (["--data", str(bad)], "bad.jsonl:2: 'target' must be a non-empty string"),
        (["--data", str(tmp_path / "missing.jsonl")], "no such file"),
        (["--data", "no-such-dataset"], "neither a file nor the id or name"),
    ]
    for args, words in cases:
        result = runner.invoke(cli_app, base + args, env=env)
        assert result.exit_code == 2 and words in " ".join(result.stderr.split()), (args, result.stderr)
    # an uploaded dataset by its name; --no-wait prints the job id; a server refusal is exit 1 with its message
    with Client(server["url"], api_key=server["key"], encoder=server["encoder"]) as client:
        client.upload_dataset(["a private line"], ["an answer"], model="tiny", name="named-set", seed=0)
    result = runner.invoke(cli_app, base + ["--data", "named-set", "--no-wait", "--max-steps", "1"], env=env)
    assert result.exit_code == 0 and result.stdout.strip().startswith("ftjob_"), result.output
    result = runner.invoke(cli_app, base + ["--data", "named-set", "--epochs", "100000"], env=env)
    assert result.exit_code == 1 and "invalid_request" in result.stderr
