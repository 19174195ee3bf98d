"""Which stage-1 build a grid point's models descend from, recorded as the point's ``stage1_build`` provenance
(:meth:`~textfree.experiments.registry.RunContext.record`), so a report can tell results of two builds of
``runs/stage1`` (the same path, other weights) apart.

* :func:`record_build`: the PPFT kinds, for the one run they train or evaluate.
* :func:`record_read_builds`: the attack kinds, for every PPFT run a point reads: its ``encoder`` (a run's
  ``encoder/`` directory) and the run directories among its params (``init``, ``model``, ``center``...; a run it
  writes, ``out``, is not read).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator

from ..registry import RunContext

__all__ = ["record_build", "record_read_builds", "read_runs"]

#: params that name what a point writes, not what it reads
WRITTEN = frozenset({"out"})


def _build(context: RunContext, run: str | Path) -> str | None:
    from ...ppft.checkpoint import stage1_build

    return context.cached(("stage1_build", str(run)), lambda: stage1_build(run))


def record_build(context: RunContext, run: str | Path) -> None:
    """Record, as the point's ``stage1_build`` provenance, the fingerprint of the stage-1 run that ``run`` descends
    from (:func:`textfree.ppft.checkpoint.stage1_build`; computed once per run), so a report can tell rows of two
    stage-1 builds at the same path apart. Nothing where the chain cannot be followed."""
    build = _build(context, run)
    if build is not None:
        context.record("stage1_build", build)


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _strings(v)


def read_runs(encoder: Any, params: dict) -> list[Path]:
    """The PPFT run directories a point reads, in order, each once: ``encoder`` when it is a run's ``encoder/``
    directory, and every existing directory named among ``params`` (nested too, e.g. ``init: {encoder, decoder}``)
    that holds a ``summary.json`` or is a run's ``encoder/``; params in :data:`WRITTEN` are skipped."""
    names = [encoder] + [s for k, v in params.items() if k not in WRITTEN for s in _strings(v)]
    runs: list[Path] = []
    for name in names:
        if not isinstance(name, str) or not name or name == "default":
            continue
        path = Path(name)
        if path.name == "encoder" and (path.parent / "summary.json").is_file():
            path = path.parent
        if (path / "summary.json").is_file() and path not in runs:
            runs.append(path)
    return runs


def record_read_builds(context: RunContext, encoder: Any, params: dict) -> None:
    """Record, as the point's ``stage1_build``, the stage-1 builds of the PPFT runs it reads (:func:`read_runs`):
    the one build, or several joined by ", " (sorted) when its runs descend from different builds. Nothing when
    no run's build can be followed."""
    builds = sorted({b for run in read_runs(encoder, params) if (b := _build(context, run)) is not None})
    if builds:
        context.record("stage1_build", ", ".join(builds))
