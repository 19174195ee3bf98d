"""The body of the ``report`` commands (``textfree ppft report``, ``textfree attacks report``): check the paths, write
the report from result files, say where it went; every problem is one error line and exit status 2."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, NoReturn, Sequence

__all__ = ["run_report_command", "check_report_out"]


def check_report_out(out: Path, fail: Callable[[str], NoReturn]) -> None:
    """Refuse (one error line through ``fail``) an ``--out`` that is a directory, whose figures folder
    (``<out stem>/``) is a file, or that lies under something that is not a directory; a missing parent directory is
    fine (the report creates it)."""
    if out.is_dir():
        fail(f"--out {str(out)!r} is a directory; give the Markdown file to write")
    figures = out.parent / out.stem
    if figures.exists() and not figures.is_dir():
        fail(f"cannot write --out {str(out)!r}: its figures folder {str(figures)!r} is a file, not a directory")
    for parent in out.parents:
        if parent.exists():
            if not parent.is_dir():
                fail(f"cannot write --out {str(out)!r}: {str(parent)!r} is a file, not a directory")
            break


def run_report_command(
    results: Sequence[Path], out: Path, write_report: Callable[..., Path], fail: Callable[[str], NoReturn]
) -> Path:
    """``write_report(results, out)`` after checking the paths; a :class:`ResultsError` (e.g. no result files of the
    report's kinds: nothing is written) or an ``OSError`` while writing is one error line."""
    from .files import ResultsError

    missing = [str(p) for p in results if not p.exists()]
    if missing:
        fail(f"no such file or directory: {', '.join(missing)}")
    check_report_out(out, fail)
    from rich.console import Console

    try:
        with Console(stderr=True).status(f"reading the result files and writing {out} ..."):
            return write_report(list(results), out)
    except ResultsError as exc:
        fail(str(exc))
    except OSError as exc:
        fail(f"cannot write --out {str(out)!r}: {exc.strerror or exc}")
