"""PPFT behind the server: the handlers of PPFT generate models, in process or through the vLLM gateway.

* :class:`GenerateModel` wraps a PPFT :class:`~textfree.ppft.server.ServerModel` (projection + decoder + LoRA;
  the run's ``encoder/`` is never loaded): pooled payload rows (+ public text) -> answers.
* :class:`PromptEmbedder` builds the decoder's input sequence as embeddings WITHOUT the decoder, what the vLLM
  gateway sends as ``prompt_embeds``: one row per prompt, the same layout as ``ServerModel``
  (``tests/test_server_vllm_gateway.py`` checks they are equal)::

      [BOS] [count vector] [answer vector] [P(summary_1) ... P(summary_N)] [P(slot_1) ... P(slot_n)] [public tokens]

  (the count vector only when the run's projection has ``count_vectors``, the answer vector only when it has an
  answer head, the summary vectors only when ``summary_slots`` > 0, the slots left out with ``summary_only``;
  :func:`~textfree.ppft.layout.slot_prefix` builds the private prefix for both). It loads only the run's projection,
  the decoder's tokenizer and the decoder's token-embedding table (read from its safetensors file).
* :class:`VllmGenerateModel` is a generate model whose decoding runs on vLLM
  (:mod:`textfree.server.vllm_gateway`): same card, same payload checks as :class:`GenerateModel`.

The server reaches these only through the served system ``"ppft"`` (:mod:`textfree.ppft.service`).
"""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any, Hashable, Sequence

import httpx
import torch
from safetensors import safe_open

from ..atomic import read_json
from ..lm.hub import local_ref
from ..lm.loading import EMBEDDING_KEYS, load_decoder_tokenizer, load_input_embeddings
from ..lm.refs import verify_decoder_sha
from ..payload import FORMAT_VERSION, Payload
from ..server.config import ServerConfig
from ..server.models import (
    Decoding,
    Prepared,
    PublicTokenCounter,
    check_common,
    check_public,
    pad_cat,
    public_name,
    row_generators,
    split_rows,
    trimmed,
)
from ..server.vllm_gateway import SamplingParams, VllmClient, completion_request
from .checkpoint import load_center
from .config import TextFreeConfig
from .layout import public_rows, slot_prefix
from .projection import Projection
from .server import ADAPTER_DIR, CONFIG_NAME, DECODER_REF, PROJECTION_DIR, ServerModel

__all__ = ["GenerateModel", "PromptEmbedder", "VllmGenerateModel"]


def _run_decoder(run_dir: str | os.PathLike) -> str | None:
    """The base decoder bundled in a run (a published run's ``decoder_ref.json`` names ``"decoder"``, relative to
    the run), else None: the recorded location as it is."""
    ref_file = Path(run_dir) / DECODER_REF
    try:
        ref = read_json(ref_file)
    except (FileNotFoundError, ValueError):
        return None  # ServerModel.load reports it
    location = ref.get("name_or_path") if isinstance(ref, dict) else None
    if not isinstance(location, str):
        return None
    bundled = local_ref(run_dir, location)
    return bundled if bundled != location else None


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
        """The server part of the PPFT run at ``run_dir`` (projection, base decoder, adapter; never ``encoder/``)."""
        server = ServerModel.load(run_dir, device=device, decoder=_run_decoder(run_dir))
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
            "encoder_id": public_name(c.encoder_id),  # a name, never the server's path of the run's encoder
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
        """The request checked against this card (4xx ``ApiError``), its rows trimmed to the longest."""
        check_common(payload, self.card, config)
        pub = check_public(payload.public if public is None else public, payload.batch_size, config)
        self.public_tokens.check(pub)
        vectors, mask = trimmed(payload)
        return Prepared(vectors, mask, pub)

    def run(self, key: Hashable, items: list[Prepared]) -> list[tuple[list[str], int]]:
        """One generation call for every row of ``items`` (key: a :class:`Decoding`, or max_new_tokens for greedy):
        per item, its answers and their number of tokens (counted here, in the one thread that uses the tokenizer)."""
        vectors, mask = pad_cat(items)
        public = None
        if any(it.public is not None for it in items):
            # no public text and "" lay out the same sequence (only the answer cue follows the slots)
            public = [p for it in items for p in (it.public if it.public is not None else [""] * it.rows)]
        decoding = key if isinstance(key, Decoding) else Decoding(int(key))
        answers, counts = self._generate(vectors, mask, public, decoding, items)
        return [(a, sum(n)) for a, n in zip(split_rows(answers, items), split_rows(counts, items))]

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


def _check_adapter(run: Path, table_names: tuple[str, ...]) -> None:
    """The table is the base decoder's: refuse an adapter that changes the token embeddings."""
    weights = run / ADAPTER_DIR / "adapter_model.safetensors"
    if not weights.is_file():
        raise FileNotFoundError(f"no adapter weights at {str(weights)!r} (vLLM serves this file as the model's LoRA)")
    with safe_open(str(weights), framework="pt") as fh:
        touched = [k for k in fh.keys() if any(name.split(".")[0] in k for name in table_names)]
    if touched:
        raise ValueError(
            f"the adapter in {str(run)!r} changes the token embeddings ({touched[0]}, ...): the gateway embeds "
            "public tokens with the base table, so it cannot serve this run"
        )


class PromptEmbedder:
    """Projection + token-embedding table + tokenizer of one PPFT run: payload rows (+ public text) -> embeddings."""

    def __init__(
        self, projection: Projection, table: torch.Tensor, tokenizer, config: TextFreeConfig, decoder_ref: dict
    ):
        if table.dim() != 2 or table.shape[1] != config.decoder_dim:
            raise ValueError(
                f"the token-embedding table is {tuple(table.shape)}; the run's decoder width is {config.decoder_dim}"
            )
        if len(tokenizer) > table.shape[0]:
            raise ValueError(
                f"the tokenizer has {len(tokenizer)} tokens but the embedding table only {table.shape[0]} rows"
            )
        if projection.config.in_dim != config.encoder_dim or projection.config.out_dim != config.decoder_dim:
            raise ValueError(
                f"projection {projection.config.in_dim}->{projection.config.out_dim} does not match the run's "
                f"dims {config.encoder_dim}->{config.decoder_dim}"
            )
        self.projection = projection.eval().requires_grad_(False)
        self.table = table
        self.tokenizer = tokenizer
        self.config = config
        self.decoder_ref = decoder_ref
        self._tokenizer_lock = threading.Lock()  # a fast tokenizer must not be entered from two threads at once

    @classmethod
    def load(
        cls, run_dir: str | os.PathLike, *, decoder: str | os.PathLike | None = None, check_decoder_sha: bool = True
    ) -> "PromptEmbedder":
        """From a run directory (what ``TextFreeLM.save`` writes); the base decoder from ``decoder_ref.json`` (or
        ``decoder``), sha256-checked like ``ServerModel.load``, of which only the token-embedding table is read."""
        run = Path(run_dir)
        config = TextFreeConfig.from_dict(read_json(run / CONFIG_NAME))
        ref = read_json(run / DECODER_REF)
        location = str(decoder) if decoder is not None else local_ref(run, ref["name_or_path"])
        if check_decoder_sha:
            verify_decoder_sha(location, ref, run / DECODER_REF)
        _check_adapter(run, EMBEDDING_KEYS)
        table = load_input_embeddings(location)
        return cls(
            Projection.load(run / PROJECTION_DIR),
            table,
            load_decoder_tokenizer(location),
            config,
            {**ref, "name_or_path": location},
        )

    @torch.no_grad()
    def rows(self, vectors: torch.Tensor, mask: torch.Tensor, public: list[str] | None) -> list[torch.Tensor]:
        """Per payload row, its prompt embeddings (float32)
        [1 + n_count + n_answer + n_summary + n_slots + n_public_tokens, d_d]."""
        b = vectors.shape[0]
        lengths = mask.to(torch.bool).sum(dim=1).tolist()
        with self._tokenizer_lock:
            pub, seen = public_rows(self.tokenizer, self.config.template, public, b)
        bos = self.tokenizer.bos_token_id if self.config.template.add_bos else None
        head = [bos] if bos is not None else []
        out = []
        for i in range(b):
            tokens = self.table[torch.tensor(head + pub[i], dtype=torch.long)]
            prefix = slot_prefix(
                self.projection,
                vectors[i, : int(lengths[i])],
                self.config.summary_slots,
                seen[i],
                summary_only=self.config.summary_only,
            )
            out.append(torch.cat([tokens[: len(head)], prefix, tokens[len(head) :]]))
        return out

    def count_tokens(self, texts: list[str]) -> list[int]:
        with self._tokenizer_lock:
            return [len(ids) for ids in self.tokenizer(texts, add_special_tokens=False)["input_ids"]]


class VllmGenerateModel(GenerateModel):
    """A generate model whose decoding runs on vLLM: same card, same payload checks as :class:`GenerateModel`."""

    def __init__(
        self,
        model_id: str,
        embedder: PromptEmbedder,
        client: VllmClient,
        *,
        lora: str | None = None,
        dtype: str = "float32",
        max_concurrent_calls: int = 8,
        center: torch.Tensor | None = None,
    ):
        self.id = model_id
        self.server = embedder  # what the card is read from (config, decoder_ref), as GenerateModel's ServerModel
        self.center = center  # the run's public slot centre, for the card (None: uncentred, as PPFT)
        self.client = client
        self.lora = lora or model_id
        self.dtype = dtype
        self.max_concurrent_calls = max_concurrent_calls  # the micro-batcher may have this many calls in flight
        self.card = self._card()
        self.public_tokens = PublicTokenCounter(embedder.tokenizer, embedder.config.template.max_public_tokens)

    @classmethod
    def load(
        cls,
        model_id: str,
        run_dir: str,
        *,
        config: ServerConfig,
        device: str = "cpu",
        transport: httpx.BaseTransport | None = None,
    ) -> "VllmGenerateModel":
        client = VllmClient(
            config.vllm_url,
            timeout_s=config.vllm_timeout_s,
            max_connections=config.vllm_max_concurrent_calls,
            transport=transport,
        )
        """A gateway model of the run at ``run_dir``: its projection and token table here, decoding on vLLM."""
        embedder = PromptEmbedder.load(run_dir)
        return cls(
            model_id,
            embedder,
            client,
            dtype=config.vllm_dtype,
            max_concurrent_calls=config.vllm_max_concurrent_calls,
            center=load_center(run_dir, embedder.config),
        )

    def request(
        self, vectors: torch.Tensor, mask: torch.Tensor, public: list[str] | None, sampling: SamplingParams
    ) -> dict[str, Any]:
        return completion_request(self.lora, self.server.rows(vectors, mask, public), sampling, dtype=self.dtype)

    def _generate(
        self, vectors: torch.Tensor, mask: torch.Tensor, public: list[str] | None, decoding: Any, items: list[Any]
    ) -> tuple[list[str], list[int]]:
        # vLLM takes one seed per request: sent only when every request of the batch asked for the same one
        seeds = {it.seed for it in items}
        seed = seeds.pop() if len(seeds) == 1 and decoding.temperature > 0 else None
        sampling = SamplingParams(
            decoding.max_new_tokens, temperature=decoding.temperature, top_p=decoding.top_p, seed=seed
        )
        texts = self.client.complete(self.request(vectors, mask, public, sampling))
        answers = [t.strip() for t in texts]
        return answers, self.server.count_tokens(answers)
