"""Helpers to run a server on loopback and watch its traffic: for tests, and to check for yourself what crosses the wire.

* :func:`serve_in_thread` runs an ASGI app under uvicorn on a free loopback port, in a daemon thread.
* :class:`RecordingProxy` is a TCP proxy on another loopback port that forwards bytes both ways and records them,
  so a test can assert what a client really sent (``sent``) and received (``received``).
* :func:`make_tiny_run` writes a loadable PPFT run directory with a tiny random decoder (seconds, for tests).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

__all__ = ["serve_in_thread", "RecordingProxy", "make_tiny_run"]


@contextlib.contextmanager
def serve_in_thread(app, *, host: str = "127.0.0.1", timeout: float = 20.0) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT``) of ``app`` served by uvicorn; stop it on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
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


def make_tiny_run(out_dir, encoder_dir, *, k: int = 4, epsilon: float | None = 75.0, seed: int = 0) -> Path:
    """A PPFT run directory (``out_dir/run``) of ``encoder_dir`` + a tiny random Llama decoder (``out_dir/decoder``).

    Untrained: its card states ``epsilon`` (default 75) and stage ``stage2`` as if it had been adapted, so a client
    has a default epsilon. For tests and demos only."""
    from ..ppft.decoder import make_tiny_decoder_dir
    from ..ppft.model import TextFreeLM

    out = Path(out_dir)
    decoder = make_tiny_decoder_dir(out / "decoder", hidden=32, layers=2, heads=2, seed=seed)
    lm = TextFreeLM.build(decoder, encoder=encoder_dir, k=k, seed=seed)
    lm.server.config = lm.config.replace(epsilon=epsilon, stage="stage2")
    return lm.save(out / "run")

