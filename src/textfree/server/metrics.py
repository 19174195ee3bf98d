"""Request counters, latency, in-flight requests and batch-queue depth, as Prometheus text (``prometheus_client``) or
JSON.

Prometheus (``GET /metrics``, each app its own ``CollectorRegistry``):

* ``textfree_requests_total{route, method, status}``: a counter;
* ``textfree_request_latency_seconds{route}``: a summary, its ``quantile`` 0.5 / 0.99 over each route's last
  ``window`` requests (a sliding window, as Prometheus client summaries compute theirs), its ``_count`` and ``_sum``
  running totals since start;
* ``textfree_request_duration_seconds{route}``: a histogram of the same latencies (aggregatable across replicas);
* gauges ``textfree_requests_in_flight``, ``textfree_batch_queue_depth``, ``textfree_uptime_seconds`` and counters
  ``textfree_batches_total``, ``textfree_batched_requests_total``, ``textfree_batched_rows_total``.

Routes are the matched route templates (``/v1/generate``); requests that match no route count as ``other``,
so a scan of random paths cannot grow the label set; nor can invented methods (they count as ``other``). Nothing is
labelled by tenant.
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter, deque
from typing import Callable, Iterator

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)

__all__ = ["Metrics", "ASGIMetrics", "PROMETHEUS_CONTENT_TYPE"]

QUANTILES = (0.5, 0.99)
#: The content type of the Prometheus text that ``prometheus_client.generate_latest`` writes.
PROMETHEUS_CONTENT_TYPE = CONTENT_TYPE_LATEST
#: Upper bounds (seconds) of the latency histogram's buckets (+Inf is added).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _quantile(sorted_values: list[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    idx = min(len(sorted_values) - 1, max(0, math.ceil(q * len(sorted_values)) - 1))  # nearest rank
    return sorted_values[idx]


#: The methods counted by name; any other (``curl -X QWERTY``) counts as ``other``.
HTTP_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """The counters of one server process; :meth:`prometheus` and :meth:`snapshot` read them."""

    def __init__(self, *, window: int = 2048, queue_depth: Callable[[], int] | None = None):
        self.window = window
        self.queue_depth = queue_depth or (lambda: 0)
        self.started = time.time()
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, str, int]] = Counter()
        self._latency: dict[str, deque[float]] = {}
        self._latency_count: Counter[str] = Counter()
        self._latency_sum: dict[str, float] = {}
        self._buckets: dict[
            str, list[int]
        ] = {}  # per route: requests at most each LATENCY_BUCKETS bound (not cumulative)
        self.in_flight = 0
        self.batches = 0
        self.batched_requests = 0
        self.batched_rows = 0
        self.registry = CollectorRegistry()
        self.registry.register(_Collector(self))

    def begin(self) -> None:
        with self._lock:
            self.in_flight += 1

    def end(self, route: str, method: str, status: int, seconds: float) -> None:
        with self._lock:
            self.in_flight -= 1
            self.requests[(route, method, status)] += 1
            self._latency.setdefault(route, deque(maxlen=self.window)).append(seconds)
            self._latency_count[route] += 1
            self._latency_sum[route] = self._latency_sum.get(route, 0.0) + seconds
            buckets = self._buckets.setdefault(route, [0] * (len(LATENCY_BUCKETS) + 1))
            buckets[next((i for i, le in enumerate(LATENCY_BUCKETS) if seconds <= le), len(LATENCY_BUCKETS))] += 1

    def batch(self, requests: int, rows: int) -> None:
        with self._lock:
            self.batches += 1
            self.batched_requests += requests
            self.batched_rows += rows

    def snapshot(self) -> dict:
        """Everything as JSON (``GET /metrics?format=json``): latency quantiles over the window, counts and sums
        since start."""
        with self._lock:
            latency = {r: sorted(v) for r, v in self._latency.items()}
            reqs = [
                {"route": r, "method": m, "status": s, "count": n} for (r, m, s), n in sorted(self.requests.items())
            ]
            out = {
                "uptime_s": time.time() - self.started,
                "requests": reqs,
                "latency_s": {
                    r: {
                        "p50": _quantile(v, 0.5),
                        "p99": _quantile(v, 0.99),
                        "window": len(v),
                        "count": self._latency_count[r],
                        "sum": self._latency_sum[r],
                        "buckets": list(self._buckets[r]),
                    }
                    for r, v in latency.items()
                },
                "in_flight": self.in_flight,
                "batches": {"calls": self.batches, "requests": self.batched_requests, "rows": self.batched_rows},
            }
        out["queue_depth"] = int(self.queue_depth())
        return out

    def prometheus(self) -> str:
        """The Prometheus text exposition of this process's metrics."""
        return generate_latest(self.registry).decode("utf-8")


class _Collector:
    """The counters and gauges of a :class:`Metrics`, as Prometheus metric families (read at scrape time)."""

    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        snap = self.metrics.snapshot()
        requests = CounterMetricFamily(
            "textfree_requests",
            "HTTP requests by route template, method and status.",
            labels=["route", "method", "status"],
        )
        for r in snap["requests"]:
            requests.add_metric([r["route"], r["method"], str(r["status"])], r["count"])
        yield requests
        yield self._latency(snap["latency_s"])
        yield self._histogram(snap["latency_s"])
        yield _gauge("textfree_requests_in_flight", "Requests being handled now.", snap["in_flight"])
        yield _gauge("textfree_batch_queue_depth", "Requests waiting for a model call.", snap["queue_depth"])
        yield _gauge("textfree_uptime_seconds", "Seconds since the server started.", round(snap["uptime_s"], 3))
        batches = snap["batches"]
        yield CounterMetricFamily("textfree_batches", "Model calls made by the micro-batcher.", value=batches["calls"])
        yield CounterMetricFamily(
            "textfree_batched_requests", "Requests served by those calls.", value=batches["requests"]
        )
        yield CounterMetricFamily("textfree_batched_rows", "Payload rows served by those calls.", value=batches["rows"])

    @staticmethod
    def _latency(latency: dict[str, dict]) -> Metric:
        """The summary: window quantiles, running count and sum, per route."""
        family = SummaryMetricFamily(
            "textfree_request_latency_seconds",
            "Request latency: quantiles over each route's last requests (sliding window); count and sum since start.",
            labels=["route"],
        )
        for route, lat in latency.items():
            for q, key in zip(QUANTILES, ("p50", "p99")):
                family.add_sample("textfree_request_latency_seconds", {"route": route, "quantile": str(q)}, lat[key])
            family.add_metric([route], lat["count"], lat["sum"])
        return family

    @staticmethod
    def _histogram(latency: dict[str, dict]) -> Metric:
        """The same latencies since start, in cumulative buckets per route."""
        family = HistogramMetricFamily(
            "textfree_request_duration_seconds", "Request latency by route template (since start).", labels=["route"]
        )
        bounds = [str(b) for b in LATENCY_BUCKETS] + ["+Inf"]
        for route, lat in latency.items():
            total, cumulative = 0, []
            for bound, n in zip(bounds, lat["buckets"]):
                total += n
                cumulative.append((bound, total))
            family.add_metric([route], cumulative, lat["sum"])
        return family


def _gauge(name: str, text: str, value: float) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=value)


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
