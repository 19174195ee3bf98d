"""PrivacyRestore's server side (Zeng et al., ACL 2025; its repository's method): restoration vectors on attention
heads, and their application to a decoder.

The server keeps a *bank*: one vector r[e, h] of the head width for every privacy span e of a public span list
(Pri-DDX's 149 evidences) and every selected attention head h. A client that removed spans from its prompt sends,
beside the incomplete text, a *meta vector* u (the concatenation over the heads of the spans' weighted sum, unit
norm, noised: :mod:`textfree.lm.privacy_restore`) and a scalar multiplier m. At each selected head the server adds

    o <- o + u_h * (m * ||o||) * <o, u_h>

to the head's output o at every position (the repository's ``lt_modulated_vector_add_new_direction_client``),
before the layer's output projection. Nothing else of the decoder changes; the bank is trained on the task's loss.

* :func:`attention_heads`: the decoder's (layer, head) grid and head width;
* :func:`head_outputs`: the per-head outputs at each prompt's last token (the probe behind head selection and the
  bank's initial directions);
* :func:`select_heads`: the ``k`` heads whose last-token output moves most between full and masked prompts
  (mass-mean shift, as the repository's bank construction ranks heads by how well they carry the spans);
* :class:`RestorationBank`: the trainable bank and the clean meta vector of a weight matrix;
* :func:`restored`: a context manager that applies meta vectors to a decoder's forward passes (training and
  generation alike, through forward pre-hooks on the output projections).
"""

from __future__ import annotations

import re
from contextlib import contextmanager
from typing import Iterator, Sequence

import torch

__all__ = ["RestorationBank", "attention_heads", "head_outputs", "restored", "select_heads"]

_OPROJ = re.compile(r"(?:^|\.)layers\.(\d+)\.self_attn\.o_proj$")


def attention_heads(model: torch.nn.Module) -> tuple[dict[int, torch.nn.Module], int, int]:
    """({layer: its attention output projection}, heads per layer, head width) of a Llama-style decoder (PEFT-wrapped
    or not); an error naming the model when it has none."""
    config = model.config
    n_heads = int(config.num_attention_heads)
    width = int(getattr(config, "head_dim", None) or config.hidden_size // n_heads)
    projections = {}
    for name, module in model.named_modules():
        hit = _OPROJ.search(name)
        if hit and isinstance(module, torch.nn.Linear):
            projections[int(hit.group(1))] = module
        elif hit and hasattr(module, "base_layer"):  # a LoRA-wrapped projection
            projections[int(hit.group(1))] = module
    if not projections:
        raise ValueError(f"{type(model).__name__} has no layers.N.self_attn.o_proj modules (not a Llama-style decoder)")
    return projections, n_heads, width


@torch.no_grad()
def head_outputs(model: torch.nn.Module, tokenizer, prompts: Sequence[str], *, batch_size: int = 16) -> torch.Tensor:
    """[n, layers, heads, width]: each head's output (the output projection's input) at each prompt's last token."""
    projections, n_heads, width = attention_heads(model)
    layers = sorted(projections)
    captured: dict[int, torch.Tensor] = {}
    hooks = [
        projections[layer].register_forward_pre_hook(lambda _m, args, layer=layer: captured.__setitem__(layer, args[0]))
        for layer in layers
    ]
    rows = []
    try:
        for start in range(0, len(prompts), batch_size):
            batch = tokenizer(list(prompts[start : start + batch_size]), return_tensors="pt", padding=True,
                              add_special_tokens=False)  # fmt: skip
            model(input_ids=batch.input_ids, attention_mask=batch.attention_mask)
            last = batch.attention_mask.sum(dim=1) - 1
            per_layer = [captured[layer][torch.arange(len(last)), last] for layer in layers]
            rows.append(torch.stack(per_layer, dim=1).reshape(len(last), len(layers), n_heads, width))
    finally:
        for h in hooks:
            h.remove()
    return torch.cat(rows).float()


def select_heads(full: torch.Tensor, masked: torch.Tensor, k: int) -> list[tuple[int, int]]:
    """The ``k`` (layer, head) pairs whose mean last-token output differs most (L2) between the full prompts
    (``full`` [n, L, H, d]) and the same prompts with the spans removed (``masked``), in layer-head order."""
    if full.shape != masked.shape or full.dim() != 4:
        raise ValueError(f"select_heads: full and masked must both be [n, L, H, d], got {full.shape}, {masked.shape}")
    n_layers, n_heads = full.shape[1:3]
    if not 1 <= k <= n_layers * n_heads:
        raise ValueError(f"select_heads: k must be in [1, {n_layers * n_heads}], got {k}")
    shift = (full - masked).mean(dim=0).norm(dim=-1).flatten()
    top = sorted(shift.topk(k).indices.tolist())
    return [(i // n_heads, i % n_heads) for i in top]


class RestorationBank(torch.nn.Module):
    """r[e, h]: ``n_spans`` x ``len(heads)`` vectors of width ``width``; :meth:`meta` makes the clean meta vector."""

    def __init__(self, n_spans: int, heads: Sequence[tuple[int, int]], width: int) -> None:
        super().__init__()
        if n_spans < 1 or width < 1 or not heads:
            raise ValueError(f"RestorationBank needs spans, heads and a width, got {n_spans}, {len(heads)}, {width}")
        self.heads = [(int(a), int(b)) for a, b in heads]
        self.width = int(width)
        self.vectors = torch.nn.Parameter(torch.zeros(n_spans, len(self.heads), width))

    @property
    def dim(self) -> int:
        """The meta vector's dimension: heads x width."""
        return len(self.heads) * self.width

    def init_from_shift(self, full: torch.Tensor, masked: torch.Tensor, spans: Sequence[Sequence[int]],
                        *, generator: torch.Generator) -> None:  # fmt: skip
        """Each span's vectors: the mean output shift (full - masked) at the selected heads over the prompts whose
        removed spans include it, unit norm per head; a span never removed gets a random unit direction."""
        index = torch.tensor(self.heads)
        shift = (full - masked)[:, index[:, 0], index[:, 1]]  # [n, K, d]
        sums = torch.zeros_like(self.vectors)
        counts = torch.zeros(self.vectors.shape[0])
        for row, ids in enumerate(spans):
            for e in ids:
                sums[e] += shift[row]
                counts[e] += 1
        fresh = torch.randn(self.vectors.shape, generator=generator)
        init = torch.where(counts[:, None, None] > 0, sums, fresh)
        with torch.no_grad():
            self.vectors.copy_(init / init.norm(dim=-1, keepdim=True).clamp_min(1e-12))

    def meta(self, weights: torch.Tensor) -> torch.Tensor:
        """[b, K * width] unit meta vectors of span weights [b, n_spans] (row i: sum_e w[i, e] r[e], the heads
        concatenated, then L2-normalised as a whole)."""
        mixed = torch.einsum("be,ekd->bkd", weights.to(self.vectors.dtype), self.vectors).flatten(1)
        return mixed / mixed.norm(dim=-1, keepdim=True).clamp_min(1e-12)


@contextmanager
def restored(model: torch.nn.Module, heads: Sequence[tuple[int, int]], meta: torch.Tensor,
             multiplier: torch.Tensor) -> Iterator[None]:  # fmt: skip
    """Within the block every forward pass of ``model`` adds the meta vectors ``meta`` [b, K * width] (row i to
    sequence i; b = 1 applies to every row) at ``heads``, scaled by ``multiplier`` [b] (see the module docstring)."""
    projections, n_heads, width = attention_heads(model)
    if meta.dim() != 2 or meta.shape[1] != len(heads) * width or multiplier.shape != meta.shape[:1]:
        raise ValueError(f"restored: meta must be [b, {len(heads) * width}] and multiplier [b], got "
                         f"{tuple(meta.shape)}, {tuple(multiplier.shape)}")  # fmt: skip
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for slot, (layer, head) in enumerate(heads):
        if layer not in projections or not 0 <= head < n_heads:
            raise ValueError(f"restored: head ({layer}, {head}) is not in this decoder")
        by_layer.setdefault(layer, []).append((slot, head))

    def hook(layer: int):
        def edit(_module, args):
            out = args[0].unflatten(-1, (n_heads, width))
            add = torch.zeros_like(out)
            for slot, head in by_layer[layer]:
                u = meta[:, slot * width : (slot + 1) * width].to(out.dtype)[:, None, :]  # [b, 1, d]
                o = out[:, :, head, :].detach()  # as the repository: the gradient flows through u only
                scale = multiplier.to(out.dtype)[:, None, None] * o.norm(dim=-1, keepdim=True)
                add[:, :, head, :] = u * scale * (o * u).sum(dim=-1, keepdim=True)
            return ((out + add).flatten(-2),) + tuple(args[1:])

        return edit

    handles = [projections[layer].register_forward_pre_hook(hook(layer)) for layer in by_layer]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
