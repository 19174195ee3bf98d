"""Run a cell: expand its grid, call its kind for every (point, seed), aggregate over seeds, write JSON.

The result file ``<out_dir>/<cell name>-<UTC time>.json`` (written atomically, never overwriting another) holds
everything needed to read, re-plot and reproduce the run::

    {
      "format": "textfree.results", "format_version": 1,
      "cell": {...the full cell...}, "cell_source": "examples/cells/x.yaml" | null,
      "kind": "privatization",
      "grid_axes": ["mechanism.epsilon", "params.k"],
      "seeds": [0, 1, 2],
      "results": [
        {"point": {"mechanism.epsilon": 10, "params.k": 4},
         "resolved": {"mechanism": {...}, "params": {...}, "attack": null},
         "metrics": {"cosine": {"mean": 0.41, "stderr": 0.003, "values": [0.41, 0.40, 0.42]}, ...},
         "provenance": {"stage1_build": "<sha256>"}},   # optional: what the kind recorded (RunContext.record)
        ...
      ],
      "versions": {"python": ..., "torch": ..., "transformers": ..., "numpy": ..., "textfree": ...},
      "git": {"commit": "<sha>" | null, "dirty": true, "modified": [...], "n_modified": 0, "untracked": 1} | null,
      "date": "2025-01-01T12:00:00+00:00", "elapsed_s": 3.2,
      "host": {"platform": ..., "machine": ..., "cpu_count": 16, "torch_threads": 16}
    }

Non-finite numbers (NaN, inf) are written as null, so the file is strict JSON.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import math
import numbers
import os
import platform
import subprocess
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from ..atomic import create_new_text
from ..metrics import mean_stderr
from ..results.cell import Cell, load_cell
from ..results.files import RESULTS_FORMAT, RESULTS_VERSION
from .registry import RunContext, get_cell_kind

__all__ = ["run_cell", "package_versions", "git_info", "host_info"]

_VERSIONED = ("torch", "transformers", "numpy", "textfree")

log = logging.getLogger("textfree.experiments")


# ---------------------------------------------------------------------------------------------- provenance
def package_versions() -> dict[str, str | None]:
    """Python and the key packages' versions; a package that is not installed is null.

    textfree itself falls back to ``textfree.__version__`` when it runs from a source tree (not pip-installed).
    """
    out: dict[str, str | None] = {"python": platform.python_version()}
    for dist in _VERSIONED:
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    if out.get("textfree") is None:
        try:
            import textfree

            out["textfree"] = getattr(textfree, "__version__", None)
        except ImportError:  # pragma: no cover
            pass
    return out


def _git(args: list[str], cwd: Path) -> str | None:
    try:
        proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


_MAX_MODIFIED = 50  # tracked paths listed in a result file's "modified"; the count says how many there were


def git_info(path: str | os.PathLike | None = None) -> dict[str, Any] | None:
    """``{"commit": sha or null (no commit yet), "dirty": bool, "modified": [path, ...], "n_modified": int,
    "untracked": int}`` of the git checkout holding the textfree package (or ``path``), or null when it is not in one
    (for example when installed in site-packages). ``dirty`` is git's (tracked changes or untracked files);
    ``modified`` names the tracked files that differ from the commit (the first 50, sorted), ``untracked`` counts the
    untracked, not ignored files: a run queued behind another in the same checkout starts "dirty" from the earlier
    run's new result file alone, and these say whether any code differed."""
    if path is None:
        import textfree

        path = Path(textfree.__file__).resolve().parent
    here = Path(path).resolve()
    if any(part in ("site-packages", "dist-packages") for part in here.parts):
        return None  # an installed copy: any enclosing repository is not textfree's
    top = _git(["rev-parse", "--show-toplevel"], here)
    if top is None:
        return None
    commit = _git(["rev-parse", "--verify", "--quiet", "HEAD"], here)
    status = _git(["status", "--porcelain"], here)
    info: dict[str, Any] = {"commit": commit or None, "dirty": None if status is None else bool(status)}
    root = Path(top)  # ls-files lists only what lies under its working directory: ask the checkout's top
    changed = _git(["diff", "--name-only", "HEAD"], root) if commit else None
    untracked = _git(["ls-files", "--others", "--exclude-standard"], root)
    if changed is not None:
        paths = sorted(line for line in changed.splitlines() if line)
        info |= {"modified": paths[:_MAX_MODIFIED], "n_modified": len(paths)}
    if untracked is not None:
        info["untracked"] = sum(1 for line in untracked.splitlines() if line)
    return info


def host_info() -> dict[str, Any]:
    """Where the run happened: platform, machine, CPU count, torch's thread count."""
    info: dict[str, Any] = {
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python_implementation": platform.python_implementation(),
        "cpu_count": os.cpu_count(),
    }
    try:
        import torch

        info["torch_threads"] = torch.get_num_threads()
        info["cuda"] = bool(torch.cuda.is_available())
    except ImportError:  # pragma: no cover
        pass
    return info


# ------------------------------------------------------------------------------------------------ running
def _as_cell(cell_or_path: Cell | Mapping | str | os.PathLike) -> tuple[Cell, str | None]:
    if isinstance(cell_or_path, Cell):
        return Cell.from_dict(cell_or_path.to_dict()), None  # re-validate: fields may have been edited
    if isinstance(cell_or_path, Mapping):
        return Cell.from_dict(dict(cell_or_path)), None
    if isinstance(cell_or_path, (str, os.PathLike)):
        return load_cell(cell_or_path), str(cell_or_path)
    raise TypeError(f"run_cell takes a Cell, a mapping or a path, got {type(cell_or_path).__name__}")


def _check_metrics(cell: Cell, point: dict, seed: int, out: Any) -> dict[str, float]:
    where = f"cell {cell.name!r}, kind {cell.kind!r}, point {point}, seed {seed}"
    if not isinstance(out, Mapping):
        raise TypeError(f"{where}: the kind must return a dict of metric name -> number, got {type(out).__name__}")
    metrics: dict[str, float] = {}
    for name, value in out.items():
        if not isinstance(name, str) or isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{where}: metric {name!r} must be a real number, got {value!r}")
        metrics[name] = float(value)
    if cell.metrics:
        missing = [m for m in cell.metrics if m not in metrics]
        if missing:
            raise ValueError(f"{where}: the kind did not compute the requested metric(s) {missing}")
        metrics = {m: metrics[m] for m in cell.metrics}
    return metrics


def _aggregate(per_seed: list[dict[str, float]]) -> dict[str, dict[str, Any]]:
    names = list(per_seed[0])
    for row in per_seed[1:]:
        if list(row) != names:
            raise ValueError(f"a kind returned different metrics for different seeds: {names} vs {list(row)}")
    out = {}
    for name in names:
        values = [row[name] for row in per_seed]
        mean, stderr = mean_stderr(values)
        out[name] = {"mean": mean, "stderr": stderr, "values": values}
    return out


def _jsonable(obj: Any) -> Any:
    """Plain JSON data; NaN and inf become null."""
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, numbers.Integral):
        return int(obj)
    if isinstance(obj, numbers.Real):
        f = float(obj)
        return f if math.isfinite(f) else None
    return str(obj)


def _results_dir(out_dir: str | os.PathLike) -> Path:
    """``out_dir``, created when missing; a ``ValueError`` naming it when it cannot hold result files (checked
    before the first grid point runs, so a bad directory costs no run)."""
    path = Path(out_dir)
    if path.exists() and not path.is_dir():
        raise ValueError(f"results directory {str(path)!r} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"cannot create the results directory {str(path)!r}: {exc.strerror or exc}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise ValueError(f"results directory {str(path)!r} is not writable")
    return path


def _write_new_json(out_dir: Path, stem: str, data: Any) -> Path:
    """Write ``data`` to ``out_dir/stem.json`` (or ``stem-1.json``, ...) atomically, never replacing a file."""
    return create_new_text(out_dir, stem, json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n")


def run_cell(
    cell_or_path: Cell | Mapping | str | os.PathLike,
    out_dir: str | os.PathLike = "results",
    *,
    progress: bool = True,
) -> Path:
    """Run every (grid point, seed) of a cell and write its result JSON; returns the file's path.

    ``cell_or_path``: a :class:`Cell`, a mapping of cell fields, or a YAML file. ``progress``: show a tqdm bar.
    ``out_dir`` is created (``ValueError`` when it cannot be) before the first grid point runs; an ``OSError`` at the
    final write says where the results could not be written.
    """
    from tqdm.auto import tqdm

    cell, source = _as_cell(cell_or_path)
    kind = get_cell_kind(cell.kind)
    out_dir = _results_dir(out_dir)
    points = cell.points()
    context = RunContext(cell=cell, logger=log)
    started = _dt.datetime.now(_dt.timezone.utc)
    git = git_info()  # the code that runs is the checkout as it is now, not after a commit made during a long run
    t0 = time.perf_counter()
    log.info("cell %s (kind %s): %d point(s) x %d seed(s)", cell.name, cell.kind, len(points), len(cell.seeds))
    results = []
    with tqdm(total=len(points) * len(cell.seeds), desc=cell.name, unit="run", disable=not progress) as bar:
        for point in points:
            context.provenance = {}
            per_seed = []
            for seed in cell.seeds:
                bar.set_postfix_str(", ".join(f"{k.split('.')[-1]}={v}" for k, v in point.items()) + f", seed={seed}")
                per_seed.append(_check_metrics(cell, point, seed, kind(cell, point, seed, context)))
                bar.update(1)
            resolved = cell.resolve(point)
            metrics = _aggregate(per_seed)
            results.append(
                {
                    "point": dict(point),
                    "resolved": {"mechanism": resolved.mechanism, "params": resolved.params, "attack": resolved.attack},
                    "metrics": metrics,
                }
                | ({"provenance": dict(context.provenance)} if context.provenance else {})
            )
            log.info(
                "%s %s: %s",
                cell.name,
                point or "(no grid)",
                ", ".join(f"{n}={m['mean']:.4g}±{m['stderr']:.2g}" for n, m in metrics.items()),
            )
    data = {
        "format": RESULTS_FORMAT,
        "format_version": RESULTS_VERSION,
        "cell": cell.to_dict(),
        "cell_source": source,
        "kind": cell.kind,
        "grid_axes": list(cell.grid),
        "seeds": list(cell.seeds),
        "results": results,
        "versions": package_versions(),
        "git": git,
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - t0, 3),
        "host": host_info(),
    }
    try:
        path = _write_new_json(out_dir, f"{cell.name}-{started.strftime('%Y%m%dT%H%M%SZ')}", data)
    except OSError as exc:
        raise OSError(f"could not write the results of cell {cell.name!r} to {str(out_dir)!r}: {exc}") from exc
    log.info("wrote %s", path)
    return path


# ------------------------------------------------------------------------------------------------ reading
