"""Request counters, latency quantiles, in-flight requests and batch-queue depth, as Prometheus text or JSON.

Latency quantiles are computed over each route's last ``window`` requests (a sliding window, not since start).
Routes are the matched route templates (``/v1/generate``); requests that match no route count as ``other``,
so a scan of random paths cannot grow the label set; nor can invented methods (they count as ``other``). Nothing is
labelled by tenant.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from typing import Callable

__all__ = ["Metrics", "ASGIMetrics"]

QUANTILES = (0.5, 0.99)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))  # nearest rank
    return sorted_values[idx]


#: The methods counted by name; any other (``curl -X QWERTY``) counts as ``other``.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class Metrics:
    def __init__(self, *, window: int = 2048, queue_depth: Callable[[], int] | None = None):
        self.window = window
        self.queue_depth = queue_depth or (lambda: 0)
        self.started = time.time()
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self._latency: dict[str, deque[float]] = {}
        self.in_flight = 0
        self.batches = 0
        self.batched_requests = 0
        self.batched_rows = 0

    def begin(self) -> None:
        with self._lock:
            self.in_flight += 1

    def end(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.in_flight -= 1
            self.requests[(route, method, status)] += 1
            self._latency.setdefault(route, deque(maxlen=self.window)).append(seconds)

    def batch(self, requests: int, rows: int) -> None:
        with self._lock:
            self.batches += 1
            self.batched_requests += requests
            self.batched_rows += rows

    def snapshot(self) -> dict:
        with self._lock:
            latency = {r: sorted(v) for r, v in self._latency.items()}
            reqs = [
                {"route": r, "method": m, "status": s, "count": n} for (r, m, s), n in sorted(self.requests.items())
            ]
            out = {
                "uptime_s": time.time() - self.started,
                "requests": reqs,
                "latency_s": {
                    r: {"p50": _quantile(v, 0.5), "p99": _quantile(v, 0.99), "window": len(v)}
                    for r, v in latency.items()
                },
                "in_flight": self.in_flight,
                "batches": {"calls": self.batches, "requests": self.batched_requests, "rows": self.batched_rows},
            }
        out["queue_depth"] = int(self.queue_depth())
        return out

    def prometheus(self) -> str:
        snap = self.snapshot()
        lines = [
            "# HELP textfree_requests_total HTTP requests by route template, method and status.",
            "# TYPE textfree_requests_total counter",
        ]
        for r in snap["requests"]:
            lines.append(
                f'textfree_requests_total{{route="{_label(r["route"])}",method="{r["method"]}",'
                f'status="{r["status"]}"}} {r["count"]}'
            )
        lines += [
            "# HELP textfree_request_latency_seconds Request latency over each route's last requests (sliding window).",
            "# TYPE textfree_request_latency_seconds summary",
        ]
        for route, lat in snap["latency_s"].items():
            for q, key in zip(QUANTILES, ("p50", "p99")):
                lines.append(
                    f'textfree_request_latency_seconds{{route="{_label(route)}",quantile="{q}"}} {lat[key]:.6g}'
                )
            lines.append(f'textfree_request_latency_seconds_count{{route="{_label(route)}"}} {lat["window"]}')
        gauges = [
            ("textfree_requests_in_flight", "gauge", "Requests being handled now.", snap["in_flight"]),
            ("textfree_batch_queue_depth", "gauge", "Requests waiting for a model call.", snap["queue_depth"]),
            ("textfree_batches_total", "counter", "Model calls made by the micro-batcher.", snap["batches"]["calls"]),
            (
                "textfree_batched_requests_total",
                "counter",
                "Requests served by those calls.",
                snap["batches"]["requests"],
            ),
            ("textfree_batched_rows_total", "counter", "Payload rows served by those calls.", snap["batches"]["rows"]),
            ("textfree_uptime_seconds", "gauge", "Seconds since the server started.", round(snap["uptime_s"], 3)),
        ]
        for name, kind, text, value in gauges:
            lines += [f"# HELP {name} {text}", f"# TYPE {name} {kind}", f"{name} {value}"]
        return "\n".join(lines) + "\n"


class ASGIMetrics:
    """ASGI middleware: counts every HTTP request and times it; turns an exception that escaped the app into a
    plain 500 JSON error (no details) so the server answers and stays up."""

    def __init__(self, app, metrics: Metrics, *, on_error: Callable[[BaseException], None] | None = None):
        self.app = app
        self.metrics = metrics
        self.on_error = on_error

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        status = {"code": 500, "started": False}

        async def send_wrapper(message):
            if message["type"] == "http.response.start":
                status["code"] = int(message["status"])
                status["started"] = True
            await send(message)

        start = time.perf_counter()
        self.metrics.begin()
        try:
            await self.app(scope, receive, send_wrapper)
        except Exception as exc:
            if self.on_error is not None:
                self.on_error(exc)
            status["code"] = 500
            if not status["started"]:
                body = b'{"error":{"type":"internal_error","message":"internal server error"}}'
                try:
                    await send(
                        {
                            "type": "http.response.start",
                            "status": 500,
                            "headers": [
                                (b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode()),
                            ],
                        }
                    )
                    await send({"type": "http.response.body", "body": body})
                except Exception:  # the client is gone: nothing left to tell it
                    pass
        finally:
            route = getattr(scope.get("route"), "path", None) or "other"
            method = scope.get("method", "?")
            method = method if method in HTTP_METHODS else "other"  # an invented method must not grow the label set
            self.metrics.end(route, method, status["code"], time.perf_counter() - start)
