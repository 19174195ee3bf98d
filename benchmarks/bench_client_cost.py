"""Client cost per prompt: tokenize + encode + pool + noise, at batch 1 and 32.

Prints wall-clock medians per stage and the pooling + noise overhead as a ratio of encoding time (target: under
5%). The stages run interleaved: each round times one tokenize, one encode and one pool + noise (the order rotated
from round to round), and the overhead ratio is the median of the per-round ratios, so a change in machine load
moves every stage of a round alike and cannot move the ratio. Prompts are Pri-DDX private parts when ../shared/data
is present, else built-in medical-style prompts.

    python benchmarks/bench_client_cost.py [--repeats 20] [--epsilon 75] [--k 4]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import torch  # noqa: E402

from textfree.encoders import ContextualEncoder  # noqa: E402
from textfree.mechanisms import L2Laplace, SlotPrivatization  # noqa: E402
from textfree.rng import secure_generator  # noqa: E402

FALLBACK = [
    "A 46-year-old male has a history of cluster headaches, smokes a pack a day and reports sharp pain behind the left "
    "eye.",
    "The patient, a 29-year-old woman, presents with fever, productive cough and pleuritic chest pain for three days.",
    "A 71-year-old man with diabetes and chronic kidney disease complains of swelling in both legs and shortness of "
    "breath.",
    "She is 35, pregnant in the third trimester, and has had headaches, blurred vision and high blood pressure since "
    "Monday.",
]


def load_prompts(n: int) -> list[str]:
    data = Path(os.environ.get("TEXTFREE_DATA", Path(__file__).resolve().parents[1] / ".." / "shared" / "data"))
    try:
        from textfree.alignment import private_texts
        from textfree.data import load_dataset

        if data.is_dir():
            texts = private_texts(load_dataset("pri-ddx", split="test", limit=n))
            if texts:
                return texts
    except Exception as exc:  # the benchmark still runs on built-in prompts
        print(f"(Pri-DDX unavailable: {exc}; using built-in prompts)", file=sys.stderr)
    return (FALLBACK * (n // len(FALLBACK) + 1))[:n]


def interleaved(stages: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds per call of each stage, ``repeats`` rounds; every round calls each stage once, the order rotated by one
    stage per round so that no stage always runs first (or right after another)."""
    names = list(stages)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            t0 = time.perf_counter()
            stages[name]()
            times[name].append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--epsilon", type=float, default=75.0)
    ap.add_argument("--k", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    enc = ContextualEncoder.from_pretrained(None)
    sp = SlotPrivatization(L2Laplace(args.epsilon), k=args.k)
    prompts = load_prompts(32)
    print(
        f"encoder {enc.name} (d={enc.dim}), eps={args.epsilon}, k={args.k}, threads={args.threads}, "
        f"mean prompt length {statistics.mean(len(enc.tokenizer(p)['input_ids']) for p in prompts):.1f} tokens; "
        f"{args.repeats} interleaved rounds, medians (overhead/encode: median of the per-round ratios)"
    )
    print(
        f"{'batch':>5} {'tokenize ms':>12} {'encode ms':>10} {'pool+noise ms':>14} {'total ms/prompt':>16} "
        f"{'overhead/encode':>16}"
    )
    for batch in (1, 32):
        texts = prompts[:batch]
        for _ in range(3):  # warm-up
            enc.encode(texts)
        toks = enc.tokenize(texts)
        mask = toks["attention_mask"]

        def encode():
            with torch.inference_mode():
                return enc(toks["input_ids"], toks["attention_mask"])

        hidden = encode()
        stages = {
            "tokenize": lambda: enc.tokenize(texts),
            "encode": encode,
            "noise": lambda: sp.apply(hidden, mask, generator=secure_generator()),
        }
        times = interleaved(stages, args.repeats)
        t_tok, t_enc, t_noise = (statistics.median(times[name]) for name in ("tokenize", "encode", "noise"))
        ratio = statistics.median(n / e for n, e in zip(times["noise"], times["encode"]))  # per round
        total = t_tok + t_enc + t_noise
        print(
            f"{batch:>5} {t_tok * 1e3:>12.2f} {t_enc * 1e3:>10.2f} {t_noise * 1e3:>14.3f} {total / batch * 1e3:>16.2f} "
            f"{ratio:>15.2%}"
        )
    print("target: pool+noise overhead under 5% of encoding time")


if __name__ == "__main__":
    main()
