"""The ``attack`` section and ``params`` of a ``token_inversion`` cell, parsed and checked.

:func:`parse_attack_section` turns a resolved ``attack`` section into an :class:`InversionAttackSpec` (the grant,
the attacks, BeamClean's settings, the prior and black-box specs); every problem is a :class:`CellError` naming the
field. The section itself is described in :mod:`.attacks`, the kind that runs it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from ...attacks import (
    FAMILIES,
    NEAREST_REQUIRES,
    BeamCleanConfig,
    ThreatModel,
    ThreatModelError,
    beamclean_requirements,
    check_grant,
)
from ...attacks.blackbox import BLACKBOX_REQUIRES, BlackBoxConfig
from ...attacks.priors import CROSS_MAPPINGS
from ...data.registry import is_ppft_dataset
from ...results.cell import CellError

__all__ = [
    "BLACKBOX_ATTACKS",
    "DEFAULT_ATTACKS",
    "NOISE_MODES",
    "PRIOR_KINDS",
    "TOKEN_ATTACKS",
    "InversionAttackSpec",
    "parse_attack_section",
]

#: Attack names a cell may list, and the nearest-neighbour metric each one runs.
TOKEN_ATTACKS = {"nn_l2": "l2", "nn_cosine": "cosine", "beamclean": None, "mlp": None, "autoencoder": None}
#: What a cell runs when it lists no attacks.
DEFAULT_ATTACKS = ("nn_l2", "nn_cosine", "beamclean")
BLACKBOX_ATTACKS = ("mlp", "autoencoder")
_BLACKBOX_KEYS = {"sources", "texts", "vocab_size", "samples", "hidden", "epochs", "batch_size", "lr"}
NOISE_MODES = ("estimated", "oracle")
PRIOR_KINDS = ("bigram", "uniform", "causal_lm")

_BEAMCLEAN_KEYS = {f.name for f in dataclasses.fields(BeamCleanConfig)} - {"excluded_ids"}
_PRIOR_KEYS = {
    "bigram": {"kind", "sources", "texts", "k", "training_text"},
    "uniform": {"kind"},
    "causal_lm": {"kind", "path", "training_text", "batch_size", "mapping", "unmapped_mass"},
}
_SOURCE_KEYS = {"dataset", "split", "limit"}


@dataclass(frozen=True)
class InversionAttackSpec:
    """A cell's ``attack`` section, checked: the grant, the attacks, BeamClean's settings and the prior spec."""

    threat: ThreatModel
    attacks: tuple[str, ...]
    config: BeamCleanConfig
    family: str
    noise: tuple[str, ...]
    prior: dict
    blackbox: dict = dataclasses.field(default_factory=dict)

    def requirement(self, attack: str, noise: str = "estimated") -> ThreatModel:
        """What ``attack`` needs (BeamClean: with this prior, family and noise mode)."""
        if attack in BLACKBOX_ATTACKS:
            return BLACKBOX_REQUIRES
        if attack != "beamclean":
            return NEAREST_REQUIRES
        return beamclean_requirements(_PriorProvenance(self.prior), noise=noise, family=self.family)

    def check(self) -> None:
        """:class:`ThreatModelError` naming every capability some attack needs and the grant lacks."""
        for attack in self.attacks:
            for noise in self.noise if attack == "beamclean" else ("estimated",):
                name = f"beamclean ({noise} noise)" if attack == "beamclean" else attack
                check_grant(name, self.requirement(attack, noise), self.threat)


class _PriorProvenance:
    """Stands in for a prior that is not built yet: only its ``training_text`` matters for the requirement."""

    def __init__(self, spec: dict):
        self.training_text = None if spec["kind"] == "uniform" else spec.get("training_text", "public")


def _fail(message: str, field: str = "attack") -> CellError:
    return CellError(message, field=field)


def _int_at_least(value: Any, low: int) -> bool:
    return not isinstance(value, bool) and isinstance(value, int) and value >= low


def parse_attack_section(section: Any) -> InversionAttackSpec:
    """Check a resolved ``attack`` section; every problem is a :class:`CellError` naming the field."""
    if not isinstance(section, dict):
        raise _fail("the token_inversion kind needs an `attack` mapping with at least a `threat`")
    unknown = sorted(set(section) - {"threat", "attacks", "beamclean", "prior", "blackbox"})
    if unknown:
        raise _fail(f"unknown key(s) {unknown}; known: threat, attacks, beamclean, prior, blackbox")
    if "threat" not in section:
        raise _fail("needs a `threat` (the grant), e.g. {embedding_table: true}", "attack.threat")
    try:
        threat = ThreatModel.from_dict(section["threat"])
    except (ThreatModelError, TypeError) as exc:
        raise _fail(str(exc), "attack.threat") from None
    attacks = section.get("attacks", list(DEFAULT_ATTACKS))
    if (
        not isinstance(attacks, list)
        or not attacks
        or any(a not in TOKEN_ATTACKS for a in attacks)
        or len(set(attacks)) != len(attacks)
    ):
        raise _fail(
            f"must be a non-empty list of distinct names from {list(TOKEN_ATTACKS)}, got {attacks!r}", "attack.attacks"
        )
    if not isinstance(section.get("beamclean", {}), (dict, type(None))):
        raise _fail(f"must be a mapping, got {section['beamclean']!r}", "attack.beamclean")
    bc = dict(section.get("beamclean") or {})
    family = bc.pop("family", "auto")
    if family != "auto" and family not in FAMILIES:
        raise _fail(f"family must be 'auto' or one of {list(FAMILIES)}, got {family!r}", "attack.beamclean.family")
    noise = bc.pop("noise", "estimated")
    noise = [noise] if isinstance(noise, str) else noise
    if (
        not isinstance(noise, list)
        or not noise
        or any(n not in NOISE_MODES for n in noise)
        or len(set(noise)) != len(noise)
    ):
        raise _fail(f"noise must be 'estimated', 'oracle' or a list of both, got {noise!r}", "attack.beamclean.noise")
    bad = sorted(set(bc) - _BEAMCLEAN_KEYS)
    if bad:
        raise _fail(
            f"unknown setting(s) {bad}; known: family, noise, {', '.join(sorted(_BEAMCLEAN_KEYS))}", "attack.beamclean"
        )
    try:
        config = BeamCleanConfig(**bc)
    except (ValueError, TypeError) as exc:
        raise _fail(str(exc), "attack.beamclean") from None
    prior = _check_prior(section.get("prior", {"kind": "bigram"}) if "beamclean" in attacks else {"kind": "uniform"})
    return InversionAttackSpec(
        threat, tuple(attacks), config, family, tuple(noise), prior, _check_blackbox(section.get("blackbox"))
    )


def _check_blackbox(spec: Any) -> dict:
    """The ``blackbox`` settings: public ``sources`` (default alpaca + gsm8k train) and :class:`BlackBoxConfig`
    fields."""
    where = "attack.blackbox"
    if spec is None:
        spec = {}
    if not isinstance(spec, dict) or set(spec) - _BLACKBOX_KEYS:
        raise _fail(f"must be a mapping with keys from {sorted(_BLACKBOX_KEYS)}, got {spec!r}", where)
    if "texts" in spec:
        texts = spec["texts"]
        if (
            "sources" in spec
            or not isinstance(texts, list)
            or not texts
            or not all(isinstance(t, str) and t.strip() for t in texts)
        ):
            raise _fail("texts must be a non-empty list of public strings (and no sources beside it)", f"{where}.texts")
        return spec
    spec = {"sources": [{"dataset": "alpaca"}, {"dataset": "gsm8k", "split": "train"}], **spec}
    sources = spec["sources"]
    if (
        not isinstance(sources, list)
        or not sources
        or not all(
            isinstance(x, dict) and isinstance(x.get("dataset"), str) and not set(x) - _SOURCE_KEYS for x in sources
        )
    ):
        raise _fail(f"sources must be a non-empty list like [{{dataset: alpaca}}], got {sources!r}", f"{where}.sources")
    if any(is_ppft_dataset(x["dataset"]) for x in sources):
        raise _fail("the black-box attacker trains on public text only (no Pri-* dataset)", f"{where}.sources")
    try:
        BlackBoxConfig(**{k: v for k, v in spec.items() if k not in ("sources", "texts")})
    except (TypeError, ValueError) as exc:
        raise _fail(str(exc), where) from None
    return spec


def _check_prior(spec: Any) -> dict:
    where = "attack.prior"
    if not isinstance(spec, dict) or spec.get("kind", "bigram") not in PRIOR_KINDS:
        raise _fail(f"must be a mapping with kind one of {list(PRIOR_KINDS)}, got {spec!r}", where)
    spec = {"kind": "bigram", **spec}
    kind = spec["kind"]
    bad = sorted(set(spec) - _PRIOR_KEYS[kind])
    if bad:
        raise _fail(f"a {kind} prior takes no key(s) {bad}; it takes {sorted(_PRIOR_KEYS[kind])}", where)
    if kind == "uniform":
        return spec
    if spec.get("training_text", "public") not in ("public", "in_domain"):
        raise _fail(
            f"training_text must be 'public' or 'in_domain', got {spec['training_text']!r}", f"{where}.training_text"
        )
    if kind == "causal_lm":
        if not isinstance(spec.get("path"), str) or not spec["path"]:
            raise _fail("a causal_lm prior needs `path` (a local directory or a Hugging Face name)", f"{where}.path")
        mapping = spec.get("mapping", "first_subtoken")
        if mapping not in CROSS_MAPPINGS:
            raise _fail(f"mapping must be one of {list(CROSS_MAPPINGS)}, got {mapping!r}", f"{where}.mapping")
        alpha = spec.get("unmapped_mass", 0.0)
        if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha < 1:
            raise _fail(f"unmapped_mass must be a number in [0, 1), got {alpha!r}", f"{where}.unmapped_mass")
        if alpha and mapping != "one_to_one":
            raise _fail(f"unmapped_mass applies to mapping: one_to_one only, not {mapping!r}", f"{where}.unmapped_mass")
        return spec
    texts, sources = spec.get("texts"), spec.get("sources")
    if (texts is None) == (sources is None):
        raise _fail("a bigram prior needs exactly one of `sources` (datasets) or `texts` (inline public text)", where)
    if texts is not None and (
        not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts)
    ):
        raise _fail("texts must be a non-empty list of non-empty strings", f"{where}.texts")
    if sources is not None:
        if not isinstance(sources, list) or not sources:
            raise _fail(
                "sources must be a non-empty list like [{dataset: alpaca}, {dataset: gsm8k, split: train}]",
                f"{where}.sources",
            )
        for i, src in enumerate(sources):
            if not isinstance(src, dict) or not isinstance(src.get("dataset"), str) or set(src) - _SOURCE_KEYS:
                raise _fail(
                    f"entry {i} must be a mapping with `dataset` (and optional split, limit), got {src!r}",
                    f"{where}.sources",
                )
    k = spec.get("k", 0.1)
    if isinstance(k, bool) or not isinstance(k, (int, float)) or not (k > 0 and math.isfinite(k)):
        raise _fail(f"k must be a finite number > 0, got {k!r}", f"{where}.k")
    return spec


def _check_prior_sources(prior: dict) -> None:
    """Public priors read no Pri-* text; in-domain ones only the PPFT train part of the evaluated dataset."""
    for src in prior.get("sources") or []:
        name, split = src["dataset"], src.get("split")
        if not is_ppft_dataset(name):
            continue
        if prior.get("training_text", "public") == "public":
            raise _fail(
                f"{name!r} is in-domain text; a prior fitted on it needs training_text: in_domain",
                "attack.prior.sources",
            )
        if split != "train":
            raise _fail(
                f"an in-domain prior may read only the PPFT train part of {name!r} (split: train), "
                f"never the evaluated prompts; got split {split!r}",
                "attack.prior.sources",
            )


def _check_params(params: dict) -> None:
    mt = params.get("max_tokens", 48)
    if not _int_at_least(mt, 1):
        raise _fail(f"max_tokens must be an integer >= 1, got {mt!r}", "params.max_tokens")
    th = params.get("threads")
    if th is not None and not _int_at_least(th, 1):
        raise _fail(f"threads must be an integer >= 1 or null, got {th!r}", "params.threads")
