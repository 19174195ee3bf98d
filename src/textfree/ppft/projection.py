"""P_psi: the server-side map from the client's slot space (d_e) to the decoder's embedding space (d_d).

A plain ``Linear(d_e, d_d)`` by default (PPFT's choice); ``kind="mlp"`` is a 2-layer MLP
``Linear(d_e, h) -> GELU -> Linear(h, d_d)``. Saved as ``config.json`` + ``model.safetensors`` (no pickle).

Beyond the paper, ``count_vectors=N`` adds a learned decoder-space vector per slot count (1..N; larger counts share
the N-th) that the server puts before a row's slots (:func:`~textfree.ppft.layout.slot_prefix`). The count is in the
payload anyway (unless the client pads to a fixed count); this states it to the decoder outright, where rotary
positions leave it implicit. Post-processing of the payload: the client and its guarantee do not change.

Also beyond the paper, ``answer_classes`` adds an *answer head*: the attribute attacker's classifier
(:class:`~textfree.heads.classifier.AttributeClassifier`, mean of the noisy slots + one-hot slot count -> MLP ->
one logit per class), trained on the server's own stage-2 payloads with fresh noise every pass, its classes the
distinct training targets (by normalised text). Its softmax weighs one learned decoder-space vector per class;
that *answer vector* goes before a row's slots. The head is frozen once trained (and kept in eval mode: no
dropout); the class vectors train with the rest of P_psi. A server that wants the answer reads the payload the way an
attacker that wants it
does; post-processing again, the guarantee is unchanged.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from ..atomic import atomic_save_tensors, atomic_write_text
from ..data import normalize_answer, parse_options_block
from ..heads.classifier import AttributeAttackConfig, AttributeClassifier, AttributeSpec
from .checks import PROJECTION_KINDS, check_dropout

__all__ = ["ProjectionConfig", "Projection", "PROJECTION_KINDS", "check_dropout"]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


@dataclass(frozen=True)
class ProjectionConfig:
    """Shape of P_psi."""

    in_dim: int = field(
        metadata={"help": "Width d_e of the client's slots (the encoder's hidden size; 384 for MiniLM)."}
    )
    out_dim: int = field(metadata={"help": "Width d_d of the decoder's input embeddings."})
    kind: str = field(
        default="linear", metadata={"help": "'linear' (one Linear layer, PPFT) or 'mlp' (Linear -> GELU -> Linear)."}
    )
    hidden_dim: int | None = field(
        default=None, metadata={"help": "MLP only: the hidden width (default: max(in_dim, out_dim))."}
    )
    count_vectors: int = field(
        default=0,
        metadata={
            "help": "Beyond the paper: a learned vector per slot count 1..N (larger counts share the N-th) put before "
            "a row's slots; 0: none (PPFT)."
        },
    )
    count_dropout: float = field(
        default=0.0,
        metadata={
            "help": "Training only: the probability that a row's count vector is replaced by zeros, so the decoder "
            "must also read the slots (never at inference)."
        },
    )
    answer_classes: tuple[str, ...] = field(
        default=(),
        metadata={
            "help": "Beyond the paper: the answer head's classes (the distinct stage-2 training targets); its "
            "class-weighted answer vector goes before a row's slots. Empty: no head (PPFT)."
        },
    )
    answer_hidden: int = field(
        default=256,
        metadata={"help": "Answer head: width of its 2-layer MLP; 0: a linear reader of the mean slot and the count."},
    )
    answer_max_count: int = field(
        default=1,
        metadata={
            "help": "Answer head: slot counts 1..N are one-hot (larger counts share the N-th); set from its training "
            "payloads."
        },
    )
    answer_standardize: bool = field(
        default=False,
        metadata={"help": "Answer head: standardise the mean slot before its MLP (AttributeAttackConfig.standardize)."},
    )
    answer_options: bool = field(
        default=False,
        metadata={
            "help": "Answer head: where a row's public text has an options block, weigh the class vectors by the "
            "head's probabilities renormalised over the classes it names (public text; the decoder still "
            "writes the answer; a public text cut at max_public_tokens is weighed over all classes). False: "
            "over all classes."
        },
    )

    def __post_init__(self) -> None:
        for name in ("in_dim", "out_dim"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"ProjectionConfig.{name} must be an integer >= 1, got {v!r}")
        if self.kind not in PROJECTION_KINDS:
            raise ValueError(f"ProjectionConfig.kind must be one of {PROJECTION_KINDS}, got {self.kind!r}")
        if self.hidden_dim is not None and (not isinstance(self.hidden_dim, int) or self.hidden_dim < 1):
            raise ValueError(f"ProjectionConfig.hidden_dim must be null or an integer >= 1, got {self.hidden_dim!r}")
        if not isinstance(self.count_vectors, int) or isinstance(self.count_vectors, bool) or self.count_vectors < 0:
            raise ValueError(f"ProjectionConfig.count_vectors must be an integer >= 0, got {self.count_vectors!r}")
        check_dropout("ProjectionConfig.count_dropout", self.count_dropout)
        classes = self.answer_classes
        if isinstance(classes, list):
            object.__setattr__(self, "answer_classes", classes := tuple(classes))  # read back from JSON
        if (
            not isinstance(classes, tuple)
            or not all(isinstance(c, str) and c for c in classes)
            or len(set(classes)) != len(classes)
        ):
            raise ValueError(
                f"ProjectionConfig.answer_classes must be distinct non-empty strings, got {classes!r}"[:300]
            )
        if len(classes) == 1:
            raise ValueError("ProjectionConfig.answer_classes: an answer head needs at least 2 classes, got 1")
        for name, least in (("answer_hidden", 0), ("answer_max_count", 1)):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < least:
                raise ValueError(f"ProjectionConfig.{name} must be an integer >= {least}, got {v!r}")
        for name in ("answer_standardize", "answer_options"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"ProjectionConfig.{name} must be true or false, got {getattr(self, name)!r}")
        if self.answer_options and not classes:
            raise ValueError("ProjectionConfig.answer_options needs an answer head (answer_classes)")

    def answer_head_config(self) -> AttributeAttackConfig:
        """The answer head's architecture as an attacker config (mean pooling, count one-hot)."""
        return AttributeAttackConfig(
            pooling="mean", count=True, hidden=self.answer_hidden, standardize=self.answer_standardize
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self) | {"answer_classes": list(self.answer_classes)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "ProjectionConfig":
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) - known:
            raise ValueError(f"a projection config must be a mapping with fields {sorted(known)}, got {data!r}"[:300])
        return cls(**data)


class Projection(torch.nn.Module):
    """``forward(x [..., d_e]) -> [..., d_d]``."""

    def __init__(self, config: ProjectionConfig):
        super().__init__()
        self.config = config
        if config.kind == "linear":
            self.net = torch.nn.Linear(config.in_dim, config.out_dim)
        else:
            h = config.hidden_dim or max(config.in_dim, config.out_dim)
            self.net = torch.nn.Sequential(
                torch.nn.Linear(config.in_dim, h), torch.nn.GELU(), torch.nn.Linear(h, config.out_dim)
            )

        if config.count_vectors:  # zero at first: a new count vector starts as an empty position
            self.count = torch.nn.Parameter(torch.zeros(config.count_vectors, config.out_dim))
        if config.answer_classes:
            spec = AttributeSpec("answer", "categorical", config.answer_classes)
            self.answer = AttributeClassifier(
                config.in_dim, [spec], config.answer_head_config(), max_count=config.answer_max_count
            )
            self.answer.requires_grad_(False)
            self.answer.eval()
            self.answer_embed = torch.nn.Parameter(torch.zeros(len(config.answer_classes), config.out_dim))

    def train(self, mode: bool = True) -> "Projection":
        super().train(mode)
        if self.config.answer_classes:
            self.answer.eval()  # frozen once trained: no dropout in its answer, in training or not
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def count_vector(self, n: int) -> torch.Tensor | None:
        """[1, d_d]: the learned vector of a row of ``n`` >= 1 slots (None without ``count_vectors`` or for n = 0); in
        training mode zeros with probability ``count_dropout``."""
        if not self.config.count_vectors or n < 1:
            return None
        vector = self.count[min(n, self.config.count_vectors) - 1].unsqueeze(0)
        if self.training and self.config.count_dropout and float(torch.rand(())) < self.config.count_dropout:
            return torch.zeros_like(
                vector
            )  # dropped (torch's seeded RNG, like nn.Dropout): the slots must carry the answer
        return vector

    def answer_probabilities(self, slots: torch.Tensor) -> torch.Tensor | None:
        """[C]: the answer head's class probabilities for one row's real slots [n, d_e] (None without a head or for
        n = 0)."""
        if not self.config.answer_classes or slots.shape[0] == 0:
            return None
        mask = torch.ones(1, slots.shape[0], dtype=torch.bool, device=slots.device)
        logits = self.answer(slots.to(self.answer_embed.dtype).unsqueeze(0), mask)["answer"][0]
        return torch.softmax(logits, dim=-1)

    @torch.no_grad()
    def answer_class(self, slots: torch.Tensor) -> str | None:
        """The answer head's most probable class for one row's real slots [n, d_e] (None without a head or for
        n = 0)."""
        if not self.config.answer_classes:
            return None
        p = self.answer_probabilities(slots.to(self.answer_embed.device))
        return None if p is None else self.config.answer_classes[int(p.argmax())]

    def option_classes(self, public: str | None) -> list[int]:
        """Indices of the answer classes named (by normalised text) in the options block of ``public``; [] without
        ``answer_options``, an options block or a named class."""
        if not self.config.answer_options or not public:
            return []
        named = {normalize_answer(o) for o in parse_options_block(public)}
        return [i for i, c in enumerate(self.config.answer_classes) if normalize_answer(c) in named]

    def answer_vector(self, slots: torch.Tensor, public: str | None = None) -> torch.Tensor | None:
        """[1, d_d]: the class vectors weighted by the answer head's probabilities (None without a head or for
        n = 0). With ``answer_options`` and a ``public`` text whose options block names some classes, the
        probabilities are renormalised over those classes (the head's choice among the options shown)."""
        p = self.answer_probabilities(slots)
        if p is None:
            return None
        shown = self.option_classes(public)
        if shown:
            keep = torch.zeros_like(p)
            keep[shown] = 1.0
            p = p * keep / (p * keep).sum().clamp_min(1e-30)
        return (p @ self.answer_embed).unsqueeze(0)

    def with_answer_head(
        self, head: AttributeClassifier, class_vectors: torch.Tensor, *, options: bool = False
    ) -> "Projection":
        """A copy of this projection with a trained answer ``head`` (one categorical attribute; its classes become
        ``answer_classes``) and initial class vectors [C, d_d]; the other weights kept. ``options``: the
        copy's ``answer_options``."""
        if len(head.specs) != 1 or head.specs[0].kind != "categorical" or not head.max_count or head.pooling != "mean":
            raise ValueError(
                "an answer head is a classifier of one categorical attribute that reads the mean slot and the slot "
                "count"
            )
        classes = head.specs[0].classes
        if tuple(class_vectors.shape) != (len(classes), self.config.out_dim):
            raise ValueError(
                f"class_vectors must be [{len(classes)}, {self.config.out_dim}], got {tuple(class_vectors.shape)}"
            )
        config = replace(
            self.config,
            answer_classes=tuple(classes),
            answer_hidden=head.hidden,
            answer_max_count=head.max_count,
            answer_standardize=head.standardize,
            answer_options=options,
        )
        out = Projection(config).to(next(self.parameters()).device)
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("answer")}
        out.load_state_dict(state, strict=False)
        out.answer.load_state_dict(head.state_dict())
        with torch.no_grad():
            out.answer_embed.copy_(class_vectors)
        return out.train(self.training)

    def with_count_vectors(self, n: int, dropout: float | None = None) -> "Projection":
        """A copy of this projection with ``n`` count vectors (the existing weights kept; new count vectors zero) and
        ``dropout`` (default: unchanged)."""
        config = replace(
            self.config, count_vectors=n, count_dropout=self.config.count_dropout if dropout is None else dropout
        )
        out = Projection(config).to(next(self.parameters()).device)
        state = {k: v for k, v in self.state_dict().items() if k != "count"}
        out.load_state_dict(state, strict=False)
        if n and self.config.count_vectors:
            keep = min(n, self.config.count_vectors)
            with torch.no_grad():
                out.count[:keep] = self.count[:keep]
        return out

    def save(self, directory: str | os.PathLike) -> Path:
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / CONFIG_NAME, json.dumps(self.config.to_dict(), indent=2) + "\n")
        atomic_save_tensors(out / WEIGHTS_NAME, self.state_dict())
        return out

    @classmethod
    def load(cls, directory: str | os.PathLike, *, device: str | torch.device = "cpu") -> "Projection":
        d = Path(directory)
        try:
            config = ProjectionConfig.from_dict(json.loads((d / CONFIG_NAME).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read the projection config in {str(d)!r}: {exc}") from exc
        proj = cls(config)
        proj.load_state_dict(load_file(str(d / WEIGHTS_NAME), device=str(device)), strict=True)
        return proj.to(device)
