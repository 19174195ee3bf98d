"""The ``textfree`` command line: privatize, inspect, account, substitute, run, plot, serve, ask, finetune."""

from __future__ import annotations

import json
import logging
import math
import os
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="textfree: use and run LLM services without the server ever seeing your text.",
)
console = Console()
err = Console(stderr=True)


@app.callback()
def _setup() -> None:
    """Warnings print as one plain line (e.g. that --seed makes noise reproducible)."""
    import warnings

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


def _build_noise(mechanism: str, epsilon: Optional[float], sigma: Optional[float], delta: float, sensitivity: float):
    from textfree.mechanisms import Gaussian, L2Laplace

    if mechanism == "none":
        return None
    if mechanism == "l2_laplace":
        if epsilon is None:
            _fail("--epsilon is required for the l2_laplace mechanism")
        return L2Laplace(epsilon)
    if mechanism == "gaussian":
        if sigma is not None:
            return Gaussian(sigma, delta)
        if epsilon is None:
            _fail("the gaussian mechanism needs --sigma, or --epsilon (with --delta) to calibrate it")
        return Gaussian.from_epsilon_delta(epsilon, delta, sensitivity)
    _fail(f"unknown --mechanism {mechanism!r}; choose l2_laplace, gaussian or none")


@app.command()
def privatize(
    text: list[str] = typer.Argument(None, help="Prompt text(s) to privatize. Use --file for one prompt per line."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="Noise parameter (L2-Laplace eps per unit distance; Gaussian eps at --delta)."),
    k: int = typer.Option(4, "--k", help="Pool blocks of k tokens into one slot."),
    pad_to: Optional[int] = typer.Option(None, "--pad-to", help="Hide the prompt's length: release exactly this many slots per prompt (public filler slots after its own, noised like them); a longer prompt is an error. Default: ceil(tokens / k) slots, which tells the server the length."),
    mechanism: str = typer.Option("l2_laplace", help="l2_laplace, gaussian or none (none = no privacy; experiments only)."),
    sigma: Optional[float] = typer.Option(None, help="Gaussian: the standard deviation directly (overrides --epsilon)."),
    delta: float = typer.Option(1e-5, help="Gaussian: delta for calibration and accounting."),
    encoder: str = typer.Option("default", help="Encoder: 'default' (all-MiniLM-L6-v2, offline) or any HF name/path."),
    file: Optional[Path] = typer.Option(None, help="Read prompts from this UTF-8 file, one per line."),
    out: Path = typer.Option(Path("payload.safetensors"), "--out", "-o", help="Where to write the payload."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise from this seed (NOT private)."),
    ledger: Optional[Path] = typer.Option(None, help="Charge this release to a privacy ledger file."),
    ledger_key: str = typer.Option("default", help="Ledger key (user) the release is charged to."),
    budget: Optional[float] = typer.Option(None, help="Ledger budget (total epsilon per key)."),
    on_exceed: str = typer.Option("refuse", help="Past the budget: refuse (nothing is written) or warn."),
) -> None:
    """Encode text locally, pool and noise it, and write a payload file (no text inside)."""
    texts = list(text or [])
    if file is not None:
        try:
            texts += [line.strip() for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"cannot read --file {str(file)!r}: {exc}")
    if not texts:
        _fail("give at least one prompt (argument or --file)")
    if k < 1:
        _fail(f"--k must be >= 1, got {k}")
    if pad_to is not None and pad_to < 1:
        _fail(f"--pad-to must be >= 1, got {pad_to}")
    _quiet_transformers()
    from textfree.encoders import ContextualEncoder, EncoderLoadError
    from textfree.ledger import BudgetExceeded, PrivacyLedger
    from textfree.privatizer import Privatizer

    try:
        noise = _build_noise(mechanism, epsilon, sigma, delta, 2.0)
        led = PrivacyLedger(ledger, budget, on_exceed) if ledger else None
    except ValueError as exc:
        _fail(str(exc))
    if noise is None:
        err.print("[yellow]warning:[/] --mechanism none releases clean vectors: no privacy at all")
    try:
        enc = ContextualEncoder.from_pretrained(None if encoder == "default" else encoder)
    except EncoderLoadError as exc:
        _fail(str(exc))
    priv = Privatizer(enc, noise, k, pad_to=pad_to, ledger=led, ledger_key=ledger_key if led else None)
    try:
        payload = priv.privatize(texts, seed=seed)
    except BudgetExceeded as exc:
        _fail(str(exc), code=3)
    except ValueError as exc:  # a prompt longer than --pad-to slots: nothing is written
        _fail(str(exc))
    payload.save(out)
    worst = payload.worst_case_loss()
    console.print(
        f"wrote {out} ({out.stat().st_size} bytes): {payload.batch_size} prompt(s), slots {payload.lengths}, "
        f"width {payload.encoder.dim}; worst-case privacy loss per prompt: eps = {_fmt_eps(worst.epsilon)}"
        + (f", delta = {worst.delta:g}" if worst.delta else "")
    )


@app.command()
def inspect(
    path: Path = typer.Argument(..., help="A payload file (.safetensors)."),
    as_json: bool = typer.Option(False, "--json", help="Print the header as JSON."),
) -> None:
    """Print what a payload holds: shapes, encoder, mechanism, privacy loss. Never any text."""
    from textfree.payload import Payload, PayloadError

    try:
        p = Payload.load(path)
    except PayloadError as exc:
        _fail(f"{path}: {exc}")
    h = p.header()
    if as_json:
        h = dict(h)
        h["public"] = None if h["public"] is None else f"{len(h['public'])} public string(s) (not shown)"
        console.print_json(json.dumps(h, default=str))
        return
    t = Table(title=f"payload {path}", show_header=False)
    t.add_row("format", f"{h['format']} v{h['format_version']} ({h['kind']})")
    t.add_row("vectors", f"shape {h['shape']}, dtype {h['dtype']}")
    t.add_row("slots per prompt", str(h["lengths"]))
    t.add_row("encoder", f"{p.encoder.id} ({p.encoder.kind}, d={p.encoder.dim})")
    t.add_row("encoder sha256", str(p.encoder.sha256))
    pr = p.privatization
    noise = "none (clean: no privacy)" if pr.noise is None else json.dumps(h["privatization"]["noise"])
    t.add_row("mechanism", noise)
    t.add_row("pipeline", f"k={pr.k}, normalize={pr.normalize}, renormalize={pr.renormalize}")
    if pr.center_sha256:
        t.add_row("slot centre", f"every unit slot centred on the public vector {pr.center_sha256[:12]}... before the noise")
    if pr.noise is not None and hasattr(pr.noise, "expected_noise_norm"):
        t.add_row("expected noise norm", f"{pr.noise.expected_noise_norm(p.encoder.dim):.4g} (slots before noise have norm 1)")
    slot = pr.slot_loss()
    t.add_row("privacy loss per slot", f"eps = {_fmt_eps(slot.epsilon)} ({slot.notion}" + (f", delta={slot.delta:g})" if slot.delta else ")"))
    worst = p.worst_case_loss()
    t.add_row("worst-case loss per prompt", f"eps = {_fmt_eps(worst.epsilon)} (all slots of the longest prompt differ)")
    if pr.count_hidden:
        t.add_row("slot count", f"hidden: every prompt padded to {pr.pad_to} slots; any two prompts: "
                                f"eps = {_fmt_eps(pr.pair_loss().epsilon)}")
    else:
        t.add_row("slot count", "released: ceil(tokens / k) tells the length (--pad-to hides it)")
    t.add_row("public parts", "none" if p.public is None else f"{len(p.public)} string(s) sent in clear by design (not shown)")
    console.print(t)


@app.command()
def account(
    dataset: str = typer.Option(..., help="Dataset name (e.g. pri-ddx) or path to its file."),
    budget: float = typer.Option(150.0, help="Total privacy budget B."),
    split: Optional[str] = typer.Option(None, help="Split (e.g. test) when --dataset is a name."),
    encoder: str = typer.Option("default", help="Encoder whose tokenizer counts n and whose table gives D_max."),
    limit: Optional[int] = typer.Option(None, help="Use only the first N records."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """PPFT's budget-alignment table (n, D_max, eps_dchi, tau, eps_PPFT = eps_PR) for a dataset."""
    if budget <= 0:
        _fail(f"--budget must be > 0, got {budget}")
    _quiet_transformers()
    from textfree.alignment import dataset_alignment
    from textfree.data import DataError

    try:
        result = dataset_alignment(dataset, budget, split=split, encoder=encoder, limit=limit)
    except (DataError, FileNotFoundError, ValueError) as exc:
        _fail(str(exc))
    if as_json:
        console.print_json(json.dumps(result))
        return
    t = Table(title=f"budget alignment for {result['dataset']} (B = {budget:g}, {result['prompts']} prompts)")
    for col in ("prompt", "n (tokens)", "D_max", "eps_dchi = B/(n D_max)", "tau = 2n/B", "eps_PPFT = eps_PR = B/2"):
        t.add_column(col, justify="right")
    for label, key in (("max", "at_n_max"), ("mean", "at_n_mean")):
        r = result[key]
        t.add_row(label, f"{r['n']:.1f}", f"{r['d_max']:.4f}", f"{r['eps_dchi']:.4g}", f"{r['tau']:.4g}", f"{r['eps_ppft']:g}")
    console.print(t)
    console.print(
        f"n = tokens of the private part under {result['encoder']}'s tokenizer (no special tokens); "
        f"D_max = largest L2 distance between two rows of its token-embedding table. "
        f"The 'max' row is the binding one: it holds for every prompt."
    )


@app.command()
def substitute(
    text: Optional[str] = typer.Argument(None, help="Text to privatize by word substitution."),
    eta: float = typer.Option(100.0, help="Metric-DP parameter per unit of embedding distance."),
    pos: Optional[str] = typer.Option(None, help="PCT2T: comma-separated POS categories kept (e.g. noun,verb,pron,adp)."),
    tagger: str = typer.Option("textblob", help="POS tagger: textblob (bundled) or nltk (needs --nltk-data)."),
    nltk_data: Optional[Path] = typer.Option(None, help="Directory holding NLTK's tagger (e.g. ../shared/data/nltk_data)."),
    table: str = typer.Option("default", help="Embedding table: 'default' (MiniLM), an HF name/path, or glove:PATH."),
    search: str = typer.Option("exact", help="Nearest-word search: exact (default) or approximate (int8 pass + float64 re-rank of a short list: faster on CPUs without AMX-BF16, where exact search has no bfloat16 pass; same privacy guarantee; may release another word when the exact one misses the list; see docs/substitution.md)."),
    shortlist: int = typer.Option(7, help="--search approximate: words kept per input word beyond the best one for the float64 re-rank (>= 0; larger agrees more often with exact search, costs a little more)."),
    replacement_table: bool = typer.Option(False, "--replacement-table", help="Print the empirical word-replacement probability per eta."),
    etas: str = typer.Option("25,50,75,100,150,200,300", help="Etas for --replacement-table."),
    corpus: Optional[Path] = typer.Option(None, help="Text file (one sentence per line) for --replacement-table."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
) -> None:
    """Text-to-text privatization (T2T) or its part-of-speech-constrained form (PCT2T)."""
    _quiet_transformers()
    from textfree.rng import resolve_generator
    from textfree.substitution.cli_support import build_t2t, default_corpus, replacement_rows

    if eta <= 0:
        _fail(f"--eta must be > 0, got {eta}")
    if search not in ("exact", "approximate"):
        _fail(f"--search must be exact or approximate, got {search!r}")
    if shortlist < 0:
        _fail(f"--shortlist must be >= 0, got {shortlist}")
    try:
        mech = build_t2t(table=table, eta=eta, pos=pos, tagger=tagger, nltk_data=nltk_data, search=search,
                         shortlist=shortlist)
    except (ValueError, FileNotFoundError, OSError) as exc:
        _fail(str(exc))
    gen = resolve_generator(None, seed)
    if replacement_table:
        try:
            eta_list = [float(x) for x in etas.split(",") if x.strip()]
            sentences = default_corpus() if corpus is None else [l.strip() for l in corpus.read_text(encoding="utf-8").splitlines() if l.strip()]
        except (ValueError, OSError) as exc:
            _fail(f"bad --etas or --corpus: {exc}")
        rows = replacement_rows(mech, sentences, eta_list, generator=gen)
        t = Table(title=f"empirical word-replacement probability ({'PCT2T ' + pos if pos else 'T2T'}, {len(sentences)} sentences)")
        t.add_column("eta", justify="right")
        t.add_column("P(word replaced)", justify="right")
        for e, rate in rows:
            t.add_row(f"{e:g}", f"{rate:.3f}")
        console.print(t)
        return
    if not text:
        _fail("give a text to substitute, or --replacement-table")
    out = mech.privatize([text], generator=gen)[0]
    console.print(out, markup=False, highlight=False)
    err.print(f"privacy: {mech.privacy_loss_per_word().epsilon:g} per word (eta * D_max), metric DP")


@app.command()
def run(
    cell: Path = typer.Argument(..., help="An experiment cell (YAML)."),
    out_dir: Path = typer.Option(Path("results"), help="Where the results JSON goes."),
) -> None:
    """Run an experiment cell and write a results JSON."""
    _quiet_transformers()
    from textfree.experiments import run_cell

    try:
        path = run_cell(cell, out_dir)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    console.print(f"wrote {path}")


@app.command()
def plot(
    results: list[Path] = typer.Argument(..., help="Result JSON files."),
    out_dir: Path = typer.Option(Path("results/plots"), help="Where figures go."),
) -> None:
    """Draw figures from result files (never recomputes anything)."""
    from textfree.experiments import plot_results

    try:
        paths = plot_results(list(results), out_dir)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    for p in paths:
        console.print(f"wrote {p}")


# ---------------------------------------------------------------------------------------------------- serve / ask
def _id_dirs(values: Optional[list[str]], flag: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            _fail(f"{flag} takes ID=DIRECTORY, got {v!r}")
        if name in out:
            _fail(f"{flag}: model id {name!r} given twice")
        if not Path(path).is_dir():
            _fail(f"{flag} {name}: no such directory {path!r}")
        out[name] = path
    return out


def _server_help(name: str) -> str:
    from textfree.server.config import config_help

    return config_help()[name]


@app.command()
def serve(
    model: Optional[list[str]] = typer.Option(None, "--model", help="ID=RUN_DIR: a PPFT run served at /v1/generate (repeatable). Only its server part is loaded."),
    embed_model: Optional[list[str]] = typer.Option(None, "--embed-model", help="ID=ENCODER_DIR: an encoder served at /v1/embed (repeatable)."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8000, "--port", help="Port to bind."),
    keys: Path = typer.Option(Path("keys.json"), "--keys", help="The API-key store (hashed keys, JSON)."),
    add_key: Optional[str] = typer.Option(None, "--add-key", metavar="TENANT", help="Create a key for TENANT in --keys, print it (the only time it is shown) and exit."),
    revoke_key: Optional[str] = typer.Option(None, "--revoke-key", metavar="KEY_ID", help="Remove the key KEY_ID (the 12 hex digits after 'tf_') from --keys and exit."),
    no_auth: bool = typer.Option(False, "--no-auth", help="Serve without API keys (loopback hosts only: local experiments)."),
    max_body_bytes: Optional[int] = typer.Option(None, help=_server_help("max_body_bytes")),
    max_batch_rows: Optional[int] = typer.Option(None, help=_server_help("max_batch_rows")),
    max_new_tokens: Optional[int] = typer.Option(None, help=_server_help("max_new_tokens")),
    rate_limit: Optional[int] = typer.Option(None, "--rate-limit", help=_server_help("rate_limit_per_minute")),
    batch_wait_ms: Optional[float] = typer.Option(None, help=_server_help("batch_wait_ms")),
    batch_max_rows: Optional[int] = typer.Option(None, help=_server_help("batch_max_rows")),
    db: Optional[Path] = typer.Option(None, "--db", help=_server_help("sqlite_path")),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help=_server_help("data_dir")),
    max_concurrent_jobs: Optional[int] = typer.Option(None, help=_server_help("max_concurrent_jobs")),
    max_jobs_per_tenant: Optional[int] = typer.Option(None, help=_server_help("max_jobs_per_tenant")),
    max_dataset_rows: Optional[int] = typer.Option(None, help=_server_help("max_dataset_rows")),
    device: str = typer.Option("cpu", help=_server_help("device")),
    backend: str = typer.Option("hf", "--backend", help=_server_help("backend")),
    vllm_url: Optional[str] = typer.Option(None, "--vllm-url", help=_server_help("vllm_url")),
    vllm_timeout_s: Optional[float] = typer.Option(None, "--vllm-timeout", help=_server_help("vllm_timeout_s")),
    vllm_max_concurrent_calls: Optional[int] = typer.Option(None, "--vllm-concurrency", help=_server_help("vllm_max_concurrent_calls")),
    vllm_dtype: Optional[str] = typer.Option(None, "--vllm-dtype", help=_server_help("vllm_dtype")),
) -> None:
    """Serve text-free inference over HTTP (docs/server.md); or manage API keys with --add-key / --revoke-key."""
    from textfree.server.auth import KeyStore, KeyStoreError

    if add_key is not None or revoke_key is not None:
        store = KeyStore(keys)
        try:
            if add_key is not None:
                key = store.add_key(add_key)
                typer.echo(key)
                err.print(f"added a key for tenant {add_key!r} to {keys}; it is shown only this once (the store keeps a salted hash)")
            if revoke_key is not None:
                if not store.revoke(revoke_key):
                    _fail(f"no key {revoke_key!r} in {keys}")
                err.print(f"revoked key {revoke_key}")
        except KeyStoreError as exc:
            _fail(str(exc))
        return
    _quiet_transformers()
    try:
        import uvicorn

        from textfree.server import ServerConfig, create_app
        from textfree.server.store import StoreError
    except ImportError as exc:
        _fail(f'textfree serve needs the server extra (pip install "textfree[server]"): {exc}')
    overrides = {
        "max_body_bytes": max_body_bytes, "max_batch_rows": max_batch_rows, "max_new_tokens": max_new_tokens,
        "rate_limit_per_minute": rate_limit, "batch_wait_ms": batch_wait_ms, "batch_max_rows": batch_max_rows,
        "vllm_url": vllm_url, "vllm_timeout_s": vllm_timeout_s, "vllm_max_concurrent_calls": vllm_max_concurrent_calls, "vllm_dtype": vllm_dtype,
    }
    overrides |= {
        "sqlite_path": None if db is None else str(db), "data_dir": None if data_dir is None else str(data_dir),
        "max_concurrent_jobs": max_concurrent_jobs, "max_jobs_per_tenant": max_jobs_per_tenant, "max_dataset_rows": max_dataset_rows,
    }
    if not no_auth and not keys.is_file():
        _fail(f"no key store at {keys}: create a key first (textfree serve --add-key TENANT --keys {keys}), or --no-auth on loopback")
    try:
        config = ServerConfig(
            models=_id_dirs(model, "--model"), embed_models=_id_dirs(embed_model, "--embed-model"),
            keys_path=None if no_auth else str(keys), auth=not no_auth, host=host, device=device, backend=backend,
            **{k: v for k, v in overrides.items() if v is not None},
        )
        application = create_app(config)
    except (ValueError, StoreError) as exc:
        _fail(str(exc))
    err.print(f"serving {len(config.models) + len(config.embed_models)} model(s) on http://{host}:{port} "
              f"(auth {'on' if config.auth else 'OFF'}); GET /v1/models lists their cards")
    uvicorn.run(application, host=host, port=port, log_level="info")


@app.command()
def ask(
    prompt: str = typer.Argument(..., help="The PRIVATE prompt: privatized on this machine; only the payload is sent."),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="TEXTFREE_URL", help="The server's base URL."),
    model: str = typer.Option(..., "--model", help="The model id (GET /v1/models)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="TEXTFREE_API_KEY", help="API key (prefer the TEXTFREE_API_KEY variable: arguments show in ps)."),
    public: Optional[str] = typer.Option(None, "--public", help="Public text sent in clear (e.g. the options block)."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="Noise epsilon (default: the model card's training epsilon)."),
    no_noise: bool = typer.Option(False, "--no-noise", help="Clean payload (NOT private)."),
    k: Optional[int] = typer.Option(None, "--k", help="Pooling k; must equal the model card's (default: the card's)."),
    encoder: Optional[Path] = typer.Option(None, "--encoder", help="The local encoder directory (default: all-MiniLM-L6-v2); its sha256 must match the card."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Generation length (default: the server's)."),
    adapter: Optional[str] = typer.Option(None, "--adapter", help="One of your fine-tuned adapters of --model (textfree finetune prints its id)."),
    temperature: Optional[float] = typer.Option(None, min=0.0, max=10.0, help="Sample the answer at this temperature (default 0: greedy)."),
    top_p: Optional[float] = typer.Option(None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass in (0, 1] (with --temperature)."),
    sampling_seed: Optional[int] = typer.Option(None, "--sampling-seed", min=0, help="Reproducible sampling (not the privacy noise)."),
    timeout: float = typer.Option(60.0, help="Seconds per HTTP attempt."),
    retries: int = typer.Option(3, help="Retries on connection errors, 5xx and 429."),
) -> None:
    """Privatize PROMPT locally and ask a textfree server; prints the answer (privacy loss on stderr)."""
    _quiet_transformers()
    if not prompt.strip():
        _fail("the prompt is empty")
    try:
        from textfree.client import Client, ClientError, ModelMismatchError
    except ImportError as exc:
        _fail(f'textfree ask needs the server extra (pip install "textfree[server]"): {exc}')
    try:
        with Client(url, api_key=api_key, timeout=timeout, retries=retries, encoder=encoder) as client:
            result = client.generate(prompt, public=public, model=model, epsilon=epsilon, k=k, seed=seed,
                                     no_noise=no_noise, max_new_tokens=max_new_tokens, adapter=adapter,
                                     temperature=temperature, top_p=top_p, sampling_seed=sampling_seed)
    except (ClientError, ModelMismatchError) as exc:
        _fail(str(exc), code=1)
    typer.echo(result.answers[0])
    err.print(f"privacy: worst-case loss {_fmt_eps(result.privacy.epsilon)} ({result.privacy.notion}) for this prompt; "
              f"{result.payload_bytes} payload bytes sent", highlight=False)


def _read_rows(path: Path) -> tuple[list[str], list[str], list[str] | None]:
    """(private texts, targets, public texts or None) of a JSONL file: one {"private", "target"[, "public"]} per line."""
    texts, targets, public = [], [], []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read --data {str(path)!r}: {exc}")
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            _fail(f"{path}:{n}: not valid JSON ({exc.msg})")
        if not isinstance(row, dict) or set(row) - {"private", "target", "public"}:
            _fail(f"{path}:{n}: each line must be an object with keys 'private', 'target' and optionally 'public'")
        for key in ("private", "target"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                _fail(f"{path}:{n}: {key!r} must be a non-empty string")
        if not isinstance(row.get("public", ""), str):
            _fail(f"{path}:{n}: 'public' must be a string")
        texts.append(row["private"])
        targets.append(row["target"])
        public.append(row.get("public", ""))
    if not texts:
        _fail(f"--data {str(path)!r} holds no rows")
    return texts, targets, public if any(public) else None


def _dataset_ids(client, data: list[str], *, model: str, name: Optional[str], upload: dict) -> list[str]:
    """Each --data: a JSONL file (privatized here and uploaded) or the id or name of one of your datasets."""
    ids, known = [], None
    for item in data:
        path = Path(item)
        if path.is_file():
            texts, targets, public = _read_rows(path)
            ds = client.upload_dataset(texts, targets, public, model=model, name=name or path.stem, **upload)
            eps = ds["privacy"]["worst_case_row"]["epsilon"]
            err.print(f"uploaded {path} as dataset {ds['id']}: {ds['rows']} rows, {ds['bytes']} payload bytes; worst-case privacy "
                      f"loss per row {_fmt_eps(math.inf if eps is None else eps)}", highlight=False)
            ids.append(ds["id"])
            continue
        if path.suffix == ".jsonl" or os.sep in item:
            _fail(f"--data {item!r}: no such file")
        known = known if known is not None else client.datasets()
        found = [d for d in known if item in (d["id"], d["name"])]
        if not found:
            _fail(f"--data {item!r} is neither a file nor the id or name of one of your datasets on this server")
        if len(found) > 1:
            _fail(f"--data {item!r} names {len(found)} datasets ({', '.join(d['id'] for d in found)}): give the id")
        ids.append(found[0]["id"])
    return ids


@app.command()
def finetune(
    data: list[str] = typer.Option(..., "--data", help="A JSONL file, one {\"private\": ..., \"target\": ..., \"public\": ...} per line (privatized HERE, then uploaded), or the id or name of a dataset you uploaded before. Repeatable."),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="TEXTFREE_URL", help="The server's base URL."),
    model: str = typer.Option(..., "--model", help="The model to adapt (GET /v1/models)."),
    api_key: Optional[str] = typer.Option(None, "--api-key", envvar="TEXTFREE_API_KEY", help="API key (prefer the TEXTFREE_API_KEY variable: arguments show in ps)."),
    name: Optional[str] = typer.Option(None, "--name", help="Label of the uploaded dataset(s) (default: the file's name)."),
    epochs: int = typer.Option(3, "--epochs", help="Passes over the uploaded rows."),
    lr: float = typer.Option(1e-3, "--lr", help="Peak learning rate of the projection and LoRA."),
    batch_size: int = typer.Option(8, "--batch-size", help="Rows per optimizer step."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps."),
    train_seed: int = typer.Option(0, "--train-seed", help="Seed of the server's training (initialisation, dropout, data order)."),
    save_every: Optional[int] = typer.Option(None, "--save-every", help="Checkpoint every this many steps (the server's default: 50)."),
    epsilon: Optional[float] = typer.Option(None, "--epsilon", "-e", help="Noise epsilon (default: the model card's training epsilon)."),
    no_noise: bool = typer.Option(False, "--no-noise", help="Clean payloads (NOT private)."),
    encoder: Optional[Path] = typer.Option(None, "--encoder", help="The local encoder directory (default: all-MiniLM-L6-v2); its sha256 must match the card."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Follow the job's progress until it ends (else print the job id and exit)."),
    poll: float = typer.Option(1.0, "--poll", help="Seconds between progress polls."),
    timeout: float = typer.Option(60.0, help="Seconds per HTTP attempt."),
    retries: int = typer.Option(3, help="Retries on connection errors, 5xx and 429."),
) -> None:
    """Fine-tune a served model on your private data: privatize it HERE, upload payloads + targets, run a job.

    Prints the adapter id (use it as textfree ask --adapter ID); progress goes to stderr."""
    _quiet_transformers()
    checks = [(epochs >= 1, f"--epochs must be >= 1, got {epochs}"), (math.isfinite(lr) and lr > 0, f"--lr must be a number > 0, got {lr}"),
              (batch_size >= 1, f"--batch-size must be >= 1, got {batch_size}"), (max_steps is None or max_steps >= 1, f"--max-steps must be >= 1, got {max_steps}"),
              (save_every is None or save_every >= 1, f"--save-every must be >= 1, got {save_every}"), (poll > 0, f"--poll must be > 0, got {poll}"),
              (train_seed >= 0, f"--train-seed must be >= 0, got {train_seed}"), (not (no_noise and epsilon is not None), "give --epsilon or --no-noise, not both")]
    for ok, message in checks:
        if not ok:
            _fail(message)
    try:
        from textfree.client import Client, ClientError, ModelMismatchError
    except ImportError as exc:
        _fail(f'textfree finetune needs the server extra (pip install "textfree[server]"): {exc}')
    hp = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": train_seed}
    hp |= {k: v for k, v in (("max_steps", max_steps), ("save_every", save_every)) if v is not None}
    try:
        with Client(url, api_key=api_key, timeout=timeout, retries=retries, encoder=encoder) as client:
            ids = _dataset_ids(client, data, model=model, name=name, upload={"epsilon": epsilon, "seed": seed, "no_noise": no_noise})
            job = client.create_fine_tuning_job(model=model, datasets=ids, **hp)
            err.print(f"job {job['id']}: {job['status']}, {job['progress']['total_steps']} steps", highlight=False)
            if not wait:
                typer.echo(job["id"])
                return
            job = client.wait_job(job["id"], poll=poll, on_event=lambda e: err.print(f"  {e['type']}: {e['message']}", highlight=False, markup=False))
    except (ClientError, ModelMismatchError, ValueError) as exc:
        _fail(str(exc), code=1)
    if job["status"] != "succeeded":
        _fail(f"job {job['id']} {job['status']}" + (f": {job['error']}" if job.get("error") else ""), code=1)
    typer.echo(job["adapter"])


from textfree.ppft.cli import app as _ppft_app  # noqa: E402

app.add_typer(_ppft_app, name="ppft")
from textfree.attacks.cli import app as _attacks_app; app.add_typer(_attacks_app, name="attacks")  # noqa: E402,E702


def main() -> None:  # pragma: no cover
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
