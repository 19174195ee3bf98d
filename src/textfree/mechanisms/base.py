"""What every mechanism is: a small frozen, validated object that samples and states its privacy map.

Modelled on OpenDP's measurements: a mechanism carries its own privacy map ``privacy_loss(d_in)``, which
turns a distance between two inputs into the privacy loss of releasing one output. Mechanisms register by
name in one place so payload headers, experiment cells and the CLI can rebuild them from plain data.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Callable, ClassVar, Protocol, runtime_checkable

import torch

__all__ = [
    "PrivacyLoss",
    "Mechanism",
    "register_mechanism",
    "get_mechanism_class",
    "available_mechanisms",
    "build_mechanism",
    "mechanism_from_dict",
    "mechanism_to_dict",
    "add_noise",
    "check_positive",
    "check_probability",
]


@dataclass(frozen=True)
class PrivacyLoss:
    """A privacy loss: ``epsilon`` (and ``delta`` for approximate DP).

    ``notion`` says what the numbers mean:

    * ``"metric"`` -- metric (d_chi) privacy instantiated at a distance: for two inputs at the stated distance
      the likelihood ratio of any output is at most ``exp(epsilon)``.
    * ``"approx"`` -- (epsilon, delta) differential privacy for neighbours at the stated sensitivity.
    """

    epsilon: float
    delta: float = 0.0
    notion: str = "metric"

    def __post_init__(self) -> None:
        if not (isinstance(self.epsilon, (int, float)) and self.epsilon >= 0 and not math.isnan(self.epsilon)):
            raise ValueError(f"epsilon must be a number >= 0, got {self.epsilon!r}")
        if not (0.0 <= self.delta <= 1.0):
            raise ValueError(f"delta must lie in [0, 1], got {self.delta!r}")
        if self.notion not in ("metric", "approx"):
            raise ValueError(f"notion must be 'metric' or 'approx', got {self.notion!r}")

    def __add__(self, other: "PrivacyLoss") -> "PrivacyLoss":
        """Basic sequential composition: epsilons and deltas add."""
        if not isinstance(other, PrivacyLoss):
            return NotImplemented
        notion = self.notion if self.notion == other.notion else "approx"
        return PrivacyLoss(self.epsilon + other.epsilon, min(1.0, self.delta + other.delta), notion)

    def scaled(self, times: int | float) -> "PrivacyLoss":
        """The loss of ``times`` independent releases composed sequentially."""
        if times < 0:
            raise ValueError(f"times must be >= 0, got {times}")
        return PrivacyLoss(self.epsilon * times, min(1.0, self.delta * times), self.notion)

    def to_dict(self) -> dict[str, Any]:
        return {"epsilon": self.epsilon, "delta": self.delta, "notion": self.notion}


@runtime_checkable
class Mechanism(Protocol):
    """The interface of a vector mechanism. ``x`` has the vectors in its last dimension."""

    name: ClassVar[str]

    def sample(self, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor: ...

    def privacy_loss(self, d_in: float) -> PrivacyLoss: ...


_REGISTRY: dict[str, type] = {}


def class_registrar(table: dict[str, type], what: str, name: str) -> Callable[[type], type]:
    """A class decorator that records a class in ``table`` under ``name`` (and sets its ``name``); another class
    under a taken name is refused (``what``: the kind of thing, for the message)."""

    def deco(cls: type) -> type:
        if name in table and table[name] is not cls:
            raise ValueError(f"{what} name {name!r} is already registered by {table[name].__name__}")
        cls.name = name
        table[name] = cls
        return cls

    return deco


def register_mechanism(name: str) -> Callable[[type], type]:
    """Class decorator: make a mechanism buildable by ``name`` from plain data."""
    return class_registrar(_REGISTRY, "mechanism", name)


def get_mechanism_class(name: str) -> type:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown mechanism {name!r}; known: {sorted(_REGISTRY)}") from None


def available_mechanisms() -> list[str]:
    return sorted(_REGISTRY)


def build_mechanism(name: str, **params: Any) -> Any:
    cls = get_mechanism_class(name)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = set(params) - fields
    if unknown:
        raise ValueError(f"mechanism {name!r} has no parameter(s) {sorted(unknown)}; it takes {sorted(fields)}")
    return cls(**params)


def mechanism_to_dict(mech: Any) -> dict[str, Any]:
    """Plain data that :func:`mechanism_from_dict` turns back into an equal mechanism."""
    out: dict[str, Any] = {"name": mech.name}
    for f in dataclasses.fields(mech):
        value = getattr(mech, f.name)
        if dataclasses.is_dataclass(value) and hasattr(value, "name"):
            value = mechanism_to_dict(value)
        out[f.name] = value
    return out


def mechanism_from_dict(data: dict[str, Any]) -> Any:
    if not isinstance(data, dict) or "name" not in data:
        raise ValueError(f"a mechanism spec must be a mapping with a 'name', got {data!r}")
    params = {k: v for k, v in data.items() if k != "name"}
    for key, value in list(params.items()):
        if isinstance(value, dict) and "name" in value:
            params[key] = mechanism_from_dict(value)
    return build_mechanism(data["name"], **params)


def add_noise(mech: Any, x: torch.Tensor, *, generator: torch.Generator) -> torch.Tensor:
    """x + one independent ``mech.noise`` vector per vector of x (last dimension), in float64; x's dtype out.

    The noise is drawn on the generator's device (a CPU generator for x on a GPU: the draw is the same wherever x
    lives, so a seed reproduces across devices) and moved to x's."""
    d = x.shape[-1]
    x64 = x.to(torch.float64)
    device = generator.device if generator is not None else x.device
    z = mech.noise(x64.numel() // d if d else 0, d, generator=generator, device=device).to(x.device)
    return (x64 + z.view(x64.shape)).to(x.dtype)


def check_positive(owner: str, field: str, value: Any, *, allow_inf: bool = False) -> None:
    """Raise a ValueError naming the bad value unless ``value`` is a finite (or inf, if allowed) number > 0."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 and not math.isnan(value)
    if ok and math.isinf(value) and not allow_inf:
        ok = False
    if not ok:
        raise ValueError(f"{owner}: {field} must be a finite number > 0, got {value!r}")


def check_probability(owner: str, field: str, value: Any) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and 0.0 < value < 1.0
    if not ok:
        raise ValueError(f"{owner}: {field} must lie strictly between 0 and 1, got {value!r}")
