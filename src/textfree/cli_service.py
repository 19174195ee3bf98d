"""``textfree serve``, ``textfree ask``, ``textfree embed`` and ``textfree finetune``: the HTTP service and its client
commands.

They register on the top-level ``app`` of ``textfree.cli_common``; ``textfree.cli`` imports this module
(after its own commands, so ``textfree --help`` lists them in order) before mounting ``ppft`` and ``attacks``.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Optional

import typer

from textfree.cli_common import _fail, _fmt_eps, _quiet_transformers, app, err, spinner
from textfree.lm.hub import is_hub_id

MAX_EPSILON_HELP = (
    "Refuse to release at an epsilon above this (and refuse clean payloads): without --epsilon the server's "
    "model card picks it. Default: $TEXTFREE_MAX_EPSILON, else no cap."
)
ENCODER_HELP = (
    "A local encoder directory, overriding the one the server publishes in the model's client bundle (default: the "
    "bundle's, else all-MiniLM-L6-v2); its sha256 must match the card."
)
CACHE_HELP = (
    "Where downloaded client bundles (the model's public files: client encoder, denoiser, plain tokens) are kept "
    "(default: $TEXTFREE_BUNDLE_CACHE, else ~/.cache/textfree/bundles)."
)


def _id_dirs(values: Optional[list[str]], flag: str, *, default_encoder: bool = False) -> dict[str, str]:
    """``ID=DIRECTORY`` flags; with ``default_encoder``, ``ID=default`` names the packaged all-MiniLM-L6-v2."""
    out: dict[str, str] = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            _fail(f"{flag} takes ID=DIRECTORY, got {v!r}")
        if name in out:
            _fail(f"{flag}: model id {name!r} given twice")
        if default_encoder and path == "default":
            from textfree.encoders.loading import resolve_encoder_path

            path = resolve_encoder_path(None)
        if not Path(path).is_dir() and (default_encoder or not is_hub_id(path)):
            _fail(f"{flag} {name}: no such directory {path!r} (nor a hub id owner/name)")
        out[name] = path
    return out


def _id_files(values: Optional[list[str]], flag: str) -> dict[str, str]:
    """ID=PATH pairs whose PATH is a file or a directory (the denoiser's file or its run directory)."""
    out: dict[str, str] = {}
    for v in values or []:
        name, sep, path = v.partition("=")
        if not sep or not name or not path:
            _fail(f"{flag} takes ID=PATH, got {v!r}")
        if name in out:
            _fail(f"{flag}: model id {name!r} given twice")
        if not Path(path).exists() and not is_hub_id(path):
            _fail(f"{flag} {name}: no such file or directory {path!r} (nor a hub id owner/name)")
        out[name] = path
    return out


def _id_systems(values: Optional[list[str]]) -> dict[str, str]:
    """--system ID=NAME pairs: the served system of each named model."""
    out: dict[str, str] = {}
    for v in values or []:
        name, sep, system = v.partition("=")
        if not sep or not name or not system:
            _fail(f"--system takes ID=SYSTEM, got {v!r}")
        out[name] = system
    return out


def _register_builtin_systems() -> None:
    """Import the modules that register the built-in served systems with the server (the one list of them)."""
    import textfree.ppft.service  # noqa: F401  (registers "ppft")
    import textfree.rapt.service  # noqa: F401  (registers "rapt")


def _server_help(name: str) -> str:
    from textfree.server.config import config_help

    return config_help()[name]


@app.command()
def serve(
    model: Optional[list[str]] = typer.Option(
        None,
        "--model",
        help="ID=RUN_DIR or ID=OWNER/NAME (a Hugging Face hub id; the local cache when HF_HUB_OFFLINE=1): a PPFT run "
        "served at /v1/generate (only its server part is loaded), or a RAPT run served at /v1/classify; the run's "
        "system is detected from its files (repeatable).",
    ),
    embed_model: Optional[list[str]] = typer.Option(
        None,
        "--embed-model",
        help="ID=ENCODER_DIR: an encoder served at /v1/embed (repeatable; ID=default: all-MiniLM-L6-v2).",
    ),
    system: Optional[list[str]] = typer.Option(
        None, "--system", help="ID=SYSTEM: the served system of a model (repeatable). " + _server_help("systems")
    ),
    denoiser: Optional[list[str]] = typer.Option(
        None,
        "--denoiser",
        help="ID=PATH: the SnD client-side denoiser of embed model ID (repeatable). " + _server_help("denoisers"),
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8000, "--port", help="Port to bind."),
    keys: Path = typer.Option(Path("keys.json"), "--keys", help="The API-key store (hashed keys, JSON)."),
    add_key: Optional[str] = typer.Option(
        None,
        "--add-key",
        metavar="TENANT",
        help="Create a key for TENANT in --keys, print it (the only time it is shown) and exit.",
    ),
    revoke_key: Optional[str] = typer.Option(
        None,
        "--revoke-key",
        metavar="KEY_ID",
        help="Remove the key KEY_ID (the 12 hex digits after 'tf_') from --keys and exit.",
    ),
    no_auth: bool = typer.Option(
        False, "--no-auth", help="Serve without API keys (loopback hosts only: local experiments)."
    ),
    max_body_bytes: Optional[int] = typer.Option(None, help=_server_help("max_body_bytes")),
    max_batch_rows: Optional[int] = typer.Option(None, help=_server_help("max_batch_rows")),
    max_classify_examples: Optional[int] = typer.Option(None, help=_server_help("max_classify_examples")),
    max_classify_words: Optional[int] = typer.Option(None, help=_server_help("max_classify_words")),
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
    vllm_max_concurrent_calls: Optional[int] = typer.Option(
        None, "--vllm-concurrency", help=_server_help("vllm_max_concurrent_calls")
    ),
    vllm_dtype: Optional[str] = typer.Option(None, "--vllm-dtype", help=_server_help("vllm_dtype")),
) -> None:
    """Serve text-free inference over HTTP (docs/server.md); or manage API keys with --add-key / --revoke-key."""
    if add_key is not None or revoke_key is not None:
        _manage_keys(keys, add_key, revoke_key)
        return
    if not model and not embed_model:  # the flag errors that need no import first: reported at once
        _fail(
            "give at least one model to serve: --model ID=RUN_DIR (PPFT or RAPT) or --embed-model ID=ENCODER (e.g. "
            "--embed-model minilm=default, the split all-MiniLM-L6-v2)"
        )
    _check_keys(keys, no_auth)
    with spinner("loading the server ..."):  # torch, transformers, FastAPI: seconds
        _quiet_transformers()
        _import_server()
    fields = {
        "host": host,
        "device": device,
        "backend": backend,
        "max_body_bytes": max_body_bytes,
        "max_batch_rows": max_batch_rows,
        "max_classify_examples": max_classify_examples,
        "max_classify_words": max_classify_words,
        "max_new_tokens": max_new_tokens,
        "rate_limit_per_minute": rate_limit,
        "batch_wait_ms": batch_wait_ms,
        "batch_max_rows": batch_max_rows,
        "vllm_url": vllm_url,
        "vllm_timeout_s": vllm_timeout_s,
        "vllm_max_concurrent_calls": vllm_max_concurrent_calls,
        "vllm_dtype": vllm_dtype,
        "sqlite_path": None if db is None else str(db),
        "data_dir": None if data_dir is None else str(data_dir),
        "max_concurrent_jobs": max_concurrent_jobs,
        "max_jobs_per_tenant": max_jobs_per_tenant,
        "max_dataset_rows": max_dataset_rows,
    }
    fields["denoisers"] = _id_files(denoiser, "--denoiser")
    with spinner(f"loading {len(model or []) + len(embed_model or [])} model(s) ..."):
        config, application = _server_app(keys, no_auth, model=model, embed_model=embed_model, system=system,
                                          fields=fields)  # fmt: skip
    err.print(
        f"serving {len(config.models) + len(config.embed_models)} model(s) on http://{host}:{port} "
        f"(auth {'on' if config.auth else 'OFF'}); GET /v1/models lists their cards"
    )
    from textfree.server.transport import run_server  # uvicorn with deadlines on request heads and bodies

    run_server(application, host=host, port=port, log_level="info")


def _open_client(client_class, url, api_key, timeout, retries, encoder, max_epsilon, cache_dir):
    """The CLI's client: the flags every client command shares, and a line on stderr when a bundle downloads."""
    return client_class(url, api_key=api_key, timeout=timeout, retries=retries, encoder=encoder,
                        max_epsilon=max_epsilon, cache_dir=cache_dir, progress=_progress)  # fmt: skip


def _check_keys(keys: Path, no_auth: bool) -> None:
    if not no_auth and not keys.is_file():
        _fail(
            f"no key store at {keys}: create a key first (textfree serve --add-key TENANT --keys {keys}), or --no-auth "
            "on loopback"
        )


def _manage_keys(keys: Path, add_key: Optional[str], revoke_key: Optional[str]) -> None:
    """--add-key (print the new key; stderr says where it went) and --revoke-key on the key store ``keys``."""
    from textfree.server.auth import KeyStore, KeyStoreError

    store = KeyStore(keys)
    try:
        if add_key is not None:
            key = store.add_key(add_key)
            typer.echo(key)
            err.print(
                f"added a key for tenant {add_key!r} to {keys}; it is shown only this once (the store keeps a "
                "salted hash)"
            )
        if revoke_key is not None:
            if not store.revoke(revoke_key):
                _fail(f"no key {revoke_key!r} in {keys}")
            err.print(f"revoked key {revoke_key}")
    except KeyStoreError as exc:
        _fail(str(exc))


def _import_server():
    """The ``uvicorn`` module, once the server extra and the built-in served systems are imported (else exit 2)."""
    try:
        import uvicorn

        from textfree.server import ServerConfig, create_app  # noqa: F401  (the extra's FastAPI app)
        from textfree.server.store import StoreError  # noqa: F401

        _register_builtin_systems()
    except ImportError as exc:
        _fail(f'textfree serve needs the server extra (pip install "textfree[server]"): {exc}')
    return uvicorn


def _server_app(
    keys: Path,
    no_auth: bool,
    *,
    model: Optional[list[str]],
    embed_model: Optional[list[str]],
    system: Optional[list[str]],
    fields: dict,
):
    """(ServerConfig, FastAPI app) of the serve flags; ``fields``: the other config fields (None: the default)."""
    from textfree.server import ServerConfig, create_app
    from textfree.server.store import StoreError

    _check_keys(keys, no_auth)
    try:
        config = ServerConfig(
            models=_id_dirs(model, "--model"),
            embed_models=_id_dirs(embed_model, "--embed-model", default_encoder=True),
            systems=_id_systems(system),
            keys_path=None if no_auth else str(keys),
            auth=not no_auth,
            **{k: v for k, v in fields.items() if v is not None},
        )
        application = create_app(config)
    except (ValueError, StoreError) as exc:
        _fail(str(exc))
    return config, application


ASK_SYSTEMS = ("ppft", "rapt")


@app.command()
def ask(
    prompt: str = typer.Argument(
        ...,
        help="The PRIVATE prompt: privatized on this machine; only the payload (ppft) or the privatized text (rapt) is "
        "sent.",
    ),
    system: str = typer.Option(
        "ppft",
        "--system",
        help="ppft: a generate model (payload); rapt: a classify model (the text is privatized here with T2T / PCT2T, "
        "and the label is printed).",
    ),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="TEXTFREE_URL", help="The server's base URL."),
    model: str = typer.Option(..., "--model", help="The model id (GET /v1/models)."),
    api_key: Optional[str] = typer.Option(
        None,
        "--api-key",
        envvar="TEXTFREE_API_KEY",
        help="API key (prefer the TEXTFREE_API_KEY variable: arguments show in ps).",
    ),
    public: Optional[str] = typer.Option(None, "--public", help="Public text sent in clear (e.g. the options block)."),
    epsilon: Optional[float] = typer.Option(
        None, "--epsilon", "-e", help="Noise epsilon (default: the model card's training epsilon)."
    ),
    no_noise: bool = typer.Option(False, "--no-noise", help="Clean payload (NOT private)."),
    k: Optional[int] = typer.Option(None, "--k", help="Pooling k; must equal the model card's (default: the card's)."),
    encoder: Optional[Path] = typer.Option(None, "--encoder", help=ENCODER_HELP),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    max_new_tokens: Optional[int] = typer.Option(None, help="Generation length (default: the server's)."),
    adapter: Optional[str] = typer.Option(
        None, "--adapter", help="One of your fine-tuned adapters of --model (textfree finetune prints its id)."
    ),
    temperature: Optional[float] = typer.Option(
        None, min=0.0, max=10.0, help="Sample the answer at this temperature (default 0: greedy)."
    ),
    top_p: Optional[float] = typer.Option(
        None, "--top-p", min=0.0, max=1.0, help="Nucleus sampling mass in (0, 1] (with --temperature)."
    ),
    sampling_seed: Optional[int] = typer.Option(
        None, "--sampling-seed", min=0, help="Reproducible sampling (not the privacy noise)."
    ),
    timeout: float = typer.Option(60.0, help="Seconds per HTTP attempt."),
    retries: int = typer.Option(3, help="Retries on connection errors, 5xx and 429."),
    max_epsilon: Optional[float] = typer.Option(
        None, "--max-epsilon", envvar="TEXTFREE_MAX_EPSILON", help=MAX_EPSILON_HELP
    ),
    eta: Optional[float] = typer.Option(
        None, "--eta", help="--system rapt: the T2T / PCT2T eta (default: the eta the model was trained at)."
    ),
    pos: Optional[str] = typer.Option(
        None,
        "--pos",
        help="--system rapt: the categories to privatize ('noun,verb,pron,adp', 'all'; default: the model's). Words "
        "outside them are sent in clear.",
    ),
    pair: Optional[str] = typer.Option(
        None, "--pair", help="--system rapt: the second sentence of a sentence-pair example (also privatized here)."
    ),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
) -> None:
    """Privatize PROMPT locally and ask a textfree server; prints the answer (privacy loss on stderr).

    With --system rapt the model classifies: PROMPT is privatized here with T2T / PCT2T and the label is printed."""
    _quiet_transformers()
    if not prompt.strip():
        _fail("the prompt is empty")
    if system not in ASK_SYSTEMS:
        _fail(f"--system must be one of {', '.join(ASK_SYSTEMS)}, got {system!r}")
    if system == "rapt":
        given = {
            "--public": public,
            "--epsilon": epsilon,
            "--k": k,
            "--max-new-tokens": max_new_tokens,
            "--temperature": temperature,
            "--top-p": top_p,
            "--sampling-seed": sampling_seed,
            "--no-noise": no_noise or None,
        }
        client_args = {"url": url, "api_key": api_key, "timeout": timeout, "retries": retries, "encoder": encoder}
        client_args |= {"max_epsilon": max_epsilon, "cache_dir": cache_dir, "progress": _progress}
        _ask_rapt(prompt, pair, model=model, eta=eta, pos=pos, seed=seed, adapter=adapter, client_args=client_args,
                  other=given)  # fmt: skip
        return
    for flag, value in (("--eta", eta), ("--pos", pos), ("--pair", pair)):
        if value is not None:
            _fail(f"{flag} is for --system rapt" + (" (ppft takes --epsilon)" if flag == "--eta" else ""))
    _check_client_flags(epsilon, timeout, retries, k, max_epsilon)
    try:
        with spinner("loading ..."):  # torch and transformers: seconds
            from textfree.client import Client, ClientError, ModelMismatchError
            from textfree.encoders import EncoderLoadError
    except ImportError as exc:
        _fail(f'textfree ask needs the server extra (pip install "textfree[server]"): {exc}')
    try:
        with (
            spinner(f"privatizing the prompt here, asking {url} ..."),
            _open_client(Client, url, api_key, timeout, retries, encoder, max_epsilon, cache_dir) as client,
        ):
            result = client.generate(
                prompt,
                public=public,
                model=model,
                epsilon=epsilon,
                k=k,
                seed=seed,
                no_noise=no_noise,
                max_new_tokens=max_new_tokens,
                adapter=adapter,
                temperature=temperature,
                top_p=top_p,
                sampling_seed=sampling_seed,
            )
    except EncoderLoadError as exc:
        _fail(f"--encoder: {exc}")
    except (ClientError, ModelMismatchError, ValueError) as exc:
        _fail(str(exc), code=1)
    typer.echo(result.answers[0])
    err.print(
        f"privacy: worst-case loss {_fmt_eps(result.privacy.epsilon)} ({result.privacy.notion}) for this prompt; "
        f"{result.payload_bytes} payload bytes sent",
        highlight=False,
    )


def _progress(line: str) -> None:
    """A client's progress line (a client bundle being downloaded), on stderr."""
    err.print(line, highlight=False, markup=False, soft_wrap=True)


def _ask_rapt(
    prompt: str,
    pair: Optional[str],
    *,
    model: str,
    eta: Optional[float],
    pos: Optional[str],
    seed: Optional[int],
    adapter: Optional[str],
    client_args: dict,
    other: dict,
) -> None:
    """``textfree ask --system rapt``: privatize PROMPT (and --pair) here, print the label; the class probabilities,
    the text sent and the privacy spent go to stderr."""
    for flag, value in other.items():
        if value is not None:
            _fail(f"{flag} is not for --system rapt" + (" (it takes --eta)" if flag == "--epsilon" else ""))
    if eta is not None and not (math.isfinite(eta) and eta > 0):
        _fail(f"--eta must be a number > 0, got {eta}")
    if pair is not None and not pair.strip():
        _fail("--pair is empty")
    _check_client_flags(None, client_args["timeout"], client_args["retries"], max_epsilon=client_args["max_epsilon"])
    try:
        with spinner("loading ..."):  # torch and transformers: seconds
            from textfree.client import Client, ClientError, ModelMismatchError
            from textfree.encoders import EncoderLoadError
    except ImportError as exc:
        _fail(f'textfree ask needs the server extra (pip install "textfree[server]"): {exc}')
    example = prompt if pair is None else [(prompt, pair)]
    try:
        url = client_args.pop("url")
        with (
            spinner(f"privatizing the text here (T2T / PCT2T), asking {url} ..."),
            Client(url, **client_args) as client,
        ):
            result = client.classify(example, model=model, eta=eta, pos=pos, seed=seed, adapter=adapter)
    except EncoderLoadError as exc:
        _fail(f"--encoder: {exc}")
    except ValueError as exc:
        _fail_rapt_value(exc)
    except (ClientError, ModelMismatchError) as exc:
        _fail(str(exc), code=1)
    typer.echo(result.labels[0])
    sent = result.examples[0]
    categories = "every word (T2T)" if result.pos_categories is None else ", ".join(result.pos_categories)
    err.print(
        f"probabilities: {', '.join(f'{p:.4f}' for p in result.probabilities[0])}\n"
        f"sent: {' | '.join(sent['parts'])}"
        + (f" (plain tokens: {' '.join(sent['plain'])})" if sent["plain"] else "")
        + f"\nprivacy: {result.words_privatized[0]} word(s) privatized at eta {result.eta:g} ({categories}); "
        f"worst-case loss {_fmt_eps(result.privacy.epsilon)} ({result.privacy.notion}); {result.bytes_sent} bytes "
        "sent",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


@app.command()
def embed(
    text: list[str] = typer.Argument(
        ..., help="The PRIVATE text(s): privatized on this machine; only the noisy token embeddings are sent."
    ),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="TEXTFREE_URL", help="The server's base URL."),
    model: str = typer.Option(..., "--model", help="The embed model id (GET /v1/models)."),
    api_key: Optional[str] = typer.Option(
        None,
        "--api-key",
        envvar="TEXTFREE_API_KEY",
        help="API key (prefer the TEXTFREE_API_KEY variable: arguments show in ps).",
    ),
    epsilon: Optional[float] = typer.Option(
        None,
        "--epsilon",
        "-e",
        help="Noise epsilon (eta). With --denoise it must lie in the denoiser's eta range (default: its eta_min).",
    ),
    denoise: Optional[bool] = typer.Option(
        None,
        "--denoise/--no-denoise",
        help="Denoise the server's embedding here with the model's public denoiser (SnD). Default: when the model's "
        "card names one.",
    ),
    as_json: bool = typer.Option(
        False, "--json", help="Print one JSON object: the embeddings, the raw ones, the bytes sent, the privacy."
    ),
    encoder: Optional[Path] = typer.Option(None, "--encoder", help=ENCODER_HELP),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    timeout: float = typer.Option(60.0, help="Seconds per HTTP attempt."),
    retries: int = typer.Option(3, help="Retries on connection errors, 5xx and 429."),
    max_epsilon: Optional[float] = typer.Option(
        None, "--max-epsilon", envvar="TEXTFREE_MAX_EPSILON", help=MAX_EPSILON_HELP
    ),
) -> None:
    """Embed TEXT through a textfree server: privatize it locally, send the noisy token embeddings, denoise the answer.

    Prints a short summary per text (the full vectors with --json); bytes sent and privacy spent go to stderr."""
    _quiet_transformers()
    if not text or not all(t.strip() for t in text):
        _fail("every TEXT must be non-empty")
    _check_client_flags(epsilon, timeout, retries, max_epsilon=max_epsilon)
    try:
        with spinner("loading ..."):  # torch and transformers: seconds
            from textfree.client import Client, ClientError, ModelMismatchError
            from textfree.encoders import EncoderLoadError
    except ImportError as exc:
        _fail(f'textfree embed needs the server extra (pip install "textfree[server]"): {exc}')
    try:
        with (
            spinner(f"privatizing the token embeddings here, asking {url} ..."),
            _open_client(Client, url, api_key, timeout, retries, encoder, max_epsilon, cache_dir) as client,
        ):
            if denoise is None:
                denoise = client.model_card(model).get("denoiser") is not None
            result = client.embed(text, model=model, epsilon=epsilon, seed=seed, denoise=denoise)
    except EncoderLoadError as exc:
        _fail(f"--encoder: {exc}")
    except (ClientError, ModelMismatchError, ValueError) as exc:
        _fail(str(exc), code=1)
    _print_embeddings(result, as_json)


def _print_embeddings(result, as_json: bool) -> None:
    """``textfree embed``'s output: one JSON object, or one summary line per text on stdout and the bytes sent and
    privacy spent on stderr."""
    privacy = result.privacy
    if as_json:
        out = {
            "model": result.model,
            "denoised": result.denoised,
            "epsilon": result.epsilon,
            "denoiser_sha256": result.denoiser_sha256,
            "dim": len(result.embeddings[0]) if result.embeddings else 0,
            "embeddings": result.embeddings,
            "raw_embeddings": result.raw_embeddings,
            "payload_bytes": result.payload_bytes,
            "privacy": {
                "epsilon": None if math.isinf(privacy.epsilon) else privacy.epsilon,
                "delta": privacy.delta,
                "notion": privacy.notion,
            },
            "usage": result.usage,
        }
        typer.echo(json.dumps(out))
        return
    kind = "denoised" if result.denoised else "raw (not denoised)"
    for i, vec in enumerate(result.embeddings):
        norm = math.sqrt(sum(v * v for v in vec))
        head = ", ".join(f"{v:.4f}" for v in vec[:4])
        typer.echo(f"[{i}] {kind} embedding, dim {len(vec)}, norm {norm:.4f}: [{head}, ...]")
    level = "no noise" if result.epsilon is None else f"d_chi privacy at eta {result.epsilon:g} per unit L2 distance"
    err.print(
        f"privacy: {level} per token; worst-case loss {_fmt_eps(privacy.epsilon)} ({privacy.notion}) per text; "
        f"{result.payload_bytes} payload bytes sent",
        highlight=False,
        soft_wrap=True,
    )


def _fail_rapt_value(exc: ValueError) -> None:
    """A ValueError of the RAPT client: its flag named (exit 2) when it is about --pos or --eta, else exit 1."""
    flag = "--pos" if str(exc).startswith("pos ") else "--eta" if str(exc).startswith("eta ") else None
    _fail(f"{flag}: {exc}" if flag else str(exc), code=2 if flag else 1)


def _check_client_flags(
    epsilon: Optional[float], timeout: float, retries: int, k: Optional[int] = None, max_epsilon: Optional[float] = None
) -> None:
    """The flags a client call would refuse with a traceback, refused first with one error line."""
    for flag, value in (("--epsilon", epsilon), ("--max-epsilon", max_epsilon)):
        if value is not None and not (math.isfinite(value) and value > 0):
            _fail(f"{flag} must be a number > 0, got {value}")
    if not (math.isfinite(timeout) and timeout > 0):
        _fail(f"--timeout must be a number of seconds > 0, got {timeout}")
    if retries < 0:
        _fail(f"--retries must be >= 0, got {retries}")
    if k is not None and k < 1:
        _fail(f"--k must be >= 1, got {k}")


def _read_rows(path: Path) -> tuple[list[str], list[str], list[str] | None]:
    """(private texts, targets, public texts or None) of a JSONL file: one {"private", "target"[, "public"]} per
    line."""
    texts, targets, public = [], [], []
    keys = "keys 'private', 'target' and optionally 'public'"
    for n, row in _jsonl_objects(path, keys):
        if set(row) - {"private", "target", "public"}:
            _fail(f"{path}:{n}: each line must be an object with {keys}")
        for key in ("private", "target"):
            if not isinstance(row.get(key), str) or not row[key].strip():
                _fail(f"{path}:{n}: {key!r} must be a non-empty string")
        if not isinstance(row.get("public", ""), str):
            _fail(f"{path}:{n}: 'public' must be a string")
        texts.append(row["private"])
        targets.append(row["target"])
        public.append(row.get("public", ""))
    return texts, targets, public if any(public) else None


def _jsonl_objects(path: Path, keys: str):
    """(line number, object) of every non-empty line of the JSONL file ``path`` (each must be a JSON object; the
    first bad line is refused naming it and ``keys``, what each line holds)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"cannot read --data {str(path)!r}: {exc}")
    found = False
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            _fail(f"{path}:{n}: not valid JSON ({exc.msg})")
        if not isinstance(row, dict):
            _fail(f"{path}:{n}: each line must be an object with {keys}")
        found = True
        yield n, row
    if not found:
        _fail(f"--data {str(path)!r} holds no rows")


def _read_examples(path: Path) -> tuple[list, list[int]]:
    """(private examples, labels) of a --system rapt JSONL file: one {"private", "label"[, "pair"]} per line (a text,
    or a (text, pair) tuple for a sentence-pair model)."""
    keys = "keys 'private', 'label' and optionally 'pair'"
    examples, labels = [], []
    for n, row in _jsonl_objects(path, keys):
        if set(row) - {"private", "label", "pair"}:
            _fail(f"{path}:{n}: each line must be an object with {keys}")
        for key in ("private",) + (("pair",) if "pair" in row else ()):
            if not isinstance(row.get(key), str) or not row[key].strip():
                _fail(f"{path}:{n}: {key!r} must be a non-empty string")
        label = row.get("label")
        if isinstance(label, bool) or not isinstance(label, int) or label < 0:
            _fail(f"{path}:{n}: 'label' must be an integer >= 0 (the class index), got {label!r}")
        examples.append(row["private"] if "pair" not in row else (row["private"], row["pair"]))
        labels.append(label)
    return examples, labels


def _upload_payloads(client, path: Path, *, model: str, name: Optional[str], upload: dict) -> str:
    """--system ppft: privatize a JSONL file of prompts here and upload the payload and targets; the dataset id."""
    texts, targets, public = _read_rows(path)
    ds = client.upload_dataset(texts, targets, public, model=model, name=name or path.stem, **upload)
    eps = ds["privacy"]["worst_case_row"]["epsilon"]
    err.print(
        f"uploaded {path} as dataset {ds['id']}: {ds['rows']} rows, {ds['bytes']} payload bytes; worst-case privacy "
        f"loss per row {_fmt_eps(math.inf if eps is None else eps)}",
        highlight=False,
    )
    return ds["id"]


def _upload_examples(client, path: Path, *, model: str, name: Optional[str], upload: dict) -> str:
    """--system rapt: privatize a JSONL file of labelled examples here (PCT2T / T2T and the model's plain tokens) and
    upload only that text and the labels; the dataset id."""
    examples, labels = _read_examples(path)
    done = client.upload_examples(examples, labels, model=model, name=name or path.stem, **upload)
    categories = "every word (T2T)" if done.pos_categories is None else ", ".join(done.pos_categories)
    err.print(
        f"uploaded {path} as dataset {done.dataset['id']}: {done.dataset['rows']} examples privatized here at eta "
        f"{done.eta:g} ({categories}), {sum(done.words_privatized)} words privatized, {done.bytes_sent} bytes sent; "
        f"worst-case privacy loss per example {_fmt_eps(done.privacy.epsilon)} ({done.privacy.notion})",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return done.dataset["id"]


def _dataset_ids(client, data: list[str], upload_file) -> list[str]:
    """Each --data: a JSONL file (privatized here and uploaded by ``upload_file(client, path)``, which returns the
    dataset id) or the id or name of one of your datasets."""
    ids, known = [], None
    for item in data:
        path = Path(item)
        if path.is_file():
            ids.append(upload_file(client, path))
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


FINETUNE_SYSTEMS = ("ppft", "rapt")


@app.command()
def finetune(
    data: list[str] = typer.Option(
        ...,
        "--data",
        help='A JSONL file, privatized HERE, then uploaded: --system ppft, one {"private": ..., "target": ..., '
        '"public": ...} per line; --system rapt, one {"private": ..., "label": 0, "pair": ...} per line ("pair": the '
        "second sentence of a sentence-pair model). Or the id or name of a dataset you uploaded before. Repeatable.",
    ),
    system: str = typer.Option(
        "ppft",
        "--system",
        help="ppft: a generate model (payloads + targets); rapt: a classify model (each example privatized here to "
        "text with T2T / PCT2T and the model's plain tokens, uploaded with its label).",
    ),
    url: str = typer.Option("http://127.0.0.1:8000", "--url", envvar="TEXTFREE_URL", help="The server's base URL."),
    model: str = typer.Option(..., "--model", help="The model to adapt (GET /v1/models)."),
    api_key: Optional[str] = typer.Option(
        None,
        "--api-key",
        envvar="TEXTFREE_API_KEY",
        help="API key (prefer the TEXTFREE_API_KEY variable: arguments show in ps).",
    ),
    name: Optional[str] = typer.Option(
        None, "--name", help="Label of the uploaded dataset(s) (default: the file's name)."
    ),
    method: Optional[str] = typer.Option(
        None,
        "--method",
        help="--system rapt: the method the server trains (lora, prompt_tuning, prefix_tuning, ia3, full; default: "
        "the served run's).",
    ),
    epochs: int = typer.Option(3, "--epochs", help="Passes over the uploaded rows."),
    lr: float = typer.Option(
        1e-3, "--lr", help="Peak learning rate (ppft: the projection and LoRA; rapt: the method)."
    ),
    batch_size: int = typer.Option(8, "--batch-size", help="Rows per optimizer step."),
    max_steps: Optional[int] = typer.Option(None, "--max-steps", help="Stop after this many steps."),
    train_seed: int = typer.Option(
        0, "--train-seed", help="Seed of the server's training (initialisation, dropout, data order)."
    ),
    save_every: Optional[int] = typer.Option(
        None, "--save-every", help="Checkpoint every this many steps (the server's default: 50)."
    ),
    epsilon: Optional[float] = typer.Option(
        None, "--epsilon", "-e", help="--system ppft: noise epsilon (default: the model card's training epsilon)."
    ),
    no_noise: bool = typer.Option(False, "--no-noise", help="--system ppft: clean payloads (NOT private)."),
    eta: Optional[float] = typer.Option(
        None, "--eta", help="--system rapt: the T2T / PCT2T eta (default: the eta the model was trained at)."
    ),
    pos: Optional[str] = typer.Option(
        None,
        "--pos",
        help="--system rapt: the categories to privatize ('default': noun,verb,pron,adp; 'all'; a comma list; default: "
        "the model's). Words outside them are sent in clear.",
    ),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help=CACHE_HELP),
    encoder: Optional[Path] = typer.Option(None, "--encoder", help=ENCODER_HELP),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
    wait: bool = typer.Option(
        True, "--wait/--no-wait", help="Follow the job's progress until it ends (else print the job id and exit)."
    ),
    poll: float = typer.Option(1.0, "--poll", help="Seconds between progress polls."),
    timeout: float = typer.Option(60.0, help="Seconds per HTTP attempt."),
    retries: int = typer.Option(3, help="Retries on connection errors, 5xx and 429."),
    max_epsilon: Optional[float] = typer.Option(
        None, "--max-epsilon", envvar="TEXTFREE_MAX_EPSILON", help=MAX_EPSILON_HELP
    ),
) -> None:
    """Fine-tune a served model on your private data: privatize it HERE, upload only that, run a job.

    --system ppft uploads payloads + targets; --system rapt uploads the text privatized with PCT2T (T2T) and the
    model's plain tokens + labels, and the server trains --method with the reconstruction head. Prints the adapter id
    (textfree ask --adapter ID); progress goes to stderr."""
    _quiet_transformers()
    _check_finetune_flags(epochs, lr, batch_size, max_steps, save_every, poll, train_seed, no_noise, epsilon)
    _check_finetune_system(system, method=method, eta=eta, pos=pos, epsilon=epsilon, no_noise=no_noise)
    _check_client_flags(epsilon, timeout, retries, max_epsilon=max_epsilon)
    try:
        with spinner("loading ..."):  # torch and transformers: seconds
            from textfree.client import Client, ClientError, ModelMismatchError
            from textfree.encoders import EncoderLoadError
    except ImportError as exc:
        _fail(f'textfree finetune needs the server extra (pip install "textfree[server]"): {exc}')
    hp = {"epochs": epochs, "lr": lr, "batch_size": batch_size, "seed": train_seed}
    hp |= {k: v for k, v in (("max_steps", max_steps), ("save_every", save_every), ("method", method)) if v is not None}
    if system == "rapt":
        upload, uploader = {"eta": eta, "pos": pos, "seed": seed}, _upload_examples
    else:
        upload, uploader = {"epsilon": epsilon, "seed": seed, "no_noise": no_noise}, _upload_payloads
    working = "privatizing the rows here, uploading them" + (
        ", following the job (its events print above)" if wait else ""
    )
    try:
        with (
            spinner(f"{working} ..."),
            _open_client(Client, url, api_key, timeout, retries, encoder, max_epsilon, cache_dir) as client,
        ):

            def upload_file(c, path: Path) -> str:
                return uploader(c, path, model=model, name=name, upload=upload)

            job = _run_job(client, data, model=model, upload_file=upload_file, hp=hp, wait=wait, poll=poll)
    except EncoderLoadError as exc:
        _fail(f"--encoder: {exc}")
    except ValueError as exc:
        _fail_rapt_value(exc)
    except (ClientError, ModelMismatchError) as exc:
        _fail(str(exc), code=1)
    if not wait:  # printed here, after the spinner: stdout holds the job id alone
        typer.echo(job["id"])
        return
    if job["status"] != "succeeded":
        _fail(f"job {job['id']} {job['status']}" + (f": {job['error']}" if job.get("error") else ""), code=1)
    typer.echo(job["adapter"])


def _check_finetune_system(
    system: str,
    *,
    method: Optional[str],
    eta: Optional[float],
    pos: Optional[str],
    epsilon: Optional[float],
    no_noise: bool,
) -> None:
    """--system and the flags that belong to one system only, the first bad one refused with one error line."""
    from textfree.lm.adapters import ADAPTER_METHODS

    if system not in FINETUNE_SYSTEMS:
        _fail(f"--system must be one of {', '.join(FINETUNE_SYSTEMS)}, got {system!r}")
    own = {"rapt": {"--method": method, "--eta": eta, "--pos": pos},
           "ppft": {"--epsilon": epsilon, "--no-noise": no_noise or None}}  # fmt: skip
    for other, flags in own.items():
        for flag, value in flags.items():
            if other != system and value is not None:
                _fail(f"{flag} is for --system {other}" + {"--eta": " (ppft takes --epsilon)",
                      "--epsilon": " (rapt takes --eta)"}.get(flag, ""))  # fmt: skip
    if method is not None and method not in ADAPTER_METHODS:
        _fail(f"--method must be one of {', '.join(ADAPTER_METHODS)}, got {method!r}")
    if eta is not None and not (math.isfinite(eta) and eta > 0):
        _fail(f"--eta must be a number > 0, got {eta}")


def _check_finetune_flags(
    epochs: int,
    lr: float,
    batch_size: int,
    max_steps: Optional[int],
    save_every: Optional[int],
    poll: float,
    train_seed: int,
    no_noise: bool,
    epsilon: Optional[float],
) -> None:
    """The training and polling flags of ``textfree finetune``, the first bad one refused with one error line."""
    checks = [
        (epochs >= 1, f"--epochs must be >= 1, got {epochs}"),
        (math.isfinite(lr) and lr > 0, f"--lr must be a number > 0, got {lr}"),
        (batch_size >= 1, f"--batch-size must be >= 1, got {batch_size}"),
        (max_steps is None or max_steps >= 1, f"--max-steps must be >= 1, got {max_steps}"),
        (save_every is None or save_every >= 1, f"--save-every must be >= 1, got {save_every}"),
        (poll > 0, f"--poll must be > 0, got {poll}"),
        (train_seed >= 0, f"--train-seed must be >= 0, got {train_seed}"),
        (not (no_noise and epsilon is not None), "give --epsilon or --no-noise, not both"),
    ]
    for ok, message in checks:
        if not ok:
            _fail(message)


def _run_job(client, data: list[str], *, model: str, upload_file, hp: dict, wait: bool, poll: float) -> dict:
    """Upload the --data files (``upload_file(client, path)``), start the job and follow it to its end (the final
    job); with --no-wait, the job as created (the caller prints its id)."""
    ids = _dataset_ids(client, data, upload_file)
    job = client.create_fine_tuning_job(model=model, datasets=ids, **hp)
    err.print(f"job {job['id']}: {job['status']}, {job['progress']['total_steps']} steps", highlight=False)
    if not wait:
        return job
    return client.wait_job(
        job["id"],
        poll=poll,
        on_event=lambda e: err.print(f"  {e['type']}: {e['message']}", highlight=False, markup=False, soft_wrap=True),
    )
