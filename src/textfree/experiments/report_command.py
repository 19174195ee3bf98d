"""The body of the ``report`` commands (``textfree ppft report``, ``textfree attacks report``): check the paths, write
the report from result files, say where it went; every problem is one error line and exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NoReturn, Sequence

__all__ = ["run_report_command"]


def run_report_command(results: Sequence[Path], out: Path, write_report: Callable[..., Path],
                       fail: Callable[[str], NoReturn]) -> Path:
    from . import ResultsError

    missing = [str(p) for p in results if not p.exists()]
    if missing:
        fail(f"no such file or directory: {', '.join(missing)}")
    try:
        return write_report(list(results), out)
    except ResultsError as exc:
        fail(str(exc))
