"""The models a server holds, their *model cards*, and the checks a payload must pass before it reaches them.

* :class:`GenerateModel` wraps a PPFT :class:`~textfree.ppft.server.ServerModel` (projection + decoder + LoRA;
  the run's ``encoder/`` is never loaded): pooled payload rows (+ public text) -> answers.
* :class:`EmbedModel` is the SnD-style embedding service: a Hugging Face encoder whose transformer layers run on
  the client's noisy *token* embeddings (``inputs_embeds``) and whose last hidden states are mean-pooled into one
  sentence embedding per row. It fixes the route and the wire format; the SnD issue brings the real models.

A model card tells a client everything it needs to privatize correctly (encoder id + sha256 + width, k, mechanism
family, ...). Every ``prepare`` raises :class:`~textfree.server.errors.ApiError` (400) for a payload the model cannot
read, so nothing malformed reaches torch.
"""

from __future__ import annotations

import copy
import functools
import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Hashable, Sequence

import torch

from ..payload import FORMAT_VERSION, Payload
from .config import ServerConfig
from .errors import ApiError

__all__ = ["Decoding", "GenerateModel", "EmbedModel", "ModelRegistry", "Prepared", "public_name", "row_generators"]

NORM_TOLERANCE = 1e-3


def public_name(name_or_path: str | None) -> str | None:
    """A name safe to publish: a hub id as is, a local directory by its last component (no server paths)."""
    if not name_or_path:
        return None
    path = Path(name_or_path)
    return path.name if path.is_absolute() or path.exists() else str(name_or_path)


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


def _mismatch(message: str) -> ApiError:
    return ApiError(400, "payload_mismatch", message)


def _check_common(payload: Payload, card: dict[str, Any], config: ServerConfig) -> None:
    if payload.batch_size > config.max_batch_rows:
        raise ApiError(
            413,
            "too_many_rows",
            f"the payload has {payload.batch_size} rows; this server takes at most {config.max_batch_rows} per payload",
        )
    if payload.kind != card["payload_kind"]:
        raise _mismatch(f"model {card['id']!r} takes {card['payload_kind']!r} payloads, got kind {payload.kind!r}")
    if payload.encoder.kind != card["encoder_kind"]:
        raise _mismatch(
            f"model {card['id']!r} takes payloads of a {card['encoder_kind']!r} encoder, got {payload.encoder.kind!r}"
        )
    if payload.encoder.dim != card["encoder_dim"]:
        raise _mismatch(
            f"payload width {payload.encoder.dim} != model {card['id']!r}'s encoder width {card['encoder_dim']}"
        )
    want, got = card["encoder_sha256"], payload.encoder.sha256
    if want and got != want:
        raise _mismatch(
            f"payload made by an encoder with sha256 {str(got)[:12]}..., but model {card['id']!r} needs encoder sha256 "
            f"{want[:12]}... (see GET /v1/models/{card['id']})"
        )
    priv = payload.privatization
    if priv.k != card["k"]:
        raise _mismatch(f"payload pooled with k={priv.k}, model {card['id']!r} takes k={card['k']}")
    if priv.normalize != card["normalize"] or (priv.noise is not None and priv.renormalize != card["renormalize"]):
        raise _mismatch(
            f"model {card['id']!r} takes normalize={card['normalize']}, renormalize={card['renormalize']} payloads"
        )
    if priv.noise is not None:
        family = getattr(priv.noise, "name", None)
        inner = getattr(getattr(priv.noise, "inner", None), "name", None)
        if card["mechanism"] not in (family, inner):
            raise _mismatch(
                f"payload noise {family!r} is not model {card['id']!r}'s mechanism family {card['mechanism']!r}"
            )
    if card.get("fixed_slots") and priv.pad_to != card["max_slots"]:
        raise _mismatch(
            f"model {card['id']!r} takes payloads padded to {card['max_slots']} slots (fixed_slots: the client "
            f"hides the prompt's length), got pad_to={priv.pad_to}"
        )
    if card.get("payload_kind") == "pooled" and priv.repeat_mean != bool(card.get("repeat_mean")):
        raise _mismatch(
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
        raise _mismatch(
            f"model {card['id']!r} takes payloads centred on the slot centre {want[:12]}... (see GET /v1/models/{card['id']})"
            if want
            else f"model {card['id']!r} takes uncentred slots, got a payload centred on {str(priv.center_sha256)[:12]}..."
        )
    if payload.vectors.shape[1] and max(payload.lengths) > card["max_slots"]:
        raise _mismatch(
            f"a row has {max(payload.lengths)} vectors; model {card['id']!r} takes at most {card['max_slots']}"
        )


def _check_public(public: Sequence[str] | None, rows: int, config: ServerConfig) -> list[str] | None:
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


def _trimmed(payload: Payload) -> tuple[torch.Tensor, torch.Tensor]:
    n = max(payload.lengths) if payload.batch_size else 0
    return payload.vectors[:, :n].to(torch.float32), payload.mask[:, :n]


def _pad_cat(items: Sequence[Prepared]) -> tuple[torch.Tensor, torch.Tensor]:
    s = max(it.vectors.shape[1] for it in items)
    vs = [torch.nn.functional.pad(it.vectors, (0, 0, 0, s - it.vectors.shape[1])) for it in items]
    ms = [torch.nn.functional.pad(it.mask, (0, s - it.mask.shape[1])) for it in items]
    return torch.cat(vs), torch.cat(ms)


def _split(values: list, items: Sequence[Prepared]) -> list[list]:
    out, start = [], 0
    for it in items:
        out.append(values[start : start + it.rows])
        start += it.rows
    return out


class GenerateModel:
    """A PPFT server part behind ``/v1/generate``."""

    task = "generate"

    def __init__(self, model_id: str, server, center: torch.Tensor | None = None):
        self.id = model_id
        self.server = server
        self.server.eval()
        self.center = center
        self.card = self._card()
        self.public_tokens = PublicTokenCounter(server.tokenizer, server.config.template.max_public_tokens)

    @classmethod
    def load(cls, model_id: str, run_dir: str, *, device: str = "cpu") -> "GenerateModel":
        from ..ppft.checkpoint import load_center
        from ..ppft.server import ServerModel

        server = ServerModel.load(run_dir, device=device)
        return cls(model_id, server, load_center(run_dir, server.config))

    def _card(self) -> dict[str, Any]:
        c, ref = self.server.config, self.server.decoder_ref
        if bool(c.center_sha256) != (self.center is not None):  # here, so the vLLM-backed model checks it too
            raise ValueError(
                f"model {self.id!r}: a centring client's model needs its slot centre and only it "
                f"(config center_sha256={c.center_sha256!r}, centre given: {self.center is not None})"
            )
        return {
            "id": self.id,
            "object": "model",
            "task": "generate",
            "route": "/v1/generate",
            "payload_format_version": FORMAT_VERSION,
            "payload_kind": "pooled",
            "encoder_id": c.encoder_id,
            "encoder_sha256": c.encoder_sha256,
            "encoder_dim": c.encoder_dim,
            "encoder_kind": "contextual",
            "k": c.k,
            "normalize": True,
            "renormalize": True,
            "mechanism": c.mechanism,
            "noise_match": c.noise_match,
            "epsilon": c.epsilon,
            "stage": c.stage,
            "max_private_tokens": c.max_private_tokens,
            "max_slots": math.ceil(c.max_private_tokens / c.k),
            "max_public_tokens": c.template.max_public_tokens,  # a longer public text is refused (422), never cut
            "fixed_slots": c.fixed_slots,
            "repeat_mean": c.repeat_mean,  # the client sends each prompt's unit mean slot in place of every slot
            # the public slot centre the client subtracts before the noise (null: none, as PPFT)
            "center_sha256": c.center_sha256,
            "center_mu": c.center_mu,
            "center": None
            if self.center is None
            else self.center.tolist(),  # [d], or the centre + subspace map [1 + m, d]
            "decoder": {
                "name": public_name(ref.get("name_or_path")),
                "sha256": ref.get("sha256"),
                "model_type": ref.get("model_type"),
                "hidden_size": ref.get("hidden_size"),
            },
            "adapters": [],
        }

    def prepare(self, payload: Payload, public: Sequence[str] | None, config: ServerConfig) -> Prepared:
        _check_common(payload, self.card, config)
        pub = _check_public(payload.public if public is None else public, payload.batch_size, config)
        self.public_tokens.check(pub)
        vectors, mask = _trimmed(payload)
        return Prepared(vectors, mask, pub)

    def run(self, key: Hashable, items: list[Prepared]) -> list[tuple[list[str], int]]:
        """One generation call for every row of ``items`` (key: a :class:`Decoding`, or max_new_tokens for greedy):
        per item, its answers and their number of tokens (counted here, in the one thread that uses the tokenizer)."""
        vectors, mask = _pad_cat(items)
        public = None
        if any(it.public is not None for it in items):
            # no public text and "" lay out the same sequence (only the answer cue follows the slots)
            public = [p for it in items for p in (it.public if it.public is not None else [""] * it.rows)]
        decoding = key if isinstance(key, Decoding) else Decoding(int(key))
        answers, counts = self._generate(vectors, mask, public, decoding, items)
        return [(a, sum(n)) for a, n in zip(_split(answers, items), _split(counts, items))]

    def _generate(
        self,
        vectors: torch.Tensor,
        mask: torch.Tensor,
        public: list[str] | None,
        decoding: Decoding,
        items: list[Prepared],
    ) -> tuple[list[str], list[int]]:
        """Answers of every row and their numbers of tokens (backends override this)."""
        sampled = decoding.temperature > 0
        answers = self.server.generate(
            vectors,
            mask,
            public=public,
            max_new_tokens=decoding.max_new_tokens,
            temperature=decoding.temperature,
            top_p=decoding.top_p,
            generators=row_generators(items) if sampled else None,
        )
        return answers, [len(ids) for ids in self.server.tokenizer(answers, add_special_tokens=False)["input_ids"]]


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
            "decoder": None,
            "adapters": [],
        }

    @classmethod
    def load(cls, model_id: str, path: str, *, device: str = "cpu") -> "EmbedModel":
        from ..encoders.loading import load_hf_encoder

        _, model, _, sha = load_hf_encoder(path)
        return cls(model_id, model.to(device), sha256=sha, name=public_name(path))

    def prepare(self, payload: Payload, public: Sequence[str] | None, config: ServerConfig) -> Prepared:
        _check_common(payload, self.card, config)
        if payload.public is not None or public is not None:
            raise ApiError(422, "invalid_request", "/v1/embed takes no public text")
        if min(payload.lengths) < 1:
            raise _mismatch("every row of an embed payload needs at least one token")
        vectors, mask = _trimmed(payload)
        worst = float(vectors[mask].norm(dim=-1).max())
        if worst > self.clip_norm * (1 + NORM_TOLERANCE):
            raise _mismatch(
                f"a token vector has norm {worst:.4g}, above this model's clip_norm {self.clip_norm:.4g} (clip the noisy embeddings)"
            )
        return Prepared(vectors, mask, None)

    @torch.no_grad()
    def run(self, key: Hashable, items: list[Prepared]) -> list[list[list[float]]]:
        vectors, mask = _pad_cat(items)
        dev = next(self.model.parameters()).device
        out = self.model(inputs_embeds=vectors.to(dev), attention_mask=mask.to(dev).long()).last_hidden_state.float()
        m = mask.to(dev).unsqueeze(-1).float()
        pooled = (out * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
        return _split(pooled.cpu().tolist(), items)


class ModelRegistry:
    """Every served model by id."""

    def __init__(self, models: dict[str, Any]):
        self.models = dict(models)

    @classmethod
    def load(cls, config: ServerConfig) -> "ModelRegistry":
        models: dict[str, Any] = {}
        generate = GenerateModel.load
        if config.backend == "vllm":  # a gateway: validates and projects here, generates on a vLLM server
            from .vllm_gateway import VllmGenerateModel

            generate = functools.partial(VllmGenerateModel.load, config=config)
        for table, kind, load in (
            (config.models, GenerateModel, generate),
            (config.embed_models, EmbedModel, EmbedModel.load),
        ):
            for model_id, path in table.items():
                try:
                    models[model_id] = load(model_id, path, device=config.device)
                except (OSError, ValueError, RuntimeError) as exc:
                    raise ValueError(f"cannot load {kind.task} model {model_id!r} from {path!r}: {exc}") from exc
        return cls(models)

    def get(self, model_id: str | None, task: str):
        if not model_id:
            raise ApiError(422, "invalid_request", "name the model (query parameter or JSON field 'model')")
        model = self.models.get(model_id)
        if model is None:
            raise ApiError(404, "model_not_found", f"no model {model_id!r} here; GET /v1/models lists them")
        if model.task != task:
            raise ApiError(404, "model_not_found", f"model {model_id!r} serves {model.card['route']}, not /v1/{task}")
        return model

    def cards(self) -> list[dict[str, Any]]:
        return [m.card for m in self.models.values()]
