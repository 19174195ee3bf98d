"""Sentence embeddings from token embeddings: what an embedding service computes from the vectors a client sent.

:func:`pooled_embeddings` runs an encoder on ``inputs_embeds`` (the rest of the model after its token-embedding
layer: SnD's split) and mean-pools the last hidden states over the real tokens. The server's ``/v1/embed`` and SnD's
denoiser training call this one function, so the denoiser learns exactly what the server answers.
"""

from __future__ import annotations

import torch

__all__ = ["pooled_embeddings"]


@torch.no_grad()
def pooled_embeddings(model: torch.nn.Module, vectors: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``model``'s mean-pooled last hidden state [B, hidden] (float32, on the model's device) for ``vectors``
    [B, n, d] and ``mask`` [B, n] (True: a real token)."""
    dev = next(model.parameters()).device
    out = model(inputs_embeds=vectors.to(dev), attention_mask=mask.to(dev).long()).last_hidden_state.float()
    m = mask.to(dev).unsqueeze(-1).float()
    return (out * m).sum(dim=1) / m.sum(dim=1).clamp_min(1.0)
