"""A bounded load test of a real ``textfree serve`` process on loopback (``benchmarks/load_test.py``, and a short
version in ``tests/test_server_load.py``).

The server runs in a subprocess (its own memory, measured from ``/proc/PID/status``), bound to 127.0.0.1 with auth
off and no rate limit. The payloads are real: privatized before the clock starts by :class:`textfree.client.Client`
with the encoder the model card names, one prompt per request, sent as raw payload bytes. ``clients`` threads post
them back to back until ``seconds`` have passed (or ``max_requests`` were sent): every loop is bounded in count and
time and stops by itself. Only loopback addresses are contacted.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterator

from .testing import free_port, subprocess_server

__all__ = ["LoadTestConfig", "LoadTestResult", "run_load_test", "serve_subprocess", "rss_bytes", "PROMPTS"]

PROMPTS = [
    "A 46-year-old male has a history of cluster headaches and reports sharp pain behind the left eye.",
    "The patient, a 29-year-old woman, presents with fever, productive cough and pleuritic chest pain.",
    "A 71-year-old man with diabetes complains of swelling in both legs and shortness of breath at night.",
    "She is 35, pregnant, and has had headaches, blurred vision and high blood pressure since Monday.",
    "Sudden painless loss of vision in one eye in a smoker of sixty.",
    "A child of four with a barking cough, hoarse voice and noisy breathing that is worse at night, after a cold.",
    "Burning pain in the upper abdomen after meals, relieved by antacids.",
    "Fatigue, weight gain, cold intolerance and dry skin in a 52-year-old woman over the last six months.",
]


@dataclass(frozen=True)
class LoadTestConfig:
    """What the load test sends, and for how long."""

    clients: int = field(default=16, metadata={"help": "Concurrent clients (threads, each with its own connection)."})
    seconds: float = field(default=60.0, metadata={"help": "How long the clients send, back to back."})
    warmup_s: float = field(
        default=2.0,
        metadata={
            "help": "The same load before the clock starts (not counted): the server reaches its working set first."
        },
    )
    warmup_requests: int = field(
        default=0,
        metadata={
            "help": "The warm-up also lasts until at least this many requests were sent (capped at max_warmup_s): on a "
            "busy machine a warm-up of warmup_s seconds covers fewer requests, and the working set is "
            "reached by requests, not by seconds."
        },
    )
    max_warmup_s: float = field(
        default=120.0,
        metadata={"help": "Longest warm-up when warmup_requests are not reached (a server that answers nothing)."},
    )
    max_requests: int = field(
        default=100_000, metadata={"help": "Upper bound on requests in all (the test stops at whichever comes first)."}
    )
    max_new_tokens: int = field(default=8, metadata={"help": "Generation length asked per request."})
    payloads: int = field(
        default=32,
        metadata={
            "help": "Distinct payloads privatized before the clock starts (each a fresh noise draw); clients cycle "
            "through them."
        },
    )
    request_timeout_s: float = field(
        default=60.0, metadata={"help": "Seconds a client waits for one answer (then it counts as an error)."}
    )
    rss_every_s: float = field(default=0.25, metadata={"help": "How often the server's resident memory is sampled."})

    def __post_init__(self) -> None:
        if self.clients < 1 or self.seconds <= 0 or self.warmup_s < 0 or self.max_requests < 1 or self.payloads < 1:
            raise ValueError(
                "LoadTestConfig needs clients >= 1, seconds > 0, warmup_s >= 0, max_requests >= 1, payloads >= 1"
            )
        if (
            isinstance(self.warmup_requests, bool)
            or not isinstance(self.warmup_requests, int)
            or self.warmup_requests < 0
        ):
            raise ValueError(f"warmup_requests must be an integer >= 0, got {self.warmup_requests!r}")
        if not self.max_warmup_s >= self.warmup_s:
            raise ValueError(f"max_warmup_s ({self.max_warmup_s!r}) must be at least warmup_s ({self.warmup_s!r})")


@dataclass
class LoadTestResult:
    requests: int
    seconds: float
    statuses: dict[int, int]  # HTTP status -> count
    errors: int  # requests that got no HTTP answer (connection error, timeout)
    latencies_ms: list[float] = field(repr=False)
    rss_mib: list[tuple[float, float]] = field(repr=False)  # (seconds since the load started, MiB)
    rss_idle_mib: float = 0.0  # after the warm-up request, before the load
    server_metrics: dict = field(default_factory=dict, repr=False)

    @property
    def throughput(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    @property
    def n_5xx(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def latency_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")

    def rss_at(self, fraction: float) -> float:
        """Server RSS (MiB) at the sample nearest ``fraction`` of the run (0 = start, 0.5 = middle, 1 = end)."""
        if not self.rss_mib:
            return float("nan")
        target = fraction * self.rss_mib[-1][0]
        return min(self.rss_mib, key=lambda s: abs(s[0] - target))[1]

    def summary(self) -> dict:
        return {
            "requests": self.requests,
            "seconds": round(self.seconds, 2),
            "throughput_rps": round(self.throughput, 2),
            "p50_ms": round(self.latency_ms(0.5), 1),
            "p99_ms": round(self.latency_ms(0.99), 1),
            "statuses": dict(sorted(self.statuses.items())),
            "n_5xx": self.n_5xx,
            "errors": self.errors,
            "rss_mib": {
                "idle": round(self.rss_idle_mib, 1),
                "start": round(self.rss_at(0.0), 1),
                "middle": round(self.rss_at(0.5), 1),
                "end": round(self.rss_at(1.0), 1),
                "max": round(max((m for _, m in self.rss_mib), default=float("nan")), 1),
            },
        }


def rss_bytes(pid: int) -> int:
    """Resident memory of process ``pid`` (Linux /proc)."""
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


@contextlib.contextmanager
def serve_subprocess(
    run_dir: str | os.PathLike,
    *,
    model_id: str = "m",
    log_path: str | os.PathLike,
    max_new_tokens: int = 64,
    ready_timeout_s: float = 180.0,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
) -> Iterator[tuple[subprocess.Popen, str]]:
    """``textfree serve`` of ``run_dir`` on a free loopback port (auth off, no rate limit); yields (process, base URL)
    once ``/health`` answers; stops the process on exit. Its output goes to ``log_path``; ``env`` adds variables."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "textfree.cli",
        "serve",
        "--model",
        f"{model_id}={run_dir}",
        "--no-auth",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--rate-limit",
        "0",
        "--max-new-tokens",
        str(max_new_tokens),
        *extra_args,
    ]
    url = f"http://127.0.0.1:{port}"
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **(env or {})}
    with subprocess_server(cmd, url, log_path=log_path, env=env, ready_timeout_s=ready_timeout_s) as proc:
        yield proc, url


def make_payloads(url: str, model_id: str, encoder: str | os.PathLike | None, n: int) -> list[bytes]:
    """``n`` one-prompt payloads, privatized as ``textfree ask`` does (the card's encoder, k, mechanism, epsilon)."""
    from ..client import Client

    with Client(url, encoder=encoder) as client:
        privatizer = client.privatizer(model_id)
        return [privatizer.privatize([f"{PROMPTS[i % len(PROMPTS)]} Case {i}."]).to_bytes() for i in range(n)]


def _client_loop(
    url: str,
    query: dict,
    payloads: list[bytes],
    offset: int,
    stop_at: float,
    budget: "_Budget",
    cfg: LoadTestConfig,
    out: list[tuple[int, float]],
) -> None:
    import httpx

    with httpx.Client(timeout=cfg.request_timeout_s) as http:
        i = offset
        while time.monotonic() < stop_at and budget.take():
            body = payloads[i % len(payloads)]
            i += 1
            t0 = time.perf_counter()
            try:
                status = http.post(
                    f"{url}/v1/generate",
                    params=query,
                    content=body,
                    headers={"Content-Type": "application/octet-stream"},
                ).status_code
            except httpx.HTTPError:
                status = 0
            out.append((status, (time.perf_counter() - t0) * 1000.0))


def _drive(
    url: str, query: dict, payloads: list[bytes], config: LoadTestConfig, stop_at: float, budget: "_Budget"
) -> list[tuple[int, float]]:
    """Run the clients until ``stop_at``; every (status, latency ms), status 0 for no answer."""
    per_client: list[list[tuple[int, float]]] = [[] for _ in range(config.clients)]
    threads = [
        threading.Thread(
            target=_client_loop, args=(url, query, payloads, c, stop_at, budget, config, per_client[c]), daemon=True
        )
        for c in range(config.clients)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, stop_at - time.monotonic()) + config.request_timeout_s + 10)
    return [r for rs in per_client for r in rs]


class _Budget:
    def __init__(self, n: int):
        self.left, self.lock = n, threading.Lock()

    def take(self) -> bool:
        with self.lock:
            self.left -= 1
            return self.left >= 0


def _warm_up(url: str, query: dict, payloads: list[bytes], config: LoadTestConfig) -> int:
    """The same load for ``warmup_s`` seconds and until ``warmup_requests`` were sent (at most ``max_warmup_s``);
    how many requests it sent."""
    start = time.monotonic()
    sent = 0
    if config.warmup_s > 0:
        sent += len(_drive(url, query, payloads, config, start + config.warmup_s, _Budget(config.max_requests)))
    while sent < config.warmup_requests and time.monotonic() - start < config.max_warmup_s:
        stop_at = min(time.monotonic() + 0.5, start + config.max_warmup_s)
        sent += len(_drive(url, query, payloads, config, stop_at, _Budget(config.warmup_requests - sent)))
    return sent


def run_load_test(
    url: str,
    pid: int,
    *,
    model_id: str = "m",
    encoder: str | os.PathLike | None = None,
    config: LoadTestConfig = LoadTestConfig(),
) -> LoadTestResult:
    """Drive the server at ``url`` (process ``pid``) with ``config.clients`` clients for ``config.seconds``."""
    import httpx

    payloads = make_payloads(url, model_id, encoder, config.payloads)
    query = {"model": model_id, "max_new_tokens": config.max_new_tokens}
    warm = httpx.post(
        f"{url}/v1/generate",
        params=query,
        content=payloads[0],
        headers={"Content-Type": "application/octet-stream"},
        timeout=120,
    )
    warm.raise_for_status()
    idle = rss_bytes(pid) / 2**20
    _warm_up(url, query, payloads, config)
    samples, done = [], threading.Event()
    start = time.monotonic()
    stop_at = start + config.seconds

    def sample() -> None:
        while True:
            samples.append((time.monotonic() - start, rss_bytes(pid) / 2**20))
            if done.wait(config.rss_every_s):
                return

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    results = _drive(url, query, payloads, config, stop_at, _Budget(config.max_requests))
    elapsed = time.monotonic() - start
    done.set()
    sampler.join(5)
    samples.append((elapsed, rss_bytes(pid) / 2**20))
    metrics = httpx.get(f"{url}/metrics", params={"format": "json"}, timeout=10).json()
    return LoadTestResult(
        requests=len(results),
        seconds=elapsed,
        statuses=dict(Counter(s for s, _ in results if s)),
        errors=sum(1 for s, _ in results if not s),
        latencies_ms=[ms for s, ms in results if s == 200],
        rss_mib=samples,
        rss_idle_mib=idle,
        server_metrics=metrics,
    )
