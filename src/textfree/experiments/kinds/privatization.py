"""Cell kind ``privatization``: how much PPFT's slot privatization moves the encoder's slots.

For each grid point and seed: encode the cell's private texts (once per cell; the clean hidden states are
cached), k-pool them, L2-normalise, add the mechanism's noise with a generator seeded by ``seed``, renormalise
(the exact steps of :meth:`textfree.mechanisms.SlotPrivatization.apply`, split so the noise itself can be
measured), and compare with the clean slots (the same pipeline with noise None).

Metrics (means are over all real slots of all prompts unless said otherwise):

* ``cosine``: mean cosine between each clean slot and its released (noisy, renormalised) slot.
* ``noise_norm``: mean L2 norm of the noise actually added, before renormalisation.
* ``expected_noise_norm``: the mechanism's E||z|| in the encoder's dimension d (d/eps for L2-Laplace); NaN for
  a mechanism without ``expected_noise_norm``.
* ``noise_norm_ratio``: ``noise_norm / expected_noise_norm`` (about 1 when the sampler is right).
* ``slots_per_prompt``: mean number of slots per prompt.
* ``slot_epsilon``: worst-case privacy loss of one slot (2*eps for L2-Laplace on unit slots).
* ``prompt_epsilon``: mean over prompts of the worst-case prompt loss (2*eps*slots for L2-Laplace).
* ``prompt_epsilon_max``: the largest worst-case prompt loss among the prompts.

Every grid point with the same seed uses the same generator seed (common random numbers), so differences
between points come from the settings, not from different draws.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from ...mechanisms import SlotPrivatization, mechanism_from_dict
from ...mechanisms.transforms import k_pool, l2_normalize
from ...metrics import cosine_similarity_rows
from ...results.cell import CellError
from ...rng import seeded_generator
from ..inputs import load_cell_encoder, load_texts
from ..registry import RunContext, register_cell_kind

__all__ = ["privatization", "PRIVATIZATION_METRICS", "PRIVATIZATION_PARAMS", "privatize_batch"]

ENCODE_BATCH = 32

PRIVATIZATION_METRICS = (
    "cosine",
    "noise_norm",
    "expected_noise_norm",
    "noise_norm_ratio",
    "slots_per_prompt",
    "slot_epsilon",
    "prompt_epsilon",
    "prompt_epsilon_max",
)

PRIVATIZATION_PARAMS = {
    "k": "tokens per pooled slot (integer >= 1; default 4)",
    "normalize": "L2-normalise each pooled slot before the noise (default true)",
    "renormalize": "L2-normalise each noisy slot after the noise (default true)",
    "sensitivity": "largest L2 distance between two slots, for the privacy loss; null: 2 for unit slots",
}


def _slot_privatization(mechanism_spec: dict | None, params: dict) -> SlotPrivatization:
    for name, value in params.items():
        problem = _check_param(name, value)
        if problem:
            raise ValueError(f"params.{name}: {problem}")
    noise = None if mechanism_spec is None else mechanism_from_dict(mechanism_spec)
    return SlotPrivatization(
        noise=noise,
        k=params.get("k", 4),
        normalize=params.get("normalize", True),
        renormalize=params.get("renormalize", True),
        sensitivity=params.get("sensitivity"),
    )


def _check_param(name: str, value: Any) -> str | None:
    """Why ``value`` is not valid for parameter ``name`` (None when it is)."""
    if name == "k":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            return f"k must be an integer >= 1, got {value!r}"
    elif name in ("normalize", "renormalize"):
        if not isinstance(value, bool):
            return f"{name} must be true or false, got {value!r}"
    elif name == "sensitivity":
        ok = value is None or (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
        )
        if not ok:
            return f"sensitivity must be a finite number > 0 or null, got {value!r}"
    return None


def _validate(cell: Any, points: list[dict]) -> None:
    if cell.dataset is None and cell.texts is None:
        raise CellError("the privatization kind needs a `dataset` or inline `texts`", field="texts")
    if cell.mechanism is None:
        raise CellError(
            "the privatization kind needs a `mechanism` (e.g. {name: l2_laplace, epsilon: 75})", field="mechanism"
        )
    for point in points:
        for name, value in cell.resolve(point).params.items():
            problem = _check_param(name, value)
            if problem:
                field = f"grid.params.{name}" if f"params.{name}" in point else f"params.{name}"
                raise CellError(problem, field=field)


def privatize_batch(
    privatization: SlotPrivatization, hidden: torch.Tensor, mask: torch.Tensor, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``SlotPrivatization.apply`` step by step, also returning the noise norms.

    Returns (released slots [B, S, d] float32, slot mask [B, S], noise norm per slot [B, S] float64). The
    released slots equal ``privatization.apply(hidden, mask, generator=generator)`` for the same generator state.
    """
    if privatization.noise is None:
        raise ValueError("privatize_batch needs a noise mechanism")
    pooled, slot_mask = k_pool(hidden.to(torch.float32), mask, privatization.k)
    x = l2_normalize(pooled) if privatization.normalize else pooled
    x64 = x.to(torch.float64)
    y = privatization.noise.sample(x64, generator=generator)
    noise_norm = (y - x64).norm(dim=-1)
    if privatization.renormalize:
        y = l2_normalize(y)
    released = y.to(torch.float32) * slot_mask.unsqueeze(-1)
    return released, slot_mask, noise_norm


def _encoded(context: RunContext) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The clean hidden states of the cell's texts, in batches: [(hidden [B, T, d], mask [B, T])]."""

    def encode():
        texts = context.cached("texts", lambda: load_texts(context.cell))
        encoder = context.cached("encoder", lambda: load_cell_encoder(context.cell, "contextual"))
        context.logger.info("encoding %d texts with %s (d=%d)", len(texts), encoder.name, encoder.dim)
        out = []
        for start in range(0, len(texts), ENCODE_BATCH):
            batch = encoder.encode(texts[start : start + ENCODE_BATCH])
            out.append((batch.hidden.detach().to(torch.float32).cpu(), batch.mask.cpu()))
        return out

    return context.cached("encoded", encode)


@register_cell_kind(
    "privatization",
    metrics=PRIVATIZATION_METRICS,
    params=PRIVATIZATION_PARAMS,
    validate=_validate,
    help="Cosine between clean and privatized slots, noise norms and privacy losses over a grid.",
    takes_attack=False,
)
def privatization(cell: Any, point: dict, seed: int, context: RunContext) -> dict[str, float]:
    """Cosine between clean and privatized slots, noise norms and privacy losses for one point and seed."""
    resolved = cell.resolve(point)
    priv = _slot_privatization(resolved.mechanism, resolved.params)
    batches = _encoded(context)
    clean_priv = SlotPrivatization(noise=None, k=priv.k, normalize=priv.normalize, renormalize=priv.renormalize)
    clean = context.cached(
        ("clean", priv.k, priv.normalize),
        lambda: [clean_priv.apply(h, m, generator=None) for h, m in batches],
    )
    generator = seeded_generator(seed, warn=False)  # experiments only: the seed is recorded with the results
    cosines, norms, slots = [], [], []
    for (hidden, mask), (clean_slots, clean_mask) in zip(batches, clean):
        released, slot_mask, noise_norm = privatize_batch(priv, hidden, mask, generator)
        if not torch.equal(slot_mask, clean_mask):  # same pooling, so this cannot happen
            raise RuntimeError("clean and privatized slot masks differ")
        cosines.append(cosine_similarity_rows(clean_slots, released, slot_mask))
        norms.append(noise_norm[slot_mask].numpy())
        slots.append(slot_mask.sum(dim=1).numpy())
    cos = np.concatenate(cosines)
    noise = np.concatenate(norms)
    per_prompt = np.concatenate(slots).astype(int)
    d = batches[0][0].shape[-1]
    expected = priv.noise.expected_noise_norm(d) if hasattr(priv.noise, "expected_noise_norm") else math.nan
    prompt_eps = np.array([priv.prompt_loss(int(s)).epsilon for s in per_prompt], dtype=np.float64)
    mean_noise = float(noise.mean())
    return {
        "cosine": float(cos.mean()),
        "noise_norm": mean_noise,
        "expected_noise_norm": float(expected),
        "noise_norm_ratio": mean_noise / expected if expected and math.isfinite(expected) else math.nan,
        "slots_per_prompt": float(per_prompt.mean()),
        "slot_epsilon": float(priv.slot_loss().epsilon),
        "prompt_epsilon": float(prompt_eps.mean()),
        "prompt_epsilon_max": float(prompt_eps.max()),
    }
