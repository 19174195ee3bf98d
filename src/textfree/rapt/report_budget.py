"""The training-budget section of docs/results/rapt.md: RAPT with and without its reconstruction loss at several
training-set sizes (what bounds the ordering targets on these cores). Nothing is recomputed.

Reads the ``rapt_finetune`` rows of :mod:`.report` trained on another number of examples than the tables' (their
``train_limit``), and puts each beside the tables' run of the same task, method, eta and row: RAPT (plain tokens and the
reconstruction loss) and RAPT without the reconstruction loss (plain tokens kept: Table VIII's middle column).
"""

from __future__ import annotations

import math
from typing import Any, Callable

__all__ = ["PAPER_TRAIN", "budget_groups", "budget_section"]

#: Training examples of the paper's runs (the whole training split, 4 epochs; RAPT section V-A).
PAPER_TRAIN = {"sst2": 67349}


def budget_groups(rows: list[Any], table_train: int) -> list[tuple[str, str, float]]:
    """(task, method, eta) of every run at another training size than ``table_train`` (the tables' budget)."""
    return sorted({(r.task, r.method, r.eta) for r in rows if r.train != table_train and r.row in ("rapt", "no_rec")})


def _steps(row: Any) -> int:
    batch = int(row.params.get("batch_size", 16))
    return math.ceil(row.train / batch) * int(row.params.get("epochs", 4))


def budget_section(res: Any, table_train: int, fmt: Callable[[Any], str], title: Callable[[float], str],
                   method_title: Callable[[str], str]) -> list[str]:  # fmt: skip
    """The section's markdown lines; ``res`` is a :class:`~textfree.rapt.report.RaptResults`."""
    lines = ["## Training budget: what bounds the ordering here", ""]
    groups = budget_groups(res.rows, table_train)
    if not groups:
        return lines + ["No budget cell given (`examples/cells/rapt/sst2_lora_budget.yaml`)."]
    lines += [
        "RAPT's summed reconstruction loss (eq. 6) against the same run without it (the plain tokens kept), as the",
        "training set grows; same eta, categories, epochs and test sentences. *gain*: RAPT minus the run without the",
        "reconstruction loss, in points (the paper's Table VIII: +4.3 at eta 75, Qwen2.5-3B prefix tuning).",
        "",
    ]
    body = []
    for task, method, eta in groups:
        runs = [r for r in res.rows if (r.task, r.method) == (task, method) and r.row in ("rapt", "no_rec")]
        sizes = sorted({r.train for r in runs if r.train is not None})
        for n in sizes:
            rapt = res.find(task, method, "rapt", eta, train=n)
            plain = res.find(task, method, "no_rec", eta, train=n)
            if rapt is None and plain is None:
                continue
            gain = None if rapt is None or plain is None else 100 * (rapt.acc - plain.acc)
            paper = PAPER_TRAIN.get(task)
            body.append(
                [
                    f"{task} {method_title(method)}, {title(eta)}",
                    f"{n:,}" + (f" ({paper / n:.0f}x fewer than the paper's)" if paper else ""),
                    str(_steps(rapt or plain)),
                    fmt(plain),
                    fmt(rapt),
                    "—" if gain is None else f"{gain:+.1f}",
                ]
            )
    header = ["setting", "training examples", "steps", "without reconstruction", "RAPT", "gain"]
    lines += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in body]
