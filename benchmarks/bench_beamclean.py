"""BeamClean throughput and the cost of one nearest-neighbour pass (issue 4, speed).

1. BeamClean sequences per second at beam width 20 on MiniLM's input embedding table (30,522 x 384): 32-token
   sequences (Pri-DDX held-out private prompts cut to 30 tokens + [CLS]/[SEP]), L2-Laplace noise eps 50, a bigram
   prior fitted on public text (alpaca + lima), estimated and oracle noise, 64 and 1024 candidates, with 1 and with
   2 torch threads. Sequences are decoded one after another (as the attack does); the figure is
   sequences / wall seconds over ``--sequences`` sequences, the median of ``--repeats`` rounds.
2. One nearest-neighbour pass over N noisy token embeddings (``NearestNeighbourInverter.invert``, exact L2 and
   cosine) against a plain float32 matmul of the same size, [N, 384] x [384, 30522]; printed as ratios to the matmul
   (medians of interleaved rounds, so machine load hits every method alike). The exact L2 search uses faiss for 400
   queries or more (given as many threads as torch), else a torch matmul; both re-rank a shortlist in float64.

    PYTHONPATH=src python benchmarks/bench_beamclean.py [--sequences 8] [--repeats 3] [--queries 1024 4096]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch


def inputs(n_seq: int, tokens: int):
    from textfree.attacks import BigramPrior
    from textfree.data import load_dataset, mcqa_prompt, ppft_split
    from textfree.encoders import EmbeddingTableEncoder

    enc = EmbeddingTableEncoder.from_pretrained()
    tok = enc.tokenizer
    texts = list(dict.fromkeys(mcqa_prompt(r).private for r in ppft_split("pri-ddx")["heldout"]))[:n_seq]
    seqs = [
        torch.tensor([tok.cls_token_id, *tok(t, add_special_tokens=False)["input_ids"][: tokens - 2], tok.sep_token_id])
        for t in texts
    ]
    public = [
        " ".join(x for x in (r.instruction, r.input, r.output) if x)
        for name in ("alpaca", "lima")
        for r in load_dataset(name)
    ]
    prior = BigramPrior.from_texts(public, tok, enc.vocab_size)
    return enc.table.detach().float(), seqs, prior


def bench_beamclean(table, seqs, prior, args) -> None:
    from textfree.attacks import BeamCleanConfig, ThreatModel, beamclean_attack
    from textfree.mechanisms import L2Laplace
    from textfree.rng import seeded_generator

    mech = L2Laplace(args.eps)
    gen = seeded_generator(0, warn=False)
    noisy = [mech.sample(table[s].double(), generator=gen).float() for s in seqs]
    grant = ThreatModel(embedding_table=True, training_text="public", knows_mechanism=True, knows_parameters=True)
    print(
        f"\nBeamClean, beam 20, {len(seqs)} sequences of {len(seqs[0])} tokens, L2-Laplace eps {args.eps:g}, bigram "
        "prior; "
        f"sequences / s (median of {args.repeats} rounds)\n"
    )
    print("| candidates | noise | 1 thread | 2 threads |")
    print("|---|---|---|---|")
    for m in (64, 1024):
        cfg = BeamCleanConfig(beam_width=20, candidates=m)
        for noise in ("estimated", "oracle"):
            row = []
            for threads in (1, 2):
                torch.set_num_threads(threads)
                beamclean_attack(
                    noisy[:1], table, prior, threat=grant, noise=noise, mechanism=mech, config=cfg
                )  # warm-up
                times = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    beamclean_attack(noisy, table, prior, threat=grant, noise=noise, mechanism=mech, config=cfg)
                    times.append(time.perf_counter() - t0)
                row.append(len(noisy) / statistics.median(times))
            print(f"| {m} | {noise} | {row[0]:.2f} | {row[1]:.2f} |", flush=True)


def _faiss_threads(n: int) -> None:
    """faiss (the L2 backend for >= 400 queries) runs OpenMP threads of its own: give it as many as torch."""
    try:
        import faiss
    except ImportError:
        return
    faiss.omp_set_num_threads(n)


def bench_nn(table, args) -> None:
    from textfree.attacks import NearestNeighbourInverter
    from textfree.mechanisms import L2Laplace

    inverter = NearestNeighbourInverter(table)
    t_t = table.T.contiguous()
    print(
        f"\nOne nearest-neighbour pass vs a plain float32 matmul [N, 384] x [384, {table.shape[0]}] "
        f"(median seconds of {args.repeats * 3} interleaved rounds)\n"
    )
    print("| threads | N | matmul s | NN L2 s | L2 / matmul | NN cosine s | cosine / matmul |")
    print("|---|---|---|---|---|---|---|")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        _faiss_threads(threads)
        for n in args.queries:
            gen = torch.Generator().manual_seed(n)
            rows = torch.randint(0, table.shape[0], (n,), generator=gen)
            q = (table[rows].double() + L2Laplace(args.eps).noise(n, table.shape[1], generator=gen)).float()
            calls = {
                "matmul": lambda: q @ t_t,
                "l2": lambda: inverter.invert(q, "l2"),
                "cosine": lambda: inverter.invert(q, "cosine"),
            }
            for f in calls.values():
                f()  # warm-up
            times = {k: [] for k in calls}
            for _ in range(args.repeats * 3):
                for k, f in calls.items():
                    t0 = time.perf_counter()
                    f()
                    times[k].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"| {threads} | {n} | {med['matmul']:.4f} | {med['l2']:.4f} | {med['l2'] / med['matmul']:.2f}x | "
                f"{med['cosine']:.4f} | {med['cosine'] / med['matmul']:.2f}x |",
                flush=True,
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sequences", type=int, default=8, help="sequences per BeamClean round")
    ap.add_argument("--tokens", type=int, default=32, help="tokens per sequence, [CLS] and [SEP] included")
    ap.add_argument("--repeats", type=int, default=3, help="rounds (BeamClean); the NN pass runs 3x as many")
    ap.add_argument("--queries", type=int, nargs="+", default=[1024, 4096], help="N for the nearest-neighbour pass")
    ap.add_argument("--eps", type=float, default=50.0, help="L2-Laplace eps of the noise")
    ap.add_argument("--skip-beamclean", action="store_true")
    args = ap.parse_args()
    table, seqs, prior = inputs(args.sequences, args.tokens)
    print(f"torch {torch.__version__}, table {tuple(table.shape)}")
    if not args.skip_beamclean:
        bench_beamclean(table, seqs, prior, args)
    bench_nn(table, args)


if __name__ == "__main__":
    main()
