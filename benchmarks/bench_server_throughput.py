"""Server cost of the text-free interface: generation throughput and request overhead.

1. Text-free generation (``ServerModel.generate``: projection of the pooled slots + BOS/public token embeddings +
   greedy decoding from ``inputs_embeds``) against ordinary token-prompt generation with the same decoder (the same
   LoRA-wrapped model) and batch: token ids of the same total length (BOS + slots + public tokens), the same
   max_new_tokens, greedy. Two token baselines: Hugging Face ``generate(input_ids)``, and our own greedy loop fed
   the ids' embeddings. Ratio = text-free prompts/s over token prompts/s (target >= 1.0 against HF generate).
   Interleaved rounds, each starting with the next path; the ratio of the medians and the median of each round's
   own ratio (the robust one on a loaded machine). Every path computes the prompt's logits at its
   last position only (HF generate and our loop both pass ``logits_to_keep=1``) and runs in eval mode; the two
   token paths must give the same tokens (printed).
2. Request overhead: ``Payload.from_bytes`` (framing, header and value checks) and the model's payload checks
   (``prepare``), as a share of the end-to-end latency of one request to a real server on loopback (HTTP, auth,
   micro-batching, generation). Raw bytes and the JSON (base64) wire format.

    python benchmarks/bench_server_throughput.py [--size small|tiny] [--batch 8] [--slots 17] [--new-tokens 16]
        [--rounds 7]

The run is built from config (random weights, all-MiniLM-L6-v2's width and k = 4 on the client side): throughput
does not depend on the weights, only on the shapes. Answers are not read. Print ratios: the machine is noisy.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import httpx  # noqa: E402
import torch  # noqa: E402

import textfree.ppft.service  # noqa: E402,F401  (registers the ppft system)
from textfree.encoders.loading import resolve_encoder_path  # noqa: E402
from textfree.lm.generate import greedy_generate  # noqa: E402
from textfree.payload import Payload  # noqa: E402
from textfree.ppft import server as ppft_server  # noqa: E402
from textfree.ppft.model import TextFreeLM  # noqa: E402
from textfree.ppft.testing import RUN_SIZES, make_tiny_run  # noqa: E402
from textfree.server import ServerConfig, create_app  # noqa: E402
from textfree.server.loadtest import PROMPTS  # noqa: E402
from textfree.server.models import ModelRegistry  # noqa: E402
from textfree.server.testing import serve_in_thread  # noqa: E402

PUBLIC = "Options:\nA. Cluster headache\nB. Migraine\nC. Tension headache\nD. Trigeminal neuralgia"


def median_time(fn, rounds: int) -> float:
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def counting(counts: dict, name: str, generate):
    """``generate`` (a greedy loop) that also records how many tokens it produced."""

    def wrapper(*args, **kwargs):
        out = generate(*args, **kwargs)
        counts[name] = sum(map(len, out))
        return out

    return wrapper


def throughput(server, *, batch: int, slots: int, new_tokens: int, rounds: int) -> None:
    d_e, tok = server.config.encoder_dim, server.tokenizer
    vectors = torch.nn.functional.normalize(
        torch.randn(batch, slots, d_e), dim=-1
    )  # what noisy, renormalised slots are
    mask = torch.ones(batch, slots, dtype=torch.bool)
    public = [PUBLIC] * batch
    n_public = len(server._public_rows(public, 1)[0][0])
    length = 1 + slots + n_public  # BOS + slots + public tokens (+ suffix)
    specials = set(tok.all_special_ids)
    pool = torch.tensor([i for i in range(len(tok)) if i not in specials])
    ids = pool[torch.randint(len(pool), (batch, length), generator=torch.Generator().manual_seed(0))]
    ids[:, 0] = tok.bos_token_id
    attention = torch.ones_like(ids)
    decoder, embed = server.decoder, server.decoder.get_input_embeddings()
    counts, tokens = {}, {}

    ppft_server.greedy_generate = counting(counts, "textfree", greedy_generate)  # the loop ServerModel.generate calls

    def textfree():
        server.generate(vectors, mask, public=public, max_new_tokens=new_tokens)

    @torch.no_grad()
    def hf_tokens():
        out = decoder.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=tok.pad_token_id,
        )
        counts["hf"] = int((out[:, length:] != tok.pad_token_id).sum())
        tokens["hf"] = out[:, length:].tolist()

    @torch.no_grad()
    def loop_tokens():
        out = greedy_generate(
            decoder,
            embed(ids),
            attention,
            max_new_tokens=new_tokens,
            eos_token_id=tok.eos_token_id,
            pad_token_id=tok.pad_token_id,
        )
        counts["loop"] = sum(map(len, out))
        tokens["loop"] = out

    for fn in (textfree, hf_tokens, loop_tokens):  # warm up
        fn()
    # the same ids through both token paths: the same greedy tokens (the loop stops at EOS, HF was told not to)
    same = tokens["loop"] == tokens["hf"]
    times = {"textfree": [], "hf": [], "loop": []}
    paths = [("textfree", textfree), ("hf", hf_tokens), ("loop", loop_tokens)]
    for r in range(rounds):  # interleaved, each round starting with the next path, so background load hits all alike
        for name, fn in paths[r % 3 :] + paths[: r % 3]:
            times[name].append(median_time(fn, 1))
    ppft_server.greedy_generate = greedy_generate
    med = {k: statistics.median(v) for k, v in times.items()}
    print(
        f"\n1. generation: batch {batch}, {length} prompt positions (BOS + {slots} slots + {n_public} public tokens), "
        f"{new_tokens} new tokens, greedy, median of {rounds} interleaved rounds (order rotated)"
    )
    # the paired figure: each round's own ratio (the paths of one round ran within a second of each other, so a
    # change in background load between rounds cancels), then the median over rounds
    paired = {k: statistics.median(t / f for t, f in zip(v, times["textfree"])) for k, v in times.items()}
    print("| path | s / batch | prompts / s | new tokens | text-free / this (medians) | text-free / this (per round) |")
    print("|---|---|---|---|---|---|")
    for name, label in (
        ("textfree", "text-free (ServerModel.generate)"),
        ("hf", "token ids, HF generate"),
        ("loop", "token ids, same greedy loop"),
    ):
        print(
            f"| {label} | {med[name]:.4f} | {batch / med[name]:.2f} | {counts[name]} | "
            f"{med[name] / med['textfree']:.3f} | {paired[name]:.3f} |"
        )
    print(f"same loop, token ids: the same {counts['loop']} new tokens as HF generate: {same}")


def overhead(run: Path, *, slots_text: str, new_tokens: int, rounds: int) -> None:
    config = ServerConfig(models={"m": str(run)}, auth=False, rate_limit_per_minute=0)
    registry = ModelRegistry.load(config)
    model = registry.models["m"]
    lm = TextFreeLM.load(run)
    payload = lm.privatizer(75.0).privatize([slots_text], public=[PUBLIC])
    raw = payload.to_bytes()
    b64 = base64.b64encode(raw).decode()

    def decode_raw():
        return Payload.from_bytes(raw, max_bytes=config.max_body_bytes)

    def decode_json():
        return Payload.from_bytes(base64.b64decode(b64, validate=True), max_bytes=config.max_body_bytes)

    decoded = decode_raw()
    prepare = lambda: model.prepare(decoded, None, config)  # noqa: E731
    n = max(rounds * 20, 100)
    t_raw, t_json, t_prep = (median_time(f, n) for f in (decode_raw, decode_json, prepare))
    with serve_in_thread(create_app(config, registry=registry)) as url, httpx.Client(base_url=url, timeout=120) as http:
        query = {"model": "m", "max_new_tokens": new_tokens}

        def post_raw():
            http.post(
                "/v1/generate", params=query, content=raw, headers={"Content-Type": "application/octet-stream"}
            ).raise_for_status()

        def post_json():
            http.post(
                "/v1/generate", json={"model": "m", "payload_b64": b64, "max_new_tokens": new_tokens}
            ).raise_for_status()

        post_raw(), post_json()
        e2e = {"raw": [], "json": []}
        for _ in range(rounds * 3):
            e2e["raw"].append(median_time(post_raw, 1))
            e2e["json"].append(median_time(post_json, 1))
    med = {k: statistics.median(v) for k, v in e2e.items()}
    print(
        f"\n2. request overhead: one prompt, {sum(payload.lengths)} slots x {payload.encoder.dim}, {len(raw)} payload "
        "bytes, "
        f"{new_tokens} new tokens; medians ({n} decodes, {rounds * 3} requests per format)"
    )
    print("| wire format | decode + validate ms | model checks ms | end-to-end ms | share of end-to-end |")
    print("|---|---|---|---|---|")
    for name, t_dec in (("raw (octet-stream)", t_raw), ("JSON (base64)", t_json)):
        e = med["raw" if name.startswith("raw") else "json"]
        print(f"| {name} | {t_dec * 1e3:.3f} | {t_prep * 1e3:.3f} | {e * 1e3:.1f} | {(t_dec + t_prep) / e:.2%} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", choices=sorted(RUN_SIZES), default="small", help="decoder shape (random weights)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--slots", type=int, default=17, help="pooled slots per prompt (17 = a 68-token prompt at k = 4)")
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, decoder {args.size} {RUN_SIZES[args.size]}")
    with tempfile.TemporaryDirectory(prefix="textfree-bench-") as tmp:
        run = make_tiny_run(tmp, resolve_encoder_path(None), **RUN_SIZES[args.size])
        server = ppft_server.ServerModel.load(run)
        # eval mode for every path: ServerModel.generate puts the module back in the mode it found it in, and a
        # freshly loaded one is in training mode, which would leave the token paths running the LoRA dropout
        server.eval()
        throughput(server, batch=args.batch, slots=args.slots, new_tokens=args.new_tokens, rounds=args.rounds)
        overhead(run, slots_text=" ".join(PROMPTS[:2]), new_tokens=args.new_tokens, rounds=args.rounds)


if __name__ == "__main__":
    main()
