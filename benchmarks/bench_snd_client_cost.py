"""Split-N-Denoise: the client's cost per prompt (SnD Table 14 shape) against running all-MiniLM-L6-v2 locally.

For a prompt of 128 tokens (and, with ``--task``, one of the task's mean token length) it times, per prompt:

* (a) token lookup: tokenize + gather the rows of the embedding table;
* (b) noise + clip: L2-Laplace at ``--eta`` on every token, clipped to C (:func:`textfree.snd.noise.privatize_tokens`);
* (c) each denoiser given by ``--denoiser PATH`` (repeatable: the full and the small one), on the server's answer; at
  a length beyond the learned positions a denoiser was trained with, an untrained denoiser of the same shape with
  enough positions is timed instead (the cost does not depend on the weights) and the result says so (``shape_only``);
* (d) the whole encoder run locally (tokenize + all-MiniLM-L6-v2 + mean pooling): what SnD is meant to save.

Stages run in interleaved rounds (every round times every stage once, in a rotating order), after warm-up rounds,
with ``torch.set_num_threads(1)`` (one core, for stable figures); it reports medians and, per denoiser, the median
over rounds of (client total / local MiniLM) of the same round, so machine noise cancels. It also measures the
bytes of one ``/v1/embed`` request body at 128 tokens (the payload's ``to_bytes()``) and each denoiser's file size
(a one-time download). The JSON (``--out``, format ``textfree.snd.client_cost``) is what ``textfree snd report``
reads; it holds the package versions, date and host like a result file.

    python benchmarks/bench_snd_client_cost.py --denoiser runs/snd-minilm --denoiser runs/snd-minilm-small \\
        --task qqp --out results/snd/client_cost.json
    python benchmarks/bench_snd_client_cost.py --tiny --rounds 3 --out /tmp/cost.json   # smoke test, random models
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as _dt
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

FORMAT = "textfree.snd.client_cost"
FORMAT_VERSION = 1
_FILLER = (
    "Is it true that a good night of sleep before an exam helps more than studying late, and what do the studies "
    "on memory consolidation say about students who sleep less than six hours during the week before the test? "
)


def prompt_of(tokenizer: Any, n_tokens: int) -> str:
    """A text that tokenizes to exactly ``n_tokens`` tokens, special tokens included (cut at a token boundary)."""
    if n_tokens < 3:
        raise ValueError(f"a prompt needs at least 3 tokens (2 special + 1), got {n_tokens}")
    text = _FILLER
    while len(tokenizer(text)["input_ids"]) < n_tokens:
        text += _FILLER
    ids = tokenizer(text, add_special_tokens=False)["input_ids"][: n_tokens - 2]
    prompt = tokenizer.decode(ids)
    got = len(tokenizer(prompt)["input_ids"])
    if got != n_tokens:  # decoding can merge pieces; trim or pad word by word until it fits
        words = prompt.split()
        while got > n_tokens and words:
            words.pop()
            got = len(tokenizer(" ".join(words))["input_ids"])
        prompt = " ".join(words)
    return prompt


def task_mean_tokens(task: str, tokenizer: Any, limit: int = 500) -> float:
    """Mean token count (special tokens included, cut at 128) of the sentences of ``task``'s test split sample."""
    from textfree.rng import seeded_generator
    from textfree.snd.evaluate import load_task, tokenize

    data = load_task(task, train_limit=2, test_limit=limit, generator=seeded_generator(0, warn=False))
    sentences = [s for example in data.test_texts for s in example]
    return statistics.mean(len(ids) for ids in tokenize(tokenizer, sentences, 128))


def _tiny_setup(root: Path) -> tuple[str, list[str]]:
    """A tiny random encoder and a tiny full and small random denoiser under ``root`` (smoke test only)."""
    from textfree.encoders import make_tiny_encoder_dir
    from textfree.snd.denoiser import Denoiser, DenoiserConfig

    enc = make_tiny_encoder_dir(root / "encoder", hidden=32, layers=2, heads=2, seed=0)
    runs = []
    for name, layers, positions in (("tiny-full", 2, 256), ("tiny-small", 1, 64)):  # the small one: shape-only at 128
        torch.manual_seed(0)
        cfg = DenoiserConfig(token_dim=32, output_dim=32, d_model=32, d_ff=32, d_kv=8, n_head=2, n_layers=layers,
                             max_tokens=positions)  # fmt: skip
        Denoiser(cfg).save_pretrained(root / name)
        runs.append(str(root / name))
    return str(enc), runs


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(
    *,
    model: str,
    denoisers: Sequence[str],
    lengths: Sequence[tuple[str, int]],
    eta: float,
    rounds: int,
    warmup: int,
    roles: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Time the client's stages and local MiniLM for each (label, tokens) in ``lengths``; the benchmark's JSON."""
    from textfree.encoders import EmbeddingTableEncoder
    from textfree.encoders.loading import load_hf_encoder
    from textfree.mechanisms import Clipped, L2Laplace
    from textfree.privatizer import Privatizer
    from textfree.rng import seeded_generator
    from textfree.snd.denoiser import DENOISER_FILE, Denoiser
    from textfree.snd.noise import privatize_tokens

    tokenizer, server, name, sha = load_hf_encoder(None if model == "default" else model)
    server.eval()
    table = server.get_input_embeddings().weight.detach().float().clone()
    c = float(table.norm(dim=1).max())
    models = []
    for path in denoisers:
        p = Path(path)
        file = p / DENOISER_FILE if p.is_dir() else p
        den = Denoiser.from_pretrained(p)
        label = p.name if p.name != DENOISER_FILE else p.parent.name
        role = (roles or {}).get(path) or ("small" if "small" in str(path).lower() else "full")
        models.append((label, den, {"name": label, "path": str(path), "role": role, "sha256": den.sha256,
                                    "file_bytes": file.stat().st_size, "n_layers": den.config.n_layers,
                                    "parameters": sum(t.numel() for t in den.parameters())}))  # fmt: skip
    if len({m[0] for m in models}) != len(models):
        raise SystemExit(f"--denoiser runs must have different names, got {[m[0] for m in models]}")
    gen = seeded_generator(0, warn=False)
    entries = []
    for label, n_tokens in lengths:
        prompt = prompt_of(tokenizer, n_tokens)
        state: dict[str, Any] = {}

        def lookup() -> None:
            enc = tokenizer([prompt], return_tensors="pt")
            state["mask"] = enc["attention_mask"].bool()
            state["x"] = table[enc["input_ids"]]

        def noise() -> None:
            state["x_tilde"], state["z"] = privatize_tokens(
                state["x"], state["mask"], eta, clip_norm=c, generator=gen
            )  # fmt: skip

        def local() -> None:
            enc = tokenizer([prompt], return_tensors="pt")
            with torch.no_grad():
                hidden = server(**enc).last_hidden_state
            m = enc["attention_mask"].unsqueeze(-1).float()
            state["e_n"] = (hidden * m).sum(1) / m.sum(1)

        stages: dict[str, Callable[[], None]] = {"lookup": lookup, "noise_clip": noise, "local_minilm": local}
        skipped: dict[str, str] = {}  # (kept in the format: a denoiser not timed at this length)
        shape_only = {}
        for dname, den, _ in models:
            if n_tokens > den.config.max_tokens:  # its learned positions stop there: time the same shape, untrained
                shape_only[dname] = (f"same shape with {n_tokens} positions, untrained: timing only (the trained one "
                                     f"reads at most {den.config.max_tokens} tokens)")  # fmt: skip
                print(f"(denoiser {dname}: {shape_only[dname]})", file=sys.stderr)
                den = Denoiser(dataclasses.replace(den.config, max_tokens=n_tokens)).eval()
            stages[f"denoiser:{dname}"] = lambda den=den: den.denoise(
                state["e_n"], state["x_tilde"], state["z"], state["mask"], eta
            )
        order = list(stages)
        times: dict[str, list[float]] = {k: [] for k in order}
        lookup(), noise(), local()
        for r in range(warmup + rounds):
            shift = r % len(order)
            for key in order[shift:] + order[:shift]:
                if key.startswith("denoiser:") and "x_tilde" not in state:
                    noise()
                t = _timed(stages[key])
                if r >= warmup:
                    times[key].append(t)
        tokens = int(state["mask"].sum())
        totals = {d: [times["lookup"][i] + times["noise_clip"][i] + times[f"denoiser:{d}"][i] for i in range(rounds)]
                  for d, _, _ in models if d not in skipped}  # fmt: skip
        entries.append({
            "label": label,
            "tokens": tokens,
            "medians_s": {k: statistics.median(v) for k, v in times.items()},
            "client_total_s": {d: statistics.median(v) for d, v in totals.items()},
            "ratio_to_local": {d: statistics.median(t / loc for t, loc in zip(v, times["local_minilm"]))
                               for d, v in totals.items()},
            "skipped": skipped,
            "shape_only": shape_only,
        })  # fmt: skip
    # the /v1/embed body at 128 tokens: a token payload of the clipped noisy embeddings (as textfree.client sends)
    table_enc = EmbeddingTableEncoder(table, tokenizer, name=name, sha256=sha, max_length=512)
    privatizer = Privatizer(table_enc, Clipped(L2Laplace(eta), max_norm=c), k=1, normalize=False, renormalize=False)
    payload = privatizer.privatize([prompt_of(tokenizer, 128)], generator=seeded_generator(1, warn=False))
    body = payload.to_bytes()
    d = table_enc.dim
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "settings": {
            "threads": torch.get_num_threads(),
            "rounds": rounds,
            "warmup": warmup,
            "eta": eta,
            "encoder": name,
            "clip_norm": c,
        },  # fmt: skip
        "lengths": entries,
        "denoisers": [m[2] for m in models],
        "request_bytes": {
            "tokens": int(payload.mask.sum()),
            "dim": d,
            "bytes": len(body),
            "raw_float32_bytes": int(payload.mask.sum()) * d * 4,
        },  # fmt: skip
    }


def _print(result: dict[str, Any]) -> None:
    s = result["settings"]
    print(f"encoder {s['encoder']}, eta {s['eta']:g}, C {s['clip_norm']:.4g}, {s['threads']} torch thread(s), "
          f"{s['rounds']} interleaved rounds after {s['warmup']} warm-up; medians in ms per prompt")  # fmt: skip
    for e in result["lengths"]:
        med = e["medians_s"]
        print(f"\n{e['label']} ({e['tokens']} tokens):")
        for key, value in med.items():
            print(f"  {key:<28} {1000 * value:9.3f} ms")
        for d, total in e["client_total_s"].items():
            print(f"  client total with {d:<10} {1000 * total:9.3f} ms  = {100 * e['ratio_to_local'][d]:.1f}% of "
                  "local MiniLM (median of per-round ratios)")  # fmt: skip
    rb = result["request_bytes"]
    print(f"\n/v1/embed request body at {rb['tokens']} tokens: {rb['bytes']:,} bytes (raw float32 vectors "
          f"{rb['raw_float32_bytes']:,}); the paper's Table 14 says 0.00014 MB = 140 bytes")  # fmt: skip
    for d in result["denoisers"]:
        print(f"denoiser {d['name']} ({d['role']}): {d['file_bytes']:,} bytes, {d['n_layers']} layers, "
              f"{d['parameters']:,} parameters (one-time download)")  # fmt: skip


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Parse ``argv``, run the benchmark, print it, write ``--out``; returns the JSON written."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default", help="The served encoder ('default': all-MiniLM-L6-v2).")
    ap.add_argument("--denoiser", action="append", default=[], help="A denoiser run (repeatable: full and small).")
    ap.add_argument("--role", action="append", default=[], help="PATH=full|small for a --denoiser (default: name).")
    ap.add_argument("--task", default=None, help="Also time a prompt of this GLUE task's mean token length.")
    ap.add_argument("--eta", type=float, default=100.0, help="The noise level (default 100).")
    ap.add_argument("--rounds", type=int, default=50, help="Interleaved timed rounds (default 50).")
    ap.add_argument("--warmup", type=int, default=3, help="Untimed warm-up rounds (default 3).")
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1: stable figures).")
    ap.add_argument("--tiny", action="store_true", help="Smoke test: tiny random encoder and denoisers.")
    ap.add_argument("--out", type=Path, default=Path("results/snd/client_cost.json"), help="The JSON to write.")
    args = ap.parse_args(argv)
    if args.rounds < 1 or args.warmup < 0 or args.threads < 1:
        ap.error(f"--rounds and --threads must be >= 1 and --warmup >= 0, got {args.rounds}, {args.threads}, "
                 f"{args.warmup}")  # fmt: skip
    if not args.eta > 0:
        ap.error(f"--eta must be > 0, got {args.eta}")
    roles = {}
    for value in args.role:
        key, _, role = value.rpartition("=")
        if not key or role not in ("full", "small"):
            ap.error(f"--role must be PATH=full or PATH=small, got {value!r}")
        roles[key] = role
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        model, denoisers = args.model, list(args.denoiser)
        if args.tiny:
            model, tiny = _tiny_setup(Path(tmp))
            denoisers = denoisers or tiny
        if not denoisers:
            ap.error("give at least one --denoiser PATH (a denoiser run, e.g. runs/snd-minilm), or --tiny")
        lengths = [("128 tokens", 128)]
        if args.task:
            from textfree.encoders.loading import load_hf_encoder

            tokenizer = load_hf_encoder(None if model == "default" else model)[0]
            try:
                mean = task_mean_tokens(args.task, tokenizer)
                lengths.append((f"{args.task} mean length", max(3, round(mean))))
            except Exception as exc:  # noqa: BLE001 - the 128-token figure still stands without the task
                print(f"(task {args.task!r} unavailable: {exc}; timing 128 tokens only)", file=sys.stderr)
        result = measure(model=model, denoisers=denoisers, lengths=lengths, eta=args.eta, rounds=args.rounds,
                         warmup=args.warmup, roles=roles)  # fmt: skip
    from textfree.atomic import atomic_write_text
    from textfree.experiments.runner import host_info, package_versions

    result |= {
        "versions": package_versions(),
        "date": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "host": host_info(),
        "command": "python benchmarks/bench_snd_client_cost.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    _print(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out, json.dumps(result, indent=1, sort_keys=True) + "\n")
    print(f"wrote {args.out}")
    return result


if __name__ == "__main__":
    main()
