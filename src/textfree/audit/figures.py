"""The audit's figures, laid out as grids that read at page width (at most three panels a row):

* ``attributes.png``: one panel per attribute, the chosen attacker's evaluated score over the grid with each attacker
  behind it, the prior, the clean-text reader and the label-only reference as lines, and another result file's chosen
  attacker (``--beside``) as crosses;
* ``validation_curves.png``: one panel per (attribute, grid value), a row per attribute: each attacker's validation
  score over epochs;
* ``token_inversion.png``: tokens recovered (nearest neighbour) and PII units found over the grid.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

from ..atomic import atomic_save_figure
from .verdicts import Verdict

__all__ = ["grid_figure", "attribute_figure", "curve_figure", "token_figure", "COLUMNS"]

#: Panels per row: a 3-panel row is about 10 inches, a page's width.
COLUMNS = 3


def grid_figure(n: int, *, width: float = 3.4, height: float = 2.9, cols: int | None = None):
    """A figure of ``n`` panels in rows of ``cols`` (default: at most :data:`COLUMNS`; four panels two by two), and its
    panels (the spare ones hidden)."""
    from matplotlib.figure import Figure

    cols = cols or (2 if n == 4 else min(COLUMNS, max(1, n)))
    rows = math.ceil(n / cols)
    fig = Figure(figsize=(width * cols, height * rows + 0.6), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).flatten()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, list(axes[:n])


def _by_attribute(items: Sequence[Verdict]) -> dict[str, list[Verdict]]:
    out: dict[str, list[Verdict]] = {}
    for v in items:
        out.setdefault(v.metric, []).append(v)
    return out


def attribute_figure(items: Sequence[Verdict], path: Path, x_label: str) -> bool:
    """``attributes.png``; False when there is nothing to draw."""
    groups = _by_attribute(items)
    if not groups:
        return False
    fig, axes = grid_figure(len(groups))
    for ax, (metric, rows) in zip(axes, groups.items()):
        rows = sorted(rows, key=lambda v: v.x)
        xs = [v.x for v in rows]
        for name in rows[0].attackers:
            ax.plot(
                xs,
                [v.attackers[name][0] for v in rows],
                linestyle="--" if "aware" in name.split("_") else ":",
                linewidth=0.8,
                alpha=0.6,
                label=name.replace("_", " "),
            )
        ax.errorbar(
            xs,
            [v.values["best"] for v in rows],
            yerr=[0 if math.isnan(v.stderr) else v.stderr for v in rows],
            fmt="-o",
            color="black",
            capsize=3,
            linewidth=1.8,
            label="chosen on validation",
        )
        for key, style, color in (("prior", ":", "grey"), ("clean", "--", "tab:green"), ("label", "-.", "tab:orange")):
            values = [v.values[key] for v in rows]
            if not all(math.isnan(y) for y in values):
                ax.plot(xs, values, linestyle=style, color=color, linewidth=1.4, label=f"{key} reference")
        beside = [(v.x, v.beside["best"]) for v in rows if v.beside and not math.isnan(v.beside["best"])]
        if beside:
            ax.plot(*zip(*beside), "x", color="tab:red", markersize=8, label="built-in cell (beside)")
        ax.set_xscale("log")
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
        ax.minorticks_off()
        ax.set(title=metric.replace("_", " "), xlabel=x_label, ylim=(-0.02, 1.02))
    axes[0].set_ylabel("evaluated score")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncols=min(4, len(labels)), fontsize=7, frameon=False)
    atomic_save_figure(fig, path, dpi=100)
    return True


def curve_figure(items: Sequence[Verdict], path: Path, x_name: str) -> bool:
    """``validation_curves.png``; False when no attacker has more than one curve point."""
    items = [v for v in items if any(len(c) > 1 for c in v.curve.values())]
    if not items:
        return False
    order = list(dict.fromkeys(v.metric for v in items))
    items = sorted(items, key=lambda v: (order.index(v.metric), v.x))  # a row per attribute, a column per grid value
    n_x = len({v.x for v in items})
    fig, axes = grid_figure(len(items), height=2.6, cols=n_x if n_x <= COLUMNS else None)
    for ax, v in zip(axes, items):
        for name, points in v.curve.items():
            pts = [(e, s) for e, s in points if not math.isnan(s)]
            if pts:
                ax.plot(
                    *zip(*pts),
                    "-o" if "aware" in name.split("_") else "--s",
                    markersize=3,
                    label=name.replace("_", " "),
                )
        ax.axhline(v.values["prior"], color="grey", linestyle=":", linewidth=1)
        ax.set(title=f"{v.metric.replace('_', ' ')}, {x_name} {v.x:g}", xlabel="epochs", ylim=(-0.02, 1.02))
    axes[0].set_ylabel("validation score")
    handles, labels = axes[0].get_legend_handles_labels()
    handles.append(axes[0].lines[-1])
    labels.append("prior (evaluated part)")
    fig.legend(handles, labels, loc="outside lower center", ncols=min(5, len(labels)), fontsize=7, frameon=False)
    atomic_save_figure(fig, path, dpi=100)
    return True


def token_figure(result: dict[str, Any], path: Path) -> bool:
    """``token_inversion.png`` from a token_inversion result file; False when it has no grid point."""
    rows = result.get("results") or []
    axis = (result.get("grid_axes") or ["mechanism.epsilon"])[0]
    if not rows:
        return False
    fig, (ax,) = grid_figure(1, width=5.0, height=3.4)
    xs = [float(r["point"].get(axis, math.nan)) for r in rows]
    for metric, label, style in (
        ("recovery_nn_l2", "NN (L2)", "--o"),
        ("recovery_nn_cosine", "NN (cosine)", ":s"),
        ("pii_exact_nn_best", "PII units found (exact)", "-D"),
    ):
        ys = [(r["metrics"].get(metric) or {}).get("mean") for r in rows]
        if any(y is not None for y in ys):
            ax.plot(xs, [math.nan if y is None else 100 * y for y in ys], style, label=label)
    ax.set(xscale="log", xlabel="epsilon", ylabel="recovered (%)", ylim=(-2, 102), title="token-level inversion")
    ax.legend(fontsize=7)
    atomic_save_figure(fig, path, dpi=100)
    return True
