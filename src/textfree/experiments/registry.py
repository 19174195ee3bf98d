"""Cell kinds register here by name, in one place.

A cell kind is a function ``(cell, point, seed, context) -> dict[str, float]``: the metrics of one grid point
under one seed. ``point`` maps grid keys (``"mechanism.epsilon"``, ``"params.k"``) to this point's values;
``cell.resolve(point)`` gives the mechanism, params and attack with the point applied. ``context`` is a
:class:`RunContext`, alive for one run of one cell, where a kind caches work shared by all points and seeds
(the loaded encoder, the clean hidden states).

Register with a decorator::

    @register_cell_kind("privatization", metrics=(...), params={"k": "tokens per slot"})
    def privatization(cell, point, seed, context):
        ...

``metrics`` and ``params`` (name -> help) are optional declarations; when given, :func:`~.cell.load_cell`
rejects cells that ask for a metric the kind does not produce or set a parameter it does not take. A kind that
reads no ``attack`` section registers with ``takes_attack=False``, and a cell of it that has one is rejected.
``validate(cell, points)`` is an optional hook that raises ``ValueError`` for a cell the kind cannot run.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..results.cell import set_kind_lookup

__all__ = ["CellKind", "RunContext", "register_cell_kind", "get_cell_kind", "available_cell_kinds"]

KindFunction = Callable[[Any, dict, int, "RunContext"], dict]

_KINDS: dict[str, "CellKind"] = {}
_BUILTINS_LOADED = False


@dataclass(frozen=True)
class CellKind:
    """A registered cell kind: its function plus what it declares. Calling it calls the function."""

    name: str
    fn: KindFunction
    metrics: tuple[str, ...] | None = None
    params: Mapping[str, str] | None = None
    validate: Callable[[Any, list], None] | None = None
    help: str = ""
    takes_attack: bool = True

    def __call__(self, cell: Any, point: dict, seed: int, context: "RunContext") -> dict:
        return self.fn(cell, point, seed, context)


@dataclass
class RunContext:
    """State shared by all (point, seed) calls of one run of one cell."""

    cell: Any
    logger: logging.Logger = field(default_factory=lambda: logging.getLogger("textfree.experiments"))
    cache: dict = field(default_factory=dict)
    provenance: dict = field(default_factory=dict)  # of the grid point being run; the runner resets it per point

    def record(self, name: str, value: str) -> None:
        """Note a fact about the grid point being run that is not a metric (e.g. the fingerprint of the run it
        started from); the runner writes the point's notes beside its metrics as ``provenance``. Every seed of a
        point must record the same value."""
        if not isinstance(name, str) or not name or not isinstance(value, str):
            raise TypeError(f"provenance is a non-empty name and a string value, got {name!r}: {value!r}")
        if self.provenance.get(name, value) != value:
            raise ValueError(
                f"provenance {name!r} differs between the seeds of one point: {self.provenance[name]!r} and {value!r}"
            )
        self.provenance[name] = value

    def cached(self, key: Any, factory: Callable[[], Any]) -> Any:
        """``cache[key]``, computed once by ``factory()``."""
        if key not in self.cache:
            self.cache[key] = factory()
        return self.cache[key]


def register_cell_kind(
    name: str,
    *,
    metrics: tuple[str, ...] | list[str] | None = None,
    params: Mapping[str, str] | None = None,
    validate: Callable[[Any, list], None] | None = None,
    help: str | None = None,
    takes_attack: bool = True,
) -> Callable[[KindFunction], KindFunction]:
    """Decorator: register ``fn(cell, point, seed, context) -> dict[str, float]`` as cell kind ``name``."""
    if not isinstance(name, str) or not name:
        raise ValueError(f"a cell kind name must be a non-empty string, got {name!r}")

    def deco(fn: KindFunction) -> KindFunction:
        if not callable(fn):
            raise TypeError(f"cell kind {name!r}: expected a function, got {fn!r}")
        existing = _KINDS.get(name)
        if existing is not None and existing.fn is not fn:
            same_origin = getattr(existing.fn, "__module__", None) == getattr(fn, "__module__", None) and getattr(
                existing.fn, "__qualname__", None
            ) == getattr(fn, "__qualname__", None)
            if not same_origin:  # a module reloaded in a notebook re-registers itself; anything else is a clash
                raise ValueError(
                    f"cell kind {name!r} is already registered by {existing.fn.__module__}.{existing.fn.__qualname__}"
                )
        doc = help if help is not None else (fn.__doc__ or "").strip().split("\n")[0]
        _KINDS[name] = CellKind(
            name=name,
            fn=fn,
            metrics=None if metrics is None else tuple(metrics),
            params=None if params is None else dict(params),
            validate=validate,
            help=doc,
            takes_attack=bool(takes_attack),
        )
        return fn

    return deco


def _load_builtins() -> None:
    """Import the built-in kinds (once), so that they register themselves."""
    global _BUILTINS_LOADED
    if not _BUILTINS_LOADED:
        _BUILTINS_LOADED = True
        importlib.import_module("textfree.experiments.kinds")


def get_cell_kind(name: str) -> CellKind:
    """The registered kind ``name`` (callable like its function); ``ValueError`` listing the known kinds."""
    _load_builtins()
    try:
        return _KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown cell kind {name!r}; known: {available_cell_kinds()}") from None


def available_cell_kinds() -> list[str]:
    """Names of all registered cell kinds, sorted."""
    _load_builtins()
    return sorted(_KINDS)


set_kind_lookup(get_cell_kind)  # strict cell checks (textfree.results.cell) find kinds here
