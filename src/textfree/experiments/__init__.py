"""Experiments as data: YAML cells in, JSON results out, figures drawn from the results.

* :func:`load_cell` reads and validates a cell file (:class:`Cell`, :class:`CellError`).
* :func:`run_cell` runs its grid x seeds and writes ``results/<name>-<UTC time>.json``; :func:`load_results`
  reads one back.
* :func:`plot_results` draws PNG figures from result files only.
* Cell kinds register by name with :func:`register_cell_kind` (built-in: ``privatization``).

See ``docs/experiments.md``.
"""

from __future__ import annotations

from typing import Any

from ..results.cell import Cell, CellError, Resolved, expand_grid, load_cell
from ..results.files import ResultsError, format_results_table, load_results
from .registry import CellKind, RunContext, available_cell_kinds, get_cell_kind, register_cell_kind
from .runner import run_cell

__all__ = [
    "Cell",
    "CellError",
    "CellKind",
    "Resolved",
    "ResultsError",
    "RunContext",
    "available_cell_kinds",
    "expand_grid",
    "format_results_table",
    "get_cell_kind",
    "load_cell",
    "load_results",
    "plot_results",
    "register_cell_kind",
    "run_cell",
]


def __getattr__(name: str) -> Any:
    # plot_results imports matplotlib, which is slow to import: load it on first use only.
    if name == "plot_results":
        from ..results.plot import plot_results

        return plot_results
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
