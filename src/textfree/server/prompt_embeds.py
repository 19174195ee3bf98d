"""Prompt embeddings on the wire to vLLM: :func:`encode_embeds`, the serialisation of one ``prompt_embeds`` item.

A served system's gateway model builds the decoder's input sequence as embeddings without the decoder (PPFT's:
:class:`textfree.ppft.serving.PromptEmbedder`) and sends it through :mod:`textfree.server.vllm_gateway`.

vLLM's completions API takes ``prompt_embeds`` as base64 of ``torch.save(tensor)`` (a zip with a pickled tensor;
vLLM reads it with ``torch.load(weights_only=True)``). :func:`encode_embeds` serialises only tensors the gateway
computed itself, each cloned into its own storage (``torch.save`` writes a view's whole storage, which would carry
other rows of the batch). Client bytes are never passed to ``torch.load``: they are parsed by
:meth:`textfree.payload.Payload.from_bytes` before anything here runs.
"""

from __future__ import annotations

import base64
import io

import torch

__all__ = ["encode_embeds", "TORCH_DTYPES"]

TORCH_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def encode_embeds(embeds: torch.Tensor, dtype: str = "float32") -> str:
    """Standard base64 of ``torch.save`` of our own [L, d] tensor, in its own storage: vLLM's ``prompt_embeds`` item."""
    if not isinstance(embeds, torch.Tensor) or embeds.dim() != 2:
        raise TypeError(f"encode_embeds takes a [length, hidden] tensor, got {type(embeds).__name__}")
    buf = io.BytesIO()
    torch.save(embeds.detach().to("cpu", TORCH_DTYPES[dtype]).contiguous().clone(), buf)
    return base64.b64encode(buf.getvalue()).decode("ascii")
