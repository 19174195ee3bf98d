"""The decoder's input sequence as embeddings, built WITHOUT the decoder: what the vLLM gateway sends as ``prompt_embeds``.

One row per prompt, the same layout as :class:`~textfree.ppft.server.ServerModel` (``tests/test_server_vllm_gateway.py``
checks they are equal)::

    [BOS] [count vector] [answer vector] [P(summary_1) ... P(summary_N)] [P(slot_1) ... P(slot_n)] [public tokens + public suffix]

(the count vector only when the run's projection has ``count_vectors``, the answer vector only when it has an
answer head, the summary vectors only when ``summary_slots`` > 0, the slots left out with ``summary_only``;
:func:`~textfree.ppft.layout.slot_prefix` builds the private prefix for both).

The gateway loads only the run's projection (``projection/``), the decoder's tokenizer and the decoder's
token-embedding table (read from its safetensors file; no other decoder weight is loaded). The run's ``encoder/``
is never read.

Serialisation for vLLM: vLLM's completions API takes ``prompt_embeds`` as base64 of ``torch.save(tensor)`` (a zip
with a pickled tensor; vLLM reads it with ``torch.load(weights_only=True)``). :func:`encode_embeds` serialises only
tensors the gateway computed itself, each cloned into its own storage (``torch.save`` writes a view's whole storage,
which would carry other rows of the batch). Client bytes are never passed to ``torch.load``: they are parsed by
:meth:`textfree.payload.Payload.from_bytes` before anything here runs.
"""

from __future__ import annotations

import base64
import io
import os
import threading
from pathlib import Path

import torch
from safetensors import safe_open

from ..atomic import read_json
from ..lm.loading import EMBEDDING_KEYS, load_decoder_tokenizer, load_input_embeddings
from ..lm.refs import verify_decoder_sha
from ..ppft.config import TextFreeConfig
from ..ppft.layout import public_rows, slot_prefix
from ..ppft.projection import Projection
from ..ppft.server import ADAPTER_DIR, CONFIG_NAME, DECODER_REF, PROJECTION_DIR

__all__ = ["PromptEmbedder", "encode_embeds", "TORCH_DTYPES"]

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def encode_embeds(embeds: torch.Tensor, dtype: str = "float32") -> str:
    """Standard base64 of ``torch.save`` of our own [L, d] tensor, in its own storage: vLLM's ``prompt_embeds`` item."""
    if not isinstance(embeds, torch.Tensor) or embeds.dim() != 2:
        raise TypeError(f"encode_embeds takes a [length, hidden] tensor, got {type(embeds).__name__}")
    buf = io.BytesIO()
    torch.save(embeds.detach().to("cpu", TORCH_DTYPES[dtype]).contiguous().clone(), buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")


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
        location = str(decoder) if decoder is not None else ref["name_or_path"]
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
        """Per payload row, its prompt embeddings [1 + n_count + n_answer + n_summary + n_slots + n_public_tokens, d_d] (float32)."""
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
