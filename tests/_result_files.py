"""A minimal result file in the experiment runner's format, for report tests (one grid-less cell, one seed)."""

from __future__ import annotations

import json
from pathlib import Path


def write_result(directory: Path, name: str, kind: str, base: dict, points: list[dict], rows: list[dict], date: str):
    """``<directory>/<name>-<day>.json``: one result per (point params, metric means) pair, each point's resolved
    params ``base | point`` (``base["_dataset"]``, popped, is the cell's dataset)."""
    base = dict(base)
    dataset = base.pop("_dataset", None)
    results = [{"point": {}, "resolved": {"mechanism": None, "params": base | p, "attack": None},
                "metrics": {m: {"mean": v, "stderr": None, "values": [v]} for m, v in r.items()}}
               for p, r in zip(points, rows)]  # fmt: skip
    data = {"format": "textfree.results", "format_version": 1, "cell": {"name": name, "kind": kind,
            "encoder": "default", "dataset": dataset, "params": {}, "grid": {}, "seeds": [0]},
            "cell_source": None, "kind": kind, "grid_axes": [], "seeds": [0], "results": results, "versions": {},
            "git": None, "date": date, "host": {}}  # fmt: skip
    (directory / f"{name}-{date[:10]}.json").write_text(json.dumps(data))
