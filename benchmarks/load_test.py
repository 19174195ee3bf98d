"""Load test: a real `textfree serve` process on loopback, N concurrent clients for T seconds.

Prints throughput (req/s), p50/p99 latency, the count of 5xx (must be 0) and the server's resident memory at the
start, middle and end of the load (it should stay flat). Exits 1 if any request got a 5xx or no answer.

    python benchmarks/load_test.py [--clients 16] [--seconds 60] [--size tiny|small | --model RUN_DIR [--encoder DIR]]

Without --model it builds a random run (tiny encoder + a decoder of --size) in a temporary directory. With --model
the client encoder is RUN_DIR/encoder when present (else --encoder, else all-MiniLM-L6-v2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from textfree.ppft.testing import RUN_SIZES, make_demo_run  # noqa: E402
from textfree.server.loadtest import LoadTestConfig, run_load_test, serve_subprocess  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument(
        "--size", choices=sorted(RUN_SIZES), default="tiny", help="decoder shape of the built run (without --model)"
    )
    ap.add_argument("--model", type=Path, help="a PPFT run directory to serve instead")
    ap.add_argument("--encoder", type=Path, help="the client encoder (default: RUN_DIR/encoder)")
    ap.add_argument("--json", action="store_true", help="print the summary as JSON")
    args = ap.parse_args()
    cfg = LoadTestConfig(clients=args.clients, seconds=args.seconds, max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory(prefix="textfree-load-") as tmp:
        run = args.model or make_demo_run(Path(tmp) / "demo", args.size)
        encoder = args.encoder or (run / "encoder" if (run / "encoder").is_dir() else None)
        with serve_subprocess(run, log_path=Path(tmp) / "server.log", max_new_tokens=max(64, cfg.max_new_tokens)) as (
            proc,
            url,
        ):
            result = run_load_test(url, proc.pid, encoder=encoder, config=cfg)
    s = result.summary()
    if args.json:
        print(json.dumps(s, indent=2))
    else:
        print(
            f"{cfg.clients} clients x {s['seconds']} s, max_new_tokens {cfg.max_new_tokens}, model "
            f"{run if args.model else args.size}"
        )
        print(
            f"requests {s['requests']}  throughput {s['throughput_rps']} req/s  p50 {s['p50_ms']} ms  p99 "
            f"{s['p99_ms']} ms"
        )
        print(f"statuses {s['statuses']}  5xx {s['n_5xx']}  no answer {s['errors']}")
        r = s["rss_mib"]
        print(
            f"server RSS MiB: idle {r['idle']}  start {r['start']}  middle {r['middle']}  end {r['end']}  max "
            f"{r['max']}"
            f"  (end - middle {r['end'] - r['middle']:+.1f})"
        )
        print("server RSS MiB every tenth of the run: " + " ".join(f"{result.rss_at(i / 10):.0f}" for i in range(11)))
        batches = result.server_metrics.get("batches", {})
        if batches.get("calls"):
            print(f"server: {batches['calls']} model calls, {batches['rows'] / batches['calls']:.2f} rows per call")
    return 1 if s["n_5xx"] or s["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
