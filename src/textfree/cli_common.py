"""What every ``textfree`` command shares: the top-level typer ``app``, the consoles, and the small helpers.

The commands themselves live in ``textfree.cli`` (privatize ... plot; it mounts the rest) and
``textfree.cli_service`` (serve, ask, finetune); this module imports neither, so both can import it.
"""

from __future__ import annotations

import math
import os

import typer
from rich.console import Console


def command_group(help: str, **settings) -> typer.Typer:
    """A ``textfree`` command group (the top-level app and ``ppft``, ``snd``, ``rapt``, ...): help on no arguments,
    and click's plain help layout, which marks required options ``[required]`` and shows no type for a flag
    (typer's rich layout prints ``--help <bool>``)."""
    return typer.Typer(no_args_is_help=True, rich_markup_mode=None, help=help, **settings)


app = command_group(
    "textfree: use and run LLM services without the server ever seeing your text.", add_completion=False
)
console = Console()
err = Console(stderr=True)


#: How every command logs: time, logger name, message (INFO and up), to stderr.
LOG_FORMAT = "%(asctime)s %(name)s %(message)s"


def setup_logging(verbose: bool = True) -> None:
    """textfree's INFO logs (``textfree run``'s progress lines among them; ``verbose=False``: warnings only) and other
    libraries' warnings, to stderr. The root logger is configured only where nothing has configured it (not in a host
    program or under pytest)."""
    import logging

    if not logging.getLogger().handlers:
        logging.basicConfig(level=logging.WARNING, format=LOG_FORMAT, datefmt="%H:%M:%S")
    logging.getLogger("textfree").setLevel(logging.INFO if verbose else logging.WARNING)


@app.callback()
def _setup() -> None:
    """Logging for every command; warnings print as one plain line (e.g. that --seed makes noise reproducible)."""
    import warnings

    setup_logging()

    def show(message, category, filename, lineno, file=None, line=None):
        err.print(f"[yellow]warning:[/] {message}", markup=True, highlight=False)

    warnings.showwarning = show


def _quiet_transformers() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except Exception:  # pragma: no cover - transformers is a dependency
        pass


def _fail(message: str, code: int = 2) -> None:
    """Print ``error: message`` to stderr, unwrapped (a long path stays whole) and never read as markup; exit."""
    from rich.markup import escape

    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)
    raise typer.Exit(code)


def _fmt_eps(x: float) -> str:
    return "inf (no formal guarantee)" if math.isinf(x) else f"{x:g}"


def flag_message(message: str, flags: dict[str, str]) -> str:
    """``message`` with the config field it starts with (or names first) replaced by the flag a CLI user types
    (``flags``: field -> flag)."""
    for name, flag in flags.items():
        if message.startswith(f"{name} "):
            return flag + message[len(name) :]
    for name, flag in flags.items():
        if f" {name} " in f" {message} ":
            return f"{flag}: {message}"
    return message
