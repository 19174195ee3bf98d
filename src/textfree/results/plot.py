"""Figures drawn from result files only: nothing is recomputed here.

``plot_results(paths, out_dir)`` draws, for every result file and every metric, the metric's mean against one
grid axis (``x``; default the axis with the most values), one line per value of the other axes, with error
bars of one standard error over seeds. PNGs go to ``<out_dir>/<cell name>-<metric>.png`` (when two files of
the same cell are plotted together, the result file's name replaces the cell name so neither is lost).

matplotlib's pyplot and global backend are not touched: figures are drawn on ``Figure`` objects with the Agg
canvas, so this works headless and inside notebooks that use another backend.
"""

from __future__ import annotations

import math
import os
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..atomic import atomic_save_figure
from .files import load_results

__all__ = ["plot_results", "default_x_axis"]

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def default_x_axis(grid: dict[str, list]) -> str | None:
    """The grid key with the most values (the first such key on a tie); None for an empty grid."""
    if not grid:
        return None
    return max(grid, key=lambda k: len(grid[k]))  # max keeps the first of equal keys


def _short_names(axes: Sequence[str]) -> dict[str, str]:
    last = Counter(a.split(".")[-1] for a in axes)
    return {a: a.split(".")[-1] if last[a.split(".")[-1]] == 1 else a for a in axes}


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _num(v: Any) -> float:
    return math.nan if v is None else float(v)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _save_png(fig: Any, path: Path) -> None:
    atomic_save_figure(fig, path, format="png", dpi=120)


def _plot_metric(data: dict, metric: str, x_axis: str | None, out: Path) -> None:
    from matplotlib.figure import Figure

    cell = data["cell"]
    grid: dict[str, list] = cell.get("grid") or {}
    axes = list(grid)
    others = [a for a in axes if a != x_axis]
    short = _short_names(axes)

    # Group rows into lines (one per combination of the other axes), in the grid's own order.
    lines: dict[tuple, list[tuple[Any, float, float]]] = {}
    for row in data["results"]:
        agg = row["metrics"].get(metric)
        if agg is None:
            continue
        key = tuple(row["point"][a] for a in others)
        xval = row["point"][x_axis] if x_axis else None
        lines.setdefault(key, []).append((xval, _num(agg.get("mean")), _num(agg.get("stderr"))))

    xs_all = grid[x_axis] if x_axis else [None]
    numeric = x_axis is not None and all(_is_number(v) for v in xs_all)
    if numeric:
        position = {v: float(v) for v in xs_all}
    else:
        position = {v: float(i) for i, v in enumerate(xs_all)}

    fig = Figure(figsize=(6.4, 4.4))
    ax = fig.add_subplot(1, 1, 1)
    for i, (key, pts) in enumerate(lines.items()):
        pts.sort(key=lambda t: position[t[0]])
        xs = [position[t[0]] for t in pts]
        ys = [t[1] for t in pts]
        errs = [t[2] if math.isfinite(t[2]) else 0.0 for t in pts]
        label = ", ".join(f"{short[a]}={v}" for a, v in zip(others, key)) or None
        ax.errorbar(
            xs, ys, yerr=errs, marker=_MARKERS[i % len(_MARKERS)], capsize=3, linewidth=1.5, markersize=5, label=label
        )

    log_x = False
    if numeric:
        lo, hi = min(position.values()), max(position.values())
        if lo > 0 and hi / lo >= 20:
            ax.set_xscale("log")
            log_x = True
        ax.set_xticks(sorted(position.values()))
        ax.set_xticklabels([str(v) for v in sorted(xs_all, key=float)])
        ax.minorticks_off()
    else:
        ax.set_xticks(list(position.values()))
        ax.set_xticklabels(["all" if v is None else str(v) for v in xs_all])
    ax.set_xlabel((x_axis + (" (log scale)" if log_x else "")) if x_axis else "(no grid)")
    ax.set_ylabel(metric)
    mech = (cell.get("mechanism") or {}).get("name")
    subtitle = ", ".join(
        s
        for s in (
            cell.get("kind"),
            mech,
            f"encoder {cell.get('encoder')}",
            f"{len(data['seeds'])} seed(s), bars = ±1 stderr",
        )
        if s
    )
    ax.set_title(f"{cell['name']}: {metric}\n{subtitle}", fontsize=10)
    ax.grid(True, alpha=0.3)
    if any(k for k in lines):
        ax.legend(title=", ".join(short[a] for a in others), fontsize=8, title_fontsize=8)
    fig.tight_layout()
    _save_png(fig, out)


def plot_results(
    paths: str | os.PathLike | Iterable[str | os.PathLike],
    out_dir: str | os.PathLike,
    x: str | None = None,
    y: str | Sequence[str] | None = None,
) -> list[Path]:
    """Draw one PNG per (result file, metric); returns the written paths.

    ``x``: the grid key on the horizontal axis (default: the key with the most values); the other grid keys
    make one line per value (combination). ``y``: a metric name or list of names (default: every metric).
    """
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    files = [Path(p) for p in paths]
    if not files:
        raise ValueError("plot_results needs at least one result file")
    loaded = [(p, load_results(p)) for p in files]
    out_root = Path(out_dir)
    out_root.mkdir(parents=True, exist_ok=True)
    name_count = Counter(d["cell"]["name"] for _, d in loaded)
    wanted = [y] if isinstance(y, str) else (list(y) if y is not None else None)
    written: list[Path] = []
    for path, data in loaded:
        grid = data["cell"].get("grid") or {}
        if x is not None and x not in grid:
            raise ValueError(f"{path}: x={x!r} is not a grid axis; the axes are {list(grid) or 'none'}")
        x_axis = x if x is not None else default_x_axis(grid)
        available = list(dict.fromkeys(m for row in data["results"] for m in row["metrics"]))
        metrics = wanted if wanted is not None else available
        missing = [m for m in metrics if m not in available]
        if missing:
            raise ValueError(f"{path}: no metric(s) {missing}; the file has {available}")
        prefix = data["cell"]["name"] if name_count[data["cell"]["name"]] == 1 else path.stem
        for metric in metrics:
            out = out_root / f"{_safe(prefix)}-{_safe(metric)}.png"
            _plot_metric(data, metric, x_axis, out)
            written.append(out)
    return written
