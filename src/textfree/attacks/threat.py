"""Threat models as data: what an attacker observes and knows, and which attacks a grant allows.

A :class:`ThreatModel` is used two ways:

* as a **grant** (what an experiment cell lets the attacker see: the payload vectors always, and optionally the
  model's embedding table, query access to the encoder, training text, the mechanism and its parameters);
* as a **requirement** (the least an attack needs to run: ``requires``).

:func:`check_grant` compares the two and raises :class:`ThreatModelError` naming *every* capability the attack
needs and the grant lacks. Training text is ordered ``None < "public" < "in_domain"``: an attacker granted
in-domain text is also assumed to have public text (public text is available to everyone), not the reverse.

Attacks register by name (:func:`register_attack`) with their base requirement, like the mechanisms registry
in :mod:`textfree.mechanisms.base`; an attack may need more than its base requirement for some settings (a
prior trained on in-domain text, oracle noise parameters) and then checks the larger requirement itself.

Noise knowledge is explicit: :func:`resolve_noise_knowledge` turns a caller's ``noise="estimated" | "oracle"``
into the label the result carries, and refuses ``"oracle"`` unless the grant has ``knows_parameters``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

__all__ = [
    "CAPABILITIES",
    "TRAINING_TEXT_LEVELS",
    "NOISE_KNOWLEDGE",
    "NOISE_AWARE_REQUIRES",
    "ThreatModel",
    "ThreatModelError",
    "AttackSpec",
    "check_grant",
    "missing_capabilities",
    "resolve_noise_knowledge",
    "register_attack",
    "get_attack",
    "available_attacks",
    "run_attack",
]

#: Training-text grants, weakest first (None: no text at all).
TRAINING_TEXT_LEVELS: tuple[str | None, ...] = (None, "public", "in_domain")

#: The capabilities a grant can lack, in the order error messages list them.
CAPABILITIES = (
    "payload_vectors",
    "embedding_table",
    "encoder_queries",
    "training_text",
    "knows_mechanism",
    "knows_parameters",
)

#: The labels results carry for how the attack knew the noise: it used none, estimated it, or was given it.
NOISE_KNOWLEDGE = ("none", "estimated", "oracle")

_FLAGS = ("payload_vectors", "embedding_table", "encoder_queries", "knows_mechanism", "knows_parameters")


class ThreatModelError(ValueError):
    """An attack needs a capability the threat model does not grant (or a threat model is malformed)."""


@dataclass(frozen=True)
class ThreatModel:
    """What an attacker observes and knows.

    * ``payload_vectors``: the released vectors. Always true: every attack sees the payload.
    * ``embedding_table``: the model's input embedding table (white-box: SnD/RAPT nearest neighbour, BeamClean).
    * ``encoder_queries``: query access to the client's encoder (it can make its own clean/noisy pairs).
    * ``training_text``: text to train on: ``None``, ``"public"`` or ``"in_domain"`` (includes public).
    * ``knows_mechanism``: the mechanism's family (e.g. L2-Laplace, clipped).
    * ``knows_parameters``: the mechanism's parameters ("oracle" noise); needs ``knows_mechanism``.
    """

    payload_vectors: bool = True
    embedding_table: bool = False
    encoder_queries: bool = False
    training_text: str | None = None
    knows_mechanism: bool = False
    knows_parameters: bool = False

    def __post_init__(self) -> None:
        for name in _FLAGS:
            value = getattr(self, name)
            if not isinstance(value, bool):
                raise ThreatModelError(f"ThreatModel: {name} must be true or false, got {value!r}")
        if not self.payload_vectors:
            raise ThreatModelError(
                "ThreatModel: payload_vectors must be true (every attacker observes the payload), got False"
            )
        if self.training_text not in TRAINING_TEXT_LEVELS:
            raise ThreatModelError(
                f"ThreatModel: training_text must be one of {list(TRAINING_TEXT_LEVELS)}, got {self.training_text!r}"
            )
        if self.knows_parameters and not self.knows_mechanism:
            raise ThreatModelError(
                "ThreatModel: knows_parameters=True needs knows_mechanism=True (parameters of what?)"
            )

    def union(self, other: "ThreatModel") -> "ThreatModel":
        """The capability-wise maximum: what an attacker needs to run two things, or the larger of two grants."""
        level = max(TRAINING_TEXT_LEVELS.index(self.training_text), TRAINING_TEXT_LEVELS.index(other.training_text))
        return ThreatModel(
            **{name: getattr(self, name) or getattr(other, name) for name in _FLAGS},
            training_text=TRAINING_TEXT_LEVELS[level],
        )

    def grants(self, requires: "ThreatModel") -> bool:
        """True when this grant covers everything ``requires`` asks for."""
        return not missing_capabilities(requires, self)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ThreatModel":
        if not isinstance(data, dict):
            raise ThreatModelError(f"a threat model must be a mapping, got {type(data).__name__}: {data!r}")
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ThreatModelError(f"unknown threat-model field(s) {sorted(unknown)}; known: {sorted(known)}")
        return cls(**data)


def missing_capabilities(requires: ThreatModel, granted: ThreatModel) -> list[str]:
    """Each capability ``requires`` needs and ``granted`` lacks, as ``"name"`` or ``"training_text=<level>"``."""
    missing = []
    for name in CAPABILITIES:
        if name == "training_text":
            need, have = requires.training_text, granted.training_text
            if TRAINING_TEXT_LEVELS.index(need) > TRAINING_TEXT_LEVELS.index(have):
                missing.append(f"training_text={need!r} (granted: {have!r})")
        elif getattr(requires, name) and not getattr(granted, name):
            missing.append(name)
    return missing


def check_grant(attack_name: str, requires: ThreatModel, granted: ThreatModel) -> None:
    """Raise :class:`ThreatModelError` naming every capability ``attack_name`` needs that ``granted`` lacks."""
    if not isinstance(granted, ThreatModel):
        raise ThreatModelError(f"attack {attack_name!r}: the grant must be a ThreatModel, got {type(granted).__name__}")
    missing = missing_capabilities(requires, granted)
    if missing:
        raise ThreatModelError(
            f"attack {attack_name!r} needs {', '.join(missing)}, which the threat model does not grant "
            f"(granted: {granted.to_dict()})"
        )


def resolve_noise_knowledge(attack_name: str, noise: str, granted: ThreatModel) -> str:
    """``"estimated"`` or ``"oracle"``; ``"oracle"`` only when the grant includes ``knows_parameters``."""
    if noise not in ("estimated", "oracle"):
        raise ValueError(f"attack {attack_name!r}: noise must be 'estimated' or 'oracle', got {noise!r}")
    if noise == "oracle":
        check_grant(attack_name, ThreatModel(knows_mechanism=True, knows_parameters=True), granted)
    return noise


#: What a noise-aware attack adds to its requirement: it simulates the mechanism, so it needs it and its parameters.
NOISE_AWARE_REQUIRES = ThreatModel(knows_mechanism=True, knows_parameters=True)


@dataclass(frozen=True)
class AttackSpec:
    """A registered attack: its name, the callable that runs it and its base requirement."""

    name: str
    run: Callable[..., Any]
    requires: ThreatModel
    description: str = ""


_REGISTRY: dict[str, AttackSpec] = {}


def register_attack(name: str, *, requires: ThreatModel, description: str = "") -> Callable[[Callable], Callable]:
    """Decorator: register ``fn`` as attack ``name`` with base requirement ``requires``.

    The decorated callable must take the grant as a keyword argument ``threat`` and check it (it is returned
    unchanged, so calling it directly checks the grant too).
    """
    if not isinstance(requires, ThreatModel):
        raise TypeError(f"register_attack({name!r}): requires must be a ThreatModel, got {type(requires).__name__}")

    def deco(fn: Callable) -> Callable:
        if name in _REGISTRY and _REGISTRY[name].run is not fn:
            raise ValueError(f"attack name {name!r} is already registered by {_REGISTRY[name].run.__qualname__}")
        _REGISTRY[name] = AttackSpec(name, fn, requires, description)
        return fn

    return deco


def get_attack(name: str) -> AttackSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown attack {name!r}; known: {sorted(_REGISTRY)}") from None


def available_attacks() -> list[str]:
    return sorted(_REGISTRY)


def run_attack(name: str, *args: Any, threat: ThreatModel, **kwargs: Any) -> Any:
    """Check ``threat`` against the attack's base requirement, then run it (it checks its full requirement)."""
    spec = get_attack(name)
    check_grant(name, spec.requires, threat)
    return spec.run(*args, threat=threat, **kwargs)
