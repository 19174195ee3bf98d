"""Helpers to run a server on loopback and watch its traffic: for tests, and to check for yourself what crosses the
wire.

* :func:`serve_in_thread` runs an ASGI app under uvicorn on a free loopback port, in a daemon thread.
* :class:`RecordingProxy` is a TCP proxy on another loopback port that forwards bytes both ways and records them,
  so a test can assert what a client really sent (``sent``) and received (``received``).
* :func:`subprocess_server` runs a server command in a subprocess until its ``/health`` answers (load test, vLLM).

A tiny servable run of a system comes from that system (PPFT's: :func:`textfree.ppft.testing.make_tiny_run`).
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Iterator

__all__ = [
    "serve_in_thread",
    "subprocess_server",
    "free_port",
    "RecordingProxy",
    "http_requests",
    "json_leaves",
    "leaked_words",
    "tenant_headers",
]


@contextlib.contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1", timeout: float = 20.0) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``) of ``app`` served by uvicorn; stop it on exit. An app of
    :func:`~textfree.server.create_app` is served as ``textfree serve`` serves it (its head and body deadlines,
    :mod:`textfree.server.transport`); any other ASGI app by plain uvicorn."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    options = {"log_level": "warning", "lifespan": "on", "access_log": False}
    if getattr(getattr(app, "state", None), "config", None) is not None:
        from .transport import uvicorn_config

        server = uvicorn.Server(uvicorn_config(app, **options))
    else:
        server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="textfree-uvicorn")
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout)
        sock.close()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def subprocess_server(
    cmd: list[str],
    url: str,
    *,
    log_path: str | os.PathLike,
    env: dict[str, str] | None = None,
    ready_timeout_s: float = 180.0,
) -> Iterator[subprocess.Popen]:
    """Run ``cmd`` (its output to ``log_path``) until ``url + '/health'`` answers 200, yield the process, stop it on
    exit."""
    import httpx

    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
    try:
        deadline = time.monotonic() + ready_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{cmd[:4]} exited with {proc.returncode}: {Path(log_path).read_text(errors='replace')[-2000:]}"
                )
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{cmd[:4]} did not answer {url}/health in {ready_timeout_s} s")
            time.sleep(0.2)
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class RecordingProxy:
    """Forward ``127.0.0.1:port`` -> ``target``; every byte each way is appended to ``sent`` / ``received``."""

    def __init__(self, target_host: str, target_port: int, *, host: str = "127.0.0.1"):
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((host, 0))
        self._listener.listen(16)
        self.host, self.port = host, self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._sent = bytearray()
        self._received = bytearray()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.connections = 0

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def sent(self) -> bytes:
        with self._lock:
            return bytes(self._sent)

    @property
    def received(self) -> bytes:
        with self._lock:
            return bytes(self._received)

    def __enter__(self) -> "RecordingProxy":
        t = threading.Thread(target=self._accept, daemon=True, name="textfree-proxy")
        t.start()
        self._threads.append(t)
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._listener.close()
        for t in list(self._threads):
            t.join(5)

    def _accept(self) -> None:
        self._listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            self.connections += 1
            for src, dst, buf in ((client, upstream, self._sent), (upstream, client, self._received)):
                t = threading.Thread(target=self._pump, args=(src, dst, buf), daemon=True)
                t.start()
                self._threads.append(t)

    def _pump(self, src: socket.socket, dst: socket.socket, buf: bytearray) -> None:
        src.settimeout(0.2)
        try:
            while not self._stop.is_set():
                try:
                    data = src.recv(65536)
                except socket.timeout:
                    continue
                if not data:
                    break
                with self._lock:
                    buf.extend(data)
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
            src.close()  # each socket is the source of exactly one pump


def leaked_words(sent: bytes, text: str, tokenizer, *, allowed: str = "") -> list[str]:
    """Every word (>= 3 letters) and WordPiece token (>= 4 characters) of ``text`` found in ``sent``,
    case-insensitively, as UTF-8, UTF-16-LE or UTF-16-BE: what a recording shows of a text that must not be sent.
    Words and tokens of ``allowed`` (text sent in clear on purpose, e.g. training targets) are not looked for."""

    def words(t: str) -> set[str]:
        found = {w.lower() for w in re.findall(r"[A-Za-z]+", t) if len(w) >= 3}
        return found | {p.lstrip("#").lower() for p in tokenizer.tokenize(t) if len(p.lstrip("#")) >= 4}

    low = sent.lower()
    found = []
    for w in sorted(words(text) - (words(allowed) if allowed else set())):
        for enc in ("utf-8", "utf-16-le", "utf-16-be"):
            if w.encode(enc) in low:
                found.append(f"{w} ({enc})")
    return found


def tenant_headers(keys_path, *tenants: str) -> dict[str, dict[str, str]]:
    """A new key for each tenant in the key store at ``keys_path``: tenant -> its ``Authorization`` header."""
    from .auth import KeyStore

    store = KeyStore(keys_path)
    return {t: {"Authorization": f"Bearer {store.add_key(t)}"} for t in tenants}


def http_requests(recorded: bytes) -> list[tuple[str, bytes]]:
    """(request line, body) of every HTTP/1.1 request in bytes a :class:`RecordingProxy` recorded (bodies by
    Content-Length)."""
    out, rest = [], recorded
    while rest:
        head, sep, rest = rest.partition(b"\r\n\r\n")
        if not sep:
            raise ValueError("a recorded request without the end of its headers")
        match = re.search(rb"\r\ncontent-length: *(\d+)", head, re.IGNORECASE)
        n = int(match.group(1)) if match else 0
        out.append((head.split(b"\r\n", 1)[0].decode(), rest[:n]))
        rest = rest[n:]
    return out


def json_leaves(value: Any, where: str = ""):
    """(path, leaf) of every value of a JSON object, keys included (``.a.b (key)`` for a key, ``.a[0]`` for an item):
    what a test checks when no field of a card may hold a path."""
    if isinstance(value, dict):
        for k, v in value.items():
            yield f"{where}.{k} (key)", k
            yield from json_leaves(v, f"{where}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from json_leaves(v, f"{where}[{i}]")
    else:
        yield where, value
