"""The client API: text in, privatized payload out. The text never leaves this object."""

from __future__ import annotations

import warnings
from typing import Sequence

import torch

from .mechanisms.slots import SlotPrivatization
from .payload import EncoderInfo, Payload
from .rng import resolve_generator

__all__ = ["Privatizer"]


class Privatizer:
    """``Privatizer(encoder, mechanism, k).privatize(texts) -> Payload``.

    encoder: a :class:`~textfree.encoders.ContextualEncoder` (PPFT: pooled slots) or an
    :class:`~textfree.encoders.EmbeddingTableEncoder` (token embeddings; use k=1, normalize=False).
    mechanism: the noise (e.g. ``L2Laplace(75)``), or None for a clean (non-private) payload, which is only
    for experiments' upper bounds. ``pad_to``: release exactly that many slots per prompt, hiding its length
    (:class:`~textfree.mechanisms.SlotPrivatization`). ``center``: centre every unit slot on this public vector
    first (:mod:`textfree.mechanisms.centering`). ``repeat_mean``: release the prompt's unit mean slot once per slot
    (beyond the paper; :func:`~textfree.mechanisms.slots.repeat_mean_slots`). ``ledger`` + ``ledger_key``: charge every
    release to a local ledger first.
    """

    def __init__(
        self,
        encoder,
        mechanism=None,
        k: int = 4,
        *,
        normalize: bool = True,
        renormalize: bool = True,
        sensitivity: float | None = None,
        pad_to: int | None = None,
        center: torch.Tensor | None = None,
        repeat_mean: bool = False,
        batch_size: int = 32,
        ledger=None,
        ledger_key: str | None = None,
    ):
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        if ledger is not None and not ledger_key:
            raise ValueError("a ledger needs a ledger_key (the user or key releases are charged to)")
        self.encoder = encoder
        self.privatization = SlotPrivatization(
            noise=mechanism,
            k=k,
            normalize=normalize,
            renormalize=renormalize,
            sensitivity=sensitivity,
            pad_to=pad_to,
            center=center,
            repeat_mean=repeat_mean,
        )
        self.batch_size = batch_size
        self.ledger = ledger
        self.ledger_key = ledger_key

    @property
    def encoder_info(self) -> EncoderInfo:
        return EncoderInfo(self.encoder.name, self.encoder.sha256, self.encoder.dim, self.encoder.kind)

    def privatize(
        self,
        texts: str | Sequence[str],
        *,
        generator: torch.Generator | None = None,
        seed: int | None = None,
        public: Sequence[str] | None = None,
    ) -> Payload:
        """Encode, pool, noise. Without ``generator``/``seed`` the noise is seeded from OS entropy."""
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            raise ValueError("privatize needs at least one text")
        if not all(isinstance(t, str) and t.strip() for t in texts):
            raise ValueError("every text must be a non-empty string")
        if public is not None and len(public) != len(texts):
            raise ValueError(f"public must have one entry per text ({len(texts)}), got {len(public)}")
        gen = resolve_generator(generator, seed) if self.privatization.noise is not None else None
        cut = _cut_count(self.encoder, texts)
        if cut:  # never silently: the cut tail is neither released nor answered
            warnings.warn(
                f"{cut} of {len(texts)} prompt(s) are longer than the encoder's limit of {self.encoder.max_length} "
                "tokens and were cut to it: their tail is not released",
                UserWarning,
                stacklevel=2,
            )
        chunks, masks = [], []
        for start in range(0, len(texts), self.batch_size):
            batch = self.encoder.encode(texts[start : start + self.batch_size])
            v, m = self.privatization.apply(batch.hidden, batch.mask, generator=gen)
            chunks.append(v.cpu())  # a payload is what leaves the client: host memory, whatever device encoded it
            masks.append(m.cpu())
        vectors, mask = _pad_cat(chunks, masks)
        kind = "pooled" if self.encoder.kind == "contextual" else "token"
        payload = Payload(
            vectors,
            mask,
            self.encoder_info,
            self.privatization,
            kind=kind,
            public=None if public is None else list(public),
        )
        if self.ledger is not None:  # every row's loss, with its slot releases for a tight accountant
            self.ledger.charge_payload(self.ledger_key, payload)
        return payload


def _cut_count(encoder, texts: list[str]) -> int:
    """How many of ``texts`` the encoder's tokenizer cuts at its ``max_length`` (special tokens included)."""
    tokenizer, limit = getattr(encoder, "tokenizer", None), getattr(encoder, "max_length", None)
    if tokenizer is None or limit is None:
        return 0
    return sum(len(ids) > limit for ids in tokenizer(list(texts), truncation=False, verbose=False)["input_ids"])


def _pad_cat(chunks: list[torch.Tensor], masks: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    s = max(c.shape[1] for c in chunks)
    out_v = [torch.nn.functional.pad(c, (0, 0, 0, s - c.shape[1])) for c in chunks]
    out_m = [torch.nn.functional.pad(m, (0, s - m.shape[1])) for m in masks]
    return torch.cat(out_v), torch.cat(out_m)
