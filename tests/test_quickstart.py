"""``textfree quickstart``: the packaged FAQ is well-formed; the search sends nothing but payloads (no question text,
no token ids: a recording proxy sees every byte); flag errors name the flag before anything starts; the server
process is stopped on an error; and the command itself, run as a user runs it with the real all-MiniLM-L6-v2, prints
its table, reaches the stated clean accuracy and leaves no server behind."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest
from typer.testing import CliRunner

from textfree.cli import app as cli_app
from textfree.quickstart.corpus import Answer, CorpusError, Faq, Question, load_faq, parse_faq
from textfree.quickstart.report import TABLE_TITLE

pytestmark = pytest.mark.filterwarnings("ignore::textfree.rng.InsecureRandomnessWarning")

#: The bar the packaged corpus reaches with clean all-MiniLM-L6-v2 embeddings (measured: top-1 0.88, top-3 0.96).
CLEAN_TOP1_BAR = 0.8


def _gone(pid: int, timeout: float = 10.0) -> bool:
    """Whether process ``pid`` no longer runs (a zombie awaiting its reaper counts as gone)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        stat = Path(f"/proc/{pid}/stat")
        if stat.exists() and stat.read_text().split(") ", 1)[-1].startswith("Z"):
            return True
        time.sleep(0.1)
    return False


# ------------------------------------------------------------------------------------------------------- corpus
def test_the_packaged_corpus_is_well_formed():
    faq = load_faq()
    assert 30 <= len(faq.answers) <= 50 and len(faq.questions) >= len(faq.answers)
    ids = [a.id for a in faq.answers]
    assert len(set(ids)) == len(ids)
    asked = {}
    for q in faq.questions:
        assert q.answer in ids  # every question points at an answer
        asked[q.answer] = asked.get(q.answer, 0) + 1
        assert q.text not in faq.answers[faq.answer_index(q.answer)].text
    assert set(asked) == set(ids) and max(asked.values()) <= 2  # every answer asked for, once or twice
    assert len({q.text for q in faq.questions}) == len(faq.questions)
    assert faq.labels == [ids.index(q.answer) for q in faq.questions]


def test_the_corpus_reader_refuses_malformed_files(tmp_path):
    good = {
        "format": "textfree.quickstart.faq",
        "format_version": 1,
        "answers": [{"id": "a", "text": "Answer A."}, {"id": "b", "text": "Answer B."}],
        "questions": [{"text": "Question for a?", "answer": "a"}, {"text": "Question for b?", "answer": "b"}],
    }
    assert parse_faq(good).labels == [0, 1]
    for change, words in (
        ({"format": "other"}, "is not a"),
        ({"questions": [{"text": "Q?", "answer": "a"}, {"text": "Q2?", "answer": "zz"}]}, "no answer's id"),
        ({"questions": [{"text": "Q?", "answer": "a"}]}, "without a question: ['b']"),
        ({"answers": [{"id": "a", "text": "A."}, {"id": "a", "text": "B."}]}, "unique"),
        ({"answers": [{"id": "a", "text": " "}, {"id": "b", "text": "B."}]}, "non-empty"),
    ):
        with pytest.raises(CorpusError, match=re.escape(words)):
            parse_faq({**good, **change})
    bad = tmp_path / "faq.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(CorpusError, match="cannot read"):
        load_faq(bad)


def test_the_corpus_is_package_data():
    import tomllib

    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text(encoding="utf-8"))
    assert "faq.json" in pyproject["tool"]["setuptools"]["package-data"]["textfree.quickstart"]


# ------------------------------------------------------------------------------------------------------- runner
#: A tiny corpus whose questions hold words that appear nowhere in a payload's header.
TINY_FAQ = Faq(
    answers=(
        Answer("saffron", "Saffron is shipped from the harbour warehouse on Tuesdays."),
        Answer("lighthouse", "The lighthouse keeper position is filled every spring."),
        Answer("glacier", "Glacier tours leave at dawn from the northern pier."),
    ),
    questions=(
        Question("Bartholomew smuggled saffron through Reykjavik harbour", "saffron"),
        Question("Who tends the beacon on the rocky promontory?", "lighthouse"),
        Question("When do excursions onto frozen rivers of ice depart?", "glacier"),
    ),
)


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory, tiny_encoder_dir):
    from textfree.server import ServerConfig, create_app
    from textfree.server.auth import KeyStore
    from textfree.server.testing import serve_in_thread

    tmp = tmp_path_factory.mktemp("quickstart")
    key = KeyStore(tmp / "keys.json").add_key("quickstart")
    config = ServerConfig(embed_models={"minilm": str(tiny_encoder_dir)}, keys_path=str(tmp / "keys.json"))
    with serve_in_thread(create_app(config)) as url:
        yield {"url": url, "key": key}


def test_the_search_sends_only_payloads(tiny_server, tiny_encoder_dir, tmp_path):
    from textfree.encoders import load_encoder
    from textfree.payload import Payload
    from textfree.quickstart.runner import run_search
    from textfree.server.testing import RecordingProxy, http_requests, leaked_words

    target = urlparse(tiny_server["url"])
    etas = [100.0, 500.0]
    with RecordingProxy(target.hostname, target.port) as proxy:
        result = run_search(
            proxy.url, tiny_server["key"], TINY_FAQ, model="minilm", etas=etas, seed=0, encoder=tiny_encoder_dir,
            cache_dir=tmp_path,
        )  # fmt: skip
    sent = proxy.sent.replace(tiny_server["key"].encode(), b"")
    requests = http_requests(sent)
    n = len(TINY_FAQ.questions)
    # only GETs of public files without a body, and one POST /v1/embed per question and eta
    assert all(line.startswith("GET /v1/models/minilm") and not body for line, body in requests if "POST" not in line)
    posts = [body for line, body in requests if line.startswith("POST ")]
    assert [line for line, _ in requests if line.startswith("POST ")] == ["POST /v1/embed?model=minilm HTTP/1.1"] * (
        n * len(etas)
    )
    # the client's own record of what it sent (heads and bodies) is exactly what crossed the wire
    wire = result["wire"]
    assert wire["POST /v1/embed"]["body_bytes"] == sum(map(len, posts))
    assert all(w["body_bytes"] == 0 for k, w in wire.items() if k.startswith("GET "))
    assert sum(w["head_bytes"] + w["body_bytes"] for w in wire.values()) == len(proxy.sent)
    assert wire["POST /v1/embed"]["response_bytes"] > 0
    tokenizer = load_encoder(tiny_encoder_dir, "embedding_table").tokenizer
    for q in TINY_FAQ.questions:  # no question text, in any encoding, nor any of its words or word pieces
        for enc in ("utf-8", "utf-16-le", "utf-16-be"):
            assert q.text.encode(enc) not in sent
        assert leaked_words(sent, q.text, tokenizer) == []
    for i, body in enumerate(posts):
        q = TINY_FAQ.questions[i % n]
        ids = tokenizer(q.text)["input_ids"]
        for dtype in (np.int64, np.int32, np.int16):  # no token ids: not as binary integers, nor as JSON
            assert np.asarray(ids, dtype=dtype).tobytes() not in sent
            assert np.asarray(ids[1:-1], dtype=dtype).tobytes() not in sent
        assert json.dumps(ids[1:-1]).encode() not in sent and ", ".join(map(str, ids[1:4])).encode() not in sent
        payload = Payload.from_bytes(body)  # each body is one payload: noisy token vectors and their mask
        assert list(payload.vectors.shape) == [1, len(ids), 32] and payload.extra == {} and payload.public is None
        assert "input_ids" not in json.dumps(payload.header())
    # the rows: clean (never sent) and one per eta; privacy as the library accounts each payload sent
    rows = result["rows"]
    assert [(r["pipeline"], r["eta"], r["sent"]) for r in rows] == [("clean", None, False)] + [
        ("server", e, True) for e in etas
    ]
    assert rows[0]["top1"] == 1.0 or rows[0]["cos_to_clean"] == pytest.approx(1.0)
    clip = result["clip_norm"]
    for r, eta in zip(rows[1:], etas):
        assert r["requests"] == n and r["privacy_per_token"]["epsilon"] == pytest.approx(eta * 2 * clip)
        losses = [Payload.from_bytes(b).worst_case_loss().epsilon for b in posts[etas.index(eta) * n :][:n]]
        assert r["privacy_per_question_mean"] == pytest.approx(sum(losses) / n)
        assert r["privacy_per_question_max"] == pytest.approx(max(losses))
        assert 0 <= r["top1"] <= r["top3"] <= 1 and r["noise_to_signal"] > 0
    assert rows[1]["noise_to_signal"] == pytest.approx(5 * rows[2]["noise_to_signal"])
    assert result["example"]["question"] == TINY_FAQ.questions[0].text and result["seeded"]


def test_the_report_prints_every_figure(tiny_server, tiny_encoder_dir, tmp_path):
    from rich.console import Console

    from textfree.quickstart.report import render, to_json
    from textfree.quickstart.runner import run_search

    result = run_search(
        tiny_server["url"], tiny_server["key"], TINY_FAQ, model="minilm", etas=[200.0], encoder=tiny_encoder_dir,
        cache_dir=tmp_path,
    )  # fmt: skip
    console = Console(record=True, width=200)
    render(result, console)
    text = console.export_text()
    for words in (TABLE_TITLE, "computed here and never sent", "server received  POST /v1/embed", "no token ids",
                  "eps per question", "one POST /v1/embed per question", "snd train"):  # fmt: skip
        assert words in text, words
    assert json.loads(to_json(result))["rows"][1]["eta"] == 200.0


# ------------------------------------------------------------------------------------------------------ the CLI
@pytest.mark.parametrize(
    "args, words",
    [
        (["--eta", "abc"], "--eta takes numbers"),
        (["--eta", "100,-5"], "--eta must be"),
        (["--eta", "inf"], "--eta must be"),
        (["--eta", ","], "--eta lists no value"),
        (["--seed", "-1"], "--seed must be"),
        (["--port", "70000"], "--port must lie in"),
        (["--denoiser", "/no/such/denoiser"], "--denoiser '/no/such/denoiser'"),
    ],
)
def test_flag_errors_name_the_flag(args, words):
    result = CliRunner().invoke(cli_app, ["quickstart", *args])
    assert result.exit_code == 2 and words in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_port_in_use_is_refused_before_anything_starts():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        result = CliRunner().invoke(cli_app, ["quickstart", "--port", str(s.getsockname()[1])])
    assert result.exit_code == 2 and "--port" in result.output and "cannot be bound" in result.output


def test_an_eta_outside_the_denoisers_range_is_refused(tmp_path):
    import torch

    from textfree.snd.denoiser import Denoiser, DenoiserConfig

    torch.manual_seed(0)
    cfg = DenoiserConfig(token_dim=8, output_dim=8, d_model=8, d_ff=8, d_kv=4, n_head=2, n_layers=1, eta_min=50,
                         eta_max=500)  # fmt: skip
    Denoiser(cfg).save_pretrained(tmp_path / "den")
    result = CliRunner().invoke(cli_app, ["quickstart", "--denoiser", str(tmp_path / "den"), "--eta", "20,100"])
    assert result.exit_code == 2 and "--eta 20 lies outside [50, 500]" in result.output, result.output


def test_the_server_process_is_stopped_on_an_error(tmp_path, tiny_encoder_dir):
    from textfree.client import Client
    from textfree.quickstart.server import serve_process

    with pytest.raises(KeyboardInterrupt):
        with serve_process(tmp_path, encoder=str(tiny_encoder_dir)) as served:
            pid = served.pid
            with Client(served.url, api_key=served.api_key) as client:
                assert client.model_card(served.model)["task"] == "embed"  # a real server with the fresh key
            assert "tf_" not in " ".join(served.command)  # the key is never on the command line
            raise KeyboardInterrupt  # Ctrl-C in the middle of a run
    assert _gone(pid)


@pytest.mark.slow
def test_quickstart_end_to_end_with_minilm():
    """The README's main command, as a subprocess with the real all-MiniLM-L6-v2 (about 20-40 s on 2 cores)."""
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "textfree.cli", "quickstart", "--eta", "100,500", "--seed", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert TABLE_TITLE in out and "no text, no token ids" in out, out
    rows = {}
    for line in out.splitlines():
        cells = line.split()
        if len(cells) == 8 and all(c.replace(".", "").isdigit() for c in cells[1:4]):
            rows[cells[0]] = {"nsr": float(cells[1]), "top1": float(cells[2]), "top3": float(cells[3])}
    assert set(rows) == {"clean", "100", "500"}, out
    clean = rows["clean"]
    assert clean["top1"] >= CLEAN_TOP1_BAR and clean["top3"] >= clean["top1"]
    assert rows["500"]["top1"] >= 0.7  # little noise (noise-to-signal 0.7): close to clean
    assert rows["100"]["top1"] < rows["500"]["top1"] and rows["100"]["nsr"] == pytest.approx(
        5 * rows["500"]["nsr"], 0.01
    )
    pid = int(re.search(r"textfree serve, pid (\d+)", out).group(1))
    assert f"server pid {pid} stopped" in out and _gone(pid)
    assert "loading all-MiniLM-L6-v2" in proc.stderr and "eta 500: questions" in proc.stderr  # progress shown
