"""Training the learned reader of T2T / PCT2T text (:class:`~.substitution_learned.SubstitutionInverter`).

:func:`train_substitution_inverter` fine-tunes the whole decoder on (mechanism output, original) pairs of the
attacker's own texts, with a fresh run of the mechanism every epoch, through the PPFT training loop
(:func:`textfree.training.loop.fit`: Accelerate, seeded data order, resumable checkpoints).
"""

from __future__ import annotations

import logging
import random
import shutil
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ..training.checkpoint import CHECKPOINTS_DIR
from ..training.config import LoopConfig
from ..training.loop import fit
from ..training.runs import prepare_run_dir, total_wall_s, write_summary
from .substitution_learned import SubstitutionInverter

__all__ = ["InverterConfig", "release", "train_substitution_inverter"]

log = logging.getLogger("textfree.attacks")


@dataclass(kw_only=True)
class InverterConfig(LoopConfig):
    """Fine-tune ``decoder`` to map the mechanism's outputs on the attacker's texts back to those texts."""

    decoder: str = field(
        metadata={
            "help": "The causal LM to fine-tune (a local directory or Hugging Face name), e.g. runs/decoder-small."
        }
    )
    mechanism: dict = field(
        default_factory=dict,
        metadata={
            "help": "The mechanism as data (e.g. {name: t2t, eta: 75}); recorded so a reused run is checked to match."
        },
    )
    data: list[str] = field(
        default_factory=list, metadata={"help": "Names of the training texts' source; recorded like `mechanism`."}
    )
    max_source_tokens: int = field(default=120, metadata={"help": "Released text is cut to this many decoder tokens."})
    max_target_tokens: int = field(
        default=128, metadata={"help": "Original text is cut to this many decoder tokens (+ EOS)."}
    )
    noise_seed: int | None = field(
        default=None, metadata={"help": "Seed of the mechanism's per-epoch generators (default: seed)."}
    )
    epochs: int = field(
        default=3, metadata={"help": "Passes over the training texts (a fresh run of the mechanism each)."}
    )
    batch_size: int = field(default=16, metadata={"help": "Texts per optimizer step."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate (all decoder weights)."})
    warmup_steps: int = field(default=10, metadata={"help": "Linear warm-up steps."})
    keep_final_checkpoint: bool = field(
        default=False,
        metadata={"help": "Keep checkpoints/ after the run finished (default: removed, the decoder is saved)."},
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("max_source_tokens", "max_target_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")


def release(mechanisms: Sequence[Any], texts: Sequence[str], *, generator: torch.Generator) -> list[str]:
    """``texts`` released by ``mechanisms``: a permutation drawn from ``generator`` deals the texts out in turn (text
    ``order[j]`` goes to mechanism ``j % len(mechanisms)``), then each mechanism runs on its share."""
    order = torch.randperm(len(texts), generator=generator).tolist()
    released: list[str] = [""] * len(texts)
    for m, mechanism in enumerate(mechanisms):
        share = order[m :: len(mechanisms)]
        if share:
            for i, r in zip(share, mechanism.privatize([texts[i] for i in share], generator=generator)):
                released[i] = r
    return released


def train_substitution_inverter(
    cfg: InverterConfig,
    mechanisms: Sequence[Any],
    texts: Sequence[str],
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """Fine-tune ``cfg.decoder`` on (released, original) pairs of ``texts``, save it into ``cfg.out`` and return the
    summary (+ ``"model"``: the :class:`SubstitutionInverter`).

    Every epoch each text is released afresh by one of ``mechanisms`` (objects with ``privatize(texts, generator=)``,
    e.g. T2T at several etas): a seeded permutation deals the texts out in turn, so each mechanism gets an equal share
    and every text meets every mechanism over the epochs; epoch ``e`` draws from ``seeded_generator(noise_seed *
    100_003 + e)``. ``mechanisms`` must be what ``cfg.mechanism`` describes (the config records it, the caller builds
    them)."""
    from ..rng import seeded_generator

    texts, mechanisms = list(texts), list(mechanisms)
    if not texts or not mechanisms:
        raise ValueError("train_substitution_inverter needs at least one training text and one mechanism")
    run = prepare_run_dir(cfg)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    inverter = SubstitutionInverter.from_decoder(
        cfg.decoder, max_source_tokens=cfg.max_source_tokens, max_target_tokens=cfg.max_target_tokens
    )
    inverter.model.requires_grad_(True)
    noise_seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed

    def epoch_examples(epoch: int) -> list[dict[str, list[int]]]:
        released = release(mechanisms, texts, generator=seeded_generator(noise_seed * 100_003 + epoch, warn=False))
        return [inverter.example(r, o) for r, o in zip(released, texts)]

    params = [p for p in inverter.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(
        [{"params": params, "lr": cfg.lr, "base_lr": cfg.lr, "weight_decay": cfg.weight_decay}]
    )
    log.info("substitution inverter: fine-tuning %s on %d texts, %s", cfg.decoder, len(texts), cfg.mechanism)
    summary = fit(
        cfg=cfg,
        model=inverter.model,
        optimizer=optimizer,
        n_examples=len(texts),
        epoch_examples=epoch_examples,
        collate=inverter.collate,
        loss_fn=SubstitutionInverter.loss,
        on_step=on_step,
    )
    inverter.model = summary["model"]
    inverter.save(run)
    if not cfg.keep_final_checkpoint:
        shutil.rmtree(run / CHECKPOINTS_DIR, ignore_errors=True)
    extra = {
        "stage": "substitution_inverter",
        "texts": len(texts),
        "mechanism": dict(cfg.mechanism),
        "total_wall_s": total_wall_s(summary, t0),
    }
    return write_summary(run, summary, extra) | {"model": inverter}
