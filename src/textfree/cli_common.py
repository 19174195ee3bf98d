"""What every ``textfree`` command shares: the top-level typer ``app``, the consoles, and the small helpers.

The commands themselves live in ``textfree.cli`` (privatize ... plot; it mounts the rest) and
``textfree.cli_service`` (serve, ask, finetune); this module imports neither, so both can import it.
"""

from __future__ import annotations

import contextlib
import math
import os

import typer
from rich.console import Console


def command_group(help: str, **settings) -> typer.Typer:
    """A ``textfree`` command group (the top-level app and ``ppft``, ``snd``, ``rapt``, ...): help on no arguments,
    and click's plain help layout, which marks required options ``[required]`` and shows no type for a flag
    (typer's rich layout prints ``--help <bool>``)."""
    return typer.Typer(no_args_is_help=True, rich_markup_mode=None, help=help, **settings)


#: The verbs every system group (``textfree ppft|rapt|snd``) has, listed first in its help: ``train`` (the system's
#: main training entry, from nothing to a trained run, with its held-out score), ``evaluate`` (score a trained run on
#: held-out data) and ``report`` (the result page from result files). Steps of one system keep descriptive names.
SYSTEM_VERBS = ("train", "evaluate", "report")


def deprecated_alias(group: typer.Typer, old: str, new: str, command, *, prefix: str) -> None:
    """Register ``old`` as a hidden name of ``command`` (registered as ``new`` in ``group``): the same options, the
    same behaviour, after one warning line on stderr naming the command to type now. ``prefix``: the group as typed
    (e.g. ``textfree snd``). A name users wrote into scripts keeps working."""
    import functools

    @functools.wraps(command)
    def run(*args, **kwargs):
        err.print(
            f"[yellow]warning:[/] '{prefix} {old}' is deprecated: it is now '{prefix} {new}' (same options)",
            highlight=False,
            soft_wrap=True,
        )
        return command(*args, **kwargs)

    group.command(old, hidden=True, help=f"Deprecated name of '{prefix} {new}' (same options).")(run)


def verbs_first(group: typer.Typer, verbs=SYSTEM_VERBS) -> None:
    """List ``verbs`` first in ``group``'s help, in that order; the other commands keep their order after them."""
    rank = {verb: i for i, verb in enumerate(verbs)}
    group.registered_commands.sort(key=lambda info: rank.get(info.name, len(rank)))


app = command_group(
    "textfree: use and run LLM services without the server ever seeing your text.", add_completion=False
)
console = Console()
err = Console(stderr=True)


class _ClearLine:
    """A text stream that erases the terminal's current line (a spinner's, or a progress bar's) before each write: a
    log record written meanwhile lands on a line of its own, and the spinner or bar redraws below it."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write("\r\x1b[2K" + text)

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


@contextlib.contextmanager
def spinner(message: str, *, between: str | None = None, enabled: bool = True):
    """A spinner on stderr with ``message`` while the block runs and no tqdm progress bar is open: it gives way to the
    bar a long call opens (a training loop's) and comes back, with ``between`` (default: ``message``), when the bar
    closes, so that every stretch of the call shows progress. Log lines written meanwhile print on lines of their
    own. Off where ``enabled`` is false (``--no-progress``), stderr is not a terminal, or in the other processes of
    a launched job (``RANK`` > 0: the main process shows it)."""
    import logging
    import sys
    import threading

    from rich.live import Live
    from rich.spinner import Spinner
    from tqdm import tqdm

    if not (enabled and err.is_terminal and os.environ.get("RANK", "0") in ("0", "")):
        yield
        return
    real = sys.stderr
    handlers = {
        h
        for logger in (logging.getLogger(), logging.getLogger("textfree"))
        for h in logger.handlers
        if type(h) is logging.StreamHandler and h.stream is real
    }
    for handler in handlers:
        handler.setStream(_ClearLine(real))
    done = threading.Event()

    def open_bars() -> list | None:
        try:
            return [bar for bar in list(tqdm._instances) if not getattr(bar, "disable", True)]
        except RuntimeError:  # a bar opened or closed while listing: look again at the next tick
            return None

    def spin() -> None:
        live, text, tick = None, message, 0.0  # the first look at once, then every 0.1 s
        try:
            while not done.wait(tick):
                tick = 0.1
                bars = open_bars()
                if bars is None:
                    continue
                if bars and live is not None:  # the call's own bar: give way to it, redraw it
                    live.stop()
                    live = None
                    for bar in bars:
                        bar.refresh()
                if bars:
                    text = between or message
                elif live is None:
                    live = Live(Spinner("dots", text, style="status.spinner"), console=err, transient=True,
                                redirect_stdout=False, redirect_stderr=False, refresh_per_second=12.5)  # fmt: skip
                    try:
                        live.start()
                    except Exception:  # another live display holds the console: leave it the stage
                        live = None
                        return
        finally:
            if live is not None:
                live.stop()

    thread = threading.Thread(target=spin, name="textfree-spinner", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        for handler in handlers:
            handler.setStream(real)


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


def option_flags(group: typer.Typer, renames: dict[str, str] | None = None) -> dict[str, str]:
    """Parameter name -> the long flag that sets it, over every command of ``group`` (``batch_size`` ->
    ``--batch-size``, an option declared as ``--from`` -> ``--from``), plus ``renames`` (config field -> parameter
    name) where a config calls a setting otherwise than the command's parameter."""
    import inspect

    flags: dict[str, str] = {}
    for info in group.registered_commands:
        for name, param in inspect.signature(info.callback).parameters.items():
            default = param.default
            if not isinstance(default, typer.models.OptionInfo):
                continue
            decls = [d.split("/")[0] for d in (default.param_decls or ()) if d.startswith("--")]
            flags.setdefault(name, decls[0] if decls else "--" + name.replace("_", "-"))
    for field_name, name in (renames or {}).items():
        if name in flags:
            flags[field_name] = flags[name]
    return flags


def leading_flag_message(message: str, flags: dict[str, str]) -> str:
    """``message`` led by the flag of the setting it starts with (``flags``: name -> flag, :func:`option_flags`):
    ``batch_size must be ...`` (or ``Stage2Config.batch_size ...``) as ``--batch-size: batch_size must be ...`` (the
    setting's name stays: a cell file spells it so), ``encoder: ...`` as ``--encoder: ...``; any other message as it
    is."""
    import re

    match = re.match(r"(?:[A-Z]\w*\.)?(\w+)([ :])", message)
    if not (match and match.group(1) in flags):
        return message
    flag = flags[match.group(1)]
    return flag + message[match.end(1) :] if match.group(2) == ":" else f"{flag}: {message}"


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
