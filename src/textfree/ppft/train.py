"""PPFT training: stage 1 (alignment, no noise) and stage 2 (text-free domain adaptation on payloads).

Both stages share one loop (:func:`fit`), written top to bottom in the nanoGPT manner on Accelerate, so
``accelerate launch -m textfree.cli ppft train-stage1 ...`` scales it. Checkpoints (safetensors + JSON, see
:mod:`textfree.ppft.checkpoint`) hold the trainable weights, optimizer and RNG states and the position in the
data, and a run resumes from its newest one. Data order is a seeded permutation per epoch and stage-2 noise a
seeded generator per epoch, so a resumed run replays exactly what the uninterrupted run would have done.

Stage 1 (``train_stage1``): encoder + projection + LoRA decoder trained jointly on general-domain instruction
data (alpaca, lima, gsm8k train) without noise; the encoder's gradient flows through pooling and normalisation.

Stage 2 (``train_stage2``): encoder frozen. The client side (:class:`~textfree.ppft.batches.ClientCache`)
encodes the domain prompts once and privatizes them afresh every epoch; the server part (projection + LoRA)
trains on the resulting payload rows, public text and targets only.
"""

from __future__ import annotations

import dataclasses

import json
import logging
import math
import random
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.utils.data import DataLoader, Subset

from ..data.splits import check_validation
from ..rng import secure_generator, seeded_generator
from .batches import (
    DEFAULT_GENERAL_SOURCES,
    STAGE2_TASKS,
    ClientCache,
    add_restore_examples,
    blind_payload_examples,
    collate_payloads,
    collate_text,
    domain_examples,
    general_examples,
    public_restore_examples,
)
from .checkpoint import (
    CENTER_FILE,
    TRAIN_CONFIG,
    InitChanged,
    latest_checkpoint,
    load_average,
    load_center_file,
    load_training_checkpoint,
    read_json,
    run_fingerprint,
    same_init,
    save_center,
    save_training_checkpoint,
    write_json,
)
from .config import LoraSettings, PromptTemplate, check_center_mu
from .ema import WeightAverage, check_ema_decay
from .model import TextFreeLM
from .projection import check_dropout
from .prompt_variants import PromptVariants, rewriter_for
from .slot_augment import SlotCountAugment

__all__ = ["LoopConfig", "Stage1Config", "Stage2Config", "train_stage1", "train_stage2", "fit", "lr_multiplier"]

log = logging.getLogger("textfree.ppft")

METRICS = "metrics.jsonl"
SUMMARY = "summary.json"
ANSWER_HEAD = "answer_head"  # the projection with its trained answer head, before the stage-2 loop
# Fields that may change between an interrupted run and its resumption.
_RESUME_FREE = {"resume", "progress", "cpu", "log_every"}


@dataclass(kw_only=True)
class LoopConfig:
    """Optimisation and bookkeeping shared by both stages."""

    out: str = field(metadata={"help": "Run directory: the model, train_config.json, metrics.jsonl, checkpoints/."})
    epochs: int = field(default=1, metadata={"help": "Passes over the training examples."})
    max_steps: int | None = field(default=None, metadata={"help": "Stop after this many optimizer steps (null: all epochs). Sets the LR schedule's length."})
    batch_size: int = field(default=8, metadata={"help": "Examples per optimizer step and process."})
    lr: float = field(default=1e-3, metadata={"help": "Peak learning rate of the projection and the LoRA parameters."})
    warmup_steps: int = field(default=20, metadata={"help": "Linear warm-up steps."})
    min_lr_ratio: float = field(default=0.1, metadata={"help": "Cosine decay ends at lr * min_lr_ratio."})
    weight_decay: float = field(default=0.0, metadata={"help": "AdamW weight decay."})
    grad_clip: float = field(default=1.0, metadata={"help": "Clip the gradient norm to this (0: no clipping)."})
    ema_decay: float | None = field(default=None, metadata={"help": "Keep an exponential moving average of the trained parameters (this decay per step; e.g. 0.999 averages over the last ~1000 steps), save it with each checkpoint and make it the run's weights at the end. Null: the last step's weights."})
    seed: int = field(default=0, metadata={"help": "Seeds initialisation, dropout, data order (and stage-2 noise unless noise_seed is set)."})
    log_every: int = field(default=10, metadata={"help": "Log the mean loss every this many steps (metrics.jsonl + log)."})
    save_every: int = field(default=200, metadata={"help": "Write a resumable checkpoint every this many steps (and at the end)."})
    keep_checkpoints: int = field(default=1, metadata={"help": "How many checkpoints to keep."})
    resume: bool = field(default=True, metadata={"help": "Continue from the newest checkpoint in `out` if there is one."})
    cpu: bool = field(default=False, metadata={"help": "Force the CPU even when an accelerator is present."})
    progress: bool = field(default=True, metadata={"help": "Show tqdm progress bars."})

    def __post_init__(self) -> None:
        if not self.out:
            raise ValueError("out (the run directory) is required")
        for name in ("epochs", "batch_size", "log_every", "save_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.max_steps is not None and self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1 or null, got {self.max_steps}")
        _check_optimiser(self)
        check_ema_decay(self.ema_decay)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(kw_only=True)
class Stage1Config(LoopConfig):
    """Stage 1: alignment of encoder + projection + LoRA decoder on general-domain data, without noise."""

    decoder: str = field(metadata={"help": "Base decoder: any Hugging Face causal LM name or local path (not copied; referenced by path + sha256)."})
    encoder: str = field(default="default", metadata={"help": "Client encoder: 'default' (all-MiniLM-L6-v2) or an HF name/path."})
    data: list[str] = field(default_factory=lambda: list(DEFAULT_GENERAL_SOURCES), metadata={"help": "General-domain instruction datasets, 'name' or 'name:split' (alpaca, lima, gsm8k:train). CSQA, ARC, Pri-* are refused."})
    limit_per_source: int | None = field(default=None, metadata={"help": "Use at most this many records of each source."})
    restore_fraction: float = field(default=0.0, metadata={"help": "Add 'restore the prompt' copies of this fraction of examples (public = restore instruction, target = the private text). Default 0: see docs/ppft.md."})
    encoder_lr: float = field(default=5e-5, metadata={"help": "Peak learning rate of the encoder (stage 1 only)."})
    k: int = field(default=4, metadata={"help": "Pool blocks of k encoder tokens into one slot."})
    mechanism: str = field(default="l2_laplace", metadata={"help": "Noise family recorded for the client (stage 1 itself adds no noise)."})
    projection: str = field(default="linear", metadata={"help": "P_psi: 'linear' or 'mlp'."})
    projection_hidden: int | None = field(default=None, metadata={"help": "MLP projection's hidden width."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_targets: str = field(default="all-linear", metadata={"help": "PEFT target_modules ('all-linear' or comma-separated module names)."})
    max_private_tokens: int = field(default=256, metadata={"help": "Client cuts private text to this many encoder tokens."})
    max_public_tokens: int = field(default=256, metadata={"help": "Server cuts public text to this many decoder tokens."})
    max_target_tokens: int = field(default=64, metadata={"help": "Targets are cut to this many decoder tokens."})


@dataclass(kw_only=True)
class Stage2Config(LoopConfig):
    """Stage 2: text-free domain adaptation of projection + LoRA on privatized payloads (encoder frozen)."""

    init: str = field(metadata={"help": "The run directory to start from (normally a stage-1 run)."})
    dataset: str = field(default="pri-ddx", metadata={"help": "Pri-* dataset for textfree.data.ppft_split ('pri-ddx', 'pri-slja' or a directory); its 'train' part is used."})
    split_fraction: float = field(default=0.5, metadata={"help": "ppft_split fraction (share of test-only groups that go to train)."})
    validation: float | None = field(default=None, metadata={"help": "Model selection: hold back this share of the training rows' private-text groups (ppft_split validation) and train on the rest; a ppft_stage2 cell with split 'validation' evaluates there, never on the held-out part. null or 0: train on every training row."})
    limit: int | None = field(default=None, metadata={"help": "Use only the first N training records (with restore_text: the first N texts)."})
    epsilon: float | None = field(default=75.0, metadata={"help": "Noise epsilon of the client's privatization; null = no noise (the 'upper bound' run; NOT private)."})
    mechanism: str | None = field(default=None, metadata={"help": "Noise family (default: the model's, l2_laplace); 'gaussian' is matched to L2-Laplace at epsilon (see noise_match)."})
    noise_match: str = field(default="budget", metadata={"help": "Gaussian only: 'budget' (same per-slot guarantee, 2*epsilon at delta 1e-5) or 'norm' (same expected noise norm d/epsilon)."})
    tasks: list[str] = field(default_factory=lambda: ["mcqa", "open"], metadata={"help": "Training prompt formats from the same training rows: 'mcqa' (options shown), 'open' (no options); 'restore' (target = the private text) trains a learned inversion attacker, not a PPFT model."})
    max_target_tokens: int | None = field(default=None, metadata={"help": "Cut targets to this many decoder tokens (default: the init run's template; 'restore' targets need more than 64)."})
    blind: bool = field(default=False, metadata={"help": "The blind control: train (and later answer) with no private prefix at all, public text only."})
    k: int | None = field(default=None, metadata={"help": "Pooling k (default: the model's)."})
    max_private_tokens: int | None = field(default=None, metadata={"help": "Client truncation of the private text in encoder tokens (default: the model's)."})
    noise_seed: int | None = field(default=None, metadata={"help": "Seed of the per-epoch noise generators (default: seed). Reproducible noise: experiments only."})
    secure_noise: bool = field(default=False, metadata={"help": "Draw each epoch's noise from OS entropy instead (a resumed epoch then gets new noise)."})
    decoder: str | None = field(default=None, metadata={"help": "Where the base decoder is, if it moved since the init run (its sha256 must still match)."})
    epochs: int = field(default=3, metadata={"help": "Passes over the training payloads (fresh noise each)."})
    restore_text: list[str] | None = field(default=None, metadata={"help": "Only with tasks ['restore']: train on these public instruction sources ('alpaca', 'lima', 'gsm8k:train'; Pri-*, CSQA, ARC refused) instead of the dataset's training rows, keeping the texts the client does not cut: a learned inversion attacker whose own text is public."})
    restore_text_limit: int | None = field(default=None, metadata={"help": "With restore_text: read at most this many records of each source."})
    summary_slots: int | None = field(default=None, metadata={"help": "Server-side summary vectors before the slots (see TextFreeConfig.summary_slots; default: the init run's, 0 for PPFT's layout)."})
    summary_only: bool | None = field(default=None, metadata={"help": "Beyond the paper, with summary vectors: the server lays out the summary vectors in place of the slots (see TextFreeConfig.summary_only; default: the init run's, false as PPFT)."})
    count_vectors: int | None = field(default=None, metadata={"help": "Beyond the paper: a learned vector per slot count 1..N put before a row's slots (ProjectionConfig.count_vectors; default: the init run's projection's, 0 as PPFT). Post-processing of the payload: the guarantee is unchanged."})
    count_dropout: float | None = field(default=None, metadata={"help": "With count_vectors: the training-only probability that a row's count vector is zeroed (ProjectionConfig.count_dropout; default: the init run's projection's, 0)."})
    fixed_slots: bool | None = field(default=None, metadata={"help": "The client pads every payload to ceil(max_private_tokens / k) slots, hiding the prompt's length (see TextFreeConfig.fixed_slots; default: the init run's, false as PPFT)."})
    center_mu: float | None = field(default=None, metadata={"help": "Beyond the paper: the client centres its unit slots on the mean slot of the training prompts, estimated with mu-GDP Gaussian noise at this mu (each prompt counted once; textfree.mechanisms.centering), and renormalises them before the noise; the centre ships with the model. null: the init run's centre, none for PPFT."})
    subspace_epochs: int | None = field(default=None, metadata={"help": "Beyond the paper, with center_mu: the client also projects every centred unit slot onto a public class subspace and renormalises it before the noise (textfree.mechanisms.subspace). The server fits the subspace from this many passes of fresh payloads of the training prompts (centred, noised at this run's epsilon; each prompt's mean slot labelled by its training target): the span of the per-target means. It ships with the centre. null: no subspace."})
    repeat_mean: bool | None = field(default=None, metadata={"help": "Beyond the paper, client side: every slot of a prompt is replaced by the prompt's unit mean slot (after centring and the subspace, before the noise; see TextFreeConfig.repeat_mean), in training, in the subspace fit and at inference. null: the init run's, false as PPFT."})
    answer_head: bool = field(default=False, metadata={"help": "Beyond the paper: first train an answer head (the attribute attacker's classifier: mean slot + slot count -> MLP) on fresh payloads of the training rows, its classes the distinct training targets (by normalised text), and put its class-weighted answer vector before each row's slots (see textfree.ppft.answer_head). Needs targets from a closed set. False: keep the init run's projection as it is."})
    answer_head_epochs: int = field(default=100, metadata={"help": "With answer_head: passes over the training rows, each with fresh noise."})
    answer_head_standardize: bool = field(default=False, metadata={"help": "With answer_head: standardise the mean slot (zero mean, unit variance over its coordinates) before the head's MLP, so the short mean of many noisy slots does not lose to the one-hot slot count. False: the head of the runs before 2026-11-25."})
    answer_head_hidden: int = field(default=256, metadata={"help": "With answer_head: width of the head's 2-layer MLP; 0: a linear reader of the mean slot and the one-hot count (fewer weights to overfit a few hundred training prompts with)."})
    answer_head_options: bool = field(default=False, metadata={"help": "With answer_head: on a row whose public text has an options block (the 4-option prompts), weigh the class vectors by the head's probabilities renormalised over the classes the options name (ProjectionConfig.answer_options), in training and at inference; the decoder still writes the answer. False: over all classes."})
    slot_insert: float | None = field(default=None, metadata={"help": "Beyond the paper, training only: the server adds m random unit slots at random positions to each training payload row of n slots, m uniform in 0..ceil(slot_insert * n), fresh every epoch, so the slot count stops naming the answer (textfree.ppft.slot_augment). Post-processing of payloads: the client and its guarantee are PPFT's; answers are never augmented. null or 0: off, as PPFT."})
    slot_drop: float | None = field(default=None, metadata={"help": "Beyond the paper, training only: the server drops each slot of a training payload row with this probability (at least one kept), before slot_insert. null or 0: off, as PPFT."})
    slot_augment_epochs: int | None = field(default=None, metadata={"help": "With slot_insert / slot_drop: augment only the first this many epochs, then train on the rows as sent (null: every epoch)."})
    prompt_variants: float | None = field(default=None, metadata={"help": "Beyond the paper, training only, client side: the chance, per training example and epoch, that the client sends a fresh rewrite of the private prompt instead of the prompt (textfree.ppft.prompt_variants: the items of each list reordered and/or some left out; from the training rows themselves, before encoding; the server still gets payloads only). Needs a dataset with a registered rewriter (Pri-DDX). null or 0: off, as PPFT."})
    prompt_variant_drop: float = field(default=0.0, metadata={"help": "With prompt_variants: a rewrite leaves out each list item with this probability (at least one per list kept), so a shorter prompt has fewer slots because it says less."})
    prompt_variant_shuffle: bool = field(default=True, metadata={"help": "With prompt_variants: a rewrite reorders the items of each list."})
    train_decoder: bool | None = field(default=None, metadata={"help": "Only with tasks ['restore']: also train every base-decoder weight (full fine-tuning), a stronger learned inversion attacker; null/false: LoRA + projection only, as PPFT."})

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.restore_text is not None:
            if not isinstance(self.restore_text, list) or not self.restore_text or not all(isinstance(s, str) and s for s in self.restore_text):
                raise ValueError(f"restore_text must be a non-empty list of source names, got {self.restore_text!r}")
            if list(self.tasks) != ["restore"]:
                raise ValueError(f"restore_text replaces the training rows of the 'restore' task only: tasks must be ['restore'], got {self.tasks!r}")
        if self.count_dropout is not None:
            check_dropout("count_dropout", self.count_dropout)
        if not isinstance(self.answer_head, bool):
            raise ValueError(f"answer_head must be true or false, got {self.answer_head!r}")
        if self.answer_head and (self.blind or list(self.tasks) == ["restore"]):
            raise ValueError("answer_head reads the payload's slots to predict an answer: not for blind or restore runs")
        if isinstance(self.answer_head_epochs, bool) or not isinstance(self.answer_head_epochs, int) or self.answer_head_epochs < 1:
            raise ValueError(f"answer_head_epochs must be an integer >= 1, got {self.answer_head_epochs!r}")
        for name in ("answer_head_standardize", "answer_head_options"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
            if getattr(self, name) and not self.answer_head:
                raise ValueError(f"{name} needs answer_head: true")
        if isinstance(self.answer_head_hidden, bool) or not isinstance(self.answer_head_hidden, int) or self.answer_head_hidden < 0:
            raise ValueError(f"answer_head_hidden must be an integer >= 0 (0: a linear head), got {self.answer_head_hidden!r}")
        if self.answer_head_hidden != 256 and not self.answer_head:
            raise ValueError("answer_head_hidden needs answer_head: true")
        for name in ("train_decoder", "fixed_slots", "repeat_mean", "summary_only"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true, false or null, got {getattr(self, name)!r}")
        if self.summary_only and self.summary_slots is not None and self.summary_slots < 1:
            raise ValueError(f"summary_only lays out the summary vectors in place of the slots: it needs summary_slots >= 1, got {self.summary_slots}")
        if self.repeat_mean and self.blind:
            raise ValueError("repeat_mean changes the client's private slots: a blind run sends none")
        if self.train_decoder and list(self.tasks) != ["restore"]:
            raise ValueError(f"train_decoder (full fine-tuning) is an inversion attacker's option: tasks must be ['restore'], got {self.tasks!r}")
        for name, low in (("restore_text_limit", 1), ("summary_slots", 0), ("max_target_tokens", 1), ("count_vectors", 0)):
            _check_optional_int(name, getattr(self, name), low)
        tasks = list(self.tasks)
        if not tasks or len(set(tasks)) != len(tasks) or any(t not in STAGE2_TASKS for t in tasks):
            raise ValueError(f"tasks must be distinct names from {STAGE2_TASKS}, got {self.tasks!r}")
        if self.noise_match not in ("budget", "norm"):
            raise ValueError(f"noise_match must be 'budget' or 'norm', got {self.noise_match!r}")
        if self.mechanism is not None:
            from ..mechanisms.base import get_mechanism_class

            get_mechanism_class(self.mechanism)
        if self.epsilon is not None and not (isinstance(self.epsilon, (int, float)) and self.epsilon > 0):
            raise ValueError(f"epsilon must be a positive number or null, got {self.epsilon!r}")
        if self.blind and self.epsilon is not None:
            raise ValueError("a blind run sends no private prefix: set epsilon to null")
        _check_optional_int("slot_augment_epochs", self.slot_augment_epochs, 1)
        check_validation(self.validation, nullable=True)
        if self.validation is not None and self.restore_text is not None:
            raise ValueError("validation holds back training rows of the dataset: not with restore_text")
        if self.slot_augment_epochs is not None and not self.slot_augment().active:
            raise ValueError(f"slot_augment_epochs ({self.slot_augment_epochs}) needs slot_insert or slot_drop")
        if self.slot_augment().active and (self.blind or list(self.tasks) == ["restore"]):
            raise ValueError("slot_insert / slot_drop blur the slot count of answer-training rows: not for blind or restore runs")
        if self.center_mu is not None:
            check_center_mu("center_mu", self.center_mu)
            if self.blind or self.restore_text is not None:
                raise ValueError("center_mu centres the client's own training prompts: not for blind runs or restore_text")
        _check_optional_int("subspace_epochs", self.subspace_epochs, 1)
        if self.subspace_epochs is not None and self.center_mu is None:
            raise ValueError("subspace_epochs projects centred slots: it needs center_mu")

        variants = self.variants()  # validates the three prompt_variant fields
        if variants.active:
            if self.blind or self.restore_text is not None or "restore" in self.tasks:
                raise ValueError("prompt_variants rewrites the private prompts of answer-training rows: not for blind runs, restore_text or the 'restore' task (its target is the prompt)")
            rewriter_for(self.dataset)
        elif self.prompt_variant_drop != 0.0 or self.prompt_variant_shuffle is not True:
            raise ValueError("prompt_variant_drop / prompt_variant_shuffle need prompt_variants > 0")

    def variants(self) -> PromptVariants:
        """The client's training-only prompt variants (inactive unless prompt_variants is set)."""
        return PromptVariants(0.0 if self.prompt_variants is None else self.prompt_variants, self.prompt_variant_shuffle, self.prompt_variant_drop)

    def slot_augment(self) -> SlotCountAugment:
        """The server's training-only slot-count augmentation (inactive unless slot_insert or slot_drop is set)."""
        return SlotCountAugment(0.0 if self.slot_insert is None else self.slot_insert, 0.0 if self.slot_drop is None else self.slot_drop)


def _check_optimiser(cfg: LoopConfig) -> None:
    """The optimiser settings of a training loop: finite, the learning rates > 0, the rest in range."""
    checks = (("lr", lambda v: v > 0, "a number > 0"), ("weight_decay", lambda v: v >= 0, "a number >= 0"),
              ("grad_clip", lambda v: v >= 0, "a number >= 0 (0: no clipping)"),
              ("min_lr_ratio", lambda v: 0 <= v <= 1, "a number in [0, 1]"), ("encoder_lr", lambda v: v >= 0, "a number >= 0"))
    for name, ok, what in checks:
        if not hasattr(cfg, name):  # encoder_lr: stage 1 only
            continue
        value = getattr(cfg, name)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or not ok(value):
            raise ValueError(f"{name} must be {what}, got {value!r}")
    if isinstance(cfg.warmup_steps, bool) or not isinstance(cfg.warmup_steps, int) or cfg.warmup_steps < 0:
        raise ValueError(f"warmup_steps must be an integer >= 0, got {cfg.warmup_steps!r}")


def _check_optional_int(name: str, value: Any, low: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < low):
        raise ValueError(f"{name} must be an integer >= {low} or null, got {value!r}")


def lr_multiplier(step: int, total: int, warmup: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to ``min_ratio`` at ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def _epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    gen = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    return torch.randperm(n, generator=gen).tolist()


def _prepare_run_dir(cfg: LoopConfig, *, init: str | None = None) -> Path:
    """Write train_config.json; refuse to resume a run directory that holds a different run.

    ``init`` (stage 2: the run it starts from) is fingerprinted into train_config.json, and an interrupted run is
    resumed only from the same ``init``: the config names it by path, so a rebuilt one would otherwise pass."""
    run = Path(cfg.out)
    run.mkdir(parents=True, exist_ok=True)
    saved_path = run / TRAIN_CONFIG
    fingerprint = None if init is None else run_fingerprint(init)
    mine = {k: v for k, v in cfg.to_dict().items() if k not in _RESUME_FREE}
    if cfg.resume and saved_path.is_file() and latest_checkpoint(run) is not None:
        saved_doc = read_json(saved_path)
        # a setting added since the run was saved counts as its default: the run was trained without it
        added = {f.name: f.default for f in fields(cfg) if f.default is not dataclasses.MISSING}
        saved = {k: v for k, v in (added | saved_doc.get("config", {})).items() if k not in _RESUME_FREE}
        if saved != mine:
            diff = sorted(k for k in set(saved) | set(mine) if saved.get(k) != mine.get(k))
            raise ValueError(f"{str(run)!r} holds a run with other settings ({', '.join(diff)}); use another --out or --no-resume")
        if init is not None:
            try:
                checked = same_init(run, saved_doc.get("init_fingerprint"), init, current=fingerprint)
            except InitChanged as exc:
                raise InitChanged(f"{exc}: its checkpoints cannot be resumed; use another --out or --no-resume") from None
            if not checked:
                log.warning("%s records no fingerprint of its init run %s; resuming without checking that it is unchanged", run, init)
    if not cfg.resume:
        import shutil

        shutil.rmtree(run / "checkpoints", ignore_errors=True)
        (run / METRICS).unlink(missing_ok=True)
    doc = {"kind": type(cfg).__name__, "config": cfg.to_dict()}
    write_json(saved_path, doc if init is None else doc | {"init_fingerprint": fingerprint})
    return run


def fit(
    *,
    cfg: LoopConfig,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    n_examples: int,
    epoch_examples: Callable[[int], Sequence[Any]],
    collate: Callable[[list[Any]], dict],
    loss_fn: Callable[[torch.nn.Module, dict], torch.Tensor],
    on_step: Callable[[int, float], None] | None = None,
) -> dict[str, Any]:
    """The training loop. ``epoch_examples(epoch)`` gives that epoch's examples (stage 2: fresh payloads);
    ``loss_fn(model, batch)`` the loss of a batch; ``on_step(step, loss)`` is called after every step."""
    from tqdm.auto import tqdm

    from ..accel import make_accelerator

    run = Path(cfg.out)
    accelerator = make_accelerator(cpu=cfg.cpu)
    world = accelerator.num_processes
    steps_per_epoch = math.ceil(n_examples / (cfg.batch_size * world))
    total_steps = cfg.epochs * steps_per_epoch
    if cfg.max_steps is not None:
        total_steps = min(total_steps, cfg.max_steps)
    trainable = [p for p in model.parameters() if p.requires_grad]

    # -- resume: weights, optimizer, RNG and position in the data from the newest checkpoint
    state = {"step": 0, "epoch": 0, "batch_in_epoch": 0}
    ckpt = latest_checkpoint(run) if cfg.resume else None
    if ckpt is not None:
        state = load_training_checkpoint(ckpt, model, optimizer)
        log.info("resumed from %s (step %d)", ckpt, state["step"])
        _truncate_metrics(run / METRICS, state["step"])
    carried_s, first_loss = _carried_record(state, ckpt)
    model, optimizer = accelerator.prepare(model, optimizer)
    # after prepare: the average lives where the parameters now are (on a GPU, not where they were loaded)
    average = _start_average(cfg, accelerator.unwrap_model(model), ckpt)

    step = state["step"]
    losses: list[float] = []
    window: list[float] = []
    started = time.time() - (carried_s or 0.0)  # the clock runs on from the checkpoint's (its training time so far)
    bar = tqdm(total=total_steps, initial=step, desc=f"train {run.name}", unit="step", disable=not (cfg.progress and accelerator.is_main_process))
    model.train()
    for epoch in range(state["epoch"], cfg.epochs):
        if step >= total_steps:
            break
        examples = epoch_examples(epoch)
        order = _epoch_order(len(examples), cfg.seed, epoch)
        batch_in_epoch = state["batch_in_epoch"] if epoch == state["epoch"] else 0
        order = order[batch_in_epoch * cfg.batch_size * world :]
        # (its own generator: creating the iterator must not draw from the global RNG that dropout uses)
        loader = accelerator.prepare_data_loader(
            DataLoader(Subset(examples, order), batch_size=cfg.batch_size, shuffle=False, collate_fn=collate,
                       generator=torch.Generator().manual_seed(cfg.seed + epoch))
        )
        for batch in loader:
            # learning rate for this step (nanoGPT: computed, not a scheduler object)
            mult = lr_multiplier(step, total_steps, cfg.warmup_steps, cfg.min_lr_ratio)
            for group in optimizer.param_groups:
                group["lr"] = group["base_lr"] * mult
            # forward, backward, update
            loss = loss_fn(model, batch)
            accelerator.backward(loss)
            if cfg.grad_clip > 0:
                accelerator.clip_grad_norm_(trainable, cfg.grad_clip)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if average is not None:
                average.update(_trained(accelerator.unwrap_model(model)))
            step += 1
            batch_in_epoch += 1
            # bookkeeping: log, checkpoint
            value = accelerator.reduce(loss.detach(), "mean").item()
            losses.append(value)
            if state["step"] == 0 and len(losses) == 1:
                first_loss = value
            window.append(value)
            bar.update(1)
            bar.set_postfix(loss=f"{value:.4f}", epoch=epoch)
            if step % cfg.log_every == 0 or step == total_steps:
                record = {"step": step, "epoch": epoch, "loss": sum(window) / len(window), "lr": cfg.lr * mult, "elapsed_s": round(time.time() - started, 2)}
                window = []
                log.info("step %d epoch %d loss %.4f lr %.3g", record["step"], epoch, record["loss"], record["lr"])
                if accelerator.is_main_process:
                    with open(run / METRICS, "a") as fh:
                        fh.write(json.dumps(record) + "\n")
            if step % cfg.save_every == 0 or step == total_steps:
                end_of_epoch = batch_in_epoch >= steps_per_epoch
                position = {"epoch": epoch + 1 if end_of_epoch else epoch, "batch_in_epoch": 0 if end_of_epoch else batch_in_epoch,
                            "elapsed_s": None if carried_s is None else round(time.time() - started, 2),
                            "first_loss": first_loss}
                accelerator.wait_for_everyone()
                if accelerator.is_main_process:
                    unwrapped = accelerator.unwrap_model(model)
                    save_training_checkpoint(run, step, _trained(unwrapped), optimizer, position, keep=cfg.keep_checkpoints,
                                             average=None if average is None else average.state())
            if on_step is not None:
                on_step(step, value)
            if step >= total_steps:
                break
    bar.close()
    accelerator.wait_for_everyone()
    if average is not None:
        # the run's weights are the average (the checkpoints keep the last step's, to resume from)
        average.copy_to(_trained(accelerator.unwrap_model(model)))
    return {
        "steps": step,
        "total_steps": total_steps,
        "resumed_from_step": state["step"],
        "first_loss": first_loss,
        "final_loss": sum(losses[-cfg.log_every :]) / len(losses[-cfg.log_every :]) if losses else None,
        "wall_s": None if carried_s is None else round(time.time() - started, 2),
        "carried_wall_s": carried_s,
        "model": accelerator.unwrap_model(model),
    }


def _carried_record(state: dict[str, Any], ckpt: Path | None) -> tuple[float | None, float | None]:
    """(training seconds, first loss) of the sessions before this one: ``(0.0, None)`` for a fresh run, else what the
    checkpoint resumed from recorded, so that a resumed run reports the whole run's time and first loss. A checkpoint
    written before these were recorded (or one that recorded them unknown) gives None: unknown, never the resumed
    part's figure passed off as the run's."""
    if ckpt is None:
        return 0.0, None
    if "elapsed_s" not in state:
        log.warning("checkpoint %s records no training time or first loss: this run reports both as unknown", ckpt)
        return None, None
    carried, first = state["elapsed_s"], state.get("first_loss")
    for name, value in (("elapsed_s", carried), ("first_loss", first)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                                  or (name == "elapsed_s" and value < 0)):
            raise ValueError(f"checkpoint {str(ckpt)!r}: trainer_state.json {name} must be a finite number"
                             f"{' >= 0' if name == 'elapsed_s' else ''} or null, got {value!r}")
    return (None if carried is None else float(carried)), (None if first is None else float(first))


def _trained(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p for n, p in model.named_parameters() if p.requires_grad}


def _start_average(cfg: LoopConfig, model: torch.nn.Module, ckpt: Path | None) -> WeightAverage | None:
    """The weight average of ``cfg.ema_decay`` (None when off): the checkpoint's when resuming, else the weights now."""
    if cfg.ema_decay is None:
        return None
    average = WeightAverage.start(cfg.ema_decay, _trained(model))
    if ckpt is not None:
        saved = load_average(ckpt)
        if saved is None:
            raise ValueError(f"checkpoint {str(ckpt)!r} holds no weight average (ema.safetensors) though ema_decay is set")
        average.load(saved, where=str(ckpt))
    return average


def _truncate_metrics(path: Path, step: int) -> None:
    """Drop logged lines past the checkpoint we resume from (they will be logged again)."""
    if not path.is_file():
        return
    kept = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= step]
    path.write_text("".join(line + "\n" for line in kept))


def _param_groups(groups: list[tuple[list[torch.nn.Parameter], float]], weight_decay: float) -> list[dict]:
    return [{"params": params, "lr": lr, "base_lr": lr, "weight_decay": weight_decay} for params, lr in groups if params]


def server_optimizer(server: torch.nn.Module, cfg: LoopConfig) -> torch.optim.Optimizer:
    """AdamW over the server part's projection + LoRA parameters (stage 2 and fine-tuning jobs; with a trained base,
    :meth:`~textfree.ppft.server.ServerModel.train_base`, every decoder weight)."""
    params = list(server.projection.parameters()) + list(server.decoder_parameters().values())
    return torch.optim.AdamW(_param_groups([(params, cfg.lr)], cfg.weight_decay))


def payload_loss(model: torch.nn.Module, batch: dict) -> torch.Tensor:
    """The server part's loss on a batch of payload rows (:func:`~textfree.ppft.batches.collate_payloads`)."""
    return model(batch["vectors"], batch["mask"], public=batch["public"], targets=batch["targets"]).loss


def _total_wall_s(summary: dict[str, Any], t0: float) -> float | None:
    """This call's seconds since ``t0`` plus the training time of the sessions before it (None: unknown)."""
    carried = summary["carried_wall_s"]
    return None if carried is None else round(time.time() - t0 + carried, 2)


def _write_summary(run: Path, summary: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """Write summary.json (everything but the model) and return it; the stage functions add the model back."""
    data = {k: v for k, v in summary.items() if k != "model"} | extra
    write_json(run / SUMMARY, data)
    return data


# =========================================================================== stage 1
def train_stage1(cfg: Stage1Config, *, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Stage 1: align encoder + projection + LoRA decoder on general-domain data (no noise).

    Returns the summary written to summary.json plus ``"model"``: the trained :class:`TextFreeLM`."""
    run = _prepare_run_dir(cfg)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()

    # -- data: general-domain instruction examples (+ optional "restore the prompt" copies)
    examples = general_examples(cfg.data, limit_per_source=cfg.limit_per_source)
    examples = add_restore_examples(examples, cfg.restore_fraction, seed=cfg.seed)
    log.info("stage 1: %d examples from %s (restore fraction %g)", len(examples), cfg.data, cfg.restore_fraction)

    # -- model: encoder (trainable) + projection + LoRA decoder (base frozen)
    targets = [t.strip() for t in cfg.lora_targets.split(",")] if cfg.lora_targets != "all-linear" else "all-linear"
    lm = TextFreeLM.build(
        cfg.decoder,
        encoder=None if cfg.encoder == "default" else cfg.encoder,
        k=cfg.k,
        mechanism=cfg.mechanism,
        projection=cfg.projection,
        projection_hidden=cfg.projection_hidden,
        lora=LoraSettings(r=cfg.lora_r, alpha=cfg.lora_alpha, dropout=cfg.lora_dropout, target_modules=targets),
        template=PromptTemplate(max_public_tokens=cfg.max_public_tokens, max_target_tokens=cfg.max_target_tokens),
        max_private_tokens=cfg.max_private_tokens,
        seed=cfg.seed,
    )
    for name, p in lm.encoder.named_parameters():  # the pooler head is unused (we take token states): frozen,
        p.requires_grad_(".pooler." not in f".{name}")  # so DDP sees no parameter without a gradient
    lm.encoder.train()
    optimizer = torch.optim.AdamW(
        _param_groups(
            [
                ([p for p in lm.encoder.parameters() if p.requires_grad], cfg.encoder_lr),
                (list(lm.server.projection.parameters()) + list(lm.server.lora_parameters().values()), cfg.lr),
            ],
            cfg.weight_decay,
        )
    )

    def loss_fn(model, batch):
        return model(batch["input_ids"], batch["attention_mask"], public=batch["public"], targets=batch["targets"]).loss

    summary = fit(
        cfg=cfg, model=lm, optimizer=optimizer, n_examples=len(examples), epoch_examples=lambda epoch: examples,
        collate=collate_text(lm.tokenize_private), loss_fn=loss_fn, on_step=on_step,
    )
    lm = summary["model"]
    lm.server.config = lm.config.replace(stage="stage1", epsilon=None)
    lm.save(run)
    extra = {"stage": "stage1", "examples": len(examples), "total_wall_s": _total_wall_s(summary, t0)}
    return _write_summary(run, summary, extra) | {"model": lm}


# =========================================================================== stage 2
def train_stage2(cfg: Stage2Config, *, on_step: Callable[[int, float], None] | None = None) -> dict[str, Any]:
    """Stage 2: encoder frozen; projection + LoRA adapt to privatized payloads of the domain's training split.

    Returns the summary written to summary.json plus ``"model"``: the adapted :class:`TextFreeLM`."""
    from ..data import ppft_split

    run = _prepare_run_dir(cfg, init=cfg.init)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()

    # -- model: the init run's encoder (frozen, client side) and server part (projection + LoRA trainable)
    lm = TextFreeLM.load(cfg.init, trainable=True, decoder=cfg.decoder)
    init_fingerprint = read_json(run / TRAIN_CONFIG)["init_fingerprint"]  # also in summary.json: a reuse checks it
    lm.encoder.requires_grad_(False)
    lm.encoder.eval()
    if torch.cuda.is_available() and not cfg.cpu:
        lm.encoder.to("cuda")  # the client's one-off encoding pass; payload rows are kept on the CPU
    family = cfg.mechanism or lm.config.mechanism
    k = cfg.k or lm.config.k
    max_private = cfg.max_private_tokens or lm.config.max_private_tokens
    template = lm.config.template
    if cfg.max_target_tokens is not None:
        template = dataclasses.replace(template, max_target_tokens=cfg.max_target_tokens)
    lm.server.config = lm.config.replace(k=k, mechanism=family, epsilon=cfg.epsilon, noise_match=cfg.noise_match,
                                         stage="stage2", max_private_tokens=max_private, template=template,
                                         summary_slots=lm.config.summary_slots if cfg.summary_slots is None else cfg.summary_slots,
                                         fixed_slots=lm.config.fixed_slots if cfg.fixed_slots is None else cfg.fixed_slots,
                                         repeat_mean=lm.config.repeat_mean if cfg.repeat_mean is None else cfg.repeat_mean,
                                         summary_only=lm.config.summary_only if cfg.summary_only is None else cfg.summary_only)
    lm.encoder.max_length = max_private
    proj = lm.server.projection.config
    n = proj.count_vectors if cfg.count_vectors is None else cfg.count_vectors
    dropout = proj.count_dropout if cfg.count_dropout is None else cfg.count_dropout
    if (n, dropout) != (proj.count_vectors, proj.count_dropout):
        lm.server.projection = lm.server.projection.with_count_vectors(n, dropout)
    if cfg.train_decoder:
        lm.server.train_base()

    # -- client side: encode the training prompts once; privatize afresh every epoch
    if cfg.restore_text:
        examples = public_restore_examples(cfg.restore_text, limit_per_source=cfg.restore_text_limit, fits=lm.sends_whole)
        examples = examples[: cfg.limit] if cfg.limit is not None else examples
        log.info("stage 2 restore task on public text: %d texts of %s within %d encoder tokens", len(examples), cfg.restore_text, max_private)
    else:
        records = ppft_split(cfg.dataset, cfg.split_fraction, validation=cfg.validation or 0.0)["train"]
        if cfg.limit is not None:
            records = records[: cfg.limit]
        examples = domain_examples(records, cfg.tasks)
    noise_seed = cfg.seed if cfg.noise_seed is None else cfg.noise_seed
    center_info = None if lm.center is None else {"inherited_from": str(cfg.init), "sha256": lm.config.center_sha256, "mu": lm.config.center_mu}
    if cfg.blind:
        blind = blind_payload_examples(examples, lm.config.encoder_dim)
        log.info("stage 2 blind control: %d examples with no private prefix", len(blind))

        def epoch_payloads(epoch: int):
            return blind
    else:
        cache = ClientCache(lm.encoder, examples, progress=cfg.progress)
        if cfg.center_mu is not None:
            center_info = _fit_center(cfg, run, lm, cache, examples, k, noise_seed, family)
        privatizer = lm.privatizer(cfg.epsilon, k=k, mechanism=family, match=cfg.noise_match)
        if cfg.epsilon is None:
            log.warning("stage 2 without noise (epsilon=None): the server sees clean embeddings; an upper bound, not private")

        augment = cfg.slot_augment()
        variants = cfg.variants()
        rewriter = rewriter_for(cfg.dataset) if variants.active else None

        def epoch_payloads(epoch: int):
            gen = None
            if cfg.epsilon is not None:
                gen = secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + epoch)
            sent = cache
            if variants.active:  # client side, before encoding: this epoch's rewrites of the training prompts
                rewrites = variants.epoch_rewrites(cache.private, rewriter, seed=cfg.seed * 100_003 + epoch + 15_013)
                sent = cache.replaced(rewrites)
                log.info("epoch %d: the client sends %d of %d training prompts rewritten", epoch, len(rewrites), len(cache))
            payloads = sent.privatize(privatizer, generator=gen)
            if augment.active and (cfg.slot_augment_epochs is None or epoch < cfg.slot_augment_epochs):  # server side, on payloads already privatized; its randomness is not the noise's
                payloads = augment.apply(payloads, generator=seeded_generator(cfg.seed * 100_003 + epoch + 7_919, warn=False))
            return payloads

    # -- server side: only projection + LoRA train; it sees payload rows, public text and targets
    server = lm.server
    head_info = None
    if cfg.answer_head:
        head_info = _fit_answer_head(cfg, run, server, cache, privatizer, noise_seed)
    summary = fit(
        cfg=cfg, model=server, optimizer=server_optimizer(server, cfg), n_examples=len(examples), epoch_examples=epoch_payloads,
        collate=collate_payloads, loss_fn=payload_loss, on_step=on_step,
    )
    lm.server = summary["model"]
    lm.save(run)
    extra = {"stage": "stage2", "dataset": None if cfg.restore_text else cfg.dataset, "restore_text": cfg.restore_text, "examples": len(examples), "epsilon": cfg.epsilon, "k": k,
             "mechanism": family, "noise_match": cfg.noise_match, "tasks": list(cfg.tasks), "blind": cfg.blind,
             "summary_slots": lm.config.summary_slots, "summary_only": lm.config.summary_only, "fixed_slots": lm.config.fixed_slots, "repeat_mean": lm.config.repeat_mean,
             "count_vectors": lm.server.projection.config.count_vectors, "count_dropout": lm.server.projection.config.count_dropout,
             "answer_head": head_info, "center": center_info, "slot_augment": cfg.slot_augment().to_dict(), "slot_augment_epochs": cfg.slot_augment_epochs,
             "prompt_variants": cfg.variants().to_dict(), "validation": cfg.validation, "init_fingerprint": init_fingerprint, "total_wall_s": _total_wall_s(summary, t0)}
    return _write_summary(run, summary, extra) | {"model": lm}


def _fit_center(cfg: Stage2Config, run: Path, lm: TextFreeLM, cache: ClientCache, examples, k: int, noise_seed: int,
                family: str) -> dict[str, Any]:
    """The client's slot centre: the mu-GDP mean of the training prompts' mean unit slots (each distinct private text
    once), followed with ``subspace_epochs`` by the class subspace's rows (:func:`_fit_subspace`); set on ``lm`` and in
    its config, and written to ``run`` at once (a resumed run reuses it, so it is drawn once even from OS entropy);
    returns what the summary records of it."""
    from ..mechanisms.centering import PrivateMean, center_sha256, prompt_mean_slots
    from ..mechanisms.transforms import k_pool, l2_normalize

    first = _first_of_each_prompt(examples)
    slots = []
    for i in first:
        pooled, _ = k_pool(cache.hidden[i].unsqueeze(0).float(), torch.ones(1, cache.hidden[i].shape[0], dtype=torch.bool), k)
        slots.append(l2_normalize(pooled[0]))
    mech = PrivateMean(float(cfg.center_mu))
    if cfg.resume and (run / CENTER_FILE).is_file():
        center = load_center_file(run)  # a resume with other settings (subspace_epochs too) was refused before this
        log.info("slot centre: reused %s", run / CENTER_FILE)
    else:
        gen = secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + 90_001, warn=False)
        center = mech.sample(prompt_mean_slots(slots), generator=gen).to(torch.float32)
        if cfg.subspace_epochs is not None:
            center = torch.cat([center.unsqueeze(0), _fit_subspace(cfg, lm, cache, examples, k, center, noise_seed, family)])
        save_center(run, center)
    lm.center = center
    lm.server.config = lm.config.replace(center_mu=float(cfg.center_mu), center_sha256=center_sha256(center))
    loss = mech.privacy_loss(1)
    norm = float(center.reshape(-1, center.shape[-1])[0].norm())  # the centre: the map's first row
    log.info("slot centre from %d training prompts: norm %.3f, sigma %.4g, %s-GDP (eps %.3g at delta %g per prompt)",
             len(slots), norm, mech.sigma(len(slots)), cfg.center_mu, loss.epsilon, loss.delta)
    info = {"mu": float(cfg.center_mu), "prompts": len(slots), "sigma": mech.sigma(len(slots)), "norm": norm,
            "epsilon": loss.epsilon, "delta": loss.delta, "sha256": lm.config.center_sha256}
    if center.dim() == 2:
        info["subspace"] = {"rank": center.shape[0] - 1, "epochs": cfg.subspace_epochs, "prompts": len(slots),
                            "releases_per_prompt": cfg.subspace_epochs if cfg.epsilon is not None else 0}
    return info


def _first_of_each_prompt(examples) -> list[int]:
    """The index of each distinct private text's first example (a row's prompt formats share one private text)."""
    first: dict[str, int] = {}
    for i, ex in enumerate(examples):
        first.setdefault(ex.private, i)
    return list(first.values())


def _fit_subspace(cfg: Stage2Config, lm: TextFreeLM, cache: ClientCache, examples, k: int, center: torch.Tensor,
                  noise_seed: int, family: str) -> torch.Tensor:
    """The class subspace [m, d]: ``subspace_epochs`` passes of fresh payloads of each training prompt, centred on
    ``center`` and noised as this run's client noises (clean for an upper-bound run), each reduced to its mean slot and
    labelled by its target (by normalised text); :func:`~textfree.mechanisms.subspace.class_subspace` of those."""
    from ..data import normalize_answer
    from ..mechanisms.subspace import class_subspace

    lm.center = center
    privatization = lm.privatizer(cfg.epsilon, k=k, mechanism=family, match=cfg.noise_match).privatization
    first = _first_of_each_prompt(examples)
    labels = [normalize_answer(examples[i].target) for i in first]
    vectors = []
    for epoch in range(cfg.subspace_epochs):
        gen = None
        if cfg.epsilon is not None:
            gen = secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + 70_000 + epoch, warn=False)
        for i in first:
            hidden = cache.hidden[i].unsqueeze(0).float()
            x, m = privatization.apply(hidden, torch.ones(hidden.shape[:2], dtype=torch.bool), generator=gen)
            vectors.append(x[0][m[0]].mean(dim=0))
    basis = class_subspace(torch.stack(vectors), labels * cfg.subspace_epochs)
    log.info("class subspace: rank %d from %d passes over %d training prompts (%d targets)", basis.shape[0],
             cfg.subspace_epochs, len(first), len(set(labels)))
    return basis


def _fit_answer_head(cfg: Stage2Config, run: Path, server, cache: ClientCache, privatizer, noise_seed: int) -> dict[str, Any]:
    """Train the answer head on fresh payloads and give ``server`` a projection with it (kept in ``run``/answer_head,
    so a resumed run reuses the same head); its classes and its accuracy on one more fresh draw for the summary."""
    from .answer_head import class_vectors, head_accuracy, train_answer_head
    from .projection import Projection

    def noise_generator(epoch: int) -> torch.Generator | None:  # epochs 0.. train the head, -1 checks it
        if cfg.epsilon is None:
            return None
        return secure_generator() if cfg.secure_noise else seeded_generator(noise_seed * 100_003 + 50_000 + epoch, warn=False)

    saved = run / ANSWER_HEAD
    if cfg.resume and (saved / "config.json").is_file():
        server.projection = Projection.load(saved, device=server.device)
        log.info("answer head: reused %s", saved)
    else:
        t0 = time.time()
        head = train_answer_head(cache, privatizer, epochs=cfg.answer_head_epochs, noise_generator=noise_generator,
                                 generator=seeded_generator(cfg.seed + 7919, warn=False), standardize=cfg.answer_head_standardize, hidden=cfg.answer_head_hidden)
        server.projection = server.projection.with_answer_head(head, class_vectors(server, head.specs[0].classes), options=cfg.answer_head_options)
        server.projection.save(saved)
        log.info("answer head trained in %.1f s", time.time() - t0)
    accuracy = head_accuracy(server.projection, cache.privatize(privatizer, generator=noise_generator(-1)))
    log.info("answer head: %.3f of the training rows on a fresh draw", accuracy)
    return {"classes": len(server.projection.config.answer_classes), "epochs": cfg.answer_head_epochs,
            "standardize": server.projection.config.answer_standardize, "hidden": server.projection.config.answer_hidden,
            "options": server.projection.config.answer_options,
            "train_accuracy_fresh_draw": accuracy}


def config_help(cls) -> dict[str, str]:
    """field name -> help text of a config dataclass (for the CLI and docs)."""
    return {f.name: f.metadata.get("help", "") for f in fields(cls)}
