"""docs/server.md's fresh-clone quickstart, run as written: a key, `textfree serve --embed-model minilm=default` as a
real process on 127.0.0.1:8000, and `textfree embed` against it (the real all-MiniLM-L6-v2; nothing trained)."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from textfree.server.testing import subprocess_server

ROOT = Path(__file__).resolve().parents[1]


def quickstart_lines() -> list[str]:
    """The command lines of the first bash block after "On a fresh clone" in docs/server.md, comments cut."""
    text = (ROOT / "docs" / "server.md").read_text(encoding="utf-8")
    block = re.search(r"On a fresh clone.*?```bash\n(.*?)```", text, re.S)
    assert block, "docs/server.md has no fresh-clone quickstart block"
    return [" ".join(shlex.split(line, comments=True)) for line in block.group(1).splitlines() if line.strip()]


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) != 0


@pytest.mark.slow
def test_server_quickstart_runs_as_written(tmp_path):
    lines = quickstart_lines()
    assert [line.split()[:2] for line in lines] == [
        ["textfree", "serve"],
        ["export", "TEXTFREE_API_KEY=tf_..."],
        ["textfree", "serve"],
        ["textfree", "embed"],
    ]
    url = re.search(r"--url (\S+)", lines[3]).group(1)
    port = int(url.rsplit(":", 1)[1])
    assert _port_free(port), f"port {port} (the quickstart's) is taken on this machine"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
               HF_HUB_OFFLINE="1")  # fmt: skip

    def argv(line: str) -> list[str]:
        return [sys.executable, "-m", "textfree.cli", *shlex.split(line)[1:]]

    key = subprocess.run(argv(lines[0]), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert key.returncode == 0 and key.stdout.strip().startswith("tf_"), key.stderr
    env["TEXTFREE_API_KEY"] = key.stdout.strip()  # what `export TEXTFREE_API_KEY=tf_...` stands for
    os.chdir(tmp_path)  # the serve line reads keys.json from the working directory, as a user's shell would
    try:
        with subprocess_server(argv(lines[2]), url, log_path=tmp_path / "serve.log", env=env):
            out = subprocess.run(argv(lines[3]), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    finally:
        os.chdir(ROOT)
    assert out.returncode == 0, f"{out.stdout}\n{out.stderr}"
    assert "384" in out.stdout + out.stderr  # the sentence embedding of MiniLM's width came back
    assert "my private question" not in (tmp_path / "serve.log").read_text(errors="replace")
