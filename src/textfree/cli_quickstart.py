"""``textfree quickstart``: the whole idea in one command, on a fresh clone, in about a minute on a CPU.

A real ``textfree serve`` process on loopback serves the split all-MiniLM-L6-v2; the client privatizes questions of
the packaged FAQ corpus here (SnD's clipped d_chi token noise) and sends only the noisy token embeddings; the
server's sentence embeddings are searched against the public answers; the quality is printed beside the clean
result, with the bytes sent and the privacy spent. The server is stopped at the end, on an error and on Ctrl-C.
The flags are checked before anything heavy is imported.
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path
from typing import Optional

import typer

from textfree.cli_common import _fail, _quiet_transformers, app, console, err

DEFAULT_ETAS = (100.0, 200.0, 500.0)


def _parse_etas(values: Optional[list[str]]) -> list[float]:
    """The --eta values (repeatable, each comma-separated), in order, without repeats; the default when none."""
    if not values:
        return list(DEFAULT_ETAS)
    out: list[float] = []
    for part in ",".join(values).split(","):
        if not part.strip():
            continue
        try:
            eta = float(part)
        except ValueError:
            _fail(f"--eta takes numbers > 0 (e.g. --eta 100,500), got {part.strip()!r}")
        if not (math.isfinite(eta) and eta > 0):
            _fail(f"--eta must be finite numbers > 0, got {part.strip()}")
        if eta not in out:
            out.append(eta)
    if not out:
        _fail("--eta lists no value: give e.g. --eta 100,500")
    return out


def _check_denoiser(path: Path, etas: list[float]) -> None:
    """--denoiser names a readable denoiser whose eta range holds every --eta (checked before the server starts)."""
    from textfree.snd.denoiser import Denoiser, DenoiserError

    try:
        config = Denoiser.from_pretrained(str(path)).config
    except (DenoiserError, OSError, ValueError) as exc:
        _fail(f"--denoiser {str(path)!r}: {exc}")
    outside = [e for e in etas if not config.eta_min <= e <= config.eta_max]
    if outside:
        _fail(
            f"--eta {','.join(f'{e:g}' for e in outside)} lies outside [{config.eta_min:g}, {config.eta_max:g}], the "
            f"range the --denoiser was trained for: pick etas in it (e.g. --eta {config.eta_min:g},{config.eta_max:g})"
        )


def _server_error(exc: RuntimeError, log: Path) -> str:
    """One line saying why the server did not start: the last error line of its log, else the exception."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        lines = []
    errors = [ln for ln in lines if ln.lower().startswith("error")] or lines[-1:]
    return f"the server did not start: {errors[-1] if errors else str(exc).splitlines()[0]}"


def _raise_interrupt(signum, frame) -> None:
    raise KeyboardInterrupt


@app.command()
def quickstart(
    eta: Optional[list[str]] = typer.Option(
        None,
        "--eta",
        metavar="ETA[,ETA...]",
        help="Noise levels eta (d_chi per unit L2 distance), comma-separated or repeated; default 100,200,500. "
        "Smaller is more private and noisier.",
    ),
    denoiser: Optional[Path] = typer.Option(
        None,
        "--denoiser",
        metavar="DIR",
        help="An SnD denoiser run (textfree snd train --out DIR): served with the model and applied here "
        "(denoise=True); every --eta must lie in its range.",
    ),
    port: Optional[int] = typer.Option(
        None, "--port", metavar="PORT", help="Loopback port for the server (default: a free one)."
    ),
    keep_serving: bool = typer.Option(
        False, "--keep-serving", help="Leave the server running after the results (Ctrl-C stops it)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object with every figure instead of text."),
    seed: Optional[int] = typer.Option(
        None, "--seed", metavar="N", help="Reproducible noise for a comparable run (NOT private)."
    ),
) -> None:
    """Privatized semantic search through a real local server: the server answers questions it never sees.

    Starts textfree serve on loopback (split all-MiniLM-L6-v2, a fresh API key), privatizes the packaged FAQ's
    questions here, sends only noisy token embeddings, searches the server's answers against the public FAQ, and
    prints accuracy beside the clean result, the bytes sent and the privacy spent; then stops the server."""
    etas = _parse_etas(eta)
    if seed is not None and seed < 0:
        _fail(f"--seed must be >= 0, got {seed}")
    if denoiser is not None and not denoiser.exists():
        _fail(f"--denoiser {str(denoiser)!r}: no such file or directory")
    from textfree.quickstart.server import port_problem

    if port is not None and (problem := port_problem(port)):
        _fail(f"--port {problem}")
    t0 = time.perf_counter()
    _quiet_transformers()
    previous = signal.signal(signal.SIGTERM, _raise_interrupt)  # stopped by SIGTERM: stop the server too
    try:
        result = _run(etas, denoiser, port, keep_serving, seed, as_json, t0)
    except KeyboardInterrupt:
        err.print("interrupted: no server left running")
        raise typer.Exit(130)
    finally:
        signal.signal(signal.SIGTERM, previous)
    if keep_serving:  # printed before it waited
        return
    if as_json:
        from textfree.quickstart.report import to_json

        typer.echo(to_json(result))
    else:
        from textfree.quickstart.report import render

        render(result, console)


def _run(etas, denoiser, port, keep_serving, seed, as_json, t0) -> dict:
    import contextlib
    import tempfile

    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from textfree.client import ClientError, ModelMismatchError
    from textfree.quickstart.corpus import CorpusError, load_faq
    from textfree.quickstart.runner import LocalSide, run_search
    from textfree.quickstart.server import serve_process

    if denoiser is not None:
        _check_denoiser(denoiser, etas)
    try:
        faq = load_faq()
    except CorpusError as exc:
        _fail(str(exc))

    def say(msg: str) -> None:
        err.print(f"[dim]{time.perf_counter() - t0:5.1f}s[/] {msg}", highlight=False)

    with tempfile.TemporaryDirectory(prefix="textfree-quickstart-") as work, contextlib.ExitStack() as stack:
        say("loading all-MiniLM-L6-v2 here (the client's token table and the clean reference)")
        t_load = time.perf_counter()
        local = LocalSide(None)
        load = time.perf_counter() - t_load
        say("starting a real server process: textfree serve --embed-model minilm=default (loopback, fresh API key)")
        t_server = time.perf_counter()
        try:
            with err.status("waiting for the server's /health ..."):
                served = stack.enter_context(serve_process(work, port=port, denoiser=denoiser))
        except RuntimeError as exc:
            _fail(_server_error(exc, Path(work) / "server.log"), code=1)
        startup = time.perf_counter() - t_server
        say(f"server ready: pid {served.pid} at {served.url} ({startup:.1f} s)")
        progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=err
        )
        tasks: dict[str, int] = {}

        def tick(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = progress.add_task(f"{label}: questions", total=total)
            progress.update(tasks[label], completed=done)

        try:
            with progress:
                result = run_search(
                    served.url, served.api_key, faq, model=served.model, etas=etas, denoise=denoiser is not None,
                    seed=seed, cache_dir=Path(work) / "cache", local=local, say=say, tick=tick,
                )  # fmt: skip
        except (ClientError, ModelMismatchError, ValueError) as exc:
            _fail(f"the search failed: {exc}", code=1)
        result["server"] = {"pid": served.pid, "url": served.url, "startup_s": startup}
        result["seconds"].update(local_load=load, server_start=startup, total=time.perf_counter() - t0)
        if keep_serving:
            _keep_serving(result, served, as_json)
        process = served.process
        stack.close()  # stop the server (terminate, wait, kill if it lingers)
    stopped = process.poll() is not None
    result["server"]["stopped"] = stopped
    result["seconds"]["total"] = time.perf_counter() - t0
    return result


def _keep_serving(result: dict, served, as_json: bool) -> None:
    """Print the results, then how to use the server, and wait for Ctrl-C."""
    from textfree.quickstart.report import render, to_json

    if as_json:
        typer.echo(to_json(result))
    else:
        render(result, console)
    err.print(
        f"\nthe server keeps running at {served.url} (model {served.model}); try:\n"
        f'  TEXTFREE_API_KEY={served.api_key} textfree embed "a private sentence" --url {served.url} '
        f"--model {served.model} --epsilon 500\nCtrl-C stops it.",
        highlight=False,
        soft_wrap=True,
    )
    served.process.wait()
