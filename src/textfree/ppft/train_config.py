"""The stage configs of PPFT training: dataclasses with help text, saved as train_config.json beside the weights.

:class:`LoopConfig` holds what both stages' loop (:func:`textfree.training.loop.fit`) needs; :class:`Stage1Config` and
:class:`Stage2Config` add each stage's model and data. Every field is validated in ``__post_init__`` with a message
that names the bad value.

Importing this module and building a config need no torch (the names checked against live in :mod:`.checks`); only
the noise family is checked against the mechanism registry, which imports torch, and so it is checked last: any other
bad setting is reported at once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..data.privacyrestore import privacyrestore_dir
from ..data.splits import check_validation
from ..training.config import (
    LoopConfig,
    _check_fraction,
    _check_int,
    _check_optional_int,
)
from .checks import (
    DEFAULT_GENERAL_SOURCES,
    FORBIDDEN_STAGE1_SOURCES,
    PROJECTION_KINDS,
    STAGE2_TASKS,
    check_dropout,
)
from .config import check_center_mu
from .prompt_variants import PromptVariants, rewriter_for
from .slot_augment import SlotCountAugment

__all__ = ["Stage1Config", "Stage2Config"]


@dataclass(kw_only=True)
class Stage1Config(LoopConfig):
    """Stage 1: alignment of encoder + projection + LoRA decoder on general-domain data, without noise."""

    decoder: str = field(
        metadata={
            "help": "Base decoder: any Hugging Face causal LM name or local path (not copied; referenced by path + "
            "sha256)."
        }
    )
    encoder: str = field(
        default="default", metadata={"help": "Client encoder: 'default' (all-MiniLM-L6-v2) or an HF name/path."}
    )
    data: list[str] = field(
        default_factory=lambda: list(DEFAULT_GENERAL_SOURCES),
        metadata={
            "help": "General-domain instruction datasets, 'name' or 'name:split' (alpaca, lima, gsm8k:train). CSQA, "
            "ARC, Pri-* are refused."
        },
    )
    limit_per_source: int | None = field(
        default=None, metadata={"help": "Use at most this many records of each source."}
    )
    restore_fraction: float = field(
        default=0.0,
        metadata={
            "help": "Add 'restore the prompt' copies of this fraction of examples (public = restore instruction, "
            "target = the private text). Default 0: see docs/ppft.md."
        },
    )
    encoder_lr: float = field(default=5e-5, metadata={"help": "Peak learning rate of the encoder (stage 1 only)."})
    k: int = field(default=4, metadata={"help": "Pool blocks of k encoder tokens into one slot."})
    mechanism: str = field(
        default="l2_laplace", metadata={"help": "Noise family recorded for the client (stage 1 itself adds no noise)."}
    )
    projection: str = field(default="linear", metadata={"help": "P_psi: 'linear' or 'mlp'."})
    projection_hidden: int | None = field(default=None, metadata={"help": "MLP projection's hidden width."})
    lora_r: int = field(default=16, metadata={"help": "LoRA rank."})
    lora_alpha: int = field(default=32, metadata={"help": "LoRA alpha."})
    lora_dropout: float = field(default=0.05, metadata={"help": "LoRA dropout."})
    lora_targets: str = field(
        default="all-linear", metadata={"help": "PEFT target_modules ('all-linear' or comma-separated module names)."}
    )
    max_private_tokens: int = field(
        default=256, metadata={"help": "Client cuts private text to this many encoder tokens."}
    )
    max_public_tokens: int = field(
        default=256, metadata={"help": "Server cuts public text to this many decoder tokens."}
    )
    max_target_tokens: int = field(default=64, metadata={"help": "Targets are cut to this many decoder tokens."})

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("k", "lora_r", "max_private_tokens", "max_public_tokens", "max_target_tokens"):
            _check_int(name, getattr(self, name), 1)
        if (
            isinstance(self.lora_alpha, bool)
            or not isinstance(self.lora_alpha, (int, float))
            or not self.lora_alpha > 0
        ):
            raise ValueError(f"lora_alpha must be a number > 0, got {self.lora_alpha!r}")
        _check_optional_int("limit_per_source", self.limit_per_source, 1)
        _check_optional_int("projection_hidden", self.projection_hidden, 1)
        if self.projection not in PROJECTION_KINDS:
            raise ValueError(f"projection must be one of {PROJECTION_KINDS}, got {self.projection!r}")
        check_dropout("lora_dropout", self.lora_dropout)
        _check_fraction("restore_fraction", self.restore_fraction)
        _check_stage1_sources(self.data)
        _check_mechanism(self.mechanism)  # last: it imports torch


@dataclass(kw_only=True)
class Stage2Config(LoopConfig):
    """Stage 2: text-free domain adaptation of projection + LoRA on privatized payloads (encoder frozen)."""

    init: str = field(metadata={"help": "The run directory to start from (normally a stage-1 run)."})
    dataset: str = field(
        default="pri-ddx",
        metadata={
            "help": "Pri-* dataset for textfree.data.ppft_split ('pri-ddx', 'pri-slja' or a directory); its 'train' "
            "part is used."
        },
    )
    split_fraction: float = field(
        default=0.5, metadata={"help": "ppft_split fraction (share of test-only groups that go to train)."}
    )
    validation: float | None = field(
        default=None,
        metadata={
            "help": "Model selection: hold back this share of the training rows' private-text groups (ppft_split "
            "validation) and train on the rest; a ppft_stage2 cell with split 'validation' evaluates there, "
            "never on the held-out part. null or 0: train on every training row."
        },
    )
    limit: int | None = field(
        default=None, metadata={"help": "Use only the first N training records (with restore_text: the first N texts)."}
    )
    epsilon: float | None = field(
        default=75.0,
        metadata={
            "help": "Noise epsilon of the client's privatization; null = no noise (the 'upper bound' run; NOT private)."
        },
    )
    mechanism: str | None = field(
        default=None,
        metadata={
            "help": "Noise family (default: the model's, l2_laplace); 'gaussian' is matched to L2-Laplace at epsilon "
            "(see noise_match)."
        },
    )
    noise_match: str = field(
        default="budget",
        metadata={
            "help": "Gaussian only: 'budget' (same per-slot guarantee, 2*epsilon at delta 1e-5) or 'norm' (same "
            "expected noise norm d/epsilon)."
        },
    )
    tasks: list[str] = field(
        default_factory=lambda: ["mcqa", "open"],
        metadata={
            "help": "Training prompt formats from the same training rows: 'mcqa' (options shown), 'open' (no options); "
            "'restore' (target = the private text) trains a learned inversion attacker, not a PPFT model."
        },
    )
    max_target_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Cut targets to this many decoder tokens (default: the init run's template; 'restore' targets need "
            "more than 64)."
        },
    )
    blind: bool = field(
        default=False,
        metadata={
            "help": "The blind control: train (and later answer) with no private prefix at all, public text only."
        },
    )
    k: int | None = field(default=None, metadata={"help": "Pooling k (default: the model's)."})
    max_private_tokens: int | None = field(
        default=None,
        metadata={"help": "Client truncation of the private text in encoder tokens (default: the model's)."},
    )
    noise_seed: int | None = field(
        default=None,
        metadata={
            "help": "Seed of the per-epoch noise generators (default: seed). Reproducible noise: experiments only."
        },
    )
    secure_noise: bool = field(
        default=False,
        metadata={"help": "Draw each epoch's noise from OS entropy instead (a resumed epoch then gets new noise)."},
    )
    decoder: str | None = field(
        default=None,
        metadata={"help": "Where the base decoder is, if it moved since the init run (its sha256 must still match)."},
    )
    epochs: int = field(default=3, metadata={"help": "Passes over the training payloads (fresh noise each)."})
    restore_text: list[str] | None = field(
        default=None,
        metadata={
            "help": "Only with tasks ['restore']: train on these public instruction sources ('alpaca', 'lima', "
            "'gsm8k:train'; Pri-*, CSQA, ARC refused) instead of the dataset's training rows, keeping the "
            "texts the client does not cut: a learned inversion attacker whose own text is public."
        },
    )
    restore_text_limit: int | None = field(
        default=None, metadata={"help": "With restore_text: read at most this many records of each source."}
    )
    summary_slots: int | None = field(
        default=None,
        metadata={
            "help": "Server-side summary vectors before the slots (see TextFreeConfig.summary_slots; default: the init "
            "run's, 0 for PPFT's layout)."
        },
    )
    summary_only: bool | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, with summary vectors: the server lays out the summary vectors in place of the "
            "slots (see TextFreeConfig.summary_only; default: the init run's, false as PPFT)."
        },
    )
    count_vectors: int | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper: a learned vector per slot count 1..N put before a row's slots "
            "(ProjectionConfig.count_vectors; default: the init run's projection's, 0 as PPFT). "
            "Post-processing of the payload: the guarantee is unchanged."
        },
    )
    count_dropout: float | None = field(
        default=None,
        metadata={
            "help": "With count_vectors: the training-only probability that a row's count vector is zeroed "
            "(ProjectionConfig.count_dropout; default: the init run's projection's, 0)."
        },
    )
    fixed_slots: bool | None = field(
        default=None,
        metadata={
            "help": "The client pads every payload to ceil(max_private_tokens / k) slots, hiding the prompt's length "
            "(see TextFreeConfig.fixed_slots; default: the init run's, false as PPFT)."
        },
    )
    center_mu: float | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper: the client centres its unit slots on the mean slot of the training prompts, "
            "estimated with mu-GDP Gaussian noise at this mu (each prompt counted once; "
            "textfree.mechanisms.centering), and renormalises them before the noise; the centre ships with "
            "the model. null: the init run's centre, none for PPFT."
        },
    )
    subspace_epochs: int | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, with center_mu: the client also projects every centred unit slot onto a public "
            "class subspace and renormalises it before the noise (textfree.mechanisms.subspace). The server "
            "fits the subspace from this many passes of fresh payloads of the training prompts (centred, "
            "noised at this run's epsilon; each prompt's mean slot labelled by its training target): the "
            "span of the per-target means. It ships with the centre. null: no subspace."
        },
    )
    repeat_mean: bool | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, client side: every slot of a prompt is replaced by the prompt's unit mean slot "
            "(after centring and the subspace, before the noise; see TextFreeConfig.repeat_mean), in "
            "training, in the subspace fit and at inference. null: the init run's, false as PPFT."
        },
    )
    answer_head: bool = field(
        default=False,
        metadata={
            "help": "Beyond the paper: first train an answer head (the attribute attacker's classifier: mean slot + "
            "slot count -> MLP) on fresh payloads of the training rows, its classes the distinct training "
            "targets (by normalised text), and put its class-weighted answer vector before each row's slots "
            "(see textfree.ppft.answer_head). Needs targets from a closed set. False: keep the init run's "
            "projection as it is."
        },
    )
    answer_head_epochs: int = field(
        default=100, metadata={"help": "With answer_head: passes over the training rows, each with fresh noise."}
    )
    answer_head_standardize: bool = field(
        default=False,
        metadata={
            "help": "With answer_head: standardise the mean slot (zero mean, unit variance over its coordinates) "
            "before the head's MLP, so the short mean of many noisy slots does not lose to the one-hot slot "
            "count. False: the head of the runs before 2026-11-25."
        },
    )
    answer_head_hidden: int = field(
        default=256,
        metadata={
            "help": "With answer_head: width of the head's 2-layer MLP; 0: a linear reader of the mean slot and the "
            "one-hot count (fewer weights to overfit a few hundred training prompts with)."
        },
    )
    answer_head_options: bool = field(
        default=False,
        metadata={
            "help": "With answer_head: on a row whose public text has an options block (the 4-option prompts), weigh "
            "the class vectors by the head's probabilities renormalised over the classes the options name "
            "(ProjectionConfig.answer_options), in training and at inference; the decoder still writes the "
            "answer. False: over all classes."
        },
    )
    slot_insert: float | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, training only: the server adds m random unit slots at random positions to each "
            "training payload row of n slots, m uniform in 0..ceil(slot_insert * n), fresh every epoch, so "
            "the slot count stops naming the answer (textfree.ppft.slot_augment). Post-processing of "
            "payloads: the client and its guarantee are PPFT's; answers are never augmented. null or 0: off, "
            "as PPFT."
        },
    )
    slot_drop: float | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, training only: the server drops each slot of a training payload row with this "
            "probability (at least one kept), before slot_insert. null or 0: off, as PPFT."
        },
    )
    slot_augment_epochs: int | None = field(
        default=None,
        metadata={
            "help": "With slot_insert / slot_drop: augment only the first this many epochs, then train on the rows as "
            "sent (null: every epoch)."
        },
    )
    prompt_variants: float | None = field(
        default=None,
        metadata={
            "help": "Beyond the paper, training only, client side: the chance, per training example and epoch, that "
            "the client sends a fresh rewrite of the private prompt instead of the prompt "
            "(textfree.ppft.prompt_variants: the items of each list reordered and/or some left out; from the "
            "training rows themselves, before encoding; the server still gets payloads only). Needs a "
            "dataset with a registered rewriter (Pri-DDX). null or 0: off, as PPFT."
        },
    )
    prompt_variant_drop: float = field(
        default=0.0,
        metadata={
            "help": "With prompt_variants: a rewrite leaves out each list item with this probability (at least one per "
            "list kept), so a shorter prompt has fewer slots because it says less."
        },
    )
    prompt_variant_shuffle: bool = field(
        default=True, metadata={"help": "With prompt_variants: a rewrite reorders the items of each list."}
    )
    prompt_variant_rephrase: float | None = field(
        default=None,
        metadata={
            "help": "With prompt_variants: a rewrite says the case in another sentence frame with this probability "
            "(textfree.ppft.prompt_variants.DDX_FRAMES: a clinical note, a first-person account, the history left "
            "out; the prompt's own items only)."
        },
    )
    train_decoder: bool | None = field(
        default=None,
        metadata={
            "help": "Only with tasks ['restore']: also train every base-decoder weight (full fine-tuning), a stronger "
            "learned inversion attacker; null/false: LoRA + projection only, as PPFT."
        },
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_restore_text()
        self._check_projection()
        self._check_layout_flags()
        self._check_data()
        self._check_noise()
        self._check_training_rows()
        self._check_centring()
        self._check_prompt_variants()
        if self.mechanism is not None:
            _check_mechanism(self.mechanism)  # last: it imports torch

    def _check_restore_text(self) -> None:
        """restore_text: public sources, for the 'restore' task only."""
        if self.restore_text is not None:
            if (
                not isinstance(self.restore_text, list)
                or not self.restore_text
                or not all(isinstance(s, str) and s for s in self.restore_text)
            ):
                raise ValueError(f"restore_text must be a non-empty list of source names, got {self.restore_text!r}")
            if list(self.tasks) != ["restore"]:
                raise ValueError(
                    "restore_text replaces the training rows of the 'restore' task only: tasks must be ['restore'], "
                    f"got {self.tasks!r}"
                )

    def _check_projection(self) -> None:
        """The projection's extras: count-vector dropout and the answer head's settings."""
        if self.count_dropout is not None:
            check_dropout("count_dropout", self.count_dropout)
        if not isinstance(self.answer_head, bool):
            raise ValueError(f"answer_head must be true or false, got {self.answer_head!r}")
        if self.answer_head and (self.blind or list(self.tasks) == ["restore"]):
            raise ValueError(
                "answer_head reads the payload's slots to predict an answer: not for blind or restore runs"
            )
        if (
            isinstance(self.answer_head_epochs, bool)
            or not isinstance(self.answer_head_epochs, int)
            or self.answer_head_epochs < 1
        ):
            raise ValueError(f"answer_head_epochs must be an integer >= 1, got {self.answer_head_epochs!r}")
        for name in ("answer_head_standardize", "answer_head_options"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true or false, got {getattr(self, name)!r}")
            if getattr(self, name) and not self.answer_head:
                raise ValueError(f"{name} needs answer_head: true")
        if (
            isinstance(self.answer_head_hidden, bool)
            or not isinstance(self.answer_head_hidden, int)
            or self.answer_head_hidden < 0
        ):
            raise ValueError(
                f"answer_head_hidden must be an integer >= 0 (0: a linear head), got {self.answer_head_hidden!r}"
            )
        if self.answer_head_hidden != 256 and not self.answer_head:
            raise ValueError("answer_head_hidden needs answer_head: true")

    def _check_layout_flags(self) -> None:
        """The slot-layout flags (true, false or null) and full fine-tuning, with what each needs."""
        for name in ("train_decoder", "fixed_slots", "repeat_mean", "summary_only"):
            if getattr(self, name) is not None and not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be true, false or null, got {getattr(self, name)!r}")
        if self.summary_only and self.summary_slots is not None and self.summary_slots < 1:
            raise ValueError(
                "summary_only lays out the summary vectors in place of the slots: it needs summary_slots >= 1, got "
                f"{self.summary_slots}"
            )
        if self.repeat_mean and self.blind:
            raise ValueError("repeat_mean changes the client's private slots: a blind run sends none")
        if self.train_decoder and list(self.tasks) != ["restore"]:
            raise ValueError(
                "train_decoder (full fine-tuning) is an inversion attacker's option: tasks must be ['restore'], got "
                f"{self.tasks!r}"
            )

    def _check_data(self) -> None:
        """The optional sizes, the split fraction, the dataset and the training tasks."""
        for name, low in (
            ("restore_text_limit", 1),
            ("summary_slots", 0),
            ("max_target_tokens", 1),
            ("count_vectors", 0),
            ("k", 1),
            ("limit", 1),
            ("max_private_tokens", 1),
        ):
            _check_optional_int(name, getattr(self, name), low)
        _check_fraction("split_fraction", self.split_fraction)
        if not isinstance(self.dataset, str) or not (
            privacyrestore_dir(self.dataset) or Path(self.dataset).expanduser().is_dir()
        ):
            raise ValueError(
                f"dataset must be pri-ddx, pri-slja or a directory holding dev.json and test.json, got {self.dataset!r}"
            )
        tasks = list(self.tasks)
        if not tasks or len(set(tasks)) != len(tasks) or any(t not in STAGE2_TASKS for t in tasks):
            raise ValueError(f"tasks must be distinct names from {STAGE2_TASKS}, got {self.tasks!r}")

    def _check_noise(self) -> None:
        """The client's noise: matching and epsilon (none for a blind run); its family is checked last
        (:func:`_check_mechanism`)."""
        if self.noise_match not in ("budget", "norm"):
            raise ValueError(f"noise_match must be 'budget' or 'norm', got {self.noise_match!r}")
        if self.epsilon is not None and (
            isinstance(self.epsilon, bool)
            or not isinstance(self.epsilon, (int, float))
            or not math.isfinite(self.epsilon)
            or self.epsilon <= 0
        ):
            raise ValueError(f"epsilon must be a finite number > 0 or null, got {self.epsilon!r}")
        if self.blind and self.epsilon is not None:
            raise ValueError("a blind run sends no private prefix: set epsilon to null")

    def _check_training_rows(self) -> None:
        """The training rows held back (validation) and the server's slot-count augmentation of the rest."""
        _check_optional_int("slot_augment_epochs", self.slot_augment_epochs, 1)
        check_validation(self.validation, nullable=True)
        if self.validation is not None and self.restore_text is not None:
            raise ValueError("validation holds back training rows of the dataset: not with restore_text")
        if self.slot_augment_epochs is not None and not self.slot_augment().active:
            raise ValueError(f"slot_augment_epochs ({self.slot_augment_epochs}) needs slot_insert or slot_drop")
        if self.slot_augment().active and (self.blind or list(self.tasks) == ["restore"]):
            raise ValueError(
                "slot_insert / slot_drop blur the slot count of answer-training rows: not for blind or restore runs"
            )

    def _check_centring(self) -> None:
        """The client's slot centre (center_mu) and class subspace (subspace_epochs)."""
        if self.center_mu is not None:
            check_center_mu("center_mu", self.center_mu)
            if self.blind or self.restore_text is not None:
                raise ValueError(
                    "center_mu centres the client's own training prompts: not for blind runs or restore_text"
                )
        _check_optional_int("subspace_epochs", self.subspace_epochs, 1)
        if self.subspace_epochs is not None and self.center_mu is None:
            raise ValueError("subspace_epochs projects centred slots: it needs center_mu")

    def _check_prompt_variants(self) -> None:
        """The client's training-only prompt rewrites."""
        variants = self.variants()  # validates the three prompt_variant fields
        if variants.active:
            if self.blind or self.restore_text is not None or "restore" in self.tasks:
                raise ValueError(
                    "prompt_variants rewrites the private prompts of answer-training rows: not for blind runs, "
                    "restore_text or the 'restore' task (its target is the prompt)"
                )
            rewriter_for(self.dataset)
        elif self.prompt_variant_drop != 0.0 or self.prompt_variant_shuffle is not True or self.prompt_variant_rephrase:
            raise ValueError(
                "prompt_variant_drop / prompt_variant_shuffle / prompt_variant_rephrase need prompt_variants > 0"
            )

    def variants(self) -> PromptVariants:
        """The client's training-only prompt variants (inactive unless prompt_variants is set)."""
        return PromptVariants(
            0.0 if self.prompt_variants is None else self.prompt_variants,
            self.prompt_variant_shuffle,
            self.prompt_variant_drop,
            self.prompt_variant_rephrase or 0.0,
        )

    def slot_augment(self) -> SlotCountAugment:
        """The server's training-only slot-count augmentation (inactive unless slot_insert or slot_drop is set)."""
        return SlotCountAugment(
            0.0 if self.slot_insert is None else self.slot_insert, 0.0 if self.slot_drop is None else self.slot_drop
        )


def _check_mechanism(name: Any) -> None:
    """A registered noise family. The registry fills as the mechanisms' modules (torch) are imported, so a config
    checks it after every other setting."""
    from ..mechanisms.base import get_mechanism_class

    get_mechanism_class(name)


def _check_stage1_sources(sources: Any) -> None:
    """Stage 1's general-domain sources: a non-empty list of 'name' or 'name:split', each a registered dataset (never
    an evaluation or domain set) or an existing path; checked before any data is read."""
    from ..data import UnknownDatasetError, get_dataset_spec

    if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
        raise ValueError(
            f"data must be a non-empty list of source names ('alpaca', 'lima', 'gsm8k:train'), got {sources!r}"
        )
    for source in sources:
        name = source.partition(":")[0]
        if name.lower() in FORBIDDEN_STAGE1_SOURCES:
            raise ValueError(f"data source {source!r} is evaluation or domain data and may not be used for stage 1")
        try:
            get_dataset_spec(name)
        except UnknownDatasetError:
            if not Path(name).expanduser().exists():
                raise ValueError(
                    f"data source {source!r} is neither a registered dataset nor an existing path"
                ) from None
