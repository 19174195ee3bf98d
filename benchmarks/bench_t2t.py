"""T2T and PCT2T privatization time per sequence (10 to 10,000 words) and memory, next to RAPT's Table X.

RAPT (arXiv 2305.06212, Table X) privatized one sequence on a Raspberry Pi 4 in 0.03 / 0.05 / 0.15 / 0.81 s
for 10 / 100 / 1,000 / 10,000 words, using about 100 MB. We run the same sizes on real text (SST-2 training
sentences concatenated, from ../shared/data or $TEXTFREE_DATA; else a built-in paragraph repeated) with the
MiniLM table (21,777 whole words x 384), print the median time per sequence over interleaved repeats, the
speed-up over RAPT's figures (RAPT time / our time) and the peak memory of the privatization step
(resident-set high-water mark above the level before the call, reset per measurement through
/proc/self/clear_refs where Linux allows it, else the ru_maxrss delta). ``--table glove`` runs the same on
the 25-d GloVe Twitter table instead, to show how much of the cost is the table's size.

``--search both`` (the default) times the exact search and the opt-in approximate one (``search="approximate"``:
an int8 pass, float64 re-rank of ``1 + --shortlist`` words) side by side. Each repeat draws its noise from
a seed shared by the two modes, so their outputs differ only where the search does: the script prints the share
of released words identical to the exact mode's ("agree") and the share of substituted words left unchanged
("kept", the utility proxy; 1 - replacement rate) in both modes, pooled over the repeats. "noise" is the time of
the L2-Laplace draw alone for that many words, the part of a call that no search can remove. The load average is
printed at start and end: the machine is shared.

``--floor`` (on by default) adds what no exact search of the table can avoid on this machine: the bare product of
the noisy words with the whole table, in each precision the CPU offers (float32, bfloat16, int8), or faiss's fused
flat search, whichever is fastest, plus the noise draw, against the time a 10x speed-up over RAPT's Pi would allow; and
how concentrated the distances from a noisy
word to the table's rows are (the reason pruning cannot skip rows).

    PYTHONPATH=src python benchmarks/bench_t2t.py [--eta 100] [--threads 2] [--repeats 7] [--search both]
        [--small-repeats 70] [--shortlist 7]
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


FLOOR_CHUNK = 256  # query rows per product: keeps the [chunk, V] output small instead of writing [n, V] to memory


def floor_products(table: torch.Tensor) -> dict:
    """The table side of :func:`scan_floor`, made once: its [d, V] float32 and bfloat16 copies, an int8 matrix of
    the same shape (timing only: the values do not matter) and, where faiss is installed, an ``IndexFlatL2``."""
    v, d = table.shape
    tt = table.T.contiguous()
    out = {
        "float32": tt,
        "bfloat16": tt.to(torch.bfloat16),
        "int8": torch.randint(-127, 128, (d, v), dtype=torch.int8, generator=torch.Generator().manual_seed(1)),
    }
    try:
        import faiss

        out["faiss"] = faiss.IndexFlatL2(d)
        out["faiss"].add(table.numpy())
    except ImportError:
        pass
    return out


def scan_floor(tables: dict, n: int, repeats: int, skip: set[str]) -> dict[str, float]:
    """Median seconds of the work an exact scan of the whole table cannot avoid, for n query words: the product
    [n, d] x [d, V] in float32, bfloat16 and int8 (``torch._int_mm``; needs n > 16), in chunks of
    :data:`FLOOR_CHUNK` rows, with no selection, no re-rank and no noise; and faiss's exhaustive float32 search
    (``IndexFlatL2``, k 1: product and selection fused), where faiss is installed. ``tables``: from
    :func:`floor_products`. Noise cannot shrink it (the distances from a noisy word to all rows are nearly equal:
    :func:`print_concentration`), so the fastest of these plus the noise draw is the least an exact privatization
    of n words takes here.

    A precision slower than float32 (emulated where the CPU lacks it) is timed once, added to ``skip`` and not
    run at larger n: it cannot be the floor there either."""
    d = tables["float32"].shape[0]
    gen = torch.Generator().manual_seed(0)
    q = torch.randn(n, d, generator=gen)
    queries = {"float32": q, "bfloat16": q.to(torch.bfloat16)}
    if n > 16:  # torch._int_mm wants more than 16 rows
        queries["int8"] = torch.randint(-127, 128, (n, d), dtype=torch.int8, generator=gen)
    calls = {}
    for name, a in queries.items():
        mm, b = (torch._int_mm if name == "int8" else torch.matmul), tables[name]
        calls[name] = lambda a=a, b=b, mm=mm: [mm(a[i : i + FLOOR_CHUNK], b) for i in range(0, len(a), FLOOR_CHUNK)]
    if "faiss" in tables:
        calls["faiss"] = lambda: tables["faiss"].search(q.numpy(), 1)
    out = {}
    for name, call in calls.items():
        if name in skip:
            continue
        runs = []
        for _ in range(1 + repeats):  # the first is a warm-up
            t0 = time.perf_counter()
            call()
            runs.append(time.perf_counter() - t0)
            if name in ("bfloat16", "int8") and runs[-1] > 2 * out["float32"]:
                skip.add(name)
                break
        out[name] = statistics.median(runs[1:] or runs)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 100, 1000, 10000])
    parser.add_argument("--eta", type=float, default=100.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument(
        "--small-repeats",
        type=int,
        default=70,
        help="repeats for sizes of at most 100 words (cheap, and noisier on a shared machine)",
    )
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "matmul", "faiss", "bf16"],
        help="engine of the exact search (the approximate one always runs on torch)",
    )
    parser.add_argument("--search", default="both", choices=["exact", "approximate", "both"])
    parser.add_argument(
        "--shortlist",
        type=int,
        default=None,
        help="approximate search: words kept beyond the best one (default: the library's)",
    )
    parser.add_argument("--tagger", default="textblob", choices=["textblob", "nltk"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--floor",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="also time the bare table product of each precision (what no exact scan can skip) "
        "and compare it with a 10x target",
    )
    parser.add_argument(
        "--table",
        default="minilm",
        choices=["minilm", "glove"],
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
    from textfree.mechanisms import L2Laplace
    from textfree.substitution import DEFAULT_SHORTLIST, TextToText, WordEmbeddingTable, get_tagger, pct2t, split_text

    load_start = os.getloadavg()
    shortlist = DEFAULT_SHORTLIST if args.shortlist is None else args.shortlist
    modes = ["exact", "approximate"] if args.search == "both" else [args.search]
    rss0 = _status_kb("VmRSS") / 1024
    t0 = time.perf_counter()
    if args.table == "glove":
        table = WordEmbeddingTable.from_glove(data_dir() / "embeddings" / "glove_twitter_25d_12k.txt")
    else:
        table = WordEmbeddingTable.from_hf_model()
    t_table = time.perf_counter() - t0
    rss_table = _status_kb("VmRSS") / 1024
    tagger_dir = data_dir() / "nltk_data" if args.tagger == "nltk" else None
    tagger = get_tagger(args.tagger, tagger_dir)
    mech, setup = {}, {}
    for mode in modes:
        backend = args.backend if mode == "exact" else ("matmul" if args.backend == "faiss" else args.backend)
        opts = dict(backend=backend, search=mode, shortlist=shortlist)
        t0 = time.perf_counter()
        mech[("T2T", mode)] = TextToText(table, args.eta, **opts)
        setup[("T2T", mode)] = time.perf_counter() - t0
        t0 = time.perf_counter()
        mech[("PCT2T", mode)] = pct2t(table, args.eta, tagger=tagger, **opts)
        setup[("PCT2T", mode)] = time.perf_counter() - t0
    rss_ready = _status_kb("VmRSS") / 1024
    text, source = source_text(max(args.sizes))
    texts = {n: first_words(text, n) for n in args.sizes}
    # Positions that go through the mechanism (oov="keep": words outside the table are released as they are).
    in_table = {n: (table.lookup(split_text(texts[n])[1::2]) >= 0).tolist() for n in args.sizes}

    def seed_of(n: int, rep: int) -> int:  # the same noise for every mechanism and mode of one (size, repeat)
        return args.seed * 1_000_003 + n * 1_009 + rep

    for n in args.sizes:  # warm-up: builds indices, sub-tables and int8 copies, loads the tagger lexicon
        for m in mech.values():
            m.privatize([texts[n]], generator=torch.Generator().manual_seed(seed_of(n, -1)))
    times = {(key, n): [] for key in mech for n in args.sizes}
    noise_times = {n: [] for n in args.sizes}
    words = {}  # (key, n) -> output words of every repeat
    kept = {(key, n): [0, 0] for key in mech for n in args.sizes}

    def repeats(n: int) -> int:
        return args.small_repeats if n <= 100 else args.repeats

    for n in args.sizes:
        for rep in range(repeats(n)):
            for key, m in mech.items():
                gen = torch.Generator().manual_seed(seed_of(n, rep))
                t0 = time.perf_counter()
                result = m.privatize_detailed([texts[n]], generator=gen)
                times[(key, n)].append(time.perf_counter() - t0)
                words.setdefault((key, n), []).extend(result.output_words[0])
                kept[(key, n)][0] += result.n_substituted - result.n_replaced
                kept[(key, n)][1] += result.n_substituted
            n_sub = result.n_substituted
            gen = torch.Generator().manual_seed(seed_of(n, rep))
            t0 = time.perf_counter()
            L2Laplace(args.eta).noise(n_sub, table.dim, generator=gen)
            noise_times[n].append(time.perf_counter() - t0)
    memory = {}
    for n in args.sizes:
        for key, m in mech.items():
            with PeakRSS() as peak:
                m.privatize([texts[n]], generator=torch.Generator().manual_seed(seed_of(n, 0)))
            memory[(key, n)] = peak.mb
    load_end = os.getloadavg()

    print(
        f"torch {torch.__version__}, {args.threads} threads, backend={args.backend}, tagger={args.tagger}, "
        f"eta={args.eta}, search={args.search}, shortlist={shortlist}, repeats={args.repeats} "
        f"({args.small_repeats} for <= 100 words)"
    )
    print(
        f"load average (1/5/15 min) at start {load_start[0]:.2f}/{load_start[1]:.2f}/{load_start[2]:.2f}, "
        f"at end {load_end[0]:.2f}/{load_end[1]:.2f}/{load_end[2]:.2f} on {os.cpu_count()} CPUs"
    )
    print(f"text: {source}")
    print(f"table: {len(table)} words x {table.dim} ({table.name}), built in {t_table:.2f} s")
    print(
        "setup: "
        + ", ".join(f"{name} {mode} {sec:.2f} s" for (name, mode), sec in setup.items())
        + " (PCT2T tags the table words once per mechanism)"
    )
    print(
        f"resident memory: python+torch {rss0:.0f} MB; +table (and, for MiniLM, loading the model) "
        f"{rss_table - rss0:.0f} MB; +search indices, tagger lexicon and table tags {rss_ready - rss_table:.0f} MB"
    )
    token_mb = table.subword.token_vectors.numel() * 4 / 2**20 if table.subword is not None else 0.0
    print(
        f"tensors: table {table.vectors.numel() * 4 / 2**20:.0f} MB, sub-token embeddings {token_mb:.0f} MB, "
        f"exact search copy of the table {table.vectors.numel() * 4 / 2**20:.0f} MB (+ faiss's own copy once used), "
        f"approximate search int8 copy {table.dim * len(table) / 2**20:.0f} MB"
    )
    print()
    cols = [(name, mode) for name in ("T2T", "PCT2T") for mode in modes]
    head = f"{'words':>6s} | {'RAPT (Pi 4)':>11s} | {'noise':>7s} | " + " | ".join(
        f"{name + ' ' + mode[:6]:>14s} {'speed-up':>8s} {'peak MB':>7s}" for name, mode in cols
    )
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        rapt = RAPT_TABLE_X.get(n)
        cells = [f"{n:6d}", f"{rapt:11.2f}" if rapt else f"{'-':>11s}", f"{statistics.median(noise_times[n]):7.4f}"]
        for key in cols:
            med = statistics.median(times[(key, n)])
            speed = f"{rapt / med:7.1f}x" if rapt else f"{'-':>8s}"
            cells.append(f"{med:14.4f} {speed} {memory[(key, n)]:7.1f}")
        print(" | ".join(cells))
    print("\nmedian seconds per sequence; speed-up = RAPT's Table X time / ours; 'noise' = the L2-Laplace draw alone.")
    print(
        f"RAPT Table X memory: ~{RAPT_MEMORY_MB} MB. 'peak MB' is the resident memory one privatize() call adds "
        "on top of what is already resident (0.0: it fit in memory the process already held)."
    )
    print()
    if args.floor:
        print_floor(table, args, noise_times, repeats)
    if len(modes) == 2:
        head = (
            f"{'words':>6s} | {'T2T agree':>10s} {'kept exact':>10s} {'kept approx':>11s} | "
            f"{'PCT2T agree':>11s} {'kept exact':>10s} {'kept approx':>11s} | {'approx / exact time':>19s}"
        )
    else:
        head = f"{'words':>6s} | {'T2T kept':>8s} | {'PCT2T kept':>10s}"
    print(head)
    print("-" * len(head))
    for n in args.sizes:
        cells = [f"{n:6d}"]
        for name in ("T2T", "PCT2T"):
            rates = {mode: kept[((name, mode), n)][0] / max(1, kept[((name, mode), n)][1]) for mode in modes}
            if len(modes) == 2:
                ex, ap = words[((name, "exact"), n)], words[((name, "approximate"), n)]
                active = in_table[n] * repeats(n)
                pairs = [(a, b) for a, b, on in zip(ex, ap, active) if on]
                agree = sum(a == b for a, b in pairs) / max(1, len(pairs))
                width = 10 if name == "T2T" else 11
                cells.append(f"{agree:{width}.4f} {rates['exact']:10.4f} {rates['approximate']:11.4f}")
            else:
                cells.append(f"{rates[modes[0]]:{8 if name == 'T2T' else 10}.4f}")
        if len(modes) == 2:
            ratio = [
                statistics.median(times[((name, "approximate"), n)]) / statistics.median(times[((name, "exact"), n)])
                for name in ("T2T", "PCT2T")
            ]
            cells.append(f"{ratio[0]:8.2f} / {ratio[1]:.2f}")
        print(" | ".join(cells))
    if len(modes) == 2:
        print(
            "\nagree: share of substituted words released identically in both modes (same noise), pooled over "
            "the repeats; kept: share of substituted words released unchanged (1 - replacement rate)."
        )


def print_floor(table, args, noise_times: dict, repeats) -> None:
    """The table product alone per precision, plus the noise draw, against a 10x-RAPT budget (RAPT time / 10)."""
    head = (
        f"{'words':>6s} | {'10x budget':>10s} | {'float32':>8s} {'bfloat16':>8s} {'int8':>8s} {'faiss':>8s} | "
        f"{'noise':>7s} | {'floor':>7s} | {'floor / budget':>14s}"
    )
    print(head)
    print("-" * len(head))
    vectors = table.vectors.to(torch.float32)
    tables = floor_products(vectors)
    skip: set[str] = set()
    for n in sorted(args.sizes):
        budget = RAPT_TABLE_X[n] / 10 if n in RAPT_TABLE_X else float("nan")
        scan = scan_floor(tables, n, repeats(n), skip)
        noise = statistics.median(noise_times[n])
        floor = min(scan.values()) + noise
        cells = [
            f"{n:6d}",
            f"{budget:10.4f}",
            " ".join(
                f"{scan[p]:8.4f}" if p in scan else f"{'-':>8s}" for p in ("float32", "bfloat16", "int8", "faiss")
            ),
            f"{noise:7.4f}",
            f"{floor:7.4f}",
            f"{floor / budget:13.2f}x",
        ]
        print(" | ".join(cells))
    flops = {n: 2 * n * table.dim * len(table) for n in args.sizes}
    print(
        f"\nfloor = the fastest of the bare product [words, {table.dim}] x [{table.dim}, {len(table)}] (no selection, "
        f"no re-rank; in chunks of {FLOOR_CHUNK} words) and faiss's fused float32 search, + the noise draw: the "
        "least any exact scan of this table needs here. floor / budget > 1: a 10x speed-up over RAPT's Pi is out "
        "of reach for an exact search of this table on this machine (PCT2T searches smaller per-tag tables). "
        "Operations per call: " + ", ".join(f"{n}: {flops[n]:.2e}" for n in args.sizes) + ". '-': a precision "
        "slower than float32 at a smaller size (emulated on this CPU) is not run again."
    )
    print_concentration(vectors, args.eta, args.seed)
    print()


def print_concentration(vectors: torch.Tensor, eta: float, seed: int, n: int = 500) -> None:
    """How far the other rows are from a noisy query, against its nearest one: what an exact pruning (clusters and
    the triangle inequality, projections) would have to exploit. n table rows plus L2-Laplace noise at ``eta``."""
    from textfree.mechanisms import L2Laplace

    gen = torch.Generator().manual_seed(seed)
    table = vectors.to(torch.float64)
    rows = torch.randint(0, len(table), (n,), generator=gen)
    noise = L2Laplace(eta).noise(n, table.shape[1], generator=gen).to(torch.float64)
    dist = torch.cdist(table[rows] + noise, table).sort(dim=1).values
    nn = dist[:, :1]
    print(
        f"distances from {n} noisy words (eta {eta:g}; mean noise norm {noise.norm(dim=1).mean():.2f}, mean row norm "
        f"{table.norm(dim=1).mean():.2f}): nearest {nn.mean():.3f}, median row {dist[:, len(table) // 2].mean():.3f}, "
        f"farthest {dist[:, -1].mean():.3f}; rows within 5% / 10% of the nearest distance: "
        f"{(dist <= 1.05 * nn).double().mean():.1%} / {(dist <= 1.10 * nn).double().mean():.1%}"
    )


if __name__ == "__main__":
    main()
