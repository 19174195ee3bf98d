"""The ``textfree`` command line: privatize, inspect, account, substitute, run, plot, serve, ask, finetune.

The shared ``app``, consoles and helpers live in ``textfree.cli_common`` (re-exported here); serve, ask and
finetune in ``textfree.cli_service``, imported below so they register; ``ppft`` and ``attacks`` are mounted last.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from textfree.cli_common import _fail, _fmt_eps, _quiet_transformers, app, console, err, spinner


def _build_noise(mechanism: str, epsilon: Optional[float], sigma: Optional[float], delta: float):
    """The noise of ``privatize``: by --sigma (Gaussian, exact), else by the one factory at --epsilon, the same
    distribution a PPFT model and the client library use at that epsilon (:func:`textfree.mechanisms.make_noise`).
    The flags are checked before the mechanisms (and torch) are imported: a missing flag is reported at once."""
    if mechanism not in ("l2_laplace", "gaussian", "none"):
        _fail(f"unknown --mechanism {mechanism!r}; choose l2_laplace, gaussian or none")
    if mechanism == "none":
        return None
    if epsilon is None and not (mechanism == "gaussian" and sigma is not None):
        _fail(
            f"--epsilon is required for the {mechanism} "
            f"mechanism{' (or give --sigma)' if mechanism == 'gaussian' else ''}"
        )
    for flag, value in (("--epsilon", epsilon), ("--sigma", sigma)):
        if value is not None and not (math.isfinite(value) and value > 0):
            _fail(f"{flag} must be a finite number > 0, got {value:g}")
    if mechanism == "gaussian" and not 0 < delta < 1:
        _fail(f"--delta must be in (0, 1), got {delta:g}")
    with err.status("loading the mechanisms ..."):  # torch: seconds
        from textfree.mechanisms import Gaussian, make_noise

    if mechanism == "gaussian" and sigma is not None:
        return Gaussian(sigma, delta)
    return make_noise(mechanism, epsilon, delta=delta)


@app.command()
def privatize(
    text: list[str] = typer.Argument(None, help="Prompt text(s) to privatize. Use --file for one prompt per line."),
    epsilon: Optional[float] = typer.Option(
        None,
        "--epsilon",
        "-e",
        help="Required (unless --mechanism none, or gaussian with --sigma). L2-Laplace eps per unit distance (2 x eps "
        "per unit slot); gaussian: calibrated to the same per-slot guarantee, (2 x eps, --delta), as a PPFT model at "
        "this eps.",
    ),
    k: int = typer.Option(4, "--k", help="Pool blocks of k tokens into one slot."),
    pad_to: Optional[int] = typer.Option(
        None,
        "--pad-to",
        help="Hide the prompt's length: release exactly this many slots per prompt (public filler slots after its own, "
        "noised like them); a longer prompt is an error. Default: ceil(tokens / k) slots, which tells the "
        "server the length.",
    ),
    mechanism: str = typer.Option(
        "l2_laplace", help="l2_laplace, gaussian or none (none = no privacy; experiments only)."
    ),
    sigma: Optional[float] = typer.Option(
        None, help="Gaussian: the standard deviation directly (overrides --epsilon)."
    ),
    delta: float = typer.Option(1e-5, help="Gaussian: delta for calibration and accounting."),
    encoder: str = typer.Option("default", help="Encoder: 'default' (all-MiniLM-L6-v2, offline) or any HF name/path."),
    file: Optional[Path] = typer.Option(None, help="Read prompts from this UTF-8 file, one per line."),
    out: Path = typer.Option(Path("payload.safetensors"), "--out", "-o", help="Where to write the payload."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise from this seed (NOT private)."),
    ledger: Optional[Path] = typer.Option(None, help="Charge this release to a privacy ledger file."),
    ledger_key: str = typer.Option("default", help="Ledger key (user) the release is charged to."),
    budget: Optional[float] = typer.Option(None, help="Ledger budget (total epsilon per key)."),
    delta_budget: Optional[float] = typer.Option(
        None, help="Ledger budget of delta (total delta per key; Gaussian releases add theirs)."
    ),
    on_exceed: str = typer.Option("refuse", help="Past the budget: refuse (nothing is written) or warn."),
    accountant: Optional[str] = typer.Option(
        None,
        help="With --ledger: how a key's releases compose against the budget: basic (default; epsilons and deltas "
        "add), gdp (Gaussian releases composed exactly), pld or rdp (Gaussian releases by Google's dp-accounting: pip "
        "install 'textfree[accounting]'); every other release adds. Each ledger entry records the accountant.",
    ),
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
    if accountant is not None and ledger is None:
        _fail("--accountant applies to --ledger (it says how the ledger composes a key's releases)")
    if ledger is not None and not ledger_key:
        _fail("--ledger-key must be a non-empty string")
    if out.is_dir() or not out.parent.is_dir():  # checked before anything is charged to a ledger
        _fail(
            f"--out {str(out)!r} is a directory"
            if out.is_dir()
            else f"--out {str(out)!r}: no such directory {str(out.parent)!r}"
        )
    try:
        noise = _build_noise(mechanism, epsilon, sigma, delta)  # before the encoder's imports: flag errors at once
    except ValueError as exc:
        _fail(str(exc))
    with err.status("loading the encoder ..."):  # torch and the encoder: seconds
        _quiet_transformers()
        from textfree.encoders import ContextualEncoder, EncoderLoadError
        from textfree.ledger import BudgetExceeded, PrivacyLedger
        from textfree.privatizer import Privatizer

    try:
        led = (
            PrivacyLedger(ledger, budget, on_exceed, delta_budget=delta_budget, accountant=accountant or "basic")
            if ledger
            else None
        )
    except ValueError as exc:
        _fail(str(exc))
    if noise is None:
        err.print("[yellow]warning:[/] --mechanism none releases clean vectors: no privacy at all")
    try:
        with err.status("loading the encoder ..."):
            enc = ContextualEncoder.from_pretrained(None if encoder == "default" else encoder)
    except EncoderLoadError as exc:
        _fail(str(exc))
    priv = Privatizer(enc, noise, k, pad_to=pad_to)
    try:
        with err.status(f"privatizing {len(texts)} prompt(s) ..."):
            payload = priv.privatize(texts, seed=seed)
        # charged before the payload is written (it leaves the process only then), with its slot releases, so
        # that the ledger's accountant sees each Gaussian release
        total = led.charge_payload(ledger_key, payload) if led else None
    except BudgetExceeded as exc:
        _fail(str(exc), code=3)
    except ValueError as exc:  # a prompt longer than --pad-to slots: nothing is written
        _fail(str(exc))
    try:
        payload.save(out)
    except OSError as exc:
        _fail(f"cannot write --out {str(out)!r}: {exc}" + (" (the release was charged to the ledger)" if led else ""))
    worst = payload.worst_case_loss()
    console.print(
        f"wrote {out} ({out.stat().st_size} bytes): {payload.batch_size} prompt(s), slots {payload.lengths}, "
        f"width {payload.encoder.dim}; worst-case privacy loss per prompt: eps = {_fmt_eps(worst.epsilon)}"
        + (f", delta = {worst.delta:g}" if worst.delta else "")
    )
    if led is not None:
        plain = led.spent(ledger_key, accountant="basic")
        console.print(
            f"ledger {led.path}: key {ledger_key!r} has now spent eps = {_fmt_eps(total.epsilon)}"
            + (f", delta = {total.delta:g}" if total.delta else "")
            + f" (accountant: {led.describe_accountant()})"
            + ("" if led.accountant == "basic" else f"; plain sum eps = {_fmt_eps(plain.epsilon)}"),
            markup=False,
            highlight=False,
        )


@app.command()
def inspect(
    path: Path = typer.Argument(..., help="A payload file (.safetensors)."),
    as_json: bool = typer.Option(False, "--json", help="Print the header as JSON."),
    accountant: str = typer.Option(
        "basic",
        help="How a prompt's slot releases compose: basic (epsilons and deltas add), gdp (Gaussian releases composed "
        "exactly), pld or rdp (Google's dp-accounting: pip install 'textfree[accounting]').",
    ),
) -> None:
    """Print what a payload holds: shapes, encoder, mechanism, privacy loss. Never any text."""
    if not path.is_file():  # before the imports below (torch): a wrong path is reported at once
        _fail(f"{path}: cannot read payload file (no such file)")
    with err.status(f"reading {path} ..."):  # torch: seconds
        from textfree.mechanisms.accountants import compose, create_accountant, slot_releases
        from textfree.payload import Payload, PayloadError

    try:
        acc = create_accountant(accountant)
    except ValueError as exc:
        _fail(str(exc))
    try:
        p = Payload.load(path)
    except PayloadError as exc:
        _fail(f"{path}: {exc}")
    h = p.header()
    pr = p.privatization
    # the longest prompt's slots (the worst case), composed under the accountant, beside their plain sum
    releases = slot_releases(pr, [max(p.lengths, default=0)])
    worst = compose(releases, accountant)
    plain = compose(releases, "basic")
    if as_json:
        h = dict(h)
        h["public"] = None if h["public"] is None else f"{len(h['public'])} public string(s) (not shown)"
        h["accounting"] = {
            "accountant": accountant,
            "description": acc.description,
            "worst_case_row": worst.to_dict(),
            "plain_sum": plain.to_dict(),
        }
        console.print_json(json.dumps(h, default=str))
        return
    t = Table(title=f"payload {path}", show_header=False)
    t.add_row("format", f"{h['format']} v{h['format_version']} ({h['kind']})")
    t.add_row("vectors", f"shape {h['shape']}, dtype {h['dtype']}")
    t.add_row("slots per prompt", str(h["lengths"]))
    t.add_row("encoder", f"{p.encoder.id} ({p.encoder.kind}, d={p.encoder.dim})")
    t.add_row("encoder sha256", str(p.encoder.sha256))
    noise = "none (clean: no privacy)" if pr.noise is None else json.dumps(h["privatization"]["noise"])
    t.add_row("mechanism", noise)
    t.add_row("pipeline", f"k={pr.k}, normalize={pr.normalize}, renormalize={pr.renormalize}")
    if pr.center_sha256:
        t.add_row(
            "slot centre", f"every unit slot centred on the public vector {pr.center_sha256[:12]}... before the noise"
        )
    if pr.noise is not None and hasattr(pr.noise, "expected_noise_norm"):
        t.add_row(
            "expected noise norm", f"{pr.noise.expected_noise_norm(p.encoder.dim):.4g} (slots before noise have norm 1)"
        )
    slot = pr.slot_loss()
    t.add_row(
        "privacy loss per slot",
        f"eps = {_fmt_eps(slot.epsilon)} ({slot.notion}" + (f", delta={slot.delta:g})" if slot.delta else ")"),
    )
    t.add_row("accountant", acc.describe())
    t.add_row(
        "worst-case loss per prompt",
        f"eps = {_fmt_eps(worst.epsilon)}"
        + (f", delta = {worst.delta:g}" if worst.delta else "")
        + " (all slots of the longest prompt differ)"
        + ("" if accountant == "basic" else f"; plain sum eps = {_fmt_eps(plain.epsilon)} at the same delta"),
    )
    if pr.count_hidden:
        pair = compose(slot_releases(pr, [pr.pad_to]), accountant)
        t.add_row(
            "slot count",
            f"hidden: every prompt padded to {pr.pad_to} slots; any two prompts: eps = {_fmt_eps(pair.epsilon)}",
        )
    else:
        t.add_row("slot count", "released: ceil(tokens / k) tells the length (--pad-to hides it)")
    t.add_row(
        "public parts", "none" if p.public is None else f"{len(p.public)} string(s) sent in clear by design (not shown)"
    )
    console.print(t)


def _is_dataset_file(dataset: str) -> bool:
    """Whether ``--dataset`` names a file (not a registered name or alias, nor a directory)."""
    from textfree.data import UnknownDatasetError, get_dataset_spec

    try:
        get_dataset_spec(dataset)
    except UnknownDatasetError:
        return Path(dataset).expanduser().is_file()
    return False


@app.command()
def account(
    dataset: str = typer.Option(..., help="Dataset name (e.g. pri-ddx) or path to its file."),
    budget: float = typer.Option(150.0, help="Total privacy budget B."),
    split: Optional[str] = typer.Option(
        None, help="Split (e.g. test) when --dataset is a name or directory (a file is its own split)."
    ),
    encoder: str = typer.Option("default", help="Encoder whose tokenizer counts n and whose table gives D_max."),
    limit: Optional[int] = typer.Option(None, help="Use only the first N records."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """PPFT's budget-alignment table (n, D_max, eps_dchi, tau, eps_PPFT = eps_PR) for a dataset."""
    if budget <= 0:
        _fail(f"--budget must be > 0, got {budget}")
    with err.status("loading ..."):  # torch and transformers: seconds
        _quiet_transformers()
        from textfree.alignment import dataset_alignment
        from textfree.data import DataError
        from textfree.encoders import EncoderLoadError

    if split is not None and _is_dataset_file(dataset):  # the report would claim a split the file does not hold
        _fail(
            f"--split {split!r} applies to a dataset name or directory, not to the file {dataset!r} "
            "(the file is the split: leave --split out)"
        )
    try:
        with err.status(f"counting the tokens of {dataset} and the table's diameter ..."):
            result = dataset_alignment(dataset, budget, split=split, encoder=encoder, limit=limit)
    except (DataError, FileNotFoundError, ValueError, EncoderLoadError) as exc:
        _fail(str(exc))
    if as_json:
        console.print_json(json.dumps(result))
        return
    t = Table(title=f"budget alignment for {result['dataset']} (B = {budget:g}, {result['prompts']} prompts)")
    for col in ("prompt", "n (tokens)", "D_max", "eps_dchi = B/(n D_max)", "tau = 2n/B", "eps_PPFT = eps_PR = B/2"):
        t.add_column(col, justify="right")
    for label, key in (("max", "at_n_max"), ("mean", "at_n_mean")):
        r = result[key]
        t.add_row(
            label, f"{r['n']:.1f}", f"{r['d_max']:.4f}", f"{r['eps_dchi']:.4g}", f"{r['tau']:.4g}", f"{r['eps_ppft']:g}"
        )
    console.print(t)
    console.print(
        f"n = tokens of the private part under {result['encoder']}'s tokenizer (no special tokens); "
        f"D_max = largest L2 distance between two rows of its token-embedding table. "
        f"The 'max' row is the binding one: it holds for every prompt. "
        f"Units differ: eps_dchi spends B per prompt (n tokens, each at most D_max apart), eps_PPFT = B/2 spends B per "
        f"slot (two unit slots are at most 2 apart), so a prompt of s = ceil(n/k) slots whose slots may all differ "
        f"composes to s x B (the paper's per-release alignment, kept as specified)."
    )


@app.command()
def substitute(
    text: Optional[str] = typer.Argument(None, help="Text to privatize by word substitution."),
    eta: float = typer.Option(100.0, help="Metric-DP parameter per unit of embedding distance."),
    pos: Optional[str] = typer.Option(
        None,
        help="PCT2T: privatize only words of these POS categories, each within its category (e.g. "
        "noun,verb,pron,adp; 'default' = those four; 'all' = every category, for clinical or legal text); other words "
        "are sent unchanged.",
    ),
    tagger: str = typer.Option("textblob", help="POS tagger: textblob (bundled) or nltk (needs --nltk-data)."),
    nltk_data: Optional[Path] = typer.Option(
        None, help="Directory holding NLTK's tagger (e.g. ../shared/data/nltk_data)."
    ),
    table: str = typer.Option("default", help="Embedding table: 'default' (MiniLM), an HF name/path, or glove:PATH."),
    search: str = typer.Option(
        "exact",
        help="Nearest-word search: exact (default) or approximate (int8 pass + float64 re-rank of a short list: faster "
        "on CPUs without native bfloat16 (AMX-BF16 or AVX512-BF16), where exact search has no bfloat16 pass; same "
        "privacy guarantee; may release "
        "another word when the exact one misses the list; see docs/substitution.md).",
    ),
    shortlist: int = typer.Option(
        7,
        help="--search approximate: words kept per input word beyond the best one for the float64 re-rank (>= 0; "
        "larger agrees more often with exact search, costs a little more).",
    ),
    replacement_table: bool = typer.Option(
        False, "--replacement-table", help="Print the empirical word-replacement probability per eta."
    ),
    etas: str = typer.Option("25,50,75,100,150,200,300", help="Etas for --replacement-table."),
    corpus: Optional[Path] = typer.Option(None, help="Text file (one sentence per line) for --replacement-table."),
    seed: Optional[int] = typer.Option(None, help="Experiments only: reproducible noise (NOT private)."),
) -> None:
    """Text-to-text privatization (T2T) or its part-of-speech-constrained form (PCT2T)."""
    if not (math.isfinite(eta) and eta > 0):  # the flags that need no import first: errors at once
        _fail(f"--eta must be > 0, got {eta}")
    if search not in ("exact", "approximate"):
        _fail(f"--search must be exact or approximate, got {search!r}")
    if shortlist < 0:
        _fail(f"--shortlist must be >= 0, got {shortlist}")
    if seed is not None and seed < 0:
        _fail(f"--seed must be >= 0, got {seed}")
    if not replacement_table and (not text or not text.strip()):
        _fail("give a text to substitute, or --replacement-table")
    with err.status("loading ..."):  # torch and transformers: seconds
        _quiet_transformers()
        from textfree.encoders import EncoderLoadError
        from textfree.rng import resolve_generator
        from textfree.substitution.cli_support import build_t2t, default_corpus, parse_pos, replacement_rows
        from textfree.substitution.pos import TAGGERS, UNIVERSAL_TAGS
        from textfree.substitution.text import split_text

    # the tagger flags are checked always, and refused where they would have no effect (never silently ignored)
    if pos is not None and not parse_pos(pos):
        _fail(f"--pos {pos!r} lists no POS category: give e.g. noun,verb (or leave --pos out for plain T2T)")
    if tagger not in TAGGERS:
        _fail(f"--tagger must be one of {', '.join(TAGGERS)}, got {tagger!r}")
    if nltk_data is not None and not nltk_data.is_dir():
        _fail(f"--nltk-data {str(nltk_data)!r} is not a directory")
    if tagger == "nltk" and nltk_data is None:
        _fail("--tagger nltk needs --nltk-data (a directory holding NLTK's tagger)")
    if nltk_data is not None and tagger != "nltk":
        _fail("--nltk-data is only used by --tagger nltk")
    if pos is None and tagger != "textblob":
        _fail(f"--tagger {tagger} has no effect without --pos (plain T2T tags no words)")
    if replacement_table:
        if text is not None:
            _fail("--replacement-table measures over --corpus (or a built-in one), not over TEXT: leave TEXT out")
        try:
            eta_list = [float(x) for x in etas.split(",") if x.strip()]
        except ValueError as exc:
            _fail(f"bad --etas {etas!r}: {exc}")
        if not eta_list:
            _fail(f"--etas {etas!r} lists no eta: give comma-separated numbers > 0")
        bad = [e for e in eta_list if not (math.isfinite(e) and e > 0)]
        if bad:
            _fail(f"--etas must be finite numbers > 0, got {bad[0]:g}")
        try:
            sentences = (
                default_corpus()
                if corpus is None
                else [l.strip() for l in corpus.read_text(encoding="utf-8").splitlines() if l.strip()]
            )
        except (OSError, UnicodeDecodeError) as exc:
            _fail(f"cannot read --corpus {str(corpus)!r}: {exc}")
        if not sentences:
            _fail(f"--corpus {str(corpus)!r} holds no sentence (one per line)")
    elif not text or not text.strip():
        _fail("give a text to substitute, or --replacement-table")
    try:
        with err.status(f"building the {table} word table{' and tagging it' if pos else ''} ..."):
            mech = build_t2t(
                table=table, eta=eta, pos=pos, tagger=tagger, nltk_data=nltk_data, search=search, shortlist=shortlist
            )
    except (ValueError, FileNotFoundError, OSError, EncoderLoadError) as exc:
        _fail(str(exc))
    if not math.isfinite(mech.privacy_loss_per_word().epsilon):  # eta * D_max overflows: nothing is promised
        _fail(
            f"--eta {eta:g} times D_max {mech.input_diameter():g} is not a finite privacy loss: this eta promises no "
            "privacy"
        )
    gen = resolve_generator(None, seed)
    if replacement_table:
        try:
            with err.status(f"privatizing {len(sentences)} sentences at {len(eta_list)} etas ..."):
                rows = replacement_rows(mech, sentences, eta_list, generator=gen)
        except ValueError as exc:  # e.g. no word of --corpus is in the table
            _fail(f"--corpus: {exc}" if corpus is not None else str(exc))
        t = Table(
            title=f"empirical word-replacement probability ({'PCT2T ' + pos if pos else 'T2T'}, {len(sentences)} "
            "sentences)"
        )
        t.add_column("eta", justify="right")
        t.add_column("P(word replaced)", justify="right")
        for e, rate in rows:
            t.add_row(f"{e:g}", f"{rate:.3f}")
        console.print(t)
        return
    result = mech.privatize_detailed([text], generator=gen)
    console.print(result.texts[0], markup=False, highlight=False)
    err.print(  # an output equal to the input is a possible draw, not a failure: say how many words changed
        f"changed: {result.n_replaced} of {result.n_substituted} privatized word(s) replaced by another word "
        f"(--replacement-table gives the expected share per eta)"
    )
    eps = mech.privacy_loss_per_word().epsilon
    if mech.pos_categories:
        words = split_text(text)[1::2]
        cats = "all" if set(mech.pos_categories) == set(UNIVERSAL_TAGS) else ",".join(mech.pos_categories)
        shown = " ".join(w if p else f"[{w}]" for w, p in zip(words, result.privatized[0]))
        err.print(
            f"privatized (PCT2T {cats}; [bracketed] words, outside the categories or the table, sent unchanged): "
            f"{shown}",
            markup=False,
            highlight=False,
        )
        err.print(
            f"privacy: {eps:g} per privatized word (eta * D_max), metric DP between words of the same part-of-speech "
            f"category; {result.n_substituted} privatized word(s) compose to {eps * result.n_substituted:g}. Not "
            f"covered: the {result.n_kept} word(s) sent unchanged and each privatized word's category (outputs stay "
            "in it)."
        )
    else:
        err.print(
            f"privacy: {eps:g} per word (eta * D_max), metric DP; {result.n_substituted} word(s) compose to "
            f"{eps * result.n_substituted:g}"
            + (f"; {result.n_kept} word(s) outside the table sent unchanged" if result.n_kept else "")
        )


@app.command()
def run(
    cell: Path = typer.Argument(..., help="An experiment cell (YAML)."),
    out_dir: Path = typer.Option(Path("results"), help="Where the results JSON goes."),
) -> None:
    """Run an experiment cell and write a results JSON."""
    if not cell.is_file():  # before the experiment machinery's imports: a wrong path is reported at once
        _fail(f"{cell}: no such file")
    with spinner("loading ..."):  # torch and transformers: seconds; run_cell shows its grid's progress bar
        _quiet_transformers()
        from textfree.encoders import EncoderLoadError
        from textfree.experiments import run_cell

    try:  # run_cell checks --out-dir before the first grid point runs
        with spinner(f"loading {cell.name}'s models and data ...", between="writing the results ..."):
            path = run_cell(cell, out_dir)
    except (ValueError, OSError, EncoderLoadError) as exc:  # OSError: also the final write, naming where
        _fail(str(exc))
    console.print(f"wrote {path}")


@app.command()
def plot(
    results: list[Path] = typer.Argument(..., help="Result JSON files."),
    out_dir: Path = typer.Option(Path("results/plots"), help="Where figures go."),
) -> None:
    """Draw figures from result files (never recomputes anything)."""
    try:
        with err.status(f"drawing figures from {len(results)} result file(s) ..."):
            from textfree.experiments import plot_results

            paths = plot_results(list(results), out_dir)
    except (ValueError, FileNotFoundError) as exc:
        _fail(str(exc))
    for p in paths:
        console.print(f"wrote {p}")


# serve, ask, finetune: imported after plot so that they register (and list in --help) after this module's commands
from textfree.cli_attacks import app as _attacks_app  # noqa: E402
from textfree.cli_audit import audit  # noqa: E402,F401
from textfree.cli_ppft import app as _ppft_app  # noqa: E402
from textfree.cli_quickstart import quickstart  # noqa: E402,F401
from textfree.cli_rapt import app as _rapt_app  # noqa: E402
from textfree.cli_service import ask, finetune, serve  # noqa: E402,F401
from textfree.cli_snd import app as _snd_app  # noqa: E402
from textfree.glance import app as _report_app  # noqa: E402

app.add_typer(_ppft_app, name="ppft")
app.add_typer(_attacks_app, name="attacks")
app.add_typer(_snd_app, name="snd")
app.add_typer(_rapt_app, name="rapt")
app.add_typer(_report_app, name="report")


def main() -> None:  # pragma: no cover
    """The console script ``textfree`` (logging is set up by every command: ``cli_common.setup_logging``)."""
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
