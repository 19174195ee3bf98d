"""Cell kind ``substitution_inversion``: what a reader of T2T / PCT2T privatized text recovers (RAPT's threat).

The client privatizes each evaluated private text with T2T (``params.pos`` null) or PCT2T (``params.pos`` a list of
categories or "default") over ``params.table`` at ``params.eta`` (grid it), with the cell seed. Attacks
(:mod:`textfree.attacks.substitution`): ``identity`` (the released text itself) and ``channel`` (a word-level
inverter fitted on ``params.rounds`` runs of the same mechanism over the attacker's in-domain text, the PPFT *train*
part; needs ``training_text: in_domain``, ``knows_mechanism``, ``knows_parameters`` in ``attack.threat``).

Metrics: ``word_recovery_{identity,channel,best}`` (share of original words recovered at their position: the token
recovery of the cross matrix), ``rouge_l_{identity,channel,best}`` (mean ROUGE-L F1 of the guess), ``replacement_rate``
(substituted words that changed), ``kept_rate`` (words outside the table, released verbatim and not covered by the
guarantee), ``word_epsilon`` (eta x D_max: one word's worst case), ``prompt_epsilon`` (mean over texts of substituted
words x word_epsilon), ``n_texts``, ``n_words``.
"""

from __future__ import annotations

import math
from typing import Any

from ...attacks.substitution import (
    SUBSTITUTION_CHANNEL_REQUIRES,
    ChannelInverter,
    substitution_channel_attack,
    substitution_identity_attack,
    word_recovery,
)
from ...attacks.threat import ThreatModel
from ...metrics.text import rouge_l
from ...rng import seeded_generator
from ..cell import CellError
from ..inputs import record_private_text
from ..registry import RunContext, register_cell_kind
from ._grant import granted_threat, require_ppft_dataset

__all__ = ["substitution_inversion", "SUBSTITUTION_METRICS", "SUBSTITUTION_PARAMS"]

ATTACKS = ("identity", "channel")
SUBSTITUTION_METRICS = tuple(f"{m}_{a}" for m in ("word_recovery", "rouge_l") for a in ATTACKS + ("best",)) + (
    "replacement_rate", "kept_rate", "word_epsilon", "prompt_epsilon", "n_texts", "n_words")
SUBSTITUTION_PARAMS = {
    "eta": "the L2-Laplace parameter of the word embeddings (grid it)",
    "pos": "null: T2T; a list of categories (e.g. [NOUN, VERB, PRON, ADP]) or 'default': PCT2T",
    "table": "'default' (all-MiniLM-L6-v2's input embeddings), a Hugging Face name/path, or 'glove:PATH'",
    "tagger": "PCT2T tagger: textblob (default) or nltk",
    "attacks": "identity and/or channel (default both)",
    "rounds": "channel: runs of the mechanism over the attacker's training text (default 3)",
    "train_limit": "channel: at most this many attacker training texts (default all)",
}


def _settings(cell: Any, point: dict) -> tuple[dict, list[str], ThreatModel]:
    resolved = cell.resolve(point)
    p = dict(resolved.params)
    eta = p.get("eta")
    if isinstance(eta, bool) or not isinstance(eta, (int, float)) or not (eta > 0 and math.isfinite(eta)):
        raise CellError(f"eta must be a finite number > 0, got {eta!r}", field="params.eta")
    attacks = p.get("attacks", list(ATTACKS))
    if not isinstance(attacks, list) or not attacks or any(a not in ATTACKS for a in attacks) or len(set(attacks)) != len(attacks):
        raise CellError(f"attacks must be distinct values from {list(ATTACKS)}, got {attacks!r}", field="params.attacks")
    pos = p.get("pos")
    if pos is not None and pos != "default" and not (isinstance(pos, list) and pos and all(isinstance(c, str) for c in pos)):
        raise CellError(f"pos must be null, 'default' or a list of categories, got {pos!r}", field="params.pos")
    for name in ("rounds", "train_limit"):
        v = p.get(name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise CellError(f"{name} must be an integer >= 1, got {v!r}", field=f"params.{name}")
    needs = SUBSTITUTION_CHANNEL_REQUIRES if "channel" in attacks else ThreatModel()
    threat = granted_threat(resolved.attack, "substitution_inversion", "substitution_channel", needs,
                            "; grant more in `attack.threat` or drop the channel attack")
    return p, attacks, threat


def _validate(cell: Any, points: list[dict]) -> None:
    require_ppft_dataset(cell, "substitution_inversion", " (its PPFT train part is the attacker's text)")
    if cell.mechanism is not None:
        raise CellError("substitution_inversion takes the mechanism in params (eta, pos, table), not `mechanism`", field="mechanism")
    for point in points:
        _settings(cell, point)


def _texts(cell: Any, part: str, limit: int | None) -> list[str]:
    from ...data import ppft_split

    texts = list(dict.fromkeys(record_private_text(r) for r in ppft_split(cell.dataset)[part]))
    return texts[:limit] if limit else texts


def _mechanism(p: dict, context: RunContext):
    from ...substitution.cli_support import build_t2t

    from ...substitution.t2t import DEFAULT_POS_CATEGORIES

    pos = p.get("pos")
    pos_arg = None if pos is None else ",".join(DEFAULT_POS_CATEGORIES if pos == "default" else pos)
    key = ("t2t", p.get("table", "default"), pos_arg, p.get("tagger", "textblob"))
    base = context.cached(key, lambda: build_t2t(table=p.get("table", "default"), eta=1.0, pos=pos_arg, tagger=p.get("tagger", "textblob")))
    return base.with_eta(float(p["eta"]))


@register_cell_kind("substitution_inversion", metrics=SUBSTITUTION_METRICS, params=SUBSTITUTION_PARAMS, validate=_validate,
                    help="Word recovery and ROUGE-L of a reader of T2T / PCT2T text: identity and a noise-aware channel inverter.")
def substitution_inversion(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    from ...substitution.text import split_text

    p, attacks, threat = _settings(cell, point)
    mech = _mechanism(p, context)
    texts = context.cached(("eval", cell.split, cell.limit), lambda: _texts(cell, "heldout", cell.limit))
    original = [split_text(t)[1::2] for t in texts]
    released = mech.privatize_detailed(texts, generator=seeded_generator(seed, warn=False))
    guesses = {}
    if "identity" in attacks:
        guesses["identity"] = substitution_identity_attack(released.output_words, threat=threat)
    if "channel" in attacks:
        train = context.cached(("train", p.get("train_limit")), lambda: _texts(cell, "train", p.get("train_limit")))
        overlap = set(train) & set(texts)
        if overlap:
            raise ValueError(f"the attacker's training text holds {len(overlap)} evaluated texts")
        inverter = ChannelInverter.fit(mech, train, rounds=p.get("rounds", 3), generator=seeded_generator(seed + 104_729, warn=False))
        guesses["channel"] = substitution_channel_attack(released.output_words, inverter, threat=threat)
    out: dict[str, float] = {}
    refs = [" ".join(w) for w in original]
    for name, guess in guesses.items():
        out[f"word_recovery_{name}"] = word_recovery(original, guess)
        out[f"rouge_l_{name}"] = sum(rouge_l(" ".join(g), r).f1 for g, r in zip(guess, refs)) / len(refs)
    for m in ("word_recovery", "rouge_l"):
        out[f"{m}_best"] = max(out[f"{m}_{a}"] for a in guesses)
    word_eps = mech.privacy_loss_per_word().epsilon
    out |= {"replacement_rate": released.replacement_rate, "kept_rate": released.n_kept / released.n_words,
            "word_epsilon": word_eps,
            "prompt_epsilon": word_eps * sum(released.substituted_per_text) / len(texts),
            "n_texts": float(len(texts)), "n_words": float(released.n_words)}
    return out
