"""The served systems a server knows: what each serves and how its models load, answer and fine-tune.

The server's core (``app.py``, the routes, the model table) reaches a system only through a :class:`ServedSystem`
registered here, never through the system's own modules: a system's package registers itself when imported
(``textfree.ppft.service`` registers ``"ppft"``), and the registry imports every system an installed package declares
in the ``textfree.systems`` entry-point group on first lookup (pyproject.toml declares PPFT's and RAPT's). Adding a
system is one new module that calls :func:`register_system`, declared there.

A system's *handler* is the object the routes call for one served model (:class:`ServedModel`): its ``card``, its
``prepare`` (payload checks, 4xx :class:`~textfree.server.errors.ApiError`) and its ``run`` (one micro-batch).

A run directory given without a system (``textfree serve --model ID=RUN_DIR``) is served by the one registered system
whose ``detect`` recognises its files (:func:`detect_system`), else by the table's default (``ppft``).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Hashable, Protocol, Sequence, runtime_checkable

import torch

if TYPE_CHECKING:  # pragma: no cover - types only
    from ..payload import Payload
    from .config import ServerConfig

__all__ = [
    "FineTuneJob",
    "ServedModel",
    "ServedSystem",
    "TASKS",
    "TextTrainingRow",
    "TrainingRow",
    "UnknownSystemError",
    "available_systems",
    "detect_system",
    "get_system",
    "register_system",
    "unregister_system",
]

#: The routes a served model may answer: ``/v1/generate`` and ``/v1/embed`` take payloads (docs/payload.md);
#: ``/v1/classify`` takes examples privatized to text on the client (RAPT).
TASKS = ("generate", "embed", "classify")


@runtime_checkable
class ServedModel(Protocol):
    """What the routes call for one served model (a system's handler).

    A handler may also publish the public files a client holds for it (``public_files``: bundle name -> a
    :class:`~textfree.server.public_files.PublicFile`, read once at load; names and formats as
    :func:`textfree.bundle.check_name` allows): the model table publishes them as the model's client bundle, named
    on its card (``client_bundle``) and served at ``GET /v1/models/{id}/bundle[/{file}]``."""

    id: str
    task: str  # "generate", "embed" or "classify": the route it answers
    card: dict[str, Any]

    def prepare(self, payload: "Payload", public: Sequence[str] | None, config: "ServerConfig") -> Any:
        """A validated request (rows, mask, public text) for :meth:`run`, or a 4xx ``ApiError``. For a ``classify``
        model, ``payload`` is the request's list of :class:`~textfree.server.schemas.ClassifyExample` (privatized
        text, schema-checked) and ``public`` is None; the prepared request has ``rows`` (its number of examples)."""

    def run(self, key: Hashable, items: list[Any]) -> list[Any]:
        """One model call for every prepared request of a micro-batch: one result per item."""


@dataclass(frozen=True)
class TrainingRow:
    """One uploaded training row of a generate model: a payload row's vectors, its public text and the target the
    model should answer."""

    vectors: torch.Tensor  # [n, d] float32, the row's own slots
    public: str
    target: str


@dataclass(frozen=True)
class TextTrainingRow:
    """One uploaded training row of a classify model: an example privatized to text on the client (its sentence(s),
    its privatized plain tokens and their sequence index, as ``/v1/classify`` takes them) and its label."""

    parts: tuple[str, ...]
    plain: tuple[str, ...] | None
    sequence: int | None
    label: int


@dataclass(frozen=True)
class FineTuneJob:
    """What a system's ``fine_tune`` gets: where to write, what to start from, the rows and the hyperparameters.

    ``rows`` are :class:`TrainingRow` for a generate system, :class:`TextTrainingRow` for a classify system (the
    datasets of a model are of its task's kind). ``hyperparameters["method"]`` is one of the system's ``methods``,
    or None (the system's default).

    ``on_step(step, loss)`` runs after every optimizer step (it may raise to stop the job); ``fine_tune`` writes
    checkpoints under ``run_dir`` so a restarted job resumes, and returns ``{"steps", "final_loss",
    "resumed_from_step"}``."""

    run_dir: Path
    init: str  # the base model's source (run directory or hub id)
    dataset_ids: list[str]
    rows: list[TrainingRow] | list[TextTrainingRow]
    hyperparameters: dict[str, Any]
    device: str
    on_step: Callable[[int, float], None]


@dataclass(frozen=True)
class ServedSystem:
    """A system the server can serve, as the server sees it.

    ``load(model_id, source, config)`` returns the handler of a model (source: a run directory or hub id;
    ``config``: the :class:`~textfree.server.config.ServerConfig`, for the device and backend). ``card(handler)``
    is the public model card (default: the handler's ``card``). ``fine_tune(job)`` runs a fine-tuning job and
    ``load_adapter(model_id, run_dir, device)`` loads what a finished job wrote, in this process; a system without
    them serves no fine-tuning. ``methods``: the fine-tuning methods a job may choose (``hyperparameters.method``;
    empty: the system trains one way and a job naming a method is refused). ``detect(source)`` says whether a run
    directory is one of this system's (read from its files, never raising): a ``--model`` given without a system is
    served by the system that recognises it."""

    name: str
    task: str
    payload_kind: str
    load: Callable[[str, str, "ServerConfig"], ServedModel]
    card: Callable[[ServedModel], dict[str, Any]] = field(default=lambda handler: handler.card)
    fine_tune: Callable[[FineTuneJob], dict[str, Any]] | None = None
    load_adapter: Callable[[str, str, str], ServedModel] | None = None
    methods: tuple[str, ...] = ()
    detect: Callable[[str], bool] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or not self.name.replace("-", "").isalnum():
            raise ValueError(f"a served system's name must be letters, digits and '-', got {self.name!r}")
        if self.task not in TASKS:
            raise ValueError(f"served system {self.name!r}: task must be one of {TASKS}, got {self.task!r}")
        if (self.fine_tune is None) != (self.load_adapter is None):
            raise ValueError(f"served system {self.name!r}: give both fine_tune and load_adapter, or neither")
        if self.methods and self.fine_tune is None:
            raise ValueError(f"served system {self.name!r}: methods are for a system that fine-tunes")

    @property
    def fine_tunes(self) -> bool:
        """Whether this system runs fine-tuning jobs."""
        return self.fine_tune is not None


class UnknownSystemError(KeyError):
    """No served system of that name is registered."""

    def __str__(self) -> str:  # KeyError would quote the whole message
        return str(self.args[0])


_SYSTEMS: dict[str, ServedSystem] = {}
_LOCK = threading.Lock()


def register_system(system: ServedSystem, *, replace: bool = False) -> ServedSystem:
    """Make ``system`` servable under its name. Registering the same object again is a no-op; another system of a
    taken name is refused unless ``replace``."""
    if not isinstance(system, ServedSystem):
        raise TypeError(f"register_system takes a ServedSystem, got {type(system).__name__}")
    with _LOCK:
        known = _SYSTEMS.get(system.name)
        if known is not None and known is not system and not replace:
            raise ValueError(f"a served system named {system.name!r} is registered already (replace=True to swap)")
        _SYSTEMS[system.name] = system
    return system


def unregister_system(name: str) -> None:
    """Forget the system ``name`` (tests); unknown names are ignored."""
    with _LOCK:
        _SYSTEMS.pop(name, None)


#: The entry-point group through which installed packages declare their systems (``name = "module.path"``; importing
#: the module registers it). textfree's own: ``ppft = "textfree.ppft.service"`` and
#: ``rapt = "textfree.rapt.service"`` in pyproject.toml.
ENTRY_POINT_GROUP = "textfree.systems"
_plugins_loaded = False


def _load_installed_systems() -> None:
    """Import, once, every module the installed packages declare in :data:`ENTRY_POINT_GROUP` (how a server finds
    the systems without importing any of them by name); a declared module that fails to import is an error naming it."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    from importlib.metadata import entry_points

    for point in entry_points(group=ENTRY_POINT_GROUP):
        if point.name in _SYSTEMS:
            continue
        try:
            point.load()
        except Exception as exc:  # noqa: BLE001 - any import failure of a plugin is reported with its name
            raise ImportError(f"served system {point.name!r} ({point.value}) failed to load: {exc}") from exc
    _plugins_loaded = True


def get_system(name: str) -> ServedSystem:
    """The registered system ``name`` (installed systems are loaded on first need); :class:`UnknownSystemError` names
    it and lists the registered ones."""
    if name not in _SYSTEMS:
        _load_installed_systems()
    with _LOCK:
        system = _SYSTEMS.get(name)
        known = sorted(_SYSTEMS)
    if system is None:
        raise UnknownSystemError(
            f"no served system {name!r} is registered (registered: {', '.join(known) or 'none'}); import the module "
            f"that registers it before creating the app, or declare it in the {ENTRY_POINT_GROUP!r} entry points"
        )
    return system


def detect_system(source: str) -> str | None:
    """The name of the one registered system (the installed ones included) whose ``detect`` recognises the run at
    ``source``; None when none does. ValueError naming them when several do (name one with ``systems``)."""
    _load_installed_systems()
    with _LOCK:
        candidates = [s for s in _SYSTEMS.values() if s.detect is not None]
    found = []
    for system in candidates:
        try:
            if system.detect(source):
                found.append(system.name)
        except Exception:  # noqa: BLE001 - a detector that fails does not recognise the run
            continue
    if len(found) > 1:
        raise ValueError(
            f"the run at {source!r} is recognised by several served systems ({', '.join(sorted(found))}): name one "
            "(--system ID=NAME)"
        )
    return found[0] if found else None


def available_systems() -> list[str]:
    """The names of the registered systems (the installed ones included), sorted."""
    _load_installed_systems()
    with _LOCK:
        return sorted(_SYSTEMS)
