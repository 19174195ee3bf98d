"""The figures of the PPFT report (accuracy against k, accuracy against the slot's mu), drawn from result files."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Sequence

from ...atomic import atomic_save_figure
from ...metrics import seed_spread
from .entries import (
    GDP_MATCHED,
    PAPER_EPSILON,
    WIDTH_MATCHED,
    Entry,
    _get,
    _latest,
    _noise_norm_and_mu,
    _paper_mu,
    _per_length,
)


def _seed_mean_sd(e: Entry | None, metric: str) -> tuple[float, float] | None:
    """(mean, sample sd; 0 for one seed) of ``metric`` over ``e``'s seeds, NaN seeds left out; None when none is
    left."""
    vals = [v for v in (e.values(metric) if e else []) if not math.isnan(v)]
    if not vals:
        return None
    s = seed_spread(vals)
    return s["mean"], 0.0 if math.isnan(s["std"]) else s["std"]


def _two_panel_figure(
    path: Path,
    draw: Callable[[Any, str], bool],
    title: Callable[[str], str],
    xlabel: str,
    legend_size: int,
    title_size: int | None = None,
) -> Path | None:
    """Pri-DDX beside Pri-SLJA, accuracy on [0, 1]; ``draw(ax, dataset)`` plots one panel and says whether it drew
    anything. Nothing drawn: no file, None."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 3.2))
    drawn = False
    for ax, (ds, name) in zip(fig.subplots(1, 2), (("pri-ddx", "Pri-DDX"), ("pri-slja", "Pri-SLJA"))):
        drawn = draw(ax, ds) or drawn
        ax.set_title(title(name), **({"fontsize": title_size} if title_size else {}))
        ax.set_xlabel(xlabel)
        ax.set_ylim(0, 1)
        ax.set_ylabel("held-out accuracy")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=legend_size)
    if not drawn:
        return None
    fig.tight_layout()
    atomic_save_figure(fig, path, dpi=110)
    return path


def _k_points(entries: Sequence[Entry], ds: str, eps: float, task: str) -> list[tuple[int, tuple[float, float]]]:
    """(k, (mean, sd)) of PPFT's L2-Laplace rows at ``eps`` for k in 4, 8, 16, all at one stage-2 length: the length
    most of those k were run at (ties: the one run last), the newest run per k there, so a line joins like with like."""
    noisy = [
        x
        for x in entries
        if x.kind == "ppft_stage2"
        and x.dataset.lower() == ds
        and not _get(x, "blind")
        and _get(x, "family") == "l2_laplace"
    ]
    runs = [e for k in (4, 8, 16) for e in _per_length(noisy, epsilon=eps, k=k)]  # the newest run per (k, length)
    if not runs:
        return []

    def rank(n: Any) -> tuple[int, str]:  # how many k were run at length n, then when last
        at = [e for e in runs if e.params.get("epochs") == n]
        return len(at), max(e.date for e in at)

    length = max({e.params.get("epochs") for e in runs}, key=rank)
    return [
        (k, ms)
        for k in (4, 8, 16)
        if (ms := _seed_mean_sd(_latest(noisy, epsilon=eps, k=k, epochs=length), f"acc_{task}"))
    ]


def _figure_k(entries: Sequence[Entry], path: Path) -> Path | None:
    """Held-out accuracy against k at the paper's and the width-matched eps, both datasets. A panel shows its lines
    only where one of them has two or more k (else it stays empty); no file where neither does."""

    def draw(ax, ds: str) -> bool:
        lines = {
            (eps, style, task): _k_points(entries, ds, eps, task)
            for eps, style in ((PAPER_EPSILON, "-o"), (WIDTH_MATCHED, "--s"))
            for task in ("mcqa", "open")
        }
        if not any(len(pts) > 1 for pts in lines.values()):
            return False  # no line: one k is no curve against k (its row is in the tables)
        for (eps, style, task), pts in lines.items():
            if pts:
                ax.errorbar(
                    [k for k, _ in pts],
                    [m for _, (m, _) in pts],
                    yerr=[sd for _, (_, sd) in pts],
                    fmt=style,
                    capsize=3,
                    label=f"{'4-option' if task == 'mcqa' else 'open'}, eps {eps:g}",
                )
        ax.set_xscale("log", base=2)
        ax.set_xticks([4, 8, 16], ["4", "8", "16"])
        return True

    return _two_panel_figure(path, draw, lambda name: name, "k (tokens per slot)", 7)


def _mu_points(entries: Sequence[Entry], ds: str, task: str) -> dict[str, list[tuple[float, float, float]]]:
    """(slot mu, mean, sd) of every k=4 noise row of PPFT's layout, newest run per (noise, eps), by noise label; only
    runs trained like the reference row (same stage-2 epochs and private-token cut), so a line joins like with like.
    The reference: the GDP-matched row where it was run (the privacy-level table reads every row at its length), else
    the newest width-matched one."""
    rows = [e for e in entries if e.kind == "ppft_stage2" and e.dataset.lower() == ds]
    ref = _latest(rows, family="l2_laplace", blind=False, epsilon=GDP_MATCHED, k=4) or _latest(
        rows, family="l2_laplace", blind=False, epsilon=WIDTH_MATCHED, k=4
    )
    if ref is None:
        return {}
    stage2 = [
        e
        for e in entries
        if e.kind == "ppft_stage2"
        and e.dataset.lower() == ds
        and not _get(e, "blind")
        and _get(e, "epsilon") not in (None, "missing")
        and e.params.get("epochs") == ref.params.get("epochs")
        and e.params.get("max_private_tokens") == ref.params.get("max_private_tokens")
    ]
    series: dict[str, list[tuple[float, float, float]]] = {}
    for family, match, label in (
        ("l2_laplace", None, "L2-Laplace"),
        ("gaussian", "budget", "Gaussian, budget-matched"),
        ("gaussian", "norm", "Gaussian, norm-matched"),
    ):
        want = {"family": family, "k": 4} | ({"noise_match": match} if match else {})
        for eps in sorted({float(_get(e, "epsilon")) for e in stage2 if all(_get(e, k) == v for k, v in want.items())}):
            ms = _seed_mean_sd(_latest(stage2, epsilon=eps, **want), f"acc_{task}")
            if ms:
                series.setdefault(label, []).append((_noise_norm_and_mu(family, eps, match or "budget")[1], *ms))
    return series


_NOISE_COLORS = {"L2-Laplace": "C0", "Gaussian, budget-matched": "C1", "Gaussian, norm-matched": "C2"}


def _figure_mu(entries: Sequence[Entry], path: Path) -> Path | None:
    """Held-out accuracy against the slot's mu (what a slot leaks), every noise row at k=4, both datasets. A panel
    shows its rows only where one of them was run at two or more mu (else it stays empty); no file where neither
    does."""

    def draw(ax, ds: str) -> bool:
        series = {task: _mu_points(entries, ds, task) for task in ("mcqa", "open")}
        if not any(len(pts) > 1 for by_label in series.values() for pts in by_label.values()):
            return False  # no row at two mu: no curve against mu (its points are in the tables)
        for task, style in (("mcqa", "-"), ("open", "--")):
            for label, pts in series[task].items():
                pts.sort()
                ax.errorbar(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    yerr=[p[2] for p in pts],
                    fmt=style + "o",
                    capsize=3,
                    color=_NOISE_COLORS[label],
                    label=f"{'4-option' if task == 'mcqa' else 'open'}, {label}",
                )
        ax.axvline(_paper_mu(), color="grey", lw=0.8, ls=":")
        return True

    return _two_panel_figure(
        path,
        draw,
        lambda name: f"{name} (k 4, one stage-2 length; dotted: the paper's mu)",
        "slot mu = what one slot leaks (Gaussian DP)",
        6,
        title_size=9,
    )
