"""RAPT's eta on another embedding table: the etas at which T2T and PCT2T on a table replace the share of words that
RAPT's Table III gives for BERT-base (0.94 / 0.85 / 0.45 / 0.14 / 0.05 at eta 25 / 75 / 125 / 150 / 175), and the
share each replaces at the paper's own etas.

Measured on GLUE SST-2 dev sentences (common random numbers, one seed), printed as a table and written as JSON for
``textfree rapt report``:

    python benchmarks/rapt_matched_eta.py --out results/rapt/matched_eta.json [--table default] [--limit 872]
"""

from __future__ import annotations

import argparse
import datetime as dt
import sys
import time

import torch

from textfree.atomic import write_json
from textfree.data.tasks import load_task
from textfree.substitution.cli_support import build_t2t

#: RAPT Table III: paper eta -> word replacement probability with BERT-base's table.
PAPER_TABLE_III = {25: 0.94, 75: 0.85, 125: 0.45, 150: 0.14, 175: 0.05}
FORMAT = "textfree.rapt.matched_eta"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write (e.g. results/rapt/matched_eta.json)")
    parser.add_argument("--table", default="default", help="embedding table: 'default' (MiniLM) or an HF name/path")
    parser.add_argument("--limit", type=int, default=872, help="SST-2 dev sentences (default: all 872)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if args.limit < 10:
        parser.error(f"--limit must be >= 10, got {args.limit}")
    data = load_task("sst2", test_limit=args.limit, train_limit=2, generator=torch.Generator().manual_seed(args.seed))
    texts = [t[0] for t in data.test_texts]
    rows = []
    started = time.perf_counter()
    for name, pos in (("t2t", None), ("pct2t", "default")):
        mech = build_t2t(table=args.table, eta=1.0, pos=pos)
        at_paper = mech.replacement_rate(
            texts, list(PAPER_TABLE_III), generator=torch.Generator().manual_seed(args.seed)
        )
        for paper_eta, paper_rate in PAPER_TABLE_III.items():
            eta = mech.eta_for_replacement_rate(texts, paper_rate, generator=torch.Generator().manual_seed(args.seed))
            rows.append({"mechanism": name, "paper_eta": paper_eta, "paper_rate": paper_rate,
                         "rate_at_paper_eta": at_paper[paper_eta], "matched_eta": round(eta, 2)})  # fmt: skip
            print(f"{name:6s} paper eta {paper_eta:4d} (rate {paper_rate:.2f}): ours at that eta "
                  f"{at_paper[paper_eta]:.3f}; matched eta {eta:.2f}", flush=True)  # fmt: skip
    write_json(args.out, {"format": FORMAT, "table": args.table, "sentences": len(texts), "seed": args.seed,
                          "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                          "seconds": round(time.perf_counter() - started, 1), "rows": rows})  # fmt: skip
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
