"""What crossed the wire: every HTTP request the quickstart's client sent, recorded by hooks on its ``httpx`` client
(method, path, the body's exact bytes, the size of its request line and headers) and each response's size.

The record is measured at the client's HTTP layer, after :class:`textfree.client.Client` has made the body, so it is
exactly what the server received; ``tests/test_quickstart.py`` checks it against a recording TCP proxy.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

__all__ = ["Sent", "WireLog"]


@dataclass
class Sent:
    """One request: its method and path (no query string), body bytes, and the sizes of its head and response."""

    method: str
    path: str
    body: bytes
    head_bytes: int
    status: int | None = None
    response_bytes: int | None = None


@dataclass
class WireLog:
    """The requests of one ``httpx.Client`` (:meth:`http_client`), in the order they were sent."""

    requests: list[Sent] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def http_client(self, timeout: float = 60.0):
        """A new ``httpx.Client`` whose requests and responses this log records (the caller closes it)."""
        import httpx

        pending: dict[int, Sent] = {}

        def on_request(request) -> None:
            body = bytes(request.content)
            line = f"{request.method} {request.url.raw_path.decode('ascii', 'replace')} HTTP/1.1\r\n"
            head = len(line) + sum(len(k) + len(v) + 4 for k, v in request.headers.raw) + 2
            sent = Sent(request.method, request.url.path, body, head)
            with self._lock:
                self.requests.append(sent)
                pending[id(request)] = sent

        def on_response(response) -> None:
            with self._lock:
                sent = pending.pop(id(response.request), None)
            if sent is not None:
                sent.status = response.status_code
                length = response.headers.get("content-length")
                sent.response_bytes = int(length) if length and length.isdigit() else None

        return httpx.Client(timeout=timeout, event_hooks={"request": [on_request], "response": [on_response]})

    def posts(self, path: str) -> list[Sent]:
        """The POST requests to ``path``, in order."""
        with self._lock:
            return [r for r in self.requests if r.method == "POST" and r.path == path]

    def summary(self) -> dict:
        """Requests by method and path, with their body, head and response bytes summed."""
        out: dict[str, dict] = {}
        with self._lock:
            for r in self.requests:
                row = out.setdefault(
                    f"{r.method} {r.path}", {"requests": 0, "body_bytes": 0, "head_bytes": 0, "response_bytes": 0}
                )
                row["requests"] += 1
                row["body_bytes"] += len(r.body)
                row["head_bytes"] += r.head_bytes
                row["response_bytes"] += r.response_bytes or 0
        return out
