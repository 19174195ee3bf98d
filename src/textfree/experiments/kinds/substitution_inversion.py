"""Cell kind ``substitution_inversion``: what a reader of T2T / PCT2T privatized text recovers (RAPT's threat).

The client privatizes each evaluated private text with T2T (``params.pos`` null) or PCT2T (``params.pos`` a list of
categories or "default") over ``params.table`` at ``params.eta`` (grid it), with the cell seed. Attacks
(:mod:`textfree.attacks.substitution`, :mod:`textfree.attacks.substitution_learned`):

* ``identity``: the released text itself (needs nothing);
* ``channel``: a word-level inverter fitted on ``params.rounds`` runs of the same mechanism over the attacker's
  in-domain text, the PPFT *train* part;
* ``learned``: a decoder (``params.decoder``, fully fine-tuned) trained to rewrite the mechanism's outputs on the
  same in-domain text into that text, a fresh run of the mechanism each of ``params.epochs`` epochs, at the evaluated
  eta or at each of ``params.train_etas`` (one inverter for a whole eta grid: the texts of an epoch are dealt out to
  the etas; it is not told which eta released a text). Trained once per training config into ``params.out`` (the
  cell's seeds are evaluation noise seeds) and reused when a finished run with the same config exists (like
  ``learned_inversion``).

With ``params.blackbox: true`` (opt-in) also RAPT IV-A1's black-box readers
(:mod:`textfree.attacks.substitution_blackbox`): an MLP from each released word's table vector to the original word
(``mlp``) and a denoising autoencoder of that vector mapped to the nearest table word (``autoencoder``), each trained
once per eta (the cell's seeds are evaluation noise seeds) on ``params.blackbox_epochs`` fresh runs of the mechanism
over the same in-domain text, seeded by ``params.blackbox_seed``.

``channel``, ``learned`` and ``blackbox`` need ``training_text: in_domain``, ``knows_mechanism``, ``knows_parameters``
in ``attack.threat``; the kind refuses a cell whose grant does not cover its attacks.

Metrics: ``word_recovery_{identity,channel,learned,best}`` (share of original words recovered at their position: the
token recovery of the cross matrix; the learned guess may have another word count, so its positions come from a
minimum-edit alignment, :func:`~textfree.attacks.substitution.aligned_word_recovery`),
``rouge_l_{identity,channel,learned,best}`` (mean ROUGE-L F1 of the guess), with ``channel`` or ``learned`` the
no-input reference ``{word_recovery,rouge_l}_prior`` (one constant guess, the medoid of 100 of the attacker's texts,
:func:`~textfree.attacks.learned.medoid_text`: Pri-* prompts share a template), ``replacement_rate`` (substituted words
that changed), ``kept_rate`` (words outside
the table, released verbatim and not covered by the guarantee), ``word_epsilon`` (eta x D_max: one word's worst
case), ``prompt_epsilon`` / ``prompt_epsilon_max`` (mean / largest over texts of substituted words x word_epsilon),
``n_texts``, ``n_words``, with
``learned`` the training figures (``train_*``, ``reused``), and with ``blackbox``
``{word_recovery,rouge_l}_{mlp,autoencoder}`` (aligned recovery; in ``*_best`` too) and ``mse_autoencoder`` /
``mse_released`` (per-coordinate MSE of the denoised / the raw released word vectors against the original words'
vectors, over the words whose released and original words are both in the table).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ...attacks.learned import medoid_text
from ...attacks.substitution import (
    SUBSTITUTION_CHANNEL_REQUIRES,
    ChannelInverter,
    aligned_word_recovery,
    substitution_channel_attack,
    substitution_identity_attack,
    word_recovery,
)
from ...attacks.substitution_blackbox import SUBSTITUTION_BLACKBOX_REQUIRES
from ...attacks.substitution_learned import SUBSTITUTION_LEARNED_REQUIRES, substitution_learned_attack
from ...attacks.threat import ThreatModel
from ...metrics.text import rouge_l
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import record_private_text
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat, require_ppft_dataset
from ._t2t import T2T_PARAMS, check_t2t_params, positive, t2t_guarantee, t2t_mechanism
from ._threads import torch_threads
from .ppft import _TRAIN

__all__ = ["substitution_inversion", "SUBSTITUTION_METRICS", "SUBSTITUTION_PARAMS"]

ATTACKS = ("identity", "channel", "learned")
DEFAULT_ATTACKS = ["identity", "channel"]
_REQUIRES = {
    "identity": ThreatModel(),
    "channel": SUBSTITUTION_CHANNEL_REQUIRES,
    "learned": SUBSTITUTION_LEARNED_REQUIRES,
}
#: The black-box readers ``params.blackbox`` adds.
BLACKBOX = ("mlp", "autoencoder")
SUBSTITUTION_METRICS = (
    tuple(f"{m}_{a}" for m in ("word_recovery", "rouge_l") for a in ATTACKS + BLACKBOX + ("best", "prior"))
    + ("mse_autoencoder", "mse_released")
    + ("replacement_rate", "kept_rate", "word_epsilon", "prompt_epsilon", "prompt_epsilon_max", "n_texts", "n_words")
    + _TRAIN
)
SUBSTITUTION_PARAMS = {
    **T2T_PARAMS,
    "attacks": "identity, channel and/or learned (default identity + channel)",
    "rounds": "channel: runs of the mechanism over the attacker's training text (default 3)",
    "train_limit": "channel, learned: at most this many attacker training texts (default all)",
    "out": "learned: run directory template ({mechanism}: t2t or pct2t, {eta}); a finished run with the same training "
    "config is reused",
    "decoder": "learned: the causal LM the attacker fine-tunes (default runs/decoder-small)",
    "epochs": "learned: passes over the training texts, a fresh run of the mechanism each (default 3)",
    "train_etas": "learned: the etas it trains at, the texts of each epoch dealt out to them (default: [the evaluated "
    "eta])",
    "batch_size": "learned: texts per optimizer step (default 16)",
    "lr": "learned: peak learning rate (default 1e-3)",
    "train_seed": "learned: seed of initialisation order, data order and the mechanism's training runs (default 0)",
    "max_new_tokens": "learned: generation length in decoder tokens (default 128)",
    "blackbox": "true: also the black-box MLP and autoencoder word inverters (RAPT IV-A1; default false)",
    "blackbox_epochs": "blackbox: fresh runs of the mechanism over the training texts, one per epoch (default 8)",
    "blackbox_hidden": "blackbox: hidden width of both networks (default 256)",
    "blackbox_vocab_size": "blackbox: the attacker's most frequent in-table words the MLP can output (default 4096)",
    "blackbox_batch_size": "blackbox: word pairs per optimizer step (default 256)",
    "blackbox_lr": "blackbox: learning rate (default 2e-3)",
    "blackbox_seed": "blackbox: seed of initialisation, order and the mechanism's training runs (default 0)",
    "threads": "torch threads while the cell runs (default: unchanged)",
    "columns": "a path or hub dataset in any layout: {text: COLUMN, names: [...]} (the CLI's --text-column, "
    "--columns); its distinct texts split by a stable hash into the attacker's part and the evaluated part",
    "test_share": "with columns: the share of the distinct texts evaluated (default 0.3)",
}
#: With ``columns``: the share of a table's distinct texts evaluated, and the salt of the hash that splits them.
TEST_SHARE, _SPLIT_SALT = 0.3, "textfree-substitution-test"
#: Black-box params (``blackbox_`` + a :class:`~textfree.attacks.substitution_blackbox.WordBlackBoxConfig` field, and
#: the seed).
_BLACKBOX = ("epochs", "hidden", "vocab_size", "batch_size", "lr", "seed")
#: Learned-attack params and their defaults (``out`` has none).
_LEARNED = {
    "out": None,
    "decoder": "runs/decoder-small",
    "epochs": 3,
    "train_etas": None,
    "batch_size": 16,
    "lr": 1e-3,
    "train_seed": 0,
    "max_new_tokens": 128,
}


def _settings(cell: Any, point: dict) -> tuple[dict, list[str], ThreatModel]:
    resolved = cell.resolve(point)
    p = dict(resolved.params)
    check_t2t_params(p)
    attacks = p.get("attacks", list(DEFAULT_ATTACKS))
    if (
        not isinstance(attacks, list)
        or not attacks
        or any(a not in ATTACKS for a in attacks)
        or len(set(attacks)) != len(attacks)
    ):
        raise CellError(
            f"attacks must be distinct values from {list(ATTACKS)}, got {attacks!r}", field="params.attacks"
        )
    for name in ("rounds", "train_limit", "threads"):
        v = p.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    _learned_params(p, "learned" in attacks)
    threat = ThreatModel()
    for a in attacks:
        threat = granted_threat(
            resolved.attack,
            "substitution_inversion",
            f"substitution_{a}",
            _REQUIRES[a],
            f"; grant more in `attack.threat` or drop the {a} attack",
        )
    if _blackbox_config(p) is not None:
        threat = granted_threat(
            resolved.attack,
            "substitution_inversion",
            "substitution_mlp",
            SUBSTITUTION_BLACKBOX_REQUIRES,
            "; grant more in `attack.threat` or drop `blackbox`",
        )
    return p, attacks, threat


def _blackbox_config(p: dict):
    """The black-box readers' training config, or None without ``blackbox: true`` (their params are then refused)."""
    from ...attacks.substitution_blackbox import WordBlackBoxConfig

    on = p.get("blackbox", False)
    if not isinstance(on, bool):
        raise CellError(f"blackbox must be true or false, got {on!r}", field="params.blackbox")
    given = {name: p[f"blackbox_{name}"] for name in _BLACKBOX if f"blackbox_{name}" in p}
    if not on:
        if given:
            first = f"blackbox_{sorted(given)[0]}"
            raise CellError(
                f"params {first} applies to the black-box readers only; set `blackbox: true` or drop it",
                field=f"params.{first}",
            )
        return None
    seed = given.pop("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise CellError(f"blackbox_seed must be an integer >= 0, got {seed!r}", field="params.blackbox_seed")
    for name, value in given.items():  # one at a time, so the error names the param
        try:
            WordBlackBoxConfig(**{name: value})
        except ValueError as exc:
            raise CellError(
                str(exc).replace("WordBlackBoxConfig.", "blackbox_"), field=f"params.blackbox_{name}"
            ) from None
    return WordBlackBoxConfig(**given)


def _learned_params(p: dict, learned: bool) -> None:
    """Check the learned attack's params (and fill in their defaults); refuse them when it does not run."""
    if not learned:
        extra = sorted(set(p) & set(_LEARNED))
        if extra:
            raise CellError(
                f"params {extra} apply to the learned attack only; add learned to `attacks` or drop them",
                field=f"params.{extra[0]}",
            )
        return
    for name, default in _LEARNED.items():
        p.setdefault(name, default)
    if not isinstance(p["out"], str) or not p["out"]:
        raise CellError(
            f"the learned attack needs `out`, a run directory template, got {p['out']!r}", field="params.out"
        )
    if not isinstance(p["decoder"], str) or not p["decoder"]:
        raise CellError(f"decoder must be a directory or model name, got {p['decoder']!r}", field="params.decoder")
    for name in ("epochs", "batch_size", "train_seed", "max_new_tokens"):
        v = p[name]
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name == "train_seed" else 1):
            raise CellError(
                f"{name} must be an integer >= {0 if name == 'train_seed' else 1}, got {v!r}", field=f"params.{name}"
            )
    etas = p["train_etas"]
    if etas is not None and not (
        isinstance(etas, list) and etas and all(positive(e) for e in etas) and len(set(etas)) == len(etas)
    ):
        raise CellError(
            f"train_etas must be a list of distinct finite numbers > 0 or null, got {etas!r}", field="params.train_etas"
        )
    lr = p["lr"]
    if not positive(lr):
        raise CellError(f"lr must be a finite number > 0, got {lr!r}", field="params.lr")


def _train_etas(p: dict) -> list[float]:
    return [float(e) for e in (p["train_etas"] or [p["eta"]])]


def _mechanism_spec(p: dict) -> dict:
    """The learned attacker's training mechanism as data (what its run records): name, the training etas, table."""
    pos = p.get("pos")
    spec = {"name": "t2t" if pos is None else "pct2t", "etas": _train_etas(p), "table": p.get("table", "default")}
    if pos is not None:
        spec |= {"pos": pos, "tagger": p.get("tagger", "textblob")}
    if p.get("oov_word") is not None:
        spec["oov_word"] = p["oov_word"]
    return spec


def _learned_spec(cell: Any, p: dict) -> dict:
    """The learned attacker's training config as plain data
    (:class:`~textfree.attacks.substitution_training.InverterConfig`)."""
    mech = _mechanism_spec(p)
    limit = p.get("train_limit")
    return {
        "out": p["out"].format(mechanism=mech["name"], eta=p["eta"]),
        "decoder": p["decoder"],
        "mechanism": mech,
        "data": [f"{cell.dataset}:train" + (f"[:{limit}]" if limit else "")],
        "epochs": p["epochs"],
        "batch_size": p["batch_size"],
        "lr": float(p["lr"]),
        "seed": p["train_seed"],
    }


def _columns(cell: Any):
    """The cell's column mapping (``params.columns``), or None for a registered Pri-* dataset."""
    from ...data.table import ColumnMap

    columns = (cell.params or {}).get("columns")
    if columns is None:
        return None
    try:
        return ColumnMap.from_dict(columns)
    except (ValueError, TypeError) as exc:
        raise CellError(str(exc), field="params.columns") from None


def _validate(cell: Any, points: list[dict]) -> None:
    if _columns(cell) is None:
        require_ppft_dataset(cell, "substitution_inversion", " (its PPFT train part is the attacker's text), or a path "
                             "with params.columns")  # fmt: skip
    elif cell.dataset is None:
        raise CellError("params.columns maps the columns of `dataset` (a path or hub name): give it", field="dataset")
    share = (cell.params or {}).get("test_share", TEST_SHARE)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share < 1:
        raise CellError(f"test_share must be a number in (0, 1), got {share!r}", field="params.test_share")
    if cell.mechanism is not None:
        raise CellError(
            "substitution_inversion takes the mechanism in params (eta, pos, table), not `mechanism`", field="mechanism"
        )
    runs: dict[str, dict] = {}
    for point in points:
        p, attacks, _ = _settings(cell, point)
        if "learned" in attacks:
            spec = _learned_spec(cell, p)
            if runs.setdefault(spec["out"], spec) != spec:
                raise CellError(
                    f"two grid points would train different inverters into {spec['out']!r}; put {{eta}} "
                    "(and what else varies) in `out`",
                    field="params.out",
                )


def _texts(cell: Any, part: str, limit: int | None) -> list[str]:
    """The distinct private texts of ``part`` ("train": the attacker's, "heldout": the evaluated): the PPFT split of a
    Pri-* dataset, or a table's texts split by a stable hash of each text (``params.test_share`` evaluated)."""
    from ...data import load_dataset, ppft_split
    from ...data.splits import stable_unit_interval

    columns = _columns(cell)
    if columns is None:
        texts = list(dict.fromkeys(record_private_text(r) for r in ppft_split(cell.dataset)[part]))
    else:
        share = (cell.params or {}).get("test_share", TEST_SHARE)
        rows = load_dataset(cell.dataset, split=cell.split, columns=columns)
        every = list(dict.fromkeys(record_private_text(r) for r in rows))
        texts = [t for t in every if (stable_unit_interval(t, _SPLIT_SALT) < share) == (part == "heldout")]
    return texts[:limit] if limit else texts


def _learned_inverter(cell: Any, p: dict, train: list[str], context: RunContext):
    """(inverter, training metrics): a finished run with the same config is reused, else trained; once per config."""
    spec = _learned_spec(cell, p)
    mechanisms = [t2t_mechanism(p | {"eta": eta}, context) for eta in _train_etas(p)]

    def train_or_reuse():
        from ...atomic import read_json
        from ...attacks.substitution_learned import SubstitutionInverter
        from ...attacks.substitution_training import InverterConfig, train_substitution_inverter
        from .ppft import _reusable, _train_metrics

        cfg = InverterConfig(**spec, progress=False)
        run = Path(cfg.out)
        if _reusable(run, cfg.to_dict(), {"progress", "resume", "cpu", "log_every"}):
            context.logger.info("%s: reusing the finished inverter %s", cell.name, run)
            return SubstitutionInverter.load(run), _train_metrics(read_json(run / "summary.json"), True)
        summary = train_substitution_inverter(cfg, mechanisms, train)
        return summary.pop("model"), _train_metrics(summary, False)

    return context.cached(("learned", json.dumps(spec, sort_keys=True)), train_or_reuse)


@register_cell_kind(
    "substitution_inversion",
    metrics=SUBSTITUTION_METRICS,
    params=SUBSTITUTION_PARAMS,
    validate=_validate,
    help="Word recovery and ROUGE-L of a reader of T2T / PCT2T text: identity, a noise-aware channel "
    "inverter and a noise-aware learned (decoder) inverter.",
)
def substitution_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    p, attacks, threat = _settings(cell, point)
    with torch_threads(p.get("threads")):
        return _run(cell, p, attacks, threat, seed, context)


def _run(
    cell: Any, p: dict, attacks: list[str], threat: ThreatModel, seed: int, context: RunContext
) -> dict[str, float]:
    from ...substitution.text import split_text

    mech = t2t_mechanism(p, context)
    texts = context.cached(("eval", cell.split, cell.limit), lambda: _texts(cell, "heldout", cell.limit))
    original = [split_text(t)[1::2] for t in texts]
    released = mech.privatize_detailed(texts, generator=seeded_generator(seed, warn=False))
    guesses, train, extra = {}, None, {}
    blackbox = _blackbox_config(p)
    if "channel" in attacks or "learned" in attacks or blackbox is not None:
        train = context.cached(("train", p.get("train_limit")), lambda: _texts(cell, "train", p.get("train_limit")))
        overlap = set(train) & set(texts)
        if overlap:
            raise ValueError(f"the attacker's training text holds {len(overlap)} evaluated texts")
    if "identity" in attacks:
        guesses["identity"] = substitution_identity_attack(released.output_words, threat=threat)
    if "channel" in attacks:
        inverter = ChannelInverter.fit(
            mech, train, rounds=p.get("rounds", 3), generator=seeded_generator(seed + 104_729, warn=False)
        )
        guesses["channel"] = substitution_channel_attack(released.output_words, inverter, threat=threat)
    if "learned" in attacks:
        learned, extra = _learned_inverter(cell, p, train, context)
        recon = substitution_learned_attack(released.texts, learned, threat=threat, max_new_tokens=p["max_new_tokens"])
        for text, noisy, guess in list(zip(texts, released.texts, recon))[:2]:
            context.logger.info(
                "%s eta=%s seed %d\n  original: %s\n  released: %s\n  learned:  %s",
                cell.name,
                p["eta"],
                seed,
                text,
                noisy,
                guess,
            )
        guesses["learned"] = [split_text(g)[1::2] for g in recon]
    if blackbox is not None:
        bb_guesses, extra_bb = _blackbox(p, blackbox, mech, train, original, released.output_words, threat, context)
        guesses |= bb_guesses
        extra = extra | extra_bb
    out: dict[str, float] = {}
    refs = [" ".join(w) for w in original]
    for name, guess in guesses.items():
        # identity and channel swap words in place (positions align); a generated guess is aligned first, and so
        # are the black-box readers' (the same count for them: they keep the word count)
        recovery = word_recovery if name in ("identity", "channel") else aligned_word_recovery
        out[f"word_recovery_{name}"] = recovery(original, guess)
        out[f"rouge_l_{name}"] = sum(rouge_l(" ".join(g), r).f1 for g, r in zip(guess, refs)) / len(refs)
    for m in ("word_recovery", "rouge_l"):
        out[f"{m}_best"] = max(out[f"{m}_{a}"] for a in guesses)
    if train is not None:
        prior = context.cached(("prior_text", p.get("train_limit")), lambda: medoid_text(train))
        prior_words = split_text(prior)[1::2]
        out["word_recovery_prior"] = aligned_word_recovery(original, [prior_words] * len(original))
        out["rouge_l_prior"] = sum(rouge_l(" ".join(prior_words), r).f1 for r in refs) / len(refs)
    out |= t2t_guarantee(mech, released) | {"n_texts": float(len(texts)), "n_words": float(released.n_words)}
    return out | extra


def _blackbox(p, config, mech, train, original, output_words, threat, context) -> tuple[dict, dict[str, float]]:
    """The black-box readers' guesses and the autoencoder's MSE figures; the two inverters are trained once per eta
    (and training config) and reused across the cell's evaluation seeds."""
    from ...attacks.substitution_blackbox import (
        substitution_autoencoder_attack,
        substitution_mlp_attack,
        train_word_inverter,
        vector_mse,
    )

    seed = p.get("blackbox_seed", 0)

    def train_both():
        generator = seeded_generator(seed, warn=False)
        return {kind: train_word_inverter(kind, mech, train, config, generator=generator) for kind in BLACKBOX}

    release = json.dumps({k: p.get(k) for k in ("eta", "pos", "table", "tagger", "oov_word")}, sort_keys=True)
    key = ("blackbox", release, config, seed, p.get("train_limit"))
    models = context.cached(key, train_both)
    guesses = {
        "mlp": substitution_mlp_attack(output_words, models["mlp"], mech.table, threat=threat),
        "autoencoder": substitution_autoencoder_attack(output_words, models["autoencoder"], mech.table, threat=threat),
    }
    mse, raw = vector_mse(models["autoencoder"], mech.table, original, output_words)
    return guesses, {"mse_autoencoder": mse, "mse_released": raw}
