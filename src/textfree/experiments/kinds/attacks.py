"""Cell kind ``token_inversion``: nearest neighbour and BeamClean against token-level embedding noise.

The client releases one noisy vector per token: the row of the attacked model's input embedding table for that
token plus the cell's mechanism noise (``mechanism``: ``l2_laplace``, ``gaussian`` or ``clipped``), drawn per token
from a generator seeded with the cell seed. The attacker gets what ``attack.threat`` grants and tries to recover
the token ids.

Inputs (once per run, cached):

* texts: inline ``texts``, or one private text per record of ``dataset`` (``mcqa_prompt(record).private`` for
  MCQA records): a registered name, or a path / hub dataset in any layout with ``params.columns`` (``{text: COLUMN,
  pii: COLUMN, names: [...]}``: :class:`~textfree.data.table.ColumnMap`; a PII column gives the PII attack below its
  units). For a Pri-* dataset, ``split: heldout`` / ``split: train`` take that part of the PPFT split
  (:func:`textfree.data.ppft_split`); other splits go to ``load_dataset``. Sentence-pair records (MRPC: ``text_a``,
  ``text_b``) give both sentences, in order, as two texts. Repeated texts are dropped (Pri-DDX repeats
  the same patient description with other distractors), then ``limit`` texts are kept.
* token ids: the encoder's tokenizer without special tokens, cut to ``params.max_tokens`` (default 48), then wrapped
  with the tokenizer's special tokens (MiniLM: ``[CLS] ... [SEP]``) as the payload carries them. Every position is
  noised and attacked, but **special tokens are not scored** (they sit at fixed positions; an attacker knows them
  without any attack): recovery is over the text's own tokens only.
* table: the input embedding table of ``encoder`` (``default``: all-MiniLM-L6-v2, 30,522 x 384), loaded as an
  :class:`~textfree.encoders.EmbeddingTableEncoder`.

``attack`` section (plain data; ``attack.<name>`` grid keys override it; parsed and checked by
:mod:`._attack_spec`)::

    threat:   {embedding_table: true, training_text: public, knows_mechanism: true, knows_parameters: true}
    attacks:  [nn_l2, nn_cosine, beamclean]       # default: these three; also mlp, autoencoder (RAPT IV-A1)
    beamclean: {beam_width: 20, candidates: 1024, family: auto, noise: [estimated, oracle], em_iters: 3,
                estimate_mean: false, prior_weight: 1.0, chunk_size: 8192}
                # family: auto (the mechanism's, needs knows_mechanism) or the attacker's own guess:
                # gaussian, l1_laplace, l2_laplace, vmf (direction only, for clipped noise)
    prior:    {kind: bigram, sources: [{dataset: alpaca}, {dataset: gsm8k, split: train}], k: 0.1,
               training_text: public}             # or inline texts: [...]; {kind: uniform};
                                                  # {kind: causal_lm, path: runs/decoder-small,
                                                  #  mapping: first_subtoken | one_to_one, unmapped_mass: 0}
    blackbox: {sources: [{dataset: alpaca}, {dataset: gsm8k, split: train}], vocab_size: 4096, samples: 50000,
               hidden: 256, epochs: 4}            # mlp / autoencoder: public text (or inline texts) to query

``mlp`` and ``autoencoder`` (:mod:`textfree.attacks.blackbox`) need ``encoder_queries``, public training text and
the mechanism with its parameter: the attacker queries the clean vectors of its public tokens and trains on them
noised by the mechanism; they report ``recovery_mlp``, ``recovery_autoencoder`` and the autoencoder's
``autoencoder_mse`` beside the raw ``noisy_mse`` (mean squared error against the clean vectors, per coordinate).

The grant is checked twice: at load time (``validate``: every attack of every grid point against
:func:`~textfree.attacks.check_grant`; a cell that asks for more than it grants is a :class:`CellError` naming the
missing capability) and by each attack when it runs. Oracle noise needs ``knows_parameters``; its metrics carry
``oracle`` in their name and estimated ones ``estimated``: the two are never mixed.

Bigram priors are fitted on the ``sources`` / ``texts`` tokenised with the table's tokenizer (with special tokens,
as the payload has them). With ``training_text: public`` a source may not be a Pri-* dataset (that is in-domain
text); ``training_text: in_domain`` allows the *train* part of the PPFT split of the evaluated dataset (disjoint
from ``heldout`` by construction). Never the evaluated texts themselves: any prior text equal to an evaluated one is
an error.

Metrics (each only when its attack runs):

* ``recovery_nn_l2``, ``recovery_nn_cosine``, ``recovery_nn_best`` (the larger of the two that ran);
  ``recovery_beamclean_estimated``, ``recovery_beamclean_oracle``: token recovery rate over scored tokens.
* ``beamclean_over_nn``, ``beamclean_oracle_over_nn``: BeamClean recovery / ``recovery_nn_best`` (NaN when NN is 0).
* ``scale_rel_error_estimated`` (mean signed) and ``scale_abs_rel_error_estimated`` (mean absolute) relative error of
  BeamClean's final per-sequence noise scale against the true one (Gaussian sigma, L2-Laplace 1/eps; a clipped
  mechanism's inner one), when the surrogate family is the mechanism's own.
* ``epsilon_unit``: the mechanism's privacy loss per unit L2 distance (``privacy_loss(1)``: eps for L2-Laplace; for
  the Gaussian, epsilon at its delta); ``token_epsilon`` / ``token_delta``: the formal guarantee of one token, the
  loss at the table's exact diameter (``privacy_loss(diameter)``: any two tokens are at most that far apart);
  ``table_diameter``.
* ``noise_norm`` (mean ||released - clean|| per token), ``expected_noise_norm`` (NaN for mechanisms without one).
* ``seconds_per_sequence_nn`` (both NN metrics), ``seconds_per_sequence_beamclean_estimated`` / ``_oracle``.
* ``n_sequences``, ``n_tokens`` (scored tokens).
* ``prior_coverage`` (a ``causal_lm`` prior with ``mapping: one_to_one``): the share of scored tokens that the
  one-to-one mapping covers. With ``unmapped_mass: 0`` (the paper's restricted vocabulary) the other tokens are never
  candidates, so it bounds BeamClean's recovery; it is a diagnostic, the attacker never sees the evaluated tokens.
* PII attack (datasets whose records carry PII units: PUPA): the guessed ids of each sequence's scored positions are
  decoded to text and :func:`~textfree.metrics.privacy.pii_recovery` counts the record's PII units found in it:
  ``pii_exact_nn_best`` / ``pii_fuzzy_nn_best`` (the stronger NN metric's guesses), ``pii_exact_beamclean_<noise>``,
  ``pii_fuzzy_beamclean_<noise>`` (micro shares); ``n_pii_units``. Only units the released (cut) text still
  contains count: a unit beyond ``max_tokens`` was never released.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from dataclasses import dataclass
from typing import Any

import torch

from ...attacks import (
    BigramPrior,
    CausalLMPrior,
    NearestNeighbourInverter,
    ThreatModelError,
    UniformPrior,
    beamclean_attack,
    family_of,
    nearest_neighbour_attack,
    oracle_noise,
)
from ...attacks.blackbox import BlackBoxConfig, blackbox_attack, public_vocab, train_blackbox
from ...data.registry import is_ppft_dataset
from ...mechanisms import mechanism_from_dict
from ...metrics import token_recovery_rate
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import load_records, load_texts, record_private_text
from ..registry import RunContext, register_cell_kind
from ._attack_spec import (  # noqa: F401  (re-exported: the attack section's names stay importable from here)
    BLACKBOX_ATTACKS,
    DEFAULT_ATTACKS,
    NOISE_MODES,
    PRIOR_KINDS,
    TOKEN_ATTACKS,
    InversionAttackSpec,
    _check_params,
    _check_prior_sources,
    parse_attack_section,
)
from ._threads import torch_threads
from ._tokens import token_guarantee, token_sequences, token_table

__all__ = [
    "TOKEN_INVERSION_METRICS",
    "TOKEN_INVERSION_PARAMS",
    "TOKEN_ATTACKS",
    "InversionAttackSpec",
    "parse_attack_section",
    "token_inversion",
]

PPFT_PARTS = ("train", "heldout")

TOKEN_INVERSION_METRICS = (
    "recovery_nn_l2",
    "recovery_nn_cosine",
    "recovery_nn_best",
    "recovery_beamclean_estimated",
    "recovery_beamclean_oracle",
    "beamclean_over_nn",
    "beamclean_oracle_over_nn",
    "scale_rel_error_estimated",
    "scale_abs_rel_error_estimated",
    "epsilon_unit",
    "token_epsilon",
    "token_delta",
    "table_diameter",
    "noise_norm",
    "expected_noise_norm",
    "seconds_per_sequence_nn",
    "seconds_per_sequence_beamclean_estimated",
    "seconds_per_sequence_beamclean_oracle",
    "n_sequences",
    "n_tokens",
    "prior_coverage",
    "pii_exact_nn_best",
    "pii_fuzzy_nn_best",
    "pii_exact_beamclean_estimated",
    "pii_fuzzy_beamclean_estimated",
    "pii_exact_beamclean_oracle",
    "pii_fuzzy_beamclean_oracle",
    "n_pii_units",
    "recovery_mlp",
    "recovery_autoencoder",
    "autoencoder_mse",
    "noisy_mse",
)

TOKEN_INVERSION_PARAMS = {
    "max_tokens": "cut each text to this many tokens before the special tokens are added (int >= 1; default 48)",
    "columns": "a path or hub dataset in any layout: {text: COLUMN, pii: COLUMN, names: [...]} (the CLI's "
    "--text-column, --pii-column, --columns)",
    "threads": "torch threads while the kind runs (int >= 1, or null to leave torch's setting; BeamClean: 1 is "
    "fastest)",
}


def _validate(cell: Any, points: list[dict]) -> None:
    if cell.dataset is None and cell.texts is None:
        raise CellError("the token_inversion kind needs a `dataset` or inline `texts`", field="texts")
    if cell.mechanism is None:
        raise CellError(
            "the token_inversion kind needs a `mechanism` (l2_laplace, gaussian or clipped)", field="mechanism"
        )
    _columns(cell)
    for point in points:
        resolved = cell.resolve(point)
        _check_params({k: v for k, v in resolved.params.items() if k != "columns"})
        spec = parse_attack_section(resolved.attack)
        try:
            spec.check()
        except ThreatModelError as exc:
            raise CellError(f"{exc}; grant more in `attack.threat` or drop the attack", field="attack.threat") from None
        _check_prior_sources(spec.prior)
        if "beamclean" in spec.attacks and (spec.family == "auto" or "oracle" in spec.noise):
            try:
                family_of(mechanism_from_dict(resolved.mechanism))
            except ValueError as exc:
                raise CellError(f"beamclean with family 'auto' or oracle noise: {exc}", field="mechanism") from None


# ------------------------------------------------------------------------------------------------- inputs
def _columns(cell: Any) -> Any:
    """The cell's column mapping (``params.columns``: a path or hub dataset in another layout), or None."""
    from ...data.table import ColumnMap

    columns = (cell.params or {}).get("columns")
    if columns is None:
        return None
    if cell.dataset is None or not isinstance(columns, dict):
        raise CellError(
            "columns maps the columns of a `dataset` file: a mapping {text: COLUMN, ...}", field="params.columns"
        )
    try:
        return ColumnMap.from_dict(columns)
    except ValueError as exc:
        raise CellError(str(exc), field="params.columns") from None


def _records(cell: Any) -> list[Any]:
    """Every record of the cell's dataset (its split), through its column mapping when it has one."""
    columns = _columns(cell)
    if columns is None:
        return load_records(dataclasses.replace(cell, limit=None))
    from ...data import load_dataset

    return load_dataset(cell.dataset, split=cell.split, columns=columns)


def _cell_texts(cell: Any) -> list[str]:
    """The evaluated private texts, repeats dropped, then the first ``limit``."""
    if cell.texts is None and cell.split in PPFT_PARTS and is_ppft_dataset(cell.dataset):
        from ...data import ppft_split

        texts = [record_private_text(r) for r in ppft_split(cell.dataset)[cell.split]]
    elif cell.texts is None and _columns(cell) is not None:
        texts = [record_private_text(r) for r in _records(cell)]
        texts = [t for t in texts if t.strip()]
    elif cell.texts is None and cell.dataset is not None and (records := _records(cell)) and _is_pair(records[0]):
        texts = [t for r in records for t in (r.text_a, r.text_b) if t and t.strip()]  # sentence pairs: both
    else:
        texts = load_texts(dataclasses.replace(cell, limit=None))
    texts = list(dict.fromkeys(texts))
    return texts[: cell.limit] if cell.limit is not None else texts


def _is_pair(record: Any) -> bool:
    """A sentence-pair record (MRPC, RTE, QQP: ``text_a`` / ``text_b``): each sentence is one private text."""
    return hasattr(record, "text_a") and hasattr(record, "text_b")


@dataclass
class _Inputs:
    table: torch.Tensor  # [V, d] float32
    tokenizer: Any
    sequences: list[torch.Tensor]  # token ids per text, special tokens included
    scored: list[torch.Tensor]  # bool per position: True for the text's own tokens
    diameter: float
    texts: list[str]
    pii: list[list[str]] | None = None  # PII units of each text that survive the max_tokens cut (PUPA, Presidio)


def _inputs(cell: Any, max_tokens: int, context: RunContext) -> _Inputs:
    def build() -> _Inputs:
        texts = _cell_texts(cell)
        tt = token_table(cell, context)
        seqs, scored = token_sequences(tt.tokenizer, texts, max_tokens)
        context.logger.info(
            "token_inversion: %d texts, %d scored tokens, table %s",
            len(texts),
            int(sum(s.sum() for s in scored)),
            tuple(tt.table.shape),
        )
        pii = _released_pii(cell, texts, [_decode(tt.tokenizer, q, m) for q, m in zip(seqs, scored)])
        return _Inputs(tt.table, tt.tokenizer, seqs, scored, tt.diameter, texts, pii)

    return context.cached(("inputs", max_tokens), build)


def _decode(tokenizer: Any, ids: torch.Tensor, scored: torch.Tensor) -> str:
    """The text of a sequence's scored positions (its own tokens, special tokens dropped)."""
    return tokenizer.decode(ids[scored].tolist())


def _released_pii(cell: Any, texts: list[str], released: list[str]) -> list[list[str]] | None:
    """Per text, the PII units of its record (PUPA ``pii``) that the released (cut) text still contains; None for
    datasets without PII units. A unit cut off by ``max_tokens`` was never released and is not counted."""
    if cell.dataset is None or cell.texts is not None or is_ppft_dataset(cell.dataset):
        return None  # Pri-* records carry attributes, not PII units
    from ...metrics.privacy import best_window_similarity

    units: dict[str, list[str]] = {}
    for record in _records(cell):
        if getattr(record, "pii", None) is None:
            return None
        units.setdefault(record_private_text(record), list(record.pii))
    return [[u for u in units.get(t, []) if best_window_similarity(u, r) == 1.0] for t, r in zip(texts, released)]


def _pii_metrics(data: "_Inputs", ids: list[torch.Tensor], name: str) -> dict[str, float]:
    """``pii_exact_<name>`` / ``pii_fuzzy_<name>``: the share of released PII units found in the decoded guesses."""
    from ...metrics.privacy import pii_recovery

    if data.pii is None or not any(data.pii):
        return {}
    recon = [_decode(data.tokenizer, g, m) for g, m in zip(ids, data.scored)]
    r = pii_recovery(data.pii, recon)
    return {f"pii_exact_{name}": r["exact"]["micro"], f"pii_fuzzy_{name}": r["fuzzy"]["micro"]}


def _public_texts(record: Any) -> list[str]:
    """The text of one prior-training record (instruction records: instruction, input and output)."""
    if hasattr(record, "instruction"):
        return [" ".join(x for x in (record.instruction, record.input, record.output) if x)]
    if hasattr(record, "text_a"):
        return [record.text_a, record.text_b]
    return [record_private_text(record)]


def _prior_texts(spec: dict) -> list[str]:
    if spec.get("texts") is not None:
        return list(spec["texts"])
    from ...data import load_dataset, ppft_split

    texts: list[str] = []
    for src in spec["sources"]:
        if is_ppft_dataset(src["dataset"]):  # validated: in-domain, train part only
            records = ppft_split(src["dataset"])["train"]
        else:
            records = load_dataset(src["dataset"], split=src.get("split"), limit=src.get("limit"))
        records = records[: src["limit"]] if src.get("limit") else records
        texts += [t for r in records for t in _public_texts(r) if t and t.strip()]
    return texts


def _prior(spec: dict, inputs: _Inputs, context: RunContext):
    def build():
        v = inputs.table.shape[0]
        if spec["kind"] == "uniform":
            return UniformPrior(v)
        training_text = spec.get("training_text", "public")
        if spec["kind"] == "causal_lm":
            prior = CausalLMPrior.from_pretrained(
                spec["path"],
                target_tokenizer=inputs.tokenizer,
                training_text=training_text,
                batch_size=spec.get("batch_size", 64),
                mapping=spec.get("mapping", "first_subtoken"),
                unmapped_mass=float(spec.get("unmapped_mass", 0.0)),
            )
            if prior.token_mapping is not None:
                context.logger.info(
                    "one-to-one prior mapping: %d of %d target tokens mapped", prior.token_mapping.size, v
                )
            return prior
        texts = _prior_texts(spec)
        overlap = set(texts) & set(inputs.texts)
        if overlap:
            raise ValueError(
                f"the prior's training text contains {len(overlap)} of the evaluated texts, e.g. "
                f"{next(iter(overlap))[:80]!r}"
            )
        t0 = time.perf_counter()
        prior = BigramPrior.from_texts(
            texts, inputs.tokenizer, v, k=float(spec.get("k", 0.1)), training_text=training_text
        )
        context.logger.info(
            "bigram prior: %d texts, %d pairs, %.1fs", len(texts), len(prior._val), time.perf_counter() - t0
        )
        return prior

    return context.cached(("prior", json.dumps(spec, sort_keys=True)), build)


# ------------------------------------------------------------------------------------------------ the kind
def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else math.nan


@register_cell_kind(
    "token_inversion",
    metrics=TOKEN_INVERSION_METRICS,
    params=TOKEN_INVERSION_PARAMS,
    validate=_validate,
    help="Token recovery of nearest neighbour and BeamClean against per-token embedding noise, under a declared threat "
    "model.",
)
def token_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Noise every token embedding of the cell's texts, run the granted attacks, score token recovery."""
    resolved = cell.resolve(point)
    _check_params(resolved.params)
    spec = parse_attack_section(resolved.attack)
    spec.check()  # the attacks check again when they run
    with torch_threads(resolved.params.get("threads")):
        return _run(cell, resolved, spec, seed, context)


def _run(cell: Any, resolved: Any, spec: InversionAttackSpec, seed: int, context: RunContext) -> dict[str, float]:
    mech = mechanism_from_dict(resolved.mechanism)
    data = _inputs(cell, resolved.params.get("max_tokens", 48), context)
    table, n = data.table, len(data.sequences)
    lengths = [len(s) for s in data.sequences]
    gold, scored = torch.cat(data.sequences), torch.cat(data.scored)
    clean = table[gold].to(torch.float64)
    released = mech.sample(clean, generator=seeded_generator(seed, warn=False)).to(torch.float32)
    d = table.shape[1]
    out: dict[str, float] = {
        **token_guarantee(mech, data.diameter),
        "noise_norm": float((released.to(torch.float64) - clean)[scored].norm(dim=1).mean()),
        "expected_noise_norm": mech.expected_noise_norm(d) if hasattr(mech, "expected_noise_norm") else math.nan,
        "n_sequences": float(n),
        "n_tokens": float(scored.sum()),
    }
    if data.pii is not None:
        out["n_pii_units"] = float(sum(len(u) for u in data.pii))
    nn_metrics = [TOKEN_ATTACKS[a] for a in spec.attacks if TOKEN_ATTACKS[a] is not None]
    if nn_metrics:
        inverter = context.cached("nn_inverter", lambda: NearestNeighbourInverter(table))
        t0 = time.perf_counter()
        nn = nearest_neighbour_attack(
            released, inverter, threat=spec.threat, true_ids=gold, mask=scored, metrics=nn_metrics
        )
        out["seconds_per_sequence_nn"] = (time.perf_counter() - t0) / n
        for metric, rate in nn.recovery.items():
            out[f"recovery_nn_{metric}"] = rate
        out["recovery_nn_best"] = max(nn.recovery.values())
        best = max(nn.recovery, key=nn.recovery.get)
        out |= _pii_metrics(data, list(nn.ids[best].split(lengths)), "nn_best")
    if "beamclean" in spec.attacks:
        prior = _prior(spec.prior, data, context)
        noisy = list(released.split(lengths))
        config = spec.config
        if getattr(prior, "token_mapping", None) is not None:  # a one-to-one cross-tokenizer prior
            out["prior_coverage"] = prior.token_mapping.coverage(gold[scored])
            if prior.excluded_ids:  # the paper's restricted vocabulary: unmapped tokens are never candidates
                config = dataclasses.replace(config, excluded_ids=tuple(config.excluded_ids) + prior.excluded_ids)
        for noise in spec.noise:
            t0 = time.perf_counter()
            res = beamclean_attack(
                noisy,
                table,
                prior,
                threat=spec.threat,
                noise=noise,
                family=spec.family,
                mechanism=mech,
                config=config,
            )
            out[f"seconds_per_sequence_beamclean_{noise}"] = (time.perf_counter() - t0) / n
            out[f"recovery_beamclean_{noise}"] = token_recovery_rate(torch.cat(res.ids), gold, scored)
            out |= _pii_metrics(data, list(res.ids), f"beamclean_{noise}")
            if "recovery_nn_best" in out:
                key = "beamclean_over_nn" if noise == "estimated" else "beamclean_oracle_over_nn"
                out[key] = _ratio(out[f"recovery_beamclean_{noise}"], out["recovery_nn_best"])
            if noise == "estimated" and _own_family(mech, res.family):
                true = oracle_noise(mech).scale
                errors = [(s.scale - true) / true for s in res.noise]
                out["scale_rel_error_estimated"] = sum(errors) / len(errors)
                out["scale_abs_rel_error_estimated"] = sum(abs(e) for e in errors) / len(errors)
    for attack in (a for a in spec.attacks if a in BLACKBOX_ATTACKS):
        model = train_blackbox(
            attack,
            lambda ids: table[ids],
            *_public_vocab(spec.blackbox, data, context),
            mech,
            BlackBoxConfig(**{k: v for k, v in spec.blackbox.items() if k not in ("sources", "texts")}),
            generator=seeded_generator(seed + 1_000_003, warn=False),
        )
        res = blackbox_attack(model, released, threat=spec.threat, clean=clean)
        out[f"recovery_{attack}"] = token_recovery_rate(res.ids, gold, scored)
        if res.mse is not None:
            out["autoencoder_mse"], out["noisy_mse"] = res.mse, res.noisy_mse
    return {name: out[name] for name in TOKEN_INVERSION_METRICS if name in out}


def _public_vocab(spec: dict, data: "_Inputs", context: RunContext) -> tuple[torch.Tensor, torch.Tensor]:
    """The black-box attacker's public tokens (its query budget): the most frequent ones of its public text."""

    def build():
        texts = _prior_texts({k: spec[k] for k in ("sources", "texts") if k in spec})
        overlap = set(texts) & set(data.texts)
        if overlap:
            raise ValueError(f"the black-box attacker's public text contains {len(overlap)} evaluated texts")
        ids = torch.tensor([i for row in data.tokenizer(texts, add_special_tokens=False)["input_ids"] for i in row])
        vocab_size = spec.get("vocab_size", BlackBoxConfig.vocab_size)
        return public_vocab(ids, vocab_size, excluded=data.tokenizer.all_special_ids)

    return context.cached(("public_vocab", json.dumps(spec, sort_keys=True)), build)


def _own_family(mech: Any, family: str) -> bool:
    try:
        return family_of(mech) == family
    except ValueError:
        return False
