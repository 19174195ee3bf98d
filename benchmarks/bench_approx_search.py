"""Approximate nearest-word search for T2T: speed against agreement with the exact search.

Queries are what T2T searches for: the MiniLM word-table rows (21,777 x 384) of the words of SST-2 training
sentences (from ../shared/data or $TEXTFREE_DATA; else a built-in paragraph) plus L2-Laplace noise at ``--eta``.
Methods: our exact search (``search="exact"``, backend auto), our approximate search (``search="approximate"``:
int8 pass + float64 re-rank, at a few ``shortlist`` values), faiss IVF-Flat (k-means with a fixed seed;
``nlist``, ``nprobe``) and faiss HNSW-Flat (``M``, ``efSearch``). Every method is built and warmed up, then the
methods run interleaved (one call of each per round) and we print the median time per call, its ratio to our
exact search, the share of queries whose nearest word equals the exact one ("agree") and the share whose nearest
word is the query's own word ("kept", the T2T utility proxy). Build times are printed too.

    PYTHONPATH=src python benchmarks/bench_approx_search.py [--queries 3000] [--eta 100] [--threads 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--eta", type=float, default=100.0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-faiss", action="store_true", help="only our exact and approximate searches")
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch.set_num_threads(args.threads)
    from bench_t2t import source_text

    from textfree.mechanisms import L2Laplace
    from textfree.substitution import NearestNeighbors, WordEmbeddingTable, split_text

    table = WordEmbeddingTable.from_hf_model()
    text, source = source_text(args.queries * 2)
    rows = table.lookup(split_text(text)[1::2])
    rows = rows[rows >= 0][: args.queries]
    gen = torch.Generator().manual_seed(args.seed)
    queries = table.vectors[rows].double() + L2Laplace(args.eta).noise(len(rows), table.dim, generator=gen)
    q32 = queries.float().numpy()
    x = table.vectors.numpy()

    methods, build = {}, {}

    def add(name, make, run):
        t0 = time.perf_counter()
        obj = make()
        build[name] = time.perf_counter() - t0
        methods[name] = lambda: run(obj)

    add("ours, exact", lambda: NearestNeighbors(table.vectors), lambda nn: nn.search(queries, 1)[:, 0])
    for sl in (0, 1, 3, 7):
        add(
            f"ours, approximate, shortlist={sl}",
            lambda sl=sl: NearestNeighbors(table.vectors, search="approximate", shortlist=sl),
            lambda nn: nn.search(queries, 1)[:, 0],
        )
    if not args.skip_faiss:
        import faiss

        faiss.omp_set_num_threads(args.threads)

        def ivf(nlist):
            index = faiss.IndexIVFFlat(faiss.IndexFlatL2(table.dim), table.dim, nlist)
            index.cp.seed = 1234
            index.cp.min_points_per_centroid = 1
            index.train(x)
            index.add(x)
            return index

        def hnsw(m):
            index = faiss.IndexHNSWFlat(table.dim, m)
            index.hnsw.efConstruction = 80
            index.add(x)
            return index

        def searcher(param, value):
            def run(index):
                if param == "nprobe":
                    index.nprobe = value
                else:
                    index.hnsw.efSearch = value
                return torch.from_numpy(index.search(q32, 1)[1][:, 0]).to(torch.int64)

            return run

        for nlist, probes in ((1024, (32, 128)), (4096, (128, 256, 512))):
            t0 = time.perf_counter()
            index = ivf(nlist)
            built = time.perf_counter() - t0
            for nprobe in probes:
                name = f"faiss IVF-Flat nlist={nlist} nprobe={nprobe} ({nprobe / nlist:.0%} of lists)"
                add(name, lambda index=index: index, searcher("nprobe", nprobe))
                build[name] = built
        t0 = time.perf_counter()
        graph = hnsw(32)
        built = time.perf_counter() - t0
        for ef in (64, 256):
            name = f"faiss HNSW-Flat M=32 efSearch={ef}"
            add(name, lambda graph=graph: graph, searcher("ef", ef))
            build[name] = built

    results = {name: run() for name, run in methods.items()}  # warm-up, and the answers
    times = {name: [] for name in methods}
    for _ in range(args.rounds):
        for name, run in methods.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    exact = results["ours, exact"]
    base = statistics.median(times["ours, exact"])
    load = os.getloadavg()
    print(
        f"torch {torch.__version__}, {args.threads} threads, eta={args.eta}, {len(rows)} queries "
        f"({source}), table {len(table)} x {table.dim}; load average {load[0]:.2f}/{load[1]:.2f}/{load[2]:.2f} "
        f"on {os.cpu_count()} CPUs"
    )
    print(f"{'method':58s} {'build s':>8s} {'median s':>9s} {'/ exact':>8s} {'agree':>7s} {'kept':>7s}")
    for name in methods:
        med = statistics.median(times[name])
        agree = float((results[name] == exact).double().mean())
        kept = float((results[name] == rows).double().mean())
        print(f"{name:58s} {build[name]:8.2f} {med:9.4f} {med / base:7.2f}x {agree:7.4f} {kept:7.4f}")


if __name__ == "__main__":
    main()
