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
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping

from ..metrics import mean_stderr
from .cell import Cell, CellError, load_cell
from .registry import RunContext, get_cell_kind

__all__ = [
    "run_cell",
    "load_results",
    "ResultsError",
    "RESULTS_FORMAT",
    "RESULTS_VERSION",
    "REQUIRED_KEYS",
    "package_versions",
    "git_info",
    "host_info",
    "format_results_table",
]

RESULTS_FORMAT = "textfree.results"
RESULTS_VERSION = 1
REQUIRED_KEYS = ("format", "format_version", "cell", "results", "versions", "git", "seeds", "date", "host")
_VERSIONED = ("torch", "transformers", "numpy", "textfree")

log = logging.getLogger("textfree.experiments")


class ResultsError(ValueError):
    """A result file is missing, not JSON, or not in the results format; the message names file and field."""


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
    out_dir.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{stem}.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        for i in range(1000):
            final = out_dir / (f"{stem}.json" if i == 0 else f"{stem}-{i}.json")
            try:
                os.link(tmp, final)  # atomic and exclusive: fails if the name exists
                return final
            except FileExistsError:
                continue
            except OSError:  # a filesystem without hard links
                if final.exists():
                    continue
                os.replace(tmp, final)
                return final
        raise FileExistsError(f"no free result file name for {stem!r} in {out_dir}")
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


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
def _fail(path: Any, field: str | None, msg: str) -> ResultsError:
    return ResultsError(f"{path}: " + (f"field '{field}': " if field else "") + msg)


def _is_num_or_null(v: Any) -> bool:
    return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))


def load_results(path: str | os.PathLike) -> dict[str, Any]:
    """Read a result file and check its shape; :class:`ResultsError` names the file and the bad field.

    Returns the parsed JSON (numbers that were NaN/inf are None).
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise _fail(p, None, "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _fail(p, None, f"cannot read: {exc}") from None
    except json.JSONDecodeError as exc:
        raise _fail(p, None, f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise _fail(p, None, f"must hold a JSON object, got {type(data).__name__}")
    for key in REQUIRED_KEYS:
        if key not in data:
            raise _fail(p, key, "is missing")
    if data["format"] != RESULTS_FORMAT:
        raise _fail(p, "format", f"must be {RESULTS_FORMAT!r}, got {data['format']!r}")
    if not isinstance(data["format_version"], int) or not 1 <= data["format_version"] <= RESULTS_VERSION:
        raise _fail(
            p, "format_version", f"must be an integer in [1, {RESULTS_VERSION}], got {data['format_version']!r}"
        )
    try:
        cell = Cell.from_dict(data["cell"], strict=False)
    except CellError as exc:
        raise _fail(p, f"cell.{exc.field}" if exc.field else "cell", exc.message) from None
    seeds = data["seeds"]
    if (
        not isinstance(seeds, list)
        or not seeds
        or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)
    ):
        raise _fail(p, "seeds", f"must be a non-empty list of integers, got {seeds!r}")
    for key in ("versions", "host"):
        if not isinstance(data[key], dict):
            raise _fail(p, key, f"must be an object, got {type(data[key]).__name__}")
    if data["git"] is not None and not isinstance(data["git"], dict):
        raise _fail(p, "git", f"must be an object or null, got {type(data['git']).__name__}")
    if not isinstance(data["date"], str):
        raise _fail(p, "date", "must be an ISO date string")
    try:
        _dt.datetime.fromisoformat(data["date"])
    except ValueError:
        raise _fail(p, "date", f"is not an ISO date: {data['date']!r}") from None
    results = data["results"]
    if not isinstance(results, list) or not results:
        raise _fail(p, "results", "must be a non-empty list")
    axes = list(cell.grid)
    for i, row in enumerate(results):
        where = f"results[{i}]"
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("point"), dict)
            or not isinstance(row.get("metrics"), dict)
        ):
            raise _fail(p, where, "must be an object with 'point' and 'metrics' objects")
        prov = row.get("provenance", {})
        if not isinstance(prov, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in prov.items()):
            raise _fail(p, f"{where}.provenance", "must be an object of strings")
        if sorted(row["point"]) != sorted(axes):
            raise _fail(p, f"{where}.point", f"keys {sorted(row['point'])} do not match the grid axes {sorted(axes)}")
        for name, agg in row["metrics"].items():
            mwhere = f"{where}.metrics.{name}"
            if not isinstance(agg, dict) or not {"mean", "stderr", "values"} <= set(agg):
                raise _fail(p, mwhere, "must be an object with mean, stderr and values")
            if not _is_num_or_null(agg["mean"]) or not _is_num_or_null(agg["stderr"]):
                raise _fail(p, mwhere, "mean and stderr must be numbers or null")
            vals = agg["values"]
            if not isinstance(vals, list) or len(vals) != len(seeds) or not all(_is_num_or_null(v) for v in vals):
                raise _fail(p, f"{mwhere}.values", f"must be a list of {len(seeds)} numbers (one per seed)")
    return data


def format_results_table(data: Mapping[str, Any], metrics: list[str] | None = None) -> str:
    """A plain-text table of a result file's means ± stderr, one line per grid point (for terminals and logs)."""
    rows = data["results"]
    names = metrics or list(rows[0]["metrics"])
    axes = list(data["cell"].get("grid", {}))
    header = [a.split(".")[-1] for a in axes] + names

    def fmt(agg: Mapping[str, Any] | None) -> str:
        if agg is None or agg.get("mean") is None:
            return "nan"
        s = f"{agg['mean']:.4g}"
        return s + (f" ± {agg['stderr']:.2g}" if agg.get("stderr") is not None else "")

    table = [header] + [[str(r["point"][a]) for a in axes] + [fmt(r["metrics"].get(n)) for n in names] for r in rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in table)
