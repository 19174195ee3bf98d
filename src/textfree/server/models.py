"""The generic parts of served models: model cards' payload checks, prepared requests, and the model table.

* :func:`check_common` / :func:`check_public` are the checks every payload passes against a model's *card* before
  it reaches a model; every one raises :class:`~textfree.server.errors.ApiError` (4xx), so nothing malformed
  reaches torch. :class:`Prepared` is a validated request, :class:`Decoding` a generate batch's key.
* :class:`EmbedModel` is the SnD-style embedding service (served system ``"hf-embed"``): a Hugging Face encoder whose
  transformer layers run on the client's noisy *token* embeddings (``inputs_embeds``) and whose last hidden states
  are mean-pooled into one sentence embedding per row. It fixes the route and the wire format.
* :class:`ModelRegistry` holds every served model by id, each loaded by its served system
  (:mod:`textfree.server.registry`); generate models come from a system such as PPFT, which registers itself.

A model card tells a client everything it needs to privatize correctly (encoder id + sha256 + width, k, mechanism
family, ...).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Sequence

import torch
from pydantic import ValidationError

from ..lm.hub import resolve_source
from ..payload import FORMAT_VERSION, Payload, PayloadError, PayloadTooLarge
from .config import ServerConfig
from .errors import ApiError
from .public_files import DENOISER_FILE, Bundle, PublicFile, PublicFileError, load_denoiser
from .registry import ServedModel, ServedSystem, UnknownSystemError, detect_system, get_system, register_system
from .schemas import ModelCard

__all__ = [
    "Decoding",
    "EMBED_SYSTEM",
    "EmbedModel",
    "ModelRegistry",
    "Prepared",
    "PublicTokenCounter",
    "check_card",
    "check_common",
    "check_examples",
    "check_public",
    "mismatch",
    "pad_cat",
    "public_name",
    "read_payload",
    "row_generators",
    "split_rows",
    "trimmed",
]

NORM_TOLERANCE = 1e-3


def public_name(name_or_path: str | None) -> str | None:
    """A name safe to publish on a card: a hub id (``name`` or ``org/name``) as is; anything that is or looks like a
    local path (absolute, ``~`` or ``.`` first, a backslash, more than one ``/``, or a path that exists here) by its
    last component only, so a card never reveals the server's file system."""
    if not name_or_path:
        return None
    text = str(name_or_path)
    path = Path(text)
    local = path.is_absolute() or text.startswith(("~", ".")) or "\\" in text or text.count("/") > 1 or path.exists()
    return (path.name or None) if local else text


@dataclass
class Prepared:
    """A validated request, ready for the micro-batcher."""

    vectors: torch.Tensor  # [b, S, d] float32, S trimmed to the longest row
    mask: torch.Tensor  # [b, S] bool
    public: list[str] | None
    seed: int | None = None  # sampling seed of this request (None: OS entropy); unused when greedy

    @property
    def rows(self) -> int:
        return int(self.vectors.shape[0])


@dataclass(frozen=True)
class Decoding:
    """How a batch decodes (the micro-batcher's key: requests share a model call only when these are equal)."""

    max_new_tokens: int
    temperature: float = 0.0  # 0: greedy
    top_p: float = 1.0  # nucleus mass when sampling


def row_generators(items: Sequence[Prepared]) -> list[torch.Generator]:
    """One generator per row: each request's rows draw from a generator of its own, seeded by its ``seed`` (or from
    OS entropy), so a request's sampled answers do not depend on what it was batched with."""
    import os

    out = []
    for it in items:
        g = torch.Generator().manual_seed(
            it.seed if it.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
        )
        out += [g] * it.rows
    return out


def mismatch(message: str) -> ApiError:
    """A 400 ``payload_mismatch``: the payload is well formed but not one this model reads."""
    return ApiError(400, "payload_mismatch", message)


def read_payload(raw: bytes, *, max_bytes: int, max_rows: int) -> Payload:
    """The payload in ``raw`` (400 ``invalid_payload``); more than ``max_rows`` rows is 413 ``too_many_rows``, found
    from the safetensors header before any per-row work."""
    try:
        return Payload.from_bytes(raw, max_bytes=max_bytes, max_rows=max_rows)
    except PayloadTooLarge as exc:
        raise ApiError(
            413,
            "too_many_rows",
            f"the payload has {exc.rows} rows; this server takes at most {exc.limit} per payload",
        ) from None
    except PayloadError as exc:
        raise ApiError(400, "invalid_payload", str(exc)) from None


def check_common(payload: Payload, card: dict[str, Any], config: ServerConfig) -> None:
    """Refuse (413/400) a payload this card's model cannot read: too many rows, another kind, encoder, k, noise
    family, slot padding, slot centre or more slots than the model takes."""
    if payload.batch_size > config.max_batch_rows:
        raise ApiError(
            413,
            "too_many_rows",
            f"the payload has {payload.batch_size} rows; this server takes at most {config.max_batch_rows} per payload",
        )
    if payload.kind != card["payload_kind"]:
        raise mismatch(f"model {card['id']!r} takes {card['payload_kind']!r} payloads, got kind {payload.kind!r}")
    if payload.encoder.kind != card["encoder_kind"]:
        raise mismatch(
            f"model {card['id']!r} takes payloads of a {card['encoder_kind']!r} encoder, got {payload.encoder.kind!r}"
        )
    if payload.encoder.dim != card["encoder_dim"]:
        raise mismatch(
            f"payload width {payload.encoder.dim} != model {card['id']!r}'s encoder width {card['encoder_dim']}"
        )
    want, got = card["encoder_sha256"], payload.encoder.sha256
    if want and got != want:
        raise mismatch(
            f"payload made by an encoder with sha256 {str(got)[:12]}..., but model {card['id']!r} needs encoder sha256 "
            f"{want[:12]}... (see GET /v1/models/{card['id']})"
        )
    priv = payload.privatization
    if priv.k != card["k"]:
        raise mismatch(f"payload pooled with k={priv.k}, model {card['id']!r} takes k={card['k']}")
    if priv.normalize != card["normalize"] or (priv.noise is not None and priv.renormalize != card["renormalize"]):
        raise mismatch(
            f"model {card['id']!r} takes normalize={card['normalize']}, renormalize={card['renormalize']} payloads"
        )
    if priv.noise is not None:
        family = getattr(priv.noise, "name", None)
        inner = getattr(getattr(priv.noise, "inner", None), "name", None)
        if card["mechanism"] not in (family, inner):
            raise mismatch(
                f"payload noise {family!r} is not model {card['id']!r}'s mechanism family {card['mechanism']!r}"
            )
    if card.get("fixed_slots") and priv.pad_to != card["max_slots"]:
        raise mismatch(
            f"model {card['id']!r} takes payloads padded to {card['max_slots']} slots (fixed_slots: the client "
            f"hides the prompt's length), got pad_to={priv.pad_to}"
        )
    if card.get("payload_kind") == "pooled" and priv.repeat_mean != bool(card.get("repeat_mean")):
        raise mismatch(
            f"model {card['id']!r} takes payloads whose slots are "
            + (
                "each prompt's repeated mean slot (repeat_mean: true)"
                if card.get("repeat_mean")
                else "the prompt's own slots (repeat_mean: false)"
            )
            + f", got repeat_mean={str(priv.repeat_mean).lower()}"
        )
    if card.get("payload_kind") == "pooled" and priv.center_sha256 != card.get("center_sha256"):
        want = card.get("center_sha256")
        raise mismatch(
            f"model {card['id']!r} takes payloads centred on the slot centre {want[:12]}... (see GET "
            f"/v1/models/{card['id']})"
            if want
            else f"model {card['id']!r} takes uncentred slots, got a payload centred on "
            f"{str(priv.center_sha256)[:12]}..."
        )
    _check_rows_have_slots(payload, card)
    if max(payload.lengths) > card["max_slots"]:
        raise mismatch(
            f"a row has {max(payload.lengths)} vectors; model {card['id']!r} takes at most {card['max_slots']}"
        )


def _check_rows_have_slots(payload: Payload, card: dict[str, Any]) -> None:
    """400 for a row with no private slot (token): one rule for every route (docs/server.md, "Rows without a private
    slot"): such a row carries no prompt, so there is nothing private to answer or embed."""
    lengths = payload.lengths
    empty = next((i for i, n in enumerate(lengths) if n < 1), None)
    if empty is not None:
        unit = "token" if card["payload_kind"] == "token" else "slot"
        raise mismatch(
            f"row {empty} has no private {unit}: every row of a payload for model {card['id']!r} needs at least one "
            f"(a row without one carries no prompt)"
        )


def check_public(public: Sequence[str] | None, rows: int, config: ServerConfig) -> list[str] | None:
    """The public text of each row, checked (422): one string per row, within ``max_public_chars``, valid Unicode."""
    if public is None:
        return None
    if not isinstance(public, (list, tuple)) or len(public) != rows or not all(isinstance(p, str) for p in public):
        raise ApiError(422, "invalid_request", f"public must be a list of {rows} strings (one per payload row)")
    for p in public:
        if len(p) > config.max_public_chars:
            raise ApiError(
                422, "invalid_request", f"a public text has {len(p)} characters; the limit is {config.max_public_chars}"
            )
        try:
            p.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, "invalid_request", "public text is not valid Unicode (lone surrogate)") from None
    return list(public)


def check_examples(examples: Sequence[Any], card: dict[str, Any], config: ServerConfig) -> None:
    """Refuse (413/422) a ``/v1/classify`` request the card's model cannot read, before any per-example work: more
    examples than ``max_classify_examples`` (413), and per example (422, naming it) another number of sentences
    than the card's ``sentences``, an empty sentence, text that is not valid Unicode, more than
    ``max_classify_words`` words or ``max_public_chars`` characters (plain tokens included), and plain tokens that
    do not match the card's ``plain_tokens`` (missing, or given to a model without them, another length, a
    sequence index out of range, a token that is not one word)."""
    model_id = card["id"]
    if len(examples) > config.max_classify_examples:
        raise ApiError(
            413,
            "too_many_rows",
            f"the request has {len(examples)} examples; this server takes at most {config.max_classify_examples} per "
            "request",
        )
    sentences, plain = card["sentences"], card.get("plain_tokens")
    for i, ex in enumerate(examples):
        where = f"examples[{i}]"
        words = list(ex.plain or ())
        if len(ex.parts) != sentences:
            raise ApiError(
                422,
                "invalid_request",
                f"{where} has {len(ex.parts)} sentence(s); model {model_id!r} takes {sentences} per example",
            )
        if not all(part.strip() for part in ex.parts):
            raise ApiError(422, "invalid_request", f"{where} has an empty sentence")
        try:
            for text in (*ex.parts, *words):
                text.encode("utf-8")
        except UnicodeEncodeError:
            raise ApiError(422, "invalid_request", f"{where} is not valid Unicode (lone surrogate)") from None
        n_words = sum(len(part.split()) for part in ex.parts) + len(words)
        if n_words > config.max_classify_words:
            raise ApiError(
                422,
                "invalid_request",
                f"{where} has {n_words} words (plain tokens included); this server takes at most "
                f"{config.max_classify_words} per example",
            )
        n_chars = sum(len(part) for part in ex.parts) + sum(len(w) + 1 for w in words)
        if n_chars > config.max_public_chars:
            raise ApiError(
                422,
                "invalid_request",
                f"{where} has {n_chars} characters; this server takes at most {config.max_public_chars} per example",
            )
        _check_plain(ex, plain, where, model_id)


def _check_plain(ex: Any, plain: dict[str, Any] | None, where: str, model_id: str) -> None:
    """422 for an example whose plain tokens do not match the card's ``plain_tokens`` entry."""
    if plain is None:
        if ex.plain is not None or ex.sequence is not None:
            raise ApiError(
                422,
                "invalid_request",
                f"{where} carries plain tokens, but model {model_id!r} takes none (its card's plain_tokens is null)",
            )
        return
    if ex.plain is None or ex.sequence is None:
        raise ApiError(
            422,
            "invalid_request",
            f"{where} needs its privatized plain tokens and their sequence index ('plain', 'sequence'): model "
            f"{model_id!r} reads them (GET /v1/models/{model_id}/plain_tokens)",
        )
    if len(ex.plain) != plain["length"]:
        raise ApiError(
            422,
            "invalid_request",
            f"{where} has {len(ex.plain)} plain tokens; model {model_id!r} takes {plain['length']}",
        )
    if not 0 <= ex.sequence < plain["sequences"]:
        raise ApiError(
            422,
            "invalid_request",
            f"{where}: sequence {ex.sequence} is not one of model {model_id!r}'s {plain['sequences']} plain-token "
            "sequences",
        )
    if not all(w and not any(c.isspace() for c in w) for w in ex.plain):
        raise ApiError(422, "invalid_request", f"{where}: every plain token must be one non-empty word")


class PublicTokenCounter:
    """The number of tokens a model's tokenizer makes of each public text, with its own copy of that tokenizer under
    a lock: requests are checked on the event loop while the batcher's thread runs the model's own tokenizer, and a
    fast tokenizer must not be entered from two threads at once."""

    def __init__(self, tokenizer, limit: int):
        self._tokenizer = copy.deepcopy(tokenizer)
        self._lock = threading.Lock()
        self.limit = limit

    def check(self, public: list[str] | None) -> None:
        """422 for a public text longer than the model reads: the layout would cut it and the answer would not see
        its end (an options block cut in half), so it is refused rather than answered from a part."""
        if not public:
            return
        with self._lock:
            counts = [len(ids) for ids in self._tokenizer(public, add_special_tokens=False)["input_ids"]]
        for i, n in enumerate(counts):
            if n > self.limit:
                raise ApiError(
                    422,
                    "invalid_request",
                    f"public[{i}] is {n} tokens of this model's tokenizer; the model "
                    f"reads at most {self.limit} (max_public_tokens on its card): shorten it, nothing was cut",
                )


def trimmed(payload: Payload) -> tuple[torch.Tensor, torch.Tensor]:
    """(vectors float32, mask) of a payload, cut to its longest row."""
    n = max(payload.lengths) if payload.batch_size else 0
    return payload.vectors[:, :n].to(torch.float32), payload.mask[:, :n]


def pad_cat(items: Sequence[Prepared]) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows of every request of a micro-batch in one (vectors, mask), padded to the longest."""
    s = max(it.vectors.shape[1] for it in items)
    vs = [torch.nn.functional.pad(it.vectors, (0, 0, 0, s - it.vectors.shape[1])) for it in items]
    ms = [torch.nn.functional.pad(it.mask, (0, s - it.mask.shape[1])) for it in items]
    return torch.cat(vs), torch.cat(ms)


def split_rows(values: list, items: Sequence[Prepared]) -> list[list]:
    """Per-row results of a micro-batch cut back into one list per request."""
    out, start = [], 0
    for it in items:
        out.append(values[start : start + it.rows])
        start += it.rows
    return out


class EmbedModel:
    """SnD-style embeddings as a service: noisy token embeddings in, the model's mean-pooled sentence embedding out."""

    task = "embed"

    def __init__(self, model_id: str, model, *, sha256: str | None, name: str | None):
        self.id = model_id
        self.model = model.eval()
        table = model.get_input_embeddings().weight.detach()
        self.clip_norm = float(table.float().norm(dim=1).max())
        self.sha256 = sha256
        self.card = {
            "id": model_id,
            "object": "model",
            "task": "embed",
            "route": "/v1/embed",
            "payload_format_version": FORMAT_VERSION,
            "payload_kind": "token",
            "encoder_id": name,
            "encoder_sha256": sha256,
            "encoder_dim": int(table.shape[1]),
            "encoder_kind": "embedding_table",
            "k": 1,
            "normalize": False,
            "renormalize": False,
            "mechanism": "l2_laplace",
            "clip_norm": self.clip_norm,
            "epsilon": None,
            "stage": None,
            "max_slots": int(getattr(model.config, "max_position_embeddings", 512)),
            "output_dim": int(model.config.hidden_size),
            "pooling": "mean",
            "denoiser": None,  # the card of a model served with one names it (ModelRegistry.attach_denoiser)
            "decoder": None,
            "adapters": [],
        }

    @classmethod
    def load(cls, model_id: str, path: str, *, device: str = "cpu") -> "EmbedModel":
        from ..encoders.loading import load_hf_encoder

        _, model, _, sha = load_hf_encoder(path)
        return cls(model_id, model.to(device), sha256=sha, name=public_name(path))

    def prepare(self, payload: Payload, public: Sequence[str] | None, config: ServerConfig) -> Prepared:
        check_common(payload, self.card, config)
        if payload.public is not None or public is not None:
            raise ApiError(422, "invalid_request", "/v1/embed takes no public text")
        vectors, mask = trimmed(payload)
        worst = float(vectors[mask].norm(dim=-1).max())
        if worst > self.clip_norm * (1 + NORM_TOLERANCE):
            raise mismatch(
                f"a token vector has norm {worst:.4g}, above this model's clip_norm {self.clip_norm:.4g} (clip the "
                "noisy embeddings)"
            )
        return Prepared(vectors, mask, None)

    @torch.no_grad()
    def run(self, key: Hashable, items: list[Prepared]) -> list[list[list[float]]]:
        from ..lm.embed import pooled_embeddings

        vectors, mask = pad_cat(items)
        return split_rows(pooled_embeddings(self.model, vectors, mask).cpu().tolist(), items)


def _load_embed(model_id: str, source: str, config: ServerConfig) -> EmbedModel:
    return EmbedModel.load(model_id, source, device=config.device)


EMBED_SYSTEM = register_system(ServedSystem(name="hf-embed", task="embed", payload_kind="token", load=_load_embed))


class ModelRegistry:
    """Every served model by id, with the served system each came from (``systems``; empty for models passed in)
    and the client bundle of each model that publishes public files (``bundles``: model id ->
    :class:`~textfree.server.public_files.Bundle`, named on the card's ``client_bundle``): its handler's
    ``public_files`` and, for an embed model served with one, its client-side denoiser."""

    def __init__(self, models: dict[str, ServedModel], systems: dict[str, ServedSystem] | None = None):
        self.models = dict(models)
        self.systems = dict(systems or {})
        self.bundles: dict[str, Bundle] = {}
        self._denoiser_cards: dict[str, dict[str, Any]] = {}
        for model_id in self.models:
            self._publish(model_id, getattr(self.models[model_id], "public_files", None) or {})
            check_card(self.card(model_id))

    def _publish(self, model_id: str, files: dict[str, PublicFile]) -> None:
        """Make ``files`` (bundle name -> file) the client bundle of ``model_id`` (none when empty); ValueError
        naming the model for a file a bundle may not hold."""
        try:
            bundle = Bundle.of(files) if files else None
        except PublicFileError as exc:
            raise ValueError(f"model {model_id!r}: {exc}") from None
        if bundle is None:
            self.bundles.pop(model_id, None)
        else:
            self.bundles[model_id] = bundle

    @classmethod
    def load(cls, config: ServerConfig) -> "ModelRegistry":
        """Every model of ``config``, each loaded by its served system (``config.system_of``)."""
        models: dict[str, ServedModel] = {}
        systems: dict[str, ServedSystem] = {}
        for task, table in (("generate", config.models), ("embed", config.embed_models)):
            for model_id, path in table.items():
                source = path
                if task == "generate":  # a run by hub id (owner/name): downloaded, or read from the cache offline
                    try:
                        source = resolve_source(path)
                    except FileNotFoundError as exc:
                        raise ValueError(f"cannot load {task} model {model_id!r} from {path!r}: {exc}") from exc
                system = systems[model_id] = _system_for(config, model_id, task, source)
                try:
                    models[model_id] = system.load(model_id, source, config)
                except (OSError, ValueError, RuntimeError) as exc:
                    raise ValueError(
                        f"cannot load {system.task} model {model_id!r} (served system {system.name!r}) from {path!r}: "
                        f"{exc}"
                    ) from exc
        registry = cls(models, systems)
        for model_id, path in config.denoisers.items():
            registry.attach_denoiser(model_id, path)
        return registry

    def attach_denoiser(self, model_id: str, path: str) -> dict[str, Any]:
        """Publish the client-side denoiser at ``path`` with the embed model ``model_id``: its card names it and
        ``GET /v1/models/{id}/denoiser`` serves it. ValueError (naming the model and the file) for a model that is
        not an embed model, a damaged file, or a denoiser trained for another encoder. Returns the card entry."""
        model = self.models.get(model_id)
        if model is None or model.task != "embed":
            raise ValueError(f"a denoiser was given for {model_id!r}, which is not a served embed model")
        try:
            public, entry = load_denoiser(resolve_source(path), self.card(model_id))
        except (OSError, PublicFileError) as exc:
            raise ValueError(f"cannot serve the denoiser of embed model {model_id!r}: {exc}") from None
        bundle = self.bundles.get(model_id)
        self._publish(model_id, {**(bundle.files if bundle else {}), DENOISER_FILE: public})
        self._denoiser_cards[model_id] = entry
        return entry

    def get(self, model_id: str | None, task: str):
        """The model a request names, serving ``task`` (422 unnamed, 404 unknown or of another route)."""
        if not model_id:
            raise ApiError(422, "invalid_request", "name the model (query parameter or JSON field 'model')")
        model = self.models.get(model_id)
        if model is None:
            raise ApiError(404, "model_not_found", f"no model {model_id!r} here; GET /v1/models lists them")
        if model.task != task:
            raise ApiError(404, "model_not_found", f"model {model_id!r} serves {model.card['route']}, not /v1/{task}")
        return model

    def system(self, model_id: str, config: ServerConfig) -> ServedSystem:
        """The served system of a model: the one it was loaded by, else the one ``config`` names for it."""
        found = self.systems.get(model_id)
        if found is not None:
            return found
        model = self.models.get(model_id)
        task = model.task if model is not None else ("embed" if model_id in config.embed_models else "generate")
        return _system_for(config, model_id, task)

    def card(self, model_id: str) -> dict[str, Any]:
        """The public model card of ``model_id``, built by its system (its handler's own card without one)."""
        model = self.models[model_id]
        system = self.systems.get(model_id)
        card = system.card(model) if system is not None else model.card
        if model.task == "embed":  # the denoiser entry (null without one), whatever system built the card
            card = {**card, "denoiser": copy.deepcopy(self._denoiser_cards.get(model_id))}
        bundle = self.bundles.get(model_id)
        return {**card, "client_bundle": None if bundle is None else bundle.entry(model_id)}

    def cards(self) -> list[dict[str, Any]]:
        """The card of every served model, in order."""
        return [self.card(model_id) for model_id in self.models]

    def public_file(self, model_id: str, name: str) -> PublicFile | None:
        """The public file ``name`` of a served model's client bundle (a name of its manifest), or None."""
        bundle = self.bundles.get(model_id)
        return None if bundle is None else bundle.file(name)


def check_card(card: dict[str, Any]) -> None:
    """ValueError naming the model and the fields when a card lacks what the routes and clients read
    (:class:`~textfree.server.schemas.ModelCard`): found when the model loads, never as a 500 on a request."""
    try:
        ModelCard.model_validate(card)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(x) for x in e['loc'])}: {e['msg']}" for e in exc.errors(include_url=False)[:5]
        )
        raise ValueError(f"model {card.get('id')!r} has a card the server cannot publish ({problems})") from None


#: The tasks a model of each table of :class:`~textfree.server.config.ServerConfig` may serve: ``models`` holds run
#: directories (generate: PPFT; classify: RAPT), ``embed_models`` encoders.
_TABLE_TASKS = {"generate": ("generate", "classify"), "embed": ("embed",)}


def _system_for(config: ServerConfig, model_id: str, task: str, source: str | None = None) -> ServedSystem:
    """The registered system of a model: the one ``config`` names, else (a run directory of ``models``, at
    ``source`` once resolved) the one that recognises the run's files (:func:`~textfree.server.registry.detect_system`),
    else the table's default; checked to serve a task of the model's table (ValueError naming both)."""
    name = config.system_of(model_id)
    if model_id not in config.systems and model_id in config.models:
        name = detect_system(source if source is not None else config.models[model_id]) or name
    try:
        system = get_system(name)
    except UnknownSystemError as exc:
        raise ValueError(f"cannot load {task} model {model_id!r}: {exc}") from None
    if system.task not in _TABLE_TASKS.get(task, (task,)):
        raise ValueError(f"model {model_id!r} is a {task} model but served system {name!r} serves {system.task}")
    return system
