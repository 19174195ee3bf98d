"""Bounded fuzzer of a real textfree server on loopback: every route, both wire formats, malformed HTTP.

Starts a server process (a tiny PPFT run at /v1/generate, a tiny encoder at /v1/embed, keys, a database) served as
``textfree serve`` serves it (:func:`textfree.server.transport.run_server`), then sends at most ``--requests``
requests from ``--clients`` threads for at most ``--max-seconds`` and stops by itself. Every request is drawn from a
seeded generator: a route (or an unknown path), a method, a wire format (raw payload bytes with query options, or
JSON with base64), a key (valid, missing, forged, X-API-Key) and a body (a valid payload, one with flipped bytes, cut
short, with edited header fields, random bytes, random JSON); a share are raw malformed HTTP heads over a socket.
Prints the status counts, the 5xx (target 0), the requests with no answer, the slow answers (over 1 s: target 0),
latency quantiles and the server's resident memory before and after. Exits 1 when any 5xx or no-answer was seen.

    python benchmarks/fuzz_server.py [--requests 100000] [--max-seconds 1800] [--clients 4] [--seed 0] [--json OUT]

Loopback only: the server binds 127.0.0.1 on a free port, and nothing else is contacted.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import socket
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SLOW_S = 1.0
OCTET = "application/octet-stream"
ROUTES = [
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{model}"),
    ("GET", "/v1/models/{model}/denoiser"),
    ("POST", "/v1/generate"),
    ("POST", "/v1/embed"),
    ("POST", "/v1/datasets"),
    ("GET", "/v1/datasets"),
    ("GET", "/v1/datasets/{id}"),
    ("POST", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/fine_tuning/jobs"),
    ("GET", "/v1/fine_tuning/jobs/{id}"),
    ("GET", "/v1/fine_tuning/jobs/{id}/events"),
    ("POST", "/v1/fine_tuning/jobs/{id}/cancel"),
]
#: (weight, kind): what share of the requests each kind takes.
KINDS = [
    (30, "generate"),
    (16, "embed"),
    (14, "route"),
    (8, "dataset"),
    (4, "job"),
    (4, "unknown"),
    (4, "http"),
]
JUNK_HEADS = [
    b"GET / HTTP/1.1\r\n\r\n",
    b"GET /health HTTP/9.9\r\nHost: x\r\n\r\n",
    b"\x00\x01\x02 / HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",
    b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nContent-Length: 20\r\n\r\n",
    b"POST /v1/generate HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
    b"GET /health HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 20000 + b"\r\n\r\n",
    b"GET /v1/models/%00%ff HTTP/1.1\r\nHost: x\r\n\r\n",
    b"OPTIONS * HTTP/1.1\r\nHost: x\r\n\r\n",
]


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if args.serve:
        return _serve(args.serve, args.port)
    with tempfile.TemporaryDirectory(prefix="textfree-fuzz-") as tmp:
        env = _setup(Path(tmp))
        from textfree.server.testing import free_port, subprocess_server

        port = free_port()
        cmd = [sys.executable, __file__, "--serve", str(env.config_path), "--port", str(port)]
        url = f"http://127.0.0.1:{port}"
        with subprocess_server(
            cmd, url, log_path=Path(tmp) / "server.log", env={"MALLOC_ARENA_MAX": "2"}, ready_timeout_s=300
        ) as proc:
            report = _fuzz(url, proc.pid, env, args)
    _print(report, args)
    if args.json:
        Path(args.json).write_text(json.dumps(report.summary(), indent=2) + "\n", encoding="utf-8")
    return 1 if report.server_errors or report.no_answer else 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=100_000, help="stop after this many requests")
    ap.add_argument("--max-seconds", type=float, default=1800.0, help="stop after this long, whatever the count")
    ap.add_argument("--clients", type=int, default=4, help="concurrent client threads")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="also write the summary to this JSON file")
    ap.add_argument("--serve", help=argparse.SUPPRESS)  # internal: the server process (its config JSON)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def _serve(config_path: str, port: int) -> int:
    """The server process: ``create_app`` of the config, served like ``textfree serve`` on 127.0.0.1:``port``."""
    import textfree.ppft.service  # noqa: F401  (registers the served system "ppft")
    from textfree.server import ServerConfig, create_app
    from textfree.server.transport import run_server

    config = ServerConfig(**json.loads(Path(config_path).read_text(encoding="utf-8")))
    run_server(create_app(config), port=port, log_level="warning", access_log=False)
    return 0


# ---------------------------------------------------------------------------------------------- setup
@dataclass
class Env:
    """What the fuzzer sends from: the server's config file, keys and valid payloads of each route."""

    config_path: Path
    key: str
    other_key: str
    generate: list[bytes]
    embed: list[bytes]


def _setup(tmp: Path) -> Env:
    """A tiny run, encoder, key store and database, and valid payloads for both routes (made before the clock)."""
    from textfree.encoders import EmbeddingTableEncoder, make_tiny_encoder_dir
    from textfree.mechanisms import Clipped, L2Laplace
    from textfree.ppft.model import TextFreeLM
    from textfree.ppft.testing import make_tiny_run
    from textfree.privatizer import Privatizer
    from textfree.server.auth import KeyStore

    encoder = make_tiny_encoder_dir(tmp / "encoder", hidden=32, layers=2, heads=2, seed=0)
    run = make_tiny_run(tmp, encoder)
    keys = tmp / "keys.json"
    store = KeyStore(keys)
    key, other_key = store.add_key("fuzz"), store.add_key("other")
    config = {
        "models": {"tiny": str(run)},
        "embed_models": {"emb": str(encoder)},
        "keys_path": str(keys),
        "sqlite_path": str(tmp / "db.sqlite"),
        "max_body_bytes": 256 * 1024,
        "max_batch_rows": 8,
        "max_new_tokens": 2,
        "rate_limit_per_minute": 0,
        "batch_wait_ms": 1.0,
        "head_timeout_s": 5.0,
        "body_timeout_s": 5.0,
    }
    config_path = tmp / "server.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    lm = TextFreeLM.load(run)
    texts = ["a private prompt", "another one, longer than the first", "short"]
    generate = [
        lm.privatizer(75.0)
        .privatize(texts[: 1 + i % 3], public=["Options: A. x B. y"] * (1 + i % 3), seed=i)
        .to_bytes()
        for i in range(6)
    ]
    table = EmbeddingTableEncoder.from_pretrained(encoder)
    noisy = Privatizer(
        table, Clipped(L2Laplace(50.0), max_norm=table.max_norm()), k=1, normalize=False, renormalize=False
    )
    embed = [noisy.privatize(texts[: 1 + i % 3], seed=i).to_bytes() for i in range(4)]
    return Env(config_path, key, other_key, generate, embed)


# ---------------------------------------------------------------------------------------------- request generation
@dataclass
class Request:
    """One fuzzed request: HTTP through httpx, or raw bytes over a socket (``raw``)."""

    kind: str
    method: str = "GET"
    path: str = "/"
    params: dict = field(default_factory=dict)
    headers: dict = field(default_factory=dict)
    body: bytes | None = None
    raw: bytes | None = None


def _mutate(rng: random.Random, blob: bytes) -> bytes:
    """A valid payload, kept (a third of the time) or damaged: bytes flipped, cut, junk appended, header edited."""
    how = rng.randrange(6)
    if how <= 1:
        return blob
    data = bytearray(blob)
    if how == 2:
        for _ in range(rng.randint(1, 8)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        return bytes(data)
    if how == 3:
        return bytes(data[: rng.randrange(len(data))])
    if how == 4:
        return bytes(data) + rng.randbytes(rng.randint(1, 64))
    return _edit_header(rng, blob)


def _edit_header(rng: random.Random, blob: bytes) -> bytes:
    """The payload with one field of its textfree header replaced by a random JSON value."""
    from safetensors.torch import load as st_load
    from safetensors.torch import save as st_save

    n = int.from_bytes(blob[:8], "little")
    header = json.loads(json.loads(blob[8 : 8 + n])["__metadata__"]["textfree"])
    key = rng.choice(sorted(header) + ["new_field"])
    header[key] = rng.choice([None, 0, -1, 2**64, 1e308, "x" * rng.randint(0, 40), [], {}, [1, 2], {"a": None}, True])
    return st_save(st_load(blob), metadata={"textfree": json.dumps(header)})


def _auth(rng: random.Random, env: Env) -> dict:
    roll = rng.random()
    if roll < 0.78:
        return {"Authorization": f"Bearer {env.key}"}
    if roll < 0.84:
        return {"X-API-Key": env.other_key}
    if roll < 0.92:
        return {}
    return {"Authorization": rng.choice(["Bearer tf_000000000000." + "A" * 43, "Bearer", "Basic abc", "Bearer ??"])}


def _options(rng: random.Random, model: str) -> dict:
    """Query options: the right model most of the time, sometimes wrong or out-of-range values."""
    params = {"model": model if rng.random() < 0.9 else rng.choice(["", "nope", "emb", "tiny", "x" * 80])}
    if rng.random() < 0.5:
        params["max_new_tokens"] = rng.choice([1, 2, 2, 0, 3, -1, "many", 10**20])
    if rng.random() < 0.15:
        params["temperature"] = rng.choice([0, 0.7, 1.5, -1, 11, "nan", "inf"])
        params["top_p"] = rng.choice([1, 0.9, 0, 2])
        params["seed"] = rng.choice([0, 7, -3, 2**70])
    return params


def _inference(rng: random.Random, env: Env, route: str) -> Request:
    """A generate or embed request, raw or JSON, with a valid or damaged payload."""
    model, corpus = ("tiny", env.generate) if route == "generate" else ("emb", env.embed)
    payload = _mutate(rng, rng.choice(corpus))
    headers = _auth(rng, env)
    params = _options(rng, model)
    if rng.random() < 0.6:
        headers["Content-Type"] = OCTET if rng.random() < 0.95 else rng.choice(["text/plain", "application/xml"])
        return Request(route, "POST", f"/v1/{route}", params, headers, payload)
    body = {"model": params["model"], "payload_b64": base64.b64encode(payload).decode()}
    if route == "generate":
        body.update({k: v for k, v in params.items() if k != "model"})
        if rng.random() < 0.3:
            body["public"] = rng.choice([["x"], ["a", "b"], None, "text", [1], ["\ud800"]])
    if rng.random() < 0.05:
        body[rng.choice(["evil", "payload"])] = 1
    text = json.dumps(body, allow_nan=True, ensure_ascii=False).encode("utf-8", "surrogatepass")
    if rng.random() < 0.05:
        text = text[: rng.randrange(len(text))]
    headers["Content-Type"] = "application/json"
    return Request(route, "POST", f"/v1/{route}", {}, headers, text)


def _dataset(rng: random.Random, env: Env) -> Request:
    """A dataset upload (valid or damaged payload, targets right or wrong in number) or a dataset GET."""
    headers = _auth(rng, env)
    if rng.random() < 0.3:
        path = rng.choice(["/v1/datasets", "/v1/datasets/ds_" + rng.randbytes(6).hex()])
        return Request("dataset", "GET", path, {}, headers)
    blob = _mutate(rng, rng.choice(env.generate))
    rows = rng.randint(0, 4)
    body = {"model": rng.choice(["tiny", "tiny", "emb", "nope"]), "payload_b64": base64.b64encode(blob).decode()}
    body["targets"] = [rng.choice(["yes", "no", "", "x" * 5000]) for _ in range(rows)]
    if rng.random() < 0.3:
        body["name"] = rng.choice(["mine", "x" * 100])
    headers["Content-Type"] = "application/json"
    if rng.random() < 0.2:
        headers["Idempotency-Key"] = rng.choice(["k1", "k2", "bad key", "x" * 200])
    return Request("dataset", "POST", "/v1/datasets", {}, headers, json.dumps(body).encode())


def _job(rng: random.Random, env: Env) -> Request:
    """A job POST that never starts training (unknown datasets, bad hyperparameters) or a job GET / cancel."""
    headers = _auth(rng, env)
    job_id = "ftjob_" + rng.randbytes(6).hex()
    roll = rng.randrange(5)
    if roll == 0:
        hp = rng.choice([{}, {"epochs": 0}, {"lr": -1}, {"batch_size": 10**9}, {"nope": 1}])
        body = {"model": rng.choice(["tiny", "emb"]), "datasets": [f"ds_{rng.randrange(99)}"], "hyperparameters": hp}
        return Request(
            "job",
            "POST",
            "/v1/fine_tuning/jobs",
            {},
            {**headers, "Content-Type": "application/json"},
            json.dumps(body).encode(),
        )
    if roll == 1:
        return Request("job", "POST", f"/v1/fine_tuning/jobs/{job_id}/cancel", {}, headers)
    if roll == 2:
        params = {"after": rng.choice([0, -1, "x", 2**70]), "limit": rng.choice([1, 0, 5000])}
        return Request("job", "GET", f"/v1/fine_tuning/jobs/{job_id}/events", params, headers)
    return Request("job", "GET", rng.choice(["/v1/fine_tuning/jobs", f"/v1/fine_tuning/jobs/{job_id}"]), {}, headers)


def _route(rng: random.Random, env: Env) -> Request:
    """Any route with any method and random query parameters and body."""
    method, path = rng.choice(ROUTES)
    if rng.random() < 0.15:
        method = rng.choice(["PUT", "DELETE", "PATCH", "HEAD", "OPTIONS", "QWERTY"])
    path = path.format(model=rng.choice(["tiny", "emb", "nope", "%00"]), id=rng.choice(["x", "ds_1", "ftjob_1"]))
    params = {rng.choice(["format", "stream", "model", "x"]): rng.choice(["json", "prometheus", "true", "1", "?"])}
    body = rng.randbytes(rng.randint(0, 300)) if method not in ("GET", "HEAD") else None
    headers = _auth(rng, env)
    if body is not None:
        headers["Content-Type"] = rng.choice([OCTET, "application/json", "text/plain"])
    return Request("route", method, path, params, headers, body)


def _unknown(rng: random.Random, env: Env) -> Request:
    path = "/" + "/".join(rng.choice(["v1", "v2", "admin", "..", "%2e%2e", "x" * 50, "models"]) for _ in range(3))
    return Request("unknown", rng.choice(["GET", "POST", "DELETE"]), path, {}, _auth(rng, env))


def _http(rng: random.Random, env: Env) -> Request:
    """Malformed HTTP sent as raw bytes: bad request lines, headers, lengths, chunking, a head over h11's limit."""
    raw = rng.choice(JUNK_HEADS)
    if rng.random() < 0.3:
        raw = rng.randbytes(rng.randint(1, 200)) + b"\r\n\r\n"
    return Request("http", raw=raw)


def make_request(rng: random.Random, env: Env) -> Request:
    kind = rng.choices([k for _, k in KINDS], weights=[w for w, _ in KINDS])[0]
    if kind in ("generate", "embed"):
        return _inference(rng, env, kind)
    return {"route": _route, "dataset": _dataset, "job": _job, "unknown": _unknown, "http": _http}[kind](rng, env)


# ---------------------------------------------------------------------------------------------- sending
@dataclass
class Report:
    """What the fuzzer saw."""

    statuses: Counter = field(default_factory=Counter)
    by_kind: Counter = field(default_factory=Counter)
    latencies: list[float] = field(default_factory=list)
    server_errors: list[str] = field(default_factory=list)
    no_answer: list[str] = field(default_factory=list)
    slow: list[str] = field(default_factory=list)
    seconds: float = 0.0
    rss_start_mib: float = 0.0
    rss_end_mib: float = 0.0
    rss_peak_mib: float = 0.0
    rss_trace: list[float] = field(default_factory=list)  # at each tenth of the requests
    server_5xx: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, req: Request, status: int | None, seconds: float, detail: str = "") -> None:
        where = f"{req.kind} {req.method} {req.path}" if req.raw is None else f"http {req.raw[:40]!r}"
        with self.lock:
            self.by_kind[req.kind] += 1
            self.latencies.append(seconds)
            if status is None:
                self.statuses["no answer"] += 1
                self.no_answer.append(f"{where}: {detail}")
                return
            self.statuses[status] += 1
            if status >= 500:
                self.server_errors.append(f"{where} -> {status} {detail[:200]}")
            if seconds > SLOW_S:
                self.slow.append(f"{where} -> {status} in {seconds:.2f} s")

    def summary(self) -> dict:
        lat = sorted(self.latencies)
        q = lambda p: round(lat[min(len(lat) - 1, int(p * len(lat)))] * 1000, 2) if lat else None
        return {
            "requests": len(lat),
            "seconds": round(self.seconds, 1),
            "requests_per_s": round(len(lat) / self.seconds, 1) if self.seconds else None,
            "statuses": {str(k): v for k, v in sorted(self.statuses.items(), key=lambda kv: str(kv[0]))},
            "by_kind": dict(sorted(self.by_kind.items())),
            "5xx": len(self.server_errors),
            "5xx_by_server_metrics": self.server_5xx,
            "no_answer": len(self.no_answer),
            "slow_over_1s": len(self.slow),
            "latency_ms": {"p50": q(0.5), "p99": q(0.99), "max": round(lat[-1] * 1000, 2) if lat else None},
            "rss_mib_each_tenth": self.rss_trace,
            "rss_mib": {
                "start": self.rss_start_mib,
                "end": self.rss_end_mib,
                "growth": round(self.rss_end_mib - self.rss_start_mib, 1),
                "peak": self.rss_peak_mib,
            },
            "examples": {"5xx": self.server_errors[:5], "no_answer": self.no_answer[:5], "slow": self.slow[:5]},
        }


def _send_http(client, url: str, req: Request, report: Report) -> None:
    import httpx

    start = time.perf_counter()
    try:
        r = client.request(req.method, url + req.path, params=req.params, headers=req.headers, content=req.body)
        report.record(req, r.status_code, time.perf_counter() - start, r.text[:200] if r.status_code >= 500 else "")
    except httpx.HTTPError as exc:
        report.record(req, None, time.perf_counter() - start, repr(exc)[:200])


def _send_raw(port: int, req: Request, report: Report) -> None:
    """Raw bytes on a fresh connection; the answer's status line (a close without one counts as a refusal, 400)."""
    start = time.perf_counter()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(req.raw)
            head = sock.recv(64)
    except OSError as exc:
        report.record(req, None, time.perf_counter() - start, repr(exc)[:200])
        return
    parts = head.split(b" ", 2)
    status = int(parts[1]) if head.startswith(b"HTTP/1.1 ") and parts[1].isdigit() else 400
    report.record(req, status, time.perf_counter() - start)


def _worker(url: str, pid: int, env: Env, args, jobs: "_Jobs", report: Report) -> None:
    import httpx

    port = int(url.rsplit(":", 1)[1])
    tenth = max(1, args.requests // 10)
    with httpx.Client(timeout=30.0) as client:
        while (i := jobs.next()) is not None:
            if i % tenth == tenth - 1:
                report.rss_trace.append(_rss_mib(pid))
            req = make_request(random.Random(args.seed * 1_000_003 + i), env)
            if req.raw is not None:
                _send_raw(port, req, report)
            else:
                _send_http(client, url, req, report)


class _Jobs:
    """Request numbers 0..n-1, handed out until the count or the deadline is reached."""

    def __init__(self, n: int, deadline: float):
        self.n, self.deadline, self.i, self.lock = n, deadline, 0, threading.Lock()

    def next(self) -> int | None:
        with self.lock:
            if self.i >= self.n or time.monotonic() > self.deadline:
                return None
            self.i += 1
            return self.i - 1


def _rss_mib(pid: int, field_name: str = "VmRSS") -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field_name + ":"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


def _fuzz(url: str, pid: int, env: Env, args) -> Report:
    """Warm the server (one valid request per route), then run the clients until the count or the deadline."""
    import httpx

    auth = {"Authorization": f"Bearer {env.key}", "Content-Type": OCTET}
    for route, corpus, model in (("generate", env.generate, "tiny"), ("embed", env.embed, "emb")):
        for blob in corpus:
            r = httpx.post(
                f"{url}/v1/{route}",
                params={"model": model, "max_new_tokens": 2},
                content=blob,
                headers=auth,
                timeout=60,
            )
            assert r.status_code == 200, r.text
    report = Report(rss_start_mib=_rss_mib(pid))
    start = time.monotonic()
    jobs = _Jobs(args.requests, start + args.max_seconds)
    threads = [threading.Thread(target=_worker, args=(url, pid, env, args, jobs, report)) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    report.seconds = time.monotonic() - start
    report.rss_end_mib, report.rss_peak_mib = _rss_mib(pid), _rss_mib(pid, "VmHWM")
    metrics = httpx.get(f"{url}/metrics", params={"format": "json"}, timeout=30).json()
    report.server_5xx = sum(r["count"] for r in metrics["requests"] if r["status"] >= 500)
    return report


def _print(report: Report, args) -> None:
    s = report.summary()
    print(
        f"fuzz: {s['requests']} requests in {s['seconds']} s ({s['requests_per_s']} req/s), {args.clients} clients, "
        f"seed {args.seed}"
        + ("" if s["requests"] >= args.requests else f" (stopped at --max-seconds {args.max_seconds})")
    )
    print("by kind:  " + "  ".join(f"{k} {v}" for k, v in s["by_kind"].items()))
    print("statuses: " + "  ".join(f"{k}: {v}" for k, v in s["statuses"].items()))
    print(
        f"5xx: {s['5xx']} (server's own count: {s['5xx_by_server_metrics']})  no answer: {s['no_answer']}  "
        f"slow (> {SLOW_S:g} s): {s['slow_over_1s']}"
    )
    print(f"latency ms: p50 {s['latency_ms']['p50']}  p99 {s['latency_ms']['p99']}  max {s['latency_ms']['max']}")
    rss = s["rss_mib"]
    print(f"server RSS MiB: start {rss['start']}  end {rss['end']}  growth {rss['growth']}  peak {rss['peak']}")
    print("server RSS MiB at each tenth of the requests: " + " ".join(f"{x:g}" for x in s["rss_mib_each_tenth"]))
    for name, examples in s["examples"].items():
        for line in examples:
            print(f"  {name}: {line}")


if __name__ == "__main__":
    raise SystemExit(main())
