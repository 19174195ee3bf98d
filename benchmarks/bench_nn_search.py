"""Nearest-neighbour search for T2T: our exact path (float32 matmul, faiss, bfloat16) vs faiss IndexFlatL2 vs
torch.cdist + argmin.

Tables: MiniLM's real input embeddings (30,522 x 384) and a random 30,522 x 768 table. Queries: table rows plus
L2-Laplace noise (what T2T searches for), 1000 by default. Every method is warmed up, then the methods run
interleaved (one call of each per round, so a change in machine load hits all of them alike) and we print
medians over the rounds, as ratios to faiss. We also count how often each float32 method disagrees with the
float64 brute-force nearest neighbour. Then, on MiniLM's table, the share of queries the bfloat16 pass certifies
by itself per eta and short-list length (the rest go through the float32 pass: exact either way, slower).

    PYTHONPATH=src python benchmarks/bench_nn_search.py [--queries 1000] [--repeats 9] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def minilm_table() -> torch.Tensor:
    from transformers import AutoModel

    from textfree.encoders import resolve_encoder_path

    model = AutoModel.from_pretrained(resolve_encoder_path(None))
    return model.get_input_embeddings().weight.detach().float().contiguous()


def make_queries(table: torch.Tensor, n: int, eta: float, seed: int) -> torch.Tensor:
    from textfree.mechanisms import L2Laplace

    gen = torch.Generator().manual_seed(seed)
    rows = torch.randint(0, table.shape[0], (n,), generator=gen)
    return table[rows].double() + L2Laplace(eta).noise(n, table.shape[1], generator=gen)


def exact_reference(table: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    best = torch.full((queries.shape[0],), float("inf"), dtype=torch.float64)
    arg = torch.zeros(queries.shape[0], dtype=torch.int64)
    for start in range(0, table.shape[0], 4096):
        d = torch.cdist(queries, table[start : start + 4096].double(), compute_mode="donot_use_mm_for_euclid_dist")
        val, idx = d.min(dim=1)
        better = val < best
        best[better], arg[better] = val[better], idx[better] + start
    return arg


def bench_table(name: str, table: torch.Tensor, args) -> None:
    import faiss

    from textfree.substitution.nn import NearestNeighbors, resolve_backend

    queries = make_queries(table, args.queries, args.eta, args.seed)
    q32 = queries.float().contiguous()
    q32_np = q32.numpy()
    index = faiss.IndexFlatL2(table.shape[1])
    index.add(table.numpy())
    ours = NearestNeighbors(table, "auto")
    ours_mm = NearestNeighbors(table, "matmul")
    ours_fa = NearestNeighbors(table, "faiss")
    ours_bf = NearestNeighbors(table, "bf16")

    def cdist_argmin():
        out = []
        for start in range(0, q32.shape[0], 256):  # chunked like ours so memory stays comparable
            out.append(torch.cdist(q32[start : start + 256], table).argmin(dim=1))
        return torch.cat(out)

    methods = {
        "faiss IndexFlatL2 (k=1, raw float32)": lambda: torch.from_numpy(index.search(q32_np, 1)[1][:, 0]),
        f"ours backend=auto (-> {resolve_backend('auto', args.queries)})": lambda: ours.search(queries, 1)[:, 0],
        "ours backend=matmul": lambda: ours_mm.search(queries, 1)[:, 0],
        "ours backend=faiss": lambda: ours_fa.search(queries, 1)[:, 0],
        "ours backend=bf16": lambda: ours_bf.search(queries, 1)[:, 0],
        "torch.cdist + argmin (float32)": cdist_argmin,
    }
    results = {key: fn() for key, fn in methods.items()}  # warm-up (and builds faiss sub-indices)
    for fn in methods.values():
        fn()
    times: dict[str, list[float]] = {key: [] for key in methods}
    for _ in range(args.repeats):
        for key, fn in methods.items():
            t0 = time.perf_counter()
            fn()
            times[key].append(time.perf_counter() - t0)
    ref = exact_reference(table, queries)
    base = statistics.median(times["faiss IndexFlatL2 (k=1, raw float32)"])
    print(
        f"\n{name}: table {table.shape[0]} x {table.shape[1]}, {args.queries} queries (row + L2-Laplace noise, "
        f"eta={args.eta}), {args.repeats} interleaved rounds, torch threads={torch.get_num_threads()}"
    )
    print(f"  {'method':42s} {'median s':>9s} {'min s':>8s} {'vs faiss':>9s} {'wrong NN':>9s}")
    for key in methods:
        med = statistics.median(times[key])
        wrong = int((results[key] != ref).sum())
        print(f"  {key:42s} {med:9.4f} {min(times[key]):8.4f} {med / base:8.2f}x {wrong:9d}")
    print(
        f"  float64 re-searches by our exactness check: matmul {ours_mm.n_fallback}, faiss {ours_fa.n_fallback}, "
        f"bf16 {ours_bf.n_fallback}; bfloat16 pass not certified: {ours_bf.n_bf16_fallback} "
        f"(over {args.repeats + 2} calls each)"
    )


def bf16_certificate(table: torch.Tensor, args) -> None:
    """Share of queries the bfloat16 pass certifies alone, per eta and BF16_SHORTLIST."""
    from textfree.substitution import nn as nn_module
    from textfree.substitution.nn import NearestNeighbors

    default = nn_module.BF16_SHORTLIST
    print(
        f"\nbfloat16 certificate on {table.shape[0]} x {table.shape[1]}, {args.queries} queries per eta "
        f"(default short list k + {default}):"
    )
    lists = (3, 7, 15, 31)
    print("  " + f"{'eta':>6s}" + "".join(f"  list k+{r:<3d}" for r in lists) + "   wrong NN")
    try:
        for eta in (10.0, 25.0, 50.0, 100.0, 200.0):
            queries = make_queries(table, args.queries, eta, args.seed)
            ref = exact_reference(table, queries)
            row, wrong = [], 0
            for r in lists:
                nn_module.BF16_SHORTLIST = r
                nn = NearestNeighbors(table, "bf16")
                wrong += int((nn.search(queries, 1)[:, 0] != ref).sum())
                row.append(1.0 - nn.n_bf16_fallback / args.queries)
            print("  " + f"{eta:6.0f}" + "".join(f"  {x:10.4f}" for x in row) + f"   {wrong:8d}")
    finally:
        nn_module.BF16_SHORTLIST = default


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--queries", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--eta", type=float, default=100.0, help="L2-Laplace parameter of the query noise")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--random-dim", type=int, default=768)
    args = parser.parse_args()

    import faiss

    torch.set_num_threads(args.threads)
    faiss.omp_set_num_threads(args.threads)
    print(f"torch {torch.__version__}, faiss {faiss.__version__}, threads {args.threads}")
    minilm = minilm_table()
    bench_table("MiniLM input embeddings", minilm, args)
    gen = torch.Generator().manual_seed(args.seed)
    random_table = torch.randn(30522, args.random_dim, generator=gen) * 0.05
    bench_table("random Gaussian table", random_table, args)
    bf16_certificate(minilm, args)


if __name__ == "__main__":
    main()
