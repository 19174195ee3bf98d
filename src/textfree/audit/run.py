"""Run an audit: check the data against its column mapping first (a bad column costs nothing), run the battery's
cells with the experiment runner (their result files, progress bars and provenance are ``textfree run``'s), then
write ``audit.json`` (config, versions, git, host, seeds, date, every verdict) and ``report.md`` with its figures."""

from __future__ import annotations

import dataclasses
import datetime as _dt
import logging
import math
import os
import time
from pathlib import Path
from typing import Any

from ..atomic import atomic_write_text, write_json
from .cells import audit_cells
from .config import AuditConfig, AuditError

__all__ = ["run_audit", "write_report", "rewrite_report", "check_data", "FORMAT"]

FORMAT = "textfree.audit"
log = logging.getLogger("textfree.audit")


def _out_dir(out: Path) -> Path:
    if out.exists() and not out.is_dir():
        raise AuditError(f"--out: {str(out)!r} is a file, not a folder")
    try:
        (out / "results").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise AuditError(f"--out: cannot create {str(out)!r}: {exc.strerror or exc}") from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise AuditError(f"--out: {str(out)!r} is not writable")
    return out


def check_data(config: AuditConfig) -> int:
    """Read the data through its mapping (every row: a missing column or a bad value fails here, before any attack
    runs); the number of rows."""
    from ..data import load_dataset

    records = load_dataset(config.data, split=config.split, columns=config.columns)
    if not records:
        raise AuditError(f"DATA: {config.data!r} holds no rows")
    return len(records)


def _plain(obj: Any) -> Any:
    """JSON data with NaN and inf as null (strict JSON, as the result files)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def _token_rows(result: dict[str, Any]) -> dict[str, Any]:
    axis = (result.get("grid_axes") or ["mechanism.epsilon"])[0]
    rows = []
    for row in result["results"]:
        means = {k: v.get("mean") for k, v in row["metrics"].items()}
        rows.append(
            {"x": float(row["point"].get(axis, math.nan))} | {k: math.nan if v is None else v for k, v in means.items()}
        )
    return {"rows": rows}


def run_audit(config: AuditConfig, *, progress: bool = True) -> Path:
    """Run the battery of ``config`` and write its report; returns the report's path."""
    from ..experiments import Cell, run_cell
    from ..experiments.runner import git_info, host_info, package_versions

    out = _out_dir(Path(config.out))
    n_rows = check_data(config)
    log.info("audit of %s: %d rows read through the column mapping", config.data, n_rows)
    started = _dt.datetime.now(_dt.timezone.utc)
    git = git_info()
    t0 = time.perf_counter()
    cells = audit_cells(config)
    for cell in cells:  # every cell checked before the first one runs
        Cell.from_dict(cell)
    paths = {cell["name"]: run_cell(cell, out_dir=out / "results", progress=progress) for cell in cells}
    inverter = None
    if config.inverter:
        from .inverter import run_inverter

        inverter = run_inverter(config, progress=progress)
    meta = {
        "format": FORMAT,
        "format_version": 1,
        "date": started.isoformat(timespec="seconds"),
        "elapsed_s": round(time.perf_counter() - t0, 1),
        "versions": package_versions(),
        "git": git,
        "host": host_info(),
        "seeds": list(config.seeds),
        "rows_read": n_rows,
        "results": {name: os.path.relpath(p, out) for name, p in paths.items()},
        "cells": cells,
        "inverter": inverter,
    }
    return write_report(config, meta)


def write_report(config: AuditConfig, meta: dict[str, Any]) -> Path:
    """``audit.json`` and ``report.md`` with its figures in ``config.out``, from the result files ``meta["results"]``
    names (relative to it) and the rest of ``meta``; nothing is recomputed (:func:`rewrite_report` runs it again
    from a finished audit's ``audit.json``)."""
    from ..results.files import load_results
    from .figures import attribute_figure, curve_figure, token_figure
    from .report import markdown
    from .verdicts import verdicts

    out = Path(config.out)
    results = {name: load_results(out / path) for name, path in meta["results"].items()}
    beside = load_results(config.beside) if config.beside is not None else None
    items = verdicts(results["audit_attributes"], beside)
    tokens = _token_rows(results["audit_tokens"]) if "audit_tokens" in results else None
    x_name = "eta" if config.mechanism in ("t2t", "pct2t") else "epsilon"
    figures = {}
    if attribute_figure(items, out / "attributes.png", x_name):
        figures["attributes"] = "attributes.png"
    if curve_figure(items, out / "validation_curves.png", x_name):
        figures["curves"] = "validation_curves.png"
    if "audit_tokens" in results and token_figure(results["audit_tokens"], out / "token_inversion.png"):
        figures["tokens"] = "token_inversion.png"
    first = results["audit_attributes"]["results"][0]["metrics"]
    meta = meta | {"n_dropped": (first.get("n_dropped") or {}).get("mean", 0) or 0}
    data = meta | {
        "config": config.to_dict(),
        "verdicts": [dataclasses.asdict(v) | {"stderr": v.stderr} for v in items],
        "tokens": tokens,
        "figures": figures,
    }
    write_json(out / "audit.json", _plain(data))
    report = out / "report.md"
    beside_name = None if beside is None else f"{beside['cell']['name']}: {config.beside}"
    text = markdown(
        config,
        items,
        x_name=x_name,
        figures=figures,
        meta=meta,
        tokens=tokens,
        inverter=meta.get("inverter"),
        beside_name=beside_name,
    )
    atomic_write_text(report, text)
    return report


def rewrite_report(out: str | os.PathLike) -> Path:
    """The report of a finished audit written again from its ``audit.json`` and result files (after a change to how
    reports are written; the numbers are the result files')."""
    from ..atomic import read_json

    data = read_json(Path(out) / "audit.json")
    config = AuditConfig.from_dict(data["config"])
    keep = ("format", "format_version", "date", "elapsed_s", "versions", "git", "host", "seeds", "rows_read")
    meta = {k: data[k] for k in keep} | {k: data.get(k) for k in ("results", "cells", "inverter")}
    if isinstance(meta["results"], list):  # a list of paths: each named by its cell (the file's stem before the time)
        meta["results"] = {Path(p).name.rsplit("-", 1)[0]: p for p in meta["results"]}
    return write_report(dataclasses.replace(config, out=Path(out)), meta)
