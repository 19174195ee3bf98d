"""The quickstart's server: a real ``textfree serve`` process on loopback, serving the split all-MiniLM-L6-v2
(``--embed-model minilm=default``) with a freshly made API key, stopped when the block ends (normally, on an error or
on Ctrl-C).

The key store and the server's log live in the caller's working directory; the process is started and awaited by
:func:`textfree.server.testing.subprocess_server` (``/health`` polled, terminated and reaped on exit).
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

__all__ = ["Served", "serve_process", "port_problem", "MODEL_ID", "TENANT"]

MODEL_ID = "minilm"
TENANT = "quickstart"
READY_TIMEOUT_S = 240.0


@dataclass(frozen=True)
class Served:
    url: str
    api_key: str
    model: str
    pid: int
    process: subprocess.Popen
    log_path: Path
    command: list[str]


def port_problem(port: int, host: str = "127.0.0.1") -> str | None:
    """Why ``port`` cannot be served on ``host`` (out of range, or in use), else None."""
    if not 1 <= port <= 65535:
        return f"must lie in 1..65535, got {port}"
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            return f"{port} cannot be bound on {host}: {exc.strerror or exc}"
    return None


@contextlib.contextmanager
def serve_process(
    workdir: str | os.PathLike,
    *,
    port: int | None = None,
    encoder: str = "default",
    denoiser: str | os.PathLike | None = None,
    host: str = "127.0.0.1",
) -> Iterator[Served]:
    """Make a key in ``workdir/keys.json``, start ``textfree serve --embed-model minilm=ENCODER`` on ``host:port`` (a
    free port when None; with ``--denoiser minilm=DENOISER`` when given), yield it once ``/health`` answers, stop it
    on exit. ``RuntimeError`` (with the end of its log) when it exits or does not answer in time."""
    from ..server.auth import KeyStore
    from ..server.testing import free_port, subprocess_server

    work = Path(workdir)
    keys = work / "keys.json"
    api_key = KeyStore(keys).add_key(TENANT)
    port = free_port(host) if port is None else port
    cmd = [sys.executable, "-m", "textfree.cli", "serve", "--embed-model", f"{MODEL_ID}={encoder}"]
    if denoiser is not None:
        cmd += ["--denoiser", f"{MODEL_ID}={denoiser}"]
    cmd += ["--keys", str(keys), "--host", host, "--port", str(port)]
    url = f"http://{host}:{port}"
    log = work / "server.log"
    env = {"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"), "TOKENIZERS_PARALLELISM": "false"}
    with subprocess_server(cmd, url, log_path=log, env=env, ready_timeout_s=READY_TIMEOUT_S) as proc:
        yield Served(url, api_key, MODEL_ID, proc.pid, proc, log, cmd)
