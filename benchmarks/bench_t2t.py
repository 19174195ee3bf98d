"""T2T and PCT2T privatization time per sequence (10 to 10,000 words) and memory, next to RAPT's Table X.

RAPT (arXiv 2305.06212, Table X) privatized one sequence on a Raspberry Pi 4 in 0.03 / 0.05 / 0.15 / 0.81 s
for 10 / 100 / 1,000 / 10,000 words, using about 100 MB. We run the same sizes on real text (SST-2 training
sentences concatenated, from ../shared/data or $TEXTFREE_DATA; else a built-in paragraph repeated) with the
MiniLM table (21,777 whole words x 384), print the median time per sequence over interleaved repeats, the
speed-up over RAPT's figures (RAPT time / our time) and the peak memory of the privatization step
(resident-set high-water mark above the level before the call, reset per measurement through
/proc/self/clear_refs where Linux allows it, else the ru_maxrss delta). ``--table glove`` runs the same on
the 25-d GloVe Twitter table instead, to show how much of the cost is the table's size.

    PYTHONPATH=src python benchmarks/bench_t2t.py [--eta 100] [--threads 2] [--repeats 7]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path

import torch

RAPT_TABLE_X = {10: 0.03, 100: 0.05, 1000: 0.15, 10000: 0.81}  # seconds per sequence, Raspberry Pi 4
RAPT_MEMORY_MB = 100

FALLBACK_PARAGRAPH = (
    "The film follows a young woman who travels from Paris to Rome with her brother, and the two of them "
    "discover that their late father kept a second family. It is funny, warm and surprisingly moving; the "
    "music is great, although the ending drags a little. We found the answer in a letter that they wrote "
    "after the war, and she read it twice before she gave the old book to him in the garden. "
)


def data_dir() -> Path:
    return Path(os.environ.get("TEXTFREE_DATA") or Path(__file__).resolve().parents[1] / ".." / "shared" / "data")


def source_text(min_words: int) -> tuple[str, str]:
    from textfree.substitution import split_text

    sst = data_dir() / "glue" / "SST-2" / "train_full.tsv"
    if sst.is_file():
        sentences, count = [], 0
        with open(sst, encoding="utf-8") as fh:
            next(fh)  # header: sentence \t label
            for line in fh:
                sentence = line.split("\t")[0].strip()
                sentences.append(sentence)
                count += len(split_text(sentence)) // 2
                if count >= min_words:
                    break
        return " ".join(sentences), f"SST-2 train sentences ({sst})"
    text = FALLBACK_PARAGRAPH
    while len(split_text(text)) // 2 < min_words:
        text += FALLBACK_PARAGRAPH
    return text, "built-in paragraph, repeated (SST-2 not found)"


def first_words(text: str, n: int) -> str:
    from textfree.substitution import split_text

    parts = split_text(text)
    return "".join(parts[: 2 * n])


class PeakRSS:
    """Resident-set high-water mark of a block above the level at its start, in MB."""

    def __enter__(self):
        self.reset = _try_reset_hwm()
        self.start_kb = _status_kb("VmRSS") if self.reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return self

    def __exit__(self, *exc):
        end = _status_kb("VmHWM") if self.reset else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        self.mb = max(0, end - self.start_kb) / 1024


def _status_kb(key: str) -> int:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _try_reset_hwm() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return _status_kb("VmHWM") > 0
    except OSError:
        return False


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--eta", type=float, default=100.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--backend", default="auto", choices=["auto", "matmul", "faiss"])
    parser.add_argument("--tagger", default="textblob", choices=["textblob", "nltk"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--table", default="minilm", choices=["minilm", "glove"],
        help="minilm: MiniLM input embeddings (the default); glove: GloVe Twitter 25d, 11,925 words (shared data)",
    )
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    try:
        import faiss

        faiss.omp_set_num_threads(args.threads)
    except ImportError:
        pass
    from textfree.substitution import TextToText, WordEmbeddingTable, get_tagger, pct2t

    rss0 = _status_kb("VmRSS") / 1024
    t0 = time.perf_counter()
    if args.table == "glove":
        table = WordEmbeddingTable.from_glove(data_dir() / "embeddings" / "glove_twitter_25d_12k.txt")
    else:
        table = WordEmbeddingTable.from_hf_model()
    t_table = time.perf_counter() - t0
    rss_table = _status_kb("VmRSS") / 1024
    tagger_dir = data_dir() / "nltk_data" if args.tagger == "nltk" else None
    t0 = time.perf_counter()
    t2t = TextToText(table, args.eta, backend=args.backend)
    t_t2t = time.perf_counter() - t0
    t0 = time.perf_counter()
    pct = pct2t(table, args.eta, tagger=get_tagger(args.tagger, tagger_dir), backend=args.backend)
    t_pct = time.perf_counter() - t0
    rss_ready = _status_kb("VmRSS") / 1024
    text, source = source_text(max(args.sizes))
    gen = torch.Generator().manual_seed(args.seed)

    mech = {"T2T": t2t, "PCT2T": pct}
    texts = {n: first_words(text, n) for n in args.sizes}
    for n in args.sizes:  # warm-up: builds faiss indices and sub-tables, loads the tagger lexicon
        for m in mech.values():
            m.privatize([texts[n]], generator=gen)
    times = {(name, n): [] for name in mech for n in args.sizes}
    rates = {}
    for n in args.sizes:
        for _ in range(args.repeats):
            for name, m in mech.items():
                t0 = time.perf_counter()
                result = m.privatize_detailed([texts[n]], generator=gen)
                times[(name, n)].append(time.perf_counter() - t0)
                rates[(name, n)] = result.replacement_rate
    memory = {}
    for n in args.sizes:
        for name, m in mech.items():
            with PeakRSS() as peak:
                m.privatize([texts[n]], generator=gen)
            memory[(name, n)] = peak.mb

    print(f"torch {torch.__version__}, {args.threads} threads, backend={args.backend}, tagger={args.tagger}, "
          f"eta={args.eta}")
    print(f"text: {source}")
    print(f"table: {len(table)} words x {table.dim} ({table.name}), built in {t_table:.2f} s")
    print(f"setup: T2T {t_t2t:.2f} s, PCT2T {t_pct:.2f} s (tags the {len(table)} table words once)")
    print(f"resident memory: python+torch {rss0:.0f} MB; +table (and, for MiniLM, loading the model) "
          f"{rss_table - rss0:.0f} MB; +search indices, tagger lexicon and table tags {rss_ready - rss_table:.0f} MB")
    token_mb = table.subword.token_vectors.numel() * 4 / 2**20 if table.subword is not None else 0.0
    print(f"tensors: table {table.vectors.numel() * 4 / 2**20:.0f} MB, sub-token embeddings {token_mb:.0f} MB, "
          f"search copy of the table {table.vectors.numel() * 4 / 2**20:.0f} MB (+ faiss's own copy once used)")
    print()
    head = (f"{'words':>6s} | {'RAPT T2T (Pi 4)':>15s} | {'T2T median':>10s} {'speed-up':>8s} {'peak MB':>7s} | "
            f"{'PCT2T median':>12s} {'speed-up':>8s} {'peak MB':>7s} | {'replaced T2T/PCT2T':>18s}")
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        rapt = RAPT_TABLE_X.get(n)
        cells = [f"{n:6d}", f"{rapt:15.2f}" if rapt else f"{'-':>15s}"]
        for i, name in enumerate(mech):
            med = statistics.median(times[(name, n)])
            speed = f"{rapt / med:7.1f}x" if rapt else f"{'-':>8s}"
            width = 10 if i == 0 else 12
            cells.append(f"{med:{width}.4f} {speed} {memory[(name, n)]:7.1f}")
        cells.append(f"{rates[('T2T', n)]:8.2f} / {rates[('PCT2T', n)]:.2f}")
        print(" | ".join(cells))
    print(f"\nRAPT Table X memory: ~{RAPT_MEMORY_MB} MB. 'peak MB' is the resident memory one privatize() call adds "
          "on top of what is already resident (0.0: it fit in memory the process already held).")


if __name__ == "__main__":
    main()
