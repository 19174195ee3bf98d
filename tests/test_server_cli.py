"""`textfree serve`: key management (--add-key prints a key once, the store keeps a salted hash; --revoke-key),
refusals, and a real `textfree serve` process answering on loopback."""

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from textfree.cli import app
from textfree.ppft.testing import make_tiny_run
from textfree.server.auth import KeyStore


def test_add_key_prints_a_key_once_and_stores_only_a_salted_hash(tmp_path):
    keys = tmp_path / "keys.json"
    r = CliRunner().invoke(app, ["serve", "--add-key", "alice", "--keys", str(keys)])
    assert r.exit_code == 0, r.output
    key = r.stdout.strip()
    assert key.startswith("tf_") and "shown only this once" in r.stderr
    stored = json.loads(keys.read_text())
    ((key_id, entry),) = stored["keys"].items()
    assert key == f"tf_{key_id}.{key.split('.', 1)[1]}" and entry["tenant"] == "alice"
    assert key.split(".", 1)[1] not in keys.read_text() and len(entry["salt"]) == 32 and len(entry["sha256"]) == 64
    assert oct(keys.stat().st_mode & 0o777) == "0o600"
    assert KeyStore(keys).verify(key) == "alice"
    second = CliRunner().invoke(app, ["serve", "--add-key", "alice", "--keys", str(keys)]).stdout.strip()
    assert second != key and KeyStore(keys).verify(second) == "alice"  # a tenant may hold several keys
    r = CliRunner().invoke(app, ["serve", "--revoke-key", key_id, "--keys", str(keys)])
    assert r.exit_code == 0 and KeyStore(keys).verify(key) is None and KeyStore(keys).verify(second) == "alice"
    assert CliRunner().invoke(app, ["serve", "--add-key", "bad name!", "--keys", str(keys)]).exit_code == 2
    assert CliRunner().invoke(app, ["serve", "--revoke-key", "000000000000", "--keys", str(keys)]).exit_code == 2


def test_serve_refuses_bad_setups(tmp_path, tiny_encoder_dir):
    runner = CliRunner()
    r = runner.invoke(app, ["serve", "--model", f"x={tiny_encoder_dir}", "--keys", str(tmp_path / "none.json")])
    assert r.exit_code == 2 and "--add-key" in r.stderr
    r = runner.invoke(app, ["serve", "--model", "no-equals-sign", "--no-auth"])
    assert r.exit_code == 2 and "ID=DIRECTORY" in r.stderr
    r = runner.invoke(app, ["serve", "--model", f"x={tiny_encoder_dir}", "--no-auth", "--host", "0.0.0.0"])
    assert r.exit_code == 2 and "loopback" in r.stderr
    r = runner.invoke(app, ["serve", "--no-auth"])
    assert r.exit_code == 2 and "at least one model" in r.stderr


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_textfree_serve_process_answers_on_loopback(tmp_path, tiny_encoder_dir):
    run = make_tiny_run(tmp_path, tiny_encoder_dir)
    keys = tmp_path / "keys.json"
    key = KeyStore(keys).add_key("alice")
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "textfree.cli",
            "serve",
            "--model",
            f"tiny={run}",
            "--keys",
            str(keys),
            "--port",
            str(port),
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 45
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, proc.stdout.read().decode()
            assert time.monotonic() < deadline, "server did not come up"
            time.sleep(0.2)
        cards = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": f"Bearer {key}"}).json()
        assert [c["id"] for c in cards["data"]] == ["tiny"]
        assert httpx.get(f"http://127.0.0.1:{port}/v1/models").status_code == 401
        # a partial request head is answered 408 and closed (the default head_timeout_s: 10 s), not held forever
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
            start, got = time.monotonic(), b""
            while chunk := sock.recv(4096):
                got += chunk
        assert got.startswith(b"HTTP/1.1 408") and time.monotonic() - start < 25, (got, time.monotonic() - start)
    finally:
        proc.terminate()
        proc.wait(20)


def test_embed_model_default_names_the_packaged_encoder_and_a_run_flag_does_not():
    """``--embed-model ID=default`` serves the packaged all-MiniLM-L6-v2 (the README's SnD command); ``--model``
    takes run directories only, so ``default`` there is no such directory."""
    import typer

    from textfree.cli_service import _id_dirs
    from textfree.encoders.loading import resolve_encoder_path

    assert _id_dirs(["m=default"], "--embed-model", default_encoder=True) == {"m": resolve_encoder_path(None)}
    with pytest.raises(typer.Exit):
        _id_dirs(["m=default"], "--model")
